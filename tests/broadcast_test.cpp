// broadcast_buffer: every subscriber sees every message; join and leave at run time; reliable
// (eviction of dead and stalled subscribers) and lossy (lapping, torn in-place reads) delivery;
// sync, in-place and async operations; hostile shared memory.
#include <array>
#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/io_context.hpp>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "shmio/broadcast_buffer.hpp"
#include "shmio/detail/layout.hpp"
#include "support.hpp"

namespace {

using namespace std::chrono_literals;
using shmio::broadcast_buffer;
using shmio::broadcast_mode;
using shmio::broadcast_options;
using shmio::broadcast_role;
using shmio::errc;
using shmio::test::child;
using shmio::test::closed_handle_completions;
using shmio::test::default_bound;
using shmio::test::eventually;
using shmio::test::peer_path;
using shmio::test::run_until;
using shmio::test::scoped_name;
namespace layout = shmio::detail::layout;

broadcast_options options(broadcast_mode mode, std::size_t capacity,
                          std::chrono::milliseconds lease = 1000ms) {
  broadcast_options o;
  o.mode = mode;
  o.capacity = capacity;
  o.message_size = 64;
  o.max_subscribers = 64;
  o.lease = lease;
  return o;
}

std::string numbered(unsigned long n, const std::string& tag = "m") {
  return tag + std::to_string(n);
}

// Reads one message as text; "" with `ec` set on failure.
std::string read_text(broadcast_buffer& sub, std::error_code& ec,
                      std::chrono::milliseconds timeout = default_bound) {
  char buf[256];
  const std::size_t n = sub.read(asio::buffer(buf), timeout, ec);
  return ec ? std::string() : std::string(buf, n);
}

void write_text(broadcast_buffer& pub, const std::string& m,
                std::chrono::milliseconds timeout = default_bound) {
  std::error_code ec;
  pub.write(asio::buffer(m), timeout, ec);
  REQUIRE_FALSE(ec);
}

layout::broadcast_state& state_of(shmio::segment& raw) {
  return *reinterpret_cast<layout::broadcast_state*>(raw.body().data());
}

// A reliable broadcast of 2 slots, both holding messages ("m0", "m1") its one subscriber has
// not read: the publisher's next write waits.
struct full_reliable {
  broadcast_buffer pub;
  broadcast_buffer sub;
  full_reliable(asio::io_context& io, std::string_view name)
      : pub(io.get_executor(), shmio::create_only, name, broadcast_role::publisher,
            options(broadcast_mode::reliable, 2)),
        sub(io.get_executor(), shmio::open_only, name, broadcast_role::subscriber) {
    write_text(pub, numbered(0), 0ms);
    write_text(pub, numbered(1), 0ms);
  }
};

}  // namespace

// ---- delivery across processes ------------------------------------------------------------

TEST_CASE("every subscriber sees every message, in order, across processes",
          "[broadcast][process]") {
  scoped_name name("bc");
  asio::io_context io;
  const unsigned long count = 3000;
  broadcast_buffer pub(io.get_executor(), shmio::create_only, name, broadcast_role::publisher,
                       options(broadcast_mode::reliable, 8));
  std::vector<std::unique_ptr<child>> subs;
  for (const char* how : {"sync", "async", "in-place"})
    subs.push_back(std::make_unique<child>(std::vector<std::string>{
        peer_path(), "broadcast-subscribe", name.str(), "0", std::to_string(count), how}));
  REQUIRE(eventually([&] { return pub.subscriber_count() == 3; }));
  for (unsigned long i = 0; i < count; ++i)
    write_text(pub, numbered(i));
  for (auto& s : subs)
    CHECK(s->wait() == 0);
}

TEST_CASE("messages of several writer processes reach a subscriber in one order",
          "[broadcast][process]") {
  scoped_name name("bc");
  asio::io_context io;
  const unsigned long per_writer = 1000;
  broadcast_buffer sub(io.get_executor(), shmio::create_only, name, broadcast_role::subscriber,
                       options(broadcast_mode::reliable, 4));
  child a({peer_path(), "broadcast-publish", name.str(), "0", std::to_string(per_writer), "a"});
  child b({peer_path(), "broadcast-publish", name.str(), "0", std::to_string(per_writer), "b"});
  unsigned long next_a = 0, next_b = 0;
  for (unsigned long i = 0; i < 2 * per_writer; ++i) {
    std::error_code ec;
    const std::string m = read_text(sub, ec);
    REQUIRE_FALSE(ec);
    unsigned long& next = m[0] == 'a' ? next_a : next_b;
    REQUIRE(m.substr(1) == std::to_string(next));  // each writer's messages stay in order
    ++next;
  }
  CHECK(a.wait() == 0);
  CHECK(b.wait() == 0);
}

