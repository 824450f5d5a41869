// Ring benchmarks: shmio::circular_buffer beside the floor (a bare spin ring, support.hpp) and
// what a user would use instead (an asio::local::stream_protocol socket pair), in one binary so
// that one run gives every number; compare as ratios (bench/ratios.py).
//
// BM_ring_roundtrip/<family>/<placement>/<bytes>: a message to a partner process through one
//     ring and its echo back through another; one iteration = one round trip. 64, 1 KiB,
//     16 KiB and 256 KiB at split placement, 64 bytes at same.
//       spin_ring          two spin rings: the floor
//       asio_local_stream  a socket pair, co_await async_write / async_read of the message
//       shmio_sync         two circular_buffers, blocking write() / read()
//       shmio_async        the same, co_await async_write() / async_read() on both sides
// BM_ring_throughput/<family>/<P>p<C>c: 64-byte messages from P producer processes to C
//     consumer processes, as fast as they go. One timed iteration moves `messages` messages;
//     items_per_second = messages per second. spin_ring and asio_local_stream only run 1p1c
//     (one byte stream or an SPSC ring has one reader). 1p1c pins the producer to CPU 0 and the
//     consumer to CPU 1; more processes are left to the scheduler on the two CPUs. Two more
//     families run only here:
//       shmio_sync_batch   write_batch() / read_batch_in_place(), batch_messages per call
//       shmio_async_batch  co_await async_write_batch() / async_read_batch_in_place()
// BM_ring_flow_pairs: the 1p1c flows again, interleaved. The throughput benchmarks above run
//     one after the other, and on a shared VM the cache-line transfer time between the two
//     vCPUs moves by 2-3x with their placement, within minutes: more than the differences being
//     judged. Here one producer process (CPU 0) and one consumer process (CPU 1) hold a spin
//     ring, four reference rings and a circular_buffer, and the parent has them move blocks of
//     flow_pair_block messages through each family in turn: spin_ring, shmio_sync, shmio_async,
//     shmio_co (co_write / co_read, the fast coroutine forms), shmio_sync_batch,
//     shmio_async_batch, and the references. The order rotates every round and runs backwards
//     every other round, so that no family always follows the same one. The references are bare
//     single-producer, single-consumer rings with shmio's node layout (node_ring in support.hpp:
//     a state word per node in the line of its payload):
//       node_ring_release   the word stored with release, nothing loaded after it
//       node_ring_parkable  the word stored seq_cst, then the other side's parked word loaded:
//                           what a ring whose sides may sleep does per message
//       node_ring_claims    the parkable one with a claim stored in the word by each side before
//                           it uses the node, as shmio's claims do (plain stores here: one writer,
//                           one reader; no compare-and-swap, no cursor)
//       node_ring_atomics   the claims taken with compare-and-swap, and each side's position read
//                           from a shared cursor it advances with compare-and-swap, as shmio's
//                           ring does: shmio's atomic operations without the rest of its code
//       ring_view_direct    shmio's own ring (detail::ring_view, on a circular_buffer's segment)
//                           driven as the references are: try to claim, copy, publish or
//                           release, again at once on a miss; no waiter, no spin policy, no wait
//       co_node_floor       the parkable one with each write and read an operation returning an
//                           asio::awaitable that a coroutine co_awaits (shmio_co's shape)
//     They show what the layout and an awaitable per message cost where shmio's own code is
//     absent; they are not lower bounds (a reference can run faster than the spin ring).
//     Counters: <family>_rate (the median over rounds of its block rate, messages per second) and
//     <family>_over_spin (the median over rounds of its rate divided by the spin ring's in the same
//     round).
// BM_ring_bandwidth/<family>: 1 MiB messages, one producer process to one consumer process;
//     bytes_per_second. Every family copies each message in and out once.
// BM_ring_local/<sync|async>: one thread writes a 64-byte message and reads it back: the ring's
//     own cost with no other process (for profiling).
//
// Counters: median_ns (round trips; see support.hpp), allocs_per_iter (heap allocations in the
// measuring process per iteration).
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/local/stream_protocol.hpp>
#include <asio/read.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>
#include <cstring>
#include <limits>
#include <memory>
#include <shmio/detail/layout.hpp>
#include <shmio/detail/liveness.hpp>
#include <shmio/detail/ring.hpp>
#include <shmio/shmio.hpp>
#include <span>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "support.hpp"

