// The platform layer's own promises (include/shmio/detail/platform.hpp) that the objects above
// it rest on without a way to see them: mapping pages ahead of their first touch, and rings
// that reach their doorbell whatever other doorbells have left unread.
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <system_error>
#include <vector>

#include "shmio/detail/platform.hpp"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older C library headers lack the name
#endif

namespace platform = shmio::detail::platform;

namespace {

const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));

// Page faults this thread has taken (those of a populate call among them).
long faults_so_far() {
  rusage usage{};
  REQUIRE(::getrusage(RUSAGE_THREAD, &usage) == 0);
  return usage.ru_minflt;
}

// A write to each listed page. Not instrumented: a sanitizer's shadow memory would take page
// faults of its own.
__attribute__((no_sanitize("address", "thread", "undefined"), noinline)) void touch(
    std::byte* base, std::initializer_list<std::size_t> pages) {
  for (std::size_t p : pages)
    *static_cast<volatile std::byte*>(base + p * page) = std::byte{1};
}

// A shared mapping of `mapped` pages of an anonymous file of `file` pages, none touched yet.
struct scratch_mapping {
  scratch_mapping(std::size_t file, std::size_t mapped) : size(mapped * page) {
    fd = ::memfd_create("shmio-test.populate", MFD_CLOEXEC);
    REQUIRE(fd >= 0);
    REQUIRE(::ftruncate(fd, static_cast<off_t>(file * page)) == 0);
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    REQUIRE(p != MAP_FAILED);
    base = static_cast<std::byte*>(p);
  }
  ~scratch_mapping() {
    ::munmap(base, size);
    ::close(fd);
  }
  scratch_mapping(const scratch_mapping&) = delete;
  scratch_mapping& operator=(const scratch_mapping&) = delete;

  int fd = -1;
  std::byte* base = nullptr;
  std::size_t size = 0;
};

// Runs what a measured window runs, once before it: a first run may fault in the page of code
// it sits on (or a page of Catch's own), which would count as the window's fault.
void warm_up() {
  scratch_mapping w(1, 1);
  touch(w.base, {0});
  static_cast<void>(faults_so_far());
}

// Linux 5.14 and later: elsewhere a populate maps nothing, as documented, and these tests
// have nothing to look at.
bool kernel_populates() {
  scratch_mapping m(1, 1);
  return ::madvise(m.base, page, MADV_POPULATE_WRITE) == 0;
}

}  // namespace

TEST_CASE("populated pages take no page fault at their first touch, and only they are mapped",
          "[platform]") {
  if (!kernel_populates()) {
    WARN("this kernel has no MADV_POPULATE_WRITE (Linux 5.14)");
    return;
  }
  scratch_mapping m(8, 8);
  {
    platform::page_populator pages;
    pages.add(m.base + 1 * page + 100, 1);       // page 1
    pages.add(m.base + 2 * page - 1, page + 2);  // pages 1 to 3: joins the run
    pages.add(m.base + 6 * page + page - 1, 1);  // page 6: a run of its own
    pages.add(m.base + 7 * page, 0);             // nothing
  }                                              // flushed here
  warm_up();
  const long before = faults_so_far();
  touch(m.base, {1, 2, 3, 6});
  CHECK(faults_so_far() - before == 0);
  // Pages 0, 4, 5 and 7 were left alone: their first touches fault, as the pages above did not.
  const long before_rest = faults_so_far();
  touch(m.base, {0, 4, 5, 7});
  CHECK(faults_so_far() - before_rest == 4);
}

TEST_CASE("populating pages beyond the file's end maps those before it and raises no SIGBUS",
          "[platform]") {
  if (!kernel_populates()) {
    WARN("this kernel has no MADV_POPULATE_WRITE (Linux 5.14)");
    return;
  }
  // The populate stops at the file's end: the pages before it are mapped, and no SIGBUS is
  // raised (the call reports an error). On a loaded machine one touch in about ten may still
  // fault (the kernel's populate is best effort); a populator that never mapped those pages
  // would fault in every one of three tries.
  long least = 2;
  for (int attempt = 0; attempt < 3 && least != 0; ++attempt) {
    scratch_mapping m(2, 6);  // pages 2 to 5 are beyond the file's end
    {
      platform::page_populator pages;
      pages.add(m.base, 6 * page);
    }
    warm_up();
    const long before = faults_so_far();
    touch(m.base, {0, 1});
    least = std::min(least, faults_so_far() - before);
  }
  CHECK(least == 0);
}

TEST_CASE("a process id past INT_MAX, as a damaged header may hold, names no live process",
          "[platform]") {
  // As a pid_t it is negative, and kill() would ask about a process group, or (-1) about every
  // process this one may signal.
  CHECK(platform::process_alive(static_cast<std::uint32_t>(::getpid())));
  CHECK_FALSE(platform::process_alive(0));
  CHECK_FALSE(platform::process_alive(0xFFFF'FFFFu));
  CHECK_FALSE(platform::process_alive(static_cast<std::uint32_t>(-::getpgrp())));  // our group
}

TEST_CASE(
    "a ring reaches its doorbell after other doorbells left more rings unread than a "
    "socket's send buffer holds",
    "[platform][doorbell]") {
  // A datagram is charged to the socket that sent it until it is read: a process's rings to
  // doorbells that do not read them could spend its sender's whole budget. Ring enough of
  // them, each until its own queue is full, to spend it several times over (a 1-byte datagram
  // takes at least 256 bytes of it).
  int send_buffer = 0;
  {
    const int probe = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    REQUIRE(probe >= 0);
    socklen_t size = sizeof send_buffer;
    REQUIRE(::getsockopt(probe, SOL_SOCKET, SO_SNDBUF, &send_buffer, &size) == 0);
    ::close(probe);
  }
  const std::size_t rings_wanted = static_cast<std::size_t>(send_buffer) / 256;
  std::vector<platform::unique_fd> idle;
  std::size_t rings = 0, full_queues = 0;
  while (rings < rings_wanted) {
    std::error_code ec;
    std::uint64_t id = 0;
    idle.push_back(platform::open_doorbell(id, ec));
    REQUIRE_FALSE(ec);
    // A new doorbell's first ring is delivered, whatever came before; then rings until its
    // queue is full (net.unix.max_dgram_qlen).
    REQUIRE(platform::ring_doorbell(id) == platform::ring_result::rung);
    ++rings;
    for (int k = 0; k < 1000 && platform::ring_doorbell(id) == platform::ring_result::rung; ++k)
      ++rings;
    CHECK(platform::wait_readable(idle.back().get(), {}));
    ++full_queues;
  }
  CAPTURE(send_buffer, rings, full_queues);
  std::error_code ec;
  std::uint64_t id = 0;
  const platform::unique_fd fresh = platform::open_doorbell(id, ec);
  REQUIRE_FALSE(ec);
  CHECK(platform::ring_doorbell(id) == platform::ring_result::rung);
  CHECK(platform::drain_doorbell(fresh.get()) == 1);
  // A doorbell whose own queue is full still says so.
  CHECK(platform::ring_doorbell(id) == platform::ring_result::rung);
  while (platform::ring_doorbell(id) == platform::ring_result::rung) {
  }
  CHECK(platform::ring_doorbell(id) == platform::ring_result::already_pending);
  CHECK(platform::drain_doorbell(fresh.get()) > 0);
}
