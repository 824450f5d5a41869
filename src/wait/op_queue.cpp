#include "shmio/detail/op_queue.hpp"

#include <array>
#include <cerrno>
#include <exception>
#include <system_error>

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

op_batch::~op_batch() {
  while (wait_op* o = head_) {
    head_ = o->next;
    try {
      // Asio's operation_aborted (ECANCELED in the system category), without Asio here.
      o->finish(std::error_code(ECANCELED, std::system_category()), false, {});
    } catch (...) {  // a post's allocation: that completion is lost with its operation
    }
  }
}

void op_batch::deliver(std::span<op_queue> queues, const std::weak_ptr<delivery_owner>& owner,
                       bool may_dispatch, std::error_code abort) {
  const op_queue* const outer = current_delivery;
  std::array<bool, max_queues> went_posted{};
  while (wait_op* o = head_) {
    head_ = o->next;
    if (!head_) tail_ = nullptr;
    const std::size_t q = o->queue;
    current_delivery = &queues[q];
    const std::uint64_t punches = punches_here;
    try {
      o->finish(abort, may_dispatch && !went_posted[q], delivery_ticket(owner, q));  // frees o
    } catch (...) {
      // A handler run inline threw (io_context::run() passes that on to its caller, who may
      // run again), or a post's allocation failed (that completion is lost with its
      // operation). The rest stay here, in order, for the caller to deliver later.
      current_delivery = outer;
      throw;
    }
    // Not run here: the handler waits in its executor's queue, and those behind it must too.
    if (punches_here == punches) went_posted[q] = true;
    current_delivery = outer;
  }
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

void op_queue::push_front(wait_op* o) noexcept {
  o->prev = nullptr;
  o->next = head_;
  (head_ ? head_->prev : tail_) = o;
  head_ = o;
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
  // release: pairs with quiet()'s acquire (a blocking call after the claim's last use); the
  // waiter's mutex orders this against the next head's attempt.
  return holds_.fetch_sub(1, std::memory_order_release) == 1;
}

}  // namespace shmio::detail
