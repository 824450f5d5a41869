// Tests of shmio::circular_buffer: the seed's CircularBuffer behaviour, error handling, every
// completion token, cancellation, many readers and writers, and processes that crash mid-way
// (peer commands in tests/peer_ring.cpp).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <asio/bind_cancellation_slot.hpp>
#include <asio/bind_executor.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/co_spawn.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/experimental/deferred.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/use_future.hpp>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "shmio/circular_buffer.hpp"
#include "shmio/detail/layout.hpp"
#include "shmio/detail/names.hpp"
#include "shmio/detail/ring.hpp"
#include "shmio/segment.hpp"
#include "support.hpp"

namespace {

using namespace std::chrono_literals;
using namespace asio::experimental::awaitable_operators;
using shmio::circular_buffer;
using shmio::test::child;
using shmio::test::closed_handle_completions;
using shmio::test::eventually;
using shmio::test::peer_path;
using shmio::test::run_until;
using shmio::test::run_until_idle;
using shmio::test::scoped_name;
using shmio::test::signal_pipe;
using steady = std::chrono::steady_clock;
namespace layout = shmio::detail::layout;

// Every bounded wait in these tests uses this: far longer than anything should take, so that
// only a lost wake-up (or a hang) reaches it.
constexpr auto bound = std::chrono::milliseconds(10'000);

// The byte layout the corruption tests write through a raw mapping (see layout/segment.hpp and
// layout/ring.hpp).
constexpr std::size_t segment_header_size = 64;
constexpr std::size_t ring_state_size = 1344;
constexpr std::size_t node_header_size = 16;
static_assert(sizeof(layout::segment_header) == segment_header_size);
static_assert(sizeof(layout::ring_state) == ring_state_size);
static_assert(sizeof(layout::node_header) == node_header_size);

// ---- helpers -------------------------------------------------------------------------------

std::size_t put(circular_buffer& ring, std::string_view message,
                std::chrono::milliseconds timeout = bound) {
  return ring.write(asio::buffer(message.data(), message.size()), timeout);
}

// One message as text; "<timed out>" or "<error: ...>" when there was none.
std::string take(circular_buffer& ring, std::chrono::milliseconds timeout = bound) {
  std::string buf(ring.node_size(), '\0');
  std::error_code ec;
  const std::size_t n = ring.read(asio::buffer(buf), timeout, ec);
  if (ec == shmio::errc::timed_out) return "<timed out>";
  if (ec) return "<error: " + ec.message() + ">";
  buf.resize(n);
  return buf;
}

std::string numbered(unsigned long n) {
  return "m" + std::to_string(n);
}

std::string text(std::span<const std::byte> bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

// The word of node `index` for `turn`: it holds the turn less the index (layout/ring.hpp).
std::uint64_t node_word(std::uint64_t index, std::uint64_t turn, std::uint16_t owner,
                        bool reading = false) {
  return (turn - index) << layout::node_turn_shift | (reading ? layout::node_reading_bit : 0) |
         owner;
}

// The whole segment file of a ring, mapped read-write without going through shmio: lets a test
// look at (and damage) the shared layout the way another process, or a bug, could.
class raw_map {
 public:
  explicit raw_map(std::string_view name) : segment_(name) {}

  layout::ring_state& state() const { return segment_.at<layout::ring_state>(segment_header_size); }
  /// Node `i` of a ring created with nodes of `node_size` bytes (offsets from the creation
  /// parameters, not from the possibly damaged header).
  layout::node_header& node(std::size_t i, std::size_t node_size) const {
    const std::size_t stride = layout::node_stride_for(node_size);
    return segment_.at<layout::node_header>(segment_header_size + ring_state_size + i * stride);
  }
  std::uint64_t async_parked_readers() const { return state().readers.parked.load() >> 32; }
  std::uint64_t async_parked_writers() const { return state().writers.parked.load() >> 32; }

 private:
  shmio::test::raw_segment segment_;
};

// Runs a coroutine to completion on `io`, rethrowing what it threw.
template <class Fn>
void run_coroutine(asio::io_context& io, Fn coroutine) {
  std::exception_ptr failure;
  bool finished = false;
  asio::co_spawn(io, std::move(coroutine), [&](std::exception_ptr e) {
    failure = e;
    finished = true;
  });
  REQUIRE(run_until(io, [&] { return finished; }));
  if (failure) std::rethrow_exception(failure);
}

// Collects the completions of async operations.
struct completions {
  int calls = 0;
  std::error_code ec;
  std::size_t size = 0;
  auto handler() {
    return [this](std::error_code e, std::size_t n) {
      ++calls;
      ec = e;
      size = n;
    };
  }
};

/// Checks that the operation behind `done` is pending, cancels it through `signal` and checks
/// that it completed once, with operation_aborted.
void cancel_pending(asio::io_context& io, asio::cancellation_signal& signal,
                    asio::cancellation_type type, const completions& done) {
  io.poll();
  CHECK(done.calls == 0);
  signal.emit(type);
  REQUIRE(run_until_idle(io));
  CHECK(done.calls == 1);
  CHECK(done.ec == asio::error::operation_aborted);
}

const char* type_name(asio::cancellation_type t) {
  switch (t) {
    case asio::cancellation_type::terminal:
      return "terminal";
    case asio::cancellation_type::partial:
      return "partial";
    case asio::cancellation_type::total:
      return "total";
    default:
      return "other";
  }
}

struct test_failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// ---- the stress protocol (the same definitions are in peer_ring.cpp) -------------------------

constexpr std::uint32_t stop_producer = 0xffffffffu;
constexpr std::size_t stress_data_max = 48;

struct stress_message {
  std::uint32_t producer;
  std::uint32_t seq;
  std::uint64_t checksum;
  std::uint8_t data[stress_data_max];
};
constexpr std::size_t stress_header = offsetof(stress_message, data);

struct consumer_result {
  std::uint32_t consumer;
  std::uint32_t bad;
  std::uint32_t out_of_order;
  std::uint32_t reserved;
  std::uint64_t count[2];
  std::uint64_t sum[2];
  std::uint64_t xors[2];
};

std::uint64_t mix(std::uint32_t producer, std::uint32_t seq) {  // splitmix64
  std::uint64_t z = (std::uint64_t{producer} << 32 | seq) + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

// ---- creating and opening ------------------------------------------------------------------

TEST_CASE("an opener of a ring learns node_count and node_size from the segment", "[ring]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer creator(io.get_executor(), shmio::create_only, name, 5, 100);
  CHECK(creator.node_count() == 5);
  CHECK(creator.node_size() == 100);
  CHECK(creator.name() == name.str());

  circular_buffer opener(io.get_executor(), shmio::open_only, name);
  CHECK(opener.node_count() == 5);
  CHECK(opener.node_size() == 100);
  // open_or_create of an existing ring ignores its own sizes.
  circular_buffer other(io.get_executor(), shmio::open_or_create, name, 9, 7);
  CHECK(other.node_count() == 5);
  CHECK(other.node_size() == 100);

  put(creator, "hello");
  CHECK(take(other) == "hello");
}

TEST_CASE("a ring with fewer than two nodes or zero-byte nodes is refused with invalid_argument",
          "[ring]") {
  const auto [count, size] = GENERATE(std::pair<std::size_t, std::size_t>{0, 16},
                                      std::pair<std::size_t, std::size_t>{1, 16},
                                      std::pair<std::size_t, std::size_t>{2, 0});
  CAPTURE(count, size);
  asio::io_context io;
  scoped_name name("ring");
  try {
    circular_buffer ring(io.get_executor(), shmio::create_only, name, count, size);
    FAIL("created a ring of " << count << " x " << size);
  } catch (const shmio::error& e) {
    CHECK(e.code() == shmio::errc::invalid_argument);
  }
  std::error_code ec;
  circular_buffer ring(io.get_executor(), shmio::open_or_create, name, count, size, {}, ec);
  CHECK(ec == shmio::errc::invalid_argument);
  CHECK_FALSE(ring.is_open());
  // Nothing was left behind under the name.
  circular_buffer opened(io.get_executor(), shmio::open_only, name, {}, ec);
  CHECK(ec == shmio::errc::not_found);
}

// ---- the seed's behaviour ------------------------------------------------------------------

TEST_CASE(
    "all node_count nodes can hold unread messages; a write to a full ring returns 0 after "
    "its timeout",
    "[ring]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 4, 16);
  for (int i = 0; i < 4; ++i)
    REQUIRE(put(ring, numbered(i), 0ms) == 2);

  CHECK(put(ring, "full", 0ms) == 0);
  const auto timeout = 60ms;
  const auto start = steady::now();
  CHECK(put(ring, "full", timeout) == 0);
  const auto elapsed = steady::now() - start;
  CHECK(elapsed >= timeout);
  CHECK(elapsed < 5s);  // only "it did return": the VM is too noisy for a tighter bound
  std::error_code ec;
  CHECK(ring.write(asio::buffer("full", 4), 0ms, ec) == 0);
  CHECK(ec == shmio::errc::timed_out);

  CHECK(take(ring) == "m0");
  CHECK(put(ring, "m4", 0ms) == 2);  // one read frees one node
  for (int i = 1; i <= 4; ++i)
    CHECK(take(ring) == numbered(i));
}

TEST_CASE("a read on an empty ring returns 0 after its timeout, and a 0 ms read only polls",
          "[ring]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 2, 16);
  std::string buf(16, '\0');

  const auto timeout = 60ms;
  auto start = steady::now();
  CHECK(ring.read(asio::buffer(buf), timeout) == 0);
  const auto elapsed = steady::now() - start;
  CHECK(elapsed >= timeout);
  CHECK(elapsed < 5s);

  std::error_code ec;
  CHECK(ring.read(asio::buffer(buf), 0ms, ec) == 0);
  CHECK(ec == shmio::errc::timed_out);
  start = steady::now();
  for (int i = 0; i < 100; ++i)
    REQUIRE(ring.read(asio::buffer(buf), 0ms) == 0);
  CHECK(steady::now() - start < 2s);  // a hundred polls, no waiting

  put(ring, "here");
  CHECK(ring.read(asio::buffer(buf), 0ms, ec) == 4);
  CHECK_FALSE(ec);
  CHECK(buf.substr(0, 4) == "here");
}

TEST_CASE("a blocking call's timeout holds when it is shorter than its strategy's spin", "[ring]") {
  asio::io_context io;
  scoped_name name("ring");
  // A spin of 2 s, which the 20 ms calls below must cut short.
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 2, 16,
                       shmio::wait_strategy::spin_then_park(2s));
  std::string buf(16, '\0');
  std::error_code ec;
  auto start = steady::now();
  CHECK(ring.read(asio::buffer(buf), 20ms, ec) == 0);
  CHECK(ec == shmio::errc::timed_out);
  CHECK(steady::now() - start < 1s);
  put(ring, "a");
  put(ring, "b");  // full
  start = steady::now();
  CHECK(ring.write(asio::buffer("c", 1), 20ms, ec) == 0);
  CHECK(ec == shmio::errc::timed_out);
  CHECK(steady::now() - start < 1s);
}

TEST_CASE(
    "a ring read with a finite timeout too large for nanoseconds waits instead of "
    "returning at once",
    "[ring]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 2, 16);
  // 584 years: in nanoseconds that is 2^64 + 448 384, which wraps to less than a millisecond.
  const std::chrono::milliseconds huge(18'446'744'073'710);
  auto reader = std::async(std::launch::async, [&] {
    std::string buf(16, '\0');
    std::error_code ec;
    ring.read(asio::buffer(buf), huge, ec);
    return ec;
  });
  // An observation window, not synchronisation: the read must still be waiting after it.
  const bool returned_early = reader.wait_for(300ms) == std::future_status::ready;
  if (!returned_early) put(ring, "release");
  REQUIRE(reader.wait_for(bound) == std::future_status::ready);
  const std::error_code ec = reader.get();
  CHECK_FALSE(returned_early);
  CHECK_FALSE(ec);
}

TEST_CASE("messages come out in the order they went in, over many laps of the ring", "[ring]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer writer(io.get_executor(), shmio::create_only, name, 3, 16);
  circular_buffer reader(io.get_executor(), shmio::open_only, name);
  for (int i = 0; i < 100; ++i) {
    REQUIRE(put(writer, numbered(2 * i), 0ms) > 0);
    REQUIRE(put(writer, numbered(2 * i + 1), 0ms) > 0);
    REQUIRE(take(reader, 0ms) == numbered(2 * i));
    REQUIRE(take(reader, 0ms) == numbered(2 * i + 1));
  }
  CHECK(take(reader, 0ms) == "<timed out>");
}

TEST_CASE("1000 messages pass in order through a 2-node ring between two processes",
          "[ring][process]") {
  const std::string direction = GENERATE("peer writes", "peer reads");
  CAPTURE(direction);
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 2, 16);
  constexpr int count = 1000;
  if (direction == "peer writes") {
    child writer({peer_path(), "ring-write", name.str(), "0", std::to_string(count)});
    for (int i = 0; i < count; ++i)
      REQUIRE(take(ring) == numbered(i));
    CHECK(writer.wait() == 0);
  } else {
    child reader({peer_path(), "ring-read", name.str(), "0", std::to_string(count)});
    for (int i = 0; i < count; ++i)
      REQUIRE(put(ring, numbered(i)) > 0);
    CHECK(reader.wait() == 0);  // 0: every message arrived, in order
  }
  CHECK(take(ring, 0ms) == "<timed out>");
}

TEST_CASE(
    "a writer facing a slow reader process gets 0 once the ring is full, and writes once "
    "the reader has read",
    "[ring][process]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 3, 16);
  for (int i = 0; i < 3; ++i)
    REQUIRE(put(ring, numbered(i), 0ms) > 0);
  const auto start = steady::now();
  CHECK(put(ring, "m3", 30ms) == 0);
  CHECK(steady::now() - start >= 30ms);

  child reader({peer_path(), "ring-read", name.str(), "0", "1"});
  CHECK(put(ring, "m3", bound) == 2);  // woken when the reader frees a node
  CHECK(reader.wait() == 0);
  for (int i = 1; i <= 3; ++i)
    CHECK(take(ring, 0ms) == numbered(i));
}

TEST_CASE(
    "a write_in_place inside another's fill on the same ring: both publish, and readers "
    "get the outer message first",
    "[ring]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 2, 16);
  const std::size_t outer = ring.write_in_place(
      [&](std::span<std::byte> node) {
        const std::size_t inner = ring.write_in_place(
            [](std::span<std::byte> n) {
              std::memcpy(n.data(), "inner", 5);
              return std::size_t{5};
            },
            0ms);
        CHECK(inner == 5);
        std::memcpy(node.data(), "outer", 5);
        return std::size_t{5};
      },
      0ms);
  CHECK(outer == 5);
  CHECK(take(ring, 0ms) == "outer");
  CHECK(take(ring, 0ms) == "inner");
  CHECK(take(ring, 0ms) == "<timed out>");
}

TEST_CASE("a trivially copyable struct round-trips through the ring", "[ring]") {
  struct sample {
    std::int32_t id;
    double value;
    char label[12];
    std::uint64_t flags;
  };
  static_assert(std::is_trivially_copyable_v<sample>);
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer writer(io.get_executor(), shmio::create_only, name, 4, sizeof(sample));
  circular_buffer reader(io.get_executor(), shmio::open_only, name);
  for (int i = 0; i < 10; ++i) {
    sample s{-i, i * 1.5, "label", 0xfeedfaceull << i};
    REQUIRE(writer.write(asio::buffer(&s, sizeof s), 0ms) == sizeof s);
    sample r{};
    REQUIRE(reader.read(asio::buffer(&r, sizeof r), 0ms) == sizeof r);
    CHECK(r.id == -i);
    CHECK(r.value == i * 1.5);
    CHECK(std::string(r.label) == "label");
    CHECK(r.flags == 0xfeedfaceull << i);
  }
}

// ---- errors --------------------------------------------------------------------------------

TEST_CASE(
    "a message larger than the ring's node_size is refused with message_too_large and nothing is "
    "published",
    "[ring]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 2, 8);
  const std::string big(9, 'x');

  SECTION("write, throwing form") {
    try {
      put(ring, big);
      FAIL("wrote a message larger than a node");
    } catch (const shmio::error& e) {
      CHECK(e.code() == shmio::errc::message_too_large);
    }
  }
  SECTION("write, error_code form") {
    std::error_code ec;
    CHECK(ring.write(asio::buffer(big), bound, ec) == 0);
    CHECK(ec == shmio::errc::message_too_large);
  }
  SECTION("write_in_place whose fill reports more than the node holds") {
    std::error_code ec;
    CHECK(ring.write_in_place([](std::span<std::byte> node) { return node.size() + 1; }, bound,
                              ec) == 0);
    CHECK(ec == shmio::errc::message_too_large);
    CHECK_THROWS_AS(
        ring.write_in_place([](std::span<std::byte> node) { return node.size() + 1; }, bound),
        shmio::error);
  }
  SECTION("async_write") {
    completions done;
    ring.async_write(asio::buffer(big), done.handler());
    CHECK(done.calls == 0);
    REQUIRE(run_until_idle(io));
    CHECK(done.calls == 1);
    CHECK(done.ec == shmio::errc::message_too_large);
  }
  SECTION("async_write_in_place whose fill reports more than the node holds") {
    completions done;
    ring.async_write_in_place([](std::span<std::byte> node) { return node.size() + 1; },
                              done.handler());
    REQUIRE(run_until_idle(io));
    CHECK(done.calls == 1);
    CHECK(done.ec == shmio::errc::message_too_large);
  }
  CHECK(take(ring, 0ms) == "<timed out>");
  // Nothing leaked: both nodes are still free.
  CHECK(put(ring, "12345678", 0ms) == 8);
  CHECK(put(ring, "second", 0ms) == 6);
  CHECK(take(ring, 0ms) == "12345678");
  CHECK(take(ring, 0ms) == "second");
}

TEST_CASE(
    "a ring read into a too-small buffer fails with message_too_large and the message stays for "
    "a larger buffer",
    "[ring]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 2, 32);
  put(ring, "a message of 22 bytes.");
  put(ring, "next");
  std::string small(10, '\0');

  SECTION("read, throwing form") {
    try {
      ring.read(asio::buffer(small), bound);
      FAIL("read into a buffer too small for the message");
    } catch (const shmio::error& e) {
      CHECK(e.code() == shmio::errc::message_too_large);
    }
  }
  SECTION("read, error_code form") {
    std::error_code ec;
    CHECK(ring.read(asio::buffer(small), bound, ec) == 0);
    CHECK(ec == shmio::errc::message_too_large);
  }
  SECTION("async_read") {
    completions done;
    ring.async_read(asio::buffer(small), done.handler());
    REQUIRE(run_until_idle(io));
    CHECK(done.calls == 1);
    CHECK(done.ec == shmio::errc::message_too_large);
  }
  CHECK(small == std::string(10, '\0'));  // nothing was copied into it
  CHECK(take(ring, 0ms) == "a message of 22 bytes.");
  CHECK(take(ring, 0ms) == "next");
}

TEST_CASE("a parked read whose buffer is too small passes its wake-up on to another parked reader",
          "[ring][wake]") {
  // One publication wakes one parked reader. If that one cannot take the message, another that
  // can must hear of it: else it sleeps while the message waits in the ring. Which of the two is
  // woken first depends on their slots and on where the signaller's look starts, so both
  // orders are tried (handles made, and reads parked, small first or large first); without the
  // pass-on, a run fails whenever the small one is woken (nearly always where it is first).
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer writer(io.get_executor(), shmio::create_only, name, 4, 64);
  const auto park = shmio::wait_strategy::park_only();
  const bool small_first = GENERATE(true, false);
  const bool blocking = GENERATE(false, true);
  CAPTURE(small_first, blocking);
  std::optional<circular_buffer> small_reader, large_reader;
  auto open_reader = [&](std::optional<circular_buffer>& r) {
    r.emplace(io.get_executor(), shmio::open_only, name, park);
  };
  open_reader(small_first ? small_reader : large_reader);
  open_reader(small_first ? large_reader : small_reader);
  raw_map raw(name);
  std::string small(8, '\0'), large(64, '\0');
  const std::string message(40, 'm');
  if (!blocking) {
    completions small_done, large_done;
    auto start = [&](bool small_one) {
      if (small_one)
        small_reader->async_read(asio::buffer(small), small_done.handler());
      else
        large_reader->async_read(asio::buffer(large), large_done.handler());
    };
    start(small_first);
    REQUIRE(run_until(io, [&] { return raw.async_parked_readers() == 1; }));
    start(!small_first);
    REQUIRE(run_until(io, [&] { return raw.async_parked_readers() == 2; }));
    put(writer, message);
    CHECK(run_until(
        io, [&] { return large_done.calls == 1; }, 3s));
    CHECK_FALSE(large_done.ec);
    CHECK(large.substr(0, large_done.size) == message);
    // Told message_too_large if it was woken; else still waiting.
    if (small_done.calls == 1) CHECK(small_done.ec == shmio::errc::message_too_large);
  } else {
    std::error_code small_ec, large_ec;
    std::size_t small_n = 0, large_n = 0;
    std::atomic<bool> large_done{false};
    auto read = [&](bool small_one) {
      if (small_one) {
        small_n = small_reader->read(asio::buffer(small), bound, small_ec);
      } else {
        large_n = large_reader->read(asio::buffer(large), bound, large_ec);
        large_done = true;
      }
    };
    {
      std::jthread first(read, small_first);  // joined however the scope is left
      REQUIRE(eventually([&] { return raw.async_parked_readers() == 1; }));
      std::jthread second(read, !small_first);
      REQUIRE(eventually([&] { return raw.async_parked_readers() == 2; }));
      put(writer, message);
      CHECK(eventually([&] { return large_done.load(); }, 3s));
      put(writer, "s");  // for the small read, if it was not woken: it fits
    }
    CHECK_FALSE(large_ec);
    CHECK(large.substr(0, large_n) == message);
    // Told message_too_large if it was woken; else it read the second message.
    if (small_ec)
      CHECK(small_ec == shmio::errc::message_too_large);
    else
      CHECK(small.substr(0, small_n) == "s");
  }
}

TEST_CASE(
    "zero-length messages pass through the ring, and the error_code form tells them from a timeout",
    "[ring]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 4, 16);
  std::error_code ec;
  CHECK(ring.write(asio::const_buffer(), 0ms, ec) == 0);
  CHECK_FALSE(ec);
  CHECK(ring.write_in_place([](std::span<std::byte>) { return std::size_t{0}; }, 0ms, ec) == 0);
  CHECK_FALSE(ec);
  put(ring, "after");

  std::string buf(16, 'z');
  CHECK(ring.read(asio::buffer(buf), 0ms, ec) == 0);
  CHECK_FALSE(ec);                                         // a message of 0 bytes, not a timeout
  CHECK(ring.read(asio::mutable_buffer(), 0ms, ec) == 0);  // fits even an empty buffer
  CHECK_FALSE(ec);
  CHECK(take(ring, 0ms) == "after");
  CHECK(ring.read(asio::buffer(buf), 0ms, ec) == 0);
  CHECK(ec == shmio::errc::timed_out);

  completions w, r;
  ring.async_write(asio::const_buffer(), w.handler());
  REQUIRE(run_until_idle(io));
  ring.async_read(asio::buffer(buf), r.handler());
  REQUIRE(run_until_idle(io));
  CHECK(w.calls == 1);
  CHECK_FALSE(w.ec);
  CHECK(r.calls == 1);
  CHECK_FALSE(r.ec);
  CHECK(r.size == 0);
}

TEST_CASE(
    "a published ring node whose length is corrupted reads as corrupted, and the next messages "
    "still arrive",
    "[ring]") {
  const std::uint32_t bad_length = GENERATE(17u, 0xffffffffu);
  CAPTURE(bad_length);
  asio::io_context io;
  scoped_name name("ring");
  constexpr std::size_t node_size = 16;
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 4, node_size);
  raw_map raw(name);
  for (int i = 0; i < 3; ++i)
    put(ring, numbered(i));
  REQUIRE(raw.node(0, node_size).length == 2);
  raw.node(0, node_size).length = bad_length;

  SECTION("read, error_code form") {
    std::string buf(node_size, '\0');
    std::error_code ec;
    CHECK(ring.read(asio::buffer(buf), 0ms, ec) == 0);
    CHECK(ec == shmio::errc::corrupted);
  }
  SECTION("read, throwing form") {
    std::string buf(node_size, '\0');
    try {
      ring.read(asio::buffer(buf), 0ms);
      FAIL("read a corrupted node");
    } catch (const shmio::error& e) {
      CHECK(e.code() == shmio::errc::corrupted);
    }
  }
  SECTION("read_in_place") {
    bool used = false;
    std::error_code ec;
    ring.read_in_place([&](std::span<const std::byte>) { used = true; }, 0ms, ec);
    CHECK(ec == shmio::errc::corrupted);
    CHECK_FALSE(used);
  }
  SECTION("async_read") {
    std::string buf(node_size, '\0');
    completions done;
    ring.async_read(asio::buffer(buf), done.handler());
    REQUIRE(run_until_idle(io));
    CHECK(done.calls == 1);
    CHECK(done.ec == shmio::errc::corrupted);
  }
  CHECK(take(ring, 0ms) == "m1");
  CHECK(take(ring, 0ms) == "m2");
  // The skipped node is usable again.
  for (int i = 3; i < 7; ++i)
    REQUIRE(put(ring, numbered(i), 0ms) > 0);
  for (int i = 3; i < 7; ++i)
    CHECK(take(ring, 0ms) == numbered(i));
}

TEST_CASE("a head or tail moved far ahead of every node is corrupted, not empty or full",
          "[ring][hostile]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 4, 64);
  REQUIRE(ring.write(asio::buffer("m", 1), 1s) == 1);
  raw_map raw(name);
  // Just under half the 2^48 position space ahead: every node's turn looks far behind it.
  const std::uint64_t far = (std::uint64_t{1} << 47) - 100;
  std::string buf(64, '\0');
  std::error_code ec;
  SECTION("head") {
    raw.state().head.position.store(far);
    ring.read(asio::buffer(buf), 0ms, ec);
  }
  SECTION("tail") {
    raw.state().tail.position.store(far);
    ring.write(asio::buffer("n", 1), 0ms, ec);
  }
  CHECK(ec == shmio::errc::corrupted);
}

TEST_CASE("a head or tail moved a lap or so ahead is corrupted, not empty or full for ever",
          "[ring][hostile]") {
  // One message in a ring of 4 (head 0, tail 1). Each cursor below is moved to where no node
  // can be in its state: a reader or writer that took it for "empty" or "full" would wait for
  // ever, as would every one after it.
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 4, 64);
  REQUIRE(ring.write(asio::buffer("m", 1), 1s) == 1);
  raw_map raw(name);
  std::string buf(64, '\0');
  std::error_code ec;
  SECTION("head a lap ahead, at the published message") {
    raw.state().head.position.store(4);
    ring.read(asio::buffer(buf), 0ms, ec);
  }
  SECTION("head a lap and two ahead, at a free node") {
    raw.state().head.position.store(6);
    ring.read(asio::buffer(buf), 0ms, ec);
  }
  SECTION("tail a lap ahead, at a free node") {
    raw.state().tail.position.store(5);
    ring.write(asio::buffer("n", 1), 0ms, ec);
  }
  SECTION("tail ahead by less than a lap, at a free node") {
    raw.state().tail.position.store(3 + 4 * 2);  // node 3, free for lap 0
    ring.write(asio::buffer("n", 1), 0ms, ec);
  }
  CHECK(ec == shmio::errc::corrupted);
}

