#pragma once
// The process-local half of a wait: turns "wait until this shared-memory condition holds" into
// an Asio operation (async_wait) or a blocking call (wait).
//
// One waiter serves one I/O object. It owns a doorbell (a datagram socket its executor's reactor
// watches) and one slot in each shared wait_queue the object waits on. Pending operations sit in
// per-queue FIFO lists; whenever the doorbell rings (or the rescue timer fires) every pending
// operation re-checks its condition. Each operation completes exactly once: by its condition,
// by cancellation through its slot, or by shutdown, whichever takes it out of its list first
// under the mutex.

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

#include "shmio/detail/immediate.hpp"
#include "shmio/detail/layout.hpp"
#include "shmio/detail/spin.hpp"
#include "shmio/detail/wait_queue.hpp"

namespace shmio::detail {

/// The value of an operation that completes with an error_code only.
struct no_value {};

/// What one attempt at a wait's condition produced. An attempt returns std::optional<outcome>:
/// empty means "not yet, keep waiting".
template <class R>
struct outcome {
  std::error_code ec;
  R value{};
};

/// Invokes `h` with (ec) or (ec, value), through `ex`: posted, or dispatched when allowed.
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

/// deliver() for a result ready inside the initiating function: posted, unless the handler
/// resumes a suspended coroutine (immediate.hpp). Then it is called here, the first of a chain,
/// or handed to the chain already running on this thread: the initiation runs inside the
/// coroutine, so on its executor already.
template <class R, class Handler, class Executor>
void deliver_immediate(Handler&& h, const Executor& ex, outcome<R>&& r) {
  using handler_type = std::decay_t<Handler>;
  if constexpr (resumes_coroutine<handler_type>::value) {
    struct resumption {
      handler_type handler;
      outcome<R> result;
      void operator()() {
        if constexpr (std::is_same_v<R, no_value>)
          std::move(handler)(result.ec);
        else
          std::move(handler)(result.ec, std::move(result.value));
      }
    };
    if constexpr (immediate_chain::fits<resumption>) {
      asio::any_io_executor handler_ex = asio::get_associated_executor(h, ex);
      if (immediate_chain::running()) {
        resumption p{std::forward<Handler>(h), std::move(r)};
        if (!immediate_chain::defer(handler_ex, p)) asio::post(handler_ex, std::move(p));
        return;
      }
      return immediate_chain::start(std::move(handler_ex), [&] {
        resumption{std::forward<Handler>(h), std::move(r)}();
      });
    }
  }
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
  /// How often parked async waits re-check even without a ring: covers a signaller killed
  /// between publishing and ringing, and objects that found no free slot (those poll faster).
  static constexpr auto rescue_interval = std::chrono::milliseconds(200);
  static constexpr auto slotless_interval = std::chrono::milliseconds(1);

  waiter(const asio::any_io_executor& ex, std::span<layout::wait_queue* const> queues,
         wait_strategy strategy, std::error_code& ec);
  ~waiter();
  waiter(const waiter&) = delete;
  waiter& operator=(const waiter&) = delete;

  const asio::any_io_executor& get_executor() const noexcept { return ex_; }
  spin_policy& spin() noexcept { return spin_; }

  /// Starts an async wait on queue `q` for `attempt` (a callable returning
  /// std::optional<outcome<R>>). Completes inside this call only to resume a suspended coroutine
  /// (immediate.hpp).
  template <class R, class Attempt, class Handler>
  void async_wait(std::size_t q, Attempt attempt, Handler&& handler);

  /// Blocks until `attempt` yields or `timeout` passes (negative: no limit).
  template <class Attempt>
  auto wait(std::size_t q, Attempt attempt, std::chrono::nanoseconds timeout)
      -> decltype(attempt());

  /// Completes every pending operation with operation_aborted and gives back the slots.
  void shutdown() noexcept;

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
  using finished = std::array<op_base*, 8>;

  // Puts `o` in its list; it spins through the executor for `spin` (re-checking between other
  // handlers, so a peer in this very thread can make progress), then parks.
  void enqueue(op_base* o, std::chrono::nanoseconds spin);
  void spin_step(std::uint64_t id, std::size_t q, std::chrono::steady_clock::time_point deadline,
                 std::uint32_t step);
  void park(std::unique_lock<std::mutex>& lock, op_base* o);
  // A spinning wait's look: if its condition holds, completes it (dropping the lock).
  bool complete_if_ready(std::unique_lock<std::mutex>& lock, op_base* o);
  // Takes `o` out of its list and completes it; passes on a ring it may have swallowed; then
  // settles. Drops the lock.
  void complete(std::unique_lock<std::mutex>& lock, op_base* o, std::error_code ec,
                bool may_dispatch);
  // Arms queue q's slot for the parked operations in its list.
  void arm_for(std::size_t q) noexcept;
  // Disarms queue q's slot once no operation is parked on it; true if a ring claimed for us
  // must go on.
  bool withdraw(std::size_t q) noexcept;
  bool any_parked(std::size_t q) const noexcept;
  bool any_parked() const noexcept;
  op_base* find(std::size_t q, std::uint64_t id) const noexcept;
  void cancel(std::uint64_t id);
  // `generation` tells a rescue wait that watch() has since replaced from the current one.
  void on_wake(const std::error_code& ec, bool from_bell, std::uint64_t generation);
  // Completes what can proceed, then settles; drops the lock.
  void recheck(std::unique_lock<std::mutex>& lock);
  // Re-arms for the parked operations, then moves those that can proceed to `done`.
  void attempt_pending(op_base*& done);
  // Empties the doorbell of rings already acted on.
  void drain() noexcept;
  // Starts the doorbell wait and the rescue timer if an operation is parked; keeps them if
  // they run already (the rescue only if it fires soon enough).
  void watch(std::unique_lock<std::mutex>& lock);
  // After completions have run (takes the mutex): once nothing is pending, has unwatch() run
  // after the handlers already queued.
  void settle();
  // Stops the doorbell wait and the rescue timer if nothing is pending and the object looks
  // idle: no wait started since `seen` (started_), or `passes` trips through the queue spent.
  void unwatch(std::uint32_t seen, int passes);
  // A ping-pong on one CPU starts its next park within a few trips; a long run of waits that
  // complete at once is not worth a trip each (a park after it pays a timerfd_settime).
  static constexpr int unwatch_passes = 16;
  bool nothing_pending() const noexcept;
  bool nothing_pending_but(const op_base* o) const noexcept;

  asio::any_io_executor ex_;
  spin_policy spin_;
  std::array<layout::wait_queue*, max_queues> queues_{};
  std::array<int, max_queues> slots_{no_slot, no_slot};
  // We armed slot q and have not withdrawn it. A slot never armed cannot have been claimed,
  // so completing a wait that only spun needs no disarm and forwards no ring.
  std::array<bool, max_queues> armed_{};
  std::size_t queue_count_ = 0;
  std::uint64_t doorbell_id_ = 0;
  asio::posix::stream_descriptor bell_;
  asio::steady_timer rescue_;

  std::mutex mutex_;
  std::array<list, max_queues> pending_;
  std::uint64_t next_id_ = 1;
  bool bell_waiting_ = false;
  bool drain_due_ = false;  // the doorbell rang since its last drain (see on_wake)
  bool rescue_waiting_ = false;
  std::uint64_t rescue_generation_ = 0;  // of the rescue wait started last
  bool unwatch_posted_ = false;
  bool unwatching_ = false;  // unwatch() cancelled the waits; watch() has not started one since
  // Counts async_wait calls; unwatch() compares two readings.
  std::atomic<std::uint32_t> started_{0};
  bool closed_ = false;
  std::atomic<bool> closed_flag_{false};  // closed_, readable without the mutex
  std::atomic<bool> crowded_{false};      // our last yield gave the CPU away (see spin_step)
  std::chrono::steady_clock::time_point parked_since_{};
};

// ---- implementation ------------------------------------------------------------------------

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
    Handler h(std::move(handler_));
    work_type work(std::move(work_));
    outcome<R> r = abort ? outcome<R>{abort, {}} : std::move(result_);
    destroy();  // free our memory before the upcall, which may start the next operation
    deliver<R>(std::move(h), work, std::move(r), may_dispatch);
  }

  void destroy() noexcept override {
    alloc_type alloc(asio::get_associated_allocator(handler_, default_alloc()));
    this->~op();
    std::allocator_traits<alloc_type>::deallocate(alloc, this, 1);
  }

 private:
  op(Handler&& h, Attempt&& a, const asio::any_io_executor& ex)
      : handler_(std::move(h)),
        attempt_(std::move(a)),
        // Keeps the handler's execution context running while we are parked outside it.
        work_(asio::prefer(asio::get_associated_executor(handler_, ex),
                           asio::execution::outstanding_work.tracked)) {}
  ~op() = default;

  Handler handler_;
  Attempt attempt_;
  outcome<R> result_;
  work_type work_;
};

