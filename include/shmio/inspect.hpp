#pragma once
// shmio::inspect — read-only views of the segments in /dev/shm, for tools and monitoring.
//
// Nothing here opens a segment the way an I/O object does: files are opened read-only, mapped
// read-only and never locked, so inspecting cannot keep a segment alive or change its state.
// Every value read is validated; a file that fails is reported with status errc::corrupted (or
// errc::incompatible for another layout version), never trusted. What is read is a snapshot of
// memory that other processes keep changing: counts may be a moment old.
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
  std::uint32_t parked_blocking = 0;  ///< threads asleep on the futex
  std::uint32_t registered = 0;       ///< slots owned by an open handle, parked or not
  std::vector<std::uint32_t> pids;    ///< the owners of registered slots
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

/// What one file in /dev/shm tells about itself.
struct segment_info {
  std::string file;            ///< the full path
  std::string name;            ///< the shmio name ("Global\" prefix for machine-wide names)
  bool name_cut = false;       ///< the name was too long for a file name: `name` is its start
  bool temporary = false;      ///< a ".shmio.tmp.*" file of a create that has not finished
  std::uint32_t temp_pid = 0;  ///< for a temporary file, the creating process
  std::uint64_t file_size = 0;
  bool live = false;  ///< some process holds the segment
  /// Nobody holds it, and (for a temporary file) its creator is gone: removable.
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
};

/// The name of an object_kind ("circular_buffer"), or "kind N" for one this build does not know.
std::string kind_name(std::uint32_t kind);

/// Every segment file of this user (their own names, and machine-wide names they own), plus the
/// temporary files of unfinished creates, sorted by name.
std::vector<segment_info> list(std::error_code& ec);
/// The segment `name`, or errc::not_found.
segment_info examine(std::string_view name, std::error_code& ec);
/// The file at `path`, which must be a shmio file in /dev/shm (else errc::invalid_name).
segment_info examine_file(const std::string& path, std::error_code& ec);

/// Removes the segment `name` if no process holds it (true), with the same locking protocol as
/// a create that finds it stale. A live segment is left alone: false, errc::busy.
bool remove_if_stale(std::string_view name, std::error_code& ec);
/// Removes the file `path` (a segment or temporary file) if it is stale; see remove_if_stale.
/// A temporary file counts as stale when its creating process is gone.
bool remove_file_if_stale(const std::string& path, std::error_code& ec);

}  // namespace shmio::inspect
