// Tests of shmio::named_event: blocking and asynchronous waits, every completion token,
// cancellation, and waits between processes (peer commands in tests/peer_event.cpp).
#include <unistd.h>

#include <asio/bind_cancellation_slot.hpp>
#include <asio/bind_executor.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/experimental/deferred.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/use_future.hpp>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <exception>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "shmio/detail/layout.hpp"
#include "shmio/detail/names.hpp"
#include "shmio/named_event.hpp"
#include "shmio/segment.hpp"
#include "support.hpp"

namespace {

using namespace std::chrono_literals;
using namespace asio::experimental::awaitable_operators;
using shmio::event_mode;
using shmio::named_event;
using shmio::test::child;
using shmio::test::closed_handle_completions;
using shmio::test::eventually;
using shmio::test::peer_path;
using shmio::test::run_until;
using shmio::test::run_until_idle;
using shmio::test::scoped_name;
using steady = std::chrono::steady_clock;
namespace layout = shmio::detail::layout;

// Every bounded wait in these tests uses this: far longer than anything should take, so that
// only a lost wake-up (or a hang) reaches it.
constexpr auto bound = 10s;

const char* mode_arg(event_mode m) {
  return m == event_mode::manual_reset ? "manual" : "auto";
}

std::string mode_name(event_mode m) {
  return m == event_mode::manual_reset ? "manual_reset" : "auto_reset";
}

// A test-only look at an event's shared wait queue: how many waits are parked on it, and which
// slots are held. Lets a test wait until a waiter (in any process) has really parked, without
// sleeping for an arbitrary time.
class queue_probe {
 public:
  explicit queue_probe(std::string_view name)
      : seg_(shmio::open_only, name, shmio::object_kind::event) {}

  const layout::wait_queue& queue() const {
    return reinterpret_cast<const layout::event_state*>(seg_.body().data())->waiters;
  }
  // Armed slots count in the high half of `parked`, those of async waits and of blocking
  // sleepers alike; blocking waits that found no slot in the low half.
  std::uint64_t async_parked() const { return (queue().parked.load() >> 32) - sleepers(true); }
  std::uint64_t blocking_parked() const {
    return (queue().parked.load() & 0xffffffffu) + sleepers(true);
  }
  std::uint64_t parked() const { return async_parked() + blocking_parked(); }
  unsigned held_slots() const { return shmio::test::held_slots(queue()); }
  /// Slots held by blocking waits (only the armed ones with `armed_only`).
  unsigned sleepers(bool armed_only = false) const {
    unsigned n = 0;
    for (const auto& s : queue().slots)
      n += (s.doorbell.load() & layout::slot_sleeper_bit) != 0 && (!armed_only || s.armed.load());
    return n;
  }

 private:
  shmio::segment seg_;
};

// Collects the completions of async waits.
struct completions {
  int calls = 0;
  std::error_code last;
  auto handler() {
    return [this](std::error_code ec) {
      ++calls;
      last = ec;
    };
  }
};

// A one-wait coroutine step bounded by `limit`: true if the event let it through.
asio::awaitable<bool> bounded_async_wait(named_event& ev, std::chrono::milliseconds limit) {
  asio::steady_timer timer(co_await asio::this_coro::executor, limit);
  auto r = co_await (ev.async_wait(asio::use_awaitable) || timer.async_wait(asio::use_awaitable));
  co_return r.index() == 0;
}

// Runs a coroutine to completion on `io`, rethrowing what it threw.
template <class Fn>
void run_coroutine(asio::io_context& io, Fn coroutine, std::chrono::milliseconds limit = bound) {
  std::exception_ptr failure;
  bool finished = false;
  asio::co_spawn(io, std::move(coroutine), [&](std::exception_ptr e) {
    failure = e;
    finished = true;
  });
  REQUIRE(run_until_idle(io, limit));
  REQUIRE(finished);
  if (failure) std::rethrow_exception(failure);
}

}  // namespace

// ---- blocking waits ------------------------------------------------------------------------

TEST_CASE("a wait on a set event returns true at once", "[event]") {
  const event_mode mode = GENERATE(event_mode::auto_reset, event_mode::manual_reset);
  CAPTURE(mode_name(mode));
  asio::io_context io;
  scoped_name name("event");
  named_event ev(io.get_executor(), shmio::create_only, name, mode, true);
  const auto start = steady::now();
  CHECK(ev.wait(bound));
  CHECK(steady::now() - start < bound / 2);
}

TEST_CASE("a wait on a clear event returns false once its timeout has passed", "[event]") {
  const event_mode mode = GENERATE(event_mode::auto_reset, event_mode::manual_reset);
  CAPTURE(mode_name(mode));
  asio::io_context io;
  scoped_name name("event");
  named_event ev(io.get_executor(), shmio::create_only, name, mode);
  const auto timeout = 150ms;
  const auto start = steady::now();
  CHECK_FALSE(ev.wait(timeout));
  const auto elapsed = steady::now() - start;
  CHECK(elapsed >= timeout);
  CHECK(elapsed < 5s);  // only "it did return": the VM is too noisy for a tighter bound
  CHECK_FALSE(ev.is_set());
}

TEST_CASE("wait(0) polls the event without blocking", "[event]") {
  asio::io_context io;
  scoped_name name("event");
  named_event ev(io.get_executor(), shmio::create_only, name, event_mode::auto_reset);
  CHECK_FALSE(ev.wait(0ms));
  ev.set();
  CHECK(ev.wait(0ms));
  CHECK_FALSE(ev.wait(0ms));
}

TEST_CASE("a manual-reset event lets every wait through until reset", "[event]") {
  asio::io_context io;
  scoped_name name("event");
  named_event ev(io.get_executor(), shmio::create_only, name, event_mode::manual_reset);
  ev.set();
  for (int i = 0; i < 100; ++i)
    REQUIRE(ev.wait(0ms));
  CHECK(ev.wait(bound));
  CHECK(ev.is_set());
  ev.reset();
  CHECK_FALSE(ev.is_set());
  CHECK_FALSE(ev.wait(0ms));
}

TEST_CASE("an auto-reset event is cleared by the one wait it lets through", "[event]") {
  asio::io_context io;
  scoped_name name("event");
  named_event ev(io.get_executor(), shmio::create_only, name, event_mode::auto_reset, true);
  CHECK(ev.is_set());
  CHECK(ev.wait(bound));
  CHECK_FALSE(ev.is_set());
  CHECK_FALSE(ev.wait(20ms));
}

TEST_CASE("sets of an auto-reset event are not counted", "[event]") {
  asio::io_context io;
  scoped_name name("event");
  named_event ev(io.get_executor(), shmio::create_only, name, event_mode::auto_reset);
  ev.set();
  ev.set();
  ev.set();
  CHECK(ev.wait(0ms));
  CHECK_FALSE(ev.wait(0ms));
}