TEST_CASE("subscribers join and leave at run time", "[broadcast][process]") {
  scoped_name name("bc");
  asio::io_context io;
  broadcast_buffer pub(io.get_executor(), shmio::create_only, name, broadcast_role::publisher,
                       options(broadcast_mode::reliable, 4));
  CHECK(pub.subscriber_count() == 0);
  // With nobody subscribed, writers never wait.
  for (unsigned long i = 0; i < 10; ++i)
    write_text(pub, numbered(i), 0ms);

  broadcast_buffer early(io.get_executor(), shmio::open_only, name, broadcast_role::subscriber);
  write_text(pub, numbered(10));
  // A subscriber in another process joins now: it sees what is published from now on.
  child late({peer_path(), "broadcast-subscribe", name.str(), "11", "3", "sync"});
  REQUIRE(eventually([&] { return pub.subscriber_count() == 2; }));
  for (unsigned long i = 11; i < 14; ++i)
    write_text(pub, numbered(i));
  CHECK(late.wait() == 0);  // read its three and left
  CHECK(pub.subscriber_count() == 1);
  for (unsigned long i = 10; i < 14; ++i) {
    std::error_code ec;
    CHECK(read_text(early, ec) == numbered(i));
  }
  // Only the subscriber still there holds writers back: four fit, the fifth must wait.
  for (unsigned long i = 14; i < 18; ++i)
    write_text(pub, numbered(i), 0ms);
  std::error_code ec;
  CHECK(pub.write(asio::buffer(std::string("x")), 0ms, ec) == 0);
  CHECK(ec == errc::timed_out);
  early.close();  // leaving frees the writers at once
  CHECK(pub.subscriber_count() == 0);
  write_text(pub, numbered(18), 0ms);
}

// ---- lossy -----------------------------------------------------------------------------------

TEST_CASE("a lapped lossy subscriber is told how many messages it lost, then resyncs",
          "[broadcast][process][lossy]") {
  scoped_name name("bc");
  asio::io_context io;
  broadcast_buffer sub(io.get_executor(), shmio::create_only, name, broadcast_role::subscriber,
                       options(broadcast_mode::lossy, 8));
  // 13 messages into 8 slots: the writer never waits, and m0..m4 are overwritten.
  child writer({peer_path(), "broadcast-publish", name.str(), "0", "13"});
  REQUIRE(writer.wait() == 0);
  char buf[64];
  std::error_code ec;
  const std::size_t lost = sub.read(asio::buffer(buf), default_bound, ec);
  CHECK(ec == errc::messages_lost);
  CHECK(lost == 5);
  CHECK(sub.lost() == 5);
  for (unsigned long i = 5; i < 13; ++i) {
    CHECK(read_text(sub, ec) == numbered(i));
    CHECK_FALSE(ec);
  }
  CHECK(sub.read(asio::buffer(buf), 0ms, ec) == 0);
  CHECK(ec == errc::timed_out);
  // The throwing form throws for a loss too.
  child again({peer_path(), "broadcast-publish", name.str(), "13", "9"});
  REQUIRE(again.wait() == 0);
  CHECK_THROWS_AS(sub.read(asio::buffer(buf), default_bound), shmio::error);
}

