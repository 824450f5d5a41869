// Asio's contract for async operations, as every Asio user relies on it: no handler runs inside
// the initiating function; operations of one handle complete in the order started; user
// callbacks of the in-place forms run in the handler's context and under no lock of ours; and
// the coroutine fast forms (co_read, co_wait, ...) that take a ready result without a trip
// through the scheduler.

#include <array>
#include <asio/bind_allocator.hpp>
#include <asio/bind_cancellation_slot.hpp>
#include <asio/bind_executor.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/strand.hpp>
#include <asio/use_awaitable.hpp>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstddef>
#include <exception>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "shmio/broadcast_buffer.hpp"
#include "shmio/circular_buffer.hpp"
#include "shmio/named_event.hpp"
#include "support.hpp"

namespace {

using namespace std::chrono_literals;
using shmio::circular_buffer;
using shmio::event_mode;
using shmio::named_event;
using shmio::test::scoped_name;

constexpr std::chrono::milliseconds bound = shmio::test::default_bound;

// Spawns `coroutine` on `ex`, runs `io` until it finished (or `bound` passes) and returns how
// many handlers it ran; rethrows what the coroutine threw.
template <class Executor, class Fn>
std::size_t run_coroutine(asio::io_context& io, const Executor& ex, Fn coroutine) {
  std::exception_ptr failure;
  bool finished = false;
  asio::co_spawn(ex, std::move(coroutine), [&](std::exception_ptr e) {
    failure = e;
    finished = true;
  });
  const std::size_t handlers = io.run_for(bound);
  REQUIRE(finished);
  if (failure) std::rethrow_exception(failure);
  return handlers;
}

// One of the async operations whose result is ready at once, started with `token`.
enum class ready_op { ring_read, ring_write, ring_read_in_place, ring_write_in_place, event_wait };

const char* op_name(ready_op op) {
  switch (op) {
    case ready_op::ring_read:
      return "ring read";
    case ready_op::ring_write:
      return "ring write";
    case ready_op::ring_read_in_place:
      return "ring read in place";
    case ready_op::ring_write_in_place:
      return "ring write in place";
    case ready_op::event_wait:
      return "event wait";
  }
  return "?";
}

// A ring with one message in it and room for more, and a set manual-reset event: every
// ready_op can complete at once.
struct ready_objects {
  scoped_name ring_name{"ring"};
  scoped_name event_name{"event"};
  circular_buffer ring;
  named_event event;
  std::string buf = std::string(16, '\0');
  explicit ready_objects(const asio::any_io_executor& ex)
      : ring(ex, shmio::create_only, ring_name, 4, 16),
        event(ex, shmio::create_only, event_name, event_mode::manual_reset, true) {
    REQUIRE(ring.write(asio::buffer("ready", 5), bound) == 5);
  }
  template <class Handler>
  void start(ready_op op, Handler&& h) {
    switch (op) {
      case ready_op::ring_read:
        return ring.async_read(asio::buffer(buf), std::forward<Handler>(h));
      case ready_op::ring_write:
        return ring.async_write(asio::buffer("more", 4), std::forward<Handler>(h));
      case ready_op::ring_read_in_place:
        return ring.async_read_in_place([](std::span<const std::byte>) {},
                                        std::forward<Handler>(h));
      case ready_op::ring_write_in_place:
        return ring.async_write_in_place([](std::span<std::byte>) { return std::size_t{1}; },
                                         std::forward<Handler>(h));
      case ready_op::event_wait:
        return event.async_wait([h = std::forward<Handler>(h)](std::error_code ec) mutable {
          std::move(h)(ec, std::size_t{0});
        });
    }
  }
};

}  // namespace

