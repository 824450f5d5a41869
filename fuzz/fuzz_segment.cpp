// Fuzz target: segment headers and named events whose bytes the fuzzer controls. Input:
// [kind selector][XOR mask for the file...]. Opens the damaged segment as every kind (only the
// right kind with a sound header may succeed), and drives a damaged event's wait queue.
#include <asio/io_context.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "fuzz_support.hpp"
#include "shmio/named_event.hpp"

using namespace std::chrono_literals;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  static const std::string name = shmio::fuzz::fuzz_name("segment");
  const auto input = std::span(data + 1, size - 1);
  asio::io_context io;
  std::error_code ec;
  shmio::segment::remove(name, ec);
  if (data[0] % 2 == 0) {
    shmio::segment creator =
        shmio::segment::create(name, shmio::object_kind::raw, 64 + data[0] * 16, {}, ec);
    if (ec) return 0;
    shmio::fuzz::xor_into_file(name, shmio::object_kind::raw, input);
    for (std::uint32_t k = 1; k <= 8; ++k) {
      shmio::segment s = shmio::segment::open(name, static_cast<shmio::object_kind>(k), ec);
      if (!ec) {
        unsigned sum = 0;
        for (std::byte b : s.body())
          sum += static_cast<unsigned>(b);
        shmio::fuzz::sink = sum;
      }
    }
    return 0;
  }
  const auto mode = data[0] & 2 ? shmio::event_mode::manual_reset : shmio::event_mode::auto_reset;
  shmio::named_event creator(io.get_executor(), shmio::create_only, name, mode, false, {}, ec);
  if (ec) return 0;
  shmio::fuzz::xor_into_file(name, shmio::object_kind::event, input);
  shmio::named_event opener(io.get_executor(), shmio::open_only, name, mode, {}, ec);
  for (shmio::named_event* e : {&opener, &creator}) {
    if (!e->is_open()) continue;
    e->wait(0ms, ec);
    e->set();
    e->is_set();
    e->wait(0ms, ec);
    e->reset();
  }
  return 0;
}