TEST_CASE("a lapped lossy subscriber resyncs past a slot being written at that moment",
          "[broadcast][lossy]") {
  // The oldest message the ring holds is in the slot the next write takes: if that write has
  // begun, the subscriber resyncs to the message after it, so that its next read returns a
  // message rather than a second loss.
  scoped_name name("bc");
  asio::io_context io;
  broadcast_buffer sub(io.get_executor(), shmio::create_only, name, broadcast_role::subscriber,
                       options(broadcast_mode::lossy, 2));
  broadcast_buffer pub(io.get_executor(), shmio::open_only, name, broadcast_role::publisher);
  for (unsigned long i = 0; i < 4; ++i)
    write_text(pub, numbered(i));  // m0 and m1 overwritten; m2 and m3 held
  std::atomic<bool> filling{false}, finish{false};
  std::thread writer([&] {
    std::error_code ec;
    pub.write_in_place(
        [&](std::span<std::byte> slot) {
          filling = true;
          while (!finish)
            std::this_thread::yield();  // holds position 4, m2's slot, as written
          std::memcpy(slot.data(), "m4", 2);
          return std::size_t{2};
        },
        default_bound, ec);
  });
  struct finisher {
    std::atomic<bool>& finish;
    std::thread& t;
    ~finisher() {
      finish = true;
      t.join();
    }
  } finish_writer{finish, writer};
  REQUIRE(eventually([&] { return filling.load(); }));
  char buf[64];
  std::error_code ec;
  CHECK(sub.read(asio::buffer(buf), 0ms, ec) == 3);  // m0, m1, and m2 going
  CHECK(ec == errc::messages_lost);
  CHECK(read_text(sub, ec, 0ms) == "m3");
  CHECK_FALSE(ec);
  finish = true;
  CHECK(read_text(sub, ec) == "m4");
  CHECK_FALSE(ec);
}

TEST_CASE("an in-place read that a writer overtook is reported, never returned",
          "[broadcast][process][lossy]") {
  scoped_name name("bc");
  asio::io_context io;
  broadcast_buffer sub(io.get_executor(), shmio::create_only, name, broadcast_role::subscriber,
                       options(broadcast_mode::lossy, 4));
  {
    child first({peer_path(), "broadcast-publish", name.str(), "0", "1"});
    REQUIRE(first.wait() == 0);
  }
  std::string seen_before, seen_after;
  std::error_code ec;
  const std::size_t n = sub.read_in_place(
      [&](std::span<const std::byte> m) {
        seen_before.assign(reinterpret_cast<const char*>(m.data()), m.size());
        // While we look at m0, another process writes four more: the fourth reuses m0's slot.
        child lapper({peer_path(), "broadcast-publish", name.str(), "1", "4", "x"});
        REQUIRE(lapper.wait() == 0);
        seen_after.assign(reinterpret_cast<const char*>(m.data()), m.size());
      },
      default_bound, ec);
  CHECK(seen_before == "m0");
  CHECK(seen_after != "m0");         // the bytes under the callback did change...
  CHECK(ec == errc::messages_lost);  // ...and the read says so instead of returning them
  CHECK(n >= 1);
  // Resynced: the messages still held come next, intact.
  const std::string next = read_text(sub, ec);
  CHECK_FALSE(ec);
  CHECK((next == "x1" || next == "x2"));
}

// ---- reliable: eviction --------------------------------------------------------------------

TEST_CASE("kill -9 of a reliable subscriber unblocks the writer within the lease",
          "[broadcast][process][reliable]") {
  scoped_name name("bc");
  asio::io_context io;
  const auto lease = 5000ms;
  broadcast_buffer pub(io.get_executor(), shmio::create_only, name, broadcast_role::publisher,
                       options(broadcast_mode::reliable, 4, lease));
  child holder({peer_path(), "broadcast-hold", name.str()});
  REQUIRE(eventually([&] { return pub.subscriber_count() == 1; }));
  for (unsigned long i = 0; i < 4; ++i)
    write_text(pub, numbered(i), 0ms);
  std::error_code ec;
  CHECK(pub.write(asio::buffer(std::string("blocked")), 50ms, ec) == 0);  // it holds us back
  CHECK(ec == errc::timed_out);
  holder.kill9();
  // Its lock byte is gone: the writer evicts it without waiting out the lease.
  const auto start = std::chrono::steady_clock::now();
  CHECK(pub.write(asio::buffer(std::string("free")), lease, ec) == 4);
  CHECK_FALSE(ec);
  CHECK(std::chrono::steady_clock::now() - start < lease);
  CHECK(pub.subscriber_count() == 0);
}

