// A handler may destroy or close the object whose operation it completes, from any thread of a
// multi-threaded io_context, while other processes keep the ring busy: nothing of shmio
// touches the object's shared memory or its freed state afterwards (ASan and the mapping's
// removal catch any access). Run under ASan in CI.

#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

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
