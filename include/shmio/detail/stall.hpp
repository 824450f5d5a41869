#pragma once
// How an attempt tells its waiter that it is held up by another participant (a node, a lock or
// a slot that somebody else holds) rather than by an empty or full object.
//
// An empty ring wakes its readers when a writer publishes: nothing needs to look again until
// then. A node held by a writer that was killed mid-write never moves, and no wake-up will
// come for it: only looking again, after the owner's patience, lets a waiter ask the kernel
// whether the owner lives and take the node over. So a wait whose last attempt noted a stall
// re-checks on a timer (backing off while the owner lives), and an idle wait needs no timer.
//
// The note is thread-local: an attempt runs on the thread of the wait that made it.

#include <chrono>

namespace shmio::detail {

/// How often a wait (async or blocking) held up by another participant looks again: first after
/// the holder's patience (10 ms, in ring.cpp, rw_lock_view and broadcast_ring; after it a look
/// asks the kernel whether the holder lives), then less often, up to `max`, while it lives.
struct stall_backoff {
  static constexpr auto first = std::chrono::milliseconds(10);
  static constexpr auto max = std::chrono::milliseconds(200);
};

inline thread_local bool attempt_stalled = false;

/// Called by an attempt that would block on something another participant holds.
inline void note_stall() noexcept {
  attempt_stalled = true;
}

/// Clears the note before an attempt; returns the note of the attempts since the last clear.
inline bool take_stall_note() noexcept {
  const bool stalled = attempt_stalled;
  attempt_stalled = false;
  return stalled;
}

}  // namespace shmio::detail
