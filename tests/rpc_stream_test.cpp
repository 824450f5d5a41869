// Tests of streaming replies: rpc_buffer::async_request_stream, rpc_stream and
// rpc_stream_writer. Order and sizes, back-pressure (the writer runs at most a window ahead),
// cancellation from each side, a handler's exception, the wrong kind of method, a peer that
// sends past its credit, and the death of either process mid-stream.
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <tuple>

#include <asio/bind_cancellation_slot.hpp>
#include <asio/bind_executor.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <asio/strand.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "rpc_test_support.hpp"
#include "shmio/rpc_buffer.hpp"
#include "shmio/rpc_server.hpp"
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
using shmio::test::child;
using shmio::test::run_until;
using shmio::test::run_until_idle;
using shmio::test::scoped_name;
using shmio::test::signal_pipe;

// The item `i` of a stream of `seed`: sizes from empty to three packets of 1 KiB nodes.
bytes_t item(std::uint64_t seed, std::size_t i) {
  constexpr std::size_t sizes[] = {0, 1, 8, 100, 1000, 3000};
  return pattern(sizes[i % std::size(sizes)], seed * 100'000 + i);
}

std::uint64_t as_u64(std::span<const std::byte> b) {
  std::uint64_t v = 0;
  if (b.size() == sizeof v) std::memcpy(&v, b.data(), sizeof v);
  return v;
}

rpc_options options(std::uint32_t window = 32) {
  rpc_options o;
  o.node_count = 8;
  o.node_size = 1024;
  o.stream_window = window;
  return o;
}

// What a stream handler saw: the items it got out, and how its writing ended.
struct writer_log {
  int written = 0;
  bool done = false;
  std::error_code ended;  // the error its last write got, if one failed
};

// Writes `count` items of `seed` (the payload holds the seed as a u64); `count` < 0: forever.
// A cancelled handler hears of it as any coroutine does: the write it waits for fails, or, if
// it was between writes, its next co_await throws operation_aborted.
rpc_methods streaming(writer_log& log, int count) {
  rpc_methods m;
  m.add("items",
        [&log, count](std::uint64_t, std::span<const std::byte> in,
                      rpc_stream_writer out) -> asio::awaitable<void> {
          const std::uint64_t seed = as_u64(in);
          try {
            for (std::size_t i = 0; count < 0 || static_cast<int>(i) < count; ++i) {
              const bytes_t x = item(seed, i);
              co_await out.async_write(asio::buffer(x), asio::use_awaitable);
              ++log.written;
            }
          } catch (const std::system_error& e) {
            log.ended = e.code();
          }
          log.done = true;
        });
  m.add("plain",
        [](std::uint64_t, std::span<const std::byte> in) { return bytes_t(in.begin(), in.end()); });
  m.add("fails",
        [](std::uint64_t, std::span<const std::byte>,
           rpc_stream_writer out) -> asio::awaitable<void> {
          for (int i = 0; i < 2; ++i)
            co_await out.async_write(asio::buffer(bytes("x")), asio::use_awaitable);
          throw std::runtime_error("the feed broke");
        });
  return m;
}

bytes_t seed_bytes(std::uint64_t seed) {
  bytes_t b(sizeof seed);
  std::memcpy(b.data(), &seed, sizeof seed);
  return b;
}

// Reads `n` items, checking each against item(seed, i); false at the first wrong one.
asio::awaitable<bool> read_items(rpc_stream& s, std::uint64_t seed, std::size_t from,
                                 std::size_t n) {
  for (std::size_t i = from; i < from + n; ++i) {
    auto [ec, got] = co_await s.async_read(tuple_awaitable);
    if (ec || got != item(seed, i)) co_return false;
  }
  co_return true;
}

// An unnamed stream method that writes nothing and waits until it is cancelled, then says so.
rpc_methods silent_stream(bool& cancelled) {
  return rpc_methods([&cancelled](std::uint64_t, std::span<const std::byte>,
                                  rpc_stream_writer) -> asio::awaitable<void> {
    asio::steady_timer gate(co_await asio::this_coro::executor, 1h);
    auto [ec] = co_await gate.async_wait(tuple_awaitable);
    cancelled = ec == asio::error::operation_aborted;
  });
}

// Lets every other handler on the executor run `turns` times.
asio::awaitable<void> yield_turns(int turns) {
  auto ex = co_await asio::this_coro::executor;
  for (int i = 0; i < turns; ++i)
    co_await asio::post(ex, asio::use_awaitable);
}

// Lets `io` run everything ready, until nothing has been for a while.
void poll_until_quiet(asio::io_context& io) {
  for (int quiet = 0; quiet < 100;)
    quiet = io.poll() == 0 ? quiet + 1 : 0;
}

// Opens a stream of `method` from `caller`, running `io` until it is open.
std::optional<rpc_stream> open_stream(asio::io_context& io, rpc_buffer& caller,
                                      std::string_view method, const bytes_t& payload) {
  std::optional<rpc_stream> s;
  caller.async_request_stream(method, asio::buffer(payload), [&](std::error_code ec, rpc_stream x) {
    CHECK_FALSE(ec);
    s.emplace(std::move(x));
  });
  REQUIRE(run_until(io, [&] { return s.has_value(); }));
  return s;
}

}  // namespace

TEST_CASE("rpc_stream: items arrive in order, whole, then eof, and eof again", "[rpc][stream]") {
  scoped_name name("stream");
  asio::io_context io;
  writer_log log;
  rpc_buffer caller(io.get_executor(), shmio::create_only, name, {}, options());
  rpc_buffer server(io.get_executor(), shmio::open_only, name, streaming(log, 600));
  run_until_done(io, [&]() -> asio::awaitable<void> {
    const bytes_t seed = seed_bytes(7);
    rpc_stream s =
        co_await caller.async_request_stream("items", asio::buffer(seed), asio::use_awaitable);
    CHECK(s.is_open());
    CHECK(s.request_id() != 0);
    CO_CHECK(co_await read_items(s, 7, 0, 600));
    for (int i = 0; i < 2; ++i) {
      auto [ec, got] = co_await s.async_read(tuple_awaitable);
      CHECK(ec == asio::error::eof);
      CHECK(got.empty());
    }
    CHECK(log.done);
    CHECK_FALSE(log.ended);
    CHECK(server.statistics().stream_items_sent == 600);
    CHECK(caller.statistics().stream_items_received == 600);
    CHECK(caller.statistics().pending_requests == 0);  // an ended stream holds nothing
    caller.close();
    server.close();
  });
}

TEST_CASE("rpc_stream: a slow reader holds the writer to one window ahead", "[rpc][stream]") {
  scoped_name name("stream");
  asio::io_context io;
  writer_log log;
  constexpr std::uint32_t window = 4;
  rpc_buffer caller(io.get_executor(), shmio::create_only, name, {}, options(window));
  rpc_buffer server(io.get_executor(), shmio::open_only, name, streaming(log, 100));
  run_until_done(io, [&]() -> asio::awaitable<void> {
    const bytes_t seed = seed_bytes(3);
    rpc_stream s =
        co_await caller.async_request_stream("items", asio::buffer(seed), asio::use_awaitable);
    // Nothing read: the handler gets exactly a window out, and no further however long it runs.
    CO_REQUIRE(co_await wait_until([&] { return log.written == static_cast<int>(window); }));
    co_await yield_turns(2000);
    CHECK(log.written == static_cast<int>(window));
    CHECK_FALSE(log.done);
    std::size_t read = 0;
    while (read < 100) {
      CO_REQUIRE(co_await read_items(s, 3, read, 1));
      ++read;
      // Never more written than read plus a window: neither end holds more than that.
      CHECK(log.written <= static_cast<int>(read + window));
      if (read % 10 == 0) co_await yield_turns(50);
    }
    auto [ec, got] = co_await s.async_read(tuple_awaitable);
    CHECK(ec == asio::error::eof);
    CHECK(log.written == 100);
    caller.close();
    server.close();
  });
}

