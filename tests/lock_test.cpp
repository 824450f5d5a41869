// The reader/writer lock of shared_array and buffer_read_write: exclusion, counting, writer
// preference, recovery after kill -9, async operations and cancellation, guarded access.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <asio/bind_cancellation_slot.hpp>
#include <asio/bind_executor.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/use_awaitable.hpp>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <thread>

#include "shmio/buffer_read_write.hpp"
#include "shmio/detail/layout.hpp"
#include "shmio/detail/names.hpp"
#include "shmio/shared_array.hpp"
#include "support.hpp"

namespace {

using namespace std::chrono_literals;
namespace layout = shmio::detail::layout;
using shmio::buffer_read_write;
using shmio::test::child;
using shmio::test::eventually;
using shmio::test::peer_path;
using shmio::test::run_until;
using shmio::test::scoped_name;

constexpr std::size_t buffer_size = 64;
// The byte map of tests/peer_locks.cpp.
constexpr std::size_t counter_at = 16;
constexpr std::size_t copy_at = 24;
constexpr std::size_t stop_at = 32;
constexpr std::size_t running_at = 33;

// The lock state of a locked buffer, seen through a mapping of its own (as a peer would).
class lock_probe {
 public:
  explicit lock_probe(std::string_view name) : segment_(name) {}

  layout::rw_lock_state& state() const {
    return segment_.at<layout::rw_lock_state>(sizeof(layout::segment_header) +
                                              layout::locked_lock_offset);
  }
  std::uint32_t writer() const { return state().control.writer.load(); }
  std::uint64_t parked_writers() const { return state().writers.parked.load(); }
  /// The pid of the writer word's owner (by its number's slot), 0 if none.
  std::uint32_t writer_pid() const {
    const std::uint32_t owner = writer() & layout::rw_owner_mask;
    return owner == 0 ? 0 : state().slots[owner - 1].pid.load();
  }
  std::uint32_t shares() const {
    std::uint32_t n = 0;
    for (const auto& slot : state().slots)
      n += slot.shares.load();
    return n;
  }

 private:
  shmio::test::raw_segment segment_;
};

struct lock_completion {
  int calls = 0;
  std::error_code ec;
  bool died = false;
  auto handler() {
    return [this](std::error_code e, bool d) {
      ++calls;
      ec = e;
      died = d;
    };
  }
};

buffer_read_write make_buffer(asio::io_context& io, const scoped_name& name,
                              const shmio::access_options& options = {}) {
  return buffer_read_write(io.get_executor(), shmio::create_only, name, buffer_size, options);
}

buffer_read_write open_buffer(asio::io_context& io, const scoped_name& name,
                              const shmio::access_options& options = {}) {
  return buffer_read_write(io.get_executor(), shmio::open_only, name, options);
}

}  // namespace

// ---- exclusion and counting ---------------------------------------------------------------

TEST_CASE("a writer excludes other writers and every reader", "[lock]") {
  asio::io_context io;
  scoped_name name("lock");
  auto a = make_buffer(io, name);
  auto b = open_buffer(io, name);
  a.lock();
  CHECK_FALSE(b.try_lock());
  CHECK_FALSE(b.try_lock_shared());
  CHECK_FALSE(b.try_lock_for(5ms));
  CHECK_FALSE(b.try_lock_shared_for(5ms));
  a.unlock();
  CHECK(b.try_lock());
  CHECK_FALSE(a.try_lock_shared());
  b.unlock();
}

// One value is copied as its bytes: a type that is more than its bytes is refused at compile time.
template <class T>
concept value_readable = requires(const buffer_read_write& b) {
  b.read<T>(std::size_t{0});
};
template <class T>
concept value_writable = requires(buffer_read_write& b, const T& v) {
  b.write(v, std::size_t{0});
};
static_assert(value_readable<int> && value_writable<int>);
static_assert(!value_readable<std::optional<std::string>>);
static_assert(!value_writable<std::optional<std::string>>);

