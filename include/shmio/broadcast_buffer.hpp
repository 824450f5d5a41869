#pragma once
// shmio::broadcast_buffer — one-to-many (and many-to-many) messaging by name: every subscriber
// sees every message, in the order the writers published them (the C# SharedMemory library's
// roadmap item "broadcast"; Sluice's topics).
//
// - A handle is a publisher or a subscriber (broadcast_role). Publishers may be many, in any
//   processes: they take turns through a lock in shared memory, so messages have one order that
//   every subscriber sees. Subscribers join when their handle opens and leave when it closes, at
//   any time, in any process; a new subscriber sees the messages published after it joined.
// - The segment holds `capacity` messages of at most `message_size` bytes, and a table of
//   `max_subscribers` entries (default 1024, up to 2^20; 64 bytes each), fixed at creation.
//   That table is the only limit on subscribers. (Past 32 subscribers parked in async reads at
//   once, the others park through the process's wait hub, one thread that sleeps for all of
//   them; only where that cannot run, before Linux 5.16, do they poll every millisecond.
//   Blocking reads always sleep on a futex.)
// - broadcast_mode::reliable: a writer waits while the slowest live subscriber has not yet read
//   the message it would overwrite. A subscriber killed while it holds writers back is evicted
//   as soon as a writer notices (within milliseconds of the writer's next try); one that is
//   alive but has neither read nor called heartbeat() for `lease` while holding writers back
//   is evicted too. An evicted subscriber's next read fails with errc::evicted; it must open a
//   new handle to rejoin.
// - broadcast_mode::lossy: writers never wait for subscribers. A subscriber that was lapped
//   gets errc::messages_lost from its next read, with the number of messages it lost as the
//   read's size; the read after that returns the oldest message still held.
// - Reads check the slot's version after copying (a seqlock): a message a writer overwrote
//   while it was being read is never returned. For in-place reads the callback has then seen
//   bytes that may be torn: the read reports errc::messages_lost (lossy) or errc::evicted
//   (reliable), and whatever the callback derived must be discarded.
// - A writer killed while holding the writer lock is detected within ~10 ms of another writer's
//   try (its participant lock byte), and the lock taken over; its half-written message is never
//   published.
//
// Waiting: see shmio/wait_strategy.hpp. When nobody is parked, a write or read makes no system
// call.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <system_error>

#include <asio/any_io_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/buffer.hpp>

#include "shmio/error.hpp"
#include "shmio/open_mode.hpp"
#include "shmio/segment.hpp"
#include "shmio/wait_strategy.hpp"

namespace shmio {

/// How writers treat subscribers that fall behind; chosen at creation.
enum class broadcast_mode : std::uint32_t {
  reliable = 0,  ///< writers wait for the slowest live subscriber (which a lease bounds)
  lossy = 1,     ///< writers never wait; lapped subscribers are told how much they lost
};

/// What a handle does.
enum class broadcast_role {
  publisher,   ///< writes; does not read
  subscriber,  ///< reads every message published while it is open; does not write
};

/// The shape of a new broadcast segment. Openers learn it from the segment.
struct broadcast_options {
  broadcast_mode mode = broadcast_mode::reliable;
  std::size_t capacity = 256;          ///< messages held: 2 .. 2^24
  std::size_t message_size = 1024;     ///< the largest message, in bytes: >= 1
  std::size_t max_subscribers = 1024;  ///< subscriber table entries: 1 .. 2^20
  /// Reliable mode: how long a live subscriber may hold writers back without reading or
  /// calling heartbeat() before it is evicted. 1 ms .. 24 h.
  std::chrono::milliseconds lease{1000};
};

class broadcast_buffer {
 public:
  using executor_type = asio::any_io_executor;

  /// Creates `name` with `options` and opens it as `role`. Throws shmio::error:
  /// errc::invalid_argument, errc::already_exists, errc::no_space, ...
  broadcast_buffer(const executor_type& ex, create_only_t, std::string_view name,
                   broadcast_role role, const broadcast_options& options = {},
                   wait_strategy strategy = {});
  /// Opens `name` as `role`. A subscriber joins now. Throws shmio::error: errc::not_found,
  /// errc::incompatible, errc::corrupted, errc::too_many_participants (the table is full), ...
  broadcast_buffer(const executor_type& ex, open_only_t, std::string_view name, broadcast_role role,
                   wait_strategy strategy = {});
  /// Opens `name`, or creates it with `options`.
  broadcast_buffer(const executor_type& ex, open_or_create_t, std::string_view name,
                   broadcast_role role, const broadcast_options& options = {},
                   wait_strategy strategy = {});
  /// The error_code forms: on failure `ec` is set and the object is closed.
  broadcast_buffer(const executor_type& ex, create_only_t, std::string_view name,
                   broadcast_role role, const broadcast_options& options, wait_strategy strategy,
                   std::error_code& ec);
  broadcast_buffer(const executor_type& ex, open_only_t, std::string_view name, broadcast_role role,
                   wait_strategy strategy, std::error_code& ec);
  broadcast_buffer(const executor_type& ex, open_or_create_t, std::string_view name,
                   broadcast_role role, const broadcast_options& options, wait_strategy strategy,
                   std::error_code& ec);

  /// The moved-from handle is closed and keeps its executor.
  broadcast_buffer(broadcast_buffer&& other) noexcept;
  /// Closes this handle first (see close()).
  broadcast_buffer& operator=(broadcast_buffer&& other) noexcept;
  /// Pending operations complete with asio::error::operation_aborted; a subscriber leaves.
  ~broadcast_buffer();

