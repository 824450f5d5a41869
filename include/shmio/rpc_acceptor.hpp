#pragma once
// shmio::rpc_acceptor — one service, many clients: takes connections to a named RPC service, as
// an Asio acceptor takes sockets.
//
//   shmio::rpc_acceptor acceptor(ex, shmio::create_only, "kv");
//   for (;;) {
//     shmio::rpc_buffer client = co_await acceptor.async_accept(handler, asio::use_awaitable);
//     ...keep `client`: it serves `handler` for that client until either end closes...
//   }
//
//   shmio::rpc_buffer client(ex);                                  // in another process
//   co_await client.async_connect("kv", asio::use_awaitable);
//   auto reply = co_await client.async_request(asio::buffer(data), asio::use_awaitable);
//
// Each connection is a channel of its own (two rings, made by the client with the sizes the
// acceptor's options give; see docs/architecture.md), so clients never contend with each other
// and a client that dies or closes takes only its own channel with it. Any number of clients
// may be connected at once; up to 256 connect requests wait at once for async_accept, and a
// client whose request finds no room tries again until its connect times out. rpc_server does
// the accept loop for the usual case.

#include <memory>
#include <string>
#include <string_view>
#include <system_error>

#include <asio/any_io_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/cancellation_state.hpp>
#include <asio/cancellation_type.hpp>
#include <asio/compose.hpp>
#include <asio/error.hpp>
#include <asio/experimental/append.hpp>
#include <asio/post.hpp>

#include "shmio/detail/context.hpp"
#include "shmio/detail/rpc_acceptor_impl.hpp"
#include "shmio/open_mode.hpp"
#include "shmio/rpc_buffer.hpp"
#include "shmio/rpc_options.hpp"

namespace shmio {

class rpc_acceptor {
 public:
  using executor_type = asio::any_io_executor;

  /// Creates the service `name`. `options` are every connection's (by default
  /// rpc_connection_options()): ring sizes, default timeout and largest message (`strategy` is this
  /// end's). errc::already_exists if a live service has the name; errc::invalid_argument if a size
  /// is out of range. Throws shmio::error.
  rpc_acceptor(const executor_type& ex, create_only_t, std::string_view name,
               rpc_options options = rpc_connection_options());
  rpc_acceptor(const executor_type& ex, create_only_t, std::string_view name, rpc_options options,
               std::error_code& ec);
  /// The same, given an execution context (an io_context) in place of an executor.
  template <detail::execution_context_ref Context>
  rpc_acceptor(Context& ctx, create_only_t, std::string_view name,
               rpc_options options = rpc_connection_options())
      : rpc_acceptor(executor_type(ctx.get_executor()), create_only, name, std::move(options)) {}
  template <detail::execution_context_ref Context>
  rpc_acceptor(Context& ctx, create_only_t, std::string_view name, rpc_options options,
               std::error_code& ec)
      : rpc_acceptor(executor_type(ctx.get_executor()), create_only, name, std::move(options), ec) {
  }
  /// As an Asio I/O object's: the moved-from acceptor is closed and keeps a copy of the
  /// executor, so that an accept started on it completes through it with operation_aborted.
  rpc_acceptor(rpc_acceptor&& other) noexcept;
  rpc_acceptor& operator=(rpc_acceptor&& other) noexcept;
  ~rpc_acceptor();

  executor_type get_executor() const noexcept { return ex_; }
  bool is_open() const noexcept { return impl_ != nullptr; }
  /// The service's name; kept after close().
  const std::string& name() const noexcept { return name_; }
  /// Kept after close().
  rpc_acceptor_statistics statistics() const noexcept;

