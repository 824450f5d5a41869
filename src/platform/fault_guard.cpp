// The truncation guard (platform.hpp): a registry of this process's shared mappings, and a
// SIGBUS handler that maps private zero pages over what a peer's truncation of the file took
// from one of them, so that the access that faulted completes and the object using the mapping
// fails with errc::corrupted, rather than the whole process dying.
//
// The handler runs on whichever thread touched the lost page, at any instruction: it reads the
// registry with atomic loads only, makes no allocation and takes no lock, and calls only mmap
// and sigaction. Registration and removal happen at map and unmap, outside any signal.
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <new>

#include "shmio/detail/platform.hpp"

namespace shmio::detail::platform {
namespace {

// A slot's base: 0 free, 1 being filled in, else the mapping's address.
constexpr std::uintptr_t slot_free = 0;
constexpr std::uintptr_t slot_filling = 1;

struct slot {
  std::atomic<std::uintptr_t> base{slot_free};
  std::atomic<std::size_t> size{0};
  std::atomic<bool> faulted{false};
};

// Chunks are allocated as mappings grow and never freed: the handler may be reading one.
constexpr std::size_t chunk_slots = 512;
constexpr std::size_t max_chunks = 128;  // 65 536 mappings; more go unguarded
struct chunk {
  slot slots[chunk_slots];
};
std::atomic<chunk*> chunks[max_chunks];

// Faults recovered so far: 0 lets mapping_faulted answer without a look at the registry.
std::atomic<std::uint64_t> recovered{0};

struct sigaction previous_action;
std::atomic<bool> installed{false};

std::uintptr_t page_size() noexcept {
  static const auto size = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  return size;
}

// The slot whose mapping holds `address`, or nullptr. Signal-safe: atomic loads only.
// acquire: a base's release store publishes the size written before it.
slot* find(std::uintptr_t address, bool exact) noexcept {
  for (auto& c : chunks) {
    chunk* ch = c.load(std::memory_order_acquire);
    if (!ch) return nullptr;  // chunks fill in order
    for (auto& s : ch->slots) {
      const std::uintptr_t base = s.base.load(std::memory_order_acquire);
      if (base <= slot_filling) continue;
      if (exact ? address == base
                : address >= base && address - base < s.size.load(std::memory_order_relaxed))
        return &s;
    }
  }
  return nullptr;
}

void pass_on(int sig, siginfo_t* info, void* context) noexcept {
  // Not ours: what was there before decides. A default or ignored disposition is put back, and
  // the access faults again when the handler returns, as it would have without us.
  if (previous_action.sa_flags & SA_SIGINFO) {
    if (previous_action.sa_sigaction) previous_action.sa_sigaction(sig, info, context);
    return;
  }
  if (previous_action.sa_handler == SIG_DFL || previous_action.sa_handler == SIG_IGN) {
    ::sigaction(SIGBUS, &previous_action, nullptr);
    return;
  }
  previous_action.sa_handler(sig);
}

void on_sigbus(int sig, siginfo_t* info, void* context) noexcept {
  const int saved_errno = errno;
  const auto address = reinterpret_cast<std::uintptr_t>(info->si_addr);
  slot* s = info->si_code == BUS_ADRERR ? find(address, false) : nullptr;
  if (s) {
    // From the faulting page to the mapping's end: pages before it still have the file behind
    // them; any of them lost later faults again and comes here again.
    const std::uintptr_t base = s->base.load(std::memory_order_relaxed);
    const std::uintptr_t end = base + s->size.load(std::memory_order_relaxed);
    const std::uintptr_t first = address & ~(page_size() - 1);
    void* p = ::mmap(reinterpret_cast<void*>(first), end - first, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (p != MAP_FAILED) {
      // relaxed: read by the object's own thread after the access returns (program order), or
      // by another through the object's own synchronisation.
      s->faulted.store(true, std::memory_order_relaxed);
      recovered.fetch_add(1, std::memory_order_relaxed);
      errno = saved_errno;
      return;
    }
  }
  errno = saved_errno;
  pass_on(sig, info, context);
}

}  // namespace

void guard_mapping(const void* base, std::size_t size) noexcept {
  if (!base || size == 0) return;
  for (auto& c : chunks) {
    chunk* ch = c.load(std::memory_order_acquire);
    if (!ch) {
      auto* fresh = new (std::nothrow) chunk;
      if (!fresh) return;  // unguarded: an access it loses faults as before
      // acq_rel: publishes the chunk's zeroed slots; on failure, takes the one installed.
      if (c.compare_exchange_strong(ch, fresh, std::memory_order_acq_rel))
        ch = fresh;
      else
        delete fresh;
    }
    for (auto& s : ch->slots) {
      std::uintptr_t expected = slot_free;
      // acquire: after an unguard's release, the slot's old fields are ours to overwrite.
      if (!s.base.compare_exchange_strong(expected, slot_filling, std::memory_order_acquire,
                                          std::memory_order_relaxed))
        continue;
      s.size.store(size, std::memory_order_relaxed);
      s.faulted.store(false, std::memory_order_relaxed);
      // release: the handler that sees the base sees the size.
      s.base.store(reinterpret_cast<std::uintptr_t>(base), std::memory_order_release);
      return;
    }
  }
}

void unguard_mapping(const void* base) noexcept {
  if (!base) return;
  // release: the slot's reuse (guard_mapping's acquire) comes after our last read of it.
  if (slot* s = find(reinterpret_cast<std::uintptr_t>(base), true))
    s->base.store(slot_free, std::memory_order_release);
}

bool mapping_faulted(const void* base) noexcept {
  // relaxed: a fault is published as the slot's flag is; this only saves the scan while none
  // has happened in the process.
  if (recovered.load(std::memory_order_relaxed) == 0 || !base) return false;
  const slot* s = find(reinterpret_cast<std::uintptr_t>(base), true);
  return s && s->faulted.load(std::memory_order_relaxed);
}

std::uint64_t faults_recovered() noexcept {
  return recovered.load(std::memory_order_relaxed);  // a statistic
}

void install_truncation_guard(std::error_code& ec) noexcept {
  ec.clear();
  static std::mutex m;
  std::lock_guard lock(m);
  // relaxed: under m; read elsewhere only as a statistic.
  if (installed.load(std::memory_order_relaxed)) return;
  struct sigaction action {};
  action.sa_sigaction = on_sigbus;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK;
  ::sigemptyset(&action.sa_mask);
  if (::sigaction(SIGBUS, &action, &previous_action) != 0) {
    ec = {errno, std::system_category()};
    return;
  }
  installed.store(true, std::memory_order_relaxed);
}

bool truncation_guard_installed() noexcept {
  return installed.load(std::memory_order_relaxed);  // see install_truncation_guard
}

}  // namespace shmio::detail::platform
