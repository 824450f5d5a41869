#pragma once
// The lock-free multi-producer/multi-consumer node ring of a circular_buffer, over the shared
// layout::ring_state (see layout/ring.hpp for the node word's states).
//
// Based on Vyukov's bounded MPMC queue, with one change that makes it survive kill -9: a party
// claims a *node* (CAS on its word, recording its participant number) before it advances the
// shared cursor, and everybody helps advance a cursor past a claimed node. So a party that dies
// at any instruction leaves a node that names it, and whoever waits on that node can ask the
// kernel whether its owner still lives (a file lock) and, if not, skip or free the node.
//
// Positions only grow. Turns are positions modulo 2^48, compared with wrap-around arithmetic.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <system_error>

#include "shmio/detail/layout.hpp"
#include "shmio/detail/liveness.hpp"
#include "shmio/detail/platform.hpp"

namespace shmio::detail {

/// A node this participant claimed for writing: fill `data`, then publish or abandon.
struct write_claim {
  layout::node_header* node = nullptr;
  std::span<std::byte> data;
  std::uint64_t position = 0;
  std::uint32_t index = 0;  // the node's, position % node_count
};

/// A published node this participant claimed for reading: use `data`, then release.
struct read_claim {
  layout::node_header* node = nullptr;
  std::span<const std::byte> data;
  std::uint64_t position = 0;
  std::uint32_t index = 0;  // the node's, position % node_count
};

/// A ring's sizes, copied out of its header once and checked (validate): the only values of the
/// header a ring_view uses, so that a peer rewriting the header cannot change them under it.
struct ring_geometry {
  std::uint32_t node_count = 0;
  std::uint32_t node_size = 0;
  std::uint32_t node_stride = 0;
  std::uint64_t nodes_offset = 0;
  bool single = false;  // layout::ring_single: one writing and one reading handle at a time
};

enum class claim_status {
  claimed,
  would_block,  // full (write) or empty (read)
  too_small,    // read: the next message is larger than the caller can take; it stays
  corrupted,    // read: the next message's length is out of range (it was skipped, unless the
                // caller asked to leave it); read or write: the head or tail is damaged (more
                // than two laps behind a node)
  busy,         // single-writer ring: another live handle writes (or reads) it
};

class ring_view {
 public:
  ring_view() = default;
  /// `g` is what validate() found in `state`'s body; `fd` is the segment file, `me` this
  /// handle's participant number (1-based, its lock held). For a single-writer ring (g.single)
  /// the process must have enabled the heavy fence (platform::enable_heavy_fence).
  ring_view(layout::ring_state* state, const ring_geometry& g, int fd, std::uint16_t me) noexcept;

  std::uint32_t node_count() const noexcept { return count_; }
  std::uint32_t node_size() const noexcept { return size_; }
  bool single() const noexcept { return single_; }
  layout::ring_state& state() const noexcept { return *state_; }

  claim_status try_claim_write(write_claim& out) noexcept;
  /// Makes the message (its first `length` bytes) readable and wakes a parked reader.
  void publish(const write_claim& c, std::uint32_t length) noexcept;
  /// Gives the node back unpublished: readers skip it.
  void abandon(const write_claim& c) noexcept;

  /// `capacity` is the most the caller can take; a longer message is reported (too_small, with
  /// its length in `out.data.size()`) and left in place. A message whose length is out of range
  /// is skipped and reported (corrupted); with `skip_corrupted` false it is only reported and
  /// left in place, for the next read to skip and report (a batch ends before it).
  claim_status try_claim_read(read_claim& out, std::size_t capacity,
                              bool skip_corrupted = true) noexcept;
  /// Frees the node for the writers of the next lap and wakes a parked writer.
  void release(const read_claim& c) noexcept;

  /// A hint that this participant is about to claim the node at `position` (a batch's next
  /// message): starts loading its lines into this core's cache while the current one is used.
  void prefetch(std::uint64_t position) const noexcept;

