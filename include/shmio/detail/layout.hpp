#pragma once
// Every structure shmio places in shared memory, in one file. docs/protocol.md describes each
// byte; the static_asserts below pin the same offsets, so the two cannot drift apart silently.
//
// Rules for everything here:
// - fixed-width fields, little-endian (the machine's), no pointers: offsets and counts only;
// - every value read back is untrusted: code that reads it validates it before use;
// - atomics are lock-free and have the size of their value, so another language can use them;
// - fields that different processes write often sit in different 64-byte cache lines.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace shmio::detail::layout {

inline constexpr std::size_t cache_line = 64;  // fixed, not hardware_destructive_interference_size

template <class T>
inline constexpr bool shareable_atomic = std::atomic<T>::is_always_lock_free &&
                                         sizeof(std::atomic<T>) == sizeof(T);
static_assert(shareable_atomic<std::uint32_t> && shareable_atomic<std::uint64_t>);

// ---- segment header: the first 64 bytes of every segment file ------------------------------
//
//  0        8        12       16                24       28       32                40      64
//  +--------+--------+--------+--------+--------+--------+--------+--------+--------+--....--+
//  | magic  |version | kind   |   total_size    |body_off|creator |   created_ns    |reserved|
//  +--------+--------+--------+-----------------+--------+--------+-----------------+--------+

inline constexpr std::uint64_t segment_magic = 0x0031304f494d4853ull;  // "SHMIO01\0"
// 2: blocking waiters take wait slots (sleeper ids, bit 63 set); a version 1 process would ring
// them as doorbell sockets, find no socket, and free the slot of a live sleeper.
// 3: a ring node's word holds its turn less the node's index (a new ring's words are zero).
// 4: the lock words of a reader/writer lock and of a broadcast carry their writer's tag (a
// version 3 process would take a tagged word for a damaged one, and reclaim a live lock).
inline constexpr std::uint32_t layout_version = 4;

struct segment_header {
  std::uint64_t magic;        // segment_magic; anything else is not a shmio segment
  std::uint32_t version;      // layout_version of the creator
  std::uint32_t kind;         // shmio::object_kind
  std::uint64_t total_size;   // bytes in the file, header included
  std::uint32_t body_offset;  // where the object's state starts: sizeof(segment_header)
  std::uint32_t creator_pid;  // for the inspector; never trusted for liveness
  std::uint64_t created_ns;   // CLOCK_REALTIME at creation, for the inspector
  std::uint8_t reserved[24];
};
static_assert(std::is_trivially_copyable_v<segment_header>);
static_assert(sizeof(segment_header) == 64);
static_assert(offsetof(segment_header, magic) == 0);
static_assert(offsetof(segment_header, version) == 8);
static_assert(offsetof(segment_header, kind) == 12);
static_assert(offsetof(segment_header, total_size) == 16);
static_assert(offsetof(segment_header, body_offset) == 24);
static_assert(offsetof(segment_header, creator_pid) == 28);
static_assert(offsetof(segment_header, created_ns) == 32);

// Byte-range locks on the segment file (open-file-description locks, see docs/protocol.md).
inline constexpr std::uint64_t holder_lock_byte = 0;  // shared by every process that has it open
inline constexpr std::uint64_t admin_lock_byte = 1;   // exclusive, briefly, to create/open/remove

// ---- wait queue: who is parked on a condition, and how to wake them -------------------------
//
// A waiting I/O object owns one slot while it exists. It parks by arming its slot (armed = 1,
// then parked += 1 << 32), re-checking its condition, and waiting on its doorbell. A signaller
// publishes, reads `parked`, and only if it is non-zero claims armed slots (CAS 1 -> 0) and
// rings their doorbells. A blocking (non-async) wait takes a slot for the call and sleeps on its
// `armed` word (futex); if none is free it sleeps on futex_seq and counts itself in the low half
// of `parked`.

inline constexpr std::uint32_t wait_slot_count = 32;
inline constexpr std::uint64_t parked_doorbell_unit = std::uint64_t{1} << 32;
inline constexpr std::uint64_t parked_sleeper_unit = 1;
// A slot owner id with this bit set is a blocking sleeper (pid << 32 | tid), not a doorbell.
inline constexpr std::uint64_t slot_sleeper_bit = std::uint64_t{1} << 63;

struct wait_slot {
  std::atomic<std::uint64_t> doorbell;  // 0: free; else the owner's doorbell id
  std::atomic<std::uint32_t> armed;     // 1 while the owner is parked and wants a ring
  std::atomic<std::uint32_t> pid;       // the owner's pid, for the inspector only
};
static_assert(sizeof(wait_slot) == 16);
static_assert(offsetof(wait_slot, doorbell) == 0);
static_assert(offsetof(wait_slot, armed) == 8);
static_assert(offsetof(wait_slot, pid) == 12);

