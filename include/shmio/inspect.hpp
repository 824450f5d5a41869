#pragma once
// shmio::inspect — read-only views of the segments in /dev/shm, for tools and monitoring.
//
// Nothing here opens a segment the way an I/O object does: files are opened read-only, mapped
// read-only and never locked, so inspecting cannot keep a segment alive or change its state.
// Every value read is validated; a file that fails is reported with status errc::corrupted (or
// errc::incompatible for another layout version), never trusted. A file under one of this
// user's names that the library refuses to use (a symbolic link, not a regular file, another
// user's, or readable or writable by others) is reported with errc::access_denied and why. What is
// read is a snapshot of memory that other processes keep changing: counts may be a moment old. A
// file truncated while it is read is reported corrupted too: the first examination installs the
// process's truncation guard, a SIGBUS handler that chains to any installed before it
// (docs/protocol.md).
//
// Liveness is the one the library uses: a segment is live while some process holds the shared
// lock on byte 0 of its file, and stale once none does (its last user died without closing).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "shmio/segment.hpp"

namespace shmio::inspect {

/// Who is parked on one wait queue (see docs/protocol.md, "wait queue").
struct wait_queue_info {
  std::uint32_t parked_async = 0;     ///< armed doorbell slots: async or reactor waits
  std::uint32_t parked_blocking = 0;  ///< blocking waits parked (in a slot or on futex_seq)
  std::uint32_t registered = 0;       ///< slots owned by an open handle, parked or not
  /// Its `parked` word holds more than a queue can (written over: signallers then look at
  /// every slot and wake every sleeper); the segment is reported corrupted.
  bool parked_out_of_range = false;
  std::vector<std::uint32_t> pids;  ///< the owners of registered slots
};

/// One ring: its geometry and what each node is doing.
struct ring_info {
  std::uint32_t node_count = 0;
  std::uint32_t node_size = 0;
  std::uint32_t free = 0;       ///< nodes a writer may claim
  std::uint32_t published = 0;  ///< nodes holding an unread message
  std::uint32_t writing = 0;    ///< nodes a writer holds
  std::uint32_t reading = 0;    ///< nodes a reader holds
  std::uint32_t invalid = 0;    ///< nodes whose word or length is inconsistent
  std::uint64_t head = 0;       ///< readers' position hint
  std::uint64_t tail = 0;       ///< writers' position hint
  /// The head and tail further apart than a ring's cursors ever are (two laps either way, in
  /// a pair read while the head stood still): one of them was damaged.
  bool cursors_apart = false;
  /// A single-writer ring (ring_mode::spsc), and the participant numbers of its writing and
  /// reading handles (0: none yet, or the last one closed).
  bool single = false;
  std::uint32_t writer = 0;
  std::uint32_t reader = 0;
  wait_queue_info readers;
  wait_queue_info writers;
  std::uint32_t used() const noexcept { return published + writing + reading; }
};

struct event_info {
  bool signalled = false;
  bool manual_reset = false;
  wait_queue_info waiters;
};

struct rpc_info {
  std::uint32_t owner_pid = 0;          ///< as recorded; informational
  std::uint32_t opener_pid = 0;         ///< as recorded; informational
  bool owner_attached = false;          ///< the owner's lock is held
  bool opener_attached = false;         ///< an opener's lock is held
  std::uint64_t opener_generation = 0;  ///< how many openers have joined so far
  std::uint32_t max_message_size = 0;   ///< the owner's limit, in payload bytes
  ring_info to_opener;
  ring_info to_owner;
};

/// The reader/writer lock of a shared_array or buffer_read_write (docs/protocol.md).
struct lock_info {
  enum class state_kind {
    free,       ///< no writer, no share
    shared,     ///< shares held, no writer
    claimed,    ///< a writer claimed it and waits for the shares to go
    exclusive,  ///< a writer holds it
  };
  state_kind state = state_kind::free;
  std::uint32_t shares = 0;         ///< shares held, all participants together
  std::uint32_t share_holders = 0;  ///< participants holding at least one share
  std::uint32_t writer = 0;         ///< the writer's participant number, 0 if none
  std::uint32_t writer_pid = 0;     ///< as its slot records it; informational
  /// The writer, or a participant holding shares, is gone (its lock byte is free): the next
  /// acquirer reclaims what it held and is told errc::owner_died.
  bool owner_dead = false;
  std::uint32_t dead_holders = 0;   ///< participants holding something whose lock byte is free
  bool owner_died_pending = false;  ///< a reclaimed death the next acquirer will be told of
  std::uint32_t participants = 0;   ///< handles open now (participant lock bytes held)
  wait_queue_info readers;
  wait_queue_info writers;
};

/// A shared_array or buffer_read_write body: the element geometry and the lock.
struct locked_buffer_info {
  std::uint32_t element_size = 0;  ///< 1 for buffer_read_write
  std::uint32_t element_align = 0;
  std::uint64_t length = 0;  ///< elements (bytes for buffer_read_write)
  std::uint64_t data_size = 0;
  lock_info lock;
};

/// A broadcast body: geometry, subscribers and slots.
struct broadcast_info {
  bool lossy = false;
  std::uint32_t slot_count = 0;
  std::uint32_t message_size = 0;
  std::uint32_t max_subscribers = 0;  ///< entries in the subscriber table
  std::uint32_t lease_ms = 0;
  std::uint64_t write_sequence = 0;       ///< messages published so far (the tail)
  std::uint32_t subscribers = 0;          ///< active entries (a killed one counts until evicted)
  std::uint32_t live_subscribers = 0;     ///< active entries whose process holds its lock byte
  std::uint32_t evicted_subscribers = 0;  ///< entries evicted and not yet left
  /// Messages the slowest active subscriber has yet to read; empty with no active subscriber.
  std::optional<std::uint64_t> slowest_lag;
  std::uint32_t slowest_pid = 0;  ///< as its entry records it; informational
  std::uint32_t writer = 0;       ///< participant number holding the writers' lock, 0 if free
  bool writer_alive = false;      ///< that participant's lock byte is held
  std::uint32_t published = 0;    ///< slots holding a published message
  std::uint32_t writing = 0;      ///< slots being written
  std::uint32_t empty = 0;        ///< slots never written
  std::uint32_t invalid = 0;      ///< slots whose version or length is inconsistent
  wait_queue_info readers;
  wait_queue_info writers;
};

/// One connection of an RPC service: the rpc channel its client made to connect, found by its
/// name (the service's name, '#', the client's pid and a nonce).
struct rpc_client_info {
  std::string name;              ///< the channel's segment name
  std::uint32_t pid = 0;         ///< the client's, as the channel records it; informational
  bool alive = false;            ///< the client holds its end (the channel's owner lock)
  bool server_attached = false;  ///< the service's end holds the channel (its opener lock)
  std::error_code status;        ///< clear, or why the channel cannot be trusted
  std::string problem;           ///< what exactly is wrong, when status is set
};

/// One method of an RPC service, with the calls its connections have taken for it.
struct rpc_method_info {
  std::string name;         ///< "" for the unnamed method
  bool name_cut = false;    ///< the name is longer: `name` is its start
  std::uint64_t calls = 0;  ///< as recorded; informational
};

/// The methods of a service that its listener counts calls for: those its connections were
/// first given; the calls of any method past them are not counted.
inline constexpr std::size_t rpc_counted_methods = 64;

/// An RPC service (object_kind::rpc_listener, made by an rpc_acceptor or rpc_server): the sizes
/// of every connection's channel, its server, the connect requests waiting and its clients.
struct rpc_service_info {
  std::uint32_t node_count = 0;  ///< of each ring of a connection's channel
  std::uint32_t node_size = 0;   ///< of each ring of a connection's channel
  std::uint32_t max_message_size = 0;
  std::optional<std::uint64_t> default_timeout_ms;  ///< empty: calls have no default timeout
  std::uint32_t server_pid = 0;                     ///< as recorded; informational
  bool server_alive = false;  ///< an acceptor holds the service (its lock byte is held)
  std::uint64_t accepted =
      0;               ///< connections accepted so far (one being made counts); informational
  ring_info requests;  ///< the connect ring; its node_count is the backlog
  /// The rpc channels of this service in /dev/shm, sorted by name: connected clients, and the
  /// channels of clients still connecting or gone but not yet cleaned up.
  std::vector<rpc_client_info> clients;
  /// False when the service's name is so long that its connections' file names may be cut: a
  /// cut name cannot be told to be this service's, so such connections are missing.
  bool clients_complete = true;
  /// Its methods (up to rpc_counted_methods, in the order its connections were first given
  /// them), with the calls taken for each.
  std::vector<rpc_method_info> methods;

