#pragma once
// The state of streams in an RPC channel: a caller's (its items received and not yet read, its
// readers, its credit) and a handler's (its credit and the writes waiting for it). Strand-only.
//
// Credit: a stream request carries its window, the items its handler may send before it hears
// more; the caller grants more with stream_credit packets as its reads take items. An item past
// the granted total breaks the protocol and ends the stream with errc::corrupted, so neither
// end ever holds more than a window of a stream's items.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <system_error>
#include <vector>

#include "shmio/detail/rpc_pending.hpp"

namespace shmio::detail {

/// Keeps the completions of one stream's reads in the order the reads were started, whatever
/// executors their handlers run on (as op_queue's gate does for a ring's operations): one at a
/// time, the next only once the handler of the one before has been reached (its ticket
/// punched just before the upcall) or destroyed unrun. Posted side by side, a completion for a
/// handler bound to a busy or stopped io_context would be passed by the later ones.
/// open() and ticket() run on the channel's strand; delivered() wherever a handler runs.
class completion_gate final : public delivery_owner {
 public:
  /// `reopen` runs (from delivered(), on the handler's thread) when a completion that open()
  /// found on its way has been reached: it has the strand look again.
  explicit completion_gate(std::function<void()> reopen) : reopen_(std::move(reopen)) {}

  /// True if no completion is on its way, so that the next may go. If false, reopen runs once
  /// the one on its way has been reached.
  bool open() noexcept {
    // seq_cst, here and in delivered(): either this load sees the punch that took `out_` to 0,
    // or that punch's exchange sees `held_` and reopens (Dekker's StoreLoad, both ways).
    if (out_.load(std::memory_order_seq_cst) == 0) return true;
    held_.store(true, std::memory_order_seq_cst);
    if (out_.load(std::memory_order_seq_cst) != 0) return false;
    // Punched meanwhile: it may reopen as well, which finds nothing to do.
    held_.store(false, std::memory_order_relaxed);
    return true;
  }
  /// Counts a completion on its way until the ticket is punched.
  static delivery_ticket ticket(const std::shared_ptr<completion_gate>& g) noexcept {
    // relaxed: the strand alone adds; the punch's decrement (seq_cst) orders the rest.
    g->out_.fetch_add(1, std::memory_order_relaxed);
    return delivery_ticket(std::weak_ptr<delivery_owner>(g), 0);
  }
  void delivered(std::size_t) noexcept override {
    if (out_.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
        held_.exchange(false, std::memory_order_seq_cst)) {
      try {
        reopen_();
      } catch (...) {
        // No memory for the post: the reads behind it wait until the stream's next event
        // (an item, its end, a read, a cancel) has the strand look again.
      }
    }
  }

 private:
  std::atomic<std::uint32_t> out_{0};  // completions on their way: 0 or 1
  std::atomic<bool> held_{false};      // open() refused one: reopen when out_ drops to 0
  std::function<void()> reopen_;
};

struct stream_state : std::enable_shared_from_this<stream_state> {
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
  std::error_code end;                          // asio::error::eof, or why it ended
  std::vector<std::byte> end_text;              // a remote error's text
  std::shared_ptr<completion_gate> reads_gate;  // made at the first read's completion
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
  // Writes finished (sent, or failed in their turn), their completions waiting for `gate`: one
  // on its way at a time, so that they complete in the order started (completion_gate).
  struct finished {
    pending_signal_ptr op;
    std::error_code ec;
  };
  std::deque<finished> done;
  std::shared_ptr<completion_gate> gate;  // made at the first write's completion
  std::uint64_t request_id = 0;           // the request it answers
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
    done.clear();  // delivered as the entry ended (end_serving): empty
    gate.reset();
    request_id = 0;
    flushing = false;
  }
};

}  // namespace shmio::detail
