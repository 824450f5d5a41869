#include "shmio/detail/rpc_channel.hpp"

#include <algorithm>
#include <asio/bind_cancellation_slot.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/strand.hpp>
#include <utility>

#include "shmio/detail/platform.hpp"
#include "shmio/detail/recycled_map.hpp"
#include "shmio/detail/ring_ops.hpp"

#include "channel_waits.hpp"

namespace shmio::detail {
namespace {

namespace platform = detail::platform;
using layout::packet_type;
using namespace std::chrono_literals;
using namespace channel_waits;

// How long the reader loop looks for the next packet before it waits: a round trip's other half
// takes a few microseconds.
constexpr auto linger_for_packets = std::chrono::microseconds(4);
// How long a service's end of a connection takes packets in one turn before it lets the rest of
// its executor run: a service's connections share one io_context, and a client that keeps its
// ring full must not keep the others' requests (or the listener's connects) unread. A turn
// costs a trip through the scheduler. The clock is read from the second packet of a run on (a
// round trip's single packet never pays for it): after each of the first few, so that a handler
// that takes long ends the turn soon, then every few, so that a long run of quick ones pays
// little.
constexpr auto reader_turn = std::chrono::microseconds(200);
constexpr std::uint32_t packets_looked_at_each = 16;
constexpr std::uint32_t packets_per_clock_look = 8;
// Any other end's turn: longer, and timed from its 8th packet on, its clock read every 8 (a
// round trip, whose server end often takes a second request within its linger, pays none). It
// has the strand to share all the same (its timeouts, its writer, the user's handlers there),
// and a peer that never lets the ring go empty, with packets good or bad, must not keep them
// from running.
constexpr auto lone_reader_turn = std::chrono::milliseconds(1);

std::error_code error_from_wire(int value) {
  // Only shmio's own values travel; anything else is reported as a remote failure.
  if (value >= static_cast<int>(errc::not_found) && value <= static_cast<int>(errc::no_such_method))
    return static_cast<errc>(value);
  return errc::remote_error;
}

// The channel's strand. Asio keeps an any_io_executor's target in place only up to 24 bytes
// (a shared_ptr and a pointer): strand<io_context::executor_type> fits, strand<any_io_executor>
// does not and goes on the heap, so that each of the copies, prefers and requires Asio makes
// per handler allocates anew. Other executors keep the general (allocating) form.
asio::any_io_executor make_channel_strand(const asio::any_io_executor& ex) {
  if (const auto* io = ex.target<asio::io_context::executor_type>()) return asio::make_strand(*io);
  return asio::make_strand(ex);
}

}  // namespace

rpc_channel::rpc_channel(const asio::any_io_executor& ex, rpc_service service)
    : ex_(ex),
      strand_(make_channel_strand(ex)),
      service_(std::move(service)),
      next_id_(platform::random_u64() >> 2 | 1),
      tick_(strand_),
      reassembler_(0xFFFF'FFFFull) {
  spare_calls_.reserve(max_spare_nodes);
  spare_serving_.reserve(max_spare_nodes);
  spare_answers_.reserve(max_spare_nodes);
}

rpc_channel::~rpc_channel() {
  if (waiter_) waiter_->shutdown();
}

void rpc_channel::start_loops() {
  // The writer starts with the first message that has to wait for room (send); the reader now
  // if this end serves, else with the first thing it waits for.
  if (!idle()) ensure_reader();
}

void rpc_channel::ensure_reader() {
  if (reader_running_ || closed_) return;
  reader_running_ = true;
  // Started from a posted handler, never inline: run at once, the reader would be inside
  // whatever called this (a call's start, a connect), which could see a packet end the session
  // or complete that very operation under it.
  try {
    post_reader_run(shared_from_this());
  } catch (...) {
    reader_running_ = false;  // no reader after all: the next call tries again
    throw;
  }
}

void rpc_channel::stop_reader_if_idle() {
  stop_ticking_if_quiet();
  if (!reader_parked_ || reader_stop_ || !idle()) return;
  reader_stop_ = true;
  reader_cancel_.emit(asio::cancellation_type::terminal);
}

rpc_statistics rpc_channel::statistics() const {
  auto get = [](const std::atomic<std::uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  return {get(stats_.requests_sent),     get(stats_.requests_received),
          get(stats_.responses_sent),    get(stats_.responses_received),
          get(stats_.errors_sent),       get(stats_.errors_received),
          get(stats_.bytes_sent),        get(stats_.bytes_received),
          get(stats_.packets_sent),      get(stats_.packets_received),
          get(stats_.packets_rejected),  get(stats_.packets_stale),
          get(stats_.discarded_replies), get(stats_.timeouts),
          get(stats_.cancellations),     get(stats_.pending),
          get(stats_.send_failures),     get(stats_.requests_withdrawn),
          get(stats_.stream_items_sent), get(stats_.stream_items_received),
          get(stats_.requests_shed),     get(stats_.requests_deferred)};
}

// ---- reading -----------------------------------------------------------------------------

size_outcome rpc_channel::read_packet() {
  auto copy = [this](std::span<const std::byte> node) {
    packet_.resize(node.size());  // within the reserved node size: no allocation
    copy_bytes(packet_.data(), node.data(), node.size());
  };
  auto r = attempt_read(in_, copy, in_.node_size());
  // The file truncated under us: what was read may be the guard's zeros.
  if (seg_.faulted()) return size_outcome{outcome<std::size_t>{errc::corrupted, 0}};
  return r;
}

void rpc_channel::post_reader_run(std::shared_ptr<rpc_channel> self) {
  asio::post(strand_, [self = std::move(self)]() mutable {
    rpc_channel* c = self.get();
    c->reader_run(std::move(self));
  });
}

void rpc_channel::reader_run(std::shared_ptr<rpc_channel> self) {
  auto take = [this] { return read_packet(); };
  try {
    for (;;) {
      // A packet that is there already is taken without a trip through the strand's scheduler.
      auto ready = waiter_->try_now(in_queue, take);
      if (!ready) break;
      if (!reader_take(self, ready->ec, ready->value)) return;
    }
    ring_found_empty();
    // Nothing to read, and nothing of ours waits for the other end: an idle end parks no
    // wait (it would hold the io_context's work). The next call starts the reader again.
    if (idle()) {
      reader_running_ = false;
      return;
    }
  } catch (...) {
    reader_failed();
    throw;
  }
  reader_parked_ = true;
  try {
    // The handler holds a reference of its own: `self` must outlive a throw from here, for
    // the catch below.
    waiter_->async_wait<std::size_t>(
        strand_, in_queue, take,
        asio::bind_cancellation_slot(reader_cancel_.slot(),
                                     [self](std::error_code ec, std::size_t n) mutable {
                                       rpc_channel* c = self.get();
                                       c->reader_woken(std::move(self), ec, n);
                                     }));
  } catch (...) {
    // No memory for the wait, which may or may not have been left parked (or have taken a
    // packet): a second reader could run beside it, so the channel fails instead, as a channel
    // whose ring fails does.
    reader_parked_ = false;
    reader_running_ = false;
    fail(make_error_code(std::errc::not_enough_memory));
    throw;
  }
}

void rpc_channel::reader_woken(std::shared_ptr<rpc_channel> self, std::error_code ec,
                               std::size_t n) {
  reader_parked_ = false;
  // Cut short because this end became idle (stop_reader_if_idle): look again.
  if (std::exchange(reader_stop_, false) && ec == asio::error::operation_aborted && !closed_)
    return reader_run(std::move(self));
  try {
    if (!reader_take(self, ec, n)) return;
  } catch (...) {
    reader_failed();
    throw;
  }
  reader_run(std::move(self));  // (which handles its own throws)
}

void rpc_channel::reader_failed() noexcept {
  // A handler run inline threw (the exception goes on to the caller of run(), as a handler's
  // would), or memory ran out: the reader stops here, and starts again from the strand's queue
  // if anything still waits for a packet, as an Asio I/O object goes on after a handler threw.
  reader_running_ = false;
  reader_parked_ = false;
  if (closing() || idle()) return;
  try {
    ensure_reader();
  } catch (...) {  // no memory to post it: the next call starts it
  }
}

bool rpc_channel::reader_take(std::shared_ptr<rpc_channel>& self, std::error_code ec,
                              std::size_t n) {
  auto stop = [this] {
    reader_running_ = false;
    return false;
  };
  auto take = [this] { return read_packet(); };
  bool turn_started = false;
  std::chrono::steady_clock::time_point turn_start;  // of a long turn: see reader_turn
  for (std::uint32_t taken = 1;; ++taken) {
    // close() may come from another thread: no handler runs for a packet after it.
    if (closing()) return stop();
    if (ec == errc::corrupted) {
      ++taken_since_empty_;  // a node taken all the same
      // relaxed: a statistic.
      stats_.packets_rejected.fetch_add(1, std::memory_order_relaxed);
      // The ring skips a bad node and says so; a damaged head says so for ever, without a
      // node to skip. More bad results in a row than the ring has nodes can only be that:
      // taking again would spin, so the channel fails and closes.
      // A truncated file fails the channel at once: its pages are gone.
      if (++corrupt_run_ > in_.node_count() || seg_.faulted()) {
        fail(errc::corrupted);
        return stop();
      }
    } else if (ec) {
      return stop();  // aborted: this end is closing
    } else {
      corrupt_run_ = 0;
      ++taken_since_empty_;
      on_packet({packet_.data(), n});
    }
    const bool look_at_clock = takes_turns_ ? taken >= 2 && (taken < packets_looked_at_each ||
                                                             taken % packets_per_clock_look == 0)
                                            : taken % packets_per_clock_look == 0;
    if (look_at_clock) {
      const auto now = std::chrono::steady_clock::now();
      if (!std::exchange(turn_started, true)) {
        turn_start = now;
      } else if (now - turn_start >= (takes_turns_ ? reader_turn : lone_reader_turn)) {
        // Its turn is over: behind whatever else waits for the executor (a handler, a timer,
        // another connection's reader that its doorbell woke).
        post_reader_run(self);
        return false;
      }
    }
    // Drain what is already there without another trip through the executor. An answer
    // comes microseconds after a request (and the next request soon after an answer), and
    // waiting for it through the executor costs a trip at least: look a little first.
    if (closing()) return stop();
    auto more = take();
    if (!more) more = waiter_->spin().tight_spin_for(take, linger_for_packets);
    if (!more) {
      ring_found_empty();
      return true;
    }
    ec = more->ec;
    n = more->value;
  }
}

void rpc_channel::on_packet(std::span<const std::byte> bytes) {
  stats_.packets_received.fetch_add(1, std::memory_order_relaxed);
  auto packet = parse_packet(bytes, in_.node_size());
  if (!packet) {
    stats_.packets_rejected.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (!from_peer(packet->header.generation)) {
    stats_.packets_stale.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  // A message of one packet is seen where it was read: whoever keeps it past this packet copies
  // it first (incoming_message::own), so a call or a plain handler's request costs no copy.
  incoming_message m;
  switch (reassembler_.add(*packet, m, true)) {
    case reassembler::result::incomplete:
      return;
    case reassembler::result::complete:
      return on_message(std::move(m));
    case reassembler::result::rejected:
      stats_.packets_rejected.fetch_add(1, std::memory_order_relaxed);
      if (reassembler_.last_rejected_too_large()) {
        const auto& h = packet->header;
        fail_waiting(static_cast<packet_type>(h.type), h.message_id, h.response_to,
                     errc::message_too_large,
                     reassembler_.last_rejected_over_budget()
                         ? "request would pass max_reassembly_bytes with the messages in part"
                         : "request larger than max_message_size");
      }
      if (const auto& broken = reassembler_.last_dropped())
        fail_waiting(broken->type, broken->id, broken->response_to, errc::corrupted,
                     "request's packets did not fit together");
      return;
  }
}

void rpc_channel::fail_waiting(packet_type type, std::uint64_t id, std::uint64_t response_to,
                               std::error_code ec, std::string_view request_text) {
  // A message refused at its first packet, or begun and then garbled, will never be whole: what
  // waits for it is told now, rather than at a timeout (or never, without one).
  switch (type) {
    case packet_type::request:
      // The caller over there waits for an answer. Shed as a whole request would be while the
      // other end is not reading our answers, or they would pile up unbounded.
      if (bounds_.answers_full() ||
          (bounds_.backlogged() && bounds_.waiting_full(held_back_.size() + deferred_.size())))
        stats_.requests_shed.fetch_add(1, std::memory_order_relaxed);
      else
        send_error(id, ec, request_text);
      break;
    case packet_type::response:
    case packet_type::error:
      finish_call(response_to, ec, {}, true);
      break;
    case packet_type::stream_item:
      // The stream ends, and its handler over there hears of it (it would write on).
      if (calls_.contains(response_to)) abandon_call(response_to, ec);
      break;
    default:  // a cancel, an end or a credit is one packet: never in part, never too large
      break;
  }
}

void rpc_channel::on_message(incoming_message m) {
  switch (m.type) {
    case packet_type::request:
      stats_.requests_received.fetch_add(1, std::memory_order_relaxed);
      stats_.bytes_received.fetch_add(m.bytes().size(), std::memory_order_relaxed);
      // Our answers wait for the other end to read them: this one waits to start (unchecked,
      // so that not even an error answer adds to them), behind any that already wait.
      if (bounds_.holding_back() || !held_back_.empty()) return hold_back(std::move(m));
      return start_request(std::move(m));
    case packet_type::response:
      stats_.responses_received.fetch_add(1, std::memory_order_relaxed);
      stats_.bytes_received.fetch_add(m.bytes().size(), std::memory_order_relaxed);
      return finish_call(m.response_to, {},
                         m.viewed ? reply_bytes(m.view) : reply_bytes::of(m.payload), true);
    case packet_type::error: {
      stats_.errors_received.fetch_add(1, std::memory_order_relaxed);
      int value = 0;
      std::string text;
      decode_error(m.bytes(), value, text);
      const auto* p = reinterpret_cast<const std::byte*>(text.data());
      return finish_call(m.response_to, error_from_wire(value), std::span(p, text.size()), true);
    }
    case packet_type::cancel:
      if (auto it = serving_.find(m.response_to); it != serving_.end()) {
        stats_.cancellations.fetch_add(1, std::memory_order_relaxed);
        // A stream's writes fail first (nobody reads them), its items still queued whole are
        // taken back (bounded by its window), then its coroutine hears of it.
        if (it->second.stream.active)
          std::erase_if(outbox_, [&](const outgoing_message& q) {
            const bool drop = q.type == packet_type::stream_item &&
                              q.response_to == m.response_to && q.next_packet == 1;
            if (drop && it->second.stream.unsent != 0) --it->second.stream.unsent;
            if (drop) answer_left(q);
            return drop;
          });
        end_stream_writes(it->second.stream, asio::error::operation_aborted);
        if (auto again = serving_.find(m.response_to); again != serving_.end())
          again->second.signal.emit(asio::cancellation_type::terminal);
        return;
      }
      // Not started yet: it never will be.
      for (auto* queue : {&held_back_, &deferred_})
        for (auto d = queue->begin(); d != queue->end(); ++d)
          if (d->id == m.response_to) {
            stats_.cancellations.fetch_add(1, std::memory_order_relaxed);
            bounds_.deferred_bytes -= d->bytes().size();
            queue->erase(d);  // bounded by max_concurrent_handlers
            return;
          }
      // Served already, its answer still waiting whole: its caller gave up and would only drop
      // it, and while it waits it counts against the bounds (a caller within its credit, whose
      // timed-out calls leave answers here, would otherwise be held back or shed).
      if (!answers_whole_.contains(m.response_to)) return;
      if (auto a = std::find_if(outbox_.begin(), outbox_.end(),
                                [&](const outgoing_message& q) {
                                  return is_answer(q) && q.response_to == m.response_to &&
                                         q.next_packet == 1;
                                });
          a != outbox_.end()) {
        stats_.cancellations.fetch_add(1, std::memory_order_relaxed);
        const outgoing_message dropped = std::move(*a);
        outbox_.erase(a);  // bounded: see answer_bounds
        answer_left(dropped);
      }
      return;
    case packet_type::close:
      return end_session();
    case packet_type::accept:
      return on_accepted();
    case packet_type::stream_item:
      return on_stream_item(std::move(m));
    case packet_type::stream_end:
      stats_.responses_received.fetch_add(1, std::memory_order_relaxed);
      return finish_call(m.response_to, {}, {}, true, true);
    case packet_type::stream_credit:
      return on_stream_credit(m);
  }
}

}  // namespace shmio::detail
