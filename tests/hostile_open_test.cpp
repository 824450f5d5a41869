// Opens racing a process that flips header fields of a live segment: every object kind's open
// either fails cleanly or succeeds with the geometry it validated, and never crashes. (Shared
// memory is untrusted input: a value checked must be the value used.)

#include <asio/io_context.hpp>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>

#include "shmio/broadcast_buffer.hpp"
#include "shmio/circular_buffer.hpp"
#include "shmio/detail/layout.hpp"
#include "shmio/named_event.hpp"
#include "shmio/rpc_buffer.hpp"
#include "shmio/shared_array.hpp"
#include "support.hpp"

namespace {

using namespace std::chrono_literals;
namespace layout = shmio::detail::layout;
using shmio::test::child;
using shmio::test::raw_segment;
using shmio::test::scoped_name;
using shmio::test::signal_pipe;

constexpr std::size_t body = sizeof(layout::segment_header);
constexpr int opens = 300;

// A child that flips the 32- or 64-bit field at `offset` of the segment file between its
// original value and `bad` until told to stop.
template <class T>
std::unique_ptr<child> flipper(const scoped_name& name, std::size_t offset, T bad,
                               const signal_pipe& stop, const signal_pipe& started) {
  return std::make_unique<child>([&name, offset, bad, &stop, &started] {
    raw_segment seg(name);
    auto& field = seg.at<T>(offset);
    const T good = field;
    started.notify();
    for (std::uint64_t i = 0;; ++i) {
      std::atomic_ref<T>(field).store(i % 2 ? bad : good, std::memory_order_relaxed);
      if (i % 1024 == 0 && stop.wait(0ms) >= 0) break;
    }
    std::atomic_ref<T>(field).store(good, std::memory_order_relaxed);
    return 0;
  });
}

// Runs `open_once` `opens` times while a child flips the field; returns how many opened.
template <class T>
int race(const scoped_name& name, std::size_t offset, T bad,
         const std::function<bool()>& open_once) {
  signal_pipe stop;
  signal_pipe started;
  auto c = flipper(name, offset, bad, stop, started);
  REQUIRE(started.wait() == 1);
  int opened = 0;
  for (int i = 0; i < opens; ++i)
    opened += open_once();
  stop.notify();
  CHECK(c->wait() == 0);
  return opened;
}

}  // namespace

TEST_CASE("ring opens racing a peer that flips its header keep what they validated",
          "[hostile][ring][multiprocess]") {
  asio::io_context io;
  scoped_name name("ring");
  shmio::circular_buffer owner(io.get_executor(), shmio::create_only, name, 4, 16);
  const auto [offset, bad] = GENERATE(table<std::size_t, std::uint64_t>({
      {body + offsetof(layout::ring_header, nodes_offset), 4000},
      {body + offsetof(layout::ring_header, node_size), 4000},
      {body + offsetof(layout::ring_header, node_count), 1u << 20},
  }));
  CAPTURE(offset, bad);
  auto open_once = [&] {
    std::error_code ec;
    shmio::circular_buffer ring(io.get_executor(), shmio::open_only, name, {}, ec);
    if (ec) {
      CHECK(ec == shmio::errc::corrupted);
      return false;
    }
    CHECK(ring.node_size() == 16);
    CHECK(ring.node_count() == 4);
    // And it works: a message round trip through nodes it locates with what it validated.
    std::string buf(16, '\0');
    CHECK(ring.write(asio::buffer("0123456789abcdef", 16), 1s) == 16);
    CHECK(ring.read(asio::buffer(buf), 1s) == 16);
    return true;
  };
  int opened = 0;
  if (offset == body + offsetof(layout::ring_header, nodes_offset))
    opened = race<std::uint64_t>(name, offset, bad, open_once);
  else
    opened = race<std::uint32_t>(name, offset, static_cast<std::uint32_t>(bad), open_once);
  CHECK(opened > 0);
}

TEST_CASE("shared_array opens racing a peer that flips its header keep what they validated",
          "[hostile][lock][multiprocess]") {
  asio::io_context io;
  scoped_name name("array");
  shmio::shared_array<int> owner(io.get_executor(), shmio::create_only, name, 100);
  owner.at(99) = 7;
  const std::size_t count_at = body + offsetof(layout::locked_buffer_header, element_count);
  auto open_once = [&] {
    std::error_code ec;
    shmio::shared_array<int> a(io.get_executor(), shmio::open_only, name, {}, ec);
    if (ec) {
      CHECK(ec == shmio::errc::corrupted);
      return false;
    }
    CHECK(a.size() == 100);
    CHECK(a.at(a.size() - 1) == 7);
    return true;
  };
  CHECK(race<std::uint64_t>(name, count_at, std::uint64_t{1} << 31, open_once) > 0);
}

TEST_CASE("rpc opens racing a peer that flips its header fail cleanly or work",
          "[hostile][rpc][multiprocess]") {
  asio::io_context io;
  scoped_name name("rpc");
  shmio::rpc_buffer owner(io.get_executor(), shmio::create_only, name);
  const auto [offset, bad] = GENERATE(table<std::size_t, std::uint64_t>({
      {body + offsetof(layout::rpc_header, to_owner_offset), 4000},
      {body + offsetof(layout::rpc_header, node_size), 40000},
  }));
  CAPTURE(offset, bad);
  auto open_once = [&] {
    std::error_code ec;
    { shmio::rpc_buffer opener(io.get_executor(), shmio::open_only, name, {}, {}, ec); }
    // A closed end lets go of its descriptors when its loops have seen the close, on the
    // executor: without this, 300 opens would hold them all (and could run out of them).
    io.restart();
    io.poll();
    if (ec) {
      INFO(ec.message());
      CHECK((ec == shmio::errc::corrupted || ec == shmio::errc::busy));
      return false;
    }
    return true;
  };
  int opened = 0;
  if (offset == body + offsetof(layout::rpc_header, to_owner_offset))
    opened = race<std::uint64_t>(name, offset, bad, open_once);
  else
    opened = race<std::uint32_t>(name, offset, static_cast<std::uint32_t>(bad), open_once);
  CHECK(opened > 0);
}

TEST_CASE("broadcast opens racing a peer that flips its header fail cleanly or work",
          "[hostile][broadcast][multiprocess]") {
  asio::io_context io;
  scoped_name name("broadcast");
  shmio::broadcast_options options;
  options.capacity = 8;
  options.message_size = 32;
  shmio::broadcast_buffer owner(io.get_executor(), shmio::create_only, name,
                                shmio::broadcast_role::publisher, options);
  const std::size_t slots_at = body + offsetof(layout::broadcast_header, slots_offset);
  auto open_once = [&] {
    std::error_code ec;
    shmio::broadcast_buffer sub(io.get_executor(), shmio::open_only, name,
                                shmio::broadcast_role::subscriber, {}, ec);
    if (ec) {
      CHECK(ec == shmio::errc::corrupted);
      return false;
    }
    CHECK(sub.message_size() == 32);
    return true;
  };
  CHECK(race<std::uint64_t>(name, slots_at, 1u << 30, open_once) > 0);
}