TEST_CASE("rpc_stream: handlers of streams nobody reads stop at the serving end's max_held_bytes",
          "[rpc][stream]") {
  // A caller opens streams of a large window, then reads nothing, not even its ring (its
  // io_context stops running). Credit alone would let each handler queue a window of items for
  // it: 4 x 512 here. The serving end's byte bound holds their writes instead.
  scoped_name name("stream");
  asio::io_context server_io, caller_io;
  writer_log log;
  rpc_options o = options(512);
  o.max_held_bytes = 8 * 1024;
  rpc_buffer server(server_io.get_executor(), shmio::create_only, name, streaming(log, -1), o);
  rpc_buffer caller(caller_io.get_executor(), shmio::open_only, name);
  caller.set_limits(o);
  constexpr std::uint64_t streams = 4;
  std::vector<rpc_stream> opened;
  for (std::uint64_t k = 0; k < streams; ++k)
    caller.async_request_stream("items", asio::buffer(seed_bytes(k)),
                                [&](std::error_code ec, rpc_stream s) {
                                  CHECK_FALSE(ec);
                                  opened.push_back(std::move(s));
                                });
  const auto deadline = std::chrono::steady_clock::now() + shmio::test::default_bound;
  while (opened.size() < streams && std::chrono::steady_clock::now() < deadline) {
    server_io.poll();
    caller_io.poll();
  }
  REQUIRE(opened.size() == streams);
  // Only the server runs now, until nothing is ready to run for a while: its writer waits for
  // room in the ring, and the handlers for their writes.
  for (int quiet = 0; quiet < 1000 && std::chrono::steady_clock::now() < deadline;)
    quiet = server_io.poll() == 0 ? quiet + 1 : 0;
  // The ring's 8 nodes, 8 KiB of items in the outbox (685 bytes each on average; the smallest
  // are empty), the item that passed the bound, the writer's and what the caller read before it
  // stopped: far below the 2048 of the windows.
  CHECK(log.written > 8);
  CHECK(log.written < 200);
  CHECK_FALSE(log.done);
  // The caller reads again: the writes held go on, each stream in its order.
  bool finished = false, read_all = false;
  asio::co_spawn(
      caller_io,
      [&]() -> asio::awaitable<void> {
        bool ok = true;
        for (std::uint64_t k = 0; k < streams; ++k)
          ok = co_await read_items(opened[k], k, 0, 300) && ok;
        read_all = ok;
        finished = true;
      },
      asio::detached);
  while (!finished && std::chrono::steady_clock::now() < deadline + shmio::test::default_bound) {
    server_io.poll();
    caller_io.poll();
  }
  CHECK(read_all);
  CHECK(log.written >= static_cast<int>(streams * 300));
  caller.close();
  server.close();
  run_until_idle(server_io);
  run_until_idle(caller_io);
}

TEST_CASE("rpc_stream: reads complete in the order started, whatever executor each handler has",
          "[rpc][stream]") {
  // Read 1's handler waits in the queue of an io_context that does not run yet. Posted side by
  // side, reads 2 and 3 (handlers on the stream's executor) used to complete first.
  scoped_name name("stream");
  asio::io_context io, io2;
  writer_log log;
  rpc_buffer caller(io.get_executor(), shmio::create_only, name, {}, options());
  rpc_buffer server(io.get_executor(), shmio::open_only, name, streaming(log, 6));
  std::optional<rpc_stream> s = open_stream(io, caller, "items", seed_bytes(1));
  REQUIRE(run_until(io, [&] { return s && caller.statistics().stream_items_received == 6; }));
  std::vector<int> order;
  s->async_read(asio::bind_executor(io2, [&](std::error_code ec, bytes_t got) {
    CHECK_FALSE(ec);
    CHECK(got == item(1, 0));
    order.push_back(1);
  }));
  s->async_read([&](std::error_code ec, bytes_t got) {
    CHECK_FALSE(ec);
    CHECK(got == item(1, 1));
    order.push_back(2);
  });
  s->async_read_batch(2, [&](std::error_code ec, std::vector<bytes_t> got) {
    CHECK_FALSE(ec);
    CHECK(got == std::vector<bytes_t>{item(1, 2), item(1, 3)});
    order.push_back(3);
  });
  // Everything ready on `io` runs: reads 2 and 3 wait for read 1's handler to be reached.
  poll_until_quiet(io);
  CHECK(order.empty());
  CHECK(io2.poll() == 1);
  REQUIRE(run_until(io, [&] { return order.size() == 3; }));
  CHECK(order == std::vector<int>{1, 2, 3});
  // The rest, and the end, in their turn.
  std::vector<bytes_t> rest;
  std::error_code end;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        for (;;) {
          auto [ec, got] = co_await s->async_read(tuple_awaitable);
          if (ec) {
            end = ec;
            co_return;
          }
          rest.push_back(std::move(got));
        }
      },
      asio::detached);
  REQUIRE(run_until(io, [&] { return bool(end); }));
  CHECK(end == asio::error::eof);
  CHECK(rest == std::vector<bytes_t>{item(1, 4), item(1, 5)});
  s->close();
  caller.close();
  server.close();
  run_until_idle(io);
}

TEST_CASE("rpc_stream: writes complete in the order started, whatever executor each handler has",
          "[rpc][stream]") {
  // The handler starts two writes without waiting; the first one's handler waits in the queue
  // of an io_context that does not run yet. The second used to complete first.
  scoped_name name("stream");
  asio::io_context io, io2;
  std::vector<int> order;
  bool handler_done = false;
  rpc_methods methods;
  methods.add("two",
              [&](std::uint64_t, std::span<const std::byte>,
                  rpc_stream_writer out) -> asio::awaitable<void> {
                out.async_write(asio::buffer(bytes("a")),
                                asio::bind_executor(io2, [&](std::error_code ec) {
                                  CHECK_FALSE(ec);
                                  order.push_back(1);
                                }));
                out.async_write(asio::buffer(bytes("b")), [&](std::error_code ec) {
                  CHECK_FALSE(ec);
                  order.push_back(2);
                });
                // Returns only once both writes completed: the stream's end goes after its items.
                co_await wait_until([&] { return order.size() == 2; }, 1h);
                handler_done = true;
              });
  rpc_buffer caller(io.get_executor(), shmio::create_only, name, {}, options());
  rpc_buffer server(io.get_executor(), shmio::open_only, name, methods);
  std::optional<rpc_stream> s = open_stream(io, caller, "two", {});
  REQUIRE(run_until(io, [&] { return s && caller.statistics().stream_items_received == 2; }));
  poll_until_quiet(io);
  CHECK(order.empty());  // write 2's handler waits for write 1's to be reached
  CHECK(io2.poll() == 1);
  REQUIRE(run_until(io, [&] { return handler_done; }));
  CHECK(order == std::vector<int>{1, 2});
  s->close();
  caller.close();
  server.close();
  run_until_idle(io);
}

TEST_CASE(
    "rpc_stream: reads behind one on its way complete, in order, when the stream is closed "
    "and dropped",
    "[rpc][stream]") {
  // The completions waiting behind read 1's (its handler queued on an io_context that does not
  // run yet) are the user's: they must still go out once it is reached, though nothing of the
  // stream is left by then.
  scoped_name name("stream");
  asio::io_context io, io2;
  writer_log log;
  rpc_buffer caller(io.get_executor(), shmio::create_only, name, {}, options());
  rpc_buffer server(io.get_executor(), shmio::open_only, name, streaming(log, 1));
  std::optional<rpc_stream> s = open_stream(io, caller, "items", seed_bytes(2));
  REQUIRE(run_until(io, [&] { return s && caller.statistics().stream_items_received == 1; }));
  std::vector<std::pair<int, std::error_code>> got;
  s->async_read(
      asio::bind_executor(io2, [&](std::error_code ec, bytes_t) { got.emplace_back(1, ec); }));
  s->async_read([&](std::error_code ec, bytes_t) { got.emplace_back(2, ec); });
  s->async_read_batch(4,
                      [&](std::error_code ec, std::vector<bytes_t>) { got.emplace_back(3, ec); });
  poll_until_quiet(io);
  s->close();
  s.reset();
  poll_until_quiet(io);
  CHECK(got.empty());
  CHECK(io2.poll() == 1);
  REQUIRE(run_until(io, [&] { return got.size() == 3; }));
  CHECK(got[0] == std::pair<int, std::error_code>(1, {}));
  CHECK(got[1].first == 2);
  CHECK(got[2].first == 3);
  for (int k = 1; k < 3; ++k)  // the end came, or the close did first
    CHECK((got[k].second == asio::error::eof || got[k].second == asio::error::operation_aborted));
  caller.close();
  server.close();
  run_until_idle(io);
}

