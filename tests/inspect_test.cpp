// Tests of shmio::inspect: what it reads from live, stale, corrupted and temporary files, that
// it never trusts what it reads, and that its stale removal leaves live segments alone.
#include <fcntl.h>
#include <unistd.h>

#include <asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "shmio/circular_buffer.hpp"
#include "shmio/inspect.hpp"
#include "shmio/named_event.hpp"
#include "support.hpp"

namespace {

using namespace std::chrono_literals;
using shmio::test::scoped_name;

std::string file_of(const std::string& name) {
  return "/dev/shm/shmio.u" + std::to_string(::getuid()) + "." + name;
}

// A ring of 4 x 32-byte nodes holding two messages, left behind by a process that exited
// without closing it: stale.
void leave_stale_ring(const std::string& name) {
  shmio::test::child c([&] {
    asio::io_context io;
    shmio::circular_buffer ring(io.get_executor(), shmio::create_only, name, 4, 32);
    ring.write(asio::buffer("one", 3), 1s);
    ring.write(asio::buffer("two", 3), 1s);
    ::_exit(0);  // no destructor: the file stays
    return 0;
  });
  REQUIRE(c.wait() == 0);
}

void overwrite(const std::string& path, std::uint64_t offset, const void* data, std::size_t n) {
  int fd = ::open(path.c_str(), O_RDWR);
  REQUIRE(fd >= 0);
  REQUIRE(::pwrite(fd, data, n, static_cast<off_t>(offset)) == static_cast<ssize_t>(n));
  ::close(fd);
}

std::uint32_t dead_pid() {
  shmio::test::child c([] { return 0; });
  REQUIRE(c.wait() == 0);
  return static_cast<std::uint32_t>(c.pid());
}

}  // namespace

TEST_CASE("inspect reads a live ring: kind, creator, node states, waiters", "[inspect]") {
  scoped_name name("inspect");
  asio::io_context io;
  shmio::circular_buffer ring(io.get_executor(), shmio::create_only, name, 8, 64);
  for (int i = 0; i < 3; ++i)
    ring.write(asio::buffer("hello", 5), 1s);

  std::error_code ec;
  auto info = shmio::inspect::examine(name.str(), ec);
  REQUIRE_FALSE(ec);
  CHECK(info.name == name.str());
  CHECK(info.file == file_of(name.str()));
  CHECK(info.live);
  CHECK_FALSE(info.stale);
  CHECK_FALSE(info.status);
  CHECK(info.kind == static_cast<std::uint32_t>(shmio::object_kind::circular_buffer));
  CHECK(shmio::inspect::kind_name(info.kind) == "circular_buffer");
  CHECK(info.creator_pid == static_cast<std::uint32_t>(::getpid()));
  CHECK(info.creator_alive);
  REQUIRE(info.ring);
  CHECK(info.ring->node_count == 8);
  CHECK(info.ring->node_size == 64);
  CHECK(info.ring->published == 3);
  CHECK(info.ring->used() == 3);
  CHECK(info.ring->free == 5);
  CHECK(info.ring->invalid == 0);
  CHECK(info.ring->tail == 3);
  CHECK(info.ring->head == 0);

  // The listing has it too, and looking kept nothing: closing the last handle removes it.
  auto all = shmio::inspect::list(ec);
  REQUIRE_FALSE(ec);
  CHECK(std::count_if(all.begin(), all.end(), [&](auto& s) { return s.name == name.str(); }) == 1);
  ring.close();
  shmio::inspect::examine(name.str(), ec);
  CHECK(ec == shmio::errc::not_found);
}

TEST_CASE("inspect reads an event and unescapes its name", "[inspect]") {
  scoped_name base("inspect");
  const std::string name = base.str() + "/with%odd\x01bytes";
  asio::io_context io;
  shmio::named_event ev(io.get_executor(), shmio::create_only, name,
                        shmio::event_mode::manual_reset, true);
  std::error_code ec;
  auto info = shmio::inspect::examine(name, ec);
  REQUIRE_FALSE(ec);
  CHECK(info.name == name);
  REQUIRE(info.event);
  CHECK(info.event->signalled);
  CHECK(info.event->manual_reset);
  auto all = shmio::inspect::list(ec);
  CHECK(std::count_if(all.begin(), all.end(), [&](auto& s) { return s.name == name; }) == 1);
}

TEST_CASE("inspect tells a stale segment, and removes only stale ones", "[inspect]") {
  scoped_name stale("inspect"), live("inspect");
  leave_stale_ring(stale.str());
  asio::io_context io;
  shmio::circular_buffer ring(io.get_executor(), shmio::create_only, live, 4, 32);

  std::error_code ec;
  auto info = shmio::inspect::examine(stale.str(), ec);
  REQUIRE_FALSE(ec);
  CHECK_FALSE(info.live);
  CHECK(info.stale);
  CHECK_FALSE(info.creator_alive);
  REQUIRE(info.ring);
  CHECK(info.ring->published == 2);

  CHECK_FALSE(shmio::inspect::remove_if_stale(live.str(), ec));
  CHECK(ec == shmio::errc::busy);
  CHECK(::access(file_of(live.str()).c_str(), F_OK) == 0);
  // The live ring still works after being looked at and refused removal.
  CHECK(ring.write(asio::buffer("x", 1), 0ms) == 1);

  CHECK(shmio::inspect::remove_if_stale(stale.str(), ec));
  CHECK_FALSE(ec);
  CHECK(::access(file_of(stale.str()).c_str(), F_OK) != 0);
  CHECK_FALSE(shmio::inspect::remove_if_stale(stale.str(), ec));
  CHECK(ec == shmio::errc::not_found);
}

