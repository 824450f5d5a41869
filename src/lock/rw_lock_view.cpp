#include "shmio/detail/rw_lock_view.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <new>

#include "shmio/detail/platform.hpp"
#include "shmio/detail/stall.hpp"
#include "shmio/detail/wait_queue.hpp"
#include "shmio/error.hpp"

namespace shmio::detail {
namespace {

using layout::rw_owner_mask;
using layout::rw_tag_mask;
using layout::rw_tag_shift;
using layout::rw_writer_held;

}  // namespace

rw_lock_view::rw_lock_view(layout::rw_lock_state* state, int fd, std::uint16_t me) noexcept
    : state_(state),
      fd_(fd),
      me_(me),
      tag_(1 + static_cast<std::uint32_t>(platform::random_u64() % rw_tag_mask)),
      my_word_(me | tag_ << rw_tag_shift) {}

void rw_lock_view::initialize(layout::rw_lock_state* state) noexcept {
  auto* st = new (state) layout::rw_lock_state{};
  st->control.slot_count = layout::rw_reader_slots;  // published by the segment's rename
}

bool rw_lock_view::well_formed(std::uint32_t word) noexcept {
  if (word == 0) return true;
  const std::uint32_t owner = word & rw_owner_mask;
  return owner != 0 && owner <= layout::rw_reader_slots;
}

bool rw_lock_view::tag_matches(std::uint32_t word, const layout::rw_reader_slot& slot) noexcept {
  // acquire: a holder stores its tag (join) before its first claim, so a word of that holder
  // seen here comes with its tag.
  return (word >> rw_tag_shift & rw_tag_mask) == slot.tag.load(std::memory_order_acquire);
}

std::error_code rw_lock_view::validate(const layout::rw_lock_state& state) noexcept {
  if (state.control.slot_count != layout::rw_reader_slots) return errc::corrupted;
  // relaxed: a check of values at open; what changes later is validated where it is used.
  if (!well_formed(state.control.writer.load(std::memory_order_relaxed)) ||
      state.control.owner_died.load(std::memory_order_relaxed) > 1 ||
      state.control.participant_high.load(std::memory_order_relaxed) > layout::rw_reader_slots)
    return errc::corrupted;
  return {};
}

namespace {
bool valid_align(std::uint64_t a) {
  return a != 0 && (a & (a - 1)) == 0 && a <= layout::max_element_align;
}
}  // namespace

std::error_code validate_locked_body(std::span<const std::byte> body, std::size_t element_size,
                                     std::size_t element_align) noexcept {
  layout::locked_buffer_header ignored;
  return validate_locked_body(body, element_size, element_align, ignored);
}

std::error_code validate_locked_body(std::span<const std::byte> body, std::size_t element_size,
                                     std::size_t element_align,
                                     layout::locked_buffer_header& h) noexcept {
  if (body.size() < layout::locked_data_offset_for(1)) return errc::corrupted;
  // One copy: a value checked must be the value used.
  std::memcpy(&h, body.data(), sizeof h);
  // The element type first: a wrong T is the caller's mistake, not a broken segment.
  if (element_size != 0 && (h.element_size != element_size || h.element_align != element_align))
    return errc::incompatible;
  if (h.element_size == 0 || !valid_align(h.element_align)) return errc::corrupted;
  if (h.data_offset != layout::locked_data_offset_for(h.element_align)) return errc::corrupted;
  if (h.element_count > max_locked_data_size / h.element_size ||
      h.data_size != h.element_count * h.element_size)
    return errc::corrupted;
  if (h.data_offset + h.data_size != body.size()) return errc::corrupted;  // no overflow: bounded
  return rw_lock_view::validate(
      *reinterpret_cast<const layout::rw_lock_state*>(body.data() + layout::locked_lock_offset));
}

void rw_lock_view::join() noexcept {
  auto& high = state_->control.participant_high;
  // seq_cst: a writer that loads `high` after this sees our slot in its scan; one that loaded
  // it before will be seen by our first share's load of the writer word (see the header).
  std::uint32_t h = high.load(std::memory_order_seq_cst);
  while (h < me_ && !high.compare_exchange_weak(h, me_, std::memory_order_seq_cst)) {
  }
  my_slot().pid.store(platform::process_id(), std::memory_order_relaxed);  // informational
  // Never the tag of our number's previous holder, whose word may still be in the lock (or in
  // a waiter's hands): then that word differs from every word of ours. relaxed: only we
  // write our slot's tag while we hold the number.
  if (my_slot().tag.load(std::memory_order_relaxed) == tag_) {
    tag_ = tag_ % rw_tag_mask + 1;
    my_word_ = me_ | tag_ << rw_tag_shift;
  }
  // release: before any word of ours (see tag_matches).
  my_slot().tag.store(tag_, std::memory_order_release);
  leave();  // whatever a previous holder of our number left behind, it cannot use any more
}

void rw_lock_view::leave() noexcept {
  bool reclaimed = false;
  bool cleared = false;
  // Shares given up unreleased are told as a death, marked before they go (as a dead writer's
  // is, reclaim_writer): an acquirer that sees them gone must see the mark too. relaxed: the
  // mark is published by the exchange. (At join the slot may be a dead previous holder's that
  // a writer reclaims meanwhile: the death is then told twice, never missed.)
  if (my_slot().shares.load(std::memory_order_relaxed) != 0) {
    state_->control.owner_died.store(1, std::memory_order_relaxed);
    // acq_rel: the holder's accesses happen before the next acquirer's.
    my_slot().shares.exchange(0, std::memory_order_acq_rel);
    reclaimed = true;
  }
  std::uint32_t w = state_->control.writer.load(std::memory_order_acquire);
  if ((w & rw_owner_mask) == me_) {
    const bool held = (w & rw_writer_held) != 0;
    // relaxed: the CAS below (seq_cst) publishes it along with the free word.
    if (held) state_->control.owner_died.store(1, std::memory_order_relaxed);
    cleared = state_->control.writer.compare_exchange_strong(w, 0, std::memory_order_seq_cst);
  }
  // Nothing changed: an open must not wake every parked waiter of the lock for nothing.
  if (reclaimed || cleared) wake_all();
}

void rw_lock_view::wake_all() noexcept {
  notify_all(state_->readers);
  notify_all(state_->writers);
}

bool rw_lock_view::participant_dead(std::uint32_t number) noexcept {
  // A number out of range (the word was corrupted) has no owner that could ever free it.
  if (number == 0 || number > layout::rw_reader_slots) return true;
  return !participant_alive(fd_, number);
}

bool rw_lock_view::reclaim_writer(std::uint32_t word, bool for_me) noexcept {
  // Our own handle's writer, in another thread: the only two values it ever stores. Any other
  // word naming us was not written by this handle, and is reclaimed like a dead owner's.
  if (word == my_word_ || word == (my_word_ | rw_writer_held)) return false;
  // Held by another participant: if it never lets go, look again later (stall.hpp).
  note_stall();
  if (!stuck_[0].spent(std::uint64_t{1} << 32 | word)) return false;
  // A malformed word (damaged memory), or one that the present holder of its number did not
  // write (a dead holder's, or damage), has no owner that would ever free it. The CAS below
  // expects the very word seen, tag and all: if the number was taken again meanwhile and its new
  // holder locked, that holder's word differs, and the CAS fails.
  if (well_formed(word) && written_by_holder(word) && !participant_dead(word & rw_owner_mask))
    return false;
  // Only a holder that had the lock leaves guarded data half-written; a dead claimant had not
  // started. Marked before the word is freed: an acquirer that sees the free word must see the
  // mark too, and a reclaimer killed in between must not leave the death untold. If the CAS
  // fails, whoever changed the word reclaimed the same holder and marked it too; if its
  // acquirer took the mark already, ours tells the next acquirer again. A death may be told
  // twice, never missed.
  // relaxed: published by the CAS below (seq_cst, so a release).
  if ((word & rw_writer_held) != 0) state_->control.owner_died.store(1, std::memory_order_relaxed);
  // seq_cst: as any change of the word (see try_claim).
  if (!state_->control.writer.compare_exchange_strong(word, for_me ? my_word_ : 0,
                                                      std::memory_order_seq_cst))
    return false;
  wake_all();
  return true;
}

bool rw_lock_view::take_owner_died() noexcept {
  // relaxed first: the common case (nobody died) costs one load of a line we just used.
  if (state_->control.owner_died.load(std::memory_order_relaxed) == 0) return false;
  return state_->control.owner_died.exchange(0, std::memory_order_acq_rel) != 0;
}

bool rw_lock_view::try_claim() noexcept {
  auto& writer = state_->control.writer;
  // seq_cst: when this is the re-check after arming, it must not move before the arming.
  std::uint32_t w = writer.load(std::memory_order_seq_cst);
  if (w != 0) return reclaim_writer(w, true);
  // seq_cst: the claim must be visible before we load the share counts (StoreLoad, Dekker).
  return writer.compare_exchange_strong(w, my_word_, std::memory_order_seq_cst);
}

bool rw_lock_view::shares_gone() noexcept {
  // seq_cst: after our claim (StoreLoad); a participant that joins later sees our claim.
  const std::uint32_t high = std::min(
      state_->control.participant_high.load(std::memory_order_seq_cst), layout::rw_reader_slots);
  for (std::uint32_t i = 0; i < high; ++i) {
    auto& shares = state_->slots[i].shares;
    // seq_cst: the other half of Dekker's pair with a reader's increment; acquire for the
    // reader's accesses before its decrement.
    std::uint32_t n = shares.load(std::memory_order_seq_cst);
    if (n == 0) continue;
    if (i + 1 != me_) note_stall();  // a reader's shares: look again if they never go
    if (i + 1 == me_ || !stuck_[1].spent(std::uint64_t{i} << 32 | n) || !participant_dead(i + 1))
      return false;
    // A dead reader's shares: with the word claimed by us no new share can appear in its
    // slot (a joining participant only adds one after seeing the word free), so take them.
    if (!shares.compare_exchange_strong(n, 0, std::memory_order_acq_rel)) return false;
    state_->control.owner_died.store(1, std::memory_order_relaxed);  // we take it at finish
  }
  return true;
}

bool rw_lock_view::finish_claim() noexcept {
  // release: only informational for others (recovery reads it), ordered after our claim.
  state_->control.writer.store(my_word_ | rw_writer_held, std::memory_order_release);
  return take_owner_died();
}

void rw_lock_view::abandon_claim() noexcept {
  std::uint32_t w = my_word_;
  // seq_cst: the free word must be visible before notify reads `parked` (StoreLoad).
  if (state_->control.writer.compare_exchange_strong(w, 0, std::memory_order_seq_cst)) wake_all();
}

bool rw_lock_view::unlock() noexcept {
  std::uint32_t w = my_word_ | rw_writer_held;
  // seq_cst: release for the guarded data, and before notify reads `parked` (StoreLoad).
  if (!state_->control.writer.compare_exchange_strong(w, 0, std::memory_order_seq_cst))
    return false;
  wake_all();
  return true;
}

bool rw_lock_view::held_exclusively() const noexcept {
  // relaxed: only our own handle sets this value, and a thread asking about it set it itself.
  return state_->control.writer.load(std::memory_order_relaxed) == (my_word_ | rw_writer_held);
}

bool rw_lock_view::try_lock_shared(bool& died) noexcept {
  auto& writer = state_->control.writer;
  // seq_cst: when this is the re-check after arming, it must not move before the arming.
  std::uint32_t w = writer.load(std::memory_order_seq_cst);
  if (w != 0) {
    if (!reclaim_writer(w, false)) return false;
  }
  auto& shares = my_slot().shares;
  // seq_cst: our share must be visible before we load the writer word (StoreLoad, Dekker).
  shares.fetch_add(1, std::memory_order_seq_cst);
  if (writer.load(std::memory_order_seq_cst) == 0) {
    died = take_owner_died();
    return true;
  }
  // A writer claimed it meanwhile: back off, and wake it if it already counted our share.
  shares.fetch_sub(1, std::memory_order_seq_cst);
  notify_all(state_->writers);
  return false;
}

bool rw_lock_view::unlock_shared() noexcept {
  auto& shares = my_slot().shares;
  std::uint32_t n = shares.load(std::memory_order_relaxed);
  // seq_cst: release for our reads, and before the load of the writer word (StoreLoad: a
  // writer that armed after counting our share must be woken).
  do {
    if (n == 0) return false;
  } while (!shares.compare_exchange_weak(n, n - 1, std::memory_order_seq_cst,
                                         std::memory_order_relaxed));
  if (state_->control.writer.load(std::memory_order_seq_cst) != 0) notify_all(state_->writers);
  return true;
}

}  // namespace shmio::detail
