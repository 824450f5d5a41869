// Peer commands for tests/lock_test.cpp: other processes that hold, contend for and relay the
// reader/writer lock of a buffer_read_write.
//
// The tests' buffers follow one map (lock_test.cpp has the same constants):
//   byte 0..7   : `held_mark`  — a peer sets byte held_mark + its index to 1 once it holds
//   byte 16..23 : u64 counter incremented under the exclusive lock (lock-count)
//   byte 24..31 : u64 copy of the counter, written separately (readers check both agree)
//   byte 32     : stop flag (lock-relay ends when it is non-zero)
//   byte 33     : relay running flag
//
// Exit codes: 0 success, 1 a lock did not come within the bound, 2 bad arguments, 3 an
// invariant of the lock was broken (a torn read), 97 an exception.
#include <asio/io_context.hpp>
#include <chrono>
#include <cstdint>
#include <string>
#include <system_error>
#include <thread>

#include <unistd.h>

#include "peer.hpp"
#include "shmio/buffer_read_write.hpp"

namespace {

using namespace std::chrono_literals;
using shmio::buffer_read_write;

constexpr int exit_timed_out = 1;
constexpr int exit_usage = 2;
constexpr int exit_broken = 3;
constexpr auto bound = std::chrono::milliseconds(10'000);

constexpr std::size_t counter_at = 16;
constexpr std::size_t copy_at = 24;
constexpr std::size_t stop_at = 32;
constexpr std::size_t running_at = 33;

// lock-hold NAME exclusive|shared INDEX: takes the lock, marks byte INDEX, and holds it until
// killed.
SHMIO_PEER_COMMAND("lock-hold", args) {
  if (args.size() != 3) return exit_usage;
  asio::io_context io;
  buffer_read_write buf(io.get_executor(), shmio::open_only, args[0]);
  const bool exclusive = args[1] == "exclusive";
  const bool ok = exclusive ? buf.try_lock_for(bound) : buf.try_lock_shared_for(bound);
  if (!ok) return exit_timed_out;
  buf.write(std::uint8_t{1}, std::stoul(args[2]));
  for (;;)
    ::pause();
}

// lock-claim NAME: waits for the exclusive lock for ever (tests kill it while it waits).
SHMIO_PEER_COMMAND("lock-claim", args) {
  if (args.size() != 1) return exit_usage;
  asio::io_context io;
  buffer_read_write buf(io.get_executor(), shmio::open_only, args[0]);
  buf.lock();
  return 0;
}

// lock-count NAME N: N times, under the exclusive lock, increments the counter in two separate
// steps (so that a writer inside at the same time would lose increments); between its writes
// it checks, under a share, that the counter and its copy agree.
SHMIO_PEER_COMMAND("lock-count", args) {
  if (args.size() != 2) return exit_usage;
  asio::io_context io;
  buffer_read_write buf(io.get_executor(), shmio::open_only, args[0]);
  const unsigned long n = std::stoul(args[1]);
  for (unsigned long i = 0; i < n; ++i) {
    if (!buf.try_lock_for(bound)) return exit_timed_out;
    const auto v = buf.read<std::uint64_t>(counter_at);
    buf.write(v + 1, counter_at);
    if (i % 16 == 0) std::this_thread::yield();  // invite another writer in, if it could come
    buf.write(v + 1, copy_at);
    buf.unlock();
    if (!buf.try_lock_shared_for(bound)) return exit_timed_out;
    const bool torn = buf.read<std::uint64_t>(counter_at) != buf.read<std::uint64_t>(copy_at);
    buf.unlock_shared();
    if (torn) return exit_broken;
  }
  return 0;
}

// lock-relay NAME: two handles pass a share back and forth so that one is always held, until
// the stop flag is set. When a writer is waiting, the second share does not come; the relay
// then lets go of the first and waits for a share like any reader.
SHMIO_PEER_COMMAND("lock-relay", args) {
  if (args.size() != 1) return exit_usage;
  asio::io_context io;
  buffer_read_write a(io.get_executor(), shmio::open_only, args[0]);
  buffer_read_write b(io.get_executor(), shmio::open_only, args[0]);
  buffer_read_write* held = &a;
  buffer_read_write* other = &b;
  if (!held->try_lock_shared_for(bound)) return exit_timed_out;
  held->write(std::uint8_t{1}, running_at);
  while (held->read<std::uint8_t>(stop_at) == 0) {
    if (other->try_lock_shared()) {
      held->unlock_shared();
      std::swap(held, other);
      continue;
    }
    held->unlock_shared();  // a writer waits: let it in
    if (!held->try_lock_shared_for(bound)) return exit_timed_out;
  }
  held->unlock_shared();
  return 0;
}

}  // namespace
