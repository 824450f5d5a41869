// Parked waits scale and cost nothing while idle: no fixed number of parked waiters per queue
// that decays into polling (the wait hub parks for the objects without a slot), no periodic
// re-check by default, and the opt-in safety re-check finds nothing to do in a normal run.

#include <sys/resource.h>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/use_awaitable.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "shmio/circular_buffer.hpp"
#include "shmio/detail/wait_hub.hpp"
#include "shmio/named_event.hpp"
#include "shmio/wait_strategy.hpp"
#include "support.hpp"

namespace {

using namespace std::chrono_literals;
using shmio::circular_buffer;
using shmio::test::child;
using shmio::test::eventually;
using shmio::test::scoped_name;
using shmio::test::signal_pipe;

constexpr std::chrono::milliseconds bound = shmio::test::default_bound;

// Voluntary ones only: each wake-up of a sleeping thread ends in one when it sleeps again,
// while involuntary ones count preemptions, which other processes' load makes.
long context_switches(int who) {
  rusage ru{};
  ::getrusage(who, &ru);
  return ru.ru_nvcsw;
}

// The process's CPU time, user and system.
std::chrono::microseconds cpu_time() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  auto us = [](const timeval& t) {
    return std::chrono::seconds(t.tv_sec) + std::chrono::microseconds(t.tv_usec);
  };
  return us(ru.ru_utime) + us(ru.ru_stime);
}

// ThreadSanitizer's runtime has a background thread of its own that wakes many times a second.
#if defined(__SANITIZE_THREAD__)
constexpr bool whole_process_is_ours = false;
#else
constexpr bool whole_process_is_ours = true;
#endif

// `count` handles on the ring `name`, each with one async_read pending on `io`; `done` counts
// the reads that completed with a message.
struct parked_readers {
  std::vector<std::unique_ptr<circular_buffer>> handles;
  std::vector<std::string> bufs;
  int done = 0;
  int failed = 0;
  parked_readers(asio::io_context& io, std::string_view name, int count,
                 shmio::wait_strategy strategy = {}) {
    bufs.assign(count, std::string(16, '\0'));
    for (int i = 0; i < count; ++i) {
      handles.push_back(
          std::make_unique<circular_buffer>(io.get_executor(), shmio::open_only, name, strategy));
      handles.back()->async_read(asio::buffer(bufs[i]), [this](std::error_code ec, std::size_t) {
        ec ? ++failed : ++done;
      });
    }
  }
};

}  // namespace

TEST_CASE("an idle process with 64 parked async reads makes almost no context switches",
          "[wait][idle]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer owner(io.get_executor(), shmio::create_only, name, 128, 16);
  // 64 handles on one ring: more than a queue has slots, so half of them park through the hub.
  // park_only: each read parks inside its initiation; poll() runs what that posted.
  parked_readers readers(io, name, 64, shmio::wait_strategy::park_only());
  io.poll();
  REQUIRE(readers.done == 0);
  REQUIRE(readers.failed == 0);
  // Each of the 33 reads through the hub has a group of its own (each handle maps the ring at
  // its own address), whose first arming pokes the hub thread: those passes are setup.
  REQUIRE(eventually([&] {
    const bool settled = shmio::detail::wait_hub::settled();
    return io.poll() == 0 && settled;  // and nothing it posted before is still to run
  }));
  // The thread that runs the io_context (where a periodic re-check or polling would wake), and
  // the process (the wait hub's thread too).
  const long thread_before = context_switches(RUSAGE_THREAD);
  const long process_before = context_switches(RUSAGE_SELF);
  const auto cpu_before = cpu_time();
  io.run_for(2s);
  const long thread_switches = context_switches(RUSAGE_THREAD) - thread_before;
  const long process_switches = context_switches(RUSAGE_SELF) - process_before;
  // And no thread spins instead of sleeping (which would make no voluntary switches).
  const auto cpu_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(cpu_time() - cpu_before).count();
  CAPTURE(thread_switches, process_switches, cpu_ms);
  CHECK(thread_switches <= 5);
  if (whole_process_is_ours) {
    CHECK(process_switches <= 5);
    CHECK(cpu_ms < 100);
  }
  CHECK(readers.done == 0);
  // And every one of them is woken by a message.
  for (int i = 0; i < 64; ++i)
    REQUIRE(owner.write(asio::buffer("x", 1), bound) == 1);
  REQUIRE(shmio::test::run_until(io, [&] { return readers.done == 64; }));
  CHECK(readers.failed == 0);
}

TEST_CASE("waits past a queue's slots are woken one message at a time", "[wait][hub]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer owner(io.get_executor(), shmio::create_only, name, 64, 16);
  constexpr int count = 48;  // 32 slots, 16 through the hub
  parked_readers readers(io, name, count, shmio::wait_strategy::park_only());
  io.poll();  // park_only: every read parked inside its initiation
  REQUIRE(readers.done == 0);
  for (int i = 1; i <= count; ++i) {
    CAPTURE(i);
    REQUIRE(owner.write(asio::buffer("x", 1), bound) == 1);
    REQUIRE(shmio::test::run_until(io, [&] { return readers.done == i; }));
  }
  CHECK(readers.failed == 0);
}

