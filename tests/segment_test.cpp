// Named segments (include/shmio/segment.hpp): creation, opening, validation, lifetime, security.
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "shmio/detail/layout.hpp"
#include "shmio/detail/names.hpp"
#include "shmio/detail/platform.hpp"
#include "shmio/detail/segment_locks.hpp"
#include "shmio/error.hpp"
#include "shmio/inspect.hpp"
#include "shmio/segment.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
using shmio::errc;
using shmio::object_kind;
using shmio::segment;
using shmio::test::child;
using shmio::test::peer_path;
using shmio::test::scoped_name;
using shmio::test::signal_pipe;
using shmio::test::write_proc;

namespace {

constexpr int killed_by_sigkill = 128 + 9;

// The same pattern as peer_segment.cpp's.
std::byte pattern_byte(std::size_t i, unsigned seed) {
  return static_cast<std::byte>((i * 31 + seed * 7 + 1) & 0xff);
}

void fill_pattern(std::span<std::byte> body, unsigned seed) {
  for (std::size_t i = 0; i < body.size(); ++i)
    body[i] = pattern_byte(i, seed);
}

bool has_pattern(std::span<const std::byte> body, unsigned seed) {
  for (std::size_t i = 0; i < body.size(); ++i)
    if (body[i] != pattern_byte(i, seed)) return false;
  return true;
}

segment::initializer pattern(unsigned seed) {
  return [seed](std::span<std::byte> body) { fill_pattern(body, seed); };
}

bool all_zero(std::span<const std::byte> body) {
  for (auto b : body)
    if (b != std::byte{0}) return false;
  return true;
}

std::string path_of(std::string_view name) {
  std::error_code ec;
  std::string path = shmio::detail::segment_path(name, ec);
  REQUIRE_FALSE(ec);
  return path;
}

// Whether anything (a file, a link, a FIFO...) is at `path`; links are not followed.
bool exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

// Creation temp files of process `pid` still in /dev/shm (".shmio.tmp.PID.HEX").
std::vector<std::string> temp_files_of(pid_t pid) {
  const std::string prefix = ".shmio.tmp." + std::to_string(pid) + ".";
  std::vector<std::string> found;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
    std::string file = entry.path().filename().string();
    if (file.rfind(prefix, 0) == 0) found.push_back(file);
  }
  return found;
}

int open_fd_count() {
  int n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd"))
    ++n;
  return n;
}

// Mappings of files in /dev/shm in this process.
int shm_mapping_count() {
  std::ifstream maps("/proc/self/maps");
  int n = 0;
  for (std::string line; std::getline(maps, line);)
    if (line.find("/dev/shm/") != std::string::npos) ++n;
  return n;
}

// Runs `f` on a descriptor of `path` opened with plain open(2).
template <class F>
void with_raw_fd(const std::string& path, F f) {
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  REQUIRE(fd >= 0);
  f(fd);
  ::close(fd);
}

// A pipe whose descriptors an exec'd peer inherits: its numbers are passed as arguments.
class inherited_pipe {
 public:
  inherited_pipe() {
    if (::pipe(fds_) != 0) std::abort();
  }
  ~inherited_pipe() {
    ::close(fds_[0]);
    ::close(fds_[1]);
  }
  inherited_pipe(const inherited_pipe&) = delete;
  inherited_pipe& operator=(const inherited_pipe&) = delete;

  std::string read_end() const { return std::to_string(fds_[0]); }
  std::string write_end() const { return std::to_string(fds_[1]); }
  void notify(char c = 1) const {
    if (::write(fds_[1], &c, 1) != 1) std::abort();
  }
  /// Waits up to `timeout` for a byte; returns it, or -1 on timeout.
  int wait(std::chrono::milliseconds timeout = 10s) const {
    pollfd p{fds_[0], POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return -1;
    char c;
    return ::read(fds_[0], &c, 1) == 1 ? static_cast<unsigned char>(c) : -1;
  }

 private:
  int fds_[2];
};

// Removes a directory planted at a segment path (scoped_name's remove only unlinks files).
struct rmdir_guard {
  std::string path;
  ~rmdir_guard() { ::rmdir(path.c_str()); }
};

}  // namespace

// ---- create and open -------------------------------------------------------------------------

TEST_CASE("an open sees the size and the body bytes the creator wrote", "[segment]") {
  scoped_name name;
  std::error_code ec;
  auto created = segment::create(name, object_kind::raw, 1000, pattern(1), ec);
  REQUIRE_FALSE(ec);
  REQUIRE(created.is_open());
  CHECK(created.created());
  CHECK(created.body().size() == 1000);
  CHECK(has_pattern(created.body(), 1));

  auto opened = segment::open(name, object_kind::raw, ec);
  REQUIRE_FALSE(ec);
  REQUIRE(opened.is_open());
  CHECK_FALSE(opened.created());
  CHECK(opened.body().size() == 1000);
  CHECK(has_pattern(opened.body(), 1));
  CHECK(opened.name() == name.str());
  CHECK(opened.path() == path_of(name));
  CHECK(opened.kind() == object_kind::raw);

  // Both handles map the same memory.
  created.body()[999] = std::byte{0x5a};
  CHECK(opened.body()[999] == std::byte{0x5a});
}

TEST_CASE("another process sees the body the creator's initializer wrote", "[segment][process]") {
  scoped_name name;
  segment s(shmio::create_only, name, object_kind::raw, 4096, pattern(7));
  child checker({peer_path(), "segment-check", name.str(), "4096", "7"});
  CHECK(checker.wait() == 0);
}

TEST_CASE("a segment created without an initializer has a zero-filled body", "[segment]") {
  scoped_name name;
  segment s(shmio::create_only, name, object_kind::raw, 70000);
  CHECK(s.body().size() == 70000);
  CHECK(all_zero(s.body()));
}