TEST_CASE("opening a ring whose header is corrupted fails with corrupted", "[ring]") {
  const std::string damage = GENERATE("node_count 0", "node_count too large", "node_size 0",
                                      "stride mismatch", "nodes_offset moved");
  CAPTURE(damage);
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer creator(io.get_executor(), shmio::create_only, name, 4, 100);
  {
    raw_map raw(name);
    auto& h = raw.state().header;
    REQUIRE(h.node_count == 4);
    REQUIRE(h.node_size == 100);
    if (damage == "node_count 0") h.node_count = 0;
    if (damage == "node_count too large") h.node_count = 5;
    if (damage == "node_size 0") h.node_size = 0;
    if (damage == "stride mismatch") h.node_stride += 64;
    if (damage == "nodes_offset moved") h.nodes_offset += 64;
  }
  std::error_code ec;
  circular_buffer opened(io.get_executor(), shmio::open_only, name, {}, ec);
  CHECK(ec == shmio::errc::corrupted);
  CHECK_FALSE(opened.is_open());
  try {
    circular_buffer again(io.get_executor(), shmio::open_only, name);
    FAIL("opened a ring with a corrupted header");
  } catch (const shmio::error& e) {
    CHECK(e.code() == shmio::errc::corrupted);
  }
}

TEST_CASE(
    "a fill that throws in write_in_place propagates, publishes nothing, and the ring "
    "keeps working",
    "[ring]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 2, 16);
  put(ring, "before");
  // More throwing fills than nodes: an abandoned node must come back each time.
  for (int i = 0; i < 5; ++i) {
    CHECK_THROWS_AS(ring.write_in_place(
                        [](std::span<std::byte> node) -> std::size_t {
                          std::memcpy(node.data(), "partial", 7);
                          throw test_failure("fill failed");
                        },
                        0ms),
                    test_failure);
    CHECK(take(ring, 0ms) == (i == 0 ? "before" : "<timed out>"));
  }
  CHECK(put(ring, "m0", 0ms) == 2);
  CHECK(put(ring, "m1", 0ms) == 2);
  CHECK(take(ring, 0ms) == "m0");
  CHECK(take(ring, 0ms) == "m1");
  CHECK(take(ring, 0ms) == "<timed out>");
}

