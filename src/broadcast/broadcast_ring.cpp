#include "shmio/detail/broadcast_ring.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <new>

#include "shmio/detail/platform.hpp"
#include "shmio/detail/stall.hpp"
#include "shmio/detail/wait_queue.hpp"
#include "shmio/error.hpp"

namespace shmio::detail {
namespace {

using layout::subscriber_active;
using layout::subscriber_evicted;
using layout::subscriber_free;
using layout::subscriber_generation_shift;
using layout::subscriber_kind_mask;

// How often a blocked writer asks whether the subscribers in its way still live.
constexpr std::int64_t liveness_interval_ns = 5'000'000;
constexpr std::uint64_t max_lease_ms = 24ull * 3600 * 1000;
constexpr std::uint64_t max_slot_count = std::uint64_t{1} << 24;

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

constexpr std::uint64_t published(std::uint64_t position) {
  return 2 * position + 2;
}
constexpr std::uint64_t kind_of(std::uint64_t state) {
  return state & subscriber_kind_mask;
}
constexpr std::uint64_t with_kind(std::uint64_t state, std::uint64_t kind) {
  return (state & ~subscriber_kind_mask) | kind;
}
std::uint64_t slot_stride_for(std::uint64_t message_size) {
  return (sizeof(layout::broadcast_slot_header) + message_size + layout::cache_line - 1) /
         layout::cache_line * layout::cache_line;
}

}  // namespace

// ---- geometry --------------------------------------------------------------------------------

broadcast_geometry::broadcast_geometry(layout::broadcast_state* state,
                                       const layout::broadcast_header& h) noexcept
    : state_(state),
      entries_(reinterpret_cast<layout::subscriber_entry*>(reinterpret_cast<std::byte*>(state) +
                                                           h.subscribers_offset)),
      slots_(reinterpret_cast<std::byte*>(state) + h.slots_offset),
      mode_(h.mode),
      count_(h.slot_count),
      size_(h.message_size),
      stride_(h.slot_stride),
      capacity_(h.subscriber_capacity),
      lease_ms_(h.lease_ms) {}

layout::broadcast_slot_header& broadcast_geometry::slot(std::uint64_t position) const noexcept {
  return *reinterpret_cast<layout::broadcast_slot_header*>(slots_ + (position % count_) * stride_);
}

std::size_t broadcast_geometry::active_subscribers() const noexcept {
  // acquire: pairs with the joiner's update; a count is a snapshot either way.
  const std::uint32_t high = std::min(state_->joins.high_water.load(std::memory_order_acquire),
                                      capacity_);  // untrusted: never past the table
  std::size_t n = 0;
  for (std::uint32_t i = 0; i < high; ++i)
    n += kind_of(entries_[i].state.load(std::memory_order_relaxed)) == subscriber_active;
  return n;
}

bool broadcast_geometry::body_size_for(const broadcast_params& p,
                                       std::uint64_t& body_size) noexcept {
  if (p.mode != layout::broadcast_reliable && p.mode != layout::broadcast_lossy) return false;
  if (p.slot_count < 2 || p.slot_count > max_slot_count) return false;
  if (p.message_size == 0 || p.message_size > UINT32_MAX - 2 * layout::cache_line) return false;
  if (p.subscriber_capacity == 0 || p.subscriber_capacity > layout::broadcast_max_subscribers)
    return false;
  if (p.lease_ms == 0 || p.lease_ms > max_lease_ms) return false;
  const std::uint64_t stride = slot_stride_for(p.message_size);
  if (p.slot_count > (std::uint64_t{1} << 46) / stride) return false;
  body_size = layout::broadcast_subscribers_offset +
              p.subscriber_capacity * sizeof(layout::subscriber_entry) + p.slot_count * stride;
  return true;
}

void broadcast_geometry::initialize(std::span<std::byte> body, const broadcast_params& p) noexcept {
  auto* st = new (body.data()) layout::broadcast_state{};
  auto& h = st->header;
  h.version = layout::broadcast_version;
  h.mode = p.mode;
  h.slot_count = static_cast<std::uint32_t>(p.slot_count);
  h.message_size = static_cast<std::uint32_t>(p.message_size);
  h.slot_stride = static_cast<std::uint32_t>(slot_stride_for(p.message_size));
  h.subscriber_capacity = static_cast<std::uint32_t>(p.subscriber_capacity);
  h.lease_ms = static_cast<std::uint32_t>(p.lease_ms);
  h.subscribers_offset = layout::broadcast_subscribers_offset;
  h.slots_offset = h.subscribers_offset + p.subscriber_capacity * sizeof(layout::subscriber_entry);
  // The rest is zero (the segment is zero-filled): no subscribers, tail 0, every slot version 0,
  // which is no position's "published" value. The rename publishes it all.
  for (std::uint64_t i = 0; i < p.subscriber_capacity; ++i)
    new (body.data() + h.subscribers_offset + i * sizeof(layout::subscriber_entry))
        layout::subscriber_entry{};
  for (std::uint64_t i = 0; i < p.slot_count; ++i)
    new (body.data() + h.slots_offset + i * h.slot_stride) layout::broadcast_slot_header{};
}

std::error_code broadcast_geometry::validate(std::span<const std::byte> body,
                                             layout::broadcast_header& h) noexcept {
  if (body.size() < sizeof(layout::broadcast_state)) return errc::corrupted;
  // A copy: what is checked is what the handle uses, whatever a peer writes afterwards.
  std::memcpy(&h, body.data(), sizeof h);
  if (h.version != layout::broadcast_version) return errc::incompatible;
  const broadcast_params p{h.mode, h.slot_count, h.message_size, h.subscriber_capacity, h.lease_ms};
  std::uint64_t expected = 0;
  if (!body_size_for(p, expected) || expected != body.size() ||
      h.slot_stride != slot_stride_for(h.message_size) ||
      h.subscribers_offset != layout::broadcast_subscribers_offset ||
      h.slots_offset != h.subscribers_offset +
                            std::uint64_t{h.subscriber_capacity} * sizeof(layout::subscriber_entry))
    return errc::corrupted;
  return {};
}

// ---- publisher -------------------------------------------------------------------------------

broadcast_publisher::broadcast_publisher(const broadcast_geometry& g, int fd,
                                         std::uint16_t me) noexcept
    : g_(g),
      fd_(fd),
      me_(me),
      my_word_(me | static_cast<std::uint32_t>(1 + platform::random_u64() % 0xffff)
                        << layout::broadcast_tag_shift) {}

bool broadcast_publisher::alive(std::uint64_t lock_byte) const noexcept {
  return lock_byte_held(fd_, lock_byte);  // an error is no proof of death (liveness.hpp)
}

void broadcast_publisher::recover_own_lock() noexcept {
  auto& owner = g_.state().writer.owner;
  // acquire: as the CAS below.
  std::uint32_t seen = owner.load(std::memory_order_acquire);
  if ((seen & layout::broadcast_owner_mask) != me_) return;
  // acq_rel: the number is ours now, so a lock word naming it was left by a dead holder.
  if (owner.compare_exchange_strong(seen, 0, std::memory_order_acq_rel))
    notify_all(g_.state().writers);
}

bool broadcast_publisher::take_lock(std::error_code& ec) noexcept {
  auto& owner = g_.state().writer.owner;
  std::uint32_t seen = 0;
  // acquire: the previous holder's slot and tail writes happen before our use of them.
  if (owner.compare_exchange_strong(seen, my_word_, std::memory_order_acquire,
                                    std::memory_order_relaxed))
    return true;
  const std::uint32_t number = seen & layout::broadcast_owner_mask;
  if (number == 0 || number > layout::max_participants) {
    ec = errc::corrupted;  // no participant has that number
    return false;
  }
  // This handle's own write, in progress elsewhere (begin_write): wait for it. Our own lock
  // byte is never "held by another", so the liveness test below would take it over.
  if (seen == my_word_) return false;
  note_stall();  // another writer holds the lock: if it never lets go, look again later
  if (!lock_patience_.spent(seen) || participant_alive(fd_, number)) return false;
  // Its holder died: take the lock over. A half-written slot it left is simply written again
  // (tail never moved past it). The CAS expects the very word seen, tag and all: a handle that
  // took the dead holder's number and then the lock meanwhile has another word.
  return owner.compare_exchange_strong(seen, my_word_, std::memory_order_acquire,
                                       std::memory_order_relaxed);
}

void broadcast_publisher::release_lock(bool wake_writers) noexcept {
  // seq_cst: release for our writes, and before notify's read of `parked` (StoreLoad).
  g_.state().writer.owner.store(0, std::memory_order_seq_cst);
  // Not after a try that found no room: the writers parked then lack room as much as we do
  // (a subscriber's read wakes them), and ringing our own armed slot would spin us.
  if (wake_writers) notify_all(g_.state().writers);
}

std::error_code broadcast_publisher::refresh_gate(std::uint64_t tail) noexcept {
  const std::uint32_t high = g_.state().joins.high_water.load(std::memory_order_seq_cst);
  if (high > g_.subscriber_capacity()) return errc::corrupted;
  std::uint64_t gate = tail;
  for (std::uint32_t i = 0; i < high; ++i) {
    auto& e = g_.entry(i);
    // seq_cst: a joiner's "active" store and its later load of tail are ordered against our
    // scan, so a subscriber this scan misses starts at or after the tail we hold (see join).
    const std::uint64_t s = e.state.load(std::memory_order_seq_cst);
    const std::uint64_t kind = kind_of(s);
    if (kind == subscriber_free || kind == subscriber_evicted) continue;
    if (kind != subscriber_active) return errc::corrupted;
    const std::uint64_t c = e.cursor.load(std::memory_order_seq_cst);
    if (c > tail) return errc::corrupted;  // nobody can have read what is not published
    gate = std::min(gate, c);
  }
  gate_ = gate;
  gate_known_ = true;
  return {};
}

void broadcast_publisher::evict_blockers(std::uint64_t tail) noexcept {
  const std::uint32_t high = std::min(g_.state().joins.high_water.load(std::memory_order_acquire),
                                      g_.subscriber_capacity());
  if (stalls_.size() < high) stalls_.resize(high);
  const std::int64_t now = now_ns();
  const std::int64_t lease_ns = std::int64_t{g_.lease().count()} * 1'000'000;
  bool evicted_any = false;
  for (std::uint32_t i = 0; i < high; ++i) {
    auto& e = g_.entry(i);
    std::uint64_t s = e.state.load(std::memory_order_seq_cst);
    if (kind_of(s) != subscriber_active) continue;
    const std::uint64_t c = e.cursor.load(std::memory_order_seq_cst);
    if (c > tail || tail - c < g_.slot_count()) continue;  // not in our way
    // relaxed: the heartbeat is a counter compared for change only.
    const std::uint64_t beat = e.heartbeat.load(std::memory_order_relaxed);
    stall_record& r = stalls_[i];
    const bool fresh = r.state != s || r.cursor != c || r.heartbeat != beat;
    if (fresh) r = {s, c, beat, now, 0};
    bool evict = now - r.since >= lease_ns;  // stalled past its lease (alive or not)
    if (!evict && now - r.checked >= liveness_interval_ns) {
      r.checked = now;
      evict = !alive(layout::broadcast_subscriber_lock_base + i);  // killed: no lease needed
    }
    if (!evict) continue;
    // seq_cst: the eviction is ordered before our later overwrite of the slot it was reading,
    // so that subscriber, seeing the overwrite, also sees why. The CAS fails if the entry
    // changed meanwhile (it read, or left and was taken by a new subscriber).
    if (e.state.compare_exchange_strong(s, with_kind(s, subscriber_evicted),
                                        std::memory_order_seq_cst))
      evicted_any = true;
  }
  if (evicted_any) notify_all(g_.state().readers);  // parked evictees learn it now
}

broadcast_publisher::begin_status broadcast_publisher::begin(broadcast_write& w,
                                                             std::error_code& ec) noexcept {
  if (!take_lock(ec)) return ec ? begin_status::failed : begin_status::would_block;
  // relaxed: only the lock holder writes tail, and our lock acquisition ordered us after it.
  const std::uint64_t tail = g_.state().tail.position.load(std::memory_order_relaxed);
  if (g_.reliable()) {
    const auto full = [&] {
      return !gate_known_ || gate_ > tail || tail - gate_ >= g_.slot_count();
    };
    if (full()) ec = refresh_gate(tail);
    if (!ec && full()) {
      evict_blockers(tail);
      ec = refresh_gate(tail);
    }
    if (ec || full()) {
      if (!ec) note_stall();  // a subscriber in our way: its lease runs out without a wake-up
      release_lock(false);
      return ec ? begin_status::failed : begin_status::would_block;
    }
  }
  auto& slot = g_.slot(tail);
  // The seqlock's "being written" mark, then a release fence: a reader that sees any of the
  // bytes we are about to write also sees this mark when it re-reads the version.
  // release: a reliable subscriber that sees this mark, overtaken, also sees the eviction
  // (evict_blockers' CAS) that allowed it, and reports evicted, not corrupted.
  slot.seq.store(2 * tail + 1, std::memory_order_release);
  std::atomic_thread_fence(std::memory_order_release);
  w = {&slot, {g_.slot_data(slot), g_.message_size()}, tail};
  return begin_status::ready;
}

void broadcast_publisher::commit(const broadcast_write& w, std::size_t length) noexcept {
  // relaxed: published by the release store of the version below.
  w.slot->length.store(static_cast<std::uint32_t>(length), std::memory_order_relaxed);
  // release: the bytes and length before the version that says they are complete.
  w.slot->seq.store(published(w.position), std::memory_order_release);
  // seq_cst: after the slot, and before notify's read of `parked` (StoreLoad).
  g_.state().tail.position.store(w.position + 1, std::memory_order_seq_cst);
  release_lock(true);
  notify_all(g_.state().readers);
}

broadcast_publisher::begin_status broadcast_publisher::begin_write(broadcast_write& w,
                                                                   std::error_code& ec) noexcept {
  std::lock_guard lock(mutex_);
  return begin(w, ec);
}

void broadcast_publisher::commit_write(const broadcast_write& w, std::size_t length) noexcept {
  std::lock_guard lock(mutex_);
  commit(w, length);
}

void broadcast_publisher::abandon_write(const broadcast_write& w) noexcept {
  std::lock_guard lock(mutex_);
  abandon(w);
}

void broadcast_publisher::abandon(const broadcast_write& w) noexcept {
  // The slot keeps its odd version: tail never covers it, and the next writer writes this
  // position again. (A lossy subscriber still on the old contents sees itself lapped.)
  (void)w;
  release_lock(true);
}

// ---- subscriber ------------------------------------------------------------------------------

std::error_code broadcast_subscriber::join(int fd) noexcept {
  std::lock_guard lock(mutex_);
  std::uint32_t index = 0;
  std::error_code ec;
  for (;; ++index) {
    if (index == g_.subscriber_capacity()) return errc::too_many_participants;
    if (platform::try_lock_byte(fd, layout::broadcast_subscriber_lock_base + index,
                                platform::lock_kind::exclusive, ec))
      break;
    if (ec) return ec;
  }
  auto& st = g_.state();
  entry_ = &g_.entry(index);
  // Writers scan entries below high_water: raise it before we become active. seq_cst: see
  // refresh_gate.
  std::uint32_t high = st.joins.high_water.load(std::memory_order_seq_cst);
  while (high < index + 1 &&
         !st.joins.high_water.compare_exchange_weak(high, index + 1, std::memory_order_seq_cst)) {
  }
  // A new generation, so that a writer acting on what it saw of the previous holder (say, an
  // eviction) cannot hit us.
  const std::uint64_t old = entry_->state.load(std::memory_order_relaxed);
  my_state_ =
      ((old >> subscriber_generation_shift) + 1) << subscriber_generation_shift | subscriber_active;
  // Start at the tail: a writer that scans before our "active" store is seen holds a gate no
  // later than that tail, so it cannot overwrite anything from where we start.
  entry_->cursor.store(st.tail.position.load(std::memory_order_seq_cst), std::memory_order_seq_cst);
  entry_->pid.store(platform::process_id(), std::memory_order_relaxed);
  entry_->state.store(my_state_, std::memory_order_seq_cst);
  // seq_cst: after the "active" store (StoreLoad): from this tail on, every writer sees us.
  cursor_ = st.tail.position.load(std::memory_order_seq_cst);
  entry_->cursor.store(cursor_, std::memory_order_seq_cst);
  return {};
}

void broadcast_subscriber::leave() noexcept {
  std::lock_guard lock(mutex_);
  if (!entry_) return;
  std::uint64_t s = my_state_;
  // release: we are done with the slots before the entry stops holding writers back. Fails if
  // a writer evicted us (then we are no longer in their way anyway).
  if (!entry_->state.compare_exchange_strong(s, with_kind(my_state_, subscriber_free),
                                             std::memory_order_seq_cst)) {
    s = with_kind(my_state_, subscriber_evicted);
    entry_->state.compare_exchange_strong(s, with_kind(my_state_, subscriber_free),
                                          std::memory_order_seq_cst);
  }
  entry_ = nullptr;
  notify_all(g_.state().writers);  // a writer may have been waiting for us
  // Our lock byte goes with the segment file when the handle closes.
}

void broadcast_subscriber::heartbeat() noexcept {
  std::lock_guard lock(mutex_);
  // relaxed: writers only compare it for change.
  if (entry_) entry_->heartbeat.fetch_add(1, std::memory_order_relaxed);
}

void broadcast_subscriber::advance(std::uint64_t to) noexcept {
  cursor_ = to;
  if (g_.reliable()) {
    // seq_cst: our reads of the slot are done before a writer may reuse it (release), and the
    // store comes before notify's read of `parked` (StoreLoad).
    entry_->cursor.store(to, std::memory_order_seq_cst);
    notify_all(g_.state().writers);
  } else {
    entry_->cursor.store(to, std::memory_order_relaxed);  // lossy writers never look at it
  }
}

outcome<std::size_t> broadcast_subscriber::state_error() noexcept {
  // acquire fence: a caller that found its slot overwritten by a relaxed re-read of `seq` (mid
  // read, still_intact) sees the eviction that came before the overwrite, as one that found it
  // by begin()'s acquire load does.
  std::atomic_thread_fence(std::memory_order_acquire);
  // seq_cst: as the eviction CAS; a writer evicts before it overwrites.
  const std::uint64_t s = entry_->state.load(std::memory_order_seq_cst);
  if (s == with_kind(my_state_, subscriber_evicted)) return {errc::evicted, 0};
  return {errc::corrupted, 0};
}

outcome<std::size_t> broadcast_subscriber::overtaken() noexcept {
  if (g_.reliable()) return state_error();  // a reliable writer overtakes only evicted readers
  // Lapped: resync to the oldest position that may still be intact, the one just past what
  // the writer holding the lock may be overwriting.
  const std::uint64_t tail = g_.state().tail.position.load(std::memory_order_acquire);
  std::uint64_t oldest = tail >= g_.slot_count() ? tail - g_.slot_count() : 0;
  // Its slot is the one the next write (position tail) takes: if that write has begun, the
  // oldest message held is the one after it. (A write that begins after this look laps the
  // subscriber again; its next read says so.)
  // acquire: as begin()'s load of a version.
  if (tail >= g_.slot_count() &&
      g_.slot(oldest).seq.load(std::memory_order_acquire) > published(oldest))
    ++oldest;
  const std::uint64_t next = std::max(oldest, cursor_ + 1);
  const std::uint64_t lost = next - cursor_;
  lost_ += lost;
  advance(next);
  return {errc::messages_lost, lost};
}

broadcast_subscriber::begin_status broadcast_subscriber::begin(
    broadcast_read& r, std::size_t capacity, outcome<std::size_t>& failure) noexcept {
  // EBADF in the system category: what asio::error::bad_descriptor is, without Asio here.
  if (!entry_)
    return failure = {std::error_code(EBADF, std::system_category()), 0}, begin_status::failed;
  // acquire: pairs with the eviction CAS.
  if (entry_->state.load(std::memory_order_acquire) != my_state_)
    return failure = state_error(), begin_status::failed;
  // seq_cst: when this is the re-check after arming, it must not move before the arming.
  const std::uint64_t tail = g_.state().tail.position.load(std::memory_order_seq_cst);
  if (tail == cursor_) return begin_status::would_block;
  if (tail < cursor_) return failure = {errc::corrupted, 0}, begin_status::failed;
  auto& slot = g_.slot(cursor_);
  // acquire: the bytes written before this version was published.
  const std::uint64_t version = slot.seq.load(std::memory_order_acquire);
  if (tail - cursor_ > g_.slot_count() || version > published(cursor_))
    return failure = overtaken(), begin_status::failed;
  if (version != published(cursor_))  // tail says published, the slot says not: hostile
    return failure = {errc::corrupted, 0}, begin_status::failed;
  const std::uint32_t length = slot.length.load(std::memory_order_relaxed);
  const auto still_intact = [&] {
    // acquire fence: our reads above come before the version re-read below.
    std::atomic_thread_fence(std::memory_order_acquire);
    return slot.seq.load(std::memory_order_relaxed) == version;
  };
  if (length > g_.message_size() || length > capacity) {
    if (!still_intact()) return failure = overtaken(), begin_status::failed;
    if (length > g_.message_size()) return failure = {errc::corrupted, 0}, begin_status::failed;
    return failure = {errc::message_too_large, length}, begin_status::failed;  // it stays
  }
  r = {&slot, {g_.slot_data(slot), length}, version};
  return begin_status::ready;
}

broadcast_subscriber::begin_status broadcast_subscriber::begin_read(
    broadcast_read& r, std::size_t capacity, outcome<std::size_t>& failure) noexcept {
  std::lock_guard lock(mutex_);
  if (reading_) {
    turned_away_ = true;
    return begin_status::would_block;
  }
  const begin_status s = begin(r, capacity, failure);
  if (s == begin_status::ready) reading_ = true;
  return s;
}

outcome<std::size_t> broadcast_subscriber::finish_read(const broadcast_read& r) noexcept {
  std::unique_lock lock(mutex_);
  reading_ = false;
  const outcome<std::size_t> result = finish(r);
  if (std::exchange(turned_away_, false)) {
    lock.unlock();
    // A read of this handle waited for ours, perhaps parked: the next message may be there.
    notify_all(g_.state().readers);
  }
  return result;
}

outcome<std::size_t> broadcast_subscriber::finish(const broadcast_read& r) noexcept {
  // The seqlock check: if the version moved while we read, a writer overtook us and what we
  // read may be torn. It is never reported as a message.
  std::atomic_thread_fence(std::memory_order_acquire);
  const bool intact = r.slot->seq.load(std::memory_order_relaxed) == r.version;
  // The handle closed while the message was out (a callback that closed it, or an in-place
  // read whose completion was on its way): the slot is still mapped for the reader, but the
  // entry is no longer ours, so nothing is advanced.
  if (!entry_)
    return intact ? outcome<std::size_t>{{}, r.data.size()}
                  : outcome<std::size_t>{std::error_code(EBADF, std::system_category()), 0};
  if (!intact) return overtaken();
  advance(cursor_ + 1);
  return {{}, r.data.size()};
}

}  // namespace shmio::detail
