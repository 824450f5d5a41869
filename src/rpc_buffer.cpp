#include "shmio/rpc_buffer.hpp"

namespace shmio {
namespace {

// A plain function as a handler: the coroutine just returns its result.
rpc_buffer::handler_type lift(rpc_buffer::sync_handler_type f) {
  if (!f) return {};
  return [f = std::move(f)](std::uint64_t id, std::span<const std::byte> payload)
             -> asio::awaitable<std::vector<std::byte>> { co_return f(id, payload); };
}

}  // namespace

rpc_buffer::rpc_buffer(const executor_type& ex, create_only_t, std::string_view name,
                       handler_type handler, rpc_options options, std::error_code& ec)
    : ex_(ex) {
  channel_ = detail::rpc_channel::create(ex, name, std::move(handler), options, ec);
}

rpc_buffer::rpc_buffer(const executor_type& ex, open_only_t, std::string_view name,
                       handler_type handler, wait_strategy strategy, std::error_code& ec)
    : ex_(ex) {
  channel_ = detail::rpc_channel::open(ex, name, std::move(handler), strategy, ec);
}

rpc_buffer::rpc_buffer(const executor_type& ex, create_only_t tag, std::string_view name,
                       handler_type handler, rpc_options options)
    : ex_(ex) {
  std::error_code ec;
  channel_ = detail::rpc_channel::create(ex, name, std::move(handler), options, ec);
  detail::throw_if(ec, "create rpc channel", name);
  (void)tag;
}

rpc_buffer::rpc_buffer(const executor_type& ex, create_only_t tag, std::string_view name,
                       sync_handler_type handler, rpc_options options)
    : rpc_buffer(ex, tag, name, lift(std::move(handler)), options) {}

rpc_buffer::rpc_buffer(const executor_type& ex, open_only_t, std::string_view name,
                       handler_type handler, wait_strategy strategy)
    : ex_(ex) {
  std::error_code ec;
  channel_ = detail::rpc_channel::open(ex, name, std::move(handler), strategy, ec);
  detail::throw_if(ec, "open rpc channel", name);
}

rpc_buffer::rpc_buffer(const executor_type& ex, open_only_t tag, std::string_view name,
                       sync_handler_type handler, wait_strategy strategy)
    : rpc_buffer(ex, tag, name, lift(std::move(handler)), strategy) {}

rpc_buffer::rpc_buffer(rpc_buffer&&) noexcept = default;

rpc_buffer& rpc_buffer::operator=(rpc_buffer&& other) noexcept {
  if (this != &other) {
    close();
    ex_ = other.ex_;
    channel_ = std::move(other.channel_);
  }
  return *this;
}

rpc_buffer::~rpc_buffer() {
  close();
}

void rpc_buffer::close() noexcept {
  if (auto ch = std::exchange(channel_, nullptr)) ch->close();
}

rpc_buffer::executor_type rpc_buffer::get_executor() const noexcept {
  return ex_;
}

bool rpc_buffer::is_owner() const noexcept {
  return channel_ && channel_->is_owner();
}

const std::string& rpc_buffer::name() const noexcept {
  static const std::string none;
  return channel_ ? channel_->name() : none;
}

rpc_statistics rpc_buffer::statistics() const {
  return channel_ ? channel_->statistics() : rpc_statistics{};
}

}  // namespace shmio