TEST_CASE("rpc_stream: writes its handler did not wait for complete in order after it returned",
          "[rpc][stream]") {
  // As above, but the handler returns at once: its entry goes, and write 2's completion, held
  // behind write 1's, must still go out after it.
  scoped_name name("stream");
  asio::io_context io, io2;
  std::vector<int> order;
  rpc_methods methods;
  methods.add(
      "two",
      [&](std::uint64_t, std::span<const std::byte>,
          rpc_stream_writer out) -> asio::awaitable<void> {
        out.async_write(asio::buffer(bytes("a")),
                        asio::bind_executor(io2, [&](std::error_code) { order.push_back(1); }));
        out.async_write(asio::buffer(bytes("b")), [&](std::error_code) { order.push_back(2); });
        co_return;
      });
  rpc_buffer caller(io.get_executor(), shmio::create_only, name, {}, options());
  rpc_buffer server(io.get_executor(), shmio::open_only, name, methods);
  std::optional<rpc_stream> s = open_stream(io, caller, "two", {});
  REQUIRE(run_until(io, [&] { return s.has_value(); }));
  poll_until_quiet(io);
  CHECK(order.empty());
  CHECK(io2.poll() == 1);
  REQUIRE(run_until(io, [&] { return order.size() == 2; }));
  CHECK(order == std::vector<int>{1, 2});
  s->close();
  caller.close();
  server.close();
  run_until_idle(io);
}

TEST_CASE("rpc_stream: an opener sets its own window with set_limits", "[rpc][stream]") {
  scoped_name name("stream");
  asio::io_context io;
  writer_log log;
  rpc_buffer server(io, shmio::create_only, name, streaming(log, 50), options(32));
  rpc_buffer caller(io, shmio::open_only, name);
  rpc_options limits;
  limits.stream_window = 3;  // the owner's 32 is the owner's own
  caller.set_limits(limits);
  run_until_done(io, [&]() -> asio::awaitable<void> {
    const bytes_t seed = seed_bytes(11);
    rpc_stream s =
        co_await caller.async_request_stream("items", asio::buffer(seed), asio::use_awaitable);
    CO_CHECK(co_await wait_until([&] { return log.written >= 3; }));
    co_await yield_turns(2000);
    INFO("items the caller took in: " << caller.statistics().stream_items_received);
    REQUIRE(log.written == 3);
    CO_CHECK(co_await read_items(s, 11, 0, 50));
    auto [ec, got] = co_await s.async_read(tuple_awaitable);
    CHECK(ec == asio::error::eof);
    caller.close();
    server.close();
  });
}

TEST_CASE("rpc_stream: the writer's executor is the strand its handler runs on", "[rpc][stream]") {
  // A plain callback given to async_write has no executor of its own: it completes on the
  // writer's executor, which must be the handler's strand, or it would run beside the handler.
  scoped_name name("stream");
  asio::io_context io;
  using strand_type = asio::strand<asio::io_context::executor_type>;
  bool handler_in_strand = false;
  bool callback_in_strand = false;
  bool callback_ran = false;
  rpc_methods methods;
  methods.add("items",
              [&](std::uint64_t, std::span<const std::byte>,
                  rpc_stream_writer out) -> asio::awaitable<void> {
                const auto ex = out.get_executor();
                const auto* target = ex.target<strand_type>();
                CO_REQUIRE(target != nullptr);
                const strand_type strand = *target;
                handler_in_strand = strand.running_in_this_thread();
                const bytes_t x = item(1, 0);
                out.async_write(asio::buffer(x), [&, strand](std::error_code ec) {
                  callback_ran = !ec;
                  callback_in_strand = strand.running_in_this_thread();
                });
                co_await out.async_write(asio::buffer(x),
                                         asio::use_awaitable);  // after the first: in order
              });
  rpc_buffer caller(io, shmio::create_only, name, {}, options());
  rpc_buffer server(io, shmio::open_only, name, methods);
  run_until_done(io, [&]() -> asio::awaitable<void> {
    const bytes_t seed = seed_bytes(1);
    rpc_stream s =
        co_await caller.async_request_stream("items", asio::buffer(seed), asio::use_awaitable);
    for (int i = 0; i < 2; ++i) {
      auto [ec, got] = co_await s.async_read(tuple_awaitable);
      CHECK_FALSE(ec);
    }
    CHECK(handler_in_strand);
    CHECK(callback_ran);
    CHECK(callback_in_strand);
    caller.close();
    server.close();
  });
}

TEST_CASE("rpc_stream: a write started after its end's close() began fails with operation_aborted",
          "[rpc][stream]") {
  // close() from the handler itself: the close packet has gone, so nothing may follow it, and
  // the write must not report an item sent.
  scoped_name name("stream");
  asio::io_context io;
  std::optional<std::error_code> wrote;
  bool try_wrote = true;
  rpc_buffer* server_end = nullptr;
  rpc_methods methods;
  methods.add("items",
              [&](std::uint64_t, std::span<const std::byte>,
                  rpc_stream_writer out) -> asio::awaitable<void> {
                server_end->close();
                const bytes_t x = item(1, 0);
                out.async_write(asio::buffer(x), [&](std::error_code ec) { wrote = ec; });
                try {
                  co_await out.co_write(asio::buffer(x));
                } catch (const std::system_error& e) {
                  try_wrote = e.code() != asio::error::operation_aborted;
                }
              });
  rpc_buffer caller(io, shmio::create_only, name, {}, options());
  rpc_buffer server(io, shmio::open_only, name, methods);
  server_end = &server;
  run_until_done(io, [&]() -> asio::awaitable<void> {
    const bytes_t seed = seed_bytes(1);
    rpc_stream s =
        co_await caller.async_request_stream("items", asio::buffer(seed), asio::use_awaitable);
    auto [ec, got] = co_await s.async_read(tuple_awaitable);
    CHECK(ec == errc::peer_gone);
    CO_REQUIRE(co_await wait_until([&] { return wrote.has_value(); }));
    CHECK(*wrote == asio::error::operation_aborted);
    CHECK_FALSE(try_wrote);
    CHECK(server.statistics().stream_items_sent == 0);
    caller.close();
  });
}

TEST_CASE("rpc_stream: a write after the caller left and its end then closed fails with peer_gone",
          "[rpc][stream]") {
  // An rpc_server closes the end of a client that went, maybe before the handler's next write
  // runs: that write reports why the stream ended (its caller went), not the close after it.
  scoped_name name("stream");
  asio::io_context io;
  std::optional<std::error_code> wrote;
  bool go = false;
  rpc_methods methods;
  methods.add("items",
              [&](std::uint64_t, std::span<const std::byte>,
                  rpc_stream_writer out) -> asio::awaitable<void> {
                // Writes on after the cancellation that comes with the caller's going.
                co_await asio::this_coro::throw_if_cancelled(false);
                const bytes_t x = item(1, 0);
                co_await out.async_write(asio::buffer(x), asio::use_awaitable);
                auto ex = co_await asio::this_coro::executor;
                while (!go)
                  co_await asio::post(ex, asio::use_awaitable);
                auto [ec] = co_await out.async_write(asio::buffer(x), tuple_awaitable);
                wrote = ec;
              });
  rpc_buffer caller(io, shmio::create_only, name, {}, options());
  rpc_buffer server(io, shmio::open_only, name, methods);
  run_until_done(io, [&]() -> asio::awaitable<void> {
    const bytes_t seed = seed_bytes(1);
    rpc_stream s =
        co_await caller.async_request_stream("items", asio::buffer(seed), asio::use_awaitable);
    auto [ec, got] = co_await s.async_read(tuple_awaitable);
    CHECK_FALSE(ec);
    caller.close();
    auto [closed_ec] = co_await server.async_wait_closed(tuple_awaitable);
    CHECK_FALSE(closed_ec);
    server.close();
    go = true;
    CO_REQUIRE(co_await wait_until([&] { return wrote.has_value(); }));
    CHECK(*wrote == errc::peer_gone);
  });
}

