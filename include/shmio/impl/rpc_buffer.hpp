#pragma once
// The template part of rpc_buffer; included by shmio/rpc_buffer.hpp.

#include <asio/associated_cancellation_slot.hpp>
#include <asio/associated_executor.hpp>
#include <asio/experimental/append.hpp>
#include <asio/post.hpp>
#include <asio/use_awaitable.hpp>
#include <exception>
#include <string>
#include <type_traits>

#include "shmio/detail/rpc_channel.hpp"
#include "shmio/detail/rpc_pending.hpp"

namespace shmio {
namespace detail {

/// A stream's opening: completes with the stream once its request is sent.
template <class Handler>
class rpc_stream_open final : public pending_call {
 public:
  rpc_stream_open(Handler h, const asio::any_io_executor& ex, std::shared_ptr<rpc_channel> ch,
                  std::shared_ptr<stream_state> st)
      : handler_(std::move(h), ex), ex_(ex), channel_(std::move(ch)), state_(std::move(st)) {}
  void complete(std::error_code ec, std::vector<std::byte>, bool may_dispatch) override {
    rpc_stream stream = rpc_stream_access::make_stream(ex_, ec ? nullptr : std::move(channel_),
                                                       ec ? nullptr : std::move(state_));
    channel_.reset();  // this op lives in the channel's table: no cycle once it completed
    state_.reset();
    handler_.deliver(may_dispatch, ec, std::move(stream));
  }

 private:
  tracked_handler<Handler> handler_;
  asio::any_io_executor ex_;
  std::shared_ptr<rpc_channel> channel_;
  std::shared_ptr<stream_state> state_;
};

struct rpc_connect_cancel {
  std::weak_ptr<rpc_channel> channel;
  void operator()(asio::cancellation_type type) const {
    if (type == asio::cancellation_type::none) return;
    if (auto c = channel.lock()) c->cancel_connect();
  }
};

/// Makes connected ends (for rpc_acceptor).
struct rpc_buffer_access {
  static rpc_buffer make(const asio::any_io_executor& ex, std::shared_ptr<rpc_channel> channel) {
    return rpc_buffer(ex, std::move(channel));
  }
};

struct rpc_cancel {
  std::weak_ptr<rpc_channel> channel;
  std::uint64_t id;
  void operator()(asio::cancellation_type type) const {
    if (type == asio::cancellation_type::none) return;
    if (auto c = channel.lock()) c->cancel_call(id, type);
  }
};

}  // namespace detail

namespace detail {

/// A caller's completion handler of the signature `void(std::exception_ptr, reply)`: what
/// use_awaitable gets, so that a failure throws rpc_error with the other end's text (the
/// error_code form would throw a std::system_error without it).
template <class Handler>
class rpc_throwing_call final : public pending_call {
 public:
  rpc_throwing_call(Handler h, const asio::any_io_executor& ex, const rpc_channel* ch)
      : handler_(std::move(h), ex), channel_(ch) {}
  void complete(std::error_code ec, std::vector<std::byte> reply, bool may_dispatch) override {
    if (!ec) return handler_.deliver(may_dispatch, std::exception_ptr(), std::move(reply));
    // The channel completes its calls while it lives: its name is still there.
    auto e = std::make_exception_ptr(
        rpc_error(ec, channel_->name(), std::string(as_string_view(reply))));
    handler_.deliver(may_dispatch, std::move(e), std::vector<std::byte>());
  }

