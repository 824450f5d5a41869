#pragma once
// The template part of named_event; included by shmio/named_event.hpp.

#include <optional>

#include "shmio/detail/event_state.hpp"
#include "shmio/detail/waiter.hpp"
#include "shmio/segment.hpp"

namespace shmio {

struct named_event::impl {
  segment seg;
  detail::event_view state;
  std::shared_ptr<detail::waiter> waiter;

  ~impl() {
    if (waiter) waiter->shutdown();  // abort waits before the memory they read is unmapped
  }
};

template <class Handler>
void named_event::start_wait(const std::shared_ptr<impl>& im, const executor_type& io_ex,
                             Handler&& handler) {
  if (!im || im->waiter->closed()) {  // closed: through the executor the handle was made with
    return detail::post_result<detail::no_value>(std::move(handler), io_ex,
                                                 {asio::error::bad_descriptor, {}});
  }
  detail::event_view state = im->state;
  im->waiter->async_wait<detail::no_value>(
      io_ex, 0,
      [state]() -> std::optional<detail::outcome<detail::no_value>> {
        if (state.try_take()) return detail::outcome<detail::no_value>{};
        return std::nullopt;
      },
      std::forward<Handler>(handler));
}

inline asio::awaitable<void> named_event::co_wait() {
  if (impl_) {
    detail::event_view state = impl_->state;
    auto take = [state]() -> std::optional<detail::outcome<detail::no_value>> {
      if (state.try_take()) return detail::outcome<detail::no_value>{};
      return std::nullopt;
    };
    if (impl_->waiter->try_linger(0, take)) co_return;
  }
  co_await async_wait(asio::use_awaitable);
}

}  // namespace shmio
