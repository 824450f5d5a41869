// Peer commands for tests/event_test.cpp: the other processes of the named_event tests.
//
// Arguments are strings: MODE is "auto" or "manual", HOW is "sync" (blocking waits) or "async"
// (co_await on an io_context), STRATEGY is "hybrid", "park" or "spin".
//
// Exit codes: 0 success, 1 a wait timed out, 2 bad arguments, 3 the waiters the command waited
// for never parked, 97 an exception (event-count returns its count instead, see there).
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

#include "peer.hpp"
#include "shmio/detail/layout.hpp"
#include "shmio/named_event.hpp"
#include "shmio/segment.hpp"

namespace {

using namespace std::chrono_literals;
using namespace asio::experimental::awaitable_operators;
using shmio::event_mode;
using shmio::named_event;

constexpr int exit_timed_out = 1;
constexpr int exit_usage = 2;
constexpr int exit_never_parked = 3;

// A wait that takes longer than this counts as lost: every test bounds its run far below.
constexpr auto wait_bound = 10s;

event_mode mode_of(const std::string& s) {
  return s == "manual" ? event_mode::manual_reset : event_mode::auto_reset;
}

shmio::wait_strategy strategy_of(const std::string& s) {
  if (s == "park") return shmio::wait_strategy::park_only();
  if (s == "spin") return shmio::wait_strategy::spin_then_park(std::chrono::microseconds(20));
  return shmio::wait_strategy::hybrid();
}

// Polls the event's shared wait queue until `n` waits (blocking or async) are parked on it.
bool wait_until_parked(const std::string& name, std::uint64_t n) {
  shmio::segment seg(shmio::open_only, name, shmio::object_kind::event);
  const auto& st = *reinterpret_cast<const shmio::detail::layout::event_state*>(seg.body().data());
  const auto deadline = std::chrono::steady_clock::now() + wait_bound;
  for (;;) {
    const std::uint64_t parked = st.waiters.parked.load();
    if ((parked >> 32) + (parked & 0xffffffffu) >= n) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(100us);  // polling a condition, bounded by the deadline
  }
}

// One wait, bounded by `limit`, from a coroutine: true if the event let it through.
asio::awaitable<bool> bounded_async_wait(named_event& ev, std::chrono::milliseconds limit) {
  asio::steady_timer timer(co_await asio::this_coro::executor, limit);
  auto r = co_await (ev.async_wait(asio::use_awaitable) || timer.async_wait(asio::use_awaitable));
  co_return r.index() == 0;
}

// Runs `body` (a coroutine returning int) on a fresh io_context; returns its result.
template <class Body>
int run_coroutine(asio::io_context& io, Body body) {
  int rc = 97;
  asio::co_spawn(
      io, [&]() -> asio::awaitable<void> { rc = co_await body(); }, asio::detached);
  io.run();
  return rc;
}

}  // namespace

// event-wait NAME MODE HOW TIMEOUT_MS: one wait (a negative timeout: no limit); 0 if released,
// 1 if it timed out.
SHMIO_PEER_COMMAND("event-wait", args) {
  if (args.size() != 4) return exit_usage;
  asio::io_context io;
  named_event ev(io.get_executor(), shmio::open_only, args[0], mode_of(args[1]));
  const std::chrono::milliseconds limit(std::stol(args[3]));
  if (args[2] == "sync") return ev.wait(limit) ? 0 : exit_timed_out;
  return run_coroutine(io, [&]() -> asio::awaitable<int> {
    if (limit.count() < 0) {  // no limit: to be killed while parked, or released
      co_await ev.async_wait(asio::use_awaitable);
      co_return 0;
    }
    co_return co_await bounded_async_wait(ev, limit) ? 0 : exit_timed_out;
  });
}

// event-set NAME MODE PARKED: waits until PARKED waits are parked on the event, then sets it.
SHMIO_PEER_COMMAND("event-set", args) {
  if (args.size() != 3) return exit_usage;
  asio::io_context io;
  named_event ev(io.get_executor(), shmio::open_only, args[0], mode_of(args[1]));
  if (!wait_until_parked(args[0], std::stoul(args[2]))) return exit_never_parked;
  ev.set();
  return 0;
}

// event-count NAME ACK STOP HOW: counts the releases of the auto-reset event NAME, setting the
// auto-reset event ACK after each one. A release that finds the manual-reset event STOP set is
// acknowledged too but not counted, and ends the process. Exit code: the count, or 200 if a
// wait timed out (a release that never came: the waiter was stranded).
SHMIO_PEER_COMMAND("event-count", args) {
  if (args.size() != 4) return exit_usage;
  constexpr int exit_stranded = 200;
  asio::io_context io;
  named_event ev(io.get_executor(), shmio::open_only, args[0], event_mode::auto_reset);
  named_event ack(io.get_executor(), shmio::open_only, args[1], event_mode::auto_reset);
  named_event stop(io.get_executor(), shmio::open_only, args[2], event_mode::manual_reset);
  if (args[3] == "sync") {
    for (int count = 0;;) {
      if (!ev.wait(wait_bound)) return exit_stranded;
      const bool last = stop.is_set();
      ack.set();
      if (last) return count;
      ++count;
    }
  }
  return run_coroutine(io, [&]() -> asio::awaitable<int> {
    for (int count = 0;;) {
      if (!co_await bounded_async_wait(ev, wait_bound)) co_return exit_stranded;
      const bool last = stop.is_set();
      ack.set();
      if (last) co_return count;
      ++count;
    }
  });
}

// event-pong PING PONG ROUNDS HOW STRATEGY: ROUNDS times, waits for the auto-reset event PING
// and sets the auto-reset event PONG. 1 if any wait timed out.
SHMIO_PEER_COMMAND("event-pong", args) {
  if (args.size() != 5) return exit_usage;
  asio::io_context io;
  const auto strategy = strategy_of(args[4]);
  named_event ping(io.get_executor(), shmio::open_only, args[0], event_mode::auto_reset, strategy);
  named_event pong(io.get_executor(), shmio::open_only, args[1], event_mode::auto_reset, strategy);
  const long rounds = std::stol(args[2]);
  if (args[3] == "sync") {
    for (long i = 0; i < rounds; ++i) {
      if (!ping.wait(wait_bound)) return exit_timed_out;
      pong.set();
    }
    return 0;
  }
  return run_coroutine(io, [&]() -> asio::awaitable<int> {
    for (long i = 0; i < rounds; ++i) {
      if (!co_await bounded_async_wait(ping, wait_bound)) co_return exit_timed_out;
      pong.set();
    }
    co_return 0;
  });
}
