#pragma once
// shmio::rpc_buffer — a request/response channel between two processes (the C# SharedMemory
// library's RpcBuffer), with awaitable calls, per-request timeouts, cancellation and packet
// fragmentation.
//
// A channel has two ends: the owner creates it, one opener at a time joins it. Either end may
// call the other and either may serve calls; a handler may itself call the other end (nested
// calls) without deadlock. Messages of any size below 4 GiB travel as node-sized packets over
// two rings in one segment (see docs/protocol.md), and are put back together on arrival.
//
//   shmio::rpc_buffer server(ex, shmio::create_only, "calc",
//       [](std::uint64_t, std::span<const std::byte> in) -> asio::awaitable<std::vector<std::byte>>
//       {
//         co_return std::vector<std::byte>(in.begin(), in.end());  // echo
//       });
//   shmio::rpc_buffer client(ex, shmio::open_only, "calc");
//   std::vector<std::byte> reply = co_await client.async_request(asio::buffer(data),
//                                                                asio::use_awaitable);
//
// Work: an end that serves (it has a handler) keeps its executor's io_context::run() from
// returning while it is open, as a socket with a read pending does: it reads the other end's
// requests whenever they come. An end without handlers holds work only while it waits for
// something of its own (a call, a stream, async_wait_closed, a connect), as an idle socket
// holds none: with nothing pending it reads nothing and run() may return; the next call starts
// it reading again. The other end's calls to it fail at once with errc::no_handler (or
// no_such_method for a named one) whether or not it runs: each end publishes whether it serves
// (a lock byte, docs/protocol.md). close() lets run() return in every case.
//
// Handlers run on the channel's strand (on its executor): many requests are served concurrently
// as coroutines, but a handler that computes for long should move its work elsewhere. A plain
// function handler (rpc_sync_handler) is the fast path: it runs inline as its request is read,
// with no coroutine to start, and holds up the channel while it runs.
//
// Threads: calls (async_request, async_request_stream, async_wait_closed) and set_limits may be
// made from several threads at once. connect, close, moves and destruction change which channel
// the object holds, and must not overlap any other call on the same object (as for an Asio
// socket: serialise them on a strand, or post the close to it). Pending calls are aborted by
// close() whichever thread it runs on.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <asio/any_io_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/awaitable.hpp>
#include <asio/buffer.hpp>

#include "shmio/bytes.hpp"
#include "shmio/detail/context.hpp"
#include "shmio/error.hpp"
#include "shmio/open_mode.hpp"
#include "shmio/rpc_error.hpp"
#include "shmio/rpc_methods.hpp"
#include "shmio/rpc_options.hpp"
#include "shmio/rpc_stream.hpp"
#include "shmio/wait_strategy.hpp"

namespace shmio {

namespace detail {
class rpc_channel;
struct outgoing_message;
struct rpc_buffer_access;
struct rpc_service;
}  // namespace detail

class rpc_buffer {
 public:
  using executor_type = asio::any_io_executor;
  using handler_type = rpc_handler;
  using sync_handler_type = rpc_sync_handler;

