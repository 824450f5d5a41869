#pragma once
// The wait queue: who is parked on a condition, and how to wake them.
// Part of the shared-memory layout: layout.hpp states its rules, docs/protocol.md describes
// each byte, and the static_asserts here pin the same offsets.

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "shmio/detail/layout/segment.hpp"

namespace shmio::detail::layout {

// ---- wait queue: who is parked on a condition, and how to wake them -------------------------
//
// A waiting I/O object owns one slot while it exists. It parks by arming its slot (armed = 1,
// then parked += 1 << 32), re-checking its condition, and waiting on its doorbell. A signaller
// publishes, reads `parked`, and only if it is non-zero claims armed slots (CAS 1 -> 0) and
// rings their doorbells. A blocking (non-async) wait takes a slot for the call and sleeps on its
// `armed` word (futex); if none is free it sleeps on futex_seq and counts itself in the low half
// of `parked`.

inline constexpr std::uint32_t wait_slot_count = 32;
inline constexpr std::uint64_t parked_doorbell_unit = std::uint64_t{1} << 32;
inline constexpr std::uint64_t parked_sleeper_unit = 1;
// A slot owner id with this bit set is a blocking sleeper (pid << 32 | tid), not a doorbell.
inline constexpr std::uint64_t slot_sleeper_bit = std::uint64_t{1} << 63;

// What `parked` can hold: at most every slot armed, and again as many arms on their way out (an
// owner that counts itself before finding its slot armed already takes its count back); at most
// as many counted sleepers as Linux has thread ids (pid_max is at most 2^22). A value beyond
// either was written by something else: signallers then trust neither half (wait_queue.cpp).
inline constexpr std::uint64_t max_parked_arms = 2 * wait_slot_count;
inline constexpr std::uint64_t max_counted_sleepers = std::uint64_t{1} << 22;
constexpr bool parked_in_range(std::uint64_t parked) noexcept {
  return (parked >> 32) <= max_parked_arms && (parked & 0xffffffffu) <= max_counted_sleepers;
}

struct wait_slot {
  std::atomic<std::uint64_t> doorbell;  // 0: free; else the owner's doorbell id
  std::atomic<std::uint32_t> armed;     // 1 while the owner is parked and wants a ring
  std::atomic<std::uint32_t> pid;       // the owner's pid, for the inspector only
};
static_assert(sizeof(wait_slot) == 16);
static_assert(offsetof(wait_slot, doorbell) == 0);
static_assert(offsetof(wait_slot, armed) == 8);
static_assert(offsetof(wait_slot, pid) == 12);

struct alignas(cache_line) wait_queue {
  std::atomic<std::uint64_t> parked;     // armed slots << 32 | futex sleepers
  std::atomic<std::uint32_t> futex_seq;  // bumped by a notify that finds sleepers
  std::uint8_t reserved[cache_line - 12];
  wait_slot slots[wait_slot_count];
};
static_assert(sizeof(wait_queue) == 64 + 16 * wait_slot_count);
static_assert(offsetof(wait_queue, parked) == 0);
static_assert(offsetof(wait_queue, futex_seq) == 8);
static_assert(offsetof(wait_queue, slots) == 64);

}  // namespace shmio::detail::layout