namespace {

using namespace std::chrono_literals;
using namespace shmio_bench;
using stream_socket = asio::local::stream_protocol::socket;

constexpr std::size_t small_message = 64;
constexpr std::size_t big_message = 1 << 20;
/// Round trips at split placement run at each size (for latency against size); same only 64.
constexpr std::size_t roundtrip_sizes[] = {64, 1024, 16 * 1024, 256 * 1024};
constexpr auto forever = std::chrono::milliseconds::max();
/// Messages per call of the batch families.
constexpr std::size_t batch_messages = 32;

enum class family {
  spin_ring,
  asio_local_stream,
  shmio_sync,
  shmio_async,
  shmio_sync_batch,
  shmio_async_batch,
  shmio_co,
  node_ring_release,  // BM_ring_flow_pairs only: the reference rings (node_ring, support.hpp)
  node_ring_parkable,
  node_ring_claims,
  node_ring_atomics,
  ring_view_direct,
  co_node_floor,
  shmio_sync_spsc,  // BM_ring_flow_pairs only: shmio_sync and shmio_co on a ring_mode::spsc ring
  shmio_co_spsc
};

/// The family an spsc family runs as (on its single-writer ring); any other is its own.
family base_of(family f) {
  if (f == family::shmio_sync_spsc) return family::shmio_sync;
  if (f == family::shmio_co_spsc) return family::shmio_co;
  return f;
}

const char* name_of(family f) {
  switch (f) {
    case family::spin_ring:
      return "spin_ring";
    case family::asio_local_stream:
      return "asio_local_stream";
    case family::shmio_sync:
      return "shmio_sync";
    case family::shmio_async:
      return "shmio_async";
    case family::shmio_sync_batch:
      return "shmio_sync_batch";
    case family::shmio_async_batch:
      return "shmio_async_batch";
    case family::shmio_co:
      return "shmio_co";
    case family::node_ring_release:
      return "node_ring_release";
    case family::node_ring_parkable:
      return "node_ring_parkable";
    case family::node_ring_claims:
      return "node_ring_claims";
    case family::node_ring_atomics:
      return "node_ring_atomics";
    case family::ring_view_direct:
      return "ring_view_direct";
    case family::co_node_floor:
      return "co_node_floor";
    case family::shmio_sync_spsc:
      return "shmio_sync_spsc";
    case family::shmio_co_spsc:
      return "shmio_co_spsc";
  }
  return "?";
}

// ---- round trip ------------------------------------------------------------------------------

void roundtrip_spin(benchmark::State& state, session& s, std::size_t size) {
  spin_ring ping(8, size), pong(8, size);
  control_block& c = s.ctl();
  s.pin_parent();
  s.fork_child([&](const std::function<void()>& ready) {
    ready();
    std::vector<std::byte> buf(size);
    for (;;) {
      std::size_t n;
      while ((n = ping.try_read(buf.data())) == 0) {
      }
      if (c.stop.load(std::memory_order_acquire)) return;
      while (!pong.try_write(buf.data(), n)) {
      }
    }
  });
  s.start_children();
  std::vector<std::byte> out(size), in(size);
  warm_up_then_measure(state, [&] {
    while (!ping.try_write(out.data(), out.size())) {
    }
    while (pong.try_read(in.data()) == 0)
      if (g_child_exited) throw_child_gone();
  });
  s.stop_children([&] { ping.try_write(out.data(), out.size()); });
}

asio::awaitable<void> stream_echo(stream_socket& sock, std::size_t size) {
  std::vector<char> buf(size);
  try {
    for (;;) {
      co_await asio::async_read(sock, asio::buffer(buf), asio::use_awaitable);
      co_await asio::async_write(sock, asio::buffer(buf), asio::use_awaitable);
    }
  } catch (const std::system_error&) {
    // EOF: the parent closed its end
  }
}

void roundtrip_stream(benchmark::State& state, session& s, std::size_t size) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) throw_errno("socketpair");
  s.own_fd(fds[0]);
  s.pin_parent();
  s.fork_child([fds, size](const std::function<void()>& ready) {
    ::close(fds[1]);
    asio::io_context io;
    stream_socket sock(io, asio::local::stream_protocol(), fds[0]);
    asio::co_spawn(io, stream_echo(sock, size), [](std::exception_ptr e) {
      if (e) std::rethrow_exception(e);
    });
    ready();
    io.run();
  });
  asio::io_context io;
  stream_socket sock(io, asio::local::stream_protocol(), fds[1]);
  s.start_children();
  auto body = [&]() -> asio::awaitable<void> {
    std::vector<char> out(size), in(size);
    const warmup w;
    for (long i = 0; w.more(i); ++i) {
      co_await asio::async_write(sock, asio::buffer(out), asio::use_awaitable);
      co_await asio::async_read(sock, asio::buffer(in), asio::use_awaitable);
    }
    batch_timer bt(state);
    bt.start();
    for (auto _ : state) {
      co_await asio::async_write(sock, asio::buffer(out), asio::use_awaitable);
      co_await asio::async_read(sock, asio::buffer(in), asio::use_awaitable);
      bt.tick();
    }
    bt.report(state);
  };
  run_parent_coroutine(s, io, body());
  s.stop_children([&] {
    std::error_code ignored;
    sock.shutdown(stream_socket::shutdown_both, ignored);
  });
}