  /// How long a connect waits for the service to accept, unless told otherwise.
  static constexpr std::chrono::milliseconds default_connect_timeout{10'000};

  /// A client end, not yet connected: connect it to a service with async_connect or connect.
  /// `handler` serves the calls the service's end makes to it, if any.
  explicit rpc_buffer(const executor_type& ex, rpc_methods methods = {},
                      wait_strategy strategy = {});

  /// Creates the channel `name` as its owner, serving `methods` (one handler, or a table of
  /// named ones: rpc_methods.hpp; `{}` for none: the opener's calls then fail at once with
  /// errc::no_handler, and this end holds no work while nothing of its own is pending). Throws
  /// shmio::error.
  rpc_buffer(const executor_type& ex, create_only_t, std::string_view name,
             rpc_methods methods = {}, rpc_options options = {});
  /// Joins the channel `name` as its opener. errc::busy if it already has one. Throws.
  rpc_buffer(const executor_type& ex, open_only_t, std::string_view name, rpc_methods methods = {},
             wait_strategy strategy = {});
  /// The error_code forms: on failure `ec` is set and the object is closed.
  rpc_buffer(const executor_type& ex, create_only_t, std::string_view name, rpc_methods methods,
             rpc_options options, std::error_code& ec);
  rpc_buffer(const executor_type& ex, open_only_t, std::string_view name, rpc_methods methods,
             wait_strategy strategy, std::error_code& ec);

  /// The same, given an execution context (an io_context) in place of an executor: its
  /// executor is used.
  template <detail::execution_context_ref Context>
  explicit rpc_buffer(Context& ctx, rpc_methods methods = {}, wait_strategy strategy = {})
      : rpc_buffer(executor_type(ctx.get_executor()), std::move(methods), strategy) {}
  template <detail::execution_context_ref Context>
  rpc_buffer(Context& ctx, create_only_t, std::string_view name, rpc_methods methods = {},
             rpc_options options = {})
      : rpc_buffer(executor_type(ctx.get_executor()), create_only, name, std::move(methods),
                   std::move(options)) {}
  template <detail::execution_context_ref Context>
  rpc_buffer(Context& ctx, open_only_t, std::string_view name, rpc_methods methods = {},
             wait_strategy strategy = {})
      : rpc_buffer(executor_type(ctx.get_executor()), open_only, name, std::move(methods),
                   strategy) {}
  template <detail::execution_context_ref Context>
  rpc_buffer(Context& ctx, create_only_t, std::string_view name, rpc_methods methods,
             rpc_options options, std::error_code& ec)
      : rpc_buffer(executor_type(ctx.get_executor()), create_only, name, std::move(methods),
                   std::move(options), ec) {}
  template <detail::execution_context_ref Context>
  rpc_buffer(Context& ctx, open_only_t, std::string_view name, rpc_methods methods,
             wait_strategy strategy, std::error_code& ec)
      : rpc_buffer(executor_type(ctx.get_executor()), open_only, name, std::move(methods), strategy,
                   ec) {}

  /// As an Asio I/O object's: the moved-from end is closed and keeps a copy of the executor,
  /// so that its later calls complete through it as a closed end's do.
  rpc_buffer(rpc_buffer&&) noexcept;
  rpc_buffer& operator=(rpc_buffer&&) noexcept;
  /// Closes this end (see close()).
  ~rpc_buffer();

  executor_type get_executor() const noexcept;
  bool is_open() const noexcept { return channel_ != nullptr; }
  bool is_owner() const noexcept;
  /// The channel's name (a connection's: the service's name, '#', the client's pid and a
  /// nonce). Both are kept after close(), as they were then.
  const std::string& name() const noexcept;
  rpc_statistics statistics() const;

  /// Connects to the service `service` (an rpc_acceptor or rpc_server of that name): makes this
  /// end's own channel and asks the service's acceptor to take it.
  ///
  /// Completion signature: `void(std::error_code)`. Errors: errc::not_found at once if no
  /// service of that name is running; errc::timed_out if it does not accept within `timeout`;
  /// errc::peer_gone if the service closed or died meanwhile; asio::error::operation_aborted if
  /// cancelled (terminal, partial or total) or closed. A connected or connecting end is closed
  /// first. A connect that fails at once (not_found, access_denied, ...) leaves the end closed:
  /// is_open() is false and calls fail with asio::error::operation_aborted. One that timed out
  /// or found the service gone leaves it open, and calls fail with errc::peer_gone until the
  /// next connect.
  template <class CompletionToken>
  auto async_connect(std::string_view service, std::chrono::milliseconds timeout,
                     CompletionToken&& token);
  template <class CompletionToken>
  auto async_connect(std::string_view service, CompletionToken&& token) {
    return async_connect(service, default_connect_timeout, std::forward<CompletionToken>(token));
  }
  /// The same, blocking the calling thread (which need not run the executor). Throws
  /// shmio::error, or sets `ec`.
  void connect(std::string_view service,
               std::chrono::milliseconds timeout = default_connect_timeout);
  void connect(std::string_view service, std::chrono::milliseconds timeout, std::error_code& ec);

  /// Waits until the other end closes or dies: a connection's other end (for good), or an
  /// owner's current opener. Lets an idle end learn of it without calling. Deaths are seen
  /// through the other process's pidfd, at no cost while nothing happens.
  ///
  /// Completion signature: `void(std::error_code)`: no error when the other end went;
  /// errc::corrupted if this end failed; asio::error::operation_aborted if this end was closed
  /// or the wait was cancelled (every cancellation type: the wait has no side effect).
  template <class CompletionToken>
  auto async_wait_closed(CompletionToken&& token);

  /// Calls the other end with `payload` (copied: the buffer may go at once) and the channel's
  /// default timeout.
  ///
  /// Completion signature: `void(std::error_code, std::vector<std::byte> reply)`. Errors:
  /// errc::timed_out; asio::error::operation_aborted (cancelled, or this end closed);
  /// errc::remote_error (the reply then holds the remote exception's text, cut to
  /// max_message_size - 4 bytes; awaited with
  /// asio::use_awaitable, the call throws rpc_error, which carries it); errc::no_handler;
  /// errc::peer_gone (the other end closed or died: reported within ~100 ms, not at the
  /// timeout); errc::message_too_large (over max_message_size at either end).
  ///
  /// Per-operation cancellation: terminal and partial always; total only while the request is
  /// unsent (waiting for credit, see rpc_options::max_in_flight, or queued whole), as total
  /// promises no side effect. The request completes at once with operation_aborted, its table
  /// entry is freed, and a late reply is discarded. An unsent request is taken back and never
  /// reaches the other end; a sent one is followed by a cancel, so its handler's coroutine
  /// receives cancellation. (If the handler already ran, what it did stays done.) A call that
  /// times out is treated the same way. Thread-safe: may be called from any thread.
  template <class CompletionToken>
  auto async_request(asio::const_buffer payload, CompletionToken&& token);
  /// As above with its own timeout.
  template <class CompletionToken>
  auto async_request(asio::const_buffer payload, std::chrono::milliseconds timeout,
                     CompletionToken&& token);
  /// Calls the other end's method `method` (see rpc_methods). As above; also
  /// errc::no_such_method if the other end has no method of that name, and
  /// errc::invalid_argument (at once) for a name that is empty or over rpc_methods::max_name.
  template <class CompletionToken>
  auto async_request(std::string_view method, asio::const_buffer payload, CompletionToken&& token);
  template <class CompletionToken>
  auto async_request(std::string_view method, asio::const_buffer payload,
                     std::chrono::milliseconds timeout, CompletionToken&& token);

  /// Calls the other end as async_request does, in place: `payload` is sent from where it is
  /// and the reply is read into `reply`, with no copy and, in steady state, no heap allocation
  /// of its own at this end (Asio's per-thread caches of operation blocks miss now and then)
  /// for requests and replies of one packet each (up to node_size - 40 bytes, rpc_options). Neither
  /// buffer is copied, so both (and the characters of `method`) must stay valid until the call
  /// completes, as for asio::async_write.
  ///
  /// Completion signature: `void(std::error_code, std::size_t reply_size)`. The errors of
  /// async_request; on an error with a text (errc::remote_error), `reply` holds as much of it
  /// as fits and the size is the part copied. A reply larger than `reply` fills it and the call
  /// completes with errc::message_too_large and the reply's whole size (a reply over this end's
  /// max_message_size is refused as it arrives, unread: message_too_large with size 0). Awaited
  /// with asio::use_awaitable, a failure throws rpc_error as async_request's does.
  template <class CompletionToken>
  auto async_request(asio::const_buffer payload, asio::mutable_buffer reply,
                     CompletionToken&& token);
  template <class CompletionToken>
  auto async_request(asio::const_buffer payload, asio::mutable_buffer reply,
                     std::chrono::milliseconds timeout, CompletionToken&& token);
  template <class CompletionToken>
  auto async_request(std::string_view method, asio::const_buffer payload,
                     asio::mutable_buffer reply, CompletionToken&& token);
  template <class CompletionToken>
  auto async_request(std::string_view method, asio::const_buffer payload,
                     asio::mutable_buffer reply, std::chrono::milliseconds timeout,
                     CompletionToken&& token);

  /// Calls the other end's stream method `method` (see rpc_stream.hpp): its handler answers
  /// with any number of items, read through the rpc_stream this completes with.
  ///
  /// Completion signature: `void(std::error_code, shmio::rpc_stream)`; it completes as the
  /// request is sent (after waiting for credit, rpc_options::max_in_flight, if it must; an open
  /// stream holds one credit until it ends). What the other end answers (items, the end, an
  /// error such as errc::no_such_method) comes through the stream's reads. Errors here:
  /// asio::error::operation_aborted (cancelled while unsent, or this end closed);
  /// errc::peer_gone; errc::message_too_large; errc::invalid_argument (a name that is empty or
  /// over rpc_methods::max_name); errc::no_handler or errc::no_such_method when the other end
  /// serves nothing at all (known at once, nothing sent). Thread-safe.
  template <class CompletionToken>
  auto async_request_stream(std::string_view method, asio::const_buffer payload,
                            CompletionToken&& token);
  /// The same for the unnamed method.
  template <class CompletionToken>
  auto async_request_stream(asio::const_buffer payload, CompletionToken&& token);

  /// Sets this end's own bounds from `limits`: max_in_flight, max_concurrent_handlers,
  /// max_held_bytes, stream_window and stream_window_limit (the rest of rpc_options is the
  /// channel's, fixed by its owner). An owner
  /// gets them from its constructor; this is how an opener or a client sets its own. A client
  /// keeps them for each connect. May run beside calls on other threads (not beside another
  /// set_limits or a connect); they apply to what comes after. A bound out of its range
  /// (rpc_options) is refused with errc::invalid_argument, and nothing changes.
  void set_limits(const rpc_options& limits);
  void set_limits(const rpc_options& limits, std::error_code& ec);

  /// Tells the other end (its pending calls fail with errc::peer_gone at once), aborts this
  /// end's pending calls and handlers, and releases the channel; the last end to close removes
  /// its segment.
  void close() noexcept;

 private:
  friend struct detail::rpc_buffer_access;
  rpc_buffer(const executor_type& ex, std::shared_ptr<detail::rpc_channel> channel);
  detail::rpc_service client_service() const;
  template <bool Into, class CompletionToken>
  auto start_request(detail::outgoing_message message, bool valid, asio::mutable_buffer target,
                     std::chrono::milliseconds timeout, CompletionToken&& token);
  template <class CompletionToken>
  auto start_stream(bool named, std::string_view method, asio::const_buffer payload,
                    CompletionToken&& token);

  executor_type ex_;  // kept after close, so that late calls complete on it
  std::shared_ptr<detail::rpc_channel> channel_;
  // A client end's: what serves the other end's calls, for the channel a connect makes.
  rpc_methods methods_;
  wait_strategy strategy_;
  std::optional<rpc_options> limits_;  // set_limits(), for a client's next connects
  std::string closed_name_;            // name() and statistics() as they were at close()
  rpc_statistics closed_statistics_;
};

}  // namespace shmio

#include "shmio/impl/rpc_buffer.hpp"