TEST_CASE("is_set does not consume an auto-reset signal", "[event]") {
  asio::io_context io;
  scoped_name name("event");
  named_event ev(io.get_executor(), shmio::create_only, name, event_mode::auto_reset);
  CHECK_FALSE(ev.is_set());
  ev.set();
  for (int i = 0; i < 10; ++i)
    REQUIRE(ev.is_set());
  CHECK(ev.wait(0ms));
  CHECK_FALSE(ev.is_set());
}

TEST_CASE("reset clears a set event of either mode", "[event]") {
  const event_mode mode = GENERATE(event_mode::auto_reset, event_mode::manual_reset);
  CAPTURE(mode_name(mode));
  asio::io_context io;
  scoped_name name("event");
  named_event ev(io.get_executor(), shmio::create_only, name, mode, true);
  ev.reset();
  CHECK_FALSE(ev.is_set());
  CHECK_FALSE(ev.wait(0ms));
  ev.reset();  // resetting a clear event is harmless
  CHECK_FALSE(ev.is_set());
}

TEST_CASE("handles opened on one name share the event", "[event]") {
  asio::io_context io;
  scoped_name name("event");
  named_event a(io.get_executor(), shmio::create_only, name, event_mode::auto_reset);
  named_event b(io.get_executor(), shmio::open_only, name, event_mode::auto_reset);
  // initially_set applies only to a creator: this one opens the existing, clear event.
  named_event c(io.get_executor(), shmio::open_or_create, name, event_mode::auto_reset, true);
  CHECK(a.name() == name.str());
  CHECK(b.mode() == event_mode::auto_reset);
  CHECK_FALSE(c.is_set());
  a.set();
  CHECK(b.is_set());
  CHECK(c.wait(0ms));
  CHECK_FALSE(a.is_set());
  CHECK_FALSE(b.wait(0ms));
}

TEST_CASE("opening an event with the other mode fails with incompatible", "[event]") {
  const event_mode mode = GENERATE(event_mode::auto_reset, event_mode::manual_reset);
  const event_mode other =
      mode == event_mode::auto_reset ? event_mode::manual_reset : event_mode::auto_reset;
  CAPTURE(mode_name(mode));
  asio::io_context io;
  scoped_name name("event");
  named_event ev(io.get_executor(), shmio::create_only, name, mode);

  try {
    named_event wrong(io.get_executor(), shmio::open_only, name, other);
    FAIL("opened with the wrong mode");
  } catch (const shmio::error& e) {
    CHECK(e.code() == shmio::errc::incompatible);
  }
  std::error_code ec;
  named_event wrong(io.get_executor(), shmio::open_or_create, name, other, false, {}, ec);
  CHECK(ec == shmio::errc::incompatible);
  CHECK_FALSE(wrong.is_open());
}

TEST_CASE("opening an event that does not exist fails with not_found", "[event]") {
  asio::io_context io;
  scoped_name name("event");
  try {
    named_event ev(io.get_executor(), shmio::open_only, name, event_mode::auto_reset);
    FAIL("opened a missing event");
  } catch (const shmio::error& e) {
    CHECK(e.code() == shmio::errc::not_found);
  }
  std::error_code ec;
  named_event ev(io.get_executor(), shmio::open_only, name, event_mode::manual_reset, {}, ec);
  CHECK(ec == shmio::errc::not_found);
  CHECK_FALSE(ev.is_open());
}

TEST_CASE("creating an event whose name is taken fails with already_exists", "[event]") {
  asio::io_context io;
  scoped_name name("event");
  named_event ev(io.get_executor(), shmio::create_only, name, event_mode::auto_reset);
  std::error_code ec;
  named_event again(io.get_executor(), shmio::create_only, name, event_mode::auto_reset, false, {},
                    ec);
  CHECK(ec == shmio::errc::already_exists);
  CHECK_FALSE(again.is_open());
}

TEST_CASE("a wait without a time limit returns when another thread sets the event", "[event]") {
  const std::chrono::milliseconds forever =
      GENERATE(std::chrono::milliseconds(-1), std::chrono::milliseconds::max());
  CAPTURE(forever.count());
  asio::io_context io;
  scoped_name name("event");
  named_event ev(io.get_executor(), shmio::create_only, name, event_mode::auto_reset);
  queue_probe probe(name);
  std::atomic<bool> parked{false};
  std::thread setter([&] {
    parked = eventually([&] { return probe.blocking_parked() >= 1; });
    ev.set();
  });
  const bool taken = ev.wait(forever);
  setter.join();
  CHECK(parked);
  CHECK(taken);
  CHECK_FALSE(ev.is_set());
}

TEST_CASE("a blocking wait parks without a slot when every slot is held, and a set still wakes it",
          "[event]") {
  asio::io_context io;
  scoped_name name("event");
  named_event ev(io.get_executor(), shmio::create_only, name, event_mode::auto_reset);
  queue_probe probe(name);
  // Every handle holds one slot for its async waits: these take the rest.
  std::vector<std::unique_ptr<named_event>> hoarders;
  while (probe.held_slots() < shmio::detail::layout::wait_slot_count)
    hoarders.push_back(std::make_unique<named_event>(io.get_executor(), shmio::open_only, name,
                                                     event_mode::auto_reset));
  std::atomic<bool> counted{false};
  std::thread setter([&] {
    // Counted in the low half of `parked`, the sleepers on futex_seq, and in no slot.
    counted = eventually([&] { return (probe.queue().parked.load() & 0xffffffffu) == 1; });
    counted = counted && probe.sleepers() == 0;
    ev.set();
  });
  const bool taken = ev.wait(std::chrono::milliseconds(-1));
  setter.join();
  CHECK(counted);
  CHECK(taken);
  CHECK(probe.queue().parked.load() == 0);
}