TEST_CASE("rpc_stream: a stream request started right before close() does not open",
          "[rpc][stream]") {
  // Started from outside the strand (the io_context is not running), so the request waits to
  // be sent; close() begins before it is. Its opening fails, as any call pending at close does.
  scoped_name name("stream");
  asio::io_context io;
  writer_log log;
  rpc_buffer caller(io, shmio::create_only, name, {}, options());
  rpc_buffer server(io, shmio::open_only, name, streaming(log, 5));
  const bytes_t seed = seed_bytes(14);
  std::optional<std::error_code> opened;
  caller.async_request_stream("items", asio::buffer(seed),
                              [&](std::error_code ec, rpc_stream) { opened = ec; });
  caller.close();
  REQUIRE(run_until(io, [&] { return opened.has_value(); }));
  CHECK(*opened == asio::error::operation_aborted);
  server.close();
}

TEST_CASE("rpc_stream: a window above the serving end's limit is refused with invalid_argument",
          "[rpc][stream]") {
  scoped_name name("stream");
  asio::io_context io;
  writer_log log;
  rpc_options server_options = options(32);
  server_options.stream_window_limit = 100;
  rpc_buffer server(io, shmio::create_only, name, streaming(log, 5), server_options);
  rpc_buffer caller(io, shmio::open_only, name);
  run_until_done(io, [&]() -> asio::awaitable<void> {
    const bytes_t seed = seed_bytes(12);
    for (const std::uint32_t window : {101u, 100u}) {
      rpc_options limits;
      limits.stream_window = window;
      caller.set_limits(limits);
      rpc_stream s =
          co_await caller.async_request_stream("items", asio::buffer(seed), asio::use_awaitable);
      if (window > 100) {
        auto [ec, got] = co_await s.async_read(tuple_awaitable);
        CHECK(ec == shmio::errc::invalid_argument);
        CHECK(log.written == 0);  // its handler never ran
      } else {
        CO_CHECK(co_await read_items(s, 12, 0, 5));
        auto [ec, got] = co_await s.async_read(tuple_awaitable);
        CHECK(ec == asio::error::eof);
      }
    }
    caller.close();
    server.close();
  });
}

TEST_CASE("rpc_stream: the window of the last set_limits goes with the next stream",
          "[rpc][stream]") {
  // Each set_limits also posts the strand's part of it: the earlier one's, run after the later
  // call, must not put its window back.
  scoped_name name("stream");
  asio::io_context io;
  writer_log log;
  rpc_options server_options = options(32);
  server_options.stream_window_limit = 100;
  rpc_buffer server(io, shmio::create_only, name, streaming(log, 5), server_options);
  rpc_buffer caller(io, shmio::open_only, name);
  rpc_options limits;
  limits.stream_window = 5;
  caller.set_limits(limits);
  limits.stream_window = 101;
  caller.set_limits(limits);
  run_until_done(io, [&]() -> asio::awaitable<void> {
    const bytes_t seed = seed_bytes(12);
    rpc_stream s =
        co_await caller.async_request_stream("items", asio::buffer(seed), asio::use_awaitable);
    auto [ec, got] = co_await s.async_read(tuple_awaitable);
    CHECK(ec == shmio::errc::invalid_argument);  // 101 went, above the limit
    CHECK(log.written == 0);
    caller.close();
    server.close();
  });
}

TEST_CASE("rpc_stream: a service's stream_window_limit applies to its connections",
          "[rpc][stream][service]") {
  scoped_name name("stream");
  asio::io_context io;
  writer_log log;
  rpc_options server_options = shmio::rpc_connection_options();
  server_options.stream_window_limit = 64;
  shmio::rpc_server server(io.get_executor(), shmio::create_only, name.str(), streaming(log, 5),
                           server_options);
  rpc_buffer client(io.get_executor());
  run_until_done(io, [&]() -> asio::awaitable<void> {
    co_await client.async_connect(name.str(), asio::use_awaitable);
    const bytes_t seed = seed_bytes(13);
    for (const std::uint32_t window : {65u, 64u}) {
      rpc_options limits;
      limits.stream_window = window;
      client.set_limits(limits);
      rpc_stream s =
          co_await client.async_request_stream("items", asio::buffer(seed), asio::use_awaitable);
      auto [ec, got] = co_await s.async_read(tuple_awaitable);
      if (window > 64) {
        CHECK(ec == shmio::errc::invalid_argument);
      } else {
        CHECK_FALSE(ec);
        CHECK(got == item(13, 0));
      }
    }
    client.close();
    server.close();
  });
}

TEST_CASE("rpc_stream: closing the stream cancels its handler; a pending read is aborted",
          "[rpc][stream]") {
  scoped_name name("stream");
  asio::io_context io;
  writer_log log;
  rpc_buffer caller(io.get_executor(), shmio::create_only, name, {}, options(4));
  rpc_buffer server(io.get_executor(), shmio::open_only, name, streaming(log, -1));
  run_until_done(io, [&]() -> asio::awaitable<void> {
    const bytes_t seed = seed_bytes(1);
    {
      rpc_stream s =
          co_await caller.async_request_stream("items", asio::buffer(seed), asio::use_awaitable);
      CO_CHECK(co_await read_items(s, 1, 0, 10));
      s.close();
      CHECK_FALSE(s.is_open());
      auto [ec, got] = co_await s.async_read(tuple_awaitable);
      CHECK(ec == asio::error::operation_aborted);
    }
    CO_REQUIRE(co_await wait_until([&] { return log.done; }));
    CHECK(log.ended == asio::error::operation_aborted);
    CHECK(server.statistics().cancellations == 1);
    CO_CHECK(co_await wait_until([&] { return server.statistics().pending_requests == 0; }));

    caller.close();
    server.close();
  });
}

TEST_CASE("rpc_stream: a stream destroyed with a read pending: the read is aborted",
          "[rpc][stream]") {
  scoped_name name("stream");
  asio::io_context io;
  bool handler_cancelled = false;
  const rpc_methods methods = silent_stream(handler_cancelled);
  rpc_buffer caller(io.get_executor(), shmio::create_only, name, {}, options());
  rpc_buffer server(io.get_executor(), shmio::open_only, name, methods);
  run_until_done(io, [&]() -> asio::awaitable<void> {
    std::optional<std::error_code> pending;
    {
      rpc_stream s = co_await caller.async_request_stream({}, asio::use_awaitable);
      s.async_read([&](std::error_code ec, bytes_t) { pending = ec; });
      co_await yield_turns(10);
      CHECK_FALSE(pending);
    }
    CO_REQUIRE(co_await wait_until([&] { return pending.has_value() && handler_cancelled; }));
    CHECK(*pending == asio::error::operation_aborted);
    caller.close();
    server.close();
  });
}

