// Fuzz target: RPC packets as read from a ring node, parsed and put back together, and the
// method names of named requests. Input: [node_size seed][max_message_size seed][packets,
// node_size bytes each...].
//   - Every packet (any type, flags, sizes) goes through parse_packet and the reassembler: an
//     accepted packet has only known flags, and flags only on a request; a message put together
//     is within the limit and has its packets' flags; a named one is split as rpc_serving does,
//     an error's payload decoded.
//   - split_named also sees every node's bytes and the whole input as a message.
//   - The input, read as [name length seed][name][payload], is a named request sent the way
//     rpc_buffer sends one (encode_named, then packets of the node size), and a named stream
//     request (encode_request with a window): each must come back whole, with the same window,
//     name and payload.
//   - A stream request's window and a stream_credit's count are split and decoded as the channel
//     does, and accepted only in range.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shmio/detail/rpc_packet.hpp"

namespace {

using namespace shmio::detail;

void require(bool ok) {
  if (!ok) std::abort();
}

bool valid_flags(std::uint16_t flags, std::uint8_t type) {
  return (flags & ~layout::packet_flags_known) == 0 &&
         (flags == 0 || type == static_cast<std::uint8_t>(layout::packet_type::request));
}

// split_named on any message: a name of 1..255 bytes inside it, the payload exactly the rest.
bool check_split(std::span<const std::byte> message, std::string_view& method,
                 std::span<const std::byte>& payload) {
  if (!split_named(message, method, payload)) {
    require(message.empty() || message[0] == std::byte{0} ||
            1 + std::to_integer<std::size_t>(message[0]) > message.size());
    return false;
  }
  const auto* begin = reinterpret_cast<const char*>(message.data());
  require(!message.empty() && method.size() == std::to_integer<std::size_t>(message[0]));
  require(method.size() >= 1 && method.size() <= layout::max_method_name);
  require(method.data() == begin + 1 && method.size() + 1 <= message.size());
  require(payload.data() == message.data() + 1 + method.size());
  require(payload.size() == message.size() - 1 - method.size());
  return true;
}

void check_split(std::span<const std::byte> message) {
  std::string_view method;
  std::span<const std::byte> payload;
  check_split(message, method, payload);
}

// A stream request's message: its window in range, then the rest (a named one's, if flagged).
void check_stream_request(std::span<const std::byte> message, std::uint16_t flags) {
  std::uint32_t window = 0;
  std::span<const std::byte> rest;
  if (!split_window(message, window, rest)) return;
  require(window >= 1 && window <= layout::max_stream_window);
  require(rest.data() == message.data() + 4 && rest.size() == message.size() - 4);
  if (flags & layout::packet_flag_method) check_split(rest);
}

// A named request of `name` and `payload` (a stream's, with `window` if not 0), through
// encode_request, packets of `node_size` bytes, parse_packet and a reassembler, and split again.
void round_trip(std::string_view name, std::span<const std::byte> payload, std::uint32_t node_size,
                std::uint32_t window) {
  outgoing_message out;
  out.type = layout::packet_type::request;
  out.id = 77;
  out.generation = 1;
  out.flags = static_cast<std::uint16_t>(layout::packet_flag_method |
                                         (window ? layout::packet_flag_stream : 0));
  out.payload = window ? encode_request(window, name, payload) : encode_named(name, payload);
  require(out.payload.size() == (window ? 4 : 0) + 1 + name.size() + payload.size());
  auto unwrap = [&](std::span<const std::byte> message) {
    std::span<const std::byte> named = message;
    if (window) {
      std::uint32_t got = 0;
      require(split_window(message, got, named) && got == window);
    }
    std::string_view method;
    std::span<const std::byte> rest;
    require(check_split(named, method, rest));
    require(method == name && std::ranges::equal(rest, payload));
  };
  unwrap(out.payload);
  // The same request made in place (rpc_buffer's in-place call): the name's length inline, the
  // name and the payload borrowed. Every packet must match, and own() must give the same bytes.
  outgoing_message borrowed = out;
  if (!window) {
    borrowed.payload.clear();
    borrowed.head[0] = static_cast<std::byte>(name.size());
    borrowed.head_size = 1;
    borrowed.borrowed[0] = std::as_bytes(std::span(name.data(), name.size()));
    borrowed.borrowed[1] = payload;
    require(borrowed.size() == out.payload.size());
  }
  const std::uint32_t count = packets_for(out.payload.size(), payload_per_packet(node_size));
  reassembler r(out.payload.size(), 1);
  std::vector<std::byte> node(node_size), again(node_size);
  for (std::uint32_t i = 1; i <= count; ++i) {
    const std::size_t used = encode_packet(out, i, node_size, node);
    require(used <= node_size);
    require(
        encode_packet(borrowed, i, node_size, again) == used &&
        std::equal(node.begin(), node.begin() + static_cast<std::ptrdiff_t>(used), again.begin()));
    const auto packet = parse_packet(std::span(node).first(used), node_size);
    require(packet && packet->header.flags == out.flags);
    incoming_message m{};
    const auto got = r.add(*packet, m);
    if (i < count) {
      require(got == reassembler::result::incomplete);
      continue;
    }
    require(got == reassembler::result::complete);
    require(m.flags == out.flags && m.payload == out.payload);
    unwrap(m.payload);
  }
  borrowed.own();
  require(borrowed.payload == out.payload && borrowed.size() == out.payload.size());
  // A message of one packet, viewed where it was read rather than copied, then kept.
  if (count == 1) {
    const std::size_t used = encode_packet(out, 1, node_size, node);
    const auto packet = parse_packet(std::span(node).first(used), node_size);
    incoming_message m{};
    require(packet && reassembler(out.payload.size(), 1).add(*packet, m, true) ==
                          reassembler::result::complete);
    require(m.viewed && std::ranges::equal(m.bytes(), out.payload));
    m.own();
    require(!m.viewed && m.payload == out.payload);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const auto node_size = static_cast<std::uint32_t>(packet_header_size + 1 + data[0] % 64);
  const std::uint64_t max_message = std::uint64_t{1} << (data[1] % 24);
  reassembler r(max_message, 8);
  const auto bytes = std::as_bytes(std::span(data + 2, size - 2));
  for (std::size_t off = 0; off < bytes.size(); off += node_size) {
    const auto node = bytes.subspan(off, std::min<std::size_t>(node_size, bytes.size() - off));
    check_split(node);
    const auto packet = parse_packet(node, node_size);
    if (!packet) continue;
    const auto& h = packet->header;
    require(valid_flags(h.flags, h.type));
    require(packet->chunk.data() == node.data() + packet_header_size);
    incoming_message m{};
    if (r.add(*packet, m) != reassembler::result::complete) continue;
    require(m.payload.size() <= max_message);  // a message over the limit is never put together
    require(m.flags == h.flags && static_cast<std::uint8_t>(m.type) == h.type);
    require(valid_flags(m.flags, h.type));
    if (m.flags & layout::packet_flag_stream)
      check_stream_request(m.payload, m.flags);
    else if (m.flags & layout::packet_flag_method)
      check_split(m.payload);
    if (m.type == layout::packet_type::stream_credit) {
      std::uint32_t count = 0;
      if (decode_credit(m.payload, count))
        require(m.payload.size() == 4 && count >= 1 && count <= layout::max_stream_window);
    }
    if (m.type == layout::packet_type::error) {
      int value = 0;
      std::string text;
      decode_error(m.payload, value, text);
      require(text.size() == (m.payload.size() < 4 ? 0 : m.payload.size() - 4));
    }
  }
  check_split(bytes);
  // [name length seed][name][payload]: as much of the name as the input has.
  if (bytes.size() >= 2) {
    const std::size_t length = std::min<std::size_t>(
        1 + std::to_integer<std::size_t>(bytes[0]) % layout::max_method_name, bytes.size() - 1);
    const std::string_view name(reinterpret_cast<const char*>(bytes.data()) + 1, length);
    round_trip(name, bytes.subspan(1 + length), node_size, 0);
    const std::uint32_t window =
        1 + (std::to_integer<std::uint32_t>(bytes[0]) * 257u) % layout::max_stream_window;
    round_trip(name, bytes.subspan(1 + length), node_size, window);
  }
  return 0;
}