void roundtrip_shmio(benchmark::State& state, session& s, bool async, std::size_t size) {
  control_block& c = s.ctl();
  const std::string ping_name = s.segment_name("ping");
  const std::string pong_name = s.segment_name("pong");
  s.pin_parent();
  s.fork_child([&](const std::function<void()>& ready) {
    asio::io_context io;
    shmio::circular_buffer ping(io.get_executor(), shmio::open_only, ping_name);
    shmio::circular_buffer pong(io.get_executor(), shmio::open_only, pong_name);
    std::vector<std::byte> buf(size);
    ready();
    if (!async) {
      for (;;) {
        const std::size_t n = ping.read(asio::buffer(buf), forever);
        if (c.stop.load(std::memory_order_acquire)) return;
        pong.write(asio::buffer(buf.data(), n), forever);
      }
    }
    run_child_coroutine(io, [&]() -> asio::awaitable<void> {
      for (;;) {
        const std::size_t n = co_await ping.async_read(asio::buffer(buf), asio::use_awaitable);
        if (c.stop.load(std::memory_order_acquire)) co_return;
        co_await pong.async_write(asio::buffer(buf.data(), n), asio::use_awaitable);
      }
    }());
  });
  asio::io_context io;
  shmio::circular_buffer ping(io.get_executor(), shmio::create_only, ping_name, 8, size);
  shmio::circular_buffer pong(io.get_executor(), shmio::create_only, pong_name, 8, size);
  s.start_children();
  std::vector<std::byte> out(size), in(size);
  if (!async) {
    warm_up_then_measure(state, [&] {
      ping.write(asio::buffer(out), forever);
      while (pong.read(asio::buffer(in), 1s) == 0)
        if (s.children_gone()) throw_child_gone();
    });
  } else {
    auto body = [&]() -> asio::awaitable<void> {
      const warmup w;
      for (long i = 0; w.more(i); ++i) {
        co_await ping.async_write(asio::buffer(out), asio::use_awaitable);
        co_await pong.async_read(asio::buffer(in), asio::use_awaitable);
      }
      batch_timer bt(state);
      bt.start();
      for (auto _ : state) {
        co_await ping.async_write(asio::buffer(out), asio::use_awaitable);
        co_await pong.async_read(asio::buffer(in), asio::use_awaitable);
        bt.tick();
      }
      bt.report(state);
    };
    run_parent_coroutine(s, io, body());
  }
  // Stop the child before our handles close, so that ours are the last and remove the segments.
  s.stop_children([&] { ping.write(asio::buffer(out), 0ms); });
}

void bm_roundtrip(benchmark::State& state, family f, placement p, std::size_t size) {
  guarded(state, [&] {
    session s(p);
    switch (f) {
      case family::spin_ring:
        return roundtrip_spin(state, s, size);
      case family::asio_local_stream:
        return roundtrip_stream(state, s, size);
      case family::shmio_sync:
        return roundtrip_shmio(state, s, false, size);
      case family::shmio_async:
        return roundtrip_shmio(state, s, true, size);
      case family::shmio_sync_batch:
      case family::shmio_async_batch:
      case family::shmio_co:
      case family::node_ring_release:
      case family::node_ring_parkable:
      case family::node_ring_claims:
      case family::node_ring_atomics:
      case family::ring_view_direct:
      case family::co_node_floor:
      case family::shmio_sync_spsc:
      case family::shmio_co_spsc:
        throw std::logic_error("no round trip for this family here (see BM_roundtrip_pairs)");
    }
  });
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(size));
}

// ---- throughput and bandwidth ---------------------------------------------------------------

/// One counter per consumer process, each on its own cache line, in a MAP_SHARED mapping made
/// before the forks: the parent sums them to see when every message has arrived.
class shared_counters {
 public:
  explicit shared_counters(int n) : n_(n) {
    void* m = ::mmap(nullptr, bytes(), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) throw_errno("mmap");
    c_ = new (m) slot[static_cast<std::size_t>(n)];
  }
  ~shared_counters() { ::munmap(c_, bytes()); }
  shared_counters(const shared_counters&) = delete;
  shared_counters& operator=(const shared_counters&) = delete;

  // Relaxed: a progress count; the parent only needs to see it reach the total eventually.
  void add(int i, std::uint64_t k) noexcept { c_[i].value.fetch_add(k, std::memory_order_relaxed); }
  std::uint64_t sum() const noexcept {
    std::uint64_t total = 0;
    for (int i = 0; i < n_; ++i)
      total += c_[i].value.load(std::memory_order_relaxed);
    return total;
  }

 private:
  struct slot {
    alignas(64) std::atomic<std::uint64_t> value{0};
  };
  std::size_t bytes() const { return sizeof(slot) * static_cast<std::size_t>(n_); }
  int n_;
  slot* c_;
};

struct flow {
  int producers = 1;
  int consumers = 1;
  std::size_t message_size = small_message;
  std::uint64_t messages = 0;    // per timed iteration
  std::size_t node_count = 256;  // shmio and spin ring capacity, in messages
};

/// Messages producer `i` of `n` writes.
std::uint64_t share(const flow& fl, int i) {
  return fl.messages / static_cast<std::uint64_t>(fl.producers) +
         (i == 0 ? fl.messages % static_cast<std::uint64_t>(fl.producers) : 0);
}

