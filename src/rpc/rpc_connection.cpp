// The connection half of rpc_channel: a client's connect through a service's listener, the
// acceptor's end of it, and the watch for the other end's close or death.

#include <algorithm>
#include <asio/dispatch.hpp>
#include <asio/post.hpp>
#include <thread>

#include "shmio/detail/platform.hpp"
#include "shmio/detail/ring_ops.hpp"
#include "shmio/detail/rpc_channel.hpp"
#include "shmio/detail/wait_queue.hpp"

#include "channel_waits.hpp"

namespace shmio::detail {
namespace {

namespace platform = detail::platform;
using layout::packet_type;
using namespace std::chrono_literals;

using channel_waits::in_queue;
// A blocking connect looks at the acceptor's lock this often while it waits for the accept.
constexpr auto connect_slice = 10ms;

}  // namespace

std::shared_ptr<rpc_channel> rpc_channel::connect(const asio::any_io_executor& ex,
                                                  std::string_view service, rpc_service handlers,
                                                  wait_strategy strategy, std::error_code& ec) {
  auto link = listener_link::open(service, ec);
  if (!link) return nullptr;
  const std::uint32_t pid = platform::process_id();
  const std::uint64_t nonce = platform::random_u64() | 1;
  rpc_options options = link->settings().channel;
  options.strategy = strategy;
  auto ch = make_owner(ex, connection_name(service, pid, nonce), std::move(handlers), options, ec);
  if (!ch) return nullptr;
  ch->connection_ = true;
  ch->connect_pid_ = pid;
  ch->connect_nonce_ = nonce;
  // Written now, before the loops start: the acceptor may be waiting already. A full backlog
  // is tried again while the connect waits.
  ch->request_posted_ = link->post_request(pid, nonce, ec);
  if (ec) {
    ch->forget_name();
    ch->close();
    return nullptr;
  }
  ch->link_ = std::move(link);
  ch->start_loops();
  return ch;
}

std::shared_ptr<rpc_channel> rpc_channel::accept(const asio::any_io_executor& ex,
                                                 std::string_view service,
                                                 const layout::connect_request& request,
                                                 rpc_service handlers, const rpc_options& expected,
                                                 std::chrono::milliseconds admin_patience,
                                                 std::error_code& ec) {
  if (request.version != layout::listener_version || request.nonce == 0 || request.pid == 0) {
    ec = errc::corrupted;
    return nullptr;
  }
  // The client made it; the listener says what it must be. Anything else (a channel far larger
  // than the service would map, say) is refused before it is used.
  auto ch = make_opener(ex, connection_name(service, request.pid, request.nonce),
                        std::move(handlers), expected.strategy, ec, &expected, admin_patience);
  if (!ch) return nullptr;
  ch->connection_ = true;
  ch->takes_turns_ = true;
  ch->set_limits(expected);
  ch->reassembler_ = reassembler(expected.max_message_size, reassembler::default_partial_messages,
                                 expected.max_reassembly_bytes);
  return ch;  // the accept packet and the loops come when the acceptor keeps it
}

std::error_code rpc_channel::send_accept() {
  // Before the loops start, into a ring nobody else writes yet.
  outgoing_message hello{packet_type::accept, next_id(), 0, {}};
  hello.generation = generation_;
  auto fill = [&](std::span<std::byte> node) {
    return encode_packet(hello, 1, out_.node_size(), node);
  };
  const auto written = attempt_write(out_, fill);
  if (!written) return errc::busy;  // a client that filled it first
  if (written->ec) return written->ec;
  // The ring woke one reader; a blocking connect may sleep beside the client's reader loop.
  notify_all(out_.state().readers);
  // relaxed: a counter.
  stats_.packets_sent.fetch_add(1, std::memory_order_relaxed);
  return {};
}

void rpc_channel::async_connected(pending_signal_ptr op, std::chrono::milliseconds timeout) {
  asio::dispatch(strand_, [self = shared_from_this(), op = std::move(op), timeout]() mutable {
    // Posted, not dispatched: this may run inside the caller's initiating function.
    if (self->closed_)
      return complete(std::move(op),
                      self->failure_ ? self->failure_ : asio::error::operation_aborted, false);
    if (self->accepted_) {
      self->link_.reset();  // the accept came before this: the listener is done with
      return complete(std::move(op), {}, false);
    }
    if (self->connect_op_ || !self->link_) return complete(std::move(op), errc::busy, false);
    self->connect_op_ = std::move(op);
    self->connect_deadline_ = deadline_after(timeout);
    self->ensure_reader();  // the accept packet comes through it
    self->wake_housekeeping();
  });
}

std::error_code rpc_channel::wait_connected(std::chrono::milliseconds timeout) {
  // Only before any async_connected: the link is ours until the strand is told we are done.
  const auto deadline = deadline_after(timeout);
  auto accepted = [this]() -> std::optional<outcome<no_value>> {
    // acquire: pairs with the acceptor's increment (it then takes its lock byte).
    if (header_->opener_generation.load(std::memory_order_acquire) != 0) return outcome<no_value>{};
    return std::nullopt;
  };
  std::error_code ec;
  for (;;) {
    if (!request_posted_) {
      request_posted_ = link_->post_request(connect_pid_, connect_nonce_, ec);
      if (ec) break;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      ec = errc::timed_out;
      break;
    }
    const auto slice = std::min<std::chrono::nanoseconds>(deadline - now, connect_slice);
    if (waiter_->wait(in_queue, accepted, slice)) {
      ec = await_acceptor_lock(deadline);
      break;
    }
    if (!link_->server_alive()) {
      ec = errc::peer_gone;
      break;
    }
  }
  if (ec) {
    forget_name();
    release();
    asio::post(strand_, [self = shared_from_this()] { self->fail(errc::peer_gone); });
    return ec;
  }
  // The listener goes now, not when the executor next runs: a client that never runs it must
  // not hold a dead service's listener open. (The strand touches link_ only for an async
  // connect, which this is not.)
  link_.reset();
  asio::post(strand_, [self = shared_from_this()] { self->accepted_ = true; });
  return {};
}

std::error_code rpc_channel::await_acceptor_lock(std::chrono::steady_clock::time_point deadline) {
  // The acceptor counts itself, then takes its lock byte (attach); between the two it holds only
  // its admission byte, for a moment, waited out here. One that refused the channel let go of
  // both. (A refusal made after the lock byte is seen here is not: the accept packet, which the
  // async form waits for, would tell; this form then learns of it at its first call.)
  for (int spins = 0;; ++spins) {
    const peer_locks acceptor = look_at_peer_locks();  // we own the channel: it is our opener
    if (acceptor == peer_locks::held) return {};
    if (acceptor != peer_locks::admitted || !link_->server_alive()) return errc::peer_gone;
    if (std::chrono::steady_clock::now() >= deadline) return errc::timed_out;
    // An acceptor stopped in between (a debugger, SIGSTOP) costs no more than a sleeper.
    if (spins < 1000)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void rpc_channel::cancel_connect() {
  asio::post(strand_, [self = shared_from_this()] {
    if (self->connecting()) self->connect_failed(asio::error::operation_aborted);
  });
}

void rpc_channel::on_accepted() {
  // Only a connecting owner expects one; elsewhere it is a stray packet, and changes nothing.
  if (!owner_ || !connection_ || accepted_) return;
  accepted_ = true;
  if (!connect_op_) return;  // a blocking connect's, or one not yet awaited
  link_.reset();
  complete(std::exchange(connect_op_, nullptr), {}, true);
  stop_reader_if_idle();
}

void rpc_channel::forget_name() noexcept {
  // Unlinked now, while this end still maps it: an acceptor that comes to the request later
  // finds no channel to open (and one that opened it already hears our close).
  std::error_code ignored;
  segment::remove(seg_.name(), ignored);
}

void rpc_channel::connect_failed(std::error_code ec) {
  // The channel goes with the connect: an acceptor that comes later finds nothing to serve.
  forget_name();
  auto op = std::exchange(connect_op_, nullptr);
  fail(errc::peer_gone);
  if (op) complete(std::move(op), ec, false);
}

void rpc_channel::async_wait_closed(std::uint64_t id, pending_signal_ptr op) {
  asio::dispatch(strand_, [self = shared_from_this(), id, op = std::move(op)]() mutable {
    if (self->closed_)
      return complete(std::move(op),
                      self->failure_ ? self->failure_ : asio::error::operation_aborted, false);
    // A session that ended unnoticed (a new opener came) is not the one this waits on.
    if (self->owner_) self->follow_opener();
    if (self->peer_lost_) return complete(std::move(op), {}, false);
    self->closed_waiters_.emplace_back(id, std::move(op));
    self->ensure_reader();  // a close packet comes through it
    self->watch_peer_death();
  });
}

void rpc_channel::cancel_wait_closed(std::uint64_t id) {
  // Posted, as a call's cancellation is: the slot's handler runs on the emitter's thread.
  asio::post(strand_, [self = shared_from_this(), id] {
    auto& waiters = self->closed_waiters_;
    auto it = std::find_if(waiters.begin(), waiters.end(), [id](auto& w) { return w.first == id; });
    if (it == waiters.end()) return;  // it completed first
    auto op = std::move(it->second);
    waiters.erase(it);
    complete(std::move(op), asio::error::operation_aborted, false);
    // The last thing this end waited for may have gone with it: an idle end holds no work.
    if (waiters.empty()) {
      self->death_watch_.reset();
      self->poll_peer_ = false;
    }
    self->stop_reader_if_idle();
  });
}

void rpc_channel::complete_closed_waiters(std::error_code ec) {
  auto waiters = std::move(closed_waiters_);
  closed_waiters_.clear();
  for (auto& w : waiters)
    complete(std::move(w.second), ec, false);
  stop_reader_if_idle();
}

void rpc_channel::watch_peer_death() {
  if (death_watch_ || poll_peer_ || closed_) return;
  // Which process to watch: the one holding the other end's process byte, as the kernel names
  // it in our pid namespace. The pid in the header is only that end's own claim, which may
  // name another process (a client in another pid namespace, or a lie), and a watch of a
  // process that lives on would never report the end's death. Read after peer_attached, which
  // may follow a new opener: its holder, not the one before.
  const bool attached = peer_attached();
  const int seg_fd = seg_.native_handle();
  const std::uint64_t byte =
      owner_ ? layout::rpc_opener_process_lock_byte : layout::rpc_owner_process_lock_byte;
  platform::byte_holder holder =
      attached ? platform::process_holding_byte(seg_fd, byte) : platform::byte_holder{};
  std::uint32_t pid = holder.pid;
  std::error_code lock_ec;
  if (attached && !holder.held) {
    if (platform::byte_locked_by_other(seg_fd, byte, lock_ec) || lock_ec) {
      // Held after all: by our own process (an open file's view sees its lock, F_GETLK does
      // not), or taken by another one between the two looks (a new opener arriving). Asked
      // again, the second names its process, or says it cannot.
      holder = platform::process_holding_byte(seg_fd, byte);
      if (!holder.held && !lock_ec) return;  // ours: the end dies with us
      pid = holder.pid;
    } else {
      // Nobody holds it: an end that takes no process byte (an older one). Its claim, as
      // before; a wake-up for another process is checked against its lock byte (below).
      // relaxed: informational, written before the other end's first packet.
      pid = (owner_ ? header_->opener_pid : header_->owner_pid).load(std::memory_order_relaxed);
    }
  }
  // Held by a process we cannot name (another pid namespace): the lock byte is polled.
  std::error_code ec;
  platform::unique_fd watch(pid != 0 ? platform::open_process_watch(pid, ec) : -1);
  // The holder may have died between the look and the pidfd, and its pid gone to another
  // process: the pidfd is the holder's only if the byte still names it.
  if (watch && holder.held && platform::process_holding_byte(seg_fd, byte).pid != pid)
    watch.reset();
  const int fd = watch ? watch.release() : -1;
  if (fd < 0) {
    // No pidfd, no peer yet, or no process to name: the housekeeping tick looks at the lock.
    poll_peer_ = true;
    return wake_housekeeping();
  }
  death_watch_ = std::make_unique<asio::posix::stream_descriptor>(strand_, fd);
  death_watch_->async_wait(
      asio::posix::stream_descriptor::wait_read,
      [self = shared_from_this(), watch = death_watch_.get()](std::error_code wait_ec) {
        if (wait_ec || self->death_watch_.get() != watch || self->closed_) return;
        self->death_watch_.reset();
        if (self->peer_left()) return self->end_session();
        // That process was not the holder (the pid was wrong or reused): poll the lock.
        self->poll_peer_ = true;
        self->wake_housekeeping();
      });
}

}  // namespace shmio::detail
