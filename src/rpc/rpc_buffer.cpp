#include "shmio/rpc_buffer.hpp"

#include "rpc_limits.hpp"

namespace shmio {

namespace {

using detail::rpc_channel;
using detail::rpc_service;

// What the exception says was attempted: with the error's reason where the code alone is vague.
const char* create_what(std::error_code ec) {
  if (ec == errc::invalid_argument)
    return "create rpc channel (options out of range: node_count 2 to 2^32 - 1, node_size over "
           "40 bytes, the rings together under 64 TiB, max_message_size below 4 GiB)";
  return "create rpc channel";
}

const char* open_what(std::error_code ec) {
  if (ec == errc::busy) return "open rpc channel (it already has an opener)";
  if (ec == errc::incompatible)
    return "open rpc channel (the segment is not an rpc channel, or of another layout version)";
  return "open rpc channel";
}

std::shared_ptr<rpc_channel> create_or_throw(const asio::any_io_executor& ex, std::string_view name,
                                             rpc_service service, const rpc_options& options) {
  std::error_code ec;
  auto ch = rpc_channel::create(ex, name, std::move(service), options, ec);
  if (ec && detail::limits_problem(options))
    detail::throw_if(ec, detail::with_limits_problem("create rpc channel", options), name);
  detail::throw_if(ec, create_what(ec), name);
  return ch;
}

std::shared_ptr<rpc_channel> open_or_throw(const asio::any_io_executor& ex, std::string_view name,
                                           rpc_service service, wait_strategy strategy) {
  std::error_code ec;
  auto ch = rpc_channel::open(ex, name, std::move(service), strategy, ec);
  detail::throw_if(ec, open_what(ec), name);
  return ch;
}

}  // namespace

rpc_error::rpc_error(std::error_code ec, std::string_view channel, std::string remote_what)
    : error(ec, "call", channel), remote_what_(std::move(remote_what)) {
  what_ = error::what();
  if (!remote_what_.empty()) what_ += " (" + remote_what_ + ")";
}

rpc_buffer::rpc_buffer(const executor_type& ex, create_only_t, std::string_view name,
                       rpc_methods methods, rpc_options options, std::error_code& ec)
    : ex_(ex), channel_(rpc_channel::create(ex, name, rpc_service::of(methods), options, ec)) {}

rpc_buffer::rpc_buffer(const executor_type& ex, open_only_t, std::string_view name,
                       rpc_methods methods, wait_strategy strategy, std::error_code& ec)
    : ex_(ex), channel_(rpc_channel::open(ex, name, rpc_service::of(methods), strategy, ec)) {}

rpc_buffer::rpc_buffer(const executor_type& ex, create_only_t, std::string_view name,
                       rpc_methods methods, rpc_options options)
    : ex_(ex), channel_(create_or_throw(ex, name, rpc_service::of(methods), options)) {}

rpc_buffer::rpc_buffer(const executor_type& ex, open_only_t, std::string_view name,
                       rpc_methods methods, wait_strategy strategy)
    : ex_(ex), channel_(open_or_throw(ex, name, rpc_service::of(methods), strategy)) {}

rpc_buffer::rpc_buffer(const executor_type& ex, rpc_methods methods, wait_strategy strategy)
    : ex_(ex), methods_(std::move(methods)), strategy_(strategy) {}

detail::rpc_service rpc_buffer::client_service() const {
  return rpc_service::of(methods_);
}

rpc_buffer::rpc_buffer(const executor_type& ex, std::shared_ptr<rpc_channel> channel)
    : ex_(ex), channel_(std::move(channel)) {}

// As an Asio I/O object's: the moved-from end keeps a copy of the executor, so that its later
// calls still complete through it (with operation_aborted), as a closed end's do.
rpc_buffer::rpc_buffer(rpc_buffer&& other) noexcept
    : ex_(other.ex_),
      channel_(std::move(other.channel_)),
      methods_(std::move(other.methods_)),
      strategy_(other.strategy_),
      limits_(other.limits_),
      closed_name_(std::move(other.closed_name_)),
      closed_statistics_(other.closed_statistics_) {}

rpc_buffer& rpc_buffer::operator=(rpc_buffer&& other) noexcept {
  if (this != &other) {
    close();
    ex_ = other.ex_;
    channel_ = std::move(other.channel_);
    methods_ = std::move(other.methods_);
    closed_name_ = std::move(other.closed_name_);
    closed_statistics_ = other.closed_statistics_;
    strategy_ = other.strategy_;
    limits_ = other.limits_;
  }
  return *this;
}

void rpc_buffer::set_limits(const rpc_options& limits) {
  std::error_code ec;
  set_limits(limits, ec);
  detail::throw_if(ec, detail::with_limits_problem("set rpc limits", limits), name());
}

void rpc_buffer::set_limits(const rpc_options& limits, std::error_code& ec) {
  ec.clear();
  if (detail::limits_problem(limits)) {
    ec = errc::invalid_argument;  // nothing changes
    return;
  }
  limits_ = limits;
  if (channel_) channel_->apply_limits(limits);
}

void rpc_buffer::connect(std::string_view service, std::chrono::milliseconds timeout) {
  std::error_code ec;
  connect(service, timeout, ec);
  const char* what = "connect to rpc service";
  if (ec == errc::not_found) what = "connect to rpc service (none of that name is running)";
  if (ec == errc::timed_out) what = "connect to rpc service (it did not accept in time)";
  if (ec == errc::peer_gone) what = "connect to rpc service (it closed or died meanwhile)";
  detail::throw_if(ec, what, service);
}

void rpc_buffer::connect(std::string_view service, std::chrono::milliseconds timeout,
                         std::error_code& ec) {
  close();
  ec.clear();
  auto ch = rpc_channel::connect(ex_, service, client_service(), strategy_, ec);
  if (!ch) return;
  channel_ = std::move(ch);
  if (limits_) channel_->apply_limits(*limits_);
  ec = channel_->wait_connected(timeout);
}

rpc_buffer::~rpc_buffer() {
  close();
}

void rpc_buffer::close() noexcept {
  if (auto ch = std::exchange(channel_, nullptr)) {
    detail::keep_name(ch->name(), closed_name_);
    closed_statistics_ = ch->statistics();
    ch->close();
  }
}

rpc_buffer::executor_type rpc_buffer::get_executor() const noexcept {
  return ex_;
}

bool rpc_buffer::is_owner() const noexcept {
  return channel_ && channel_->is_owner();
}

const std::string& rpc_buffer::name() const noexcept {
  return channel_ ? channel_->name() : closed_name_;
}

rpc_statistics rpc_buffer::statistics() const {
  return channel_ ? channel_->statistics() : closed_statistics_;
}

}  // namespace shmio