TEST_CASE("a ready operation's handler never runs inside the initiating function",
          "[contract][async]") {
  const ready_op op =
      GENERATE(ready_op::ring_read, ready_op::ring_write, ready_op::ring_read_in_place,
               ready_op::ring_write_in_place, ready_op::event_wait);
  CAPTURE(op_name(op));
  asio::io_context io;
  ready_objects objects(io.get_executor());

  SECTION("a callback") {
    bool returned = false;
    bool ran_before_return = false;
    int calls = 0;
    objects.start(op, [&](std::error_code ec, std::size_t) {
      ran_before_return |= !returned;
      calls += !ec;
    });
    returned = true;
    CHECK(calls == 0);
    io.run_for(bound);
    CHECK(calls == 1);
    CHECK_FALSE(ran_before_return);
  }

  SECTION("an initiation of the user's that forwards use_awaitable's handler") {
    // The case: the coroutine must not resume (and destroy this initiation's frame)
    // before the initiation has done its own work after starting ours.
    run_coroutine(io, io.get_executor(), [&]() -> asio::awaitable<void> {
      bool more_work_done = false;
      bool resumed_before_more_work = false;
      co_await asio::async_initiate<const asio::use_awaitable_t<>&,
                                    void(std::error_code, std::size_t)>(
          [&](auto handler) {
            objects.start(op, std::move(handler));
            more_work_done = true;
          },
          asio::use_awaitable);
      resumed_before_more_work = !more_work_done;
      if (resumed_before_more_work) throw std::runtime_error("resumed inside the initiation");
    });
  }

  SECTION("co_spawn from a handler completes after it returns") {
    bool spawn_returned = false;
    bool completed_before_return = false;
    bool completed = false;
    asio::post(io, [&] {
      asio::co_spawn(
          io,
          [&]() -> asio::awaitable<void> {
            co_await asio::async_initiate<const asio::use_awaitable_t<>&,
                                          void(std::error_code, std::size_t)>(
                [&](auto handler) { objects.start(op, std::move(handler)); }, asio::use_awaitable);
          },
          [&](std::exception_ptr e) {
            completed_before_return |= !spawn_returned;
            completed = e == nullptr;
          });
      spawn_returned = true;
    });
    io.run_for(bound);
    CHECK(completed);
    CHECK_FALSE(completed_before_return);
  }
}

TEST_CASE("async writes of one handle are published in the order they were started",
          "[contract][ring][async]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer writer(io.get_executor(), shmio::create_only, name, 2, 16);
  circular_buffer reader(io.get_executor(), shmio::open_only, name);
  REQUIRE(writer.write(asio::buffer("old0", 4), bound) == 4);
  REQUIRE(writer.write(asio::buffer("old1", 4), bound) == 4);  // full
  std::vector<std::string> completed;
  writer.async_write(asio::buffer("A", 1), [&](std::error_code ec, std::size_t) {
    completed.push_back(ec ? "A failed" : "A");
  });
  // Let A start waiting (it spins through the executor or parks; it does not complete).
  for (int i = 0; i < 20; ++i)
    io.poll_one();
  REQUIRE(completed.empty());
  std::string buf(16, '\0');
  REQUIRE(reader.read(asio::buffer(buf), bound) == 4);  // one node free
  writer.async_write(asio::buffer("B", 1), [&](std::error_code ec, std::size_t) {
    completed.push_back(ec ? "B failed" : "B");
  });
  REQUIRE(reader.read(asio::buffer(buf), bound) == 4);  // another
  REQUIRE(shmio::test::run_until(io, [&] { return completed.size() == 2; }));
  CHECK(completed == std::vector<std::string>{"A", "B"});
  std::string first(16, '\0');
  std::string second(16, '\0');
  first.resize(reader.read(asio::buffer(first), bound));
  second.resize(reader.read(asio::buffer(second), bound));
  CHECK(first == "A");
  CHECK(second == "B");
}

