#include "shmio/detail/waiter.hpp"

#include <new>

#include "shmio/detail/platform.hpp"

namespace shmio {
namespace {
// relaxed: counters read for statistics only.
std::atomic<std::uint64_t> safety_rechecks{0};
std::atomic<std::uint64_t> safety_finds{0};
std::atomic<std::uint64_t> stall_rechecks{0};
std::atomic<std::uint64_t> slotless_rechecks{0};
}  // namespace

wait_counters wait_statistics() noexcept {
  return {safety_finds.load(std::memory_order_relaxed),
          safety_rechecks.load(std::memory_order_relaxed),
          stall_rechecks.load(std::memory_order_relaxed),
          slotless_rechecks.load(std::memory_order_relaxed)};
}

}  // namespace shmio

namespace shmio::detail {

void waiter::cancel_handler::operator()(asio::cancellation_type type) const {
  // Every kind is honoured: a cancelled wait has consumed nothing, so it has no side effects.
  if ((type & (asio::cancellation_type::terminal | asio::cancellation_type::partial |
               asio::cancellation_type::total)) == asio::cancellation_type::none)
    return;
  if (auto w = self.lock()) w->cancel(id);
}

waiter::waiter(const asio::any_io_executor& ex, std::span<layout::wait_queue* const> queues,
               wait_strategy strategy, std::error_code& ec)
    : ex_(ex),
      spin_(strategy),
      safety_interval_(std::max(strategy.safety_recheck, std::chrono::milliseconds(0))),
      reactor_(ex, queues, ec) {}

waiter::~waiter() {
  shutdown();
}

bool waiter::any_parked() const noexcept {
  for (std::size_t q = 0; q < reactor_.queue_count(); ++q)
    if (ops_[q].any_parked()) return true;
  return false;
}

bool waiter::nothing_pending() const noexcept {
  for (std::size_t q = 0; q < reactor_.queue_count(); ++q)
    if (!ops_[q].empty()) return false;
  return true;
}

void waiter::unhold(std::size_t q) noexcept {
  std::lock_guard lock(mutex_);
  if (!ops_[q].unhold() || closed_ || !ops_[q].take_gated()) return;
  // Not inline: the holder runs in its handler's context, about to call the handler.
  post_recheck(weak_from_this(), ex_);
}

void waiter::delivered(std::size_t q) noexcept {
  if (!ops_[q].delivered()) return;
  // Reached inline from a batch of this queue: the batch's settle() looks at the gate.
  if (current_delivery == &ops_[q]) return;
  std::lock_guard lock(mutex_);
  if (closed_ || !ops_[q].gate_open(0) || !ops_[q].take_gated()) return;
  // Not inline: we run in the handler's context, about to call it.
  post_recheck(weak_from_this(), ex_);
}

void waiter::post_recheck(std::weak_ptr<waiter> w, const asio::any_io_executor& ex) {
  asio::post(ex, [w = std::move(w)] {
    if (auto self = w.lock()) {
      std::unique_lock lock(self->mutex_);
      if (!self->closed_) self->recheck(lock);
    }
  });
}

bool waiter::try_op(wait_op* o) {
  take_stall_note();
  if (o->attempt()) return true;
  if (take_stall_note() && o->parked) stalled_ = true;
  return false;
}

void waiter::take_ready(op_batch& done, unsigned mask, bool may_dispatch) {
  auto try_it = [this](wait_op* o) { return try_op(o); };
  // Looked at from our executor, a handler on it is dispatched inline.
  auto inline_after = [&](const wait_op* o) { return may_dispatch && o->handler_runs_on(ex_); };
  for (std::size_t q = 0; q < reactor_.queue_count(); ++q)
    if ((mask & (1u << q)) != 0) ops_[q].take_ready(done, q, try_it, inline_after);
}

void waiter::withdraw_idle(unsigned mask) noexcept {
  // Under the mutex: shutdown() cannot have let the memory go. A wait still spinning needs no
  // ring: it polls, and parks (arming) when its budget is spent.
  for (std::size_t q = 0; q < reactor_.queue_count(); ++q)
    if ((mask & (1u << q)) != 0 && !ops_[q].any_parked()) reactor_.withdraw(q);
}

void waiter::arm_for(std::size_t q, std::uint32_t taken) noexcept {
  // An arming is followed by a look at the head, or a wake-one ring it took in (re-arming
  // consumes the claim) stays with a wait that never looked, and is lost if that wait is then
  // cancelled (models/README.md, F3). A head the gate holds back is not armed for, and an
  // arming left from before the gate closed (a batch that stopped at a handler of another
  // executor) is withdrawn: a wake-one ring it takes in would wait, unlooked at, for as long as
  // that handler is not reached (its io_context may not run for a while), beside a sleeper in
  // another process that could take the message; withdrawing passes it on. The gate's opening
  // re-checks (take_gated), arming then.
  if (!ops_[q].gate_open(taken)) {
    reactor_.withdraw(q);
    ops_[q].note_gated();
    return;
  }
  // The hub calls this from its thread when the queue rings: look again on our executor.
  reactor_.arm(q, [this]() -> std::function<void()> {
    return [w = weak_from_this(), ex = ex_] { post_recheck(w, ex); };
  });
}

void waiter::enqueue(wait_op* o, std::chrono::nanoseconds spin, bool first_in_line) {
  std::unique_lock lock(mutex_);
  if (closed_) {
    lock.unlock();
    return o->finish(asio::error::operation_aborted, false, {});
  }
  const std::size_t q = o->queue;
  const bool first = ops_[q].empty();
  // In the list while spinning, so that cancellation finds it.
  if (first_in_line)
    ops_[q].push_front(o);
  else
    ops_[q].push(o);
  // With others in the list, or with no time to spin: park now.
  if (spin.count() <= 0 || !first) return park(lock, o, true);
  const auto deadline = std::chrono::steady_clock::now() + spin;
  asio::post(ex_, [self = shared_from_this(), id = o->id, q, deadline] {
    self->spin_step(id, q, deadline, 1);
  });
}

void waiter::spin_step(std::uint64_t id, std::size_t q,
                       std::chrono::steady_clock::time_point deadline, std::uint32_t step) {
  std::unique_lock lock(mutex_);
  wait_op* o = closed_ ? nullptr : ops_[q].find(id);
  if (!o) return;  // cancelled, or completed by a ring meanwhile
  const bool crowded = trips_.crowded();
  if (trips_.look([&] { return complete_if_ready(lock, o); }, crowded)) return;
  if (std::chrono::steady_clock::now() >= deadline) {
    spin_.spin_failed();
    return park(lock, o, false);
  }
  // Copied under the lock: retire() may let ours go from the handle's thread.
  const asio::any_io_executor ex = ex_;
  lock.unlock();
  if (executor_spin::yield_due(step, crowded)) {  // let a peer that shares this CPU run
    trips_.yield();
    // A peer on this CPU may have answered while it had the CPU: look before paying a trip.
    lock.lock();
    o = closed_ ? nullptr : ops_[q].find(id);
    if (!o || complete_if_ready(lock, o)) return;
    lock.unlock();
  }
  asio::post(ex, [self = shared_from_this(), id, q, deadline, step] {
    self->spin_step(id, q, deadline, step + 1);
  });
}

bool waiter::complete_if_ready(std::unique_lock<std::mutex>& lock, wait_op* o) {
  op_queue& ops = ops_[o->queue];
  if (ops.head() != o) return false;
  if (!ops.gate_open(0)) {
    ops.note_gated();
    return false;
  }
  if (!try_op(o)) return false;
  spin_.spin_succeeded();
  complete(lock, o, {}, true);  // we run on the executor, outside any initiator
  return true;
}

void waiter::park(std::unique_lock<std::mutex>& lock, wait_op* o, bool in_initiation) {
  const std::size_t q = o->queue;
  if (!any_parked()) parked_since_ = std::chrono::steady_clock::now();
  o->parked = true;
  // The ring that woke an earlier wait is still in the doorbell (see on_bell): out with it
  // before arming, or the watch below would report it at once.
  if (reactor_.drain_due()) reactor_.drain();
  arm_for(q);
  // The re-check after arming: from here on a publication either is seen now or rings us. It
  // tries the queue's head, not `o`: what `o` could take belongs to those before it.
  op_batch done;
  take_ready(done, 1u << q, !in_initiation);
  if (!done.empty()) withdraw_idle(1u << q);
  watch();
  lock.unlock();
  if (done.empty()) return;
  deliver_and_settle(done, !in_initiation);
}

void waiter::complete(std::unique_lock<std::mutex>& lock, wait_op* o, std::error_code ec,
                      bool may_dispatch) {
  const std::size_t q = o->queue;
  op_batch one;
  ops_[q].take(o, one);
  // Before the upcall: the handler may destroy the object and with it the shared memory.
  withdraw_idle(1u << q);
  lock.unlock();
  deliver_and_settle(one, may_dispatch, ec);
}

void waiter::cancel(std::uint64_t id) {
  std::unique_lock lock(mutex_);
  wait_op* found = nullptr;
  for (std::size_t q = 0; q < reactor_.queue_count() && !found; ++q)
    found = ops_[q].find(id);
  if (!found) return;  // it completed first
  const std::size_t q = found->queue;
  const bool was_head = ops_[q].head() == found;
  // A cancelled wait never swallows a wake-up another waiter needs: complete() passes it on.
  complete(lock, found, asio::error::operation_aborted, false);
  // The next head may be able to complete without any change in the ring (an operation whose
  // result was known when it started, held back only to keep the order): look at it now.
  if (!was_head) return;
  lock.lock();
  if (!closed_ && !ops_[q].empty()) post_recheck(weak_from_this(), ex_);
}

void waiter::on_bell(const std::error_code& ec) {
  std::unique_lock lock(mutex_);
  // A ring is drained only before the doorbell is watched again (recheck, park), not here: the
  // operations it completes, and the answer their handlers send at once, go first, and the
  // drain (a system call) comes off the path between a ring and the answer to it. A cancelled
  // watch (nothing was pending) saw no ring. A ring that is in the socket all the same makes
  // the next watch's registration report it at once, and that wake drains it.
  reactor_.bell_done(ec);
  if (closed_) return;
  // Only a parked wait was woken: a ring left over from an earlier park says nothing about
  // how long a spin should be.
  if (!ec && any_parked()) spin_.woken_after(std::chrono::steady_clock::now() - parked_since_);
  recheck(lock);
}

void waiter::on_timer(const std::error_code& ec, std::uint64_t generation) {
  std::unique_lock lock(mutex_);
  timer_reason reason;
  // A timer wait replaced by a sooner one (watch): the newer wait is pending and re-checks.
  if (!reactor_.timer_done(ec, generation, reason) || closed_) return;
  if (reason == timer_reason::stall) {
    stall_rechecks.fetch_add(1, std::memory_order_relaxed);
    stall_backoff_ = std::min(stall_backoff_ * 2, std::chrono::milliseconds(stall_backoff::max));
  }
  if (reason == timer_reason::slotless) slotless_rechecks.fetch_add(1, std::memory_order_relaxed);
  // A ring already in the doorbell is a wake-up on its way, not one the re-check rescued.
  const bool ring_pending = reason == timer_reason::safety && reactor_.ring_waiting();
  const std::size_t completed = recheck(lock);
  if (reason == timer_reason::safety) {
    safety_rechecks.fetch_add(1, std::memory_order_relaxed);
    if (completed != 0 && !ring_pending) safety_finds.fetch_add(1, std::memory_order_relaxed);
  }
}

std::size_t waiter::recheck(std::unique_lock<std::mutex>& lock) {
  unsigned had_pending = 0;
  for (std::size_t q = 0; q < reactor_.queue_count(); ++q) {
    if (ops_[q].empty()) continue;
    had_pending |= 1u << q;
    if (ops_[q].any_parked()) arm_for(q);  // re-arm before re-checking; a spinner needs no ring
  }
  stalled_ = false;  // each parked head that is still held up says so again
  op_batch done;
  take_ready(done, had_pending, true);  // we run on the I/O executor
  if (reactor_.drain_due() && any_parked()) {
    // Still parked, so the doorbell is about to be watched again: drain it, then arm and look
    // again, as a fresh park does. A ring drained here may have claimed the slot after the
    // first arming, and stand for a publication after the first look (models/README.md, F8).
    reactor_.drain();
    // A queue whose batch stopped gets no look now, so no arming either (see arm_for): it is
    // looked at, and armed, once its last handler is reached.
    for (std::size_t q = 0; q < reactor_.queue_count(); ++q)
      if (ops_[q].any_parked() && !done.stopped(q)) arm_for(q, done.taken(q));
    take_ready(done, had_pending, true);
  }
  withdraw_idle(had_pending);
  if (!nothing_pending()) parked_since_ = std::chrono::steady_clock::now();
  watch();
  lock.unlock();
  const std::size_t count = done.size();
  deliver_and_settle(done, true);  // we run on the I/O executor, outside any initiating function
  return count;
}

void waiter::deliver_and_settle(op_batch& done, bool may_dispatch, std::error_code ec) {
  try {
    done.deliver(ops_, weak_from_this(), may_dispatch, ec);
  } catch (...) {
    // A handler threw: what is left of the batch goes out from a trip through our executor,
    // in order and as it would have (delivered at once, each side by side, the handlers of
    // different executors could run in either order). They still count in their gates.
    asio::any_io_executor ex;
    {
      std::lock_guard lock(mutex_);  // retire() may let ours go from the handle's thread
      ex = ex_;
    }
    if (!done.empty() && ex) {
      auto rest = std::make_shared<op_batch>(std::move(done));
      asio::post(
          ex, [self = shared_from_this(), rest, ec] { self->deliver_and_settle(*rest, true, ec); });
    } else if (!done.empty()) {
      // Retired (the handler closed the object): each of the rest is posted to its own
      // handler's executor, with the result its attempt took.
      try {
        done.deliver(ops_, weak_from_this(), false, ec);
      } catch (...) {  // a post's allocation failed: the batch's destructor posts the rest
      }
    }
    settle();
    throw;
  }
  settle();
}

void waiter::watch() {
  // Only a parked operation needs the doorbell or a timer: a spinning one re-checks through
  // the executor, and a watch started for it alone would mostly be cancelled unused.
  if (!any_parked()) return;
  reactor_.watch_bell([this] {
    return [self = shared_from_this()](const std::error_code& ec) { self->on_bell(ec); };
  });
  bool slotless = false;
  for (std::size_t q = 0; q < reactor_.queue_count(); ++q)
    slotless |= ops_[q].any_parked() && reactor_.slotless(q);
  timer_reason reason = timer_reason::none;
  std::chrono::nanoseconds interval{0};
  if (stalled_) {
    reason = timer_reason::stall;
    interval = stall_backoff_;
  } else {
    stall_backoff_ = stall_backoff::first;
    if (slotless) {
      reason = timer_reason::slotless;
      interval = slotless_interval;
    } else if (safety_interval_.count() > 0) {
      reason = timer_reason::safety;
      interval = safety_interval_;
    }
  }
  // Nothing to look at on a timer: a wait that is not held up is woken by the publication it
  // waits for. A timer still pending fires once, re-checks, and is not set again.
  if (reason == timer_reason::none) return;
  reactor_.watch_timer(reason, interval, [this] {
    return [self = shared_from_this()](const std::error_code& ec, std::uint64_t generation) {
      self->on_timer(ec, generation);
    };
  });
}

void waiter::settle() {
  std::lock_guard lock(mutex_);
  if (closed_) return;
  // A head held back while earlier operations were out being delivered: they are out now.
  for (std::size_t q = 0; q < reactor_.queue_count(); ++q) {
    if (!ops_[q].gate_open(0) || !ops_[q].take_gated()) continue;
    // Posted: settle() may run at the end of an initiating function (park).
    post_recheck(weak_from_this(), ex_);
    return;
  }
  // Decided after the completions have run, not before: a handler that starts its next wait
  // inline keeps the doorbell wait and the timer as they are, rather than having them
  // cancelled and registered again (an epoll_ctl and a timerfd_settime per park).
  if (!nothing_pending() || !reactor_.watching() || reactor_.unwatching() || unwatch_posted_)
    return;
  // A completion that was posted rather than run inline starts its next wait from the
  // executor's queue: decide once it has had its turn.
  unwatch_posted_ = true;
  asio::post(ex_, [self = shared_from_this(), seen = started_.load(std::memory_order_relaxed)] {
    self->unwatch(seen, unwatch_passes);
  });
}

void waiter::unwatch(std::uint32_t seen, int passes) {
  std::lock_guard lock(mutex_);
  if (closed_ || !nothing_pending()) {
    unwatch_posted_ = false;
    return;
  }
  // Waits were started since (and completed at once): the handlers are still busy with this
  // object, so look again after their next turn, a few times at most. Nothing started: the
  // object is idle, and io_context::run() may return after this one trip.
  const std::uint32_t started = started_.load(std::memory_order_relaxed);
  if (started != seen && passes > 1) {
    asio::post(
        ex_, [self = shared_from_this(), started, passes] { self->unwatch(started, passes - 1); });
    return;
  }
  unwatch_posted_ = false;
  reactor_.unwatch();
}

void waiter::shutdown() noexcept {
  // A forked child's copy, in a child that has not taken the context over: the mutex may have
  // been held at the fork by a thread the child does not have, and so may the context's own
  // locks. The operations are the parent's, whose handlers run there; their copies here are
  // left alone, as is the context they would complete through. (The child runs one thread
  // here: it starts nothing on an inherited handle, docs/architecture.md.)
  if (reactor_.inherited() && !reactor_.context_taken_over()) {
    if (closed_) return;
    closed_ = true;
    closed_flag_.store(true, std::memory_order_release);  // as below
    reactor_.abandon_in_child();
    return;
  }
  std::unique_lock lock(mutex_);
  if (closed_) return;
  closed_ = true;
  // release: pairs with the acquire in async_wait/try_now, whose callers then touch nothing.
  closed_flag_.store(true, std::memory_order_release);
  op_batch done;
  for (std::size_t q = 0; q < reactor_.queue_count(); ++q)
    while (wait_op* o = ops_[q].head())
      ops_[q].take(o, done);
  reactor_.close();  // passes on rings claimed for us, as a cancelled wait does
  lock.unlock();
  // Posted: nothing runs here. (From ~waiter the tickets' owner is already gone: its gates no
  // longer matter.)
  try {
    done.deliver(ops_, weak_from_this(), false, asio::error::operation_aborted);
  } catch (...) {  // a post's allocation failed: the batch's destructor posts the rest
  }
}

void waiter::retire() noexcept {
  shutdown();
  if (reactor_.inherited() && !reactor_.context_taken_over()) {
    // The executor's last copy may reach into its context (a strand's does): left to leak in
    // the child, as the context is (shutdown, above). If there is no memory for that, it
    // stays ours, and goes with us.
    static_cast<void>(new (std::nothrow) asio::any_io_executor(std::move(ex_)));
    return;
  }
  asio::any_io_executor gone;
  std::lock_guard lock(mutex_);
  // Every other use of ex_ from here on is under the mutex and stops at closed_, or is an
  // initiation, which the handle's close ends.
  gone = std::move(ex_);
  ex_ = asio::any_io_executor();
}

}  // namespace shmio::detail
