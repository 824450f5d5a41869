// Fuzz target: RPC packets as read from a ring node, parsed and put back together. Input:
// [node_size seed][max_message_size seed][packets, node_size bytes each...].
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "shmio/detail/rpc_packet.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  using namespace shmio::detail;
  const auto node_size = static_cast<std::uint32_t>(packet_header_size + 1 + data[0] % 64);
  const std::uint64_t max_message = std::uint64_t{1} << (data[1] % 24);
  reassembler r(max_message, 8);
  const auto bytes = std::as_bytes(std::span(data + 2, size - 2));
  for (std::size_t off = 0; off < bytes.size(); off += node_size) {
    const auto node = bytes.subspan(off, std::min<std::size_t>(node_size, bytes.size() - off));
    const auto packet = parse_packet(node, node_size);
    if (!packet) continue;
    incoming_message m{};
    if (r.add(*packet, m) == reassembler::result::complete && m.payload.size() > max_message)
      __builtin_trap();  // a message over the limit must never be put together
  }
  return 0;
}
