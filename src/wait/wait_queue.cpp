#include "shmio/detail/wait_queue.hpp"

#include <climits>

#include "shmio/detail/platform.hpp"

namespace shmio::detail {
namespace {

namespace platform = detail::platform;
using layout::parked_doorbell_unit;
using layout::parked_sleeper_unit;
using layout::wait_slot_count;

constexpr std::uint64_t sleepers_mask = parked_doorbell_unit - 1;

// A slot's owner is an async waiter (the id of its doorbell socket, top bit clear) or a
// blocking sleeper: top bit set, then its process id (pids fit in 31 bits) and thread id.
using layout::slot_sleeper_bit;

bool is_sleeper(std::uint64_t id) noexcept {
  return (id & slot_sleeper_bit) != 0;
}

std::uint64_t this_sleeper() noexcept {
  return slot_sleeper_bit | std::uint64_t{platform::process_id()} << 32 | platform::thread_id();
}

bool sleeper_alive(std::uint64_t id) noexcept {
  return platform::thread_alive(static_cast<std::uint32_t>(id >> 32) & 0x7fffffff,
                                static_cast<std::uint32_t>(id));
}

// Rings slot s's owner `id`, whose arming we have just claimed.
platform::ring_result ring_owner(layout::wait_slot& s, std::uint64_t id) noexcept {
  if (!is_sleeper(id)) return platform::ring_doorbell(id);
  if (platform::futex_wake(s.armed, 1) > 0) return platform::ring_result::rung;
  // Nobody asleep on the word: its owner is between arming and sleeping (it will find the word
  // 0 and not sleep) or dead. Only the second must not count as a ring.
  return sleeper_alive(id) ? platform::ring_result::already_pending : platform::ring_result::gone;
}

// Claims slot i's ring (only one signaller or the owner's own disarm wins the CAS) and rings it.
// Returns true if a live owner was rung.
bool claim_and_ring(layout::wait_queue& q, std::uint32_t i) noexcept {
  auto& s = q.slots[i];
  std::uint32_t armed = 1;
  // acq_rel: the claim must be ordered after our publication and before the doorbell read.
  if (!s.armed.compare_exchange_strong(armed, 0, std::memory_order_acq_rel)) return false;
  q.parked.fetch_sub(parked_doorbell_unit, std::memory_order_acq_rel);
  const std::uint64_t id = s.doorbell.load(std::memory_order_acquire);
  if (id == 0) return false;
  if (ring_owner(s, id) != platform::ring_result::gone) return true;
  // Its owner died while parked: free the slot for someone else.
  std::uint64_t expected = id;
  s.doorbell.compare_exchange_strong(expected, 0, std::memory_order_acq_rel);
  return false;
}

void wake_sleepers(layout::wait_queue& q, std::uint64_t parked, int count) noexcept {
  if ((parked & sleepers_mask) == 0) return;
  // release: a sleeper that sees the new sequence also sees what was published before it.
  q.futex_seq.fetch_add(1, std::memory_order_release);
  platform::futex_wake(q.futex_seq, count);
}

// The signaller's read of `parked`. seq_cst: this load must not move before the caller's
// publication (StoreLoad), or a waiter that armed after our read but re-checked before our
// publication would sleep on. A count out of range was written over (a wrapped one can read as no
// armed slot while every slot is armed): read as both halves set, so that every sleeper is woken
// and every slot looked at.
std::uint64_t parked_to_signal(const layout::wait_queue& q) noexcept {
  const std::uint64_t parked = q.parked.load(std::memory_order_seq_cst);
  return layout::parked_in_range(parked) ? parked : ~std::uint64_t{0};
}

}  // namespace

void notify_all(layout::wait_queue& q) noexcept {
  const std::uint64_t parked = parked_to_signal(q);
  if (parked == 0) return;
  wake_sleepers(q, parked, INT_MAX);
  if (parked < parked_doorbell_unit) return;
  for (std::uint32_t i = 0; i < wait_slot_count; ++i)
    if (q.slots[i].armed.load(std::memory_order_relaxed) != 0) claim_and_ring(q, i);
}

void notify_one(layout::wait_queue& q) noexcept {
  const std::uint64_t parked = parked_to_signal(q);
  if (parked == 0) return;
  // A counted sleeper may be one that already has what it waited for and is on its way out, so
  // waking one sleeper is not enough: ring one armed slot as well (models/wake_protocol.pml).
  wake_sleepers(q, parked, 1);
  if (parked < parked_doorbell_unit) return;
  // Start at a different slot each time so one waiter does not take every ring.
  static thread_local std::uint32_t start = platform::process_id();
  const std::uint32_t first = start++;
  for (std::uint32_t k = 0; k < wait_slot_count; ++k) {
    const std::uint32_t i = (first + k) % wait_slot_count;
    if (q.slots[i].armed.load(std::memory_order_relaxed) != 0 && claim_and_ring(q, i)) return;
  }
}

int claim_slot(layout::wait_queue& q, std::uint64_t id, bool probe_doorbells) noexcept {
  auto owner_gone = [probe_doorbells](std::uint64_t owner) {
    if (is_sleeper(owner)) return !sleeper_alive(owner);
    return probe_doorbells && platform::ring_doorbell(owner) == platform::ring_result::gone;
  };
  for (int pass = 0; pass < 2; ++pass) {
    for (std::uint32_t i = 0; i < wait_slot_count; ++i) {
      auto& s = q.slots[i];
      // relaxed: only a filter, so that a full scan does not take every slot's line exclusive.
      std::uint64_t expected = s.doorbell.load(std::memory_order_relaxed);
      if (expected == 0 &&
          s.doorbell.compare_exchange_strong(expected, id, std::memory_order_acq_rel)) {
        s.pid.store(platform::process_id(), std::memory_order_relaxed);
        return static_cast<int>(i);
      }
      // Second pass: a slot whose owner is gone (a doorbell nobody answers, a thread that no
      // longer exists) is free for us.
      if (pass == 1 && expected != 0 && owner_gone(expected) &&
          s.doorbell.compare_exchange_strong(expected, id, std::memory_order_acq_rel)) {
        // The dead owner may have died armed: take its arming out of the count. If it is no
        // longer armed, a signaller may have claimed that arming and not yet read the doorbell:
        // its ring now comes to us, who wait for nothing, where it would have found the owner
        // gone and rung another. That ring is passed on (a spurious one if none was coming).
        if (s.armed.exchange(0, std::memory_order_acq_rel) != 0)
          q.parked.fetch_sub(parked_doorbell_unit, std::memory_order_acq_rel);
        else
          notify_one(q);
        s.pid.store(platform::process_id(), std::memory_order_relaxed);
        return static_cast<int>(i);
      }
    }
  }
  return no_slot;
}

bool release_slot(layout::wait_queue& q, int slot, std::uint64_t id, bool armed_by_us) noexcept {
  if (slot == no_slot) return false;
  // An arming whose disarm fails was claimed by a signaller: its ring is on the way to us.
  const bool claimed = armed_by_us && !disarm(q, slot);
  std::uint64_t expected = id;
  // release: our last use of the slot happens before its next owner's claim.
  q.slots[slot].doorbell.compare_exchange_strong(expected, 0, std::memory_order_release);
  return claimed;
}

bool arm(layout::wait_queue& q, int slot) noexcept {
  // Count first, then arm: a signaller that claims the slot between the two would otherwise
  // subtract before we add, and `parked` would wrap for a moment (models/wake_protocol.pml).
  // seq_cst: both must be visible before the caller re-checks its condition (StoreLoad).
  q.parked.fetch_add(parked_doorbell_unit, std::memory_order_seq_cst);
  if (q.slots[slot].armed.exchange(1, std::memory_order_seq_cst) != 0) {
    // Armed already: by an arming of ours that was fenced, and that no signaller has claimed
    // since; it orders this re-check as it did the last.
    q.parked.fetch_sub(parked_doorbell_unit, std::memory_order_seq_cst);
    return false;
  }
  fence_after_arming(q);
  return true;
}

void fence_after_arming(const layout::wait_queue& q) noexcept {
  // relaxed: set at creation, before any handle parks here. Only a process that opened a
  // single-writer ring (and so found the system call here) parks on such a queue: elsewhere the
  // mark is a peer's damage, which must not cost a system call, let alone the abort of one
  // refused. A peer that clears it can only make wake-ups be missed, as writing over `parked`
  // can.
  if ((q.flags.load(std::memory_order_relaxed) & layout::queue_heavy_fence) &&
      platform::heavy_fence_enabled())
    platform::heavy_fence();
}

bool disarm(layout::wait_queue& q, int slot) noexcept {
  std::uint32_t armed = 1;
  // acq_rel: one CAS decides between our withdrawal and a signaller's claim.
  if (!q.slots[slot].armed.compare_exchange_strong(armed, 0, std::memory_order_acq_rel))
    return false;
  q.parked.fetch_sub(parked_doorbell_unit, std::memory_order_acq_rel);
  return true;
}

sleeper::sleeper(layout::wait_queue& q) noexcept
    : q_(q), id_(this_sleeper()), slot_(claim_slot(q, id_, false)) {}

sleeper::~sleeper() {
  if (slot_ == no_slot) {
    if (announced_) q_.parked.fetch_sub(parked_sleeper_unit, std::memory_order_acq_rel);
    return;
  }
  // A signaller that claimed our slot after our last announce() rang nobody else if it wakes
  // one: the ring goes on, as an async waiter's does (waiter.cpp).
  if (release_slot(q_, slot_, id_, announced_)) notify_one(q_);
}

void sleeper::announce() noexcept {
  if (slot_ != no_slot) {
    arm(q_, slot_);  // seq_cst inside: visible before the caller's re-check
    announced_ = true;
    return;
  }
  if (!announced_) {
    // seq_cst: our presence must be visible before the caller re-checks its condition.
    q_.parked.fetch_add(parked_sleeper_unit, std::memory_order_seq_cst);
    fence_after_arming(q_);
    announced_ = true;
  }
  // seq_cst: read after announcing; a notify that missed our announcement bumps it after this.
  seq_ = q_.futex_seq.load(std::memory_order_seq_cst);
}

void sleeper::sleep(std::chrono::nanoseconds timeout) noexcept {
  if (slot_ != no_slot)
    platform::futex_wait(q_.slots[slot_].armed, 1, timeout);  // until a claim makes it 0
  else
    platform::futex_wait(q_.futex_seq, seq_, timeout);
}

}  // namespace shmio::detail
