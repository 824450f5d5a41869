#include "shmio/rpc_server.hpp"

#include <asio/bind_executor.hpp>
#include <asio/strand.hpp>
#include <atomic>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "rpc_limits.hpp"
#include "shmio/rpc_acceptor.hpp"
#include "shmio/rpc_buffer.hpp"

namespace shmio {
namespace detail {

// The accept loop and the table of connections. Completions run on a strand of the server's;
// close() may come from any thread, so the table is under a mutex (held for no user code:
// initiations never complete inline, and closing an end runs none).
class rpc_server_impl : public std::enable_shared_from_this<rpc_server_impl> {
 public:
  rpc_server_impl(const asio::any_io_executor& ex, rpc_acceptor acceptor, rpc_methods methods)
      : strand_(asio::make_strand(ex)),
        acceptor_(std::move(acceptor)),
        methods_(std::move(methods)) {}

  void start() {
    std::lock_guard lock(mutex_);
    accept_next();
  }

  std::size_t connection_count() const {
    std::lock_guard lock(mutex_);
    return connections_.size();
  }
  rpc_acceptor_statistics statistics() const {
    std::lock_guard lock(mutex_);
    return acceptor_.statistics();
  }
  std::error_code accept_error() const {
    std::lock_guard lock(mutex_);
    return accept_error_;
  }

  void close() {
    std::unordered_map<std::uint64_t, rpc_buffer> connections;
    {
      std::lock_guard lock(mutex_);
      closed_ = true;
      acceptor_.close();
      connections.swap(connections_);
    }
    connections.clear();  // closes each end
  }

 private:
  void accept_next() {  // under the mutex
    if (closed_) return;
    auto on_accept = [self = shared_from_this()](std::error_code ec, rpc_buffer connection) {
      std::lock_guard lock(self->mutex_);
      if (self->closed_) return;
      if (ec) {
        // Only a damaged connect ring fails an accept, and it would fail again at once: stop
        // taking clients, say why, and look like a closed service to new ones (not_found at
        // once, rather than a connect that times out). The connected go on.
        self->accept_error_ = ec;
        self->acceptor_.close();
        return;
      }
      self->add(std::move(connection));
      self->accept_next();
    };
    acceptor_.async_accept(methods_, asio::bind_executor(strand_, std::move(on_accept)));
  }

  void add(rpc_buffer connection) {  // under the mutex
    const std::uint64_t id = next_id_++;
    connection.async_wait_closed(
        asio::bind_executor(strand_, [self = shared_from_this(), id](std::error_code) {
          // Gone, failed or closed: its end goes too, with what it held (closed outside the
          // lock, as it is destroyed).
          std::optional<rpc_buffer> gone;
          std::lock_guard lock(self->mutex_);
          if (auto it = self->connections_.find(id); it != self->connections_.end()) {
            gone.emplace(std::move(it->second));
            self->connections_.erase(it);
          }
        }));
    connections_.emplace(id, std::move(connection));
  }

  asio::strand<asio::any_io_executor> strand_;
  mutable std::mutex mutex_;
  rpc_acceptor acceptor_;
  rpc_methods methods_;  // shared by every connection
  std::unordered_map<std::uint64_t, rpc_buffer> connections_;
  std::uint64_t next_id_ = 0;
  std::error_code accept_error_;
  bool closed_ = false;
};

}  // namespace detail

namespace {

std::shared_ptr<detail::rpc_server_impl> make_server(const asio::any_io_executor& ex,
                                                     std::string_view name, rpc_methods methods,
                                                     const rpc_options& options,
                                                     std::error_code& ec) {
  rpc_acceptor acceptor(ex, create_only, name, options, ec);
  if (ec) return nullptr;
  auto im = std::make_shared<detail::rpc_server_impl>(ex, std::move(acceptor), std::move(methods));
  im->start();
  return im;
}

std::shared_ptr<detail::rpc_server_impl> make_or_throw(const asio::any_io_executor& ex,
                                                       std::string_view name, rpc_methods methods,
                                                       const rpc_options& options) {
  std::error_code ec;
  auto im = make_server(ex, name, std::move(methods), options, ec);
  detail::throw_if(ec, detail::with_limits_problem("create rpc service", options), name);
  return im;
}

}  // namespace

rpc_server::rpc_server(const executor_type& ex, create_only_t, std::string_view name,
                       rpc_methods methods, rpc_options options)
    : ex_(ex), name_(name), impl_(make_or_throw(ex, name, std::move(methods), options)) {}

rpc_server::rpc_server(const executor_type& ex, create_only_t, std::string_view name,
                       rpc_methods methods, rpc_options options, std::error_code& ec)
    : ex_(ex), name_(name), impl_(make_server(ex, name, std::move(methods), options, ec)) {}

// The moved-from server keeps a copy of the executor, as an Asio I/O object does.
rpc_server::rpc_server(rpc_server&& other) noexcept
    : ex_(other.ex_),
      name_(std::move(other.name_)),
      impl_(std::move(other.impl_)),
      last_statistics_(other.last_statistics_),
      last_accept_error_(other.last_accept_error_) {}

rpc_server& rpc_server::operator=(rpc_server&& other) noexcept {
  if (this != &other) {
    close();
    ex_ = other.ex_;
    name_ = std::move(other.name_);
    impl_ = std::move(other.impl_);
    last_statistics_ = other.last_statistics_;
    last_accept_error_ = other.last_accept_error_;
  }
  return *this;
}

rpc_server::~rpc_server() {
  close();
}

std::size_t rpc_server::connection_count() const noexcept {
  return impl_ ? impl_->connection_count() : 0;
}

rpc_acceptor_statistics rpc_server::statistics() const noexcept {
  return impl_ ? impl_->statistics() : last_statistics_;
}

std::error_code rpc_server::accept_error() const noexcept {
  return impl_ ? impl_->accept_error() : last_accept_error_;
}

void rpc_server::close() noexcept {
  if (auto im = std::exchange(impl_, nullptr)) {
    last_statistics_ = im->statistics();
    last_accept_error_ = im->accept_error();
    im->close();
  }
}

}  // namespace shmio
