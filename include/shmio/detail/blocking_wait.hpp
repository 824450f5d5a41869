#pragma once
// The blocking form of a wait: the calling thread spins, then sleeps in the kernel as a
// `sleeper` of the shared wait queue (wait_queue.hpp), until its condition holds or its time
// is up. No executor is involved.

#include <algorithm>
#include <chrono>
#include <optional>

#include "shmio/detail/layout.hpp"
#include "shmio/detail/spin.hpp"
#include "shmio/detail/stall.hpp"
#include "shmio/detail/wait_queue.hpp"

namespace shmio::detail {

/// A blocking call's timeout as blocking_wait takes it: negative, max() or anything too long to
/// count in nanoseconds (centuries) means no limit.
inline std::chrono::nanoseconds wait_limit(std::chrono::milliseconds timeout) noexcept {
  constexpr auto longest = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::nanoseconds::max() / 4);  // leaves room for now() + timeout
  if (timeout.count() < 0 || timeout >= longest) return std::chrono::nanoseconds(-1);
  return timeout;
}

/// Blocks until `attempt` (returning std::optional<...>) yields a value or `timeout` passes
/// (negative: no limit). `safety` > 0 looks again at least that often even without a ring.
template <class Attempt>
auto blocking_wait(layout::wait_queue& queue, spin_policy& spin, Attempt& attempt,
                   std::chrono::nanoseconds timeout, std::chrono::milliseconds safety)
    -> decltype(attempt()) {
  take_stall_note();
  if (auto r = attempt()) return r;
  using clock = std::chrono::steady_clock;
  const bool forever = timeout.count() < 0;
  const auto deadline = forever ? clock::time_point::max() : clock::now() + timeout;
  if (timeout.count() != 0)
    if (auto r = spin.spin(attempt, timeout)) return r;
  std::optional<sleeper> s;  // made at the first park: a poll or a spin that succeeds needs none
  std::optional<clock::time_point> slept_at;
  auto stall_slice = std::chrono::nanoseconds(stall_backoff::first);
  for (;;) {
    const auto now = clock::now();
    if (!forever && now >= deadline) return attempt();
    if (!s) s.emplace(queue);
    s->announce();
    take_stall_note();
    if (auto r = attempt()) {  // the re-check after announcing ourselves
      // As for async waits: woken soon after parking means a longer spin would have caught it.
      if (slept_at) spin.woken_after(clock::now() - *slept_at);
      return r;
    }
    // Sleep until woken; held up by another participant, look again after its patience (less
    // often while it lives); with the safety net, at least that often.
    auto slice = std::chrono::nanoseconds::max();
    if (take_stall_note()) {
      slice = stall_slice;
      stall_slice = std::min<std::chrono::nanoseconds>(stall_slice * 2, stall_backoff::max);
    } else {
      stall_slice = stall_backoff::first;
    }
    if (safety.count() > 0) slice = std::min<std::chrono::nanoseconds>(slice, safety);
    if (!forever) slice = std::min<std::chrono::nanoseconds>(slice, deadline - now);
    slept_at = clock::now();
    s->sleep(slice == std::chrono::nanoseconds::max() ? std::chrono::nanoseconds(-1) : slice);
  }
}

}  // namespace shmio::detail