TEST_CASE(
    "an async operation refused at once (too large, a batch of none) completes after the "
    "operations started before it that still wait",
    "[contract][ring][async]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 2, 16);
  circular_buffer other(io.get_executor(), shmio::open_only, name);
  std::vector<std::string> completed;
  auto note = [&](std::string what) {
    return [&, what](std::error_code ec, std::size_t) {
      completed.push_back(what + (ec == shmio::errc::message_too_large ? " too large"
                                  : ec                                 ? " failed"
                                                                       : ""));
    };
  };
  std::string buf(16, '\0');
  SECTION("writes") {
    REQUIRE(ring.write(asio::buffer("old0", 4), bound) == 4);
    REQUIRE(ring.write(asio::buffer("old1", 4), bound) == 4);  // full
    ring.async_write(asio::buffer("A", 1), note("A"));
    const std::string huge(17, 'x');
    ring.async_write(asio::buffer(huge), note("huge"));
    const asio::const_buffer batch[] = {asio::buffer("b", 1), asio::buffer(huge)};
    ring.async_write_batch(batch, note("batch"));
    for (int i = 0; i < 20; ++i)
      io.poll_one();
    CHECK(completed.empty());  // all behind A, which waits for room
    REQUIRE(other.read(asio::buffer(buf), bound) == 4);
    REQUIRE(shmio::test::run_until(io, [&] { return completed.size() == 3; }));
    CHECK(completed == std::vector<std::string>{"A", "huge too large", "batch too large"});
  }
  SECTION("writes, the first cancelled: the one refused behind it completes at once") {
    REQUIRE(ring.write(asio::buffer("old0", 4), bound) == 4);
    REQUIRE(ring.write(asio::buffer("old1", 4), bound) == 4);  // full, and stays full
    asio::cancellation_signal cancel_a;
    ring.async_write(asio::buffer("A", 1),
                     asio::bind_cancellation_slot(cancel_a.slot(), note("A")));
    const std::string huge(17, 'x');
    ring.async_write(asio::buffer(huge), note("huge"));
    for (int i = 0; i < 20; ++i)
      io.poll_one();
    CHECK(completed.empty());
    cancel_a.emit(asio::cancellation_type::terminal);
    REQUIRE(shmio::test::run_until(io, [&] { return completed.size() == 2; }));
    CHECK(completed == std::vector<std::string>{"A failed", "huge too large"});
  }
  SECTION("reads") {
    ring.async_read(asio::buffer(buf), note("A"));
    ring.async_read_batch_in_place([](std::span<const std::byte>) {}, 0, note("none"));
    for (int i = 0; i < 20; ++i)
      io.poll_one();
    CHECK(completed.empty());  // behind A, which waits for a message
    REQUIRE(other.write(asio::buffer("m", 1), bound) == 1);
    REQUIRE(shmio::test::run_until(io, [&] { return completed.size() == 2; }));
    CHECK(completed == std::vector<std::string>{"A", "none"});
  }
}

TEST_CASE("async reads of one handle take messages in the order they were started",
          "[contract][ring][async]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 8, 16);
  circular_buffer writer(io.get_executor(), shmio::open_only, name);
  const int reads = GENERATE(2, 5);
  std::vector<std::string> got;
  std::vector<std::string> bufs(reads, std::string(16, '\0'));
  for (int i = 0; i < reads; ++i)
    ring.async_read(asio::buffer(bufs[i]), [&, i](std::error_code ec, std::size_t n) {
      got.push_back(ec ? "error" : std::to_string(i) + ":" + bufs[i].substr(0, n));
    });
  for (int i = 0; i < 10; ++i)
    io.poll_one();
  std::vector<std::string> expected;
  for (int i = 0; i < reads; ++i) {
    const std::string m = "m" + std::to_string(i);
    REQUIRE(writer.write(asio::buffer(m), bound) == m.size());
    expected.push_back(std::to_string(i) + ":" + m);
  }
  REQUIRE(
      shmio::test::run_until(io, [&] { return got.size() == static_cast<std::size_t>(reads); }));
  CHECK(got == expected);
}