/// Waits (sleeping, so as to leave both CPUs to the producers and consumers) until `done()`,
/// and returns the time from `start` on. Throws if a child died.
template <class Done>
double wait_until(session& s, clock_type::time_point start, Done&& done) {
  const timespec nap{0, 200'000};
  for (;;) {
    if (done()) return std::chrono::duration<double>(clock_type::now() - start).count();
    if (g_child_exited && !done()) throw_child_gone();
    ::nanosleep(&nap, nullptr);
    (void)s;
  }
}

/// Children wait for the go: ctl().ping becomes 1. They yield, not spin hard, while waiting.
void await_go(control_block& c) {
  while (c.ping.load(std::memory_order_acquire) == 0)
    ::sched_yield();
}

/// A producer that has written its share stays until the parent stops it: a child that exits
/// early would read as a failure (SIGCHLD) to the parent.
void linger(control_block& c) {
  const timespec nap{0, 1'000'000};
  while (!c.stop.load(std::memory_order_acquire))
    ::nanosleep(&nap, nullptr);
}

/// For 1p1c, the producer goes to CPU 0 and the consumer to CPU 1; otherwise no pinning.
void place(const flow& fl, int cpu) {
  if (fl.producers == 1 && fl.consumers == 1 && !pin_to(cpu)) throw_errno("sched_setaffinity");
}

void flow_spin(benchmark::State& state, session& s, const flow& fl) {
  spin_ring ring(fl.node_count, fl.message_size);
  shared_counters received(1);
  control_block& c = s.ctl();
  s.fork_child(
      [&](const std::function<void()>& ready) {
        place(fl, 0);
        std::vector<std::byte> msg(fl.message_size);
        ready();
        await_go(c);
        for (std::uint64_t i = 0; i < fl.messages; ++i)
          while (!ring.try_write(msg.data(), msg.size())) {
          }
        linger(c);
      },
      false);
  s.fork_child(
      [&](const std::function<void()>& ready) {
        place(fl, 1);
        std::vector<std::byte> msg(fl.message_size);
        ready();
        for (std::uint64_t i = 0; i < fl.messages; ++i) {
          while (ring.try_read(msg.data()) == 0) {
          }
          received.add(0, 1);
        }
      },
      false);
  s.start_children();
  for (auto _ : state) {
    const auto start = clock_type::now();
    c.ping.store(1, std::memory_order_release);
    state.SetIterationTime(wait_until(s, start, [&] { return received.sum() >= fl.messages; }));
  }
  s.stop_children({});
}

void flow_stream(benchmark::State& state, session& s, const flow& fl) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) throw_errno("socketpair");
  s.own_fd(fds[0]);
  s.own_fd(fds[1]);
  shared_counters received(1);
  control_block& c = s.ctl();
  s.fork_child(
      [&](const std::function<void()>& ready) {
        place(fl, 0);
        asio::io_context io;
        stream_socket sock(io, asio::local::stream_protocol(), ::dup(fds[0]));
        std::vector<std::byte> msg(fl.message_size);
        ready();
        await_go(c);
        run_child_coroutine(io, [&]() -> asio::awaitable<void> {
          for (std::uint64_t i = 0; i < fl.messages; ++i)
            co_await asio::async_write(sock, asio::buffer(msg), asio::use_awaitable);
        }());
        linger(c);
      },
      false);
  s.fork_child(
      [&](const std::function<void()>& ready) {
        place(fl, 1);
        asio::io_context io;
        stream_socket sock(io, asio::local::stream_protocol(), ::dup(fds[1]));
        std::vector<std::byte> msg(fl.message_size);
        ready();
        run_child_coroutine(io, [&]() -> asio::awaitable<void> {
          for (std::uint64_t i = 0; i < fl.messages; ++i) {
            co_await asio::async_read(sock, asio::buffer(msg), asio::use_awaitable);
            received.add(0, 1);
          }
        }());
      },
      false);
  s.start_children();
  for (auto _ : state) {
    const auto start = clock_type::now();
    c.ping.store(1, std::memory_order_release);
    state.SetIterationTime(wait_until(s, start, [&] { return received.sum() >= fl.messages; }));
  }
  s.stop_children({});
}

/// Ends a consumer's read batch at the empty message that stops it, so that it does not take
/// another consumer's.
struct stop_batch {};

/// Writes `n` copies of `msg` into `ring` as the shmio family `f` does: one message per call, or
/// batches of up to batch_messages; the async families run a coroutine on `io` until done.
void write_messages(family f, std::uint64_t n, shmio::circular_buffer& ring, asio::io_context& io,
                    const std::vector<std::byte>& msg) {
  const std::vector<asio::const_buffer> msgs(batch_messages, asio::buffer(msg));
  auto next_batch = [&](std::uint64_t left) {
    return std::span(msgs).first(std::min<std::uint64_t>(left, batch_messages));
  };
  switch (f) {
    case family::shmio_sync:
      for (std::uint64_t i = 0; i < n; ++i)
        ring.write(asio::buffer(msg), forever);
      return;
    case family::shmio_sync_batch:
      for (std::uint64_t left = n; left > 0;)
        left -= ring.write_batch(next_batch(left), forever);
      return;
    default:
      io.restart();
      run_child_coroutine(io, [&]() -> asio::awaitable<void> {
        if (f == family::shmio_async) {
          for (std::uint64_t i = 0; i < n; ++i)
            co_await ring.async_write(asio::buffer(msg), asio::use_awaitable);
        } else if (f == family::shmio_co) {
          for (std::uint64_t i = 0; i < n; ++i)
            co_await ring.co_write(asio::buffer(msg));
        } else {
          for (std::uint64_t left = n; left > 0;)
            left -= co_await ring.async_write_batch(next_batch(left), asio::use_awaitable);
        }
      }());
  }
}

