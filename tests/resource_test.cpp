// Resource hygiene: many create/open/use/close cycles of every object kind (segment, event,
// ring, rpc, shared_array, buffer_read_write, broadcast with a subscriber) leave no open file
// descriptors, mappings, memory or /dev/shm files behind.
//
// SHMIO_RESOURCE_CYCLES sets the number of cycles per kind (default 10000). In sanitizer builds
// only descriptors and files are compared (the sanitizers' allocators map and keep memory).
#include <dirent.h>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/use_awaitable.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "shmio/broadcast_buffer.hpp"
#include "shmio/buffer_read_write.hpp"
#include "shmio/circular_buffer.hpp"
#include "shmio/detail/platform.hpp"
#include "shmio/named_event.hpp"
#include "shmio/rpc_buffer.hpp"
#include "shmio/segment.hpp"
#include "shmio/shared_array.hpp"
#include "support.hpp"

namespace {

using namespace std::chrono_literals;
using shmio::test::scoped_name;

struct usage {
  std::size_t fds = 0;
  std::size_t mappings = 0;
  std::size_t rss_kib = 0;
  std::size_t shm_files = 0;  // this process's test files in /dev/shm
};

std::size_t count_dir(const char* path, const std::string& containing = {}) {
  std::size_t n = 0;
  if (DIR* d = ::opendir(path)) {
    while (dirent* e = ::readdir(d))
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0 &&
          std::string(e->d_name).find(containing) != std::string::npos)
        ++n;
    ::closedir(d);
  }
  return n;
}

usage measure(const std::string& marker) {
  usage u;
  u.fds = count_dir("/proc/self/fd");
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);)
    ++u.mappings;
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmRSS:", 0) == 0) u.rss_kib = std::stoul(line.substr(6));
  u.shm_files = count_dir("/dev/shm", marker);
  return u;
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool sanitized = true;  // LeakSanitizer checks memory there instead
#else
constexpr bool sanitized = false;
#endif

std::size_t cycles() {
  const char* v = std::getenv("SHMIO_RESOURCE_CYCLES");
  return v ? std::stoul(v) : 10'000;
}

// Runs `cycle` a few times to warm caches and pools up, measures, runs it `cycles()` times, and
// checks that nothing grew. `marker` is a string in every segment file name the cycle makes.
void check_no_growth(const std::string& marker, const std::function<void(std::size_t)>& cycle) {
  for (std::size_t i = 0; i < 50; ++i)
    cycle(i);
  // The process's one doorbell-sending socket is made at its first ring, which the warm-up may
  // not have needed (every wait caught by spinning): make it now, so it does not count as growth.
  (void)shmio::detail::platform::ring_doorbell(1);
  const usage before = measure(marker);
  const std::size_t n = cycles();
  for (std::size_t i = 0; i < n; ++i)
    cycle(i);
  const usage after = measure(marker);
  INFO("cycles " << n << "; fds " << before.fds << " -> " << after.fds << "; mappings "
                 << before.mappings << " -> " << after.mappings << "; rss KiB " << before.rss_kib
                 << " -> " << after.rss_kib);
  CHECK(after.fds == before.fds);
  CHECK(after.shm_files == 0);
  if (!sanitized) {  // sanitizer allocators keep quarantines and shadow memory of their own
    CHECK(after.mappings == before.mappings);
    // The allocator may keep a little more; a leak of even 100 bytes per cycle would show.
    CHECK(after.rss_kib <= before.rss_kib + 1024);
  }
}

}  // namespace

TEST_CASE("resources: segment create/open/close cycles leak nothing", "[resources]") {
  const scoped_name name("res-seg");
  check_no_growth(name.str(), [&](std::size_t i) {
    shmio::segment a(shmio::create_only, name, shmio::object_kind::raw, 4096 + i % 3 * 4096);
    shmio::segment b(shmio::open_only, name, shmio::object_kind::raw);
    a.body()[0] = std::byte{1};
    REQUIRE(b.body()[0] == std::byte{1});
  });
}

TEST_CASE("resources: named_event create/open/set/wait/close cycles leak nothing", "[resources]") {
  const scoped_name name("res-event");
  asio::io_context io;
  check_no_growth(name.str(), [&](std::size_t) {
    shmio::named_event a(io.get_executor(), shmio::create_only, name,
                         shmio::event_mode::auto_reset);
    shmio::named_event b(io.get_executor(), shmio::open_only, name, shmio::event_mode::auto_reset);
    a.set();
    REQUIRE(b.wait(0ms));
  });
}

TEST_CASE("resources: circular_buffer create/open/write/read/close cycles leak nothing",
          "[resources]") {
  const scoped_name name("res-ring");
  asio::io_context io;
  check_no_growth(name.str(), [&](std::size_t i) {
    shmio::circular_buffer a(io.get_executor(), shmio::create_only, name, 4, 64);
    shmio::circular_buffer b(io.get_executor(), shmio::open_only, name);
    const std::string m = "message " + std::to_string(i);
    REQUIRE(a.write(asio::buffer(m), 0ms) == m.size());
    char buf[64];
    REQUIRE(b.read(asio::buffer(buf), 0ms) == m.size());
  });
}