TEST_CASE("try_lock_for takes any duration, even one past the milliseconds' range", "[lock]") {
  // Rounding seconds::max() up to milliseconds overflows: it must saturate (UBSan builds fail
  // on the overflow), and a free lock is taken at once whatever the limit.
  asio::io_context io;
  scoped_name name("lock");
  auto a = make_buffer(io, name);
  CHECK(a.try_lock_for(std::chrono::seconds::max()));
  a.unlock();
  CHECK(a.try_lock_shared_for(std::chrono::hours::max()));
  a.unlock_shared();
  CHECK(a.try_lock_for(std::chrono::duration<double>(1e300)));
  a.unlock();
  // Zero or less tries once, as a timed mutex does (a deadline already passed, say): it must
  // not wait, let alone for ever.
  auto b = open_buffer(io, name);
  a.lock();
  CHECK_FALSE(b.try_lock_for(std::chrono::microseconds(-500)));
  CHECK_FALSE(b.try_lock_shared_for(std::chrono::nanoseconds(-1)));
  CHECK_FALSE(b.try_lock_for(std::chrono::duration<double>(-1e300)));
  a.unlock();
}

TEST_CASE("readers are counted: the lock stays shared until the last share goes", "[lock]") {
  asio::io_context io;
  scoped_name name("lock");
  auto a = make_buffer(io, name);
  auto b = open_buffer(io, name);
  auto w = open_buffer(io, name);
  a.lock_shared();
  b.lock_shared();
  a.lock_shared();  // a second share of the same handle counts too
  CHECK_FALSE(w.try_lock());
  b.unlock_shared();
  CHECK_FALSE(w.try_lock());
  a.unlock_shared();
  CHECK_FALSE(w.try_lock());
  a.unlock_shared();
  CHECK(w.try_lock());
  w.unlock();
}

TEST_CASE("unlocking what a handle does not hold changes nothing", "[lock]") {
  asio::io_context io;
  scoped_name name("lock");
  auto a = make_buffer(io, name);
  auto b = open_buffer(io, name);
  a.lock();
  b.unlock();         // b does not hold it
  b.unlock_shared();  // nor a share
  CHECK_FALSE(b.try_lock_shared());
  a.unlock();
  a.lock_shared();
  b.unlock_shared();
  CHECK_FALSE(b.try_lock());
  a.unlock_shared();
}

TEST_CASE("std::unique_lock and std::shared_lock work with the lock", "[lock]") {
  asio::io_context io;
  scoped_name name("lock");
  shmio::shared_array<int> a(io.get_executor(), shmio::create_only, name, 4);
  shmio::shared_array<int> b(io.get_executor(), shmio::open_only, name);
  {
    std::unique_lock lk(a);
    CHECK(lk.owns_lock());
    std::shared_lock other(b, std::try_to_lock);
    CHECK_FALSE(other.owns_lock());
    std::unique_lock timed(b, 2ms);
    CHECK_FALSE(timed.owns_lock());
  }
  {
    std::shared_lock r1(a);
    std::shared_lock r2(b, 1s);
    CHECK(r2.owns_lock());
    std::unique_lock w(b, std::try_to_lock);
    CHECK_FALSE(w.owns_lock());
  }
  std::unique_lock w(b, std::try_to_lock);
  CHECK(w.owns_lock());
}

TEST_CASE("a writer waiting for readers keeps new readers out, and a timeout withdraws it",
          "[lock]") {
  asio::io_context io;
  scoped_name name("lock");
  auto reader = make_buffer(io, name);
  auto writer = open_buffer(io, name);
  auto late = open_buffer(io, name);
  lock_probe probe(name);
  reader.lock_shared();
  // Catch's assertions are for the test's own thread only: the thread just keeps its result.
  bool writer_locked = false;
  std::thread t([&] { writer_locked = writer.try_lock_for(10s); });
  REQUIRE(eventually([&] { return probe.writer() != 0; }));  // claimed, waiting for the share
  CHECK_FALSE(late.try_lock_shared());                       // writers are preferred
  reader.unlock_shared();
  t.join();
  REQUIRE(writer_locked);
  CHECK_FALSE(late.try_lock_shared());
  writer.unlock();
  CHECK(probe.writer() == 0);

  // A claim that times out is withdrawn: readers are let in again.
  reader.lock_shared();
  CHECK_FALSE(writer.try_lock_for(20ms));
  CHECK(probe.writer() == 0);
  CHECK(late.try_lock_shared());
  late.unlock_shared();
  reader.unlock_shared();
}

