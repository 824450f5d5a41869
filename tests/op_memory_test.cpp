// op_memory: the per-thread cache that shmio's operations take their memory from when the
// handler names no allocator (detail/op_memory.hpp).
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

#include "shmio/detail/op_memory.hpp"

using shmio::detail::op_allocator;
using shmio::detail::op_memory;

namespace {

// Each test starts with this thread's cache empty.
void flush_cache() {
  op_memory::release_cached();
}

}  // namespace

TEST_CASE("a block given back is taken again by the next operation of its size", "[op_memory]") {
  flush_cache();
  void* a = op_memory::allocate(200);
  op_memory::deallocate(a, 200);
  void* b = op_memory::allocate(200);
  CHECK(b == a);
  // A smaller operation may take the block too; a larger one may not.
  op_memory::deallocate(b, 200);
  void* c = op_memory::allocate(100);
  CHECK(c == a);
  void* d = op_memory::allocate(300);
  CHECK(d != a);
  op_memory::deallocate(c, 100);
  op_memory::deallocate(d, 300);
}

TEST_CASE("of the cached blocks that fit, the smallest is taken", "[op_memory]") {
  flush_cache();
  void* big = op_memory::allocate(900);
  void* small = op_memory::allocate(150);
  op_memory::deallocate(big, 900);
  op_memory::deallocate(small, 150);
  // The large block stays for the large operation that follows.
  void* s = op_memory::allocate(120);
  void* b = op_memory::allocate(800);
  CHECK(s == small);
  CHECK(b == big);
  op_memory::deallocate(s, 120);
  op_memory::deallocate(b, 800);
}

TEST_CASE("memory is aligned for any scalar and usable to its size, cached or not", "[op_memory]") {
  flush_cache();
  for (std::size_t size : {std::size_t{1}, std::size_t{64}, std::size_t{65}, op_memory::largest,
                           op_memory::largest + 1, std::size_t{64 * 1024}}) {
    for (int round = 0; round < 2; ++round) {  // new, then (up to largest) cached
      auto* p = static_cast<unsigned char*>(op_memory::allocate(size));
      CHECK(reinterpret_cast<std::uintptr_t>(p) % alignof(std::max_align_t) == 0);
      for (std::size_t i = 0; i < size; ++i)
        p[i] = static_cast<unsigned char>(i);
      op_memory::deallocate(p, size);
    }
  }
}

TEST_CASE("a thread's cache keeps at most its slots, and the largest blocks", "[op_memory]") {
  flush_cache();
  std::vector<void*> held;
  for (std::size_t i = 0; i < op_memory::slots + 4; ++i)
    held.push_back(op_memory::allocate(64 * (i + 1)));
  for (std::size_t i = 0; i < held.size(); ++i)
    op_memory::deallocate(held[i], 64 * (i + 1));
  // Kept: the `slots` largest. Each is found again by an operation of its own size.
  for (std::size_t i = 4; i < held.size(); ++i) {
    void* p = op_memory::allocate(64 * (i + 1));
    CHECK(p == held[i]);
    op_memory::deallocate(p, 64 * (i + 1));
  }
}

TEST_CASE("a block freed on another thread goes to that thread's cache", "[op_memory]") {
  flush_cache();
  void* p = op_memory::allocate(256);
  void* seen_there = nullptr;
  std::thread([&] {
    op_memory::deallocate(p, 256);
    seen_there = op_memory::allocate(256);
    op_memory::deallocate(seen_there, 256);
  }).join();
  CHECK(seen_there == p);
}

TEST_CASE("op_allocator rebinds and compares equal", "[op_memory]") {
  op_allocator<int> a;
  op_allocator<double> b(a);
  CHECK(a == b);
  int* p = a.allocate(10);
  p[9] = 1;
  a.deallocate(p, 10);
}
