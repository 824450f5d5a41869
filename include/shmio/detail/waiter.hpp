#pragma once
// The process-local half of a wait: turns "wait until this shared-memory condition holds" into
// an Asio operation (async_wait) or a blocking call (wait).
//
// One waiter serves one I/O object, and puts together the parts of a wait:
// - op_queue.hpp: per queue, the pending operations in the order they were started, and the
//   gate that keeps that order; handler_wait_op.hpp: one operation and how its handler is
//   called;
// - reactor_wait.hpp: the slots in the shared queues, and the doorbell and timer that the
//   executor's reactor watches;
// - spin.hpp: how long to spin before parking, and the spin through the executor;
// - blocking_wait.hpp: the blocking form.
//
// An operation is tried at once; if its condition does not hold it joins its queue's list,
// spins through the executor for the spin budget, then parks (arms, re-checks, and waits for
// the doorbell). Whenever the doorbell rings (or a re-check timer fires) the operations at the
// head of each list re-check their condition, in order. Each operation completes exactly once:
// by its condition, by cancellation through its slot, or by shutdown, whichever takes it out of
// its list first under the mutex.
//
// Asio's rules, and how they are kept:
// - No handler runs inside the initiating function: a result ready there is posted to the
//   handler's associated executor. Completions found later (a wake-up, a spin trip) run on the
//   object's executor and are dispatched to the handler's.
// - Operations of one queue complete in the order they were started (op_queue's gate): an
//   operation is not tried while an earlier one's handler has not been reached, even if that
//   handler waits in its executor's queue.
// - No user code runs under the mutex: attempts only claim (a node, a lock, a message); a user
//   callback that works on the claim runs in the handler's context (queue_hold, in_place.hpp).
// - Nothing touches shared memory after shutdown(): every touch happens under the mutex, which
//   shutdown() takes, or by the initiating thread, which holds the object. Wake-ups that a
//   completion must pass on are passed on before its handler runs (the handler may destroy the
//   object).

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <system_error>
#include <utility>

#include <asio/any_io_executor.hpp>
#include <asio/associated_cancellation_slot.hpp>
#include <asio/error.hpp>
#include <asio/post.hpp>

#include "shmio/detail/blocking_wait.hpp"
#include "shmio/detail/handler_wait_op.hpp"
#include "shmio/detail/layout.hpp"
#include "shmio/detail/op_queue.hpp"
#include "shmio/detail/outcome.hpp"
#include "shmio/detail/reactor_wait.hpp"
#include "shmio/detail/spin.hpp"
#include "shmio/wait_strategy.hpp"

namespace shmio::detail {

class waiter final : public std::enable_shared_from_this<waiter>, public delivery_owner {
 public:
  static constexpr std::size_t max_queues = reactor_wait::max_queues;
  static_assert(max_queues <= op_batch::max_queues);
  /// Objects that found no free slot in a queue park through the process's wait hub
  /// (wait_hub.hpp); where it cannot run, they look again this often.
  static constexpr auto slotless_interval = std::chrono::milliseconds(1);

  waiter(const asio::any_io_executor& ex, std::span<layout::wait_queue* const> queues,
         wait_strategy strategy, std::error_code& ec);
  ~waiter();
  waiter(const waiter&) = delete;
  waiter& operator=(const waiter&) = delete;

  spin_policy& spin() noexcept { return spin_; }

  /// Starts an async wait on queue `q` for `attempt` (a callable returning
  /// std::optional<outcome<R>>, which runs no user code). Never completes inside this call.
  /// `ex` is the initiation's copy of the object's executor (the handler's default): the
  /// waiter's own goes at close, which another thread may begin while this call runs.
  template <class R, class Attempt, class Handler>
  void async_wait(const asio::any_io_executor& ex, std::size_t q, Attempt attempt,
                  Handler&& handler);