TEST_CASE("writers and readers in several processes never overlap", "[lock][process]") {
  asio::io_context io;
  scoped_name name("lock");
  auto buf = make_buffer(io, name);
  constexpr int per_process = 2000;
  child p1({peer_path(), "lock-count", name.str(), std::to_string(per_process)});
  child p2({peer_path(), "lock-count", name.str(), std::to_string(per_process)});
  // This process reads under shares meanwhile: the counter and its copy always agree.
  int torn = 0;
  for (int i = 0; i < 2000; ++i) {
    std::shared_lock lk(buf);
    if (buf.read<std::uint64_t>(counter_at) != buf.read<std::uint64_t>(copy_at)) ++torn;
  }
  CHECK(p1.wait() == 0);
  CHECK(p2.wait() == 0);
  CHECK(torn == 0);
  CHECK(buf.read<std::uint64_t>(counter_at) == 2 * per_process);
}

TEST_CASE("a stream of overlapping readers does not starve a writer", "[lock][process]") {
  asio::io_context io;
  scoped_name name("lock");
  auto buf = make_buffer(io, name);
  // The relay always holds at least one share while it can; without writer preference the
  // share count would never reach zero and this lock would time out.
  child relay({peer_path(), "lock-relay", name.str()});
  REQUIRE(eventually([&] { return buf.read<std::uint8_t>(running_at) == 1; }));
  REQUIRE(buf.try_lock_for(10s));
  buf.write(std::uint8_t{1}, stop_at);
  buf.unlock();
  CHECK(relay.wait() == 0);
}

// ---- recovery after kill -9 ---------------------------------------------------------------

TEST_CASE("a writer killed holding the lock: the next acquirer gets it and is told",
          "[lock][process][robust]") {
  const std::string next = GENERATE("exclusive", "shared", "async", "guarded write", "guarded read",
                                    "guarded write, throwing");
  CAPTURE(next);
  asio::io_context io;
  scoped_name name("lock");
  auto buf = make_buffer(io, name);
  shmio::access_options guarded;
  guarded.lock_each_access = true;
  guarded.lock_timeout = 10s;
  auto each = open_buffer(io, name, guarded);
  child victim({peer_path(), "lock-hold", name.str(), "exclusive", "0"});
  REQUIRE(eventually([&] { return buf.read<std::uint8_t>(0) == 1; }));
  CHECK_FALSE(buf.try_lock_shared());
  REQUIRE(victim.kill9() == 128 + SIGKILL);

  std::error_code ec;
  if (next == "guarded write") {
    // The access that recovers the lock is done, and says what it found.
    each.write(std::uint64_t{7}, counter_at, ec);
    CHECK(ec == shmio::errc::owner_died);
    CHECK(buf.read<std::uint64_t>(counter_at) == 7);
  } else if (next == "guarded read") {
    buf.write(std::uint64_t{9}, copy_at);
    CHECK(each.read<std::uint64_t>(copy_at, ec) == 9);
    CHECK(ec == shmio::errc::owner_died);
  } else if (next == "guarded write, throwing") {
    each.write(std::uint64_t{7}, counter_at);  // goes ahead, as lock() does, without a word
    CHECK(buf.read<std::uint64_t>(counter_at) == 7);
  } else if (next == "exclusive") {
    buf.lock(ec);
    CHECK(ec == shmio::errc::owner_died);
    buf.unlock();
  } else if (next == "shared") {
    buf.lock_shared(ec);
    CHECK(ec == shmio::errc::owner_died);
    buf.unlock_shared();
  } else {
    lock_completion done;
    buf.async_lock(done.handler());
    REQUIRE(run_until(io, [&] { return done.calls == 1; }));
    CHECK_FALSE(done.ec);
    CHECK(done.died);
    buf.unlock();
  }
  // Told once: the next acquisition is an ordinary one.
  buf.lock(ec);
  CHECK_FALSE(ec);
  buf.unlock();
}

