#pragma once
// shmio::circular_buffer — a lock-free ring of fixed-size nodes that any number of processes
// write to and read from by name (the C# SharedMemory library's CircularBuffer), with blocking,
// zero-copy and asynchronous reads and writes.
//
// - One message per node; node_count and node_size are fixed by the creator and learnt by
//   openers. All node_count nodes can hold unread messages (the C# SharedMemory library keeps one
//   free: it holds node_count - 1).
// - Writers and readers may be many, in any processes (or, in a ring created with
//   ring_mode::spsc, one of each at a time, for speed). Readers compete: each message goes to
//   exactly one reader. Messages are read in the order their writers claimed nodes.
// - A message larger than node_size() is refused with errc::message_too_large, never cut. A read
//   into a buffer smaller than the next message fails with errc::message_too_large and leaves
//   the message in the ring, for a read with a larger buffer (a parked one is woken for it).
// - A participant killed while it holds a node does not stall the ring: after ~10 ms others ask
//   the kernel whether it lives and, if not, skip its half-written message (never delivered) or
//   free the node it was reading (that one message is lost with its reader).
//
// Waiting: see shmio/wait_strategy.hpp. A write wakes a parked reader and a read a parked writer
// with one shared-memory load when nobody is parked, and no system call.
//
// Threads: several threads may read and write through one handle at once (in a single-writer
// ring, see ring_mode::spsc, one at a time each way). Closing, moving or destroying it must not
// overlap another call on it, a blocking one or an async operation's initiating call (as for an
// Asio socket; a blocking call is not woken by close(): give it a timeout). Pending async
// operations are aborted by close() from any thread, a handler's included.

#include <chrono>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <system_error>

#include <asio/any_io_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/awaitable.hpp>
#include <asio/buffer.hpp>

#include "shmio/error.hpp"
#include "shmio/open_mode.hpp"
#include "shmio/segment.hpp"
#include "shmio/wait_strategy.hpp"

namespace shmio {

/// Who may use a ring, fixed by its creator.
enum class ring_mode {
  /// Any number of writers and readers, in any processes and threads (the default).
  mpmc,
  /// One writing handle and one reading handle at a time (the same handle, or any two, in any
  /// processes), for the fastest single-message flow: nodes are claimed and published without
  /// an atomic read-modify-write or a full fence, and a wait pays with a membarrier(2) system
  /// call each time it parks instead (a few microseconds; a wait that finds its message or node
  /// while it spins pays nothing).
  /// - A handle becomes the writer at its first write (the first try: one that times out, is
  ///   cancelled or finds the ring full counts) and stays so until it is closed (and any
  ///   in-place callback of it has returned); another handle's write meanwhile fails with
  ///   errc::busy (a handle that only reads never becomes the writer). The same for reading. A
  ///   writer or reader killed is replaced by the next handle to write or read, its
  ///   half-written message skipped or the message it was reading lost (see above). A child
  ///   forked without exec that keeps an inherited handle open keeps its roles taken.
  /// - One thread (or strand) at a time writes through the writing handle, and one reads
  ///   through the reading handle: a blocking call, an initiating call or a fast form must not
  ///   overlap another of the same direction. Any number of async operations may be pending;
  ///   a blocking call fails with errc::busy while one of its direction is (their claims would
  ///   race).
  /// - Every process that opens it needs membarrier's global expedited command (Linux 4.16);
  ///   where the kernel or a seccomp filter refuses it, the open fails with that system error.
  ///   (A filter that forbids it after the open makes a wait abort the process.)
  spsc,
};

class circular_buffer {
 public:
  using executor_type = asio::any_io_executor;

