#pragma once
// How an object's parked async waits get woken: its slots in the shared wait queues, and the
// two things its executor's reactor watches for it, the doorbell and a re-check timer.
//
// A parked wait arms its queue's slot (or, with none free, its group's in the process's wait
// hub) before it re-checks its condition; a signaller that finds the slot armed claims it and
// rings the doorbell, a datagram socket named by the slot (wait_queue.hpp has the protocol).
// The doorbell is watched with an async_wait on the object's executor, so a wake-up runs as a
// handler of the user's event loop. The timer is for waits that a ring alone cannot end (held
// up by another participant, no slot, or the opt-in safety re-check).
//
// Not thread-safe: the waiter calls it under its mutex. After close() it touches the queues no
// more (the waiter's blocking form, blocking_wait.hpp, touches them on its caller's thread, which
// holds the object).

#include <array>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <system_error>
#include <utility>

#include <asio/any_io_executor.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/steady_timer.hpp>

#include "shmio/detail/layout.hpp"
#include "shmio/detail/op_memory.hpp"
#include "shmio/detail/wait_hub.hpp"
#include "shmio/detail/wait_queue.hpp"

namespace shmio::detail {

class fork_record;

/// A watch's handler, whose operation takes its memory from op_memory, as shmio's own
/// operations do, rather than from Asio's per-thread cache. It wraps the waiter's own lambdas,
/// which have no executor or cancellation slot that it would have to forward.
template <class Handler>
struct watch_handler {
  Handler handler;

  using allocator_type = op_allocator<void>;
  allocator_type get_allocator() const noexcept { return {}; }

  template <class... Args>
  void operator()(Args&&... args) {
    handler(std::forward<Args>(args)...);
  }
};

class reactor_wait {
 public:
  static constexpr std::size_t max_queues = 2;
  // Why the re-check timer is set; the latest one wins.
  enum class timer_reason : std::uint8_t { none, stall, slotless, safety };

  /// Opens the doorbell and takes a slot in each queue where one is free (no free slot is not
  /// an error: those waits park through the wait hub).
  reactor_wait(const asio::any_io_executor& ex, std::span<layout::wait_queue* const> queues,
               std::error_code& ec);
  ~reactor_wait() { close(); }
  reactor_wait(const reactor_wait&) = delete;
  reactor_wait& operator=(const reactor_wait&) = delete;

  std::size_t queue_count() const noexcept { return queue_count_; }
  layout::wait_queue& queue(std::size_t q) const noexcept { return *queues_[q]; }

  // ---- the slots ----

  /// Arms queue q for its parked waits (idempotent). Without a slot of our own this goes
  /// through the wait hub, joined at the first park with the function `make_wake()` returns
  /// (called from the hub's thread when the queue rings).
  template <class MakeWake>
  void arm(std::size_t q, MakeWake&& make_wake) noexcept {
    if (slots_[q] == no_slot && !hub_tried_[q]) {
      hub_tried_[q] = true;
      try {
        join_hub(q, std::forward<MakeWake>(make_wake)());
      } catch (const std::exception&) {
        // No memory for the membership: this queue's waits poll (waiter::slotless_interval).
      }
    }
    arm_joined(q);
  }
  /// Withdraws queue q's arming. A signaller that claimed it rang us alone (wake-one), so the
  /// ring goes on to another waiter, or it would be swallowed (found by
  /// models/wake_protocol.pml).
  void withdraw(std::size_t q) noexcept;
  /// Neither a slot nor the hub: a parked wait on q has to look again on the timer. Not before
  /// the first arming tried the hub: a wait parked unarmed (the op queue's gate held it) is
  /// looked at again when the gate opens, and needs no timer.
  bool slotless(std::size_t q) const noexcept {
    return slots_[q] == no_slot && hub_tried_[q] && !hub_[q];
  }

  /// Gives back the slots and hub memberships (passing on rings claimed for us) and closes the
  /// doorbell and the timer, whose pending waits complete with operation_aborted. Nothing here
  /// touches the queues afterwards. In a child forked without exec it leaves the queues alone
  /// (the slots are the parent's) and only closes its copies.
  void close() noexcept;

  // ---- the doorbell ----

  /// Starts watching the doorbell, unless a watch is pending: the handler `make_handler()`
  /// returns, called with (error_code), runs on the executor when a ring arrives (or the watch
  /// is cancelled). The handler is made only if a watch starts.
  template <class MakeHandler>
  void watch_bell(MakeHandler&& make_handler) {
    if (bell_waiting_) return;
    bell_waiting_ = true;
    unwatching_ = false;
    bell_->async_wait(asio::posix::stream_descriptor::wait_read,
                      watch_handler<decltype(make_handler())>{make_handler()});
  }
  /// The bell watch completed: `ec` clear means it rang, and must be drained before the next
  /// watch (drain_due).
  void bell_done(const std::error_code& ec) noexcept {
    bell_waiting_ = false;
    if (!ec) drain_due_ = true;
  }
  bool drain_due() const noexcept { return drain_due_; }
  /// Empties the doorbell of rings already acted on.
  void drain() noexcept;
  /// A ring is in the doorbell that no watch has reported yet.
  bool ring_waiting() noexcept;

