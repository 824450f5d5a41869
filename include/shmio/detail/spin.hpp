#pragma once
// The spin phase of a wait, and what it learns (see shmio/wait_strategy.hpp).

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>

#include "shmio/detail/platform.hpp"
#include "shmio/wait_strategy.hpp"

namespace shmio::detail {

/// Tells a sched_yield that gave the CPU to another thread (so this CPU is shared) from one that
/// only paid for the system call. A fixed threshold cannot: a system call costs 0.1-0.3 µs on
/// some machines and over a microsecond on some virtual ones, where every yield would look
/// crowded. A yield counts as crowded if it took at least `floor` and at least `factor` times
/// the fastest yield this gauge has seen (the bare cost, as nearly as we can know it).
class yield_gauge {
 public:
  static constexpr std::chrono::nanoseconds floor{1000};
  static constexpr std::int64_t factor = 2;

  bool crowded(std::chrono::nanoseconds took) noexcept {
    const std::int64_t ns = took.count();
    // relaxed: an estimate shared by every waiter of the process; a lost update only leaves
    // a slightly larger minimum for a while.
    std::int64_t fastest = fastest_ns_.load(std::memory_order_relaxed);
    if (ns < fastest) {
      fastest_ns_.store(ns, std::memory_order_relaxed);
      fastest = ns;
    }
    return took >= floor && ns >= factor * fastest;
  }

 private:
  std::atomic<std::int64_t> fastest_ns_{INT64_MAX};
};

/// How an async wait spins through its executor, one trip per handler (waiter::spin_step): each
/// trip re-checks for a while, pause-spun, and every few trips it first yields the CPU.
class executor_spin {
 public:
  // A trip costs far more than a re-check (Asio's scheduler polls its reactor, a system call,
  // between handlers), so each trip looks for a while; meanwhile other handlers of this thread
  // wait, so not long.
  static constexpr auto look_per_trip = std::chrono::microseconds(2);
  static constexpr int looks_per_clock_read = 4;
  // Trips between two sched_yield calls. A yield lets a peer on this same CPU run (without it
  // our spin could not succeed there), but costs a system call even when nobody else is
  // runnable.
  static constexpr std::uint32_t trips_per_yield = 4;

  /// Our last yield gave the CPU away: this CPU is shared, perhaps with the peer. Then every
  /// trip yields and looks only once (more looks cannot succeed before we yield).
  bool crowded() const noexcept {
    // relaxed: a hint about this CPU, shared by the waits of one object.
    return crowded_.load(std::memory_order_relaxed);
  }
  /// One trip's looks: true as soon as `look()` is.
  template <class Look>
  bool look(Look&& look, bool crowded) const {
    const auto until = std::chrono::steady_clock::now() + look_per_trip;
    for (int i = 1;; ++i) {
      if (look()) return true;
      if (crowded) return false;
      platform::cpu_relax();
      if (i % looks_per_clock_read == 0 && std::chrono::steady_clock::now() >= until) return false;
    }
  }
  /// Trip number `trip` (from 1) yields before the next one.
  static bool yield_due(std::uint32_t trip, bool crowded) noexcept {
    return crowded || trip % trips_per_yield == 0;
  }
  /// Yields the CPU, and learns from how long that took whether it is shared.
  void yield() noexcept {
    const auto before = std::chrono::steady_clock::now();
    platform::yield();
    // relaxed: a hint, see crowded().
    crowded_.store(gauge_.crowded(std::chrono::steady_clock::now() - before),
                   std::memory_order_relaxed);
  }

 private:
  // One per process: the cost of a system call is the machine's.
  static inline yield_gauge gauge_;
  std::atomic<bool> crowded_{false};
};

class spin_policy {
 public:
  explicit spin_policy(wait_strategy s) noexcept
      // The adaptive default never spins on a one-CPU machine (the peer could not run while we
      // spin). It looks at the machine, not our affinity: a process pinned to one CPU still has
      // a peer on another. An explicit strategy is taken as given.
      : limit_(!s.adaptive || platform::online_cpus() > 1 ? s.spin_limit.count() : 0),
        adaptive_(s.adaptive),
        budget_(limit_) {}