TEST_CASE("a result on its way to its handler is not overtaken by a later operation",
          "[contract][ring][async]") {
  asio::io_context io;
  asio::io_context elsewhere;  // runs the first handler only when the test says so
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 4, 16);
  circular_buffer writer(io.get_executor(), shmio::open_only, name);
  std::vector<std::string> order;
  std::string first(16, '\0');
  std::string second(16, '\0');
  auto record = [&](const char* what, std::string& buf) {
    return [&, what](std::error_code ec, std::size_t n) {
      order.push_back(ec ? "error" : what + buf.substr(0, n));
    };
  };
  auto write = [&](const char* m) { REQUIRE(writer.write(asio::buffer(m, 1), bound) == 1); };
  // The second read finds message 2 and must leave it until the first handler, which waits in
  // `elsewhere`, has run.
  auto second_waits_for_first = [&] {
    for (int i = 0; i < 50; ++i)
      io.poll_one();
    CHECK(order.empty());
    elsewhere.poll();
    REQUIRE(shmio::test::run_until(io, [&] { return order.size() == 2; }));
    CHECK(order == std::vector<std::string>{"first:1", "second:2"});
  };
  SECTION("a ready result posted to another executor") {
    write("1");
    ring.async_read(asio::buffer(first), asio::bind_executor(elsewhere, record("first:", first)));
    ring.async_read(asio::buffer(second), record("second:", second));
    write("2");
    second_waits_for_first();
  }
  SECTION("two waiting operations that one look finds ready together") {
    ring.async_read(asio::buffer(first), asio::bind_executor(elsewhere, record("first:", first)));
    ring.async_read(asio::buffer(second), record("second:", second));
    for (int i = 0; i < 20; ++i)
      io.poll_one();
    REQUIRE(order.empty());
    write("1");
    write("2");
    second_waits_for_first();
  }
  SECTION("a fast form started while an earlier result is posted") {
    write("1");
    write("2");
    run_coroutine(io, io.get_executor(), [&]() -> asio::awaitable<void> {
      ring.async_read(asio::buffer(first), record("async:", first));  // posted
      const std::size_t n = co_await ring.co_read(asio::buffer(second));
      order.push_back("co:" + second.substr(0, n));
    });
    CHECK(order == std::vector<std::string>{"async:1", "co:2"});
  }
}

TEST_CASE("handlers on a strand of a multi-threaded io_context run in the order started",
          "[contract][ring][async][strand]") {
  asio::io_context io(4);
  auto strand = asio::make_strand(io);
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 64, 16);
  circular_buffer writer(io.get_executor(), shmio::open_only, name);
  constexpr std::uint32_t messages = 20000;
  constexpr std::uint32_t in_flight = 8;
  std::array<std::uint32_t, in_flight> bufs{};
  std::uint32_t started = 0;  // on the strand
  std::uint32_t handled = 0;  // on the strand
  std::uint32_t out_of_order = 0;
  std::atomic<bool> finished{false};
  std::function<void()> start_one = [&] {
    const std::uint32_t index = started++;
    std::uint32_t& buf = bufs[index % in_flight];
    ring.async_read(asio::buffer(&buf, sizeof buf),
                    asio::bind_executor(strand, [&, index](std::error_code ec, std::size_t) {
                      // The i-th handler to run must be the i-th read started, holding message i.
                      if (ec || index != handled || buf != index) ++out_of_order;
                      if (++handled == messages) {
                        finished = true;
                        io.stop();
                      }
                      if (started < messages) start_one();
                    }));
  };
  asio::post(strand, [&] {
    for (std::uint32_t i = 0; i < in_flight; ++i)
      start_one();
  });
  std::thread producer([&] {
    for (std::uint32_t i = 0; i < messages; ++i)
      if (writer.write(asio::buffer(&i, sizeof i), bound) != sizeof i) return;
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      while (!finished.load() && io.run_one_for(bound) != 0) {
      }
    });
  producer.join();
  for (auto& t : threads)
    t.join();
  CHECK(finished);
  CHECK(handled == messages);
  CHECK(out_of_order == 0);
}

TEST_CASE("in-place callbacks run on the handler's strand and under no lock of shmio's",
          "[contract][ring][async][strand]") {
  asio::io_context io(4);
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 8, 16);
  circular_buffer peer(io.get_executor(), shmio::open_only, name);
  auto strand = asio::make_strand(io);
  constexpr int rounds = 200;
  std::atomic<int> off_strand{0};
  std::atomic<int> used{0};
  std::atomic<bool> done{false};
  asio::co_spawn(
      strand,
      [&]() -> asio::awaitable<void> {
        for (int i = 0; i < rounds; ++i) {
          co_await ring.async_write_in_place(
              [&](std::span<std::byte> node) {
                off_strand += !strand.running_in_this_thread();
                node[0] = std::byte{1};
                return std::size_t{1};
              },
              asio::use_awaitable);
          co_await ring.async_read_in_place(
              [&](std::span<const std::byte>) {
                off_strand += !strand.running_in_this_thread();
                // Starting another operation of the same handle from the callback: were the
                // callback run under the waiter's mutex, this would deadlock.
                std::string scratch(16, '\0');
                std::error_code ec;
                ring.write(asio::buffer("x", 1), 0ms, ec);
                ring.read(asio::buffer(scratch), 0ms, ec);
                ++used;
              },
              asio::use_awaitable);
        }
        done = true;
      },
      asio::detached);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] { io.run_for(bound); });
  for (auto& t : threads)
    t.join();
  CHECK(done);
  CHECK(used == rounds);
  CHECK(off_strand == 0);
}