TEST_CASE("a wait the gate holds back before its object tried the hub does not poll",
          "[wait][hub]") {
  asio::io_context io;
  scoped_name name("ring");
  const auto strategy = shmio::wait_strategy::park_only();
  circular_buffer owner(io.get_executor(), shmio::create_only, name, 8, 16, strategy);
  // With the owner, 32 handles: every slot of both queues is taken at open.
  std::vector<std::unique_ptr<circular_buffer>> holders;
  for (int i = 0; i < 31; ++i)
    holders.push_back(
        std::make_unique<circular_buffer>(io.get_executor(), shmio::open_only, name, strategy));
  circular_buffer c(io.get_executor(), shmio::open_only, name, strategy);
  REQUIRE(owner.write(asio::buffer("a", 1), bound) == 1);

  const auto before = shmio::wait_statistics();
  std::string buf(16, '\0');
  bool first_done = false;
  std::error_code second_ec = asio::error::would_block;
  std::size_t second_n = 0;
  c.async_read_in_place(
      [&](std::span<const std::byte>) {
        // The message's node is still claimed: this read is held back by the gate and parks
        // unarmed, before `c` ever tried the hub. A wait without a slot or the hub polls every
        // millisecond; spend longer than that here, so that such a timer would be due.
        c.async_read(asio::buffer(buf), [&](std::error_code ec, std::size_t n) {
          second_ec = ec;
          second_n = n;
        });
        const auto until = std::chrono::steady_clock::now() + 5ms;
        while (std::chrono::steady_clock::now() < until) {
        }
      },
      [&](std::error_code ec, std::size_t) {
        CHECK_FALSE(ec);
        first_done = true;
      });
  REQUIRE(shmio::test::run_until(io, [&] { return first_done; }));
  // Whatever timer the park set is due by now, and the reactor is polled here.
  for (int i = 0; i < 4; ++i)
    io.poll();
  CHECK(shmio::wait_statistics().slotless_rechecks == before.slotless_rechecks);
  CHECK(second_ec == asio::error::would_block);  // still parked: nothing was written
  // The gate's opening armed it through the hub: a write wakes it.
  REQUIRE(owner.write(asio::buffer("b", 1), bound) == 1);
  REQUIRE(shmio::test::run_until(io, [&] { return second_ec != asio::error::would_block; }));
  CHECK_FALSE(second_ec);
  CHECK(second_n == 1);
  CHECK(buf[0] == 'b');
  CHECK(shmio::wait_statistics().slotless_rechecks == before.slotless_rechecks);
}

TEST_CASE("256 parked async readers spread over 4 processes all complete",
          "[wait][hub][multiprocess]") {
  scoped_name name("ring");
  asio::io_context io;
  circular_buffer owner(io.get_executor(), shmio::create_only, name, 512, 16);
  constexpr int processes = 4;
  constexpr int per_process = 64;
  std::vector<std::unique_ptr<signal_pipe>> ready;
  std::vector<std::unique_ptr<child>> children;
  for (int p = 0; p < processes; ++p) {
    ready.push_back(std::make_unique<signal_pipe>());
    signal_pipe& r = *ready.back();
    children.push_back(std::make_unique<child>([&name, &r] {
      asio::io_context cio;
      parked_readers readers(cio, name, per_process, shmio::wait_strategy::park_only());
      cio.poll();  // park_only: every read parked inside its initiation
      if (readers.done != 0) return 2;
      r.notify();
      if (!shmio::test::run_until(cio, [&] { return readers.done == per_process; })) return 3;
      return readers.failed == 0 ? 0 : 4;
    }));
  }
  for (auto& r : ready)
    REQUIRE(r->wait() == 1);
  for (int i = 0; i < processes * per_process; ++i)
    REQUIRE(owner.write(asio::buffer("x", 1), bound) == 1);
  for (auto& c : children)
    CHECK(c->wait() == 0);
}

TEST_CASE("the safety re-check, when enabled, finds nothing to do in a normal run",
          "[wait][safety]") {
  asio::io_context io;
  scoped_name name("ring");
  shmio::wait_strategy strategy = shmio::wait_strategy::park_only();
  strategy.safety_recheck = 2ms;
  circular_buffer a(io.get_executor(), shmio::create_only, name, 4, 16, strategy);
  circular_buffer b(io.get_executor(), shmio::open_only, name, strategy);
  const auto before = shmio::wait_statistics();
  // A parked reader woken by messages that come while the re-check runs underneath: every
  // wake-up must have come from its ring, none from the re-check.
  int got = 0;
  constexpr int rounds = 200;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        std::string buf(16, '\0');
        for (; got < rounds; ++got)
          co_await a.async_read(asio::buffer(buf), asio::use_awaitable);
      },
      asio::detached);
  // Half the messages while the reader is parked long enough for re-checks to run.
  for (int i = 0; i < rounds; ++i) {
    if (i % 2 == 0) io.run_for(5ms);
    REQUIRE(b.write(asio::buffer("m", 1), bound) == 1);
    REQUIRE(shmio::test::run_until(io, [&] { return got > i; }));
  }
  const auto after = shmio::wait_statistics();
  CHECK(after.safety_rechecks > before.safety_rechecks);
  CHECK(after.safety_finds == before.safety_finds);
}