TEST_CASE("a blocking wait frees its slot when it returns, woken or timed out", "[event]") {
  asio::io_context io;
  scoped_name name("event");
  named_event ev(io.get_executor(), shmio::create_only, name, event_mode::auto_reset);
  queue_probe probe(name);
  CHECK_FALSE(ev.wait(std::chrono::milliseconds(20)));  // parks (in a slot), times out
  CHECK(probe.sleepers() == 0);
  CHECK(probe.parked() == 0);
  std::thread setter([&] {
    if (eventually([&] { return probe.sleepers(true) == 1; })) ev.set();
  });
  const bool taken = ev.wait(std::chrono::milliseconds(10'000));
  setter.join();
  CHECK(taken);
  CHECK(probe.sleepers() == 0);
  CHECK(probe.parked() == 0);
  CHECK(probe.held_slots() == 1);  // ev's own, for its async waits
}

TEST_CASE("a closed event reports errors instead of waiting", "[event]") {
  asio::io_context io;
  scoped_name name("event");
  named_event ev(io.get_executor(), shmio::create_only, name, event_mode::manual_reset, true);
  ev.close();
  CHECK_FALSE(ev.is_open());
  CHECK_FALSE(ev.is_set());
  ev.set();  // no-ops, not crashes
  ev.reset();
  std::error_code ec;
  CHECK_FALSE(ev.wait(bound, ec));
  CHECK(ec);
  CHECK_THROWS_AS(ev.wait(bound), std::system_error);
}

TEST_CASE("a closed event keeps its executor: a plain handler runs inside io.run()", "[event]") {
  asio::io_context io;
  scoped_name name("event");
  named_event ev(io.get_executor(), shmio::create_only, name, event_mode::auto_reset);
  named_event moved(std::move(ev));
  moved.close();
  CHECK(ev.get_executor() == named_event::executor_type(io.get_executor()));
  CHECK(moved.get_executor() == named_event::executor_type(io.get_executor()));
  closed_handle_completions closed;
  ev.async_wait(closed.handler());
  moved.async_wait(closed.handler());
  CHECK(closed.calls == 0);
  REQUIRE(run_until(io, [&] { return closed.calls == 2; }));
  CHECK(closed.other_errors == 0);
  CHECK(closed.on_this_thread);
}

// ---- asynchronous waits, one process -------------------------------------------------------

TEST_CASE("async_wait completes a callback with success once the event is set", "[event][async]") {
  asio::io_context io;
  scoped_name name("event");
  named_event ev(io.get_executor(), shmio::create_only, name, event_mode::auto_reset);
  completions done;
  ev.async_wait(done.handler());
  ev.set();
  REQUIRE(run_until_idle(io));
  CHECK(done.calls == 1);
  CHECK_FALSE(done.last);
  CHECK_FALSE(ev.is_set());  // the wait took the signal
}

TEST_CASE("async_wait with use_future completes the future while run() runs in a thread",
          "[event][async]") {
  asio::io_context io;
  scoped_name name("event");
  named_event ev(io.get_executor(), shmio::create_only, name, event_mode::manual_reset);
  queue_probe probe(name);
  std::future<void> f = ev.async_wait(asio::use_future);
  std::thread runner([&] { io.run_for(bound); });
  CHECK(f.wait_for(0s) == std::future_status::timeout);
  REQUIRE(eventually([&] { return probe.async_parked() >= 1; }));
  ev.set();
  REQUIRE(f.wait_for(bound) == std::future_status::ready);
  CHECK_NOTHROW(f.get());
  runner.join();
  CHECK(io.stopped());
}

TEST_CASE("a deferred async_wait starts only when invoked, with the token given then",
          "[event][async]") {
  asio::io_context io;
  scoped_name name("event");
  named_event ev(io.get_executor(), shmio::create_only, name, event_mode::auto_reset, true);

  auto first = ev.async_wait(asio::experimental::deferred);
  auto second = ev.async_wait(asio::experimental::deferred);
  CHECK(ev.is_set());  // nothing started, nothing taken
  REQUIRE(run_until_idle(io));
  CHECK(ev.is_set());

  completions done;
  std::move(first)(done.handler());
  REQUIRE(run_until_idle(io));
  CHECK(done.calls == 1);
  CHECK_FALSE(done.last);
  CHECK_FALSE(ev.is_set());

  bool resumed = false;
  run_coroutine(io, [&]() -> asio::awaitable<void> {
    asio::post(co_await asio::this_coro::executor, [&] { ev.set(); });
    co_await std::move(second)(asio::use_awaitable);
    resumed = true;
  });
  CHECK(resumed);
  CHECK_FALSE(ev.is_set());
}

TEST_CASE("async_wait with use_awaitable resumes the coroutine when the event is set",
          "[event][async]") {
  asio::io_context io;
  scoped_name name("event");
  named_event ev(io.get_executor(), shmio::create_only, name, event_mode::auto_reset);
  int resumed = 0;
  run_coroutine(io, [&]() -> asio::awaitable<void> {
    for (int i = 0; i < 3; ++i) {
      // Set after the wait has parked: the post runs once the coroutine is suspended.
      asio::post(co_await asio::this_coro::executor, [&] { ev.set(); });
      co_await ev.async_wait(asio::use_awaitable);
      ++resumed;
    }
  });
  CHECK(resumed == 3);
  CHECK_FALSE(ev.is_set());
}

TEST_CASE("async_wait with as_tuple delivers success and abort as values", "[event][async]") {
  asio::io_context io;
  scoped_name name("event");
  named_event ev(io.get_executor(), shmio::create_only, name, event_mode::auto_reset, true);
  std::error_code first, second;
  run_coroutine(io, [&]() -> asio::awaitable<void> {
    const auto tuple_token = asio::experimental::as_tuple(asio::use_awaitable);
    std::tie(first) = co_await ev.async_wait(tuple_token);
    asio::cancellation_signal signal;
    asio::post(co_await asio::this_coro::executor,
               [&] { signal.emit(asio::cancellation_type::terminal); });
    std::tie(second) =
        co_await ev.async_wait(asio::bind_cancellation_slot(signal.slot(), tuple_token));
  });
  CHECK_FALSE(first);
  CHECK(second == asio::error::operation_aborted);
}

TEST_CASE("async_wait never completes inside the initiating call, even on a set event",
          "[event][async]") {
  const event_mode mode = GENERATE(event_mode::auto_reset, event_mode::manual_reset);
  CAPTURE(mode_name(mode));
  asio::io_context io;
  scoped_name name("event");
  named_event ev(io.get_executor(), shmio::create_only, name, mode, true);
  completions done;
  ev.async_wait(done.handler());
  CHECK(done.calls == 0);
  ev.async_wait(done.handler());
  CHECK(done.calls == 0);
  if (mode == event_mode::auto_reset) ev.set();  // for the second wait
  REQUIRE(run_until_idle(io));
  CHECK(done.calls == 2);
  CHECK_FALSE(done.last);
}

TEST_CASE("run() keeps running while a wait is pending and returns once it has completed",
          "[event][async]") {
  asio::io_context io;
  scoped_name name("event");
  named_event ev(io.get_executor(), shmio::create_only, name, event_mode::auto_reset);
  queue_probe probe(name);
  completions done;
  ev.async_wait(done.handler());
  std::atomic<bool> parked{false};
  std::thread setter([&] {
    parked = eventually([&] { return probe.async_parked() >= 1; });
    ev.set();
  });
  const bool idle = run_until_idle(io);  // returns early only if run() wrongly ran out of work
  setter.join();
  CHECK(parked);
  CHECK(idle);
  CHECK(done.calls == 1);
  CHECK_FALSE(done.last);
  CHECK(probe.async_parked() == 0);
}

// Between two parks a handle keeps watching its doorbell while its handlers keep using it;
// once they stop, nothing may be left to keep run() going. The last wait is cancelled, so no
// ring completes the doorbell wait for it: the handle has to stop watching by itself.
TEST_CASE("run() returns after a parked wait, waits that complete at once and a cancelled wait",
          "[event][async]") {
  asio::io_context io;
  scoped_name name("event");
  named_event ev(io.get_executor(), shmio::create_only, name, event_mode::auto_reset);
  queue_probe probe(name);
  constexpr int immediate = 40;  // more trips through the queue than the handle looks back
  std::atomic<int> completed{0};
  std::error_code last;
  std::exception_ptr failure;
  asio::cancellation_signal stop;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        co_await ev.async_wait(asio::use_awaitable);  // parks: set by the thread below
        ++completed;
        for (int i = 0; i < immediate; ++i) {
          ev.set();
          co_await ev.async_wait(asio::use_awaitable);
          ++completed;
        }
        // Parks again: cancelled by the thread below.
        std::tie(last) = co_await ev.async_wait(asio::bind_cancellation_slot(
            stop.slot(), asio::experimental::as_tuple(asio::use_awaitable)));
        ++completed;
      },
      [&](std::exception_ptr e) { failure = e; });
  std::atomic<int> steps{0};
  std::thread driver([&] {
    if (!eventually([&] { return probe.async_parked() >= 1; })) return;
    ev.set();
    ++steps;
    if (!eventually([&] { return completed == immediate + 1 && probe.async_parked() >= 1; }))
      return;
    asio::post(io, [&] { stop.emit(asio::cancellation_type::terminal); });
    ++steps;
  });
  const bool idle = run_until_idle(io);  // false if the handle kept watching
  driver.join();
  CHECK(steps == 2);
  CHECK(idle);
  CHECK_FALSE(failure);
  CHECK(completed == immediate + 2);
  CHECK(last == asio::error::operation_aborted);
  CHECK(probe.async_parked() == 0);
}