TEST_CASE("resources: rpc_buffer create/open/call/close cycles leak nothing", "[resources]") {
  const scoped_name name("res-rpc");
  asio::io_context io;
  shmio::rpc_options options;
  options.node_count = 4;
  options.node_size = 1024;
  check_no_growth(name.str(), [&](std::size_t) {
    shmio::rpc_buffer owner(io.get_executor(), shmio::create_only, name, shmio::rpc_handler{},
                            options);
    shmio::rpc_buffer opener(
        io.get_executor(), shmio::open_only, name,
        shmio::rpc_sync_handler([](std::uint64_t, std::span<const std::byte> in) {
          return std::vector<std::byte>(in.begin(), in.end());
        }));
    bool done = false;
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          const char data[3] = {'a', 'b', 'c'};
          auto reply = co_await owner.async_request(asio::buffer(data), asio::use_awaitable);
          done = reply.size() == 3;
          owner.close();
          opener.close();
        },
        asio::detached);
    REQUIRE(shmio::test::run_until(io, [&] { return done; }));
    // Until the closed objects' last handlers have run and released their work.
    REQUIRE(shmio::test::run_until_idle(io));
  });
}

TEST_CASE("resources: shared_array create/open/lock/close cycles leak nothing", "[resources]") {
  const scoped_name name("res-array");
  asio::io_context io;
  check_no_growth(name.str(), [&](std::size_t i) {
    shmio::shared_array<std::uint64_t> a(io.get_executor(), shmio::create_only, name, 16);
    shmio::shared_array<std::uint64_t> b(io.get_executor(), shmio::open_only, name);
    REQUIRE(a.try_lock());
    a[i % 16] = i;
    a.unlock();
    REQUIRE(b.try_lock_shared());
    REQUIRE(b[i % 16] == i);
    b.unlock_shared();
  });
}

TEST_CASE("resources: buffer_read_write create/open/write/read/close cycles leak nothing",
          "[resources]") {
  const scoped_name name("res-buffer");
  asio::io_context io;
  shmio::access_options locked;
  locked.lock_each_access = true;  // every access takes the lock: its waits are cycled too
  check_no_growth(name.str(), [&](std::size_t i) {
    shmio::buffer_read_write a(io.get_executor(), shmio::create_only, name, 256, locked);
    shmio::buffer_read_write b(io.get_executor(), shmio::open_only, name, locked);
    a.write(std::uint64_t{i}, i % 248);
    REQUIRE(b.read<std::uint64_t>(i % 248) == i);
  });
}

TEST_CASE("resources: broadcast_buffer create/subscribe/write/read/close cycles leak nothing",
          "[resources]") {
  const scoped_name name("res-broadcast");
  asio::io_context io;
  shmio::broadcast_options options;
  options.capacity = 4;
  options.message_size = 64;
  options.max_subscribers = 4;
  check_no_growth(name.str(), [&](std::size_t i) {
    shmio::broadcast_buffer publisher(io.get_executor(), shmio::create_only, name,
                                      shmio::broadcast_role::publisher, options);
    shmio::broadcast_buffer subscriber(io.get_executor(), shmio::open_only, name,
                                       shmio::broadcast_role::subscriber);
    REQUIRE(publisher.subscriber_count() == 1);
    const std::string m = "message " + std::to_string(i);
    REQUIRE(publisher.write(asio::buffer(m), 0ms) == m.size());
    char buf[64];
    REQUIRE(subscriber.read(asio::buffer(buf), 0ms) == m.size());
    REQUIRE(std::string(buf, m.size()) == m);
  });
}

TEST_CASE("a closed handle keeps its name, and its throwing calls still name the segment",
          "[resources][error]") {
  asio::io_context io;
  shmio::test::scoped_name name("closed");
  auto names_it = [&](auto&& call) {
    try {
      call();
      FAIL("a closed handle's call succeeded");
    } catch (const shmio::error& e) {
      CHECK(e.code() == asio::error::bad_descriptor);
      CHECK_THAT(e.what(), Catch::Contains("'" + name.str() + "'"));
    }
  };
  std::byte buf[8]{};
  SECTION("circular_buffer") {
    shmio::circular_buffer ring(io.get_executor(), shmio::create_only, name, 4, 64);
    ring.close();
    CHECK(ring.name() == name.str());
    names_it([&] { ring.read(asio::buffer(buf), std::chrono::milliseconds(0)); });
  }
  SECTION("named_event") {
    shmio::named_event event(io.get_executor(), shmio::create_only, name,
                             shmio::event_mode::manual_reset);
    event.close();
    CHECK(event.name() == name.str());
    names_it([&] { event.wait(std::chrono::milliseconds(0)); });
  }
  SECTION("broadcast_buffer") {
    shmio::broadcast_buffer pub(io.get_executor(), shmio::create_only, name,
                                shmio::broadcast_role::publisher);
    pub.close();
    CHECK(pub.name() == name.str());
    names_it([&] { pub.write(asio::buffer(buf), std::chrono::milliseconds(0)); });
  }
  SECTION("buffer_read_write") {
    shmio::buffer_read_write rw(io.get_executor(), shmio::create_only, name, 64);
    rw.close();
    CHECK(rw.name() == name.str());
    names_it([&] { rw.lock(); });
  }
}
