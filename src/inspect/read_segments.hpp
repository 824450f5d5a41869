#pragma once
// The inspector's readers of a segment's contents (read_segments.cpp), for inspect.cpp.

#include <cstddef>
#include <string>

#include "shmio/error.hpp"
#include "shmio/inspect.hpp"

namespace shmio::inspect {

/// Records the first problem found in `info` (later ones are dropped).
void set_problem(segment_info& info, errc e, std::string text);
/// Fills `info` from the segment's `size` bytes at `base` (header checked by the caller), its
/// file `fd` serving the lock queries.
void read_contents(const std::byte* base, std::size_t size, int fd, segment_info& info);

}  // namespace shmio::inspect
