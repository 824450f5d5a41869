#pragma once
// One non-blocking try at a ring operation, shaped as a wait's "attempt": it returns an
// outcome when it could act, or nothing when the ring is full (write) or empty (read). Shared by
// circular_buffer and the RPC channel.

#include <chrono>
#include <cstddef>
#include <cstring>
#include <optional>
#include <string_view>
#include <system_error>

#include "shmio/detail/ring.hpp"
#include "shmio/detail/waiter.hpp"
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

/// The throwing form of a blocking ring call: a timeout returns 0 (as in seed 000), any other
/// error throws shmio::error naming `what` and the ring.
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