TEST_CASE("rpc_stream: total cancellation aborts one read; terminal ends the stream",
          "[rpc][stream]") {
  scoped_name name("stream");
  asio::io_context io;
  bool handler_cancelled = false;
  rpc_methods methods;
  // One item, then a wait that only cancellation ends, then one more item.
  methods.add("",
              [&](std::uint64_t, std::span<const std::byte>,
                  rpc_stream_writer out) -> asio::awaitable<void> {
                asio::steady_timer gate(co_await asio::this_coro::executor, 1h);
                try {
                  co_await gate.async_wait(asio::use_awaitable);
                } catch (const std::system_error&) {
                  handler_cancelled = true;
                  throw;
                }
                co_await out.async_write(asio::buffer(bytes("late")), asio::use_awaitable);
              });
  rpc_buffer caller(io.get_executor(), shmio::create_only, name, {}, options());
  rpc_buffer server(io.get_executor(), shmio::open_only, name, methods);
  run_until_done(io, [&]() -> asio::awaitable<void> {
    rpc_stream s = co_await caller.async_request_stream({}, asio::use_awaitable);
    asio::cancellation_signal signal;
    std::optional<std::error_code> first;
    s.async_read(asio::bind_cancellation_slot(signal.slot(),
                                              [&](std::error_code ec, bytes_t) { first = ec; }));
    signal.emit(asio::cancellation_type::total);
    CO_REQUIRE(co_await wait_until([&] { return first.has_value(); }));
    CHECK(*first == asio::error::operation_aborted);
    co_await yield_turns(100);
    CHECK_FALSE(handler_cancelled);  // the stream goes on

    // Two reads pending; the first cancelled (terminal): the stream ends, and both complete,
    // in the order they were started.
    std::vector<int> order;
    std::optional<std::error_code> second;
    s.async_read(asio::bind_cancellation_slot(signal.slot(), [&](std::error_code ec, bytes_t) {
      second = ec;
      order.push_back(1);
    }));
    s.async_read([&](std::error_code ec, bytes_t) {
      CHECK(ec == asio::error::operation_aborted);
      order.push_back(2);
    });
    signal.emit(asio::cancellation_type::terminal);
    CO_REQUIRE(co_await wait_until([&] { return order.size() == 2 && handler_cancelled; }));
    CHECK(*second == asio::error::operation_aborted);
    CHECK(order == std::vector<int>{1, 2});
    auto [ec, got] = co_await s.async_read(tuple_awaitable);
    CHECK(ec == asio::error::operation_aborted);  // it ended so, for good
    caller.close();
    server.close();
  });
}

TEST_CASE("rpc_stream: a handler's exception ends the stream after its items, with its text",
          "[rpc][stream]") {
  scoped_name name("stream");
  asio::io_context io;
  writer_log log;
  rpc_buffer caller(io.get_executor(), shmio::create_only, name, {}, options());
  rpc_buffer server(io.get_executor(), shmio::open_only, name, streaming(log, 0));
  run_until_done(io, [&]() -> asio::awaitable<void> {
    rpc_stream s = co_await caller.async_request_stream("fails", {}, asio::use_awaitable);
    for (int i = 0; i < 2; ++i) {
      auto [ec, got] = co_await s.async_read(tuple_awaitable);
      CHECK_FALSE(ec);
      CHECK(text(got) == "x");
    }
    auto [ec, got] = co_await s.async_read(tuple_awaitable);
    CHECK(ec == errc::remote_error);
    CHECK(text(got) == "the feed broke");
    caller.close();
    server.close();
  });
}

TEST_CASE("rpc_stream: awaited with use_awaitable, a read's failure throws rpc_error with its text",
          "[rpc][stream]") {
  scoped_name name("stream");
  asio::io_context io;
  writer_log log;
  rpc_buffer caller(io.get_executor(), shmio::create_only, name, {}, options());
  rpc_buffer server(io.get_executor(), shmio::open_only, name, streaming(log, 2));
  run_until_done(io, [&]() -> asio::awaitable<void> {
    rpc_stream fails = co_await caller.async_request_stream("fails", {}, asio::use_awaitable);
    for (int i = 0; i < 2; ++i) {
      const bytes_t got = co_await fails.async_read(asio::use_awaitable);
      CHECK(text(got) == "x");
    }
    auto caught = co_await rpc_error_of(fails.async_read(asio::use_awaitable));
    CO_REQUIRE(caught.has_value());
    CHECK(caught->code() == errc::remote_error);
    CHECK(caught->remote_what() == "the feed broke");
    CHECK_THAT(caught->what(), Catch::Contains("the feed broke"));
    // The end of a stream that ended well throws too, as use_awaitable does for any error.
    rpc_stream items = co_await caller.async_request_stream("items", asio::buffer(seed_bytes(5)),
                                                            asio::use_awaitable);
    CO_REQUIRE(co_await read_items(items, 5, 0, 2));
    caught = co_await rpc_error_of(items.async_read(asio::use_awaitable));
    CO_REQUIRE(caught.has_value());
    CHECK(caught->code() == asio::error::eof);
    // A batch throws the same, with the text it would have had as its one item.
    rpc_stream batch = co_await caller.async_request_stream("fails", {}, asio::use_awaitable);
    const auto first = co_await batch.async_read_batch(1, asio::use_awaitable);
    CHECK(first.size() == 1);
    std::size_t read = first.size();
    try {
      for (;;)
        read += (co_await batch.async_read_batch(8, asio::use_awaitable)).size();
    } catch (const shmio::rpc_error& e) {
      CHECK(e.code() == errc::remote_error);
      CHECK(e.remote_what() == "the feed broke");
    }
    CHECK(read == 2);
    // A stream that is not open: operation_aborted, thrown as rpc_error, posted.
    rpc_stream none;
    caught = co_await rpc_error_of(none.async_read(asio::use_awaitable));
    CO_REQUIRE(caught.has_value());
    CHECK(caught->code() == asio::error::operation_aborted);
    caught = co_await rpc_error_of(none.async_read_batch(4, asio::use_awaitable));
    CO_REQUIRE(caught.has_value());
    CHECK(caught->code() == asio::error::operation_aborted);
    caller.close();
    server.close();
  });
}

TEST_CASE("rpc_stream: unknown names, the wrong kind of method and bad names are refused",
          "[rpc][stream]") {
  scoped_name name("stream");
  asio::io_context io;
  writer_log log;
  rpc_buffer caller(io.get_executor(), shmio::create_only, name, {}, options());
  rpc_buffer server(io.get_executor(), shmio::open_only, name, streaming(log, 1));
  run_until_done(io, [&]() -> asio::awaitable<void> {
    auto first_read = [&](std::string_view method) -> asio::awaitable<std::error_code> {
      rpc_stream s = co_await caller.async_request_stream(method, {}, asio::use_awaitable);
      auto [ec, got] = co_await s.async_read(tuple_awaitable);
      co_return ec;
    };
    CO_CHECK(co_await first_read("nope") == errc::no_such_method);
    CO_CHECK(co_await first_read("plain") == errc::no_such_method);  // not a stream
    {
      auto [ec, reply] = co_await caller.async_request("items", {}, tuple_awaitable);
      CHECK(ec == errc::no_such_method);  // a stream, called as a plain method
      CHECK(text(reply).find("async_request_stream") != std::string::npos);
    }
    {
      // The other end serves nothing at all: known at once, without a request sent.
      auto [ec, s] = co_await server.async_request_stream({}, tuple_awaitable);
      CHECK(ec == errc::no_handler);
      auto [read_ec, got] = co_await s.async_read(tuple_awaitable);
      CHECK(read_ec == asio::error::operation_aborted);  // no stream to read
    }
    // A name out of range: at once, and never inside the initiating function.
    std::optional<std::error_code> bad;
    caller.async_request_stream("", {}, [&](std::error_code ec, rpc_stream) { bad = ec; });
    CHECK_FALSE(bad);
    CO_REQUIRE(co_await wait_until([&] { return bad.has_value(); }));
    CHECK(*bad == errc::invalid_argument);
    caller.close();
    server.close();
    // A closed end.
    auto [ec, s] = co_await caller.async_request_stream("items", {}, tuple_awaitable);
    CHECK(ec == asio::error::operation_aborted);
    CHECK_FALSE(s.is_open());
  });
}

TEST_CASE("rpc_stream: many streams and calls at once keep each stream's order", "[rpc][stream]") {
  scoped_name name("stream");
  asio::io_context io;
  writer_log log;
  rpc_buffer caller(io.get_executor(), shmio::create_only, name, {}, options(8));
  rpc_buffer server(io.get_executor(), shmio::open_only, name, streaming(log, 200));
  run_until_done(io, [&]() -> asio::awaitable<void> {
    int finished = 0;
    bool all_right = true;
    auto ex = co_await asio::this_coro::executor;
    for (std::uint64_t k = 0; k < 8; ++k)
      asio::co_spawn(
          ex,
          [&, k]() -> asio::awaitable<void> {
            const bytes_t seed = seed_bytes(100 + k);
            rpc_stream s = co_await caller.async_request_stream("items", asio::buffer(seed),
                                                                asio::use_awaitable);
            all_right &= co_await read_items(s, 100 + k, 0, 200);
            auto [ec, got] = co_await s.async_read(tuple_awaitable);
            all_right &= ec == asio::error::eof;
            ++finished;
          },
          asio::detached);
    for (int i = 0; i < 50; ++i) {
      const bytes_t x = pattern(500, i);
      auto reply = co_await caller.async_request("plain", asio::buffer(x), asio::use_awaitable);
      all_right &= reply == x;
    }
    CO_REQUIRE(co_await wait_until([&] { return finished == 8; }));
    CHECK(all_right);
    caller.close();
    server.close();
  });
}

