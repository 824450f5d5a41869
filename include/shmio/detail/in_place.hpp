#pragma once
// Async operations whose user callback works on shared memory (the in-place and batch forms):
// the attempt only claims (a node, a slot, a message) under the waiter's lock; the claim
// travels to the completion handler's executor, where the callback runs, outside every lock of
// ours and in the handler's context (a strand's callbacks stay on the strand); then the handler
// is called with the result.
//
// While a claim is out, its queue's later operations wait (queue_hold), so they still complete
// in the order they were started. A claim that never reaches its callback (the handler was
// destroyed unrun, say with its io_context) is given back by its destructor.

#include <cstddef>
#include <memory>
#include <system_error>
#include <type_traits>
#include <utility>

#include <asio/associator.hpp>

#include "shmio/detail/waiter.hpp"
#include "shmio/error.hpp"

namespace shmio::detail {

/// A claim on `View`'s shared memory, held for a callback. Keeps the object that maps the memory
/// alive (`keep`) and its queue held; if dropped before consumed(), `drop` gives the claim back.
template <class View, class Claim>
class held_claim {
 public:
  using drop_fn = void (*)(View&, const Claim&) noexcept;

  held_claim() = default;
  /// No claim: the failure of an attempt that still reports a size (messages lost, a length).
  explicit held_claim(std::size_t error_value) noexcept : error_value_(error_value) {}
  held_claim(std::shared_ptr<void> keep, View& view, const Claim& claim, drop_fn drop, waiter& w,
             std::size_t q) noexcept
      : keep_(std::move(keep)), hold_(w, q), view_(&view), claim_(claim), drop_(drop) {}
  held_claim(held_claim&& o) noexcept
      : keep_(std::move(o.keep_)),
        hold_(std::move(o.hold_)),
        view_(o.view_),
        claim_(o.claim_),
        drop_(std::exchange(o.drop_, nullptr)),
        error_value_(o.error_value_) {}
  held_claim& operator=(held_claim&& o) noexcept {
    if (this != &o) {
      reset();
      keep_ = std::move(o.keep_);
      hold_ = std::move(o.hold_);
      view_ = o.view_;
      claim_ = o.claim_;
      drop_ = std::exchange(o.drop_, nullptr);
      error_value_ = o.error_value_;
    }
    return *this;
  }
  ~held_claim() { reset(); }

  View& view() const noexcept { return *view_; }
  const Claim& claim() const noexcept { return claim_; }
  std::size_t error_value() const noexcept { return error_value_; }
  /// The object was closed since the claim was taken (a callback closed it).
  bool closed() const noexcept { return hold_.closed(); }

  /// The claim was published, released or given back by the callback's side: nothing to drop.
  /// The queue stays held until reset().
  void consumed() noexcept { drop_ = nullptr; }
  /// Drops what is still held (giving the claim back), then lets the object go.
  void reset() noexcept {
    if (auto drop = std::exchange(drop_, nullptr)) drop(*view_, claim_);
    hold_.release();
    keep_.reset();
  }

 private:
  std::shared_ptr<void> keep_;
  queue_hold hold_;
  View* view_ = nullptr;
  Claim claim_{};
  drop_fn drop_ = nullptr;
  std::size_t error_value_ = 0;
};

/// The handler the waiter completes for an in-place operation: runs `work(claim)` (the user's
/// callback and the publication or release, returning outcome<std::size_t>), lets the claim go,
/// then calls the user's handler. It has the user handler's executor, allocator and
/// cancellation slot (the associator below), so it runs where that handler would.
template <class Handler, class Work>
class in_place_handler {
 public:
  in_place_handler(Handler h, Work w) : handler_(std::move(h)), work_(std::move(w)) {}

  template <class Held>
  void operator()(std::error_code ec, Held held) {
    outcome<std::size_t> r{ec, ec ? held.error_value() : 0};
    if (!ec) r = work_(held);
    held.reset();  // before the handler: its next operation may take the ready path
    std::move(handler_)(r.ec, r.value);
  }

  const Handler& handler() const noexcept { return handler_; }

 private:
  Handler handler_;
  Work work_;
};

/// The work of an in-place write: `fill(bytes)` writes the claimed bytes and returns the
/// message's size, `publish(view, claim, size)` makes it visible. A `fill` that throws or
/// overruns leaves the claim held, to be given back.
template <class Fill, class Publish>
auto in_place_write_work(Fill fill, Publish publish) {
  return [fill = std::move(fill), publish](auto& held) mutable -> outcome<std::size_t> {
    std::size_t n = 0;
    try {
      n = fill(held.claim().data);
    } catch (...) {
      return {errc::callback_failed, 0};
    }
    if (n > held.claim().data.size()) return {errc::message_too_large, 0};
    publish(held.view(), held.claim(), n);
    held.consumed();
    return {{}, n};
  };
}

template <class Handler, class Work>
in_place_handler<std::decay_t<Handler>, Work> make_in_place_handler(Handler&& h, Work w) {
  return {std::forward<Handler>(h), std::move(w)};
}

}  // namespace shmio::detail

// The user handler's associated executor, allocator and cancellation slot are the wrapper's
// (none stays none: the waiter then falls back to the object's executor, as for the handler).
template <template <class, class> class Associator, class Handler, class Work,
          class DefaultCandidate>
struct asio::associator<Associator, shmio::detail::in_place_handler<Handler, Work>,
                        DefaultCandidate> : Associator<Handler, DefaultCandidate> {
  static typename Associator<Handler, DefaultCandidate>::type get(
      const shmio::detail::in_place_handler<Handler, Work>& h,
      const DefaultCandidate& c = DefaultCandidate()) noexcept {
    return Associator<Handler, DefaultCandidate>::get(h.handler(), c);
  }
};
