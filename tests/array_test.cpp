// shared_array<T> and buffer_read_write: sizes, element access, bounds, element types, kinds,
// and damaged segments.
#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <cstdint>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "shmio/buffer_read_write.hpp"
#include "shmio/detail/layout.hpp"
#include "shmio/detail/names.hpp"
#include "shmio/named_event.hpp"
#include "shmio/shared_array.hpp"
#include "support.hpp"

namespace {

namespace layout = shmio::detail::layout;
using shmio::buffer_read_write;
using shmio::shared_array;
using shmio::test::scoped_name;

constexpr std::size_t npos = std::numeric_limits<std::size_t>::max();

struct point {
  double x, y;
};

std::string file_of(std::string_view name) {
  std::error_code ec;
  return shmio::detail::segment_path(name, ec);
}

// Overwrites `size` bytes at `offset` of the segment file of `name`.
void poke(std::string_view name, std::size_t offset, const void* bytes, std::size_t size) {
  const int fd = ::open(file_of(name).c_str(), O_RDWR | O_CLOEXEC);
  REQUIRE(fd >= 0);
  REQUIRE(::pwrite(fd, bytes, size, static_cast<off_t>(offset)) == static_cast<ssize_t>(size));
  ::close(fd);
}

// Offset in the file of a field of the locked-buffer header.
constexpr std::size_t header_field(std::size_t field_offset) {
  return sizeof(layout::segment_header) + field_offset;
}

}  // namespace

// ---- shared_array -------------------------------------------------------------------------

TEST_CASE("a shared_array is shared by name, with its length", "[array]") {
  asio::io_context io;
  scoped_name name("array");
  shared_array<int> producer(io.get_executor(), shmio::create_only, name, 10);
  shared_array<int> consumer(io.get_executor(), shmio::open_only, name);
  CHECK(producer.size() == 10);
  CHECK(consumer.size() == 10);
  CHECK(std::accumulate(consumer.begin(), consumer.end(), 0) == 0);  // zero-filled
  producer[0] = 123;
  producer[producer.size() - 1] = 456;
  CHECK(consumer[0] == 123);
  CHECK(consumer.at(9) == 456);
  CHECK(std::accumulate(consumer.begin(), consumer.end(), 0) == 579);
  CHECK(reinterpret_cast<std::uintptr_t>(consumer.data()) % 64 == 0);
}

namespace {
struct alignas(128) line_pair {
  std::uint64_t value;
};
struct alignas(4096) page {
  std::uint64_t value;
};
}  // namespace

TEST_CASE("a shared_array's elements are aligned as their type asks, up to a page", "[array]") {
  asio::io_context io;
  scoped_name name("array");
  SECTION("128") {
    shared_array<line_pair> a(io.get_executor(), shmio::create_only, name, 3);
    shared_array<line_pair> b(io.get_executor(), shmio::open_only, name);
    CHECK(reinterpret_cast<std::uintptr_t>(a.data()) % 128 == 0);
    CHECK(reinterpret_cast<std::uintptr_t>(b.data()) % 128 == 0);
    a[2].value = 7;
    CHECK(b[2].value == 7);
  }
  SECTION("4096") {
    shared_array<page> a(io.get_executor(), shmio::create_only, name, 2);
    shared_array<page> b(io.get_executor(), shmio::open_only, name);
    CHECK(reinterpret_cast<std::uintptr_t>(a.data()) % 4096 == 0);
    CHECK(reinterpret_cast<std::uintptr_t>(b.data()) % 4096 == 0);
    a[1].value = 9;
    CHECK(b[1].value == 9);
  }
}

TEST_CASE("shared_array::at throws std::out_of_range past the end", "[array]") {
  asio::io_context io;
  scoped_name name("array");
  shared_array<int> a(io.get_executor(), shmio::create_only, name, 3);
  CHECK_NOTHROW(a.at(2));
  CHECK_THROWS_AS(a.at(3), std::out_of_range);
  CHECK_THROWS_AS(a.at(npos), std::out_of_range);
}

