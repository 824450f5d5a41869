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

#include "shmio/broadcast_buffer.hpp"
#include "shmio/buffer_read_write.hpp"
#include "shmio/circular_buffer.hpp"
#include "shmio/inspect.hpp"
#include "shmio/named_event.hpp"
#include "shmio/shared_array.hpp"
#include "support.hpp"

namespace {

using namespace std::chrono_literals;
using shmio::test::scoped_name;
using lock_state = shmio::inspect::lock_info::state_kind;

// File offsets of the locked-buffer and broadcast bodies (docs/protocol.md): the segment
// header is 64 bytes.
constexpr std::uint64_t body = 64;
constexpr std::uint64_t lock_writer = body + 64;       // rw_lock_control.writer
constexpr std::uint64_t lock_high = body + 64 + 8;     // participant_high
constexpr std::uint64_t lock_slot = body + 64 + 1216;  // reader slot 0 (shares)
constexpr std::uint64_t bc_tail = body + 64;           // broadcast tail
constexpr std::uint64_t bc_writer = body + 128;        // writers' lock word
constexpr std::uint64_t bc_high = body + 192;          // joins.high_water
constexpr std::uint64_t bc_entries = body + 1408;      // subscriber entry 0

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

constexpr std::uint64_t published_version(std::uint64_t position) {
  return 2 * position + 2;
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

TEST_CASE("inspect reads a shared_array's geometry and its lock: free, shared, exclusive",
          "[inspect]") {
  scoped_name name("inspect");
  asio::io_context io;
  shmio::shared_array<std::uint32_t> a(io.get_executor(), shmio::create_only, name, 10);
  shmio::shared_array<std::uint32_t> b(io.get_executor(), shmio::open_only, name);
  std::error_code ec;
  auto look = [&] {
    auto info = shmio::inspect::examine(name.str(), ec);
    REQUIRE_FALSE(ec);
    CHECK_FALSE(info.status);
    CHECK(shmio::inspect::kind_name(info.kind) == "shared_array");
    REQUIRE(info.locked);
    return *info.locked;
  };
  auto l = look();
  CHECK(l.element_size == 4);
  CHECK(l.element_align == 4);
  CHECK(l.length == 10);
  CHECK(l.data_size == 40);
  CHECK(l.lock.state == lock_state::free);
  CHECK(l.lock.participants == 2);
  CHECK_FALSE(l.lock.owner_dead);

  a.lock_shared();
  b.lock_shared();
  b.lock_shared();
  l = look();
  CHECK(l.lock.state == lock_state::shared);
  CHECK(l.lock.share_holders == 2);
  CHECK(l.lock.shares == 3);
  a.unlock_shared();
  b.unlock_shared();
  b.unlock_shared();

  b.lock();
  l = look();
  CHECK(l.lock.state == lock_state::exclusive);
  CHECK(l.lock.writer == 2);
  CHECK(l.lock.writer_pid == static_cast<std::uint32_t>(::getpid()));
  CHECK(shmio::inspect::lock_state_name(l.lock.state) == "exclusive");
  b.unlock();
  CHECK(look().lock.state == lock_state::free);
}

TEST_CASE("inspect tells a buffer_read_write whose lock holder died", "[inspect]") {
  scoped_name name("inspect");
  asio::io_context io;
  shmio::buffer_read_write buf(io.get_executor(), shmio::create_only, name, 100);
  shmio::test::child c([&] {
    asio::io_context child_io;
    shmio::buffer_read_write mine(child_io.get_executor(), shmio::open_only, name);
    mine.lock();
    ::_exit(0);  // killed holding the lock: it is never released
    return 0;
  });
  REQUIRE(c.wait() == 0);
  std::error_code ec;
  auto info = shmio::inspect::examine(name.str(), ec);
  REQUIRE_FALSE(ec);
  CHECK_FALSE(info.status);  // a dead holder is a state the lock recovers from, not damage
  REQUIRE(info.locked);
  CHECK(info.locked->element_size == 1);
  CHECK(info.locked->length == 100);
  CHECK(info.locked->lock.state == lock_state::exclusive);
  CHECK(info.locked->lock.owner_dead);
  CHECK(info.locked->lock.dead_holders == 1);
  CHECK(info.locked->lock.participants == 1);

  // The next acquirer reclaims it and is told; then nobody holding anything is dead.
  buf.lock(ec);
  CHECK(ec == shmio::errc::owner_died);
  info = shmio::inspect::examine(name.str(), ec);
  REQUIRE(info.locked);
  CHECK(info.locked->lock.state == lock_state::exclusive);
  CHECK_FALSE(info.locked->lock.owner_dead);
  buf.unlock();
}

TEST_CASE("inspect reads a broadcast: mode, subscribers, sequence, slowest lag", "[inspect]") {
  scoped_name name("inspect");
  asio::io_context io;
  shmio::broadcast_options options;
  options.capacity = 8;
  options.message_size = 32;
  options.max_subscribers = 4;
  shmio::broadcast_buffer pub(io.get_executor(), shmio::create_only, name,
                              shmio::broadcast_role::publisher, options);
  shmio::broadcast_buffer fast(io.get_executor(), shmio::open_only, name,
                               shmio::broadcast_role::subscriber);
  shmio::broadcast_buffer slow(io.get_executor(), shmio::open_only, name,
                               shmio::broadcast_role::subscriber);
  for (int i = 0; i < 5; ++i)
    REQUIRE(pub.write(asio::buffer("news", 4), 0ms) == 4);
  char buf[32];
  for (int i = 0; i < 3; ++i)
    REQUIRE(fast.read(asio::buffer(buf), 0ms) == 4);
  REQUIRE(slow.read(asio::buffer(buf), 0ms) == 4);

  std::error_code ec;
  auto info = shmio::inspect::examine(name.str(), ec);
  REQUIRE_FALSE(ec);
  CHECK_FALSE(info.status);
  CHECK(shmio::inspect::kind_name(info.kind) == "broadcast");
  REQUIRE(info.broadcast);
  auto b = *info.broadcast;
  CHECK_FALSE(b.lossy);
  CHECK(b.slot_count == 8);
  CHECK(b.message_size == 32);
  CHECK(b.max_subscribers == 4);
  CHECK(b.lease_ms == 1000);
  CHECK(b.write_sequence == 5);
  CHECK(b.subscribers == 2);
  CHECK(b.live_subscribers == 2);
  REQUIRE(b.slowest_lag);
  CHECK(*b.slowest_lag == 4);
  CHECK(b.slowest_pid == static_cast<std::uint32_t>(::getpid()));
  CHECK(b.published == 5);
  CHECK(b.empty == 3);
  CHECK(b.invalid == 0);
  CHECK(b.writer == 0);

  // The slow subscriber leaves; a killed one stays active (holding writers back) but not live.
  slow.close();
  shmio::test::child c([&] {
    asio::io_context child_io;
    shmio::broadcast_buffer mine(child_io.get_executor(), shmio::open_only, name,
                                 shmio::broadcast_role::subscriber);
    ::_exit(0);
    return 0;
  });
  REQUIRE(c.wait() == 0);
  info = shmio::inspect::examine(name.str(), ec);
  REQUIRE(info.broadcast);
  CHECK(info.broadcast->subscribers == 2);
  CHECK(info.broadcast->live_subscribers == 1);
  REQUIRE(info.broadcast->slowest_lag);
  CHECK(*info.broadcast->slowest_lag == 2);
}

TEST_CASE("inspect reads a lossy broadcast without subscribers", "[inspect]") {
  scoped_name name("inspect");
  asio::io_context io;
  shmio::broadcast_options options;
  options.mode = shmio::broadcast_mode::lossy;
  options.capacity = 4;
  options.message_size = 16;
  shmio::broadcast_buffer pub(io.get_executor(), shmio::create_only, name,
                              shmio::broadcast_role::publisher, options);
  for (int i = 0; i < 6; ++i)  // laps the 4 slots: every one holds a message
    REQUIRE(pub.write(asio::buffer("x", 1), 0ms) == 1);
  std::error_code ec;
  auto info = shmio::inspect::examine(name.str(), ec);
  REQUIRE_FALSE(ec);
  CHECK_FALSE(info.status);
  REQUIRE(info.broadcast);
  CHECK(info.broadcast->lossy);
  CHECK(info.broadcast->subscribers == 0);
  CHECK_FALSE(info.broadcast->slowest_lag);
  CHECK(info.broadcast->write_sequence == 6);
  CHECK(info.broadcast->published == 4);
}

TEST_CASE("inspect reports damaged locked-buffer bodies as corrupted", "[inspect]") {
  scoped_name name("inspect");
  const std::string path = file_of(name.str());
  asio::io_context io;
  shmio::buffer_read_write buf(io.get_executor(), shmio::create_only, name, 64);
  std::error_code ec;
  auto status_after = [&](std::uint64_t offset, auto value) {
    overwrite(path, offset, &value, sizeof value);
    return shmio::inspect::examine(name.str(), ec);
  };
  SECTION("element size 0") {
    auto info = status_after(body + 24, std::uint32_t{0});
    CHECK(info.status == shmio::errc::corrupted);
    CHECK_FALSE(info.locked);
  }
  SECTION("a data size that does not fit the file") {
    auto info = status_after(body + 8, std::uint64_t{1} << 40);
    CHECK(info.status == shmio::errc::corrupted);
  }
  SECTION("a writer word no handle could store") {
    auto info = status_after(lock_writer, std::uint32_t{0x00123456});
    CHECK(info.status == shmio::errc::corrupted);
    CHECK(info.problem.find("lock word") != std::string::npos);
  }
  SECTION("a participant count past the slots") {
    auto info = status_after(lock_high, std::uint32_t{999});
    CHECK(info.status == shmio::errc::corrupted);
  }
  SECTION("shares in a slot past the participants") {
    auto info = status_after(lock_slot + 64 * 200, std::uint32_t{3});
    CHECK(info.status == shmio::errc::corrupted);
    CHECK(info.problem.find("shares in slot 201") != std::string::npos);
  }
  CHECK_FALSE(ec);
}

TEST_CASE("inspect reports damaged broadcast bodies as corrupted", "[inspect]") {
  scoped_name name("inspect");
  const std::string path = file_of(name.str());
  asio::io_context io;
  shmio::broadcast_options options;
  options.capacity = 4;
  options.message_size = 32;
  options.max_subscribers = 2;
  shmio::broadcast_buffer pub(io.get_executor(), shmio::create_only, name,
                              shmio::broadcast_role::publisher, options);
  shmio::broadcast_buffer sub(io.get_executor(), shmio::open_only, name,
                              shmio::broadcast_role::subscriber);
  REQUIRE(pub.write(asio::buffer("one", 3), 0ms) == 3);
  REQUIRE(pub.write(asio::buffer("two", 3), 0ms) == 3);
  const std::uint64_t slots = bc_entries + 64 * 2;
  std::error_code ec;
  auto status_after = [&](std::uint64_t offset, auto value) {
    overwrite(path, offset, &value, sizeof value);
    return shmio::inspect::examine(name.str(), ec);
  };
  SECTION("another broadcast version") {
    CHECK(status_after(body, std::uint32_t{9}).status == shmio::errc::incompatible);
  }
  SECTION("a slot count that does not fit the file") {
    CHECK(status_after(body + 8, std::uint32_t{5}).status == shmio::errc::corrupted);
  }
  SECTION("a writers' lock word naming no participant") {
    CHECK(status_after(bc_writer, std::uint32_t{100000}).status == shmio::errc::corrupted);
  }
  SECTION("a high-water mark past the table") {
    CHECK(status_after(bc_high, std::uint32_t{3}).status == shmio::errc::corrupted);
  }
  SECTION("a subscriber entry of no known state") {
    auto info = status_after(bc_entries + 8, std::uint64_t{7});
    CHECK(info.status == shmio::errc::corrupted);
    CHECK(info.problem.find("subscriber entry 0") != std::string::npos);
  }
  SECTION("a subscriber cursor past the tail") {
    CHECK(status_after(bc_entries, std::uint64_t{50}).status == shmio::errc::corrupted);
  }
  SECTION("a tail behind a published slot") {
    auto info = status_after(bc_tail, std::uint64_t{0});
    CHECK(info.status == shmio::errc::corrupted);
    REQUIRE(info.broadcast);
    CHECK(info.broadcast->invalid == 2);
  }
  SECTION("a slot version of another slot's position") {
    auto info = status_after(slots + 64, published_version(2));  // slot 1 cannot hold 2
    CHECK(info.status == shmio::errc::corrupted);
    REQUIRE(info.broadcast);
    CHECK(info.broadcast->invalid == 1);
    CHECK(info.broadcast->published == 1);
  }
  SECTION("a published length past the message size") {
    auto info = status_after(slots + 8, std::uint32_t{33});
    CHECK(info.status == shmio::errc::corrupted);
  }
  CHECK_FALSE(ec);
}

TEST_CASE("inspect survives random damage to locked-buffer and broadcast bodies", "[inspect]") {
  std::mt19937_64 rng(Catch::rngSeed());
  asio::io_context io;
  for (int round = 0; round < 100; ++round) {
    scoped_name array_name("inspect"), bc_name("inspect");
    shmio::shared_array<std::uint64_t> arr(io.get_executor(), shmio::create_only, array_name, 4);
    shmio::broadcast_options options;
    options.capacity = 4;
    options.message_size = 16;
    options.max_subscribers = 2;
    shmio::broadcast_buffer pub(io.get_executor(), shmio::create_only, bc_name,
                                shmio::broadcast_role::publisher, options);
    shmio::broadcast_buffer sub(io.get_executor(), shmio::open_only, bc_name,
                                shmio::broadcast_role::subscriber);
    REQUIRE(pub.write(asio::buffer("m", 1), 0ms) == 1);
    // The headers, the lock's control line and first slots; the broadcast's lines, table and
    // slots: where every count, word and offset lives.
    for (int k = 0; k < 4; ++k) {
      std::uint64_t garbage = rng();
      overwrite(file_of(array_name.str()), rng() % (64 + 1216 + 2 * 64 - 8), &garbage, 8);
      garbage = rng();
      overwrite(file_of(bc_name.str()), rng() % (64 + 1408 + 2 * 64 + 4 * 64 - 8), &garbage, 8);
    }
    for (const auto* n : {&array_name, &bc_name}) {
      std::error_code ec;
      auto info = shmio::inspect::examine(n->str(), ec);
      REQUIRE_FALSE(ec);
      CHECK((!info.status || info.status == shmio::errc::corrupted ||
             info.status == shmio::errc::incompatible));
      if (info.broadcast)
        CHECK(info.broadcast->published + info.broadcast->writing + info.broadcast->empty +
                  info.broadcast->invalid ==
              4);
    }
  }
}
