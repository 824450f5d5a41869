// The sessions of rpc_channel: whether the other end is there, following the owner's openers
// one after the other, the end of a session (its calls fail, its handlers are cancelled), and
// closing or failing this end.

#include <asio/error.hpp>
#include <asio/post.hpp>
#include <thread>
#include <utility>

#include "shmio/detail/platform.hpp"
#include "shmio/detail/ring_ops.hpp"
#include "shmio/detail/rpc_channel.hpp"

namespace shmio::detail {
namespace {

namespace platform = detail::platform;
using layout::packet_type;

}  // namespace

// ---- the other end -----------------------------------------------------------------------

bool rpc_channel::peer_attached() {
  if (peer_lost_) return false;  // a connection's other end went: none other may come
  if (!peer_present_) {
    std::error_code ec;
    const bool present = platform::byte_locked_by_other(seg_.native_handle(), peer_lock_byte_, ec);
    // An opener counts itself before it takes its lock byte: the count read now is the one of
    // the opener found there (or of one after it), not of one gone unnoticed before it.
    if (present && owner_) follow_opener();
    if (peer_lost_) return false;
    peer_present_ = present;
    // Looked at once per session, after its lock: an end takes its serves byte before that.
    if (peer_present_)
      peer_serves_ = platform::byte_locked_by_other(seg_.native_handle(), peer_serves_byte_, ec);
  }
  return peer_present_;
}

rpc_channel::peer_locks rpc_channel::look_at_peer_locks() {
  std::error_code ec;
  const int fd = seg_.native_handle();
  const bool held = platform::byte_locked_by_other(fd, peer_lock_byte_, ec);
  if (ec) return peer_locks::unknown;
  if (held) return peer_locks::held;
  // An opener holds its admission byte from before it counts itself until after it drops its
  // lock byte: one that holds only that byte is arriving (or leaving), not gone.
  if (!owner_) return peer_locks::free;
  const bool admitted = platform::byte_locked_by_other(fd, layout::rpc_opener_admit_lock_byte, ec);
  if (ec) return peer_locks::unknown;
  return admitted ? peer_locks::admitted : peer_locks::free;
}

void rpc_channel::ring_found_empty() {
  if (std::exchange(taken_since_empty_, 0) >= in_.node_count()) check_peer_after_full_ring();
}

void rpc_channel::check_peer_after_full_ring() {
  // A death is seen anyway (pidfd or the tick); this is for an end that closed while its
  // process lives on, its close packet having found our ring full. As the tick looks: the
  // generation tells of an opener already replaced, the lock of one gone.
  if (peer_lost_) return;
  if (owner_) follow_opener();
  if (peer_left()) end_session();
}

bool rpc_channel::from_peer(std::uint64_t generation) {
  // A connection's other end went (it closed, or died): whatever of its still comes is stale.
  if (peer_lost_) return false;
  if (owner_) follow_opener();  // a packet of a newer opener ends the session with the older
  return generation == generation_;
}

void rpc_channel::follow_opener() {
  // acquire: pairs with the opener's increment (any value is safe: it is only compared).
  const std::uint64_t current = header_->opener_generation.load(std::memory_order_acquire);
  if (current == generation_ || peer_lost_) return;
  end_session();  // whatever we had with the previous opener is over
  // A connection takes its first opener only: a later one is a stranger, its packets stale.
  if (!peer_lost_) generation_ = current;
}

void rpc_channel::end_session() {
  // An owner's session starts with its first opener; before it there is nobody to lose.
  const bool had_peer = !owner_ || generation_ != 0;
  if (connection_ && had_peer) peer_lost_ = true;
  ++session_;
  peer_present_ = false;
  reassembler_.clear();
  outbox_.clear();  // nobody to read them
  bounds_.outbox_cleared();
  answers_whole_.clear();
  for (auto& entry : serving_)  // their items left with the outbox
    entry.second.stream.unsent = 0;
  credit_queue_.clear();  // nor the calls waiting to be sent: they fail below, unsent
  held_back_.clear();
  deferred_.clear();
  bounds_.deferred_bytes = 0;
  if (writer_busy_) writer_cancel_.emit(asio::cancellation_type::terminal);
  while (!calls_.empty())
    finish_call(calls_.begin()->first, errc::peer_gone, {});
  cancel_serving(errc::peer_gone);
  if (had_peer) {
    death_watch_.reset();
    poll_peer_ = false;
    complete_closed_waiters({});
    // An acceptor that opened the channel and went without accepting it (it refused it).
    if (connecting()) connect_failed(errc::peer_gone);
  }
}

// ---- closing -----------------------------------------------------------------------------

void rpc_channel::close() noexcept {
  release();
  // The last end to close removes the file now, not when the strand next runs (the mapping
  // stays until then): a closed end leaves nothing in /dev/shm whether or not its executor
  // runs again. Only at close (a failed end keeps its name until it is closed), and once, from
  // whichever thread comes first. relaxed: the exchange only elects that one.
  if (!name_given_up_.exchange(true, std::memory_order_relaxed)) seg_.release_name();
  asio::post(strand_, [self = shared_from_this()] { self->shutdown_on_strand(); });
}

void rpc_channel::fail(std::error_code why) {
  // On the strand, in the reader loop: the other end hears of it as of a close, and every call
  // here fails with `why`; later calls too (start_call).
  failure_ = why;
  release();
  shutdown_on_strand();
}

void rpc_channel::release() noexcept {
  // seq_cst: see write_unless_closing.
  if (released_.exchange(true, std::memory_order_seq_cst)) return;  // closed or failed before
  // A packet the strand is writing on another thread goes before the close packet, not after.
  while (writing_.load(std::memory_order_seq_cst))
    std::this_thread::yield();
  // Tell the other end now, if the ring has room: its calls then fail at once. (If not, it
  // sees our lock go within its next check.)
  // The owner's close is for whichever opener is there now; an opener's generation is fixed.
  // acquire: as in follow_opener.
  outgoing_message bye{packet_type::close, next_id(), 0, {}};
  bye.generation =
      owner_ ? header_->opener_generation.load(std::memory_order_acquire) : generation_;
  auto fill = [&](std::span<std::byte> node) {
    return encode_packet(bye, 1, out_.node_size(), node);
  };
  // Best effort, its result unused: if the ring is full or damaged, the other end learns of the
  // close from our lock instead.
  try {
    if (bye.generation != 0) (void)attempt_write(out_, fill);  // 0: no opener ever came
  } catch (...) {
  }
  std::error_code ignored;
  platform::try_lock_byte(seg_.native_handle(),
                          owner_ ? layout::rpc_owner_lock_byte : layout::rpc_opener_lock_byte,
                          platform::lock_kind::unlock, ignored);
  // Our process byte too: a process that closed its end but lives on (its mapping kept until
  // the channel object goes) must not be named as the next opener's process.
  platform::unlock_byte_for_process(
      seg_.native_handle(),
      owner_ ? layout::rpc_owner_process_lock_byte : layout::rpc_opener_process_lock_byte);
  if (serves_)
    platform::try_lock_byte(
        seg_.native_handle(),
        owner_ ? layout::rpc_owner_serves_lock_byte : layout::rpc_opener_serves_lock_byte,
        platform::lock_kind::unlock, ignored);
  // The next opener is let in only once this one is seen gone.
  if (!owner_)
    platform::try_lock_byte(seg_.native_handle(), layout::rpc_opener_admit_lock_byte,
                            platform::lock_kind::unlock, ignored);
  if (waiter_) waiter_->shutdown();
}

void rpc_channel::shutdown_on_strand() {
  if (closed_) return;
  closed_ = true;
  const std::error_code why = failure_ ? failure_ : asio::error::operation_aborted;
  while (!calls_.empty())
    finish_call(calls_.begin()->first, why, {});
  cancel_serving(asio::error::operation_aborted);
  outbox_.clear();
  bounds_.outbox_cleared();
  answers_whole_.clear();
  for (auto& entry : serving_)  // their items left with the outbox
    entry.second.stream.unsent = 0;
  credit_queue_.clear();
  held_back_.clear();
  deferred_.clear();
  bounds_.deferred_bytes = 0;
  tick_.cancel();
  if (connect_op_) complete(std::exchange(connect_op_, nullptr), why, false);
  link_.reset();
  death_watch_.reset();
  complete_closed_waiters(why);
}

}  // namespace shmio::detail
