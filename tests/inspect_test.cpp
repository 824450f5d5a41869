// Tests of shmio::inspect: what it reads from live, stale, corrupted and temporary files, that
// it never trusts what it reads, and that its stale removal leaves live segments alone.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <asio/io_context.hpp>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "shmio/broadcast_buffer.hpp"
#include "shmio/buffer_read_write.hpp"
#include "shmio/circular_buffer.hpp"
#include "shmio/detail/layout.hpp"
#include "shmio/inspect.hpp"
#include "shmio/named_event.hpp"
#include "shmio/rpc_acceptor.hpp"
#include "shmio/rpc_buffer.hpp"
#include "shmio/rpc_server.hpp"
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
// An rpc service's listener header, and its connect ring (a ring body: header, then nodes).
constexpr std::uint64_t svc_node_size = body + 8;
constexpr std::uint64_t svc_timeout = body + 16;
constexpr std::uint64_t svc_ring_offset = body + 24;
constexpr std::uint64_t svc_ring_bytes = body + 32;
constexpr std::uint64_t svc_backlog = body + 44;
constexpr std::uint64_t svc_ring = body + 64;
constexpr std::uint64_t svc_nodes = svc_ring + 1344;  // node i at + 64 * i (32-byte requests)
constexpr std::uint64_t svc_methods_offset = body + 56;
constexpr std::uint64_t svc_methods = svc_nodes + 64 * 256;  // the method table
constexpr std::uint64_t svc_slot = svc_methods + 16;         // its slot 0

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

// The server of an rpc service, its io_context run on a thread for the length of a test; closed
// and joined even when a check fails.
struct service_thread {
  // Echo, as the unnamed method and as "get" (in place).
  static shmio::rpc_methods methods() {
    shmio::rpc_methods m(shmio::rpc_sync_handler([](std::uint64_t, std::span<const std::byte> in) {
      return std::vector<std::byte>(in.begin(), in.end());
    }));
    m.add("get", shmio::rpc_in_place_handler([](std::uint64_t, std::span<const std::byte> in,
                                                shmio::rpc_reply& reply) { reply.append(in); }));
    return m;
  }
  asio::io_context io;
  shmio::rpc_server server;
  std::thread runner;
  service_thread(std::string_view name, const shmio::rpc_options& options)
      : server(io.get_executor(), shmio::create_only, name, methods(), options),
        runner([this] { io.run(); }) {}
  ~service_thread() {
    server.close();
    runner.join();
  }
};

