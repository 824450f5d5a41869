// Fuzz target: a broadcast_buffer whose segment bytes (header, tail, writer lock word, joins,
// wait queues, subscriber table, slots) the fuzzer controls.
// Input: [shape][message size seed][XOR mask for the file...], where shape is
//   bit 0: lossy, bits 1-2: slots - 2, bits 3-4: subscriber entries - 1, bit 5: 1 ms lease,
//   bit 6: the early subscriber reads one message before the damage.
// Small shapes keep the whole table and every slot within the reach of a short mask. Every
// operation has a zero timeout: each must return (a message, nothing, or a clear error).
#include <asio/io_context.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "fuzz_support.hpp"
#include "shmio/broadcast_buffer.hpp"

using namespace std::chrono_literals;

namespace {

using shmio::broadcast_buffer;
using shmio::broadcast_role;

// The errors a damaged segment may give; anything else is a finding.
bool expected(const std::error_code& ec) {
  return !ec || ec == shmio::errc::corrupted || ec == shmio::errc::incompatible ||
         ec == shmio::errc::timed_out || ec == shmio::errc::messages_lost ||
         ec == shmio::errc::evicted || ec == shmio::errc::message_too_large ||
         ec == shmio::errc::too_many_participants || ec == shmio::errc::not_found;
}

void check(const std::error_code& ec) {
  if (!expected(ec)) std::abort();
}

void drive_subscriber(broadcast_buffer& sub, std::size_t rounds) {
  std::vector<std::byte> buf(sub.message_size());
  std::vector<std::byte> small(sub.message_size() / 2);
  for (std::size_t i = 0; i < rounds; ++i) {
    std::error_code ec;
    switch (i % 4) {
      case 0:
      case 1:
      case 2:
        shmio::fuzz::read_one_way(sub, i % 4, buf, small, ec);
        break;
      case 3:
        sub.heartbeat();
        shmio::fuzz::sink = static_cast<unsigned>(sub.subscriber_count() + sub.lost());
        break;
    }
    check(ec);
  }
}

void drive_publisher(broadcast_buffer& pub, std::size_t rounds) {
  std::vector<std::byte> buf(pub.message_size() + 1, std::byte{'m'});
  for (std::size_t i = 0; i < rounds; ++i) {
    std::error_code ec;
    if (i % 2 == 0) {
      pub.write(asio::buffer(buf.data(), i % buf.size()), 0ms, ec);  // the last one too large
    } else {
      pub.write_in_place(
          [i](std::span<std::byte> slot) {
            const std::size_t n = i % (slot.size() + 1);
            for (std::size_t k = 0; k < n; ++k)
              slot[k] = std::byte{'p'};
            return n;
          },
          0ms, ec);
    }
    check(ec);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  static const std::string name = shmio::fuzz::fuzz_name("broadcast");
  const unsigned shape = data[0];
  shmio::broadcast_options options;
  options.mode = shape & 1 ? shmio::broadcast_mode::lossy : shmio::broadcast_mode::reliable;
  options.capacity = 2 + (shape >> 1) % 4;
  options.max_subscribers = 1 + (shape >> 3) % 4;
  options.lease = shape & 32 ? 1ms : 1000ms;
  options.message_size = 1 + data[1] % 96;
  asio::io_context io;
  auto ex = io.get_executor();
  std::error_code ec;
  shmio::segment::remove(name, ec);
  broadcast_buffer creator(ex, shmio::create_only, name, broadcast_role::publisher, options, {},
                           ec);
  if (ec) return 0;
  broadcast_buffer early(ex, shmio::open_only, name, broadcast_role::subscriber, {}, ec);
  if (ec) return 0;
  // Published messages (as many as a reliable writer may write) and a subscriber part-way
  // through them, so that mutations hit live state.
  for (std::size_t i = 0; i < options.capacity; ++i) {
    const std::string m(i % options.message_size + 1, static_cast<char>('a' + i));
    creator.write(asio::buffer(m), 0ms, ec);
  }
  if (shape & 64) {
    char buf[128];
    early.read(asio::buffer(buf), 0ms, ec);
  }
  shmio::fuzz::xor_into_file(name, shmio::object_kind::broadcast, std::span(data + 2, size - 2));

  const std::size_t rounds = 3 * options.capacity + 4;
  broadcast_buffer publisher(ex, shmio::open_only, name, broadcast_role::publisher, {}, ec);
  check(ec);
  broadcast_buffer late(ex, shmio::open_only, name, broadcast_role::subscriber, {}, ec);
  check(ec);
  for (int pass = 0; pass < 2; ++pass) {
    for (broadcast_buffer* sub : {&late, &early})
      if (sub->is_open()) drive_subscriber(*sub, rounds);
    for (broadcast_buffer* pub : {&publisher, &creator})
      if (pub->is_open()) drive_publisher(*pub, rounds);
  }
  // Unsubscribe, and subscribe again on the damaged table.
  late.close();
  broadcast_buffer again(ex, shmio::open_only, name, broadcast_role::subscriber, {}, ec);
  check(ec);
  if (again.is_open()) drive_subscriber(again, rounds);
  if (creator.is_open()) drive_publisher(creator, rounds);
  early.close();
  if (again.is_open()) drive_subscriber(again, rounds);
  return 0;
}
