#pragma once
// Range checks for shared_array and buffer_read_write: written so that no sum can overflow.

#include <cstddef>
#include <string_view>

namespace shmio::detail {

/// True if [start, start + length) lies within [0, size).
constexpr bool in_bounds(std::size_t start, std::size_t length, std::size_t size) noexcept {
  return start <= size && length <= size - start;
}

/// Throws std::out_of_range, e.g. "write 'jobs': 8 bytes at offset 1020 exceed the 1024 bytes".
[[noreturn]] void throw_out_of_range(std::string_view operation, std::string_view name,
                                     std::size_t start, std::size_t length, std::size_t size,
                                     std::string_view unit);

}  // namespace shmio::detail
