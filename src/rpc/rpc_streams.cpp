// Streams of rpc_channel: a caller's items received, read and paid for with credit; a handler's
// writes sent as its caller's credit allows. See detail/rpc_stream_state.hpp for the protocol.

#include <algorithm>
#include <asio/dispatch.hpp>
#include <asio/error.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/strand.hpp>
#include <utility>

#include "shmio/detail/rpc_channel.hpp"
#include "shmio/detail/rpc_stream_core.hpp"

namespace shmio::detail {

using layout::packet_type;

// ---- the entry points of rpc_stream and rpc_stream_writer ----------------------------------

const std::string& channel_name(const rpc_channel& ch) noexcept {
  return ch.name();
}

std::uint64_t stream_op_id(rpc_channel& ch) noexcept {
  return ch.next_id();
}

// A stream handler runs on the channel's strand: its writer's executor, and where a write's
// completion goes when its handler has no executor of its own, are that strand, so that such a
// completion never runs beside the handler's coroutine.
const asio::any_io_executor& stream_executor(const rpc_channel& ch) noexcept {
  return ch.strand();
}

std::uint64_t stream_request_id(const stream_state& st) noexcept {
  return st.id;
}

void stream_read(const std::shared_ptr<rpc_channel>& ch, const std::shared_ptr<stream_state>& st,
                 std::uint64_t read_id, pending_call_ptr op) {
  ch->read_stream(st, {read_id, std::move(op), nullptr, 1});
}

void stream_read_batch(const std::shared_ptr<rpc_channel>& ch,
                       const std::shared_ptr<stream_state>& st, std::uint64_t read_id,
                       std::size_t max, pending_items_ptr op) {
  ch->read_stream(st, {read_id, nullptr, std::move(op), max});
}

void stream_cancel_read(const std::shared_ptr<rpc_channel>& ch,
                        const std::shared_ptr<stream_state>& st, std::uint64_t read_id,
                        asio::cancellation_type type) {
  ch->cancel_stream_read(st, read_id, type);
}

void stream_close(const std::shared_ptr<rpc_channel>& ch,
                  const std::shared_ptr<stream_state>& st) noexcept {
  try {
    ch->close_stream(st);
  } catch (...) {
    // Out of memory for the post: the stream ends with the channel instead.
  }
}

void stream_write(const std::shared_ptr<rpc_channel>& ch, std::uint64_t request_id,
                  std::uint64_t session, std::uint64_t write_id, std::vector<std::byte> item,
                  pending_signal_ptr op) {
  ch->write_stream(request_id, session, write_id, std::move(item), std::move(op));
}

bool stream_try_write(const std::shared_ptr<rpc_channel>& ch, std::uint64_t request_id,
                      std::uint64_t session, std::span<const std::byte> item) {
  return ch->try_write_stream(request_id, session, item);
}

void stream_cancel_write(const std::shared_ptr<rpc_channel>& ch, std::uint64_t request_id,
                         std::uint64_t write_id) {
  ch->cancel_stream_write(request_id, write_id);
}

// ---- the caller's side ---------------------------------------------------------------------

void rpc_channel::read_stream(std::shared_ptr<stream_state> st, stream_state::read r) {
  // Dispatched: from a thread of the executor, an item already there is taken now. Its
  // completion is posted (this may run inside the initiating function).
  asio::dispatch(strand_,
                 [self = shared_from_this(), st = std::move(st), r = std::move(r)]() mutable {
                   st->reads.push_back(std::move(r));
                   self->pump_stream(*st);
                 });
}

void rpc_channel::cancel_stream_read(std::shared_ptr<stream_state> st, std::uint64_t read_id,
                                     asio::cancellation_type type) {
  asio::post(strand_, [self = shared_from_this(), st = std::move(st), read_id, type] {
    auto r = std::find_if(st->reads.begin(), st->reads.end(),
                          [&](const stream_state::read& x) { return x.id == read_id; });
    if (r == st->reads.end()) return;  // it completed first
    const auto effects = asio::cancellation_type::terminal | asio::cancellation_type::partial;
    if ((type & effects) != asio::cancellation_type::none && !st->ended) {
      // The stream ends: this read and those after it complete with operation_aborted, in the
      // order they were started.
      self->stats_.cancellations.fetch_add(1, std::memory_order_relaxed);
      return self->abandon_call(st->id, asio::error::operation_aborted);
    }
    // Total cancellation promises no side effect: the read goes, the stream stays.
    auto gone = std::move(*r);
    st->reads.erase(r);
    // In its turn, after the reads that completed before it.
    ordered_delivery::entry e;
    e.ec = asio::error::operation_aborted;
    e.call = std::move(gone.op);
    e.batch = std::move(gone.batch);
    self->deliver_read(*st, std::move(e));
  });
}

void rpc_channel::close_stream(std::shared_ptr<stream_state> st) {
  asio::post(strand_, [self = shared_from_this(), st = std::move(st)] {
    st->items.clear();
    if (st->ended) return;
    self->stats_.cancellations.fetch_add(1, std::memory_order_relaxed);
    self->abandon_call(st->id, asio::error::operation_aborted);  // ends it: reads abort
  });
}

void rpc_channel::on_stream_item(incoming_message m) {
  auto it = calls_.find(m.response_to);
  // (A request waiting for credit still holds its call: `call` covers it.)
  if (it == calls_.end() || !it->second.stream || it->second.call || it->second.queued_whole) {
    // A call answered with an item, or a stream whose request was not even sent yet (waiting
    // for credit, or queued whole: its id guessed): that call fails, and its request is never
    // sent. Else a stream cancelled or ended here: the item is late.
    if (it != calls_.end()) return abandon_call(m.response_to, errc::corrupted);
    stats_.discarded_replies.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  const auto keep = it->second.stream;  // the entry may go while items are handed out
  stream_state& st = *keep;
  if (st.received >= st.allowed) {
    // Past the credit granted: the handler's end does not keep the protocol. Taking it would
    // let a stream hold without bound; the stream ends instead, and the handler is cancelled.
    stats_.packets_rejected.fetch_add(1, std::memory_order_relaxed);
    return abandon_call(m.response_to, errc::corrupted);
  }
  ++st.received;
  stats_.stream_items_received.fetch_add(1, std::memory_order_relaxed);
  stats_.bytes_received.fetch_add(m.bytes().size(), std::memory_order_relaxed);
  m.own();  // kept until read
  st.items.push_back(std::move(m.payload));
  pump_stream(st);
}

void rpc_channel::credit_read(stream_state& st) {
  ++st.unreported;
  // Credit for what was read, in batches of half a window: the handler never waits for more
  // than that while its caller keeps reading. (A stream that has not ended is in calls_:
  // finish_call ends it as it erases it.)
  if (!st.ended && st.unreported >= std::max<std::uint32_t>(1, st.window / 2)) {
    // A peer that does not read its ring has our last grant still unsent (in the writer's hands
    // or the outbox): the new one joins it, rather than a message per grant without end. It is
    // granted only while it fits one packet's count: past that, the peer has sent a window
    // beyond what it could have heard of, and its next item ends the stream (on_stream_item).
    const auto join = [&](outgoing_message& q) {
      std::uint32_t queued = 0;
      if (q.type != packet_type::stream_credit || q.response_to != st.id || q.next_packet != 1 ||
          !decode_credit(q.payload, queued))
        return false;
      if (layout::max_stream_window - queued >= st.unreported) {
        st.allowed += st.unreported;
        q.payload = encode_credit(queued + st.unreported);  // the same size: still one packet
        st.unreported = 0;
      }
      return true;
    };
    // On the strand, as the writer loop is, which reads current_'s bytes only as it writes them.
    if (current_ && !current_started_ && join(*current_)) return;
    for (outgoing_message& q : outbox_)
      if (join(q)) return;
    st.allowed += st.unreported;
    send({packet_type::stream_credit, next_id(), st.id, encode_credit(st.unreported)});
    st.unreported = 0;
  }
}

void ordered_delivery::push(entry e) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(e));
    if (out_) {
      if (!keep_) {
        keep_ = shared_from_this();
        // And the channel: a waiting completion may name it (rpc_error's text).
        keep_owner_ = owner_.lock();
      }
      return;
    }
  }
  send_next();
}

