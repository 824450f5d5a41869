// Which RPC ends hold their io_context's work: an end without handlers and with nothing pending
// holds none (as an idle socket), reads again while a call, a stream or a close waiter of its
// own is pending, and its calls to an end that serves nothing fail at once without that end.
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <atomic>
#include <optional>
#include <thread>

#include "rpc_test_support.hpp"
#include "shmio/rpc_buffer.hpp"

using namespace shmio::test;
using namespace shmio::test::rpc;
using shmio::errc;
using shmio::rpc_buffer;

namespace {

// Serves on a thread of its own until destroyed: echo, and "hold", which never answers.
struct serving_thread {
  asio::io_context io;
  rpc_buffer end;
  io_thread runner;
  serving_thread(const scoped_name& name, bool owner)
      : end(owner ? rpc_buffer(io, shmio::create_only, name, methods())
                  : rpc_buffer(io, shmio::open_only, name, methods())),
        runner(io) {}
  ~serving_thread() {
    asio::post(io, [this] { end.close(); });
    CHECK(runner.join());  // closed, the end leaves its io_context nothing to do
  }
  static shmio::rpc_methods methods() {
    shmio::rpc_methods m(
        [](std::uint64_t, std::span<const std::byte> in) { return bytes_t(in.begin(), in.end()); });
    m.add("hold", [](std::uint64_t, std::span<const std::byte>) -> asio::awaitable<bytes_t> {
      asio::steady_timer forever(co_await asio::this_coro::executor, std::chrono::hours(1));
      co_await forever.async_wait(tuple_awaitable);  // ends when cancelled
      co_return bytes_t{};
    });
    return m;
  }
};

}  // namespace

TEST_CASE("rpc idle: an end without handlers holds no work until it waits for something",
          "[rpc][idle]") {
  scoped_name name("rpc");
  serving_thread service(name, true);
  asio::io_context io;
  rpc_buffer caller(io, shmio::open_only, name);
  // Nothing pending: run() returns by itself (run_for's bound is only a safety net).
  io.run_for(bound);
  CHECK(io.stopped());

  // A call makes it read; once the reply came, run() returns again.
  std::optional<std::error_code> result;
  bytes_t reply;
  auto call_and_run = [&](std::string_view payload) {
    result.reset();
    caller.async_request(asio::buffer(bytes(payload)), [&](std::error_code ec, bytes_t r) {
      result = ec;
      reply = std::move(r);
    });
    io.restart();
    io.run_for(bound);
  };
  call_and_run("ping");
  CHECK(io.stopped());
  REQUIRE(result.has_value());
  CHECK_FALSE(*result);
  CHECK(text(reply) == "ping");

  // A call that times out while the reader waits: the reader stops with it, and run() returns.
  result.reset();
  caller.async_request("hold", {}, 20ms, [&](std::error_code ec, bytes_t) { result = ec; });
  io.restart();
  io.run_for(bound);
  CHECK(io.stopped());
  REQUIRE(result.has_value());
  CHECK(*result == errc::timed_out);

  // The channel goes on: the next call reads again (and drops the late error it finds).
  call_and_run("again");
  REQUIRE(result.has_value());
  CHECK_FALSE(*result);
  CHECK(text(reply) == "again");
  caller.close();
}

TEST_CASE("rpc idle: run() returns once the last call's handler has run, not a tick later",
          "[rpc][idle]") {
  scoped_name name("rpc");
  serving_thread service(name, true);
  asio::io_context io;
  rpc_buffer caller(io, shmio::open_only, name);
  for (int round = 0; round < 3; ++round) {
    CAPTURE(round);
    std::optional<std::error_code> result;
    caller.async_request(asio::buffer(bytes("ping")), 5s,
                         [&](std::error_code ec, bytes_t) { result = ec; });
    io.restart();
    while (!result && io.run_one_for(bound) != 0) {
    }
    REQUIRE(result.has_value());
    CHECK_FALSE(*result);
    // What is left runs without waiting for anything outside: the reader's and the tick's ends.
    // A timer still pending (the call's deadline tick) would keep the io_context from stopping.
    for (int i = 0; i < 64 && !io.stopped(); ++i)
      io.poll();
    CHECK(io.stopped());
  }
  caller.close();
}

