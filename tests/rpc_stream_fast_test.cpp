// Tests of the stream forms that take several items, or none of the executor's time:
// rpc_stream::async_read_batch (every item that has come, up to a count, in one completion)
// and rpc_stream_writer::co_write (sent at once from the handler's coroutine while the stream
// has credit). Order with single reads, the window, the end and its errors, cancellation.
#include <asio/bind_cancellation_slot.hpp>
#include <asio/bind_executor.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <system_error>
#include <vector>

#include "rpc_test_support.hpp"
#include "shmio/rpc_buffer.hpp"
#include "shmio/rpc_stream.hpp"
#include "support.hpp"

namespace {

using namespace shmio::test::rpc;
using shmio::errc;
using shmio::rpc_buffer;
using shmio::rpc_methods;
using shmio::rpc_options;
using shmio::rpc_stream;
using shmio::rpc_stream_writer;
using shmio::test::scoped_name;
using items_t = std::vector<bytes_t>;

rpc_options options(std::uint32_t window) {
  rpc_options o;
  o.node_count = 8;
  o.node_size = 1024;
  o.stream_window = window;
  return o;
}

bytes_t numbered(std::uint64_t i) {
  bytes_t b(sizeof i);
  std::memcpy(b.data(), &i, sizeof i);
  return b;
}

std::uint64_t number(const bytes_t& b) {
  std::uint64_t v = ~std::uint64_t{0};
  if (b.size() == sizeof v) std::memcpy(&v, b.data(), sizeof v);
  return v;
}

struct writer_log {
  int written = 0;
  bool done = false;
  std::error_code ended;
};

// "items": writes `count` numbered items, with co_write (or async_write); "fails": two items,
// then an exception.
rpc_methods numbered_items(writer_log& log, int count, bool fast = true) {
  rpc_methods m;
  m.add("items",
        [&log, count, fast](std::uint64_t, std::span<const std::byte>,
                            rpc_stream_writer out) -> asio::awaitable<void> {
          try {
            for (int i = 0; i < count; ++i) {
              const bytes_t x = numbered(static_cast<std::uint64_t>(i));
              if (fast)
                co_await out.co_write(asio::buffer(x));
              else
                co_await out.async_write(asio::buffer(x), asio::use_awaitable);
              ++log.written;
            }
          } catch (const std::system_error& e) {
            log.ended = e.code();
          }
          log.done = true;
        });
  m.add("fails",
        [](std::uint64_t, std::span<const std::byte>,
           rpc_stream_writer out) -> asio::awaitable<void> {
          for (int i = 0; i < 2; ++i)
            co_await out.co_write(asio::buffer(numbered(static_cast<std::uint64_t>(i))));
          throw std::runtime_error("the feed broke");
        });
  return m;
}

asio::awaitable<void> yield_turns(int turns) {
  auto ex = co_await asio::this_coro::executor;
  for (int i = 0; i < turns; ++i)
    co_await asio::post(ex, asio::use_awaitable);
}

}  // namespace

TEST_CASE("rpc_stream: a batch read takes what has come, up to its count, in order",
          "[rpc][stream]") {
  scoped_name name("stream");
  asio::io_context io;
  writer_log log;
  constexpr std::uint32_t window = 8;
  constexpr int count = 300;
  rpc_buffer caller(io.get_executor(), shmio::create_only, name, {}, options(window));
  rpc_buffer server(io.get_executor(), shmio::open_only, name, numbered_items(log, count));
  run_until_done(io, [&]() -> asio::awaitable<void> {
    rpc_stream s = co_await caller.async_request_stream("items", {}, asio::use_awaitable);
    // A window has come: a batch of 5 takes 5 of it, one of 100 the rest (never more than
    // a window is there).
    CO_REQUIRE(
        co_await wait_until([&] { return caller.statistics().stream_items_received == window; }));
    auto [ec1, first] = co_await s.async_read_batch(5, tuple_awaitable);
    CHECK_FALSE(ec1);
    REQUIRE(first.size() == 5);
    std::uint64_t next = 0;
    for (const auto& x : first)
      CHECK(number(x) == next++);
    for (;;) {
      auto [ec, got] = co_await s.async_read_batch(100, tuple_awaitable);
      if (ec) {
        CHECK(ec == asio::error::eof);
        CHECK(got.empty());
        break;
      }
      REQUIRE_FALSE(got.empty());
      CHECK(got.size() <= window);
      for (const auto& x : got)
        CHECK(number(x) == next++);
      // Never more written than read plus a window.
      CHECK(log.written <= static_cast<int>(next + window));
    }
    CHECK(next == count);
    auto [ec, got] = co_await s.async_read_batch(3, tuple_awaitable);
    CHECK(ec == asio::error::eof);  // and eof again
    CHECK(log.done);
    CHECK_FALSE(log.ended);
    caller.close();
    server.close();
  });
}

