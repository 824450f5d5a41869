#include "shmio/detail/waiter.hpp"

#include "shmio/detail/platform.hpp"

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

void waiter::cancel_handler::operator()(asio::cancellation_type type) const {
  // Every kind is honoured: a cancelled wait has consumed nothing, so it has no side effects.
  if ((type & (asio::cancellation_type::terminal | asio::cancellation_type::partial |
               asio::cancellation_type::total)) == asio::cancellation_type::none)
    return;
  if (auto w = self.lock()) w->cancel(id);
}

waiter::waiter(const asio::any_io_executor& ex, std::span<layout::wait_queue* const> queues,
               wait_strategy strategy, std::error_code& ec)
    : ex_(ex), spin_(strategy), bell_(ex), rescue_(ex) {
  queue_count_ = std::min(queues.size(), max_queues);
  for (std::size_t i = 0; i < queue_count_; ++i)
    queues_[i] = queues[i];
  platform::unique_fd fd = platform::open_doorbell(doorbell_id_, ec);
  if (ec) return;
  bell_.assign(fd.release(), ec);
  if (ec) return;
  // No free slot is not an error: that queue's waits then poll (slotless_interval).
  for (std::size_t i = 0; i < queue_count_; ++i)
    slots_[i] = claim_slot(*queues_[i], doorbell_id_);
}

waiter::~waiter() {
  shutdown();
}

