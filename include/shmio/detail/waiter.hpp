#pragma once
// The process-local half of a wait: turns "wait until this shared-memory condition holds" into
// an Asio operation (async_wait) or a blocking call (wait).
//
// One waiter serves one I/O object. It owns a doorbell (a datagram socket its executor's reactor
// watches) and one slot in each shared wait_queue the object waits on. Pending operations sit in
// per-queue FIFO lists; whenever the doorbell rings (or a re-check timer fires) the operations
// at the head of each list re-check their condition, in order. Each operation completes exactly
// once: by its condition, by cancellation through its slot, or by shutdown, whichever takes it
// out of its list first under the mutex.
//
// Asio's rules, and how they are kept:
// - No handler runs inside the initiating function: a result ready there is posted to the
//   handler's associated executor. Completions found later (a wake-up, a spin trip) run on the
//   object's executor and are dispatched to the handler's.
// - Operations of one queue complete in the order they were started: a new operation takes
//   the ready path only when nothing started before it is still queued or being delivered, and
//   the head of a list is tried only under the same rule (see gate_open).
// - No user code runs under the mutex: attempts only claim (a node, a lock, a message); a user
//   callback that works on the claim runs in the handler's context (queue_hold, in_place.hpp).
// - Nothing touches shared memory after shutdown(): every touch happens under the mutex, which
//   shutdown() takes, or by the initiating thread, which holds the object.

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <system_error>
#include <utility>

#include <asio/any_io_executor.hpp>
#include <asio/associated_allocator.hpp>
#include <asio/associated_cancellation_slot.hpp>
#include <asio/associated_executor.hpp>
#include <asio/dispatch.hpp>
#include <asio/error.hpp>
#include <asio/execution.hpp>
#include <asio/experimental/append.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/post.hpp>
#include <asio/prefer.hpp>
#include <asio/recycling_allocator.hpp>
#include <asio/steady_timer.hpp>

#include "shmio/detail/layout.hpp"
#include "shmio/detail/outcome.hpp"
#include "shmio/detail/spin.hpp"
#include "shmio/detail/stall.hpp"
#include "shmio/detail/wait_hub.hpp"
#include "shmio/detail/wait_queue.hpp"
#include "shmio/wait_strategy.hpp"

namespace shmio::detail {

/// Invokes `h` with (ec) or (ec, value), through `ex`: posted, or dispatched when allowed (only
/// outside any initiating function).
template <class R, class Handler, class Executor>
void deliver(Handler&& h, const Executor& ex, outcome<R>&& r, bool may_dispatch) {
  auto bound = [&] {
    if constexpr (std::is_same_v<R, no_value>)
      return asio::experimental::append(std::forward<Handler>(h), r.ec);
    else
      return asio::experimental::append(std::forward<Handler>(h), r.ec, std::move(r.value));
  }();
  if (may_dispatch)
    asio::dispatch(ex, std::move(bound));
  else
    asio::post(ex, std::move(bound));
}

/// deliver() for a result known inside the initiating function: posted to the handler's
/// associated executor (`fallback` if it has none), as Asio's own operations do.
template <class R, class Handler, class Executor>
void post_result(Handler&& h, const Executor& fallback, outcome<R>&& r) {
  auto ex = asio::get_associated_executor(h, fallback);
  deliver<R>(std::forward<Handler>(h), ex, std::move(r), false);
}

/// A blocking call's timeout as waiter::wait takes it: negative, max() or anything too long to
/// count in nanoseconds (centuries) means no limit.
inline std::chrono::nanoseconds wait_limit(std::chrono::milliseconds timeout) noexcept {
  constexpr auto longest = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::nanoseconds::max() / 4);  // leaves room for now() + timeout
  if (timeout.count() < 0 || timeout >= longest) return std::chrono::nanoseconds(-1);
  return timeout;
}