TEST_CASE("a live subscriber that stalls past its lease is evicted and told so on its next read",
          "[broadcast][reliable]") {
  scoped_name name("bc");
  asio::io_context io;
  broadcast_buffer pub(io.get_executor(), shmio::create_only, name, broadcast_role::publisher,
                       options(broadcast_mode::reliable, 2, 100ms));
  broadcast_buffer stalled(io.get_executor(), shmio::open_only, name, broadcast_role::subscriber);
  write_text(pub, numbered(0), 0ms);
  write_text(pub, numbered(1), 0ms);
  write_text(pub, numbered(2));  // waits out the 100 ms lease, then evicts
  std::error_code ec;
  read_text(stalled, ec, 0ms);
  CHECK(ec == errc::evicted);
  CHECK_THROWS_AS(stalled.read(asio::buffer(std::string(8, ' ').data(), 8), 0ms), shmio::error);
  CHECK(pub.subscriber_count() == 0);
}

TEST_CASE("a subscriber that keeps reading or heartbeating is not evicted",
          "[broadcast][reliable]") {
  scoped_name name("bc");
  asio::io_context io;
  broadcast_buffer pub(io.get_executor(), shmio::create_only, name, broadcast_role::publisher,
                       options(broadcast_mode::reliable, 2, 300ms));
  broadcast_buffer sub(io.get_executor(), shmio::open_only, name, broadcast_role::subscriber);
  write_text(pub, numbered(0), 0ms);
  write_text(pub, numbered(1), 0ms);
  // Blocked writer, subscriber alive and heartbeating for twice the lease.
  std::error_code ec;
  for (int i = 0; i < 12; ++i) {
    sub.heartbeat();
    CHECK(pub.write(asio::buffer(std::string("x")), 50ms, ec) == 0);
    CHECK(ec == errc::timed_out);
  }
  CHECK(read_text(sub, ec) == "m0");
  CHECK_FALSE(ec);
  write_text(pub, numbered(2), 0ms);
  CHECK(pub.subscriber_count() == 1);
}

// ---- asynchronous --------------------------------------------------------------------------

TEST_CASE("a cancelled async read consumes nothing", "[broadcast][async][process]") {
  scoped_name name("bc");
  asio::io_context io;
  broadcast_buffer sub(io.get_executor(), shmio::create_only, name, broadcast_role::subscriber,
                       options(broadcast_mode::reliable, 4));
  char buf[64];
  asio::cancellation_signal cancel;
  std::error_code first = errc::busy;
  sub.async_read(asio::buffer(buf),
                 asio::bind_cancellation_slot(
                     cancel.slot(), [&](std::error_code ec, std::size_t) { first = ec; }));
  io.poll();
  CHECK(first == errc::busy);  // pending
  cancel.emit(asio::cancellation_type::terminal);
  REQUIRE(run_until(io, [&] { return first != errc::busy; }));
  CHECK(first == asio::error::operation_aborted);
  // The message published next is read by the next read: nothing was consumed by the first.
  child writer({peer_path(), "broadcast-publish", name.str(), "0", "2"});
  std::string got[2];
  int done = 0;
  for (int i = 0; i < 2; ++i) {
    sub.async_read(asio::buffer(buf), [&](std::error_code ec, std::size_t n) {
      CHECK_FALSE(ec);
      got[done++] = std::string(buf, ec ? 0 : n);
    });
    REQUIRE(run_until(io, [&] { return done == i + 1; }));
  }
  CHECK(got[0] == "m0");
  CHECK(got[1] == "m1");
  CHECK(writer.wait() == 0);
}

TEST_CASE("an async write waits for the slowest subscriber, and its cancellation publishes nothing",
          "[broadcast][async][reliable]") {
  scoped_name name("bc");
  asio::io_context io;
  full_reliable full(io, name);
  broadcast_buffer& pub = full.pub;
  broadcast_buffer& sub = full.sub;
  const std::string cancelled = "cancelled", third = "m2";
  asio::cancellation_signal cancel;
  std::error_code c_ec = errc::busy;
  pub.async_write(asio::buffer(cancelled),
                  asio::bind_cancellation_slot(
                      cancel.slot(), [&](std::error_code ec, std::size_t) { c_ec = ec; }));
  io.poll();
  cancel.emit(asio::cancellation_type::terminal);
  REQUIRE(run_until(io, [&] { return c_ec != errc::busy; }));
  CHECK(c_ec == asio::error::operation_aborted);

  std::error_code w_ec = errc::busy;
  std::size_t written = 0;
  pub.async_write(asio::buffer(third), [&](std::error_code ec, std::size_t n) {
    w_ec = ec;
    written = n;
  });
  io.poll();
  CHECK(w_ec == errc::busy);  // no room until the subscriber reads
  std::error_code ec;
  CHECK(read_text(sub, ec) == "m0");
  REQUIRE(run_until(io, [&] { return w_ec != errc::busy; }));
  CHECK_FALSE(w_ec);
  CHECK(written == 2);
  CHECK(read_text(sub, ec) == "m1");
  CHECK(read_text(sub, ec) == "m2");  // and never "cancelled"
  CHECK(sub.read(asio::buffer(std::string(8, ' ').data(), 8), 0ms, ec) == 0);
  CHECK(ec == errc::timed_out);
}

