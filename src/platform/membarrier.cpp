// The heavy side of an asymmetric fence: membarrier(2) across processes. A single-writer ring's
// publications store their node word without a StoreLoad fence, and a party that parks pays
// for the ordering instead (docs/protocol.md, "Single-writer rings").
#include <linux/membarrier.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "shmio/detail/platform.hpp"

namespace shmio::detail::platform {
namespace {

// True while this process is registered for MEMBARRIER_CMD_GLOBAL_EXPEDITED, so that a fence
// another process issues reaches our threads. A child of fork() starts without it (whatever the
// kernel kept): it stores with the full fence until one of its own opens registers it again.
std::atomic<bool> registered{false};
// True once a check found the command here (kept across fork(): the child may issue it too).
std::atomic<bool> enabled{false};

long membarrier(int cmd) noexcept {
  return ::syscall(SYS_membarrier, cmd, 0u, 0);
}

}  // namespace

std::error_code enable_heavy_fence() noexcept {
  static std::once_flag atfork;
  constexpr long needed =
      MEMBARRIER_CMD_GLOBAL_EXPEDITED | MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED;
  const long supported = membarrier(MEMBARRIER_CMD_QUERY);
  if (supported < 0) return {errno, std::system_category()};
  if ((supported & needed) != needed) return std::make_error_code(std::errc::not_supported);
  try {
    std::call_once(atfork, [] {
      ::pthread_atfork(nullptr, nullptr,
                       [] { registered.store(false, std::memory_order_relaxed); });
    });
  } catch (...) {
    return std::make_error_code(std::errc::not_enough_memory);
  }
  // Registering again is cheap (the kernel returns at once), and it covers a child of fork().
  if (membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) != 0)
    return {errno, std::system_category()};
  // relaxed: read by this process's own publishers and parkers; the registration itself is
  // the syscall's.
  enabled.store(true, std::memory_order_relaxed);
  registered.store(true, std::memory_order_relaxed);
  return {};
}

bool heavy_fence_registered() noexcept {
  // relaxed: a stale false only costs a full fence; it is never stale true (set after the
  // registration, reset in the child before it runs anything else).
  return registered.load(std::memory_order_relaxed);
}

bool heavy_fence_enabled() noexcept {
  return enabled.load(std::memory_order_relaxed);  // relaxed: as heavy_fence_registered
}

void heavy_fence() noexcept {
  // ENOMEM: the kernel could not allocate its CPU mask this time; it may next time.
  for (int tries = 0; tries < 100; ++tries) {
    if (membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0) return;
    if (errno != ENOMEM && errno != EINTR) break;
    ::sched_yield();
  }
  // The open that made this queue need the fence checked that the command exists here, so
  // only a filter installed since (seccomp) can refuse it. Going on would lose wake-ups
  // silently; say why and stop.
  std::fprintf(stderr,
               "shmio: membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) failed (errno %d) "
               "after a single-writer ring was opened; cannot park safely\n",
               errno);
  std::abort();
}

}  // namespace shmio::detail::platform
