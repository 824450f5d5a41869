#pragma once
// The template part of rpc_stream and rpc_stream_writer; included by shmio/rpc_stream.hpp.

#include <asio/associated_cancellation_slot.hpp>
#include <asio/error.hpp>
#include <exception>
#include <type_traits>

namespace shmio {
namespace detail {

struct rpc_stream_access {
  static rpc_stream make_stream(asio::any_io_executor ex, std::shared_ptr<rpc_channel> ch,
                                std::shared_ptr<stream_state> st) {
    return rpc_stream(std::move(ex), std::move(ch), std::move(st));
  }
  static rpc_stream_writer make_writer(std::shared_ptr<rpc_channel> ch, std::uint64_t id,
                                       std::uint64_t session) {
    return rpc_stream_writer(std::move(ch), id, session);
  }
};

struct stream_read_cancel {
  std::weak_ptr<rpc_channel> channel;
  std::weak_ptr<stream_state> state;
  std::uint64_t read_id;
  void operator()(asio::cancellation_type type) const {
    if (type == asio::cancellation_type::none) return;
    auto c = channel.lock();
    auto s = state.lock();
    if (c && s) stream_cancel_read(c, s, read_id, type);
  }
};

struct stream_write_cancel {
  std::weak_ptr<rpc_channel> channel;
  std::uint64_t request_id;
  std::uint64_t write_id;
  void operator()(asio::cancellation_type type) const {
    if (type == asio::cancellation_type::none) return;
    if (auto c = channel.lock()) stream_cancel_write(c, request_id, write_id);
  }
};

}  // namespace detail

template <class CompletionToken>
auto rpc_stream::async_read(CompletionToken&& token) {
  // With use_awaitable, a failure throws rpc_error with the other end's text, as a call's does.
  constexpr bool throwing = detail::use_awaitable_token<std::decay_t<CompletionToken>>::value;
  using signature = std::conditional_t<throwing, void(std::exception_ptr, std::vector<std::byte>),
                                       void(std::error_code, std::vector<std::byte>)>;
  return asio::async_initiate<CompletionToken, signature>(
      [](auto handler, const executor_type& ex, const std::shared_ptr<detail::rpc_channel>& ch,
         const std::shared_ptr<detail::stream_state>& st) {
        if (!st)  // not open
          return detail::post_refusal<throwing>(
              std::move(handler), ex, asio::error::operation_aborted, {}, std::vector<std::byte>{});
        const std::uint64_t read_id = detail::stream_op_id(*ch);
        auto slot = asio::get_associated_cancellation_slot(handler);
        if (slot.is_connected())
          slot.template emplace<detail::stream_read_cancel>(
              detail::stream_read_cancel{ch, st, read_id});
        if constexpr (throwing)
          detail::stream_read(
              ch, st, read_id,
              detail::make_pending<detail::rpc_throwing_call>(std::move(handler), ex, ch.get()));
        else
          detail::stream_read(ch, st, read_id,
                              detail::make_pending<detail::rpc_call>(std::move(handler), ex));
      },
      token, ex_, channel_, state_);
}

template <class CompletionToken>
auto rpc_stream::async_read_batch(std::size_t max_items, CompletionToken&& token) {
  using items_type = std::vector<std::vector<std::byte>>;
  // As async_read: with use_awaitable, a failure throws rpc_error with the other end's text.
  constexpr bool throwing = detail::use_awaitable_token<std::decay_t<CompletionToken>>::value;
  using signature = std::conditional_t<throwing, void(std::exception_ptr, items_type),
                                       void(std::error_code, items_type)>;
  return asio::async_initiate<CompletionToken, signature>(
      [](auto handler, const executor_type& ex, const std::shared_ptr<detail::rpc_channel>& ch,
         const std::shared_ptr<detail::stream_state>& st, std::size_t max) {
        if (!st)  // not open
          return detail::post_refusal<throwing>(std::move(handler), ex,
                                                asio::error::operation_aborted, {}, items_type{});
        const std::uint64_t read_id = detail::stream_op_id(*ch);
        auto slot = asio::get_associated_cancellation_slot(handler);
        if (slot.is_connected())
          slot.template emplace<detail::stream_read_cancel>(
              detail::stream_read_cancel{ch, st, read_id});
        if constexpr (throwing)
          detail::stream_read_batch(
              ch, st, read_id, max,
              detail::make_pending<detail::rpc_throwing_items>(std::move(handler), ex, ch.get()));
        else
          detail::stream_read_batch(
              ch, st, read_id, max,
              detail::make_pending<detail::rpc_items>(std::move(handler), ex));
      },
      token, ex_, channel_, state_, max_items);
}

template <class CompletionToken>
auto rpc_stream_writer::async_write(asio::const_buffer item, CompletionToken&& token) {
  // Copied now, not when the operation starts: a lazy token may start it after the buffer went.
  const auto* p = static_cast<const std::byte*>(item.data());
  return asio::async_initiate<CompletionToken, void(std::error_code)>(
      [](auto handler, const executor_type& ex, const std::shared_ptr<detail::rpc_channel>& ch,
         std::uint64_t id, std::uint64_t session,
         const std::shared_ptr<detail::stream_write_count>& writes, std::vector<std::byte> data) {
        if (!ch)  // moved from
          return detail::post_refusal<false>(std::move(handler), ex, asio::error::bad_descriptor,
                                             {});
        const std::uint64_t write_id = detail::stream_op_id(*ch);
        auto slot = asio::get_associated_cancellation_slot(handler);
        if (slot.is_connected())
          slot.template emplace<detail::stream_write_cancel>(
              detail::stream_write_cancel{ch, id, write_id});
        detail::stream_write(ch, id, session, write_id, std::move(data),
                             detail::make_pending<detail::rpc_write_signal>(
                                 std::move(handler), detail::stream_executor(*ch),
                                 detail::stream_write_count::ticket(writes)));
      },
      token, ex_, channel_, id_, session_, writes_, std::vector<std::byte>(p, p + item.size()));
}

inline asio::awaitable<void> rpc_stream_writer::co_write(asio::const_buffer item) {
  if (channel_ && detail::stream_write_count::none(writes_) &&
      detail::stream_try_write(channel_, id_, session_,
                               {static_cast<const std::byte*>(item.data()), item.size()}))
    co_return;
  co_await async_write(item, asio::use_awaitable);
}

}  // namespace shmio
