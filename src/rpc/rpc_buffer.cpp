#include "shmio/rpc_buffer.hpp"

namespace shmio {

namespace {

using detail::rpc_channel;
using detail::rpc_service;

std::shared_ptr<rpc_channel> create_or_throw(const asio::any_io_executor& ex, std::string_view name,
                                             rpc_service service, const rpc_options& options) {
  std::error_code ec;
  auto ch = rpc_channel::create(ex, name, std::move(service), options, ec);
  detail::throw_if(ec, "create rpc channel", name);
  return ch;
}

std::shared_ptr<rpc_channel> open_or_throw(const asio::any_io_executor& ex, std::string_view name,
                                           rpc_service service, wait_strategy strategy) {
  std::error_code ec;
  auto ch = rpc_channel::open(ex, name, std::move(service), strategy, ec);
  detail::throw_if(ec, "open rpc channel", name);
  return ch;
}

}  // namespace

rpc_buffer::rpc_buffer(const executor_type& ex, create_only_t, std::string_view name,
                       handler_type handler, rpc_options options, std::error_code& ec)
    : ex_(ex), channel_(rpc_channel::create(ex, name, rpc_service::of(std::move(handler)), options, ec)) {}

rpc_buffer::rpc_buffer(const executor_type& ex, open_only_t, std::string_view name,
                       handler_type handler, wait_strategy strategy, std::error_code& ec)
    : ex_(ex), channel_(rpc_channel::open(ex, name, rpc_service::of(std::move(handler)), strategy, ec)) {}

rpc_buffer::rpc_buffer(const executor_type& ex, create_only_t, std::string_view name,
                       handler_type handler, rpc_options options)
    : ex_(ex), channel_(create_or_throw(ex, name, rpc_service::of(std::move(handler)), options)) {}

// A plain handler is kept as such: the channel runs it inline as its request arrives.
rpc_buffer::rpc_buffer(const executor_type& ex, create_only_t, std::string_view name,
                       sync_handler_type handler, rpc_options options)
    : ex_(ex), channel_(create_or_throw(ex, name, rpc_service::of(std::move(handler)), options)) {}

rpc_buffer::rpc_buffer(const executor_type& ex, open_only_t, std::string_view name,
                       handler_type handler, wait_strategy strategy)
    : ex_(ex), channel_(open_or_throw(ex, name, rpc_service::of(std::move(handler)), strategy)) {}

rpc_buffer::rpc_buffer(const executor_type& ex, open_only_t, std::string_view name,
                       sync_handler_type handler, wait_strategy strategy)
    : ex_(ex), channel_(open_or_throw(ex, name, rpc_service::of(std::move(handler)), strategy)) {}

rpc_buffer::rpc_buffer(const executor_type& ex, handler_type handler, wait_strategy strategy)
    : ex_(ex), handler_(std::move(handler)), strategy_(strategy) {}

rpc_buffer::rpc_buffer(const executor_type& ex, sync_handler_type handler, wait_strategy strategy)
    : ex_(ex), sync_handler_(std::move(handler)), strategy_(strategy) {}

rpc_buffer::rpc_buffer(const executor_type& ex, rpc_methods methods, wait_strategy strategy)
    : ex_(ex), methods_(std::move(methods)), strategy_(strategy) {}

rpc_buffer::rpc_buffer(const executor_type& ex, create_only_t, std::string_view name,
                       rpc_methods methods, rpc_options options)
    : ex_(ex), channel_(create_or_throw(ex, name, rpc_service::of(methods), options)) {}

rpc_buffer::rpc_buffer(const executor_type& ex, open_only_t, std::string_view name,
                       rpc_methods methods, wait_strategy strategy)
    : ex_(ex), channel_(open_or_throw(ex, name, rpc_service::of(methods), strategy)) {}

detail::rpc_service rpc_buffer::client_service() const {
  if (handler_) return rpc_service::of(handler_);
  if (sync_handler_) return rpc_service::of(sync_handler_);
  return rpc_service::of(methods_);
}

rpc_buffer::rpc_buffer(const executor_type& ex, std::shared_ptr<rpc_channel> channel)
    : ex_(ex), channel_(std::move(channel)) {}

rpc_buffer::rpc_buffer(rpc_buffer&&) noexcept = default;

rpc_buffer& rpc_buffer::operator=(rpc_buffer&& other) noexcept {
  if (this != &other) {
    close();
    ex_ = other.ex_;
    channel_ = std::move(other.channel_);
    handler_ = std::move(other.handler_);
    sync_handler_ = std::move(other.sync_handler_);
    methods_ = std::move(other.methods_);
    strategy_ = other.strategy_;
  }
  return *this;
}

void rpc_buffer::connect(std::string_view service, std::chrono::milliseconds timeout) {
  std::error_code ec;
  connect(service, timeout, ec);
  detail::throw_if(ec, "connect to rpc service", service);
}

void rpc_buffer::connect(std::string_view service, std::chrono::milliseconds timeout,
                         std::error_code& ec) {
  close();
  ec.clear();
  auto ch = rpc_channel::connect(ex_, service, client_service(), strategy_, ec);
  if (!ch) return;
  channel_ = std::move(ch);
  ec = channel_->wait_connected(timeout);
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