  /// Waits for the next client and connects it: the end that serves `methods` for it (one
  /// handler, or named ones: rpc_methods.hpp; with the form without, calls are answered with
  /// errc::no_handler, and the end can still call the client). A request that cannot be taken (its
  /// client died, or made its channel wrong) is counted in statistics().refused and skipped; the
  /// operation goes on to the next.
  ///
  /// Completion signature: `void(std::error_code, shmio::rpc_buffer)`. Errors:
  /// asio::error::operation_aborted (cancelled: terminal, partial or total; or closed);
  /// errc::corrupted (the connect ring is damaged). Operations complete in the order started.
  template <class CompletionToken>
  auto async_accept(rpc_methods methods, CompletionToken&& token) {
    return start_accept(detail::rpc_service::of(methods), std::forward<CompletionToken>(token));
  }
  template <class CompletionToken>
  auto async_accept(CompletionToken&& token) {
    return start_accept({}, std::forward<CompletionToken>(token));
  }

  /// Stops taking connections: pending accepts complete with operation_aborted, and new
  /// clients get errc::not_found. The service's name is free at once: a service may be made
  /// again under it before the aborted accepts have run. Connections already made are not
  /// affected. An accept making its connection on another thread at that moment (its handler
  /// bound elsewhere) gives it up and completes with operation_aborted, unless it had it made
  /// before close() began.
  void close() noexcept;

 private:
  // The steps of one accept: wait for a request, take it (or skip it), complete.
  struct accept_op {
    std::shared_ptr<detail::rpc_acceptor_impl> impl;
    executor_type ex;
    detail::rpc_service handlers;
    bool started = false;

    template <class Self>
    void operator()(Self& self, std::error_code ec = {}, detail::taken_request taken = {}) {
      if (!started) {
        started = true;
        // Closed: complete as any other completion, never inside the initiation. Through a
        // copy of the executor, made first: `ex` lives in `self`, which append() moves from.
        if (!impl) {
          const executor_type post_ex = ex;
          return asio::post(
              post_ex, asio::experimental::append(std::move(self),
                                                  std::error_code(asio::error::operation_aborted),
                                                  std::move(taken)));
        }
        // Every type, as documented: async_compose's own filter passes only terminal
        // cancellation on to the wait.
        self.reset_cancellation_state(asio::enable_total_cancellation());
        // A copy: `ex` lives in `self`, which the wait moves from before it reads the executor.
        return impl->async_next_request(executor_type(ex), std::move(self));
      }
      // A step that starts after close() finds the waiter shut (bad_descriptor): to the caller
      // that is the documented operation_aborted. So is a request taken before close() whose
      // step runs after close() began (its handler's executor is elsewhere): accept() then
      // makes no connection, or closes the one it made, and its client learns that the service
      // went.
      if (ec == asio::error::bad_descriptor) ec = asio::error::operation_aborted;
      if (ec) return self.complete(ec, rpc_buffer(ex));
      // What was taken came with a hold on the queue (taken_request), released as this step
      // ends: after this accept has completed, or has started to wait again before the accepts
      // started after it (having looked at as many nodes as the ring holds, or its request
      // refused).
      if (!taken.look_again) {
        std::error_code refused;
        auto channel = impl->accept(ex, taken.request, handlers, refused);
        if (refused == asio::error::operation_aborted)
          return self.complete(refused, rpc_buffer(ex));
        if (channel)
          return self.complete({}, detail::rpc_buffer_access::make(ex, std::move(channel)));
      }
      // About to wait again. A cancellation that came after the wait had taken this request
      // found no wait to cancel: it is heard here. (A request taken is served first: ending
      // the accept then would leave its client connected to nobody.)
      if (self.get_cancellation_state().cancelled() != asio::cancellation_type::none)
        return self.complete(asio::error::operation_aborted, rpc_buffer(ex));
      return impl->async_next_request_first(executor_type(ex), std::move(self));
    }
  };

  template <class CompletionToken>
  auto start_accept(detail::rpc_service handlers, CompletionToken&& token) {
    return asio::async_compose<CompletionToken, void(std::error_code, rpc_buffer)>(
        accept_op{impl_, ex_, std::move(handlers)}, token, ex_);
  }

  executor_type ex_;
  std::string name_;
  std::shared_ptr<detail::rpc_acceptor_impl> impl_;
  rpc_acceptor_statistics last_statistics_;  // as they were at close()
};

}  // namespace shmio
