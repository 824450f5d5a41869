// The wait queue's claim rule for blocking sleepers, one step at a time in one thread: a notify
// claims an announced sleeper's slot once, a dead sleeper's slot is freed rather than counted
// as rung, and a sleeper that finds every slot taken falls back to the shared futex word.

#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <memory>

#include "shmio/detail/layout.hpp"
#include "shmio/detail/platform.hpp"
#include "shmio/detail/wait_queue.hpp"
#include "support.hpp"

namespace {

namespace layout = shmio::detail::layout;
namespace platform = shmio::detail::platform;
using shmio::detail::notify_one;
using shmio::detail::sleeper;
using shmio::test::held_slots;

// A wait queue in private memory, zeroed as a new segment's is.
std::unique_ptr<layout::wait_queue> fresh_queue() {
  return std::make_unique<layout::wait_queue>();
}

std::uint64_t armed_slots(const layout::wait_queue& q) {
  return q.parked.load() >> 32;
}
std::uint64_t counted_sleepers(const layout::wait_queue& q) {
  return q.parked.load() & 0xffffffffu;
}

// The slot owner id of thread `tid` of process `pid` (docs/protocol.md, wait queue).
std::uint64_t sleeper_id(std::uint32_t pid, std::uint32_t tid) {
  return layout::slot_sleeper_bit | std::uint64_t{pid} << 32 | tid;
}

// A pid that belonged to a process which has exited and been reaped.
std::uint32_t dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return static_cast<std::uint32_t>(pid);
}

}  // namespace

TEST_CASE("a notify claims an announced sleeper's slot once; the next finds nobody to wake",
          "[wait_queue]") {
  auto q = fresh_queue();
  {
    sleeper s(*q);
    CHECK(held_slots(*q) == 1);  // a blocking wait takes a slot of its own
    s.announce();
    CHECK(armed_slots(*q) == 1);
    CHECK(counted_sleepers(*q) == 0);

    notify_one(*q);  // claims the slot: the one FUTEX_WAKE this sleep gets
    CHECK(armed_slots(*q) == 0);
    notify_one(*q);  // nothing armed: nothing to claim, no system call
    CHECK(q->parked.load() == 0);
    CHECK(q->futex_seq.load() == 0);  // the shared futex word was never touched

    // The claim cleared the word the sleeper sleeps on: it does not sleep at all.
    const auto before = std::chrono::steady_clock::now();
    s.sleep(std::chrono::seconds(10));
    CHECK(std::chrono::steady_clock::now() - before < std::chrono::seconds(5));

    s.announce();  // re-arms for the next sleep
    CHECK(armed_slots(*q) == 1);
  }
  // Leaving disarms and frees the slot.
  CHECK(q->parked.load() == 0);
  CHECK(held_slots(*q) == 0);
}

TEST_CASE("a sleeper that leaves with a claimed ring passes it on to another sleeper",
          "[wait_queue]") {
  auto q = fresh_queue();
  sleeper other(*q);
  other.announce();
  {
    sleeper s(*q);
    s.announce();
    CHECK(armed_slots(*q) == 2);
    // Claims one of the two; if it was `s`, s's leaving passes the ring on to `other`.
    notify_one(*q);
    CHECK(armed_slots(*q) == 1);
  }
  // Either way `other` ends up claimed: by the notify, or by the ring `s` passed on.
  CHECK(armed_slots(*q) == 0);
  CHECK(q->slots[0].armed.load() == 0);
}

TEST_CASE("a notify frees the slot of a sleeper whose thread is gone and rings a live one",
          "[wait_queue]") {
  auto q = fresh_queue();
  const std::uint64_t dead = sleeper_id(dead_pid(), 1);
  sleeper live(*q);  // takes slot 0
  // notify_one starts at a different slot each call: enough rounds to start at every slot.
  unsigned dead_claimed = 0;
  for (std::uint32_t round = 0; round < layout::wait_slot_count; ++round) {
    CAPTURE(round);
    // Slot 1: a sleeper of a process that has exited, armed when it died.
    q->slots[1].doorbell.store(dead);
    q->slots[1].armed.store(1);
    q->parked.fetch_add(layout::parked_doorbell_unit);
    live.announce();
    REQUIRE(armed_slots(*q) == 2);
    // One notify ends with the live sleeper rung: a claim of the dead one does not count as a
    // ring, and frees its slot.
    notify_one(*q);
    CHECK(q->slots[0].armed.load() == 0);
    if (q->slots[1].armed.load() == 0) {
      ++dead_claimed;
      CHECK(q->slots[1].doorbell.load() == 0);
      CHECK(armed_slots(*q) == 0);
    } else {
      q->slots[1].armed.store(0);
      q->parked.fetch_sub(layout::parked_doorbell_unit);
    }
  }
  CHECK(dead_claimed > 0);  // some rounds tried the dead one first
}

