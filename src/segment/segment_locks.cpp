#include "shmio/detail/segment_locks.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <vector>

#include "shmio/detail/layout.hpp"
#include "shmio/detail/names.hpp"
#include "shmio/detail/platform.hpp"
#include "shmio/error.hpp"

namespace shmio::detail {

using namespace std::chrono_literals;

std::error_code file_error(const std::error_code& ec) {
  if (ec == std::errc::no_such_file_or_directory) return errc::not_found;
  if (ec == std::errc::no_space_on_device || ec == std::errc::file_too_large) return errc::no_space;
  // ELOOP: the final component is a symlink; EACCES/EPERM: not ours to use.
  // EISDIR/ENXIO/ENODEV: a directory, socket or device sits at the path.
  if (ec == std::errc::too_many_symbolic_link_levels || ec == std::errc::permission_denied ||
      ec == std::errc::operation_not_permitted || ec == std::errc::is_a_directory ||
      ec == std::errc::no_such_device_or_address || ec == std::errc::no_such_device)
    return errc::access_denied;
  return ec;
}

namespace {
// Nanoseconds lock_admin slept on this thread, in all (admin_lock_slept).
thread_local std::int64_t slept_ns = 0;
}  // namespace

std::int64_t admin_lock_slept() noexcept {
  return slept_ns;
}

bool lock_admin(int fd, std::error_code& ec, std::chrono::milliseconds patience) {
  const auto deadline = std::chrono::steady_clock::now() + patience;
  auto backoff = std::chrono::microseconds(20);
  for (;;) {
    if (platform::try_lock_byte(fd, layout::admin_lock_byte, platform::lock_kind::exclusive, ec))
      return true;
    if (ec) return false;
    if (std::chrono::steady_clock::now() >= deadline) {
      ec = errc::timed_out;
      return false;
    }
    const auto before = std::chrono::steady_clock::now();
    platform::sleep_for(backoff);
    slept_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(
                    std::chrono::steady_clock::now() - before)
                    .count();
    backoff = std::min<std::chrono::microseconds>(backoff * 2, 5ms);
  }
}

void unlock_admin(int fd) noexcept {
  std::error_code ignored;
  platform::try_lock_byte(fd, layout::admin_lock_byte, platform::lock_kind::unlock, ignored);
}

bool remove_path(const std::string& path, std::error_code& ec) {
  ec.clear();
  std::error_code open_ec;
  platform::unique_fd fd = platform::open_existing(path, open_ec);
  if (open_ec == std::errc::no_such_file_or_directory) return false;
  bool locked = false;
  if (!open_ec) {  // otherwise not a segment file we can lock (a symlink, say): just the name
    if (!lock_admin(fd.get(), ec)) return false;
    locked = true;
    const auto st = platform::status(fd.get(), ec);
    if (!ec && st.links == 0) {  // unlinked meanwhile, by its last closer or a stale check
      unlock_admin(fd.get());
      return false;
    }
    ec.clear();
  }
  platform::unlink(path, ec);
  if (locked) unlock_admin(fd.get());
  if (ec == std::errc::no_such_file_or_directory) {
    ec.clear();
    return false;
  }
  if (ec) ec = file_error(ec);
  return !ec;
}

void unlink_held(int fd, const std::string& path) noexcept {
  std::error_code ec;
  if (!lock_admin(fd, ec)) return;
  // A segment file is only ever linked at its own path (renamed there, never moved): while it
  // has a link, under the admin lock, that link is `path`.
  const auto st = platform::status(fd, ec);
  if (!ec && st.links > 0) platform::unlink(path, ec);
  unlock_admin(fd);
}

stale_test remove_if_unheld(int fd, const std::string& path, std::error_code& ec) {
  const auto st = platform::status(fd, ec);
  if (ec) return stale_test::held;
  if (st.links == 0) return stale_test::gone;
  // An exclusive holder lock succeeds only if no process holds the segment: it is stale.
  if (!platform::try_lock_byte(fd, layout::holder_lock_byte, platform::lock_kind::exclusive, ec))
    return stale_test::held;
  // Still ours: names are only made by rename-no-replace, and removed under the admin lock.
  platform::unlink(path, ec);
  if (!ec) return stale_test::removed;
  // Removed by something that does not take the admin lock (rm): as good as gone.
  if (ec == std::errc::no_such_file_or_directory) {
    ec.clear();
    return stale_test::gone;
  }
  // Not removable (a mount point, or a security module's refusal): the stale file stays, and the
  // caller says why rather than take it for removed and look for it again. The holder lock goes
  // back to what a look leaves; the admin lock is the caller's.
  if (ec == std::errc::operation_not_permitted || ec == std::errc::permission_denied)
    ec = errc::access_denied;  // as any other refusal to use the file is reported
  std::error_code ignored;
  platform::try_lock_byte(fd, layout::holder_lock_byte, platform::lock_kind::unlock, ignored);
  return stale_test::held;
}

bool old_enough_to_be_abandoned(std::uint64_t modified_ns) noexcept {
  const std::uint64_t now = platform::realtime_ns();
  return now > modified_ns &&
         std::chrono::nanoseconds(now - modified_ns) >= temporary_abandoned_after;
}

stale_test remove_if_abandoned_temporary(int fd, const std::string& path, std::error_code& ec) {
  const auto st = platform::status(fd, ec);
  if (ec || !old_enough_to_be_abandoned(st.modified_ns)) return stale_test::held;
  return remove_if_unheld(fd, path, ec);
}

namespace {

// Removes the files of shm_directory whose names begin with `file_prefix` and that `test` (with
// the admin lock held) finds stale, looking at `part.max_files` of them at most, in the order of
// their names, from the first after `part.after` on; `part.after` becomes the last one looked at
// (empty: this sweep reached the end). Best effort: a sweep never waits (it runs inside a create,
// or on an acceptor's thread), so a file that cannot be looked at, or whose admin lock is busy,
// is left for the next sweep.
void sweep_files(std::string_view file_prefix,
                 stale_test (*test)(int, const std::string&, std::error_code&), sweep_part& part) {
  std::error_code ec;
  const std::string dir(shm_directory);
  std::vector<std::string> files = platform::list_directory(dir, ec);
  std::erase_if(files, [&](const std::string& f) {
    return !f.starts_with(file_prefix) || (!part.after.empty() && f <= part.after);
  });
  // By name, so that a sweep cut short goes on where it stopped, whatever was removed since.
  std::sort(files.begin(), files.end());
  if (files.size() > part.max_files) {
    files.resize(part.max_files);
    part.after = files.back();
  } else {
    part.after.clear();
  }
  for (const std::string& file : files) {
    const std::string path = dir + file;
    std::error_code file_ec;
    platform::unique_fd fd = platform::open_existing(path, file_ec);
    if (file_ec) continue;
    const auto st = platform::status(fd.get(), file_ec);
    if (file_ec || !st.regular || st.owner_uid != platform::user_id()) continue;
    if (!platform::try_lock_byte(fd.get(), layout::admin_lock_byte, platform::lock_kind::exclusive,
                                 file_ec))
      continue;
    // Removed: the fd's close lets go of the admin and the exclusive holder lock together,
    // as nothing else ever holds the latter without the former.
    if (test(fd.get(), path, file_ec) != stale_test::removed) unlock_admin(fd.get());
  }
}

}  // namespace

bool turn_due(std::atomic<std::int64_t>& next_ns, std::chrono::nanoseconds period) noexcept {
  const std::int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                               std::chrono::steady_clock::now().time_since_epoch())
                               .count();
  // relaxed: a schedule; the CAS only keeps two threads from taking the same turn.
  std::int64_t due = next_ns.load(std::memory_order_relaxed);
  if (now < due) return false;
  return next_ns.compare_exchange_strong(due, now + period.count(), std::memory_order_relaxed);
}

void sweep_stale_segments(std::string_view name_prefix, sweep_part& part) noexcept {
  try {
    std::error_code ec;
    const std::string prefix = segment_file_name(name_prefix, ec);
    // Cut, if one more character does not extend it.
    std::string longer(name_prefix);
    longer += 'x';
    if (ec || !segment_file_name(longer, ec).starts_with(prefix) || ec) return;
    sweep_files(prefix, &remove_if_unheld, part);
  } catch (...) {  // std::bad_alloc from the listing or a name: the sweep is best effort
    part.after.clear();
  }
}

void sweep_stale_segments(std::string_view name_prefix) noexcept {
  sweep_part all;
  sweep_stale_segments(name_prefix, all);
}

void sweep_abandoned_temporaries() noexcept {
  try {
    sweep_part all;
    sweep_files(temporary_file_prefix, &remove_if_abandoned_temporary, all);
  } catch (...) {  // std::bad_alloc from the listing: the sweep is best effort
  }
}

}  // namespace shmio::detail
