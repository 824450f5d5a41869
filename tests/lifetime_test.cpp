// A handler may destroy or close the object whose operation it completes, from any thread of a
// multi-threaded io_context, while other processes keep the ring busy: nothing of shmio
// touches the object's shared memory or its freed state afterwards (ASan and the mapping's
// removal catch any access). Run under ASan in CI.

#include <array>
#include <asio/bind_executor.hpp>
#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/strand.hpp>
#include <asio/use_awaitable.hpp>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "shmio/broadcast_buffer.hpp"
#include "shmio/circular_buffer.hpp"
#include "shmio/named_event.hpp"
#include "support.hpp"

namespace {

using namespace std::chrono_literals;
using shmio::circular_buffer;
using shmio::test::child;
using shmio::test::scoped_name;
using shmio::test::signal_pipe;

constexpr std::chrono::milliseconds bound = shmio::test::default_bound;

// Writers in other processes that keep the ring `name` full until `stop` says so.
std::vector<std::unique_ptr<child>> start_writers(const scoped_name& name, int count,
                                                  const signal_pipe& stop) {
  std::vector<std::unique_ptr<child>> writers;
  for (int w = 0; w < count; ++w)
    writers.push_back(std::make_unique<child>([&name, &stop] {
      asio::io_context io;
      circular_buffer ring(io.get_executor(), shmio::open_only, name);
      std::error_code ec;
      for (;;) {
        ring.write(asio::buffer("contended", 9), 1ms, ec);
        if (ec && ec != shmio::errc::timed_out) return 2;
        if (stop.wait(0ms) >= 0) return 0;
      }
    }));
  return writers;
}

struct handle_slot {
  std::mutex mutex;
  std::unique_ptr<circular_buffer> ring;
  void destroy() {
    std::unique_ptr<circular_buffer> gone;
    std::lock_guard lock(mutex);
    gone = std::move(ring);
  }
};

}  // namespace

TEST_CASE("a handler may destroy or close its object from any thread while others contend",
          "[lifetime][ring][async][multiprocess]") {
  scoped_name name("ring");
  asio::io_context io(4);
  circular_buffer owner(io.get_executor(), shmio::create_only, name, 4, 16);
  signal_pipe stop;
  auto writers = start_writers(name, 2, stop);
  auto work = asio::make_work_guard(io);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] { io.run_for(4 * bound); });

  constexpr int rounds = 300;
  std::atomic<int> completed{0};
  for (int round = 0; round < rounds; ++round) {
    auto slot = std::make_shared<handle_slot>();
    slot->ring = std::make_unique<circular_buffer>(io.get_executor(), shmio::open_only, name);
    auto buf = std::make_shared<std::string>(16, '\0');
    const int how = round % 4;
    auto finish = [slot, buf, how, &completed](std::error_code, std::size_t) {
      if (how == 1) {
        std::lock_guard lock(slot->mutex);
        if (slot->ring) slot->ring->close();
      } else {
        slot->destroy();
      }
      ++completed;
    };
    {
      std::lock_guard lock(slot->mutex);
      if (how == 2) {
        // In place: the handler destroys the object right after its callback used the node.
        slot->ring->async_read_in_place([](std::span<const std::byte>) {}, finish);
      } else {
        slot->ring->async_read(asio::buffer(*buf), finish);
        // A second read queued behind the first, aborted by the destruction.
        slot->ring->async_read(asio::buffer(*buf), [buf](std::error_code, std::size_t) {});
      }
    }
    if (how == 3) {
      // Another thread destroys it at some point while the first read may be completing.
      asio::post(io, [slot] { slot->destroy(); });
    }
  }
  REQUIRE(shmio::test::eventually([&] { return completed.load() == rounds; }, 4 * bound));
  for (std::size_t i = 0; i < writers.size(); ++i)
    stop.notify();
  for (auto& w : writers)
    CHECK(w->wait() == 0);
  work.reset();
  for (auto& t : threads)
    t.join();
}

