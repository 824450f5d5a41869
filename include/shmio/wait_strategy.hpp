#pragma once
// How a shmio wait spends the time before the condition it waits for becomes true.
//
// A wait first checks its condition, then spins (re-checking, with a pause and, after the first
// microsecond, sched_yield so a peer sharing this CPU can run), then parks: blocking waits sleep
// on a futex, async waits register with their executor's reactor and return the thread to it.
// Parking and being woken costs ~60 µs between processes on a typical VM; a spin that catches
// the peer costs ~0.2 µs. Spinning is what makes shmio fast when both sides are busy, and the
// yield is what keeps it from starving a peer that shares the core.

#include <chrono>

namespace shmio {

struct wait_strategy {
  /// The longest a wait spins before it parks. Zero parks at once.
  std::chrono::nanoseconds spin_limit = std::chrono::microseconds(50);
  /// Learn, per object, how long spinning pays: shrink the spin when it keeps failing, grow it
  /// back when parked waits are woken soon after parking. Off: always spin for spin_limit.
  bool adaptive = true;

  /// Spin adaptively up to 50 µs, then park. The default.
  static constexpr wait_strategy hybrid() noexcept { return {}; }
  /// Never spin: lowest CPU use, ~60 µs wake-up latency.
  static constexpr wait_strategy park_only() noexcept {
    return {std::chrono::nanoseconds(0), false};
  }
  /// Always spin up to `limit` before parking.
  static constexpr wait_strategy spin_then_park(std::chrono::nanoseconds limit) noexcept {
    return {limit, false};
  }
};

}  // namespace shmio
