#pragma once
// shmio::rpc_stream and shmio::rpc_stream_writer — a call answered by a stream of items.
//
//   // The service: a stream handler writes items, then returns (the caller reads eof).
//   methods.add("ticks", [](std::uint64_t, std::span<const std::byte> request,
//                           shmio::rpc_stream_writer out) -> asio::awaitable<void> {
//     for (int i = 0; i < 10; ++i)
//       co_await out.async_write(asio::buffer(&i, sizeof i), asio::use_awaitable);
//   });
//
//   // The caller:
//   shmio::rpc_stream ticks = co_await client.async_request_stream("ticks", {}, use_awaitable);
//   for (;;) {
//     auto [ec, item] = co_await ticks.async_read(asio::experimental::as_tuple(use_awaitable));
//     if (ec == asio::error::eof) break;
//     ...
//   }
//
// Back-pressure: the caller lets the handler run at most rpc_options::stream_window items ahead
// of what it has read; a handler's async_write completes only once its item fits in that window.
// A slow reader slows the writer, and neither end holds more than a window of items.
//
// Ending: the handler's return ends the stream (eof at the caller, after every item); an
// exception in it ends the stream with errc::remote_error, its text as the read's bytes. The
// caller's close(), its destructor, or a terminal or partial cancellation of a read cancel the
// handler: its pending and later writes complete with asio::error::operation_aborted, and its
// coroutine receives the cancellation. Either end going ends the stream (errc::peer_gone at the
// caller; writes fail with errc::peer_gone). A stream has no timeout of its own: bound a read
// with cancellation where one is needed; mind that asio's awaitable operators (`||` with a
// timer) cancel the read with cancellation_type::terminal, which ends the stream. For a timeout
// that leaves the stream going, cancel the read with cancellation_type::total.
//
// Work: an open stream keeps its end reading, and with it io_context::run() from returning,
// until it ends (eof or an error read) or is closed, whether or not a read is pending: unlike
// a socket's idle read side, its items, its end or the other end's failure may come at any
// time and are kept for the next read. A stream the caller stops reading early: close() it.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <system_error>
#include <utility>
#include <vector>

#include <asio/any_io_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/awaitable.hpp>
#include <asio/buffer.hpp>
#include <asio/use_awaitable.hpp>

#include "shmio/detail/rpc_stream_core.hpp"
#include "shmio/rpc_error.hpp"

namespace shmio {

namespace detail {
struct rpc_stream_access;
}

/// The caller's end of a stream: its items in order, then asio::error::eof (or the error that
/// ended it). Made by rpc_buffer::async_request_stream. Move-only; its destructor closes it.
class rpc_stream {
 public:
  using executor_type = asio::any_io_executor;

  /// Not open, and without an executor: its reads need a handler with an associated executor
  /// (they complete with asio::error::operation_aborted). A failed async_request_stream gives a
  /// stream that is not open but has its channel's executor.
  rpc_stream() = default;
  /// The moved-from stream is not open and keeps its executor.
  rpc_stream(rpc_stream&& other) noexcept
      : ex_(other.ex_), channel_(std::move(other.channel_)), state_(std::move(other.state_)) {}
  rpc_stream& operator=(rpc_stream&& other) noexcept {
    if (this != &other) {
      close();
      ex_ = other.ex_;
      channel_ = std::move(other.channel_);
      state_ = std::move(other.state_);
    }
    return *this;
  }
  ~rpc_stream() { close(); }

  executor_type get_executor() const noexcept { return ex_; }
  bool is_open() const noexcept { return state_ != nullptr; }
  /// The id of the request this stream answers (the handler's `request_id`); 0 if not open.
  std::uint64_t request_id() const noexcept {
    return state_ ? detail::stream_request_id(*state_) : 0;
  }

  /// Reads the next item. Reads complete in the order they were started.
  ///
  /// Completion signature: `void(std::error_code, std::vector<std::byte> item)`. Errors:
  /// asio::error::eof once every item is read and the handler returned; errc::remote_error (the
  /// bytes are the handler's exception text); errc::no_such_method or errc::no_handler (nothing
  /// at the other end streams under that name); errc::peer_gone; errc::busy (the other end had
  /// too many handlers running); errc::corrupted (the other end broke the protocol, e.g. sent
  /// past the window); asio::error::operation_aborted (this stream or its channel closed, or the
  /// read was cancelled). Once the stream has ended, every later read gets the same error.
  /// Awaited with asio::use_awaitable itself, a failure (eof too) throws rpc_error, whose
  /// remote_what() is the other end's text, as a call's does: the completion signature is then
  /// `void(std::exception_ptr, std::vector<std::byte>)`.
  ///
  /// Per-operation cancellation: terminal and partial end the stream (its handler over there is
  /// cancelled); total aborts this read only, and the stream goes on.
  template <class CompletionToken>
  auto async_read(CompletionToken&& token);

