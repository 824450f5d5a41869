#include "shmio/detail/waiter.hpp"

#include "shmio/detail/platform.hpp"

namespace shmio {
namespace {
// relaxed: counters read for statistics only.
std::atomic<std::uint64_t> safety_rechecks{0};
std::atomic<std::uint64_t> safety_finds{0};
std::atomic<std::uint64_t> stall_rechecks{0};
}  // namespace

wait_counters wait_statistics() noexcept {
  return {safety_finds.load(std::memory_order_relaxed),
          safety_rechecks.load(std::memory_order_relaxed),
          stall_rechecks.load(std::memory_order_relaxed)};
}

}  // namespace shmio

namespace shmio::detail {

void waiter::list::push_back(op_base* o) noexcept {
  o->next = nullptr;
  o->prev = tail;
  (tail ? tail->next : head) = o;
  tail = o;
}

void waiter::list::remove(op_base* o) noexcept {
  (o->prev ? o->prev->next : head) = o->next;
  (o->next ? o->next->prev : tail) = o->prev;
  o->next = o->prev = nullptr;
}

void waiter::batch::push(op_base* o) noexcept {
  o->next = nullptr;
  (tail ? tail->next : head) = o;
  tail = o;
  ++taken[o->queue];
}

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
      bell_(ex),
      timer_(ex) {
  queue_count_ = std::min(queues.size(), max_queues);
  for (std::size_t i = 0; i < queue_count_; ++i)
    queues_[i] = queues[i];
  platform::unique_fd fd = platform::open_doorbell(doorbell_id_, ec);
  if (ec) return;
  bell_.assign(fd.release(), ec);
  if (ec) return;
  // No free slot is not an error: that queue's waits park through the wait hub (arm_for).
  for (std::size_t i = 0; i < queue_count_; ++i)
    slots_[i] = claim_slot(*queues_[i], doorbell_id_);
}

waiter::~waiter() {
  shutdown();
}

bool waiter::any_parked(std::size_t q) const noexcept {
  for (const op_base* p = pending_[q].head; p; p = p->next)
    if (p->parked) return true;
  return false;
}

bool waiter::any_parked() const noexcept {
  for (std::size_t i = 0; i < queue_count_; ++i)
    if (any_parked(i)) return true;
  return false;
}

bool waiter::nothing_pending() const noexcept {
  for (std::size_t i = 0; i < queue_count_; ++i)
    if (!pending_[i].empty()) return false;
  return true;
}

waiter::op_base* waiter::find(std::size_t q, std::uint64_t id) const noexcept {
  for (op_base* o = pending_[q].head; o; o = o->next)
    if (o->id == id) return o;
  return nullptr;
}

void waiter::hold(std::size_t q) noexcept {
  // relaxed: read under the mutex or by the thread that took the hold (see queued_).
  holds_[q].fetch_add(1, std::memory_order_relaxed);
}

void waiter::unhold(std::size_t q) noexcept {
  std::lock_guard lock(mutex_);
  // relaxed: as in hold(); the mutex orders this against the next head's attempt.
  if (holds_[q].fetch_sub(1, std::memory_order_relaxed) != 1 || closed_) return;
  if (!gated_[q] || pending_[q].empty()) return;
  gated_[q] = false;
  // Not inline: the holder runs in its handler's context, about to call the handler.
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

bool waiter::try_op(op_base* o) {
  take_stall_note();
  if (o->attempt()) return true;
  if (take_stall_note() && o->parked) stalled_ = true;
  return false;
}

void waiter::take_ready(batch& done, unsigned mask) {
  for (std::size_t q = 0; q < queue_count_; ++q) {
    if ((mask & (1u << q)) == 0) continue;
    list& l = pending_[q];
    while (op_base* o = l.head) {
      if (!gate_open(q, done.taken[q])) {
        gated_[q] = true;  // settle() or unhold() looks again once the gate opens
        break;
      }
      if (!try_op(o)) break;  // FIFO: if the first cannot proceed, neither can the rest
      l.remove(o);
      // relaxed: see the members.
      queued_[q].fetch_sub(1, std::memory_order_relaxed);
      delivering_[q].fetch_add(1, std::memory_order_relaxed);
      done.push(o);
    }
  }
}

void waiter::deliver_batch(batch& done, bool may_dispatch, std::error_code ec) {
  const delivery_mark outer = current_delivery;
  while (op_base* o = done.head) {
    done.head = o->next;
    const std::size_t q = o->queue;
    current_delivery = {this, q};
    o->finish(ec, may_dispatch);  // frees o
    current_delivery = outer;
    delivering_[q].fetch_sub(1, std::memory_order_relaxed);
  }
  done.tail = nullptr;
}

void waiter::withdraw_and_forward(unsigned mask) noexcept {
  for (std::size_t q = 0; q < queue_count_; ++q)
    // Under the mutex: shutdown() cannot have let the memory go.
    if ((mask & (1u << q)) != 0 && withdraw(q)) notify_one(*queues_[q]);
}

void waiter::enqueue(op_base* o, std::chrono::nanoseconds spin) {
  std::unique_lock lock(mutex_);
  if (closed_) {
    lock.unlock();
    return o->finish(asio::error::operation_aborted, false);
  }
  const std::size_t q = o->queue;
  const bool first = pending_[q].empty();
  pending_[q].push_back(o);  // in the list while spinning, so that cancellation finds it
  queued_[q].fetch_add(1, std::memory_order_relaxed);
  // Behind others, or with no time to spin: park now.
  if (spin.count() <= 0 || !first) return park(lock, o, true);
  const auto deadline = std::chrono::steady_clock::now() + spin;
  asio::post(ex_, [self = shared_from_this(), id = o->id, q, deadline] {
    self->spin_step(id, q, deadline, 1);
  });
}

namespace {
// How long one trip through the executor re-checks, pause-spun. A trip costs far more than a
// re-check (Asio's scheduler polls its reactor, a system call, between handlers), so each trip
// looks for a while; meanwhile other handlers of this thread wait, so not long.
constexpr auto look_per_step = std::chrono::microseconds(2);
constexpr int looks_per_clock_read = 4;
// Trips between two sched_yield calls. A yield lets a peer on this same CPU run (without it our
// spin could not succeed there), but costs a system call even when nobody else is runnable.
constexpr std::uint32_t steps_per_yield = 4;
// A yield that gave the CPU to somebody means this CPU is shared, perhaps with the peer: then
// yield at every trip and skip the re-checks (they cannot succeed before we yield). Which yields
// did is the gauge's call; one per process, as the cost of a system call is the machine's.
yield_gauge process_yields;
}  // namespace

void waiter::spin_step(std::uint64_t id, std::size_t q,
                       std::chrono::steady_clock::time_point deadline, std::uint32_t step) {
  std::unique_lock lock(mutex_);
  op_base* o = closed_ ? nullptr : find(q, id);
  if (!o) return;  // cancelled, or completed by a ring meanwhile
  // relaxed: a hint about this CPU, shared by the waits of this object.
  const bool crowded = crowded_.load(std::memory_order_relaxed);
  const auto look_until = std::chrono::steady_clock::now() + look_per_step;
  for (int i = 1;; ++i) {
    if (complete_if_ready(lock, o)) return;
    if (crowded) break;
    platform::cpu_relax();
    if (i % looks_per_clock_read == 0 && std::chrono::steady_clock::now() >= look_until) break;
  }
  if (std::chrono::steady_clock::now() >= deadline) {
    spin_.spin_failed();
    return park(lock, o, false);
  }
  lock.unlock();
  if (crowded || step % steps_per_yield == 0) {  // let a peer that shares this CPU run
    const auto before = std::chrono::steady_clock::now();
    platform::yield();
    crowded_.store(process_yields.crowded(std::chrono::steady_clock::now() - before),
                   std::memory_order_relaxed);
    // A peer on this CPU may have answered while it had the CPU: look before paying a trip.
    lock.lock();
    o = closed_ ? nullptr : find(q, id);
    if (!o || complete_if_ready(lock, o)) return;
    lock.unlock();
  }
  asio::post(ex_, [self = shared_from_this(), id, q, deadline, step] {
    self->spin_step(id, q, deadline, step + 1);
  });
}

bool waiter::complete_if_ready(std::unique_lock<std::mutex>& lock, op_base* o) {
  const std::size_t q = o->queue;
  if (pending_[q].head != o) return false;
  if (!gate_open(q, 0)) {
    gated_[q] = true;
    return false;
  }
  if (!try_op(o)) return false;
  spin_.spin_succeeded();
  complete(lock, o, {}, true);  // we run on the executor, outside any initiator
  return true;
}

void waiter::park(std::unique_lock<std::mutex>& lock, op_base* o, bool in_initiation) {
  const std::size_t q = o->queue;
  if (!any_parked()) parked_since_ = std::chrono::steady_clock::now();
  o->parked = true;
  // The ring that woke an earlier wait is still in the doorbell (see on_wake): out with it
  // before arming, or the watch below would report it at once.
  if (drain_due_) drain();
  arm_for(q);
  // The re-check after arming: from here on a publication either is seen now or rings us. It
  // tries the queue's head, not `o`: what `o` could take belongs to those before it.
  batch done;
  take_ready(done, 1u << q);
  if (done.head) withdraw_and_forward(1u << q);
  watch(lock);
  lock.unlock();
  if (!done.head) return;
  deliver_batch(done, !in_initiation);
  settle();
}

void waiter::arm_for(std::size_t q) noexcept {
  if (slots_[q] != no_slot) {
    arm(*queues_[q], slots_[q]);
    armed_[q] = true;
    return;
  }
  if (!hub_tried_[q]) {
    hub_tried_[q] = true;
    // The hub calls this from its thread when the queue rings: look again on our executor.
    auto wake = [w = weak_from_this(), ex = ex_] { post_recheck(w, ex); };
    try {
      hub_[q] = wait_hub::join(*queues_[q], std::move(wake));
    } catch (const std::exception&) {
      // No memory for the membership: this queue's waits poll (slotless_interval).
    }
  }
  if (!hub_[q]) return;
  hub_[q]->arm();
  armed_[q] = true;
}

bool waiter::withdraw(std::size_t q) noexcept {
  // A wait still spinning needs no ring: it polls, and parks (arming) when its budget is spent.
  if (!armed_[q] || any_parked(q)) return false;
  armed_[q] = false;
  if (slots_[q] == no_slot) {
    if (hub_[q]) hub_[q]->withdraw();  // passes on a ring claimed for its group itself
    return false;
  }
  // A failed disarm means a signaller claimed our slot and rang us. A wake-one signaller rang
  // nobody else, so the ring must go on to another waiter, or it is swallowed (found by
  // models/wake_protocol.pml).
  return !disarm(*queues_[q], slots_[q]);
}

void waiter::complete(std::unique_lock<std::mutex>& lock, op_base* o, std::error_code ec,
                      bool may_dispatch) {
  const std::size_t q = o->queue;
  pending_[q].remove(o);
  queued_[q].fetch_sub(1, std::memory_order_relaxed);
  delivering_[q].fetch_add(1, std::memory_order_relaxed);
  // Before the upcall: the handler may destroy the object and with it the shared memory.
  withdraw_and_forward(1u << q);
  lock.unlock();
  batch one;
  one.push(o);
  deliver_batch(one, may_dispatch, ec);
  settle();
}

void waiter::cancel(std::uint64_t id) {
  std::unique_lock lock(mutex_);
  op_base* found = nullptr;
  for (std::size_t q = 0; q < queue_count_ && !found; ++q)
    found = find(q, id);
  if (!found) return;  // it completed first
  // A cancelled wait never swallows a wake-up another waiter needs: complete() passes it on.
  complete(lock, found, asio::error::operation_aborted, false);
}

void waiter::on_wake(const std::error_code& ec, bool from_bell, std::uint64_t generation) {
  std::unique_lock lock(mutex_);
  timer_reason reason = timer_reason::none;
  if (from_bell) {
    bell_waiting_ = false;
  } else {
    // A timer wait replaced by a sooner one (watch): the newer wait is pending and re-checks.
    if (generation != timer_generation_) return;
    timer_waiting_ = false;
    if (!ec) reason = timer_reason_;
  }
  if (closed_) return;
  // A ring is drained only before the doorbell is watched again (recheck, park), not here: the
  // operations it completes, and the answer their handlers send at once, go first, and the
  // drain (a system call) comes off the path between a ring and the answer to it. A cancelled
  // watch (nothing was pending) saw no ring. A ring that is in the socket all the same makes
  // the next watch's registration report it at once, and that wake drains it.
  if (from_bell && !ec) {
    drain_due_ = true;
    // Only a parked wait was woken: a ring left over from an earlier park says nothing about
    // how long a spin should be.
    if (any_parked()) spin_.woken_after(std::chrono::steady_clock::now() - parked_since_);
  }
  if (reason == timer_reason::stall) {
    stall_rechecks.fetch_add(1, std::memory_order_relaxed);
    stall_backoff_ = std::min(stall_backoff_ * 2, std::chrono::milliseconds(stall_interval_max));
  }
  // A ring already in the doorbell is a wake-up on its way, not one the re-check rescued.
  const bool ring_pending = reason == timer_reason::safety && !drain_due_ &&
                            platform::wait_readable(bell_.native_handle(), {});
  const std::size_t completed = recheck(lock);
  if (reason == timer_reason::safety) {
    safety_rechecks.fetch_add(1, std::memory_order_relaxed);
    if (completed != 0 && !ring_pending) safety_finds.fetch_add(1, std::memory_order_relaxed);
  }
}

void waiter::drain() noexcept {
  platform::drain_doorbell(bell_.native_handle());
  drain_due_ = false;
}

std::size_t waiter::recheck(std::unique_lock<std::mutex>& lock) {
  unsigned had_pending = 0;
  for (std::size_t q = 0; q < queue_count_; ++q) {
    if (pending_[q].empty()) continue;
    had_pending |= 1u << q;
    if (any_parked(q)) arm_for(q);  // re-arm before re-checking; a spinner needs no ring
  }
  stalled_ = false;  // each parked head that is still held up says so again
  batch done;
  take_ready(done, had_pending);
  if (drain_due_ && any_parked()) {
    // Still parked, so the doorbell is about to be watched again: drain it, then arm and look
    // again, as a fresh park does. A ring drained here may have claimed the slot after the
    // first arming, and stand for a publication after the first look (models/README.md, F8).
    drain();
    for (std::size_t q = 0; q < queue_count_; ++q)
      if (any_parked(q)) arm_for(q);
    take_ready(done, had_pending);
  }
  withdraw_and_forward(had_pending);
  if (!nothing_pending()) parked_since_ = std::chrono::steady_clock::now();
  watch(lock);
  lock.unlock();
  std::size_t count = 0;
  for (const std::uint32_t taken : done.taken)
    count += taken;
  deliver_batch(done, true);  // we run on the I/O executor, outside any initiating function
  settle();
  return count;
}

void waiter::watch(std::unique_lock<std::mutex>&) {
  // Only a parked operation needs the doorbell or a timer: a spinning one re-checks through
  // the executor, and a watch started for it alone would mostly be cancelled unused.
  if (!any_parked()) return;
  if (!bell_waiting_) {
    bell_waiting_ = true;
    unwatching_ = false;
    bell_.async_wait(
        asio::posix::stream_descriptor::wait_read,
        [self = shared_from_this()](const std::error_code& ec) { self->on_wake(ec, true, 0); });
  }
  bool slotless = false;
  for (std::size_t q = 0; q < queue_count_; ++q)
    slotless |= any_parked(q) && slots_[q] == no_slot && !hub_[q];
  timer_reason reason = timer_reason::none;
  std::chrono::nanoseconds interval{0};
  if (stalled_) {
    reason = timer_reason::stall;
    interval = stall_backoff_;
  } else {
    stall_backoff_ = stall_interval;
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
  // A pending timer that fires soon enough is kept: setting a timer that becomes the earliest
  // costs Asio a timerfd_settime, which back-to-back parks would otherwise pay every time.
  if (timer_waiting_ && timer_.expiry() <= asio::steady_timer::clock_type::now() + interval) {
    if (reason != timer_reason::safety) timer_reason_ = reason;
    return;
  }
  timer_waiting_ = true;
  timer_reason_ = reason;
  unwatching_ = false;
  timer_.expires_after(interval);  // aborts a pending wait, which then finds itself replaced
  timer_.async_wait([self = shared_from_this(), generation = ++timer_generation_](
                        const std::error_code& ec) { self->on_wake(ec, false, generation); });
}

void waiter::settle() {
  std::lock_guard lock(mutex_);
  if (closed_) return;
  // A head held back while earlier operations were out being delivered: they are out now.
  for (std::size_t q = 0; q < queue_count_; ++q) {
    if (!gated_[q] || pending_[q].empty() || !gate_open(q, 0)) continue;
    gated_[q] = false;
    // Posted: settle() may run at the end of an initiating function (park).
    post_recheck(weak_from_this(), ex_);
    return;
  }
  // Decided after the completions have run, not before: a handler that starts its next wait
  // inline keeps the doorbell wait and the timer as they are, rather than having them
  // cancelled and registered again (an epoll_ctl and a timerfd_settime per park).
  if (!nothing_pending() || !(bell_waiting_ || timer_waiting_) || unwatching_ || unwatch_posted_)
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
  unwatching_ = true;
  std::error_code ignored;
  if (bell_waiting_) bell_.cancel(ignored);
  if (timer_waiting_) timer_.cancel();
}

void waiter::shutdown() noexcept {
  std::unique_lock lock(mutex_);
  if (closed_) return;
  closed_ = true;
  closed_flag_.store(true, std::memory_order_release);
  batch done;
  for (std::size_t q = 0; q < queue_count_; ++q) {
    while (op_base* o = pending_[q].head) {
      pending_[q].remove(o);
      queued_[q].fetch_sub(1, std::memory_order_relaxed);
      delivering_[q].fetch_add(1, std::memory_order_relaxed);
      done.push(o);
    }
    // Going away armed and claimed: pass the ring on, as a cancelled wait does.
    if (release_slot(*queues_[q], slots_[q], doorbell_id_, armed_[q])) notify_one(*queues_[q]);
    hub_[q].reset();  // withdraws and leaves its group (which forwards alike)
    armed_[q] = false;
    slots_[q] = no_slot;
  }
  std::error_code ignored;
  bell_.close(ignored);
  timer_.cancel();
  lock.unlock();
  deliver_batch(done, false, asio::error::operation_aborted);
}

}  // namespace shmio::detail
