#pragma once
// The reader/writer lock, and the locked buffer of shared_array and buffer_read_write.
// Part of the shared-memory layout: layout.hpp states its rules, docs/protocol.md describes
// each byte, and the static_asserts here pin the same offsets.

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "shmio/detail/layout/segment.hpp"
#include "shmio/detail/layout/wait_queue.hpp"

namespace shmio::detail::layout {

// ---- reader/writer lock: part of the body of shared_array and buffer_read_write -------------
//
//  0            64                640               1216
//  +------------+-----------------+-----------------+--------+--------+-----   ---+
//  | control    | readers (queue) | writers (queue) | slot 0 | slot 1 | ...  255  |
//  +------------+-----------------+-----------------+--------+--------+-----   ---+
//
// `writer` is 0 when no writer holds or claims the lock, else owner | rw_writer_held | tag:
//   owner            : the participant number of the writer that claimed the lock;
//   rw_writer_held   : set once every reader share was gone, i.e. the writer holds the lock;
//   tag              : bits 17-31, the writing handle's tag (random, never its number's
//                      previous holder's; its slot holds it): a word left by a dead holder
//                      differs from any word of the handle that took its number next, so a
//                      waiter that found the holder dead does not take over the lock of that
//                      next handle by mistake (ABA).
// A claim without the held bit keeps new readers out while the writer waits for the current
// ones to leave (writers are preferred, so they are never starved by a stream of readers).
// Slot n - 1 counts the shares that participant n holds. Participant n holds an exclusive lock
// on byte participant_lock_base + n - 1 of the segment file while its handle is open, so a
// dead holder (of the writer word or of shares) can be told from a slow one and reclaimed.

inline constexpr std::uint32_t rw_owner_mask = 0xffff;
inline constexpr std::uint32_t rw_writer_held = std::uint32_t{1} << 16;
inline constexpr std::uint32_t rw_tag_shift = 17;
inline constexpr std::uint32_t rw_tag_mask = 0x7fff;   // after the shift
inline constexpr std::uint32_t rw_reader_slots = 256;  // handles open at once, per segment

struct rw_lock_control {
  std::atomic<std::uint32_t> writer;            // 0, or owner | held | tag (see above)
  std::atomic<std::uint32_t> owner_died;        // 1: a dead holder was reclaimed; next one told
  std::atomic<std::uint32_t> participant_high;  // highest participant number claimed so far
  std::uint32_t slot_count;                     // rw_reader_slots
  std::uint8_t reserved[48];
};
static_assert(sizeof(rw_lock_control) == 64);
static_assert(offsetof(rw_lock_control, writer) == 0);
static_assert(offsetof(rw_lock_control, owner_died) == 4);
static_assert(offsetof(rw_lock_control, participant_high) == 8);
static_assert(offsetof(rw_lock_control, slot_count) == 12);

// One cache line each: readers in different processes touch only their own line.
struct alignas(cache_line) rw_reader_slot {
  std::atomic<std::uint32_t> shares;  // shares its participant holds now
  std::atomic<std::uint32_t> pid;     // of the last participant with this number; informational
  std::atomic<std::uint32_t> tag;     // of the last participant with this number (writer word)
  std::uint8_t reserved[cache_line - 12];
};
static_assert(sizeof(rw_reader_slot) == 64);
static_assert(offsetof(rw_reader_slot, shares) == 0);
static_assert(offsetof(rw_reader_slot, pid) == 4);
static_assert(offsetof(rw_reader_slot, tag) == 8);

struct rw_lock_state {
  rw_lock_control control;
  wait_queue readers;  // readers park here until no writer claims the lock
  wait_queue writers;  // writers park here for the writer word, or for the shares to go
  rw_reader_slot slots[rw_reader_slots];
};
static_assert(offsetof(rw_lock_state, readers) == 64);
static_assert(offsetof(rw_lock_state, writers) == 640);
static_assert(offsetof(rw_lock_state, slots) == 1216);
static_assert(sizeof(rw_lock_state) == 1216 + 64 * rw_reader_slots);

// ---- locked buffer: the body of object_kind::shared_array and buffer_read_write --------------
//
//  0                  64                            data_offset          data_offset + data_size
//  +------------------+-----------------------------+--------------------+
//  | locked_buffer_   | rw_lock_state (17600 bytes) | data               |
//  | header           |                             |                    |
//  +------------------+-----------------------------+--------------------+
//
// data_offset = round_up(64 + 64 + sizeof(rw_lock_state), max(64, element_align)) - 64: the data
// is aligned in the file, whose mapping is page-aligned, and the body starts 64 bytes into it
// (after the segment header). The body ends at the end of the data. A buffer_read_write has
// element_size 1 and element_align 1.

inline constexpr std::uint64_t locked_lock_offset = 64;
inline constexpr std::uint32_t max_element_align = 4096;  // the page: segments are page-aligned

struct locked_buffer_header {
  std::uint64_t data_offset;    // from the start of the body (see above)
  std::uint64_t data_size;      // bytes of data: element_size * element_count
  std::uint64_t element_count;  // elements of element_size bytes
  std::uint32_t element_size;   // sizeof the element type (1 for buffer_read_write)
  std::uint32_t element_align;  // alignof the element type: a power of two <= 4096
  std::uint8_t reserved[32];
};
static_assert(sizeof(locked_buffer_header) == 64);
static_assert(offsetof(locked_buffer_header, data_offset) == 0);
static_assert(offsetof(locked_buffer_header, data_size) == 8);
static_assert(offsetof(locked_buffer_header, element_count) == 16);
static_assert(offsetof(locked_buffer_header, element_size) == 24);
static_assert(offsetof(locked_buffer_header, element_align) == 28);

inline constexpr std::uint64_t locked_data_offset_for(std::uint64_t element_align) {
  const std::uint64_t a = element_align > cache_line ? element_align : cache_line;
  constexpr std::uint64_t body_start = sizeof(segment_header);
  return (body_start + locked_lock_offset + sizeof(rw_lock_state) + a - 1) / a * a - body_start;
}
// Up to a cache line of alignment, as before the alignment was taken in the file.
static_assert(locked_data_offset_for(1) == 17664 && locked_data_offset_for(64) == 17664);
static_assert((sizeof(segment_header) + locked_data_offset_for(128)) % 128 == 0);
static_assert((sizeof(segment_header) + locked_data_offset_for(4096)) % 4096 == 0);

}  // namespace shmio::detail::layout
