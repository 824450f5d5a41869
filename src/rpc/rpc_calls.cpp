// The calling half of rpc_channel: calls started (or held for credit, max_in_flight), taken
// back while unsent, cancelled, timed out and completed; and the housekeeping tick that runs
// the timeouts, the connect's deadline and the watch on the other end.

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/dispatch.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/post.hpp>
#include <asio/use_awaitable.hpp>
#include <utility>

#include "shmio/detail/recycled_map.hpp"
#include "shmio/detail/rpc_channel.hpp"
#include "shmio/detail/segment_locks.hpp"

#include "channel_waits.hpp"

namespace shmio::detail {
namespace {

using layout::packet_type;
using namespace std::chrono_literals;

constexpr auto tick_period = 10ms;       // resolution of request timeouts
constexpr int ticks_per_peer_check = 5;  // the other end is checked every 50 ms while busy
using channel_waits::as_tuple_awaitable;

}  // namespace

void rpc_channel::start_call(std::uint64_t id, pending_call_ptr call, outgoing_message request,
                             std::chrono::milliseconds timeout,
                             std::shared_ptr<stream_state> stream) {
  // Dispatched, not posted: called from a thread of the executor while the strand is free, the
  // request goes out now instead of after a trip through the scheduler. (This never completes
  // the call inside the initiating function: every completion is posted, see rpc_call.)
  asio::dispatch(strand_, [self = shared_from_this(), id, call = std::move(call),
                           request = std::move(request), timeout,
                           stream = std::move(stream)]() mutable {
    // Posted, not dispatched: this may run inside the caller's initiating function. closing():
    // once close() began, nothing more is sent, and a stream's opening must not succeed.
    if (self->closing())
      return complete(std::move(call),
                      self->failure_ ? self->failure_ : asio::error::operation_aborted, {}, false);
    if (request.size() > self->reassembler_max())
      return complete(std::move(call), errc::message_too_large, {}, false);
    if (self->owner_) self->follow_opener();  // address the opener there is now
    if (!self->peer_attached()) return complete(std::move(call), errc::peer_gone, {}, false);
    // An end without handlers may not be reading: its answer is known here.
    if (!self->peer_serves_) {
      constexpr std::string_view text = "the other end serves no requests";
      return complete(
          std::move(call),
          request.flags & layout::packet_flag_method ? errc::no_such_method : errc::no_handler,
          std::as_bytes(std::span(text.data(), text.size())), false);
    }
    // A stream has no timeout of its own (rpc_stream.hpp).
    const auto deadline =
        stream ? std::chrono::steady_clock::time_point::max() : deadline_after(timeout);
    auto* entry = insert_recycled(self->calls_, self->spare_calls_, id);
    if (!entry) return complete(std::move(call), errc::busy, {}, false);  // ids are unique: never
    *entry = call_entry{std::move(call), deadline, std::nullopt, std::move(stream)};
    self->stats_.pending.fetch_add(1, std::memory_order_relaxed);
    request.type = packet_type::request;
    request.id = id;
    if (self->in_flight_ < self->max_in_flight_ && self->credit_queue_.empty()) {
      ++self->in_flight_;
      self->send_admitted(id, std::move(request));
    } else {
      // No credit: it waits here, not in the outbox, so that nothing queues for the ring past
      // max_in_flight; its deadline runs meanwhile.
      entry->waiting.emplace(std::move(request));
      self->credit_queue_.push_back(id);
      ++self->waiting_;
    }
    self->ensure_reader();  // its answer comes through it
    self->wake_housekeeping();
  });
}

void rpc_channel::cancel_call(std::uint64_t id, asio::cancellation_type type) {
  asio::post(strand_, [self = shared_from_this(), id, type] {
    auto it = self->calls_.find(id);
    if (it == self->calls_.end()) return;  // it completed first
    // An open stream is cancelled through its reads or its close, not its opening's slot.
    if (it->second.stream && !it->second.call) return;
    // Total cancellation promises no side effect: only a request not yet sent qualifies.
    const auto effects = asio::cancellation_type::terminal | asio::cancellation_type::partial;
    if ((type & effects) == asio::cancellation_type::none) {
      if (!self->withdraw(id)) return;
      self->stats_.cancellations.fetch_add(1, std::memory_order_relaxed);
      return self->finish_call(id, asio::error::operation_aborted, {});
    }
    self->stats_.cancellations.fetch_add(1, std::memory_order_relaxed);
    self->abandon_call(id, asio::error::operation_aborted);
  });
}

void rpc_channel::request_started(std::uint64_t id) noexcept {
  if (auto it = calls_.find(id); it != calls_.end()) it->second.queued_whole = false;
}

bool rpc_channel::withdraw(std::uint64_t id) {
  auto it = calls_.find(id);
  if (it == calls_.end()) return false;
  if (it->second.waiting) {  // finish_call drops it with its entry
    stats_.requests_withdrawn.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  for (auto m = outbox_.begin(); m != outbox_.end(); ++m)
    if (m->type == packet_type::request && m->id == id && m->next_packet == 1) {
      outbox_.erase(m);  // bounded by max_in_flight
      stats_.requests_withdrawn.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
  // The writer holds it, waiting for room for its first packet: it drops it when it looks.
  if (current_ && !current_started_ && !current_withdrawn_ &&
      current_->type == packet_type::request && current_->id == id) {
    current_withdrawn_ = true;
    stats_.requests_withdrawn.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  return false;
}

void rpc_channel::abandon_call(std::uint64_t id, std::error_code ec) {
  const bool unsent = withdraw(id);
  finish_call(id, ec, {});
  // A request the other end has (or has begun to get): let its handler stop.
  if (!unsent) send({packet_type::cancel, next_id(), id, {}});
}

void rpc_channel::set_limits(const rpc_options& o) noexcept {
  set_strand_limits(o);
  set_stream_window(o);
}

void rpc_channel::set_strand_limits(const rpc_options& o) noexcept {
  max_in_flight_ = o.max_in_flight;
  bounds_.max_handlers = o.max_concurrent_handlers;
  bounds_.max_held_bytes = o.max_held_bytes;
  served_window_limit_ = o.stream_window_limit;
}

void rpc_channel::set_stream_window(const rpc_options& o) noexcept {
  // relaxed: a setting, read alone.
  stream_window_.store(o.stream_window, std::memory_order_relaxed);
}

void rpc_channel::apply_limits(const rpc_options& o) {
  // The window at once: a stream request reads it as it starts, off the strand (and never
  // again from the posted part below, which would put back an older window over a newer one
  // set meanwhile). The rest on the strand, ahead of any call this thread starts after (the
  // strand keeps their order).
  set_stream_window(o);
  asio::post(strand_, [self = shared_from_this(), o] {
    self->set_strand_limits(o);
    self->admit_waiting();  // more credit may let waiting calls go
    self->start_deferred();
    self->flush_all_stream_writes();  // a larger max_held_bytes may let held writes go
  });
}

void rpc_channel::admit_waiting() {
  // Not re-entered: send() may fail a call at once (a damaged ring), whose finish_call frees
  // its credit and comes here again; this loop takes that credit on its next turn instead, so
  // a long queue of waiting calls never becomes a deep recursion.
  if (admitting_) return;
  admitting_ = true;
  struct done_admitting {
    bool& flag;
    ~done_admitting() { flag = false; }
  } guard{admitting_};
  while (in_flight_ < max_in_flight_ && !credit_queue_.empty() && !closed_) {
    const std::uint64_t id = credit_queue_.front();
    credit_queue_.pop_front();
    auto it = calls_.find(id);
    if (it == calls_.end() || !it->second.waiting) continue;  // completed while it waited
    outgoing_message m = std::move(*it->second.waiting);
    it->second.waiting.reset();
    --waiting_;
    ++in_flight_;
    send_admitted(id, std::move(m));
  }
}

void rpc_channel::send_admitted(std::uint64_t id, outgoing_message request) {
  const std::size_t bytes = request.size();
  // Dropped because close() began on another thread since: the call ends as every call does
  // at close, and a stream's opening does not succeed.
  if (!send(std::move(request))) return finish_call(id, asio::error::operation_aborted, {});
  // relaxed: counters.
  stats_.requests_sent.fetch_add(1, std::memory_order_relaxed);
  stats_.bytes_sent.fetch_add(bytes, std::memory_order_relaxed);
  // send() may have failed the call (a damaged ring), erasing its entry: look again.
  if (auto it = calls_.find(id); it != calls_.end()) call_sent(it->second);
}

void rpc_channel::call_sent(call_entry& entry) {
  // A stream's caller gets its stream now; a plain call waits for its reply. Posted: this may
  // run inside the initiating function.
  if (entry.stream && entry.call) complete(std::exchange(entry.call, nullptr), {}, {}, false);
}

void rpc_channel::finish_call(std::uint64_t id, std::error_code ec, reply_bytes reply,
                              bool may_dispatch, bool stream_end) {
  auto it = calls_.find(id);
  if (it == calls_.end()) {
    stats_.discarded_replies.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  // An answer from the other end (may_dispatch) to a request it cannot have had, still waiting
  // for credit or queued whole (its id was guessed): the other end broke the protocol. The
  // call fails, and its request is not sent after it.
  if (may_dispatch && (it->second.waiting || it->second.queued_whole)) {
    withdraw(id);
    ec = errc::corrupted;
    reply = {};
  }
  auto call = std::move(it->second.call);
  auto stream = std::move(it->second.stream);
  const bool admitted = !it->second.waiting;
  it->second.waiting.reset();  // a recycled node keeps no payload
  erase_recycled(calls_, spare_calls_, it);
  stats_.pending.fetch_sub(1, std::memory_order_relaxed);
  // Its credit goes to the next waiting call before any upcall (which may start calls).
  if (admitted) {
    --in_flight_;
    admit_waiting();
  } else {
    // It never got credit: its id stays in credit_queue_ until credit frees. Calls that keep
    // giving up while the ones in flight never end would make that queue grow without bound:
    // past twice what still waits, it is swept.
    --waiting_;
    if (credit_queue_.size() > 2 * waiting_ + 64)
      std::erase_if(credit_queue_, [this](std::uint64_t q) {
        auto c = calls_.find(q);
        return c == calls_.end() || !c->second.waiting;
      });
  }
  // A reply to a stream, a stream's end to a plain call, or any answer to a stream request not
  // yet sent (its id was guessed): the other end broke the protocol.
  if (!ec && (stream_end != (stream != nullptr) || (stream && call))) {
    ec = errc::corrupted;
    reply = {};
    // Whatever serves it over there stops (a stream's handler would write on).
    if (admitted) send({packet_type::cancel, next_id(), id, {}});
  }
  if (stream) {
    stream->ended = true;
    stream->end = ec ? ec : std::error_code(asio::error::eof);
    stream->end_text = call ? std::vector<std::byte>() : reply.take();
  }
  if (call)
    complete(std::move(call), ec, reply, may_dispatch);  // a stream not yet open
  else if (stream)
    pump_stream(*stream);
  stop_reader_if_idle();
}

void rpc_channel::wake_housekeeping() {
  if (ticking_ || closed_) return;
  ticking_ = true;
  asio::co_spawn(strand_, housekeeping_loop(shared_from_this()), asio::detached);
}

asio::awaitable<void> rpc_channel::housekeeping_loop(
    [[maybe_unused]] std::shared_ptr<rpc_channel> self) {
  for (int tick = 1;; ++tick) {
    tick_.expires_after(tick_period);
    co_await tick_.async_wait(as_tuple_awaitable);
    if (closed_) break;
    // The file truncated under us while nothing was read or written (a call waits for its
    // answer): the answer can never come.
    if (seg_.faulted()) {
      fail(errc::corrupted);
      break;
    }
    const auto now = std::chrono::steady_clock::now();
    // The expired ones first, then each abandoned if it is still there: abandoning one may
    // finish others (credit admits a waiting call, whose send may fail on a damaged ring).
    expired_.clear();
    for (const auto& [id, entry] : calls_)
      if (entry.deadline <= now) expired_.push_back(id);
    for (const std::uint64_t id : expired_) {
      if (!calls_.contains(id)) continue;
      stats_.timeouts.fetch_add(1, std::memory_order_relaxed);
      abandon_call(id, errc::timed_out);
    }
    if (connecting()) {
      if (now >= connect_deadline_) {
        connect_failed(errc::timed_out);
      } else if (!request_posted_) {
        std::error_code ec;
        request_posted_ = link_->post_request(connect_pid_, connect_nonce_, ec);
        if (ec) connect_failed(ec);
      }
      if (connecting() && tick % ticks_per_peer_check == 0) {
        // An acceptor that counted itself holds its admission byte until it has let go of its
        // lock byte: both free, it refused the channel after all (its end failed to attach), or
        // took it and went at once. Only a second such look, a check later, fails the connect:
        // an accept packet written before it went is read meanwhile (our reader runs between
        // the two ticks), and the connect then completes as it would have. acquire: as
        // wait_connected's look.
        const bool left = header_->opener_generation.load(std::memory_order_acquire) != 0 &&
                          look_at_peer_locks() == peer_locks::free;
        acceptor_left_looks_ = left ? acceptor_left_looks_ + 1 : 0;
        if (!link_->server_alive() || acceptor_left_looks_ == 2) connect_failed(errc::peer_gone);
      }
    }
    const bool watched = !calls_.empty() || !serving_.empty() || poll_peer_;
    if (tick % ticks_per_peer_check == 0 && watched) {
      // A file truncated under us fails the channel before anything here touches the pages
      // it took (the guard would see to that too, but only once something does).
      if (file_shrunk(seg_)) {
        fail(errc::corrupted);
        break;
      }
      // The lock tells of a death; the generation of a death already followed by a new
      // opener (whose lock hides the old one's absence).
      if (owner_) follow_opener();
      if (peer_left()) end_session();
    }
    if (!housekeeping_due()) break;
  }
  ticking_ = false;
}

void rpc_channel::stop_ticking_if_quiet(int passes) {
  if (!ticking_ || tick_stop_posted_ || housekeeping_due()) return;
  // Not at once: a completion handler that was posted makes its next call from the executor's
  // queue, and cancelling the tick under it would cost a timer cancelled and set again per call.
  // After two turns with nothing pending, the tick goes, so that run() returns now rather than
  // at the next tick (as it does for an idle socket).
  tick_stop_posted_ = true;
  asio::post(strand_, [self = shared_from_this(), passes] {
    self->tick_stop_posted_ = false;
    if (!self->ticking_ || self->housekeeping_due()) return;
    if (passes > 1) return self->stop_ticking_if_quiet(passes - 1);
    self->tick_.cancel();  // the loop wakes, finds nothing to do, and ends
  });
}

}  // namespace shmio::detail