  /// Creates the ring `name` with `node_count` (>= 2) nodes of `node_size` (>= 1) bytes.
  /// Throws shmio::error: errc::invalid_argument, errc::already_exists, errc::no_space, ...
  circular_buffer(const executor_type& ex, create_only_t, std::string_view name,
                  std::size_t node_count, std::size_t node_size, wait_strategy strategy = {});
  /// The same, with the ring's mode (see ring_mode).
  circular_buffer(const executor_type& ex, create_only_t, std::string_view name,
                  std::size_t node_count, std::size_t node_size, ring_mode mode,
                  wait_strategy strategy = {});
  /// Opens the ring `name`; node_count(), node_size() and mode() come from the segment.
  circular_buffer(const executor_type& ex, open_only_t, std::string_view name,
                  wait_strategy strategy = {});
  /// Opens the ring `name` (of either mode), or creates it with these sizes (ring_mode::mpmc).
  circular_buffer(const executor_type& ex, open_or_create_t, std::string_view name,
                  std::size_t node_count, std::size_t node_size, wait_strategy strategy = {});
  /// The same, with the ring's mode; an existing ring of the other mode is errc::incompatible.
  circular_buffer(const executor_type& ex, open_or_create_t, std::string_view name,
                  std::size_t node_count, std::size_t node_size, ring_mode mode,
                  wait_strategy strategy = {});
  /// The error_code forms: on failure `ec` is set and the object is closed.
  circular_buffer(const executor_type& ex, create_only_t, std::string_view name,
                  std::size_t node_count, std::size_t node_size, wait_strategy strategy,
                  std::error_code& ec);
  circular_buffer(const executor_type& ex, open_only_t, std::string_view name,
                  wait_strategy strategy, std::error_code& ec);
  circular_buffer(const executor_type& ex, open_or_create_t, std::string_view name,
                  std::size_t node_count, std::size_t node_size, wait_strategy strategy,
                  std::error_code& ec);
  circular_buffer(const executor_type& ex, create_only_t, std::string_view name,
                  std::size_t node_count, std::size_t node_size, ring_mode mode,
                  wait_strategy strategy, std::error_code& ec);
  circular_buffer(const executor_type& ex, open_or_create_t, std::string_view name,
                  std::size_t node_count, std::size_t node_size, ring_mode mode,
                  wait_strategy strategy, std::error_code& ec);

  /// The moved-from handle is closed and keeps its executor.
  circular_buffer(circular_buffer&& other) noexcept;
  /// Closes this handle first (see close()).
  circular_buffer& operator=(circular_buffer&& other) noexcept;
  /// Pending operations complete with asio::error::operation_aborted.
  ~circular_buffer();

  executor_type get_executor() const noexcept;
  bool is_open() const noexcept { return impl_ != nullptr; }
  /// The segment's name; kept after close(), for what a closed handle's calls report.
  const std::string& name() const noexcept;
  std::size_t node_count() const noexcept;
  std::size_t node_size() const noexcept;
  /// ring_mode::mpmc for a closed handle.
  ring_mode mode() const noexcept;

  // ---- blocking -------------------------------------------------------------------------
  // Timeouts: zero tries once; negative or milliseconds::max() waits for ever.

  /// Writes one message. Returns its size, or 0 if no node came free within `timeout`.
  /// Throws shmio::error with errc::message_too_large if it exceeds node_size().
  std::size_t write(asio::const_buffer message, std::chrono::milliseconds timeout);
  /// As above; a timeout sets errc::timed_out (so a zero-length message is told from it).
  std::size_t write(asio::const_buffer message, std::chrono::milliseconds timeout,
                    std::error_code& ec);

  /// Reads one message into `buffer`. Returns its size, or 0 if none came within `timeout`.
  /// Throws shmio::error with errc::message_too_large (message kept) or errc::corrupted.
  std::size_t read(asio::mutable_buffer buffer, std::chrono::milliseconds timeout);
  std::size_t read(asio::mutable_buffer buffer, std::chrono::milliseconds timeout,
                   std::error_code& ec);

  /// Zero-copy write: `fill(std::span<std::byte> node)` writes into the node (node_size()
  /// bytes) and returns how many bytes the message has. Returns that size, or 0 on timeout.
  /// If `fill` throws, the node is given back unpublished and the exception propagates.
  template <class Fill>
  std::size_t write_in_place(Fill&& fill, std::chrono::milliseconds timeout);
  template <class Fill>
  std::size_t write_in_place(Fill&& fill, std::chrono::milliseconds timeout, std::error_code& ec);