TEST_CASE("rpc_stream: batch and single reads complete in the order they were started",
          "[rpc][stream]") {
  scoped_name name("stream");
  asio::io_context io;
  writer_log log;
  rpc_buffer caller(io.get_executor(), shmio::create_only, name, {}, options(32));
  rpc_buffer server(io.get_executor(), shmio::open_only, name, numbered_items(log, 6));
  run_until_done(io, [&]() -> asio::awaitable<void> {
    rpc_stream s = co_await caller.async_request_stream("items", {}, asio::use_awaitable);
    // Started before any item came: each takes its share in its turn.
    std::vector<int> order;
    std::vector<items_t> got(5);
    std::vector<std::error_code> ecs(5);
    auto batch = [&](int k) {
      return [&, k](std::error_code ec, items_t items) {
        order.push_back(k);
        ecs[static_cast<std::size_t>(k)] = ec;
        got[static_cast<std::size_t>(k)] = std::move(items);
      };
    };
    s.async_read([&](std::error_code ec, bytes_t x) {
      order.push_back(0);
      ecs[0] = ec;
      got[0] = {x};
    });
    s.async_read_batch(2, batch(1));
    s.async_read_batch(0, batch(2));
    s.async_read([&](std::error_code ec, bytes_t x) {
      order.push_back(3);
      ecs[3] = ec;
      got[3] = {x};
    });
    s.async_read_batch(100, batch(4));
    CO_REQUIRE(co_await wait_until([&] { return order.size() == 5; }));
    CHECK(order == std::vector<int>{0, 1, 2, 3, 4});
    for (const auto& ec : ecs)
      CHECK_FALSE(ec);
    std::vector<std::uint64_t> numbers;
    for (const auto& g : got)
      for (const auto& x : g)
        numbers.push_back(number(x));
    REQUIRE(got[2].empty());  // a batch of at most 0 took none
    CHECK(got[1].size() <= 2);
    CHECK(got[1].size() >= 1);
    CHECK(got[4].size() >= 1);
    // Whatever each took, together they took the first items in order.
    for (std::size_t i = 0; i < numbers.size(); ++i)
      CHECK(numbers[i] == i);
    caller.close();
    server.close();
  });
}

TEST_CASE("rpc_stream: a batch read ended by a handler's exception gets its text as its item",
          "[rpc][stream]") {
  scoped_name name("stream");
  asio::io_context io;
  writer_log log;
  rpc_buffer caller(io.get_executor(), shmio::create_only, name, {}, options(32));
  rpc_buffer server(io.get_executor(), shmio::open_only, name, numbered_items(log, 0));
  run_until_done(io, [&]() -> asio::awaitable<void> {
    rpc_stream s = co_await caller.async_request_stream("fails", {}, asio::use_awaitable);
    std::uint64_t next = 0;
    for (;;) {
      auto [ec, got] = co_await s.async_read_batch(10, tuple_awaitable);
      if (ec) {
        CHECK(ec == errc::remote_error);
        REQUIRE(got.size() == 1);
        CHECK(text(got[0]) == "the feed broke");
        break;
      }
      for (const auto& x : got)
        CHECK(number(x) == next++);
    }
    CHECK(next == 2);  // every item before the error
    caller.close();
    server.close();
  });
}