TEST_CASE("a segment with an empty body can be created and opened", "[segment]") {
  scoped_name name;
  segment s(shmio::create_only, name, object_kind::raw, 0);
  segment o(shmio::open_only, name, object_kind::raw);
  CHECK(o.is_open());
  CHECK(o.body().empty());
}

TEST_CASE("a segment file has mode 0600 and a header with magic, version, kind and size",
          "[segment]") {
  scoped_name name;
  segment s(shmio::create_only, name, object_kind::event, 100);
  struct stat st {};
  REQUIRE(::stat(s.path().c_str(), &st) == 0);
  CHECK(S_ISREG(st.st_mode));
  CHECK((st.st_mode & 07777) == 0600);
  CHECK(st.st_uid == ::geteuid());
  CHECK(st.st_size == 164);

  shmio::detail::layout::segment_header h{};
  with_raw_fd(s.path(), [&](int fd) { REQUIRE(::pread(fd, &h, sizeof h, 0) == sizeof h); });
  CHECK(h.magic == 0x0031304f494d4853ull);  // "SHMIO01\0"
  CHECK(h.version == shmio::detail::layout::layout_version);
  CHECK(h.version == 5);
  CHECK(h.kind == static_cast<std::uint32_t>(object_kind::event));
  CHECK(h.total_size == 164);
  CHECK(h.body_offset == 64);
  CHECK(h.creator_pid == static_cast<std::uint32_t>(::getpid()));
}