TEST_CASE("a pending wait keeps its handler's own executor running", "[event][async]") {
  asio::io_context io;   // the event's executor
  asio::io_context io2;  // the handler's
  scoped_name name("event");
  named_event ev(io.get_executor(), shmio::create_only, name, event_mode::auto_reset);
  queue_probe probe(name);
  completions done;
  ev.async_wait(asio::bind_executor(io2, done.handler()));
  std::thread runner([&] { io.run_for(bound); });
  std::atomic<bool> parked{false};
  std::thread setter([&] {
    parked = eventually([&] { return probe.async_parked() >= 1; });
    ev.set();
  });
  // Without the wait's tracked work, io2 would have nothing to do and return at once.
  const bool idle = run_until_idle(io2);
  setter.join();
  runner.join();
  CHECK(parked);
  CHECK(idle);
  CHECK(done.calls == 1);
  CHECK_FALSE(done.last);
  CHECK(io.stopped());
}

TEST_CASE("several pending waits on one handle: auto-reset releases one per set, manual all",
          "[event][async]") {
  asio::io_context io;
  scoped_name auto_name("event"), manual_name("event");
  named_event autos(io.get_executor(), shmio::create_only, auto_name, event_mode::auto_reset);
  named_event manual(io.get_executor(), shmio::create_only, manual_name, event_mode::manual_reset);
  completions a, m;
  for (int i = 0; i < 3; ++i) {
    autos.async_wait(a.handler());
    manual.async_wait(m.handler());
  }
  manual.set();
  autos.set();
  REQUIRE(run_until(io, [&] { return m.calls == 3 && a.calls == 1; }));
  CHECK(manual.is_set());
  for (int released = 1; released < 3; ++released) {
    CHECK(a.calls == released);
    autos.set();
    REQUIRE(run_until(io, [&] { return a.calls == released + 1; }));
  }
  REQUIRE(run_until_idle(io));
  CHECK(a.calls == 3);
  CHECK(m.calls == 3);
  CHECK_FALSE(a.last);
  CHECK_FALSE(m.last);
  CHECK_FALSE(autos.is_set());
}

TEST_CASE("a set reaches async waits on more handles than the wait queue has slots",
          "[event][async]") {
  const event_mode mode = GENERATE(event_mode::auto_reset, event_mode::manual_reset);
  CAPTURE(mode_name(mode));
  asio::io_context io;
  scoped_name name("event");
  std::vector<std::unique_ptr<named_event>> handles;
  handles.push_back(
      std::make_unique<named_event>(io.get_executor(), shmio::create_only, name, mode));
  const std::size_t count = shmio::detail::layout::wait_slot_count + 8;
  while (handles.size() < count)
    handles.push_back(
        std::make_unique<named_event>(io.get_executor(), shmio::open_only, name, mode));
  completions done;
  for (auto& h : handles)
    h->async_wait(done.handler());
  const int expected = static_cast<int>(count);
  if (mode == event_mode::manual_reset) {
    handles.front()->set();
  } else {
    // One set per wait, each once the previous one was taken, so that none coalesce.
    for (int i = 0; i < expected; ++i) {
      handles.front()->set();
      REQUIRE(run_until(io, [&] { return done.calls == i + 1; }));
    }
  }
  REQUIRE(run_until_idle(io));
  CHECK(done.calls == expected);
  CHECK_FALSE(done.last);
}

TEST_CASE("event || timer: the timer wins when the event is never set", "[event][async]") {
  asio::io_context io;
  scoped_name name("event");
  named_event ev(io.get_executor(), shmio::create_only, name, event_mode::auto_reset);
  queue_probe probe(name);
  std::size_t winner = 99;
  run_coroutine(io, [&]() -> asio::awaitable<void> {
    asio::steady_timer timer(co_await asio::this_coro::executor, 50ms);
    auto r = co_await (ev.async_wait(asio::use_awaitable) || timer.async_wait(asio::use_awaitable));
    winner = r.index();
  });
  CHECK(winner == 1);
  CHECK(probe.async_parked() == 0);  // the cancelled wait left the queue
  // ...and took nothing: a later signal stays for the next wait.
  ev.set();
  CHECK(ev.is_set());
  CHECK(ev.wait(0ms));
}

TEST_CASE("event || timer: the event wins when another thread sets it", "[event][async]") {
  asio::io_context io;
  scoped_name name("event");
  named_event ev(io.get_executor(), shmio::create_only, name, event_mode::auto_reset);
  queue_probe probe(name);
  std::atomic<bool> parked{false};
  std::thread setter([&] {
    parked = eventually([&] { return probe.async_parked() >= 1; });
    ev.set();
  });
  std::size_t winner = 99;
  run_coroutine(io, [&]() -> asio::awaitable<void> {
    asio::steady_timer timer(co_await asio::this_coro::executor, bound);
    auto r = co_await (ev.async_wait(asio::use_awaitable) || timer.async_wait(asio::use_awaitable));
    winner = r.index();
  });
  setter.join();
  CHECK(parked);
  CHECK(winner == 0);
  CHECK_FALSE(ev.is_set());
}

// ---- cancellation --------------------------------------------------------------------------

namespace {

// hybrid: an async wait first spins through the executor; park_only: it parks (arms its slot)
// inside async_wait. Cancellation and completion must behave the same in both phases.
shmio::wait_strategy phase_strategy(bool park_only) {
  return park_only ? shmio::wait_strategy::park_only() : shmio::wait_strategy::hybrid();
}

}  // namespace