  /// async_wait for an operation that must keep its place before every other of queue `q`:
  /// one that completed with a claim taken under a queue_hold and, finding the claim no use
  /// (an acceptor's accept whose request was refused), waits again, still holding the queue.
  /// It goes to the head of the list and parks; the queue's next look, once the hold is
  /// released, tries it first.
  template <class R, class Attempt, class Handler>
  void async_wait_first(const asio::any_io_executor& ex, std::size_t q, Attempt attempt,
                        Handler&& handler);

  /// One look at `attempt` for a caller that would otherwise start an async wait on `q` (the
  /// fast forms of co_await): empty if it cannot proceed now, or if operations started earlier
  /// on `q` have not completed yet (they go first).
  template <class Attempt>
  auto try_now(std::size_t q, Attempt& attempt) -> decltype(attempt());

  /// try_now, then pause-spinning for up to fast_form_linger (or the spin budget, if smaller;
  /// skipped while it keeps failing, as tight_spin is), looking again each time: the fast forms
  /// of co_await, whose caller expects an answer within microseconds and would otherwise take
  /// trips through its executor to wait for it.
  template <class Attempt>
  auto try_linger(std::size_t q, Attempt& attempt) -> decltype(attempt());
  static constexpr auto fast_form_linger = std::chrono::microseconds(10);

  /// Blocks until `attempt` yields or `timeout` passes (negative: no limit).
  template <class Attempt>
  auto wait(std::size_t q, Attempt attempt, std::chrono::nanoseconds timeout)
      -> decltype(attempt()) {
    return blocking_wait(reactor_.queue(q), spin_, attempt, timeout, safety_interval_);
  }

  /// Completes every pending operation with operation_aborted and gives back the slots. After
  /// it returns nothing here touches the shared memory of the queues.
  void shutdown() noexcept;
  /// shutdown(), from the close of the object's handle, then lets our copy of the executor go.
  /// The handle's close runs where the executor's context is alive, as an Asio I/O object's
  /// must; the last reference to the waiter may not (an in-place claim on its way to a handler
  /// on another io_context holds one), and a strand's last copy reaches into its context when
  /// it goes. Operations started afterwards must not come here (their initiation checks
  /// closed() and completes through the handle's executor).
  void retire() noexcept;

  /// Holds back queue `q` while a claimed result is used outside the waiter (see queue_hold).
  void hold(std::size_t q) noexcept { ops_[q].hold(); }
  void unhold(std::size_t q) noexcept;

  /// Queue `q` has no operation waiting and no claim in use by a callback: nothing of this
  /// waiter's can be claiming on it, nor until an operation starts. Read without the mutex.
  bool quiet(std::size_t q) const noexcept { return ops_[q].quiet(); }

  /// shutdown() has run (a callback closed the object, say): claim nothing more for it.
  bool closed() const noexcept { return closed_flag_.load(std::memory_order_acquire); }

  /// A delivery of queue `q` reached its handler (delivery_ticket): if it was the last one out
  /// and a head waits behind it, looks again.
  void delivered(std::size_t q) noexcept override;

 private:
  struct cancel_handler {
    std::weak_ptr<waiter> self;
    std::uint64_t id;
    void operator()(asio::cancellation_type type) const;
  };
  using timer_reason = reactor_wait::timer_reason;