class waiter : public std::enable_shared_from_this<waiter> {
 public:
  static constexpr std::size_t max_queues = 2;
  /// How soon a wait held up by another participant looks again (then less often, up to
  /// stall_interval_max, while the holder lives): the holder's patience (ring.cpp, rw_lock_view,
  /// broadcast_ring) is 10 ms, after which a look asks the kernel whether it lives.
  static constexpr auto stall_interval = std::chrono::milliseconds(10);
  static constexpr auto stall_interval_max = std::chrono::milliseconds(200);
  /// Objects that found no free slot in a queue park through the process's wait hub
  /// (wait_hub.hpp); where it cannot run, they look again this often.
  static constexpr auto slotless_interval = std::chrono::milliseconds(1);

  waiter(const asio::any_io_executor& ex, std::span<layout::wait_queue* const> queues,
         wait_strategy strategy, std::error_code& ec);
  ~waiter();
  waiter(const waiter&) = delete;
  waiter& operator=(const waiter&) = delete;

  const asio::any_io_executor& get_executor() const noexcept { return ex_; }
  spin_policy& spin() noexcept { return spin_; }

  /// Starts an async wait on queue `q` for `attempt` (a callable returning
  /// std::optional<outcome<R>>, which runs no user code). Never completes inside this call.
  template <class R, class Attempt, class Handler>
  void async_wait(std::size_t q, Attempt attempt, Handler&& handler);

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
      -> decltype(attempt());

  /// Completes every pending operation with operation_aborted and gives back the slots. After
  /// it returns nothing here touches the shared memory of the queues.
  void shutdown() noexcept;

  /// Holds back queue `q` while a claimed result is used outside the waiter (see queue_hold).
  void hold(std::size_t q) noexcept;
  void unhold(std::size_t q) noexcept;

 private:
  struct op_base {
    op_base* next = nullptr;
    op_base* prev = nullptr;
    std::uint64_t id = 0;
    std::size_t queue = 0;
    bool parked = false;         // false while it spins through the executor: nothing armed for it
    virtual bool attempt() = 0;  // under the mutex
    virtual void finish(std::error_code abort, bool may_dispatch) = 0;  // frees the op
    virtual void destroy() noexcept = 0;                                // frees without calling
   protected:
    ~op_base() = default;
  };
  template <class R, class Attempt, class Handler>
  class op;
  struct list {
    op_base* head = nullptr;
    op_base* tail = nullptr;
    bool empty() const noexcept { return head == nullptr; }
    void push_back(op_base* o) noexcept;
    void remove(op_base* o) noexcept;
  };
  struct cancel_handler {
    std::weak_ptr<waiter> self;
    std::uint64_t id;
    void operator()(asio::cancellation_type type) const;
  };
  // Operations taken out of their lists under the mutex, delivered after it is dropped, in the
  // order they were taken.
  struct batch {
    op_base* head = nullptr;
    op_base* tail = nullptr;
    std::array<std::uint32_t, max_queues> taken{};
    void push(op_base* o) noexcept;
  };
  // Why a re-check timer was set; the latest one wins.
  enum class timer_reason : std::uint8_t { none, stall, slotless, safety };