TEST_CASE("a wait cancelled through its slot completes once with operation_aborted",
          "[event][async]") {
  const auto type = GENERATE(asio::cancellation_type::terminal, asio::cancellation_type::partial,
                             asio::cancellation_type::total);
  const bool park_only = GENERATE(false, true);
  CAPTURE(static_cast<unsigned>(type), park_only);
  asio::io_context io;
  scoped_name name("event");
  named_event ev(io.get_executor(), shmio::create_only, name, event_mode::auto_reset, false,
                 phase_strategy(park_only));
  queue_probe probe(name);
  asio::cancellation_signal signal;
  completions done;
  ev.async_wait(asio::bind_cancellation_slot(signal.slot(), done.handler()));
  if (park_only) CHECK(probe.async_parked() == 1);
  asio::post(io, [&] { signal.emit(type); });
  REQUIRE(run_until_idle(io));
  CHECK(done.calls == 1);
  CHECK(done.last == asio::error::operation_aborted);
  CHECK(probe.async_parked() == 0);
  // A second emit, after completion, must not complete it again.
  signal.emit(type);
  REQUIRE(run_until_idle(io));
  CHECK(done.calls == 1);
  // The cancelled wait took nothing.
  ev.set();
  CHECK(ev.is_set());
}

TEST_CASE("a wait cancelled before a set takes nothing: the signal goes to the next waiter",
          "[event][async]") {
  const bool park_only = GENERATE(false, true);
  CAPTURE(park_only);
  asio::io_context io;
  scoped_name name("event");
  named_event ev(io.get_executor(), shmio::create_only, name, event_mode::auto_reset, false,
                 phase_strategy(park_only));
  named_event other(io.get_executor(), shmio::open_only, name, event_mode::auto_reset,
                    phase_strategy(park_only));

  SECTION("no other waiter: the event stays set") {
    asio::cancellation_signal signal;
    completions cancelled;
    ev.async_wait(asio::bind_cancellation_slot(signal.slot(), cancelled.handler()));
    signal.emit(asio::cancellation_type::terminal);
    ev.set();
    REQUIRE(run_until_idle(io));
    CHECK(cancelled.calls == 1);
    CHECK(cancelled.last == asio::error::operation_aborted);
    CHECK(ev.is_set());
    CHECK(other.wait(0ms));
  }
  SECTION("a later wait on the same handle gets it") {
    asio::cancellation_signal signal;
    completions cancelled, next;
    ev.async_wait(asio::bind_cancellation_slot(signal.slot(), cancelled.handler()));
    ev.async_wait(next.handler());  // behind the first in line
    signal.emit(asio::cancellation_type::total);
    ev.set();
    REQUIRE(run_until_idle(io));
    CHECK(cancelled.calls == 1);
    CHECK(cancelled.last == asio::error::operation_aborted);
    CHECK(next.calls == 1);
    CHECK_FALSE(next.last);
    CHECK_FALSE(ev.is_set());
  }
  SECTION("a wait on another handle gets it") {
    asio::cancellation_signal signal;
    completions cancelled, next;
    ev.async_wait(asio::bind_cancellation_slot(signal.slot(), cancelled.handler()));
    other.async_wait(next.handler());
    ev.set();  // parked: rings both handles' doorbells; the cancel comes before either looks
    signal.emit(asio::cancellation_type::partial);
    REQUIRE(run_until_idle(io));
    CHECK(cancelled.calls == 1);
    CHECK(cancelled.last == asio::error::operation_aborted);
    CHECK(next.calls == 1);
    CHECK_FALSE(next.last);
    CHECK_FALSE(ev.is_set());
  }
}

TEST_CASE("an auto-reset signal taken for a wait whose handler is destroyed unrun is set again",
          "[event][async]") {
  // As a lock (lock_test.cpp): the signal went to nobody, so the next waiter gets it.
  const bool park_only = GENERATE(false, true);
  const std::string how = GENERATE("at once", "parked", "closed before it ran");
  CAPTURE(park_only, how);
  std::optional<asio::io_context> handler_io(std::in_place);  // never runs
  asio::io_context io;
  scoped_name name("event");
  named_event ev(io.get_executor(), shmio::create_only, name, event_mode::auto_reset, false,
                 phase_strategy(park_only));
  named_event other(io.get_executor(), shmio::open_only, name, event_mode::auto_reset,
                    phase_strategy(park_only));
  int ran = 0;
  std::error_code got;
  if (how != "parked") ev.set();
  ev.async_wait(asio::bind_executor(handler_io->get_executor(), [&](std::error_code ec) {
    ++ran;
    got = ec;
  }));
  if (how == "parked") {
    io.poll();
    other.set();
  }
  // Taken: the completion is on its way to handler_io.
  REQUIRE(run_until(io, [&] { return !ev.is_set(); }));
  if (how == "closed before it ran") {
    ev.close();  // then the handler runs: aborted, and the signal is not its
    handler_io->run();
    CHECK(ran == 1);
    CHECK(got == asio::error::operation_aborted);
  } else {
    handler_io.reset();
    CHECK(ran == 0);
  }
  CHECK(other.wait(0ms));
  CHECK_FALSE(other.is_set());  // once: the taker took it
}

TEST_CASE("closing the last handle removes the event's file while a completion is on its way",
          "[event][async]") {
  std::optional<asio::io_context> handler_io(std::in_place);  // never runs
  asio::io_context io;
  scoped_name name("event");
  std::error_code ec;
  const std::string path = shmio::detail::segment_path(name, ec);
  named_event ev(io.get_executor(), shmio::create_only, name, event_mode::auto_reset, true);
  ev.async_wait(asio::bind_executor(handler_io->get_executor(), [](std::error_code) {}));
  REQUIRE(run_until(io, [&] { return !ev.is_set(); }));  // taken, its claim on its way
  ev.close();
  CHECK(::access(path.c_str(), F_OK) != 0);
  handler_io.reset();  // the claim goes back into a mapping nobody else has: harmless
}

TEST_CASE("a cancellation emitted after the completion was queued does not complete it twice",
          "[event][async]") {
  const bool park_only = GENERATE(false, true);
  CAPTURE(park_only);
  asio::io_context io;
  scoped_name name("event");
  named_event ev(io.get_executor(), shmio::create_only, name, event_mode::auto_reset, false,
                 phase_strategy(park_only));
  asio::cancellation_signal signal;
  completions done;

  SECTION("the event was already set when the wait started") {
    ev.set();
    ev.async_wait(asio::bind_cancellation_slot(signal.slot(), done.handler()));
    signal.emit(asio::cancellation_type::terminal);
    REQUIRE(run_until_idle(io));
  }
  SECTION("the wait was pending at the set, and its completion waits in the handler's executor") {
    asio::io_context io2;
    ev.async_wait(
        asio::bind_cancellation_slot(signal.slot(), asio::bind_executor(io2, done.handler())));
    ev.set();
    REQUIRE(run_until_idle(io));  // the wait completes: its handler is now queued on io2
    CHECK(done.calls == 0);
    signal.emit(asio::cancellation_type::terminal);
    REQUIRE(run_until_idle(io2));
    REQUIRE(run_until_idle(io));
  }
  CHECK(done.calls == 1);
  CHECK_FALSE(done.last);
  CHECK_FALSE(ev.is_set());  // it took the signal
}

