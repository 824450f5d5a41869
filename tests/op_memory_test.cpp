// op_memory: the per-thread cache that shmio's operations take their memory from when the
// handler names no allocator (detail/op_memory.hpp). Where a check could pass by malloc's own
// caching (which hands back the last block freed of the same size), it asks for another size.
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

TEST_CASE("a block given back is taken again by a smaller operation, not a larger one",
          "[op_memory]") {
  flush_cache();
  void* a = op_memory::allocate(200);
  op_memory::deallocate(a, 200);
  void* larger = op_memory::allocate(300);
  CHECK(larger != a);
  void* smaller = op_memory::allocate(70);  // of another size than 200: malloc would not
  CHECK(smaller == a);
  op_memory::deallocate(smaller, 70);
  op_memory::deallocate(larger, 300);
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
  const auto size_of = [](std::size_t i) { return 64 * (i + 1); };
  for (std::size_t i = 0; i < op_memory::slots + 4; ++i)
    held.push_back(op_memory::allocate(size_of(i)));
  for (std::size_t i = 0; i < held.size(); ++i)
    op_memory::deallocate(held[i], size_of(i));
  // Kept: the `slots` largest (the four smallest went). Operations of the smallest kept size
  // take them in order of size, each the smallest that is left (malloc, asked for that size,
  // would not hand back the larger blocks).
  std::vector<void*> again;
  for (std::size_t i = 4; i < held.size(); ++i) {
    again.push_back(op_memory::allocate(size_of(4) - 10));
    CHECK(again.back() == held[i]);
  }
  for (void* p : again)
    op_memory::deallocate(p, size_of(4) - 10);
}

TEST_CASE("a block freed on another thread goes to that thread's cache", "[op_memory]") {
  flush_cache();
  void* p = op_memory::allocate(256);
  void* seen_there = nullptr;
  std::thread([&] {
    op_memory::deallocate(p, 256);
    seen_there = op_memory::allocate(130);  // another size, that its block fits
    op_memory::deallocate(seen_there, 130);
  }).join();
  CHECK(seen_there == p);
}

namespace {

// Made in a thread before its first operation, so destroyed after the cache's reaper: what it
// frees (and makes) then goes around the cache. (ASan's runs check that nothing leaks or is
// freed wrongly.)
struct late_holder {
  void* p = nullptr;
  bool* done = nullptr;
  bool gone_seen = false;
  ~late_holder() {
    gone_seen = !op_memory::caching();
    op_memory::deallocate(p, 100);
    void* q = op_memory::allocate(100);
    op_memory::deallocate(q, 100);
    *done = gone_seen;
  }
};

}  // namespace

TEST_CASE("memory freed while a thread exits, after its cache is gone, is freed", "[op_memory]") {
  bool done = false;
  std::thread([&] {
    thread_local late_holder holder;
    holder.done = &done;
    holder.p = op_memory::allocate(100);
    op_memory::deallocate(op_memory::allocate(300), 300);  // the cache holds a block at exit
  }).join();
  CHECK(done);  // and the cache was gone when it ran
}

TEST_CASE("op_allocator rebinds, compares equal and honours an over-alignment", "[op_memory]") {
  op_allocator<int> a;
  op_allocator<double> b(a);
  CHECK(a == b);
  int* p = a.allocate(10);
  p[9] = 1;
  a.deallocate(p, 10);
  struct alignas(128) wide {
    unsigned char bytes[128];
  };
  op_allocator<wide> w;
  wide* q = w.allocate(2);
  CHECK(reinterpret_cast<std::uintptr_t>(q) % 128 == 0);
  q[1].bytes[127] = 1;
  w.deallocate(q, 2);
}
