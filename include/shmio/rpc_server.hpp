#pragma once
// shmio::rpc_server — the two-line service: accepts every client of a named RPC service and
// serves each with the same handler.
//
//   shmio::rpc_server server(ex, shmio::create_only, "kv",
//       [](std::uint64_t, std::span<const std::byte> in) -> asio::awaitable<std::vector<std::byte>>
//       { co_return lookup(in); });
//   io.run();
//
// Clients connect with rpc_buffer::async_connect("kv", ...). Each connection is served on its
// own strand, so clients are served in parallel on a multi-threaded io_context. A client that
// closes or dies (seen through its pidfd, at no cost while idle) is dropped with everything it
// had. While it is open the server has an accept pending, so io_context::run() does not return;
// close() ends that, and the connections with it.

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>

#include <asio/any_io_executor.hpp>

#include "shmio/detail/context.hpp"
#include "shmio/open_mode.hpp"
#include "shmio/rpc_methods.hpp"
#include "shmio/rpc_options.hpp"

namespace shmio {

namespace detail {
class rpc_server_impl;
}

class rpc_server {
 public:
  using executor_type = asio::any_io_executor;

  /// Creates the service `name` and starts accepting. `methods` is one handler or a table of
  /// named ones (rpc_methods.hpp); `options` are every connection's (see rpc_acceptor). Throws
  /// shmio::error (errc::already_exists if a live service has the name).
  rpc_server(const executor_type& ex, create_only_t, std::string_view name, rpc_methods methods,
             rpc_options options = rpc_connection_options());
  /// The error_code form: on failure `ec` is set and the server is closed.
  rpc_server(const executor_type& ex, create_only_t, std::string_view name, rpc_methods methods,
             rpc_options options, std::error_code& ec);
  /// The same, given an execution context (an io_context) in place of an executor.
  template <detail::execution_context_ref Context>
  rpc_server(Context& ctx, create_only_t, std::string_view name, rpc_methods methods,
             rpc_options options = rpc_connection_options())
      : rpc_server(executor_type(ctx.get_executor()), create_only, name, std::move(methods),
                   std::move(options)) {}
  template <detail::execution_context_ref Context>
  rpc_server(Context& ctx, create_only_t, std::string_view name, rpc_methods methods,
             rpc_options options, std::error_code& ec)
      : rpc_server(executor_type(ctx.get_executor()), create_only, name, std::move(methods),
                   std::move(options), ec) {}
  /// The moved-from server is closed and keeps a copy of the executor.
  rpc_server(rpc_server&&) noexcept;
  rpc_server& operator=(rpc_server&&) noexcept;
  /// Closes the server (see close()).
  ~rpc_server();

  executor_type get_executor() const noexcept { return ex_; }
  bool is_open() const noexcept { return impl_ != nullptr; }
  /// Kept after close().
  const std::string& name() const noexcept { return name_; }
  /// Clients connected right now.
  std::size_t connection_count() const noexcept;
  /// Kept after close().
  rpc_acceptor_statistics statistics() const noexcept;

  /// Clear while the server takes new clients. Set if accepting stopped on its own:
  /// errc::corrupted when a process damaged the service's connect ring. The server then takes
  /// no new clients (they get errc::not_found, as from a closed service) and goes on serving
  /// those connected; create it again to take new ones. Kept after close().
  std::error_code accept_error() const noexcept;

  /// Stops accepting and closes every connection: their clients' calls fail with
  /// errc::peer_gone, the handlers running for them are cancelled.
  void close() noexcept;

 private:
  executor_type ex_;
  std::string name_;
  std::shared_ptr<detail::rpc_server_impl> impl_;
  rpc_acceptor_statistics last_statistics_;
  std::error_code last_accept_error_;
};

}  // namespace shmio
