#pragma once
// The state of streams in an RPC channel: a caller's (its items received and not yet read, its
// readers, its credit) and a handler's (its credit and the writes waiting for it). Strand-only.
//
// Credit: a stream request carries its window, the items its handler may send before it hears
// more; the caller grants more with stream_credit packets as its reads take items. An item past
// the granted total breaks the protocol and ends the stream with errc::corrupted, so neither
// end ever holds more than a window of a stream's items.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <system_error>
#include <vector>

#include "shmio/detail/rpc_pending.hpp"

namespace shmio::detail {

struct stream_state {
  struct read {
    std::uint64_t id;
    pending_call_ptr op;      // one item (async_read), or
    pending_items_ptr batch;  // up to `max` items at once (async_read_batch)
    std::size_t max = 1;
  };

  std::uint64_t id = 0;          // the request's id
  std::uint32_t window = 0;      // as the request announced it
  std::uint64_t allowed = 0;     // items the handler may send in all: window + credit granted
  std::uint64_t received = 0;    // items that came
  std::uint32_t unreported = 0;  // items read since the last credit granted
  std::deque<std::vector<std::byte>> items;  // came, not yet read: at most `window`
  std::deque<read> reads;                    // waiting, oldest first
  bool ended = false;
  std::error_code end;              // asio::error::eof, or why it ended
  std::vector<std::byte> end_text;  // a remote error's text
};

/// A handler's stream, in its serving entry.
struct stream_writer_state {
  struct write {
    std::uint64_t id;
    std::vector<std::byte> item;
    pending_signal_ptr op;
  };

  bool active = false;       // the request is a stream's
  bool ended = false;        // the caller cancelled, or the session ended: writes fail
  std::uint32_t window = 0;  // the caller's: at most this much credit
  std::uint64_t credit = 0;
  // Items given to send() that still wait in the outbox, not yet in the ring. A caller that
  // grants credit for items it never read would otherwise have them pile up there: at most a
  // window's worth waits.
  std::uint64_t unsent = 0;
  std::deque<write> writes;  // waiting for credit, oldest first
  // flush_stream_writes is running for this stream: a send in it that frees the outbox at once
  // comes back to it, and leaves the next write to the loop already running, which sends and
  // completes the writes in their order.
  bool flushing = false;

  /// An item may go now.
  bool may_send() const noexcept { return credit != 0 && unsent < window; }
  void reset() noexcept {
    active = ended = false;
    window = 0;
    credit = 0;
    unsent = 0;
    writes.clear();
    flushing = false;
  }
};

}  // namespace shmio::detail