TEST_CASE("a blocking wait takes a dead sleeper's slot when every slot is held", "[wait_queue]") {
  auto q = fresh_queue();
  const std::uint64_t dead = sleeper_id(dead_pid(), 1);
  const std::uint64_t alive = sleeper_id(platform::process_id(), platform::thread_id());
  for (auto& slot : q->slots)
    slot.doorbell.store(alive);
  q->slots[7].doorbell.store(dead);
  {
    sleeper s(*q);
    s.announce();
    CHECK(q->slots[7].doorbell.load() != dead);  // reclaimed
    CHECK(q->slots[7].armed.load() == 1);
    CHECK(armed_slots(*q) == 1);
    CHECK(counted_sleepers(*q) == 0);
  }
  CHECK(q->slots[7].doorbell.load() == 0);
  CHECK(q->parked.load() == 0);
}

TEST_CASE("with every slot held by live owners a sleeper counts itself on the shared futex word",
          "[wait_queue]") {
  auto q = fresh_queue();
  const std::uint64_t alive = sleeper_id(platform::process_id(), platform::thread_id());
  for (auto& slot : q->slots)
    slot.doorbell.store(alive);
  {
    sleeper s(*q);
    s.announce();
    CHECK(armed_slots(*q) == 0);
    CHECK(counted_sleepers(*q) == 1);
    // Every notify wakes a counted sleeper: it cannot tell whether one already did.
    notify_one(*q);
    notify_one(*q);
    CHECK(q->futex_seq.load() == 2);
    s.announce();  // stays counted once
    CHECK(counted_sleepers(*q) == 1);
  }
  CHECK(q->parked.load() == 0);
}

TEST_CASE("a slot taken over from a dead owner passes on a ring a signaller claimed from it",
          "[wait_queue]") {
  auto q = fresh_queue();
  std::error_code ec;
  std::uint64_t dead_id = 0, waiter_id = 0, newcomer_id = 0;
  platform::open_doorbell(dead_id, ec);  // closed at once: its owner is gone
  REQUIRE_FALSE(ec);
  const platform::unique_fd waiter = platform::open_doorbell(waiter_id, ec);
  REQUIRE_FALSE(ec);
  const platform::unique_fd newcomer = platform::open_doorbell(newcomer_id, ec);
  REQUIRE_FALSE(ec);
  // Every slot held by the live waiter's doorbell, which is parked in slot 1; slot 0's owner
  // died parked.
  for (auto& slot : q->slots)
    slot.doorbell.store(waiter_id);
  q->slots[0].doorbell.store(dead_id);
  q->slots[0].armed.store(1);
  q->slots[1].armed.store(1);
  q->parked.store(2 * layout::parked_doorbell_unit);

  // A signaller claims slot 0's arming, as notify_one does, and is held up before it reads
  // whose doorbell to ring.
  std::uint32_t armed = 1;
  REQUIRE(q->slots[0].armed.compare_exchange_strong(armed, 0));
  q->parked.fetch_sub(layout::parked_doorbell_unit);
  // Meanwhile a new object takes the dead owner's slot.
  CHECK(shmio::detail::claim_slot(*q, newcomer_id) == 0);
  // The signaller goes on: it rings the slot's doorbell, now the newcomer's, which waits for
  // nothing. The live waiter must be rung all the same.
  CHECK(platform::ring_doorbell(q->slots[0].doorbell.load()) == platform::ring_result::rung);
  CHECK(platform::drain_doorbell(waiter.get()) == 1);
  CHECK(q->slots[1].armed.load() == 0);
  CHECK(armed_slots(*q) == 0);
  CHECK(platform::drain_doorbell(newcomer.get()) == 1);
}

TEST_CASE("a parked count written over with a value out of range still lets notifies ring",
          "[wait_queue]") {
  // Another process wrote ~0 over `parked`: our arming then wraps its high half to 0, which
  // reads as no armed slot. A notify must not take that for the truth: it looks at every slot.
  const bool all = GENERATE(false, true);
  CAPTURE(all);
  auto q = fresh_queue();
  sleeper s(*q);
  q->parked.store(~std::uint64_t{0});
  s.announce();
  CHECK(armed_slots(*q) == 0);  // wrapped
  const auto armed = [&] {
    int n = 0;
    for (const auto& slot : q->slots)
      n += slot.armed.load() != 0;
    return n;
  };
  REQUIRE(armed() == 1);
  const std::uint32_t seq = q->futex_seq.load();
  if (all)
    shmio::detail::notify_all(*q);
  else
    notify_one(*q);
  CHECK(armed() == 0);                // claimed and rung
  CHECK(q->futex_seq.load() != seq);  // the counted sleepers it claims are woken too
  const auto before = std::chrono::steady_clock::now();
  s.sleep(std::chrono::seconds(10));  // its word is 0: no sleep at all
  CHECK(std::chrono::steady_clock::now() - before < std::chrono::seconds(5));
}