TEST_CASE("a segment file has mode 0600 whatever the umask, and others open it", "[segment]") {
  // A umask that takes the owner's write bit would leave a file only the creator's descriptor
  // can write: every other open (O_RDWR) would fail with access_denied.
  scoped_name name;
  const mode_t old_mask = ::umask(0277);
  std::error_code ec;
  auto s = segment::create(name, object_kind::raw, 64, {}, ec);
  ::umask(old_mask);
  REQUIRE_FALSE(ec);
  struct stat st {};
  REQUIRE(::stat(s.path().c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0600);
  auto other = segment::open(name, object_kind::raw, ec);
  CHECK_FALSE(ec);
  CHECK(other.is_open());
}

TEST_CASE("an open of a missing name fails with not_found", "[segment]") {
  scoped_name name;
  std::error_code ec;
  auto s = segment::open(name, object_kind::raw, ec);
  CHECK(ec == errc::not_found);
  CHECK(ec == std::errc::no_such_file_or_directory);
  CHECK_FALSE(s.is_open());
  CHECK(s.body().empty());
  CHECK_FALSE(exists(path_of(name)));
}

TEST_CASE("the throwing open of a missing name throws an error naming the operation and segment",
          "[segment]") {
  scoped_name name;
  try {
    segment s(shmio::open_only, name, object_kind::raw);
    FAIL("no exception");
  } catch (const shmio::error& e) {
    CHECK(e.code() == errc::not_found);
    const std::string what = e.what();
    CHECK_THAT(what, Catch::Contains("open '" + name.str() + "'") && Catch::Contains("not found"));
  }
}

TEST_CASE("create_only of a live name fails with already_exists and keeps the segment",
          "[segment]") {
  scoped_name name;
  std::error_code ec;
  auto first = segment::create(name, object_kind::raw, 64, pattern(2), ec);
  REQUIRE_FALSE(ec);

  // The loser's initializer may run, but only on a private copy that is then thrown away.
  auto second = segment::create(name, object_kind::raw, 64, pattern(99), ec);
  CHECK(ec == errc::already_exists);
  CHECK(ec == std::errc::file_exists);
  CHECK_FALSE(second.is_open());
  CHECK_THROWS_MATCHES(segment(shmio::create_only, name, object_kind::raw, 64), shmio::error,
                       Catch::Predicate<shmio::error>(
                           [](const shmio::error& e) { return e.code() == errc::already_exists; }));
  CHECK(temp_files_of(::getpid()).empty());
  CHECK(has_pattern(first.body(), 2));
  auto opened = segment::open(name, object_kind::raw, ec);
  REQUIRE_FALSE(ec);
  CHECK(has_pattern(opened.body(), 2));
}

TEST_CASE("an open of a segment of another kind fails with incompatible", "[segment]") {
  scoped_name name;
  segment s(shmio::create_only, name, object_kind::raw, 64);
  std::error_code ec;
  auto wrong = segment::open(name, object_kind::circular_buffer, ec);
  CHECK(ec == errc::incompatible);
  CHECK_FALSE(wrong.is_open());
  CHECK_THROWS_AS(segment(shmio::open_only, name, object_kind::event), shmio::error);
  // A failed open neither removes the segment nor stops others opening it.
  CHECK(exists(s.path()));
  auto right = segment::open(name, object_kind::raw, ec);
  CHECK_FALSE(ec);
}

TEST_CASE("an open of another kind racing the last other holder's close leaves no file behind",
          "[segment]") {
  // The failed open held the segment for a moment: a close in that moment left the file to it,
  // and the failed open must then remove it as a last closer does. The close is started at
  // delays across the open's window (0 to 20 us), so that some rounds land in it.
  scoped_name name;
  const std::string path = path_of(name);
  int left_behind = 0;
  for (int round = 0; round < 400; ++round) {
    segment s(shmio::create_only, name, object_kind::raw, 64);
    std::atomic<bool> go{false};
    const auto delay = std::chrono::nanoseconds((round % 40) * 500);
    std::thread closer([&] {
      while (!go.load(std::memory_order_acquire)) {
      }
      shmio::test::spin_for(delay);
      s.close();
    });
    go.store(true, std::memory_order_release);
    std::error_code ec;
    auto wrong = segment::open(name, object_kind::circular_buffer, ec);
    closer.join();
    CHECK((ec == errc::incompatible || ec == errc::not_found));
    CHECK_FALSE(wrong.is_open());
    if (exists(path)) {
      ++left_behind;
      std::error_code ignored;
      segment::remove(name, ignored);
    }
  }
  CHECK(left_behind == 0);
}

TEST_CASE("open_or_create creates a missing segment and opens an existing one", "[segment]") {
  scoped_name name;
  std::error_code ec;
  auto first = segment::open_or_create(name, object_kind::raw, 256, pattern(3), ec);
  REQUIRE_FALSE(ec);
  CHECK(first.created());
  CHECK(has_pattern(first.body(), 3));

  bool second_init_ran = false;
  segment second(shmio::open_or_create, name, object_kind::raw, 256,
                 [&](std::span<std::byte>) { second_init_ran = true; });
  CHECK_FALSE(second.created());
  CHECK_FALSE(second_init_ran);
  CHECK(second.body().size() == 256);
  CHECK(has_pattern(second.body(), 3));
}

TEST_CASE("open_or_create of a live segment of another kind fails with incompatible", "[segment]") {
  scoped_name name;
  segment s(shmio::create_only, name, object_kind::raw, 64);
  std::error_code ec;
  auto other = segment::open_or_create(name, object_kind::event, 64, {}, ec);
  CHECK(ec == errc::incompatible);
  CHECK_FALSE(other.is_open());
}

// ---- lifetime --------------------------------------------------------------------------------

TEST_CASE("a close that is not the last keeps the file and the last close removes it",
          "[segment]") {
  scoped_name name;
  const std::string path = path_of(name);
  segment a(shmio::create_only, name, object_kind::raw, 64);
  segment b(shmio::open_only, name, object_kind::raw);
  CHECK(exists(path));
  a.close();
  CHECK_FALSE(a.is_open());
  CHECK(exists(path));
  a.close();  // a second close does nothing
  CHECK(exists(path));
  b.close();
  CHECK_FALSE(exists(path));
}

TEST_CASE("destroying the last handle removes the file", "[segment]") {
  scoped_name name;
  const std::string path = path_of(name);
  {
    segment s(shmio::create_only, name, object_kind::raw, 64);
    CHECK(exists(path));
  }
  CHECK_FALSE(exists(path));
  std::error_code ec;
  segment::open(name, object_kind::raw, ec);
  CHECK(ec == errc::not_found);
}

TEST_CASE("moving a segment moves the mapping and leaves the source empty", "[segment]") {
  scoped_name name;
  const std::string path = path_of(name);
  segment a(shmio::create_only, name, object_kind::event, 128, pattern(4));
  std::byte* const body = a.body().data();

  segment b(std::move(a));
  CHECK_FALSE(a.is_open());  // NOLINT(bugprone-use-after-move): checking the moved-from state
  CHECK(a.body().empty());
  a.close();  // closing the moved-from handle must not remove the file
  CHECK(exists(path));
  REQUIRE(b.is_open());
  CHECK(b.body().data() == body);
  CHECK(b.body().size() == 128);
  CHECK(b.name() == name.str());
  CHECK(b.path() == path);
  CHECK(b.kind() == object_kind::event);
  CHECK(b.created());

  segment c;
  CHECK_FALSE(c.is_open());
  c = std::move(b);
  CHECK_FALSE(b.is_open());  // NOLINT(bugprone-use-after-move)
  REQUIRE(c.is_open());
  CHECK(c.body().data() == body);
  CHECK(has_pattern(c.body(), 4));
  CHECK(exists(path));

  { segment last = std::move(c); }
  CHECK_FALSE(exists(path));
}

TEST_CASE("move-assigning over an open segment closes it", "[segment]") {
  scoped_name first_name, second_name;
  segment first(shmio::create_only, first_name, object_kind::raw, 64);
  segment second(shmio::create_only, second_name, object_kind::raw, 64);
  const std::string first_path = first.path();
  first = std::move(second);
  CHECK_FALSE(exists(first_path));  // it was the last handle of first_name
  CHECK(first.name() == second_name.str());
  CHECK(exists(first.path()));
}

TEST_CASE("remove unlinks a segment in use and its holders keep their mapping", "[segment]") {
  scoped_name name;
  segment s(shmio::create_only, name, object_kind::raw, 64, pattern(5));
  std::error_code ec;
  CHECK(segment::remove(name, ec));
  CHECK_FALSE(ec);
  CHECK_FALSE(exists(s.path()));
  CHECK(has_pattern(s.body(), 5));
  CHECK(segment::open(name, object_kind::raw, ec).is_open() == false);
  CHECK(ec == errc::not_found);
  CHECK_FALSE(segment::remove(name, ec));  // nothing left: false, and no error
  CHECK_FALSE(ec);
}

TEST_CASE("closing a removed segment does not remove a new segment of the same name", "[segment]") {
  scoped_name name;
  segment old_one(shmio::create_only, name, object_kind::raw, 64);
  std::error_code ec;
  REQUIRE(segment::remove(name, ec));
  segment new_one(shmio::create_only, name, object_kind::raw, 64, pattern(6));
  old_one.close();
  CHECK(exists(new_one.path()));
  segment reopened(shmio::open_only, name, object_kind::raw);
  CHECK(has_pattern(reopened.body(), 6));
}

TEST_CASE("a segment stays while another process holds it and goes when that one closes it",
          "[segment][process]") {
  scoped_name name;
  const std::string path = path_of(name);
  // Forked before the segment exists, so the child shares none of our descriptors.
  signal_pipe created, opened, release;
  child holder([&] {
    if (created.wait() != 1) return 2;
    std::error_code ec;
    auto s = segment::open(name, object_kind::raw, ec);
    if (ec) return 1;
    opened.notify();
    release.wait();
    s.close();
    return 0;
  });
  auto s = segment(shmio::create_only, name, object_kind::raw, 64);
  created.notify();
  REQUIRE(opened.wait() == 1);
  s.close();
  CHECK(exists(path));
  release.notify();
  REQUIRE(holder.wait() == 0);
  CHECK_FALSE(exists(path));
}

TEST_CASE("an exec'd process holding a segment keeps it after the creator closes it",
          "[segment][process]") {
  scoped_name name;
  const std::string path = path_of(name);
  auto s = segment(shmio::create_only, name, object_kind::raw, 64);
  inherited_pipe ready, release;
  child holder(
      {peer_path(), "segment-open-and-wait", name.str(), ready.write_end(), release.read_end()});
  REQUIRE(ready.wait() == 'o');
  s.close();
  CHECK(exists(path));
  release.notify();
  REQUIRE(holder.wait() == 0);
  CHECK_FALSE(exists(path));
}

TEST_CASE(
    "a close that is not the last does not block openers while a forked child shares "
    "the descriptor",
    "[segment][process]") {
  scoped_name name;
  const std::string path = path_of(name);
  auto s = segment(shmio::create_only, name, object_kind::raw, 64);
  inherited_pipe ready, release;
  child holder(
      {peer_path(), "segment-open-and-wait", name.str(), ready.write_end(), release.read_end()});
  REQUIRE(ready.wait() == 'o');
  // A child that does nothing with shmio, but inherits our descriptor of the segment file, as
  // any fork without exec does.
  signal_pipe done;
  child bystander([&] { return done.wait(20s) == 1 ? 0 : 1; });

  s.close();  // not the last: the peer holds it
  CHECK(exists(path));
  const auto start = std::chrono::steady_clock::now();
  std::error_code ec;
  auto again = segment::open(name, object_kind::raw, ec);
  const auto took = std::chrono::steady_clock::now() - start;
  CHECK_FALSE(ec);
  CHECK(took < 1s);

  done.notify();
  CHECK(bystander.wait() == 0);
  release.notify();
  CHECK(holder.wait() == 0);
}

// ---- stale segments --------------------------------------------------------------------------

namespace {
// Forks a child that creates `name` with the pattern of `seed` and then blocks until killed.
// Returns once the segment exists.
void create_in_child_and_kill(const scoped_name& name, unsigned seed) {
  signal_pipe ready;
  child creator([&] {
    std::error_code ec;
    auto s = segment::create(name, object_kind::raw, 512, pattern(seed), ec);
    if (ec) return 1;
    ready.notify();
    for (;;)
      ::pause();
  });
  REQUIRE(ready.wait() == 1);
  REQUIRE(creator.kill9() == killed_by_sigkill);
  REQUIRE(exists(path_of(name)));
}

void create_in_peer_and_kill(const scoped_name& name, unsigned seed) {
  inherited_pipe ready;
  child creator({peer_path(), "segment-create-and-wait", name.str(), "512", std::to_string(seed),
                 ready.write_end()});
  REQUIRE(ready.wait() == 'r');
  REQUIRE(creator.kill9() == killed_by_sigkill);
  REQUIRE(exists(path_of(name)));
}
}  // namespace

TEST_CASE("a create of a segment whose creator was killed removes it and succeeds",
          "[segment][process]") {
  scoped_name name;
  create_in_child_and_kill(name, 8);
  std::error_code ec;
  auto s = segment::create(name, object_kind::raw, 100, {}, ec);
  REQUIRE_FALSE(ec);
  CHECK(s.created());
  CHECK(s.body().size() == 100);  // a new segment, not the stale one
  CHECK(all_zero(s.body()));
}

TEST_CASE("an open of a segment whose creator was killed fails with not_found and removes it",
          "[segment][process]") {
  scoped_name name;
  create_in_child_and_kill(name, 9);
  std::error_code ec;
  auto s = segment::open(name, object_kind::raw, ec);
  CHECK(ec == errc::not_found);
  CHECK_FALSE(s.is_open());
  CHECK_FALSE(exists(path_of(name)));
}

TEST_CASE("an open_or_create of a segment whose creator was killed creates a new one",
          "[segment][process]") {
  scoped_name name;
  create_in_child_and_kill(name, 10);
  std::error_code ec;
  auto s = segment::open_or_create(name, object_kind::raw, 100, pattern(11), ec);
  REQUIRE_FALSE(ec);
  CHECK(s.created());
  CHECK(s.body().size() == 100);
  CHECK(has_pattern(s.body(), 11));
}

namespace {
// Gives this (child) process a mount namespace of its own, with nothing shared back: directly
// with CAP_SYS_ADMIN, else inside a user namespace that maps our own user and group to
// themselves (file ownership looks the same from inside). False where neither is allowed.
bool enter_private_mounts() {
  if (::unshare(CLONE_NEWNS) != 0) {
    const uid_t uid = ::geteuid();
    const gid_t gid = ::getegid();
    if (::unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) return false;
    if (!write_proc("/proc/self/setgroups", "deny") ||
        !write_proc("/proc/self/uid_map", std::to_string(uid) + " " + std::to_string(uid) + " 1") ||
        !write_proc("/proc/self/gid_map", std::to_string(gid) + " " + std::to_string(gid) + " 1"))
      return false;
  }
  return ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0;
}
}  // namespace

TEST_CASE("a stale segment whose file cannot be unlinked makes creates and opens fail and stays",
          "[segment][process]") {
  scoped_name name;
  create_in_child_and_kill(name, 14);
  const std::string path = path_of(name);
  // In a child with a mount namespace of its own, the file is mounted over itself: it opens as
  // before, and an unlink of a mount point fails with EBUSY. The mount goes with the child.
  enum : int { not_tried = 50, not_mounted = 51, passed = 0 };
  child c([&]() -> int {
    if (!enter_private_mounts()) return not_tried;
    if (::mount(path.c_str(), path.c_str(), nullptr, MS_BIND, nullptr) != 0) return not_mounted;
    auto busy = [](const std::error_code& e) {
      return e.category() == std::system_category() && e.value() == EBUSY;
    };
    std::error_code ec;
    // Before: errc::busy, after looking for the file again and again (create, open_or_create),
    // errc::not_found with the file still there (open), true: "removed" (the inspector).
    auto created = segment::create(name, object_kind::raw, 100, {}, ec);
    if (!busy(ec) || created.is_open()) return 1;
    auto either = segment::open_or_create(name, object_kind::raw, 100, {}, ec);
    if (!busy(ec) || either.is_open()) return 2;
    auto opened = segment::open(name, object_kind::raw, ec);
    if (!busy(ec) || opened.is_open()) return 3;
    if (shmio::inspect::remove_if_stale(name.str(), ec) || !busy(ec)) return 4;
    // The failed removal lets go of the exclusive holder lock it took for the test: seen from
    // a second descriptor while the first, which took it, is still open (its close would drop
    // the lock anyway, which is what the calls above end with).
    namespace platform = shmio::detail::platform;
    const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) return 5;
    std::error_code lock_ec;
    const bool admin = shmio::detail::lock_admin(fd, lock_ec);
    const auto found = shmio::detail::remove_if_unheld(fd, path, lock_ec);
    if (admin) shmio::detail::unlock_admin(fd);
    const int other = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    std::error_code other_ec;
    const bool unheld =
        other >= 0 && platform::try_lock_byte(other, shmio::detail::layout::holder_lock_byte,
                                              platform::lock_kind::exclusive, other_ec);
    if (other >= 0) ::close(other);
    ::close(fd);
    if (!admin || found != shmio::detail::stale_test::held || !busy(lock_ec)) return 6;
    return unheld ? passed : 7;
  });
  const int rc = c.wait();
  if (rc == not_tried) {
    WARN("no mount namespace to be had here (neither CAP_SYS_ADMIN nor user namespaces)");
    return;
  }
  if (rc == not_mounted) {
    WARN("a bind mount in /dev/shm is refused here, even in a mount namespace of our own");
    return;
  }
  CHECK(rc == passed);
  // Outside the child's namespace the file is an ordinary stale one: it goes as any does.
  std::error_code ec;
  auto again = segment::create(name, object_kind::raw, 100, {}, ec);
  REQUIRE_FALSE(ec);
  CHECK(again.created());
}

