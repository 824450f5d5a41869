// Futex wait/wake on words in shared memory (not FUTEX_PRIVATE: waiters are in other processes).
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>

#include "shmio/detail/platform.hpp"

namespace shmio::detail::platform {

static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));

futex_result futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected,
                        std::chrono::nanoseconds timeout) noexcept {
  timespec ts{};
  timespec* tsp = nullptr;
  if (timeout.count() >= 0) {
    ts.tv_sec = static_cast<time_t>(timeout.count() / 1'000'000'000);
    ts.tv_nsec = static_cast<long>(timeout.count() % 1'000'000'000);
    tsp = &ts;
  }
  long rc = ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT, expected, tsp,
                      nullptr, 0);
  if (rc == 0) return futex_result::woken;
  switch (errno) {
    case EAGAIN:
      return futex_result::value_changed;
    case ETIMEDOUT:
      return futex_result::timed_out;
    default:
      return futex_result::interrupted;
  }
}

int futex_wait_any(const futex_watch* words, std::size_t count) noexcept {
#if defined(SYS_futex_waitv)
  if (count == 0 || count > static_cast<std::size_t>(futex_wait_any_max)) return -1;
  futex_waitv waiters[futex_wait_any_max] = {};
  for (std::size_t i = 0; i < count; ++i) {
    waiters[i].val = words[i].expected;
    waiters[i].uaddr = reinterpret_cast<std::uintptr_t>(words[i].word);
    waiters[i].flags = FUTEX_32 | (words[i].shared ? 0 : FUTEX_PRIVATE_FLAG);
  }
  const long rc = ::syscall(SYS_futex_waitv, waiters, static_cast<unsigned>(count), 0u, nullptr,
                            CLOCK_MONOTONIC);
  if (rc >= 0) return static_cast<int>(rc);
  switch (errno) {
    case EAGAIN:  // a word differed
    case EINTR:
    case EFAULT:  // a word no longer mapped
      return -1;
    case ENOSYS:
      return -2;
    default:  // EPERM from a seccomp filter, say: the call cannot be used here
      return -3;
  }
#else
  (void)words;
  (void)count;
  return -2;
#endif
}

int futex_wake(std::atomic<std::uint32_t>& word, int count) noexcept {
  const long woken = ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE,
                               count, nullptr, nullptr, 0);
  return woken > 0 ? static_cast<int>(woken) : 0;
}

}  // namespace shmio::detail::platform