  /// Reads every item that has come, up to `max_items`, in one completion: as async_read, but
  /// a steady stream's reader then pays one completion per batch instead of one per item (at
  /// most rpc_options::stream_window items are ever there). Reads of both kinds complete in
  /// the order they were started; a batch of at most 0 items completes in its turn with none.
  ///
  /// Completion signature: `void(std::error_code, std::vector<std::vector<std::byte>> items)`:
  /// at least one item and no error while the stream goes on; once every item is read, the
  /// error that ended it (as async_read's), with no items, except errc::remote_error, whose one
  /// item is the handler's exception text. Awaited with asio::use_awaitable itself, a failure
  /// throws rpc_error carrying that text, as async_read's does (the completion signature is
  /// then `void(std::exception_ptr, ...)`). Cancellation: as async_read.
  template <class CompletionToken>
  auto async_read_batch(std::size_t max_items, CompletionToken&& token);

  /// Ends the stream if it has not ended (its handler is cancelled) and drops unread items.
  /// Pending reads complete with asio::error::operation_aborted.
  void close() noexcept {
    if (state_) detail::stream_close(channel_, state_);
    channel_.reset();
    state_.reset();
  }

 private:
  friend struct detail::rpc_stream_access;
  rpc_stream(executor_type ex, std::shared_ptr<detail::rpc_channel> ch,
             std::shared_ptr<detail::stream_state> st)
      : ex_(std::move(ex)), channel_(std::move(ch)), state_(std::move(st)) {}

  executor_type ex_;
  std::shared_ptr<detail::rpc_channel> channel_;
  std::shared_ptr<detail::stream_state> state_;
};

/// A stream handler's way to send items to its caller. Copyable; valid while its channel is.
/// A moved-from writer keeps its executor; its writes complete with asio::error::bad_descriptor.
/// Each copy keeps its channel's state alive, with the mapping of its segment and its file
/// descriptor: a copy kept past its handler's end (its writes can only fail then) holds them
/// after the caller has gone, until the copy goes. Drop copies as their handler ends.
class rpc_stream_writer {
 public:
  using executor_type = asio::any_io_executor;

  rpc_stream_writer(const rpc_stream_writer&) = default;
  rpc_stream_writer& operator=(const rpc_stream_writer&) = default;
  rpc_stream_writer(rpc_stream_writer&& other) noexcept
      : ex_(other.ex_),
        channel_(std::move(other.channel_)),
        id_(other.id_),
        session_(other.session_),
        writes_(std::move(other.writes_)) {}
  rpc_stream_writer& operator=(rpc_stream_writer&& other) noexcept {
    if (this != &other) {
      ex_ = other.ex_;
      channel_ = std::move(other.channel_);
      id_ = other.id_;
      session_ = other.session_;
      writes_ = std::move(other.writes_);
    }
    return *this;
  }

  /// The channel's strand, on which the stream handler runs.
  executor_type get_executor() const noexcept { return ex_; }
  /// The id of the request being answered.
  std::uint64_t request_id() const noexcept { return id_; }

  /// Sends `item` (copied: the buffer may go at once) as the stream's next item, once the
  /// caller has room for it. Writes go out, and complete, in the order they were started
  /// (whatever executor each handler has: one completion at a time, the next once the handler
  /// before it has been reached).
  ///
  /// Completion signature: `void(std::error_code)`. Errors: asio::error::operation_aborted (the
  /// caller closed or cancelled the stream, this end closed, or the write was cancelled while it
  /// waited for room: then nothing of it was sent); errc::peer_gone (the caller's end went);
  /// errc::message_too_large; asio::error::bad_descriptor (a moved-from writer).
  ///
  /// Per-operation cancellation: any type, while the item waits for room.
  template <class CompletionToken>
  auto async_write(asio::const_buffer item, CompletionToken&& token);

  /// The fast form of `co_await async_write(item, use_awaitable)` for the stream handler's own
  /// coroutine: when it runs on its channel's strand (as the channel starts it), the stream has
  /// credit and no earlier write of this stream is still on its way (its handler not yet
  /// reached), the item is sent at once, from where it is, and the coroutine goes on without a
  /// trip through the executor. Otherwise it is async_write.
  /// Throws std::system_error with async_write's errors.
  asio::awaitable<void> co_write(asio::const_buffer item);

 private:
  friend struct detail::rpc_stream_access;
  rpc_stream_writer(std::shared_ptr<detail::rpc_channel> ch, std::uint64_t id,
                    std::uint64_t session)
      : ex_(detail::stream_executor(*ch)),
        channel_(std::move(ch)),
        id_(id),
        session_(session),
        writes_(std::make_shared<detail::stream_write_count>()) {}

  executor_type ex_;
  std::shared_ptr<detail::rpc_channel> channel_;
  std::uint64_t id_;
  std::uint64_t session_;
  // This stream's async_writes whose handlers have not been reached, shared by the copies:
  // co_write's fast path waits for none of them.
  std::shared_ptr<detail::stream_write_count> writes_;
};

/// Serves one stream request: its id and payload (valid until the handler completes) in, items
/// out through `writer`; returning ends the stream. An exception ends it with
/// errc::remote_error, carrying its what() text.
using rpc_stream_handler = std::function<asio::awaitable<void>(
    std::uint64_t request_id, std::span<const std::byte> payload, rpc_stream_writer writer)>;

}  // namespace shmio

#include "shmio/impl/rpc_stream.hpp"