void flow_shmio(benchmark::State& state, session& s, const flow& fl, family f) {
  const bool async =
      f == family::shmio_async || f == family::shmio_async_batch || f == family::shmio_co;
  const bool batch = f == family::shmio_sync_batch || f == family::shmio_async_batch;
  const std::string name = s.segment_name("flow");
  shared_counters received(fl.consumers);
  control_block& c = s.ctl();
  asio::io_context io;
  // The parent holds the ring for the whole run, and ends the consumers with empty messages.
  shmio::circular_buffer ring(io.get_executor(), shmio::create_only, name, fl.node_count,
                              fl.message_size);
  for (int p = 0; p < fl.producers; ++p) {
    s.fork_child(
        [&, p](const std::function<void()>& ready) {
          place(fl, 0);
          asio::io_context cio;
          shmio::circular_buffer r(cio.get_executor(), shmio::open_only, name);
          const std::vector<std::byte> msg(fl.message_size, std::byte{1});
          ready();
          await_go(c);
          write_messages(f, share(fl, p), r, cio, msg);
          linger(c);
        },
        false);
  }
  for (int k = 0; k < fl.consumers; ++k) {
    s.fork_child(
        [&, k](const std::function<void()>& ready) {
          place(fl, 1);
          asio::io_context cio;
          shmio::circular_buffer r(cio.get_executor(), shmio::open_only, name);
          std::vector<std::byte> msg(fl.message_size);
          std::uint64_t got = 0;
          bool stopped = false;
          auto count = [&](std::span<const std::byte> m) {
            if (m.empty()) {
              stopped = true;
              throw stop_batch{};
            }
            ++got;
          };
          ready();
          if (!async && !batch) {
            while (r.read(asio::buffer(msg), forever) != 0)
              received.add(k, 1);
            return;
          }
          if (!async) {
            while (!stopped) {
              got = 0;
              try {
                r.read_batch_in_place(count, batch_messages, forever);
              } catch (const stop_batch&) {
              }
              received.add(k, got);
            }
            return;
          }
          run_child_coroutine(cio, [&]() -> asio::awaitable<void> {
            if (!batch) {
              for (;;) {
                const std::size_t n =
                    f == family::shmio_co
                        ? co_await r.co_read(asio::buffer(msg))
                        : co_await r.async_read(asio::buffer(msg), asio::use_awaitable);
                if (n == 0) co_return;
                received.add(k, 1);
              }
            }
            while (!stopped) {
              got = 0;
              try {
                co_await r.async_read_batch_in_place(count, batch_messages, asio::use_awaitable);
              } catch (const std::system_error& e) {
                if (!stopped) throw;  // errc::callback_failed from our stop_batch is the end
              }
              received.add(k, got);
            }
          }());
        },
        false);
  }
  s.start_children();
  for (auto _ : state) {
    const auto start = clock_type::now();
    c.ping.store(1, std::memory_order_release);
    state.SetIterationTime(wait_until(s, start, [&] { return received.sum() >= fl.messages; }));
  }
  s.stop_children([&] {
    for (int k = 0; k < fl.consumers; ++k)
      ring.write(asio::const_buffer(), 100ms);  // an empty message ends a consumer
  });
}

// ---- the 1p1c flows, interleaved ------------------------------------------------------------

constexpr std::uint64_t flow_pair_block = 200'000;  // messages per block
constexpr int flow_pair_rounds = 5;                 // timed rounds, after one warm-up round
constexpr family paired_flows[] = {
    family::spin_ring,        family::node_ring_release, family::node_ring_parkable,
    family::node_ring_claims, family::node_ring_atomics, family::ring_view_direct,
    family::co_node_floor,    family::shmio_sync,        family::shmio_async,
    family::shmio_co,         family::shmio_sync_batch,  family::shmio_async_batch,
    family::shmio_sync_spsc,  family::shmio_co_spsc};
constexpr int paired_count = static_cast<int>(std::size(paired_flows));

/// The bare rings of the flow pairs, made before the fork (shared anonymous memory).
struct bare_rings {
  spin_ring spin;
  node_ring release;
  node_ring parkable;
  node_ring claims;
  node_ring atomics;
  bare_rings(std::size_t nodes, std::size_t payload)
      : spin(nodes, payload),
        release(nodes, payload, node_ring::kind::release),
        parkable(nodes, payload, node_ring::kind::parkable),
        claims(nodes, payload, node_ring::kind::claims),
        atomics(nodes, payload, node_ring::kind::atomics) {}
  /// The node ring family `f` moves its messages through; null for the other families.
  node_ring* node_of(family f) noexcept {
    switch (f) {
      case family::node_ring_release:
        return &release;
      case family::node_ring_parkable:
        return &parkable;
      case family::node_ring_claims:
        return &claims;
      case family::node_ring_atomics:
        return &atomics;
      default:
        return nullptr;
    }
  }
};

