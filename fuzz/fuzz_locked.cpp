// Fuzz target: the locked-buffer body of shared_array and buffer_read_write (element size,
// alignment, count and data offset; the reader/writer lock's writer word, owner_died flag,
// participant count, wait queues and reader slots), whose bytes the fuzzer controls.
// Input: [shape][XOR mask for the file...], where shape is
//   bit 0: a buffer_read_write (else a shared_array<std::uint64_t>), bits 1-2: length seed,
//   bits 3-4: what is held at the damage (nothing, a share of the creator, the creator's lock,
//   a share a second handle gave up by closing), bits 5 and 6 both set: waits long enough
//   (15 ms) to pass the lock's patience, so that the reclaiming of a dead or impossible holder
//   runs too (a quarter of the inputs: they are slow).
// Opening must succeed or fail with incompatible/corrupted; every lock operation must return
// within its timeout (a hang is a libFuzzer timeout), and data access stays within the length
// the handle validated.
#include <asio/io_context.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <type_traits>

#include "fuzz_support.hpp"
#include "shmio/buffer_read_write.hpp"
#include "shmio/shared_array.hpp"

using namespace std::chrono_literals;

namespace {

void check_open(const std::error_code& ec) {
  if (ec && ec != shmio::errc::incompatible && ec != shmio::errc::corrupted &&
      ec != shmio::errc::not_found && ec != shmio::errc::too_many_participants)
    std::abort();
}

void check_lock(const std::error_code& ec) {
  if (ec && ec != shmio::errc::owner_died && ec != shmio::errc::timed_out) std::abort();
}

// Locks and unlocks in every way, with short timeouts, then touches the data.
template <class Access>
void drive(shmio::rw_lock& lock, std::chrono::milliseconds long_wait, Access&& access) {
  std::error_code ec;
  for (auto timeout : {0ms, long_wait}) {
    if (lock.try_lock_for(timeout, ec)) lock.unlock();
    check_lock(ec);
    if (lock.try_lock_shared_for(timeout, ec)) {
      access();
      lock.unlock_shared();
    }
    check_lock(ec);
    lock.unlock();         // holds nothing: must do nothing
    lock.unlock_shared();  // as above
  }
  access();
}

template <class Handle>
void drive_all(Handle& a, Handle& b, std::chrono::milliseconds long_wait, auto&& access) {
  for (Handle* h : {&a, &b})
    if (h->is_open()) drive(*h, long_wait, [&] { access(*h); });
}

void touch_bytes(shmio::buffer_read_write& buf) {
  std::error_code ec;
  const std::size_t n = buf.size();
  buf.write(std::uint32_t{0x5eed}, n > 4 ? n - 4 : 0, ec);  // lock_each_access: may time out
  shmio::fuzz::sink = buf.read<std::uint32_t>(n > 4 ? n - 4 : 0, ec);
  buf.read_bytes({}, n, ec);  // empty, at the very end: in bounds
}

void touch_elements(shmio::shared_array<std::uint64_t>& arr) {
  std::error_code ec;
  const std::uint64_t v = 7;
  arr.write(std::span(&v, 1), arr.size() - 1, ec);
  std::uint64_t out = 0;
  arr.copy_to(std::span(&out, 1), 0, ec);
  shmio::fuzz::sink = static_cast<unsigned>(out + arr[arr.size() - 1]);
}

template <class Handle>
void run(const std::string& name, shmio::object_kind kind, std::size_t length, unsigned shape,
         std::span<const std::uint8_t> mask, auto&& access) {
  asio::io_context io;
  auto ex = io.get_executor();
  shmio::access_options options;
  options.lock_each_access = true;
  options.lock_timeout = 0ms;
  std::error_code ec;
  Handle creator(ex, shmio::create_only, name, length, options, ec);
  if (ec) return;
  Handle second(ex, shmio::open_only, name, options, ec);
  if (ec) return;
  switch ((shape >> 3) % 4) {
    case 1:
      creator.try_lock_shared_for(0ms, ec);
      break;
    case 2:
      creator.try_lock_for(0ms, ec);
      break;
    case 3:
      second.try_lock_shared_for(0ms, ec);
      second.close();  // a share given up by closing: reported to the next acquirer
      break;
  }
  shmio::fuzz::xor_into_file(name, kind, mask);
  Handle opener(ex, shmio::open_only, name, options, ec);
  check_open(ec);
  if constexpr (std::is_same_v<Handle, shmio::shared_array<std::uint64_t>>) {
    // The damaged segment opened as another element type: incompatible, or (had the damage
    // made it a sound array of 4-byte elements) open.
    shmio::shared_array<std::uint32_t> other(ex, shmio::open_only, name, options, ec);
    check_open(ec);
    if (!ec) shmio::fuzz::sink = other[other.size() - 1];
  }
  const auto long_wait = (shape & 0x60) == 0x60 ? 15ms : 0ms;
  drive_all(opener, creator, long_wait, access);
  if (second.is_open()) drive(second, 0ms, [&] { access(second); });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  static const std::string name = shmio::fuzz::fuzz_name("locked");
  const unsigned shape = data[0];
  const auto mask = std::span(data + 1, size - 1);
  const std::size_t length = 1 + (shape >> 1) % 4 * 5;
  std::error_code ec;
  shmio::segment::remove(name, ec);
  if (shape & 1) {
    run<shmio::buffer_read_write>(name, shmio::object_kind::buffer_read_write, length, shape, mask,
                                  touch_bytes);
  } else {
    run<shmio::shared_array<std::uint64_t>>(name, shmio::object_kind::shared_array, length, shape,
                                            mask, touch_elements);
  }
  return 0;
}
