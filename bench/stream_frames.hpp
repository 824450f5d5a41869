#pragma once
// What the benchmarks use instead of shmio for request/response: frames over
// asio::local::stream_protocol, a u32 length and then the bytes, each way.

#include <array>
#include <asio/awaitable.hpp>
#include <asio/buffer.hpp>
#include <asio/local/stream_protocol.hpp>
#include <asio/read.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>
#include <cstddef>
#include <cstdint>
#include <span>
#include <system_error>
#include <vector>

namespace shmio_bench {

/// One call: `request` as a frame, then the reply's frame into `reply`.
inline asio::awaitable<void> stream_call(asio::local::stream_protocol::socket& sock,
                                         std::span<const std::byte> request,
                                         std::vector<std::byte>& reply) {
  const auto len = static_cast<std::uint32_t>(request.size());
  const std::array<asio::const_buffer, 2> out{asio::buffer(&len, sizeof len),
                                              asio::buffer(request.data(), request.size())};
  co_await asio::async_write(sock, out, asio::use_awaitable);
  std::uint32_t reply_len = 0;
  co_await asio::async_read(sock, asio::buffer(&reply_len, sizeof reply_len), asio::use_awaitable);
  reply.resize(reply_len);
  co_await asio::async_read(sock, asio::buffer(reply), asio::use_awaitable);
}

/// Answers frames until the other end closes: each with itself (`echo`) or an empty frame.
inline asio::awaitable<void> serve_frames(asio::local::stream_protocol::socket& sock, bool echo) {
  std::vector<std::byte> buf;
  try {
    for (;;) {
      std::uint32_t len = 0;
      co_await asio::async_read(sock, asio::buffer(&len, sizeof len), asio::use_awaitable);
      buf.resize(len);
      co_await asio::async_read(sock, asio::buffer(buf), asio::use_awaitable);
      const std::uint32_t reply_len = echo ? len : 0;
      const std::array<asio::const_buffer, 2> out{asio::buffer(&reply_len, sizeof reply_len),
                                                  asio::buffer(buf.data(), reply_len)};
      co_await asio::async_write(sock, out, asio::use_awaitable);
    }
  } catch (const std::system_error&) {
    // EOF: the other end closed
  }
}

}  // namespace shmio_bench
