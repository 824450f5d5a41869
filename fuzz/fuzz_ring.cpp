// Fuzz target: a circular_buffer whose segment bytes (header, ring header, nodes, wait queues)
// the fuzzer controls. Input: [node_count seed][node_size seed][XOR mask for the file...].
#include <asio/io_context.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "fuzz_support.hpp"
#include "shmio/circular_buffer.hpp"

using namespace std::chrono_literals;

namespace {

// Every operation with a zero timeout: each must return (a message, nothing, or an error).
void drive(shmio::circular_buffer& ring, std::size_t rounds) {
  std::vector<std::byte> buf(ring.node_size());
  std::vector<std::byte> small(ring.node_size() / 2);
  for (std::size_t i = 0; i < rounds; ++i) {
    std::error_code ec;
    switch (i % 4) {
      case 0:
      case 1:
      case 2:
        shmio::fuzz::read_one_way(ring, i % 4, buf, small, ec);
        break;
      case 3:
        ring.write(asio::buffer(buf.data(), i % (buf.size() + 1)), 0ms, ec);
        break;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  static const std::string name = shmio::fuzz::fuzz_name("ring");
  const std::size_t node_count = 2 + data[0] % 6;
  const std::size_t node_size = 1 + data[1] % 96;
  // Half the inputs make a single-writer ring (its roles, its plain claims, its mode bytes); of
  // those, half leave both roles to the handle opened after the damage.
  const auto mode = data[0] & 0x80 ? shmio::ring_mode::spsc : shmio::ring_mode::mpmc;
  const bool seed_apart = mode == shmio::ring_mode::spsc && (data[1] & 0x80) != 0;
  asio::io_context io;
  std::error_code ec;
  shmio::segment::remove(name, ec);
  shmio::circular_buffer creator(io.get_executor(), shmio::create_only, name, node_count, node_size,
                                 mode, {}, ec);
  if (ec) return 0;
  // Some published messages and some free nodes, so that mutations hit live state.
  {
    shmio::circular_buffer seeder(io.get_executor(), shmio::open_only, name, {}, ec);
    shmio::circular_buffer& writer = seed_apart && !ec ? seeder : creator;
    for (std::size_t i = 0; i + 1 < node_count; ++i) {
      const std::string m(i % node_size + 1, static_cast<char>('a' + i));
      writer.write(asio::buffer(m), 0ms, ec);
    }
  }
  shmio::fuzz::xor_into_file(name, shmio::object_kind::circular_buffer,
                             std::span(data + 2, size - 2));
  shmio::circular_buffer opener(io.get_executor(), shmio::open_only, name, {}, ec);
  if (!ec) drive(opener, 3 * node_count + 4);
  drive(creator, 3 * node_count + 4);  // a handle opened before the damage
  return 0;
}