TEST_CASE("an operation of the other role fails in its turn, after the handle's earlier ones",
          "[broadcast][async][reliable]") {
  scoped_name name("bc");
  asio::io_context io;
  full_reliable full(io, name);
  broadcast_buffer& pub = full.pub;
  broadcast_buffer& sub = full.sub;
  std::vector<std::string> order;
  const std::string third = "m2";
  pub.async_write(asio::buffer(third), [&](std::error_code ec, std::size_t) {
    order.push_back(ec ? "write failed" : "write");
  });
  char buf[64];
  pub.async_read(asio::buffer(buf), [&](std::error_code ec, std::size_t) {
    order.push_back(ec == std::errc::operation_not_supported ? "read refused" : "read?");
  });
  io.poll();
  CHECK(order.empty());  // the write waits for the subscriber, and the read behind it
  std::error_code ec;
  CHECK(read_text(sub, ec) == "m0");
  REQUIRE(run_until(io, [&] { return order.size() == 2; }));
  CHECK(order[0] == "write");
  CHECK(order[1] == "read refused");
}

TEST_CASE("more subscribers than a wait queue has slots are all woken by one write",
          "[broadcast][async]") {
  scoped_name name("bc");
  asio::io_context io;
  const int subscribers = 2 * static_cast<int>(layout::wait_slot_count) + 4;
  auto o = options(broadcast_mode::reliable, 4);
  o.max_subscribers = 2 * subscribers;
  broadcast_buffer pub(io.get_executor(), shmio::create_only, name, broadcast_role::publisher, o);
  std::vector<broadcast_buffer> subs;
  std::vector<std::array<char, 64>> bufs(subscribers);
  int done = 0;
  for (int i = 0; i < subscribers; ++i) {
    subs.emplace_back(io.get_executor(), shmio::open_only, name, broadcast_role::subscriber,
                      shmio::wait_strategy::park_only());
    subs.back().async_read(asio::buffer(bufs[i]), [&, i](std::error_code ec, std::size_t n) {
      CHECK_FALSE(ec);
      CHECK(std::string(bufs[i].data(), n) == "hello");
      ++done;
    });
  }
  CHECK(pub.subscriber_count() == static_cast<std::size_t>(subscribers));
  io.poll();
  CHECK(done == 0);
  write_text(pub, "hello");
  REQUIRE(run_until(io, [&] { return done == subscribers; }));
}

TEST_CASE("in-place writes and reads see the slot itself", "[broadcast]") {
  scoped_name name("bc");
  asio::io_context io;
  broadcast_buffer pub(io.get_executor(), shmio::create_only, name, broadcast_role::publisher,
                       options(broadcast_mode::lossy, 4));
  broadcast_buffer sub(io.get_executor(), shmio::open_only, name, broadcast_role::subscriber);
  CHECK(pub.write_in_place(
            [](std::span<std::byte> slot) {
              CHECK(slot.size() == 64);
              std::memcpy(slot.data(), "abc", 3);
              return std::size_t{3};
            },
            0ms) == 3);
  // A fill that throws publishes nothing.
  CHECK_THROWS_AS(pub.write_in_place([](std::span<std::byte>) -> std::size_t { throw 1; }, 0ms),
                  int);
  std::string got;
  bool done = false;
  sub.async_read_in_place(
      [&](std::span<const std::byte> m) {
        got.assign(reinterpret_cast<const char*>(m.data()), m.size());
      },
      [&](std::error_code ec, std::size_t n) {
        CHECK_FALSE(ec);
        CHECK(n == 3);
        done = true;
      });
  REQUIRE(run_until(io, [&] { return done; }));
  CHECK(got == "abc");
  std::error_code ec;
  read_text(sub, ec, 0ms);
  CHECK(ec == errc::timed_out);  // the throwing fill left nothing behind
}