  // Puts `o` in its list; it spins through the executor for `spin` (re-checking between other
  // handlers, so a peer in this very thread can make progress), then parks.
  void enqueue(op_base* o, std::chrono::nanoseconds spin);
  void spin_step(std::uint64_t id, std::size_t q, std::chrono::steady_clock::time_point deadline,
                 std::uint32_t step);
  // Parks `o`: arms, re-checks the queue's head, watches. Drops the lock; completions are
  // posted from an initiating function, dispatched otherwise.
  void park(std::unique_lock<std::mutex>& lock, op_base* o, bool in_initiation);
  // A spinning wait's look: if it may go and its condition holds, completes it (dropping the
  // lock).
  bool complete_if_ready(std::unique_lock<std::mutex>& lock, op_base* o);
  // Takes `o` out of its list and completes it alone. Drops the lock.
  void complete(std::unique_lock<std::mutex>& lock, op_base* o, std::error_code ec,
                bool may_dispatch);
  // Tries `o`, noting whether it was held up by another participant.
  bool try_op(op_base* o);
  // True if the head of queue q may be tried now: nothing started before it is still out of
  // the list undelivered (but for `taken` of this very batch, and the one this thread is
  // delivering now), and no claim is held.
  bool gate_open(std::size_t q, std::uint32_t taken) const noexcept;
  std::uint32_t delivering_here(std::size_t q) const noexcept;
  // Arms queue q's slot for the parked operations in its list.
  void arm_for(std::size_t q) noexcept;
  // Disarms queue q's slot once no operation is parked on it; true if a ring claimed for us
  // must go on.
  bool withdraw(std::size_t q) noexcept;
  bool any_parked(std::size_t q) const noexcept;
  bool any_parked() const noexcept;
  op_base* find(std::size_t q, std::uint64_t id) const noexcept;
  void cancel(std::uint64_t id);
  // `generation` tells a re-check timer wait that watch() has since replaced from the current
  // one.
  void on_wake(const std::error_code& ec, bool from_bell, std::uint64_t generation);
  // Has the waiter `w` (if it still exists) re-check on `ex`: a wake-up from outside its
  // reactor (the wait hub), or a head the gate held back that may go now.
  static void post_recheck(std::weak_ptr<waiter> w, const asio::any_io_executor& ex);
  // Completes what can proceed, then settles; drops the lock. Returns how many completed.
  std::size_t recheck(std::unique_lock<std::mutex>& lock);
  // Moves the heads that may go and can proceed, queue by queue, to `done`, for the queues in
  // `mask` (bit q).
  void take_ready(batch& done, unsigned mask = ~0u);
  // Delivers `done` (the lock dropped), with `ec` if set (an abort), and counts it out.
  void deliver_batch(batch& done, bool may_dispatch, std::error_code ec = {});
  // Passes on the rings that withdrawing from the queues in `mask` found claimed for us.
  void withdraw_and_forward(unsigned mask) noexcept;
  // Empties the doorbell of rings already acted on.
  void drain() noexcept;
  // Starts the doorbell wait if an operation is parked, and the re-check timer if a parked
  // operation needs one (held up, slotless, or the safety net).
  void watch(std::unique_lock<std::mutex>& lock);
  // After completions have run (takes the mutex): once nothing is pending, has unwatch() run
  // after the handlers already queued; if a head was held back by the gate, re-checks.
  void settle();
  // Stops the doorbell wait and the timer if nothing is pending and the object looks idle: no
  // wait started since `seen` (started_), or `passes` trips through the queue spent.
  void unwatch(std::uint32_t seen, int passes);
  // A ping-pong on one CPU starts its next park within a few trips; a long run of waits that
  // complete at once is not worth a trip each.
  static constexpr int unwatch_passes = 16;
  bool nothing_pending() const noexcept;

  asio::any_io_executor ex_;
  spin_policy spin_;
  std::chrono::milliseconds safety_interval_;
  std::array<layout::wait_queue*, max_queues> queues_{};
  std::array<int, max_queues> slots_{no_slot, no_slot};
  // Where a queue had no free slot: our membership of the hub's group for it (made at the
  // first park), or none if the hub cannot run here.
  std::array<std::unique_ptr<wait_hub_member>, max_queues> hub_;
  std::array<bool, max_queues> hub_tried_{};
  // We armed slot q and have not withdrawn it. A slot never armed cannot have been claimed,
  // so completing a wait that only spun needs no disarm and forwards no ring.
  std::array<bool, max_queues> armed_{};
  std::size_t queue_count_ = 0;
  std::uint64_t doorbell_id_ = 0;
  asio::posix::stream_descriptor bell_;
  asio::steady_timer timer_;

