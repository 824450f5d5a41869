// The bench binaries' replacement of the global operator new (and of aligned_alloc, which Asio
// uses in its place), so that benchmarks can report heap allocations per operation
// (shmio_bench::allocations()). In a file of its own: inlined
// into callers, the replacement makes g++ see new/free pairs it warns about.
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <new>

#include "support.hpp"

// Relaxed: a statistic read after the measured loop by the thread that ran it.
namespace {
std::atomic<std::uint64_t> g_allocations{0};
}

void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
namespace {
// posix_memalign wants at least a pointer's alignment; aligned_alloc and aligned new take any
// power of two.
void* aligned_block(std::size_t alignment, std::size_t size) noexcept {
  void* p = nullptr;
  const int e =
      ::posix_memalign(&p, alignment < sizeof(void*) ? sizeof(void*) : alignment, size ? size : 1);
  if (e == 0) return p;
  errno = e;
  return nullptr;
}
}  // namespace

void* operator new(std::size_t n, std::align_val_t a) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = aligned_block(static_cast<std::size_t>(a), n)) return p;
  throw std::bad_alloc();
}

// Asio's own allocations (its recycling allocator's blocks, coroutine frames, operations)
// bypass operator new: with C++17 and glibc it takes them from aligned_alloc. Replaced here
// too, or they would go uncounted. glibc lets a program replace its allocation functions; this
// one takes its memory from posix_memalign, and free() gives it back.
extern "C" void* aligned_alloc(std::size_t alignment, std::size_t size) noexcept {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return aligned_block(alignment, size);
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}

namespace shmio_bench {

std::uint64_t allocations() noexcept {
  return g_allocations.load(std::memory_order_relaxed);
}

}  // namespace shmio_bench