TEST_CASE("shared_array write and copy_to check their ranges first", "[array]") {
  asio::io_context io;
  scoped_name name("array");
  shared_array<point> a(io.get_executor(), shmio::create_only, name, 4);
  const std::array<point, 2> two{point{1, 2}, point{3, 4}};
  a.write(two, 2);
  std::array<point, 4> all{};
  a.copy_to(all);
  CHECK(all[2].x == 1);
  CHECK(all[3].y == 4);

  CHECK_THROWS_AS(a.write(two, 3), std::out_of_range);
  CHECK_THROWS_AS(a.write(two, npos), std::out_of_range);  // start + count would overflow
  CHECK_THROWS_AS(a.copy_to(all, 1), std::out_of_range);
  std::error_code ec;
  a.write(std::span<const point>(two), npos - 1, ec);
  CHECK(ec == shmio::errc::invalid_argument);
  a.copy_to(std::span<point>(all), 5, ec);
  CHECK(ec == shmio::errc::invalid_argument);
  a.write(std::span<const point>(), 4, ec);  // an empty range at the end is fine
  CHECK_FALSE(ec);
  try {
    a.write(two, 3);
  } catch (const std::out_of_range& e) {
    CHECK(std::string(e.what()).find(name.str()) != std::string::npos);
  }
}

TEST_CASE("a shared_array's guarded access reports a holder's death once, with the access done",
          "[array][lock]") {
  asio::io_context io;
  scoped_name name("array");
  shmio::access_options guarded;
  guarded.lock_each_access = true;
  shared_array<point> a(io.get_executor(), shmio::create_only, name, 4, guarded);
  {
    shared_array<point> holder(io.get_executor(), shmio::open_only, name);
    holder.lock();  // closed holding it: counts as a death
  }
  const std::array<point, 1> one{point{5, 6}};
  std::error_code ec;
  a.write(std::span<const point>(one), 1, ec);
  CHECK(ec == shmio::errc::owner_died);
  std::array<point, 1> got{};
  a.copy_to(std::span<point>(got), 1, ec);
  CHECK_FALSE(ec);  // told once
  CHECK(got[0].x == 5);
  CHECK(got[0].y == 6);
}

TEST_CASE("opening a shared_array as another element type is incompatible", "[array]") {
  asio::io_context io;
  scoped_name name("array");
  shared_array<std::int32_t> a(io.get_executor(), shmio::create_only, name, 4);
  std::error_code ec;
  shared_array<double> wrong_size(io.get_executor(), shmio::open_only, name, {}, ec);
  CHECK(ec == shmio::errc::incompatible);
  shared_array<std::array<char, 4>> wrong_align(io.get_executor(), shmio::open_only, name, {}, ec);
  CHECK(ec == shmio::errc::incompatible);
  shared_array<std::uint32_t> same_shape(io.get_executor(), shmio::open_only, name, {}, ec);
  CHECK_FALSE(ec);
  CHECK_THROWS_AS(shared_array<point>(io.get_executor(), shmio::open_only, name), shmio::error);
}

TEST_CASE("a shared_array, buffer and event are different kinds", "[array][buffer]") {
  asio::io_context io;
  scoped_name array_name("array"), buffer_name("buffer"), event_name("event");
  shared_array<std::uint8_t> a(io.get_executor(), shmio::create_only, array_name, 16);
  buffer_read_write b(io.get_executor(), shmio::create_only, buffer_name, 16);
  shmio::named_event e(io.get_executor(), shmio::create_only, event_name,
                       shmio::event_mode::auto_reset);
  std::error_code ec;
  buffer_read_write as_buffer(io.get_executor(), shmio::open_only, array_name, {}, ec);
  CHECK(ec == shmio::errc::incompatible);
  shared_array<std::uint8_t> as_array(io.get_executor(), shmio::open_only, buffer_name, {}, ec);
  CHECK(ec == shmio::errc::incompatible);
  shared_array<std::uint8_t> event_as_array(io.get_executor(), shmio::open_only, event_name, {},
                                            ec);
  CHECK(ec == shmio::errc::incompatible);
}

