#pragma once
// The template part of rw_lock; included by shmio/rw_lock.hpp.

#include "shmio/detail/in_place.hpp"
#include "shmio/detail/rw_lock_view.hpp"
#include "shmio/detail/waiter.hpp"

namespace shmio {
namespace detail {

// A lock taken for an async operation travels to its handler as a held claim: if the handler
// is destroyed unrun (its io_context went first, say), the lock is given back rather than held
// by the handle with nobody to release it.
struct lock_claim {
  bool exclusive = true;
  bool previous_owner_died = false;
};
using held_lock = held_claim<rw_lock_view, lock_claim>;

inline void give_back_lock(rw_lock_view& view, const lock_claim& c) noexcept {
  if (c.previous_owner_died) view.retell_death();  // nobody heard it: the next acquirer will
  if (c.exclusive)
    view.unlock();
  else
    view.unlock_shared();
}

// The handler the waiter completes: takes the lock from the claim (it is the user's now), then
// calls the user's handler. It has that handler's executor, allocator and cancellation slot.
template <class Handler>
class lock_handler {
 public:
  explicit lock_handler(Handler h) : handler_(std::move(h)) {}
  void operator()(std::error_code ec, held_lock held) {
    // Closed since it was taken (a callback closed the handle): close released it already.
    if (!ec && held.closed()) ec = asio::error::operation_aborted;
    const bool died = !ec && held.claim().previous_owner_died;
    if (!ec) held.consumed();
    held.reset();  // before the handler: its next operation may take the ready path
    std::move(handler_)(ec, died);
  }
  const Handler& handler() const noexcept { return handler_; }

 private:
  Handler handler_;
};

}  // namespace detail

struct rw_lock::impl {
  segment seg;
  detail::rw_lock_view view;
  std::shared_ptr<detail::waiter> waiter;
  std::byte* data = nullptr;
  std::size_t data_size = 0;
  std::size_t count = 0;
  access_options options;

  ~impl();
};

template <class Handler>
void rw_lock::start(const std::shared_ptr<impl>& im, const executor_type& ex, bool exclusive,
                    Handler&& handler) {
  if (!im || im->waiter->closed()) {
    // A handle that was never opened has no executor: then only the handler's own can run it.
    if (ex)
      return detail::deliver<bool>(std::move(handler), asio::get_associated_executor(handler, ex),
                                   {asio::error::bad_descriptor, false}, false);
    return detail::deliver<bool>(std::move(handler), asio::get_associated_executor(handler),
                                 {asio::error::bad_descriptor, false}, false);
  }
  // The attempts point into `im`, which shuts its waiter down (destroying them) before it goes.
  const std::size_t q = exclusive ? detail::lock_writers_queue : detail::lock_readers_queue;
  auto hold = [im, exclusive,
               q](auto& attempt) -> std::optional<detail::outcome<detail::held_lock>> {
    auto r = attempt();
    if (!r) return std::nullopt;
    if (r->ec) return detail::outcome<detail::held_lock>{r->ec, {}};
    return detail::outcome<detail::held_lock>{
        {},
        detail::held_lock(im, im->view, {exclusive, r->value}, &detail::give_back_lock, *im->waiter,
                          q)};
  };
  detail::lock_handler<std::decay_t<Handler>> wrapped(std::forward<Handler>(handler));
  if (exclusive)
    im->waiter->template async_wait<detail::held_lock>(
        ex, q, [hold, a = detail::exclusive_attempt(im->view)]() mutable { return hold(a); },
        std::move(wrapped));
  else
    im->waiter->template async_wait<detail::held_lock>(
        ex, q, [hold, a = detail::shared_attempt(im->view)]() mutable { return hold(a); },
        std::move(wrapped));
}

template <class CompletionToken>
auto rw_lock::async_lock(CompletionToken&& token) {
  return asio::async_initiate<CompletionToken, void(std::error_code, bool)>(
      [](auto handler, const std::shared_ptr<impl>& im, const executor_type& ex) {
        start(im, ex, true, std::move(handler));
      },
      token, impl_, ex_);
}

template <class CompletionToken>
auto rw_lock::async_lock_shared(CompletionToken&& token) {
  return asio::async_initiate<CompletionToken, void(std::error_code, bool)>(
      [](auto handler, const std::shared_ptr<impl>& im, const executor_type& ex) {
        start(im, ex, false, std::move(handler));
      },
      token, impl_, ex_);
}

}  // namespace shmio

// The user handler's associated executor, allocator and cancellation slot are the wrapper's.
template <template <class, class> class Associator, class Handler, class DefaultCandidate>
struct asio::associator<Associator, shmio::detail::lock_handler<Handler>, DefaultCandidate>
    : Associator<Handler, DefaultCandidate> {
  static typename Associator<Handler, DefaultCandidate>::type get(
      const shmio::detail::lock_handler<Handler>& h,
      const DefaultCandidate& c = DefaultCandidate()) noexcept {
    return Associator<Handler, DefaultCandidate>::get(h.handler(), c);
  }
};
