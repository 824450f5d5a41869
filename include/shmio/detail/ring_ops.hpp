#pragma once
// One non-blocking try at a ring operation, shaped as a wait's "attempt": it returns an
// outcome when it could act, or nothing when the ring is full (write) or empty (read). Shared by
// circular_buffer and the RPC channel.

#include <chrono>
#include <cstddef>
#include <cstring>
#include <limits>
#include <optional>
#include <span>
#include <string_view>
#include <system_error>

#include <asio/buffer.hpp>

#include "shmio/detail/outcome.hpp"
#include "shmio/detail/ring.hpp"
#include "shmio/error.hpp"

namespace shmio {
namespace detail {

/// memcpy that also accepts the null pointers of empty buffers (memcpy itself must not get them).
inline void copy_bytes(void* to, const void* from, std::size_t n) noexcept {
  if (n != 0) std::memcpy(to, from, n);
}

inline constexpr std::size_t readers_queue = 0;  // readers park here: "a message is published"
inline constexpr std::size_t writers_queue = 1;  // writers park here: "a node is free"

using size_outcome = std::optional<outcome<std::size_t>>;

/// One try at writing: claims a node, lets `fill` write it, publishes. Empty if the ring is full;
/// errc::corrupted if its tail is damaged; errc::message_too_large if `fill` overran the node.
template <class Fill>
size_outcome attempt_write(ring_view& ring, Fill& fill) {
  write_claim c;
  switch (ring.try_claim_write(c)) {
    case claim_status::claimed:
      break;
    case claim_status::corrupted:
      return outcome<std::size_t>{errc::corrupted, 0};
    case claim_status::busy:
      return outcome<std::size_t>{errc::busy, 0};
    default:
      return std::nullopt;
  }
  std::size_t n = 0;
  try {
    n = fill(c.data);
  } catch (...) {
    ring.abandon(c);  // readers skip it: nothing half-written is ever delivered
    throw;
  }
  if (n > c.data.size()) {
    ring.abandon(c);
    return outcome<std::size_t>{errc::message_too_large, 0};
  }
  ring.publish(c, static_cast<std::uint32_t>(n));
  return outcome<std::size_t>{{}, n};
}

/// One try at reading a message of at most `capacity` bytes with `use`. Empty if none is there.
template <class Use>
size_outcome attempt_read(ring_view& ring, Use& use, std::size_t capacity) {
  read_claim c;
  switch (ring.try_claim_read(c, capacity)) {
    case claim_status::would_block:
      return std::nullopt;
    case claim_status::corrupted:
      return outcome<std::size_t>{errc::corrupted, 0};
    case claim_status::too_small:
      return outcome<std::size_t>{errc::message_too_large, c.data.size()};
    case claim_status::busy:
      return outcome<std::size_t>{errc::busy, 0};
    case claim_status::claimed:
      break;
  }
  struct release_on_exit {
    ring_view& ring;
    const read_claim& claim;
    ~release_on_exit() { ring.release(claim); }
  } guard{ring, c};
  use(c.data);
  return outcome<std::size_t>{{}, c.data.size()};
}

/// True if every message of a batch fits a node: a batch is refused whole, before anything is
/// written, rather than cut short at its first oversize message.
inline bool all_fit(const ring_view& ring, std::span<const asio::const_buffer> messages) {
  for (const asio::const_buffer& m : messages)
    if (m.size() > ring.node_size()) return false;
  return true;
}

/// One try at a batch write: empty if not even the first message has a free node (the caller
/// waits for one); otherwise the count written, in order, as many as there were free nodes for.
/// Each message is claimed, copied and published on its own, so a writer killed mid-batch leaves
/// at most one node half-written (skipped by the readers), as a single write does. Every message
/// must fit a node (the caller checked). A damaged tail is errc::corrupted if nothing was written;
/// after the first message it only ends the batch, and the next call reports it.
inline size_outcome attempt_write_batch(ring_view& ring,
                                        std::span<const asio::const_buffer> messages) {
  std::size_t done = 0;
  write_claim c;
  for (const asio::const_buffer& m : messages) {
    const claim_status s = ring.try_claim_write(c);
    if (s != claim_status::claimed) {
      if (done != 0) break;
      if (s == claim_status::corrupted) return outcome<std::size_t>{errc::corrupted, 0};
      if (s == claim_status::busy) return outcome<std::size_t>{errc::busy, 0};
      return std::nullopt;
    }
    if (done + 1 < messages.size()) ring.prefetch(c.position + 1);
    copy_bytes(c.data.data(), m.data(), m.size());
    ring.publish(c, static_cast<std::uint32_t>(m.size()));
    ++done;
  }
  return outcome<std::size_t>{{}, done};
}

/// One try at a batch read of at most `max_messages`: empty if no message is published (the
/// caller waits for one); otherwise the count read, in order, as many as were already published.
/// Message i may be at most `capacity(i)` bytes; `use(i, bytes)` sees it. Each node is claimed,
/// used and released before the next is claimed: a claim given back unused would sit behind the
/// head, where no reader looks again, and a node is never held longer than a single read holds
/// it (what kill -9 recovery relies on). `done` counts the messages handed to `use`, so that a
/// caller catching an exception from it knows how many were consumed (the throwing one too).
///
/// The first message is reported as a single read reports it (message_too_large, left in
/// place; corrupted, skipped). After it, a message that does not fit, a corrupted one or a
/// damaged head ends the batch with what was read, no error, and the message left in place for
/// the next call to report. So does `more()` returning false before a message after the first
/// is claimed (a callback closed the handle: the rest belong to the ring's other readers).
struct always_more {
  bool operator()() const noexcept { return true; }
};
template <class Capacity, class Use, class More = always_more>
size_outcome attempt_read_batch(ring_view& ring, std::size_t max_messages, Capacity& capacity,
                                Use& use, std::size_t& done, More more = {}) {
  done = 0;
  read_claim c;
  while (done < max_messages && (done == 0 || more())) {
    const bool first = done == 0;
    const claim_status s = ring.try_claim_read(c, capacity(done), first);
    if (s != claim_status::claimed) {
      if (!first) break;
      switch (s) {
        case claim_status::corrupted:
          return outcome<std::size_t>{errc::corrupted, 0};
        case claim_status::too_small:
          return outcome<std::size_t>{errc::message_too_large, 0};
        case claim_status::busy:
          return outcome<std::size_t>{errc::busy, 0};
        default:
          return std::nullopt;
      }
    }
    if (done + 1 < max_messages) ring.prefetch(c.position + 1);
    struct release_on_exit {
      ring_view& ring;
      const read_claim& claim;
      ~release_on_exit() { ring.release(claim); }
    } guard{ring, c};
    ++done;  // counts as read even if `use` throws: it is released either way
    use(done - 1, c.data);
  }
  return outcome<std::size_t>{{}, done};
}

/// attempt_read_batch for a zero-copy reader: any message size, `use(bytes)` for each.
template <class Use, class More>
size_outcome attempt_read_batch_in_place(ring_view& ring, std::size_t max_messages, Use& use,
                                         std::size_t& done, More more) {
  auto any_size = [](std::size_t) { return std::numeric_limits<std::size_t>::max(); };
  auto each = [&use](std::size_t, std::span<const std::byte> m) { use(m); };
  return attempt_read_batch(ring, max_messages, any_size, each, done, more);
}

/// Wraps an attempt so that an exception from a user callback completes the operation with
/// errc::callback_failed (an async operation has no caller to throw to).
template <class Attempt>
auto catching(Attempt attempt) {
  return [attempt = std::move(attempt)]() mutable -> size_outcome {
    try {
      return attempt();
    } catch (...) {
      return outcome<std::size_t>{errc::callback_failed, 0};
    }
  };
}

/// The throwing form of a blocking ring call: a timeout returns 0 (as in the C# SharedMemory
/// library), any other error throws shmio::error naming `what` and the ring.
inline std::size_t size_or_throw(std::size_t n, const std::error_code& ec, std::string_view what,
                                 std::string_view name) {
  if (ec == errc::timed_out) return 0;
  throw_if(ec, what, name);
  return n;
}

/// The result of a blocking operation: its size, or 0 with errc::timed_out.
inline std::size_t finish_blocking(const size_outcome& r, std::error_code& ec) {
  if (!r) {
    ec = errc::timed_out;
    return 0;
  }
  ec = r->ec;
  return r->ec ? 0 : r->value;
}

}  // namespace detail

}  // namespace shmio
