#pragma once
// A circular buffer's body: the ring.
// Part of the shared-memory layout: layout.hpp states its rules, docs/protocol.md describes
// each byte, and the static_asserts here pin the same offsets.

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "shmio/detail/layout/wait_queue.hpp"

namespace shmio::detail::layout {

// ---- circular buffer: the body of an object_kind::circular_buffer segment -------------------
//
//  0          64         128        192               768               1344
//  +----------+----------+----------+-----------------+-----------------+------------------...
//  | header   | tail     | head     | readers (queue) | writers (queue) | node 0 | node 1 | ...
//  +----------+----------+----------+-----------------+-----------------+------------------...
//
// Node i sits at nodes_offset + i * node_stride: a 16-byte node_header, then node_size bytes.
// A node's `word` says whose turn it is: (turn - i) mod 2^48 << 16 | reading (1 bit) << 15 |
// owner, for node i. Holding the turn less the index makes a new ring's words all zero (turn i
// for node i, owner 0): a new segment file is zero, so nothing is written to the nodes at
// creation and their pages are first touched when used. In what follows, "turn" is the turn.
//   turn == p,     owner 0            : free for the writer of position p
//   turn == p,     owner w            : participant w is writing position p
//   turn == p + 1, owner 0            : position p is published: `length` bytes are readable
//   turn == p + 1, owner r, reading 1 : participant r is reading position p
// A reader that is done stores turn p + node_count, owner 0: free for the writer of the next lap.
// `tail` and `head` are hints (the next positions to write and read); the node words decide.
// Owners are participant numbers: each open handle holds an exclusive lock on byte
// participant_lock_base + number - 1 of the segment file, so a dead owner can be told from a slow
// one.
//
// A single-writer ring (flags & ring_single) has one writing and one reading handle at a time,
// named by `role` in the tail's and the head's line (0: none; a dead holder's role is taken
// over). Its two holders claim nodes and move the cursors with plain stores, and publish and
// free nodes without a StoreLoad fence: its wait queues carry queue_heavy_fence, and whoever
// parks on them issues the heavy fence (membarrier) between arming and re-checking.

inline constexpr std::uint64_t participant_lock_base = 64;
inline constexpr std::uint32_t max_participants = 4096;
inline constexpr unsigned node_turn_shift = 16;
inline constexpr std::uint32_t ring_single = 1;  // ring_header.flags: one writer, one reader
inline constexpr std::uint64_t node_reading_bit = std::uint64_t{1} << 15;
inline constexpr std::uint64_t node_owner_mask = node_reading_bit - 1;
static_assert(max_participants <= node_owner_mask);

struct ring_header {
  std::uint32_t node_count;    // >= 2
  std::uint32_t node_size;     // >= 1: the largest message
  std::uint32_t node_stride;   // bytes from one node to the next: round_up(16 + node_size, 64)
  std::uint32_t flags;         // ring_single or 0; any other bit: a ring this version cannot use
  std::uint64_t nodes_offset;  // from the start of the body: 1344
  std::uint8_t reserved[40];
};
static_assert(sizeof(ring_header) == 64);
static_assert(offsetof(ring_header, node_count) == 0);
static_assert(offsetof(ring_header, node_size) == 4);
static_assert(offsetof(ring_header, node_stride) == 8);
static_assert(offsetof(ring_header, flags) == 12);
static_assert(offsetof(ring_header, nodes_offset) == 16);

struct alignas(cache_line) ring_cursor {
  std::atomic<std::uint64_t> position;
  std::atomic<std::uint32_t> role;  // single-writer ring: the participant that moves it, or 0
  std::uint8_t reserved[cache_line - 12];
};
static_assert(sizeof(ring_cursor) == cache_line);
static_assert(offsetof(ring_cursor, position) == 0);
static_assert(offsetof(ring_cursor, role) == 8);

struct ring_state {
  ring_header header;
  ring_cursor tail;    // writers' hint, in a line of its own (only writers write it)
  ring_cursor head;    // readers' hint, in a line of its own (only readers write it)
  wait_queue readers;  // readers park here until a node is published
  wait_queue writers;  // writers park here until a node is freed
};
static_assert(offsetof(ring_state, tail) == 64);
static_assert(offsetof(ring_state, head) == 128);
static_assert(offsetof(ring_state, readers) == 192);
static_assert(offsetof(ring_state, writers) == 768);
static_assert(sizeof(ring_state) == 1344);

struct node_header {
  std::atomic<std::uint64_t> word;  // (turn - i) << 16 | reading << 15 | owner, see above
  std::uint32_t length;             // bytes of the message; untrusted: checked against node_size
  std::uint32_t reserved;
};
static_assert(sizeof(node_header) == 16);
static_assert(offsetof(node_header, word) == 0);
static_assert(offsetof(node_header, length) == 8);

inline constexpr std::uint64_t ring_nodes_offset = sizeof(ring_state);
inline constexpr std::uint64_t node_stride_for(std::uint64_t node_size) {
  return (sizeof(node_header) + node_size + cache_line - 1) / cache_line * cache_line;
}

}  // namespace shmio::detail::layout