  /// Zero-copy read: `use(std::span<const std::byte> message)` sees the message in shared
  /// memory, valid only during the call. Returns the message size, or 0 on timeout. If `use`
  /// throws, the message counts as read and the exception propagates.
  template <class Use>
  std::size_t read_in_place(Use&& use, std::chrono::milliseconds timeout);
  template <class Use>
  std::size_t read_in_place(Use&& use, std::chrono::milliseconds timeout, std::error_code& ec);

  // ---- batches --------------------------------------------------------------------------
  // Many messages per call, for small messages whose per-call cost (the wait machinery, one
  // completion each) would otherwise bound the rate. A batch waits only for its first message
  // or node and then takes what is there without waiting, so it never holds back messages that
  // could move. Each message is still claimed, copied and published (or used and released) on
  // its own, with every guarantee of the single calls: FIFO, each message to exactly one
  // reader, a participant killed mid-batch loses at most the one message it held. A batch is
  // not atomic: other writers' messages may interleave with a batch's, and other readers may
  // take messages between those of a batch.

  /// Writes `messages` in order, one message per buffer: waits (as write) until the first can
  /// be written, then writes as many of the rest as there are free nodes for, without waiting.
  /// Returns how many were written (a prefix of `messages`: resubmit the rest), 0 if no node
  /// came free within `timeout` (or `messages` is empty). Throws shmio::error with
  /// errc::message_too_large, before writing anything, if any message exceeds node_size().
  std::size_t write_batch(std::span<const asio::const_buffer> messages,
                          std::chrono::milliseconds timeout);
  /// As above; a timeout sets errc::timed_out.
  std::size_t write_batch(std::span<const asio::const_buffer> messages,
                          std::chrono::milliseconds timeout, std::error_code& ec);

  /// Zero-copy batch read: waits (as read_in_place) for the first message, then takes up to
  /// `max_messages` - 1 more that are already published, calling
  /// `use(std::span<const std::byte> message)` for each in order (valid only during the call).
  /// Returns the count, 0 on timeout (or if `max_messages` is 0). If `use` throws, that message
  /// counts as read, nothing after it is consumed, and the exception propagates. A corrupted
  /// first message throws errc::corrupted (skipped, as read does); a corrupted one after it
  /// ends the batch without an error, and the next call reports it.
  template <class Use>
  std::size_t read_batch_in_place(Use&& use, std::size_t max_messages,
                                  std::chrono::milliseconds timeout);
  /// As above; a timeout sets errc::timed_out. Exceptions from `use` still propagate.
  template <class Use>
  std::size_t read_batch_in_place(Use&& use, std::size_t max_messages,
                                  std::chrono::milliseconds timeout, std::error_code& ec);

  /// Copying batch read: message i goes into `buffers[i]` and its size into `sizes[i]`, for up
  /// to min(buffers.size(), sizes.size()) messages, with read_batch_in_place's waiting rule.
  /// Returns the count, 0 on timeout. A first message larger than buffers[0] throws
  /// errc::message_too_large and stays in the ring (as read); a later message larger than its
  /// buffer ends the batch before it, without an error.
  std::size_t read_batch(std::span<const asio::mutable_buffer> buffers,
                         std::span<std::size_t> sizes, std::chrono::milliseconds timeout);
  /// As above; a timeout sets errc::timed_out.
  std::size_t read_batch(std::span<const asio::mutable_buffer> buffers,
                         std::span<std::size_t> sizes, std::chrono::milliseconds timeout,
                         std::error_code& ec);

  // ---- asynchronous ---------------------------------------------------------------------
  // Completion signature of all six: void(std::error_code, std::size_t).
  // No handler runs inside the initiating call: an operation that can finish at once completes
  // as if by asio::post to the handler's associated executor (for a coroutine that wants the
  // ready message without that trip, see the co_ forms below). Reads of one handle complete in
  // the order they were started, and so do writes (a cancelled one completes at once: its
  // handler may run before that of an earlier one still queued on another executor, as with an
  // Asio socket). The handler's associated executor, allocator and cancellation slot are used.
  // Per-operation cancellation: terminal, partial and total. A cancelled operation completes
  // once with asio::error::operation_aborted and has done nothing: a read consumed no message,
  // a write published none. A cancellation that comes after the operation took its message or
  // node (its completion already on its way) changes nothing: it completes with its result.
  // For a timeout, cancel the operation through its slot when a timer fires, and keep what it
  // completes with. (Racing it against a timer with asio::experimental::awaitable_operators'
  // `||` does that too, but `||` keeps only the first result: a message read as the timer
  // fires is then dropped.)

