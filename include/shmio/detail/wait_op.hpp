#pragma once
// What the op queue (op_queue.hpp) knows of a pending async wait; handler_wait_op.hpp has the
// operation itself.

#include <cstddef>
#include <cstdint>
#include <system_error>

#include <asio/any_io_executor.hpp>

namespace shmio::detail {

class delivery_ticket;

/// One pending async wait, as its list sees it.
struct wait_op {
  wait_op* next = nullptr;
  wait_op* prev = nullptr;
  std::uint64_t id = 0;        // names it to its cancellation handler
  std::size_t queue = 0;       // the wait queue it waits on
  bool parked = false;         // false while it spins through the executor: nothing armed for it
  virtual bool attempt() = 0;  // under the waiter's mutex; runs no user code
  // Its handler's associated executor is `ex`: a completion found on `ex` reaches it inline.
  // Asked only when another operation waits behind it (the comparison may build an executor).
  virtual bool handler_runs_on(const asio::any_io_executor& ex) const = 0;
  // Destroys the attempt, under the waiter's mutex as it leaves its list: an attempt that gives
  // back a claim on destruction touches shared memory, which close() may unmap once the mutex
  // is dropped.
  virtual void drop_attempt() noexcept = 0;
  // Delivers the result (or `abort`, if set) and frees the operation; the result counts in its
  // queue's gate until `ticket` is punched, just before the handler runs.
  virtual void finish(std::error_code abort, bool may_dispatch, delivery_ticket ticket) = 0;

 protected:
  ~wait_op() = default;
};

}  // namespace shmio::detail