// ---- arguments, roles, limits ----------------------------------------------------------------

TEST_CASE("broadcast arguments, roles and sizes are checked", "[broadcast]") {
  scoped_name name("bc");
  asio::io_context io;
  std::error_code ec;
  auto bad = options(broadcast_mode::reliable, 1);
  broadcast_buffer none(io.get_executor(), shmio::create_only, name, broadcast_role::publisher, bad,
                        {}, ec);
  CHECK(ec == errc::invalid_argument);
  bad = options(broadcast_mode::reliable, 4, 0ms);
  broadcast_buffer none2(io.get_executor(), shmio::create_only, name, broadcast_role::publisher,
                         bad, {}, ec);
  CHECK(ec == errc::invalid_argument);

  auto o = options(broadcast_mode::lossy, 4);
  o.max_subscribers = 2;
  broadcast_buffer pub(io.get_executor(), shmio::create_only, name, broadcast_role::publisher, o);
  CHECK(pub.mode() == broadcast_mode::lossy);
  CHECK(pub.capacity() == 4);
  CHECK(pub.message_size() == 64);
  CHECK(pub.max_subscribers() == 2);
  broadcast_buffer s1(io.get_executor(), shmio::open_only, name, broadcast_role::subscriber);
  broadcast_buffer s2(io.get_executor(), shmio::open_only, name, broadcast_role::subscriber);
  broadcast_buffer s3(io.get_executor(), shmio::open_only, name, broadcast_role::subscriber, {},
                      ec);
  CHECK(ec == errc::too_many_participants);
  s2.close();  // its entry is free again
  broadcast_buffer s4(io.get_executor(), shmio::open_only, name, broadcast_role::subscriber, {},
                      ec);
  CHECK_FALSE(ec);

  const std::string big(65, 'x');
  pub.write(asio::buffer(big), 0ms, ec);
  CHECK(ec == errc::message_too_large);
  char buf[64];
  s1.write(asio::buffer(big.data(), 1), 0ms, ec);
  CHECK(ec == std::errc::operation_not_supported);
  pub.read(asio::buffer(buf), 0ms, ec);
  CHECK(ec == std::errc::operation_not_supported);
  // A message larger than the reader's buffer stays for a larger one.
  write_text(pub, std::string(10, 'y'));
  char small[4];
  CHECK(s1.read(asio::buffer(small), 0ms, ec) == 10);
  CHECK(ec == errc::message_too_large);
  CHECK(read_text(s1, ec, 0ms) == std::string(10, 'y'));
}

// ---- hostile shared memory -----------------------------------------------------------------

TEST_CASE("a broadcast header with impossible values is refused as corrupted",
          "[broadcast][hostile]") {
  scoped_name name("bc");
  asio::io_context io;
  broadcast_buffer pub(io.get_executor(), shmio::create_only, name, broadcast_role::publisher,
                       options(broadcast_mode::reliable, 4));
  shmio::segment raw(shmio::open_only, name, shmio::object_kind::broadcast);
  auto& h = state_of(raw).header;
  std::error_code ec;
  const auto try_open = [&] {
    broadcast_buffer b(io.get_executor(), shmio::open_only, name, broadcast_role::subscriber, {},
                       ec);
    return ec;
  };
  const auto saved = h;
  h.slot_count = 1u << 30;
  CHECK(try_open() == errc::corrupted);
  h = saved;
  h.mode = 7;
  CHECK(try_open() == errc::corrupted);
  h = saved;
  h.slots_offset += 64;
  CHECK(try_open() == errc::corrupted);
  h = saved;
  h.subscriber_capacity = 0;
  CHECK(try_open() == errc::corrupted);
  h = saved;
  h.version = 99;
  CHECK(try_open() == errc::incompatible);
  h = saved;
  CHECK_FALSE(try_open());
}

