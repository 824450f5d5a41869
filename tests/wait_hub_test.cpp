// The wait hub (objects past a queue's slots park through a thread of the process) on a
// wake-one queue: a ring the hub took in for its group is one message, and the next message
// goes to another waiter until a member has looked. And a forked child's copy of a parked wait,
// by slot or through the hub, which must leave the parent's arming alone.

#include <algorithm>
#include <asio/io_context.hpp>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "shmio/circular_buffer.hpp"
#include "shmio/detail/layout.hpp"
#include "shmio/detail/wait_hub.hpp"
#include "shmio/detail/wait_queue.hpp"
#include "shmio/wait_strategy.hpp"
#include "support.hpp"

namespace {

using namespace std::chrono_literals;
using shmio::circular_buffer;
using shmio::test::eventually;
using shmio::test::scoped_name;
namespace layout = shmio::detail::layout;

// The ring's readers' wait queue, seen through a mapping of its own.
class readers_queue {
 public:
  explicit readers_queue(std::string_view name) : segment_(name) {}
  layout::wait_queue& get() const {
    constexpr std::size_t segment_header = sizeof(layout::segment_header);
    return segment_.at<layout::ring_state>(segment_header).readers;
  }
  bool held(std::size_t slot) const { return get().slots[slot].doorbell.load() != 0; }
  bool armed(std::size_t slot) const { return get().slots[slot].armed.load() != 0; }

 private:
  shmio::test::raw_segment segment_;
};

// A blocking read on its own thread: the queue's ordinary waiter beside the hub's group.
class blocking_reader {
 public:
  explicit blocking_reader(circular_buffer& ring)
      : thread_([this, &ring] {
          std::string buf(16, '\0');
          const std::size_t n = ring.read(asio::buffer(buf), 30s);  // far past the checks' bound
          got_ = buf.substr(0, n);
          done_ = true;  // seq_cst: publishes got_
        }) {}
  ~blocking_reader() { join(); }
  void join() {
    if (thread_.joinable()) thread_.join();
  }
  bool done() const { return done_; }
  std::string got() const { return got_; }

