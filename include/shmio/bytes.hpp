#pragma once
// Payloads and replies are bytes; text goes in and out of them without casts.
//
//   co_await client.async_request("get", asio::buffer(key), use_awaitable);  // key: a string
//   std::string value = shmio::to_string(reply);
//   return shmio::to_bytes("not found");  // from a handler

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace shmio {

/// The bytes of `text`, as a reply or payload.
inline std::vector<std::byte> to_bytes(std::string_view text) {
  const auto* p = reinterpret_cast<const std::byte*>(text.data());
  return {p, p + text.size()};
}

/// `bytes` read as text: a view of them (valid as long as they are).
inline std::string_view as_string_view(std::span<const std::byte> bytes) noexcept {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

/// `bytes` copied into a string.
inline std::string to_string(std::span<const std::byte> bytes) {
  return std::string(as_string_view(bytes));
}

}  // namespace shmio