  /// Writes one message when a node is free. errc::message_too_large if it exceeds node_size().
  template <class CompletionToken>
  auto async_write(asio::const_buffer message, CompletionToken&& token);
  /// Reads one message into `buffer` when one is published.
  template <class CompletionToken>
  auto async_read(asio::mutable_buffer buffer, CompletionToken&& token);
  /// As write_in_place, when a node is free. `fill` runs in the completion handler's context
  /// (its associated executor: a strand's handler gets a strand-safe `fill`), just before the
  /// handler, never inside this call and never under a lock of shmio's. The node stays claimed
  /// meanwhile; later writes of this handle wait for it. If `fill` throws, the node is given back
  /// unpublished and the operation completes with errc::callback_failed.
  template <class Fill, class CompletionToken>
  auto async_write_in_place(Fill fill, CompletionToken&& token);
  /// As read_in_place, when a message is published; `use` runs as `fill` does above. If it
  /// throws, the message counts as read and the operation completes with errc::callback_failed.
  template <class Use, class CompletionToken>
  auto async_read_in_place(Use use, CompletionToken&& token);

  /// As write_batch, when a node is free for the first message; completes with the count
  /// written (>= 1, unless `messages` is empty). errc::message_too_large, with nothing written,
  /// if any message exceeds node_size(). The span and the bytes it points to must stay valid
  /// until the completion. Cancellation takes effect only while the operation waits for its
  /// first node: a cancelled batch has written nothing.
  template <class CompletionToken>
  auto async_write_batch(std::span<const asio::const_buffer> messages, CompletionToken&& token);
  /// As read_batch_in_place, when a message is published; completes with the count read (>= 1,
  /// unless `max_messages` is 0), `use` running as for async_read_in_place. If `use` throws, it
  /// completes with errc::callback_failed and the count read, the throwing message included.
  /// Cancellation takes effect only while it waits for its first message: a cancelled batch has
  /// read nothing.
  template <class Use, class CompletionToken>
  auto async_read_batch_in_place(Use use, std::size_t max_messages, CompletionToken&& token);

  // ---- coroutines: the fast forms -------------------------------------------------------
  // For a use_awaitable coroutine (asio::awaitable<T>, any_io_executor). Each takes a message
  // or a node that is ready now, with no trip through the executor's scheduler, and otherwise
  // co_awaits the async form above. They keep the async forms' order (an operation started
  // earlier on this handle goes first) and errors, thrown as std::system_error. `use` and `fill`
  // run in the coroutine; an exception from them propagates (the message counts as read, the
  // node is given back), as in the blocking forms.
  //
  //   std::size_t n = co_await ring.co_read(asio::buffer(buf));

  asio::awaitable<std::size_t> co_read(asio::mutable_buffer buffer);
  asio::awaitable<std::size_t> co_write(asio::const_buffer message);
  template <class Use>
  asio::awaitable<std::size_t> co_read_in_place(Use use);
  template <class Fill>
  asio::awaitable<std::size_t> co_write_in_place(Fill fill);

  /// Closes this handle: pending async operations are aborted (blocking calls must not be in
  /// progress, see above); the last handle on the machine removes the ring's segment.
  void close() noexcept;

 private:
  struct impl;
  static std::shared_ptr<impl> make_impl(const executor_type& ex, segment seg,
                                         wait_strategy strategy, std::error_code& ec);

  executor_type ex_;  // kept after close(): a closed handle's operations complete through it
  std::shared_ptr<impl> impl_;
  std::string closed_name_;  // name() after close(): a closed handle's errors still name it
};

}  // namespace shmio

#include "shmio/impl/circular_buffer.hpp"