TEST_CASE("an in-place callback may start another async operation of its own handle",
          "[contract][ring][async]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 4, 16);
  REQUIRE(ring.write(asio::buffer("first", 5), bound) == 5);
  std::string second(16, '\0');
  std::size_t second_size = 0;
  int calls = 0;
  ring.async_read_in_place(
      [&](std::span<const std::byte>) {
        ring.async_read(asio::buffer(second), [&](std::error_code ec, std::size_t n) {
          if (!ec) second_size = n;
          ++calls;
        });
      },
      [&](std::error_code ec, std::size_t n) { calls += !ec && n == 5; });
  REQUIRE(ring.write(asio::buffer("second", 6), bound) == 6);
  REQUIRE(shmio::test::run_until(io, [&] { return calls == 2; }));
  CHECK(second.substr(0, second_size) == "second");
}

TEST_CASE("a claim whose handler is destroyed unrun is given back", "[contract][ring][async]") {
  scoped_name name("ring");
  asio::io_context other;
  circular_buffer keeper(other.get_executor(), shmio::create_only, name, 2, 16);
  {
    asio::io_context io;
    circular_buffer ring(io.get_executor(), shmio::open_only, name);
    REQUIRE(ring.write(asio::buffer("kept?", 5), bound) == 5);
    bool ran = false;
    ring.async_read_in_place([&](std::span<const std::byte>) { ran = true; },
                             [](std::error_code, std::size_t) {});
    // The claim was taken and its completion queued; the handle closes, then the io_context
    // goes without running it (destroying the handler, as Asio does, is where it is let go).
    ring.close();
    CHECK_FALSE(ran);
  }
  // The node was released (the message is lost with its reader), not left claimed: the ring
  // takes two messages again.
  std::error_code ec;
  CHECK(keeper.write(asio::buffer("a", 1), 0ms, ec) == 1);
  CHECK(keeper.write(asio::buffer("b", 1), 0ms, ec) == 1);
  CHECK_FALSE(ec);
}

TEST_CASE("the fast coroutine forms take a ready result without a trip through the scheduler",
          "[contract][ring][event][async]") {
  asio::io_context io;
  scoped_name name("ring");
  scoped_name ev_name("event");
  constexpr int messages = 200;
  circular_buffer ring(io.get_executor(), shmio::create_only, name, messages, 16);
  named_event ev(io.get_executor(), shmio::create_only, ev_name, event_mode::manual_reset, true);
  for (int i = 0; i < messages; ++i) {
    const std::string m = "m" + std::to_string(i);
    REQUIRE(ring.write(asio::buffer(m), bound) == m.size());
  }
  const std::size_t handlers = run_coroutine(io, io.get_executor(), [&]() -> asio::awaitable<void> {
    std::string buf(16, '\0');
    for (int i = 0; i < messages; ++i) {
      const std::size_t n = co_await ring.co_read(asio::buffer(buf));
      if (buf.substr(0, n) != "m" + std::to_string(i)) throw std::runtime_error("out of order");
      co_await ev.co_wait();
    }
    for (int i = 0; i < messages / 2; ++i) {
      co_await ring.co_write(asio::buffer("w", 1));
      co_await ring.co_write_in_place([](std::span<std::byte> node) {
        node[0] = std::byte{'p'};
        return std::size_t{1};
      });
    }
    std::size_t seen = 0;
    for (int i = 0; i < messages; ++i)
      seen += co_await ring.co_read_in_place([](std::span<const std::byte> m) { (void)m; });
    if (seen != messages) throw std::runtime_error("lost messages");
  });
  CAPTURE(handlers);
  CHECK(handlers <= 4);  // co_spawn's own; a post per operation would be 800
}