// Leaves behind an rpc service whose server exited without closing it: stale, its server gone.
// With `channel`, the child also made that rpc channel as its owner (as a client does to connect)
// and left it behind too. Returns the child's pid.
std::uint32_t leave_dead_service(const std::string& name, const std::string& channel = {}) {
  shmio::test::child c([&] {
    asio::io_context io;
    shmio::rpc_acceptor acceptor(io.get_executor(), shmio::create_only, name);
    std::optional<shmio::rpc_buffer> owner;
    if (!channel.empty()) owner.emplace(io.get_executor(), shmio::create_only, channel);
    ::_exit(0);  // no destructor: the files stay, and the exit drops their locks
    return 0;
  });
  REQUIRE(c.wait() == 0);
  return static_cast<std::uint32_t>(c.pid());
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

TEST_CASE("inspect lists a local name that begins with a prefix under a name that reaches it",
          "[inspect]") {
  scoped_name base("inspect");
  asio::io_context io;
  for (const std::string prefix : {"Global\\", "Local\\"}) {
    // "Local\\Global\\x" is this user's "Global\\x"; "Global\\x" alone is the machine's.
    const std::string name = "Local\\" + prefix + base.str();
    shmio::named_event ev(io.get_executor(), shmio::create_only, name,
                          shmio::event_mode::manual_reset, false);
    std::error_code ec;
    auto all = shmio::inspect::list(ec);
    REQUIRE_FALSE(ec);
    auto it = std::find_if(all.begin(), all.end(),
                           [&](auto& s) { return s.name.ends_with(prefix + base.str()); });
    REQUIRE(it != all.end());
    CHECK(it->name == name);
    auto again = shmio::inspect::examine(it->name, ec);
    REQUIRE_FALSE(ec);
    CHECK(again.file == it->file);
  }
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
    // Node 3 of 4 serves turns 3 and 4 modulo 4; its word holds the turn less 3: turn 12346.
    const std::uint64_t word = std::uint64_t{12346 - 3} << 16;
    overwrite(path, 64 + 1344 + 64 * 3, &word, sizeof word);
    auto info = shmio::inspect::examine(name.str(), ec);
    CHECK(info.status == shmio::errc::corrupted);
    REQUIRE(info.ring);
    CHECK(info.ring->invalid == 1);
  }
  SECTION("a tail moved far past the head") {
    leave_stale_ring(name.str());
    // The ring's writers fail with corrupted from then on (ring.cpp): the inspector says so.
    const std::uint64_t tail = std::uint64_t{1} << 40;
    overwrite(path, 64 + 64, &tail, sizeof tail);  // the segment header, then ring_state.tail
    auto info = shmio::inspect::examine(name.str(), ec);
    CHECK(info.status == shmio::errc::corrupted);
    CHECK_THAT(info.problem, Catch::Contains("head and tail"));
    REQUIRE(info.ring);
    CHECK(info.ring->cursors_apart);
    CHECK(info.ring->invalid == 0);
  }
  SECTION("a length past the node size") {
    leave_stale_ring(name.str());
    const std::uint32_t length = 1000;
    overwrite(path, 64 + 1344 + 8, &length, sizeof length);  // node 0 holds a message
    auto info = shmio::inspect::examine(name.str(), ec);
    CHECK(info.status == shmio::errc::corrupted);
  }
  SECTION("a wait queue's parked count out of range") {
    leave_stale_ring(name.str());
    // More armed slots than a queue has: written over (signallers then look at every slot).
    const std::uint64_t parked = ~std::uint64_t{0};
    overwrite(path, 64 + offsetof(shmio::detail::layout::ring_state, readers), &parked,
              sizeof parked);
    auto info = shmio::inspect::examine(name.str(), ec);
    CHECK(info.status == shmio::errc::corrupted);
    CHECK_THAT(info.problem, Catch::Contains("parked"));
    REQUIRE(info.ring);
    CHECK(info.ring->readers.parked_out_of_range);
    CHECK_FALSE(info.ring->writers.parked_out_of_range);
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

TEST_CASE("inspect lists files under a name that the library refuses, and says why", "[inspect]") {
  // Each makes a create or an open of the name fail with access_denied: an operator must see
  // them in the listing, not an empty one.
  scoped_name name("inspect");
  const std::string path = file_of(name.str());
  struct remover {  // whatever the checks below do (scoped_name removes no directory)
    std::string path;
    ~remover() {
      if (::rmdir(path.c_str()) != 0) ::unlink(path.c_str());
    }
  } remove_it{path};
  std::string why;
  SECTION("a directory") {
    REQUIRE(::mkdir(path.c_str(), 0700) == 0);
    why = "not a regular file";
  }
  SECTION("a FIFO") {
    REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
    why = "not a regular file";
  }
  SECTION("a symbolic link") {
    REQUIRE(::symlink("/dev/null", path.c_str()) == 0);
    why = "a symbolic link";
  }
  if (::geteuid() == 0) {  // only root can give a file away
    SECTION("another user's file") {
      leave_stale_ring(name.str());
      REQUIRE(::chown(path.c_str(), 12345, 12345) == 0);
      why = "owned by uid 12345";
    }
  }
  SECTION("a segment readable by others") {
    leave_stale_ring(name.str());
    REQUIRE(::chmod(path.c_str(), 0644) == 0);
    why = "mode 0644";
  }
  std::error_code ec;
  auto info = shmio::inspect::examine(name.str(), ec);
  CHECK(ec == shmio::errc::access_denied);
  CHECK(info.status == shmio::errc::access_denied);
  CHECK_THAT(info.problem, Catch::Contains(why));
  CHECK_FALSE(info.header_read);
  CHECK_FALSE(info.stale);  // not swept: the library did not make it
  const auto all = shmio::inspect::list(ec);
  REQUIRE_FALSE(ec);
  const auto listed =
      std::find_if(all.begin(), all.end(), [&](const auto& s) { return s.name == name.str(); });
  REQUIRE(listed != all.end());
  CHECK(listed->status == shmio::errc::access_denied);
  asio::io_context io;
  shmio::circular_buffer opened(io.get_executor(), shmio::open_only, name.str(), {}, ec);
  CHECK(ec == shmio::errc::access_denied);  // the library's own verdict agrees
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
  // Young: its creator may be in another pid namespace, between making the file and locking it.
  CHECK_FALSE(info.stale);
  CHECK_FALSE(info.status);  // empty as a create's file is before it is sized: not damage
  CHECK_FALSE(shmio::inspect::remove_file_if_stale(path, ec));
  CHECK(ec == shmio::errc::busy);
  CHECK(::access(path.c_str(), F_OK) == 0);
  // Abandoned: last changed more than 10 s ago. From now on the first create of any other
  // test process running beside this one may sweep it (that is what abandoned means): gone
  // counts as judged stale.
  const struct timespec old_times[2] = {{::time(nullptr) - 11, 0}, {::time(nullptr) - 11, 0}};
  REQUIRE(::utimensat(AT_FDCWD, path.c_str(), old_times, 0) == 0);
  info = shmio::inspect::examine_file(path, ec);
  if (ec != shmio::errc::not_found) {
    REQUIRE_FALSE(ec);
    const bool removed = shmio::inspect::remove_file_if_stale(path, ec);
    const bool swept = !removed && ec == shmio::errc::not_found;
    CHECK((removed || swept));
    // Held only by a sweep that was removing it at that moment.
    CHECK((info.stale || swept));
  }
  CHECK(::access(path.c_str(), F_OK) != 0);

  // Not a shmio file: refused by name.
  shmio::inspect::examine_file("/etc/passwd", ec);
  CHECK(ec == shmio::errc::invalid_name);
  shmio::inspect::remove_file_if_stale("/dev/shm/unrelated", ec);
  CHECK(ec == shmio::errc::invalid_name);
  // Nor is a path that climbs out of /dev/shm through a name of ours.
  const std::string climbing =
      "/dev/shm/.shmio.tmp." + std::to_string(::getpid()) + ".x/../../etc/passwd";
  CHECK_FALSE(shmio::inspect::remove_file_if_stale(climbing, ec));
  CHECK(ec == shmio::errc::invalid_name);
  CHECK_FALSE(shmio::inspect::remove_file(climbing, ec));
  CHECK(ec == shmio::errc::invalid_name);
  shmio::inspect::examine_file(climbing, ec);
  CHECK(ec == shmio::errc::invalid_name);
}

TEST_CASE("inspect removes a live segment's file on request; its holders keep what they mapped",
          "[inspect]") {
  scoped_name name("inspect");
  asio::io_context io;
  shmio::circular_buffer ring(io.get_executor(), shmio::create_only, name, 4, 32);
  const std::string path = file_of(name.str());
  std::error_code ec;
  CHECK(shmio::inspect::remove_file(path, ec));
  CHECK_FALSE(ec);
  CHECK(::access(path.c_str(), F_OK) != 0);
  CHECK(ring.write(asio::buffer("x", 1), 0ms) == 1);  // still mapped
  // The name is free: a new segment takes it, and the old handle's close leaves it there.
  shmio::circular_buffer next(io.get_executor(), shmio::create_only, name, 4, 32);
  ring.close();
  CHECK(::access(path.c_str(), F_OK) == 0);
  CHECK(next.write(asio::buffer("y", 1), 0ms) == 1);
  CHECK_FALSE(shmio::inspect::remove_file(file_of("inspect-none-such"), ec));
  CHECK(ec == shmio::errc::not_found);
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

TEST_CASE("inspect survives a lock word that another process flips while it reads",
          "[inspect][hostile]") {
  // The word is read for display and checked by the validation, which reads it again: what is
  // used must be what was checked, or a word out of range between the two reads indexes a
  // participant slot far past the file.
  scoped_name name("inspect");
  asio::io_context io;
  shmio::buffer_read_write buf(io.get_executor(), shmio::create_only, name, 100);
  shmio::test::raw_segment raw(name);
  auto& word = raw.at<std::atomic<std::uint32_t>>(
      sizeof(shmio::detail::layout::segment_header) + shmio::detail::layout::locked_lock_offset +
      offsetof(shmio::detail::layout::rw_lock_control, writer));
  REQUIRE(word.load() == 0);
  std::atomic<bool> stop{false};
  std::thread flipper([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      word.store(shmio::detail::layout::rw_owner_mask);  // owner 65535: no such participant
      word.store(0);
    }
  });
  int clear = 0, corrupted = 0, other = 0, out_of_range = 0;
  for (int i = 0; i < 2000; ++i) {
    std::error_code ec;
    const auto info = shmio::inspect::examine(name.str(), ec);
    if (ec || (info.status && info.status != shmio::errc::corrupted)) {
      ++other;
    } else if (info.status) {
      ++corrupted;
    } else {
      ++clear;
      // Shown as clear: its writer must be one that was checked (the slot it names was read).
      if (!info.locked || info.locked->lock.writer > shmio::detail::layout::rw_reader_slots)
        ++out_of_range;
    }
  }
  stop = true;
  flipper.join();
  word.store(0);
  CHECK(other == 0);
  CHECK(out_of_range == 0);
  CHECK(clear + corrupted == 2000);
  CHECK(corrupted > 0);  // the flipped word was seen, and reported
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
    // Positions 0 and 1 published, the tail 0: position 0 could be a publication whose tail has
    // yet to move; position 1 cannot.
    auto info = status_after(bc_tail, std::uint64_t{0});
    CHECK(info.status == shmio::errc::corrupted);
    REQUIRE(info.broadcast);
    CHECK(info.broadcast->invalid == 1);
  }
  SECTION("a publication whose tail has yet to move is no damage") {
    // A writer publishes its slot, then moves the tail: seen in between (or killed there), the
    // slot of position tail holds a published message.
    auto info = status_after(slots + 64 * 2, published_version(2));
    CHECK_FALSE(info.status);
    REQUIRE(info.broadcast);
    CHECK(info.broadcast->invalid == 0);
    CHECK(info.broadcast->published == 3);
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

TEST_CASE("inspect reads an rpc service: channel sizes, server, backlog and its clients",
          "[inspect]") {
  scoped_name name("inspect");
  shmio::rpc_options options;
  options.node_count = 4;
  options.node_size = 512;
  options.max_message_size = 10000;
  options.default_timeout = 1500ms;
  service_thread service(name, options);
  asio::io_context client_io;  // the connects block; the clients' io_context is polled only
  shmio::rpc_buffer a(client_io.get_executor()), b(client_io.get_executor());
  a.connect(name.str());
  b.connect(name.str());
  client_io.poll();  // what a connect leaves to the clients' strands: they let go of the service
  // A connect returns once the server's end holds the channel, a moment before the server
  // counts it as accepted.
  REQUIRE(shmio::test::eventually([&] { return service.server.connection_count() == 2; }));
  // Named like a connection, but not one: another kind, the nonce spelt in upper case, and
  // another service whose name starts with this one's.
  shmio::circular_buffer not_rpc(client_io.get_executor(), shmio::create_only,
                                 name.str() + "#7.0000000000000007", 4, 32);
  shmio::rpc_buffer upper(client_io.get_executor(), shmio::create_only,
                          name.str() + "#7.000000000000000A");
  shmio::rpc_buffer other(client_io.get_executor(), shmio::create_only,
                          name.str() + "x#7.0000000000000007");
  const auto me = static_cast<std::uint32_t>(::getpid());

  std::error_code ec;
  auto info = shmio::inspect::examine(name.str(), ec);
  REQUIRE_FALSE(ec);
  CHECK(info.live);
  CHECK_FALSE(info.status);
  CHECK(shmio::inspect::kind_name(info.kind) == "rpc_service");
  REQUIRE(info.rpc_service);
  const auto s = *info.rpc_service;
  CHECK(s.node_count == 4);
  CHECK(s.node_size == 512);
  CHECK(s.max_message_size == 10000);
  REQUIRE(s.default_timeout_ms);
  CHECK(*s.default_timeout_ms == 1500);
  CHECK(s.server_pid == me);
  CHECK(s.server_alive);
  CHECK(s.accepted == 2);
  CHECK(s.requests.node_count == 256);
  CHECK(s.requests.node_size == 32);
  CHECK(s.waiting() == 0);
  CHECK(s.requests.free == 256);
  CHECK(s.clients_complete);
  REQUIRE(s.clients.size() == 2);
  CHECK(s.live_clients() == 2);
  CHECK(std::is_sorted(s.clients.begin(), s.clients.end(),
                       [](auto& x, auto& y) { return x.name < y.name; }));
  for (const auto& c : s.clients) {
    CHECK((c.name == a.name() || c.name == b.name()));
    CHECK(c.pid == me);
    CHECK(c.alive);
    CHECK(c.server_attached);
    CHECK_FALSE(c.status);
  }
  CHECK(s.clients[0].name != s.clients[1].name);
  // Each method of the service, with nothing called yet.
  REQUIRE(s.methods.size() == 2);
  for (const auto& m : s.methods) {
    CHECK((m.name == "" || m.name == "get"));
    CHECK(m.calls == 0);
  }

  // The listing finds the same clients among its own files.
  auto all = shmio::inspect::list(ec);
  REQUIRE_FALSE(ec);
  auto listed = std::find_if(all.begin(), all.end(), [&](auto& x) { return x.name == name.str(); });
  REQUIRE(listed != all.end());
  REQUIRE(listed->rpc_service);
  REQUIRE(listed->rpc_service->clients.size() == 2);
  CHECK(listed->rpc_service->clients[0].name == s.clients[0].name);
  CHECK(listed->rpc_service->clients[1].name == s.clients[1].name);

  // Calls are counted per method, over every connection.
  for (int i = 0; i < 3; ++i)
    a.async_request(asio::buffer("x", 1), [](std::error_code, std::vector<std::byte>) {});
  std::array<std::byte, 4> out;
  for (int i = 0; i < 2; ++i)
    b.async_request("get", asio::buffer("yz", 2), asio::buffer(out),
                    [](std::error_code, std::size_t) {});
  CHECK(shmio::test::eventually([&] {
    client_io.restart();  // idle client ends hold no work: a poll that ran dry stopped it
    client_io.poll();
    auto now = shmio::inspect::examine(name.str(), ec);
    if (!now.rpc_service) return false;
    std::uint64_t unnamed = 0, get = 0;
    for (const auto& m : now.rpc_service->methods)
      (m.name.empty() ? unnamed : get) = m.calls;
    return unnamed == 3 && get == 2;
  }));

  // A client that closes: the server drops its end, and the channel goes with the two ends.
  a.close();
  CHECK(shmio::test::eventually([&] {
    client_io.restart();
    client_io.poll();
    auto now = shmio::inspect::examine(name.str(), ec);
    return now.rpc_service && now.rpc_service->clients.size() == 1 &&
           now.rpc_service->clients[0].name == b.name();
  }));
}

TEST_CASE("inspect tells an rpc service whose server died, and its clients' channels",
          "[inspect]") {
  scoped_name name("inspect");
  // As connection_name spells it: the service's name, '#', the pid, '.', 16 hex digits.
  const std::string channel = name.str() + "#4242.000000000000feed";
  const std::uint32_t server = leave_dead_service(name.str(), channel);
  std::error_code ec;
  auto info = shmio::inspect::examine(name.str(), ec);
  REQUIRE_FALSE(ec);
  CHECK_FALSE(info.live);
  CHECK(info.stale);
  CHECK_FALSE(info.status);  // a dead server is a state a new server recovers from, not damage
  REQUIRE(info.rpc_service);
  CHECK(info.rpc_service->server_pid == server);
  CHECK_FALSE(info.rpc_service->server_alive);
  CHECK(info.rpc_service->accepted == 0);
  CHECK(info.rpc_service->node_count == 16);  // rpc_connection_options()
  CHECK(info.rpc_service->node_size == 4096);
  REQUIRE(info.rpc_service->clients.size() == 1);
  auto c = info.rpc_service->clients[0];
  CHECK(c.name == channel);
  CHECK(c.pid == server);
  CHECK_FALSE(c.alive);
  CHECK_FALSE(c.server_attached);
  CHECK_FALSE(c.status);
  CHECK(info.rpc_service->live_clients() == 0);

  // A damaged channel is still the service's, shown with what is wrong with it.
  const std::uint32_t version = 99;
  overwrite(file_of(channel), body, &version, sizeof version);
  info = shmio::inspect::examine(name.str(), ec);
  REQUIRE(info.rpc_service);
  REQUIRE(info.rpc_service->clients.size() == 1);
  c = info.rpc_service->clients[0];
  CHECK(c.status == shmio::errc::incompatible);
  CHECK(c.problem.find("rpc version 99") != std::string::npos);
  CHECK(c.pid == 0);

  CHECK(shmio::inspect::remove_if_stale(channel, ec));
  CHECK(shmio::inspect::remove_if_stale(name.str(), ec));
}

TEST_CASE("inspect tells the clients of a service whose server was killed", "[inspect]") {
  scoped_name name("inspect");
  shmio::test::child server({shmio::test::peer_path(), "rpc-service-server", name.str()});
  asio::io_context io;
  shmio::rpc_buffer client(io.get_executor());
  // The server process is up when its service answers a connect.
  REQUIRE(shmio::test::eventually([&] {
    std::error_code ec;
    client.connect(name.str(), 10s, ec);
    return !ec;
  }));
  io.poll();  // what the connect leaves to the client's strand: it lets go of the service
  std::error_code ec;
  shmio::inspect::segment_info info;
  // The service counts a connection before its client can hear of it (this blocking connect
  // returns once the service's end has attached, before the accept packet): it is there at once.
  info = shmio::inspect::examine(name.str(), ec);
  REQUIRE_FALSE(ec);
  REQUIRE(info.rpc_service);
  CHECK(info.rpc_service->accepted == 1);
  CHECK(info.rpc_service->server_alive);
  CHECK(info.rpc_service->server_pid == static_cast<std::uint32_t>(server.pid()));
  REQUIRE(info.rpc_service->clients.size() == 1);
  CHECK(info.rpc_service->clients[0].server_attached);

  server.kill9();
  info = shmio::inspect::examine(name.str(), ec);
  REQUIRE_FALSE(ec);
  CHECK(info.stale);
  REQUIRE(info.rpc_service);
  CHECK_FALSE(info.rpc_service->server_alive);
  CHECK(info.rpc_service->accepted == 1);
  REQUIRE(info.rpc_service->clients.size() == 1);
  const auto c = info.rpc_service->clients[0];
  CHECK(c.name == client.name());
  CHECK(c.pid == static_cast<std::uint32_t>(::getpid()));
  CHECK(c.alive);                  // this process still holds its end
  CHECK_FALSE(c.server_attached);  // the service's end died with its process
  CHECK(info.rpc_service->live_clients() == 1);
}

TEST_CASE("inspect reports damaged rpc service headers as corrupted", "[inspect]") {
  scoped_name name("inspect");
  const std::string path = file_of(name.str());
  leave_dead_service(name.str());
  std::error_code ec;
  auto status_after = [&](std::uint64_t offset, auto value) {
    overwrite(path, offset, &value, sizeof value);
    return shmio::inspect::examine(name.str(), ec);
  };
  SECTION("another listener version") {
    auto info = status_after(body, std::uint32_t{3});
    CHECK(info.status == shmio::errc::incompatible);
    CHECK(info.problem.find("rpc service version 3") != std::string::npos);
    CHECK_FALSE(info.rpc_service);
  }
  SECTION("a channel node size with no room for a packet header") {
    auto info = status_after(svc_node_size, std::uint32_t{40});
    CHECK(info.status == shmio::errc::corrupted);
    CHECK(info.problem.find("channel rings of 16 nodes of 40 bytes") != std::string::npos);
    CHECK_FALSE(info.rpc_service);
  }
  SECTION("a channel node count of 1") {
    CHECK(status_after(body + 4, std::uint32_t{1}).status == shmio::errc::corrupted);
  }
  SECTION("a default timeout past what a duration holds") {
    auto info = status_after(svc_timeout, std::uint64_t{1} << 63);
    CHECK(info.status == shmio::errc::corrupted);
    CHECK(info.problem.find("default timeout") != std::string::npos);
  }
  SECTION("no default timeout is not damage") {
    auto info = status_after(svc_timeout, ~std::uint64_t{0});
    CHECK_FALSE(info.status);
    REQUIRE(info.rpc_service);
    CHECK_FALSE(info.rpc_service->default_timeout_ms);
  }
  SECTION("a ring offset past the file") {
    auto info = status_after(svc_ring_offset, std::uint64_t{1} << 40);
    CHECK(info.status == shmio::errc::corrupted);
    CHECK(info.problem.find("inconsistent with the file size") != std::string::npos);
  }
  SECTION("a method table that does not follow the connect ring") {
    auto info = status_after(svc_methods_offset, std::uint64_t{12345});
    CHECK(info.status == shmio::errc::corrupted);
    CHECK(info.problem.find("inconsistent with the file size") != std::string::npos);
  }
  SECTION("more methods than the table has slots") {
    auto info = status_after(svc_methods, std::uint32_t{65});
    CHECK(info.status == shmio::errc::corrupted);
    CHECK(info.problem.find("method table inconsistent") != std::string::npos);
  }
  SECTION("a method slot counted but not taken, or with a name longer than a slot") {
    auto info = status_after(svc_methods, std::uint32_t{1});  // slot 0 not taken
    CHECK(info.status == shmio::errc::corrupted);
    CHECK(info.problem.find("method table inconsistent") != std::string::npos);
    const std::uint8_t taken_45[] = {1, 45};
    overwrite(path, svc_slot + 16, taken_45, sizeof taken_45);
    info = shmio::inspect::examine(name.str(), ec);
    CHECK(info.status == shmio::errc::corrupted);
    CHECK(info.problem.find("method table inconsistent") != std::string::npos);
  }
  SECTION("a method slot as a service writes it") {
    const std::uint32_t used = 1;
    const std::uint64_t calls = 7;
    const std::uint8_t head[] = {1, 3, 0, 0, 'g', 'e', 't'};
    overwrite(path, svc_slot, &calls, sizeof calls);
    overwrite(path, svc_slot + 16, head, sizeof head);
    auto info = status_after(svc_methods, used);
    CHECK_FALSE(info.status);
    REQUIRE(info.rpc_service);
    REQUIRE(info.rpc_service->methods.size() == 1);
    CHECK(info.rpc_service->methods[0].name == "get");
    CHECK_FALSE(info.rpc_service->methods[0].name_cut);
    CHECK(info.rpc_service->methods[0].calls == 7);
  }
  SECTION("ring bytes that do not fit the file") {
    CHECK(status_after(svc_ring_bytes, std::uint64_t{64}).status == shmio::errc::corrupted);
  }
  SECTION("a backlog the connect ring does not have") {
    auto info = status_after(svc_backlog, std::uint32_t{100000});
    CHECK(info.status == shmio::errc::corrupted);
    CHECK(info.problem.find("backlog 100000 but the connect ring has 256 nodes") !=
          std::string::npos);
  }
  SECTION("a connect ring header that does not fit the file") {
    auto info = status_after(svc_ring, std::uint32_t{0xFFFFFFFF});
    CHECK(info.status == shmio::errc::corrupted);
    CHECK(info.problem.find("connect ring header") != std::string::npos);
  }
  SECTION("a connect ring of nodes too large for a request") {
    CHECK(status_after(svc_ring + 4, std::uint32_t{64}).status == shmio::errc::corrupted);
  }
  SECTION("a connect ring node of another lap") {
    // Node 3 of 256 serves turns 3 and 4 modulo 256; its word holds the turn less 3.
    auto info = status_after(svc_nodes + 64 * 3, std::uint64_t{12345 - 3} << 16);
    CHECK(info.status == shmio::errc::corrupted);
    CHECK(info.problem.find("1 invalid connect ring nodes") != std::string::npos);
    REQUIRE(info.rpc_service);
    CHECK(info.rpc_service->requests.invalid == 1);
    CHECK(info.rpc_service->requests.free == 255);
  }
  CHECK_FALSE(ec);
  shmio::inspect::remove_if_stale(name.str(), ec);
}

TEST_CASE("inspect survives random damage to an rpc service", "[inspect]") {
  scoped_name name("inspect");
  const std::string path = file_of(name.str());
  std::mt19937_64 rng(Catch::rngSeed());
  for (int round = 0; round < 100; ++round) {
    leave_dead_service(name.str());
    // The listener header, the connect ring's header and lines, and its first nodes: where
    // every size, offset and node word lives.
    for (int k = 0; k < 4; ++k) {
      const std::uint64_t offset = body + rng() % (64 + 1344 + 4 * 64 - 8);
      const std::uint64_t garbage = rng();
      overwrite(path, offset, &garbage, sizeof garbage);
    }
    std::error_code ec;
    auto info = shmio::inspect::examine(name.str(), ec);
    REQUIRE_FALSE(ec);
    CHECK((!info.status || info.status == shmio::errc::corrupted ||
           info.status == shmio::errc::incompatible));
    if (info.rpc_service) {
      const auto& r = info.rpc_service->requests;
      CHECK(r.used() + r.free + r.invalid == r.node_count);
      CHECK(r.node_count == 256);
    }
    REQUIRE(shmio::inspect::remove_if_stale(name.str(), ec));
  }
}

TEST_CASE("inspect says when a service's name is too long to find all its clients", "[inspect]") {
  scoped_name base("inspect");
  asio::io_context io;
  // Its own file name fits; a connection's, 28 bytes longer ("#" pid "." nonce), may be cut.
  const std::string long_name = base.str() + std::string(200, 'x');
  shmio::rpc_acceptor acceptor(io.get_executor(), shmio::create_only, long_name);
  shmio::rpc_acceptor short_one(io.get_executor(), shmio::create_only, base.str());
  std::error_code ec;
  auto info = shmio::inspect::examine(long_name, ec);
  REQUIRE_FALSE(ec);
  CHECK_FALSE(info.name_cut);
  REQUIRE(info.rpc_service);
  CHECK_FALSE(info.rpc_service->clients_complete);
  CHECK(info.rpc_service->clients.empty());
  info = shmio::inspect::examine(base.str(), ec);
  REQUIRE(info.rpc_service);
  CHECK(info.rpc_service->clients_complete);
}
