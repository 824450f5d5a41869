// The yield gauge: which sched_yield calls gave the CPU away. With a fixed one-microsecond
// threshold every yield counted as crowded on a machine whose system calls take longer than
// that, and an async waiter alone on its CPU then yielded at every trip without looking.

#include <catch2/catch.hpp>
#include <chrono>

#include "shmio/detail/spin.hpp"

namespace {

using namespace std::chrono_literals;
using shmio::detail::yield_gauge;

TEST_CASE("a yield is crowded only if it took well over the fastest yield seen", "[spin]") {
  yield_gauge g;
  SECTION("where a system call alone takes over a microsecond") {
    CHECK_FALSE(g.crowded(1200ns));  // the first yield is the bare cost so far
    CHECK_FALSE(g.crowded(1500ns));
    CHECK_FALSE(g.crowded(2399ns));
    CHECK(g.crowded(2400ns));
    CHECK(g.crowded(20us));
  }
  SECTION("where a system call is cheap, the one-microsecond floor decides") {
    CHECK_FALSE(g.crowded(200ns));
    CHECK_FALSE(g.crowded(999ns));
    CHECK(g.crowded(1us));
  }
  SECTION("a slow first yield sets no lasting bar: the next fast one replaces it") {
    CHECK_FALSE(g.crowded(30us));
    CHECK_FALSE(g.crowded(1200ns));
    CHECK(g.crowded(30us));
  }
}

}  // namespace
