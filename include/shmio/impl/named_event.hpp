#pragma once
// The template part of named_event; included by shmio/named_event.hpp.

#include <memory>
#include <optional>
#include <system_error>
#include <utility>

#include "shmio/detail/event_state.hpp"
#include "shmio/detail/waiter.hpp"
#include "shmio/segment.hpp"

namespace shmio {
namespace detail {

// An auto-reset signal taken for an async wait travels to its handler (as a lock does,
// impl/rw_lock.hpp): if the handler is destroyed unrun (its io_context went first, say), or the
// handle was closed before it ran, the signal is set again for the next waiter rather than
// lost. A manual-reset wait takes nothing, and carries none. Unlike an in-place claim it holds
// no queue: no user callback runs on it, and the waiter's delivery order already keeps the
// handle's waits in the order they were started.
class taken_signal {
 public:
  taken_signal() = default;
  /// `keep`: the object mapping `view`, kept until the signal is the handler's or given back.
  taken_signal(std::shared_ptr<void> keep, const event_view& view, const waiter& w) noexcept
      : keep_(std::move(keep)), view_(view), waiter_(&w) {}
  taken_signal(taken_signal&& o) noexcept
      : keep_(std::move(o.keep_)), view_(o.view_), waiter_(o.waiter_) {}
  taken_signal& operator=(taken_signal&& o) noexcept {
    if (this != &o) {
      give_back();
      keep_ = std::move(o.keep_);
      view_ = o.view_;
      waiter_ = o.waiter_;
    }
    return *this;
  }
  ~taken_signal() { give_back(); }

  /// The handle was closed since the signal was taken.
  bool closed() const noexcept { return keep_ && waiter_->closed(); }
  /// The signal is the handler's: nothing to give back.
  void consumed() noexcept { keep_.reset(); }
  void give_back() noexcept {
    if (!keep_) return;
    view_.set();
    keep_.reset();
  }

 private:
  std::shared_ptr<void> keep_;  // null: nothing taken, or no longer ours to give back
  event_view view_;
  const waiter* waiter_ = nullptr;
};

// The handler the waiter completes: keeps the signal (it is the user's now), then calls the
// user's handler. It has that handler's executor, allocator and cancellation slot.
template <class Handler>
class signal_handler {
 public:
  explicit signal_handler(Handler h) : handler_(std::move(h)) {}
  void operator()(std::error_code ec, taken_signal taken) {
    // Closed since it was taken (a callback closed the handle): the signal goes back.
    if (!ec && taken.closed()) ec = asio::error::operation_aborted;
    if (ec)
      taken.give_back();
    else
      taken.consumed();
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
  auto take = [im]() -> std::optional<detail::outcome<detail::taken_signal>> {
    if (!im->state.try_take()) return std::nullopt;
    if (im->state.manual) return detail::outcome<detail::taken_signal>{};
    return detail::outcome<detail::taken_signal>{{},
                                                 detail::taken_signal(im, im->state, *im->waiter)};
  };
  im->waiter->async_wait<detail::taken_signal>(
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