TEST_CASE(
    "a use that throws in read_in_place counts the message as read, and the ring keeps "
    "working",
    "[ring]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 2, 16);
  put(ring, "m0");
  put(ring, "m1");
  std::string seen;
  CHECK_THROWS_AS(ring.read_in_place(
                      [&](std::span<const std::byte> message) {
                        seen = text(message);
                        throw test_failure("use failed");
                      },
                      0ms),
                  test_failure);
  CHECK(seen == "m0");
  CHECK(take(ring, 0ms) == "m1");
  CHECK(take(ring, 0ms) == "<timed out>");
  CHECK(put(ring, "m2", 0ms) == 2);  // both nodes are free again
  CHECK(put(ring, "m3", 0ms) == 2);
  CHECK(take(ring, 0ms) == "m2");
  CHECK(take(ring, 0ms) == "m3");
}

TEST_CASE("a closed ring's throwing and async operations fail with bad_descriptor", "[ring]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 2, 16);
  ring.close();
  CHECK_FALSE(ring.is_open());
  CHECK(ring.node_count() == 0);
  CHECK(ring.node_size() == 0);
  std::string buf(16, '\0');
  try {
    ring.write(asio::buffer("x", 1), 0ms);
    FAIL("wrote to a closed ring");
  } catch (const std::system_error& e) {
    CHECK(e.code() == asio::error::bad_descriptor);
  }
  CHECK_THROWS_AS(ring.read(asio::buffer(buf), 0ms), std::system_error);
  completions w, r;
  ring.async_write(asio::buffer("x", 1), asio::bind_executor(io, w.handler()));
  ring.async_read(asio::buffer(buf), asio::bind_executor(io, r.handler()));
  CHECK(w.calls + r.calls == 0);
  REQUIRE(run_until_idle(io));
  CHECK(w.calls == 1);
  CHECK(w.ec == asio::error::bad_descriptor);
  CHECK(r.calls == 1);
  CHECK(r.ec == asio::error::bad_descriptor);
}

TEST_CASE("a closed ring keeps its executor: a plain handler runs inside io.run()", "[ring]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 2, 16);
  circular_buffer moved(std::move(ring));
  ring.close();
  moved.close();
  for (circular_buffer* b : {&ring, &moved})
    CHECK(b->get_executor() == circular_buffer::executor_type(io.get_executor()));
  std::string buf(16, '\0');
  closed_handle_completions closed;
  ring.async_read(asio::buffer(buf), closed.handler());
  moved.async_write(asio::buffer("x", 1), closed.handler());
  CHECK(closed.calls == 0);
  REQUIRE(run_until(io, [&] { return closed.calls == 2; }));
  CHECK(closed.other_errors == 0);
  CHECK(closed.on_this_thread);
}

TEST_CASE("a closed ring's error_code forms report bad_descriptor through ec instead of throwing",
          "[ring]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 2, 16);
  ring.close();
  std::string buf(16, '\0');
  std::error_code ec;
  CHECK_NOTHROW(ring.write(asio::buffer("x", 1), 0ms, ec));
  CHECK(ec == asio::error::bad_descriptor);
  ec.clear();
  CHECK_NOTHROW(ring.read(asio::buffer(buf), 0ms, ec));
  CHECK(ec == asio::error::bad_descriptor);
  ec.clear();
  CHECK_NOTHROW(ring.write_in_place([](std::span<std::byte>) { return std::size_t{0}; }, 0ms, ec));
  CHECK(ec == asio::error::bad_descriptor);
  ec.clear();
  CHECK_NOTHROW(ring.read_in_place([](std::span<const std::byte>) {}, 0ms, ec));
  CHECK(ec == asio::error::bad_descriptor);
}

// ---- asynchronous operations ---------------------------------------------------------------

TEST_CASE("ring async_write and async_read complete callbacks with the message size",
          "[ring][async]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 2, 16);
  std::string buf(16, '\0');
  completions w, r;
  ring.async_read(asio::buffer(buf), r.handler());  // waits: the ring is empty
  io.poll();
  CHECK(r.calls == 0);
  ring.async_write(asio::buffer("hello", 5), w.handler());
  REQUIRE(run_until_idle(io));
  CHECK(w.calls == 1);
  CHECK_FALSE(w.ec);
  CHECK(w.size == 5);
  CHECK(r.calls == 1);
  CHECK_FALSE(r.ec);
  CHECK(buf.substr(0, r.size) == "hello");
}

TEST_CASE("ring async_write and async_read with use_future complete their futures",
          "[ring][async]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 2, 16);
  auto work = asio::make_work_guard(io);
  std::thread runner([&] { io.run_for(bound); });
  std::string buf(16, '\0');
  std::future<std::size_t> read = ring.async_read(asio::buffer(buf), asio::use_future);
  CHECK(read.wait_for(20ms) == std::future_status::timeout);  // nothing written yet
  std::future<std::size_t> write = ring.async_write(asio::buffer("future", 6), asio::use_future);
  REQUIRE(write.wait_for(bound) == std::future_status::ready);
  CHECK(write.get() == 6);
  REQUIRE(read.wait_for(bound) == std::future_status::ready);
  CHECK(read.get() == 6);
  CHECK(buf.substr(0, 6) == "future");

  // A refusal completes at once, through the handler's executor; left to use_future's own, a
  // thread of Asio's system context would drop the promise, and with it a reference to the
  // exception get() rethrows here, whenever it got to it. That count lives in the uninstrumented
  // C++ runtime, where ThreadSanitizer cannot see it ordered after our read. Bound to the
  // io_context, the promise is dropped on the runner thread, which is joined first.
  const std::string big(17, 'x');
  auto failed = ring.async_write(asio::buffer(big), asio::bind_executor(io, asio::use_future));
  REQUIRE(failed.wait_for(bound) == std::future_status::ready);
  work.reset();
  runner.join();
  try {
    failed.get();
    FAIL("the future of a too-large write held a value");
  } catch (const std::system_error& e) {
    CHECK(e.code() == shmio::errc::message_too_large);
  }
}