TEST_CASE("a reader killed holding a share: a writer reclaims it and is told",
          "[lock][process][robust]") {
  asio::io_context io;
  scoped_name name("lock");
  auto buf = make_buffer(io, name);
  auto other = open_buffer(io, name);
  child victim({peer_path(), "lock-hold", name.str(), "shared", "1"});
  REQUIRE(eventually([&] { return buf.read<std::uint8_t>(1) == 1; }));
  other.lock_shared();  // a live reader beside the dead one
  CHECK_FALSE(buf.try_lock());
  REQUIRE(victim.kill9() == 128 + SIGKILL);
  CHECK_FALSE(buf.try_lock_for(50ms));  // the live share still counts
  other.unlock_shared();
  std::error_code ec;
  CHECK(buf.try_lock_for(10s, ec));
  CHECK(ec == shmio::errc::owner_died);
  CHECK_FALSE(other.try_lock_shared());
  buf.unlock();
  CHECK(other.try_lock_shared());
  other.unlock_shared();
}

TEST_CASE("a writer killed while it waits for readers leaves no claim behind",
          "[lock][process][robust]") {
  asio::io_context io;
  scoped_name name("lock");
  auto buf = make_buffer(io, name);
  auto other = open_buffer(io, name);
  lock_probe probe(name);
  buf.lock_shared();
  child victim({peer_path(), "lock-claim", name.str()});
  REQUIRE(eventually([&] { return probe.writer() != 0; }));
  REQUIRE(victim.kill9() == 128 + SIGKILL);
  buf.unlock_shared();
  // A claim is not a hold: recovering it reports no death.
  std::error_code ec;
  CHECK(other.try_lock_shared_for(10s, ec));
  CHECK_FALSE(ec);
  other.unlock_shared();
}

TEST_CASE("a handle closed while holding the lock releases it, reported as a death", "[lock]") {
  asio::io_context io;
  scoped_name name("lock");
  auto buf = make_buffer(io, name);
  {
    auto holder = open_buffer(io, name);
    holder.lock();
  }
  std::error_code ec;
  CHECK(buf.try_lock_for(0ms, ec));
  CHECK(ec == shmio::errc::owner_died);
  buf.unlock();
}

// ---- asynchronous -------------------------------------------------------------------------

TEST_CASE("async_lock completes when the holder in another handle unlocks", "[lock][async]") {
  asio::io_context io;
  scoped_name name("lock");
  auto a = make_buffer(io, name);
  auto b = open_buffer(io, name);
  a.lock_shared();
  lock_completion w, r;
  b.async_lock(w.handler());
  CHECK(run_until(
            io, [&] { return false; }, 20ms) == false);  // nothing completes meanwhile
  CHECK(w.calls == 0);
  a.async_lock_shared(r.handler());  // behind the waiting writer
  CHECK(run_until(
            io, [&] { return false; }, 20ms) == false);
  CHECK(r.calls == 0);
  a.unlock_shared();
  REQUIRE(run_until(io, [&] { return w.calls == 1; }));
  CHECK_FALSE(w.ec);
  CHECK_FALSE(w.died);
  CHECK(r.calls == 0);
  b.unlock();
  REQUIRE(run_until(io, [&] { return r.calls == 1; }));
  CHECK_FALSE(r.ec);
  a.unlock_shared();
  CHECK(b.try_lock());
  b.unlock();
}

