#pragma once
// What the rpc service tests and their peer processes share: the service's handler and the
// payloads clients send, so that each side can check the other's bytes.

#include <algorithm>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <vector>

#include "shmio/rpc_methods.hpp"
#include "shmio/rpc_options.hpp"

namespace shmio::test::service {

/// Requests that hold the handler until it is cancelled (its caller gave up, died or closed).
inline constexpr std::string_view hold = "hold";

/// Handlers running a "hold" right now, and those that ended by cancellation.
struct hold_counts {
  std::atomic<int> holding{0};
  std::atomic<int> cancelled{0};
};

/// `n` bytes that depend on `seed` and on every index: reordered or lost bytes show.
inline std::vector<std::byte> payload(std::size_t n, std::uint64_t seed) {
  std::vector<std::byte> out(n);
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
  for (auto& b : out) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b = static_cast<std::byte>(x);
  }
  return out;
}

/// The service's answer to a request: its bytes in reverse order.
inline std::vector<std::byte> answer(std::span<const std::byte> in) {
  return {in.rbegin(), in.rend()};
}

/// The service: answer(), or for "hold" a wait until cancelled.
inline shmio::rpc_handler handler(hold_counts& counts) {
  return [&counts](std::uint64_t,
                   std::span<const std::byte> in) -> asio::awaitable<std::vector<std::byte>> {
    if (std::string_view(reinterpret_cast<const char*>(in.data()), in.size()) == hold) {
      ++counts.holding;
      asio::steady_timer forever(co_await asio::this_coro::executor, std::chrono::hours(1));
      try {
        co_await forever.async_wait(asio::use_awaitable);  // throws when cancelled
      } catch (...) {
        --counts.holding;
        ++counts.cancelled;
        throw;
      }
      --counts.holding;
    }
    co_return answer(in);
  };
}

/// The service with a second method, "reverse": answer() as an in-place handler, writing its
/// reply into the channel's room instead of a vector of its own.
inline shmio::rpc_methods methods(hold_counts& counts) {
  shmio::rpc_methods m(handler(counts));
  m.add("reverse", shmio::rpc_in_place_handler(
                       [](std::uint64_t, std::span<const std::byte> in, shmio::rpc_reply& reply) {
                         auto out = reply.prepare(in.size());
                         std::reverse_copy(in.begin(), in.end(), out.begin());
                         reply.commit(in.size());
                       }));
  return m;
}

}  // namespace shmio::test::service
