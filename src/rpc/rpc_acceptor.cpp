#include "shmio/rpc_acceptor.hpp"

#include <algorithm>
#include <chrono>

#include "rpc_limits.hpp"
#include "shmio/detail/liveness.hpp"
#include "shmio/detail/platform.hpp"
#include "shmio/detail/ring_ops.hpp"
#include "shmio/detail/segment_locks.hpp"

namespace shmio {
namespace detail {

std::shared_ptr<rpc_acceptor_impl> rpc_acceptor_impl::create(const asio::any_io_executor& ex,
                                                             std::string_view name,
                                                             const rpc_options& options,
                                                             std::error_code& ec) {
  if (limits_problem(options)) {
    ec = errc::invalid_argument;
    return nullptr;
  }
  guard_rpc_mappings();
  std::shared_ptr<rpc_acceptor_impl> im(new rpc_acceptor_impl);
  im->seg_ = create_listener(name, options, ec);
  if (ec) return nullptr;
  const int fd = im->seg_.native_handle();
  // Our participant number before the lock that lets clients in: a client that took a number
  // first, and died holding a node with it, would hand us its number, and our reader would take
  // its claim for one of ours and wait for it for ever.
  const std::uint16_t me = claim_participant(fd, layout::max_participants, ec);
  if (ec) return nullptr;
  // The lock clients look at to tell a live service from a stale listener.
  if (!platform::try_lock_byte(fd, layout::listener_server_lock_byte,
                               platform::lock_kind::exclusive, ec)) {
    if (!ec) ec = errc::busy;
    return nullptr;
  }
  if ((ec = validate_listener(im->seg_.body(), im->settings_))) return nullptr;
  // This end's own: not in the listener.
  im->settings_.channel.strategy = options.strategy;
  im->settings_.channel.max_in_flight = options.max_in_flight;
  im->settings_.channel.max_concurrent_handlers = options.max_concurrent_handlers;
  im->settings_.channel.max_held_bytes = options.max_held_bytes;
  im->settings_.channel.max_reassembly_bytes = options.max_reassembly_bytes;
  im->settings_.channel.stream_window = options.stream_window;
  im->settings_.channel.stream_window_limit = options.stream_window_limit;
  auto* state =
      reinterpret_cast<layout::ring_state*>(im->seg_.body().data() + im->settings_.ring_offset);
  std::construct_at(&im->ring_, state, im->settings_.ring, fd, me);
  layout::wait_queue* queues[] = {&state->readers};
  im->waiter_ = std::make_shared<waiter>(ex, queues, options.strategy, ec);
  if (ec) return nullptr;
  im->counters_ = method_counters::map(im->seg_, im->settings_.methods_offset, ec);
  if (ec) return nullptr;
  im->sweep_if_due();
  return im;
}

void rpc_acceptor_impl::sweep_if_due() noexcept {
  // A client makes its channel, then posts its request. One killed in between (or while the
  // backlog was full, retrying) leaves a channel that no request names: no acceptor opens it,
  // so none finds it stale, and its random name is never made again. Such files are looked for
  // when the service starts, and then at most once a minute as it accepts.
  // It runs on the service's thread, and this user's other processes may have made any number
  // of files that match: each sweep looks at 64 of them at most (an open, a lock, perhaps an
  // unlink each), and goes on a second later while any are left.
  if (!turn_due(next_sweep_ns_, std::chrono::minutes(1))) return;
  std::lock_guard lock(sweep_mutex_);  // turns are far apart: never contended
  sweep_part part{std::move(sweep_after_), 64};
  try {
    sweep_stale_segments(std::string(name()) + '#', part);
  } catch (...) {  // std::bad_alloc: best effort
    part.after.clear();
  }
  sweep_after_ = std::move(part.after);
  if (!sweep_after_.empty()) {
    const auto soon = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    next_sweep_ns_.store(
        std::chrono::duration_cast<std::chrono::nanoseconds>(soon.time_since_epoch()).count(),
        std::memory_order_relaxed);  // relaxed: a schedule, as turn_due's
  }
}

namespace {
// 1 % of the time: 1 µs of waiting for every 100 µs, up to 20 ms saved.
constexpr std::int64_t admin_budget_max_ns = 20'000'000;
constexpr std::int64_t refill_step_ns = 100'000;
constexpr std::int64_t refill_per_step_ns = 1'000;
}  // namespace

std::chrono::milliseconds rpc_acceptor_impl::admin_patience_now() {
  const std::int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                               std::chrono::steady_clock::now().time_since_epoch())
                               .count();
  std::lock_guard lock(budget_mutex_);
  if (budget_refilled_ns_ == 0) {
    admin_budget_ns_ = admin_budget_max_ns;
    budget_refilled_ns_ = now;
  } else if (const std::int64_t steps = (now - budget_refilled_ns_) / refill_step_ns; steps > 0) {
    // In whole steps, so that frequent accepts lose nothing to rounding.
    admin_budget_ns_ = std::min(admin_budget_max_ns, admin_budget_ns_ + steps * refill_per_step_ns);
    budget_refilled_ns_ += steps * refill_step_ns;
  }
  // Reserved now, so that accepts on other threads meanwhile share the budget rather than each
  // take all of it; settle_admin_wait gives back what was not slept.
  const auto patience =
      std::clamp<std::chrono::milliseconds>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                std::chrono::nanoseconds(admin_budget_ns_)),
                                            std::chrono::milliseconds(0), acceptor_admin_patience);
  admin_budget_ns_ -= std::chrono::nanoseconds(patience).count();
  return patience;
}