void ordered_delivery::delivered(std::size_t) noexcept {
  {
    std::lock_guard lock(mutex_);
    out_ = false;
  }
  try {
    send_next();
  } catch (...) {
    // No memory for the post: the op is gone with its handler (as a post that fails loses
    // any handler); the rest wait for the next push.
  }
}

void ordered_delivery::send_next() {
  entry e;
  // Let go after the mutex: they may be the last owners.
  std::shared_ptr<void> owner;
  std::shared_ptr<ordered_delivery> last;
  {
    std::lock_guard lock(mutex_);
    if (out_) return;
    if (head_ == queue_.size()) {
      queue_.clear();
      head_ = 0;
      last = std::move(keep_);
      owner = std::move(keep_owner_);
      return;
    }
    e = std::move(queue_[head_++]);
    out_ = true;
    // Handlers that each start the next operation before the one after them is punched keep
    // entries waiting: the spent ones go now and then, or the vector would only grow.
    if (head_ >= 16 && 2 * head_ >= queue_.size()) {
      queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(head_));
      head_ = 0;
    }
  }
  // Should the post fail (no memory), the ticket is destroyed with the handler: punched, it
  // lets the next go (delivered()).
  delivery_ticket ticket(weak_from_this(), 0);
  if (e.call)
    complete_counted(std::move(e.call), std::move(ticket), e.ec, reply_bytes::of(e.bytes), false);
  else if (e.batch)
    complete_counted(std::move(e.batch), std::move(ticket), e.ec, std::move(e.items), false);
  else if (e.signal)
    complete_counted(std::move(e.signal), std::move(ticket), e.ec, false);
}