TEST_CASE("a deferred ring async_write or async_read starts only when invoked", "[ring][async]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 2, 16);
  std::string buf(16, '\0');
  auto write = ring.async_write(asio::buffer("deferred", 8), asio::experimental::deferred);
  auto read = ring.async_read(asio::buffer(buf), asio::experimental::deferred);
  REQUIRE(run_until_idle(io));
  CHECK(take(ring, 0ms) == "<timed out>");  // the write has not happened

  completions w;
  std::move(write)(w.handler());
  REQUIRE(run_until_idle(io));
  CHECK(w.calls == 1);
  CHECK_FALSE(w.ec);
  CHECK(buf == std::string(16, '\0'));  // the read has not happened either

  std::size_t n = 0;
  run_coroutine(
      io, [&]() -> asio::awaitable<void> { n = co_await std::move(read)(asio::use_awaitable); });
  CHECK(buf.substr(0, n) == "deferred");
}

TEST_CASE(
    "a deferred ring operation launched after close completes with an error and touches "
    "nothing",
    "[ring][async]") {
  const std::string op = GENERATE("read", "write");
  CAPTURE(op);
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer keeper(io.get_executor(), shmio::create_only, name, 2, 16);
  circular_buffer ring(io.get_executor(), shmio::open_only, name);
  put(keeper, "m0");
  std::string buf(16, '\0');
  completions done;
  if (op == "read") {
    auto deferred = ring.async_read(asio::buffer(buf), asio::experimental::deferred);
    ring.close();
    std::move(deferred)(done.handler());
  } else {
    auto deferred = ring.async_write(asio::buffer("late", 4), asio::experimental::deferred);
    ring.close();
    std::move(deferred)(done.handler());
  }
  REQUIRE(run_until_idle(io));
  CHECK(done.calls == 1);
  CHECK(done.ec);  // bad_descriptor or operation_aborted: the handle was closed
  CHECK(take(keeper, 0ms) == "m0");
  CHECK(take(keeper, 0ms) == "<timed out>");
}

TEST_CASE("ring async_write and async_read with use_awaitable pass messages between coroutines",
          "[ring][async]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 2, 16);
  std::vector<std::string> received;
  bool reader_done = false;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        std::string buf(16, '\0');
        for (int i = 0; i < 20; ++i) {
          const std::size_t n = co_await ring.async_read(asio::buffer(buf), asio::use_awaitable);
          received.push_back(buf.substr(0, n));
        }
      },
      [&](std::exception_ptr e) { reader_done = !e; });
  run_coroutine(io, [&]() -> asio::awaitable<void> {
    for (int i = 0; i < 20; ++i) {
      const std::string m = numbered(i);
      const std::size_t n = co_await ring.async_write(asio::buffer(m), asio::use_awaitable);
      if (n != m.size()) throw test_failure("short write");
    }
  });
  REQUIRE(run_until(io, [&] { return reader_done; }));
  REQUIRE(received.size() == 20);
  for (int i = 0; i < 20; ++i)
    CHECK(received[i] == numbered(i));
}

TEST_CASE("ring async operations with as_tuple deliver success and errors as values",
          "[ring][async]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 2, 16);
  std::error_code write_ec, read_ec, small_ec, aborted_ec;
  std::size_t written = 0, read = 0;
  std::string buf(16, '\0');
  run_coroutine(io, [&]() -> asio::awaitable<void> {
    const auto token = asio::experimental::as_tuple(asio::use_awaitable);
    std::tie(write_ec, written) = co_await ring.async_write(asio::buffer("tuple", 5), token);
    char small[2];
    std::tie(small_ec, std::ignore) = co_await ring.async_read(asio::buffer(small), token);
    std::tie(read_ec, read) = co_await ring.async_read(asio::buffer(buf), token);
    asio::cancellation_signal signal;
    asio::post(co_await asio::this_coro::executor,
               [&] { signal.emit(asio::cancellation_type::terminal); });
    std::tie(aborted_ec, std::ignore) = co_await ring.async_read(
        asio::buffer(buf), asio::bind_cancellation_slot(signal.slot(), token));
  });
  CHECK_FALSE(write_ec);
  CHECK(written == 5);
  CHECK(small_ec == shmio::errc::message_too_large);
  CHECK_FALSE(read_ec);
  CHECK(buf.substr(0, read) == "tuple");
  CHECK(aborted_ec == asio::error::operation_aborted);
}

TEST_CASE("no async ring operation completes inside its initiating call", "[ring][async]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 4, 8);
  put(ring, "ready");
  put(ring, "too long");
  std::string buf(8, '\0');
  char small[2];
  const std::string big(9, 'x');
  completions done[6];
  ring.async_read(asio::buffer(buf), done[0].handler());         // a message is there
  ring.async_read(asio::buffer(small), done[1].handler());       // too small for the next one
  ring.async_write(asio::buffer("free", 4), done[2].handler());  // a node is free
  ring.async_write(asio::buffer(big), done[3].handler());        // too large
  ring.async_write_in_place([](std::span<std::byte>) { return std::size_t{1}; }, done[4].handler());
  ring.async_read_in_place([](std::span<const std::byte>) {}, done[5].handler());
  for (const auto& d : done)
    CHECK(d.calls == 0);
  REQUIRE(run_until_idle(io));
  for (const auto& d : done)
    CHECK(d.calls == 1);
  CHECK_FALSE(done[0].ec);
  CHECK(done[1].ec == shmio::errc::message_too_large);
  CHECK_FALSE(done[2].ec);
  CHECK(done[3].ec == shmio::errc::message_too_large);
  CHECK_FALSE(done[4].ec);
  CHECK_FALSE(done[5].ec);
}

TEST_CASE(
    "ring async_write_in_place fills a node and async_read_in_place sees the message in place",
    "[ring][async]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 2, 16);
  std::vector<std::string> seen;
  completions r1, r2;
  ring.async_read_in_place([&](std::span<const std::byte> m) { seen.push_back(text(m)); },
                           r1.handler());
  ring.async_read_in_place([&](std::span<const std::byte> m) { seen.push_back(text(m)); },
                           r2.handler());
  completions w1, w2;
  std::size_t node_bytes = 0;
  ring.async_write_in_place(
      [&](std::span<std::byte> node) {
        node_bytes = node.size();
        std::memcpy(node.data(), "first", 5);
        return std::size_t{5};
      },
      w1.handler());
  ring.async_write_in_place(
      [](std::span<std::byte> node) {
        std::memcpy(node.data(), "second!", 7);
        return std::size_t{7};
      },
      w2.handler());
  REQUIRE(run_until_idle(io));
  CHECK(node_bytes == 16);
  CHECK(w1.size == 5);
  CHECK(w2.size == 7);
  CHECK(r1.size == 5);
  CHECK(r2.size == 7);
  for (auto* c : {&w1, &w2, &r1, &r2}) {
    CHECK(c->calls == 1);
    CHECK_FALSE(c->ec);
  }
  CHECK(seen == std::vector<std::string>{"first", "second!"});
}

TEST_CASE(
    "a ring's async in-place callback that throws completes with callback_failed: a fill "
    "publishes nothing, a use consumes its message",
    "[ring][async]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 2, 16);
  completions fill, use;
  ring.async_write_in_place(
      [](std::span<std::byte> node) -> std::size_t {
        std::memcpy(node.data(), "partial", 7);
        throw test_failure("fill failed");
      },
      fill.handler());
  REQUIRE(run_until_idle(io));
  CHECK(fill.calls == 1);
  CHECK(fill.ec == shmio::errc::callback_failed);
  CHECK(take(ring, 0ms) == "<timed out>");

  put(ring, "m0");
  put(ring, "m1");
  ring.async_read_in_place([](std::span<const std::byte>) { throw test_failure("use failed"); },
                           use.handler());
  REQUIRE(run_until_idle(io));
  CHECK(use.calls == 1);
  CHECK(use.ec == shmio::errc::callback_failed);
  CHECK(take(ring, 0ms) == "m1");  // m0 counts as read
  CHECK(put(ring, "m2", 0ms) == 2);
  CHECK(put(ring, "m3", 0ms) == 2);
  CHECK(take(ring, 0ms) == "m2");
  CHECK(take(ring, 0ms) == "m3");
}

TEST_CASE("a parked ring async_read is woken by a write from another process",
          "[ring][process][async]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 2, 16);
  raw_map raw(name);
  std::string buf(16, '\0');
  completions done;
  ring.async_read(asio::buffer(buf), done.handler());
  REQUIRE(run_until(io, [&] { return raw.async_parked_readers() == 1; }));  // spun, then parked
  CHECK(done.calls == 0);
  child writer({peer_path(), "ring-write", name.str(), "7", "1"});
  REQUIRE(run_until(io, [&] { return done.calls == 1; }));
  CHECK_FALSE(done.ec);
  CHECK(buf.substr(0, done.size) == "m7");
  CHECK(writer.wait() == 0);
}

TEST_CASE("a parked async_write on a full ring is woken by a read from another process",
          "[ring][process][async]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 2, 16);
  raw_map raw(name);
  put(ring, "m0");
  put(ring, "m1");
  completions done;
  ring.async_write(asio::buffer("m2", 2), done.handler());
  REQUIRE(run_until(io, [&] { return raw.async_parked_writers() == 1; }));
  CHECK(done.calls == 0);
  child reader({peer_path(), "ring-read", name.str(), "0", "1"});
  REQUIRE(run_until(io, [&] { return done.calls == 1; }));
  CHECK_FALSE(done.ec);
  CHECK(done.size == 2);
  CHECK(reader.wait() == 0);
  CHECK(take(ring, 0ms) == "m1");
  CHECK(take(ring, 0ms) == "m2");
}