TEST_CASE("rpc_stream: writes after the handler returned fail; the stream had ended",
          "[rpc][stream]") {
  scoped_name name("stream");
  asio::io_context io;
  std::optional<rpc_stream_writer> kept;
  rpc_methods methods;
  methods.add("",
              [&](std::uint64_t, std::span<const std::byte>,
                  rpc_stream_writer out) -> asio::awaitable<void> {
                co_await out.async_write(asio::buffer(bytes("one")), asio::use_awaitable);
                kept = out;
              });
  rpc_buffer caller(io.get_executor(), shmio::create_only, name, {}, options());
  rpc_buffer server(io.get_executor(), shmio::open_only, name, methods);
  run_until_done(io, [&]() -> asio::awaitable<void> {
    rpc_stream s = co_await caller.async_request_stream({}, asio::use_awaitable);
    auto [ec1, one] = co_await s.async_read(tuple_awaitable);
    CHECK(text(one) == "one");
    auto [ec2, end] = co_await s.async_read(tuple_awaitable);
    CHECK(ec2 == asio::error::eof);
    REQUIRE(kept);
    auto [late] = co_await kept->async_write(asio::buffer(bytes("late")), tuple_awaitable);
    CHECK(late == asio::error::operation_aborted);
    kept.reset();
    caller.close();
    server.close();
  });
}

TEST_CASE("rpc_stream: a moved-from writer keeps its executor; its writes fail, posted",
          "[rpc][stream]") {
  scoped_name name("stream");
  asio::io_context io;
  std::error_code moved_ec, co_ec;
  bool ran_inline = false, same_executor = false;
  rpc_methods methods;
  methods.add("",
              [&](std::uint64_t, std::span<const std::byte>,
                  rpc_stream_writer out) -> asio::awaitable<void> {
                rpc_stream_writer moved = std::move(out);
                same_executor = out.get_executor() == moved.get_executor();
                bool returned = false;
                out.async_write(asio::buffer(bytes("lost")), [&](std::error_code ec) {
                  ran_inline = !returned;
                  moved_ec = ec;
                });
                returned = true;
                try {
                  co_await out.co_write(asio::buffer(bytes("lost too")));
                } catch (const std::system_error& e) {
                  co_ec = e.code();
                }
                co_await moved.async_write(asio::buffer(bytes("one")), asio::use_awaitable);
              });
  rpc_buffer caller(io.get_executor(), shmio::create_only, name, {}, options());
  rpc_buffer server(io.get_executor(), shmio::open_only, name, methods);
  run_until_done(io, [&]() -> asio::awaitable<void> {
    rpc_stream s = co_await caller.async_request_stream({}, asio::use_awaitable);
    auto [ec1, one] = co_await s.async_read(tuple_awaitable);
    CHECK(!ec1);
    CHECK(text(one) == "one");
    auto [ec2, end] = co_await s.async_read(tuple_awaitable);
    CHECK(ec2 == asio::error::eof);
    caller.close();
    server.close();
  });
  CHECK(same_executor);
  CHECK_FALSE(ran_inline);
  CHECK(moved_ec == asio::error::bad_descriptor);
  CHECK(co_ec == asio::error::bad_descriptor);
}

TEST_CASE("rpc_stream: a write too large to send completes in its turn, after earlier writes",
          "[rpc][stream]") {
  scoped_name name("stream");
  asio::io_context io;
  std::vector<std::string> completions;
  rpc_methods methods;
  methods.add("",
              [&](std::uint64_t, std::span<const std::byte>,
                  rpc_stream_writer out) -> asio::awaitable<void> {
                // The window's one credit goes to "a"; "b" waits for the next.
                co_await out.async_write(asio::buffer(bytes("a")), asio::use_awaitable);
                const bytes_t big(100);
                out.async_write(asio::buffer(bytes("b")), [&](std::error_code ec) {
                  completions.push_back(ec ? "b failed" : "b");
                });
                out.async_write(asio::buffer(big), [&](std::error_code ec) {
                  completions.push_back(ec == errc::message_too_large ? "big refused" : "big?");
                });
                CO_REQUIRE(co_await wait_until([&] { return completions.size() == 2; }));
              });
  rpc_options o = options(1);
  o.max_message_size = 64;
  rpc_buffer caller(io.get_executor(), shmio::create_only, name, {}, o);
  rpc_buffer server(io.get_executor(), shmio::open_only, name, methods);
  run_until_done(io, [&]() -> asio::awaitable<void> {
    rpc_stream s = co_await caller.async_request_stream({}, asio::use_awaitable);
    auto [ec1, a] = co_await s.async_read(tuple_awaitable);
    CHECK(text(a) == "a");
    auto [ec2, b] = co_await s.async_read(tuple_awaitable);
    CHECK(text(b) == "b");
    auto [ec3, end] = co_await s.async_read(tuple_awaitable);
    CHECK(ec3 == asio::error::eof);
    CHECK(completions == std::vector<std::string>{"b", "big refused"});
    caller.close();
    server.close();
  });
}

TEST_CASE("rpc_stream: items past the credit granted end the stream as corrupted",
          "[rpc][stream]") {
  // The handler's end never sends past its credit, so a third party does: the caller takes
  // the window's worth, then ends the stream rather than hold more.
  scoped_name name("stream");
  asio::io_context io;
  bool cancelled = false;
  const rpc_methods methods = silent_stream(cancelled);
  rpc_buffer caller(io.get_executor(), shmio::create_only, name, {}, options(2));
  rpc_buffer server(io.get_executor(), shmio::open_only, name, methods);
  ring_injector inject(name);
  run_until_done(io, [&]() -> asio::awaitable<void> {
    rpc_stream s = co_await caller.async_request_stream({}, asio::use_awaitable);
    constexpr auto item_type = static_cast<std::uint8_t>(layout::packet_type::stream_item);
    for (std::uint64_t i = 0; i < 3; ++i)
      co_await inject.publish(node(header(item_type, 1, 9000 + i, 5, 1, s.request_id()), 5, i));
    // Nothing read yet, so no credit granted: the third is one too many.
    CO_REQUIRE(co_await wait_until([&] { return caller.statistics().packets_rejected == 1; }));
    CHECK(caller.statistics().stream_items_received == 2);
    for (std::uint64_t i = 0; i < 2; ++i) {  // what came within the window is still read
      auto [ec, got] = co_await s.async_read(tuple_awaitable);
      CHECK_FALSE(ec);
      CHECK(got == pattern(5, i));
    }
    auto [ec, got] = co_await s.async_read(tuple_awaitable);
    CHECK(ec == errc::corrupted);
    CO_CHECK(co_await wait_until([&] { return cancelled; }));
    CHECK(caller.statistics().packets_rejected == 1);
    caller.close();
    server.close();
  });
}

TEST_CASE(
    "rpc_buffer: an answer to a call still waiting for credit fails it as corrupted, and its "
    "request is never sent",
    "[rpc][stream]") {
  // The stream holds the one credit (max_in_flight 1), so the plain call after it waits; a
  // third party that guesses its id answers it.
  scoped_name name("stream");
  asio::io_context io;
  bool cancelled = false;
  const rpc_methods methods = silent_stream(cancelled);
  rpc_options o = options();
  o.max_in_flight = 1;
  rpc_buffer caller(io.get_executor(), shmio::create_only, name, {}, o);
  rpc_buffer server(io.get_executor(), shmio::open_only, name, methods);
  ring_injector inject(name);
  run_until_done(io, [&]() -> asio::awaitable<void> {
    rpc_stream s = co_await caller.async_request_stream({}, asio::use_awaitable);
    std::optional<std::error_code> answered;
    bytes_t reply;
    caller.async_request(asio::buffer("x", 1), [&](std::error_code ec, bytes_t r) {
      answered = ec;
      reply = std::move(r);
    });
    co_await yield_turns(10);
    REQUIRE_FALSE(answered.has_value());
    // Its id follows the stream's (ids are taken in order as calls start); a few guesses cover
    // any taken between, and an answer to no call is only counted.
    constexpr auto response_type = static_cast<std::uint8_t>(layout::packet_type::response);
    for (std::uint64_t k = 1; k <= 4; ++k)
      co_await inject.publish(
          node(header(response_type, 1, 9000 + k, 3, 1, s.request_id() + k), 3));
    CO_REQUIRE(co_await wait_until([&] { return answered.has_value(); }));
    CHECK(*answered == errc::corrupted);
    CHECK(reply.empty());
    CHECK(caller.statistics().requests_sent == 1);  // the stream's only
    s.close();
    co_await yield_turns(10);
    CHECK(caller.statistics().requests_sent == 1);  // the credit freed: still not sent
    caller.close();
    server.close();
  });
}

