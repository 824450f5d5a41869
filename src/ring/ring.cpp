#include "shmio/detail/ring.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <new>

#include "shmio/detail/platform.hpp"
#include "shmio/detail/stall.hpp"
#include "shmio/detail/wait_queue.hpp"
#include "shmio/error.hpp"

namespace shmio::detail {
namespace {

using layout::node_owner_mask;
using layout::node_reading_bit;
using layout::node_turn_shift;

constexpr std::uint64_t turn_mask = (std::uint64_t{1} << (64 - node_turn_shift)) - 1;
// A word holds its node's turn less the node's index (layout/ring.hpp), so that the words of a new
// ring are all zero: a new ring's nodes need no store, and their pages are first touched when
// they are first used.
constexpr std::uint64_t make_word(std::uint64_t turn, std::uint32_t index, std::uint16_t owner,
                                  bool reading = false) {
  return ((turn - index) & turn_mask) << node_turn_shift | (reading ? node_reading_bit : 0) | owner;
}
// The turn modulo 2^48 (distance() compares it so).
constexpr std::uint64_t turn_of(std::uint64_t word, std::uint32_t index) {
  return (word >> node_turn_shift) + index;
}
constexpr std::uint16_t owner_of(std::uint64_t word) {
  return static_cast<std::uint16_t>(word & node_owner_mask);
}
constexpr bool is_reading(std::uint64_t word) {
  return (word & node_reading_bit) != 0;
}
// turn - position, as a signed distance modulo 2^48.
constexpr std::int64_t distance(std::uint64_t turn, std::uint64_t position) {
  return static_cast<std::int64_t>(((turn - position) & turn_mask) << node_turn_shift) >>
         node_turn_shift;
}

// Moves a cursor past `position` if nobody has yet; losing the race is fine. In a single-writer
// ring only the cursor's one mover (the role holder, whose `position` is its own last store)
// moves it: a store does.
void help_advance(layout::ring_cursor& c, std::uint64_t position, bool single) {
  // acq_rel (release for the store): the claim of the node at `position` (or its skip) happens
  // before any look that loads the cursor past it (acquire), through every advance after this
  // one; that look then never finds the node older than its claim, which is how a damaged
  // cursor is told from a busy one (the d < 0 branches of the claims). Free on x86, where a CAS
  // is a full barrier.
  if (single) return c.position.store(position + 1, std::memory_order_release);
  c.position.compare_exchange_strong(position, position + 1, std::memory_order_acq_rel,
                                     std::memory_order_relaxed);
}
// acquire: see help_advance.
std::uint64_t load_cursor(const layout::ring_cursor& c) {
  return c.position.load(std::memory_order_acquire);
}

}  // namespace

ring_view::ring_view(layout::ring_state* state, const ring_geometry& g, int fd,
                     std::uint16_t me) noexcept
    : state_(state),
      nodes_(reinterpret_cast<std::byte*>(state) + g.nodes_offset),
      count_(g.node_count),
      size_(g.node_size),
      stride_(g.node_stride),
      fd_(fd),
      me_(me),
      single_(g.single) {}

layout::node_header& ring_view::node(std::uint32_t index) const noexcept {
  return *reinterpret_cast<layout::node_header*>(nodes_ + std::size_t{index} * stride_);
}

bool ring_view::owner_is_dead(patience& record, std::uint64_t word, std::uint32_t index,
                              std::uint16_t owner) noexcept {
  if (owner == me_) return false;  // our own claim, from another thread of this handle
  // The patience restarts when what is stuck changes: the word with its turn, which (unlike
  // the stored word) differs from one node of a lap to the next.
  const std::uint64_t stuck =
      make_word(turn_of(word, index), 0, 0) | (word & (node_reading_bit | node_owner_mask));
  return record.spent(stuck) && !participant_alive(fd_, owner);
}

bool ring_view::take_role(layout::ring_cursor& c) noexcept {
  // acquire: what a dead holder did to the ring happens before our first claim.
  std::uint32_t holder = c.role.load(std::memory_order_acquire);
  for (;;) {
    if (holder == me_) return true;
    if (holder != 0 && holder <= layout::max_participants && participant_alive(fd_, holder))
      return false;
    // acq_rel: as the load; one CAS decides between two takers of a dead holder's role.
    if (c.role.compare_exchange_weak(holder, me_, std::memory_order_acq_rel,
                                     std::memory_order_acquire))
      return true;
  }
}

bool ring_view::hold_role(layout::ring_cursor& c, bool& held) noexcept {
  // Looked at before every claim, not only the first: a role word that no longer names us (a
  // peer wrote over it) must not leave two parties storing claims. relaxed: the word sits in
  // the cursor line that we write anyway.
  if (held && c.role.load(std::memory_order_relaxed) == me_) return true;
  held = take_role(c);
  return held;
}

void ring_view::leave_roles() noexcept {
  if (!single_) return;
  for (layout::ring_cursor* c : {&state_->tail, &state_->head}) {
    std::uint32_t ours = me_;
    // release: our last claims and cursor moves happen before the next holder's (take_role).
    c->role.compare_exchange_strong(ours, 0, std::memory_order_release, std::memory_order_relaxed);
  }
}

claim_status ring_view::try_claim_write(write_claim& out) noexcept {
  auto& tail = state_->tail;
  if (single_ && !hold_role(tail, writing_)) return claim_status::busy;
  std::uint64_t pos = load_cursor(tail);
  for (;;) {
    const auto i = index_of(pos);
    layout::node_header& n = node(i);
    // seq_cst: when this is the re-check after arming, it must not move before the arming.
    std::uint64_t w = n.word.load(std::memory_order_seq_cst);
    const std::int64_t d = distance(turn_of(w, i), pos);
    const std::uint16_t owner = owner_of(w);
    if (d == 0 && owner == 0) {
      // acquire: the previous lap's reader finished with the bytes before it freed the node.
      // The one writer of a single-writer ring stores: only it claims free nodes, and the load
      // above acquired the free.
      if (single_) n.word.store(make_word(pos, i, me_), std::memory_order_relaxed);
      if (single_ ||
          n.word.compare_exchange_weak(w, make_word(pos, i, me_), std::memory_order_acquire,
                                       std::memory_order_relaxed)) {
        help_advance(tail, pos, single_);
        out = {&n, {reinterpret_cast<std::byte*>(&n + 1), size_}, pos, i};
        return claim_status::claimed;
      }
      continue;  // lost the node to another writer: look again at the same position
    }
    if (d == 0) {  // another writer holds this position: move on past it
      help_advance(tail, pos, single_);
    } else if (d == 1 - static_cast<std::int64_t>(count_)) {
      // The node still holds the previous lap's message: unread (full), or being read.
      if (owner == 0) return claim_status::would_block;
      if (!owner_is_dead(stuck_[1], w, i, owner)) {
        if (owner != me_) note_stall();  // if its reader never lets go, look again later
        return claim_status::would_block;
      }
      // Its reader died holding it: that message is lost with the reader; free the node.
      n.word.compare_exchange_strong(w, make_word(pos, i, 0), std::memory_order_acq_rel);
      continue;
    } else if (d < 0) {
      // The previous lap's writer claimed this node before the tail passed it, and we see that
      // claim (help_advance): a node behind the tail is one lap behind and still held by that
      // writer, which has yet to publish (the ring is full for us). Anything else (a node
      // further behind, or not held) means the tail was moved, and "full" would leave every
      // writer waiting for ever. A tail that moved on meanwhile is looked at again.
      // (Its readers see to it if that writer died.)
      if (d == -static_cast<std::int64_t>(count_) && owner != 0) return claim_status::would_block;
      if (load_cursor(tail) == pos) return claim_status::corrupted;
    } else if (d > 2 * static_cast<std::int64_t>(count_) && load_cursor(tail) == pos) {
      // No node is ever more than two laps past the tail (see try_claim_read): the tail itself
      // was damaged. Walking it forward one position at a time could take 2^48 steps; and
      // reporting "full" would leave the writer waiting for room that never comes.
      return claim_status::corrupted;
    } else {
      // The node is past this position (written, or skipped after its writer died before it
      // could move the tail): move the tail on, or we would look at this node for ever.
      help_advance(tail, pos, single_);
    }
    pos = load_cursor(tail);
  }
}

void ring_view::publish(const write_claim& c, std::uint32_t length) noexcept {
  // release: published by the word's store below; release so that a reader of the previous
  // lap's word that loads this length (acquire) sees our claim of the node too, and its
  // re-check of the word fails. Atomic because that reader may be loading it now.
  std::atomic_ref<std::uint32_t>(c.node->length).store(length, std::memory_order_release);
  // seq_cst: release for the bytes, and ordered before notify's read of `parked` (StoreLoad).
  // Release in a single-writer ring: its parkers' heavy fence stands in for the StoreLoad one.
  store_published(*c.node, make_word(c.position + 1, c.index, 0));
  // Keeps the compiler from moving notify's load of `parked` before the store, which a release
  // store alone allows; the processor's reordering is the parkers' heavy fence's to undo.
  std::atomic_signal_fence(std::memory_order_seq_cst);
  notify_one(state_->readers);
}

void ring_view::abandon(const write_claim& c) noexcept {
  // Skip straight to "read and freed": readers move past it, the next lap's writer may use it.
  c.node->word.store(make_word(c.position + count_, c.index, 0), std::memory_order_seq_cst);
  notify_one(state_->readers);  // a reader may be parked behind this node
  notify_one(state_->writers);
}

claim_status ring_view::try_claim_read(read_claim& out, std::size_t capacity,
                                       bool skip_corrupted) noexcept {
  auto& head = state_->head;
  if (single_ && !hold_role(head, reading_)) return claim_status::busy;
  std::uint64_t pos = load_cursor(head);
  for (;;) {
    const auto i = index_of(pos);
    layout::node_header& n = node(i);
    std::uint64_t w = n.word.load(std::memory_order_seq_cst);  // as in try_claim_write
    const std::int64_t d = distance(turn_of(w, i), pos);
    const std::uint16_t owner = owner_of(w);
    if (d == 1 && owner == 0) {
      // Published. The length is stable until the node is claimed, and the CAS below fails if
      // it was claimed (and possibly rewritten) since we read the word.
      // acquire: a writer of the next lap may be storing it concurrently (then the CAS below
      // fails, and the re-check of the word before too_small sees its claim), so it is an
      // atomic access.
      const std::uint32_t length =
          std::atomic_ref<std::uint32_t>(n.length).load(std::memory_order_acquire);
      if (length > size_) {
        if (!skip_corrupted) return claim_status::corrupted;
        // Corrupted: skip it, so that one bad node cannot wedge every reader.
        if (n.word.compare_exchange_strong(w, make_word(pos + count_, i, 0),
                                           std::memory_order_acq_rel)) {
          help_advance(head, pos, single_);
          notify_one(state_->writers);
          return claim_status::corrupted;
        }
        continue;
      }
      if (length > capacity) {
        // A length read after another reader took this position (and a writer of the next lap
        // refilled the node) is not this message's: its claim, seen through the length's
        // acquire, has changed the word. seq_cst, as the load above.
        if (n.word.load(std::memory_order_seq_cst) != w) continue;
        out = {&n, {reinterpret_cast<const std::byte*>(&n + 1), length}, pos, i};
        // The message stays for a read with room for it; the wake-up that brought this read here
        // may have been the only one its publication gave: pass it on to another parked reader.
        notify_one(state_->readers);
        return claim_status::too_small;
      }
      // The one reader of a single-writer ring stores (as the writer's claim).
      if (single_) n.word.store(make_word(pos + 1, i, me_, true), std::memory_order_relaxed);
      if (single_ ||
          n.word.compare_exchange_weak(w, make_word(pos + 1, i, me_, true),
                                       std::memory_order_acquire, std::memory_order_relaxed)) {
        help_advance(head, pos, single_);
        out = {&n, {reinterpret_cast<const std::byte*>(&n + 1), length}, pos, i};
        return claim_status::claimed;
      }
      continue;
    }
    if (d == 1) {
      help_advance(head, pos, single_);  // another reader has it: move on
    } else if (d == 0) {
      // Empty, or a writer is filling it.
      if (owner == 0) return claim_status::would_block;
      if (!owner_is_dead(stuck_[0], w, i, owner)) {
        if (owner != me_) note_stall();  // if its writer never publishes, look again later
        return claim_status::would_block;
      }
      // Its writer died mid-write: a half-written message is never delivered; skip the node.
      if (n.word.compare_exchange_strong(w, make_word(pos + count_, i, 0),
                                         std::memory_order_acq_rel))
        notify_one(state_->writers);
      continue;
    } else if (d > 2 * static_cast<std::int64_t>(count_) && load_cursor(head) == pos) {
      // A node's turn is at most two laps past the head: a node at lap q was freed by the
      // reader of q - count, who had read a head >= q - count (and we acquired its store to the
      // word, so our head load sees at least that), and is at most "done with q" (q + count).
      // Our `pos` may be long stale, so only a head that is still `pos` proves damage; walking
      // it forward one position at a time could take 2^48 steps.
      return claim_status::corrupted;
    } else if (d > 1) {
      help_advance(head, pos, single_);  // skipped (abandoned or recovered) for this lap: move on
    } else {
      // The previous lap's reader claimed this node before the head passed it, and we see that
      // claim (help_advance): a node behind the head is one lap behind and still held by that
      // reader (nothing new for us). Anything else (a node further behind, or not held) means
      // the head was moved, and "empty" would leave every reader waiting for ever. A head that
      // moved on meanwhile is looked at again.
      // (Its writers see to it if that reader died.)
      if (d == 1 - static_cast<std::int64_t>(count_) && owner != 0)
        return claim_status::would_block;
      if (load_cursor(head) == pos) return claim_status::corrupted;
    }
    pos = load_cursor(head);
  }
}

void ring_view::release(const read_claim& c) noexcept {
  // seq_cst: orders our reads of the bytes before the node's reuse, and the store before
  // notify's read of `parked` (release in a single-writer ring, as in publish).
  store_published(*c.node, make_word(c.position + count_, c.index, 0));
  std::atomic_signal_fence(std::memory_order_seq_cst);  // as in publish
  notify_one(state_->writers);
}

void ring_view::prefetch(std::uint64_t position) const noexcept {
  // The header line (whose word the claim CASes, hence the write intent) and the next one, which
  // holds the first bytes of the message; node strides are whole cache lines.
  const auto* p = reinterpret_cast<const char*>(&node(index_of(position)));
  __builtin_prefetch(p, 1);
  if (stride_ > layout::cache_line) __builtin_prefetch(p + layout::cache_line, 1);
}

void ring_view::populate(std::byte* state, const ring_geometry& g, std::uint64_t position,
                         std::uint32_t nodes, platform::page_populator& pages) noexcept {
  pages.add(state, sizeof(layout::ring_state));
  if (g.node_count == 0) return;
  // A node's header line and the first line of its message: the rest of a large node is
  // touched only by a message that long.
  const std::size_t lines = std::min<std::size_t>(g.node_stride, 2 * layout::cache_line);
  for (std::uint32_t i = 0; i < std::min(nodes, g.node_count); ++i) {
    const std::uint64_t index = (position + i) % g.node_count;
    pages.add(state + g.nodes_offset + index * g.node_stride, lines);
  }
}

void ring_view::populate(std::uint64_t position, std::uint32_t nodes) const noexcept {
  platform::page_populator pages;
  auto* state = reinterpret_cast<std::byte*>(state_);
  populate(state, {count_, size_, stride_, static_cast<std::uint64_t>(nodes_ - state)}, position,
           nodes, pages);
}

bool ring_view::recover_node(std::uint32_t i) noexcept {
  auto& n = node(i);
  std::uint64_t w = n.word.load(std::memory_order_acquire);
  if (owner_of(w) != me_ || owner_of(w) == 0) return false;
  // A write claim of position p (turn p) is skipped; a read claim (turn p + 1) is freed. Both
  // end as "done with lap p": turn p + count, owner 0.
  const std::uint64_t lap_start = is_reading(w) ? turn_of(w, i) - 1 : turn_of(w, i);
  return n.word.compare_exchange_strong(w, make_word(lap_start + count_, i, 0),
                                        std::memory_order_acq_rel);
}

void ring_view::recover_own_nodes() noexcept {
  bool recovered = false;
  for (std::uint32_t i = 0; i < count_; ++i)
    recovered |= recover_node(i);
  // Only then: every open would otherwise wake every parked waiter of the ring for nothing.
  if (!recovered) return;
  notify_all(state_->readers);
  notify_all(state_->writers);
}

void ring_view::recover_own_writes() noexcept {
  // A writer claims position p only after loading a tail of p, and the tail only grows: p is
  // never past the tail. No reader moves the head past a node a writer holds (it waits there,
  // or skips the node once its writer is dead, which recovers it): p is never before the head.
  // So a dead writer's claim lies in [head, tail], both bounds holding for as long as it stands
  // (the head loaded first, so that a head and tail moving meanwhile do not look crossed).
  // Cursors further apart than a lap, or crossed (damage; or a head moved past a skipped node
  // before a dead writer's tail, when no claim is left), mean every node.
  const std::uint64_t head = load_cursor(state_->head);
  const std::uint64_t tail = load_cursor(state_->tail);
  const std::uint64_t span = tail - head;
  const std::uint64_t looks = span < count_ ? span + 1 : count_;
  bool recovered = false;
  for (std::uint64_t k = 0; k < looks; ++k)
    recovered |= recover_node(index_of(head + k));
  if (!recovered) return;
  notify_all(state_->readers);
  notify_all(state_->writers);
}

bool ring_view::body_size_for(std::uint64_t node_count, std::uint64_t node_size,
                              std::uint64_t& body_size) noexcept {
  if (node_count < 2 || node_count > UINT32_MAX || node_size == 0 ||
      node_size > UINT32_MAX - 2 * layout::cache_line)
    return false;
  const std::uint64_t stride = layout::node_stride_for(node_size);
  if (node_count > (std::uint64_t{1} << 46) / stride) return false;
  body_size = layout::ring_nodes_offset + node_count * stride;
  return true;
}

void ring_view::initialize(std::span<std::byte> body, std::uint32_t node_count,
                           std::uint32_t node_size, bool single) noexcept {
  auto* st = new (body.data()) layout::ring_state{};
  if (single) {
    st->header.flags = layout::ring_single;
    // relaxed: the segment is published to openers after its initialisation (segment.cpp).
    st->readers.flags.store(layout::queue_heavy_fence, std::memory_order_relaxed);
    st->writers.flags.store(layout::queue_heavy_fence, std::memory_order_relaxed);
  }
  st->header.node_count = node_count;
  st->header.node_size = node_size;
  st->header.node_stride = static_cast<std::uint32_t>(layout::node_stride_for(node_size));
  st->header.nodes_offset = layout::ring_nodes_offset;
  // The nodes are left as the new file has them, zero: every word says "free for the writer of
  // the node's first position", and every length 0. Writing them would touch every page of the
  // ring, a page fault each, where a ring in use touches only the pages of the nodes it uses.
}

std::error_code ring_view::validate(std::span<const std::byte> body, ring_geometry& out,
                                    bool allow_single) noexcept {
  if (body.size() < sizeof(layout::ring_state)) return errc::corrupted;
  // One copy of the header: the memory is shared, and a value checked must be the value used.
  layout::ring_header h;
  std::memcpy(&h, &reinterpret_cast<const layout::ring_state*>(body.data())->header, sizeof h);
  std::uint64_t expected = 0;
  if (!body_size_for(h.node_count, h.node_size, expected) || expected != body.size() ||
      h.node_stride != layout::node_stride_for(h.node_size) ||
      h.nodes_offset != layout::ring_nodes_offset)
    return errc::corrupted;
  const bool single = h.flags == layout::ring_single;
  // The rings of an RPC channel or listener are never single-writer: there the flag is damage.
  if (h.flags != 0 && (!single || !allow_single)) return errc::corrupted;
  // A single-writer ring's parkers must issue the heavy fence (its publishers do not fence);
  // without the mark on its queues they would not. relaxed: as initialize's stores.
  const auto* st = reinterpret_cast<const layout::ring_state*>(body.data());
  const std::uint32_t fence = single ? layout::queue_heavy_fence : 0;
  if (st->readers.flags.load(std::memory_order_relaxed) != fence ||
      st->writers.flags.load(std::memory_order_relaxed) != fence)
    return errc::corrupted;
  out = {h.node_count, h.node_size, h.node_stride, h.nodes_offset, single};
  return {};
}

}  // namespace shmio::detail
