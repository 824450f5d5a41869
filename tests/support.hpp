#pragma once
// Test helpers: unique segment names that are removed even when a test fails, child processes
// (fork, or fork+exec of the peer program) with bounded waits, and a pipe to synchronise with
// them without sleeping.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <asio/error.hpp>
#include <asio/io_context.hpp>
#include <thread>

#include "shmio/detail/layout.hpp"
#include "shmio/detail/names.hpp"
#include "shmio/segment.hpp"

namespace shmio::test {

/// Every test segment name starts with this; the ctest cleanup step removes leftovers.
inline constexpr const char* name_prefix = "shmio-test.";

/// A name no other test (or earlier run) uses; removed when the guard goes out of scope.
class scoped_name {
 public:
  explicit scoped_name(const std::string& what = "seg") {
    static std::atomic<unsigned> counter{0};
    name_ = std::string(name_prefix) + what + "." + std::to_string(::getpid()) + "." +
            std::to_string(counter++);
  }
  ~scoped_name() {
    std::error_code ignored;
    segment::remove(name_, ignored);
  }
  scoped_name(const scoped_name&) = delete;
  scoped_name& operator=(const scoped_name&) = delete;
  const std::string& str() const noexcept { return name_; }
  operator std::string_view() const noexcept { return name_; }

 private:
  std::string name_;
};

/// Wait slots of `q` that have an owner (an object's doorbell or a blocking sleeper).
inline unsigned held_slots(const detail::layout::wait_queue& q) {
  unsigned n = 0;
  for (const auto& s : q.slots)
    n += s.doorbell.load() != 0;
  return n;
}

/// A segment's whole file mapped read-write without going through shmio: lets a test look at
/// (and damage) the shared layout the way another process, or a bug, could.
class raw_segment {
 public:
  explicit raw_segment(std::string_view name) {
    std::error_code ec;
    const std::string path = detail::segment_path(name, ec);
    if (ec) throw std::system_error(ec, "segment_path");
    fd_ = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    struct stat st {};
    if (fd_ < 0 || ::fstat(fd_, &st) != 0) throw std::runtime_error("cannot open " + path);
    size_ = static_cast<std::size_t>(st.st_size);
    void* p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (p == MAP_FAILED) throw std::runtime_error("cannot map " + path);
    base_ = static_cast<std::byte*>(p);
  }
  ~raw_segment() {
    ::munmap(base_, size_);
    ::close(fd_);
  }
  raw_segment(const raw_segment&) = delete;
  raw_segment& operator=(const raw_segment&) = delete;

  std::size_t size() const noexcept { return size_; }
  /// The object of type T at byte `offset` of the file (the segment header is at 0).
  template <class T>
  T& at(std::size_t offset) const {
    return *reinterpret_cast<T*>(base_ + offset);
  }