  executor_type get_executor() const noexcept;
  bool is_open() const noexcept { return impl_ != nullptr; }
  /// The segment's name; kept after close(), for what a closed handle's calls report.
  const std::string& name() const noexcept;
  broadcast_role role() const noexcept;
  broadcast_mode mode() const noexcept;
  std::size_t capacity() const noexcept;
  std::size_t message_size() const noexcept;
  std::size_t max_subscribers() const noexcept;
  std::chrono::milliseconds lease() const noexcept;
  /// Subscribers whose entry is active now, in all processes (a killed one counts until a
  /// writer evicts it or a new subscriber takes its entry).
  std::size_t subscriber_count() const noexcept;
  /// Subscriber: messages lost to lapping since it joined (lossy mode).
  std::uint64_t lost() const noexcept;
  /// Subscriber: renews the lease without reading, for a subscriber that may pause longer than
  /// lease() while writers wait for it.
  void heartbeat() noexcept;

  // ---- blocking -------------------------------------------------------------------------
  // Timeouts: zero tries once; negative or milliseconds::max() waits for ever. A call in the
  // wrong role fails with std::errc::operation_not_supported.

  /// Publishes one message. Returns its size, or 0 if (reliable) a subscriber kept the slot
  /// within `timeout`. Throws shmio::error: errc::message_too_large, errc::corrupted.
  std::size_t write(asio::const_buffer message, std::chrono::milliseconds timeout);
  /// As above; a timeout sets errc::timed_out (so a zero-length message is told from it).
  std::size_t write(asio::const_buffer message, std::chrono::milliseconds timeout,
                    std::error_code& ec);

  /// Reads the next message into `buffer`. Returns its size, or 0 if none came within
  /// `timeout`. Fails with errc::messages_lost (the size is the number lost; the next read goes
  /// on from the oldest message held), errc::evicted, errc::message_too_large (the message
  /// stays for a larger buffer; the size is its length) or errc::corrupted. The throwing form
  /// throws shmio::error for each of them.
  std::size_t read(asio::mutable_buffer buffer, std::chrono::milliseconds timeout);
  std::size_t read(asio::mutable_buffer buffer, std::chrono::milliseconds timeout,
                   std::error_code& ec);

  /// Zero-copy write: `fill(std::span<std::byte> slot)` writes into the slot (message_size()
  /// bytes) and returns the message size. If `fill` throws, nothing is published and the
  /// exception propagates. `fill` runs holding the writer lock: keep it short.
  template <class Fill>
  std::size_t write_in_place(Fill&& fill, std::chrono::milliseconds timeout);
  template <class Fill>
  std::size_t write_in_place(Fill&& fill, std::chrono::milliseconds timeout, std::error_code& ec);

  /// Zero-copy read: `use(std::span<const std::byte> message)` sees the message in shared
  /// memory, valid only during the call. Returns its size; the errors of read(). If a writer
  /// overtook the message during the call, the read fails (see the top of this file) and what
  /// `use` saw must be discarded. If `use` throws, the message counts as read.
  template <class Use>
  std::size_t read_in_place(Use&& use, std::chrono::milliseconds timeout);
  template <class Use>
  std::size_t read_in_place(Use&& use, std::chrono::milliseconds timeout, std::error_code& ec);

  // ---- asynchronous ---------------------------------------------------------------------
  // Completion signature of all four: void(std::error_code, std::size_t), with the errors and
  // sizes of the blocking forms. No handler runs inside the initiating call: an operation that
  // can finish at once completes as if by asio::post to the handler's associated executor.
  // Operations of one handle complete in the order they were started (a cancelled one
  // completes at once, as circular_buffer's do). Closing, moving or destroying the handle must
  // not overlap another call on it; close() aborts pending operations from any thread. The
  // handler's associated executor, allocator and cancellation slot are used.
  // Per-operation cancellation: terminal, partial and total. A cancelled operation completes
  // once with asio::error::operation_aborted and has done nothing: a read consumed no message
  // (the next read returns it), a write published none.

  /// Publishes one message when (reliable) every live subscriber has room for it.
  template <class CompletionToken>
  auto async_write(asio::const_buffer message, CompletionToken&& token);
  /// As write_in_place; `fill` runs in the completion handler's context (its associated
  /// executor: strand-safe), just before the handler, never inside this call and never under a
  /// mutex of shmio's in this process. The broadcast's writer lock (in shared memory) is this
  /// handle's from the moment the write can go until `fill` has run: every other writer, in
  /// any process, waits for it meanwhile, also while the handler waits for its executor to run
  /// it (or until the handler is destroyed unrun). Keep `fill` short and the executor running.
  /// If `fill` throws, nothing is published and the operation completes with
  /// errc::callback_failed.
  template <class Fill, class CompletionToken>
  auto async_write_in_place(Fill fill, CompletionToken&& token);
  /// Reads the next message into `buffer` when one is published.
  template <class CompletionToken>
  auto async_read(asio::mutable_buffer buffer, CompletionToken&& token);
  /// As read_in_place, when a message is published; `use` runs as `fill` does above. If it
  /// throws, the message counts as read and the operation completes with
  /// errc::callback_failed.
  template <class Use, class CompletionToken>
  auto async_read_in_place(Use use, CompletionToken&& token);

  /// Closes this handle: pending operations are aborted, a subscriber leaves (writers stop
  /// waiting for it), and the last handle on the machine removes the segment.
  void close() noexcept;

 private:
  struct impl;
  static std::shared_ptr<impl> make_impl(const executor_type& ex, segment seg, broadcast_role role,
                                         wait_strategy strategy, std::error_code& ec);

  executor_type ex_;  // kept after close(): a closed handle's operations complete through it
  std::shared_ptr<impl> impl_;
  std::string closed_name_;  // name() after close(): a closed handle's errors still name it
};

}  // namespace shmio

#include "shmio/impl/broadcast_buffer.hpp"
