// The calling process: ids, clocks, randomness, scheduling.
#include <sched.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <thread>

#include "shmio/detail/platform.hpp"

namespace shmio::detail::platform {

std::uint32_t process_id() noexcept {
  return static_cast<std::uint32_t>(::getpid());
}
std::uint32_t thread_id() noexcept {
  // Not cached: a child of fork() is a new thread with the same thread_local values.
  return static_cast<std::uint32_t>(::gettid());
}
std::uint32_t user_id() noexcept {
  return static_cast<std::uint32_t>(::geteuid());
}

bool process_alive(std::uint32_t pid) noexcept {
  // Past INT_MAX a pid_t is negative, and kill() would ask about a process group (or, for -1,
  // every process): such a number, as read from a damaged header, names no process.
  return pid != 0 && pid <= 0x7FFF'FFFFu &&
         (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
}

int open_process_watch(std::uint32_t pid, std::error_code& ec) noexcept {
#ifdef SYS_pidfd_open
  if (pid != 0 && pid <= 0x7FFF'FFFFu) {
    // pidfd_open's descriptors are close-on-exec already.
    const long fd = ::syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0u);
    if (fd >= 0) return static_cast<int>(fd);
    ec.assign(errno, std::system_category());
    return -1;
  }
#endif
  ec = std::make_error_code(std::errc::no_such_process);
  return -1;
}

bool thread_alive(std::uint32_t pid, std::uint32_t tid) noexcept {
  if (pid == 0 || tid == 0) return false;
  // Signal 0 only asks whether the thread exists; EPERM means it does (another user's).
  return ::syscall(SYS_tgkill, static_cast<pid_t>(pid), static_cast<pid_t>(tid), 0) == 0 ||
         errno == EPERM;
}

std::uint64_t random_u64() noexcept {
  std::uint64_t v = 0;
  if (::getrandom(&v, sizeof v, 0) != static_cast<ssize_t>(sizeof v)) {
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC, &ts);  // no entropy source: still unique enough per process
    v = (static_cast<std::uint64_t>(ts.tv_nsec) << 20) ^ static_cast<std::uint64_t>(::getpid()) ^
        reinterpret_cast<std::uintptr_t>(&v);
  }
  return v;
}

std::uint64_t realtime_ns() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

unsigned usable_cpus() noexcept {
  cpu_set_t set;
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  return static_cast<unsigned>(CPU_COUNT(&set));
}

unsigned online_cpus() noexcept {
  // Read once per process: glibc reads a sysfs file for it (three system calls), and every
  // waiting object asks when it is made. A CPU brought online or offline later leaves the
  // answer only as stale as a spin decision can afford. An atomic rather than a static local:
  // a child forked while another thread initialised one would inherit its guard held.
  // relaxed: every thread computes the same value; a race only reads sysfs twice.
  static std::atomic<unsigned> cached{0};
  unsigned n = cached.load(std::memory_order_relaxed);
  if (n == 0) {
    const long v = ::sysconf(_SC_NPROCESSORS_ONLN);
    n = v > 0 ? static_cast<unsigned>(v) : 1u;
    cached.store(n, std::memory_order_relaxed);  // relaxed: as above
  }
  return n;
}

void yield() noexcept {
  ::sched_yield();
}

void sleep_for(std::chrono::nanoseconds d) noexcept {
  std::this_thread::sleep_for(d);
}

}  // namespace shmio::detail::platform
