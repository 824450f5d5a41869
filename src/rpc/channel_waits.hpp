#pragma once
// What the parts of rpc_channel share about its waiter: the two queues it waits on, and the
// co_await-able wait its loops use.

#include <cstddef>
#include <memory>
#include <system_error>
#include <utility>

#include <asio/async_result.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/use_awaitable.hpp>

#include "shmio/detail/waiter.hpp"

namespace shmio::detail::channel_waits {

inline constexpr std::size_t in_queue = 0;   // waiter queue: packets to read
inline constexpr std::size_t out_queue = 1;  // waiter queue: room to write

inline constexpr auto as_tuple_awaitable = asio::experimental::as_tuple(asio::use_awaitable);

/// co_await-able form of waiter::async_wait for a size-valued attempt, on `ex` (the channel's
/// strand, which the waiter was made with).
template <class Attempt, class Token>
auto async_attempt(const asio::any_io_executor& ex, const std::shared_ptr<waiter>& w,
                   std::size_t queue, Attempt attempt, Token&& token) {
  return asio::async_initiate<Token, void(std::error_code, std::size_t)>(
      [](auto handler, const asio::any_io_executor& ex, std::shared_ptr<waiter> w, std::size_t q,
         Attempt a) { w->async_wait<std::size_t>(ex, q, std::move(a), std::move(handler)); },
      token, ex, w, queue, std::move(attempt));
}

}  // namespace shmio::detail::channel_waits