struct alignas(cache_line) wait_queue {
  std::atomic<std::uint64_t> parked;     // armed slots << 32 | futex sleepers
  std::atomic<std::uint32_t> futex_seq;  // bumped by a notify that finds sleepers
  std::uint8_t reserved[cache_line - 12];
  wait_slot slots[wait_slot_count];
};
static_assert(sizeof(wait_queue) == 64 + 16 * wait_slot_count);
static_assert(offsetof(wait_queue, parked) == 0);
static_assert(offsetof(wait_queue, futex_seq) == 8);
static_assert(offsetof(wait_queue, slots) == 64);

// ---- named event: the body of an object_kind::event segment ---------------------------------

inline constexpr std::uint32_t event_auto_reset = 0;
inline constexpr std::uint32_t event_manual_reset = 1;

struct event_state {
  std::atomic<std::uint32_t> signalled;  // 0 or 1; a waiter of an auto-reset event takes it 1 -> 0
  std::uint32_t mode;                    // event_auto_reset or event_manual_reset, fixed at create
  std::uint8_t reserved[cache_line - 8];
  wait_queue waiters;
};
static_assert(sizeof(event_state) == 64 + sizeof(wait_queue));
static_assert(offsetof(event_state, signalled) == 0);
static_assert(offsetof(event_state, mode) == 4);
static_assert(offsetof(event_state, waiters) == 64);

// ---- circular buffer: the body of an object_kind::circular_buffer segment -------------------
//
//  0          64         128        192               768               1344
//  +----------+----------+----------+-----------------+-----------------+------------------...
//  | header   | tail     | head     | readers (queue) | writers (queue) | node 0 | node 1 | ...
//  +----------+----------+----------+-----------------+-----------------+------------------...
//
// Node i sits at nodes_offset + i * node_stride: a 16-byte node_header, then node_size bytes.
// A node's `word` says whose turn it is: (turn - i) mod 2^48 << 16 | reading (1 bit) << 15 |
// owner, for node i. Holding the turn less the index makes a new ring's words all zero (turn i
// for node i, owner 0): a new segment file is zero, so nothing is written to the nodes at
// creation and their pages are first touched when used. In what follows, "turn" is the turn.
//   turn == p,     owner 0            : free for the writer of position p
//   turn == p,     owner w            : participant w is writing position p
//   turn == p + 1, owner 0            : position p is published: `length` bytes are readable
//   turn == p + 1, owner r, reading 1 : participant r is reading position p
// A reader that is done stores turn p + node_count, owner 0: free for the writer of the next lap.
// `tail` and `head` are hints (the next positions to write and read); the node words decide.
// Owners are participant numbers: each open handle holds an exclusive lock on byte
// participant_lock_base + number of the segment file, so a dead owner can be told from a slow one.

inline constexpr std::uint64_t participant_lock_base = 64;
inline constexpr std::uint32_t max_participants = 4096;
inline constexpr unsigned node_turn_shift = 16;
inline constexpr std::uint64_t node_reading_bit = std::uint64_t{1} << 15;
inline constexpr std::uint64_t node_owner_mask = node_reading_bit - 1;
static_assert(max_participants <= node_owner_mask);

struct ring_header {
  std::uint32_t node_count;   // >= 2
  std::uint32_t node_size;    // >= 1: the largest message
  std::uint32_t node_stride;  // bytes from one node to the next: round_up(16 + node_size, 64)
  std::uint32_t reserved0;
  std::uint64_t nodes_offset;  // from the start of the body: 1344
  std::uint8_t reserved[40];
};
static_assert(sizeof(ring_header) == 64);
static_assert(offsetof(ring_header, node_count) == 0);
static_assert(offsetof(ring_header, node_size) == 4);
static_assert(offsetof(ring_header, node_stride) == 8);
static_assert(offsetof(ring_header, nodes_offset) == 16);

struct alignas(cache_line) ring_cursor {
  std::atomic<std::uint64_t> position;
  std::uint8_t reserved[cache_line - 8];
};
static_assert(sizeof(ring_cursor) == cache_line);

