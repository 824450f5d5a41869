// rpc_channel's writing half: sending a message now when the ring has room, else queueing it
// for the writer loop, which writes the outbox in order as room comes.
#include <asio/bind_cancellation_slot.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/post.hpp>
#include <asio/use_awaitable.hpp>
#include <tuple>
#include <utility>

#include "shmio/detail/recycled_map.hpp"
#include "shmio/detail/ring_ops.hpp"
#include "shmio/detail/rpc_channel.hpp"

#include "channel_waits.hpp"

namespace shmio::detail {

using layout::packet_type;
using namespace channel_waits;

bool rpc_channel::send(outgoing_message m) {
  // After close() began, the other end has had our close packet: nothing follows it.
  if (closing()) return false;
  m.generation = generation_;
  // Fast path: nothing queued and the writer idle, so write now, packet by packet, as far as
  // the ring has room. Order is kept: the writer only ever starts on the outbox's front.
  if (outbox_.empty() && !writer_busy_) {
    const std::uint32_t count = packets_for(m.size(), payload_per_packet(out_.node_size()));
    while (m.next_packet <= count) {
      auto fill = [&](std::span<std::byte> node) {
        return encode_packet(m, m.next_packet, out_.node_size(), node);
      };
      const auto written = write_unless_closing(fill);
      if (!written) break;  // full: the writer loop waits for room
      if (written->ec == asio::error::operation_aborted) return false;  // close() began
      if (written->ec) {
        // Taken: the damaged ring fails its call (a request's), or the whole channel soon
        // after (a stream's packet), which every waiter then hears of.
        send_failed(m, written->ec);
        return true;
      }
      stats_.packets_sent.fetch_add(1, std::memory_order_relaxed);
      ++m.next_packet;
    }
    if (m.next_packet > count) return true;
  }
  m.own();  // what waits in the outbox owns its bytes: a borrower may be gone before it goes
  if (is_answer(m) && m.next_packet == 1) {
    if (auto* n = insert_recycled(answers_whole_, spare_answers_, m.response_to))
      *n = 1;  // a recycled node keeps its old count
    else
      ++answers_whole_[m.response_to];
  }
  bounds_.queued(m);  // bounded: see answer_bounds
  // Before the writer loop may start: co_spawn runs it here, inside this call, on the strand.
  note_queued(m);
  outbox_.push_back(std::move(m));
  if (!writer_running_) {
    writer_running_ = true;
    asio::co_spawn(strand_, writer_loop(shared_from_this()), asio::detached);
  }
  return true;
}

void rpc_channel::note_queued(const outgoing_message& m) noexcept {
  if (m.type == packet_type::request && m.next_packet == 1) {
    if (auto it = calls_.find(m.id); it != calls_.end()) it->second.queued_whole = true;
  } else if (m.type == packet_type::stream_item) {
    if (auto it = serving_.find(m.response_to); it != serving_.end()) ++it->second.stream.unsent;
  }
}

void rpc_channel::send_failed(const outgoing_message& m, std::error_code ec) {
  // The ring refused a packet (its tail is damaged): the rest of the message is dropped, as
  // retrying could never succeed. Its caller must not wait for a timeout: a request of ours
  // fails now, with the ring's error. A reply, error or cancel is only counted: the server goes
  // on, and its caller over there times out.
  stats_.send_failures.fetch_add(1, std::memory_order_relaxed);
  if (m.type == packet_type::request && calls_.contains(m.id)) finish_call(m.id, ec, {});
  // A stream has no timeout to end it: a lost item, end or credit would leave one end waiting
  // for ever. The channel fails instead (later, outside whatever loop is sending), and the
  // other end hears of it as of a close.
  // So does a truncated file (the truncation guard kept us alive), for every packet.
  if (m.type == packet_type::stream_item || m.type == packet_type::stream_end ||
      m.type == packet_type::stream_credit || seg_.faulted())
    asio::post(strand_, [self = shared_from_this(), ec] {
      if (!self->closed_) self->fail(ec);
    });
}

void rpc_channel::send_error(std::uint64_t to, std::error_code ec, std::string_view text) {
  // An error is a message like any other: over max_message_size, the caller would refuse it and
  // hear message_too_large, not the error. The text is cut to fit after the code's 4 bytes.
  const std::uint64_t room = reassembler_max() > 4 ? reassembler_max() - 4 : 0;
  if (text.size() > room) text = text.substr(0, static_cast<std::size_t>(room));
  // relaxed: a counter; counted only if it goes (not after close() began).
  if (send({packet_type::error, next_id(), to, encode_error(ec.value(), text)}))
    stats_.errors_sent.fetch_add(1, std::memory_order_relaxed);
}

asio::awaitable<void> rpc_channel::writer_loop([[maybe_unused]] std::shared_ptr<rpc_channel> self) {
  // It runs while the outbox holds something (send starts it), and parks no wait otherwise: an
  // idle end holds no work.
  struct running_flag {
    rpc_channel& ch;
    ~running_flag() {
      ch.writer_running_ = false;
      ch.current_ = nullptr;
    }
  } flag{*this};
  while (!outbox_.empty()) {
    if (closed_) co_return;
    writer_busy_ = true;
    const std::uint64_t session = session_;
    outgoing_message m = std::move(outbox_.front());
    outbox_.pop_front();
    answer_left(m);
    // Until its first packet is in the ring, withdraw() may still drop it (a call that timed
    // out or was cancelled meanwhile is not sent).
    current_ = &m;
    current_started_ = m.next_packet > 1;
    current_withdrawn_ = false;
    const std::uint32_t count = packets_for(m.size(), payload_per_packet(out_.node_size()));
    for (; m.next_packet <= count; ++m.next_packet) {
      auto fill = [&m, this](std::span<std::byte> node) {
        return encode_packet(m, m.next_packet, out_.node_size(), node);
      };
      // On the strand (the waiter's executor), as withdraw() is: the two never overlap.
      auto write_packet = [&]() -> size_outcome {
        if (current_withdrawn_) return outcome<std::size_t>{asio::error::operation_aborted, 0};
        auto r = write_unless_closing(fill);  // operation_aborted once close() began
        if (r && !r->ec && !std::exchange(current_started_, true) && m.type == packet_type::request)
          request_started(m.id);
        return r;
      };
      // A free node is taken without a trip through the strand's scheduler.
      std::error_code ec;
      if (auto ready = waiter_->try_now(out_queue, write_packet))
        ec = ready->ec;
      else
        std::tie(ec, std::ignore) = co_await async_attempt(
            strand_, waiter_, out_queue, write_packet,
            asio::bind_cancellation_slot(writer_cancel_.slot(), as_tuple_awaitable));
      if (closed_) co_return;
      if (current_withdrawn_) break;  // dropped unsent; its call has completed
      if (!ec) stats_.packets_sent.fetch_add(1, std::memory_order_relaxed);
      // Its reader is gone (the wait may have been cut short for that): drop the rest, so the
      // next opener is not fed a message it would only drop.
      if (session != session_) break;
      // The ring's own errors come in shmio's category; anything else is the wait aborted
      // because this end is closing.
      if (ec && ec.category() == shmio::error_category()) {
        current_ = nullptr;  // send_failed may start other sends
        send_failed(m, ec);
        break;  // the next message may still go (and fail at once if the ring stays damaged)
      }
      if (ec) co_return;
    }
    current_ = nullptr;
    writer_busy_ = false;
    // Written, or dropped: either way out of the outbox, and its stream may send more.
    if (m.type == packet_type::stream_item) stream_item_left_outbox(m.response_to);
  }
}

}  // namespace shmio::detail