TEST_CASE("a waiter destroying its event from the handler, while another process sets it",
          "[lifetime][event][async][multiprocess]") {
  scoped_name name("event");
  asio::io_context io(2);
  shmio::named_event owner(io.get_executor(), shmio::create_only, name,
                           shmio::event_mode::auto_reset, false);
  signal_pipe stop;
  child setter([&name, &stop] {
    asio::io_context cio;
    shmio::named_event ev(cio.get_executor(), shmio::open_only, name,
                          shmio::event_mode::auto_reset);
    while (stop.wait(0ms) < 0)
      ev.set();
    return 0;
  });
  auto work = asio::make_work_guard(io);
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t)
    threads.emplace_back([&] { io.run_for(4 * bound); });
  constexpr int rounds = 300;
  std::atomic<int> completed{0};
  for (int round = 0; round < rounds; ++round) {
    auto ev =
        std::make_shared<std::unique_ptr<shmio::named_event>>(std::make_unique<shmio::named_event>(
            io.get_executor(), shmio::open_only, name, shmio::event_mode::auto_reset));
    auto* raw = ev->get();
    raw->async_wait([ev, &completed](std::error_code) {
      ev->reset();
      ++completed;
    });
  }
  REQUIRE(shmio::test::eventually([&] { return completed.load() == rounds; }, 4 * bound));
  stop.notify();
  CHECK(setter.wait() == 0);
  work.reset();
  for (auto& t : threads)
    t.join();
}

TEST_CASE("an in-place callback may close its own object", "[lifetime][ring][broadcast]") {
  asio::io_context io;
  scoped_name name("own");
  auto bytes = [](const char* text) { return asio::buffer(text, std::strlen(text)); };
  SECTION("ring: read_in_place, blocking") {
    circular_buffer w(io.get_executor(), shmio::create_only, name, 4, 16);
    circular_buffer r(io.get_executor(), shmio::open_only, name);
    REQUIRE(w.write(bytes("a"), 1s) == 1);
    std::error_code ec;
    // The handle unmaps its segment when it closes: the node must be released before that.
    const std::size_t n = r.read_in_place([&](std::span<const std::byte>) { r.close(); }, 1s, ec);
    CHECK_FALSE(ec);
    CHECK(n == 1);
    CHECK_FALSE(r.is_open());
    circular_buffer again(io.get_executor(), shmio::open_only, name);
    std::string buf(16, '\0');
    again.read(asio::buffer(buf), 0ms, ec);
    CHECK(ec == shmio::errc::timed_out);  // the message counted as read
  }
  SECTION("ring: co_write_in_place and co_read_in_place") {
    circular_buffer r(io.get_executor(), shmio::create_only, name, 4, 16);
    circular_buffer w(io.get_executor(), shmio::open_only, name);
    std::size_t wrote = 0, read = 0;
    std::exception_ptr failure;
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          wrote = co_await w.co_write_in_place([&](std::span<std::byte> node) {
            node[0] = std::byte{'b'};
            w.close();
            return std::size_t{1};
          });
          read = co_await r.co_read_in_place([&](std::span<const std::byte> m) {
            CHECK(m.size() == 1);
            r.close();
          });
        },
        [&](std::exception_ptr e) { failure = e; });
    io.run();
    if (failure) std::rethrow_exception(failure);
    CHECK(wrote == 1);
    CHECK(read == 1);
    CHECK_FALSE(w.is_open());
    CHECK_FALSE(r.is_open());
  }
  SECTION("broadcast: read_in_place, blocking, and an async one closed before it completes") {
    using shmio::broadcast_buffer;
    using shmio::broadcast_role;
    broadcast_buffer pub(io.get_executor(), shmio::create_only, name, broadcast_role::publisher);
    broadcast_buffer sub(io.get_executor(), shmio::open_only, name, broadcast_role::subscriber);
    REQUIRE(pub.write(bytes("x"), 1s) == 1);
    std::error_code ec;
    const std::size_t n =
        sub.read_in_place([&](std::span<const std::byte>) { sub.close(); }, 1s, ec);
    // It left while the message was out, and the message it saw is reported as read.
    CHECK_FALSE(ec);
    CHECK(n == 1);
    CHECK_FALSE(sub.is_open());

    broadcast_buffer late(io.get_executor(), shmio::open_only, name, broadcast_role::subscriber);
    REQUIRE(pub.write(bytes("y"), 1s) == 1);
    bool used = false;
    std::error_code late_ec = asio::error::would_block;
    late.async_read_in_place([&](std::span<const std::byte>) { used = true; },
                             [&](std::error_code e, std::size_t) { late_ec = e; });
    late.close();  // its completion is on its way, holding the message
    io.run();
    CHECK_FALSE(late_ec);  // it had its message before the close
    CHECK(used);           // and what it held was still mapped for it
  }
}