TEST_CASE("shared_array sizes out of range are refused at create", "[array]") {
  asio::io_context io;
  scoped_name name("array");
  std::error_code ec;
  shared_array<int> empty(io.get_executor(), shmio::create_only, name, 0, {}, ec);
  CHECK(ec == shmio::errc::invalid_argument);
  shared_array<int> huge(io.get_executor(), shmio::create_only, name, npos / 2, {}, ec);
  CHECK(ec == shmio::errc::invalid_argument);
  shared_array<int> ok(io.get_executor(), shmio::open_or_create, name, 5, {}, ec);
  CHECK_FALSE(ec);
  shared_array<int> opened(io.get_executor(), shmio::open_or_create, name, 99, {}, ec);
  CHECK_FALSE(ec);
  CHECK(opened.size() == 5);  // the creator's length wins
}

TEST_CASE("a truncated or damaged locked buffer is refused as corrupted", "[array][hostile]") {
  asio::io_context io;
  scoped_name name("array");
  const std::string what = GENERATE("truncated", "truncated-with-header", "data_size", "count",
                                    "offset", "slots", "writer", "owner_died", "participant_high");
  CAPTURE(what);
  shared_array<std::uint64_t> keep(io.get_executor(), shmio::create_only, name, 8);
  // Cuts the file to the lock state plus one element: `keep` then touches only what is left.
  const std::uint64_t cut = sizeof(layout::segment_header) + layout::locked_data_offset_for(8) + 8;
  if (what == "truncated" || what == "truncated-with-header") {
    const int fd = ::open(file_of(name).c_str(), O_RDWR | O_CLOEXEC);
    REQUIRE(fd >= 0);
    // With the header's total_size cut too, only the body's own sizes can tell.
    if (what == "truncated-with-header") REQUIRE(::pwrite(fd, &cut, 8, 16) == 8);
    REQUIRE(::ftruncate(fd, static_cast<off_t>(cut)) == 0);
    ::close(fd);
  } else if (what == "data_size") {
    const std::uint64_t v = 1;
    poke(name, header_field(offsetof(layout::locked_buffer_header, data_size)), &v, 8);
  } else if (what == "count") {
    const std::uint64_t v = npos / 4;  // count * size overflows
    poke(name, header_field(offsetof(layout::locked_buffer_header, element_count)), &v, 8);
  } else if (what == "offset") {
    const std::uint64_t v = 64;
    poke(name, header_field(offsetof(layout::locked_buffer_header, data_offset)), &v, 8);
  } else if (what == "slots") {
    const std::uint32_t v = 7;
    poke(name,
         header_field(layout::locked_lock_offset + offsetof(layout::rw_lock_control, slot_count)),
         &v, 4);
  } else {
    // Lock words no handle could have left: an unknown bit, a flag of 2, 257 participants.
    const std::uint32_t v = what == "writer" ? 1u << 20 : what == "owner_died" ? 2 : 257;
    const std::size_t field = what == "writer" ? offsetof(layout::rw_lock_control, writer)
                              : what == "owner_died"
                                  ? offsetof(layout::rw_lock_control, owner_died)
                                  : offsetof(layout::rw_lock_control, participant_high);
    poke(name, header_field(layout::locked_lock_offset + field), &v, 4);
  }
  std::error_code ec;
  shared_array<std::uint64_t> opened(io.get_executor(), shmio::open_only, name, {}, ec);
  CHECK(ec == shmio::errc::corrupted);
  CHECK_FALSE(opened.is_open());
}

// ---- buffer_read_write --------------------------------------------------------------------

TEST_CASE("buffer_read_write reads and writes values at offsets", "[buffer]") {
  asio::io_context io;
  scoped_name name("buffer");
  buffer_read_write producer(io.get_executor(), shmio::create_only, name, 1024);
  buffer_read_write consumer(io.get_executor(), shmio::open_only, name);
  CHECK(consumer.size() == 1024);
  producer.write(123);
  producer.write(456, 1000);
  producer.write(point{1.5, 2.5}, 3);  // unaligned offsets are fine: values are copied
  CHECK(consumer.read<int>() == 123);
  CHECK(consumer.read<int>(1000) == 456);
  CHECK(consumer.read<point>(3).y == 2.5);
}

