#include "shmio/detail/op_memory.hpp"

#include <array>
#include <cstdint>
#include <utility>

namespace shmio::detail {

namespace {

// Each block starts with a header that holds its capacity (a cached block handed out may be
// larger than the size it is later given back with), and keeps the rest aligned for any scalar
// type.
constexpr std::size_t header = alignof(std::max_align_t);
static_assert(header >= sizeof(std::size_t));
static_assert(__STDCPP_DEFAULT_NEW_ALIGNMENT__ >= alignof(std::max_align_t),
              "operator new's blocks must be aligned for the header and what follows it");
// Sizes are rounded up to this, so that operations of neighbouring sizes share blocks.
constexpr std::size_t granule = 64;

// Trivially destructible, so that it stays usable until the thread is gone: an operation may
// be freed by a destructor that runs at the thread's exit after the reaper's (the thread then
// caches nothing more).
struct thread_cache {
  std::array<std::byte*, op_memory::slots> blocks;
  std::array<std::size_t, op_memory::slots> capacity;  // of blocks[i], read without touching it
  bool gone;
};
thread_local thread_cache t_cache{};

void release_blocks(thread_cache& c) noexcept {
  for (std::byte*& b : c.blocks)
    ::operator delete(std::exchange(b, nullptr));
}

// Frees the thread's blocks as it exits.
struct reaper {
  ~reaper() {
    release_blocks(t_cache);
    t_cache.gone = true;
  }
};
thread_local reaper t_reaper;

// This thread's cache, or none once it is exiting.
thread_cache* cache() noexcept {
  if (t_cache.gone) return nullptr;
  // A use of the reaper (taking its address is one) constructs it in this thread, which has
  // its destructor run at the thread's exit.
  static_cast<void>(&t_reaper);
  return &t_cache;
}

std::byte* new_block(std::size_t capacity) {
  auto* block = static_cast<std::byte*>(::operator new(header + capacity));
  __builtin_memcpy(block, &capacity, sizeof capacity);
  return block;
}

std::size_t capacity_of(const std::byte* block) noexcept {
  std::size_t capacity;
  __builtin_memcpy(&capacity, block, sizeof capacity);
  return capacity;
}

}  // namespace

void* op_memory::allocate(std::size_t size) {
  if (size > largest) return ::operator new(size);
  const std::size_t want = (size + granule - 1) / granule * granule;
  thread_cache* c = cache();
  if (!c) return new_block(want) + header;
  std::size_t best = slots;
  for (std::size_t i = 0; i < slots; ++i)
    if (c->blocks[i] && c->capacity[i] >= want &&
        (best == slots || c->capacity[i] < c->capacity[best]))
      best = i;
  if (best == slots) return new_block(want) + header;
  return std::exchange(c->blocks[best], nullptr) + header;
}

void op_memory::deallocate(void* p, std::size_t size) noexcept {
  if (size > largest) return ::operator delete(p);
  std::byte* block = static_cast<std::byte*>(p) - header;
  thread_cache* c = cache();
  if (!c) return ::operator delete(block);
  const std::size_t capacity = capacity_of(block);
  std::size_t smallest = 0;
  for (std::size_t i = 0; i < slots; ++i) {
    if (!c->blocks[i]) {
      c->blocks[i] = block;
      c->capacity[i] = capacity;
      return;
    }
    if (c->capacity[i] < c->capacity[smallest]) smallest = i;
  }
  // The cache is full: the smallest block goes, so that what is kept fits the most.
  if (c->capacity[smallest] < capacity) {
    std::swap(c->blocks[smallest], block);
    c->capacity[smallest] = capacity;
  }
  ::operator delete(block);
}

bool op_memory::caching() noexcept {
  return !t_cache.gone;
}

void op_memory::release_cached() noexcept {
  release_blocks(t_cache);
}

}  // namespace shmio::detail