TEST_CASE("rpc_stream: an item for a stream whose request is still queued whole fails it",
          "[rpc][stream]") {
  // The opener's end does not run: a few calls fill the ring it reads, so the stream request
  // waits whole in the caller's outbox (its opening has completed). A third party that guesses
  // its id sends an item: the stream fails as corrupted, and its request is never sent.
  scoped_name name("stream");
  asio::io_context io;
  asio::io_context server_io;  // never run
  bool cancelled = false;
  const rpc_methods methods = silent_stream(cancelled);
  rpc_buffer caller(io.get_executor(), shmio::create_only, name, {}, options());
  rpc_buffer server(server_io.get_executor(), shmio::open_only, name, methods);
  ring_injector inject(name);
  int answered = 0;  // out here: the calls complete (aborted) after the body returns
  run_until_done(io, [&]() -> asio::awaitable<void> {
    for (int i = 0; i < 8; ++i)  // the ring's 8 nodes
      caller.async_request(asio::buffer("x", 1), [&](std::error_code, bytes_t) { ++answered; });
    co_await yield_turns(10);
    rpc_stream s = co_await caller.async_request_stream({}, asio::use_awaitable);
    const auto withdrawn = caller.statistics().requests_withdrawn;
    constexpr auto item_type = static_cast<std::uint8_t>(layout::packet_type::stream_item);
    co_await inject.publish(node(header(item_type, 1, 9000, 5, 1, s.request_id()), 5, 0));
    auto [ec, got] = co_await s.async_read(tuple_awaitable);
    CHECK(ec == errc::corrupted);
    CHECK(got.empty());
    CHECK(caller.statistics().requests_withdrawn == withdrawn + 1);
    CHECK(answered == 0);
    caller.close();
    server.close();
  });
}

TEST_CASE(
    "rpc_stream: credit for a peer that does not read its ring waits as one message, not one "
    "per grant",
    "[rpc][stream]") {
  // A peer that streams items but never reads the caller's ring: the caller keeps reading, and
  // grants credit as it reads (a window of 2: a grant per item). Past the ring's 8 nodes the
  // grants join the one still queued; what finally reaches the peer adds up to every grant.
  scoped_name name("stream");
  asio::io_context io;
  asio::io_context server_io;  // never run: the opener's end reads nothing
  bool cancelled = false;
  const rpc_methods methods = silent_stream(cancelled);
  rpc_buffer caller(io.get_executor(), shmio::create_only, name, {}, options(2));
  rpc_buffer server(server_io.get_executor(), shmio::open_only, name, methods);
  ring_injector inject(name);
  run_until_done(io, [&]() -> asio::awaitable<void> {
    rpc_stream s = co_await caller.async_request_stream({}, asio::use_awaitable);
    constexpr std::uint64_t items = 100;
    constexpr auto item_type = static_cast<std::uint8_t>(layout::packet_type::stream_item);
    for (std::uint64_t i = 0; i < items; ++i) {
      co_await inject.publish(node(header(item_type, 1, 9000 + i, 5, 1, s.request_id()), 5, i));
      auto [ec, got] = co_await s.async_read(tuple_awaitable);
      CO_REQUIRE(!ec);
      CHECK(got == pattern(5, i));
    }
    // Now read the caller's ring as the peer would, letting the caller's writer refill it.
    std::uint64_t credit_packets = 0;
    std::uint64_t credited = 0;
    for (int turn = 0; turn < 10000 && credited < items; ++turn) {
      while (auto p = inject.take_sent_to_opener()) {
        layout::packet_header h{};
        CO_REQUIRE(p->size() >= sizeof h);
        std::memcpy(&h, p->data(), sizeof h);
        if (h.type != static_cast<std::uint8_t>(layout::packet_type::stream_credit)) continue;
        std::uint32_t count = 0;
        CO_REQUIRE(p->size() >= sizeof h + sizeof count);
        std::memcpy(&count, p->data() + sizeof h, sizeof count);
        ++credit_packets;
        credited += count;
      }
      co_await yield_turns(1);
    }
    CHECK(credited == items);
    CHECK(credit_packets <= 8);  // what the ring took at once, and the one that waited
    caller.close();
    server.close();
  });
}

// A message of one packet, its total size set from `payload`, into the ring the owner reads.
asio::awaitable<void> publish_message(ring_injector& inject, layout::packet_header h,
                                      const bytes_t& payload) {
  h.total_size = static_cast<std::uint32_t>(payload.size());
  // Sized once and copied into (vector::insert here draws a false -Warray-bounds from g++ 12
  // at -O3).
  bytes_t n(sizeof h + payload.size());
  std::memcpy(n.data(), &h, sizeof h);
  std::copy(payload.begin(), payload.end(), n.begin() + static_cast<std::ptrdiff_t>(sizeof h));
  co_await inject.publish(n);
}

// A request `id` for "plain" (the method name, no payload), as a caller would send it.
asio::awaitable<void> publish_plain_request(ring_injector& inject, std::uint64_t id) {
  bytes_t plain{std::byte{5}};
  for (char c : std::string_view("plain"))
    plain.push_back(static_cast<std::byte>(c));
  auto h = header(static_cast<std::uint8_t>(layout::packet_type::request), 1, id, 0, 1);
  h.flags = layout::packet_flag_method;
  co_await publish_message(inject, h, plain);
}

// A stream request `id` for "items" of `seed`, with `window`, as a caller would send it.
asio::awaitable<void> publish_stream_request(ring_injector& inject, std::uint64_t id,
                                             std::uint32_t window, std::uint64_t seed) {
  bytes_t request(sizeof window);
  std::memcpy(request.data(), &window, sizeof window);
  const std::string_view method = "items";
  request.push_back(static_cast<std::byte>(method.size()));
  for (char c : method)
    request.push_back(static_cast<std::byte>(c));
  const bytes_t s = seed_bytes(seed);
  const std::size_t at = request.size();
  request.resize(at + s.size());
  std::copy(s.begin(), s.end(), request.begin() + static_cast<std::ptrdiff_t>(at));
  auto h = header(static_cast<std::uint8_t>(layout::packet_type::request), 1, id, 0, 1);
  h.flags = layout::packet_flag_method | layout::packet_flag_stream;
  co_await publish_message(inject, h, request);
}

TEST_CASE(
    "rpc_stream: credit granted for items never read lets no more than a window wait at the "
    "handler's end",
    "[rpc][stream]") {
  // A third party asks for a stream of window 4 in the caller's name, then grants the whole
  // window again and again while nobody reads: the handler's items fill the ring, then at most
  // a window's worth waits in its end's outbox, and its writes wait.
  scoped_name name("stream");
  asio::io_context io;
  writer_log log;
  constexpr std::uint32_t window = 4;
  rpc_buffer server(io.get_executor(), shmio::create_only, name, streaming(log, -1),
                    options(window));
  rpc_buffer caller(io.get_executor(), shmio::open_only, name);  // reads nothing
  ring_injector inject(name);
  run_until_done(io, [&]() -> asio::awaitable<void> {
    co_await publish_stream_request(inject, 7000, window, 3);
    constexpr std::uint64_t grants = 50;
    bytes_t grant(sizeof window);
    std::memcpy(grant.data(), &window, sizeof window);
    for (std::uint64_t i = 0; i < grants; ++i)
      co_await publish_message(inject,
                               header(static_cast<std::uint8_t>(layout::packet_type::stream_credit),
                                      1, 7100 + i, 0, 1, 7000),
                               grant);
    CO_REQUIRE(
        co_await wait_until([&] { return server.statistics().packets_received >= 1 + grants; }));
    co_await yield_turns(50);
    CHECK(log.written >= 1);
    CHECK(log.written <= static_cast<int>(window + 8 + 2));  // window + the ring's 8 nodes
    CHECK_FALSE(log.done);                                   // its next write waits
    caller.close();
    server.close();
  });
}

