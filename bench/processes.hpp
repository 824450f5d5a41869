#pragma once
// What a benchmark with several partner processes must undo after them (the segments and
// temporary files they left), and the pipes between the parent and its children.

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <shmio/inspect.hpp>
#include <shmio/segment.hpp>
#include <string>
#include <system_error>
#include <vector>

#include "support.hpp"

namespace shmio_bench {

/// The most partner processes a benchmark forks (the table of their pids is this long).
constexpr int max_children = 1 + 16;

/// Removes what the processes of one benchmark made beyond the session's names, once they are
/// gone: the segments named "<service>#..." (a service's connections), and the temporary files
/// of creates that one of the children left (a child killed in the middle of a create). Made
/// before the session, so that it runs after the session has reaped every child.
class leftovers {
 public:
  leftovers() {
    void* m =
        ::mmap(nullptr, sizeof(table), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) throw_errno("mmap");
    pids_ = new (m) table{};
  }
  leftovers(const leftovers&) = delete;
  leftovers& operator=(const leftovers&) = delete;
  ~leftovers() {
    sweep();
    ::munmap(pids_, sizeof(table));
  }

  /// Sweeps the connections of `service` too.
  void watch(const std::string& service) { service_ = service; }
  /// In a child: notes its pid, for the sweep of temporary files.
  void note_child() noexcept {
    const unsigned i = pids_->count.fetch_add(1, std::memory_order_relaxed);
    if (i < std::size(pids_->pid))
      pids_->pid[i].store(static_cast<std::uint32_t>(::getpid()), std::memory_order_relaxed);
  }

 private:
  struct table {
    std::atomic<unsigned> count{0};
    std::array<std::atomic<std::uint32_t>, max_children> pid{};
  };

  bool ours(std::uint32_t pid) const noexcept {
    const auto n = std::min<std::size_t>(pids_->count.load(), pids_->pid.size());
    for (std::size_t i = 0; i < n; ++i)
      if (pids_->pid[i].load() == pid) return true;
    return false;
  }

  void sweep() noexcept {
    try {
      std::error_code ec;
      const auto files = shmio::inspect::list(ec);
      const std::string prefix = service_ + "#";
      for (const auto& f : files) {
        std::error_code ignored;
        if (f.temporary) {
          if (ours(f.temp_pid)) shmio::inspect::remove_file_if_stale(f.file, ignored);
        } else if (!service_.empty() && !f.name_cut && f.name.starts_with(prefix)) {
          shmio::segment::remove(f.name, ignored);
        }
      }
    } catch (...) {
    }
  }

  table* pids_ = nullptr;
  std::string service_;
};

/// The pipes between the parent and its children, all made before the first fork: every process
/// closes the ends it does not use, so that a process that goes reads as EOF at the other end.
class pipes {
 public:
  struct pair {
    int read = -1;
    int write = -1;
  };

  pipes() = default;
  pipes(const pipes&) = delete;
  pipes& operator=(const pipes&) = delete;
  ~pipes() { close_all(); }

  /// A new pipe; its ends stay with this object until taken or closed.
  pair make() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw_errno("pipe2");
    fds_.push_back(fds[0]);
    fds_.push_back(fds[1]);
    return {fds[0], fds[1]};
  }
  /// Closes every end but `keep` (in a child, or in the parent after the forks).
  void keep_only(const std::vector<int>& keep) noexcept {
    std::erase_if(fds_, [&](int fd) {
      if (std::find(keep.begin(), keep.end(), fd) != keep.end()) return false;
      ::close(fd);
      return true;
    });
  }
  /// Closes `fd`, one of ours.
  void close(int fd) noexcept {
    std::erase_if(fds_, [&](int f) {
      if (f != fd) return false;
      ::close(f);
      return true;
    });
  }
  void close_all() noexcept {
    for (int fd : fds_)
      ::close(fd);
    fds_.clear();
  }

 private:
  std::vector<int> fds_;
};

/// Blocks until one byte comes on `fd`; false at EOF.
inline bool read_byte(int fd) {
  char c = 0;
  for (;;) {
    const ssize_t n = ::read(fd, &c, 1);
    if (n == 1) return true;
    if (n == 0) return false;
    if (errno != EINTR) throw_errno("read");
  }
}

}  // namespace shmio_bench