TEST_CASE("a fast form waits when it must, and keeps the order of earlier operations",
          "[contract][ring][async]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 4, 16);
  circular_buffer writer(io.get_executor(), shmio::open_only, name);
  std::vector<std::string> order;
  std::string early(16, '\0');
  ring.async_read(asio::buffer(early), [&](std::error_code ec, std::size_t n) {
    order.push_back(ec ? "error" : "async:" + early.substr(0, n));
  });
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        std::string buf(16, '\0');
        const std::size_t n = co_await ring.co_read(asio::buffer(buf));
        order.push_back("co:" + buf.substr(0, n));
      },
      asio::detached);
  for (int i = 0; i < 10; ++i)
    io.poll_one();
  REQUIRE(writer.write(asio::buffer("1", 1), bound) == 1);
  REQUIRE(writer.write(asio::buffer("2", 1), bound) == 1);
  REQUIRE(shmio::test::run_until(io, [&] { return order.size() == 2; }));
  CHECK(order == std::vector<std::string>{"async:1", "co:2"});
}

TEST_CASE("a fast form's callback exception propagates whether or not it waited",
          "[contract][ring][async]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 4, 16);
  circular_buffer writer(io.get_executor(), shmio::open_only, name);
  const bool ready = GENERATE(true, false);
  CAPTURE(ready);
  if (ready) REQUIRE(writer.write(asio::buffer("x", 1), bound) == 1);
  bool caught = false;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        try {
          co_await ring.co_read_in_place(
              [](std::span<const std::byte>) { throw std::logic_error("from use"); });
        } catch (const std::logic_error& e) {
          caught = std::string(e.what()) == "from use";
        }
      },
      asio::detached);
  for (int i = 0; i < 10; ++i)
    io.poll_one();
  if (!ready) REQUIRE(writer.write(asio::buffer("x", 1), bound) == 1);
  REQUIRE(shmio::test::run_until(io, [&] { return caught; }));
}

namespace {
// Frees made through a counting_allocator that had lost its counters.
int orphan_frees = 0;

// Counts what is allocated and freed through it; otherwise std::allocator.
template <class T>
struct counting_allocator {
  using value_type = T;
  int* count;
  int* frees;
  counting_allocator(int* c, int* f) noexcept : count(c), frees(f) {}
  template <class U>
  counting_allocator(const counting_allocator<U>& o) noexcept : count(o.count), frees(o.frees) {}
  T* allocate(std::size_t n) {
    if (count) ++*count;
    return std::allocator<T>().allocate(n);
  }
  void deallocate(T* p, std::size_t n) noexcept {
    ++*(frees ? frees : &orphan_frees);
    std::allocator<T>().deallocate(p, n);
  }
  template <class U>
  bool operator==(const counting_allocator<U>& o) const noexcept {
    return count == o.count && frees == o.frees;
  }
};

// A handler whose allocator is part of its state, which a move takes with it: what the
// operation frees its memory with must come from the handler before it moves.
struct allocator_in_state_handler {
  using allocator_type = counting_allocator<void>;
  int* count;
  int* frees;
  int* calls;
  allocator_in_state_handler(int* c, int* f, int* k) noexcept : count(c), frees(f), calls(k) {}
  allocator_in_state_handler(allocator_in_state_handler&& o) noexcept
      : count(std::exchange(o.count, nullptr)),
        frees(std::exchange(o.frees, nullptr)),
        calls(o.calls) {}
  allocator_type get_allocator() const noexcept { return allocator_type(count, frees); }
  void operator()(std::error_code ec, std::size_t) { *calls += !ec; }
};
}  // namespace

TEST_CASE("a pending operation's state comes from the handler's associated allocator",
          "[contract][ring][async]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 4, 16,
                       shmio::wait_strategy::park_only());
  circular_buffer writer(io.get_executor(), shmio::open_only, name);
  int allocations = 0;
  int frees = 0;
  orphan_frees = 0;
  const int form = GENERATE(0, 1, 2);  // read, read in place, read with the allocator in state
  CAPTURE(form);
  std::string buf(16, '\0');
  int calls = 0;
  auto handler = asio::bind_allocator(counting_allocator<void>(&allocations, &frees),
                                      [&](std::error_code ec, std::size_t) { calls += !ec; });
  if (form == 0)
    ring.async_read(asio::buffer(buf), std::move(handler));
  else if (form == 1)
    ring.async_read_in_place([](std::span<const std::byte>) {}, std::move(handler));
  else
    ring.async_read(asio::buffer(buf), allocator_in_state_handler(&allocations, &frees, &calls));
  CHECK(allocations >= 1);  // the parked operation
  REQUIRE(writer.write(asio::buffer("x", 1), bound) == 1);
  REQUIRE(shmio::test::run_until(io, [&] { return calls == 1; }));
  CHECK(frees == allocations);
  CHECK(orphan_frees == 0);
}