TEST_CASE("a create of a segment whose exec'd creator was killed removes it and succeeds",
          "[segment][process]") {
  scoped_name name;
  create_in_peer_and_kill(name, 12);
  std::error_code ec;
  auto s = segment::create(name, object_kind::raw, 100, {}, ec);
  REQUIRE_FALSE(ec);
  CHECK(s.created());
  CHECK(s.body().size() == 100);
  CHECK(all_zero(s.body()));
}

TEST_CASE(
    "an open of a segment whose exec'd creator was killed fails with not_found and "
    "removes it",
    "[segment][process]") {
  scoped_name name;
  create_in_peer_and_kill(name, 13);
  std::error_code ec;
  auto s = segment::open(name, object_kind::raw, ec);
  CHECK(ec == errc::not_found);
  CHECK_FALSE(exists(path_of(name)));
}

TEST_CASE("segment::remove waits for the admin lock that a close or stale check holds",
          "[segment]") {
  // A last closer checks that the file is unused and unlinks it under this lock: a remove in
  // between, then a new create of the name, and the closer would unlink the new segment.
  scoped_name name;
  std::error_code ec;
  auto s = segment::create(name, object_kind::raw, 64, {}, ec);
  REQUIRE_FALSE(ec);
  shmio::detail::platform::unique_fd fd(::open(path_of(name).c_str(), O_RDWR | O_CLOEXEC));
  REQUIRE(fd.get() >= 0);
  REQUIRE(shmio::detail::platform::try_lock_byte(fd.get(), shmio::detail::layout::admin_lock_byte,
                                                 shmio::detail::platform::lock_kind::exclusive,
                                                 ec));
  auto removal = std::async(std::launch::async, [&] {
    std::error_code remove_ec;
    const bool removed = segment::remove(name, remove_ec);
    return std::make_pair(removed, remove_ec);
  });
  // An observation window, not synchronisation: the remove must still be waiting after it.
  const bool returned_early = removal.wait_for(200ms) == std::future_status::ready;
  CHECK_FALSE(returned_early);
  CHECK(exists(path_of(name)));
  REQUIRE(shmio::detail::platform::try_lock_byte(fd.get(), shmio::detail::layout::admin_lock_byte,
                                                 shmio::detail::platform::lock_kind::unlock, ec));
  const auto [removed, remove_ec] = removal.get();
  CHECK(removed);
  CHECK_FALSE(remove_ec);
  CHECK_FALSE(exists(path_of(name)));
}