TEST_CASE("rpc_stream: total cancellation aborts one batch read; terminal ends the stream",
          "[rpc][stream]") {
  scoped_name name("stream");
  asio::io_context io;
  bool handler_cancelled = false;
  rpc_methods methods;
  methods.add(
      "",
      [&](std::uint64_t, std::span<const std::byte>, rpc_stream_writer) -> asio::awaitable<void> {
        asio::steady_timer gate(co_await asio::this_coro::executor, 1h);
        auto [ec] = co_await gate.async_wait(tuple_awaitable);
        handler_cancelled = ec == asio::error::operation_aborted;
      });
  rpc_buffer caller(io.get_executor(), shmio::create_only, name, {}, options(32));
  rpc_buffer server(io.get_executor(), shmio::open_only, name, methods);
  run_until_done(io, [&]() -> asio::awaitable<void> {
    rpc_stream s = co_await caller.async_request_stream({}, asio::use_awaitable);
    asio::cancellation_signal signal;
    std::optional<std::error_code> first;
    s.async_read_batch(4, asio::bind_cancellation_slot(
                              signal.slot(), [&](std::error_code ec, items_t) { first = ec; }));
    signal.emit(asio::cancellation_type::total);
    CO_REQUIRE(co_await wait_until([&] { return first.has_value(); }));
    CHECK(*first == asio::error::operation_aborted);
    co_await yield_turns(100);
    CHECK_FALSE(handler_cancelled);  // the stream goes on

    std::optional<std::error_code> second;
    s.async_read_batch(4, asio::bind_cancellation_slot(
                              signal.slot(), [&](std::error_code ec, items_t) { second = ec; }));
    signal.emit(asio::cancellation_type::terminal);
    CO_REQUIRE(co_await wait_until([&] { return second.has_value() && handler_cancelled; }));
    CHECK(*second == asio::error::operation_aborted);
    auto [ec, got] = co_await s.async_read_batch(4, tuple_awaitable);
    CHECK(ec == asio::error::operation_aborted);
    CHECK(got.empty());
    caller.close();
    server.close();
  });
}

TEST_CASE("rpc_stream: a batch read of a stream that is not open completes with an error",
          "[rpc][stream]") {
  asio::io_context io;
  rpc_stream s;
  std::optional<std::error_code> got;
  s.async_read_batch(3, asio::bind_executor(io, [&](std::error_code ec, items_t items) {
                       got = ec;
                       CHECK(items.empty());
                     }));
  CHECK_FALSE(got);  // never inside the initiating function
  io.run();
  REQUIRE(got);
  CHECK(*got == asio::error::operation_aborted);
}

TEST_CASE("rpc_stream: co_write sends at once while the stream has credit, then waits for it",
          "[rpc][stream]") {
  scoped_name name("stream");
  asio::io_context io;
  constexpr std::uint32_t window = 4;
  // Counts the passes other handlers get while the handler writes.
  int ticks = 0;
  bool ticking = true;
  std::vector<int> ticks_after;  // ticks seen after each write
  rpc_methods methods;
  methods.add("",
              [&](std::uint64_t, std::span<const std::byte>,
                  rpc_stream_writer out) -> asio::awaitable<void> {
                for (int i = 0; i < 3 * static_cast<int>(window); ++i) {
                  co_await out.co_write(asio::buffer(numbered(static_cast<std::uint64_t>(i))));
                  ticks_after.push_back(ticks);
                }
              });
  rpc_buffer caller(io.get_executor(), shmio::create_only, name, {}, options(window));
  rpc_buffer server(io.get_executor(), shmio::open_only, name, methods);
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        while (ticking) {
          ++ticks;
          co_await asio::post(io, asio::use_awaitable);
        }
      },
      asio::detached);
  run_until_done(io, [&]() -> asio::awaitable<void> {
    rpc_stream s = co_await caller.async_request_stream({}, asio::use_awaitable);
    CO_REQUIRE(co_await wait_until([&] { return ticks_after.size() == window; }));
    co_await yield_turns(200);
    // A window out and no more, and the window's writes took no pass of the executor.
    CHECK(ticks_after.size() == window);
    CHECK(ticks_after.front() == ticks_after.back());
    std::uint64_t next = 0;
    while (next < 3 * window) {
      auto [ec, got] = co_await s.async_read_batch(window, tuple_awaitable);
      REQUIRE_FALSE(ec);
      for (const auto& x : got)
        CHECK(number(x) == next++);
      CHECK(ticks_after.size() <= next + window);
    }
    auto [ec, got] = co_await s.async_read_batch(1, tuple_awaitable);
    CHECK(ec == asio::error::eof);
    ticking = false;
    caller.close();
    server.close();
  });
}

