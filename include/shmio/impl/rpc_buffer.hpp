#pragma once
// The template part of rpc_buffer; included by shmio/rpc_buffer.hpp.

#include <algorithm>
#include <asio/associated_cancellation_slot.hpp>
#include <asio/use_awaitable.hpp>
#include <cstring>
#include <exception>
#include <string>
#include <type_traits>

#include "shmio/detail/rpc_channel.hpp"
#include "shmio/detail/rpc_pending.hpp"

namespace shmio {
namespace detail {

/// A stream's opening: completes with the stream once its request is sent.
template <class Handler>
class rpc_stream_open final : public pending_call,
                              public pending_handler<rpc_stream_open<Handler>, Handler> {
 public:
  rpc_stream_open(typename rpc_stream_open::memory::alloc_type alloc, Handler h,
                  const asio::any_io_executor& ex, std::shared_ptr<rpc_channel> ch,
                  std::shared_ptr<stream_state> st)
      : pending_handler<rpc_stream_open, Handler>(std::move(alloc), std::move(h), ex),
        ex_(ex),
        channel_(std::move(ch)),
        state_(std::move(st)) {}
  void destroy() noexcept override { this->free(); }
  void complete(std::error_code ec, reply_bytes, bool may_dispatch) override {
    rpc_stream stream = rpc_stream_access::make_stream(ex_, ec ? nullptr : std::move(channel_),
                                                       ec ? nullptr : std::move(state_));
    this->finish(may_dispatch, ec, std::move(stream));
  }

 private:
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

// Every kind of cancellation is honoured: waiting for a close has no side effect to undo.
struct rpc_wait_closed_cancel {
  std::weak_ptr<rpc_channel> channel;
  std::uint64_t id;
  void operator()(asio::cancellation_type type) const {
    if (type == asio::cancellation_type::none) return;
    if (auto c = channel.lock()) c->cancel_wait_closed(id);
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

/// A call made in place: its reply goes into the caller's buffer, and its handler gets the
/// reply's size. `Throwing`: the handler takes an exception_ptr (see rpc_throwing_call).
template <class Handler, bool Throwing>
class rpc_call_into final : public pending_call,
                            public pending_handler<rpc_call_into<Handler, Throwing>, Handler> {
 public:
  rpc_call_into(typename rpc_call_into::memory::alloc_type alloc, Handler h,
                const asio::any_io_executor& ex, asio::mutable_buffer target, const rpc_channel* ch)
      : pending_handler<rpc_call_into, Handler>(std::move(alloc), std::move(h), ex),
        target_(target),
        channel_(ch) {}
  void destroy() noexcept override { this->free(); }
  void complete(std::error_code ec, reply_bytes reply, bool may_dispatch) override {
    // The reply, or an error's text, as far as it fits; the size is the whole reply's, so that a
    // caller whose buffer was too small learns how large it must be.
    const std::size_t n = std::min(reply.view.size(), target_.size());
    if (n) std::memcpy(target_.data(), reply.view.data(), n);
    const bool overflow = !ec && reply.view.size() > target_.size();
    if (overflow) ec = errc::message_too_large;
    const std::size_t size = overflow || !ec ? reply.view.size() : n;
    if constexpr (Throwing) {
      if (!ec) return this->finish(may_dispatch, std::exception_ptr(), size);
      std::string text = overflow ? "reply of " + std::to_string(size) +
                                        " bytes larger than the buffer given for it"
                                  : to_string(reply.view);
      auto e = std::make_exception_ptr(rpc_error(ec, channel_->name(), std::move(text)));
      this->finish(may_dispatch, std::move(e), size);
    } else {
      this->finish(may_dispatch, ec, size);
    }
  }

 private:
  asio::mutable_buffer target_;
  const rpc_channel* channel_;
};

/// Starts a call (see rpc_buffer::async_request). `Throwing`: the handler takes an
/// exception_ptr, not an error_code (rpc_throwing_call). `Into`: a call made in place
/// (rpc_call_into), whose reply goes into `target`.
template <bool Throwing, bool Into>
struct rpc_request_initiation {
  template <class Handler>
  void operator()(Handler handler, const std::shared_ptr<rpc_channel>& ch,
                  const asio::any_io_executor& ex, const std::string& closed_name,
                  outgoing_message request, bool valid, asio::mutable_buffer target,
                  std::chrono::milliseconds limit) const {
    using value_type = std::conditional_t<Into, std::size_t, std::vector<std::byte>>;
    // Closed, or a method name out of range: complete on the object's executor, as any
    // other completion (never inside this function).
    if (!ch || !valid) {
      const std::error_code ec = ch ? std::error_code(errc::invalid_argument)
                                    : std::error_code(asio::error::operation_aborted);
      return post_refusal<Throwing>(std::move(handler), ex, ec,
                                    ch ? std::string_view(ch->name()) : closed_name, value_type{});
    }
    const std::uint64_t id = ch->next_id();
    auto slot = asio::get_associated_cancellation_slot(handler);
    if (slot.is_connected()) slot.template emplace<rpc_cancel>(rpc_cancel{ch, id});
    pending_call_ptr call;
    if constexpr (Into)
      call = handler_memory<rpc_call_into<Handler, Throwing>, Handler>::make(
          std::move(handler), ch->get_executor(), target, ch.get());
    else if constexpr (Throwing)
      call = make_pending<rpc_throwing_call>(std::move(handler), ch->get_executor(), ch.get());
    else
      call = make_pending<rpc_call>(std::move(handler), ch->get_executor());
    ch->start_call(id, std::move(call), std::move(request), limit);
  }
};

}  // namespace detail

template <bool Into, class CompletionToken>
auto rpc_buffer::start_request(detail::outgoing_message message, bool valid,
                               asio::mutable_buffer target, std::chrono::milliseconds timeout,
                               CompletionToken&& token) {
  using value_type = std::conditional_t<Into, std::size_t, std::vector<std::byte>>;
  // A closed end's name, for the error it completes with (copied only then).
  std::string closed = channel_ ? std::string() : closed_name_;
  if constexpr (detail::use_awaitable_token<std::decay_t<CompletionToken>>::value)
    return asio::async_initiate<CompletionToken, void(std::exception_ptr, value_type)>(
        detail::rpc_request_initiation<true, Into>{}, token, channel_, ex_, std::move(closed),
        std::move(message), valid, target, timeout);
  else
    return asio::async_initiate<CompletionToken, void(std::error_code, value_type)>(
        detail::rpc_request_initiation<false, Into>{}, token, channel_, ex_, std::move(closed),
        std::move(message), valid, target, timeout);
}

template <class CompletionToken>
auto rpc_buffer::async_request(asio::const_buffer payload, std::chrono::milliseconds timeout,
                               CompletionToken&& token) {
  // Copied now, not when the operation starts: with a lazy token (deferred, an awaitable kept
  // for later) the caller's buffer may be gone by then.
  const auto* p = static_cast<const std::byte*>(payload.data());
  detail::outgoing_message m;
  m.payload.assign(p, p + payload.size());
  return start_request<false>(std::move(m), true, {}, timeout,
                              std::forward<CompletionToken>(token));
}

template <class CompletionToken>
auto rpc_buffer::async_request(std::string_view method, asio::const_buffer payload,
                               std::chrono::milliseconds timeout, CompletionToken&& token) {
  const bool valid = !method.empty() && method.size() <= rpc_methods::max_name;
  detail::outgoing_message m;
  m.flags = detail::layout::packet_flag_method;
  if (valid)
    m.payload = detail::encode_named(
        method, {static_cast<const std::byte*>(payload.data()), payload.size()});
  return start_request<false>(std::move(m), valid, {}, timeout,
                              std::forward<CompletionToken>(token));
}

template <class CompletionToken>
auto rpc_buffer::async_request(asio::const_buffer payload, asio::mutable_buffer reply,
                               std::chrono::milliseconds timeout, CompletionToken&& token) {
  // Sent from where it is: the caller keeps it until the call completes.
  detail::outgoing_message m;
  m.borrowed[0] = {static_cast<const std::byte*>(payload.data()), payload.size()};
  return start_request<true>(std::move(m), true, reply, timeout,
                             std::forward<CompletionToken>(token));
}

template <class CompletionToken>
auto rpc_buffer::async_request(asio::const_buffer payload, asio::mutable_buffer reply,
                               CompletionToken&& token) {
  return async_request(payload, reply,
                       channel_ ? channel_->default_timeout() : std::chrono::seconds(30),
                       std::forward<CompletionToken>(token));
}

template <class CompletionToken>
auto rpc_buffer::async_request(std::string_view method, asio::const_buffer payload,
                               asio::mutable_buffer reply, std::chrono::milliseconds timeout,
                               CompletionToken&& token) {
  // The name's length, then the name and the payload from where they are (see encode_named).
  const bool valid = !method.empty() && method.size() <= rpc_methods::max_name;
  detail::outgoing_message m;
  m.flags = detail::layout::packet_flag_method;
  m.head[0] = static_cast<std::byte>(method.size());
  m.head_size = 1;
  m.borrowed[0] = std::as_bytes(std::span(method.data(), method.size()));
  m.borrowed[1] = {static_cast<const std::byte*>(payload.data()), payload.size()};
  return start_request<true>(std::move(m), valid, reply, timeout,
                             std::forward<CompletionToken>(token));
}

template <class CompletionToken>
auto rpc_buffer::async_request(std::string_view method, asio::const_buffer payload,
                               asio::mutable_buffer reply, CompletionToken&& token) {
  return async_request(method, payload, reply,
                       channel_ ? channel_->default_timeout() : std::chrono::seconds(30),
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
  // Read once: the window the request announces is the one the stream keeps (set_limits may
  // change it before a lazy token launches the operation).
  const std::uint32_t window = channel_ ? channel_->stream_window() : 0;
  std::vector<std::byte> message;
  if (channel_ && valid)
    message =
        detail::encode_request(window, named ? method : std::string_view(),
                               {static_cast<const std::byte*>(payload.data()), payload.size()});
  const std::uint16_t flags = static_cast<std::uint16_t>(
      detail::layout::packet_flag_stream | (named ? detail::layout::packet_flag_method : 0));
  return asio::async_initiate<CompletionToken, void(std::error_code, rpc_stream)>(
      [](auto handler, const std::shared_ptr<detail::rpc_channel>& ch, const executor_type& ex,
         std::vector<std::byte> data, std::uint16_t packet_flags, bool name_valid,
         std::uint32_t announced) {
        if (!ch || !name_valid) {
          const std::error_code ec = ch ? std::error_code(errc::invalid_argument)
                                        : std::error_code(asio::error::operation_aborted);
          return detail::post_refusal<false>(
              std::move(handler), ex, ec, {},
              detail::rpc_stream_access::make_stream(ex, nullptr, nullptr));
        }
        const std::uint64_t id = ch->next_id();
        auto st = std::make_shared<detail::stream_state>();
        st->id = id;
        st->window = announced;
        st->allowed = st->window;
        auto slot = asio::get_associated_cancellation_slot(handler);
        if (slot.is_connected())
          slot.template emplace<detail::rpc_cancel>(detail::rpc_cancel{ch, id});
        auto op = detail::make_pending<detail::rpc_stream_open>(std::move(handler), ex, ch, st);
        detail::outgoing_message m;
        m.payload = std::move(data);
        m.flags = packet_flags;
        ch->start_call(id, std::move(op), std::move(m), std::chrono::milliseconds(-1),
                       std::move(st));
      },
      token, channel_, ex_, std::move(message), flags, valid, window);
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
        close();  // a connected or connecting end gives way
        auto slot = asio::get_associated_cancellation_slot(handler);
        auto op = detail::make_pending<detail::rpc_signal>(std::move(handler), ex_);
        std::error_code ec;
        channel_ = detail::rpc_channel::connect(ex_, name, client_service(), strategy_, ec);
        if (!channel_)
          return detail::complete(std::move(op), ec, false);  // posted: never inside this function
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
        auto slot = asio::get_associated_cancellation_slot(handler);
        auto op = detail::make_pending<detail::rpc_signal>(std::move(handler), ex);
        if (!ch) return detail::complete(std::move(op), asio::error::operation_aborted, false);
        const std::uint64_t id = ch->next_id();
        if (slot.is_connected())
          slot.template emplace<detail::rpc_wait_closed_cancel>(
              detail::rpc_wait_closed_cancel{ch, id});
        ch->async_wait_closed(id, std::move(op));
      },
      token, channel_, ex_);
}

template <class CompletionToken>
auto rpc_buffer::async_request(asio::const_buffer payload, CompletionToken&& token) {
  return async_request(payload, channel_ ? channel_->default_timeout() : std::chrono::seconds(30),
                       std::forward<CompletionToken>(token));
}

}  // namespace shmio