  std::mutex mutex_;
  std::array<list, max_queues> pending_;
  // Per queue, read without the mutex by the ready path of async_wait (relaxed: the ordering
  // that matters, an operation started after another completed, comes through the executor's
  // own synchronisation; concurrent starts have no order to keep):
  std::array<std::atomic<std::uint32_t>, max_queues> queued_{};      // in pending_[q]
  std::array<std::atomic<std::uint32_t>, max_queues> delivering_{};  // taken, not yet delivered
  std::array<std::atomic<std::uint32_t>, max_queues> holds_{};       // claims in use (hold)
  std::array<bool, max_queues> gated_{};  // a head was held back by the gate since (mutex)
  std::uint64_t next_id_ = 1;
  bool bell_waiting_ = false;
  bool drain_due_ = false;  // the doorbell rang since its last drain (see on_wake)
  bool timer_waiting_ = false;
  timer_reason timer_reason_ = timer_reason::none;
  std::uint64_t timer_generation_ = 0;  // of the timer wait started last
  bool stalled_ = false;                // a parked head's last attempt was held up
  std::chrono::milliseconds stall_backoff_ = stall_interval;
  bool unwatch_posted_ = false;
  bool unwatching_ = false;  // unwatch() cancelled the waits; watch() has not started one since
  // Counts async_wait calls; unwatch() compares two readings.
  std::atomic<std::uint32_t> started_{0};
  bool closed_ = false;
  std::atomic<bool> closed_flag_{false};  // closed_, readable without the mutex
  std::atomic<bool> crowded_{false};      // our last yield gave the CPU away (see spin_step)
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
  /// Lets the queue's next operation go.
  void release() noexcept {
    if (auto* w = std::exchange(w_, nullptr)) w->unhold(q_);
  }

 private:
  waiter* w_ = nullptr;
  std::size_t q_ = 0;
};

// ---- implementation ------------------------------------------------------------------------

/// The waiter and queue whose completion this thread is delivering: a handler run inline by
/// that delivery may start the next operation of the queue on the ready path.
struct delivery_mark {
  const waiter* w = nullptr;
  std::size_t q = 0;
};
inline thread_local delivery_mark current_delivery;

template <class R, class Attempt, class Handler>
class waiter::op final : public op_base {
  using default_alloc = asio::recycling_allocator<void>;
  using alloc_type = typename std::allocator_traits<
      asio::associated_allocator_t<Handler, default_alloc>>::template rebind_alloc<op>;
  using work_type = std::decay_t<
      typename asio::prefer_result<asio::associated_executor_t<Handler, asio::any_io_executor>,
                                   asio::execution::outstanding_work_t::tracked_t>::type>;

 public:
  static op* make(Handler&& h, Attempt&& a, const asio::any_io_executor& ex) {
    alloc_type alloc(asio::get_associated_allocator(h, default_alloc()));
    op* p = std::allocator_traits<alloc_type>::allocate(alloc, 1);
    try {
      return new (p) op(std::move(h), std::move(a), ex);
    } catch (...) {
      std::allocator_traits<alloc_type>::deallocate(alloc, p, 1);
      throw;
    }
  }

  bool attempt() override {
    if (auto r = attempt_()) {
      result_ = std::move(*r);
      return true;
    }
    return false;
  }

  void finish(std::error_code abort, bool may_dispatch) override {
    // The allocator before the handler moves: a moved-from handler may not still have it.
    alloc_type alloc(asio::get_associated_allocator(handler_, default_alloc()));
    Handler h(std::move(handler_));
    work_type work(std::move(work_));
    outcome<R> r = abort ? outcome<R>{abort, {}} : std::move(result_);
    free_with(alloc);  // free our memory before the upcall, which may start the next operation
    deliver<R>(std::move(h), work, std::move(r), may_dispatch);
  }

  void destroy() noexcept override {
    alloc_type alloc(asio::get_associated_allocator(handler_, default_alloc()));
    free_with(alloc);
  }

 private:
  op(Handler&& h, Attempt&& a, const asio::any_io_executor& ex)
      : handler_(std::move(h)),
        attempt_(std::move(a)),
        // Keeps the handler's execution context running while we are parked outside it.
        work_(asio::prefer(asio::get_associated_executor(handler_, ex),
                           asio::execution::outstanding_work.tracked)) {}
  ~op() = default;

  void free_with(alloc_type& alloc) noexcept {
    this->~op();
    std::allocator_traits<alloc_type>::deallocate(alloc, this, 1);
  }

  Handler handler_;
  Attempt attempt_;
  outcome<R> result_;
  work_type work_;
};

inline std::uint32_t waiter::delivering_here(std::size_t q) const noexcept {
  return current_delivery.w == this && current_delivery.q == q ? 1 : 0;
}