/// ring_view_direct's ring: shmio's ring algorithm on its own mapping of a circular_buffer's
/// segment, with a participant number of its own, and none of the object around it.
class direct_ring {
 public:
  explicit direct_ring(const std::string& name) {
    std::error_code ec;
    seg_ = shmio::segment::open(name, shmio::object_kind::circular_buffer, ec);
    shmio::detail::ring_geometry g;
    if (!ec) ec = shmio::detail::ring_view::validate(seg_.body(), g);
    const std::uint16_t me =
        ec ? 0
           : shmio::detail::claim_participant(seg_.native_handle(),
                                              shmio::detail::layout::max_participants, ec);
    if (ec) throw std::system_error(ec, "direct ring");
    std::construct_at(&ring_,
                      reinterpret_cast<shmio::detail::layout::ring_state*>(seg_.body().data()), g,
                      seg_.native_handle(), me);
  }
  bool try_write(const void* data, std::size_t n) noexcept {
    shmio::detail::write_claim c;
    if (ring_.try_claim_write(c) != shmio::detail::claim_status::claimed) return false;
    std::memcpy(c.data.data(), data, n);
    ring_.publish(c, static_cast<std::uint32_t>(n));
    return true;
  }
  std::size_t try_read(void* out) noexcept {
    shmio::detail::read_claim c;
    if (ring_.try_claim_read(c, ring_.node_size()) != shmio::detail::claim_status::claimed)
      return 0;
    std::memcpy(out, c.data.data(), c.data.size());
    ring_.release(c);
    return c.data.size();
  }

 private:
  shmio::segment seg_;
  shmio::detail::ring_view ring_;
};

template <class Ring>
void spin_write(Ring& r, std::uint64_t n, const std::vector<std::byte>& msg) {
  for (std::uint64_t i = 0; i < n; ++i)
    while (!r.try_write(msg.data(), msg.size())) {
    }
}

template <class Ring>
void spin_read(Ring& r, std::uint64_t n, std::vector<std::byte>& msg) {
  for (std::uint64_t i = 0; i < n; ++i)
    while (r.try_read(msg.data()) == 0) {
    }
}

// co_node_floor's operations: what an operation that returns an asio::awaitable costs a
// coroutine that co_awaits it per message (a frame, its push and pop), around the parkable node
// ring's own try. Looking again at once when it fails keeps them as cheap as a ready result.
asio::awaitable<void> co_node_write(node_ring& r, const std::vector<std::byte>& msg) {
  while (!r.try_write(msg.data(), msg.size())) {
  }
  co_return;
}

asio::awaitable<std::size_t> co_node_read(node_ring& r, std::vector<std::byte>& msg) {
  for (;;)
    if (const std::size_t n = r.try_read(msg.data())) co_return n;
}

/// Moves `n` messages of `msg`'s size from the producer's side of a bare ring or `ring` as `f`
/// does.
void produce_block(family f, std::uint64_t n, bare_rings& bare, direct_ring& direct,
                   shmio::circular_buffer& ring, shmio::circular_buffer& spsc, asio::io_context& io,
                   const std::vector<std::byte>& msg) {
  if (node_ring* r = bare.node_of(f)) return spin_write(*r, n, msg);
  if (base_of(f) != f) return write_messages(base_of(f), n, spsc, io, msg);
  switch (f) {
    case family::spin_ring:
      return spin_write(bare.spin, n, msg);
    case family::ring_view_direct:
      return spin_write(direct, n, msg);
    case family::co_node_floor:
      io.restart();
      return run_child_coroutine(io, [&]() -> asio::awaitable<void> {
        for (std::uint64_t i = 0; i < n; ++i)
          co_await co_node_write(bare.parkable, msg);
      }());
    default:
      return write_messages(f, n, ring, io, msg);
  }
}

/// The consumer's side of produce_block: takes `n` messages, counting them in `received`.
void consume_block(family f, std::uint64_t n, bare_rings& bare, direct_ring& direct,
                   shmio::circular_buffer& mpmc, shmio::circular_buffer& spsc, asio::io_context& io,
                   std::vector<std::byte>& msg, shared_counters& received) {
  shmio::circular_buffer& ring = base_of(f) != f ? spsc : mpmc;
  f = base_of(f);
  std::uint64_t got = 0;
  auto count = [&got](std::span<const std::byte>) { ++got; };
  if (node_ring* r = bare.node_of(f)) {
    spin_read(*r, n, msg);
    received.add(0, n);
    return;
  }
  switch (f) {
    case family::spin_ring:
      spin_read(bare.spin, n, msg);
      break;
    case family::ring_view_direct:
      spin_read(direct, n, msg);
      break;
    case family::co_node_floor:
      io.restart();
      run_child_coroutine(io, [&]() -> asio::awaitable<void> {
        for (std::uint64_t i = 0; i < n; ++i)
          co_await co_node_read(bare.parkable, msg);
      }());
      break;
    case family::shmio_sync:
      for (std::uint64_t i = 0; i < n; ++i)
        ring.read(asio::buffer(msg), forever);
      break;
    case family::shmio_sync_batch:
      while (got < n)
        ring.read_batch_in_place(
            count, static_cast<std::size_t>(std::min<std::uint64_t>(n - got, batch_messages)),
            forever);
      break;
    default:
      io.restart();
      run_child_coroutine(io, [&]() -> asio::awaitable<void> {
        if (f == family::shmio_async) {
          for (std::uint64_t i = 0; i < n; ++i)
            co_await ring.async_read(asio::buffer(msg), asio::use_awaitable);
        } else if (f == family::shmio_co) {
          for (std::uint64_t i = 0; i < n; ++i)
            co_await ring.co_read(asio::buffer(msg));
        } else {
          while (got < n)
            co_await ring.async_read_batch_in_place(
                count, static_cast<std::size_t>(std::min<std::uint64_t>(n - got, batch_messages)),
                asio::use_awaitable);
        }
      }());
  }
  received.add(0, n);
}

