#pragma once
// What rpc_stream and rpc_stream_writer ask of their channel: plain functions, so that the
// public stream header needs only the channel's name, not its definition (rpc_methods.hpp,
// which the channel includes, includes the stream header for the handler type).

#include <asio/any_io_executor.hpp>
#include <asio/cancellation_type.hpp>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "shmio/detail/rpc_pending.hpp"

namespace shmio::detail {

class rpc_channel;
struct stream_state;  // a caller's stream: detail/rpc_stream_state.hpp

/// A fresh operation id of the channel (for cancellation to find its operation).
std::uint64_t stream_op_id(rpc_channel& ch) noexcept;
const asio::any_io_executor& stream_executor(const rpc_channel& ch) noexcept;
std::uint64_t stream_request_id(const stream_state& st) noexcept;

/// The caller's side: the next item of `st` (or its end) completes `op`.
void stream_read(const std::shared_ptr<rpc_channel>& ch, const std::shared_ptr<stream_state>& st,
                 std::uint64_t read_id, pending_call_ptr op);
/// The same, for a read of every item there is, up to `max` (at least one, unless `max` is 0).
void stream_read_batch(const std::shared_ptr<rpc_channel>& ch,
                       const std::shared_ptr<stream_state>& st, std::uint64_t read_id,
                       std::size_t max, pending_items_ptr op);
/// Cancels the read `read_id`; terminal and partial cancellation end the stream too.
void stream_cancel_read(const std::shared_ptr<rpc_channel>& ch,
                        const std::shared_ptr<stream_state>& st, std::uint64_t read_id,
                        asio::cancellation_type type);
/// Ends the stream from the caller's side: its handler over there is cancelled.
void stream_close(const std::shared_ptr<rpc_channel>& ch,
                  const std::shared_ptr<stream_state>& st) noexcept;

/// The handler's side: sends `item` on the stream answering `request_id` once the caller has
/// room for it, then completes `op`.
void stream_write(const std::shared_ptr<rpc_channel>& ch, std::uint64_t request_id,
                  std::uint64_t session, std::uint64_t write_id, std::vector<std::byte> item,
                  pending_signal_ptr op);
/// The handler's fast form: sends `item` now and returns true if that needs no waiting: we
/// run on the channel's strand, the stream has credit, and no earlier write waits. False
/// otherwise, with nothing sent (the caller then starts stream_write, which completes with
/// operation_aborted if close() began meanwhile).
bool stream_try_write(const std::shared_ptr<rpc_channel>& ch, std::uint64_t request_id,
                      std::uint64_t session, std::span<const std::byte> item);
/// A stream handler's writes started with async_write whose handlers have not been reached.
struct stream_write_count final : delivery_owner {
  std::atomic<std::uint32_t> outstanding{0};
  // release: the handler's start (and the write) before a co_write that then sees none.
  void delivered(std::size_t) noexcept override {
    outstanding.fetch_sub(1, std::memory_order_release);
  }
  /// Counts one more write, until the ticket (kept by its operation) is punched.
  static delivery_ticket ticket(const std::shared_ptr<stream_write_count>& c) noexcept {
    if (!c) return {};
    // relaxed: whoever starts a co_write after this write started (through the user's own
    // synchronisation, which orders the two) sees the count.
    c->outstanding.fetch_add(1, std::memory_order_relaxed);
    return delivery_ticket(std::weak_ptr<delivery_owner>(c), 0);
  }
  /// None on its way: acquire pairs with delivered()'s release.
  static bool none(const std::shared_ptr<stream_write_count>& c) noexcept {
    return c && c->outstanding.load(std::memory_order_acquire) == 0;
  }
};
/// Cancels the write `write_id` if it is still waiting for room (nothing of it was sent).
void stream_cancel_write(const std::shared_ptr<rpc_channel>& ch, std::uint64_t request_id,
                         std::uint64_t write_id);

}  // namespace shmio::detail