bool waiter::nothing_pending_but(const op_base* o) const noexcept {
  for (std::size_t i = 0; i < queue_count_; ++i)
    for (const op_base* p = pending_[i].head; p; p = p->next)
      if (p != o) return false;
  return true;
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

void waiter::enqueue(op_base* o, std::chrono::nanoseconds spin) {
  std::unique_lock lock(mutex_);
  if (closed_) {
    lock.unlock();
    return o->finish(asio::error::operation_aborted, false);
  }
  const std::size_t q = o->queue;
  // Behind others, or with no time to spin: park now (FIFO: the first cannot be overtaken).
  if (spin.count() <= 0 || !pending_[q].empty()) {
    pending_[q].push_back(o);
    return park(lock, o);
  }
  pending_[q].push_back(o);  // in the list while spinning, so that cancellation finds it
  const auto deadline = std::chrono::steady_clock::now() + spin;
  asio::post(ex_, [self = shared_from_this(), id = o->id, q, deadline] {
    self->spin_step(id, q, deadline, 1);
  });
}

namespace {
// How long one trip through the executor re-checks, pause-spun. A trip costs far more than a
// re-check (Asio's scheduler polls its reactor, a system call, between handlers: ~0.3-0.5 µs),
// so each trip looks for a while; meanwhile other handlers of this thread wait, so not long.
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
    return park(lock, o);
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
  if (!o->attempt()) return false;
  spin_.spin_succeeded();
  complete(lock, o, {}, true);  // we run on the executor, outside any initiator
  return true;
}

void waiter::park(std::unique_lock<std::mutex>& lock, op_base* o) {
  const std::size_t q = o->queue;
  if (nothing_pending_but(o)) parked_since_ = std::chrono::steady_clock::now();
  o->parked = true;
  // The ring that woke an earlier wait is still in the doorbell (see on_wake): out with it
  // before arming, or the watch below would report it at once.
  if (drain_due_) drain();
  arm_for(q);
  // The re-check after arming: from here on a publication either is seen now or rings us.
  if (o->attempt()) return complete(lock, o, {}, false);
  watch(lock);
}

void waiter::arm_for(std::size_t q) noexcept {
  if (slots_[q] == no_slot) return;
  arm(*queues_[q], slots_[q]);
  armed_[q] = true;
}

bool waiter::withdraw(std::size_t q) noexcept {
  // A wait still spinning needs no ring: it polls, and parks (arming) when its budget is spent.
  if (!armed_[q] || any_parked(q)) return false;
  armed_[q] = false;
  // A failed disarm means a signaller claimed our slot and rang us. A wake-one signaller rang
  // nobody else, so the ring must go on to another waiter, or it is swallowed (found by
  // models/wake_protocol.pml): the caller forwards it once it has dropped the mutex.
  return !disarm(*queues_[q], slots_[q]);
}

void waiter::complete(std::unique_lock<std::mutex>& lock, op_base* o, std::error_code ec,
                      bool may_dispatch) {
  const std::size_t q = o->queue;
  pending_[q].remove(o);
  const bool forward = withdraw(q);
  lock.unlock();
  o->finish(ec, may_dispatch);
  if (forward) notify_one(*queues_[q]);
  settle();
}

void waiter::cancel(std::uint64_t id) {
  std::unique_lock lock(mutex_);
  op_base* found = nullptr;
  for (std::size_t q = 0; q < queue_count_ && !found; ++q)
    for (op_base* o = pending_[q].head; o; o = o->next)
      if (o->id == id) {
        found = o;
        break;
      }
  if (!found) return;  // it completed first
  // A cancelled wait never swallows a wake-up another waiter needs: complete() passes it on.
  complete(lock, found, asio::error::operation_aborted, false);
}

void waiter::on_wake(const std::error_code& ec, bool from_bell, std::uint64_t generation) {
  std::unique_lock lock(mutex_);
  if (from_bell) {
    bell_waiting_ = false;
  } else {
    // A rescue wait replaced by a sooner one (watch): the newer wait is pending and re-checks.
    if (generation != rescue_generation_) return;
    rescue_waiting_ = false;
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
  recheck(lock);
}

void waiter::drain() noexcept {
  platform::drain_doorbell(bell_.native_handle());
  drain_due_ = false;
}

void waiter::attempt_pending(op_base*& done) {
  for (std::size_t q = 0; q < queue_count_; ++q) {
    list& l = pending_[q];
    if (l.empty()) continue;
    if (any_parked(q)) arm_for(q);  // re-arm before re-checking; a spinner needs no ring
    while (op_base* o = l.head) {
      if (!o->attempt()) break;  // FIFO: if the first cannot proceed, neither can the rest
      l.remove(o);
      o->next = done;
      done = o;
    }
  }
}

void waiter::recheck(std::unique_lock<std::mutex>& lock) {
  op_base* done = nullptr;  // finished operations, linked through `next`
  std::array<bool, max_queues> had_pending{};
  for (std::size_t q = 0; q < queue_count_; ++q)
    had_pending[q] = !pending_[q].empty();
  attempt_pending(done);
  if (drain_due_ && any_parked()) {
    // Still parked, so the doorbell is about to be watched again: drain it, then arm and look
    // again, as a fresh park does. A ring drained here may have claimed the slot after the
    // first arming, and stand for a publication after the first look (models/README.md, F8).
    drain();
    attempt_pending(done);
  }
  std::array<bool, max_queues> forward{};
  for (std::size_t q = 0; q < queue_count_; ++q)
    if (had_pending[q]) forward[q] = withdraw(q);
  if (!nothing_pending()) parked_since_ = std::chrono::steady_clock::now();
  watch(lock);
  lock.unlock();
  while (done) {
    op_base* o = done;
    done = o->next;
    o->finish({}, true);  // we run on the I/O executor, outside any initiating function
  }
  for (std::size_t q = 0; q < queue_count_; ++q)
    if (forward[q]) notify_one(*queues_[q]);
  settle();
}

void waiter::watch(std::unique_lock<std::mutex>&) {
  // Only a parked operation needs the doorbell and the rescue: a spinning one re-checks through
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
    slotless |= any_parked(q) && slots_[q] == no_slot;
  const auto interval = slotless ? std::chrono::nanoseconds(slotless_interval)
                                 : std::chrono::nanoseconds(rescue_interval);
  // A pending rescue that fires soon enough is kept: setting a timer that becomes the earliest
  // costs Asio a timerfd_settime, which back-to-back parks would otherwise pay every time. It
  // fires within `interval` from now, so a lost ring is still re-checked as soon as before.
  if (rescue_waiting_ && rescue_.expiry() <= asio::steady_timer::clock_type::now() + interval)
    return;
  rescue_waiting_ = true;
  unwatching_ = false;
  rescue_.expires_after(interval);  // aborts a pending wait, which then finds itself replaced
  rescue_.async_wait([self = shared_from_this(), generation = ++rescue_generation_](
                         const std::error_code& ec) { self->on_wake(ec, false, generation); });
}

void waiter::settle() {
  std::lock_guard lock(mutex_);
  // Decided after the completions have run, not before: a handler that starts its next wait
  // inline keeps the doorbell wait and the rescue timer as they are, rather than having them
  // cancelled and registered again (an epoll_ctl and a timerfd_settime per park).
  if (closed_ || !nothing_pending() || !(bell_waiting_ || rescue_waiting_) || unwatching_ ||
      unwatch_posted_)
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
  if (rescue_waiting_) rescue_.cancel();
}

void waiter::shutdown() noexcept {
  std::unique_lock lock(mutex_);
  if (closed_) return;
  closed_ = true;
  closed_flag_.store(true, std::memory_order_release);
  op_base* done = nullptr;
  std::array<bool, max_queues> forward{};
  for (std::size_t q = 0; q < queue_count_; ++q) {
    while (op_base* o = pending_[q].head) {
      pending_[q].remove(o);
      o->next = done;
      done = o;
    }
    // Going away armed and claimed: pass the ring on, as a cancelled wait does.
    if (release_slot(*queues_[q], slots_[q], doorbell_id_, armed_[q])) forward[q] = true;
    armed_[q] = false;
    slots_[q] = no_slot;
  }
  std::error_code ignored;
  bell_.close(ignored);
  rescue_.cancel();
  lock.unlock();
  while (done) {
    op_base* o = done;
    done = o->next;
    o->finish(asio::error::operation_aborted, false);
  }
  for (std::size_t q = 0; q < queue_count_; ++q)
    if (forward[q]) notify_one(*queues_[q]);
}

}  // namespace shmio::detail
