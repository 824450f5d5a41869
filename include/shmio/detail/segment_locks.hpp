#pragma once
// The record locks that decide a segment's lifetime (docs/architecture.md, "Segment lifetime
// without a daemon"), shared by segment.cpp and the inspector: every process that has the
// segment open holds a shared lock on byte 0 of its file; create, open, close and stale removal
// take the admin lock on byte 1 around their test-and-act.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>

#include "shmio/segment.hpp"

namespace shmio::detail {

/// segment::open, waiting at most `admin_patience` for the file's admin lock (a process closing
/// or creating it holds it for microseconds; one stopped there, or a hostile one, for ever).
segment open_segment(std::string_view name, object_kind kind,
                     std::chrono::milliseconds admin_patience, std::error_code& ec);

/// A system error of a segment file's open, lock or unlink as shmio reports it (not_found,
/// no_space, access_denied); others pass through.
std::error_code file_error(const std::error_code& ec);

/// How long lock_admin waits by default.
inline constexpr std::chrono::milliseconds admin_patience{2000};
/// How long an acceptor waits for the admin lock of a channel it was asked to open.
inline constexpr std::chrono::milliseconds acceptor_admin_patience{10};
/// How long the acceptor's end of a connection waits for the admin lock as it closes, on the
/// service's thread too. Longer than the open's: a close that gives up leaves the file behind
/// if it was the last (a client closing at the same moment found it still there), until the
/// acceptor's next sweep of stale channels. Still short: a process that holds the lock holds
/// the service up this long per close.
inline constexpr std::chrono::milliseconds acceptor_close_patience{100};
/// True if `s`'s file is now shorter than what `s` mapped: another process truncated it, and
/// touching the pages it took will fault (a system call: for a periodic look, not per access).
bool file_shrunk(const segment& s) noexcept;
/// Sets how long `s`'s close waits for the admin lock (admin_patience unless set).
void set_close_patience(segment& s, std::chrono::milliseconds patience) noexcept;
/// Takes the segment file's admin lock. It is held for microseconds by well-behaved processes;
/// a holder stopped by a signal must not hang us: after `patience`, errc::timed_out.
bool lock_admin(int fd, std::error_code& ec, std::chrono::milliseconds patience = admin_patience);
/// Nanoseconds lock_admin has slept on this thread so far, waiting for held locks: a caller
/// that pays for its waits (the acceptor's budget) reads it before and after.
std::int64_t admin_lock_slept() noexcept;
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

/// Unlinks the segment file at `path` whether or not processes hold it, under its admin lock,
/// as every close and stale removal that unlinks it takes it: a closer that found the file
/// unused, and unlinks it a moment later, must not find the name made free by us and taken by
/// a new segment in between, and unlink that one. False, with `ec` clear, if no file was there.
bool remove_path(const std::string& path, std::error_code& ec);

/// Unlinks the segment file open as `fd` from `path`, where it is named, even though processes
/// (this one too) hold it: its name is free at once, while the holders keep what they mapped.
/// Under the admin lock; nothing if the file was unlinked already (its path may name another
/// segment by now). Best effort.
void unlink_held(int fd, const std::string& path) noexcept;

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
/// True, once per `period` across the threads that share `next_ns` (steady clock, ns; 0 at
/// first: the first call takes a turn): for work done now and then, such as the sweeps below.
bool turn_due(std::atomic<std::int64_t>& next_ns, std::chrono::nanoseconds period) noexcept;

/// Removes the stale segment files whose names begin with `name_prefix` (nothing if the prefix's
/// file name would be cut: a cut name cannot be matched). Best effort, and never waits: a file
/// that cannot be looked at, or whose admin lock is busy, is left for the next sweep.
void sweep_stale_segments(std::string_view name_prefix) noexcept;
/// Which of the matching files a sweep looks at: at most `max_files`, in the order of their
/// names, from the first after `after` (empty: from the first). The sweep sets `after` to the
/// last it looked at, or empties it once it reached the end.
struct sweep_part {
  std::string after;
  std::size_t max_files = static_cast<std::size_t>(-1);
};
/// sweep_stale_segments over a part of the files, for a caller that must not stay long (an
/// acceptor, on its service's thread).
void sweep_stale_segments(std::string_view name_prefix, sweep_part& part) noexcept;
/// Removes this user's abandoned temporary files. Best effort: a file that cannot be looked at
/// (or whose admin lock is busy) is left for the next sweep.
void sweep_abandoned_temporaries() noexcept;

}  // namespace shmio::detail