TEST_CASE("cancelling one of several pending waits leaves the others waiting for sets",
          "[event][async]") {
  asio::io_context io;
  scoped_name name("event");
  named_event ev(io.get_executor(), shmio::create_only, name, event_mode::auto_reset);
  asio::cancellation_signal signals[3];
  completions done[3];
  for (int i = 0; i < 3; ++i)
    ev.async_wait(asio::bind_cancellation_slot(signals[i].slot(), done[i].handler()));
  signals[1].emit(asio::cancellation_type::terminal);
  REQUIRE(run_until(io, [&] { return done[1].calls == 1; }));
  CHECK(done[1].last == asio::error::operation_aborted);
  CHECK(done[0].calls == 0);
  CHECK(done[2].calls == 0);

  ev.set();
  REQUIRE(run_until(io, [&] { return done[0].calls + done[2].calls == 1; }));
  ev.set();
  REQUIRE(run_until_idle(io));
  for (int i : {0, 2}) {
    CHECK(done[i].calls == 1);
    CHECK_FALSE(done[i].last);
  }
  CHECK(done[1].calls == 1);
  CHECK_FALSE(ev.is_set());
}

TEST_CASE("destroying the event aborts its pending waits and lets run() return", "[event][async]") {
  asio::io_context io;
  scoped_name name("event");
  std::optional<named_event> ev;
  ev.emplace(io.get_executor(), shmio::create_only, name, event_mode::auto_reset);
  completions done;
  ev->async_wait(done.handler());
  ev->async_wait(done.handler());
  ev.reset();
  REQUIRE(run_until_idle(io));
  CHECK(done.calls == 2);
  CHECK(done.last == asio::error::operation_aborted);
}

namespace {

// Runs `io` for a while, expecting the coroutine waiting on the manual-reset event `name` to be
// aborted. If the wait is still pending then, sets the event through a new handle so that the
// coroutine (which refers to the test's locals) can finish before the test's scope ends.
void run_then_release(asio::io_context& io, const scoped_name& name,
                      const std::optional<std::error_code>& result) {
  io.run_for(3s);  // an abort is posted at once: 3 s is only a bound
  CHECK(result.has_value());
  if (result) return;
  named_event again(io.get_executor(), shmio::open_only, name, event_mode::manual_reset);
  again.set();
  io.restart();
  io.run_for(bound);
}

}  // namespace

TEST_CASE("closing the event from a handler aborts a pending co_await", "[event][async]") {
  asio::io_context io;
  scoped_name name("event");
  named_event ev(io.get_executor(), shmio::create_only, name, event_mode::manual_reset);
  queue_probe probe(name);
  std::optional<std::error_code> result;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        asio::post(co_await asio::this_coro::executor, [&] { ev.close(); });
        try {
          co_await ev.async_wait(asio::use_awaitable);
          result = std::error_code();
        } catch (const std::system_error& e) {
          result = e.code();
        }
      },
      asio::detached);
  run_then_release(io, name, result);
  REQUIRE(result.has_value());
  CHECK(*result == asio::error::operation_aborted);
  CHECK_FALSE(ev.is_open());
}

TEST_CASE("destroying the event aborts a pending co_await", "[event][async]") {
  asio::io_context io;
  scoped_name name("event");
  std::optional<named_event> ev;
  ev.emplace(io.get_executor(), shmio::create_only, name, event_mode::manual_reset);
  std::optional<std::error_code> result;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        auto [ec] = co_await ev->async_wait(asio::experimental::as_tuple(asio::use_awaitable));
        result = ec;
      },
      asio::detached);
  queue_probe probe(name);
  REQUIRE(run_until(io, [&] { return probe.async_parked() >= 1; }));  // the coroutine's wait parked
  REQUIRE_FALSE(result.has_value());
  ev.reset();
  run_then_release(io, name, result);
  REQUIRE(result.has_value());
  CHECK(*result == asio::error::operation_aborted);
}

TEST_CASE("move-assigning over an event aborts its pending waits", "[event][async]") {
  asio::io_context io;
  scoped_name first("event"), second("event");
  named_event ev(io.get_executor(), shmio::create_only, first, event_mode::auto_reset);
  completions done;
  ev.async_wait(done.handler());
  ev = named_event(io.get_executor(), shmio::create_only, second, event_mode::manual_reset, true);
  REQUIRE(run_until_idle(io));
  CHECK(done.calls == 1);
  CHECK(done.last == asio::error::operation_aborted);
  CHECK(ev.name() == second.str());
  CHECK(ev.wait(0ms));
}

TEST_CASE("a deferred wait launched after close() fails and takes nothing", "[event][async]") {
  const bool set = GENERATE(false, true);
  CAPTURE(set);
  asio::io_context io;
  scoped_name name("event");
  named_event ev(io.get_executor(), shmio::create_only, name, event_mode::auto_reset, set);
  named_event other(io.get_executor(), shmio::open_only, name, event_mode::auto_reset);
  auto deferred_wait = ev.async_wait(asio::experimental::deferred);
  ev.close();
  completions done;
  // Bound to io: a closed handle no longer knows its executor.
  std::move(deferred_wait)(asio::bind_executor(io, done.handler()));
  REQUIRE(run_until_idle(io));
  CHECK(done.calls == 1);
  CHECK(done.last);              // the handle is closed: no wait through it
  CHECK(other.is_set() == set);  // an auto-reset signal stays for a live handle
}

TEST_CASE("a deferred wait launched while another thread closes the handle completes once",
          "[event][async]") {
  // The launch and close() race: the launch must neither throw nor lose its handler (nor read
  // what close() takes down), whichever comes first. The closing thread runs for the whole test
  // and waits, spinning, for each round; then one side or the other starts 0 to 2 us late, in
  // steps of 50 ns, so that rounds land all across the launch.
  asio::io_context io;
  scoped_name name("event");
  std::atomic<named_event*> target{nullptr};
  std::atomic<int> armed{-1};
  std::atomic<int> closed{-1};
  std::atomic<bool> stop{false};
  const auto close_delay = [](int round) {
    return std::chrono::nanoseconds(round % 2 == 0 ? (round / 2 % 40) * 50 : 0);
  };
  std::thread closer([&] {
    for (int round = 0; !stop.load(std::memory_order_acquire); ++round) {
      while (armed.load(std::memory_order_acquire) < round)
        if (stop.load(std::memory_order_acquire)) return;
      shmio::test::spin_for(close_delay(round));
      target.load(std::memory_order_acquire)->close();
      closed.store(round, std::memory_order_release);
    }
  });
  int thrown = 0;
  int lost = 0;
  for (int round = 0; round < 600; ++round) {
    named_event ev(io.get_executor(), shmio::create_only, name, event_mode::auto_reset, true);
    auto deferred_wait = ev.async_wait(asio::experimental::deferred);
    completions done;
    target.store(&ev, std::memory_order_release);
    armed.store(round, std::memory_order_release);
    if (round % 2 != 0) shmio::test::spin_for(std::chrono::nanoseconds((round / 2 % 40) * 50));
    try {
      std::move(deferred_wait)(done.handler());  // no executor of its own: the handle's
    } catch (const std::exception&) {
      ++thrown;
    }
    while (closed.load(std::memory_order_acquire) < round) {
    }
    REQUIRE(run_until_idle(io));
    lost += done.calls != 1;
  }
  stop.store(true, std::memory_order_release);
  closer.join();
  CHECK(thrown == 0);
  CHECK(lost == 0);
}

