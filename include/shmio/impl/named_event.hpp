#pragma once
// The template part of named_event; included by shmio/named_event.hpp.

#include <optional>

#include "shmio/detail/event_state.hpp"
#include "shmio/detail/in_place.hpp"
#include "shmio/detail/waiter.hpp"
#include "shmio/segment.hpp"

namespace shmio {
namespace detail {

// An auto-reset signal taken for an async wait travels to its handler as a held claim (as a
// lock does, impl/rw_lock.hpp): if the handler is destroyed unrun (its io_context went first,
// say), or the handle was closed before it ran, the signal is set again for the next waiter
// rather than lost. A manual-reset wait takes nothing, and carries no claim.
struct signal_claim {};
using held_signal = held_claim<event_view, signal_claim>;

inline void give_back_signal(event_view& view, const signal_claim&) noexcept {
  view.set();
}

// The handler the waiter completes: keeps the signal (it is the user's now), then calls the
// user's handler. It has that handler's executor, allocator and cancellation slot.
template <class Handler>
class signal_handler {
 public:
  explicit signal_handler(Handler h) : handler_(std::move(h)) {}
  void operator()(std::error_code ec, held_signal held) {
    // Closed since it was taken (a callback closed the handle): the signal goes back.
    if (!ec && held.closed()) ec = asio::error::operation_aborted;
    if (!ec) held.consumed();
    held.reset();  // before the handler: its next wait may take the ready path
    std::move(handler_)(ec);
  }
  const Handler& handler() const noexcept { return handler_; }

 private:
  Handler handler_;
};

}  // namespace detail

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
  // The attempt points into `im`, which shuts its waiter down (destroying it) before it goes.
  auto take = [im]() -> std::optional<detail::outcome<detail::held_signal>> {
    if (!im->state.try_take()) return std::nullopt;
    if (im->state.manual) return detail::outcome<detail::held_signal>{};
    return detail::outcome<detail::held_signal>{
        {}, detail::held_signal(im, im->state, {}, &detail::give_back_signal, *im->waiter, 0)};
  };
  im->waiter->async_wait<detail::held_signal>(
      io_ex, 0, std::move(take),
      detail::signal_handler<std::decay_t<Handler>>(std::forward<Handler>(handler)));
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

// The user handler's associated executor, allocator and cancellation slot are the wrapper's.
template <template <class, class> class Associator, class Handler, class DefaultCandidate>
struct asio::associator<Associator, shmio::detail::signal_handler<Handler>, DefaultCandidate>
    : Associator<Handler, DefaultCandidate> {
  static typename Associator<Handler, DefaultCandidate>::type get(
      const shmio::detail::signal_handler<Handler>& h,
      const DefaultCandidate& c = DefaultCandidate()) noexcept {
    return Associator<Handler, DefaultCandidate>::get(h.handler(), c);
  }
};
