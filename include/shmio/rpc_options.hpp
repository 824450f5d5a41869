#pragma once
// The options, statistics and handler types of shmio::rpc_buffer.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include <asio/awaitable.hpp>

#include "shmio/rpc_reply.hpp"
#include "shmio/wait_strategy.hpp"

namespace shmio {

/// Serves one request: its id and payload (valid until the handler completes) in, the reply
/// out. An exception becomes an errc::remote_error reply that carries its what() text.
using rpc_handler = std::function<asio::awaitable<std::vector<std::byte>>(
    std::uint64_t request_id, std::span<const std::byte> payload)>;
/// The same as a plain function, for handlers that do not wait. Run inline as the request is
/// read (no coroutine, no trip through the scheduler): the fastest way to serve.
using rpc_sync_handler = std::function<std::vector<std::byte>(std::uint64_t request_id,
                                                              std::span<const std::byte> payload)>;
/// The same, in place: the handler sees the request where it was read (valid until it returns)
/// and writes its reply into `reply` (rpc_reply.hpp) instead of returning a vector, so that a
/// steady flow of requests allocates nothing. Run inline as its request is read.
using rpc_in_place_handler = std::function<void(
    std::uint64_t request_id, std::span<const std::byte> payload, rpc_reply& reply)>;

/// Sizes and limits of a channel, fixed by its owner. The owner publishes all but `strategy` in
/// the channel's header, and every opener adopts them: both ends agree on the ring sizes, the
/// default timeout and the largest message.
struct rpc_options {
  /// Nodes per ring (each direction has one ring). More packets in flight than nodes make the
  /// sender wait for room, a wake-up from the other process (tens of µs) every node_count
  /// packets: keep it above the number of calls you pipeline (see docs/performance.md).
  std::size_t node_count = 64;
  std::size_t node_size = 16 * 1024;  ///< bytes per node; a packet carries node_size - 40
  /// For calls made without a timeout, at either end. Negative or max(): no timeout.
  std::chrono::milliseconds default_timeout = std::chrono::seconds(30);
  std::uint64_t max_message_size = 0xFFFF'FFFFull;  ///< larger messages are refused, both ways
  wait_strategy strategy = {};                      ///< this end's only

