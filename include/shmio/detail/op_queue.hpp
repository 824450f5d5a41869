#pragma once
// The pending async waits of one object on one wait queue, in the order they were started, and
// the gate that keeps them in that order (Asio: operations of one object complete in the order
// they were started).
//
// A new operation may take the ready path, and the head of the list may be tried, only when
// nothing started before it is still on its way to its handler and no claim that an earlier one
// took is still in use (gate_open). An operation is on its way from the moment it leaves the
// list (or its ready result is known) until its handler is invoked: a completion posted to the
// handler's executor still counts while it sits in that executor's queue (delivery_ticket), so
// that a later operation, completed by a re-check, cannot overtake it. A head the gate held back
// is noted, so that the waiter looks again once the gate opens.
//
// Not thread-safe: the waiter's mutex guards the list. The counters are also read without it,
// by the ready path of a new operation (may_start_ready).

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <system_error>
#include <utility>

#include "shmio/detail/wait_op.hpp"

namespace shmio::detail {

class op_queue;

/// The op queue whose batch this thread is delivering: a delivery that reaches its handler
/// inline leaves the look at the queue's gate to the batch's end (waiter::settle).
inline thread_local const op_queue* current_delivery = nullptr;

/// What a delivery reports to when its handler is about to run (the waiter).
class delivery_owner {
 public:
  /// One delivery of queue `q` reached its handler, or was destroyed unrun.
  virtual void delivered(std::size_t q) noexcept = 0;

 protected:
  ~delivery_owner() = default;
};

/// An operation on its way to its handler: it counts in its queue's gate until punch(), which
/// the handler's wrapper calls just before the upcall (or its destructor, if the handler is
/// destroyed unrun). It does not keep its owner alive (a handler may wait in another
/// io_context's queue long after the object and its own io_context are gone): an owner that
/// went first has no gate left to open. Empty: counts nowhere.
class delivery_ticket {
 public:
  delivery_ticket() = default;
  delivery_ticket(std::weak_ptr<delivery_owner> owner, std::size_t q) noexcept
      : owner_(std::move(owner)), q_(q) {}
  delivery_ticket(delivery_ticket&& o) noexcept = default;
  delivery_ticket& operator=(delivery_ticket&&) = delete;
  ~delivery_ticket() { punch(); }

  void punch() noexcept {
    std::weak_ptr<delivery_owner> w = std::move(owner_);
    if (std::shared_ptr<delivery_owner> o = w.lock()) o->delivered(q_);
  }

 private:
  std::weak_ptr<delivery_owner> owner_;
  std::size_t q_ = 0;
};

/// How many deliveries reached their handler on this thread: a delivery whose count did not move
/// across its dispatch went out posted.
inline thread_local std::uint64_t punches_here = 0;

/// Operations taken out of their lists under the mutex, to be delivered once it is dropped, in
/// the order they were taken.
class op_batch {
 public:
  static constexpr std::size_t max_queues = 2;

  op_batch() = default;
  op_batch(op_batch&& o) noexcept
      : head_(std::exchange(o.head_, nullptr)),
        tail_(std::exchange(o.tail_, nullptr)),
        taken_(o.taken_),
        stopped_(o.stopped_) {}
  op_batch& operator=(op_batch&&) = delete;
  /// What was never delivered (a continuation dropped unrun with its io_context) still goes
  /// out, posted, so that no operation is lost unfreed.
  ~op_batch();

  bool empty() const noexcept { return head_ == nullptr; }
  /// How many operations of queue `q` the batch holds.
  std::uint32_t taken(std::size_t q) const noexcept { return taken_[q]; }
  std::size_t size() const noexcept;
  void push(wait_op* o) noexcept;
  /// No more of queue `q` in this batch: the last one taken may not reach its handler at once.
  void stop(std::size_t q) noexcept { stopped_[q] = true; }
  bool stopped(std::size_t q) const noexcept { return stopped_[q]; }
  /// Delivers every operation, with `abort` if set; each counts in its queue (one of `queues`,
  /// by wait_op::queue) until its handler runs, reported to `owner` (empty: the owner is going
  /// away, and its gates no longer matter). Once a delivery of a queue went out posted (its
  /// handler's executor did not run it inline), the rest of that queue's are posted too, behind
  /// it. A handler run inline that throws stops the delivery there: the exception goes on to
  /// the caller, and the rest stay in the batch, in order, for it to deliver later.
  void deliver(std::span<op_queue> queues, const std::weak_ptr<delivery_owner>& owner,
               bool may_dispatch, std::error_code abort = {});

