#pragma once
// Packets of the RPC channel: splitting a message into node-sized packets, checking a packet
// read from shared memory, and putting messages back together.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <vector>

#include "shmio/detail/layout.hpp"

namespace shmio::detail {

inline constexpr std::size_t packet_header_size = sizeof(layout::packet_header);

/// Payload bytes that fit in one packet of a ring whose nodes hold `node_size` bytes.
inline std::uint32_t payload_per_packet(std::uint32_t node_size) noexcept {
  return node_size - static_cast<std::uint32_t>(packet_header_size);
}

/// Packets needed for `total` payload bytes: at least one, even for an empty message.
inline std::uint32_t packets_for(std::uint64_t total, std::uint32_t per_packet) noexcept {
  return total == 0 ? 1 : static_cast<std::uint32_t>((total + per_packet - 1) / per_packet);
}

/// One message on its way out: its header fields and its whole payload.
struct outgoing_message {
  layout::packet_type type = layout::packet_type::request;
  std::uint64_t id = 0;
  std::uint64_t response_to = 0;
  std::vector<std::byte> payload;
  std::uint32_t next_packet = 1;  // the first packet not yet written
  std::uint64_t generation = 0;   // the opener it is from or to: stamped on every packet
  std::uint16_t flags = 0;        // layout::packet_flag_*, or 0
  // A message made in place is sent from where its bytes are, not a copy: `head` (up to 4
  // bytes: a method name's length), then the `borrowed` pieces, then `payload`. Their owner
  // keeps them until the message is written or own() is called (the outbox always owns).
  std::uint8_t head_size = 0;
  std::byte head[4] = {};
  std::span<const std::byte> borrowed[2] = {};

  /// The payload's whole size, every piece counted.
  std::uint64_t size() const noexcept {
    return head_size + borrowed[0].size() + borrowed[1].size() + payload.size();
  }
  /// Copies the head and borrowed pieces into `payload`: the message then owns every byte.
  void own();
  /// Copies `n` payload bytes from `offset` on into `out`.
  void copy_out(std::uint64_t offset, std::size_t n, std::byte* out) const noexcept;
};

/// Writes packet `index` (1-based) of `m` into `node`; returns the bytes used.
std::size_t encode_packet(const outgoing_message& m, std::uint32_t index, std::uint32_t node_size,
                          std::span<std::byte> node) noexcept;

/// A packet that passed every check: its header and its slice of the payload.
struct packet_view {
  layout::packet_header header;
  std::span<const std::byte> chunk;
};

/// Checks a packet as read from a node: type and version known, 1 <= index <= count, count
/// consistent with total_size, the chunk exactly as long as that index's share, and a
/// generation (never 0). Returns nothing if any check fails: the packet is then dropped and
/// counted, never trusted. Whether the generation is the right one is the channel's business.
std::optional<packet_view> parse_packet(std::span<const std::byte> node,
                                        std::uint32_t node_size) noexcept;

/// A message put back together. One of a single packet may be only viewed where it was read
/// (reassembler::add with `view_single`): its bytes are then valid until the next packet is
/// read, and whoever keeps the message longer calls own() first.
struct incoming_message {
  layout::packet_type type;
  std::uint64_t id;
  std::uint64_t response_to;
  std::vector<std::byte> payload;  // the bytes, unless viewed
  std::uint64_t generation = 0;    // the opener it is from or to
  std::uint16_t flags = 0;         // as every packet of it had them
  bool viewed = false;
  std::span<const std::byte> view;  // the bytes, if viewed

  std::span<const std::byte> bytes() const noexcept {
    return viewed ? view : std::span<const std::byte>(payload);
  }
  void own() {
    if (!viewed) return;
    payload.assign(view.begin(), view.end());
    viewed = false;
    view = {};
  }
};

/// Collects packets per message id. Packets of one message arrive in order (one writer writes
/// them one after the other into a FIFO ring); packets of different messages may interleave.
/// The channel clears it whenever its peer changes: it only ever sees one generation at a time.
class reassembler {
 public:
  enum class result { incomplete, complete, rejected };

  static constexpr std::size_t default_partial_messages = 1024;
  /// Messages of up to `max_message_size` bytes; up to `max_partial` of them received in part
  /// at once, whose announced sizes add up to at most `max_bytes` (0: max_message_size).
  explicit reassembler(std::uint64_t max_message_size,
                       std::size_t max_partial = default_partial_messages,
                       std::uint64_t max_bytes = 0)
      : max_message_size_(max_message_size),
        max_partial_(max_partial),
        max_bytes_(max_bytes == 0 ? max_message_size : max_bytes) {}