TEST_CASE("hostile tail, versions, lengths, cursors and lock words give corrupted, never UB",
          "[broadcast][hostile]") {
  scoped_name name("bc");
  asio::io_context io;
  broadcast_buffer pub(io.get_executor(), shmio::create_only, name, broadcast_role::publisher,
                       options(broadcast_mode::reliable, 4));
  broadcast_buffer sub(io.get_executor(), shmio::open_only, name, broadcast_role::subscriber);
  shmio::segment raw(shmio::open_only, name, shmio::object_kind::broadcast);
  auto& st = state_of(raw);
  auto* entries =
      reinterpret_cast<layout::subscriber_entry*>(raw.body().data() + st.header.subscribers_offset);
  auto* slot0 =
      reinterpret_cast<layout::broadcast_slot_header*>(raw.body().data() + st.header.slots_offset);
  std::error_code ec;
  write_text(pub, "m0");

  SECTION("a length past the message size") {
    slot0->length = 1000;
    read_text(sub, ec, 0ms);
    CHECK(ec == errc::corrupted);
  }
  SECTION("a tail that says published where the slot does not") {
    st.tail.position = 2;  // position 1 was never written
    CHECK(read_text(sub, ec, 0ms) == "m0");
    read_text(sub, ec, 0ms);
    CHECK(ec == errc::corrupted);
  }
  SECTION("a tail that went backwards") {
    CHECK(read_text(sub, ec, 0ms) == "m0");
    st.tail.position = 0;
    read_text(sub, ec, 0ms);
    CHECK(ec == errc::corrupted);
  }
  SECTION("a subscriber cursor past the tail") {
    entries[0].cursor = 1000;
    for (int i = 0; i < 4 && !ec; ++i)
      pub.write(asio::buffer(std::string("x")), 0ms, ec);
    CHECK(ec == errc::corrupted);
  }
  SECTION("a subscriber state of no known kind") {
    entries[0].state = 0x17;
    for (int i = 0; i < 4 && !ec; ++i)
      pub.write(asio::buffer(std::string("x")), 0ms, ec);
    CHECK(ec == errc::corrupted);
  }
  SECTION("a writer lock naming no possible participant") {
    st.writer.owner = layout::max_participants + 5;
    pub.write(asio::buffer(std::string("x")), 0ms, ec);
    CHECK(ec == errc::corrupted);
  }
  SECTION("a table high-water mark past the table") {
    st.joins.high_water = 1u << 30;
    for (int i = 0; i < 4 && !ec; ++i)
      pub.write(asio::buffer(std::string("x")), 0ms, ec);
    CHECK(ec == errc::corrupted);
  }
}

TEST_CASE("a writer lock left by a dead writer is taken over", "[broadcast][reliable]") {
  scoped_name name("bc");
  asio::io_context io;
  broadcast_buffer pub(io.get_executor(), shmio::create_only, name, broadcast_role::publisher,
                       options(broadcast_mode::reliable, 4));
  broadcast_buffer sub(io.get_executor(), shmio::open_only, name, broadcast_role::subscriber);
  shmio::segment raw(shmio::open_only, name, shmio::object_kind::broadcast);
  // Participant 4000 holds the lock but nobody holds its lock byte: it died holding it.
  state_of(raw).writer.owner = 4000;
  // A half-written slot it left behind is never delivered.
  auto* slot0 = reinterpret_cast<layout::broadcast_slot_header*>(raw.body().data() +
                                                                 state_of(raw).header.slots_offset);
  slot0->seq = 1;
  write_text(pub, "after");
  std::error_code ec;
  CHECK(read_text(sub, ec, 0ms) == "after");
  CHECK_FALSE(ec);
}

TEST_CASE("a closed broadcast handle keeps its executor: a plain handler runs inside io.run()",
          "[broadcast]") {
  asio::io_context io;
  scoped_name name("bcast");
  broadcast_buffer pub(io.get_executor(), shmio::create_only, name, broadcast_role::publisher,
                       broadcast_options{});
  broadcast_buffer moved(std::move(pub));
  moved.close();
  CHECK(pub.get_executor() == broadcast_buffer::executor_type(io.get_executor()));
  CHECK(moved.get_executor() == broadcast_buffer::executor_type(io.get_executor()));
  std::array<std::byte, 16> buf{};
  closed_handle_completions closed;
  pub.async_write(asio::buffer("x", 1), closed.handler());
  moved.async_read(asio::buffer(buf), closed.handler());
  CHECK(closed.calls == 0);
  REQUIRE(run_until(io, [&] { return closed.calls == 2; }));
  CHECK(closed.other_errors == 0);
  CHECK(closed.on_this_thread);
}
