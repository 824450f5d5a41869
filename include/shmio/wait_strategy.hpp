#pragma once
// How a shmio wait spends the time before the condition it waits for becomes true.
//
// A wait first checks its condition, then spins (re-checking, at first without giving the CPU
// away and then with sched_yield between looks so a peer sharing this CPU can run), then parks:
// blocking waits sleep on a futex, async waits register with their executor's reactor and return
// the thread to it. Parking and being woken costs ~60 µs between processes on a typical VM; a spin
// that catches the peer costs ~0.2 µs. Spinning is what makes shmio fast when both sides are busy,
// and the yield is what keeps it from starving a peer that shares the core.

#include <chrono>
#include <cstdint>

namespace shmio {

struct wait_strategy {
  /// The longest a wait spins before it parks. Zero parks at once.
  std::chrono::nanoseconds spin_limit = std::chrono::microseconds(50);
  /// Learn, per object, how long spinning pays: shrink the spin when it keeps failing, grow it
  /// back when parked waits are woken soon after parking. Off: always spin for spin_limit.
  bool adaptive = true;
  /// A safety net: how often a parked wait looks again although nothing woke it. Zero (the
  /// default) never does: a wait is woken by the publication it waits for, and a wait held up
  /// by another participant looks again on its own until that participant moves or is found
  /// dead. The one case this covers is a signaller killed between its publication and its
  /// wake-up call, which otherwise leaves a parked wait asleep until the next publication.
  /// Looks that found something to do are counted (shmio::wait_statistics()).
  std::chrono::milliseconds safety_recheck{0};

  /// Spin adaptively up to 50 µs, then park. The default.
  static constexpr wait_strategy hybrid() noexcept { return {}; }
  /// Never spin: lowest CPU use, ~60 µs wake-up latency.
  static constexpr wait_strategy park_only() noexcept {
    return {std::chrono::nanoseconds(0), false, {}};
  }
  /// Always spin up to `limit` before parking.
  static constexpr wait_strategy spin_then_park(std::chrono::nanoseconds limit) noexcept {
    return {limit, false, {}};
  }
};

/// Process-wide counts of the wait machinery's own re-checks.
struct wait_counters {
  /// Safety re-checks (wait_strategy::safety_recheck) that completed an operation: each one a
  /// wake-up that was lost (its signaller died before ringing), or a bug.
  std::uint64_t safety_finds = 0;
  /// Safety re-checks made.
  std::uint64_t safety_rechecks = 0;
  /// Re-checks of waits held up by another participant (a stall; see wait_strategy).
  std::uint64_t stall_rechecks = 0;
  /// Re-checks of parked waits that have neither a wait slot nor the wait hub to be woken
  /// through (a kernel without futex_waitv, no hub thread, or no memory for the membership):
  /// they poll every millisecond.
  std::uint64_t slotless_rechecks = 0;
};
wait_counters wait_statistics() noexcept;

}  // namespace shmio