// ---- between processes ---------------------------------------------------------------------

TEST_CASE("a blocking wait is woken by a set from another process", "[event][process]") {
  const event_mode mode = GENERATE(event_mode::auto_reset, event_mode::manual_reset);
  CAPTURE(mode_name(mode));
  asio::io_context io;
  scoped_name name("event");
  named_event ev(io.get_executor(), shmio::create_only, name, mode);
  child setter({peer_path(), "event-set", name.str(), mode_arg(mode), "1"});
  CHECK(ev.wait(bound));
  CHECK(setter.wait() == 0);
  CHECK(ev.is_set() == (mode == event_mode::manual_reset));
}

TEST_CASE("an async wait is woken by a set from another process", "[event][process][async]") {
  const event_mode mode = GENERATE(event_mode::auto_reset, event_mode::manual_reset);
  CAPTURE(mode_name(mode));
  asio::io_context io;
  scoped_name name("event");
  named_event ev(io.get_executor(), shmio::create_only, name, mode);
  completions done;
  ev.async_wait(done.handler());
  child setter({peer_path(), "event-set", name.str(), mode_arg(mode), "1"});
  REQUIRE(run_until_idle(io));
  CHECK(done.calls == 1);
  CHECK_FALSE(done.last);
  CHECK(setter.wait() == 0);
}

TEST_CASE("a set in this process wakes a waiting process", "[event][process]") {
  const event_mode mode = GENERATE(event_mode::auto_reset, event_mode::manual_reset);
  const std::string how = GENERATE("sync", "async");
  CAPTURE(mode_name(mode), how);
  asio::io_context io;
  scoped_name name("event");
  named_event ev(io.get_executor(), shmio::create_only, name, mode);
  queue_probe probe(name);
  child waiter({peer_path(), "event-wait", name.str(), mode_arg(mode), how, "10000"});
  REQUIRE(eventually([&] { return probe.parked() >= 1; }));
  ev.set();
  CHECK(waiter.wait() == 0);
}

TEST_CASE("event || timer: the event wins when another process sets it",
          "[event][process][async]") {
  asio::io_context io;
  scoped_name name("event");
  named_event ev(io.get_executor(), shmio::create_only, name, event_mode::auto_reset);
  child setter({peer_path(), "event-set", name.str(), "auto", "1"});
  std::size_t winner = 99;
  run_coroutine(io, [&]() -> asio::awaitable<void> {
    asio::steady_timer timer(co_await asio::this_coro::executor, bound);
    auto r = co_await (ev.async_wait(asio::use_awaitable) || timer.async_wait(asio::use_awaitable));
    winner = r.index();
  });
  CHECK(winner == 0);
  CHECK(setter.wait() == 0);
}

TEST_CASE("an auto-reset set releases exactly one of two waiting processes", "[event][process]") {
  asio::io_context io;
  scoped_name name("event");
  named_event ev(io.get_executor(), shmio::create_only, name, event_mode::auto_reset);
  queue_probe probe(name);
  child a({peer_path(), "event-wait", name.str(), "auto", "sync", "10000"});
  child b({peer_path(), "event-wait", name.str(), "auto", "async", "10000"});
  REQUIRE(eventually([&] { return probe.parked() >= 2; }));
  ev.set();
  int first = -1, second = -1;
  REQUIRE(eventually([&] {
    first = a.wait(0ms);
    second = b.wait(0ms);
    return first >= 0 || second >= 0;
  }));
  // One took the signal and exited; the event is clear again, so the other cannot have had it
  // too: it is still running (-1).
  CAPTURE(first, second);
  CHECK(((first == 0 && second == -1) || (first == -1 && second == 0)));
  CHECK_FALSE(ev.is_set());
  ev.set();
  CHECK(a.wait() == 0);
  CHECK(b.wait() == 0);
}

TEST_CASE("a manual-reset set wakes every waiting process", "[event][process]") {
  asio::io_context io;
  scoped_name name("event");
  named_event ev(io.get_executor(), shmio::create_only, name, event_mode::manual_reset);
  queue_probe probe(name);
  std::vector<std::unique_ptr<child>> waiters;
  for (const char* how : {"sync", "sync", "async", "async"})
    waiters.push_back(std::make_unique<child>(
        std::vector<std::string>{peer_path(), "event-wait", name.str(), "manual", how, "10000"}));
  REQUIRE(eventually([&] { return probe.parked() >= waiters.size(); }));
  ev.set();
  for (auto& w : waiters)
    CHECK(w->wait() == 0);
  CHECK(ev.is_set());
}

TEST_CASE("several processes waiting on one auto-reset event are released one per set",
          "[event][process]") {
  asio::io_context io;
  scoped_name name("event");
  named_event ev(io.get_executor(), shmio::create_only, name, event_mode::auto_reset);
  queue_probe probe(name);
  std::vector<std::unique_ptr<child>> waiters;
  for (const char* how : {"sync", "async", "sync", "async"})
    waiters.push_back(std::make_unique<child>(
        std::vector<std::string>{peer_path(), "event-wait", name.str(), "auto", how, "10000"}));
  REQUIRE(eventually([&] { return probe.parked() >= waiters.size(); }));
  for (std::size_t i = 0; i < waiters.size(); ++i) {
    ev.set();
    // Set again only once a waiter has taken this signal, so that no two sets coalesce.
    REQUIRE(eventually([&] { return !ev.is_set(); }));
  }
  for (auto& w : waiters)
    CHECK(w->wait() == 0);
}