namespace {

struct tagged {
  std::uint32_t writer;
  std::uint32_t seq;
};
constexpr std::uint32_t stop_writer = 0xffffffffu;

// `writers` coroutines write `per_writer` tagged messages each through a 4-node ring while
// `readers` coroutines read them, on an io_context run by `threads` threads; with one handle
// for all of them or one each. Checks that every message arrives exactly once, in each writer's
// order.
void competing_coroutines(int threads, bool one_handle) {
  constexpr std::uint32_t writers = 4, readers = 3, per_writer = 2000;
  asio::io_context io(threads);
  scoped_name name("ring");
  std::vector<std::unique_ptr<circular_buffer>> handles;
  handles.push_back(std::make_unique<circular_buffer>(io.get_executor(), shmio::create_only, name,
                                                      4, sizeof(tagged)));
  if (!one_handle)
    for (std::uint32_t i = 1; i < writers + readers; ++i)
      handles.push_back(
          std::make_unique<circular_buffer>(io.get_executor(), shmio::open_only, name));
  auto handle = [&](std::uint32_t i) -> circular_buffer& {
    return one_handle ? *handles[0] : *handles[i];
  };

  std::mutex mutex;
  std::vector<std::vector<int>> got(writers, std::vector<int>(per_writer, 0));
  int bad = 0, out_of_order = 0, finished = 0, failed = 0;
  std::uint32_t writers_done = 0;
  auto on_done = [&](std::exception_ptr e) {
    std::lock_guard lock(mutex);
    ++finished;
    if (e) ++failed;
  };

  for (std::uint32_t w = 0; w < writers; ++w) {
    asio::co_spawn(
        io,
        [&, w]() -> asio::awaitable<void> {
          circular_buffer& ring = handle(w);
          for (std::uint32_t seq = 0; seq < per_writer; ++seq) {
            const tagged t{w, seq};
            co_await ring.async_write(asio::buffer(&t, sizeof t), asio::use_awaitable);
          }
          bool last = false;
          {
            std::lock_guard lock(mutex);
            last = ++writers_done == writers;
          }
          if (last)  // every message is in: one stop message per reader
            for (std::uint32_t r = 0; r < readers; ++r) {
              const tagged stop{stop_writer, 0};
              co_await ring.async_write(asio::buffer(&stop, sizeof stop), asio::use_awaitable);
            }
        },
        on_done);
  }
  for (std::uint32_t r = 0; r < readers; ++r) {
    asio::co_spawn(
        io,
        [&, r]() -> asio::awaitable<void> {
          circular_buffer& ring = handle(writers + r);
          std::vector<long> last(writers, -1);
          for (;;) {
            tagged t{};
            const std::size_t n =
                co_await ring.async_read(asio::buffer(&t, sizeof t), asio::use_awaitable);
            if (n == sizeof t && t.writer == stop_writer) break;
            std::lock_guard lock(mutex);
            if (n != sizeof t || t.writer >= writers || t.seq >= per_writer) {
              ++bad;
              continue;
            }
            ++got[t.writer][t.seq];
            if (static_cast<long>(t.seq) <= last[t.writer]) ++out_of_order;
            last[t.writer] = t.seq;
          }
        },
        on_done);
  }

  std::vector<std::thread> pool;
  for (int i = 1; i < threads; ++i)
    pool.emplace_back([&] { io.run_for(bound); });
  io.run_for(bound);
  for (auto& t : pool)
    t.join();

  CHECK(finished == static_cast<int>(writers + readers));
  CHECK(failed == 0);
  CHECK(bad == 0);
  CHECK(out_of_order == 0);
  int missing = 0, duplicated = 0;
  for (const auto& per : got)
    for (int c : per) {
      missing += c == 0;
      duplicated += c > 1;
    }
  CHECK(missing == 0);
  CHECK(duplicated == 0);
  if (finished != static_cast<int>(writers + readers)) {
    // Let the stuck coroutines (which refer to this frame) end before it goes.
    handles.clear();
    run_until_idle(io);
  }
}

}  // namespace

TEST_CASE(
    "competing async readers and writers of a ring on a one-thread io_context get every message "
    "exactly once",
    "[ring][async]") {
  const bool one_handle = GENERATE(true, false);
  CAPTURE(one_handle);
  competing_coroutines(1, one_handle);
}

TEST_CASE(
    "competing async readers and writers of a ring on a two-thread io_context get every message "
    "exactly once",
    "[ring][async]") {
  const bool one_handle = GENERATE(true, false);
  CAPTURE(one_handle);
  competing_coroutines(2, one_handle);
}

// ---- cancellation --------------------------------------------------------------------------

TEST_CASE(
    "a pending ring async_read cancelled through its slot completes once with operation_aborted "
    "and consumes nothing",
    "[ring][async]") {
  const auto type = GENERATE(asio::cancellation_type::terminal, asio::cancellation_type::partial,
                             asio::cancellation_type::total);
  CAPTURE(type_name(type));
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 2, 16);
  std::string buf(16, '\0');
  asio::cancellation_signal signal;
  completions done;
  ring.async_read(asio::buffer(buf), asio::bind_cancellation_slot(signal.slot(), done.handler()));
  cancel_pending(io, signal, type, done);
  signal.emit(type);  // a second cancellation finds nothing to cancel
  put(ring, "after");
  REQUIRE(run_until_idle(io));
  CHECK(done.calls == 1);
  CHECK(take(ring, 0ms) == "after");
  CHECK(buf == std::string(16, '\0'));
}

TEST_CASE(
    "a pending ring async_read cancelled after a write rang its doorbell passes the wake-up on",
    "[ring][async]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer a(io.get_executor(), shmio::create_only, name, 2, 16);  // readers' slot 0
  circular_buffer b(io.get_executor(), shmio::open_only, name);           // readers' slot 1
  raw_map raw(name);
  const auto& slots = raw.state().readers.slots;
  std::string buf_a(16, '\0'), buf_b(16, '\0');
  asio::cancellation_signal signal;
  completions done_a, done_b;
  a.async_read(asio::buffer(buf_a), asio::bind_cancellation_slot(signal.slot(), done_a.handler()));
  // A wake-one write rings one of the armed slots, in an order that rotates with each write.
  // Until it rings a's, b takes the message and reads again.
  bool rang_a = false;
  for (int attempt = 0; attempt < 40 && !rang_a; ++attempt) {
    done_b = {};
    b.async_read(asio::buffer(buf_b), done_b.handler());
    REQUIRE(run_until(io, [&] { return raw.async_parked_readers() == 2; }));
    REQUIRE(slots[0].armed.load() == 1);
    REQUIRE(slots[1].armed.load() == 1);
    put(a, "only");  // claims (disarms) one of the two slots and rings it
    CHECK(slots[0].armed.load() + slots[1].armed.load() == 1);
    rang_a = slots[0].armed.load() == 0;
    if (!rang_a) {
      REQUIRE(run_until(io, [&] { return done_b.calls == 1; }));
      REQUIRE(buf_b.substr(0, done_b.size) == "only");
      REQUIRE(done_a.calls == 0);
    }
  }
  REQUIRE(rang_a);
  signal.emit(asio::cancellation_type::terminal);  // cancels a's read, inside this call
  CHECK(slots[1].armed.load() == 0);               // the ring a's read no longer needs went on to b
  REQUIRE(run_until(io, [&] { return done_a.calls == 1 && done_b.calls == 1; }));
  CHECK(done_a.ec == asio::error::operation_aborted);
  CHECK_FALSE(done_b.ec);
  CHECK(buf_b.substr(0, done_b.size) == "only");
  CHECK(buf_a == std::string(16, '\0'));
  CHECK(take(a, 0ms) == "<timed out>");
}

TEST_CASE(
    "a handle whose next read waits behind a handler queued on another executor passes a "
    "wake-one ring on to another reader",
    "[ring][async]") {
  // a's first read takes m1, and its handler waits in the queue of an io_context that does not
  // run; a's second read may not go before it (reads complete in order). A publication that
  // rings a's slot must reach b, parked beside it, rather than wait with a.
  asio::io_context io, elsewhere;
  scoped_name name("ring");
  // Parked at once: a's reads are both parked when a ring comes, and one look takes the first.
  const auto park = shmio::wait_strategy::park_only();
  circular_buffer a(io.get_executor(), shmio::create_only, name, 8, 16, park);  // readers' slot 0
  circular_buffer b(io.get_executor(), shmio::open_only, name, park);           // readers' slot 1
  raw_map raw(name);
  const auto& slots = raw.state().readers.slots;
  std::string buf1(16, '\0'), buf2(16, '\0'), buf_b(16, '\0');
  completions done1, done2, done_b;
  a.async_read(asio::buffer(buf1), asio::bind_executor(elsewhere, done1.handler()));
  a.async_read(asio::buffer(buf2), done2.handler());
  REQUIRE(run_until(io, [&] { return raw.async_parked_readers() == 1; }));
  put(b, "m1");  // a's slot alone is armed: a's first read takes it
  REQUIRE(run_until(io, [&] { return raw.state().head.position.load() == 1; }));
  // Rings go round the armed slots in turn: one that came to a's slot used to wait there,
  // unlooked at, for as long as the first handler was not reached.
  for (int i = 0; i < 8; ++i) {
    done_b = {};
    b.async_read(asio::buffer(buf_b), done_b.handler());
    REQUIRE(run_until(io, [&] { return slots[1].armed.load() == 1; }));
    const std::string m = numbered(2 + i);
    put(b, m);
    REQUIRE(run_until(io, [&] { return done_b.calls == 1; }));
    CHECK_FALSE(done_b.ec);
    CHECK(buf_b.substr(0, done_b.size) == m);
  }
  CHECK(done1.calls == 0);
  CHECK(done2.calls == 0);
  // Once the first handler is reached, the second read goes on.
  elsewhere.run();
  CHECK(done1.calls == 1);
  CHECK(buf1.substr(0, done1.size) == "m1");
  put(b, "last");
  REQUIRE(run_until(io, [&] { return done2.calls == 1; }));
  CHECK(buf2.substr(0, done2.size) == "last");
}

TEST_CASE(
    "a pending async_write on a full ring cancelled through its slot completes once with "
    "operation_aborted and publishes nothing",
    "[ring][async]") {
  const auto type = GENERATE(asio::cancellation_type::terminal, asio::cancellation_type::partial,
                             asio::cancellation_type::total);
  CAPTURE(type_name(type));
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 2, 16);
  put(ring, "m0");
  put(ring, "m1");
  asio::cancellation_signal signal;
  completions done;
  ring.async_write(asio::buffer("never", 5),
                   asio::bind_cancellation_slot(signal.slot(), done.handler()));
  cancel_pending(io, signal, type, done);
  CHECK(take(ring, 0ms) == "m0");
  CHECK(take(ring, 0ms) == "m1");
  REQUIRE(run_until_idle(io));  // a write that was not really cancelled would go in now
  CHECK(take(ring, 0ms) == "<timed out>");
  CHECK(done.calls == 1);
}

TEST_CASE("ring async_read || timer: when the timer wins, the read consumes nothing",
          "[ring][async]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 2, 16);
  std::string buf(16, '\0');
  std::size_t winner = 99;
  run_coroutine(io, [&]() -> asio::awaitable<void> {
    asio::steady_timer timer(co_await asio::this_coro::executor, 30ms);
    auto r = co_await (ring.async_read(asio::buffer(buf), asio::use_awaitable) ||
                       timer.async_wait(asio::use_awaitable));
    winner = r.index();
  });
  CHECK(winner == 1);
  put(ring, "after");
  REQUIRE(run_until_idle(io));
  CHECK(take(ring, 0ms) == "after");
  CHECK(buf == std::string(16, '\0'));
}

TEST_CASE("ring async_write || timer on a full ring: when the timer wins, nothing is published",
          "[ring][async]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 2, 16);
  put(ring, "m0");
  put(ring, "m1");
  std::size_t winner = 99;
  run_coroutine(io, [&]() -> asio::awaitable<void> {
    asio::steady_timer timer(co_await asio::this_coro::executor, 30ms);
    auto r = co_await (ring.async_write(asio::buffer("never", 5), asio::use_awaitable) ||
                       timer.async_wait(asio::use_awaitable));
    winner = r.index();
  });
  CHECK(winner == 1);
  CHECK(take(ring, 0ms) == "m0");
  CHECK(take(ring, 0ms) == "m1");
  REQUIRE(run_until_idle(io));
  CHECK(take(ring, 0ms) == "<timed out>");
}

TEST_CASE("destroying or closing the ring aborts its pending operations and lets run() return",
          "[ring][async]") {
  const std::string op = GENERATE("read", "write");
  const bool destroy = GENERATE(true, false);
  const bool parked = GENERATE(true, false);  // else still spinning through the executor
  CAPTURE(op, destroy, parked);
  asio::io_context io;
  scoped_name name("ring");
  std::optional<circular_buffer> ring;
  ring.emplace(io.get_executor(), shmio::create_only, name, 2, 16);
  if (op == "write") {
    put(*ring, "m0");
    put(*ring, "m1");
  }
  std::string buf(16, '\0');
  completions done;
  for (int i = 0; i < 2; ++i) {
    if (op == "read")
      ring->async_read(asio::buffer(buf), done.handler());
    else
      ring->async_write(asio::buffer("x", 1), done.handler());
  }
  if (parked) {
    raw_map raw(name);
    REQUIRE(run_until(io, [&] {
      return (op == "read" ? raw.async_parked_readers() : raw.async_parked_writers()) == 1;
    }));
  }
  REQUIRE(done.calls == 0);
  if (destroy)
    ring.reset();
  else
    ring->close();
  REQUIRE(run_until_idle(io));
  CHECK(done.calls == 2);
  CHECK(done.ec == asio::error::operation_aborted);
}