struct ring_state {
  ring_header header;
  ring_cursor tail;    // writers' hint, in a line of its own (only writers write it)
  ring_cursor head;    // readers' hint, in a line of its own (only readers write it)
  wait_queue readers;  // readers park here until a node is published
  wait_queue writers;  // writers park here until a node is freed
};
static_assert(offsetof(ring_state, tail) == 64);
static_assert(offsetof(ring_state, head) == 128);
static_assert(offsetof(ring_state, readers) == 192);
static_assert(offsetof(ring_state, writers) == 768);
static_assert(sizeof(ring_state) == 1344);

struct node_header {
  std::atomic<std::uint64_t> word;  // (turn - i) << 16 | reading << 15 | owner, see above
  std::uint32_t length;             // bytes of the message; untrusted: checked against node_size
  std::uint32_t reserved;
};
static_assert(sizeof(node_header) == 16);
static_assert(offsetof(node_header, word) == 0);
static_assert(offsetof(node_header, length) == 8);

inline constexpr std::uint64_t ring_nodes_offset = sizeof(ring_state);
inline constexpr std::uint64_t node_stride_for(std::uint64_t node_size) {
  return (sizeof(node_header) + node_size + cache_line - 1) / cache_line * cache_line;
}

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
// is gone. Ring participant numbers (participant_lock_base + n) are shared by both rings.
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
  std::atomic<std::uint64_t> accepted;    // connections accepted so far; informational
  std::uint64_t methods_offset;           // from the start of the body: the method_table
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

// ---- reader/writer lock: part of the body of shared_array and buffer_read_write -------------
//
//  0            64                640               1216
//  +------------+-----------------+-----------------+--------+--------+-----   ---+
//  | control    | readers (queue) | writers (queue) | slot 0 | slot 1 | ...  255  |
//  +------------+-----------------+-----------------+--------+--------+-----   ---+
//
// `writer` is 0 when no writer holds or claims the lock, else owner | rw_writer_held | tag:
//   owner            : the participant number of the writer that claimed the lock;
//   rw_writer_held   : set once every reader share was gone, i.e. the writer holds the lock;
//   tag              : bits 17-31, the writing handle's tag (random, never its number's
//                      previous holder's; its slot holds it): a word left by a dead holder
//                      differs from any word of the handle that took its number next, so a
//                      waiter that found the holder dead does not take over the lock of that
//                      next handle by mistake (ABA).
// A claim without the held bit keeps new readers out while the writer waits for the current
// ones to leave (writers are preferred, so they are never starved by a stream of readers).
// Slot n - 1 counts the shares that participant n holds. Participant n holds an exclusive lock
// on byte participant_lock_base + n - 1 of the segment file while its handle is open, so a
// dead holder (of the writer word or of shares) can be told from a slow one and reclaimed.

inline constexpr std::uint32_t rw_owner_mask = 0xffff;
inline constexpr std::uint32_t rw_writer_held = std::uint32_t{1} << 16;
inline constexpr std::uint32_t rw_tag_shift = 17;
inline constexpr std::uint32_t rw_tag_mask = 0x7fff;   // after the shift
inline constexpr std::uint32_t rw_reader_slots = 256;  // handles open at once, per segment

struct rw_lock_control {
  std::atomic<std::uint32_t> writer;            // 0, or owner | held | tag (see above)
  std::atomic<std::uint32_t> owner_died;        // 1: a dead holder was reclaimed; next one told
  std::atomic<std::uint32_t> participant_high;  // highest participant number claimed so far
  std::uint32_t slot_count;                     // rw_reader_slots
  std::uint8_t reserved[48];
};
static_assert(sizeof(rw_lock_control) == 64);
static_assert(offsetof(rw_lock_control, writer) == 0);
static_assert(offsetof(rw_lock_control, owner_died) == 4);
static_assert(offsetof(rw_lock_control, participant_high) == 8);
static_assert(offsetof(rw_lock_control, slot_count) == 12);

// One cache line each: readers in different processes touch only their own line.
struct alignas(cache_line) rw_reader_slot {
  std::atomic<std::uint32_t> shares;  // shares its participant holds now
  std::atomic<std::uint32_t> pid;     // of the last participant with this number; informational
  std::atomic<std::uint32_t> tag;     // of the last participant with this number (writer word)
  std::uint8_t reserved[cache_line - 12];
};
static_assert(sizeof(rw_reader_slot) == 64);
static_assert(offsetof(rw_reader_slot, shares) == 0);
static_assert(offsetof(rw_reader_slot, pid) == 4);
static_assert(offsetof(rw_reader_slot, tag) == 8);

