#pragma once
// What the rpc tests share: assertions on a co_await, payloads that show reordered or lost
// bytes, a one-shot flag and a condition wait for coroutines, the run-until-done driver, and a
// third participant that writes raw packets into a channel's ring.

#include <asio/co_spawn.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shmio/detail/layout.hpp"
#include "shmio/detail/ring.hpp"
#include "shmio/detail/rpc_packet.hpp"
#include "shmio/rpc_buffer.hpp"
#include "shmio/segment.hpp"
#include "support.hpp"

// Assertions on a co_await: the value is taken first, so that no Catch assertion stays open
// while the coroutine is suspended (and other handlers assert meanwhile).
#define CO_CHECK(...)                                           \
  do {                                                          \
    const bool co_check_value = static_cast<bool>(__VA_ARGS__); \
    INFO(#__VA_ARGS__);                                         \
    CHECK(co_check_value);                                      \
  } while (false)
#define CO_REQUIRE(...)                                         \
  do {                                                          \
    const bool co_check_value = static_cast<bool>(__VA_ARGS__); \
    INFO(#__VA_ARGS__);                                         \
    REQUIRE(co_check_value);                                    \
  } while (false)

namespace shmio::test::rpc {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;
using bytes_t = std::vector<std::byte>;
namespace detail = shmio::detail;
namespace layout = shmio::detail::layout;

// Every bounded wait uses this: far longer than anything should take, so only a lost
// completion (a hang) reaches it.
inline constexpr auto bound = 10s;

inline constexpr auto tuple_awaitable = asio::experimental::as_tuple(asio::use_awaitable);

inline bytes_t bytes(std::string_view s) {
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  return {p, p + s.size()};
}

inline std::string text(std::span<const std::byte> b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

/// `n` pseudo-random bytes (xorshift), different for each seed: reordered or lost chunks show.
inline bytes_t pattern(std::size_t n, std::uint64_t seed) {
  bytes_t out(n);
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(out.data() + i, &x, 8);
  }
  for (; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    out[i] = static_cast<std::byte>(x);
  }
  return out;
}

/// A one-shot flag a coroutine can wait for, with a bound (single-threaded use).
class async_flag {
 public:
  explicit async_flag(const asio::any_io_executor& ex) : timer_(ex, steady::time_point::max()) {}
  void set() {
    if (!set_) {
      set_ = true;
      when_ = steady::now();
    }
    timer_.cancel();
  }
  void reset() noexcept { set_ = false; }
  bool is_set() const noexcept { return set_; }
  steady::time_point when() const noexcept { return when_; }
  /// True once set; false if `limit` passed first.
  asio::awaitable<bool> wait(steady::duration limit = bound) {
    const auto deadline = steady::now() + limit;
    while (!set_ && steady::now() < deadline) {
      timer_.expires_at(deadline);
      co_await timer_.async_wait(tuple_awaitable);
    }
    co_return set_;
  }

 private:
  asio::steady_timer timer_;
  bool set_ = false;
  steady::time_point when_{};
};

/// The shmio::rpc_error that awaiting `op` (a use_awaitable operation) throws; none if it
/// completes.
template <class Awaitable>
asio::awaitable<std::optional<shmio::rpc_error>> rpc_error_of(Awaitable op) {
  try {
    co_await std::move(op);
  } catch (const shmio::rpc_error& e) {
    co_return e;
  }
  co_return std::nullopt;
}

/// Polls `pred` every millisecond until it holds or `limit` passes (for counters that have no
/// event to wait on).
template <class Pred>
asio::awaitable<bool> wait_until(Pred pred, steady::duration limit = bound) {
  asio::steady_timer t(co_await asio::this_coro::executor);
  const auto deadline = steady::now() + limit;
  while (!pred()) {
    if (steady::now() >= deadline) co_return false;
    t.expires_after(1ms);
    co_await t.async_wait(tuple_awaitable);
  }
  co_return true;
}

/// Runs `body` (returning asio::awaitable<void>) as a coroutine on `io`, then `io` until it has
/// no work left. The body must close every end it opened: the io_context running dry proves
/// that every loop of every end finished.
template <class Body>
void run_until_done(asio::io_context& io, Body&& body, steady::duration limit = 30s) {
  bool finished = false;
  std::exception_ptr failure;
  asio::co_spawn(io, body(), [&](std::exception_ptr e) {
    finished = true;
    failure = e;
    if (e) io.stop();
  });
  io.run_for(limit);
  if (failure) std::rethrow_exception(failure);
  REQUIRE(finished);
  CHECK(io.stopped());  // both ends closed: nothing of theirs left running
}

/// A packet header from the first opener of a channel (generation 1).
inline layout::packet_header header(std::uint8_t type, std::uint32_t index, std::uint64_t id,
                                    std::uint32_t total, std::uint32_t count,
                                    std::uint64_t response_to = 0) {
  layout::packet_header h{};
  h.generation = 1;
  h.type = type;
  h.version = static_cast<std::uint8_t>(layout::rpc_version);
  h.packet_index = index;
  h.message_id = id;
  h.total_size = total;
  h.packet_count = count;
  h.response_to = response_to;
  return h;
}

/// A node: the header, then `chunk` bytes of payload.
inline bytes_t node(const layout::packet_header& h, std::size_t chunk, std::uint64_t seed = 5) {
  bytes_t out(sizeof h);
  std::memcpy(out.data(), &h, sizeof h);
  bytes_t payload = pattern(chunk, seed);
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

/// Writes raw nodes into the ring the owner reads, as a third participant of the channel.
class ring_injector {
 public:
  explicit ring_injector(std::string_view name)
      : seg_(shmio::open_only, name, shmio::object_kind::rpc) {
    std::byte* body = seg_.body().data();
    const auto& h = *reinterpret_cast<const layout::rpc_header*>(body);
    std::error_code ec;
    const std::uint16_t me =
        detail::claim_participant(seg_.native_handle(), layout::max_participants, ec);
    REQUIRE_FALSE(ec);
    auto ring = seg_.body().subspan(h.to_owner_offset, h.ring_bytes);
    detail::ring_geometry g;
    REQUIRE_FALSE(detail::ring_view::validate(ring, g));
    ring_.emplace(reinterpret_cast<layout::ring_state*>(ring.data()), g, seg_.native_handle(), me);
    auto back = seg_.body().subspan(h.to_opener_offset, h.ring_bytes);
    REQUIRE_FALSE(detail::ring_view::validate(back, g));
    back_.emplace(reinterpret_cast<layout::ring_state*>(back.data()), g, seg_.native_handle(), me);
  }
  std::uint32_t node_size() const { return ring_->node_size(); }

  /// Publishes `node` as one node, waiting (through the executor) for room.
  asio::awaitable<void> publish(std::span<const std::byte> node) {
    co_await publish_with_length(node, static_cast<std::uint32_t>(node.size()));
  }
  /// Publishes a node whose recorded length is `length` (may be a lie) with `node` in it.
  asio::awaitable<void> publish_with_length(std::span<const std::byte> node, std::uint32_t length) {
    detail::write_claim c;
    while (ring_->try_claim_write(c) != detail::claim_status::claimed)
      co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
    std::memcpy(c.data.data(), node.data(), std::min(node.size(), c.data.size()));
    ring_->publish(c, length);
  }

  /// Takes the next node of the ring the opener reads, as the opener would (the opener's end
  /// must not be running): what the owner sent. None if the ring is empty.
  std::optional<bytes_t> take_sent_to_opener() {
    detail::read_claim c;
    if (back_->try_claim_read(c, back_->node_size(), false) != detail::claim_status::claimed)
      return std::nullopt;
    bytes_t out(c.data.begin(), c.data.end());
    back_->release(c);
    return out;
  }

 private:
  shmio::segment seg_;
  std::optional<detail::ring_view> ring_;
  std::optional<detail::ring_view> back_;
};

}  // namespace shmio::test::rpc