TEST_CASE("a lock taken for an async_lock whose handler is destroyed unrun is given back",
          "[lock][async]") {
  // The handler's io_context goes before it runs: nobody will unlock what it would have been
  // given, so the lock must not stay held by the (still open) handle; and a holder's death
  // that the lock carried is told to the next acquirer instead.
  std::optional<asio::io_context> handler_io(std::in_place);  // outlives `a` if a check fails
  asio::io_context io;
  scoped_name name("lock");
  auto a = make_buffer(io, name);
  auto b = open_buffer(io, name);
  const std::string how = GENERATE("at once", "parked", "after a death");
  const bool exclusive = GENERATE(true, false);
  CAPTURE(how, exclusive);
  if (how == "after a death") {
    child victim({peer_path(), "lock-hold", name.str(), "exclusive", "0"});
    REQUIRE(eventually([&] { return a.read<std::uint8_t>(0) == 1; }));
    REQUIRE(victim.kill9() == 128 + SIGKILL);
  }
  const bool parked = how == "parked";
  if (parked) {  // a share holds up a writer; a writer, a reader
    if (exclusive)
      b.lock_shared();
    else
      b.lock();
  }
  bool ran = false;
  auto handler =
      asio::bind_executor(handler_io->get_executor(), [&](std::error_code, bool) { ran = true; });
  if (exclusive)
    a.async_lock(std::move(handler));
  else
    a.async_lock_shared(std::move(handler));
  if (parked) {
    io.poll();
    if (exclusive)
      b.unlock_shared();
    else
      b.unlock();
  }
  // Taken (its completion is then posted at once, to handler_io, which never runs).
  lock_probe probe(name);
  REQUIRE(run_until(io, [&] {
    // (After a death, the dead writer's word is held until `a` takes it over: held by us.)
    const bool ours = probe.writer_pid() == static_cast<std::uint32_t>(::getpid());
    return exclusive ? ours && (probe.writer() & layout::rw_writer_held) != 0 && probe.shares() == 0
                     : probe.writer() == 0 && probe.shares() == 1;
  }));
  handler_io.reset();
  CHECK_FALSE(ran);
  io.poll();
  std::error_code ec;
  CHECK(b.try_lock_for(0ms, ec));  // neither the lock nor a share is left
  CHECK(ec ==
        (how == "after a death" ? std::error_code(shmio::errc::owner_died) : std::error_code()));
  b.unlock();
}

TEST_CASE("async_lock works with coroutines", "[lock][async]") {
  asio::io_context io;
  scoped_name name("lock");
  auto a = make_buffer(io, name);
  bool done = false;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        const bool died = co_await a.async_lock(asio::use_awaitable);
        CHECK_FALSE(died);
        a.write(std::uint32_t{7}, 0);
        a.unlock();
        co_await a.async_lock_shared(asio::use_awaitable);
        CHECK(a.read<std::uint32_t>(0) == 7);
        a.unlock_shared();
        done = true;
      },
      asio::detached);
  REQUIRE(run_until(io, [&] { return done; }));
}

TEST_CASE("a cancelled async_lock completes once with operation_aborted and holds nothing",
          "[lock][async]") {
  const std::string what =
      GENERATE("exclusive-behind-writer", "exclusive-behind-readers", "shared-behind-writer");
  CAPTURE(what);
  asio::io_context io;
  scoped_name name("lock");
  auto holder = make_buffer(io, name);
  auto waiter = open_buffer(io, name);
  auto third = open_buffer(io, name);
  const bool holder_exclusive = what != "exclusive-behind-readers";
  if (holder_exclusive)
    holder.lock();
  else
    holder.lock_shared();
  asio::cancellation_signal cancel;
  lock_completion done;
  if (what == "shared-behind-writer")
    waiter.async_lock_shared(asio::bind_cancellation_slot(cancel.slot(), done.handler()));
  else
    waiter.async_lock(asio::bind_cancellation_slot(cancel.slot(), done.handler()));
  lock_probe probe(name);
  // Let it reach its parked state (for behind-readers: claimed and waiting for the share).
  REQUIRE(
      run_until(io, [&] { return probe.parked_writers() != 0 || what == "shared-behind-writer"; }));
  cancel.emit(asio::cancellation_type::terminal);
  REQUIRE(run_until(io, [&] { return done.calls == 1; }));
  CHECK(done.ec == asio::error::operation_aborted);
  // The claim went with it: another reader gets a share beside the holder's.
  if (!holder_exclusive) CHECK(third.try_lock_shared());
  if (!holder_exclusive) third.unlock_shared();
  if (holder_exclusive)
    holder.unlock();
  else
    holder.unlock_shared();
  run_until(
      io, [&] { return false; }, 20ms);
  CHECK(done.calls == 1);
  CHECK(third.try_lock());  // nothing was left held or claimed by the cancelled operation
  third.unlock();
}

TEST_CASE("closing a handle aborts its pending lock operations", "[lock][async]") {
  asio::io_context io;
  scoped_name name("lock");
  auto holder = make_buffer(io, name);
  auto waiter = open_buffer(io, name);
  holder.lock();
  lock_completion done;
  waiter.async_lock(done.handler());
  run_until(
      io, [&] { return false; }, 5ms);
  waiter.close();
  REQUIRE(run_until(io, [&] { return done.calls == 1; }));
  CHECK(done.ec == asio::error::operation_aborted);
  holder.unlock();
  CHECK(holder.try_lock());
  holder.unlock();
}

