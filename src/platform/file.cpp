// Segment files: create/open, reserve, rename, map, and record locks.
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "shmio/detail/platform.hpp"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older C library headers lack the name
#endif

namespace shmio::detail::platform {
namespace {
std::error_code last_error() {
  return {errno, std::system_category()};
}

// A record lock's description of byte `byte` alone.
struct flock one_byte(short type, std::uint64_t byte) {
  struct flock fl {};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = static_cast<off_t>(byte);
  fl.l_len = 1;
  return fl;
}
}  // namespace

void unique_fd::reset(int fd) noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

unique_fd create_exclusive(const std::string& path, std::error_code& ec) {
  unique_fd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (fd.get() < 0) {
    ec = last_error();
    return fd;
  }
  // The mode is 0600 whatever the umask: one that took the owner's write bit (0277) would leave
  // a file that only this descriptor can write, and every other open of it fails.
  if (::fchmod(fd.get(), 0600) != 0) {
    ec = last_error();
    ::unlink(path.c_str());  // ours, just made: no other process has it yet
    fd.reset();
  }
  return fd;
}

unique_fd open_existing(const std::string& path, std::error_code& ec) {
  // O_NONBLOCK: should the path be a FIFO planted by someone, open must not block on it.
  int fd = ::open(path.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) ec = last_error();
  return unique_fd(fd);
}

unique_fd open_read_only(const std::string& path, std::error_code& ec) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) ec = last_error();
  return unique_fd(fd);
}

std::vector<std::string> list_directory(const std::string& directory, std::error_code& ec) {
  std::vector<std::string> names;
  DIR* dir = ::opendir(directory.c_str());
  if (!dir) {
    ec = last_error();
    return names;
  }
  for (;;) {
    errno = 0;
    const dirent* entry = ::readdir(dir);
    if (!entry) {
      if (errno != 0) ec = last_error();
      break;
    }
    std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(std::move(name));
  }
  ::closedir(dir);
  return names;
}

namespace {

file_status status_of(const struct stat& st) {
  file_status out;
  out.size = static_cast<std::uint64_t>(st.st_size);
  out.inode = static_cast<std::uint64_t>(st.st_ino);
  out.owner_uid = static_cast<std::uint32_t>(st.st_uid);
  out.mode = static_cast<std::uint32_t>(st.st_mode & 07777);
  out.links = static_cast<std::uint32_t>(st.st_nlink);
  out.regular = S_ISREG(st.st_mode);
  out.modified_ns = static_cast<std::uint64_t>(st.st_mtim.tv_sec) * 1'000'000'000u +
                    static_cast<std::uint64_t>(st.st_mtim.tv_nsec);
  return out;
}

}  // namespace

file_status status(int fd, std::error_code& ec) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ec = last_error();
    return {};
  }
  return status_of(st);
}

file_status link_status(const std::string& path, std::error_code& ec) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    ec = last_error();
    return {};
  }
  return status_of(st);
}

void reserve(int fd, std::uint64_t size, std::error_code& ec) {
  // posix_fallocate returns the error instead of setting errno.
  int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(size));
  if (rc == EINTR) {
    // Older kernels' tmpfs gives up on any signal and takes back what it had allocated (newer
    // ones stop only for a fatal one), so a large file in a process that takes signals often
    // (a profiler's, a timer's, SIGCHLD) could fail every retry. Once interrupted, the retry
    // runs with every signal that can be blocked held until it is done; they come after it.
    sigset_t all;
    sigset_t before;
    ::sigfillset(&all);
    const bool masked = ::pthread_sigmask(SIG_BLOCK, &all, &before) == 0;
    do
      rc = ::posix_fallocate(fd, 0, static_cast<off_t>(size));
    while (rc == EINTR && masked);
    if (masked) ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
  }
  if (rc != 0) ec = {rc, std::system_category()};
}

void rename_no_replace(const std::string& from, const std::string& to, std::error_code& ec) {
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) != 0)
    ec = last_error();
}

void unlink(const std::string& path, std::error_code& ec) {
  if (::unlink(path.c_str()) != 0) ec = last_error();
}

void* map_shared(int fd, std::size_t size, std::error_code& ec, bool guarded) {
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    ec = last_error();
    return nullptr;
  }
  if (guarded) guard_mapping(p, size);
  return p;
}

const void* map_read_only(int fd, std::size_t size, std::error_code& ec, bool guarded) {
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    ec = last_error();
    return nullptr;
  }
  if (guarded) guard_mapping(p, size);
  return p;
}

void unmap(void* address, std::size_t size) noexcept {
  if (!address) return;
  unguard_mapping(address);  // first: the range may be reused once it is unmapped
  ::munmap(address, size);
}

void page_populator::add(const void* address, std::size_t size) noexcept {
  if (size == 0) return;
  static const std::uintptr_t page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto first = reinterpret_cast<std::uintptr_t>(address);
  const std::uintptr_t begin = first & ~(page - 1);
  const std::uintptr_t end = (first + size + page - 1) & ~(page - 1);
  // Overlapping or adjacent pages join the run; anything else starts a new one.
  if (begin_ != end_ && begin <= end_ && end >= begin_) {
    begin_ = std::min(begin_, begin);
    end_ = std::max(end_, end);
    return;
  }
  flush();
  begin_ = begin;
  end_ = end;
}

void page_populator::flush() noexcept {
  if (begin_ == end_) return;
  // The result is not looked at: see the class's comment.
  static_cast<void>(::madvise(reinterpret_cast<void*>(begin_), end_ - begin_, MADV_POPULATE_WRITE));
  begin_ = end_ = 0;
}

bool try_lock_byte(int fd, std::uint64_t byte, lock_kind kind, std::error_code& ec) {
  struct flock fl = one_byte(kind == lock_kind::shared      ? F_RDLCK
                             : kind == lock_kind::exclusive ? F_WRLCK
                                                            : F_UNLCK,
                             byte);
  fl.l_pid = 0;  // required for OFD locks
  for (;;) {
    if (::fcntl(fd, F_OFD_SETLK, &fl) == 0) return true;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EACCES) return false;
    ec = last_error();
    return false;
  }
}

bool byte_locked_by_other(int fd, std::uint64_t byte, std::error_code& ec) {
  struct flock fl = one_byte(F_WRLCK, byte);
  if (::fcntl(fd, F_OFD_GETLK, &fl) != 0) {
    ec = last_error();
    return true;  // unknown: assume alive, never reclaim on a guess
  }
  return fl.l_type != F_UNLCK;
}

bool lock_byte_for_process(int fd, std::uint64_t byte) noexcept {
  struct flock fl = one_byte(F_WRLCK, byte);
  return ::fcntl(fd, F_SETLK, &fl) == 0;
}

void unlock_byte_for_process(int fd, std::uint64_t byte) noexcept {
  struct flock fl = one_byte(F_UNLCK, byte);
  static_cast<void>(::fcntl(fd, F_SETLK, &fl));
}

byte_holder process_holding_byte(int fd, std::uint64_t byte) noexcept {
  struct flock fl = one_byte(F_WRLCK, byte);
  // An error says nothing of a holder: as if held by someone we cannot name (the caller then
  // looks at the end's lock byte instead).
  if (::fcntl(fd, F_GETLK, &fl) != 0) return {true, 0};
  if (fl.l_type == F_UNLCK) return {false, 0};
  return {true, fl.l_pid > 0 ? static_cast<std::uint32_t>(fl.l_pid) : 0};
}

}  // namespace shmio::detail::platform