  std::uint32_t waiting() const noexcept { return requests.published; }  ///< connect requests
  std::uint32_t live_clients() const noexcept {
    std::uint32_t n = 0;
    for (const auto& c : clients)
      n += c.alive;
    return n;
  }
};

/// "free", "shared", "claimed" or "exclusive".
std::string lock_state_name(lock_info::state_kind state);

/// What one file in /dev/shm tells about itself.
struct segment_info {
  std::string file;            ///< the full path
  std::string name;            ///< the shmio name ("Global\" prefix for machine-wide names)
  bool name_cut = false;       ///< the name was too long for a file name: `name` is its start
  bool temporary = false;      ///< a ".shmio.tmp.*" file of a create that has not finished
  std::uint32_t temp_pid = 0;  ///< for a temporary file, the creating process
  std::uint64_t file_size = 0;
  bool live = false;  ///< some process holds the segment
  /// Nobody holds it, and (for a temporary file) it was last changed 10 s ago or more: removable.
  /// (Not its creator's pid: that creator may be in another pid namespace sharing /dev/shm.)
  bool stale = false;
  std::error_code status;  ///< clear, or why the contents cannot be trusted
  std::string problem;     ///< what exactly is wrong, when status is set
  // From the header (valid when status is clear or the header alone was readable):
  bool header_read = false;
  std::uint32_t version = 0;
  std::uint32_t kind = 0;  ///< an object_kind value; unknown kinds are shown as numbers
  std::uint64_t total_size = 0;
  std::uint32_t creator_pid = 0;
  bool creator_alive = false;
  std::uint64_t created_ns = 0;  ///< CLOCK_REALTIME
  // The body, for kinds this inspector knows:
  std::optional<event_info> event;
  std::optional<ring_info> ring;
  std::optional<rpc_info> rpc;
  std::optional<locked_buffer_info> locked;  ///< shared_array, buffer_read_write
  std::optional<broadcast_info> broadcast;
  std::optional<rpc_service_info> rpc_service;
};

/// The name of an object_kind ("circular_buffer"), or "kind N" for one this build does not know.
std::string kind_name(std::uint32_t kind);

/// Every segment file of this user (their own names, and machine-wide names they own), plus the
/// temporary files of unfinished creates, sorted by name. Files under those names that the
/// library refuses are listed too, with status errc::access_denied and nothing read from them. An
/// RPC service's clients are the channels of the same listing that are named for it.
std::vector<segment_info> list(std::error_code& ec);
/// The segment `name`, or errc::not_found.
segment_info examine(std::string_view name, std::error_code& ec);
/// The file at `path`, which must be a shmio file in /dev/shm (else errc::invalid_name). For an
/// RPC service this also looks through /dev/shm for its clients' channels.
segment_info examine_file(const std::string& path, std::error_code& ec);

/// Removes the segment `name` if no process holds it (true), with the same locking protocol as
/// a create that finds it stale. A live segment is left alone: false, errc::busy. A stale file
/// that cannot be unlinked stays: false, with the unlink's error (errc::access_denied for EPERM
/// or EACCES, else the system's).
bool remove_if_stale(std::string_view name, std::error_code& ec);
/// Removes the file `path` (a segment or temporary file) if it is stale; see remove_if_stale.
/// A temporary file counts as stale when nobody holds it and it was last changed 10 s ago or
/// more (creates also remove those, at most once a minute in a process: a creator killed before
/// it renamed its file leaves it behind).
bool remove_file_if_stale(const std::string& path, std::error_code& ec);
/// Removes the file `path` (a shmio file in /dev/shm, else errc::invalid_name) even if processes
/// hold it (they keep using what they have mapped), under the same lock as a last close takes:
/// a close racing it never removes a new segment made under the name meanwhile. errc::not_found
/// if no file was there.
bool remove_file(const std::string& path, std::error_code& ec);

}  // namespace shmio::inspect