TEST_CASE("a cancelled exclusive async_lock racing close() on another thread withdraws its claim",
          "[lock][async][lifetime]") {
  // The claim goes back while the handle's state is certain to be mapped: under the waiter's
  // lock, as the operation leaves its list, whichever of the two takes it out.
  for (int round = 0; round < 100; ++round) {
    asio::io_context io;
    scoped_name name("lock");
    auto holder = make_buffer(io, name);
    auto waiting = open_buffer(io, name);
    holder.lock_shared();
    asio::cancellation_signal cancel;
    lock_completion done;
    waiting.async_lock(asio::bind_cancellation_slot(cancel.slot(), done.handler()));
    lock_probe probe(name);
    // Claimed, and waiting for the holder's share to go.
    REQUIRE(run_until(io, [&] { return probe.parked_writers() != 0; }));
    std::atomic<bool> go{false};
    std::thread closer([&] {
      while (!go.load()) {
      }
      waiting.close();
    });
    go = true;
    cancel.emit(asio::cancellation_type::terminal);
    closer.join();
    REQUIRE(run_until(io, [&] { return done.calls == 1; }));
    CHECK(done.ec == asio::error::operation_aborted);
    holder.unlock_shared();
    auto third = open_buffer(io, name);
    REQUIRE(third.try_lock());  // no claim was left behind
    third.unlock();
  }
}

// ---- guarded access -----------------------------------------------------------------------

TEST_CASE("plain reads and writes take no lock unless asked to, then time out at it",
          "[lock][buffer]") {
  asio::io_context io;
  scoped_name name("lock");
  auto holder = make_buffer(io, name);
  auto plain = open_buffer(io, name);
  shmio::access_options guarded_options;
  guarded_options.lock_each_access = true;
  guarded_options.lock_timeout = 30ms;
  auto guarded = open_buffer(io, name, guarded_options);

  holder.lock();
  plain.write(std::uint32_t{5}, 0);  // no lock taken: goes ahead
  CHECK(plain.read<std::uint32_t>(0) == 5);
  std::error_code ec;
  guarded.read<std::uint32_t>(0, ec);
  CHECK(ec == shmio::errc::timed_out);
  guarded.write(std::uint32_t{6}, 0, ec);
  CHECK(ec == shmio::errc::timed_out);
  CHECK(plain.read<std::uint32_t>(0) == 5);  // the timed-out write wrote nothing
  CHECK_THROWS_AS(guarded.read<std::uint32_t>(0), shmio::error);
  holder.unlock();

  holder.lock_shared();
  CHECK(guarded.read<std::uint32_t>(0) == 5);  // reads share the lock
  guarded.write(std::uint32_t{6}, 0, ec);
  CHECK(ec == shmio::errc::timed_out);
  holder.unlock_shared();
  guarded.write(std::uint32_t{6}, 0);
  CHECK(plain.read<std::uint32_t>(0) == 6);

  // A handle that holds the lock itself reads and writes without waiting for it: lock, read,
  // change, write back.
  guarded.lock();
  const auto before = guarded.read<std::uint32_t>(0, ec);
  CHECK_FALSE(ec);
  CHECK(before == 6);
  guarded.write(before + 1, 0);
  guarded.unlock();
  CHECK(plain.read<std::uint32_t>(0) == 7);
  CHECK(holder.try_lock());  // the guarded accesses left nothing held
  holder.unlock();
}

TEST_CASE("the default access timeout is the seed's 100 ms", "[lock][buffer]") {
  CHECK(shmio::access_options{}.lock_timeout == 100ms);
  CHECK_FALSE(shmio::access_options{}.lock_each_access);
}

TEST_CASE("a closed handle's lock calls report bad_descriptor", "[lock]") {
  asio::io_context io;
  scoped_name name("lock");
  auto a = make_buffer(io, name);
  a.close();
  std::error_code ec;
  CHECK_FALSE(a.try_lock_for(0ms, ec));
  CHECK(ec == asio::error::bad_descriptor);
  CHECK_THROWS_AS(a.lock(), shmio::error);
  // The closed handle keeps its executor: the completion runs in io.run(), not on some thread.
  CHECK(a.get_executor() == shmio::rw_lock::executor_type(io.get_executor()));
  lock_completion done;
  a.async_lock(done.handler());
  CHECK(done.calls == 0);
  REQUIRE(run_until(io, [&] { return done.calls == 1; }));
  CHECK(done.ec == asio::error::bad_descriptor);
  a.unlock();  // harmless
}