 private:
  std::string got_;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

// One async read whose completions are counted: the message it got, and how many times its
// handler ran (once, and without an error, where the tests expect it).
struct counted_read {
  std::string buf = std::string(16, '\0');
  std::size_t got = 0;
  int calls = 0;
  void start(circular_buffer& ring) {
    ring.async_read(asio::buffer(buf), [this](std::error_code ec, std::size_t n) {
      CHECK_FALSE(ec);
      got = n;
      ++calls;
    });
  }
  std::string message() const { return buf.substr(0, got); }
};

}  // namespace

TEST_CASE("a ring the hub took in for its group is one message: the next goes to another waiter",
          "[wait][hub]") {
  asio::io_context io;
  scoped_name name("ring");
  // 32 handles hold the readers' 32 slots (each takes one when it opens); they never read.
  std::vector<std::unique_ptr<circular_buffer>> holders;
  holders.push_back(
      std::make_unique<circular_buffer>(io.get_executor(), shmio::create_only, name, 64, 16));
  while (holders.size() < layout::wait_slot_count)
    holders.push_back(std::make_unique<circular_buffer>(io.get_executor(), shmio::open_only, name));
  readers_queue q(name);
  for (std::size_t i = 0; i < layout::wait_slot_count; ++i)
    REQUIRE(q.held(i));
  // Opened with every slot held: none of these has a slot of its own.
  circular_buffer member(io.get_executor(), shmio::open_only, name,
                         shmio::wait_strategy::park_only());
  circular_buffer writer(io.get_executor(), shmio::open_only, name);
  circular_buffer other(io.get_executor(), shmio::open_only, name);
  // One slot free when the member parks: the hub's group takes it. Another for the blocking
  // reader's sleeper.
  constexpr std::size_t group_slot = 5, sleeper_slot = 9;
  holders[group_slot].reset();
  counted_read member_read;
  member_read.start(member);
  io.poll();  // park_only: parked inside the initiation, through the hub
  REQUIRE(member_read.calls == 0);
  REQUIRE(eventually([&] { return q.held(group_slot) && q.armed(group_slot); }));
  holders[sleeper_slot].reset();

  // A wake-one write rings one armed slot, starting at a slot that rotates with each write:
  // until it rings the group's, the blocking reader takes the message, and another starts.
  // (The group's slot tells which: a woken blocking reader arms its own again before it looks,
  // while the group's stays claimed until the member, whose io does not run, arms.)
  bool rang_group = false;
  std::unique_ptr<blocking_reader> sleeper;
  std::uint64_t passes = 0;
  for (int attempt = 0; attempt < 64 && !rang_group; ++attempt) {
    // The last sleeper may have found its message before it slept: the ring it was sent then
    // goes on as it leaves, maybe to the group, which the hub took in and left down. Its member
    // finds nothing and arms again once io runs; until then the group's slot would pass for
    // rung by the next write whichever waiter that write rang.
    REQUIRE(shmio::test::run_until(io, [&] { return q.armed(group_slot); }));
    REQUIRE(member_read.calls == 0);
    sleeper = std::make_unique<blocking_reader>(other);
    REQUIRE(eventually([&] { return q.armed(sleeper_slot); }));  // parked, past its spin
    // Taken before the write, with the hub idle (its pass for the member's arming made): the
    // next pass it counts is the one the ring starts. (Taken after, the ring's pass may be
    // counted already.)
    REQUIRE(eventually([] { return shmio::detail::wait_hub::settled(); }));
    passes = shmio::detail::wait_hub::passes();
    REQUIRE(writer.write(asio::buffer("one", 3), 1s) == 3);
    rang_group = !q.armed(group_slot);
    if (!rang_group) {
      REQUIRE(eventually([&] { return sleeper->done(); }));
      REQUIRE(sleeper->got() == "one");
      sleeper.reset();
    }
  }
  REQUIRE(rang_group);
  CHECK(member_read.calls == 0);  // its re-check waits for io to run
  // Once the hub thread has taken the ring in for the member, which has not looked yet: were
  // the group armed again now, a second write could ring it as well, and the member's one look
  // would leave one of the two messages behind with the blocking reader asleep.
  REQUIRE(eventually([&] { return shmio::detail::wait_hub::passes() > passes; }));
  REQUIRE(writer.write(asio::buffer("two", 3), 1s) == 3);
  CHECK(eventually([&] { return sleeper->done(); }));
  REQUIRE(shmio::test::run_until(io, [&] { return member_read.calls == 1; }));
  sleeper->join();  // by its own timeout at worst
  std::vector<std::string> got{member_read.message(), sleeper->got()};
  std::sort(got.begin(), got.end());
  CHECK(got == std::vector<std::string>{"one", "two"});
}

TEST_CASE(
    "a child forked without exec that closes an inherited handle leaves the parent's parked "
    "wait armed",
    "[wait][hub][process]") {
  const bool through_hub = GENERATE(false, true);
  // Asio asks a child that goes on using an inherited io_context to call notify_fork; one that
  // only closes what it inherited may well not.
  const bool notify_fork = GENERATE(false, true);
  CAPTURE(through_hub, notify_fork);
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer creator(io.get_executor(), shmio::create_only, name, 8, 16);
  // Through the hub: every readers' slot held when the reader opens, one freed for the group.
  std::vector<std::unique_ptr<circular_buffer>> holders;
  if (through_hub)
    while (holders.size() + 1 < layout::wait_slot_count)
      holders.push_back(
          std::make_unique<circular_buffer>(io.get_executor(), shmio::open_only, name));
  circular_buffer writer(io.get_executor(), shmio::open_only, name);
  circular_buffer reader(io.get_executor(), shmio::open_only, name,
                         shmio::wait_strategy::park_only());
  readers_queue q(name);
  if (through_hub) {
    for (std::size_t i = 0; i < layout::wait_slot_count; ++i)
      REQUIRE(q.held(i));
    holders[3].reset();  // its slot goes to the hub's group at the reader's park
  }
  counted_read read;
  read.start(reader);
  io.poll();  // park_only: parked inside the initiation
  REQUIRE(read.calls == 0);
  // Nothing else waits: the one armed slot is the reader's (or its group's).
  std::size_t slot = layout::wait_slot_count;
  REQUIRE(eventually([&] {
    for (std::size_t i = 0; i < layout::wait_slot_count; ++i)
      if (q.armed(i)) slot = i;
    return slot < layout::wait_slot_count;
  }));
  REQUIRE(q.held(slot));

  // The child's copy names the parent's slot (or group) by the same doorbell: closing it there
  // used to give the slot back, and the parent's parked read then heard no write. Without
  // notify_fork, closing the doorbell also took it out of the epoll set the two share.
  shmio::test::child c([&] {
    if (notify_fork) io.notify_fork(asio::io_context::fork_child);
    reader.close();
    return q.held(slot) && q.armed(slot) ? 0 : 1;
  });
  REQUIRE(c.wait() == 0);
  CHECK(q.held(slot));
  CHECK(q.armed(slot));
  REQUIRE(writer.write(asio::buffer("after", 5), 1s) == 5);
  REQUIRE(shmio::test::run_until(io, [&] { return read.calls == 1; }));
  CHECK(read.message() == "after");
}

TEST_CASE("a ring found while a member's earlier wake is still being called wakes it again",
          "[wait][hub]") {
  // The hub calls wakes with its mutex dropped. A member whose wake is being called has had
  // its re-check posted already (here: the call is held inside, as a slow post would be): a
  // second ring, found meanwhile by another member's arm(), must wake it once more, or its
  // re-check, made before that ring, is its last look (a broadcast's reader would hang).
  auto q = std::make_unique<layout::wait_queue>();
  std::atomic<int> m_calls{0};
  std::atomic<bool> m_entered{false};
  std::atomic<bool> release{false};
  auto m = shmio::detail::wait_hub::join(*q, [&] {
    if (m_calls.fetch_add(1) == 0) {
      m_entered = true;
      while (!release)
        std::this_thread::yield();
    }
  });
  auto b = shmio::detail::wait_hub::join(*q, [] {});
  REQUIRE(m);
  REQUIRE(b);
  m->arm();
  b->arm();
  shmio::detail::notify_all(*q);  // the group's ring: the hub thread wakes both members
  const bool entered = eventually([&] { return m_entered.load(); });
  if (!entered) release = true;
  REQUIRE(entered);               // the hub thread is inside M's first wake
  m->arm();                       // M's re-check (its look comes before the next ring)
  shmio::detail::notify_all(*q);  // a second ring, which the busy hub thread does not see
  b->arm();                       // B finds it and wakes the others
  CHECK(m_calls.load() == 2);
  release = true;
  m->withdraw();
  b->withdraw();
  m.reset();  // waits for any wake of theirs still being called
  b.reset();
}