 private:
  wait_op* head_ = nullptr;
  wait_op* tail_ = nullptr;
  std::array<std::uint32_t, max_queues> taken_{};
  std::array<bool, max_queues> stopped_{};
};

class op_queue {
 public:
  bool empty() const noexcept { return head_ == nullptr; }
  wait_op* head() const noexcept { return head_; }
  bool any_parked() const noexcept;
  wait_op* find(std::uint64_t id) const noexcept;

  /// Appends a started operation.
  void push(wait_op* o) noexcept;
  /// Puts a started operation before all others (waiter::async_wait_first).
  void push_front(wait_op* o) noexcept;
  /// Takes `o` out of the list into `done` (under the waiter's mutex), dropping its attempt; it
  /// counts as being delivered until its ticket is punched.
  void take(wait_op* o, op_batch& done) noexcept;
  /// A ready result, known without the list, starts its way to the handler.
  void begin_delivery() noexcept;
  /// A delivery reached its handler (delivery_ticket::punch); true if it was the last one.
  bool delivered() noexcept;
  /// Moves to `done` the operations at the head that may go and whose `try_op(o)` succeeds;
  /// stops at the first that cannot (if the first cannot proceed, neither can the rest). Takes
  /// one behind another only if `inline_after(o)` says the other's handler is dispatched inline:
  /// else the next waits until that handler is reached, so that two handlers of one queue never
  /// run in the wrong order on different executors.
  template <class Try, class Inline>
  void take_ready(op_batch& done, std::size_t q, Try&& try_op, Inline&& inline_after);

  /// A new operation may take the ready path: nothing started before it still waits or is
  /// being delivered, and no claim is in use. Read without the mutex, on the starting thread.
  bool may_start_ready() const noexcept {
    // acquire: pairs with take()'s release, so that an operation seen out of the list is seen
    // on its way to its handler (gate_open), never in neither count. Otherwise the ordering
    // that matters comes through the executor's own synchronisation.
    return queued_.load(std::memory_order_acquire) == 0 && gate_open(0);
  }
  /// Nothing waits in the list and no claim is in use (see waiter::quiet).
  bool quiet() const noexcept {
    // acquire: pairs with take()'s and unhold()'s release, so that what the claims of the last
    // operation or callback did to the shared memory happens before the caller's own claims.
    return queued_.load(std::memory_order_acquire) == 0 &&
           holds_.load(std::memory_order_acquire) == 0;
  }
  /// The head may be tried, `taken` of the operations before it being in the caller's batch.
  bool gate_open(std::uint32_t taken) const noexcept {
    // acquire: pairs with the release in delivered(): a head let go because an earlier
    // delivery's handler was reached is ordered after that handler's start.
    // acquire on holds_ too: pairs with unhold()'s release, so that a ready path taken right
    // after an in-place callback let its claim go comes after that callback's claims (a
    // single-writer ring's claims are plain stores).
    return holds_.load(std::memory_order_acquire) == 0 &&
           delivering_.load(std::memory_order_acquire) == taken;
  }
  /// Notes that the gate held back a head.
  void note_gated() noexcept { gated_ = true; }
  /// True (once) if a head was held back since the last call and is still there: look again.
  bool take_gated() noexcept {
    if (!gated_ || empty()) return false;
    gated_ = false;
    return true;
  }

  /// A claim taken for a user callback is in use outside the waiter (queue_hold).
  void hold() noexcept;
  /// The claim is given back; true if it was the last one (under the mutex).
  bool unhold() noexcept;

 private:
  wait_op* head_ = nullptr;
  wait_op* tail_ = nullptr;
  std::atomic<std::uint32_t> queued_{0};      // in the list
  std::atomic<std::uint32_t> delivering_{0};  // on the way to the handler
  std::atomic<std::uint32_t> holds_{0};       // claims in use
  // A head was held back, or its queue left unarmed (waiter::arm_for), since take_gated: only
  // that re-check clears it, not a look, which may come without the arming (another thread's
  // delivery opened the gate in between) or at a spinning head with a parked one behind it.
  bool gated_ = false;
};

template <class Try, class Inline>
void op_queue::take_ready(op_batch& done, std::size_t q, Try&& try_op, Inline&& inline_after) {
  while (wait_op* o = head_) {
    if (done.stopped(q) || !gate_open(done.taken(q))) {
      gated_ = true;
      return;
    }
    if (!try_op(o)) return;
    take(o, done);
    if (head_ && !inline_after(o)) {
      done.stop(q);
      gated_ = true;  // looked at again once that handler is reached
      return;
    }
  }
}

}  // namespace shmio::detail
