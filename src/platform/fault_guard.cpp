// The truncation guard (platform.hpp): a registry of this process's shared mappings, and a
// SIGBUS handler that maps private zero pages over what a peer's truncation of the file took
// from one of them, so that the access that faulted completes and the object using the mapping
// fails with errc::corrupted, rather than the whole process dying.
//
// The handler runs on whichever thread touched the lost page, at any instruction: it reads the
// registry with atomic loads only, makes no allocation and takes no lock, and calls only mmap
// and sigaction. Registration and removal happen at map and unmap, outside any signal.
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <new>

#include "shmio/detail/platform.hpp"

namespace shmio::detail::platform {
namespace {

// A slot's base: 0 free, 1 being filled in or drained, else the mapping's address.
constexpr std::uintptr_t slot_free = 0;
constexpr std::uintptr_t slot_filling = 1;

struct slot {
  std::atomic<std::uintptr_t> base{slot_free};
  std::atomic<std::size_t> size{0};
  std::atomic<bool> faulted{false};
  // Handlers working on this slot: unguard_mapping waits for them before the unmap, so that
  // none maps zeros over a range that is being unmapped, or reused.
  std::atomic<std::uint32_t> handlers{0};
  // Where the zero pages begin (0: none yet): a fault at or past it was another thread's, whose
  // zeros are in place by the time that thread's handler stored it.
  std::atomic<std::uintptr_t> zeroed_from{0};
  // Held by a handler while it maps zeros, so that two threads' handlers never map over each
  // other's zeros (and the writes made into them). Its holder is always another thread: the
  // handler runs with SIGBUS blocked.
  std::atomic<bool> zeroing{false};
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
std::uintptr_t page_size = 4096;  // set at install, before the handler can run

// A guarded mapping as the handler found it: the slot, and the base and size it matched.
struct found {
  slot* s = nullptr;
  std::uintptr_t base = 0;
  std::size_t size = 0;
};

// The slot whose mapping holds `address` (or starts there, if `exact`). Signal-safe: atomic
// loads only. acquire: a base's release store publishes the size written before it; the base
// read again after the size tells that the slot was not reused in between.
found find(std::uintptr_t address, bool exact) noexcept {
  for (auto& c : chunks) {
    chunk* ch = c.load(std::memory_order_acquire);
    if (!ch) return {};  // chunks fill in order
    for (auto& s : ch->slots) {
      const std::uintptr_t base = s.base.load(std::memory_order_acquire);
      if (base <= slot_filling) continue;
      const std::size_t size = s.size.load(std::memory_order_relaxed);
      if (s.base.load(std::memory_order_acquire) != base) continue;
      if (exact ? address == base : address >= base && address - base < size)
        return {&s, base, size};
    }
  }
  return {};
}

// Puts back what was there before us (the guard is gone with it).
void restore_previous() noexcept {
  ::sigaction(SIGBUS, &previous_action, nullptr);
  installed.store(false, std::memory_order_relaxed);  // a statistic; lock-free: signal-safe
}

void pass_on(int sig, siginfo_t* info, void* context) noexcept {
  // Not ours: what was there before decides. A fault recurs when the handler returns, so for a
  // default or ignored disposition it is put back and the access faults again, as it would
  // have without us (the kernel does not let a fault be ignored). A signal sent by a process,
  // or a machine check that will not recur, does not come again: ignored, it is dropped and the
  // guard stays; default, it is raised again once the disposition is back.
  const bool recurs = info->si_code > 0 && info->si_code != BUS_MCEERR_AO;
  if (previous_action.sa_handler == SIG_IGN) {  // the same bits as sa_sigaction
    if (recurs) restore_previous();
    return;
  }
  if (previous_action.sa_handler == SIG_DFL) {
    restore_previous();
    if (!recurs) ::raise(SIGBUS);  // pending until this handler returns
    return;
  }
  if (previous_action.sa_flags & SA_SIGINFO)
    previous_action.sa_sigaction(sig, info, context);
  else
    previous_action.sa_handler(sig);
}

// Maps zeros over the guarded mapping `f` from the page of `address` on. False if it could not.
bool zero_from(const found& f, std::uintptr_t address) noexcept {
  slot& s = *f.s;
  // Counted before the base is looked at again: unguard_mapping clears the base, then waits
  // for the count. seq_cst, both: either it sees us counted, or we see its cleared base.
  s.handlers.fetch_add(1, std::memory_order_seq_cst);
  bool done = false;
  // The size again too: the same address unmapped and guarded again, at another size.
  if (s.base.load(std::memory_order_seq_cst) == f.base &&
      s.size.load(std::memory_order_relaxed) == f.size) {
    // acquire: after the previous holder's zeros and its store of zeroed_from.
    while (s.zeroing.exchange(true, std::memory_order_acquire)) {
    }
    const std::uintptr_t first = address & ~(page_size - 1);
    const std::uintptr_t end = f.base + f.size;
    // acquire: the zeros another thread's handler mapped are in place before it stored this.
    const std::uintptr_t zeroed = s.zeroed_from.load(std::memory_order_acquire);
    if (zeroed != 0 && first >= zeroed) {
      done = true;  // the access finds them when it runs again
    } else {
      // From the faulting page to the mapping's end (or to zeros already there): pages before
      // it still have the file behind them; any of them lost later faults again.
      const std::uintptr_t until = zeroed != 0 ? zeroed : end;
      done = ::mmap(reinterpret_cast<void*>(first), until - first, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != MAP_FAILED;
      if (done) {
        // release: with the zeros (see the acquire above). Lower only: a lower page faulted.
        std::uintptr_t now = zeroed;
        while ((now == 0 || first < now) &&
               !s.zeroed_from.compare_exchange_weak(now, first, std::memory_order_release,
                                                    std::memory_order_acquire)) {
        }
        // relaxed: read by the object's own thread after the access returns (program order),
        // or by another through the object's own synchronisation.
        s.faulted.store(true, std::memory_order_relaxed);
        recovered.fetch_add(1, std::memory_order_relaxed);
      }
    }
    s.zeroing.store(false, std::memory_order_release);  // see the exchange
  }
  s.handlers.fetch_sub(1, std::memory_order_seq_cst);  // see the fetch_add
  return done;
}

void on_sigbus(int sig, siginfo_t* info, void* context) noexcept {
  const int saved_errno = errno;
  if (info->si_code == BUS_ADRERR) {
    const auto address = reinterpret_cast<std::uintptr_t>(info->si_addr);
    if (const found f = find(address, false); f.s && zero_from(f, address)) {
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
      s.zeroed_from.store(0, std::memory_order_relaxed);
      // release: the handler that sees the base sees the size.
      s.base.store(reinterpret_cast<std::uintptr_t>(base), std::memory_order_release);
      return;
    }
  }
}

void unguard_mapping(const void* base) noexcept {
  if (!base) return;
  const found f = find(reinterpret_cast<std::uintptr_t>(base), true);
  if (!f.s) return;
  // Draining first (guard_mapping skips the slot, a handler finds no base): seq_cst, see
  // zero_from. A handler that counted itself before may still map zeros into the range or
  // write the slot: the unmap and the slot's reuse wait for it (a few system calls). Bounded:
  // a count a fork left in the child (taken in a thread the child does not have) never drops.
  f.s->base.store(slot_filling, std::memory_order_seq_cst);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
  while (f.s->handlers.load(std::memory_order_seq_cst) != 0 &&
         std::chrono::steady_clock::now() < give_up)
    ::sched_yield();
  // release: the slot's reuse (guard_mapping's acquire) comes after our last look at it.
  f.s->base.store(slot_free, std::memory_order_release);
}

bool mapping_faulted(const void* base) noexcept {
  // relaxed: a fault is published as the slot's flag is; this only saves the scan while none
  // has happened in the process.
  if (recovered.load(std::memory_order_relaxed) == 0 || !base) return false;
  const found f = find(reinterpret_cast<std::uintptr_t>(base), true);
  return f.s && f.s->faulted.load(std::memory_order_relaxed);
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
  // Once: a handler of an earlier installation may still be reading it.
  static const bool page_size_set =
      (page_size = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE)), true);
  (void)page_size_set;
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