TEST_CASE("a batch read whose callback closes its handle takes no more messages",
          "[lifetime][ring]") {
  asio::io_context io;
  scoped_name name("batch");
  circular_buffer r(io.get_executor(), shmio::create_only, name, 8, 16);
  circular_buffer w(io.get_executor(), shmio::open_only, name);
  for (const char* m : {"a", "b", "c"})
    REQUIRE(w.write(asio::buffer(m, 1), 1s) == 1);
  std::size_t used = 0;
  auto use_then_close = [&](std::span<const std::byte>) {
    ++used;
    r.close();
  };
  std::size_t n = 0;
  std::error_code ec = asio::error::would_block;
  SECTION("blocking") {
    n = r.read_batch_in_place(use_then_close, 10, 1s, ec);
  }
  SECTION("async") {
    r.async_read_batch_in_place(use_then_close, 10, [&](std::error_code e, std::size_t k) {
      ec = e;
      n = k;
    });
    io.run();
  }
  CHECK_FALSE(ec);
  CHECK(n == 1);
  CHECK(used == 1);
  // The rest were left to the ring's other readers.
  std::string buf(16, '\0');
  CHECK(w.read(asio::buffer(buf), 1s) == 1);
  CHECK(buf[0] == 'b');
  CHECK(w.read(asio::buffer(buf), 1s) == 1);
  CHECK(buf[0] == 'c');
}

TEST_CASE("a handler bound to another io_context may run after the object and its own are gone",
          "[lifetime][ring]") {
  asio::io_context other;
  scoped_name name("gone");
  std::string buf(16, '\0');
  std::error_code got = asio::error::would_block;
  {
    asio::io_context io;
    circular_buffer r(io.get_executor(), shmio::create_only, name, 4, 16);
    circular_buffer w(io.get_executor(), shmio::open_only, name);
    REQUIRE(w.write(asio::buffer("a", 1), 1s) == 1);
    // Ready: its result waits in `other`'s queue, counted in the object's order gate.
    r.async_read(asio::buffer(buf),
                 asio::bind_executor(other, [&](std::error_code ec, std::size_t) { got = ec; }));
    r.close();
    w.close();
  }  // the object's io_context is gone with everything of the object's
  other.run();
  CHECK_FALSE(got);
  CHECK(buf[0] == 'a');
}

TEST_CASE("an object on a strand whose in-place handler runs after the strand's io_context is gone",
          "[lifetime][ring]") {
  // The in-place claim keeps the object's state alive until the handler has run, on another
  // io_context; the last reference to it then goes there, after the strand's context is gone.
  // Nothing of the strand may be left in that state (a strand's last copy reaches into its
  // context's service when it goes: ASan reports the use after free).
  asio::io_context other;
  scoped_name name("strandgone");
  std::error_code got = asio::error::would_block;
  std::size_t used = 0;
  {
    asio::io_context io;
    circular_buffer r(asio::make_strand(io), shmio::create_only, name, 4, 16);
    circular_buffer w(io.get_executor(), shmio::open_only, name);
    REQUIRE(w.write(asio::buffer("a", 1), 1s) == 1);
    r.async_read_in_place(
        [&](std::span<const std::byte> m) { return used = m.size(); },
        asio::bind_executor(other, [&](std::error_code ec, std::size_t) { got = ec; }));
    w.close();
  }  // the strand's io_context is gone; the claim still holds the ring's state
  other.run();
  // Claimed before the object went: the message is still the handler's.
  CHECK_FALSE(got);
  CHECK(used == 1);
}

TEST_CASE("a child forked while a thread of its parent spins on a wait closes its copy at once",
          "[lifetime][ring][process]") {
  // docs/architecture.md lets a child forked without exec close an inherited circular buffer.
  // The parent's wait spins through its io_context on another thread; a spin's look holds the
  // wait's mutex, and the io_context holds its own locks as it runs, so forks land in them.
  // The child has none of the threads that held them: its close must take none.
  scoped_name name("ring");
  asio::io_context io;
  circular_buffer creator(io.get_executor(), shmio::create_only, name, 8, 16);
  circular_buffer reader(io.get_executor(), shmio::open_only, name,
                         shmio::wait_strategy::spin_then_park(std::chrono::seconds(60)));
  std::array<std::byte, 16> buf{};
  std::error_code read_ec;
  std::atomic<bool> read_done{false};
  reader.async_read(asio::buffer(buf), [&](std::error_code ec, std::size_t) {
    read_ec = ec;
    read_done = true;
  });
  std::thread runner([&] { io.run(); });
  int hung = 0, failed = 0;
  for (int i = 0; i < 40; ++i) {
    child c([&] {
      reader.close();
      return 0;
    });
    const int rc = c.wait(5s);
    if (rc < 0)
      ++hung;
    else if (rc != 0)
      ++failed;
  }
  // The parent's wait was left alone: a write completes it.
  REQUIRE(creator.write(asio::buffer("after", 5), bound) == 5);
  CHECK(shmio::test::eventually([&] { return read_done.load(); }));
  if (!read_done) reader.close();  // ends the run either way
  runner.join();
  CHECK_FALSE(read_ec);
  CHECK(hung == 0);
  CHECK(failed == 0);
}
