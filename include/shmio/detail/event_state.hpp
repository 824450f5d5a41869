#pragma once
// Reading and changing a named event's shared state (layout::event_state).

#include <atomic>
#include <cstdint>

#include "shmio/detail/layout.hpp"
#include "shmio/detail/wait_queue.hpp"

namespace shmio::detail {

/// A validated pointer to an event's state, cheap to copy into wait operations.
struct event_view {
  layout::event_state* state = nullptr;
  bool manual = false;  // from the validated header, never re-read from shared memory

  /// Lets one wait through if the event is set; an auto-reset event is cleared by it.
  bool try_take() const noexcept {
    // seq_cst: this is the re-check after arming, and must not move before the arming.
    std::uint32_t v = state->signalled.load(std::memory_order_seq_cst);
    if (v == 0) return false;
    if (manual) return true;
    // Any non-zero value counts as set, so a scribbled word cannot wedge the event.
    return state->signalled.compare_exchange_strong(v, 0, std::memory_order_seq_cst);
  }

  void set() const noexcept {
    // seq_cst: the store must be ordered before notify's load of `parked` (StoreLoad).
    state->signalled.exchange(1, std::memory_order_seq_cst);
    notify_all(state->waiters);
  }

  // release: nothing to order after it; a reset racing a set is a race in the caller's design.
  void reset() const noexcept { state->signalled.store(0, std::memory_order_release); }

  // acquire: what the setter wrote before set() is visible to whoever sees it set.
  bool is_set() const noexcept { return state->signalled.load(std::memory_order_acquire) != 0; }
};

}  // namespace shmio::detail