void rpc_acceptor_impl::settle_admin_wait(std::chrono::milliseconds reserved,
                                          std::chrono::nanoseconds slept) {
  std::lock_guard lock(budget_mutex_);
  // May go below 0: a sleep that overran the patience (the last backoff) is paid for later.
  admin_budget_ns_ += std::chrono::nanoseconds(reserved).count() - slept.count();
}

rpc_acceptor_impl::~rpc_acceptor_impl() {
  close();
}

rpc_acceptor_statistics rpc_acceptor_impl::statistics() const noexcept {
  // relaxed: counters.
  return {accepted_.load(std::memory_order_relaxed), refused_.load(std::memory_order_relaxed)};
}

std::optional<outcome<taken_request>> rpc_acceptor_impl::take_request() {
  // Under the waiter's mutex. A bad node is skipped by the ring, and reported; more reports in
  // a row than the ring has nodes can only be a damaged head, which would report for ever.
  // A message of the wrong size is taken and refused: it is progress, not damage, so that a
  // client writing them cannot make the accept fail. One look refuses no more nodes than the
  // ring holds: clients writing refused nodes as fast as they are taken would keep it here.
  std::uint32_t refused = 0;
  for (std::uint32_t bad = 0; bad <= ring_.node_count();) {
    if (refused == ring_.node_count())
      return outcome<taken_request>{{}, {{}, true, waiter_, queue_hold(*waiter_, 0)}};
    layout::connect_request request{};
    std::size_t length = 0;
    auto copy = [&](std::span<const std::byte> message) {
      length = message.size();
      std::memcpy(&request, message.data(), std::min(message.size(), sizeof request));
    };
    const auto got = attempt_read(ring_, copy, ring_.node_size());
    // Another process truncated the listener (the truncation guard kept us alive): its ring is
    // gone, and the acceptor fails as for a damaged one.
    if (seg_.faulted()) return outcome<taken_request>{errc::corrupted, {}};
    if (!got) return std::nullopt;
    if (!got->ec && length == sizeof request)
      return outcome<taken_request>{{}, {request, false, waiter_, queue_hold(*waiter_, 0)}};
    if (got->ec)
      ++bad;
    else
      ++refused;
    // relaxed: a counter.
    refused_.fetch_add(1, std::memory_order_relaxed);
  }
  return outcome<taken_request>{errc::corrupted, {}};
}