struct rw_lock_state {
  rw_lock_control control;
  wait_queue readers;  // readers park here until no writer claims the lock
  wait_queue writers;  // writers park here for the writer word, or for the shares to go
  rw_reader_slot slots[rw_reader_slots];
};
static_assert(offsetof(rw_lock_state, readers) == 64);
static_assert(offsetof(rw_lock_state, writers) == 640);
static_assert(offsetof(rw_lock_state, slots) == 1216);
static_assert(sizeof(rw_lock_state) == 1216 + 64 * rw_reader_slots);

// ---- locked buffer: the body of object_kind::shared_array and buffer_read_write --------------
//
//  0                  64                            data_offset          data_offset + data_size
//  +------------------+-----------------------------+--------------------+
//  | locked_buffer_   | rw_lock_state (17600 bytes) | data               |
//  | header           |                             |                    |
//  +------------------+-----------------------------+--------------------+
//
// data_offset = round_up(64 + 64 + sizeof(rw_lock_state), max(64, element_align)) - 64: the data
// is aligned in the file, whose mapping is page-aligned, and the body starts 64 bytes into it
// (after the segment header). The body ends at the end of the data. A buffer_read_write has
// element_size 1 and element_align 1.

inline constexpr std::uint64_t locked_lock_offset = 64;
inline constexpr std::uint32_t max_element_align = 4096;  // the page: segments are page-aligned

struct locked_buffer_header {
  std::uint64_t data_offset;    // from the start of the body (see above)
  std::uint64_t data_size;      // bytes of data: element_size * element_count
  std::uint64_t element_count;  // elements of element_size bytes
  std::uint32_t element_size;   // sizeof the element type (1 for buffer_read_write)
  std::uint32_t element_align;  // alignof the element type: a power of two <= 4096
  std::uint8_t reserved[32];
};
static_assert(sizeof(locked_buffer_header) == 64);
static_assert(offsetof(locked_buffer_header, data_offset) == 0);
static_assert(offsetof(locked_buffer_header, data_size) == 8);
static_assert(offsetof(locked_buffer_header, element_count) == 16);
static_assert(offsetof(locked_buffer_header, element_size) == 24);
static_assert(offsetof(locked_buffer_header, element_align) == 28);

inline constexpr std::uint64_t locked_data_offset_for(std::uint64_t element_align) {
  const std::uint64_t a = element_align > cache_line ? element_align : cache_line;
  constexpr std::uint64_t body_start = sizeof(segment_header);
  return (body_start + locked_lock_offset + sizeof(rw_lock_state) + a - 1) / a * a - body_start;
}
// Up to a cache line of alignment, as before the alignment was taken in the file.
static_assert(locked_data_offset_for(1) == 17664 && locked_data_offset_for(64) == 17664);
static_assert((sizeof(segment_header) + locked_data_offset_for(128)) % 128 == 0);
static_assert((sizeof(segment_header) + locked_data_offset_for(4096)) % 4096 == 0);
// ---- broadcast: the body of an object_kind::broadcast segment -------------------------------
//
//  0        64       128      192      256              832              1408
//  +--------+--------+--------+--------+----------------+----------------+----------------...
//  | header | tail   | writer | joins  | readers (queue)| writers (queue)| subscriber table,
//  +--------+--------+--------+--------+----------------+----------------+ then the slots
//
// Position p (0, 1, 2, ... for ever) lives in slot p % slot_count: a 16-byte slot_header, then
// message_size bytes. A slot's `seq` is a seqlock version: 2p + 1 while position p is being
// written, 2p + 2 once it is published. `tail` is the number of published positions. Writers
// take turns through `writer`, a lock word holding the participant number of its holder
// (participant_lock_base + number - 1 is that handle's lock byte, as in a ring).
// Subscriber i owns table entry i while it holds an exclusive lock on byte
// broadcast_subscriber_lock_base + i of the segment file; `cursor` is the next position it
// will read, which reliable writers wait for (tail - cursor < slot_count).

inline constexpr std::uint32_t broadcast_version = 1;
inline constexpr std::uint32_t broadcast_reliable = 0;
inline constexpr std::uint32_t broadcast_lossy = 1;
inline constexpr std::uint64_t broadcast_subscriber_lock_base = 65536;
inline constexpr std::uint32_t broadcast_max_subscribers = 1u << 20;
// Subscriber entry state: generation << 8 | one of these kinds.
inline constexpr std::uint64_t subscriber_free = 0;
inline constexpr std::uint64_t subscriber_active = 1;
inline constexpr std::uint64_t subscriber_evicted = 2;
inline constexpr unsigned subscriber_generation_shift = 8;
inline constexpr std::uint64_t subscriber_kind_mask = 0xff;

