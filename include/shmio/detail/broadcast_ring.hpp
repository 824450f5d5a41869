#pragma once
// The shared-memory algorithm of a broadcast_buffer, over layout::broadcast_state (see
// layout/broadcast.hpp for the fields and docs/protocol.md for the rules).
//
// Writers take turns through a lock word (a writer killed while holding it is detected through
// its participant lock byte and the lock taken over); the holder writes slot tail % slot_count
// as a seqlock (version odd while writing, even once published), then moves `tail`. Every
// subscriber keeps its own cursor. Reliable writers wait until the slowest live subscriber has
// read the position they are about to overwrite; lossy writers never wait, and a subscriber
// finds out from the slot's version that it was lapped (before or while it read) and resyncs.
//
// One broadcast_publisher or broadcast_subscriber serves one handle; its calls are serialised
// by its own mutex, so threads of one handle may share it.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <system_error>
#include <vector>

#include "shmio/detail/layout.hpp"
#include "shmio/detail/liveness.hpp"
#include "shmio/detail/outcome.hpp"
#include "shmio/error.hpp"

namespace shmio::detail {

/// What a new broadcast segment is made of.
struct broadcast_params {
  std::uint32_t mode = layout::broadcast_reliable;
  std::uint64_t slot_count = 0;
  std::uint64_t message_size = 0;
  std::uint64_t subscriber_capacity = 0;
  std::uint64_t lease_ms = 0;
};

/// The geometry every handle reads from a validated header.
class broadcast_geometry {
 public:
  broadcast_geometry() = default;
  /// `h` is the validated copy of the header of `state` (see validate).
  broadcast_geometry(layout::broadcast_state* state, const layout::broadcast_header& h) noexcept;

  /// The body size for `p`; false if `p` is outside the limits.
  static bool body_size_for(const broadcast_params& p, std::uint64_t& body_size) noexcept;
  static void initialize(std::span<std::byte> body, const broadcast_params& p) noexcept;
  /// Copies the header of `body` to `h` and checks the copy against the size of the body:
  /// corrupted or incompatible, or clear.
  static std::error_code validate(std::span<const std::byte> body,
                                  layout::broadcast_header& h) noexcept;

  layout::broadcast_state& state() const noexcept { return *state_; }
  bool reliable() const noexcept { return mode_ == layout::broadcast_reliable; }
  std::uint32_t slot_count() const noexcept { return count_; }
  std::uint32_t message_size() const noexcept { return size_; }
  std::uint32_t subscriber_capacity() const noexcept { return capacity_; }
  std::chrono::milliseconds lease() const noexcept { return std::chrono::milliseconds(lease_ms_); }
  layout::broadcast_slot_header& slot(std::uint64_t position) const noexcept;
  std::byte* slot_data(layout::broadcast_slot_header& s) const noexcept {
    return reinterpret_cast<std::byte*>(&s + 1);
  }
  layout::subscriber_entry& entry(std::uint32_t i) const noexcept { return entries_[i]; }
  /// Entries with an active subscriber (dead ones not yet evicted included).
  std::size_t active_subscribers() const noexcept;

 private:
  layout::broadcast_state* state_ = nullptr;
  layout::subscriber_entry* entries_ = nullptr;
  std::byte* slots_ = nullptr;
  std::uint32_t mode_ = 0;
  std::uint32_t count_ = 0;
  std::uint32_t size_ = 0;
  std::uint32_t stride_ = 0;
  std::uint32_t capacity_ = 0;
  std::uint32_t lease_ms_ = 0;
};

using size_result = std::optional<outcome<std::size_t>>;

// ---- the writing side ------------------------------------------------------------------------

/// A slot this writer holds the lock for: fill `data`, then commit or abandon.
struct broadcast_write {
  layout::broadcast_slot_header* slot = nullptr;
  std::span<std::byte> data;
  std::uint64_t position = 0;
};

class broadcast_publisher {
 public:
  /// `me` is this handle's participant number (its lock held); `fd` the segment file.
  broadcast_publisher(const broadcast_geometry& g, int fd, std::uint16_t me) noexcept;

  /// One try at writing: `fill(std::span<std::byte>)` writes the slot and returns the size.
  /// Empty if the writer lock is taken or (reliable) a live subscriber still needs the slot.
  template <class Fill>
  size_result attempt_write(Fill& fill);

  /// Releases the writer lock if a dead previous holder of our participant number left it held.
  void recover_own_lock() noexcept;

  /// The halves of attempt_write, for a `fill` that runs elsewhere (and never under our mutex):
  /// after a ready begin_write this handle holds the writer lock until commit_write or
  /// abandon_write, and its other writes wait.
  enum class begin_status { ready, would_block, failed };
  begin_status begin_write(broadcast_write& w, std::error_code& ec) noexcept;
  void commit_write(const broadcast_write& w, std::size_t length) noexcept;
  void abandon_write(const broadcast_write& w) noexcept;

