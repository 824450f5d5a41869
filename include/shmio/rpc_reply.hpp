#pragma once
// shmio::rpc_reply — the reply an in-place handler (rpc_in_place_handler) writes.
//
//   methods.add("get", shmio::rpc_in_place_handler(
//       [&](std::uint64_t, std::span<const std::byte> key, shmio::rpc_reply& reply) {
//         reply.append(store.at(shmio::to_string(key)));
//       }));
//
// The handler sees its request where it was read and writes its reply into room the channel
// keeps from one request to the next: serving a request of one packet allocates nothing once
// that room has grown to the largest reply. The reply is sent as the handler returns.

#include <cstddef>
#include <cstring>
#include <span>
#include <string_view>
#include <vector>

namespace shmio {

class rpc_reply {
 public:
  /// Room for `n` more bytes at the end of the reply, to be written and then commit()ted.
  /// Valid until the next prepare() or append().
  std::span<std::byte> prepare(std::size_t n) {
    if (bytes_.size() < size_ + n) bytes_.resize(size_ + n);  // keeps its capacity after
    prepared_ = n;
    return {bytes_.data() + size_, n};
  }
  /// Makes `n` bytes of the last prepare() part of the reply (at most what it prepared).
  void commit(std::size_t n) noexcept {
    size_ += n < prepared_ ? n : prepared_;
    prepared_ = 0;
  }
  /// Appends `bytes` to the reply.
  void append(std::span<const std::byte> bytes) {
    auto room = prepare(bytes.size());
    if (!bytes.empty()) std::memcpy(room.data(), bytes.data(), bytes.size());
    commit(bytes.size());
  }
  void append(std::string_view text) { append(std::as_bytes(std::span(text.data(), text.size()))); }

  /// The reply so far.
  std::span<const std::byte> data() const noexcept { return {bytes_.data(), size_}; }
  std::size_t size() const noexcept { return size_; }
  /// Empties the reply (keeping its room).
  void clear() noexcept { size_ = prepared_ = 0; }

 private:
  std::vector<std::byte> bytes_;  // grows to the largest reply, never shrinks
  std::size_t size_ = 0;
  std::size_t prepared_ = 0;
};

}  // namespace shmio
