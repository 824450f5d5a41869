#pragma once
// A named event's body.
// Part of the shared-memory layout: layout.hpp states its rules, docs/protocol.md describes
// each byte, and the static_asserts here pin the same offsets.

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "shmio/detail/layout/wait_queue.hpp"

namespace shmio::detail::layout {

// ---- named event: the body of an object_kind::event segment ---------------------------------

inline constexpr std::uint32_t event_auto_reset = 0;
inline constexpr std::uint32_t event_manual_reset = 1;

struct event_state {
  std::atomic<std::uint32_t> signalled;  // 0 or 1; a waiter of an auto-reset event takes it 1 -> 0
  std::uint32_t mode;                    // event_auto_reset or event_manual_reset, fixed at create
  std::uint8_t reserved[cache_line - 8];
  wait_queue waiters;
};
static_assert(sizeof(event_state) == 64 + sizeof(wait_queue));
static_assert(offsetof(event_state, signalled) == 0);
static_assert(offsetof(event_state, mode) == 4);
static_assert(offsetof(event_state, waiters) == 64);

}  // namespace shmio::detail::layout
