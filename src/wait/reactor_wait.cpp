#include "shmio/detail/reactor_wait.hpp"

#include <algorithm>
#include <atomic>

#include <asio/execution/context.hpp>
#include <asio/execution_context.hpp>
#include <asio/query.hpp>

#include "shmio/detail/platform.hpp"

namespace shmio::detail {

/// Records, in an execution context, the process in which it was last told of a fork as the
/// child (io_context::notify_fork(fork_child)), so that a forked child's close knows whether
/// its reactor still shares the parent's epoll set.
class fork_record final : public asio::execution_context::service {
 public:
  using key_type = fork_record;
  static inline asio::execution_context::id id;
  explicit fork_record(asio::execution_context& ctx) : service(ctx) {}
  bool notified_here() const noexcept {
    // relaxed: written by the child's own notify_fork call, which happens before its closes.
    return child_pid_.load(std::memory_order_relaxed) == platform::process_id();
  }

 private:
  void shutdown() override {}
  void notify_fork(asio::execution_context::fork_event event) override {
    if (event == asio::execution_context::fork_child)
      child_pid_.store(platform::process_id(), std::memory_order_relaxed);  // as above
  }
  std::atomic<std::uint32_t> child_pid_{0};
};

reactor_wait::reactor_wait(const asio::any_io_executor& ex,
                           std::span<layout::wait_queue* const> queues, std::error_code& ec)
    : pid_(platform::process_id()),
      forks_(&asio::use_service<fork_record>(asio::query(ex, asio::execution::context))),
      bell_(std::make_unique<asio::posix::stream_descriptor>(ex)),
      timer_(std::make_unique<asio::steady_timer>(ex)) {
  queue_count_ = std::min(queues.size(), max_queues);
  for (std::size_t i = 0; i < queue_count_; ++i)
    queues_[i] = queues[i];
  platform::unique_fd fd = platform::open_doorbell(doorbell_id_, ec);
  if (ec) return;
  // Released only once the reactor took it: a failed assign (epoll_ctl's ENOSPC when the
  // user's epoll watches are used up) leaves the descriptor ours, and `fd` closes it.
  bell_->assign(fd.get(), ec);
  if (ec) return;
  static_cast<void>(fd.release());
  for (std::size_t i = 0; i < queue_count_; ++i)
    slots_[i] = claim_slot(*queues_[i], doorbell_id_);
}

void reactor_wait::join_hub(std::size_t q, std::function<void()> wake) {
  hub_[q] = wait_hub::join(*queues_[q], std::move(wake));
}

void reactor_wait::arm_joined(std::size_t q) noexcept {
  if (slots_[q] != no_slot) {
    detail::arm(*queues_[q], slots_[q]);
  } else if (hub_[q]) {
    hub_[q]->arm();
  } else {
    return;
  }
  armed_[q] = true;
}

void reactor_wait::withdraw(std::size_t q) noexcept {
  if (!armed_[q]) return;
  armed_[q] = false;
  if (slots_[q] == no_slot) {
    if (hub_[q]) hub_[q]->withdraw();  // passes on a ring claimed for its group itself
    return;
  }
  if (!disarm(*queues_[q], slots_[q])) notify_one(*queues_[q]);
}

void reactor_wait::close() noexcept {
  if (closed_) return;
  closed_ = true;
  const bool ours = pid_ == platform::process_id();
  for (std::size_t q = 0; q < queue_count_; ++q) {
    // Going away armed and claimed: pass the ring on, as a withdrawn wait does.
    if (ours && release_slot(*queues_[q], slots_[q], doorbell_id_, armed_[q]))
      notify_one(*queues_[q]);
    hub_[q].reset();  // withdraws and leaves its group (which forwards alike)
    armed_[q] = false;
    slots_[q] = no_slot;
  }
  // The child's doorbell is the parent's socket, and unless the child gave Asio notify_fork,
  // the parent's epoll set too: Asio deregisters an assigned descriptor by number when it
  // closes it, which would take the parent's registration out (its parked waits then hear no
  // ring). After notify_fork the set is the child's own, and the deregistration is wanted.
  if (!ours && !forks_->notified_here() && bell_->is_open())
    platform::orphan_inherited(bell_->native_handle());
  std::error_code ignored;
  bell_->close(ignored);
  timer_->cancel();
  bell_.reset();
  timer_.reset();
}

bool reactor_wait::inherited() const noexcept {
  return pid_ != platform::process_id();
}

bool reactor_wait::context_taken_over() const noexcept {
  return forks_->notified_here();
}

void reactor_wait::abandon_in_child() noexcept {
  if (closed_) return;
  closed_ = true;
  for (std::size_t q = 0; q < queue_count_; ++q) {
    hub_[q].reset();  // leaves the parent's group alone (wait_hub_member)
    armed_[q] = false;
    slots_[q] = no_slot;
  }
  if (bell_->is_open()) platform::orphan_inherited(bell_->native_handle());
  static_cast<void>(bell_.release());
  static_cast<void>(timer_.release());
}

void reactor_wait::drain() noexcept {
  platform::drain_doorbell(bell_->native_handle());
  drain_due_ = false;
}

bool reactor_wait::ring_waiting() noexcept {
  return !drain_due_ && platform::wait_readable(bell_->native_handle(), {});
}

bool reactor_wait::timer_done(const std::error_code& ec, std::uint64_t generation,
                              timer_reason& reason) {
  reason = timer_reason::none;
  if (generation != timer_generation_) return false;
  timer_waiting_ = false;
  if (!ec) reason = timer_reason_;
  return true;
}

void reactor_wait::unwatch() noexcept {
  unwatching_ = true;
  std::error_code ignored;
  if (bell_waiting_) bell_->cancel(ignored);
  if (timer_waiting_) timer_->cancel();
}

}  // namespace shmio::detail
