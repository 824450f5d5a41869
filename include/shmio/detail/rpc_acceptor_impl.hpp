#pragma once
// The state of an rpc_acceptor: its listener segment, its end of the connect ring, and the
// waiter its async_accept operations park on.

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include <asio/any_io_executor.hpp>

#include "shmio/detail/outcome.hpp"
#include "shmio/detail/ring.hpp"
#include "shmio/detail/rpc_channel.hpp"
#include "shmio/detail/rpc_listener.hpp"
#include "shmio/detail/waiter.hpp"
#include "shmio/rpc_options.hpp"
#include "shmio/segment.hpp"

namespace shmio::detail {

/// What one look at the connect ring took: a request, or nothing yet because the look refused
/// as many nodes as the ring holds (`look_again`: the accept waits again, so that clients
/// flooding the ring with refused nodes cannot hold the acceptor's thread).
///
/// Either comes with a hold on the ring's queue: the accepts started later wait until this one
/// has made its connection and completed, or waits again before them (async_next_request_first),
/// so that accepts complete in the order they were started.
struct taken_request {
  taken_request() = default;
  taken_request(taken_request&&) noexcept = default;
  taken_request& operator=(taken_request&& o) noexcept {
    // The hold first: it lets go of its queue while the waiter it names is still kept.
    hold = std::move(o.hold);
    keep = std::move(o.keep);
    request = o.request;
    look_again = o.look_again;
    return *this;
  }
  taken_request(layout::connect_request r, bool again, std::shared_ptr<waiter> w, queue_hold h)
      : request(r), look_again(again), keep(std::move(w)), hold(std::move(h)) {}

  layout::connect_request request{};
  bool look_again = false;
  std::shared_ptr<waiter> keep;  // the hold's waiter, alive until the hold goes (declared after)
  queue_hold hold;
};

class rpc_acceptor_impl {
 public:
  static std::shared_ptr<rpc_acceptor_impl> create(const asio::any_io_executor& ex,
                                                   std::string_view name,
                                                   const rpc_options& options, std::error_code& ec);
  ~rpc_acceptor_impl();

  const std::string& name() const noexcept { return seg_.name(); }
  rpc_acceptor_statistics statistics() const noexcept;

  /// Waits for the next connect request that is well formed: void(error_code, taken_request).
  /// Bad nodes are skipped and counted; a ring that only ever reports damage fails it with
  /// errc::corrupted instead of spinning.
  template <class Handler>
  void async_next_request(const asio::any_io_executor& ex, Handler&& handler) {
    waiter_->async_wait<taken_request>(
        ex, 0, [this] { return take_request(); }, std::forward<Handler>(handler));
  }
  /// The same for an accept that holds the queue (its request refused): it waits before the
  /// accepts started after it.
  template <class Handler>
  void async_next_request_first(const asio::any_io_executor& ex, Handler&& handler) {
    waiter_->async_wait_first<taken_request>(
        ex, 0, [this] { return take_request(); }, std::forward<Handler>(handler));
  }
  /// The end of the connection `request` asks for, serving `handlers`; null with `ec` set if
  /// it cannot be taken (the client went, or made its channel wrong): counted as refused.
  /// Once close() has begun, null with operation_aborted: a connection made meanwhile is closed
  /// again (its client hears the service went). So a connection is counted and completes only
  /// if it was made before close() began.
  std::shared_ptr<rpc_channel> accept(const asio::any_io_executor& ex,
                                      const layout::connect_request& request, rpc_service handlers,
                                      std::error_code& ec);
  void close() noexcept;

  /// One look at the connect ring, as async_next_request's wait makes it (under the waiter's
  /// mutex): a request, look_again, corrupted, or empty if the ring is.
  std::optional<outcome<taken_request>> take_request();

 private:
  rpc_acceptor_impl() = default;

  segment seg_;
  listener_settings settings_;
  ring_view ring_;
  std::shared_ptr<waiter> waiter_;
  std::shared_ptr<method_counters> counters_;  // calls per method, in the listener
  std::mutex close_mutex_;  // orders close() with accept()'s last check and count
  bool closed_ = false;     // under close_mutex_
  bool closed() {
    std::lock_guard lock(close_mutex_);
    return closed_;
  }
  std::atomic<std::uint64_t> accepted_{0};
  std::atomic<std::uint64_t> refused_{0};
  // When the channels that clients killed before their request reached us left are next looked
  // for (steady clock, ns); see sweep_if_due.
  std::atomic<std::int64_t> next_sweep_ns_{0};
  std::mutex sweep_mutex_;
  std::string sweep_after_;  // where the next sweep goes on (sweep_part); under sweep_mutex_
  void sweep_if_due() noexcept;

  // How long the next accept may wait for its channel's admin lock. A well-behaved holder
  // (a client closing, an inspector) holds it for microseconds; the wait sleeps on the
  // service's thread, so a client that holds it and sends the same request again and again
  // would stall every connection of the service for the whole patience each time. The waits
  // come from a budget that refills at 1 % of the time (10 ms a second, 20 ms at most): past
  // it a held lock refuses the request at once. Reserves what it returns.
  std::chrono::milliseconds admin_patience_now();
  /// Pays for an accept's wait: what it slept for the lock, in place of `reserved`.
  void settle_admin_wait(std::chrono::milliseconds reserved, std::chrono::nanoseconds slept);
  std::mutex budget_mutex_;
  std::int64_t admin_budget_ns_ = 0;     // under budget_mutex_
  std::int64_t budget_refilled_ns_ = 0;  // steady clock; under budget_mutex_
};

}  // namespace shmio::detail