  // Puts `o` in its list; it spins through the executor for `spin` (re-checking between other
  // handlers, so a peer in this very thread can make progress), then parks.
  void enqueue(wait_op* o, std::chrono::nanoseconds spin, bool first_in_line = false);
  // The part of async_wait after the ready path.
  template <class R, class Attempt, class Handler>
  void start_wait(const asio::any_io_executor& ex, std::size_t q, Attempt attempt,
                  Handler&& handler, bool first_in_line);
  void spin_step(std::uint64_t id, std::size_t q, std::chrono::steady_clock::time_point deadline,
                 std::uint32_t step);
  // Parks `o`: arms, re-checks the queue's head, watches. Drops the lock; completions are
  // posted from an initiating function, dispatched otherwise.
  void park(std::unique_lock<std::mutex>& lock, wait_op* o, bool in_initiation);
  // A spinning wait's look: if it may go and its condition holds, completes it (dropping the
  // lock).
  bool complete_if_ready(std::unique_lock<std::mutex>& lock, wait_op* o);
  // Takes `o` out of its list and completes it alone. Drops the lock.
  void complete(std::unique_lock<std::mutex>& lock, wait_op* o, std::error_code ec,
                bool may_dispatch);
  // Tries `o`, noting whether it was held up by another participant.
  bool try_op(wait_op* o);
  // Moves the heads that may go and can proceed, queue by queue, to `done`, for the queues in
  // `mask` (bit q); `may_dispatch`: `done` is delivered outside any initiating function.
  void take_ready(op_batch& done, unsigned mask, bool may_dispatch);
  // Delivers `done` (the lock dropped), with `ec` if set (an abort), then settles, also when a
  // handler run inline throws (the exception goes on to the caller of run()).
  void deliver_and_settle(op_batch& done, bool may_dispatch, std::error_code ec = {});
  // Arms queue q's slot for the parked operations in its list.
  void arm_for(std::size_t q, std::uint32_t taken = 0) noexcept;
  // Withdraws the arming of the queues in `mask` that no longer have a parked operation,
  // passing on rings claimed for us.
  void withdraw_idle(unsigned mask) noexcept;
  bool any_parked() const noexcept;
  bool nothing_pending() const noexcept;
  void cancel(std::uint64_t id);
  void on_bell(const std::error_code& ec);
  void on_timer(const std::error_code& ec, std::uint64_t generation);
  // Has the waiter `w` (if it still exists) re-check on `ex`: a wake-up from outside its
  // reactor (the wait hub), or a head the gate held back that may go now.
  static void post_recheck(std::weak_ptr<waiter> w, const asio::any_io_executor& ex);
  // Completes what can proceed, then settles; drops the lock. Returns how many completed.
  std::size_t recheck(std::unique_lock<std::mutex>& lock);
  // Starts the doorbell wait if an operation is parked, and the re-check timer if a parked
  // operation needs one (held up, slotless, or the safety net).
  void watch();
  // After completions have run (takes the mutex): once nothing is pending, has unwatch() run
  // after the handlers already queued; if a head was held back by the gate, re-checks.
  void settle();
  // Stops the doorbell wait and the timer if nothing is pending and the object looks idle: no
  // wait started since `seen` (started_), or `passes` trips through the queue spent.
  void unwatch(std::uint32_t seen, int passes);
  // A ping-pong on one CPU starts its next park within a few trips; a long run of waits that
  // complete at once is not worth a trip each.
  static constexpr int unwatch_passes = 16;

  asio::any_io_executor ex_;
  spin_policy spin_;
  executor_spin trips_;
  std::chrono::milliseconds safety_interval_;

  std::mutex mutex_;
  reactor_wait reactor_;  // under the mutex
  std::array<op_queue, max_queues> ops_;
  std::uint64_t next_id_ = 1;
  bool stalled_ = false;  // a parked head's last attempt was held up
  std::chrono::milliseconds stall_backoff_ = stall_backoff::first;
  bool unwatch_posted_ = false;
  // Counts async_wait calls; unwatch() compares two readings (relaxed everywhere: a hint).
  std::atomic<std::uint32_t> started_{0};
  bool closed_ = false;
  // closed_, readable without the mutex (acquire/release: a start that sees it touches nothing;
  // one that does not is ordered before shutdown by the mutex it then takes).
  std::atomic<bool> closed_flag_{false};
  std::chrono::steady_clock::time_point parked_since_{};
};

/// The claim an attempt took for a user callback that must run in the handler's context: while
/// it lives, the queue's later operations wait (so they complete in order, and an object's
/// per-handle state is never used by two callbacks at once). The waiter must outlive it (the
/// owner of a hold keeps the object alive).
class queue_hold {
 public:
  queue_hold() = default;
  queue_hold(waiter& w, std::size_t q) noexcept : w_(&w), q_(q) { w.hold(q); }
  queue_hold(queue_hold&& o) noexcept : w_(std::exchange(o.w_, nullptr)), q_(o.q_) {}
  queue_hold& operator=(queue_hold&& o) noexcept {
    if (this != &o) {
      release();
      w_ = std::exchange(o.w_, nullptr);
      q_ = o.q_;
    }
    return *this;
  }
  ~queue_hold() { release(); }
  /// The waiter was shut down (the object closed) while the claim was out.
  bool closed() const noexcept { return w_ && w_->closed(); }
  /// Lets the queue's next operation go.
  void release() noexcept {
    if (auto* w = std::exchange(w_, nullptr)) w->unhold(q_);
  }

