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
// wait_queue.flags: its signallers publish without a StoreLoad fence, so a waiter issues the
// heavy fence (membarrier) after arming and before re-checking (layout/ring.hpp).
inline constexpr std::uint32_t queue_heavy_fence = 1;
inline constexpr std::uint64_t parked_doorbell_unit = std::uint64_t{1} << 32;
inline constexpr std::uint64_t parked_sleeper_unit = 1;
// A slot owner id with this bit set is a blocking sleeper (pid << 32 | tid), not a doorbell.
inline constexpr std::uint64_t slot_sleeper_bit = std::uint64_t{1} << 63;

// What `parked` can hold. Each half counts waits (armed slots; counted sleepers), and may be
// left a few too high by processes killed between a count and its undoing, never near 2^31. A
// half at 2^31 or more was written over (or went below zero and wrapped): signallers then trust
// neither half (wait_queue.cpp), and the inspector reports the segment corrupted.
constexpr bool parked_in_range(std::uint64_t parked) noexcept {
  return (parked >> 63) == 0 && (parked & 0x80000000u) == 0;
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
  std::atomic<std::uint32_t> flags;      // queue_heavy_fence or 0, set at creation
  std::uint8_t reserved[cache_line - 16];
  wait_slot slots[wait_slot_count];
};
static_assert(sizeof(wait_queue) == 64 + 16 * wait_slot_count);
static_assert(offsetof(wait_queue, parked) == 0);
static_assert(offsetof(wait_queue, futex_seq) == 8);
static_assert(offsetof(wait_queue, flags) == 12);
static_assert(offsetof(wait_queue, slots) == 64);

}  // namespace shmio::detail::layout