  // ---- the timer ----

  /// Has the handler `make_handler()` returns run after `interval`, called with (error_code,
  /// generation), for `reason`. A pending timer that fires soon enough is kept (setting the
  /// earliest timer costs Asio a timerfd_settime, which back-to-back parks would otherwise pay
  /// every time); it takes the new reason unless that is only the safety re-check.
  template <class MakeHandler>
  void watch_timer(timer_reason reason, std::chrono::nanoseconds interval,
                   MakeHandler&& make_handler) {
    if (timer_waiting_ && timer_->expiry() <= asio::steady_timer::clock_type::now() + interval) {
      if (reason != timer_reason::safety) timer_reason_ = reason;
      return;
    }
    timer_waiting_ = true;
    timer_reason_ = reason;
    unwatching_ = false;
    timer_->expires_after(interval);  // aborts a pending wait, which then finds itself replaced
    auto h = [h = make_handler(), generation = ++timer_generation_](
                 const std::error_code& ec) mutable { h(ec, generation); };
    timer_->async_wait(watch_handler<decltype(h)>{std::move(h)});
  }
  /// The timer wait of `generation` completed. False if a later watch_timer replaced it (the
  /// newer wait is pending and re-checks). Else `reason` says why it had been set (none if it
  /// was cancelled).
  bool timer_done(const std::error_code& ec, std::uint64_t generation, timer_reason& reason);

  // ---- a forked child's copy ----

  /// This object was made in another process: a child forked without exec has a copy.
  bool inherited() const noexcept;
  /// The child called notify_fork(fork_child) on the executor's context: it runs it now.
  bool context_taken_over() const noexcept;
  /// An inherited copy's close while the child has not taken the context over: the slots, the
  /// hub's groups and the epoll registrations are the parent's, and the context's own locks
  /// may have been held at the fork by threads the child does not have. So nothing of Asio's
  /// is called: the descriptor and the timer are left to leak, as the rest of the context is,
  /// and the child's copy of the doorbell's socket is swapped for /dev/null, so that it no
  /// longer keeps the parent's doorbell alive.
  void abandon_in_child() noexcept;

  // ---- both ----

  bool watching() const noexcept { return bell_waiting_ || timer_waiting_; }
  /// unwatch() cancelled the watches, and none has started since.
  bool unwatching() const noexcept { return unwatching_; }
  /// Cancels the pending watches, so that an idle object holds no work of its executor.
  void unwatch() noexcept;

 private:
  void join_hub(std::size_t q, std::function<void()> wake);
  void arm_joined(std::size_t q) noexcept;

  std::array<layout::wait_queue*, max_queues> queues_{};
  std::size_t queue_count_ = 0;
  std::array<int, max_queues> slots_{no_slot, no_slot};
  // Where a queue had no free slot: our membership of the hub's group for it (made at the
  // first park), or none if the hub cannot run here.
  std::array<std::unique_ptr<wait_hub_member>, max_queues> hub_;
  std::array<bool, max_queues> hub_tried_{};
  // We armed queue q and have not withdrawn it. A slot never armed cannot have been claimed,
  // so a wait that only spun needs no disarm and forwards no ring.
  std::array<bool, max_queues> armed_{};
  std::uint64_t doorbell_id_ = 0;
  // Who took the slots: a child forked without exec has a copy of this object, and the slots it
  // names (by the same doorbell id) are still the parent's.
  std::uint32_t pid_ = 0;
  fork_record* forks_ = nullptr;  // in the executor's context: did a child call notify_fork?
  // Destroyed by close(), while the executor's context is certainly alive: the waiter may
  // outlive it (a posted completion's re-check holds it), and these belong to its services.
  // (Held by pointer so that abandon_in_child can leave them undestroyed.)
  std::unique_ptr<asio::posix::stream_descriptor> bell_;
  std::unique_ptr<asio::steady_timer> timer_;
  bool closed_ = false;
  bool bell_waiting_ = false;
  bool drain_due_ = false;  // the doorbell rang since its last drain
  bool timer_waiting_ = false;
  timer_reason timer_reason_ = timer_reason::none;
  std::uint64_t timer_generation_ = 0;  // of the timer wait started last
  bool unwatching_ = false;
};

}  // namespace shmio::detail