void flow_pairs(benchmark::State& state, session& s) {
  const flow fl;  // 1p1c, 64-byte messages, 256 nodes
  bare_rings bare(fl.node_count, fl.message_size);
  shared_counters received(1);
  control_block& c = s.ctl();
  const std::string name = s.segment_name("pairs");
  asio::io_context io;
  shmio::circular_buffer ring(io.get_executor(), shmio::create_only, name, fl.node_count,
                              fl.message_size);
  const std::string spsc_name = s.segment_name("pairs-spsc");
  shmio::circular_buffer spsc(io.get_executor(), shmio::create_only, spsc_name, fl.node_count,
                              fl.message_size, shmio::ring_mode::spsc);
  // Block b (from 1) is announced by storing its family in ctl().count, then b in ctl().ping;
  // ctl().stop ends both children. Each side waits for the next block yielding, not spinning.
  auto next_block = [&c](std::uint32_t b) {
    for (;;) {
      if (c.stop.load(std::memory_order_acquire)) return false;
      if (c.ping.load(std::memory_order_acquire) >= b) return true;
      ::sched_yield();
    }
  };
  auto family_of_block = [&c] { return paired_flows[c.count.load(std::memory_order_acquire)]; };
  s.fork_child(
      [&](const std::function<void()>& ready) {
        place(fl, 0);
        asio::io_context cio;
        shmio::circular_buffer r(cio.get_executor(), shmio::open_only, name);
        shmio::circular_buffer one(cio.get_executor(), shmio::open_only, spsc_name);
        direct_ring direct(name);
        const std::vector<std::byte> msg(fl.message_size, std::byte{1});
        ready();
        for (std::uint32_t b = 1; next_block(b); ++b)
          produce_block(family_of_block(), flow_pair_block, bare, direct, r, one, cio, msg);
      },
      false);
  s.fork_child(
      [&](const std::function<void()>& ready) {
        place(fl, 1);
        asio::io_context cio;
        shmio::circular_buffer r(cio.get_executor(), shmio::open_only, name);
        shmio::circular_buffer one(cio.get_executor(), shmio::open_only, spsc_name);
        direct_ring direct(name);
        std::vector<std::byte> msg(fl.message_size);
        ready();
        for (std::uint32_t b = 1; next_block(b); ++b)
          consume_block(family_of_block(), flow_pair_block, bare, direct, r, one, cio, msg,
                        received);
      },
      false);
  s.start_children();

  std::uint32_t block = 0;
  auto run_block = [&](int k) {  // returns messages per second
    const auto start = clock_type::now();
    c.count.store(static_cast<std::uint64_t>(k), std::memory_order_relaxed);
    c.ping.store(++block, std::memory_order_release);  // publishes the family with it
    const std::uint64_t target = std::uint64_t{block} * flow_pair_block;
    return static_cast<double>(flow_pair_block) /
           wait_until(s, start, [&] { return received.sum() >= target; });
  };
  std::vector<double> rates[paired_count], over_spin[paired_count];
  for (auto _ : state) {
    for (int k = 0; k < paired_count; ++k)
      run_block(k);  // warm-up round
    for (int round = 0; round < flow_pair_rounds; ++round) {
      double rate[paired_count];
      for (int i = 0; i < paired_count; ++i) {
        // Backwards every other round: each family then follows more than one other.
        const int step = round % 2 == 0 ? i : paired_count - i;
        const int k = (round + step) % paired_count;
        rate[k] = run_block(k);
        rates[k].push_back(rate[k]);
      }
      for (int k = 0; k < paired_count; ++k)
        over_spin[k].push_back(rate[k] / rate[0]);
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  for (int k = 0; k < paired_count; ++k) {
    const std::string fam = name_of(paired_flows[k]);
    state.counters[fam + "_rate"] = median(rates[k]);
    if (k != 0) state.counters[fam + "_over_spin"] = median(over_spin[k]);
  }
  s.stop_children({});
}

void bm_flow(benchmark::State& state, family f, flow fl) {
  guarded(state, [&] {
    session s(placement::split);
    switch (f) {
      case family::spin_ring:
        return flow_spin(state, s, fl);
      case family::asio_local_stream:
        return flow_stream(state, s, fl);
      case family::shmio_sync:
      case family::shmio_async:
      case family::shmio_sync_batch:
      case family::shmio_async_batch:
      case family::shmio_co:
        return flow_shmio(state, s, fl, f);
      case family::node_ring_release:
      case family::node_ring_parkable:
      case family::node_ring_claims:
      case family::node_ring_atomics:
      case family::ring_view_direct:
      case family::co_node_floor:
      case family::shmio_sync_spsc:
      case family::shmio_co_spsc:
        throw std::logic_error("this family runs only in BM_ring_flow_pairs");
    }
  });
  state.SetItemsProcessed(static_cast<std::int64_t>(fl.messages) * state.iterations());
  state.SetBytesProcessed(static_cast<std::int64_t>(fl.messages * fl.message_size) *
                          state.iterations());
}

// ---- one process -----------------------------------------------------------------------------

void bm_local(benchmark::State& state, bool async) {
  guarded(state, [&] {
    const std::string name = "shmio-bench." + std::to_string(::getpid()) + ".local";
    asio::io_context io;
    shmio::circular_buffer ring(io.get_executor(), shmio::create_only, name, 64, small_message);
    std::array<std::byte, small_message> out{}, in{};
    if (!async) {
      warm_up_then_measure(state, [&] {
        ring.write(asio::buffer(out), 0ms);
        ring.read(asio::buffer(in), 0ms);
      });
      return;
    }
    std::exception_ptr failure;
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          batch_timer bt(state);
          bt.start();
          for (auto _ : state) {
            co_await ring.async_write(asio::buffer(out), asio::use_awaitable);
            co_await ring.async_read(asio::buffer(in), asio::use_awaitable);
            bt.tick();
          }
          bt.report(state);
        },
        [&](std::exception_ptr e) { failure = e; });
    io.run();
    if (failure) std::rethrow_exception(failure);
  });
  state.SetItemsProcessed(state.iterations());
}

