#pragma once
// An RPC channel's body, its packets, and an RPC service's listener.
// Part of the shared-memory layout: layout.hpp states its rules, docs/protocol.md describes
// each byte, and the static_asserts here pin the same offsets.

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "shmio/detail/layout/segment.hpp"

namespace shmio::detail::layout {

// ---- rpc channel: the body of an object_kind::rpc segment ------------------------------------
//
//  0             64                         64 + ring_bytes
//  +-------------+--------------------------+--------------------------+
//  | rpc_header  | ring: owner -> opener    | ring: opener -> owner    |
//  +-------------+--------------------------+--------------------------+
//
// Each ring is a ring_state followed by its nodes (as in a circular_buffer body). Each message
// travels as packets, one per node: a packet_header, then up to node_size - 40 payload bytes.
// The owner holds an exclusive lock on byte rpc_owner_lock_byte of the file and the opener on
// rpc_opener_lock_byte for as long as they are attached: that is how each learns that the other
// is gone. Ring participant numbers (number n on byte participant_lock_base + n - 1) are shared by
// both rings.
//
// Openers come and go; the owner stays. Each opener, before it takes its lock byte, adds 1 to
// opener_generation and stamps every packet it sends with the result; the owner stamps what it
// sends with the generation of the opener it addresses. A reader drops packets of any other
// generation, so whatever an earlier opener left in the rings (or never read) never reaches the
// next one, and the owner knows a new opener (hence the old one gone) when the counter moves.

inline constexpr std::uint64_t rpc_owner_lock_byte = 32;
inline constexpr std::uint64_t rpc_opener_lock_byte = 33;
// An end that serves requests (it has a handler) holds a shared lock on its serves byte, taken
// before its own lock byte and dropped with it: a caller that finds the other end there and
// its serves byte free answers its own calls with no_handler, as that end would if it read them
// (an end without handlers reads only while it waits for something of its own).
inline constexpr std::uint64_t rpc_owner_serves_lock_byte = 34;
inline constexpr std::uint64_t rpc_opener_serves_lock_byte = 35;
// An opener holds an exclusive lock on the admission byte while attached, taken first: it lets
// openers in one at a time, so that an opener counts itself (opener_generation) before it takes
// rpc_opener_lock_byte, and whoever finds that byte held reads the holder's generation.
inline constexpr std::uint64_t rpc_opener_admit_lock_byte = 36;
// Each end's process also holds a POSIX (process-owned) write lock on its process byte while
// attached: F_GETLK names the process that holds it, in the asker's pid namespace, where the
// pid written in the header is the writer's own claim. The other end watches that process for
// its death (a pidfd). No version change: an end that does not take it is watched by polling
// its lock byte, as before.
inline constexpr std::uint64_t rpc_owner_process_lock_byte = 37;
inline constexpr std::uint64_t rpc_opener_process_lock_byte = 38;
// 2: streams; 3: serves bytes 34, 35; 4: admission byte 36, an opener counted before byte 33.
inline constexpr std::uint32_t rpc_version = 4;
inline constexpr std::uint64_t rpc_no_timeout = ~std::uint64_t{0};  // default_timeout_ms: none

struct rpc_header {
  std::uint32_t version;                         // rpc_version
  std::uint32_t node_count;                      // of each ring
  std::uint32_t node_size;                       // of each ring
  std::uint32_t max_message_size;                // payload bytes; both ends refuse larger messages
  std::uint64_t ring_bytes;                      // bytes of one ring: ring_state + nodes
  std::uint64_t to_opener_offset;                // from the start of the body: 64
  std::uint64_t to_owner_offset;                 // 64 + ring_bytes
  std::atomic<std::uint32_t> owner_pid;          // informational
  std::atomic<std::uint32_t> opener_pid;         // informational
  std::atomic<std::uint64_t> opener_generation;  // 0 until the first opener; +1 per opener
  std::uint64_t default_timeout_ms;  // the owner's default call timeout; rpc_no_timeout: none
};
static_assert(sizeof(rpc_header) == 64);
static_assert(offsetof(rpc_header, version) == 0);
static_assert(offsetof(rpc_header, node_count) == 4);
static_assert(offsetof(rpc_header, node_size) == 8);
static_assert(offsetof(rpc_header, max_message_size) == 12);
static_assert(offsetof(rpc_header, ring_bytes) == 16);
static_assert(offsetof(rpc_header, to_opener_offset) == 24);
static_assert(offsetof(rpc_header, to_owner_offset) == 32);
static_assert(offsetof(rpc_header, owner_pid) == 40);
static_assert(offsetof(rpc_header, opener_pid) == 44);
static_assert(offsetof(rpc_header, opener_generation) == 48);
static_assert(offsetof(rpc_header, default_timeout_ms) == 56);

// Packet types. The C# SharedMemory library has 1-3; shmio adds cancel and close.
enum class packet_type : std::uint8_t {
  request = 1,   // a call; message_id is the caller's id for it
  response = 2,  // a reply; response_to names the request
  error = 3,     // a failed call; payload: u32 shmio::errc value, then UTF-8 text
  cancel = 4,    // the caller gave up on response_to (timeout or cancellation); no payload
  close = 5,     // the sender is closing its end; no payload
  accept = 6,    // an acceptor's end took this connection (the first packet it sends); no payload
  stream_item = 7,    // the next item of the stream answering response_to; payload: the item
  stream_end = 8,     // the stream answering response_to ended normally; no payload
  stream_credit = 9,  // the caller of stream response_to takes more items; payload: u32 count
};

// Packet flags. A request with packet_flag_method names the method it calls: its message starts
// with the name's length (u8, 1..max_method_name), then the name's bytes, then the payload.
// A request with packet_flag_stream asks for a stream: its message starts with the stream's
// window (u32, 1..max_stream_window: items the handler may send before it hears credit), then
// holds what a request's message holds. Flags are for requests only.
// Every packet of a message carries the same flags; unknown bits make a packet invalid.
inline constexpr std::uint16_t packet_flag_method = 1;
inline constexpr std::uint16_t packet_flag_stream = 2;
inline constexpr std::uint16_t packet_flags_known = packet_flag_method | packet_flag_stream;
inline constexpr std::uint32_t max_stream_window = 65536;  // also the most one credit grants
inline constexpr std::size_t max_method_name = 255;

// The C# SharedMemory library's 32 bytes, with u32 packet numbers, a version, and the opener
// generation appended.
struct packet_header {
  std::uint8_t type;           // packet_type
  std::uint8_t version;        // rpc_version
  std::uint16_t flags;         // packet_flag_*, or 0
  std::uint32_t packet_index;  // 1-based, <= packet_count
  std::uint64_t message_id;    // unique per sender (random start, then +1)
  std::uint32_t total_size;    // payload bytes of the whole message (< 4 GiB)
  std::uint32_t packet_count;  // ceil(total_size / payload per packet), at least 1
  std::uint64_t response_to;   // the request a response, error or cancel is about; else 0
  std::uint64_t generation;    // the opener this packet is from or to (never 0)
};
static_assert(sizeof(packet_header) == 40);
static_assert(offsetof(packet_header, type) == 0);
static_assert(offsetof(packet_header, version) == 1);
static_assert(offsetof(packet_header, flags) == 2);
static_assert(offsetof(packet_header, packet_index) == 4);
static_assert(offsetof(packet_header, message_id) == 8);
static_assert(offsetof(packet_header, total_size) == 16);
static_assert(offsetof(packet_header, packet_count) == 20);
static_assert(offsetof(packet_header, response_to) == 24);
static_assert(offsetof(packet_header, generation) == 32);

// ---- rpc listener: the body of an object_kind::rpc_listener segment ---------------------------
//
//  0                 64                                     methods_offset
//  +-----------------+------------------------------------+----------------------+
//  | listener_header | ring: connect requests (backlog)    | method_table (4112)  |
//  +-----------------+------------------------------------+----------------------+
//
// An rpc_acceptor creates it and holds an exclusive lock on byte listener_server_lock_byte for
// as long as it is open. A client that connects creates an rpc channel of its own, as its owner,
// with the sizes this header gives, named connection_name(service, pid, nonce) (rpc_listener.hpp),
// and then writes one connect_request with that pid and nonce into the ring. The acceptor reads
// it, derives the channel's name from the listener's own name and the two numbers (a name is
// never read from shared memory), opens the channel as its opener, and sends an accept packet.
// The channel is then the connection: it takes no other opener. The method table counts the
// calls the service has taken per method name, for `shmio stat`; only the service writes it.

inline constexpr std::uint64_t listener_server_lock_byte = 32;
inline constexpr std::uint32_t listener_version = 2;

struct listener_header {
  std::uint32_t version;                  // listener_version
  std::uint32_t node_count;               // of each ring of a connection's channel
  std::uint32_t node_size;                // of each ring of a connection's channel
  std::uint32_t max_message_size;         // of a connection's channel
  std::uint64_t default_timeout_ms;       // of a connection's channel; rpc_no_timeout: none
  std::uint64_t ring_offset;              // from the start of the body: 64
  std::uint64_t ring_bytes;               // ring_state + nodes of the connect ring
  std::atomic<std::uint32_t> server_pid;  // informational
  std::uint32_t backlog;                  // nodes of the connect ring
  std::atomic<std::uint64_t>
      accepted;  // connections accepted so far (one being made counts); informational
  std::uint64_t methods_offset;  // from the start of the body: the method_table
};
static_assert(sizeof(listener_header) == 64);
static_assert(offsetof(listener_header, version) == 0);
static_assert(offsetof(listener_header, node_count) == 4);
static_assert(offsetof(listener_header, node_size) == 8);
static_assert(offsetof(listener_header, max_message_size) == 12);
static_assert(offsetof(listener_header, default_timeout_ms) == 16);
static_assert(offsetof(listener_header, ring_offset) == 24);
static_assert(offsetof(listener_header, ring_bytes) == 32);
static_assert(offsetof(listener_header, server_pid) == 40);
static_assert(offsetof(listener_header, backlog) == 44);
static_assert(offsetof(listener_header, accepted) == 48);
static_assert(offsetof(listener_header, methods_offset) == 56);

inline constexpr std::uint32_t method_slots = 64;     // methods counted per service
inline constexpr std::size_t method_name_bytes = 44;  // of a name kept in a slot

struct method_slot {
  std::atomic<std::uint64_t> calls;  // requests for this method the service has taken
  std::uint64_t reserved;            // 0
  std::atomic<std::uint8_t> taken;   // 1 once name_length, cut and name are written
  std::uint8_t name_length;          // bytes of `name` used: 0 is the unnamed method
  std::uint8_t cut;                  // 1: the name is longer, and `name` is its start
  std::uint8_t reserved2;            // 0
  char name[method_name_bytes];      // not terminated
};
static_assert(sizeof(method_slot) == 64);
static_assert(offsetof(method_slot, calls) == 0);
static_assert(offsetof(method_slot, reserved) == 8);
static_assert(offsetof(method_slot, taken) == 16);
static_assert(offsetof(method_slot, name_length) == 17);
static_assert(offsetof(method_slot, cut) == 18);
static_assert(offsetof(method_slot, reserved2) == 19);
static_assert(offsetof(method_slot, name) == 20);

struct method_table {
  std::atomic<std::uint32_t> used;  // slots taken so far, from the first
  std::uint32_t slot_count;         // method_slots
  std::uint64_t reserved;           // 0
  method_slot slots[method_slots];
};
static_assert(sizeof(method_table) == 16 + 64 * method_slots);
static_assert(offsetof(method_table, used) == 0);
static_assert(offsetof(method_table, slot_count) == 4);
static_assert(offsetof(method_table, reserved) == 8);
static_assert(offsetof(method_table, slots) == 16);

struct connect_request {
  std::uint32_t version;      // listener_version
  std::uint32_t pid;          // the client's process id; part of the channel's name
  std::uint64_t nonce;        // random, never 0; part of the channel's name
  std::uint64_t reserved[2];  // 0
};
static_assert(sizeof(connect_request) == 32);
static_assert(offsetof(connect_request, version) == 0);
static_assert(offsetof(connect_request, pid) == 4);
static_assert(offsetof(connect_request, nonce) == 8);
static_assert(offsetof(connect_request, reserved) == 16);

}  // namespace shmio::detail::layout