TEST_CASE("a handler that throws leaves the handle's other operations working",
          "[contract][ring][async]") {
  // Asio passes a handler's exception out of io_context::run(), and the user may run again:
  // the operations delivered with the throwing one, one the handler started before it threw,
  // and those started later, all still complete.
  // On a strand: the re-check runs in the strand, so the handler runs inline and its exception
  // unwinds through the delivery (an io_context's own executor would catch it there).
  asio::io_context io;
  scoped_name name("ring");
  auto strand = asio::make_strand(io);
  circular_buffer ring(strand, shmio::create_only, name, 8, 16, shmio::wait_strategy::park_only());
  circular_buffer writer(io.get_executor(), shmio::open_only, name);
  std::vector<std::string> bufs(4, std::string(16, '\0'));
  std::vector<std::string> got;
  auto read_into = [&](std::size_t i) {
    ring.async_read(asio::buffer(bufs[i]), [&, i](std::error_code ec, std::size_t n) {
      got.push_back(ec ? "error" : bufs[i].substr(0, n));
    });
  };
  ring.async_read(asio::buffer(bufs[0]), [&](std::error_code, std::size_t) {
    got.push_back("thrower");
    // Started while the batch is out being delivered: it parks unarmed behind the gate, and
    // only the re-check that the gate's opening posts arms it.
    read_into(2);
    throw std::runtime_error("handler failed");
  });
  read_into(1);
  REQUIRE(io.poll() == 0);  // park_only: both parked
  // Both messages are there before the re-check runs: one batch delivers both reads.
  REQUIRE(writer.write(asio::buffer("a", 1), bound) == 1);
  REQUIRE(writer.write(asio::buffer("b", 1), bound) == 1);
  CHECK_THROWS_AS(shmio::test::run_until(io, [&] { return got.size() == 2; }), std::runtime_error);
  REQUIRE(shmio::test::run_until(io, [&] { return got.size() == 2; }));
  REQUIRE(writer.write(asio::buffer("c", 1), bound) == 1);
  REQUIRE(shmio::test::run_until(io, [&] { return got.size() == 3; }));
  read_into(3);
  REQUIRE(writer.write(asio::buffer("d", 1), bound) == 1);
  REQUIRE(shmio::test::run_until(io, [&] { return got.size() == 4; }));
  CHECK(got == std::vector<std::string>{"thrower", "b", "c", "d"});
}

TEST_CASE("a handler that closes its handle and throws: the rest of its batch keep their results",
          "[contract][ring][async]") {
  // The batch's rest goes out after the throw; the handle is closed by then (its executor let
  // go), and what the rest's attempts took (a message each) still reaches their handlers.
  asio::io_context io;
  scoped_name name("ring");
  auto strand = asio::make_strand(io);
  circular_buffer ring(strand, shmio::create_only, name, 8, 16, shmio::wait_strategy::park_only());
  circular_buffer writer(io.get_executor(), shmio::open_only, name);
  std::vector<std::string> bufs(2, std::string(16, '\0'));
  std::vector<std::string> got;
  ring.async_read(asio::buffer(bufs[0]), [&](std::error_code, std::size_t) {
    got.push_back("thrower");
    ring.close();
    throw std::runtime_error("handler failed");
  });
  ring.async_read(asio::buffer(bufs[1]), [&](std::error_code ec, std::size_t n) {
    got.push_back(ec ? "error" : bufs[1].substr(0, n));
  });
  REQUIRE(io.poll() == 0);  // park_only: both parked
  REQUIRE(writer.write(asio::buffer("a", 1), bound) == 1);
  REQUIRE(writer.write(asio::buffer("b", 1), bound) == 1);
  CHECK_THROWS_AS(shmio::test::run_until(io, [&] { return got.size() == 2; }), std::runtime_error);
  REQUIRE(shmio::test::run_until(io, [&] { return got.size() == 2; }));
  CHECK(got == std::vector<std::string>{"thrower", "b"});
}
