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
  if (!im) {  // closed: still through the executor the handle was made with
    auto ex = asio::get_associated_executor(handler, io_ex);
    detail::deliver<detail::no_value>(std::move(handler), ex, {asio::error::bad_descriptor, {}},
                                      false);
    return;
  }
  detail::event_view state = im->state;
  im->waiter->async_wait<detail::no_value>(
      0,
      [state]() -> std::optional<detail::outcome<detail::no_value>> {
        if (state.try_take()) return detail::outcome<detail::no_value>{};
        return std::nullopt;
      },
      std::forward<Handler>(handler));
}

}  // namespace shmio