// ---- many processes ------------------------------------------------------------------------

TEST_CASE(
    "two producer and two consumer processes pass 100 000 checksummed messages each "
    "through a ring, none lost, duplicated or corrupted",
    "[ring][process]") {
  constexpr std::uint32_t per_producer = 100'000;
  static_assert(sizeof(stress_message) == 64 && sizeof(consumer_result) == 64);
  asio::io_context io;
  scoped_name name("ring"), results_name("ring-results");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 64, sizeof(stress_message));
  circular_buffer results(io.get_executor(), shmio::create_only, results_name, 4,
                          sizeof(consumer_result));
  const auto start = steady::now();
  child c1({peer_path(), "ring-consume", name.str(), results_name.str(), "1", "sync"});
  child c2({peer_path(), "ring-consume", name.str(), results_name.str(), "2", "async"});
  child p1({peer_path(), "ring-produce", name.str(), "1", std::to_string(per_producer), "copy"});
  child p2(
      {peer_path(), "ring-produce", name.str(), "2", std::to_string(per_producer), "in-place"});
  REQUIRE(p1.wait(30s) == 0);
  REQUIRE(p2.wait(30s) == 0);
  for (int i = 0; i < 2; ++i) {  // after every data message: one stop per consumer
    stress_message stop{};
    stop.producer = stop_producer;
    REQUIRE(ring.write(asio::buffer(&stop, stress_header), bound) == stress_header);
  }
  REQUIRE(c1.wait(30s) == 0);
  REQUIRE(c2.wait(30s) == 0);
  const auto elapsed = steady::now() - start;

  consumer_result total{};
  for (int i = 0; i < 2; ++i) {
    consumer_result r{};
    REQUIRE(results.read(asio::buffer(&r, sizeof r), 0ms) == sizeof r);
    CAPTURE(r.consumer, r.count[0], r.count[1]);
    CHECK(r.bad == 0);
    CHECK(r.out_of_order == 0);  // per reader, a producer's messages stay in order
    total.bad += r.bad;
    for (int p = 0; p < 2; ++p) {
      total.count[p] += r.count[p];
      total.sum[p] += r.sum[p];
      total.xors[p] ^= r.xors[p];
    }
  }
  for (std::uint32_t p = 0; p < 2; ++p) {
    std::uint64_t sum = 0, xors = 0;
    for (std::uint32_t seq = 0; seq < per_producer; ++seq) {
      sum += mix(p + 1, seq);
      xors ^= mix(p + 1, seq);
    }
    CAPTURE(p + 1);
    CHECK(total.count[p] == per_producer);
    CHECK(total.sum[p] == sum);
    CHECK(total.xors[p] == xors);
  }
  CHECK(take(ring, 0ms) == "<timed out>");
  CHECK(elapsed < 20s);
  WARN("stress run: " << std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count()
                      << " ms");
}

// ---- crashes -------------------------------------------------------------------------------

TEST_CASE(
    "a ring writer killed inside write_in_place stalls nobody, and its half-written message is "
    "never read",
    "[ring][process]") {
  const std::string how = GENERATE("sync", "async");
  CAPTURE(how);
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 2, 32);
  put(ring, "before");
  signal_pipe in_fill;
  child victim([&] {
    asio::io_context cio;
    circular_buffer mine(cio.get_executor(), shmio::open_only, name);
    mine.write_in_place(
        [&](std::span<std::byte> node) -> std::size_t {
          std::memcpy(node.data(), "HALF-WRITTEN", 12);
          in_fill.notify();
          for (;;)
            ::pause();  // until killed
        },
        bound);
    return 1;
  });
  REQUIRE(in_fill.wait() == 1);
  REQUIRE(victim.kill9() == 128 + SIGKILL);
  const auto killed = steady::now();
  child writer({peer_path(), "ring-write", name.str(), "0", "3"});

  std::vector<std::string> received;
  if (how == "sync") {
    for (int i = 0; i < 4; ++i)
      received.push_back(take(ring));
  } else {
    run_coroutine(io, [&]() -> asio::awaitable<void> {
      std::string buf(32, '\0');
      for (int i = 0; i < 4; ++i) {
        const std::size_t n = co_await ring.async_read(asio::buffer(buf), asio::use_awaitable);
        received.push_back(buf.substr(0, n));
      }
    });
  }
  const auto elapsed = steady::now() - killed;
  CHECK(received == std::vector<std::string>{"before", "m0", "m1", "m2"});
  CHECK(elapsed < 1s);
  CHECK(writer.wait() == 0);
  CHECK(take(ring, 0ms) == "<timed out>");  // never the half-written one
}

TEST_CASE(
    "a ring reader killed inside read_in_place stalls no writer: a full ring frees within 1 s",
    "[ring][process]") {
  const std::string how = GENERATE("sync", "async");
  CAPTURE(how);
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 2, 16);
  put(ring, "m0");
  put(ring, "m1");
  signal_pipe in_use;
  child victim([&] {
    asio::io_context cio;
    circular_buffer mine(cio.get_executor(), shmio::open_only, name);
    mine.read_in_place(
        [&](std::span<const std::byte> message) {
          in_use.notify(text(message) == "m0" ? 1 : 2);
          for (;;)
            ::pause();  // until killed
        },
        bound);
    return 1;
  });
  REQUIRE(in_use.wait() == 1);
  REQUIRE(victim.kill9() == 128 + SIGKILL);
  const auto killed = steady::now();

  if (how == "sync") {
    CHECK(put(ring, "m2", bound) == 2);
  } else {
    completions done;
    ring.async_write(asio::buffer("m2", 2), done.handler());
    REQUIRE(run_until(io, [&] { return done.calls == 1; }));
    CHECK_FALSE(done.ec);
  }
  CHECK(steady::now() - killed < 1s);
  // m0 was lost with its reader; the rest flows, lap after lap.
  CHECK(take(ring) == "m1");
  CHECK(take(ring) == "m2");
  for (int i = 3; i < 10; ++i) {
    REQUIRE(put(ring, numbered(i), 0ms) == 2);
    REQUIRE(take(ring, 0ms) == numbered(i));
  }
}

TEST_CASE(
    "a process that re-opens the ring after a crash takes the dead one's participant "
    "number, recovers its node and works",
    "[ring][process]") {
  asio::io_context io;
  scoped_name name("ring");
  constexpr std::size_t node_size = 16;
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 2, node_size);  // number 1
  raw_map raw(name);
  signal_pipe in_fill;
  child victim([&] {
    asio::io_context cio;
    circular_buffer mine(cio.get_executor(), shmio::open_only, name);  // number 2
    mine.write_in_place(
        [&](std::span<std::byte> node) -> std::size_t {
          std::memcpy(node.data(), "HALF", 4);
          in_fill.notify();
          for (;;)
            ::pause();
        },
        bound);
    return 1;
  });
  REQUIRE(in_fill.wait() == 1);
  REQUIRE(victim.kill9() == 128 + SIGKILL);
  REQUIRE(raw.node(0, node_size).word.load() == node_word(0, 0, 2));  // claimed by number 2

  signal_pipe opened, go, replied;
  child reopener([&] {
    asio::io_context cio;
    circular_buffer mine(cio.get_executor(), shmio::open_only, name);  // number 2 again
    opened.notify();
    if (go.wait() != 1) return 2;
    if (put(mine, "after", bound) != 5) return 3;
    if (replied.wait() != 1) return 4;  // not before the parent has read "after"
    return take(mine, bound) == "reply" ? 0 : 5;
  });
  REQUIRE(opened.wait() == 1);
  // The opener skipped what its number's previous holder left half-written, without waiting.
  CHECK(raw.node(0, node_size).word.load() == node_word(0, 2, 0));
  go.notify();
  CHECK(take(ring) == "after");
  put(ring, "reply");
  replied.notify();
  CHECK(reopener.wait() == 0);
  CHECK(take(ring, 0ms) == "<timed out>");
}

TEST_CASE(
    "a writer-only join recovers its number's claims between the head and the tail, and every "
    "node when the cursors are crossed",
    "[ring]") {
  // recover_own_writes, as an RPC listener's clients join: number 9's previous holder died
  // holding a write claim. Positions 0-2 are written and 0 read (all three if drained): head 1
  // (3), tail 3, then 4 if the claim's writer or another moved it on.
  const std::string where = GENERATE("at the tail, the tail moved on", "at the tail, not moved on",
                                     "at the head of a drained ring", "past crossed cursors");
  CAPTURE(where);
  const bool drained = where == "at the head of a drained ring";
  asio::io_context io;
  scoped_name name("ring");
  constexpr std::size_t node_size = 16;
  constexpr std::uint64_t count = 8;
  circular_buffer ring(io.get_executor(), shmio::create_only, name, count, node_size);
  raw_map raw(name);
  for (int i = 0; i < 3; ++i)
    put(ring, numbered(i));
  REQUIRE(take(ring, 0ms) == numbered(0));
  if (drained) {  // the usual state of a connect ring: every request taken, head 3 = tail 3
    REQUIRE(take(ring, 0ms) == numbered(1));
    REQUIRE(take(ring, 0ms) == numbered(2));
  }
  std::uint64_t claimed = 3;
  if (where == "past crossed cursors") {
    // Damage (no claim past the tail can stand in a healthy ring): a head past the tail tells
    // nothing, so every node is looked at, the one at position 5 too.
    claimed = 5;
    raw.state().head.position.store(4);
  }
  raw.node(claimed, node_size).word.store(node_word(claimed, claimed, 9));
  if (where != "at the tail, not moved on" && where != "past crossed cursors")
    raw.state().tail.position.store(4);

  std::error_code ec;
  shmio::segment seg = shmio::segment::open(name, shmio::object_kind::circular_buffer, ec);
  REQUIRE_FALSE(ec);
  shmio::detail::ring_geometry g;
  REQUIRE_FALSE(shmio::detail::ring_view::validate(seg.body(), g));
  shmio::detail::ring_view joiner(reinterpret_cast<layout::ring_state*>(seg.body().data()), g,
                                  seg.native_handle(), 9);
  joiner.recover_own_writes();
  // Skipped: "done with its lap", free for the next lap's writer.
  CHECK(raw.node(claimed, node_size).word.load() == node_word(claimed, claimed + count, 0));
  if (where == "past crossed cursors") return;
  // Readers pass the skipped node at once: nothing waits for the dead writer's patience.
  if (!drained) {
    CHECK(take(ring, 0ms) == numbered(1));
    CHECK(take(ring, 0ms) == numbered(2));
  }
  CHECK(put(ring, "after", 0ms) == 5);
  CHECK(take(ring, 0ms) == "after");
}

TEST_CASE("a ring reader that died between claiming its node and advancing the head stalls nobody",
          "[ring]") {
  asio::io_context io;
  scoped_name name("ring");
  constexpr std::size_t node_size = 16;
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 4, node_size);
  raw_map raw(name);
  put(ring, "m0");
  // Participant 100 (which holds no lock: dead) claimed position 0 for reading and died before
  // moving the head.
  REQUIRE(raw.node(0, node_size).word.load() == node_word(0, 1, 0));
  raw.node(0, node_size).word.store(node_word(0, 1, 100, true));
  REQUIRE(raw.state().head.position.load() == 0);
  for (int i = 1; i < 4; ++i)
    put(ring, numbered(i));
  for (int i = 1; i < 4; ++i)
    CHECK(take(ring, 0ms) == numbered(i));
  const auto start = steady::now();
  CHECK(put(ring, "m4", bound) == 2);  // position 4 is the dead reader's node
  CHECK(steady::now() - start < 1s);
  CHECK(take(ring, 0ms) == "m4");
}

