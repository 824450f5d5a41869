#pragma once
// Every structure shmio places in shared memory, in one file. docs/protocol.md describes each
// byte; the static_asserts below pin the same offsets, so the two cannot drift apart silently.
//
// Rules for everything here:
// - fixed-width fields, little-endian (the machine's), no pointers: offsets and counts only;
// - every value read back is untrusted: code that reads it validates it before use;
// - atomics are lock-free and have the size of their value, so another language can use them;
// - fields that different processes write often sit in different 64-byte cache lines.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace shmio::detail::layout {

inline constexpr std::size_t cache_line = 64;  // fixed, not hardware_destructive_interference_size

template <class T>
inline constexpr bool shareable_atomic = std::atomic<T>::is_always_lock_free &&
                                         sizeof(std::atomic<T>) == sizeof(T);
static_assert(shareable_atomic<std::uint32_t> && shareable_atomic<std::uint64_t>);

// ---- segment header: the first 64 bytes of every segment file ------------------------------
//
//  0        8        12       16                24       28       32                40      64
//  +--------+--------+--------+--------+--------+--------+--------+--------+--------+--....--+
//  | magic  |version | kind   |   total_size    |body_off|creator |   created_ns    |reserved|
//  +--------+--------+--------+-----------------+--------+--------+-----------------+--------+

inline constexpr std::uint64_t segment_magic = 0x0031304f494d4853ull;  // "SHMIO01\0"
inline constexpr std::uint32_t layout_version = 1;

struct segment_header {
  std::uint64_t magic;        // segment_magic; anything else is not a shmio segment
  std::uint32_t version;      // layout_version of the creator
  std::uint32_t kind;         // shmio::object_kind
  std::uint64_t total_size;   // bytes in the file, header included
  std::uint32_t body_offset;  // where the object's state starts: sizeof(segment_header)
  std::uint32_t creator_pid;  // for the inspector; never trusted for liveness
  std::uint64_t created_ns;   // CLOCK_REALTIME at creation, for the inspector
  std::uint8_t reserved[24];
};
static_assert(std::is_trivially_copyable_v<segment_header>);
static_assert(sizeof(segment_header) == 64);
static_assert(offsetof(segment_header, magic) == 0);
static_assert(offsetof(segment_header, version) == 8);
static_assert(offsetof(segment_header, kind) == 12);
static_assert(offsetof(segment_header, total_size) == 16);
static_assert(offsetof(segment_header, body_offset) == 24);
static_assert(offsetof(segment_header, creator_pid) == 28);
static_assert(offsetof(segment_header, created_ns) == 32);

// Byte-range locks on the segment file (open-file-description locks, see docs/protocol.md).
inline constexpr std::uint64_t holder_lock_byte = 0;  // shared by every process that has it open
inline constexpr std::uint64_t admin_lock_byte = 1;   // exclusive, briefly, to create/open/remove

// ---- wait queue: who is parked on a condition, and how to wake them -------------------------
//
// A waiting I/O object owns one slot while it exists. It parks by arming its slot (armed = 1,
// then parked += 1 << 32), re-checking its condition, and waiting on its doorbell. A signaller
// publishes, reads `parked`, and only if it is non-zero claims armed slots (CAS 1 -> 0) and
// rings their doorbells. Blocking (non-async) waiters sleep on futex_seq and count themselves
// in the low half of `parked`.

inline constexpr std::uint32_t wait_slot_count = 32;
inline constexpr std::uint64_t parked_doorbell_unit = std::uint64_t{1} << 32;
inline constexpr std::uint64_t parked_sleeper_unit = 1;

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
