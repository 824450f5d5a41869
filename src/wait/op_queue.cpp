#include "shmio/detail/op_queue.hpp"

#include <array>
#include <exception>

namespace shmio::detail {

std::size_t op_batch::size() const noexcept {
  std::size_t n = 0;
  for (const std::uint32_t t : taken_)
    n += t;
  return n;
}

void op_batch::push(wait_op* o) noexcept {
  o->next = nullptr;
  (tail_ ? tail_->next : head_) = o;
  tail_ = o;
  ++taken_[o->queue];
}

void op_batch::deliver(std::span<op_queue> queues, const std::weak_ptr<delivery_owner>& owner,
                       bool may_dispatch, std::error_code abort) {
  const op_queue* const outer = current_delivery;
  std::array<bool, max_queues> went_posted{};
  // A handler dispatched inline may throw, and io_context::run() passes that on to its caller,
  // who may run again: every operation still goes out, and every ticket is still punched.
  std::exception_ptr thrown;
  while (wait_op* o = head_) {
    head_ = o->next;
    const std::size_t q = o->queue;
    current_delivery = &queues[q];
    const std::uint64_t punches = punches_here;
    const bool dispatch = may_dispatch && !thrown && !went_posted[q];
    try {
      // After a throw the rest are posted: no more user code runs inside this unwinding call.
      o->finish(abort, dispatch, delivery_ticket(owner, q));
    } catch (...) {
      // A second throw (only a post's allocation can throw here) loses that one completion,
      // which is already gone with the operation; the first exception is the one reported.
      if (!thrown) thrown = std::current_exception();
    }
    // Not run here: the handler waits in its executor's queue, and those behind it must too.
    if (punches_here == punches) went_posted[q] = true;
    current_delivery = outer;
  }
  tail_ = nullptr;
  if (thrown) std::rethrow_exception(thrown);
}

bool op_queue::any_parked() const noexcept {
  for (const wait_op* p = head_; p; p = p->next)
    if (p->parked) return true;
  return false;
}

wait_op* op_queue::find(std::uint64_t id) const noexcept {
  for (wait_op* o = head_; o; o = o->next)
    if (o->id == id) return o;
  return nullptr;
}

void op_queue::push(wait_op* o) noexcept {
  o->next = nullptr;
  o->prev = tail_;
  (tail_ ? tail_->next : head_) = o;
  tail_ = o;
  // relaxed: see may_start_ready.
  queued_.fetch_add(1, std::memory_order_relaxed);
}

void op_queue::take(wait_op* o, op_batch& done) noexcept {
  o->drop_attempt();
  (o->prev ? o->prev->next : head_) = o->next;
  (o->next ? o->next->prev : tail_) = o->prev;
  o->next = o->prev = nullptr;
  // On its way before it is out of the list: a start that sees it out also sees it on its way.
  // relaxed: the release below publishes it.
  delivering_.fetch_add(1, std::memory_order_relaxed);
  // release: pairs with may_start_ready's acquire.
  queued_.fetch_sub(1, std::memory_order_release);
  done.push(o);
}

void op_queue::begin_delivery() noexcept {
  // relaxed: counted by the starting thread before its result is posted, which publishes it.
  delivering_.fetch_add(1, std::memory_order_relaxed);
}

bool op_queue::delivered() noexcept {
  ++punches_here;
  // release: pairs with gate_open's acquire (the next head goes after this handler started).
  return delivering_.fetch_sub(1, std::memory_order_release) == 1;
}

void op_queue::hold() noexcept {
  // relaxed: read under the mutex or by the thread that took the hold (see may_start_ready).
  holds_.fetch_add(1, std::memory_order_relaxed);
}

bool op_queue::unhold() noexcept {
  // relaxed: as in hold(); the waiter's mutex orders this against the next head's attempt.
  return holds_.fetch_sub(1, std::memory_order_relaxed) == 1;
}

}  // namespace shmio::detail