TEST_CASE("buffer_read_write copies ranges of values", "[buffer]") {
  asio::io_context io;
  scoped_name name("buffer");
  buffer_read_write buf(io.get_executor(), shmio::create_only, name, 64);
  const std::vector<std::uint16_t> in{1, 2, 3, 4};
  buf.write(in, 10);
  std::array<std::uint16_t, 4> out{};
  buf.read(out, 10);
  CHECK(out == std::array<std::uint16_t, 4>{1, 2, 3, 4});
  std::vector<std::uint16_t> two(2);
  buf.read(std::span(two), 12);
  CHECK(two == std::vector<std::uint16_t>{2, 3});
  buf.write(std::span<const std::uint16_t>(in).subspan(3), 0);
  CHECK(buf.read<std::uint16_t>(0) == 4);
}

TEST_CASE("buffer_read_write gives in-place access through a callback", "[buffer]") {
  asio::io_context io;
  scoped_name name("buffer");
  buffer_read_write buf(io.get_executor(), shmio::create_only, name, 32);
  const auto n = buf.write_in_place(4, 8, [](std::span<std::byte> bytes) {
    for (std::size_t i = 0; i < bytes.size(); ++i)
      bytes[i] = std::byte(i + 1);
    return bytes.size();
  });
  CHECK(n == 8);
  const int sum = buf.read_in_place(4, 8, [](std::span<const std::byte> bytes) {
    int s = 0;
    for (auto b : bytes)
      s += static_cast<int>(b);
    return s;
  });
  CHECK(sum == 36);
  CHECK_THROWS_AS(buf.read_in_place(30, 4, [](auto) {}), std::out_of_range);
  CHECK_THROWS_AS(buf.write_in_place(npos, 2, [](auto) {}), std::out_of_range);
}

TEST_CASE("every buffer_read_write offset and length is checked, without overflow", "[buffer]") {
  asio::io_context io;
  scoped_name name("buffer");
  buffer_read_write buf(io.get_executor(), shmio::create_only, name, 16);
  buf.write(std::uint32_t{0xabcd}, 12);  // the last four bytes: fits
  CHECK_THROWS_AS(buf.write(std::uint32_t{1}, 13), std::out_of_range);
  CHECK_THROWS_AS(buf.read<std::uint32_t>(13), std::out_of_range);
  CHECK_THROWS_AS(buf.read<std::uint32_t>(npos - 1), std::out_of_range);
  CHECK_THROWS_AS(buf.write(std::uint64_t{1}, npos - 3), std::out_of_range);
  std::error_code ec;
  buf.write(std::uint32_t{1}, 14, ec);
  CHECK(ec == shmio::errc::invalid_argument);
  CHECK(buf.read<std::uint32_t>(12) == 0xabcd);  // nothing was written
  buf.read<std::uint32_t>(npos, ec);
  CHECK(ec == shmio::errc::invalid_argument);
  std::array<std::uint8_t, 17> too_many{};
  CHECK_THROWS_AS(buf.write(too_many, 0), std::out_of_range);
  CHECK_THROWS_AS(buf.read(too_many, 0), std::out_of_range);
  std::error_code size_ec;
  buffer_read_write zero(io.get_executor(), shmio::create_only, name, 0, {}, size_ec);
  CHECK(size_ec == shmio::errc::invalid_argument);
}

TEST_CASE("buffer_read_write supports open_or_create", "[buffer]") {
  asio::io_context io;
  scoped_name name("buffer");
  buffer_read_write a(io.get_executor(), shmio::open_or_create, name, 100);
  buffer_read_write b(io.get_executor(), shmio::open_or_create, name, 5);
  CHECK(b.size() == 100);  // the creator's size wins
  a.write(7);
  CHECK(b.read<int>() == 7);
}