void register_all() {
  const family all[] = {family::spin_ring, family::asio_local_stream, family::shmio_sync,
                        family::shmio_async};
  const std::pair<placement, const char*> placements[] = {{placement::split, "split"},
                                                          {placement::same, "same"}};
  for (family f : all)
    for (const auto& [p, pname] : placements)
      for (std::size_t size : roundtrip_sizes) {
        if (f == family::spin_ring && p == placement::same) continue;  // measures time slices
        if (p == placement::same && size != small_message) continue;
        const std::string name = std::string("BM_ring_roundtrip/") + name_of(f) + "/" + pname +
                                 "/" + std::to_string(size);
        auto* b = benchmark::RegisterBenchmark(
            name.c_str(),
            [f = f, p = p, size](benchmark::State& st) { bm_roundtrip(st, f, p, size); });
        b->UseRealTime()->Unit(benchmark::kNanosecond);
        if (g_fixed_round_trips > 0) b->Iterations(g_fixed_round_trips);
      }

  struct shape {
    int producers, consumers;
  };
  const shape shapes[] = {{1, 1}, {2, 2}, {4, 4}};
  const family flows[] = {family::spin_ring,        family::asio_local_stream,
                          family::shmio_sync,       family::shmio_async,
                          family::shmio_sync_batch, family::shmio_async_batch};
  for (family f : flows)
    for (const shape& sh : shapes) {
      const bool single = sh.producers == 1 && sh.consumers == 1;
      if (!single && (f == family::spin_ring || f == family::asio_local_stream)) continue;
      flow fl;
      fl.producers = sh.producers;
      fl.consumers = sh.consumers;
      fl.messages = f == family::spin_ring ? 10'000'000 : 1'000'000;
      const std::string name = std::string("BM_ring_throughput/") + name_of(f) + "/" +
                               std::to_string(sh.producers) + "p" + std::to_string(sh.consumers) +
                               "c";
      benchmark::RegisterBenchmark(name.c_str(),
                                   [f, fl](benchmark::State& st) { bm_flow(st, f, fl); })
          ->UseManualTime()
          ->Iterations(1)
          ->Unit(benchmark::kMillisecond);
    }

  benchmark::RegisterBenchmark("BM_ring_flow_pairs/1p1c",
                               [](benchmark::State& st) {
                                 guarded(st, [&] {
                                   session s(placement::split);
                                   flow_pairs(st, s);
                                 });
                               })
      ->Iterations(1)
      ->Unit(benchmark::kMillisecond);

  for (family f : all) {
    flow fl;
    fl.message_size = big_message;
    fl.messages = 2000;
    fl.node_count = 8;
    const std::string name = std::string("BM_ring_bandwidth/") + name_of(f);
    benchmark::RegisterBenchmark(name.c_str(),
                                 [f, fl](benchmark::State& st) { bm_flow(st, f, fl); })
        ->UseManualTime()
        ->Iterations(1)
        ->Unit(benchmark::kMillisecond);
  }

  benchmark::RegisterBenchmark("BM_ring_local/sync", [](benchmark::State& st) {
    bm_local(st, false);
  })->Unit(benchmark::kNanosecond);
  benchmark::RegisterBenchmark("BM_ring_local/async", [](benchmark::State& st) {
    bm_local(st, true);
  })->Unit(benchmark::kNanosecond);
}

}  // namespace

int main(int argc, char** argv) {
  return bench_main(argc, argv, register_all);
}
