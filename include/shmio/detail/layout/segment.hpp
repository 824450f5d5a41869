#pragma once
// The segment header and the segment file's lock bytes.
// Part of the shared-memory layout: layout.hpp states its rules, docs/protocol.md describes
// each byte, and the static_asserts here pin the same offsets.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace shmio::detail::layout {

inline constexpr std::size_t cache_line = 64;  // fixed, not hardware_destructive_interference_size

template <class T>
inline constexpr bool shareable_atomic = std::atomic<T>::is_always_lock_free &&
                                         sizeof(std::atomic<T>) == sizeof(T);
static_assert(shareable_atomic<std::uint8_t> && shareable_atomic<std::uint32_t> &&
              shareable_atomic<std::uint64_t>);

// ---- segment header: the first 64 bytes of every segment file ------------------------------
//
//  0        8        12       16                24       28       32                40      64
//  +--------+--------+--------+--------+--------+--------+--------+--------+--------+--....--+
//  | magic  |version | kind   |   total_size    |body_off|creator |   created_ns    |reserved|
//  +--------+--------+--------+-----------------+--------+--------+-----------------+--------+

inline constexpr std::uint64_t segment_magic = 0x0031304f494d4853ull;  // "SHMIO01\0"
// 2: blocking waiters take wait slots (sleeper ids, bit 63 set); a version 1 process would ring
// them as doorbell sockets, find no socket, and free the slot of a live sleeper.
// 3: a ring node's word holds its turn less the node's index (a new ring's words are zero).
// 4: the lock words of a reader/writer lock and of a broadcast carry their writer's tag (a
// version 3 process would take a tagged word for a damaged one, and reclaim a live lock).
// 5: single-writer rings (ring_header.flags): their publishers store without a StoreLoad fence,
// and a version 4 process parking on one would not issue the heavy fence, and miss wake-ups.
inline constexpr std::uint32_t layout_version = 5;

// The largest body a segment may have: 16 TiB, far past any /dev/shm. A larger file is not one.
inline constexpr std::uint64_t max_body_size = std::uint64_t{1} << 44;

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

}  // namespace shmio::detail::layout
