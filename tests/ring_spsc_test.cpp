// Tests of a single-writer ring (shmio::ring_mode::spsc): its mode, the writer's and the
// reader's roles (taken at the first write or read, refused to a second handle, taken over from
// a dead one), messages and wake-ups between processes with parks on both sides, and damage to
// the bytes that make it one.
#include <unistd.h>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/use_awaitable.hpp>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "shmio/circular_buffer.hpp"
#include "shmio/detail/layout.hpp"
#include "shmio/detail/platform.hpp"
#include "shmio/detail/ring.hpp"
#include "shmio/detail/wait_queue.hpp"
#include "shmio/inspect.hpp"
#include "support.hpp"

namespace {

using namespace std::chrono_literals;
using shmio::circular_buffer;
using shmio::ring_mode;
using shmio::test::child;
using shmio::test::peer_path;
using shmio::test::raw_segment;
using shmio::test::scoped_name;
using shmio::test::signal_pipe;
namespace layout = shmio::detail::layout;

// Where the bytes that make a ring single-writer lie in its file (docs/protocol.md).
constexpr std::size_t body = sizeof(layout::segment_header);
constexpr std::size_t flags_at = body + offsetof(layout::ring_header, flags);
constexpr std::size_t tail_role_at =
    body + offsetof(layout::ring_state, tail) + offsetof(layout::ring_cursor, role);
constexpr std::size_t readers_flags_at =
    body + offsetof(layout::ring_state, readers) + offsetof(layout::wait_queue, flags);

std::size_t put(circular_buffer& ring, const std::string& m, std::error_code& ec) {
  return ring.write(asio::buffer(m), 0ms, ec);
}

std::string take(circular_buffer& ring, std::error_code& ec) {
  std::string buf(ring.node_size(), '\0');
  const std::size_t n = ring.read(asio::buffer(buf), 0ms, ec);
  return ec ? "<" + ec.message() + ">" : buf.substr(0, n);
}

std::string take(circular_buffer& ring) {
  std::error_code ec;
  return take(ring, ec);
}

}  // namespace

TEST_CASE("a single-writer ring says so, and an open of the other mode is refused",
          "[ring][spsc]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 4, 16, ring_mode::spsc);
  CHECK(ring.mode() == ring_mode::spsc);
  circular_buffer opened(io.get_executor(), shmio::open_only, name);
  CHECK(opened.mode() == ring_mode::spsc);
  circular_buffer either(io.get_executor(), shmio::open_or_create, name, 4, 16);
  CHECK(either.mode() == ring_mode::spsc);
  std::error_code ec;
  circular_buffer other(io.get_executor(), shmio::open_or_create, name, 4, 16, ring_mode::mpmc, {},
                        ec);
  CHECK(ec == shmio::errc::incompatible);
  CHECK_FALSE(other.is_open());
  CHECK(other.mode() == ring_mode::mpmc);
  CHECK_THROWS_AS(
      circular_buffer(io.get_executor(), shmio::open_or_create, name, 4, 16, ring_mode::mpmc),
      shmio::error);
  circular_buffer same(io.get_executor(), shmio::open_or_create, name, 4, 16, ring_mode::spsc);
  CHECK(same.mode() == ring_mode::spsc);

  scoped_name bad("ring");
  circular_buffer invalid(io.get_executor(), shmio::create_only, bad, 4, 16,
                          static_cast<ring_mode>(7), {}, ec);
  CHECK(ec == shmio::errc::invalid_argument);
  CHECK(circular_buffer(io.get_executor(), shmio::create_only, bad, 4, 16).mode() ==
        ring_mode::mpmc);
}