TEST_CASE("N auto-reset sets release exactly N waits among three processes, none stranded",
          "[event][process]") {
  const std::string how = GENERATE("sync", "async");
  CAPTURE(how);
  constexpr int sets = 40;
  asio::io_context io;
  scoped_name name("event"), ack_name("ack"), stop_name("stop");
  named_event ev(io.get_executor(), shmio::create_only, name, event_mode::auto_reset);
  named_event ack(io.get_executor(), shmio::create_only, ack_name, event_mode::auto_reset);
  named_event stop(io.get_executor(), shmio::create_only, stop_name, event_mode::manual_reset);
  queue_probe probe(name);
  std::vector<std::unique_ptr<child>> waiters;
  for (int i = 0; i < 3; ++i)
    waiters.push_back(std::make_unique<child>(std::vector<std::string>{
        peer_path(), "event-count", name.str(), ack_name.str(), stop_name.str(), how}));
  REQUIRE(eventually([&] { return probe.parked() >= 3; }));
  for (int i = 0; i < sets; ++i) {
    ev.set();
    INFO("set " << i);
    REQUIRE(ack.wait(bound));  // a waiter got it: the next set cannot coalesce with this one
  }
  CHECK_FALSE(ev.is_set());
  // Release each waiter once more with `stop` set: it acknowledges and exits with its count.
  stop.set();
  for (std::size_t i = 0; i < waiters.size(); ++i) {
    ev.set();
    REQUIRE(ack.wait(bound));
  }
  int total = 0;
  for (auto& w : waiters) {
    const int count = w->wait();
    CHECK(count >= 0);
    CHECK(count <= sets);
    total += count;
  }
  CHECK(total == sets);
}

TEST_CASE("a waiter killed with kill -9 while parked does not keep a set from another waiter",
          "[event][process]") {
  const std::string victim_how = GENERATE("sync", "async");
  CAPTURE(victim_how);
  asio::io_context io;
  scoped_name name("event");
  named_event ev(io.get_executor(), shmio::create_only, name, event_mode::auto_reset);
  queue_probe probe(name);
  child victim({peer_path(), "event-wait", name.str(), "auto", victim_how, "-1"});
  REQUIRE(eventually([&] { return probe.parked() >= 1; }));
  // A blocking wait parks in a slot of its own, as an async one does.
  CHECK(probe.sleepers() == (victim_how == "sync" ? 1u : 0u));
  child survivor({peer_path(), "event-wait", name.str(), "auto", "async", "10000"});
  REQUIRE(eventually([&] { return probe.parked() >= 2; }));
  CHECK(victim.kill9() == 128 + SIGKILL);
  ev.set();
  CHECK(survivor.wait() == 0);
  CHECK_FALSE(ev.is_set());
  // The set found the dead owner (a doorbell nobody answers, or a sleeper's thread that is
  // gone): it disarmed the slot and freed it. This process's own handle still holds a slot, and
  // a sync victim's handle its unarmed one (the next claim that runs short of slots reclaims
  // it); the survivor gave its slot back when it closed.
  CHECK(probe.parked() == 0);
  CHECK(probe.sleepers() == 0);
  CHECK(probe.held_slots() == (victim_how == "sync" ? 2u : 1u));
  // And the event keeps working for the next waiter.
  child next({peer_path(), "event-wait", name.str(), "auto", "async", "10000"});
  REQUIRE(eventually([&] { return probe.async_parked() >= 1; }));
  ev.set();
  CHECK(next.wait() == 0);
}

// ---- ping-pong: many wake-ups in a row -----------------------------------------------------

namespace {

struct ping_pong_config {
  const char* this_side;  // "sync" or "async"
  const char* peer_side;  // "sync" or "async"
  const char* strategy;   // "hybrid", "park" or "spin" (see peer_event.cpp)
  shmio::wait_strategy ws;
  long rounds;
};

// Plays `rounds` of: set ping, wait for pong; the peer waits for ping and sets pong. Fails if any
// wait times out. A wake-up lost by the arm/re-check/ring protocol is still recovered by the
// waiter's rescue re-check (every 200 ms), so rounds that took about that long are counted too:
// a few may be scheduling noise, more are lost wake-ups.
void ping_pong(const ping_pong_config& cfg) {
  constexpr auto suspect = 150ms;  // below the rescue interval, far above a normal round
  // A bound for all the rounds: they take well under a second, but far longer on a loaded
  // machine (spinning waits yield their CPU to whatever else is runnable).
  constexpr auto whole_game = 120s;
  asio::io_context io;
  scoped_name ping_name("ping"), pong_name("pong");
  named_event ping(io.get_executor(), shmio::create_only, ping_name, event_mode::auto_reset, false,
                   cfg.ws);
  named_event pong(io.get_executor(), shmio::create_only, pong_name, event_mode::auto_reset, false,
                   cfg.ws);
  child peer({peer_path(), "event-pong", ping_name.str(), pong_name.str(),
              std::to_string(cfg.rounds), cfg.peer_side, cfg.strategy});
  long completed = 0;
  long slow_rounds = 0;
  steady::duration slowest{};
  auto timed = [&](steady::time_point t0) {
    const auto took = steady::now() - t0;
    slowest = std::max(slowest, took);
    slow_rounds += took >= suspect;
  };
  const auto start = steady::now();
  if (std::string(cfg.this_side) == "sync") {
    for (; completed < cfg.rounds; ++completed) {
      const auto t0 = steady::now();
      ping.set();
      if (!pong.wait(bound)) break;
      timed(t0);
    }
  } else {
    run_coroutine(
        io,
        [&]() -> asio::awaitable<void> {
          for (; completed < cfg.rounds; ++completed) {
            const auto t0 = steady::now();
            ping.set();
            if (!co_await bounded_async_wait(pong, bound)) break;
            timed(t0);
          }
        },
        whole_game);
  }
  const double seconds = std::chrono::duration<double>(steady::now() - start).count();
  const double slowest_ms = std::chrono::duration<double, std::milli>(slowest).count();
  INFO(completed << " rounds in " << seconds << " s; slowest round " << slowest_ms << " ms; "
                 << slow_rounds << " rounds took over 150 ms");
  CHECK(completed == cfg.rounds);
  CHECK(slow_rounds <= 2);
  CHECK(peer.wait() == 0);
  CHECK_FALSE(ping.is_set());
  CHECK_FALSE(pong.is_set());
}

}  // namespace

TEST_CASE("10 000 ping-pong rounds between two processes lose no wake-up (blocking waits)",
          "[event][process]") {
  ping_pong({"sync", "sync", "hybrid", shmio::wait_strategy::hybrid(), 10000});
}

TEST_CASE("10 000 ping-pong rounds lose no wake-up when this side co_awaits",
          "[event][process][async]") {
  ping_pong({"async", "sync", "hybrid", shmio::wait_strategy::hybrid(), 10000});
}

TEST_CASE("10 000 ping-pong rounds lose no wake-up when the peer co_awaits",
          "[event][process][async]") {
  ping_pong({"sync", "async", "hybrid", shmio::wait_strategy::hybrid(), 10000});
}

TEST_CASE("ping-pong works with wait_strategy::park_only()", "[event][process]") {
  const std::string this_side = GENERATE("sync", "async");
  CAPTURE(this_side);
  ping_pong({this_side.c_str(), "sync", "park", shmio::wait_strategy::park_only(), 10000});
}

TEST_CASE("ping-pong works with wait_strategy::spin_then_park()", "[event][process]") {
  const std::string this_side = GENERATE("sync", "async");
  CAPTURE(this_side);
  ping_pong({this_side.c_str(), "async", "spin",
             shmio::wait_strategy::spin_then_park(std::chrono::microseconds(20)), 10000});
}