TEST_CASE("inspect reports corrupted files as corrupted", "[inspect]") {
  scoped_name name("inspect");
  const std::string path = file_of(name.str());
  std::error_code ec;

  SECTION("bad magic") {
    leave_stale_ring(name.str());
    overwrite(path, 0, "NOTSHMIO", 8);
    auto info = shmio::inspect::examine(name.str(), ec);
    CHECK(info.status == shmio::errc::corrupted);
    CHECK_FALSE(info.header_read);
  }
  SECTION("a ring header that does not fit the file") {
    leave_stale_ring(name.str());
    const std::uint32_t huge = 0xFFFFFFFF;
    overwrite(path, 64, &huge, sizeof huge);
    auto info = shmio::inspect::examine(name.str(), ec);
    CHECK(info.status == shmio::errc::corrupted);
    CHECK_FALSE(info.ring);
  }
  SECTION("a node word of another lap") {
    leave_stale_ring(name.str());
    const std::uint64_t word = std::uint64_t{12345} << 16;  // node 3 of 4 cannot hold turn 12345
    overwrite(path, 64 + 1344 + 64 * 3, &word, sizeof word);
    auto info = shmio::inspect::examine(name.str(), ec);
    CHECK(info.status == shmio::errc::corrupted);
    REQUIRE(info.ring);
    CHECK(info.ring->invalid == 1);
  }
  SECTION("a length past the node size") {
    leave_stale_ring(name.str());
    const std::uint32_t length = 1000;
    overwrite(path, 64 + 1344 + 8, &length, sizeof length);  // node 0 holds a message
    auto info = shmio::inspect::examine(name.str(), ec);
    CHECK(info.status == shmio::errc::corrupted);
  }
  SECTION("another layout version") {
    leave_stale_ring(name.str());
    const std::uint32_t version = 99;
    overwrite(path, 8, &version, sizeof version);
    auto info = shmio::inspect::examine(name.str(), ec);
    CHECK(info.status == shmio::errc::incompatible);
  }
  SECTION("shorter than a header") {
    int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
    REQUIRE(fd >= 0);
    REQUIRE(::write(fd, "SHM", 3) == 3);
    ::close(fd);
    auto info = shmio::inspect::examine(name.str(), ec);
    CHECK(info.status == shmio::errc::corrupted);
    CHECK(info.stale);
  }
  CHECK_FALSE(ec);
}

TEST_CASE("inspect survives random damage to a segment", "[inspect]") {
  scoped_name name("inspect");
  const std::string path = file_of(name.str());
  std::mt19937_64 rng(Catch::rngSeed());
  for (int round = 0; round < 200; ++round) {
    leave_stale_ring(name.str());
    // Damage the headers and the first nodes, where every count and offset lives.
    for (int k = 0; k < 4; ++k) {
      const std::uint64_t offset = rng() % (64 + 1344 + 4 * 64 - 8);
      const std::uint64_t garbage = rng();
      overwrite(path, offset, &garbage, sizeof garbage);
    }
    std::error_code ec;
    auto info = shmio::inspect::examine(name.str(), ec);
    REQUIRE_FALSE(ec);
    CHECK((!info.status || info.status == shmio::errc::corrupted ||
           info.status == shmio::errc::incompatible));
    if (info.ring) CHECK(info.ring->used() + info.ring->free + info.ring->invalid == 4);
    REQUIRE(shmio::inspect::remove_if_stale(name.str(), ec));
  }
}

TEST_CASE("inspect lists and sweeps temporary files of dead creators", "[inspect]") {
  const std::uint32_t pid = dead_pid();
  const std::string path = "/dev/shm/.shmio.tmp." + std::to_string(pid) + ".00000000feedf00d";
  int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
  REQUIRE(fd >= 0);
  ::close(fd);
  std::error_code ec;
  auto info = shmio::inspect::examine_file(path, ec);
  REQUIRE_FALSE(ec);
  CHECK(info.temporary);
  CHECK(info.temp_pid == pid);
  CHECK(info.stale);
  CHECK(shmio::inspect::remove_file_if_stale(path, ec));
  CHECK(::access(path.c_str(), F_OK) != 0);

  // Not a shmio file: refused by name.
  shmio::inspect::examine_file("/etc/passwd", ec);
  CHECK(ec == shmio::errc::invalid_name);
  shmio::inspect::remove_file_if_stale("/dev/shm/unrelated", ec);
  CHECK(ec == shmio::errc::invalid_name);
}
