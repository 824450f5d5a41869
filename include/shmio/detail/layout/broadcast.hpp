#pragma once
// A broadcast buffer's body.
// Part of the shared-memory layout: layout.hpp states its rules, docs/protocol.md describes
// each byte, and the static_asserts here pin the same offsets.

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "shmio/detail/layout/ring.hpp"
#include "shmio/detail/layout/wait_queue.hpp"

namespace shmio::detail::layout {

// ---- broadcast: the body of an object_kind::broadcast segment -------------------------------
//
//  0        64       128      192      256              832              1408
//  +--------+--------+--------+--------+----------------+----------------+----------------...
//  | header | tail   | writer | joins  | readers (queue)| writers (queue)| subscriber table,
//  +--------+--------+--------+--------+----------------+----------------+ then the slots
//
// Position p (0, 1, 2, ... for ever) lives in slot p % slot_count: a 16-byte slot_header, then
// message_size bytes. A slot's `seq` is a seqlock version: 2p + 1 while position p is being
// written, 2p + 2 once it is published. `tail` is the number of published positions. Writers
// take turns through `writer`, a lock word holding the participant number of its holder
// (participant_lock_base + number - 1 is that handle's lock byte, as in a ring).
// Subscriber i owns table entry i while it holds an exclusive lock on byte
// broadcast_subscriber_lock_base + i of the segment file; `cursor` is the next position it
// will read, which reliable writers wait for (tail - cursor < slot_count).

inline constexpr std::uint32_t broadcast_version = 1;
inline constexpr std::uint32_t broadcast_reliable = 0;
inline constexpr std::uint32_t broadcast_lossy = 1;
inline constexpr std::uint64_t broadcast_subscriber_lock_base = 65536;
inline constexpr std::uint32_t broadcast_max_subscribers = 1u << 20;
// Subscriber entry state: generation << 8 | one of these kinds.
inline constexpr std::uint64_t subscriber_free = 0;
inline constexpr std::uint64_t subscriber_active = 1;
inline constexpr std::uint64_t subscriber_evicted = 2;
inline constexpr unsigned subscriber_generation_shift = 8;
inline constexpr std::uint64_t subscriber_kind_mask = 0xff;

struct broadcast_header {
  std::uint32_t version;              // broadcast_version
  std::uint32_t mode;                 // broadcast_reliable or broadcast_lossy
  std::uint32_t slot_count;           // >= 2: messages held
  std::uint32_t message_size;         // >= 1: the largest message
  std::uint32_t slot_stride;          // round_up(16 + message_size, 64)
  std::uint32_t subscriber_capacity;  // entries in the subscriber table, 1 .. 2^20
  std::uint32_t lease_ms;             // reliable: how long a subscriber may block writers
  std::uint32_t reserved0;
  std::uint64_t subscribers_offset;  // from the start of the body: 1408
  std::uint64_t slots_offset;        // 1408 + 64 * subscriber_capacity
  std::uint8_t reserved[16];
};
static_assert(sizeof(broadcast_header) == 64);
static_assert(offsetof(broadcast_header, version) == 0);
static_assert(offsetof(broadcast_header, mode) == 4);
static_assert(offsetof(broadcast_header, slot_count) == 8);
static_assert(offsetof(broadcast_header, message_size) == 12);
static_assert(offsetof(broadcast_header, slot_stride) == 16);
static_assert(offsetof(broadcast_header, subscriber_capacity) == 20);
static_assert(offsetof(broadcast_header, lease_ms) == 24);
static_assert(offsetof(broadcast_header, subscribers_offset) == 32);
static_assert(offsetof(broadcast_header, slots_offset) == 40);

// The writer lock's word: 0 free; else the holder's participant number (bits 0-15) and its tag
// (bits 16-31, random per handle, not 0): a word left by a dead holder differs, but for a 1 in
// 65 535 chance, from any word of the handle that took its number next, so a writer that found
// the holder dead does not take over that next handle's lock by mistake (ABA).
inline constexpr std::uint32_t broadcast_owner_mask = 0xffff;
inline constexpr std::uint32_t broadcast_tag_shift = 16;
static_assert(max_participants <= broadcast_owner_mask);

struct alignas(cache_line) broadcast_writer_line {
  std::atomic<std::uint32_t> owner;  // 0: free; else number | tag << 16 (above)
  std::uint8_t reserved[cache_line - 4];
};
static_assert(sizeof(broadcast_writer_line) == cache_line);
static_assert(offsetof(broadcast_writer_line, owner) == 0);

struct alignas(cache_line) broadcast_joins_line {
  std::atomic<std::uint32_t> high_water;  // 1 + the highest table entry ever taken
  std::uint8_t reserved[cache_line - 4];
};
static_assert(sizeof(broadcast_joins_line) == cache_line);
static_assert(offsetof(broadcast_joins_line, high_water) == 0);

struct broadcast_state {
  broadcast_header header;
  ring_cursor tail;              // published positions; written by the writer holding the lock
  broadcast_writer_line writer;  // the writers' lock
  broadcast_joins_line joins;    // written by joining subscribers only
  wait_queue readers;            // subscribers park here until tail moves (or they are evicted)
  wait_queue writers;            // writers park here for room (reliable) or the lock
};
static_assert(offsetof(broadcast_state, tail) == 64);
static_assert(offsetof(broadcast_state, writer) == 128);
static_assert(offsetof(broadcast_state, joins) == 192);
static_assert(offsetof(broadcast_state, readers) == 256);
static_assert(offsetof(broadcast_state, writers) == 832);
static_assert(sizeof(broadcast_state) == 1408);

struct alignas(cache_line) subscriber_entry {
  std::atomic<std::uint64_t> cursor;     // next position this subscriber reads
  std::atomic<std::uint64_t> state;      // generation << 8 | subscriber_free/active/evicted
  std::atomic<std::uint64_t> heartbeat;  // bumped by the subscriber to renew its lease
  std::atomic<std::uint32_t> pid;        // informational
  std::uint8_t reserved[cache_line - 28];
};
static_assert(sizeof(subscriber_entry) == cache_line);
static_assert(offsetof(subscriber_entry, cursor) == 0);
static_assert(offsetof(subscriber_entry, state) == 8);
static_assert(offsetof(subscriber_entry, heartbeat) == 16);
static_assert(offsetof(subscriber_entry, pid) == 24);

struct broadcast_slot_header {
  std::atomic<std::uint64_t> seq;     // 2p + 1: position p being written; 2p + 2: published
  std::atomic<std::uint32_t> length;  // bytes of the message; untrusted: checked against size
  std::uint32_t reserved;
};
static_assert(sizeof(broadcast_slot_header) == 16);
static_assert(offsetof(broadcast_slot_header, seq) == 0);
static_assert(offsetof(broadcast_slot_header, length) == 8);

inline constexpr std::uint64_t broadcast_subscribers_offset = sizeof(broadcast_state);

}  // namespace shmio::detail::layout
