// Reading what a segment holds, kind by kind, for the inspector: every value checked before it
// is used, read once (another process may be writing), and never written.
#include "read_segments.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <tuple>

#include "shmio/detail/broadcast_ring.hpp"
#include "shmio/detail/layout.hpp"
#include "shmio/detail/platform.hpp"
#include "shmio/detail/ring.hpp"
#include "shmio/detail/rpc_listener.hpp"
#include "shmio/detail/rpc_packet.hpp"
#include "shmio/detail/rw_lock_view.hpp"
#include "shmio/detail/segment_locks.hpp"

namespace shmio::inspect {
namespace {

namespace platform = detail::platform;
namespace layout = detail::layout;
using namespace std::chrono_literals;

}  // namespace

void set_problem(segment_info& info, errc e, std::string text) {
  if (info.status) return;  // the first problem found is the one reported
  info.status = e;
  info.problem = std::move(text);
}

namespace {

wait_queue_info read_queue(const layout::wait_queue& q) {
  wait_queue_info out;
  // relaxed: a snapshot for display; nothing is derived from it but numbers.
  const std::uint64_t parked = q.parked.load(std::memory_order_relaxed);
  out.parked_out_of_range = !layout::parked_in_range(parked);
  out.parked_async = static_cast<std::uint32_t>(parked >> 32);
  out.parked_blocking = static_cast<std::uint32_t>(parked);
  for (const auto& slot : q.slots) {
    const std::uint64_t owner = slot.doorbell.load(std::memory_order_relaxed);  // as above
    if (owner == 0) continue;
    if ((owner & layout::slot_sleeper_bit) != 0) {
      // A blocking sleeper in a slot: count it as blocking, not among the async waits.
      if (slot.armed.load(std::memory_order_relaxed) != 0 && out.parked_async > 0) {
        --out.parked_async;
        ++out.parked_blocking;
      }
      continue;  // it holds the slot for one call, not for the object's life
    }
    ++out.registered;
    out.pids.push_back(slot.pid.load(std::memory_order_relaxed));  // relaxed: as above
  }
  return out;
}

// Every wait queue read for `info`: one whose parked word is out of range was written over.
void check_wait_queues(segment_info& info) {
  std::vector<const wait_queue_info*> queues;
  const auto add_ring = [&](const ring_info& r) {
    queues.push_back(&r.readers);
    queues.push_back(&r.writers);
  };
  if (info.event) queues.push_back(&info.event->waiters);
  if (info.ring) add_ring(*info.ring);
  if (info.rpc) {
    add_ring(info.rpc->to_opener);
    add_ring(info.rpc->to_owner);
  }
  if (info.locked) {
    queues.push_back(&info.locked->lock.readers);
    queues.push_back(&info.locked->lock.writers);
  }
  if (info.broadcast) {
    queues.push_back(&info.broadcast->readers);
    queues.push_back(&info.broadcast->writers);
  }
  if (info.rpc_service) add_ring(info.rpc_service->requests);
  for (const auto* q : queues)
    if (q->parked_out_of_range)
      return set_problem(info, errc::corrupted, "a wait queue's parked count is out of range");
}

// `g` is what ring_view::validate found in `body`: the header is not read again, as a peer may
// have changed it since, and only the values checked may bound the walk over the nodes.
ring_info read_ring(std::span<const std::byte> body, const detail::ring_geometry& g) {
  const auto& st = *reinterpret_cast<const layout::ring_state*>(body.data());
  ring_info r;
  r.node_count = g.node_count;
  r.node_size = g.node_size;
  // relaxed: snapshot for display, as everywhere here. The head read again after the tail: a
  // pair read while the ring moved (we were preempted between the two loads) is read again, so
  // that a busy small ring is not taken for a damaged one.
  for (int tries = 0; tries < 8; ++tries) {
    r.head = st.head.position.load(std::memory_order_relaxed);
    r.tail = st.tail.position.load(std::memory_order_relaxed);
    if (st.head.position.load(std::memory_order_relaxed) == r.head) break;
  }
  // A hint lags its ring by a few positions at most; two laps apart either way (in a pair read
  // while the head stood still) is damage.
  const std::uint64_t laps2 = 2 * std::uint64_t{g.node_count};
  r.cursors_apart = r.tail - r.head > laps2 && r.head - r.tail > laps2 &&
                    st.head.position.load(std::memory_order_relaxed) == r.head;
  r.readers = read_queue(st.readers);
  r.writers = read_queue(st.writers);
  if (g.single) {
    r.single = true;
    // relaxed: snapshot for display. A role naming no participant number is shown as is.
    r.writer = st.tail.role.load(std::memory_order_relaxed);
    r.reader = st.head.role.load(std::memory_order_relaxed);
  }
  const std::byte* nodes = body.data() + g.nodes_offset;
  const std::uint64_t turn_mask = (std::uint64_t{1} << (64 - layout::node_turn_shift)) - 1;
  for (std::uint32_t i = 0; i < r.node_count; ++i) {
    const auto& n =
        *reinterpret_cast<const layout::node_header*>(nodes + std::size_t{i} * g.node_stride);
    const std::uint64_t w = n.word.load(std::memory_order_relaxed);  // relaxed: snapshot
    const std::uint32_t length = n.length;                           // one copy: checked, counted
    // The word holds the turn less the node's index (docs/protocol.md).
    const std::uint64_t turn = ((w >> layout::node_turn_shift) + i) & turn_mask;
    const bool owned = (w & layout::node_owner_mask) != 0;
    const bool reading = (w & layout::node_reading_bit) != 0;
    // Node i serves positions p with p % node_count == i: turn p means "for a writer", turn
    // p + 1 "published for a reader" (docs/protocol.md).
    const std::uint64_t lap_offset = turn % r.node_count;
    if (lap_offset == i && !reading) {
      ++(owned ? r.writing : r.free);
    } else if (lap_offset == (i + 1) % r.node_count && (owned == reading)) {
      if (owned)
        ++r.reading;
      else if (length > r.node_size)
        ++r.invalid;
      else
        ++r.published;
    } else {
      ++r.invalid;
    }
  }
  return r;
}

void read_event(std::span<const std::byte> body, segment_info& info) {
  if (body.size() < sizeof(layout::event_state))
    return set_problem(info, errc::corrupted, "event body too small");
  const auto& ev = *reinterpret_cast<const layout::event_state*>(body.data());
  const std::uint32_t signalled = ev.signalled.load(std::memory_order_relaxed);  // snapshot
  const std::uint32_t mode = ev.mode;  // one copy: the value checked is the value shown
  if (mode != layout::event_auto_reset && mode != layout::event_manual_reset)
    return set_problem(info, errc::corrupted, "event mode " + std::to_string(mode));
  if (signalled > 1)
    return set_problem(info, errc::corrupted, "event state " + std::to_string(signalled));
  info.event =
      event_info{signalled == 1, mode == layout::event_manual_reset, read_queue(ev.waiters)};
}

void read_circular_buffer(std::span<const std::byte> body, segment_info& info) {
  detail::ring_geometry g;
  if (detail::ring_view::validate(body, g, true))
    return set_problem(info, errc::corrupted,
                       "ring header inconsistent with the file size or its mode");
  info.ring = read_ring(body, g);
  if (info.ring->invalid)
    set_problem(info, errc::corrupted, std::to_string(info.ring->invalid) + " invalid nodes");
  else if (info.ring->cursors_apart)
    set_problem(info, errc::corrupted, "head and tail further apart than the ring allows");
}

void read_rpc(std::span<const std::byte> body, int fd, segment_info& info) {
  if (body.size() < sizeof(layout::rpc_header))
    return set_problem(info, errc::corrupted, "rpc body too small");
  // One copy of each field: the memory is shared, and a value checked must be the value used.
  const auto& h = *reinterpret_cast<const layout::rpc_header*>(body.data());
  const std::uint32_t version = h.version;
  if (version != layout::rpc_version)
    return set_problem(info, errc::incompatible, "rpc version " + std::to_string(version));
  const std::uint32_t node_count = h.node_count;
  const std::uint32_t node_size = h.node_size;
  const std::uint64_t header_ring_bytes = h.ring_bytes;
  const std::uint64_t to_opener_offset = h.to_opener_offset;
  const std::uint64_t to_owner_offset = h.to_owner_offset;
  std::uint64_t ring_bytes = 0;
  if (!detail::ring_view::body_size_for(node_count, node_size, ring_bytes) ||
      node_size <= sizeof(layout::packet_header) || header_ring_bytes != ring_bytes ||
      to_opener_offset != sizeof(layout::rpc_header) ||
      to_owner_offset != sizeof(layout::rpc_header) + ring_bytes ||
      body.size() != sizeof(layout::rpc_header) + 2 * ring_bytes)
    return set_problem(info, errc::corrupted, "rpc header inconsistent with the file size");
  auto to_opener = body.subspan(to_opener_offset, ring_bytes);
  auto to_owner = body.subspan(to_owner_offset, ring_bytes);
  detail::ring_geometry to_opener_geometry, to_owner_geometry;
  if (detail::ring_view::validate(to_opener, to_opener_geometry) ||
      detail::ring_view::validate(to_owner, to_owner_geometry))
    return set_problem(info, errc::corrupted, "rpc ring header inconsistent");
  rpc_info r;
  r.owner_pid = h.owner_pid.load(std::memory_order_relaxed);                  // relaxed: snapshot
  r.opener_pid = h.opener_pid.load(std::memory_order_relaxed);                // relaxed: snapshot
  r.opener_generation = h.opener_generation.load(std::memory_order_relaxed);  // relaxed: snapshot
  r.max_message_size = h.max_message_size;
  std::error_code ec;
  r.owner_attached = platform::byte_locked_by_other(fd, layout::rpc_owner_lock_byte, ec);
  r.opener_attached = platform::byte_locked_by_other(fd, layout::rpc_opener_lock_byte, ec);
  r.to_opener = read_ring(to_opener, to_opener_geometry);
  r.to_owner = read_ring(to_owner, to_owner_geometry);
  info.rpc = std::move(r);
  if (info.rpc->to_opener.invalid || info.rpc->to_owner.invalid)
    set_problem(info, errc::corrupted, "invalid ring nodes");
  else if (info.rpc->to_opener.cursors_apart || info.rpc->to_owner.cursors_apart)
    set_problem(info, errc::corrupted, "a ring's head and tail further apart than it allows");
}

std::string hex(std::uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// Whether some process holds byte `lock_byte` of the file; an error counts as "no".
bool byte_held(int fd, std::uint64_t lock_byte) {
  std::error_code ec;
  return platform::byte_locked_by_other(fd, lock_byte, ec) && !ec;
}

void read_locked(std::span<const std::byte> body, int fd, segment_info& info) {
  if (body.size() < layout::locked_data_offset_for(1))
    return set_problem(info, errc::corrupted, "locked-buffer body too small");
  const auto& st =
      *reinterpret_cast<const layout::rw_lock_state*>(body.data() + layout::locked_lock_offset);
  // relaxed, here and below: a snapshot for display; nothing is derived from it but numbers.
  const std::uint32_t word = st.control.writer.load(std::memory_order_relaxed);
  const std::uint32_t died = st.control.owner_died.load(std::memory_order_relaxed);
  layout::locked_buffer_header h;  // the copy validated is the copy shown
  if (detail::validate_locked_body(body, 0, 0, h)) {
    // Which part: the lock's words (each checked again, as they may have changed) or the rest.
    const std::uint32_t high = st.control.participant_high.load(std::memory_order_relaxed);
    if (st.control.slot_count != layout::rw_reader_slots)
      return set_problem(info, errc::corrupted,
                         "lock slot count " + std::to_string(st.control.slot_count));
    if (!detail::rw_lock_view::well_formed(word))
      return set_problem(info, errc::corrupted, "lock word " + hex(word));
    if (died > 1)
      return set_problem(info, errc::corrupted, "lock owner_died flag " + std::to_string(died));
    if (high > layout::rw_reader_slots)
      return set_problem(info, errc::corrupted, "lock participant count " + std::to_string(high));
    return set_problem(info, errc::corrupted,
                       "locked-buffer header inconsistent with the file size");
  }
  locked_buffer_info r;
  r.element_size = h.element_size;
  r.element_align = h.element_align;
  r.length = h.element_count;
  r.data_size = h.data_size;
  lock_info& l = r.lock;
  std::uint32_t last_share = 0;  // the highest participant number holding a share
  for (std::uint32_t n = 1; n <= layout::rw_reader_slots; ++n) {
    const auto& slot = st.slots[n - 1];
    const std::uint32_t shares = slot.shares.load(std::memory_order_relaxed);
    const bool alive = byte_held(fd, layout::participant_lock_base + n - 1);
    l.participants += alive;
    if (shares == 0) continue;
    l.shares += shares;
    ++l.share_holders;
    l.dead_holders += !alive;
    last_share = n;
  }
  // After the slots: a participant raises the count before its first share, so a share past
  // the count read now was never taken by a participant.
  const std::uint32_t high = st.control.participant_high.load(std::memory_order_relaxed);
  if (last_share > high)
    return set_problem(info, errc::corrupted,
                       "shares in slot " + std::to_string(last_share) + " past the " +
                           std::to_string(high) + " participants");
  // `word` was read before the validation, which read the word again: it is checked itself
  // before it indexes a slot (another process may have changed it in between).
  if (!detail::rw_lock_view::well_formed(word))
    return set_problem(info, errc::corrupted, "lock word " + hex(word));
  l.writer = word & layout::rw_owner_mask;
  if (l.writer != 0) {
    l.state = (word & layout::rw_writer_held) != 0 ? lock_info::state_kind::exclusive
                                                   : lock_info::state_kind::claimed;
    const auto& slot = st.slots[l.writer - 1];  // in range: well_formed
    // A word whose tag is not its number's holder's was left by an earlier, dead holder.
    const bool by_holder = detail::rw_lock_view::tag_matches(word, slot);
    l.writer_pid = by_holder ? slot.pid.load(std::memory_order_relaxed) : 0;
    l.dead_holders += !by_holder || !byte_held(fd, layout::participant_lock_base + l.writer - 1);
  } else if (l.shares != 0) {
    l.state = lock_info::state_kind::shared;
  }
  l.owner_dead = l.dead_holders != 0;
  l.owner_died_pending = died == 1;
  l.readers = read_queue(st.readers);
  l.writers = read_queue(st.writers);
  info.locked = std::move(r);
}

void read_broadcast(std::span<const std::byte> body, int fd, segment_info& info) {
  layout::broadcast_header h{};
  if (auto ec = detail::broadcast_geometry::validate(body, h)) {
    if (ec == errc::incompatible)
      return set_problem(info, errc::incompatible,
                         "broadcast version " + std::to_string(h.version));
    return set_problem(info, errc::corrupted, "broadcast header inconsistent with the file size");
  }
  const auto& st = *reinterpret_cast<const layout::broadcast_state*>(body.data());
  broadcast_info b;
  b.lossy = h.mode == layout::broadcast_lossy;
  b.slot_count = h.slot_count;
  b.message_size = h.message_size;
  b.max_subscribers = h.subscriber_capacity;
  b.lease_ms = h.lease_ms;
  // relaxed, here and below: a snapshot for display; nothing is derived from it but numbers.
  const std::uint32_t word = st.writer.owner.load(std::memory_order_relaxed);
  b.writer = word & layout::broadcast_owner_mask;  // the number; the tag above it is no one's
  if (b.writer > layout::max_participants || (word != 0 && b.writer == 0))
    return set_problem(info, errc::corrupted, "writer lock word " + hex(word));
  if (b.writer != 0) b.writer_alive = byte_held(fd, layout::participant_lock_base + b.writer - 1);
  const std::uint32_t high = st.joins.high_water.load(std::memory_order_relaxed);
  if (high > h.subscriber_capacity)
    return set_problem(info, errc::corrupted,
                       "subscriber high-water mark " + std::to_string(high) + " past the " +
                           std::to_string(h.subscriber_capacity) + " entries");
  // Entries and slots first, the tail last: the tail only grows, so a cursor, or a slot version
  // past the position the tail names (the writer publishes a slot, then moves the tail: a
  // published slot of position tail is a write between its two steps, or a writer killed
  // there), read afterwards is damage, not a race with a writer.
  const auto* entries =
      reinterpret_cast<const layout::subscriber_entry*>(body.data() + h.subscribers_offset);
  std::uint64_t max_cursor = 0;
  for (std::uint32_t i = 0; i < high; ++i) {
    const std::uint64_t state = entries[i].state.load(std::memory_order_relaxed);
    const std::uint64_t kind = state & layout::subscriber_kind_mask;
    if (kind == layout::subscriber_free) continue;
    if (kind == layout::subscriber_evicted) {
      ++b.evicted_subscribers;
      continue;
    }
    if (kind != layout::subscriber_active)
      return set_problem(info, errc::corrupted,
                         "subscriber entry " + std::to_string(i) + " state " + hex(state));
    ++b.subscribers;
    b.live_subscribers += byte_held(fd, layout::broadcast_subscriber_lock_base + i);
    const std::uint64_t cursor = entries[i].cursor.load(std::memory_order_relaxed);
    max_cursor = std::max(max_cursor, cursor);
    if (!b.slowest_lag || cursor < *b.slowest_lag) {  // the cursor for now; the lag below
      b.slowest_lag = cursor;
      b.slowest_pid = entries[i].pid.load(std::memory_order_relaxed);
    }
  }
  // A slot's version names its position: 2p + 1 while p is written, 2p + 2 once published.
  std::vector<std::uint64_t> versions(h.slot_count);
  std::vector<std::uint32_t> lengths(h.slot_count);
  const std::byte* slots = body.data() + h.slots_offset;
  for (std::uint32_t i = 0; i < h.slot_count; ++i) {
    const auto& slot = *reinterpret_cast<const layout::broadcast_slot_header*>(
        slots + std::size_t{i} * h.slot_stride);
    versions[i] = slot.seq.load(std::memory_order_relaxed);
    lengths[i] = slot.length.load(std::memory_order_relaxed);
  }
  // acquire (fence): the cursors and versions above were loaded before the tail.
  std::atomic_thread_fence(std::memory_order_acquire);
  b.write_sequence = st.tail.position.load(std::memory_order_relaxed);
  if (max_cursor > b.write_sequence)
    return set_problem(info, errc::corrupted,
                       "a subscriber cursor " + std::to_string(max_cursor) + " past the tail " +
                           std::to_string(b.write_sequence));
  if (b.slowest_lag) b.slowest_lag = b.write_sequence - *b.slowest_lag;
  for (std::uint32_t i = 0; i < h.slot_count; ++i) {
    const std::uint64_t v = versions[i];
    if (v == 0) {
      ++b.empty;
      continue;
    }
    const std::uint64_t position = (v - 1) / 2;
    const bool being_written = v % 2 == 1;
    if (position % h.slot_count != i || position > b.write_sequence ||
        (!being_written && lengths[i] > h.message_size))
      ++b.invalid;
    else
      ++(being_written ? b.writing : b.published);
  }
  b.readers = read_queue(st.readers);
  b.writers = read_queue(st.writers);
  info.broadcast = std::move(b);
  if (info.broadcast->invalid)
    set_problem(info, errc::corrupted, std::to_string(info.broadcast->invalid) + " invalid slots");
}

// An RPC service's method table (its calls per method): false if it is inconsistent. Each
// slot's fields are copied once and checked.
bool read_methods(std::span<const std::byte> bytes, std::vector<rpc_method_info>& out) {
  const auto& t = *reinterpret_cast<const layout::method_table*>(bytes.data());
  // acquire: the slots counted in `used` have their names written.
  const std::uint32_t used = t.used.load(std::memory_order_acquire);
  const std::uint32_t slot_count = t.slot_count;
  if (slot_count != layout::method_slots || used > slot_count) return false;
  for (std::uint32_t i = 0; i < used; ++i) {
    const auto& slot = t.slots[i];
    // acquire: a taken slot's name is written.
    if (slot.taken.load(std::memory_order_acquire) != 1) return false;
    const std::uint8_t length = slot.name_length;
    const std::uint8_t cut = slot.cut;
    if (length > layout::method_name_bytes || cut > 1) return false;
    rpc_method_info m;
    char name[layout::method_name_bytes];
    std::memcpy(name, slot.name, sizeof name);  // one copy: the server may still write
    m.name.assign(name, length);
    m.name_cut = cut == 1;
    m.calls = slot.calls.load(std::memory_order_relaxed);  // relaxed: a snapshot
    out.push_back(std::move(m));
  }
  return true;
}

// The body of an RPC service: its header (each field copied once, then checked as a client that
// connects checks it, see validate_listener) and its connect ring. Its clients are found later,
// among the other files.
void read_listener(std::span<const std::byte> body, int fd, segment_info& info) {
  if (body.size() < sizeof(layout::listener_header))
    return set_problem(info, errc::corrupted, "rpc service body too small");
  const auto& h = *reinterpret_cast<const layout::listener_header*>(body.data());
  const std::uint32_t version = h.version;
  if (version != layout::listener_version)
    return set_problem(info, errc::incompatible, "rpc service version " + std::to_string(version));
  const std::uint32_t node_count = h.node_count;
  const std::uint32_t node_size = h.node_size;
  const std::uint32_t max_message_size = h.max_message_size;
  const std::uint64_t timeout_ms = h.default_timeout_ms;
  const std::uint64_t ring_offset = h.ring_offset;
  const std::uint64_t ring_bytes = h.ring_bytes;
  const std::uint32_t backlog = h.backlog;
  const std::uint64_t methods_offset = h.methods_offset;
  // The sizes every client makes its channel with: what a channel may have (as read_rpc checks).
  std::uint64_t channel_ring = 0;
  if (!detail::ring_view::body_size_for(node_count, node_size, channel_ring) ||
      node_size <= sizeof(layout::packet_header))
    return set_problem(info, errc::corrupted,
                       "channel rings of " + std::to_string(node_count) + " nodes of " +
                           std::to_string(node_size) + " bytes");
  if (std::chrono::milliseconds ignored; !detail::decode_timeout(timeout_ms, ignored))
    return set_problem(info, errc::corrupted, "default timeout " + std::to_string(timeout_ms));
  if (ring_offset != sizeof(layout::listener_header) ||
      body.size() < ring_offset + sizeof(layout::method_table) ||
      ring_bytes != body.size() - ring_offset - sizeof(layout::method_table) ||
      methods_offset != ring_offset + ring_bytes || methods_offset % 8 != 0)
    return set_problem(info, errc::corrupted, "rpc service header inconsistent with the file size");
  auto ring = body.subspan(ring_offset, ring_bytes);
  detail::ring_geometry g;
  if (detail::ring_view::validate(ring, g) || g.node_size != sizeof(layout::connect_request))
    return set_problem(info, errc::corrupted, "connect ring header inconsistent");
  // The acceptor goes by the ring's own count; a header that says otherwise was damaged.
  if (backlog != g.node_count)
    return set_problem(info, errc::corrupted,
                       "backlog " + std::to_string(backlog) + " but the connect ring has " +
                           std::to_string(g.node_count) + " nodes");
  rpc_service_info r;
  r.node_count = node_count;
  r.node_size = node_size;
  r.max_message_size = max_message_size;
  if (timeout_ms != layout::rpc_no_timeout) r.default_timeout_ms = timeout_ms;
  r.server_pid = h.server_pid.load(std::memory_order_relaxed);  // relaxed: snapshot
  r.accepted = h.accepted.load(std::memory_order_relaxed);      // relaxed: snapshot
  r.server_alive = byte_held(fd, layout::listener_server_lock_byte);
  r.requests = read_ring(ring, g);
  if (!read_methods(body.subspan(methods_offset, sizeof(layout::method_table)), r.methods))
    return set_problem(info, errc::corrupted, "method table inconsistent");
  info.rpc_service = std::move(r);
  if (info.rpc_service->requests.invalid)
    set_problem(info, errc::corrupted,
                std::to_string(info.rpc_service->requests.invalid) + " invalid connect ring nodes");
  else if (info.rpc_service->requests.cursors_apart)
    set_problem(info, errc::corrupted,
                "the connect ring's head and tail further apart than it allows");
}

// Reads the header and, for known kinds, the body of the mapped file.
}  // namespace

void read_contents(const std::byte* base, std::size_t size, int fd, segment_info& info) {
  layout::segment_header h;
  std::memcpy(&h, base, sizeof h);
  if (h.magic != layout::segment_magic)
    return set_problem(info, errc::corrupted, "not a shmio segment (bad magic)");
  info.header_read = true;
  info.version = h.version;
  info.kind = h.kind;
  info.total_size = h.total_size;
  info.creator_pid = h.creator_pid;
  info.creator_alive = platform::process_alive(h.creator_pid);
  info.created_ns = h.created_ns;
  if (h.version != layout::layout_version)
    return set_problem(info, errc::incompatible, "layout version " + std::to_string(h.version));
  if (h.total_size != size)
    return set_problem(
        info, errc::corrupted,
        "header size " + std::to_string(h.total_size) + " but file size " + std::to_string(size));
  if (h.body_offset != sizeof(layout::segment_header))
    return set_problem(info, errc::corrupted, "body offset " + std::to_string(h.body_offset));
  std::span<const std::byte> body(base + h.body_offset, size - h.body_offset);
  switch (static_cast<object_kind>(h.kind)) {
    case object_kind::event:
      read_event(body, info);
      break;
    case object_kind::circular_buffer:
      read_circular_buffer(body, info);
      break;
    case object_kind::rpc:
      read_rpc(body, fd, info);
      break;
    case object_kind::shared_array:
    case object_kind::buffer_read_write:
      read_locked(body, fd, info);
      break;
    case object_kind::broadcast:
      read_broadcast(body, fd, info);
      break;
    case object_kind::rpc_listener:
      read_listener(body, fd, info);
      break;
    default:
      return;  // header only
  }
  check_wait_queues(info);
}

}  // namespace shmio::inspect
