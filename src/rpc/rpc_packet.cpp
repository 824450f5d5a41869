#include "shmio/detail/rpc_packet.hpp"

#include <algorithm>
#include <string>

namespace shmio::detail {

using layout::packet_header;
using layout::packet_type;

std::size_t encode_packet(const outgoing_message& m, std::uint32_t index, std::uint32_t node_size,
                          std::span<std::byte> node) noexcept {
  const std::uint32_t per = payload_per_packet(node_size);
  const std::uint64_t total = m.size();
  const std::uint64_t offset = std::uint64_t{index - 1} * per;
  const std::size_t chunk = static_cast<std::size_t>(std::min<std::uint64_t>(per, total - offset));
  packet_header h{};
  h.type = static_cast<std::uint8_t>(m.type);
  h.version = static_cast<std::uint8_t>(layout::rpc_version);
  h.packet_index = index;
  h.message_id = m.id;
  h.total_size = static_cast<std::uint32_t>(total);
  h.packet_count = packets_for(total, per);
  h.response_to = m.response_to;
  h.generation = m.generation;
  h.flags = m.flags;
  std::memcpy(node.data(), &h, sizeof h);
  if (chunk) m.copy_out(offset, chunk, node.data() + sizeof h);
  return sizeof h + chunk;
}

void outgoing_message::copy_out(std::uint64_t offset, std::size_t n,
                                std::byte* out) const noexcept {
  const std::span<const std::byte> pieces[] = {
      {head, head_size}, borrowed[0], borrowed[1], payload};
  for (const auto& piece : pieces) {
    if (n == 0) return;
    if (offset >= piece.size()) {
      offset -= piece.size();
      continue;
    }
    const std::size_t take = std::min<std::uint64_t>(n, piece.size() - offset);
    std::memcpy(out, piece.data() + offset, take);
    out += take;
    n -= take;
    offset = 0;
  }
}

void outgoing_message::own() {
  if (head_size == 0 && borrowed[0].empty() && borrowed[1].empty()) return;
  std::vector<std::byte> all(size());
  copy_out(0, all.size(), all.data());
  payload = std::move(all);
  head_size = 0;
  borrowed[0] = borrowed[1] = {};
}

std::optional<packet_view> parse_packet(std::span<const std::byte> node,
                                        std::uint32_t node_size) noexcept {
  if (node.size() < sizeof(packet_header) || node_size <= sizeof(packet_header)) return {};
  packet_view p{};
  std::memcpy(&p.header, node.data(), sizeof p.header);  // one copy: the peer may still scribble
  const auto& h = p.header;
  if (h.type < static_cast<std::uint8_t>(packet_type::request) ||
      h.type > static_cast<std::uint8_t>(packet_type::stream_credit) ||
      h.version != layout::rpc_version)
    return {};
  if ((h.flags & ~layout::packet_flags_known) != 0 ||
      (h.flags != 0 && h.type != static_cast<std::uint8_t>(packet_type::request)))
    return {};
  const std::uint32_t per = payload_per_packet(node_size);
  if (h.packet_count != packets_for(h.total_size, per) || h.packet_index == 0 ||
      h.packet_index > h.packet_count || h.generation == 0)
    return {};
  const std::uint64_t offset = std::uint64_t{h.packet_index - 1} * per;
  const std::uint64_t expected = std::min<std::uint64_t>(per, h.total_size - offset);
  if (node.size() - sizeof(packet_header) != expected) return {};
  p.chunk = node.subspan(sizeof(packet_header));
  return p;
}

reassembler::result reassembler::add(const packet_view& p, incoming_message& out,
                                     bool view_single) {
  const auto& h = p.header;
  last_too_large_ = last_over_budget_ = false;
  last_dropped_.reset();
  if (h.total_size > max_message_size_) {
    // A first packet of the same kind is answered as too large (last_too_large_), which tells
    // what waited for the message dropped under its id; anything else is a broken message.
    if (auto it = partial_.find(h.message_id); it != partial_.end()) {
      if (h.packet_index == 1 && static_cast<std::uint8_t>(it->second.message.type) == h.type)
        drop(it);
      else
        drop_broken(it);
    }
    last_too_large_ = h.packet_index == 1;  // answer once, at its first packet
    return result::rejected;
  }
  auto type = static_cast<packet_type>(h.type);
  if (h.packet_count == 1) {  // the common case: no map entry at all
    if (h.packet_index != 1) return result::rejected;
    out.type = type;
    out.id = h.message_id;
    out.response_to = h.response_to;
    out.viewed = view_single;
    if (view_single) {
      out.view = p.chunk;
      out.payload.clear();
    } else {
      out.view = {};
      out.payload.assign(p.chunk.begin(), p.chunk.end());
    }
    out.generation = h.generation;
    out.flags = h.flags;
    return result::complete;
  }
  auto it = partial_.find(h.message_id);
  if (h.packet_index == 1) {
    if (it != partial_.end() || partial_.size() >= max_partial_) {
      if (it != partial_.end()) drop_broken(it);
      return result::rejected;
    }
    if (announced_ + h.total_size > max_bytes_) {
      // Over the budget for messages in part: refused as one too large would be, so that a
      // request is answered rather than left to time out.
      last_too_large_ = last_over_budget_ = true;
      return result::rejected;
    }
    announced_ += h.total_size;
    partial part{{type, h.message_id, h.response_to, {}, h.generation, h.flags, false, {}},
                 2,
                 h.packet_count,
                 h.total_size};
    // Grow as packets arrive: a forged total must not make us allocate it up front (1024 open
    // messages each announcing a mebibyte would reserve a gibibyte for 1024 packets). Room for
    // 16 packets ahead, then the vector's own doubling.
    part.message.payload.reserve(std::min<std::size_t>(
        h.total_size, std::size_t{16} * std::max<std::size_t>(p.chunk.size(), 1)));
    part.message.payload.insert(part.message.payload.end(), p.chunk.begin(), p.chunk.end());
    partial_.emplace(h.message_id, std::move(part));
    return result::incomplete;
  }
  if (it == partial_.end()) return result::rejected;
  partial& part = it->second;
  if (h.packet_index != part.next_index || h.packet_count != part.packet_count ||
      h.total_size != part.total_size || static_cast<std::uint8_t>(part.message.type) != h.type ||
      h.generation != part.message.generation || h.flags != part.message.flags) {
    drop_broken(it);
    return result::rejected;
  }
  part.message.payload.insert(part.message.payload.end(), p.chunk.begin(), p.chunk.end());
  if (part.next_index++ < part.packet_count) return result::incomplete;
  out = std::move(part.message);
  drop(it);
  return result::complete;
}

void reassembler::drop(std::unordered_map<std::uint64_t, partial>::iterator it) noexcept {
  announced_ -= it->second.total_size;
  partial_.erase(it);
}

void reassembler::drop_broken(std::unordered_map<std::uint64_t, partial>::iterator it) noexcept {
  const incoming_message& m = it->second.message;
  last_dropped_ = dropped_message{m.type, m.id, m.response_to};
  drop(it);
}

std::uint64_t encode_timeout(std::chrono::milliseconds timeout) noexcept {
  if (timeout.count() < 0 || timeout == std::chrono::milliseconds::max())
    return layout::rpc_no_timeout;
  return static_cast<std::uint64_t>(timeout.count());
}

bool decode_timeout(std::uint64_t wire, std::chrono::milliseconds& out) noexcept {
  if (wire == layout::rpc_no_timeout) {
    out = std::chrono::milliseconds::max();
    return true;
  }
  // Milliseconds count in a signed 64-bit number; only rpc_no_timeout stands above that.
  if (wire > static_cast<std::uint64_t>(std::chrono::milliseconds::max().count())) return false;
  out = std::chrono::milliseconds(static_cast<std::int64_t>(wire));
  return true;
}

std::chrono::steady_clock::time_point deadline_after(std::chrono::milliseconds timeout) noexcept {
  const auto now = std::chrono::steady_clock::now();
  if (timeout.count() < 0 || timeout >= std::chrono::duration_cast<std::chrono::milliseconds>(
                                            std::chrono::steady_clock::time_point::max() - now))
    return std::chrono::steady_clock::time_point::max();
  return now + timeout;
}

std::vector<std::byte> encode_named(std::string_view method, std::span<const std::byte> payload) {
  return encode_request(0, method, payload);
}

std::vector<std::byte> encode_request(std::uint32_t window, std::string_view method,
                                      std::span<const std::byte> payload) {
  const std::size_t head = (window ? 4 : 0) + (method.empty() ? 0 : 1 + method.size());
  std::vector<std::byte> out(head + payload.size());
  std::byte* p = out.data();
  if (window) {
    std::memcpy(p, &window, 4);
    p += 4;
  }
  if (!method.empty()) {
    *p++ = static_cast<std::byte>(method.size());  // 1..255: checked by the caller
    std::memcpy(p, method.data(), method.size());
    p += method.size();
  }
  if (!payload.empty()) std::memcpy(p, payload.data(), payload.size());
  return out;
}

bool split_window(std::span<const std::byte> message, std::uint32_t& window,
                  std::span<const std::byte>& rest) noexcept {
  if (message.size() < 4) return false;
  std::memcpy(&window, message.data(), 4);
  if (window == 0 || window > layout::max_stream_window) return false;
  rest = message.subspan(4);
  return true;
}

std::vector<std::byte> encode_credit(std::uint32_t count) {
  std::vector<std::byte> out(4);
  std::memcpy(out.data(), &count, 4);
  return out;
}

bool decode_credit(std::span<const std::byte> payload, std::uint32_t& count) noexcept {
  if (payload.size() != 4) return false;
  std::memcpy(&count, payload.data(), 4);
  return count != 0 && count <= layout::max_stream_window;
}

bool split_named(std::span<const std::byte> message, std::string_view& method,
                 std::span<const std::byte>& payload) noexcept {
  if (message.empty()) return false;
  const std::size_t length = std::to_integer<std::size_t>(message[0]);
  if (length == 0 || 1 + length > message.size()) return false;
  method = {reinterpret_cast<const char*>(message.data()) + 1, length};
  payload = message.subspan(1 + length);
  return true;
}

std::vector<std::byte> encode_error(int value, std::string_view text) {
  std::vector<std::byte> out(4 + text.size());
  const std::uint32_t v = static_cast<std::uint32_t>(value);
  std::memcpy(out.data(), &v, 4);
  if (!text.empty()) std::memcpy(out.data() + 4, text.data(), text.size());
  return out;
}

void decode_error(std::span<const std::byte> payload, int& value, std::string& text) {
  value = 0;
  text.clear();
  if (payload.size() < 4) return;
  std::uint32_t v = 0;
  std::memcpy(&v, payload.data(), 4);
  value = static_cast<int>(v);
  text.assign(reinterpret_cast<const char*>(payload.data()) + 4, payload.size() - 4);
}

}  // namespace shmio::detail
