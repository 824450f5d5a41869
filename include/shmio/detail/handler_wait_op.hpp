#pragma once
// One pending async wait: the user's handler, the attempt that completes it, and the way its
// result reaches the handler. Asio's rules for that last step: on the handler's associated
// executor, posted when the result is known inside the initiating function and dispatched
// otherwise; the operation's state lives in memory from the handler's associated allocator and
// is freed before the upcall; the handler's executor has work counted while the wait is parked
// outside it; the result counts in its queue's gate until the handler is reached
// (delivery_ticket, op_queue.hpp).

#include <cstdint>
#include <memory>
#include <optional>
#include <system_error>
#include <type_traits>
#include <utility>

#include <asio/any_io_executor.hpp>
#include <asio/associated_allocator.hpp>
#include <asio/associated_executor.hpp>
#include <asio/associator.hpp>
#include <asio/dispatch.hpp>
#include <asio/execution.hpp>
#include <asio/experimental/append.hpp>
#include <asio/post.hpp>
#include <asio/prefer.hpp>

#include "shmio/detail/op_memory.hpp"
#include "shmio/detail/op_queue.hpp"
#include "shmio/detail/outcome.hpp"
#include "shmio/detail/wait_op.hpp"

namespace shmio::detail {

/// The handler as its executor runs it: punches the delivery's ticket, then makes the upcall.
/// It has the handler's executor, allocator and cancellation slot (the associator below).
template <class Handler>
class counted_handler {
 public:
  counted_handler(Handler h, delivery_ticket t) : handler_(std::move(h)), ticket_(std::move(t)) {}

  template <class... Args>
  void operator()(Args&&... args) {
    ticket_.punch();  // before the upcall: the handler may start the queue's next operation
    std::move(handler_)(std::forward<Args>(args)...);
  }

  const Handler& handler() const noexcept { return handler_; }

 private:
  Handler handler_;
  delivery_ticket ticket_;
};

/// Invokes `h` with (ec) or (ec, value), through `ex`: posted, or dispatched when allowed (only
/// outside any initiating function). The result counts in its queue until `h` is reached.
template <class R, class Handler, class Executor>
void deliver(Handler&& h, const Executor& ex, outcome<R>&& r, bool may_dispatch,
             delivery_ticket ticket = {}) {
  counted_handler<std::decay_t<Handler>> counted(std::forward<Handler>(h), std::move(ticket));
  auto bound = [&] {
    if constexpr (std::is_same_v<R, no_value>)
      return asio::experimental::append(std::move(counted), r.ec);
    else
      return asio::experimental::append(std::move(counted), r.ec, std::move(r.value));
  }();
  if (may_dispatch)
    asio::dispatch(ex, std::move(bound));
  else
    asio::post(ex, std::move(bound));
}

/// deliver() for a result known inside the initiating function: posted to the handler's
/// associated executor (`fallback` if it has none), as Asio's own operations do.
template <class R, class Handler, class Executor>
void post_result(Handler&& h, const Executor& fallback, outcome<R>&& r,
                 delivery_ticket ticket = {}) {
  auto ex = asio::get_associated_executor(h, fallback);
  deliver<R>(std::forward<Handler>(h), ex, std::move(r), false, std::move(ticket));
}

/// A wait_op for a handler taking (error_code) (R = no_value) or (error_code, R); `Attempt`
/// returns std::optional<outcome<R>>, empty while the condition does not hold.
template <class R, class Attempt, class Handler>
class handler_wait_op final : public wait_op {
  using default_alloc = op_allocator<void>;
  using alloc_type = typename std::allocator_traits<
      asio::associated_allocator_t<Handler, default_alloc>>::template rebind_alloc<handler_wait_op>;
  using work_type = std::decay_t<
      typename asio::prefer_result<asio::associated_executor_t<Handler, asio::any_io_executor>,
                                   asio::execution::outstanding_work_t::tracked_t>::type>;

 public:
  static handler_wait_op* make(Handler&& h, Attempt&& a, const asio::any_io_executor& ex) {
    alloc_type alloc(asio::get_associated_allocator(h, default_alloc()));
    handler_wait_op* p = std::allocator_traits<alloc_type>::allocate(alloc, 1);
    try {
      return new (p) handler_wait_op(std::move(h), std::move(a), ex);
    } catch (...) {
      std::allocator_traits<alloc_type>::deallocate(alloc, p, 1);
      throw;
    }
  }

  bool attempt() override {
    if (auto r = (*attempt_)()) {
      result_ = std::move(*r);
      return true;
    }
    return false;
  }

  void drop_attempt() noexcept override { attempt_.reset(); }

  bool handler_runs_on(const asio::any_io_executor& ex) const override {
    using associated = asio::associated_executor_t<Handler, asio::any_io_executor>;
    // An executor that is not an I/O executor (use_future's, say) is never the waiter's.
    if constexpr (std::is_same_v<associated, asio::any_io_executor>)
      return asio::get_associated_executor(handler_, ex) == ex;
    else if constexpr (std::is_constructible_v<asio::any_io_executor, associated>)
      return asio::any_io_executor(asio::get_associated_executor(handler_, ex)) == ex;
    else
      return false;
  }

  void finish(std::error_code abort, bool may_dispatch, delivery_ticket ticket) override {
    // The allocator before the handler moves: a moved-from handler may not still have it.
    alloc_type alloc(asio::get_associated_allocator(handler_, default_alloc()));
    Handler h(std::move(handler_));
    work_type work(std::move(work_));
    outcome<R> r = abort ? outcome<R>{abort, {}} : std::move(result_);
    // Our memory goes back before the upcall, which may start the next operation.
    this->~handler_wait_op();
    std::allocator_traits<alloc_type>::deallocate(alloc, this, 1);
    deliver<R>(std::move(h), work, std::move(r), may_dispatch, std::move(ticket));
  }

 private:
  handler_wait_op(Handler&& h, Attempt&& a, const asio::any_io_executor& ex)
      : handler_(std::move(h)),
        attempt_(std::in_place, std::move(a)),
        // Keeps the handler's execution context running while we are parked outside it.
        work_(asio::prefer(asio::get_associated_executor(handler_, ex),
                           asio::execution::outstanding_work.tracked)) {}
  ~handler_wait_op() = default;

  Handler handler_;
  std::optional<Attempt> attempt_;  // dropped as the operation leaves its list
  outcome<R> result_;
  work_type work_;
};

}  // namespace shmio::detail

// The handler's associated executor, allocator and cancellation slot are the wrapper's.
template <template <class, class> class Associator, class Handler, class DefaultCandidate>
struct asio::associator<Associator, shmio::detail::counted_handler<Handler>, DefaultCandidate>
    : Associator<Handler, DefaultCandidate> {
  static typename Associator<Handler, DefaultCandidate>::type get(
      const shmio::detail::counted_handler<Handler>& h,
      const DefaultCandidate& c = DefaultCandidate()) noexcept {
    return Associator<Handler, DefaultCandidate>::get(h.handler(), c);
  }
};
