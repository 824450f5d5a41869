#pragma once
// The record locks that decide a segment's lifetime (docs/architecture.md, "Segment lifetime
// without a daemon"), shared by segment.cpp and the inspector: every process that has the
// segment open holds a shared lock on byte 0 of its file; create, open, close and stale removal
// take the admin lock on byte 1 around their test-and-act.

#include <string>
#include <system_error>

namespace shmio::detail {

/// Takes the segment file's admin lock. It is held for microseconds by well-behaved processes;
/// a holder stopped by a signal must not hang us: after 2 s, errc::timed_out.
bool lock_admin(int fd, std::error_code& ec);
void unlock_admin(int fd) noexcept;

enum class stale_test {
  removed,  // nobody held the segment: its file is unlinked (fd holds the exclusive lock)
  held,     // some process holds it (or `ec` says why we could not tell)
  gone,     // the file was unlinked meanwhile
};
/// With the admin lock held: unlinks the file at `path` (open as `fd`) if no process holds the
/// segment. Under the admin lock no process can open it between the test and the unlink.
stale_test remove_if_unheld(int fd, const std::string& path, std::error_code& ec);

}  // namespace shmio::detail