TEST_CASE("a single-writer ring has one writing and one reading handle at a time", "[ring][spsc]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer a(io.get_executor(), shmio::create_only, name, 4, 16, ring_mode::spsc);
  circular_buffer b(io.get_executor(), shmio::open_only, name);
  std::error_code ec;
  CHECK(put(a, "a0", ec) == 2);  // a writes from now on
  CHECK_FALSE(ec);
  CHECK(put(b, "b0", ec) == 0);
  CHECK(ec == shmio::errc::busy);
  CHECK_THROWS_AS(b.write(asio::buffer("b1", 2), 0ms), shmio::error);
  CHECK(take(b) == "a0");  // b reads from now on: reading is a role of its own
  CHECK(put(a, "a1", ec) == 2);
  CHECK(take(a, ec) == "<" + std::error_code(shmio::errc::busy).message() + ">");

  // The async forms and the fast forms report it too, without waiting.
  std::error_code async_ec;
  b.async_write(asio::buffer("b2", 2), [&](std::error_code e, std::size_t) { async_ec = e; });
  std::string buf(16, '\0');
  std::error_code read_ec;
  a.async_read(asio::buffer(buf), [&](std::error_code e, std::size_t) { read_ec = e; });
  std::error_code co_ec;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        try {
          co_await b.co_write(asio::buffer("b3", 2));
        } catch (const std::system_error& e) {
          co_ec = e.code();
        }
      },
      asio::detached);
  io.run_for(10s);
  CHECK(io.stopped());
  CHECK(async_ec == shmio::errc::busy);
  CHECK(read_ec == shmio::errc::busy);
  CHECK(co_ec == shmio::errc::busy);

  // Closing the writer frees its role for the next handle to write.
  a.close();
  CHECK(put(b, "b4", ec) == 2);
  CHECK(take(b) == "a1");
  CHECK(take(b) == "b4");
  circular_buffer c(io.get_executor(), shmio::open_only, name);
  CHECK(put(c, "c0", ec) == 0);
  CHECK(ec == shmio::errc::busy);
}

TEST_CASE(
    "a writer of a single-writer ring killed mid-message is replaced, and its message "
    "skipped",
    "[ring][spsc][process]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer reader(io.get_executor(), shmio::create_only, name, 4, 16, ring_mode::spsc);
  signal_pipe holding;
  child writer([&] {
    asio::io_context child_io;
    circular_buffer ring(child_io.get_executor(), shmio::open_only, name);
    ring.write(asio::buffer("w0", 2), 1s);
    ring.write_in_place(
        [&](std::span<std::byte> node) -> std::size_t {
          node[0] = std::byte{'x'};
          holding.notify();
          for (;;)
            ::pause();  // killed here, holding the node
        },
        1s);
    return 1;
  });
  REQUIRE(holding.wait() == 1);
  circular_buffer next(io.get_executor(), shmio::open_only, name);
  std::error_code ec;
  CHECK(put(next, "n0", ec) == 0);  // the writer lives: its role is its own
  CHECK(ec == shmio::errc::busy);
  CHECK(writer.kill9() == 128 + SIGKILL);

  CHECK(put(next, "n1", ec) == 2);  // taken over
  CHECK_FALSE(ec);
  CHECK(take(reader) == "w0");
  // The half-written node is skipped once its writer is known dead (~10 ms), never delivered.
  std::string buf(16, '\0');
  const std::size_t n = reader.read(asio::buffer(buf), shmio::test::default_bound, ec);
  CHECK_FALSE(ec);
  CHECK(buf.substr(0, n) == "n1");
}

TEST_CASE("a reader of a single-writer ring killed mid-message is replaced, and its node freed",
          "[ring][spsc][process]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer writer(io.get_executor(), shmio::create_only, name, 2, 16, ring_mode::spsc);
  std::error_code ec;
  REQUIRE(put(writer, "m0", ec) == 2);
  REQUIRE(put(writer, "m1", ec) == 2);
  signal_pipe holding;
  child reader([&] {
    asio::io_context child_io;
    circular_buffer ring(child_io.get_executor(), shmio::open_only, name);
    ring.read_in_place(
        [&](std::span<const std::byte>) {
          holding.notify();
          for (;;)
            ::pause();  // killed here, holding the node of m0
        },
        1s);
    return 1;
  });
  REQUIRE(holding.wait() == 1);
  circular_buffer next(io.get_executor(), shmio::open_only, name);
  CHECK(take(next, ec) == "<" + std::error_code(shmio::errc::busy).message() + ">");
  CHECK(reader.kill9() == 128 + SIGKILL);
  CHECK(take(next) == "m1");  // taken over; m0 was lost with its reader
  // The writer frees the dead reader's node once it knows (~10 ms), and the ring goes on.
  CHECK(writer.write(asio::buffer("m2", 2), shmio::test::default_bound, ec) == 2);
  CHECK(writer.write(asio::buffer("m3", 2), shmio::test::default_bound, ec) == 2);
  CHECK(take(next) == "m2");
  CHECK(take(next) == "m3");
}