TEST_CASE("rpc idle: a close waiter keeps an end reading until the other end goes", "[rpc][idle]") {
  scoped_name name("rpc");
  asio::io_context io;
  // The owner, without handlers: its close waiter is the only thing it waits for.
  rpc_buffer owner(io, shmio::create_only, name);
  std::optional<serving_thread> service(std::in_place, name, false);
  std::optional<std::error_code> closed;
  owner.async_wait_closed([&](std::error_code ec) { closed = ec; });
  service.reset();  // closes the serving end: its close packet waits in the owner's ring
  io.run_for(bound);
  REQUIRE(closed.has_value());
  CHECK_FALSE(*closed);  // the other end went
  CHECK(io.stopped());   // and nothing is left to hold run()
  owner.close();
}

TEST_CASE("rpc idle: a call to an end that serves nothing fails at once, whether it runs or not",
          "[rpc][idle]") {
  scoped_name name("rpc");
  asio::io_context silent_io, io;  // silent_io never runs
  rpc_buffer silent(silent_io, shmio::create_only, name);
  rpc_buffer caller(io, shmio::open_only, name, serving_thread::methods());
  std::optional<std::error_code> unnamed, named;
  bytes_t text_unnamed;
  caller.async_request(asio::buffer(bytes("x")), [&](std::error_code ec, bytes_t r) {
    unnamed = ec;
    text_unnamed = std::move(r);
  });
  caller.async_request("get", {}, [&](std::error_code ec, bytes_t) { named = ec; });
  REQUIRE(run_until(io, [&] { return unnamed && named; }));
  CHECK(*unnamed == errc::no_handler);
  CHECK(text(text_unnamed) == "the other end serves no requests");
  CHECK(*named == errc::no_such_method);
  CHECK(caller.statistics().requests_sent == 0);
  // The silent end, which never ran, still calls the serving one.
  std::optional<std::error_code> result;
  std::atomic<bool> answered{false};
  silent.async_request(asio::buffer(bytes("y")), [&](std::error_code ec, bytes_t) {
    result = ec;
    answered = true;
  });
  {
    // Joined (within run_until's bound) also when the check below fails.
    std::jthread serving([&] { run_until(io, [&] { return answered.load(); }); });
    REQUIRE(run_until(silent_io, [&] { return answered.load(); }));
  }
  CHECK_FALSE(*result);
  silent.close();
  caller.close();
  run_until_idle(silent_io);
  run_until_idle(io);
}

TEST_CASE("rpc idle: an owner that was idle while its opener left calls the next one",
          "[rpc][idle]") {
  // The opener's close waits unread in the idle owner's ring; the owner's next call reads it
  // (peer_gone), and calls to the next opener, which serves, succeed: the close ended the old
  // session without spoiling the owner's calls.
  scoped_name name("rpc");
  asio::io_context io;
  rpc_buffer owner(io, shmio::create_only, name);
  auto call = [&](std::chrono::milliseconds limit) {
    std::optional<std::error_code> result;
    owner.async_request(asio::buffer(bytes("hi")), limit,
                        [&](std::error_code ec, bytes_t) { result = ec; });
    io.restart();
    REQUIRE(run_until(io, [&] { return result.has_value(); }));
    return *result;
  };
  {
    serving_thread first(name, false);
    CHECK_FALSE(call(bound));
  }  // closes: the close packet waits in the owner's ring, unread
  const std::error_code gone = call(bound);
  CHECK(gone == errc::peer_gone);
  serving_thread next(name, false);
  CHECK_FALSE(call(5s));
  CHECK_FALSE(call(5s));
  owner.close();
  run_until_idle(io);
}
