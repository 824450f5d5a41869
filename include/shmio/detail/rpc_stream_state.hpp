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
#include <mutex>
#include <system_error>
#include <vector>

#include "shmio/detail/rpc_pending.hpp"

namespace shmio::detail {

/// Completes one side of a stream's operations (a caller's reads, or a handler's writes) in the
/// order the channel finished them, whatever executors their handlers run on (as op_queue's
/// gate does for a ring's operations): one completion on its way at a time, the next posted
/// once the handler before it has been reached (its ticket punched just before the upcall) or
/// destroyed unrun. Posted side by side, a completion for a handler bound to a busy or stopped
/// io_context would be passed by the later ones. While completions wait behind one on its way
/// it keeps itself alive: they are the user's, and go out even if the stream, its entry or the
/// channel went meanwhile. Any thread (a mutex, never held across a post or an upcall).
class ordered_delivery final : public delivery_owner,
                               public std::enable_shared_from_this<ordered_delivery> {
 public:
  struct entry {
    pending_call_ptr call;      // a read of one item, with `bytes` (the item, or an error's text)
    pending_items_ptr batch;    // a batch read, with `items`
    pending_signal_ptr signal;  // a write
    std::error_code ec;
    std::vector<std::byte> bytes;
    std::vector<std::vector<std::byte>> items;
  };
  /// `owner`: the channel, kept (with this) while completions wait.
  explicit ordered_delivery(std::weak_ptr<void> owner) : owner_(std::move(owner)) {}
  /// Queues `e`; it goes now if nothing is on its way.
  void push(entry e);
  void delivered(std::size_t) noexcept override;

 private:
  void send_next();

  std::mutex mutex_;
  std::vector<entry> queue_;  // waiting from head_ on (a vector: one op at a time allocates none)
  std::size_t head_ = 0;
  bool out_ = false;                        // one is on its way to its handler
  std::shared_ptr<ordered_delivery> keep_;  // itself, while entries wait behind that one
  std::weak_ptr<void> owner_;
  std::shared_ptr<void> keep_owner_;  // the owner, kept as long as keep_
};

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
  std::error_code end;                         // asio::error::eof, or why it ended
  std::vector<std::byte> end_text;             // a remote error's text
  std::shared_ptr<ordered_delivery> delivery;  // the reads' completions; made at the first
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
  std::deque<write> writes;                    // waiting for credit, oldest first
  std::shared_ptr<ordered_delivery> delivery;  // the writes' completions; made at the first
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
    delivery.reset();  // what it still holds goes out (it keeps itself while it does)
    flushing = false;
  }
};

}  // namespace shmio::detail