 private:
  tracked_handler<Handler> handler_;
  const rpc_channel* channel_;
};

/// Starts a call (see rpc_buffer::async_request). `Throwing`: the handler takes an
/// exception_ptr, not an error_code (rpc_throwing_call).
template <bool Throwing>
struct rpc_request_initiation {
  template <class Handler>
  void operator()(Handler handler, const std::shared_ptr<rpc_channel>& ch,
                  const asio::any_io_executor& ex, const std::string& closed_name,
                  std::vector<std::byte> data, std::uint16_t packet_flags,
                  std::chrono::milliseconds limit) const {
    // Closed, or a method name out of range: complete on the object's executor, as any
    // other completion (never inside this function).
    if (!ch || (packet_flags & layout::packet_flag_method && data.empty())) {
      auto hex = asio::get_associated_executor(handler, ex);
      const std::error_code ec = ch ? std::error_code(errc::invalid_argument)
                                    : std::error_code(asio::error::operation_aborted);
      if constexpr (Throwing)
        return asio::post(hex, asio::experimental::append(
                                   std::move(handler),
                                   std::make_exception_ptr(rpc_error(
                                       ec, ch ? std::string_view(ch->name()) : closed_name, {})),
                                   std::vector<std::byte>{}));
      else
        return asio::post(
            hex, asio::experimental::append(std::move(handler), ec, std::vector<std::byte>{}));
    }
    const std::uint64_t id = ch->next_id();
    auto slot = asio::get_associated_cancellation_slot(handler);
    if (slot.is_connected()) slot.template emplace<rpc_cancel>(rpc_cancel{ch, id});
    std::unique_ptr<pending_call> call;
    if constexpr (Throwing)
      call = std::make_unique<rpc_throwing_call<Handler>>(std::move(handler), ch->get_executor(),
                                                          ch.get());
    else
      call = std::make_unique<rpc_call<Handler>>(std::move(handler), ch->get_executor());
    ch->start_call(id, std::move(call), std::move(data), limit, packet_flags);
  }
};

template <class T>
struct use_awaitable_token : std::false_type {};
template <class Executor>
struct use_awaitable_token<asio::use_awaitable_t<Executor>> : std::true_type {};

}  // namespace detail

template <class CompletionToken>
auto rpc_buffer::start_request(std::vector<std::byte> message, std::uint16_t flags,
                               std::chrono::milliseconds timeout, CompletionToken&& token) {
  // A closed end's name, for the error it completes with (copied only then).
  std::string closed = channel_ ? std::string() : closed_name_;
  if constexpr (detail::use_awaitable_token<std::decay_t<CompletionToken>>::value)
    return asio::async_initiate<CompletionToken, void(std::exception_ptr, std::vector<std::byte>)>(
        detail::rpc_request_initiation<true>{}, token, channel_, ex_, std::move(closed),
        std::move(message), flags, timeout);
  else
    return asio::async_initiate<CompletionToken, void(std::error_code, std::vector<std::byte>)>(
        detail::rpc_request_initiation<false>{}, token, channel_, ex_, std::move(closed),
        std::move(message), flags, timeout);
}

template <class CompletionToken>
auto rpc_buffer::async_request(asio::const_buffer payload, std::chrono::milliseconds timeout,
                               CompletionToken&& token) {
  // Copied now, not when the operation starts: with a lazy token (deferred, an awaitable kept
  // for later) the caller's buffer may be gone by then.
  const auto* p = static_cast<const std::byte*>(payload.data());
  return start_request(std::vector<std::byte>(p, p + payload.size()), 0, timeout,
                       std::forward<CompletionToken>(token));
}

template <class CompletionToken>
auto rpc_buffer::async_request(std::string_view method, asio::const_buffer payload,
                               std::chrono::milliseconds timeout, CompletionToken&& token) {
  // An empty message with the method flag stands for a name out of range (see start_request).
  std::vector<std::byte> message;
  if (!method.empty() && method.size() <= rpc_methods::max_name)
    message = detail::encode_named(method,
                                   {static_cast<const std::byte*>(payload.data()), payload.size()});
  return start_request(std::move(message), detail::layout::packet_flag_method, timeout,
                       std::forward<CompletionToken>(token));
}

template <class CompletionToken>
auto rpc_buffer::async_request(std::string_view method, asio::const_buffer payload,
                               CompletionToken&& token) {
  return async_request(method, payload,
                       channel_ ? channel_->default_timeout() : std::chrono::seconds(30),
                       std::forward<CompletionToken>(token));
}

template <class CompletionToken>
auto rpc_buffer::start_stream(bool named, std::string_view method, asio::const_buffer payload,
                              CompletionToken&& token) {
  // Encoded now (the payload is copied before this returns: see async_request).
  const bool valid = !named || (!method.empty() && method.size() <= rpc_methods::max_name);
  std::vector<std::byte> message;
  if (channel_ && valid)
    message =
        detail::encode_request(channel_->stream_window(), named ? method : std::string_view(),
                               {static_cast<const std::byte*>(payload.data()), payload.size()});
  const std::uint16_t flags = static_cast<std::uint16_t>(
      detail::layout::packet_flag_stream | (named ? detail::layout::packet_flag_method : 0));
  return asio::async_initiate<CompletionToken, void(std::error_code, rpc_stream)>(
      [](auto handler, const std::shared_ptr<detail::rpc_channel>& ch, const executor_type& ex,
         std::vector<std::byte> data, std::uint16_t packet_flags, bool name_valid) {
        using handler_t = decltype(handler);
        if (!ch || !name_valid) {  // completes on the handler's executor, never in here
          auto hex = asio::get_associated_executor(handler, ex);
          const std::error_code ec = ch ? std::error_code(errc::invalid_argument)
                                        : std::error_code(asio::error::operation_aborted);
          return asio::post(hex, asio::experimental::append(
                                     std::move(handler), ec,
                                     detail::rpc_stream_access::make_stream(ex, nullptr, nullptr)));
        }
        const std::uint64_t id = ch->next_id();
        auto st = std::make_shared<detail::stream_state>();
        st->id = id;
        st->window = ch->stream_window();
        st->allowed = st->window;
        auto slot = asio::get_associated_cancellation_slot(handler);
        if (slot.is_connected())
          slot.template emplace<detail::rpc_cancel>(detail::rpc_cancel{ch, id});
        auto op =
            std::make_unique<detail::rpc_stream_open<handler_t>>(std::move(handler), ex, ch, st);
        ch->start_call(id, std::move(op), std::move(data), std::chrono::milliseconds(-1),
                       packet_flags, std::move(st));
      },
      token, channel_, ex_, std::move(message), flags, valid);
}

template <class CompletionToken>
auto rpc_buffer::async_request_stream(std::string_view method, asio::const_buffer payload,
                                      CompletionToken&& token) {
  return start_stream(true, method, payload, std::forward<CompletionToken>(token));
}

template <class CompletionToken>
auto rpc_buffer::async_request_stream(asio::const_buffer payload, CompletionToken&& token) {
  return start_stream(false, {}, payload, std::forward<CompletionToken>(token));
}

template <class CompletionToken>
auto rpc_buffer::async_connect(std::string_view service, std::chrono::milliseconds timeout,
                               CompletionToken&& token) {
  return asio::async_initiate<CompletionToken, void(std::error_code)>(
      [this](auto handler, const std::string& name, std::chrono::milliseconds limit) {
        using handler_t = decltype(handler);
        close();  // a connected or connecting end gives way
        auto slot = asio::get_associated_cancellation_slot(handler);
        auto op = std::make_unique<detail::rpc_signal<handler_t>>(std::move(handler), ex_);
        std::error_code ec;
        channel_ = detail::rpc_channel::connect(ex_, name, client_service(), strategy_, ec);
        if (!channel_) return op->complete(ec, false);  // posted: never inside this function
        if (limits_) channel_->apply_limits(*limits_);
        if (slot.is_connected())
          slot.template emplace<detail::rpc_connect_cancel>(detail::rpc_connect_cancel{channel_});
        channel_->async_connected(std::move(op), limit);
      },
      token, std::string(service), timeout);
}

template <class CompletionToken>
auto rpc_buffer::async_wait_closed(CompletionToken&& token) {
  return asio::async_initiate<CompletionToken, void(std::error_code)>(
      [](auto handler, const std::shared_ptr<detail::rpc_channel>& ch, const executor_type& ex) {
        using handler_t = decltype(handler);
        auto op = std::make_unique<detail::rpc_signal<handler_t>>(std::move(handler), ex);
        if (!ch) return op->complete(asio::error::operation_aborted, false);
        ch->async_wait_closed(std::move(op));
      },
      token, channel_, ex_);
}

template <class CompletionToken>
auto rpc_buffer::async_request(asio::const_buffer payload, CompletionToken&& token) {
  return async_request(payload, channel_ ? channel_->default_timeout() : std::chrono::seconds(30),
                       std::forward<CompletionToken>(token));
}

}  // namespace shmio
