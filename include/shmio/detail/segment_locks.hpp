#pragma once
// The record locks that decide a segment's lifetime (docs/architecture.md, "Segment lifetime
// without a daemon"), shared by segment.cpp and the inspector: every process that has the
// segment open holds a shared lock on byte 0 of its file; create, open, close and stale removal
// take the admin lock on byte 1 around their test-and-act.

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>

namespace shmio::detail {

/// Takes the segment file's admin lock. It is held for microseconds by well-behaved processes;
/// a holder stopped by a signal must not hang us: after 2 s, errc::timed_out.
bool lock_admin(int fd, std::error_code& ec);
void unlock_admin(int fd) noexcept;

enum class stale_test {
  removed,  // nobody held the segment: its file is unlinked (fd holds the exclusive lock)
  held,     // some process holds it (or `ec` says why we could not tell)
  gone,     // the file was unlinked meanwhile (if by someone who skipped the admin lock, fd
            // holds the exclusive lock)
};
/// With the admin lock held: unlinks the file at `path` (open as `fd`) if no process holds the
/// segment. Under the admin lock no process can open it between the test and the unlink. An
/// unlink that fails leaves the file: `held`, with `ec` the unlink's error (errc::access_denied
/// for EPERM or EACCES; the exclusive lock taken for the test let go again).
stale_test remove_if_unheld(int fd, const std::string& path, std::error_code& ec);

/// A segment is built under a temporary name in shm_directory and renamed into place
/// (segment.cpp); a creator killed before the rename leaves the file, which no name leads to.
/// Such a file is abandoned when no process holds it and it was last changed at least
/// `temporary_abandoned_after` ago: a creator locks its file right after making it, and the age
/// covers that moment (its pid is no guide: it may be reused, or be another pid namespace's).
inline constexpr std::string_view temporary_file_prefix = ".shmio.tmp.";
inline constexpr std::chrono::seconds temporary_abandoned_after{10};
/// A temporary file last changed `modified_ns` (realtime) is old enough to count as abandoned.
bool old_enough_to_be_abandoned(std::uint64_t modified_ns) noexcept;
/// With the admin lock held: unlinks the temporary file at `path` (open as `fd`) if abandoned.
/// `held` also when it is too young to tell.
stale_test remove_if_abandoned_temporary(int fd, const std::string& path, std::error_code& ec);
/// Removes this user's abandoned temporary files. Best effort: a file that cannot be looked at
/// (or whose admin lock is busy) is left for the next sweep.
void sweep_abandoned_temporaries() noexcept;

}  // namespace shmio::detail