  // This end's bounds (not published). An owner takes them from its constructor; an opener or
  // a client has these defaults until rpc_buffer::set_limits. A value out of its range (0 for
  // max_in_flight or max_concurrent_handlers, a window outside 1..65536) is refused with
  // errc::invalid_argument where the options are given.
  /// Calls of this end that are sent or being sent at once. Later calls wait for credit (a call
  /// that completes) without being queued for the ring; their timeouts run meanwhile.
  std::size_t max_in_flight = 1024;
  /// Coroutine handlers running at once. Later requests wait, up to as many again (and up to
  /// max_held_bytes of them); past that they are answered at once with errc::busy. Also the
  /// count of answers this end lets wait for the other end to read them (see max_held_bytes).
  std::size_t max_concurrent_handlers = 1024;
  /// Bytes of answers (replies, errors, stream items) this end lets wait for room in the ring
  /// the other end reads, as max_concurrent_handlers bounds their count. While either is
  /// reached, requests wait unserved and start as the answers go, in their order (except that
  /// a plain handler's request never waits for a coroutine handler's slot): a client that asks
  /// faster than it reads is slowed. The requests waiting are bounded by both figures too: past
  /// them a request is answered at once with errc::busy, or shed (requests_shed) while
  /// max_concurrent_handlers answers wait. A stream handler's writes wait too while it is
  /// reached (rpc_stream_writer::async_write completes once its item is queued under it). Else
  /// it bounds what waits, not what runs: handlers that started still send their answers, the
  /// message being written is not counted, and a message is never cut, so each bound may be
  /// passed by a message (up to max_message_size). 0: no bound in bytes.
  std::uint64_t max_held_bytes = std::uint64_t{64} << 20;
  /// Bytes of messages received in part (by their announced sizes) held at once; a message
  /// that would pass it is refused as too large would be. 0: max_message_size.
  std::uint64_t max_reassembly_bytes = 0;
  /// Items of a stream this end reads that its handler may send ahead of the reads: what a
  /// stream holds at most, and how far a fast writer runs before it waits (1..65536).
  std::uint32_t stream_window = 32;
  /// The largest window a caller of this end's stream handlers may announce (1..65536): a
  /// stream request above it is answered at once with errc::invalid_argument. Together with
  /// max_concurrent_handlers and max_message_size it bounds what this end's streams hold while
  /// their callers read slowly, or not at all.
  std::uint32_t stream_window_limit = 1024;
};

/// The defaults of a service's connections (rpc_acceptor, rpc_server): smaller rings than a
/// channel's own defaults, 16 nodes of 4 KiB each way, since every client makes its channel as
/// it connects and pays for its file up front (it is allocated whole, so that no write into it
/// can fail later for want of room). Larger messages still go, as more packets.
inline rpc_options rpc_connection_options() {
  rpc_options o;
  o.node_count = 16;
  o.node_size = 4096;
  return o;
}

/// Counters of one end of a channel (the C# SharedMemory library's RpcStatistics, plus what shmio
/// adds). Some count one event twice, each from its side: responses_received and
/// errors_received count every answer that came, including the late ones that
/// discarded_replies counts too (their call had timed out or was cancelled); requests_received
/// counts the requests that requests_shed and requests_deferred count again.
struct rpc_statistics {
  std::uint64_t requests_sent = 0;
  std::uint64_t requests_received = 0;
  std::uint64_t responses_sent = 0;
  std::uint64_t responses_received = 0;
  std::uint64_t errors_sent = 0;
  std::uint64_t errors_received = 0;
  std::uint64_t bytes_sent = 0;      ///< payload bytes
  std::uint64_t bytes_received = 0;  ///< payload bytes
  std::uint64_t packets_sent = 0;
  std::uint64_t packets_received = 0;
  std::uint64_t packets_rejected = 0;   ///< inconsistent packets, dropped and never trusted
  std::uint64_t packets_stale = 0;      ///< packets from or to an earlier opener, dropped
  std::uint64_t discarded_replies = 0;  ///< replies to requests that timed out or were cancelled
  std::uint64_t timeouts = 0;
  std::uint64_t cancellations = 0;     ///< requests cancelled here, or by the caller over there
  std::uint64_t pending_requests = 0;  ///< right now: the request table's size
  /// Messages the ring refused to take (it is damaged): a request fails at once with the ring's
  /// error (errc::corrupted); a reply, error or cancel is lost (its caller times out).
  std::uint64_t send_failures = 0;
  /// Requests taken back before any of them was written (they timed out or were cancelled
  /// while waiting for credit or queued whole): the other end never saw them.
  std::uint64_t requests_withdrawn = 0;
  std::uint64_t stream_items_sent = 0;      ///< items of streams this end's handlers wrote
  std::uint64_t stream_items_received = 0;  ///< items of streams this end's callers read
  /// Requests neither served nor answered because max_concurrent_handlers answers already
  /// waited for the other end to read them and no more requests could wait (or, for refusals,
  /// twice as many answers waited): it was not reading, so no answer could reach it, and its
  /// caller times out. (Serving them would only have grown what this end holds.)
  std::uint64_t requests_shed = 0;
  /// Requests that had to wait to start: max_concurrent_handlers handlers were running,
  /// max_concurrent_handlers answers or max_held_bytes of them waited for the other end to
  /// read them, or requests that came before them waited. (Some of them may then have been
  /// cancelled, or dropped as their caller left.)
  std::uint64_t requests_deferred = 0;
};

/// Counters of an rpc_acceptor (and of an rpc_server's).
struct rpc_acceptor_statistics {
  std::uint64_t accepted = 0;  ///< connections taken
  /// Connect requests that could not be taken: malformed, their client gone before it was
  /// served, or a channel not made as the listener says.
  std::uint64_t refused = 0;
};

}  // namespace shmio
