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
/// Takes a free slot for the doorbell `id` (reclaiming slots of dead owners); no_slot if all
/// are held by live owners.
int claim_slot(layout::wait_queue& q, std::uint64_t id) noexcept;
/// Gives back a slot claimed for `id`. Returns true if it was armed and a signaller had claimed
/// it: that ring is lost with us unless the caller passes it on.
bool release_slot(layout::wait_queue& q, int slot, std::uint64_t id) noexcept;
/// Marks the slot as wanting a ring. Returns true if it was not armed already.
bool arm(layout::wait_queue& q, int slot) noexcept;
/// Withdraws the slot's wish for a ring. Returns false if a signaller claimed it first (then a
/// ring is on its way to the doorbell).
bool disarm(layout::wait_queue& q, int slot) noexcept;

/// A blocking waiter's presence on the futex of `q`, for the scope of one sleep.
class sleeper {
 public:
  explicit sleeper(layout::wait_queue& q) noexcept;
  ~sleeper();
  sleeper(const sleeper&) = delete;
  sleeper& operator=(const sleeper&) = delete;
  /// Sleeps until a notify after construction, or `timeout`.
  void sleep(std::chrono::nanoseconds timeout) noexcept;

 private:
  layout::wait_queue& q_;
  std::uint32_t seq_;
};

}  // namespace shmio::detail
