// Peer commands for the segment tests (tests/segment_test.cpp). A command that signals the test
// does so by writing one byte to a pipe descriptor it inherited, whose number is an argument.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <system_error>

#include "peer.hpp"
#include "shmio/segment.hpp"

namespace {

// The same pattern as segment_test.cpp's fill_pattern / has_pattern.
std::byte pattern_byte(std::size_t i, unsigned seed) {
  return static_cast<std::byte>((i * 31 + seed * 7 + 1) & 0xff);
}

void fill_pattern(std::span<std::byte> body, unsigned seed) {
  for (std::size_t i = 0; i < body.size(); ++i)
    body[i] = pattern_byte(i, seed);
}

bool has_pattern(std::span<const std::byte> body, unsigned seed) {
  for (std::size_t i = 0; i < body.size(); ++i)
    if (body[i] != pattern_byte(i, seed)) return false;
  return true;
}

void send_byte(int fd, char c) {
  if (::write(fd, &c, 1) != 1) ::_exit(96);
}

// Blocks until a byte arrives on `fd` or its write end is closed everywhere.
void wait_byte(int fd) {
  char c;
  while (::read(fd, &c, 1) < 0) {
  }
}

}  // namespace

// segment-create-and-wait NAME BODY_SIZE SEED READY_FD
// Creates NAME (object_kind::raw) with the pattern of SEED, writes 'r' to READY_FD (or 'e' if
// the create failed, then exits 1) and then sleeps until it is killed.
SHMIO_PEER_COMMAND("segment-create-and-wait", args) {
  if (args.size() != 4) return 64;  // usage
  const auto seed = static_cast<unsigned>(std::stoul(args[2]));
  const int ready_fd = std::stoi(args[3]);
  std::error_code ec;
  auto s = shmio::segment::create(
      args[0], shmio::object_kind::raw, std::stoull(args[1]),
      [&](std::span<std::byte> body) { fill_pattern(body, seed); }, ec);
  if (ec) {
    send_byte(ready_fd, 'e');
    return 1;
  }
  send_byte(ready_fd, 'r');
  for (;;)
    ::pause();
}

// segment-open-and-wait NAME READY_FD RELEASE_FD
// Opens NAME (object_kind::raw), writes 'o' to READY_FD (or 'e' if the open failed, then exits
// 1), waits for a byte (or EOF) on RELEASE_FD, closes the segment and exits 0.
SHMIO_PEER_COMMAND("segment-open-and-wait", args) {
  if (args.size() != 3) return 64;  // usage
  const int ready_fd = std::stoi(args[1]);
  const int release_fd = std::stoi(args[2]);
  std::error_code ec;
  auto s = shmio::segment::open(args[0], shmio::object_kind::raw, ec);
  if (ec) {
    send_byte(ready_fd, 'e');
    return 1;
  }
  send_byte(ready_fd, 'o');
  wait_byte(release_fd);
  s.close();
  return 0;
}

// segment-check NAME BODY_SIZE SEED
// Opens NAME (object_kind::raw) and checks its body. Exit code: 0 it has BODY_SIZE bytes with
// the pattern of SEED; 1 the open failed; 2 the size differs; 3 the bytes differ.
SHMIO_PEER_COMMAND("segment-check", args) {
  if (args.size() != 3) return 64;  // usage
  std::error_code ec;
  auto s = shmio::segment::open(args[0], shmio::object_kind::raw, ec);
  if (ec) return 1;
  if (s.body().size() != std::stoull(args[1])) return 2;
  if (!has_pattern(s.body(), static_cast<unsigned>(std::stoul(args[2])))) return 3;
  return 0;
}