TEST_CASE("a create removes temporary files that killed creators left, not young or held ones",
          "[segment][process]") {
  // Files as a creator killed before its rename leaves them (the pid in the name is not ours,
  // and no guide: the sweep goes by the holder lock and the age).
  struct files_guard {
    std::vector<std::string> paths;
    ~files_guard() {
      for (const std::string& p : paths)
        ::unlink(p.c_str());
    }
  } guard;
  std::vector<shmio::detail::platform::unique_fd> kept;  // the held file's lock
  auto make = [&](bool old, bool held) {
    char suffix[40];
    std::snprintf(suffix, sizeof suffix, "4000000000.%016llx",
                  static_cast<unsigned long long>(shmio::detail::platform::random_u64()));
    const std::string path = std::string(shmio::detail::shm_directory) +
                             std::string(shmio::detail::temporary_file_prefix) + suffix;
    guard.paths.push_back(path);
    shmio::detail::platform::unique_fd fd(
        ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    REQUIRE(fd.get() >= 0);
    REQUIRE(::ftruncate(fd.get(), 4096) == 0);
    if (old) {
      const timespec times[2] = {{0, UTIME_OMIT}, {::time(nullptr) - 3600, 0}};
      REQUIRE(::futimens(fd.get(), times) == 0);
    }
    if (held) {
      std::error_code ec;
      REQUIRE(
          shmio::detail::platform::try_lock_byte(fd.get(), shmio::detail::layout::holder_lock_byte,
                                                 shmio::detail::platform::lock_kind::shared, ec));
      kept.push_back(std::move(fd));
    }
    return path;
  };
  const std::string abandoned = make(true, false);
  const std::string young = make(false, false);
  const std::string held = make(true, true);
  // A new process: its first create sweeps.
  scoped_name name;
  inherited_pipe ready;
  child creator(
      {peer_path(), "segment-create-and-wait", name.str(), "512", "15", ready.write_end()});
  REQUIRE(ready.wait() == 'r');
  CHECK_FALSE(exists(abandoned));
  CHECK(exists(young));  // its creator may be between its create and its lock
  CHECK(exists(held));   // its creator is building it
  CHECK(creator.kill9() == killed_by_sigkill);
}

TEST_CASE("a segment held by a live exec'd creator is neither stale nor replaceable",
          "[segment][process]") {
  scoped_name name;
  inherited_pipe ready;
  child creator(
      {peer_path(), "segment-create-and-wait", name.str(), "512", "14", ready.write_end()});
  REQUIRE(ready.wait() == 'r');
  std::error_code ec;
  auto again = segment::create(name, object_kind::raw, 512, {}, ec);
  CHECK(ec == errc::already_exists);
  auto opened = segment::open(name, object_kind::raw, ec);
  REQUIRE_FALSE(ec);
  CHECK(has_pattern(opened.body(), 14));
  CHECK(creator.kill9() == killed_by_sigkill);
}

// ---- security ----------------------------------------------------------------------------

TEST_CASE("a symlink at the segment path is refused and not followed", "[segment][security]") {
  scoped_name name, target_name;
  const std::string path = path_of(name);
  const std::string target = path_of(target_name);

  SECTION("a dangling symlink") {
    REQUIRE(::symlink(target.c_str(), path.c_str()) == 0);
    std::error_code ec;
    CHECK_FALSE(segment::create(name, object_kind::raw, 64, {}, ec).is_open());
    CHECK(ec == errc::access_denied);
    CHECK_FALSE(segment::open(name, object_kind::raw, ec).is_open());
    CHECK(ec == errc::access_denied);
    CHECK_FALSE(segment::open_or_create(name, object_kind::raw, 64, {}, ec).is_open());
    CHECK(ec == errc::access_denied);
    CHECK_FALSE(exists(target));  // nothing was created through the link
  }
  SECTION("a symlink to a live segment") {
    segment real(shmio::create_only, target_name, object_kind::raw, 64, pattern(15));
    REQUIRE(::symlink(target.c_str(), path.c_str()) == 0);
    std::error_code ec;
    CHECK_FALSE(segment::open(name, object_kind::raw, ec).is_open());
    CHECK(ec == errc::access_denied);
    CHECK_FALSE(segment::create(name, object_kind::raw, 64, pattern(16), ec).is_open());
    CHECK(ec == errc::access_denied);
    CHECK(has_pattern(real.body(), 15));
  }
  struct stat st {};
  REQUIRE(::lstat(path.c_str(), &st) == 0);
  CHECK(S_ISLNK(st.st_mode));  // the link itself is left alone
  CHECK(temp_files_of(::getpid()).empty());
}

TEST_CASE("a file with group or other permission bits is refused and left alone",
          "[segment][security]") {
  scoped_name name;
  const std::string path = path_of(name);
  for (mode_t mode : {0644, 0640, 0604, 0660, 0602}) {
    INFO("mode " << std::oct << mode);
    // A file someone planted, with no holders: were it accepted, it would be removed as stale.
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    REQUIRE(fd >= 0);
    REQUIRE(::fchmod(fd, mode) == 0);
    ::close(fd);
    std::error_code ec;
    CHECK_FALSE(segment::open(name, object_kind::raw, ec).is_open());
    CHECK(ec == errc::access_denied);
    CHECK_FALSE(segment::create(name, object_kind::raw, 64, {}, ec).is_open());
    CHECK(ec == errc::access_denied);
    CHECK_FALSE(segment::open_or_create(name, object_kind::raw, 64, {}, ec).is_open());
    CHECK(ec == errc::access_denied);
    CHECK(exists(path));
    REQUIRE(::unlink(path.c_str()) == 0);
  }
}

TEST_CASE("a live segment whose mode was widened to 0644 is refused", "[segment][security]") {
  scoped_name name;
  segment s(shmio::create_only, name, object_kind::raw, 64);
  REQUIRE(::chmod(s.path().c_str(), 0644) == 0);
  std::error_code ec;
  CHECK_FALSE(segment::open(name, object_kind::raw, ec).is_open());
  CHECK(ec == errc::access_denied);
}

TEST_CASE("a FIFO at the segment path is refused without blocking", "[segment][security]") {
  scoped_name name;
  const std::string path = path_of(name);
  REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
  std::error_code ec;
  CHECK_FALSE(segment::open(name, object_kind::raw, ec).is_open());
  CHECK(ec == errc::access_denied);
  CHECK_FALSE(segment::create(name, object_kind::raw, 64, {}, ec).is_open());
  CHECK(ec == errc::access_denied);
  CHECK(exists(path));
}

TEST_CASE("a directory at the segment path is refused with access_denied", "[segment][security]") {
  scoped_name name;
  const std::string path = path_of(name);
  REQUIRE(::mkdir(path.c_str(), 0700) == 0);
  rmdir_guard guard{path};
  std::error_code ec;
  CHECK_FALSE(segment::open(name, object_kind::raw, ec).is_open());
  CHECK(ec == errc::access_denied);
  CHECK_FALSE(segment::create(name, object_kind::raw, 64, {}, ec).is_open());
  CHECK(ec == errc::access_denied);
  CHECK(temp_files_of(::getpid()).empty());
}

TEST_CASE("a socket at the segment path is refused with access_denied", "[segment][security]") {
  scoped_name name;
  const std::string path = path_of(name);
  int sock = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(sock >= 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  REQUIRE(path.size() < sizeof addr.sun_path);
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  REQUIRE(::bind(sock, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0);
  ::chmod(path.c_str(), 0600);
  std::error_code ec;
  CHECK_FALSE(segment::open(name, object_kind::raw, ec).is_open());
  CHECK(ec == errc::access_denied);
  CHECK_FALSE(segment::create(name, object_kind::raw, 64, {}, ec).is_open());
  CHECK(ec == errc::access_denied);
  ::close(sock);
}

TEST_CASE("a segment file owned by another user is refused", "[segment][security]") {
  if (::geteuid() != 0) {
    WARN("needs root to give a file away; not checked");
    return;
  }
  scoped_name name;
  segment s(shmio::create_only, name, object_kind::raw, 64);
  REQUIRE(::chown(s.path().c_str(), 12345, 12345) == 0);
  std::error_code ec;
  CHECK_FALSE(segment::open(name, object_kind::raw, ec).is_open());
  CHECK(ec == errc::access_denied);
}

// ---- damaged files -----------------------------------------------------------------------

TEST_CASE("a segment file truncated below the header is corrupted", "[segment][damage]") {
  scoped_name name;
  segment s(shmio::create_only, name, object_kind::raw, 256);
  with_raw_fd(s.path(), [](int fd) { REQUIRE(::ftruncate(fd, 10) == 0); });
  std::error_code ec;
  auto o = segment::open(name, object_kind::raw, ec);
  CHECK(ec == errc::corrupted);
  CHECK_FALSE(o.is_open());
  auto oc = segment::open_or_create(name, object_kind::raw, 256, {}, ec);
  CHECK(ec == errc::corrupted);
  CHECK_FALSE(oc.is_open());
}

TEST_CASE("a segment file whose size differs from its header is corrupted", "[segment][damage]") {
  scoped_name name;
  segment s(shmio::create_only, name, object_kind::raw, 256);
  off_t size = 0;
  SECTION("shorter") {
    size = 64 + 128;
  }
  SECTION("longer") {
    size = 64 + 256 + 4096;
  }
  SECTION("exactly the header") {
    size = 64;
  }
  with_raw_fd(s.path(), [&](int fd) { REQUIRE(::ftruncate(fd, size) == 0); });
  std::error_code ec;
  auto o = segment::open(name, object_kind::raw, ec);
  CHECK(ec == errc::corrupted);
  CHECK_FALSE(o.is_open());
}

TEST_CASE("a segment file with a bad body offset is corrupted", "[segment][damage]") {
  scoped_name name;
  segment s(shmio::create_only, name, object_kind::raw, 256);
  const std::uint32_t offset = 128;
  with_raw_fd(s.path(), [&](int fd) { REQUIRE(::pwrite(fd, &offset, 4, 24) == 4); });
  std::error_code ec;
  auto o = segment::open(name, object_kind::raw, ec);
  CHECK(ec == errc::corrupted);
}

TEST_CASE("a segment file with a garbage magic or another version is incompatible",
          "[segment][damage]") {
  scoped_name name;
  segment s(shmio::create_only, name, object_kind::raw, 256);
  SECTION("garbage magic") {
    with_raw_fd(s.path(), [](int fd) { REQUIRE(::pwrite(fd, "NOTSHMIO", 8, 0) == 8); });
  }
  SECTION("a later layout version") {
    const std::uint32_t version = shmio::detail::layout::layout_version + 1;
    with_raw_fd(s.path(), [&](int fd) { REQUIRE(::pwrite(fd, &version, 4, 8) == 4); });
  }
  SECTION("layout version 2, whose ring node words held the turn itself") {
    const std::uint32_t version = 2;
    with_raw_fd(s.path(), [&](int fd) { REQUIRE(::pwrite(fd, &version, 4, 8) == 4); });
  }
  SECTION("layout version 1, whose blocking waiters took no wait slots") {
    const std::uint32_t version = 1;
    with_raw_fd(s.path(), [&](int fd) { REQUIRE(::pwrite(fd, &version, 4, 8) == 4); });
  }
  std::error_code ec;
  auto o = segment::open(name, object_kind::raw, ec);
  CHECK(ec == errc::incompatible);
  CHECK_FALSE(o.is_open());
  auto oc = segment::open_or_create(name, object_kind::raw, 256, {}, ec);
  CHECK(ec == errc::incompatible);
  CHECK(exists(s.path()));
}

// ---- creation --------------------------------------------------------------------------------

TEST_CASE("a create larger than /dev/shm fails at once with no_space and leaves nothing",
          "[segment]") {
  struct statvfs vfs {};
  REQUIRE(::statvfs("/dev/shm", &vfs) == 0);
  if (vfs.f_blocks == 0) {
    WARN("/dev/shm has no size limit; not checked");
    return;
  }
  // Past the file system's whole size (so also past its free space): tmpfs refuses the
  // reservation before allocating a page.
  const std::uint64_t size = std::uint64_t{vfs.f_blocks} * vfs.f_frsize + (std::uint64_t{1} << 30);
  scoped_name name;
  const auto start = std::chrono::steady_clock::now();
  std::error_code ec;
  bool init_ran = false;
  auto s = segment::create(
      name, object_kind::raw, size, [&](std::span<std::byte>) { init_ran = true; }, ec);
  CHECK(ec == errc::no_space);
  CHECK(ec == std::errc::no_space_on_device);
  CHECK_FALSE(s.is_open());
  CHECK_FALSE(init_ran);
  CHECK(std::chrono::steady_clock::now() - start < 2s);
  CHECK_FALSE(exists(path_of(name)));
  CHECK(temp_files_of(::getpid()).empty());

  CHECK_THROWS_MATCHES(segment(shmio::create_only, name, object_kind::raw, size), shmio::error,
                       Catch::Predicate<shmio::error>(
                           [](const shmio::error& e) { return e.code() == errc::no_space; }));
  CHECK(temp_files_of(::getpid()).empty());
}

TEST_CASE("the initializer runs before the segment is visible to openers", "[segment][process]") {
  scoped_name name;
  const std::string path = path_of(name);
  signal_pipe in_init, release_init, created, finish;
  child creator([&] {
    std::error_code ec;
    auto s = segment::create(
        name, object_kind::raw, 4096,
        [&](std::span<std::byte> body) {
          fill_pattern(body.first(2048), 17);
          in_init.notify();
          release_init.wait();
          fill_pattern(body, 17);
        },
        ec);
    if (ec) return 1;
    created.notify();
    finish.wait();
    return 0;
  });
  REQUIRE(in_init.wait() == 1);
  // The creator is inside its initializer: its segment exists only under its private name.
  std::error_code ec;
  auto early = segment::open(name, object_kind::raw, ec);
  CHECK(ec == errc::not_found);
  CHECK_FALSE(early.is_open());
  CHECK_FALSE(exists(path));
  CHECK(temp_files_of(creator.pid()).size() == 1);

  release_init.notify();
  REQUIRE(created.wait() == 1);
  auto late = segment::open(name, object_kind::raw, ec);
  REQUIRE_FALSE(ec);
  CHECK(has_pattern(late.body(), 17));
  CHECK(temp_files_of(creator.pid()).empty());
  finish.notify();
  CHECK(creator.wait() == 0);
}

TEST_CASE("an initializer that throws leaves no file and no temp file", "[segment]") {
  scoped_name name;
  const std::string path = path_of(name);
  const int fds_before = open_fd_count();
  const int maps_before = shm_mapping_count();
  auto boom = [](std::span<std::byte>) { throw std::runtime_error("init failed"); };
  std::error_code ec;
  CHECK_THROWS_AS(segment::create(name, object_kind::raw, 4096, boom, ec), std::runtime_error);
  CHECK_FALSE(exists(path));
  CHECK_THROWS_AS(segment(shmio::create_only, name, object_kind::raw, 4096, boom),
                  std::runtime_error);
  CHECK_FALSE(exists(path));
  CHECK_THROWS_AS(segment::open_or_create(name, object_kind::raw, 4096, boom, ec),
                  std::runtime_error);
  CHECK_FALSE(exists(path));
  CHECK(temp_files_of(::getpid()).empty());
  CHECK(open_fd_count() == fds_before);
  CHECK(shm_mapping_count() == maps_before);
  // The name is free for a later create.
  segment s(shmio::create_only, name, object_kind::raw, 64);
  CHECK(s.created());
}

TEST_CASE("open_or_create racing from 4 processes ends with one creator and one body",
          "[segment][process]") {
  scoped_name name;
  constexpr int racers = 4;
  signal_pipe go, report, release;
  std::vector<std::unique_ptr<child>> children;
  for (int i = 0; i < racers; ++i) {
    children.push_back(std::make_unique<child>([&, i] {
      if (go.wait() != 1) return 2;
      std::error_code ec;
      auto s = segment::open_or_create(
          name, object_kind::raw, 1024,
          [i](std::span<std::byte> body) {
            fill_pattern(body, 20 + i);
            body[0] = static_cast<std::byte>(i);
          },
          ec);
      if (ec) {
        report.notify(0x7f);
        return 1;
      }
      const int creator = static_cast<int>(s.body()[0]);
      bool consistent = s.body().size() == 1024;
      for (std::size_t k = 1; k < s.body().size(); ++k)
        consistent = consistent && s.body()[k] == pattern_byte(k, 20 + creator);
      report.notify(
          static_cast<char>((s.created() ? 0x80 : 0) | (consistent ? 0x40 : 0) | creator));
      release.wait();  // everyone holds the segment until all have reported
      return 0;
    }));
  }
  for (int i = 0; i < racers; ++i)
    go.notify();
  int creators = 0;
  std::vector<int> seen;
  for (int i = 0; i < racers; ++i) {
    const int r = report.wait();
    REQUIRE(r >= 0);
    REQUIRE(r != 0x7f);
    CHECK((r & 0x40) != 0);  // the body is whole: the creator's initializer finished
    if (r & 0x80) ++creators;
    seen.push_back(r & 0x3f);
  }
  for (int i = 0; i < racers; ++i)
    release.notify();
  for (auto& c : children)
    CHECK(c->wait() == 0);
  CHECK(creators == 1);
  for (int s : seen)
    CHECK(s == seen.front());
  CHECK_FALSE(exists(path_of(name)));
}

TEST_CASE("a child forked without exec that closes an inherited segment leaves it to the parent",
          "[segment][process]") {
  scoped_name name;
  const std::string path = path_of(name);
  segment s(shmio::create_only, name, object_kind::raw, 64);
  // The child shares the parent's open file and so its holder lock: were it to test that lock
  // it would find itself the last user and remove the parent's file.
  child c([&] {
    s.close();
    return exists(path) ? 0 : 1;
  });
  CHECK(c.wait() == 0);
  REQUIRE(exists(path));
  {
    segment other(shmio::open_only, name, object_kind::raw);  // not taken for stale
    CHECK(other.body().size() == 64);
  }
  CHECK(exists(path));
  s.close();
  CHECK_FALSE(exists(path));
}

TEST_CASE("1000 create and close cycles leave no file and leak no descriptor or mapping",
          "[segment]") {
  scoped_name name;
  const std::string path = path_of(name);
  const int fds_before = open_fd_count();
  const int maps_before = shm_mapping_count();
  int failures = 0;
  for (int i = 0; i < 1000; ++i) {
    std::error_code ec;
    auto s = segment::create(name, object_kind::raw, 4096, {}, ec);
    if (ec || !s.created()) ++failures;
    s.close();
  }
  CHECK(failures == 0);
  CHECK_FALSE(exists(path));
  CHECK(open_fd_count() == fds_before);
  CHECK(shm_mapping_count() == maps_before);
  CHECK(temp_files_of(::getpid()).empty());
}
