#pragma once
// The cross-process reader/writer lock over a layout::rw_lock_state (see layout/locks.hpp for the
// writer word and the reader slots), one non-blocking step at a time; shmio::rw_lock waits
// between the steps with a detail::waiter.
//
// Readers and a writer meet as in Dekker's algorithm:
//   reader: shares += 1 (seq_cst) -> load writer (seq_cst): non-zero -> shares -= 1, back off
//   writer: writer 0 -> me (seq_cst) -> load every share count (seq_cst): any -> wait
// With both sides sequentially consistent, at least one of them sees the other, so a reader
// and a writer are never both inside. A writer's claim keeps new readers out while it waits,
// so writers are preferred and never starved by readers.
//
// Robust to kill -9: every handle is a participant with an exclusive lock on its own byte of
// the segment file. A waiter that finds the writer word or a reader's shares unchanged for a
// while asks the kernel whether their owner still holds its byte; if not, it reclaims them and
// raises `owner_died`, which the next acquirer takes (and is told about).

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <system_error>
#include <utility>

#include "shmio/detail/layout.hpp"
#include "shmio/detail/liveness.hpp"
#include "shmio/detail/outcome.hpp"

namespace shmio::detail {

inline constexpr std::size_t lock_readers_queue = 0;  // readers wait here: "no writer"
inline constexpr std::size_t lock_writers_queue = 1;  // writers wait here: word free, shares gone

class rw_lock_view {
 public:
  rw_lock_view() = default;
  /// `state` must have been validated; `fd` is the segment file, `me` this handle's participant
  /// number (1-based, its lock byte held). The handle's tag is drawn here.
  rw_lock_view(layout::rw_lock_state* state, int fd, std::uint16_t me) noexcept;

  static void initialize(layout::rw_lock_state* state) noexcept;
  static std::error_code validate(const layout::rw_lock_state& state) noexcept;
  /// A writer word some handle could have stored: 0, or a participant number 1 .. 256 (with
  /// or without rw_writer_held, with any tag).
  static bool well_formed(std::uint32_t word) noexcept;
  /// A well-formed, non-zero writer word (claimed or held) was stored by the present holder of
  /// its number: its tag is the one in that number's reader slot (`slot`). Else an earlier
  /// holder, now dead, stored it, or it is damage.
  static bool tag_matches(std::uint32_t word, const layout::rw_reader_slot& slot) noexcept;

  /// Announces our number and reclaims whatever a dead previous holder of it left held.
  void join() noexcept;
  /// Gives up whatever this handle still holds (on close); the next acquirer is told.
  void leave() noexcept;

  // ---- exclusive, in two steps: claim the writer word, then wait for the shares to go ------
  bool try_claim() noexcept;
  bool shares_gone() noexcept;
  /// Turns our claim into the held lock. Returns true if a previous holder died holding it.
  bool finish_claim() noexcept;
  /// Withdraws a claim that did not become the lock (timeout, cancellation).
  void abandon_claim() noexcept;
  /// False if this handle does not hold the lock exclusively.
  bool unlock() noexcept;
  /// Marks a death this handle was told of (taken with the lock) for the next acquirer: the
  /// lock goes back unused, and the death must not go untold. Call before the unlock.
  void retell_death() noexcept {
    // relaxed: published by the unlock's seq_cst CAS or decrement, which comes after it.
    state_->control.owner_died.store(1, std::memory_order_relaxed);
  }
  bool held_exclusively() const noexcept;

  // ---- shared -----------------------------------------------------------------------------
  /// One try. On success, `died` says whether a previous holder died holding the lock.
  bool try_lock_shared(bool& died) noexcept;
  /// False if this handle holds no share.
  bool unlock_shared() noexcept;

 private:
  bool participant_dead(std::uint32_t number) noexcept;
  // The present holder of the word's number wrote it (tag_matches, with that number's slot).
  bool written_by_holder(std::uint32_t word) const noexcept {
    return tag_matches(word, state_->slots[(word & layout::rw_owner_mask) - 1]);
  }
  // Frees the writer word of a dead owner (to 0, or to us if `for_me`); true if it did.
  bool reclaim_writer(std::uint32_t word, bool for_me) noexcept;
  bool take_owner_died() noexcept;
  void wake_all() noexcept;
  layout::rw_reader_slot& my_slot() const noexcept { return state_->slots[me_ - 1]; }

  layout::rw_lock_state* state_ = nullptr;
  int fd_ = -1;
  std::uint16_t me_ = 0;
  std::uint32_t tag_ = 0;      // this handle's, 1 .. rw_tag_mask
  std::uint32_t my_word_ = 0;  // me_ | tag_ << rw_tag_shift: our claim; with held, our lock
  patience stuck_[2];          // the blocking state we last saw: [0] a writer, [1] readers
};

/// The largest data size a locked buffer may have: far past any /dev/shm, and small enough
/// that no sum of sizes overflows.
inline constexpr std::uint64_t max_locked_data_size = std::uint64_t{1} << 44;

/// Checks a locked-buffer body (layout::locked_buffer_header, then the lock) against its size:
/// errc::corrupted, or errc::incompatible if its elements are not of `element_size` and
/// `element_align` (0 and 0: any element type), or clear.
std::error_code validate_locked_body(std::span<const std::byte> body, std::size_t element_size,
                                     std::size_t element_align) noexcept;
/// As above, and gives the header it checked: read once, the only copy to use (the memory is
/// shared; a peer may rewrite it after the check).
std::error_code validate_locked_body(std::span<const std::byte> body, std::size_t element_size,
                                     std::size_t element_align,
                                     layout::locked_buffer_header& checked) noexcept;

/// A wait's attempt at the exclusive lock: claims the writer word once, then waits for the
/// shares to go. Destroying it with the claim still pending (timeout, cancellation, shutdown)
/// withdraws the claim, so an abandoned wait never leaves the lock claimed.
class exclusive_attempt {
 public:
  explicit exclusive_attempt(rw_lock_view& view) noexcept : view_(&view) {}
  exclusive_attempt(exclusive_attempt&& o) noexcept
      : view_(o.view_), claimed_(std::exchange(o.claimed_, false)) {}
  exclusive_attempt& operator=(exclusive_attempt&&) = delete;
  ~exclusive_attempt() {
    if (claimed_) view_->abandon_claim();
  }

  /// Empty: not yet. Else the lock is held; the value says whether its previous holder died.
  std::optional<outcome<bool>> operator()() noexcept {
    if (!claimed_) {
      if (!view_->try_claim()) return std::nullopt;
      claimed_ = true;
    }
    if (!view_->shares_gone()) return std::nullopt;
    claimed_ = false;
    return outcome<bool>{{}, view_->finish_claim()};
  }

 private:
  rw_lock_view* view_;
  bool claimed_ = false;
};

/// A wait's attempt at a share.
class shared_attempt {
 public:
  explicit shared_attempt(rw_lock_view& view) noexcept : view_(&view) {}
  std::optional<outcome<bool>> operator()() noexcept {
    bool died = false;
    if (!view_->try_lock_shared(died)) return std::nullopt;
    return outcome<bool>{{}, died};
  }

 private:
  rw_lock_view* view_;
};

}  // namespace shmio::detail