void rpc_channel::deliver_read(stream_state& st, ordered_delivery::entry e) {
  if (!st.delivery) st.delivery = std::make_shared<ordered_delivery>(weak_from_this());
  st.delivery->push(std::move(e));
}

void rpc_channel::pump_stream(stream_state& st) {
  // Completed in this order (ordered_delivery), whatever executor each handler has.
  while (!st.reads.empty()) {
    stream_state::read& front = st.reads.front();
    // A batch of at most 0 items takes none: it completes in its turn (once the stream has
    // ended and every item is read, with the end, as every read does).
    const bool takes_none = front.batch && front.max == 0 && (!st.ended || !st.items.empty());
    if (st.items.empty() && !takes_none) break;
    auto r = std::move(front);
    st.reads.pop_front();
    ordered_delivery::entry e;
    if (r.batch) {
      // At most what has come, which is at most a window: the vector is bounded.
      const std::size_t n = std::min(r.max, st.items.size());
      e.items.reserve(n);
      for (std::size_t k = 0; k < n; ++k) {
        e.items.push_back(std::move(st.items.front()));
        st.items.pop_front();
        credit_read(st);
      }
      e.batch = std::move(r.batch);
    } else {
      e.bytes = std::move(st.items.front());
      st.items.pop_front();
      credit_read(st);
      e.call = std::move(r.op);
    }
    deliver_read(st, std::move(e));
  }
  if (!st.ended || !st.items.empty()) return;
  while (!st.reads.empty()) {
    auto r = std::move(st.reads.front());
    st.reads.pop_front();
    ordered_delivery::entry e;
    e.ec = st.end;
    if (r.batch) {
      // As a single read gets a remote error's text as its bytes, a batch gets it as its item.
      if (!st.end_text.empty()) e.items.push_back(st.end_text);
      e.batch = std::move(r.batch);
    } else {
      e.bytes = st.end_text;
      e.call = std::move(r.op);
    }
    deliver_read(st, std::move(e));
  }
}

// ---- the handler's side --------------------------------------------------------------------

void rpc_channel::write_stream(std::uint64_t request_id, std::uint64_t session,
                               std::uint64_t write_id, std::vector<std::byte> item,
                               pending_signal_ptr op) {
  // Dispatched: a handler's write from the strand goes out now. Completions are posted (this
  // may run inside the initiating function).
  asio::dispatch(strand_, [self = shared_from_this(), request_id, session, write_id,
                           item = std::move(item), op = std::move(op)]() mutable {
    // Its caller went (the session it was written for is over): peer_gone, as for a write
    // pending then, also once this end closed after it (an rpc_server closes the end of a
    // client that died, maybe before this runs).
    if (session != self->session_) return complete(std::move(op), errc::peer_gone, false);
    auto it = self->serving_.find(request_id);
    // Failed in its turn, after its stream's writes that finished before it (if the entry is
    // still there: else none can be on its way).
    auto fail = [&](std::error_code ec) {
      if (it != self->serving_.end() && it->second.stream.active)
        return self->finish_stream_write(it->second.stream, std::move(op), ec);
      complete(std::move(op), ec, false);
    };
    // closing(): once close() began, send() drops what it is given, so a write that went on
    // would report an item sent that never is.
    if (self->closing()) return fail(asio::error::operation_aborted);
    if (it == self->serving_.end() || !it->second.stream.active || it->second.stream.ended)
      return fail(asio::error::operation_aborted);
    // One too large is refused in its turn, after the writes queued before it (flush).
    it->second.stream.writes.push_back({write_id, std::move(item), std::move(op)});
    self->flush_stream_writes(request_id, it->second.stream);
  });
}

void rpc_channel::cancel_stream_write(std::uint64_t request_id, std::uint64_t write_id) {
  asio::post(strand_, [self = shared_from_this(), request_id, write_id] {
    auto it = self->serving_.find(request_id);
    if (it == self->serving_.end()) return;
    auto& writes = it->second.stream.writes;
    auto w = std::find_if(writes.begin(), writes.end(),
                          [&](const stream_writer_state::write& x) { return x.id == write_id; });
    if (w == writes.end()) return;  // sent, or failed, first
    auto op = std::move(w->op);
    writes.erase(w);  // nothing of it went: the stream goes on without it
    self->finish_stream_write(it->second.stream, std::move(op), asio::error::operation_aborted);
  });
}

