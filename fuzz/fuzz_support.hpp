#pragma once
// Shared by the fuzz targets: a real segment whose file bytes the fuzzer then changes.
//
// The target creates a valid object (so its file is held open, as a live peer's would be),
// XORs the fuzzer's input into the file from byte 0 on (zero bytes leave a byte as it is, so
// the seed corpus can be small), and then drives the object through a second, fresh handle and
// through the first one. Any crash, sanitizer report or hang is a finding; errors are expected.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include <asio/buffer.hpp>

#include "shmio/segment.hpp"

namespace shmio::fuzz {

/// Bytes read are summed into this, so the reads cannot be optimised away.
inline volatile unsigned sink = 0;

/// One zero-timeout read of the kind picked by `round` (0: whole buffer, 1: a buffer too small
/// for most messages, 2: in place), from anything with circular_buffer's read calls.
template <class Reader>
void read_one_way(Reader& r, std::size_t round, std::vector<std::byte>& buf,
                  std::vector<std::byte>& small, std::error_code& ec) {
  using namespace std::chrono_literals;
  switch (round % 3) {
    case 0:
      r.read(asio::buffer(buf), 0ms, ec);
      break;
    case 1:
      r.read(asio::buffer(small), 0ms, ec);
      break;
    default:
      r.read_in_place(
          [](std::span<const std::byte> m) {
            unsigned sum = 0;
            for (std::byte b : m)
              sum += static_cast<unsigned>(b);
            sink = sum;
          },
          0ms, ec);
  }
}

inline std::string fuzz_name(const char* what) {
  return std::string("shmio-fuzz.") + what + "." + std::to_string(::getpid());
}

/// XORs `input` into the file of the segment `name` (a live one: the caller holds it open).
inline void xor_into_file(std::string_view name, object_kind kind,
                          std::span<const std::uint8_t> input) {
  std::error_code ec;
  segment probe = segment::open(name, kind, ec);
  if (ec) return;
  const int fd = ::open(probe.path().c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && st.st_size > 0) {
    const auto size = static_cast<std::size_t>(st.st_size);
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p != MAP_FAILED) {
      auto* bytes = static_cast<std::uint8_t*>(p);
      for (std::size_t i = 0; i < input.size() && i < size; ++i)
        bytes[i] ^= input[i];
      ::munmap(p, size);
    }
  }
  ::close(fd);
}

}  // namespace shmio::fuzz
