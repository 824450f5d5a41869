#pragma once
// shmio::segment — a named block of shared memory with a header (the C# SharedMemory library's
// SharedBuffer).
//
// A segment is a file in /dev/shm (see detail/names.hpp for how names map to files), mapped
// into every process that opens it. Its 64-byte header records the kind of object it holds and
// its size, so an opener needs to know only the name. Every other named object in shmio is a
// segment with a kind-specific body; use object_kind::raw for memory of your own design.
//
// Lifetime: each process that has the segment open holds a shared lock on its file. When the
// last one closes it, the file is removed. A process killed while holding it leaves the file
// behind, "stale": the next create of the name removes it and succeeds, the next open removes
// it and fails with errc::not_found. A stale file that cannot be unlinked stays, and creates and
// opens fail with the unlink's error: errc::access_denied for EPERM or EACCES (a security module
// refused it, or /dev/shm was made immutable), else the system's (EBUSY for a mount point). Openers
// never see a half-initialised segment: a creator builds it under a private name and renames it
// into place. A child forked without exec shares its parent's open file and locks: closing an
// inherited handle there only unmaps it.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>

#include "shmio/error.hpp"
#include "shmio/open_mode.hpp"

namespace shmio {

/// What a segment holds; recorded in its header and checked by every opener.
enum class object_kind : std::uint32_t {
  raw = 1,
  event = 2,
  circular_buffer = 3,
  rpc = 4,
  shared_array = 5,
  buffer_read_write = 6,
  broadcast = 7,
  rpc_listener = 8,  ///< an rpc_acceptor's service name
};

/// A view of a mapped named segment. Movable, not copyable; closing (or destroying) the last
/// handle in the last process removes the segment.
class segment {
 public:
  /// Fills a new segment's body before any other process can see it.
  using initializer = std::function<void(std::span<std::byte> body)>;

  segment() noexcept = default;
  /// Creates `name` with a zero-filled body of `body_size` bytes. Throws shmio::error.
  segment(create_only_t, std::string_view name, object_kind kind, std::size_t body_size,
          const initializer& init = {});
  /// Opens `name`, which must hold an object of `kind`. Throws shmio::error.
  segment(open_only_t, std::string_view name, object_kind kind);
  /// Opens `name` or, if there is none, creates it as create_only would. Throws shmio::error.
  segment(open_or_create_t, std::string_view name, object_kind kind, std::size_t body_size,
          const initializer& init = {});

  /// The error_code forms of the constructors: on failure `ec` is set and the result is empty.
  static segment create(std::string_view name, object_kind kind, std::size_t body_size,
                        const initializer& init, std::error_code& ec);
  static segment open(std::string_view name, object_kind kind, std::error_code& ec);
  static segment open_or_create(std::string_view name, object_kind kind, std::size_t body_size,
                                const initializer& init, std::error_code& ec);

  segment(segment&& other) noexcept;
  segment& operator=(segment&& other) noexcept;
  segment(const segment&) = delete;
  segment& operator=(const segment&) = delete;
  ~segment();

  /// Unmaps the segment and, if this was its last user on the machine, removes its file.
  void close() noexcept;
  /// Gives up this handle's use of the name now, keeping the mapping: if it was the segment's
  /// last user on the machine, the file is removed now (an object that finishes with its
  /// mapping later, on its executor, still leaves nothing behind at once). close() then only
  /// unmaps.
  void release_name() noexcept;

  bool is_open() const noexcept { return base_ != nullptr; }
  /// The object's bytes, after the header. Their contents are shared and untrusted.
  std::span<std::byte> body() const noexcept;
  const std::string& name() const noexcept { return name_; }
  /// The file behind the segment, e.g. "/dev/shm/shmio.u1000.jobs".
  const std::string& path() const noexcept { return path_; }
  object_kind kind() const noexcept { return kind_; }
  /// True if this handle created the segment (rather than opening an existing one).
  bool created() const noexcept { return created_; }
  /// The file descriptor of the segment file (-1 when closed). Objects built on a segment use
  /// it for per-participant liveness locks; it stays owned by the segment.
  int native_handle() const noexcept { return fd_; }
  /// True if another process truncated the file under this handle and the truncation guard
  /// kept this process alive: the pages it took now read as zeros, and what is written there
  /// reaches nobody; the object on the segment fails with errc::corrupted. Only RPC segments
  /// (object_kind::rpc and rpc_listener) are guarded, in a process with an RPC end (it installs
  /// the guard); a truncation of any other segment faults with SIGBUS (docs/protocol.md).
  bool faulted() const noexcept;

  /// Removes the file of `name` whether or not it is in use; processes that have it mapped keep
  /// their mapping. Returns false (and leaves `ec` clear) if there was no such file. Takes the
  /// file's admin lock, as opens and closes do (errc::timed_out if a process stopped in one of
  /// them holds it for 2 s).
  static bool remove(std::string_view name, std::error_code& ec);

 private:
  std::string name_;
  std::string path_;
  int fd_ = -1;
  std::byte* base_ = nullptr;
  std::size_t size_ = 0;
  object_kind kind_ = object_kind::raw;
  bool created_ = false;
  bool name_released_ = false;   // release_name() ran
  bool name_undecided_ = false;  // ... but could not take the admin lock: close() looks again
  std::uint32_t opened_by_ = 0;  // process id: a forked child must not touch our locks
  // How long close() waits for the admin lock (detail::set_close_patience).
  std::uint32_t admin_patience_ms_ = 2000;

  friend struct segment_access;
};

}  // namespace shmio