  /// Re-checks `attempt` until it yields a value or the spin budget is spent, or `limit` (the
  /// caller's time left; negative: none) if that is shorter.
  template <class Attempt>
  auto spin(Attempt& attempt, std::chrono::nanoseconds limit = std::chrono::nanoseconds(-1))
      -> decltype(attempt()) {
    // relaxed: the budget is a per-object hint; a stale value only changes how long we spin.
    const std::int64_t budget = budget_.load(std::memory_order_relaxed);
    if (budget <= 0) return {};
    // A spin cut short by the caller's timeout says nothing of whether spinning pays.
    const bool capped = limit.count() >= 0 && limit.count() < budget;
    // Look again at once for a while: a blocking caller has nothing else to do, and a pause
    // between looks cost a flow whose waiting side waits on nearly every message. Then with a
    // pause between looks for as many again: back-to-back looks alone last too short a time
    // for a round trip's answer, which a yield would then make late (docs/performance.md, "The
    // blocking spin"). Then yield between looks, so a peer on this same CPU can run.
    for (std::uint32_t i = 1; i < pause_rounds; ++i)
      if (auto r = attempt()) return r;
    for (std::uint32_t i = 0; i < pause_rounds; ++i) {
      if (auto r = attempt()) return r;
      platform::cpu_relax();
    }
    using clock = std::chrono::steady_clock;
    const auto deadline = clock::now() + (capped ? limit : std::chrono::nanoseconds(budget));
    for (;;) {
      if (auto r = attempt()) return r;
      platform::yield();
      if (clock::now() >= deadline) break;
    }
    if (!capped) spin_failed();
    return {};
  }

  /// The part of a spin that never gives the CPU away: pause-spins for at most ~1 µs (or the
  /// budget, if smaller). Async waits use it before spinning through their executor.
  /// Skipped while it keeps failing (a peer on this same CPU cannot answer while we spin), but
  /// tried again every probe_interval-th time, so that it comes back when the peer moves.
  template <class Attempt>
  auto tight_spin(Attempt& attempt) -> decltype(attempt()) {
    if (!tight_spin_pays()) return {};
    for (std::uint32_t i = 0; i < pause_rounds; ++i) {
      if (auto r = attempt()) {
        tight_misses_.store(0, std::memory_order_relaxed);
        return r;
      }
      platform::cpu_relax();
    }
    return {};
  }

  /// As tight_spin, for up to `window`: for a caller that expects its condition within a few
  /// microseconds (an answer to what it just sent) and would otherwise take a trip through its
  /// executor to wait, which costs more. Skipped like tight_spin while it keeps failing.
  template <class Attempt>
  auto tight_spin_for(Attempt& attempt, std::chrono::nanoseconds window) -> decltype(attempt()) {
    if (!tight_spin_pays()) return {};
    const auto until = std::chrono::steady_clock::now() + window;
    for (std::uint32_t i = 1;; ++i) {
      if (auto r = attempt()) {
        tight_misses_.store(0, std::memory_order_relaxed);
        return r;
      }
      platform::cpu_relax();
      if (i % 8 == 0 && std::chrono::steady_clock::now() >= until) return {};
    }
  }

  /// The current spin budget in nanoseconds (0: park at once).
  std::int64_t budget() const noexcept { return budget_.load(std::memory_order_relaxed); }

  /// Feedback from a spin that ran out of budget: spinning does not pay now, spin less.
  void spin_failed() noexcept {
    if (!adaptive_) return;
    const std::int64_t budget = budget_.load(std::memory_order_relaxed);
    budget_.store(std::max<std::int64_t>(budget / 2, min_budget), std::memory_order_relaxed);
  }

  /// Feedback from a spin that caught its condition: spinning pays, afford more of it.
  void spin_succeeded() noexcept {
    if (!adaptive_) return;
    const std::int64_t budget = budget_.load(std::memory_order_relaxed);
    if (budget < limit_) budget_.store(std::min(limit_, budget * 2), std::memory_order_relaxed);
  }

  /// Feedback from a parked wait woken `after` parking: had we spun that long, we would not have
  /// parked, so spin longer next time.
  void woken_after(std::chrono::nanoseconds after) noexcept {
    if (!adaptive_ || after.count() >= limit_) return;
    const std::int64_t budget = budget_.load(std::memory_order_relaxed);
    budget_.store(std::min(limit_, std::max(budget * 2, after.count() * 2)),
                  std::memory_order_relaxed);
  }

 private:
  // Counts a tight spin as missed until it succeeds; false when it should be skipped.
  bool tight_spin_pays() noexcept {
    if (budget_.load(std::memory_order_relaxed) <= 0) return false;
    // relaxed: like the budget, a per-object hint; a lost update only shifts the next probe.
    const std::uint32_t misses = tight_misses_.load(std::memory_order_relaxed);
    tight_misses_.store(misses + 1, std::memory_order_relaxed);
    return misses < misses_before_skipping || misses % probe_interval == 0;
  }

  static constexpr std::uint32_t pause_rounds = 64;
  static constexpr std::int64_t min_budget = 5000;  // keep sampling: a few executor rounds
  static constexpr std::uint32_t misses_before_skipping = 8;
  static constexpr std::uint32_t probe_interval = 32;
  std::int64_t limit_;
  bool adaptive_;
  std::atomic<std::int64_t> budget_;
  std::atomic<std::uint32_t> tight_misses_{0};  // tight spins that failed in a row
};

}  // namespace shmio::detail