std::shared_ptr<rpc_channel> rpc_acceptor_impl::accept(const asio::any_io_executor& ex,
                                                       const layout::connect_request& request,
                                                       rpc_service handlers, std::error_code& ec) {
  if (closed()) {
    ec = asio::error::operation_aborted;
    return nullptr;
  }
  sweep_if_due();
  handlers.count_into(counters_);
  // The header's count goes up before the client can hear of its connection (a blocking
  // connect returns as soon as this end has attached, inside rpc_channel::accept), and down
  // again if it is not kept: `shmio ls` never shows a connected client as not accepted yet.
  // The listener stays mapped while this state lives (close() only unlinks it).
  // relaxed: counters; the header's is informational (shmio stat shows it).
  auto& header_accepted = reinterpret_cast<layout::listener_header*>(seg_.body().data())->accepted;
  header_accepted.fetch_add(1, std::memory_order_relaxed);
  bool kept = false;
  struct uncount {  // also if accept throws (no memory)
    std::atomic<std::uint64_t>& count;
    const bool& kept;
    ~uncount() {
      if (!kept) count.fetch_sub(1, std::memory_order_relaxed);
    }
  } uncount_unless_kept{header_accepted, kept};
  // Made without the mutex: close() does not wait for it, and the handlers (user code) of a
  // channel refused are destroyed here, under no lock of ours.
  // What the open slept waiting for the lock, whether it then got it or not (a holder that lets
  // go just in time must pay too), in place of what was reserved; also if accept throws.
  struct settle {
    rpc_acceptor_impl& im;
    std::chrono::milliseconds reserved = im.admin_patience_now();
    std::int64_t slept_before = admin_lock_slept();
    ~settle() {
      im.settle_admin_wait(reserved, std::chrono::nanoseconds(admin_lock_slept() - slept_before));
    }
  } waits{*this};
  auto channel = rpc_channel::accept(ex, name(), request, std::move(handlers), settings_.channel,
                                     waits.reserved, ec);
  if (!channel) {
    refused_.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  {
    // Kept only if close() has not begun: then the statistics it keeps count it. The accept
    // packet goes under the lock (a write to the ring, no user code), so that an async connect
    // hears of a connection only if it is kept.
    std::lock_guard lock(close_mutex_);
    if (!closed_) {
      ec = channel->send_accept();
      kept = !ec;
    }
    if (kept)
      accepted_.fetch_add(1, std::memory_order_relaxed);
    else if (ec)
      refused_.fetch_add(1, std::memory_order_relaxed);  // counted before a close() that follows
  }
  if (kept) {
    channel->start_accepted();  // only now may a request of its client reach a handler
    return channel;
  }
  // Refused (its ring was full), or close() came while it was made: it goes, and its client
  // hears that the service went. Its loops never started: no request reached a handler.
  channel->close();
  if (!ec) ec = asio::error::operation_aborted;
  return nullptr;
}

void rpc_acceptor_impl::close() noexcept {
  {
    // After this, an accept() making a connection gives it up (see accept()).
    std::lock_guard lock(close_mutex_);
    if (std::exchange(closed_, true)) return;
  }
  if (waiter_) waiter_->shutdown();
  std::error_code ignored;
  if (!seg_.is_open()) return;
  platform::try_lock_byte(seg_.native_handle(), layout::listener_server_lock_byte,
                          platform::lock_kind::unlock, ignored);
  // The name goes now, not when the last operation that keeps this state has run: a service
  // made again under it (by this thread, before its io_context runs again) must not find the
  // old one in its way, and new clients find no service.
  unlink_held(seg_.native_handle(), seg_.path());
}

}  // namespace detail

namespace {

std::shared_ptr<detail::rpc_acceptor_impl> create_or_throw(const asio::any_io_executor& ex,
                                                           std::string_view name,
                                                           const rpc_options& options) {
  std::error_code ec;
  auto im = detail::rpc_acceptor_impl::create(ex, name, options, ec);
  detail::throw_if(ec, detail::with_limits_problem("create rpc service", options), name);
  return im;
}

}  // namespace

rpc_acceptor::rpc_acceptor(const executor_type& ex, create_only_t, std::string_view name,
                           rpc_options options)
    : ex_(ex), name_(name), impl_(create_or_throw(ex, name, options)) {}

rpc_acceptor::rpc_acceptor(const executor_type& ex, create_only_t, std::string_view name,
                           rpc_options options, std::error_code& ec)
    : ex_(ex), name_(name), impl_(detail::rpc_acceptor_impl::create(ex, name, options, ec)) {}

rpc_acceptor::rpc_acceptor(rpc_acceptor&& other) noexcept
    : ex_(other.ex_),
      name_(std::move(other.name_)),
      impl_(std::move(other.impl_)),
      last_statistics_(other.last_statistics_) {}

rpc_acceptor& rpc_acceptor::operator=(rpc_acceptor&& other) noexcept {
  if (this != &other) {
    close();
    ex_ = other.ex_;
    name_ = std::move(other.name_);
    impl_ = std::move(other.impl_);
    last_statistics_ = other.last_statistics_;
  }
  return *this;
}

rpc_acceptor::~rpc_acceptor() {
  close();
}

rpc_acceptor_statistics rpc_acceptor::statistics() const noexcept {
  return impl_ ? impl_->statistics() : last_statistics_;
}

void rpc_acceptor::close() noexcept {
  if (auto im = std::exchange(impl_, nullptr)) {
    im->close();  // first: after it, accept() counts no more connections
    last_statistics_ = im->statistics();
  }
}

}  // namespace shmio