template <class R, class Attempt, class Handler>
void waiter::async_wait(std::size_t q, Attempt attempt, Handler&& handler) {
  // An operation started (say, a deferred one launched) after close touches nothing.
  if (closed_flag_.load(std::memory_order_acquire))
    return deliver<R>(std::move(handler), ex_, {asio::error::bad_descriptor, {}}, false);
  // relaxed, and a load and a store rather than an increment: a hint for unwatch(), which a
  // count lost to a concurrent call only makes stop watching a trip early.
  started_.store(started_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  // Fast path: the condition already holds, or holds within a microsecond of pause-spinning.
  // Posted: the handler must not run inside the initiating function (but see immediate.hpp).
  if (auto r = attempt()) return deliver_immediate<R>(std::move(handler), ex_, std::move(*r));
  if (auto r = spin_.tight_spin(attempt))
    return deliver_immediate<R>(std::move(handler), ex_, std::move(*r));

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
  if (auto r = attempt()) return r;
  using clock = std::chrono::steady_clock;
  const bool forever = timeout.count() < 0;
  const auto deadline = forever ? clock::time_point::max() : clock::now() + timeout;
  if (timeout.count() != 0)
    if (auto r = spin_.spin(attempt)) return r;
  std::optional<sleeper> s;  // made at the first park: a poll or a spin that succeeds needs none
  std::optional<clock::time_point> slept_at;
  for (;;) {
    const auto now = clock::now();
    if (!forever && now >= deadline) return attempt();
    auto slice = forever ? std::chrono::nanoseconds(rescue_interval)
                         : std::min<std::chrono::nanoseconds>(deadline - now, rescue_interval);
    if (!s) s.emplace(*queues_[q]);
    s->announce();
    if (auto r = attempt()) {  // the re-check after announcing ourselves
      // As for async waits: woken soon after parking means a longer spin would have caught it.
      if (slept_at) spin_.woken_after(clock::now() - *slept_at);
      return r;
    }
    slept_at = clock::now();
    s->sleep(slice);
  }
}

}  // namespace shmio::detail