TEST_CASE(
    "a ring writer that died between claiming its node and advancing the tail stalls no later "
    "writer",
    "[ring][process]") {
  const std::string who = GENERATE("a reader skipped the node", "a re-opener recovered the node");
  CAPTURE(who);
  asio::io_context io;
  scoped_name name("ring");
  constexpr std::size_t node_size = 16;
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 4, node_size);  // number 1
  raw_map raw(name);
  // A writer claimed position 0 and died before moving the tail: its node names it, the tail
  // still says 0. Number 100 is nobody's (dead); number 2 is the next opener's.
  const std::uint16_t dead = who == "a reader skipped the node" ? 100 : 2;
  raw.node(0, node_size).word.store(node_word(0, 0, dead));
  REQUIRE(raw.state().tail.position.load() == 0);

  if (dead == 100) {
    // A reader waiting for position 0 finds its writer dead and skips the node.
    REQUIRE(eventually([&] {
      take(ring, 20ms);
      return raw.node(0, node_size).word.load() != node_word(0, 0, dead);
    }));
  } else {
    circular_buffer reopener(io.get_executor(), shmio::open_only, name);  // recovers number 2
  }
  CHECK(raw.node(0, node_size).word.load() == node_word(0, 4, 0));  // done with lap 0

  // The next writer must get past position 0. It runs in a child: a writer spinning for ever
  // inside write() can only be stopped by killing it.
  child writer([&] {
    asio::io_context cio;
    circular_buffer mine(cio.get_executor(), shmio::open_only, name);
    return put(mine, "after", 1s) == 5 ? 0 : 1;
  });
  const int rc = writer.wait(5s);
  INFO("tail " << raw.state().tail.position.load() << ", head "
               << raw.state().head.position.load());
  CHECK(rc == 0);  // -1: the writer never returned (it spins in try_claim_write)
  if (rc == 0) CHECK(take(ring, 0ms) == "after");
}

TEST_CASE(
    "a ring handle waiting both to read past a dead writer and to write past a dead reader "
    "recovers both nodes",
    "[ring][async]") {
  const bool one_handle = GENERATE(true, false);  // false: a reader handle and a writer handle
  CAPTURE(one_handle);
  asio::io_context io;
  scoped_name name("ring");
  constexpr std::size_t node_size = 16;
  // Parking at once (no spinning through the executor) makes the order of the handle's
  // attempts exact: each wake-up re-checks the read, then the write.
  const auto park = shmio::wait_strategy::park_only();
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 2, node_size, park);
  circular_buffer other(io.get_executor(), shmio::open_only, name, park);
  circular_buffer& writer = one_handle ? ring : other;
  raw_map raw(name);
  put(ring, "lost");
  // Participant 100 claimed position 0 for reading and died; participant 101 claimed position 1
  // for writing and died. Both moved their cursor first. Nobody holds those numbers' locks.
  raw.node(0, node_size).word.store(node_word(0, 1, 100, true));
  raw.state().head.position.store(1);
  raw.node(1, node_size).word.store(node_word(1, 1, 101));
  raw.state().tail.position.store(2);

  // One handle now waits on both: its read on node 1 (dead writer), its write on node 0 (dead
  // reader). Each must find its node's owner dead and recover it.
  std::string buf(node_size, '\0');
  completions read, write;
  ring.async_read(asio::buffer(buf), read.handler());
  writer.async_write(asio::buffer("w", 1), write.handler());
  const auto start = steady::now();
  const bool both = run_until(
      io, [&] { return read.calls == 1 && write.calls == 1; }, 3s);
  INFO("node 0 word " << std::hex << raw.node(0, node_size).word.load() << ", node 1 word "
                      << raw.node(1, node_size).word.load());
  CHECK(both);  // false: each wait resets the handle's "stuck since" record of the other
  if (both) {
    CHECK(steady::now() - start < 1s);
    CHECK_FALSE(write.ec);
    CHECK_FALSE(read.ec);
    CHECK(buf.substr(0, read.size) == "w");
  }
}

// ---- batches -------------------------------------------------------------------------------

namespace {

// Messages "m<first>" ... "m<first + count - 1>", and one const_buffer per message over them
// (the strings must outlive the buffers).
struct numbered_batch {
  std::vector<std::string> texts;
  std::vector<asio::const_buffer> buffers;
  numbered_batch(unsigned long first, std::size_t count) {
    for (std::size_t i = 0; i < count; ++i)
      texts.push_back(numbered(first + i));
    for (const auto& t : texts)
      buffers.push_back(asio::buffer(t));
  }
  std::span<const asio::const_buffer> span() const { return buffers; }
};

// read_batch_in_place with at most `max` messages, as text.
std::vector<std::string> take_batch(circular_buffer& ring, std::size_t max,
                                    std::chrono::milliseconds timeout = 0ms) {
  std::vector<std::string> got;
  std::error_code ec;
  const std::size_t n = ring.read_batch_in_place(
      [&](std::span<const std::byte> m) { got.push_back(text(m)); }, max, timeout, ec);
  if (ec && ec != shmio::errc::timed_out) throw std::system_error(ec, "take_batch");
  if (n != got.size()) throw test_failure("read_batch_in_place miscounted");
  return got;
}

std::vector<std::string> numbered_range(unsigned long first, std::size_t count) {
  return numbered_batch(first, count).texts;
}

}  // namespace

TEST_CASE(
    "a write batch of 10 into a ring with 4 free nodes writes the first 4, and the rest go in "
    "when resubmitted",
    "[ring][batch]") {
  const bool ec_form = GENERATE(false, true);
  CAPTURE(ec_form);
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 6, 16);
  put(ring, "a");
  put(ring, "b");
  numbered_batch batch(0, 10);
  auto write = [&](std::span<const asio::const_buffer> messages) {
    if (!ec_form) return ring.write_batch(messages, 0ms);
    std::error_code ec;
    const std::size_t n = ring.write_batch(messages, 0ms, ec);
    CHECK_FALSE(ec);
    return n;
  };
  CHECK(write(batch.span()) == 4);
  CHECK(take_batch(ring, 3) == std::vector<std::string>{"a", "b", "m0"});
  CHECK(write(batch.span().subspan(4)) == 3);
  CHECK(take_batch(ring, 100) == numbered_range(1, 6));
  CHECK(write(batch.span().subspan(7)) == 3);
  CHECK(take_batch(ring, 100) == numbered_range(7, 3));
  CHECK(take_batch(ring, 100).empty());
}

TEST_CASE(
    "a write batch on a full ring and a read batch on an empty one: 0 at once with a 0 ms "
    "timeout, 0 after a finite one, errc::timed_out in the error_code form",
    "[ring][batch]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 2, 16);
  std::error_code ec;
  auto nothing = [](std::span<const std::byte>) { FAIL("a message on an empty ring"); };

  CHECK(ring.read_batch_in_place(nothing, 8, 0ms) == 0);
  CHECK(ring.read_batch_in_place(nothing, 8, 0ms, ec) == 0);
  CHECK(ec == shmio::errc::timed_out);
  auto start = steady::now();
  CHECK(ring.read_batch_in_place(nothing, 8, 40ms, ec) == 0);
  CHECK(steady::now() - start >= 40ms);
  CHECK(ec == shmio::errc::timed_out);

  numbered_batch batch(0, 3);
  CHECK(ring.write_batch(batch.span(), 0ms) == 2);
  CHECK(ring.write_batch(batch.span().subspan(2), 0ms) == 0);
  CHECK(ring.write_batch(batch.span().subspan(2), 0ms, ec) == 0);
  CHECK(ec == shmio::errc::timed_out);
  start = steady::now();
  CHECK(ring.write_batch(batch.span().subspan(2), 40ms, ec) == 0);
  CHECK(steady::now() - start >= 40ms);
  CHECK(ec == shmio::errc::timed_out);

  // Empty batches do nothing and succeed at once.
  CHECK(ring.write_batch({}, bound, ec) == 0);
  CHECK_FALSE(ec);
  CHECK(ring.read_batch_in_place(nothing, 0, bound, ec) == 0);
  CHECK_FALSE(ec);
  CHECK(take_batch(ring, 8) == numbered_range(0, 2));
}

TEST_CASE("a blocking write batch on a full ring waits for the first node, then writes",
          "[ring][batch][process]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 3, 16);
  numbered_batch batch(0, 5);
  REQUIRE(ring.write_batch(batch.span(), 0ms) == 3);
  child reader({peer_path(), "ring-read", name.str(), "0", "2"});
  // Woken by the reader's first read; takes at least that node, at most both.
  const std::size_t n = ring.write_batch(batch.span().subspan(3), bound);
  CHECK(n >= 1);
  CHECK(reader.wait() == 0);
  if (n == 1) CHECK(ring.write_batch(batch.span().subspan(4), 0ms) == 1);
  CHECK(take_batch(ring, 8) == numbered_range(2, 3));
}

TEST_CASE(
    "a batch with one message larger than node_size fails with message_too_large and "
    "writes nothing",
    "[ring][batch]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 8, 16);
  const std::string fits = "ok", big(17, 'x');
  const asio::const_buffer messages[] = {asio::buffer(fits), asio::buffer(fits), asio::buffer(big),
                                         asio::buffer(fits)};
  SECTION("throwing form") {
    try {
      ring.write_batch(messages, 0ms);
      FAIL("wrote a batch with an oversize message");
    } catch (const shmio::error& e) {
      CHECK(e.code() == shmio::errc::message_too_large);
    }
  }
  SECTION("error_code form") {
    std::error_code ec;
    CHECK(ring.write_batch(messages, bound, ec) == 0);
    CHECK(ec == shmio::errc::message_too_large);
  }
  SECTION("async_write_batch") {
    completions done;
    ring.async_write_batch(messages, done.handler());
    CHECK(done.calls == 0);
    REQUIRE(run_until_idle(io));
    CHECK(done.calls == 1);
    CHECK(done.ec == shmio::errc::message_too_large);
    CHECK(done.size == 0);
  }
  CHECK(take_batch(ring, 8).empty());
}

TEST_CASE(
    "read batches take at most max_messages, and messages keep their order across batches "
    "and laps",
    "[ring][batch]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer writer(io.get_executor(), shmio::create_only, name, 7, 16);
  circular_buffer reader(io.get_executor(), shmio::open_only, name);
  numbered_batch first(0, 7);
  REQUIRE(writer.write_batch(first.span(), 0ms) == 7);
  CHECK(take_batch(reader, 3) == numbered_range(0, 3));
  CHECK(take_batch(reader, 1) == numbered_range(3, 1));
  CHECK(take_batch(reader, 3) == numbered_range(4, 3));
  CHECK(take_batch(reader, 3).empty());

  // Batches of varying sizes on both sides, over many laps of the 7-node ring.
  unsigned long written = 7, read = 7;
  for (int round = 0; round < 300; ++round) {
    numbered_batch batch(written, 1 + round % 9);
    written += writer.write_batch(batch.span(), 0ms);
    const auto got = take_batch(reader, 1 + (round * 5) % 8);
    REQUIRE(got == numbered_range(read, got.size()));
    read += got.size();
  }
  const auto rest = take_batch(reader, 100);
  CHECK(rest == numbered_range(read, rest.size()));
  CHECK(read + rest.size() == written);
  CHECK(written > 700);
}

