#include "shmio/detail/op_memory.hpp"

#include <array>
#include <cstdint>
#include <utility>

namespace shmio::detail {

namespace {

// Each block starts with a header that holds its capacity (a block found in the cache may be
// larger than what was asked for), and keeps the rest aligned for any scalar type.
constexpr std::size_t header = alignof(std::max_align_t);
constexpr std::size_t granule = 64;

// Trivially destructible, so that they stay usable until the thread is gone: an operation may
// be freed by a destructor that runs at the thread's exit after the reaper's (the thread then
// caches nothing more).
thread_local std::array<std::byte*, op_memory::slots> t_blocks{};
thread_local bool t_gone = false;

void release_blocks() noexcept {
  for (std::byte*& b : t_blocks)
    ::operator delete(std::exchange(b, nullptr));
}

// Frees the thread's blocks as it exits.
struct reaper {
  ~reaper() {
    release_blocks();
    t_gone = true;
  }
};
thread_local reaper t_reaper;

// This thread's blocks, or none once it is exiting.
std::array<std::byte*, op_memory::slots>* cache() noexcept {
  if (t_gone) return nullptr;
  static_cast<void>(&t_reaper);  // constructed (and its exit registered) at the first use
  return &t_blocks;
}

std::size_t capacity_of(const std::byte* block) noexcept {
  std::size_t cap;
  __builtin_memcpy(&cap, block, sizeof cap);
  return cap;
}

std::byte* new_block(std::size_t capacity) {
  auto* block = static_cast<std::byte*>(::operator new(header + capacity));
  __builtin_memcpy(block, &capacity, sizeof capacity);
  return block;
}

}  // namespace

void* op_memory::allocate(std::size_t size) {
  if (size > largest) return ::operator new(size);
  const std::size_t want = (size + granule - 1) / granule * granule;
  auto* cached = cache();
  if (!cached) return new_block(want) + header;
  auto& blocks = *cached;
  std::size_t best = slots;
  for (std::size_t i = 0; i < slots; ++i) {
    const std::byte* b = blocks[i];
    if (b && capacity_of(b) >= want &&
        (best == slots || capacity_of(b) < capacity_of(blocks[best])))
      best = i;
  }
  std::byte* block;
  if (best != slots) {
    block = blocks[best];
    blocks[best] = nullptr;
  } else {
    block = new_block(want);
  }
  return block + header;
}

void op_memory::deallocate(void* p, std::size_t size) noexcept {
  if (size > largest) return ::operator delete(p);
  std::byte* block = static_cast<std::byte*>(p) - header;
  auto* cached = cache();
  if (!cached) return ::operator delete(block);
  auto& blocks = *cached;
  for (auto& slot : blocks)
    if (!slot) {
      slot = block;
      return;
    }
  // The cache is full: let the smallest block go, so that what is kept fits the most.
  std::size_t smallest = 0;
  for (std::size_t i = 1; i < slots; ++i)
    if (capacity_of(blocks[i]) < capacity_of(blocks[smallest])) smallest = i;
  if (capacity_of(blocks[smallest]) < capacity_of(block)) std::swap(blocks[smallest], block);
  ::operator delete(block);
}

void op_memory::release_cached() noexcept {
  release_blocks();
}

}  // namespace shmio::detail