  /// Adds to `pages` the state and the first lines of the `nodes` nodes from `position` on of
  /// the ring at `state` with the sizes `g`: pages an end is about to touch, mapped in one
  /// system call where a page fault each would cost several times as much (an end of a
  /// short-lived connection). Nothing is read or written, so the ring need not be validated
  /// yet, but the caller makes sure that a ring of sizes `g` at `state` lies in its mapping.
  static void populate(std::byte* state, const ring_geometry& g, std::uint64_t position,
                       std::uint32_t nodes, platform::page_populator& pages) noexcept;
  /// The same for this ring, at once.
  void populate(std::uint64_t position, std::uint32_t nodes) const noexcept;

  /// Frees or skips every node a previous holder of our participant number left claimed.
  void recover_own_nodes() noexcept;
  /// Single-writer ring: gives up a writer's or reader's role that names our participant
  /// number. At open (a previous holder of the number died with it) and when the handle is
  /// gone (nothing of it claims any more).
  void leave_roles() noexcept;
  /// recover_own_nodes for a ring in which no handle holding our participant number ever read
  /// (the connect ring of an RPC listener, which clients only write): a writer's claim lies
  /// between the head and the tail, so only those nodes are looked at (all of them if the
  /// cursors say otherwise), and a join touches the pages of a few nodes, not of all.
  void recover_own_writes() noexcept;

  /// Sizes and offsets for a new ring; false if they do not fit the limits.
  static bool body_size_for(std::uint64_t node_count, std::uint64_t node_size,
                            std::uint64_t& body_size) noexcept;
  /// Writes a new ring's header into `body`, which must be all zero (a new segment file's):
  /// the nodes are left as they are (see layout/ring.hpp, the node word).
  static void initialize(std::span<std::byte> body, std::uint32_t node_count,
                         std::uint32_t node_size, bool single = false) noexcept;
  /// Checks a ring's header against the size of its body, reading each field once, and
  /// gives the values it checked. A single-writer ring is corrupted unless `allow_single` (the
  /// rings of an RPC channel never are one).
  static std::error_code validate(std::span<const std::byte> body, ring_geometry& out,
                                  bool allow_single = false) noexcept;
  static std::error_code validate(std::span<const std::byte> body) noexcept {
    ring_geometry ignored;
    return validate(body, ignored);
  }

 private:
  std::uint32_t index_of(std::uint64_t position) const noexcept {
    return static_cast<std::uint32_t>(position % count_);
  }
  layout::node_header& node(std::uint32_t index) const noexcept;
  // True if `owner`, holding the node whose word is `word`, has held it unchanged past its
  // patience and is gone (liveness.hpp).
  bool owner_is_dead(patience& record, std::uint64_t word, std::uint32_t index,
                     std::uint16_t owner) noexcept;
  // Frees or skips node i if we hold a claim on it (a previous holder of our number left it);
  // true if it did.
  bool recover_node(std::uint32_t i) noexcept;
  // Single-writer ring: takes the role `c` names for us, or finds it ours; false if another live
  // participant holds it.
  bool take_role(layout::ring_cursor& c) noexcept;
  // Before a claim: true if the role `c` names is ours (taking it if free), `held` caching it.
  bool hold_role(layout::ring_cursor& c, bool& held) noexcept;
  // A publication or a free: `w` stored to `n`'s word with release where parkers issue the
  // heavy fence, else seq_cst. (Two stores, each with a constant order: a store given its order
  // at run time is compiled as seq_cst.)
  void store_published(layout::node_header& n, std::uint64_t w) const noexcept {
    if (single_ && platform::heavy_fence_registered())
      n.word.store(w, std::memory_order_release);
    else
      n.word.store(w, std::memory_order_seq_cst);
  }

  layout::ring_state* state_ = nullptr;
  std::byte* nodes_ = nullptr;
  std::uint32_t count_ = 0;
  std::uint32_t size_ = 0;
  std::uint32_t stride_ = 0;
  int fd_ = -1;
  std::uint16_t me_ = 0;
  bool single_ = false;  // one writer, one reader: claims and cursor moves are plain stores
  // The roles this handle took (single_ only). Each is used by one thread at a time: the
  // single-writer contract (circular_buffer.hpp).
  bool writing_ = false;
  bool reading_ = false;
  // The node we last found stuck: one record per direction, or a handle waiting both to read
  // and to write would keep resetting it.
  patience stuck_[2];  // [0]: reading, [1]: writing
};

}  // namespace shmio::detail
