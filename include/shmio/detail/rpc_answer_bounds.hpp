#pragma once
// What a serving end holds for a peer that reads its answers slowly, or not at all, and the
// bounds on it (rpc_options::max_concurrent_handlers, max_held_bytes). The channel keeps one,
// on its strand, and asks it whether a request may start, must wait, or is refused.
//
// Answers (responses, errors, stream ends) wait in the outbox for room in a ring the other end
// does not read. The reader itself never stops for them: the other end's answers, credits,
// cancels and close come through the same ring, and two ends that stopped reading while each
// waited for the other would wait for ever. New requests wait instead (held_back), and past
// as many are refused or shed.

#include <cstddef>
#include <cstdint>

#include "shmio/detail/rpc_packet.hpp"
#include "shmio/rpc_options.hpp"

namespace shmio::detail {

/// An answer to a request: a response, an error or a stream's end.
inline bool is_answer(const outgoing_message& m) noexcept {
  return m.type == layout::packet_type::response || m.type == layout::packet_type::error ||
         m.type == layout::packet_type::stream_end;
}

struct answer_bounds {
  std::size_t max_handlers = 1024;                              // max_concurrent_handlers
  std::uint64_t max_held_bytes = rpc_options{}.max_held_bytes;  // 0: no bound
  // Answers waiting in the outbox. At max_concurrent_handlers, new requests wait in held_back
  // (past as many, are shed: counted, not served) until some have gone.
  std::size_t queued_answers = 0;
  // Their bytes, with the stream items waiting there (held_size): at max_held_bytes, requests
  // wait in held_back instead of being served, and start as these go. Unlike the count above
  // this slows a client that reads, only slower than it asks; shedding is for one that does not.
  std::uint64_t held_answer_bytes = 0;
  std::uint64_t deferred_bytes = 0;  // the payloads of the requests waiting, against it

  /// What of `m` counts against max_held_bytes while it waits in the outbox: an answer's or a
  /// stream item's bytes (what this end holds for the other end to read), a request's nothing
  /// (max_in_flight bounds those).
  static std::uint64_t held_size(const outgoing_message& m) noexcept {
    return is_answer(m) || m.type == layout::packet_type::stream_item ? m.size() : 0;
  }
  /// `m` went into the outbox.
  void queued(const outgoing_message& m) noexcept {
    if (is_answer(m)) ++queued_answers;
    held_answer_bytes += held_size(m);
  }
  /// `m` left the outbox (written or dropped).
  void left(const outgoing_message& m) noexcept {
    if (is_answer(m) && queued_answers != 0) --queued_answers;
    const std::uint64_t bytes = held_size(m);
    held_answer_bytes -= bytes < held_answer_bytes ? bytes : held_answer_bytes;
  }
  /// A session ended: the outbox was emptied.
  void outbox_cleared() noexcept {
    queued_answers = 0;
    held_answer_bytes = 0;
  }

  /// New requests wait (or, if too many already do, are shed) while this many answers wait.
  /// A stream that ended with items still queued counts once, by its end (or error), which
  /// waits behind them: per item, one stream of a large window would hold back a caller that
  /// reads, only slower than its handler writes. A stream its caller cancelled leaves none
  /// queued (they are taken back).
  bool backlogged() const noexcept { return queued_answers >= max_handlers; }
  /// The answers waiting in the outbox reach max_held_bytes: requests wait in held_back.
  bool over_budget() const noexcept {
    return max_held_bytes != 0 && held_answer_bytes >= max_held_bytes;
  }
  /// Requests wait in held_back rather than start: the answers waiting reach either bound.
  bool holding_back() const noexcept { return backlogged() || over_budget(); }
  /// Answers may wait up to twice max_concurrent_handlers: past that, even a refusal (busy, a
  /// request too large) is not sent but shed, or a peer that never reads would have them grow.
  bool answers_full() const noexcept { return queued_answers >= 2 * max_handlers; }
  /// No more requests may wait, with `waiting` of them: max_concurrent_handlers of them, or
  /// max_held_bytes.
  bool waiting_full(std::size_t waiting) const noexcept {
    return waiting >= max_handlers || (max_held_bytes != 0 && deferred_bytes >= max_held_bytes);
  }
};

}  // namespace shmio::detail
