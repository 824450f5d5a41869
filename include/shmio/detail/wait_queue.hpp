#pragma once
// Operations on a layout::wait_queue in shared memory: the signaller's side (notify) and the
// waiter's side (claim a slot, arm, disarm, sleep). The rule that keeps wake-ups from getting
// lost, for every condition shmio waits on:
//
//   waiter:     arm (seq_cst)  -> re-check the condition -> park
//   signaller:  publish (seq_cst) -> read `parked` (seq_cst) -> ring only if non-zero
//
// With both sides sequentially consistent, either the waiter's re-check sees the publication
// or the signaller's read sees the arming. models/wake_protocol.pml checks this exhaustively.
// A single-writer ring's signallers publish with a release store instead; its waiters then
// issue a heavy fence (membarrier) between arming and re-checking, which serves as the
// signallers' StoreLoad fence too (fence_after_arming).

#include <chrono>
#include <cstdint>

#include "shmio/detail/layout.hpp"

namespace shmio::detail {

/// Wakes every parked waiter of `q`. Costs one load when nobody is parked.
void notify_all(layout::wait_queue& q) noexcept;
/// Wakes one parked waiter of `q` (a dead one does not count). Costs one load when nobody is
/// parked.
void notify_one(layout::wait_queue& q) noexcept;

inline constexpr int no_slot = -1;
/// Takes a free slot for the doorbell `id`, reclaiming slots of dead owners; no_slot if all are
/// held by live owners. Finding a doorbell's owner dead costs a ring to it, which a live owner
/// takes as a spurious wake-up: with `probe_doorbells` false only blocking sleepers' slots are
/// probed (that asks the kernel, and wakes nobody).
int claim_slot(layout::wait_queue& q, std::uint64_t id, bool probe_doorbells = true) noexcept;
/// Gives back a slot claimed for `id`, disarming it first if `armed_by_us` (we armed it and have
/// not disarmed it since). Returns true if a signaller claimed that arming: its ring is lost
/// with us unless the caller passes it on. (The slot's word alone cannot tell: 0 is both
/// "never armed" and "claimed".)
bool release_slot(layout::wait_queue& q, int slot, std::uint64_t id, bool armed_by_us) noexcept;
/// Marks the slot as wanting a ring. Returns true if it was not armed already.
bool arm(layout::wait_queue& q, int slot) noexcept;
/// After an arming (or a count in `parked`) and before the re-check: on a queue whose
/// signallers publish without a StoreLoad fence (layout::queue_heavy_fence), the heavy fence
/// that orders their publications and their reads of `parked` against ours. arm() and
/// sleeper::announce() call it; other armings must.
void fence_after_arming(const layout::wait_queue& q) noexcept;
/// Withdraws the slot's wish for a ring. Returns false if a signaller claimed it first (then a
/// ring is on its way to the doorbell).
bool disarm(layout::wait_queue& q, int slot) noexcept;

/// A blocking wait's presence in `q`, for the length of one wait call.
///
/// It takes a slot of its own when one is free, and parks like an async waiter (arm, re-check),
/// but sleeps on the slot's `armed` word: a signaller's claim (armed 1 -> 0) is the ring, and
/// FUTEX_WAKE on that word the doorbell. After one claim no other signaller finds it armed, so
/// a stream of publications costs one system call per sleep, not one each.
///
/// With every slot taken it counts itself among the sleepers on `futex_seq` instead, whom every
/// notify wakes for as long as they are counted.
class sleeper {
 public:
  explicit sleeper(layout::wait_queue& q) noexcept;
  /// Withdraws; a ring claimed for us that we did not use goes on to another waiter.
  ~sleeper();
  sleeper(const sleeper&) = delete;
  sleeper& operator=(const sleeper&) = delete;
  /// Makes the wait visible to signallers. The caller re-checks its condition next, and sleeps
  /// only if that fails.
  void announce() noexcept;
  /// Sleeps until a signaller rings after the last announce(), or `timeout`.
  void sleep(std::chrono::nanoseconds timeout) noexcept;

 private:
  layout::wait_queue& q_;
  std::uint64_t id_;
  int slot_;
  bool announced_ = false;
  std::uint32_t seq_ = 0;  // futex_seq as of announce(), without a slot
};

}  // namespace shmio::detail