TEST_CASE(
    "an exception from a read batch's use consumes exactly the messages seen so far, and the "
    "rest stay readable",
    "[ring][batch]") {
  const std::string form = GENERATE("sync", "sync ec", "async");
  CAPTURE(form);
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 8, 16);
  numbered_batch batch(0, 6);
  REQUIRE(ring.write_batch(batch.span(), 0ms) == 6);
  std::vector<std::string> seen;
  auto use = [&seen](std::span<const std::byte> m) {
    seen.push_back(text(m));
    if (seen.size() == 3) throw test_failure("third");
  };
  if (form == "async") {
    completions done;
    ring.async_read_batch_in_place(use, 10, done.handler());
    REQUIRE(run_until_idle(io));
    CHECK(done.calls == 1);
    CHECK(done.ec == shmio::errc::callback_failed);
    CHECK(done.size == 3);
  } else {
    std::error_code ec;
    CHECK_THROWS_AS(form == "sync" ? ring.read_batch_in_place(use, 10, 0ms)
                                   : ring.read_batch_in_place(use, 10, 0ms, ec),
                    test_failure);
  }
  CHECK(seen == numbered_range(0, 3));
  CHECK(take_batch(ring, 10) == numbered_range(3, 3));
}

TEST_CASE(
    "read_batch copies messages and their sizes; one too big for its buffer ends the batch "
    "before it, or fails the batch if it comes first",
    "[ring][batch]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 8, 16);
  for (std::string_view m : {"one", "two", "three!", "four"})
    put(ring, m);
  std::string a(8, '\0'), b(8, '\0'), c(4, '\0'), d(8, '\0');
  const asio::mutable_buffer buffers[] = {asio::buffer(a), asio::buffer(b), asio::buffer(c),
                                          asio::buffer(d)};
  std::size_t sizes[4] = {};
  CHECK(ring.read_batch(buffers, sizes, 0ms) == 2);  // "three!" does not fit c
  CHECK(a.substr(0, sizes[0]) == "one");
  CHECK(b.substr(0, sizes[1]) == "two");
  const asio::mutable_buffer small[] = {asio::buffer(c), asio::buffer(d)};
  std::error_code ec;
  CHECK(ring.read_batch(small, sizes, 0ms, ec) == 0);
  CHECK(ec == shmio::errc::message_too_large);  // the first one: as read, it stays
  try {
    ring.read_batch(small, sizes, 0ms);
    FAIL("read a message into a buffer too small for it");
  } catch (const shmio::error& e) {
    CHECK(e.code() == shmio::errc::message_too_large);
  }
  // Fewer sizes than buffers: the sizes bound the batch.
  CHECK(ring.read_batch(buffers, std::span(sizes, 1), 0ms) == 1);
  CHECK(a.substr(0, sizes[0]) == "three!");
  CHECK(take_batch(ring, 8) == std::vector<std::string>{"four"});
}

TEST_CASE(
    "a corrupted node in the middle of a read batch ends the batch without an error; the next "
    "read batch reports it, and the messages after it still arrive",
    "[ring][batch]") {
  asio::io_context io;
  scoped_name name("ring");
  constexpr std::size_t node_size = 16;
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 8, node_size);
  raw_map raw(name);
  numbered_batch batch(0, 5);
  REQUIRE(ring.write_batch(batch.span(), 0ms) == 5);
  raw.node(2, node_size).length = 17;
  std::error_code ec;
  std::vector<std::string> got;
  auto use = [&](std::span<const std::byte> m) { got.push_back(text(m)); };
  CHECK(ring.read_batch_in_place(use, 8, 0ms, ec) == 2);
  CHECK_FALSE(ec);
  CHECK(got == numbered_range(0, 2));
  CHECK(ring.read_batch_in_place(use, 8, 0ms, ec) == 0);
  CHECK(ec == shmio::errc::corrupted);
  CHECK(got.size() == 2);
  CHECK(take_batch(ring, 8) == numbered_range(3, 2));
}

TEST_CASE(
    "async batches complete callbacks with their counts, and never inside the initiating "
    "call",
    "[ring][batch][async]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 4, 16);
  std::vector<std::string> got;
  completions r, w1, w2;
  ring.async_read_batch_in_place([&](std::span<const std::byte> m) { got.push_back(text(m)); }, 3,
                                 r.handler());  // waits: the ring is empty
  io.poll();
  CHECK(r.calls == 0);
  numbered_batch batch(0, 6);
  ring.async_write_batch(batch.span(), w1.handler());
  CHECK(w1.calls == 0);
  REQUIRE(run_until_idle(io));
  CHECK(w1.calls == 1);
  CHECK_FALSE(w1.ec);
  CHECK(r.calls == 1);
  CHECK_FALSE(r.ec);
  CHECK(r.size >= 1);  // it may have woken after the first message or later
  CHECK(got == numbered_range(0, r.size));
  ring.async_write_batch(batch.span().subspan(w1.size), w2.handler());
  REQUIRE(run_until_idle(io));
  CHECK(w2.calls == 1);
  CHECK(w1.size + w2.size <= 6);
  const auto rest = take_batch(ring, 8);
  CHECK(rest == numbered_range(r.size, w1.size + w2.size - r.size));
}

TEST_CASE("async batches with use_awaitable move 500 messages between coroutines in order",
          "[ring][batch][async]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 8, 16);
  constexpr std::size_t total = 500;
  std::vector<std::string> received;
  bool reader_done = false;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        while (received.size() < total) {
          const std::size_t n = co_await ring.async_read_batch_in_place(
              [&](std::span<const std::byte> m) { received.push_back(text(m)); }, 5,
              asio::use_awaitable);
          if (n == 0 || n > 5) throw test_failure("read batch count out of range");
        }
      },
      [&](std::exception_ptr e) { reader_done = !e; });
  numbered_batch all(0, total);
  run_coroutine(io, [&]() -> asio::awaitable<void> {
    for (auto rest = all.span(); !rest.empty();) {
      const std::size_t n = co_await ring.async_write_batch(
          rest.first(std::min<std::size_t>(rest.size(), 13)), asio::use_awaitable);
      if (n == 0) throw test_failure("an async write batch wrote nothing");
      rest = rest.subspan(n);
    }
  });
  REQUIRE(run_until(io, [&] { return reader_done; }));
  CHECK(received == all.texts);
}

TEST_CASE("async batches with use_future complete their futures", "[ring][batch][async]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 4, 16);
  auto work = asio::make_work_guard(io);
  std::thread runner([&] { io.run_for(bound); });
  std::vector<std::string> got;  // touched only by the io thread until the future is ready
  std::future<std::size_t> read = ring.async_read_batch_in_place(
      [&](std::span<const std::byte> m) { got.push_back(text(m)); }, 8, asio::use_future);
  CHECK(read.wait_for(20ms) == std::future_status::timeout);  // nothing written yet
  numbered_batch batch(0, 3);
  std::future<std::size_t> write = ring.async_write_batch(batch.span(), asio::use_future);
  REQUIRE(write.wait_for(bound) == std::future_status::ready);
  REQUIRE(read.wait_for(bound) == std::future_status::ready);
  const std::size_t written = write.get();
  const std::size_t n = read.get();
  work.reset();
  runner.join();
  CHECK(written == 3);
  CHECK(n >= 1);
  CHECK(got == numbered_range(0, n));
  CHECK(take_batch(ring, 8) == numbered_range(n, 3 - n));
}

TEST_CASE(
    "a waiting async batch cancelled through its slot completes once with operation_aborted and "
    "loses nothing",
    "[ring][batch][async]") {
  const auto type = GENERATE(asio::cancellation_type::terminal, asio::cancellation_type::partial,
                             asio::cancellation_type::total);
  const std::string op = GENERATE("read", "write");
  CAPTURE(type_name(type), op);
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 2, 16);
  asio::cancellation_signal signal;
  completions done;
  bool used = false;
  numbered_batch batch(0, 4);
  if (op == "read") {
    ring.async_read_batch_in_place([&](std::span<const std::byte>) { used = true; }, 8,
                                   asio::bind_cancellation_slot(signal.slot(), done.handler()));
  } else {
    REQUIRE(ring.write_batch(batch.span(), 0ms) == 2);  // full
    ring.async_write_batch(batch.span().subspan(2),
                           asio::bind_cancellation_slot(signal.slot(), done.handler()));
  }
  cancel_pending(io, signal, type, done);
  CHECK(done.size == 0);
  signal.emit(type);  // finds nothing to cancel
  if (op == "read") {
    REQUIRE(ring.write_batch(batch.span(), 0ms) == 2);
    REQUIRE(run_until_idle(io));  // a read that was not really cancelled would take them now
    CHECK_FALSE(used);
  } else {
    REQUIRE(run_until_idle(io));
  }
  CHECK(done.calls == 1);
  CHECK(take_batch(ring, 8) == numbered_range(0, 2));
  REQUIRE(run_until_idle(io));  // a write that was not really cancelled would go in now
  CHECK(take_batch(ring, 8).empty());
}

TEST_CASE(
    "a writer process and a reader process pass 20 000 checksummed messages in batches through "
    "an 8-node ring: each exactly once, in order",
    "[ring][batch][process]") {
  using modes = std::pair<std::string, std::string>;  // how the writer writes, the reader reads
  const modes how = GENERATE(modes{"batch", "batch"}, modes{"async-batch", "async-batch"},
                             modes{"batch", "copy-batch"});
  const std::string& produce = how.first;
  const std::string& consume = how.second;
  CAPTURE(produce, consume);
  constexpr std::uint32_t count = 20'000;
  asio::io_context io;
  scoped_name name("ring"), results_name("ring-results");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 8, sizeof(stress_message));
  circular_buffer results(io.get_executor(), shmio::create_only, results_name, 2,
                          sizeof(consumer_result));
  child reader({peer_path(), "ring-consume", name.str(), results_name.str(), "1", consume});
  child writer({peer_path(), "ring-produce", name.str(), "1", std::to_string(count), produce});
  REQUIRE(writer.wait(30s) == 0);
  stress_message stop{};
  stop.producer = stop_producer;
  REQUIRE(ring.write(asio::buffer(&stop, stress_header), bound) == stress_header);
  REQUIRE(reader.wait(30s) == 0);
  consumer_result r{};
  REQUIRE(results.read(asio::buffer(&r, sizeof r), 0ms) == sizeof r);
  std::uint64_t sum = 0, xors = 0;
  for (std::uint32_t seq = 0; seq < count; ++seq) {
    sum += mix(1, seq);
    xors ^= mix(1, seq);
  }
  CHECK(r.bad == 0);
  CHECK(r.out_of_order == 0);
  CHECK(r.count[0] == count);
  CHECK(r.count[1] == 0);
  CHECK(r.sum[0] == sum);
  CHECK(r.xors[0] == xors);
  CHECK(take(ring, 0ms) == "<timed out>");
}

TEST_CASE("a closed ring's batch calls fail with bad_descriptor", "[ring][batch]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 2, 16);
  ring.close();
  numbered_batch batch(0, 2);
  std::string buf(16, '\0');
  const asio::mutable_buffer buffers[] = {asio::buffer(buf)};
  std::size_t sizes[1] = {};
  auto nothing = [](std::span<const std::byte>) { FAIL("a message from a closed ring"); };
  std::error_code ec;
  CHECK(ring.write_batch(batch.span(), 0ms, ec) == 0);
  CHECK(ec == asio::error::bad_descriptor);
  CHECK(ring.read_batch_in_place(nothing, 4, 0ms, ec) == 0);
  CHECK(ec == asio::error::bad_descriptor);
  CHECK(ring.read_batch(buffers, sizes, 0ms, ec) == 0);
  CHECK(ec == asio::error::bad_descriptor);
  CHECK_THROWS_AS(ring.write_batch(batch.span(), 0ms), shmio::error);
  completions w, r;
  ring.async_write_batch(batch.span(), w.handler());
  ring.async_read_batch_in_place(nothing, 4, r.handler());
  REQUIRE(run_until_idle(io));
  CHECK(w.calls == 1);
  CHECK(w.ec == asio::error::bad_descriptor);
  CHECK(r.calls == 1);
  CHECK(r.ec == asio::error::bad_descriptor);
}