 private:
  waiter* w_ = nullptr;
  std::size_t q_ = 0;
};

// ---- implementation ------------------------------------------------------------------------

template <class Attempt>
auto waiter::try_now(std::size_t q, Attempt& attempt) -> decltype(attempt()) {
  if (closed_flag_.load(std::memory_order_acquire)) return {};
  if (!ops_[q].may_start_ready()) return {};
  return attempt();
}

template <class Attempt>
auto waiter::try_linger(std::size_t q, Attempt& attempt) -> decltype(attempt()) {
  if (auto r = try_now(q, attempt)) return r;
  auto look = [&] { return try_now(q, attempt); };
  const auto window = std::min<std::chrono::nanoseconds>(fast_form_linger,
                                                         std::chrono::nanoseconds(spin_.budget()));
  return spin_.tight_spin_for(look, window);
}

template <class R, class Attempt, class Handler>
void waiter::async_wait(const asio::any_io_executor& ex, std::size_t q, Attempt attempt,
                        Handler&& handler) {
  // An operation started (say, a deferred one launched) after close touches nothing.
  if (closed_flag_.load(std::memory_order_acquire))
    return post_result<R>(std::move(handler), ex, {asio::error::bad_descriptor, {}});
  // relaxed, and a load and a store rather than an increment: a hint for unwatch(), which a
  // count lost to a concurrent call only makes stop watching a trip early.
  started_.store(started_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  // Ready path: nothing started earlier is still waiting, and the condition already holds.
  // Posted, as Asio posts an immediate result. (No pause-spin here: a result it caught would be
  // posted all the same, the trip through the scheduler that the spin below costs, after the
  // spin's own time; docs/performance.md.)
  if (ops_[q].may_start_ready())
    if (auto r = attempt()) {
      // The result counts in the gate until its handler runs (a later operation of the queue,
      // completed by a re-check, must not overtake it).
      delivery_ticket ticket(weak_from_this(), q);
      ops_[q].begin_delivery();
      return post_result<R>(std::move(handler), ex, std::move(*r), std::move(ticket));
    }

  start_wait<R>(ex, q, std::move(attempt), std::forward<Handler>(handler), false);
}

template <class R, class Attempt, class Handler>
void waiter::async_wait_first(const asio::any_io_executor& ex, std::size_t q, Attempt attempt,
                              Handler&& handler) {
  if (closed_flag_.load(std::memory_order_acquire))
    return post_result<R>(std::move(handler), ex, {asio::error::bad_descriptor, {}});
  started_.store(started_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  start_wait<R>(ex, q, std::move(attempt), std::forward<Handler>(handler), true);
}

template <class R, class Attempt, class Handler>
void waiter::start_wait(const asio::any_io_executor& ex, std::size_t q, Attempt attempt,
                        Handler&& handler, bool first_in_line) {
  auto slot = asio::get_associated_cancellation_slot(handler);
  wait_op* o = handler_wait_op<R, Attempt, std::decay_t<Handler>>::make(std::move(handler),
                                                                        std::move(attempt), ex);
  o->queue = q;
  {
    std::lock_guard lock(mutex_);
    o->id = next_id_++;
  }
  if (slot.is_connected())
    slot.template emplace<cancel_handler>(cancel_handler{weak_from_this(), o->id});
  enqueue(o, std::chrono::nanoseconds(spin_.budget()), first_in_line);
}

}  // namespace shmio::detail