struct broadcast_header {
  std::uint32_t version;              // broadcast_version
  std::uint32_t mode;                 // broadcast_reliable or broadcast_lossy
  std::uint32_t slot_count;           // >= 2: messages held
  std::uint32_t message_size;         // >= 1: the largest message
  std::uint32_t slot_stride;          // round_up(16 + message_size, 64)
  std::uint32_t subscriber_capacity;  // entries in the subscriber table, 1 .. 2^20
  std::uint32_t lease_ms;             // reliable: how long a subscriber may block writers
  std::uint32_t reserved0;
  std::uint64_t subscribers_offset;  // from the start of the body: 1408
  std::uint64_t slots_offset;        // 1408 + 64 * subscriber_capacity
  std::uint8_t reserved[16];
};
static_assert(sizeof(broadcast_header) == 64);
static_assert(offsetof(broadcast_header, version) == 0);
static_assert(offsetof(broadcast_header, mode) == 4);
static_assert(offsetof(broadcast_header, slot_count) == 8);
static_assert(offsetof(broadcast_header, message_size) == 12);
static_assert(offsetof(broadcast_header, slot_stride) == 16);
static_assert(offsetof(broadcast_header, subscriber_capacity) == 20);
static_assert(offsetof(broadcast_header, lease_ms) == 24);
static_assert(offsetof(broadcast_header, subscribers_offset) == 32);
static_assert(offsetof(broadcast_header, slots_offset) == 40);

// The writer lock's word: 0 free; else the holder's participant number (bits 0-15) and its tag
// (bits 16-31, random per handle, not 0): a word left by a dead holder differs, but for a 1 in
// 65 535 chance, from any word of the handle that took its number next, so a writer that found
// the holder dead does not take over that next handle's lock by mistake (ABA).
inline constexpr std::uint32_t broadcast_owner_mask = 0xffff;
inline constexpr std::uint32_t broadcast_tag_shift = 16;
static_assert(max_participants <= broadcast_owner_mask);

struct alignas(cache_line) broadcast_writer_line {
  std::atomic<std::uint32_t> owner;  // 0: free; else number | tag << 16 (above)
  std::uint8_t reserved[cache_line - 4];
};
static_assert(sizeof(broadcast_writer_line) == cache_line);

struct alignas(cache_line) broadcast_joins_line {
  std::atomic<std::uint32_t> high_water;  // 1 + the highest table entry ever taken
  std::uint8_t reserved[cache_line - 4];
};
static_assert(sizeof(broadcast_joins_line) == cache_line);

struct broadcast_state {
  broadcast_header header;
  ring_cursor tail;              // published positions; written by the writer holding the lock
  broadcast_writer_line writer;  // the writers' lock
  broadcast_joins_line joins;    // written by joining subscribers only
  wait_queue readers;            // subscribers park here until tail moves (or they are evicted)
  wait_queue writers;            // writers park here for room (reliable) or the lock
};
static_assert(offsetof(broadcast_state, tail) == 64);
static_assert(offsetof(broadcast_state, writer) == 128);
static_assert(offsetof(broadcast_state, joins) == 192);
static_assert(offsetof(broadcast_state, readers) == 256);
static_assert(offsetof(broadcast_state, writers) == 832);
static_assert(sizeof(broadcast_state) == 1408);

struct alignas(cache_line) subscriber_entry {
  std::atomic<std::uint64_t> cursor;     // next position this subscriber reads
  std::atomic<std::uint64_t> state;      // generation << 8 | subscriber_free/active/evicted
  std::atomic<std::uint64_t> heartbeat;  // bumped by the subscriber to renew its lease
  std::atomic<std::uint32_t> pid;        // informational
  std::uint8_t reserved[cache_line - 28];
};
static_assert(sizeof(subscriber_entry) == cache_line);
static_assert(offsetof(subscriber_entry, cursor) == 0);
static_assert(offsetof(subscriber_entry, state) == 8);
static_assert(offsetof(subscriber_entry, heartbeat) == 16);
static_assert(offsetof(subscriber_entry, pid) == 24);

struct broadcast_slot_header {
  std::atomic<std::uint64_t> seq;     // 2p + 1: position p being written; 2p + 2: published
  std::atomic<std::uint32_t> length;  // bytes of the message; untrusted: checked against size
  std::uint32_t reserved;
};
static_assert(sizeof(broadcast_slot_header) == 16);
static_assert(offsetof(broadcast_slot_header, seq) == 0);
static_assert(offsetof(broadcast_slot_header, length) == 8);

inline constexpr std::uint64_t broadcast_subscribers_offset = sizeof(broadcast_state);

}  // namespace shmio::detail::layout