TEST_CASE("an opener that reuses a dead writer's participant number clears its role",
          "[ring][spsc][process]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 4, 16, ring_mode::spsc);
  raw_segment raw(name);
  auto& role = raw.at<std::atomic<std::uint32_t>>(tail_role_at);
  child writer([&] {
    asio::io_context child_io;
    circular_buffer mine(child_io.get_executor(), shmio::open_only, name);
    mine.write(asio::buffer("w0", 2), 1s);
    ::_exit(0);  // no close: the role stays, naming a number nobody holds
    return 1;
  });
  REQUIRE(writer.wait() == 0);
  const std::uint32_t dead = role.load();
  REQUIRE(dead != 0);
  // Participant numbers are taken lowest free first: this open gets the dead writer's.
  circular_buffer reopened(io.get_executor(), shmio::open_only, name);
  CHECK(role.load() == 0);
  std::error_code ec;
  CHECK(put(ring, "m", ec) == 1);  // anyone may write now
  CHECK(role.load() != dead);
}

TEST_CASE("a forked child that closes its copy of a single-writer ring leaves the roles alone",
          "[ring][spsc][process]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 4, 16, ring_mode::spsc);
  std::error_code ec;
  REQUIRE(put(ring, "m0", ec) == 2);
  REQUIRE(take(ring) == "m0");
  raw_segment raw(name);
  const std::uint32_t writer = raw.at<std::atomic<std::uint32_t>>(tail_role_at).load();
  child copy([&] {
    ring.close();
    return 0;
  });
  REQUIRE(copy.wait() == 0);
  CHECK(raw.at<std::atomic<std::uint32_t>>(tail_role_at).load() == writer);
  circular_buffer other(io.get_executor(), shmio::open_only, name);
  CHECK(put(other, "x", ec) == 0);
  CHECK(ec == shmio::errc::busy);
  CHECK(put(ring, "m1", ec) == 2);
  CHECK(take(ring) == "m1");
}

TEST_CASE(
    "a blocking call on a single-writer ring's handle is busy while an async operation "
    "of its direction is pending there",
    "[ring][spsc][async]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 2, 16, ring_mode::spsc);
  std::string buf(16, '\0');
  std::error_code async_ec;
  std::size_t async_n = 0;
  bool done = false;
  ring.async_read(asio::buffer(buf), [&](std::error_code e, std::size_t n) {
    async_ec = e;
    async_n = n;
    done = true;
  });
  io.poll();
  REQUIRE_FALSE(done);
  std::error_code ec;
  CHECK(take(ring, ec) == "<" + std::error_code(shmio::errc::busy).message() + ">");
  CHECK(put(ring, "w0", ec) == 2);  // the other direction is free
  CHECK(put(ring, "w1", ec) == 2);
  io.run_for(shmio::test::default_bound);
  REQUIRE(done);
  CHECK_FALSE(async_ec);
  CHECK(buf.substr(0, async_n) == "w0");
  CHECK(take(ring) == "w1");  // no longer pending: the blocking read may claim
}

TEST_CASE("messages cross a 2-node single-writer ring between processes, both sides parking",
          "[ring][spsc][process]") {
  // Two nodes: each side waits for the other at almost every message, so the parks (and the
  // heavy fence that keeps their wake-ups) are exercised thousands of times. A lost wake-up is a
  // blocking call that runs into its bound: the peer exits with exit_timed_out, or our read
  // reports timed_out.
  const std::string direction = GENERATE("peer writes", "peer reads");
  CAPTURE(direction);
  asio::io_context io;
  scoped_name name("ring");
  // Parking at once, this side sleeps at nearly every wait (the peer spins first, as usual).
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 2, 16, ring_mode::spsc,
                       shmio::wait_strategy::park_only());
  constexpr int count = 10000;
  std::string buf(16, '\0');
  if (direction == "peer writes") {
    child writer({peer_path(), "ring-write", name.str(), "0", std::to_string(count)});
    for (int i = 0; i < count; ++i) {
      std::error_code ec;
      const std::size_t n = ring.read(asio::buffer(buf), shmio::test::default_bound, ec);
      REQUIRE_FALSE(ec);
      REQUIRE(buf.substr(0, n) == "m" + std::to_string(i));
    }
    CHECK(writer.wait() == 0);
  } else {
    child reader({peer_path(), "ring-read", name.str(), "0", std::to_string(count)});
    for (int i = 0; i < count; ++i) {
      const std::string m = "m" + std::to_string(i);
      std::error_code ec;
      ring.write(asio::buffer(m), shmio::test::default_bound, ec);
      REQUIRE_FALSE(ec);
    }
    CHECK(reader.wait() == 0);  // 0: every message arrived, in order
  }
}