 private:
  int fd_ = -1;
  std::byte* base_ = nullptr;
  std::size_t size_ = 0;
};

/// Writes `text` to the file at `path` (a /proc file of this process, such as a user
/// namespace's uid_map).
inline bool write_proc(const char* path, const std::string& text) {
  const int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok;
}

/// One byte at a time from child to parent (or back): "I am ready", "go on".
class signal_pipe {
 public:
  signal_pipe() {
    if (::pipe(fds_) != 0) std::abort();
  }
  ~signal_pipe() {
    ::close(fds_[0]);
    ::close(fds_[1]);
  }
  void notify(char c = 1) const {
    if (::write(fds_[1], &c, 1) != 1) std::abort();
  }
  /// The end notify() writes to, for a child process started by fork + exec (it inherits it).
  int write_fd() const noexcept { return fds_[1]; }
  /// Waits up to `timeout` for a byte; returns it, or -1 on timeout or EOF.
  int wait(std::chrono::milliseconds timeout = std::chrono::seconds(10)) const {
    pollfd p{fds_[0], POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return -1;
    char c;
    return ::read(fds_[0], &c, 1) == 1 ? static_cast<unsigned char>(c) : -1;
  }

 private:
  int fds_[2];
};

/// A forked child process. It is killed (SIGKILL) and reaped if still running at destruction,
/// so a failing test never leaves it behind.
class child {
 public:
  /// Runs `body` in a forked child; its return value is the exit status (an exception: 99).
  explicit child(const std::function<int()>& body) {
    std::fflush(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {
      int rc = 99;
      try {
        rc = body();
      } catch (...) {
      }
      ::_exit(rc);
    }
    if (pid_ > 0) pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
  }
  /// Runs `argv` (argv[0] is a path) in a child process by fork + exec.
  explicit child(const std::vector<std::string>& argv) {
    std::vector<char*> args;
    for (const auto& a : argv)
      args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    std::fflush(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::execv(args[0], args.data());
      ::_exit(98);
    }
    if (pid_ > 0) pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
  }
  ~child() {
    if (pid_ > 0 && status_ < 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (pidfd_ >= 0) ::close(pidfd_);
  }
  child(const child&) = delete;
  child& operator=(const child&) = delete;

  pid_t pid() const noexcept { return pid_; }
  /// Waits up to `timeout` for the child to exit; returns its exit code, 128+signal if killed
  /// by a signal, or -1 if it is still running.
  int wait(std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    if (status_ >= 0) return status_;
    pollfd p{pidfd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return -1;
    int st = 0;
    if (::waitpid(pid_, &st, 0) != pid_) return -1;
    status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return status_;
  }
  /// kill -9, then reap.
  int kill9() {
    ::kill(pid_, SIGKILL);
    return wait();
  }

 private:
  pid_t pid_ = -1;
  int pidfd_ = -1;
  int status_ = -1;
};

#ifndef SHMIO_TEST_TIME_SCALE
#define SHMIO_TEST_TIME_SCALE 1
#endif
/// How many times slower than a plain build this one runs (tests/CMakeLists.txt: 10 under
/// sanitizers): bounds on how soon something must happen are multiplied by it.
inline constexpr int time_scale = SHMIO_TEST_TIME_SCALE;

/// Far longer than anything should take: only a hang or a lost wake-up reaches it.
inline constexpr std::chrono::milliseconds default_bound{10'000};

// Polls `pred` until it holds; false if it still does not after `limit`. A condition poll with a
// deadline as its safety bound, not a sleep standing in for synchronisation.
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = default_bound) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return true;
}

// Busy-waits for `d`: the delays of race tests, which stagger two threads by less than any
// sleep can.
inline void spin_for(std::chrono::nanoseconds d) {
  const auto until = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < until) {
  }
}

// Runs `io` until it runs out of work (true) or `limit` passes (false).
inline bool run_until_idle(asio::io_context& io, std::chrono::milliseconds limit = default_bound) {
  io.restart();
  io.run_for(limit);
  return io.stopped();
}

// Runs `io` until `done()` or `limit`.
template <class Pred>
bool run_until(asio::io_context& io, Pred done, std::chrono::milliseconds limit = default_bound) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    if (io.stopped()) io.restart();
    io.run_one_for(std::chrono::milliseconds(10));
  }
  return true;
}

// Runs `io` on a thread of its own until it runs out of work. join() waits up to `limit` for
// that, stops `io` if it has not, and joins the thread: false if `io` had work left, so that
// leftover work fails a test instead of hanging it. The destructor (a failed check unwinding)
// stops `io` at once and joins.
class io_thread {
 public:
  explicit io_thread(asio::io_context& io)
      : io_(io), thread_([this] {
          io_.run();
          ran_dry_ = true;
        }) {}
  ~io_thread() {
    if (thread_.joinable()) {
      io_.stop();
      thread_.join();
    }
  }
  io_thread(const io_thread&) = delete;
  io_thread& operator=(const io_thread&) = delete;
  bool join(std::chrono::milliseconds limit = default_bound) {
    if (!thread_.joinable()) return ran_dry_;
    const bool dry = eventually([this] { return ran_dry_.load(); }, limit);
    if (!dry) io_.stop();
    thread_.join();
    return dry;
  }

 private:
  asio::io_context& io_;
  std::atomic<bool> ran_dry_{false};
  std::thread thread_;
};

/// Completions of a closed handle's operations, which should all report bad_descriptor from
/// inside io.run() on this thread (through the executor the handle was made with).
struct closed_handle_completions {
  int calls = 0;
  int other_errors = 0;  // completions with an error_code other than bad_descriptor
  bool on_this_thread = true;
  std::thread::id me = std::this_thread::get_id();
  auto handler() {
    return [this](std::error_code ec, auto&&...) {
      if (ec != asio::error::bad_descriptor) ++other_errors;
      on_this_thread &= std::this_thread::get_id() == me;
      ++calls;
    };
  }
};

/// The path of the peer program (tests/peer.cpp), set by CMake.
inline std::string peer_path() {
  return SHMIO_TEST_PEER;
}

}  // namespace shmio::test