bool rpc_channel::try_write_stream(std::uint64_t request_id, std::uint64_t session,
                                   std::span<const std::byte> item) {
  // The state is the strand's: only from a coroutine running there (a stream handler's, as
  // co_spawned by the channel). Elsewhere the caller takes the async path.
  const auto* io_strand = strand_.target<asio::strand<asio::io_context::executor_type>>();
  const auto* any_strand = strand_.target<asio::strand<asio::any_io_executor>>();
  if (!(io_strand ? io_strand->running_in_this_thread()
                  : any_strand && any_strand->running_in_this_thread()))
    return false;
  if (closing() || session != session_) return false;  // as in write_stream
  auto it = serving_.find(request_id);
  if (it == serving_.end()) return false;
  stream_writer_state& w = it->second.stream;
  // An earlier write still waiting goes first; a too-large item is refused on the async path.
  if (!w.active || w.ended || !w.writes.empty() || !may_send_item(w) ||
      item.size() > reassembler_max())
    return false;
  // Sent from where the item is: send() writes it now if the ring has room, or copies it.
  outgoing_message m{packet_type::stream_item, next_id(), request_id, {}};
  m.borrowed[0] = item;
  // Not sent because close() began meanwhile on another thread: the async form, which co_write
  // falls back on, then fails with operation_aborted.
  return send_stream_item(w, std::move(m));
}

bool rpc_channel::send_stream_item(stream_writer_state& w, outgoing_message m) {
  --w.credit;
  const std::uint64_t bytes = m.size();
  // Counted in w.unsent if it waits in the outbox (note_queued).
  if (!send(std::move(m))) return false;
  // relaxed: counters.
  stats_.stream_items_sent.fetch_add(1, std::memory_order_relaxed);
  stats_.bytes_sent.fetch_add(bytes, std::memory_order_relaxed);
  return true;
}

void rpc_channel::stream_item_left_outbox(std::uint64_t request_id) {
  auto it = serving_.find(request_id);
  if (it == serving_.end()) return;  // its stream ended meanwhile (end_serving)
  stream_writer_state& w = it->second.stream;
  if (w.unsent == 0) return;
  --w.unsent;
  flush_stream_writes(request_id, w);
}

void rpc_channel::on_stream_credit(const incoming_message& m) {
  std::uint32_t count = 0;
  auto it = serving_.find(m.response_to);
  if (!decode_credit(m.bytes(), count)) {
    stats_.packets_rejected.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (it == serving_.end() || !it->second.stream.active || it->second.stream.ended) return;
  auto& w = it->second.stream;
  // Never more than a window's worth (and the caller ends a stream that sends past what it
  // granted). A grant for items never read is held back by `unsent`.
  w.credit = std::min<std::uint64_t>(w.credit + count, w.window);
  flush_stream_writes(m.response_to, w);
}

void rpc_channel::flush_stream_writes(std::uint64_t request_id, stream_writer_state& w) {
  if (w.flushing) return;  // the loop below, further up this stack, goes on
  w.flushing = true;
  struct done_flushing {
    stream_writer_state& w;
    ~done_flushing() { w.flushing = false; }
  } guard{w};
  while (!w.writes.empty() && !closing()) {  // the rest are aborted as the channel shuts down
    if (w.writes.front().item.size() > reassembler_max()) {  // refused, using no credit
      auto op = std::move(w.writes.front().op);
      w.writes.pop_front();
      finish_stream_write(w, std::move(op), errc::message_too_large);
      continue;
    }
    if (!may_send_item(w)) {
      // Held by max_held_bytes (not by its credit): the next answer to leave flushes it.
      if (w.may_send()) stream_writes_held_ = true;
      break;
    }
    auto next = std::move(w.writes.front());
    w.writes.pop_front();
    const bool sent = send_stream_item(
        w, {packet_type::stream_item, next_id(), request_id, std::move(next.item)});
    finish_stream_write(w, std::move(next.op),
                        sent ? std::error_code() : asio::error::operation_aborted);
  }
}

void rpc_channel::finish_stream_write(stream_writer_state& w, pending_signal_ptr op,
                                      std::error_code ec) {
  if (!w.delivery) w.delivery = std::make_shared<ordered_delivery>(weak_from_this());
  ordered_delivery::entry e;
  e.signal = std::move(op);
  e.ec = ec;
  w.delivery->push(std::move(e));
}

void rpc_channel::end_stream_writes(stream_writer_state& w, std::error_code why) {
  // Nothing more goes out for it: not its later writes, nor an end or error when it returns.
  w.ended = true;
  auto writes = std::move(w.writes);
  w.writes.clear();
  for (auto& x : writes)
    finish_stream_write(w, std::move(x.op), why);
}

}  // namespace shmio::detail