TEST_CASE("a moved-from handle and one whose open failed keep their executor", "[lock][async]") {
  asio::io_context io;
  scoped_name name("lock");
  scoped_name absent("lock");
  auto a = make_buffer(io, name);
  buffer_read_write b(std::move(a));
  std::error_code ec;
  buffer_read_write missing(io.get_executor(), shmio::open_only, absent, {}, ec);
  REQUIRE(ec);
  ec.clear();
  shmio::shared_array<int> array(io.get_executor(), shmio::open_only, absent, {}, ec);
  REQUIRE(ec);
  const shmio::rw_lock::executor_type expected(io.get_executor());
  CHECK(a.get_executor() == expected);
  CHECK(missing.get_executor() == expected);
  CHECK(array.get_executor() == expected);
  // Each completes through io: its run() has them as work, and runs them on this thread (not on
  // a thread of Asio's system executor, the handlers' own associated executor).
  shmio::test::closed_handle_completions done;
  a.async_lock(done.handler());
  missing.async_lock_shared(done.handler());
  array.async_lock(done.handler());
  CHECK(done.calls == 0);
  io.run();
  CHECK(done.calls == 3);
  CHECK(done.other_errors == 0);
  CHECK(done.on_this_thread);
}

TEST_CASE("a corrupted writer word is reclaimed, not waited on for ever", "[lock][hostile]") {
  asio::io_context io;
  scoped_name name("lock");
  auto buf = make_buffer(io, name);
  lock_probe probe(name);
  probe.state().control.writer.store(0xdead | layout::rw_writer_held);
  std::error_code ec;
  CHECK(buf.try_lock_shared_for(10s, ec));
  CHECK(ec == shmio::errc::owner_died);
  buf.unlock_shared();
}

TEST_CASE(
    "a writer word that the holder of its number did not write is reclaimed, even if it names "
    "a live handle or the waiter",
    "[lock][hostile]") {
  // Its tag is not the one in the number's slot: a dead earlier holder of the number left it
  // (or memory was damaged), and no one will ever free it.
  asio::io_context io;
  scoped_name name("lock");
  auto buf = make_buffer(io, name);  // participant 1
  auto other = shmio::buffer_read_write(io.get_executor(), shmio::open_only, name);  // 2
  lock_probe probe(name);
  const std::uint32_t owner = GENERATE(1u, 2u);  // the waiter itself, a live handle
  CAPTURE(owner);
  const std::uint32_t holder_tag = probe.state().slots[owner - 1].tag.load();
  REQUIRE(holder_tag != 0);
  const std::uint32_t stray = (holder_tag % layout::rw_tag_mask + 1) << layout::rw_tag_shift;
  probe.state().control.writer.store(owner | layout::rw_writer_held | stray);
  std::error_code ec;
  CHECK(buf.try_lock_for(2s, ec));
  CHECK(ec == shmio::errc::owner_died);       // it had the held bit: the data may be half-written
  CHECK(buf.try_lock_for(0ms, ec) == false);  // and now it is ours, properly
  buf.unlock();
  CHECK(other.try_lock_for(0ms, ec));
  CHECK_FALSE(ec);
  other.unlock();
}

TEST_CASE("more handles than the lock has reader slots are refused", "[lock]") {
  asio::io_context io;
  scoped_name name("lock");
  std::vector<buffer_read_write> handles;
  handles.push_back(make_buffer(io, name));
  for (std::uint32_t i = 1; i < layout::rw_reader_slots; ++i)
    handles.push_back(open_buffer(io, name));
  std::error_code ec;
  buffer_read_write extra(io.get_executor(), shmio::open_only, name, {}, ec);
  CHECK(ec == shmio::errc::too_many_participants);
  CHECK_FALSE(extra.is_open());
  handles.pop_back();
  buffer_read_write again(io.get_executor(), shmio::open_only, name, {}, ec);
  CHECK_FALSE(ec);
}