TEST_CASE(
    "rpc_stream: co_write from off the channel's strand, or after the end, goes the async way",
    "[rpc][stream]") {
  scoped_name name("stream");
  asio::io_context io;
  std::optional<rpc_stream_writer> kept;
  std::error_code late;
  // Counts the passes other handlers get: a write that goes the async way lets some run.
  int ticks = 0;
  bool ticking = true;
  std::vector<bool> suspended;
  rpc_methods methods;
  methods.add("",
              [&](std::uint64_t, std::span<const std::byte>,
                  rpc_stream_writer out) -> asio::awaitable<void> {
                kept = out;
                // From a coroutine on the io_context itself, not the channel's strand: in order,
                // and each
                // write through the executor although the stream has credit for the first two. (A
                // named lambda: g++ 12 destroys the captures of a lambda made inside a co_await
                // expression twice.)
                auto elsewhere = [out, &io, &ticks, &suspended]() mutable -> asio::awaitable<void> {
                  // co_spawn starts it inline, still inside the strand's turn (where co_write may
                  // take the fast path, the strand being held by this thread): out of it first.
                  co_await asio::post(io, asio::use_awaitable);
                  for (std::uint64_t i = 0; i < 5; ++i) {
                    const int before = ticks;
                    co_await out.co_write(asio::buffer(numbered(i)));
                    suspended.push_back(ticks != before);
                  }
                };
                co_await asio::co_spawn(io, std::move(elsewhere), asio::use_awaitable);
              });
  rpc_buffer caller(io.get_executor(), shmio::create_only, name, {}, options(2));
  rpc_buffer server(io.get_executor(), shmio::open_only, name, methods);
  auto ticker = [&]() -> asio::awaitable<void> {
    while (ticking) {
      ++ticks;
      co_await asio::post(io, asio::use_awaitable);
    }
  };
  asio::co_spawn(io, ticker, asio::detached);
  run_until_done(io, [&]() -> asio::awaitable<void> {
    rpc_stream s = co_await caller.async_request_stream({}, asio::use_awaitable);
    std::uint64_t next = 0;
    for (;;) {
      auto [ec, got] = co_await s.async_read_batch(8, tuple_awaitable);
      if (ec) {
        CHECK(ec == asio::error::eof);
        break;
      }
      for (const auto& x : got)
        CHECK(number(x) == next++);
    }
    CHECK(next == 5);
    CHECK(suspended == std::vector<bool>(5, true));
    // After the end, every read gets it: a batch of 0 too.
    auto [end_ec, none] = co_await s.async_read_batch(0, tuple_awaitable);
    CHECK(end_ec == asio::error::eof);
    CHECK(none.empty());
    // The handler returned: a write through its writer fails, as async_write's does.
    REQUIRE(kept);
    try {
      co_await kept->co_write(asio::buffer(numbered(9)));
    } catch (const std::system_error& e) {
      late = e.code();
    }
    CHECK(late == asio::error::operation_aborted);
    ticking = false;
    caller.close();
    server.close();
  });
}

TEST_CASE("rpc_stream: co_write does not complete ahead of an async_write started before it",
          "[rpc][stream]") {
  // The handler starts an async_write and, without waiting for it, a co_write: the first's
  // completion is posted (its item sent at once), so the second, though it could send at once
  // too, must not go on before that completion has run.
  scoped_name name("stream");
  asio::io_context io;
  std::vector<int> order;
  rpc_methods methods;
  methods.add("",
              [&](std::uint64_t, std::span<const std::byte>,
                  rpc_stream_writer out) -> asio::awaitable<void> {
                out.async_write(asio::buffer(numbered(0)),
                                [&](std::error_code ec) { order.push_back(ec ? -1 : 1); });
                co_await out.co_write(asio::buffer(numbered(1)));
                order.push_back(2);
              });
  rpc_buffer caller(io.get_executor(), shmio::create_only, name, {}, options(8));
  rpc_buffer server(io.get_executor(), shmio::open_only, name, methods);
  run_until_done(io, [&]() -> asio::awaitable<void> {
    rpc_stream s = co_await caller.async_request_stream({}, asio::use_awaitable);
    for (std::uint64_t i = 0; i < 2; ++i) {
      auto [ec, got] = co_await s.async_read(tuple_awaitable);
      REQUIRE_FALSE(ec);
      CHECK(number(got) == i);
    }
    auto [ec, got] = co_await s.async_read(tuple_awaitable);
    CHECK(ec == asio::error::eof);
    CHECK(order == std::vector<int>{1, 2});
    caller.close();
    server.close();
  });
}