 private:
  begin_status begin(broadcast_write& w, std::error_code& ec) noexcept;
  void commit(const broadcast_write& w, std::size_t length) noexcept;
  void abandon(const broadcast_write& w) noexcept;
  bool take_lock(std::error_code& ec) noexcept;
  void release_lock(bool wake_writers) noexcept;
  std::error_code refresh_gate(std::uint64_t tail) noexcept;
  void evict_blockers(std::uint64_t tail) noexcept;
  bool alive(std::uint64_t lock_byte) const noexcept;

  // What this writer last saw of a subscriber that blocked it, and since when.
  struct stall_record {
    std::uint64_t state = 0;
    std::uint64_t cursor = 0;
    std::uint64_t heartbeat = 0;
    std::int64_t since = 0;
    std::int64_t checked = 0;  // when we last asked the kernel whether it lives
  };

  broadcast_geometry g_;
  int fd_;
  std::uint16_t me_;
  std::uint32_t my_word_;  // the lock word while we hold it: me_ | a random tag << 16
  std::mutex mutex_;
  std::uint64_t gate_ = 0;  // no live subscriber's cursor was below this at our last scan
  bool gate_known_ = false;
  std::vector<stall_record> stalls_;
  patience lock_patience_;  // the lock owner we last found in our way, and since when
};

// ---- the reading side ------------------------------------------------------------------------

/// A published message this subscriber is looking at.
struct broadcast_read {
  layout::broadcast_slot_header* slot = nullptr;
  std::span<const std::byte> data;
  std::uint64_t version = 0;
};

class broadcast_subscriber {
 public:
  explicit broadcast_subscriber(const broadcast_geometry& g) noexcept : g_(g) {}

  /// Takes a free table entry (locking its byte of `fd`) and starts at the current tail.
  std::error_code join(int fd) noexcept;
  /// Frees the entry; writers stop waiting for us.
  void leave() noexcept;
  /// Renews the lease without reading.
  void heartbeat() noexcept;
  /// Messages this subscriber lost to lapping so far.
  std::uint64_t lost() const noexcept { return lost_; }

  /// One try at reading a message of at most `capacity` bytes with `use(span<const byte>)`.
  /// Empty if nothing new is published.
  template <class Use>
  size_result attempt_read(Use& use, std::size_t capacity);

  /// The halves of attempt_read, for a `use` that runs elsewhere (and never under our mutex):
  /// after a ready begin_read, this handle's other reads wait until finish_read (which counts
  /// the message as read, or reports it overtaken).
  enum class begin_status { ready, would_block, failed };
  begin_status begin_read(broadcast_read& r, std::size_t capacity,
                          outcome<std::size_t>& failure) noexcept;
  outcome<std::size_t> finish_read(const broadcast_read& r) noexcept;

 private:
  begin_status begin(broadcast_read& r, std::size_t capacity,
                     outcome<std::size_t>& failure) noexcept;
  outcome<std::size_t> finish(const broadcast_read& r) noexcept;
  outcome<std::size_t> overtaken() noexcept;
  outcome<std::size_t> state_error() noexcept;
  void advance(std::uint64_t to) noexcept;

  broadcast_geometry g_;
  std::mutex mutex_;
  layout::subscriber_entry* entry_ = nullptr;
  std::uint64_t my_state_ = 0;
  std::uint64_t cursor_ = 0;
  std::uint64_t lost_ = 0;
  bool reading_ = false;      // between a ready begin_read and its finish_read
  bool turned_away_ = false;  // a read found reading_ set: it waits, and finish_read wakes it
};

// ---- templates -------------------------------------------------------------------------------

template <class Fill>
size_result broadcast_publisher::attempt_write(Fill& fill) {
  broadcast_write w;
  std::error_code ec;
  switch (begin_write(w, ec)) {
    case begin_status::would_block:
      return std::nullopt;
    case begin_status::failed:
      return outcome<std::size_t>{ec, 0};
    case begin_status::ready:
      break;
  }
  std::size_t n = 0;
  try {
    n = fill(w.data);
  } catch (...) {
    abandon_write(w);  // nothing half-written is ever published
    throw;
  }
  if (n > w.data.size()) {
    abandon_write(w);
    return outcome<std::size_t>{shmio::errc::message_too_large, 0};
  }
  commit_write(w, n);
  return outcome<std::size_t>{{}, n};
}

template <class Use>
size_result broadcast_subscriber::attempt_read(Use& use, std::size_t capacity) {
  broadcast_read r;
  outcome<std::size_t> failure;
  switch (begin_read(r, capacity, failure)) {
    case begin_status::would_block:
      return std::nullopt;
    case begin_status::failed:
      return failure;
    case begin_status::ready:
      break;
  }
  try {
    use(r.data);
  } catch (...) {
    finish_read(r);  // the message counts as read, as in a circular_buffer
    throw;
  }
  return finish_read(r);
}

}  // namespace shmio::detail