TEST_CASE(
    "rpc_stream: streams that ended with their items still waiting at the handler's end count "
    "toward shedding",
    "[rpc][stream]") {
  // A third party asks for stream after stream while nobody reads: each handler writes its few
  // items and returns, leaving them (and its end) for the ring. They wait as answers do, so new
  // requests are shed rather than served into an outbox without bound.
  scoped_name name("stream");
  asio::io_context io;
  writer_log log;
  constexpr std::uint32_t window = 4;
  constexpr std::uint64_t offered = 200;
  rpc_options o = options(window);
  o.max_concurrent_handlers = 4;  // the bound on answers waiting
  rpc_buffer server(io.get_executor(), shmio::create_only, name, streaming(log, 4), o);
  rpc_buffer caller(io.get_executor(), shmio::open_only, name);  // reads nothing
  ring_injector inject(name);
  run_until_done(io, [&]() -> asio::awaitable<void> {
    for (std::uint64_t i = 0; i < offered; ++i)
      co_await publish_stream_request(inject, 7000 + i, window, i);
    CO_REQUIRE(
        co_await wait_until([&] { return server.statistics().requests_received == offered; }));
    co_await yield_turns(50);
    const auto stats = server.statistics();
    CHECK(stats.requests_shed > 0);
    // What the ring's 8 nodes took, and what waits: some handlers' worth, not every request's.
    CHECK(log.written <= 4 * static_cast<int>(o.max_concurrent_handlers + 8 + 2));
    caller.close();
    server.close();
  });
}

// A server whose "items" handler writes `count` items (-1: for ever) with a window of 64, to a
// caller whose end does not run (it reads nothing); requests come through `inject`, a third
// party writing in the caller's name.
struct unread_stream_server {
  static constexpr std::uint32_t window = 64;
  scoped_name name{"stream"};
  asio::io_context io;
  asio::io_context caller_io;  // never run
  writer_log log;
  rpc_buffer server;
  rpc_buffer caller;
  ring_injector inject;

  unread_stream_server(std::size_t handlers, int count)
      : server(io.get_executor(), shmio::create_only, name, streaming(log, count),
               with_handlers(handlers)),
        caller(caller_io.get_executor(), shmio::open_only, name),
        inject(name) {}
  static rpc_options with_handlers(std::size_t handlers) {
    rpc_options o = options(window);
    o.max_concurrent_handlers = handlers;
    return o;
  }
};

TEST_CASE(
    "rpc_stream: a live stream's items waiting at the handler's end do not make new requests "
    "shed",
    "[rpc][stream]") {
  // A stream of window 64 to a caller whose end does not run: the handler's items fill the
  // ring and wait in its end's outbox, as many as the window allows. They are bounded by the
  // window already: a plain request that comes meanwhile is served, not shed.
  unread_stream_server f(16, -1);  // 16 handlers: fewer than the items that will wait
  run_until_done(f.io, [&]() -> asio::awaitable<void> {
    co_await publish_stream_request(f.inject, 7000, f.window, 3);
    CO_REQUIRE(co_await wait_until([&] { return f.log.written == static_cast<int>(f.window); }));
    co_await publish_plain_request(f.inject, 8000);
    CO_REQUIRE(co_await wait_until([&] { return f.server.statistics().requests_received == 2; }));
    CHECK(f.server.statistics().requests_shed == 0);
    CHECK(f.server.statistics().responses_sent == 1);
    f.caller.close();
    f.server.close();
  });
}

TEST_CASE(
    "rpc_stream: a stream that ended with many items still waiting counts once toward shedding",
    "[rpc][stream]") {
  // A caller that reads, only slower than the handler writes: a window of 64, a handler that
  // writes all 64 and returns, more than max_concurrent_handlers items left queued behind the
  // ring. That is one answer waiting (the stream's end), not 64: the caller's next request is
  // served, not shed (and left to time out).
  unread_stream_server f(4, static_cast<int>(unread_stream_server::window));
  run_until_done(f.io, [&]() -> asio::awaitable<void> {
    co_await publish_stream_request(f.inject, 7000, f.window, 3);
    CO_REQUIRE(co_await wait_until([&] { return f.log.done; }));
    CHECK(f.log.written == static_cast<int>(f.window));
    co_await publish_plain_request(f.inject, 8000);
    CO_REQUIRE(co_await wait_until([&] { return f.server.statistics().requests_received == 2; }));
    CHECK(f.server.statistics().requests_shed == 0);
    CHECK(f.server.statistics().responses_sent == 2);  // the stream's end and the plain reply
    f.caller.close();
    f.server.close();
  });
}

TEST_CASE("rpc_stream: the server killed mid-stream: the reader hears peer_gone",
          "[rpc][stream][process]") {
  scoped_name name("stream");
  signal_pipe ready;
  child server([&] {
    asio::io_context io;
    writer_log log;
    shmio::rpc_server srv(io.get_executor(), shmio::create_only, name.str(), streaming(log, -1));
    ready.notify();
    io.run();
    return 0;
  });
  REQUIRE(ready.wait() == 1);
  asio::io_context io;
  rpc_buffer client(io.get_executor());
  client.connect(name.str());
  run_until_done(io, [&]() -> asio::awaitable<void> {
    const bytes_t seed = seed_bytes(5);
    rpc_stream s =
        co_await client.async_request_stream("items", asio::buffer(seed), asio::use_awaitable);
    CO_CHECK(co_await read_items(s, 5, 0, 50));
    const auto killed = steady::now();
    CHECK(server.kill9() == 128 + SIGKILL);
    std::error_code ec;
    for (int i = 0; i < 1000 && !ec; ++i)  // the window's items may still be there to read
      std::tie(ec, std::ignore) = co_await s.async_read(tuple_awaitable);
    CHECK(ec == errc::peer_gone);
    CHECK(steady::now() - killed < 2s);
    client.close();
  });
}

TEST_CASE("rpc_stream: a reader killed mid-stream: the handler's write fails with peer_gone",
          "[rpc][stream][process]") {
  scoped_name name("stream");
  asio::io_context io;
  writer_log log;
  shmio::rpc_server srv(io.get_executor(), shmio::create_only, name.str(), streaming(log, -1));
  child reader([&] {
    asio::io_context cio;
    rpc_buffer client(cio.get_executor());
    client.connect(name.str());
    const bytes_t seed = seed_bytes(9);
    bool right = false;
    asio::co_spawn(
        cio,
        [&]() -> asio::awaitable<void> {
          rpc_stream s = co_await client.async_request_stream("items", asio::buffer(seed),
                                                              asio::use_awaitable);
          right = co_await read_items(s, 9, 0, 20);
          if (!right) ::_exit(3);       // the parent sees this instead of SIGKILL
          ::kill(::getpid(), SIGKILL);  // dies holding the stream open
        },
        asio::detached);
    cio.run();
    return right ? 0 : 3;
  });
  const bool done = run_until(io, [&] { return log.done; });
  INFO("written " << log.written << ", server connections " << srv.connection_count()
                  << ", accepted " << srv.statistics().accepted);
  CHECK(done);
  {
    INFO("3: the reader read wrong items; 99: it threw");
    CHECK(reader.wait() == 128 + SIGKILL);
  }
  CHECK(log.written >= 20);
  // Its write waiting for room fails with peer_gone; between writes, the cancellation that
  // comes with the end of the session makes its next co_await throw instead.
  CHECK((log.ended == errc::peer_gone || log.ended == asio::error::operation_aborted));
  srv.close();
  CHECK(run_until_idle(io));
}
