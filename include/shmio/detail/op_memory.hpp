#pragma once
// Where shmio's operations take their memory when the handler names no allocator of its own:
// a small cache of blocks per thread, kept apart from Asio's.
//
// Asio's recycling allocator keeps two blocks of each kind per thread, shared by every
// operation, posted function and coroutine frame of that thread. A call in place has more of
// its blocks alive at once than that (its own operation, the reader's wait, the doorbell's
// watch, a strand's invoker, the caller's frame), so a thread falls into runs in which each
// call frees a block the cache cannot keep and allocates one it cannot find. shmio's own
// operations (waits, calls, the doorbell's and the timer's watches) take their blocks from
// here instead, which leaves Asio's cache to Asio's own.
//
// A block goes back to the cache of the thread that frees it. Each thread keeps at most
// `slots` blocks of at most `largest` bytes, so the cache holds at most 8 KiB per thread.
// Larger operations take new memory each time, as they do from Asio's cache (which keeps
// blocks of up to 1 020 bytes).

#include <cstddef>
#include <new>

namespace shmio::detail {

class op_memory {
 public:
  static constexpr std::size_t slots = 8;
  static constexpr std::size_t largest = 1024;

  /// `size` bytes aligned for any scalar type: a cached block if one is large enough (the
  /// smallest such), else new memory.
  static void* allocate(std::size_t size);
  /// Gives back what allocate(size) returned: cached if a slot is free (or in place of a
  /// smaller cached block).
  static void deallocate(void* p, std::size_t size) noexcept;
  /// Frees the blocks this thread's cache holds.
  static void release_cached() noexcept;
  /// This thread caches blocks: false once it is exiting and its cache is gone.
  static bool caching() noexcept;
};

/// The allocator of op_memory (stateless).
template <class T>
class op_allocator {
 public:
  using value_type = T;
  op_allocator() noexcept = default;
  template <class U>
  op_allocator(const op_allocator<U>&) noexcept {}

  T* allocate(std::size_t n) {
    if constexpr (alignof(T) > alignof(std::max_align_t))
      return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(alignof(T))));
    else
      return static_cast<T*>(op_memory::allocate(n * sizeof(T)));
  }
  void deallocate(T* p, std::size_t n) noexcept {
    if constexpr (alignof(T) > alignof(std::max_align_t))
      ::operator delete(p, n * sizeof(T), std::align_val_t(alignof(T)));
    else
      op_memory::deallocate(p, n * sizeof(T));
  }

  template <class U>
  bool operator==(const op_allocator<U>&) const noexcept {
    return true;
  }
};

}  // namespace shmio::detail