inline bool waiter::gate_open(std::size_t q, std::uint32_t taken) const noexcept {
  // relaxed: see the members; under the mutex or on the thread that started the operation.
  return holds_[q].load(std::memory_order_relaxed) == 0 &&
         delivering_[q].load(std::memory_order_relaxed) == taken + delivering_here(q);
}

template <class Attempt>
auto waiter::try_now(std::size_t q, Attempt& attempt) -> decltype(attempt()) {
  if (closed_flag_.load(std::memory_order_acquire)) return {};
  if (queued_[q].load(std::memory_order_relaxed) != 0 || !gate_open(q, 0)) return {};
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
void waiter::async_wait(std::size_t q, Attempt attempt, Handler&& handler) {
  // An operation started (say, a deferred one launched) after close touches nothing.
  if (closed_flag_.load(std::memory_order_acquire))
    return post_result<R>(std::move(handler), ex_, {asio::error::bad_descriptor, {}});
  // relaxed, and a load and a store rather than an increment: a hint for unwatch(), which a
  // count lost to a concurrent call only makes stop watching a trip early.
  started_.store(started_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  // Ready path: nothing started earlier is still waiting, and the condition already holds.
  // Posted, as Asio posts an immediate result. (No pause-spin here: a result it caught would be
  // posted all the same, the trip through the scheduler that the spin below costs, after the
  // spin's own time; docs/performance.md.)
  if (queued_[q].load(std::memory_order_relaxed) == 0 && gate_open(q, 0))
    if (auto r = attempt()) return post_result<R>(std::move(handler), ex_, std::move(*r));

  auto slot = asio::get_associated_cancellation_slot(handler);
  op_base* o =
      op<R, Attempt, std::decay_t<Handler>>::make(std::move(handler), std::move(attempt), ex_);
  o->queue = q;
  {
    std::lock_guard lock(mutex_);
    o->id = next_id_++;
  }
  if (slot.is_connected())
    slot.template emplace<cancel_handler>(cancel_handler{weak_from_this(), o->id});
  enqueue(o, std::chrono::nanoseconds(spin_.budget()));
}

template <class Attempt>
auto waiter::wait(std::size_t q, Attempt attempt, std::chrono::nanoseconds timeout)
    -> decltype(attempt()) {
  take_stall_note();
  if (auto r = attempt()) return r;
  using clock = std::chrono::steady_clock;
  const bool forever = timeout.count() < 0;
  const auto deadline = forever ? clock::time_point::max() : clock::now() + timeout;
  if (timeout.count() != 0)
    if (auto r = spin_.spin(attempt)) return r;
  std::optional<sleeper> s;  // made at the first park: a poll or a spin that succeeds needs none
  std::optional<clock::time_point> slept_at;
  auto stall_slice = std::chrono::nanoseconds(stall_interval);
  for (;;) {
    const auto now = clock::now();
    if (!forever && now >= deadline) return attempt();
    if (!s) s.emplace(*queues_[q]);
    s->announce();
    take_stall_note();
    if (auto r = attempt()) {  // the re-check after announcing ourselves
      // As for async waits: woken soon after parking means a longer spin would have caught it.
      if (slept_at) spin_.woken_after(clock::now() - *slept_at);
      return r;
    }
    // Sleep until woken; held up by another participant, look again after its patience (less
    // often while it lives); with the safety net, at least that often.
    auto slice = std::chrono::nanoseconds::max();
    if (take_stall_note()) {
      slice = stall_slice;
      stall_slice = std::min<std::chrono::nanoseconds>(stall_slice * 2, stall_interval_max);
    } else {
      stall_slice = stall_interval;
    }
    if (safety_interval_.count() > 0)
      slice = std::min<std::chrono::nanoseconds>(slice, safety_interval_);
    if (!forever) slice = std::min<std::chrono::nanoseconds>(slice, deadline - now);
    slept_at = clock::now();
    s->sleep(slice == std::chrono::nanoseconds::max() ? std::chrono::nanoseconds(-1) : slice);
  }
}

}  // namespace shmio::detail