  /// Adds a checked packet. On `complete`, `out` holds the message; with `view_single`, a
  /// message of one packet is viewed in `p`'s chunk rather than copied.
  result add(const packet_view& p, incoming_message& out, bool view_single = false);
  /// True if the message `add` last rejected was a request too large to take: the caller
  /// answers it with an error instead of silence.
  bool last_rejected_too_large() const noexcept { return last_too_large_; }
  /// ... and if so, whether it was for max_reassembly_bytes (the messages in part with it would
  /// pass it) rather than max_message_size: what its error's text says.
  bool last_rejected_over_budget() const noexcept { return last_over_budget_; }
  /// The message `add` last dropped in part (a later packet of it did not fit, or its first
  /// packet came again), if the last rejection dropped one: the caller fails what waited for it
  /// rather than leave it waiting for a message that will never be whole.
  struct dropped_message {
    layout::packet_type type;
    std::uint64_t id;
    std::uint64_t response_to;
  };
  const std::optional<dropped_message>& last_dropped() const noexcept { return last_dropped_; }
  void clear() noexcept {
    partial_.clear();
    announced_ = 0;
  }
  std::uint64_t max_message_size() const noexcept { return max_message_size_; }
  std::size_t partial_count() const noexcept { return partial_.size(); }

 private:
  struct partial {
    incoming_message message;
    std::uint32_t next_index;
    std::uint32_t packet_count;
    std::uint32_t total_size;
  };
  std::uint64_t max_message_size_;
  std::size_t max_partial_;
  std::uint64_t max_bytes_;
  std::uint64_t announced_ = 0;  // total_size of every partial message, added up
  std::unordered_map<std::uint64_t, partial> partial_;
  void drop(std::unordered_map<std::uint64_t, partial>::iterator it) noexcept;
  bool last_too_large_ = false;
  bool last_over_budget_ = false;
  std::optional<dropped_message> last_dropped_;
  // Drops `it` as a message that cannot be completed, noting it in last_dropped_.
  void drop_broken(std::unordered_map<std::uint64_t, partial>::iterator it) noexcept;
};

/// A default timeout as the RPC headers hold it: milliseconds, or layout::rpc_no_timeout for
/// none (a negative timeout, or milliseconds::max()).
std::uint64_t encode_timeout(std::chrono::milliseconds timeout) noexcept;
/// Reads one back: false if it is out of range (past a signed 64-bit count, and not "none").
bool decode_timeout(std::uint64_t wire, std::chrono::milliseconds& out) noexcept;
/// The time `timeout` from now; time_point::max() for a negative timeout or one that reaches
/// past it (a timeout adopted from a peer may be any count up to 2^63 - 1 milliseconds, which
/// would overflow the clock's nanoseconds).
std::chrono::steady_clock::time_point deadline_after(std::chrono::milliseconds timeout) noexcept;

/// A named request's payload: the method's name in front of the caller's bytes.
std::vector<std::byte> encode_named(std::string_view method, std::span<const std::byte> payload);
/// A request's message: with a window (not 0), a stream request's; with a method name (not
/// empty, at most 255 bytes), a named one's; then the caller's bytes.
std::vector<std::byte> encode_request(std::uint32_t window, std::string_view method,
                                      std::span<const std::byte> payload);
/// Splits a stream request's window from the rest; false if it is missing or out of range.
bool split_window(std::span<const std::byte> message, std::uint32_t& window,
                  std::span<const std::byte>& rest) noexcept;
/// A stream_credit packet's payload; decode is false unless it is 1..max_stream_window.
std::vector<std::byte> encode_credit(std::uint32_t count);
bool decode_credit(std::span<const std::byte> payload, std::uint32_t& count) noexcept;
/// Splits a named request's message; false if its name's length is out of range.
bool split_named(std::span<const std::byte> message, std::string_view& method,
                 std::span<const std::byte>& payload) noexcept;

/// Error payload: u32 error value, then the text.
std::vector<std::byte> encode_error(int value, std::string_view text);
void decode_error(std::span<const std::byte> payload, int& value, std::string& text);

}  // namespace shmio::detail