TEST_CASE("a parked async read of a single-writer ring is woken by every write of a process",
          "[ring][spsc][process][async]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 2, 16, ring_mode::spsc);
  constexpr int count = 5000;
  child writer({peer_path(), "ring-write", name.str(), "0", std::to_string(count)});
  int got = 0;
  bool in_order = true;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        std::string buf(16, '\0');
        for (; got < count; ++got) {
          const std::size_t n = co_await ring.async_read(asio::buffer(buf), asio::use_awaitable);
          in_order = in_order && buf.substr(0, n) == "m" + std::to_string(got);
        }
      },
      asio::detached);
  io.run_for(shmio::test::default_bound * 3);
  CHECK(got == count);
  CHECK(in_order);
  CHECK(writer.wait() == 0);
}

TEST_CASE("a single-writer ring's role held by a participant that is gone is taken over",
          "[ring][spsc]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 4, 16, ring_mode::spsc);
  raw_segment raw(name);
  // A number nobody holds (no handle has its lock byte), and one past every number.
  for (std::uint32_t gone : {std::uint32_t{4000}, std::uint32_t{0xFFFF'FFFF}}) {
    CAPTURE(gone);
    raw.at<std::atomic<std::uint32_t>>(tail_role_at).store(gone);
    std::error_code ec;
    CHECK(put(ring, "m", ec) == 1);
    CHECK_FALSE(ec);
    CHECK(take(ring) == "m");
    circular_buffer again(io.get_executor(), shmio::open_only, name);  // a fresh handle
    ring = std::move(again);
  }
}

TEST_CASE("a single-writer ring's writer whose role word was written over stops writing",
          "[ring][spsc]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer a(io.get_executor(), shmio::create_only, name, 4, 16, ring_mode::spsc);
  circular_buffer b(io.get_executor(), shmio::open_only, name);
  std::error_code ec;
  REQUIRE(put(a, "a0", ec) == 2);
  REQUIRE(take(b) == "a0");  // b reads: its number is alive
  raw_segment raw(name);
  auto& writer = raw.at<std::atomic<std::uint32_t>>(tail_role_at);
  const std::uint32_t a_number = writer.load();
  const std::uint32_t b_number =
      raw.at<std::atomic<std::uint32_t>>(tail_role_at + sizeof(layout::ring_cursor)).load();
  REQUIRE(b_number != a_number);
  writer.store(b_number);  // now it names another live handle
  CHECK(put(a, "a1", ec) == 0);
  CHECK(ec == shmio::errc::busy);
  writer.store(0);  // and now nobody: a takes it again
  CHECK(put(a, "a2", ec) == 2);
  CHECK(writer.load() == a_number);
  CHECK(take(b) == "a2");
}

TEST_CASE(
    "a blocking read of a single-writer ring is busy while an in-place callback of the "
    "same handle holds a claim",
    "[ring][spsc][async]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 4, 16, ring_mode::spsc);
  std::error_code ec;
  REQUIRE(put(ring, "m0", ec) == 2);
  REQUIRE(put(ring, "m1", ec) == 2);
  std::string inside;
  std::error_code done_ec;
  ring.async_read_in_place(
      [&](std::span<const std::byte>) { inside = take(ring); },  // its claim is held here
      [&](std::error_code e, std::size_t) { done_ec = e; });
  io.run_for(shmio::test::default_bound);
  CHECK(inside == "<" + std::error_code(shmio::errc::busy).message() + ">");
  CHECK_FALSE(done_ec);
  CHECK(take(ring) == "m1");  // the claim given back: the blocking read may claim again
}

TEST_CASE("the inspector shows a single-writer ring and who holds its roles",
          "[ring][spsc][inspect]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 4, 16, ring_mode::spsc);
  std::error_code ec;
  auto info = shmio::inspect::examine(name, ec);
  REQUIRE_FALSE(ec);
  REQUIRE(info.ring);
  CHECK(info.ring->single);
  CHECK(info.ring->writer == 0);
  CHECK(info.ring->reader == 0);
  put(ring, "m", ec);
  info = shmio::inspect::examine(name, ec);
  REQUIRE(info.ring);
  CHECK(info.ring->writer != 0);
  CHECK(info.ring->reader == 0);
  take(ring);
  info = shmio::inspect::examine(name, ec);
  REQUIRE(info.ring);
  CHECK(info.ring->reader == info.ring->writer);  // one handle holds both

  scoped_name plain("ring");
  circular_buffer mpmc(io.get_executor(), shmio::create_only, plain, 4, 16);
  info = shmio::inspect::examine(plain, ec);
  REQUIRE(info.ring);
  CHECK_FALSE(info.ring->single);
}

TEST_CASE("a ring whose mode bytes are damaged is refused at open", "[ring][spsc][corrupted]") {
  asio::io_context io;
  const std::string what = GENERATE("unknown flag", "spsc queue unmarked", "mpmc queue marked");
  CAPTURE(what);
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 4, 16,
                       what == "mpmc queue marked" ? ring_mode::mpmc : ring_mode::spsc);
  {
    raw_segment raw(name);
    if (what == "unknown flag") raw.at<std::uint32_t>(flags_at) = 3;
    if (what == "spsc queue unmarked")
      raw.at<std::atomic<std::uint32_t>>(readers_flags_at).store(0);
    if (what == "mpmc queue marked")
      raw.at<std::atomic<std::uint32_t>>(readers_flags_at).store(layout::queue_heavy_fence);
  }
  std::error_code ec;
  circular_buffer opened(io.get_executor(), shmio::open_only, name, {}, ec);
  CHECK(ec == shmio::errc::corrupted);
  const auto info = shmio::inspect::examine(name, ec);
  CHECK(info.status == shmio::errc::corrupted);
}

TEST_CASE("a single-writer ring's publication racing a reader's park is seen by one of them",
          "[ring][spsc][wait_queue]") {
  // The store-buffering race, run in lock step many times: the writer publishes (a release
  // store, no fence) and then reads `parked`; the reader arms a sleeper's slot (with the heavy
  // fence) and then re-checks the ring. At least one must see the other: the re-check finds the
  // message, or the publication's notify claims the arming; a round where neither does is a
  // wake-up lost. (Without the heavy fence the hardware may let both miss; that window did not
  // open here in 60 000 rounds, so what this holds in practice is the order of the code: the
  // publication before the read of `parked`, the arming before the re-check.)
  namespace detail = shmio::detail;
  REQUIRE_FALSE(detail::platform::enable_heavy_fence());
  std::uint64_t size = 0;
  REQUIRE(detail::ring_view::body_size_for(2, 8, size));
  std::vector<std::byte> memory(size + layout::cache_line);
  std::span<std::byte> body(
      memory.data() + (layout::cache_line -
                       reinterpret_cast<std::uintptr_t>(memory.data()) % layout::cache_line),
      size);
  detail::ring_view::initialize(body, 2, 8, true);
  detail::ring_geometry g;
  REQUIRE_FALSE(detail::ring_view::validate(body, g, true));
  auto* state = reinterpret_cast<layout::ring_state*>(body.data());
  detail::ring_view writer(state, g, -1, 1);
  detail::ring_view reader(state, g, -1, 2);

  const int rounds = 20000 / shmio::test::time_scale;
  std::atomic<int> arrived{0};
  auto barrier = [&arrived](int round) {  // both sides start round r at the same moment
    arrived.fetch_add(1, std::memory_order_acq_rel);
    while (arrived.load(std::memory_order_acquire) < 2 * round)
      detail::platform::cpu_relax();
  };
  int lost = 0;
  int unexpected = 0;
  std::thread publisher([&] {
    for (int r = 1; r <= rounds; ++r) {
      barrier(2 * r - 1);
      // A stagger that moves the publication across the reader's arming from round to round.
      for (int k = 0; k < r % 97; ++k)
        detail::platform::cpu_relax();
      detail::write_claim c;
      if (writer.try_claim_write(c) != detail::claim_status::claimed) {
        ++unexpected;
      } else {
        writer.publish(c, 1);
      }
      barrier(2 * r);
    }
  });
  for (int r = 1; r <= rounds; ++r) {
    detail::sleeper parked(state->readers);
    barrier(2 * r - 1);
    parked.announce();  // arm, then the heavy fence
    detail::read_claim c;
    const bool seen = reader.try_claim_read(c, 8) == detail::claim_status::claimed;
    if (seen) reader.release(c);
    barrier(2 * r);
    // The notify claimed our arming if it took it out of `parked`.
    const bool rung = (state->readers.parked.load() >> 32) == 0;
    if (!seen && !rung) ++lost;
    if (!seen) {  // take the message now, for the next round's room
      if (reader.try_claim_read(c, 8) != detail::claim_status::claimed)
        ++unexpected;
      else
        reader.release(c);
    }
  }
  publisher.join();
  CHECK(unexpected == 0);
  CHECK(lost == 0);
}
