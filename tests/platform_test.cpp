// The platform layer's own promises (include/shmio/detail/platform.hpp) that the objects above
// it rest on without a way to see them: mapping pages ahead of their first touch.
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "shmio/detail/platform.hpp"

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

}  // namespace

TEST_CASE("populated pages take no page fault at their first touch, and only they are mapped",
          "[platform]") {
  scratch_mapping m(8, 8);
  {
    platform::page_populator pages;
    pages.add(m.base + 1 * page + 100, 1);       // page 1
    pages.add(m.base + 2 * page - 1, page + 2);  // pages 1 to 3: joins the run
    pages.add(m.base + 6 * page + page - 1, 1);  // page 6: a run of its own
    pages.add(m.base + 7 * page, 0);             // nothing
  }                                              // flushed here
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
  scratch_mapping m(2, 6);  // pages 2 to 5 are beyond the file's end
  {
    platform::page_populator pages;
    pages.add(m.base, 6 * page);
  }
  const long before = faults_so_far();
  touch(m.base, {0, 1});
  CHECK(faults_so_far() - before == 0);
}
