// BM_roundtrip_pairs: round trips of one 64-byte message between the same two processes
// (parent on CPU 0, child on CPU 1), in alternating blocks of:
//   line        the bare floor: one cache line per direction, busy-spun (a counter written by
//               one side, waited for by the other)
//   spin_ring   two bare spin rings (support.hpp), busy-spun
//   sync        two circular_buffers, blocking write() / read()
//   co_await    the same, co_await async_write() / async_read() with use_awaitable (the default
//               token path: a ready result goes through the scheduler)
//   co_fast     the same, co_await co_write() / co_read() (the fast coroutine forms)
//   post_floor  the floor of any async operation that keeps Asio's contract in Asio 1.22: the
//               spin rings again, from coroutines that pay what such an operation cannot avoid
//               (the write's ready completion is posted, co_await asio::post; the read looks
//               once, then through the executor, one co_await asio::post per look), and
//               nothing else
//   rpc_plain   an rpc_buffer call: the parent (opener) co_awaits async_request("p", ...) with
//               use_awaitable, the child's (owner's) plain-function handler echoes, run inline
//               as the request is read
//   rpc_coroutine  the same with a coroutine handler ("c")
//   rpc_in_place   the call made in place (async_request("i", request, reply buffer)) to an
//               in-place handler (rpc_in_place_handler), run inline
//   sync_spsc, co_fast_spsc  sync and co_fast through two single-writer rings (ring_mode::spsc)
// Every other block is a line block: each family's block is compared with the line blocks on
// either side, because the cache-line floor moves between ~100 ns and ~1 µs when the host moves
// a vCPU, sometimes within seconds; only adjacent blocks compare. The order of the families
// rotates every round.
//
// Counters: <family>_over_line (the median over blocks of the block's median round trip over
// the mean of its two line neighbours' medians), <family>_median_ns (the median over blocks of
// the block's median), and for co_await and co_fast <family>_p99_over_median (over all their
// round trips: the tail).
#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/use_awaitable.hpp>
#include <atomic>
#include <cstring>
#include <shmio/shmio.hpp>
#include <string>
#include <vector>

#include "support.hpp"

namespace {

using namespace std::chrono_literals;
using namespace shmio_bench;

constexpr std::size_t message = 64;
constexpr int block_round_trips = 2000;
constexpr int rounds = 15;  // timed, after one warm-up round
constexpr auto forever = std::chrono::milliseconds::max();

enum family : int {
  line,
  spin_ring_family,
  sync,
  co_await_family,
  co_fast,
  post_floor,
  rpc_plain,
  rpc_coroutine,
  rpc_in_place,
  sync_spsc,
  co_fast_spsc,
  family_count
};
const char* name_of(int f) {
  static const char* names[] = {"line",         "spin_ring",  "sync",        "co_await",
                                "co_fast",      "post_floor", "rpc_plain",   "rpc_coroutine",
                                "rpc_in_place", "sync_spsc",  "co_fast_spsc"};
  return names[f];
}

// post_floor's write and read of one message through a spin ring (see the header comment).
asio::awaitable<void> posted_write(spin_ring& ring, const std::byte* data, std::size_t n) {
  while (!ring.try_write(data, n)) {
  }
  co_await asio::post(asio::use_awaitable);
}
asio::awaitable<std::size_t> posted_read(spin_ring& ring, std::byte* out) {
  for (;;) {
    if (const std::size_t n = ring.try_read(out)) co_return n;
    co_await asio::post(asio::use_awaitable);
    if (g_child_exited) throw_child_gone();
  }
}

// Shared between the two processes (MAP_SHARED, made before the fork).
struct shared_lines {
  alignas(64) std::atomic<std::uint64_t> block{0};  // announces block b (from 1)
  std::atomic<int> family{0};                       // of the announced block
  alignas(64) std::atomic<std::uint64_t> ping{0};   // the line family's two lines
  alignas(64) std::atomic<std::uint64_t> pong{0};
  alignas(64) std::atomic<std::uint64_t> done{0};  // the child finished block `done`
};

shared_lines* map_lines() {
  void* m = ::mmap(nullptr, sizeof(shared_lines), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) throw_errno("mmap");
  return new (m) shared_lines;
}

// The child's side of one block: echoes block_round_trips messages.
void serve_block(int f, shared_lines& l, spin_ring& to_child, spin_ring& to_parent,
                 shmio::circular_buffer& mpmc_ping, shmio::circular_buffer& mpmc_pong,
                 shmio::circular_buffer& spsc_ping, shmio::circular_buffer& spsc_pong,
                 asio::io_context& io, std::vector<std::byte>& buf, int& served) {
  const bool spsc = f == sync_spsc || f == co_fast_spsc;
  shmio::circular_buffer& ping = spsc ? spsc_ping : mpmc_ping;
  shmio::circular_buffer& pong = spsc ? spsc_pong : mpmc_pong;
  if (f == sync_spsc) f = sync;
  if (f == co_fast_spsc) f = co_fast;
  switch (f) {
    case rpc_plain:
    case rpc_coroutine:
    case rpc_in_place:
      // The channel's handlers count what they served; the io_context runs until the block's.
      served = 0;
      io.restart();
      while (served < block_round_trips)
        if (io.run_one_for(1s) == 0 && g_child_exited) return;
      return;
    case line:
      for (std::uint64_t i = 1; i <= block_round_trips; ++i) {
        // acquire/release: the value is the message; each side waits for the other's store.
        const std::uint64_t base = l.pong.load(std::memory_order_relaxed);
        while (l.ping.load(std::memory_order_acquire) != base + 1) {
        }
        l.pong.store(base + 1, std::memory_order_release);
      }
      return;
    case spin_ring_family:
      for (int i = 0; i < block_round_trips; ++i) {
        std::size_t n;
        while ((n = to_child.try_read(buf.data())) == 0) {
        }
        while (!to_parent.try_write(buf.data(), n)) {
        }
      }
      return;
    case sync:
      for (int i = 0; i < block_round_trips; ++i) {
        const std::size_t n = ping.read(asio::buffer(buf), forever);
        pong.write(asio::buffer(buf.data(), n), forever);
      }
      return;
    default:
      io.restart();
      // Until the block is served, not until `io` runs out of work: the rpc_buffer's loops
      // keep it busy for ever.
      asio::co_spawn(
          io,
          [&, f]() -> asio::awaitable<void> {
            for (int i = 0; i < block_round_trips; ++i) {
              if (f == post_floor) {
                const std::size_t n = co_await posted_read(to_child, buf.data());
                co_await posted_write(to_parent, buf.data(), n);
              } else if (f == co_fast) {
                const std::size_t n = co_await ping.co_read(asio::buffer(buf));
                co_await pong.co_write(asio::buffer(buf.data(), n));
              } else {
                const std::size_t n =
                    co_await ping.async_read(asio::buffer(buf), asio::use_awaitable);
                co_await pong.async_write(asio::buffer(buf.data(), n), asio::use_awaitable);
              }
            }
          },
          [&io](std::exception_ptr e) {
            io.stop();
            if (e) std::rethrow_exception(e);
          });
      io.run();
  }
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

void roundtrip_pairs(benchmark::State& state, session& s) {
  shared_lines& l = *map_lines();
  spin_ring to_child(8, message), to_parent(8, message);
  const std::string ping_name = s.segment_name("ping");
  const std::string pong_name = s.segment_name("pong");
  s.pin_parent();
  const std::string rpc_name = s.segment_name("rpc");
  s.fork_child([&](const std::function<void()>& ready) {
    asio::io_context io;
    shmio::circular_buffer ping(io.get_executor(), shmio::open_only, ping_name);
    shmio::circular_buffer pong(io.get_executor(), shmio::open_only, pong_name);
    shmio::circular_buffer ping1(io.get_executor(), shmio::open_only, ping_name + "-spsc");
    shmio::circular_buffer pong1(io.get_executor(), shmio::open_only, pong_name + "-spsc");
    std::vector<std::byte> buf(message);
    int served = 0;
    shmio::rpc_methods methods;
    methods.add("p", [&served](std::uint64_t, std::span<const std::byte> in) {
      ++served;
      return std::vector<std::byte>(in.begin(), in.end());
    });
    methods.add(
        "c",
        [&served](std::uint64_t,
                  std::span<const std::byte> in) -> asio::awaitable<std::vector<std::byte>> {
          ++served;
          co_return std::vector<std::byte>(in.begin(), in.end());
        });
    methods.add(
        "i", shmio::rpc_in_place_handler(
                 [&served](std::uint64_t, std::span<const std::byte> in, shmio::rpc_reply& reply) {
                   ++served;
                   reply.append(in);
                 }));
    shmio::rpc_buffer server(io, shmio::create_only, rpc_name, methods);
    ready();
    for (std::uint64_t b = 1;; ++b) {
      while (l.block.load(std::memory_order_acquire) < b)
        if (s.ctl().stop.load(std::memory_order_acquire)) return;
      serve_block(l.family.load(std::memory_order_relaxed), l, to_child, to_parent, ping, pong,
                  ping1, pong1, io, buf, served);
      l.done.store(b, std::memory_order_release);
    }
  });
  asio::io_context io;
  shmio::circular_buffer ping(io.get_executor(), shmio::create_only, ping_name, 8, message);
  shmio::circular_buffer pong(io.get_executor(), shmio::create_only, pong_name, 8, message);
  shmio::circular_buffer ping1(io.get_executor(), shmio::create_only, ping_name + "-spsc", 8,
                               message, shmio::ring_mode::spsc);
  shmio::circular_buffer pong1(io.get_executor(), shmio::create_only, pong_name + "-spsc", 8,
                               message, shmio::ring_mode::spsc);
  s.start_children();
  shmio::rpc_buffer caller(io, shmio::open_only, rpc_name);

  std::vector<std::byte> out(message, std::byte{1}), in(message);
  std::vector<double> rtt(block_round_trips);
  std::uint64_t block = 0;
  // Runs one block of family f; returns its round trips in ns (rtt).
  auto run_block = [&](int f) {
    l.family.store(f, std::memory_order_relaxed);
    l.block.store(++block, std::memory_order_release);  // publishes the family with it
    const bool spsc = f == sync_spsc || f == co_fast_spsc;
    shmio::circular_buffer& to = spsc ? ping1 : ping;
    shmio::circular_buffer& from = spsc ? pong1 : pong;
    if (f == sync_spsc) f = sync;
    if (f == co_fast_spsc) f = co_fast;
    auto timed = [&](int i, auto&& one) {
      const auto t0 = clock_type::now();
      one();
      rtt[i] = std::chrono::duration<double, std::nano>(clock_type::now() - t0).count();
    };
    switch (f) {
      case line:
        for (int i = 0; i < block_round_trips; ++i)
          timed(i, [&] {
            const std::uint64_t next = l.ping.load(std::memory_order_relaxed) + 1;
            l.ping.store(next, std::memory_order_release);
            while (l.pong.load(std::memory_order_acquire) != next)
              if (g_child_exited) throw_child_gone();
          });
        break;
      case spin_ring_family:
        for (int i = 0; i < block_round_trips; ++i)
          timed(i, [&] {
            while (!to_child.try_write(out.data(), out.size())) {
            }
            while (to_parent.try_read(in.data()) == 0)
              if (g_child_exited) throw_child_gone();
          });
        break;
      case sync:
        for (int i = 0; i < block_round_trips; ++i)
          timed(i, [&] {
            to.write(asio::buffer(out), forever);
            while (from.read(asio::buffer(in), 1s) == 0)
              if (s.children_gone()) throw_child_gone();
          });
        break;
      default:
        io.restart();
        run_parent_coroutine(s, io, [&, f]() -> asio::awaitable<void> {
          for (int i = 0; i < block_round_trips; ++i) {
            const auto t0 = clock_type::now();
            if (f == post_floor) {
              co_await posted_write(to_child, out.data(), out.size());
              co_await posted_read(to_parent, in.data());
            } else if (f == co_fast) {
              co_await to.co_write(asio::buffer(out));
              co_await from.co_read(asio::buffer(in));
            } else if (f == rpc_in_place) {
              co_await caller.async_request("i", asio::buffer(out), asio::buffer(in),
                                            asio::use_awaitable);
            } else if (f == rpc_plain || f == rpc_coroutine) {
              in = co_await caller.async_request(f == rpc_plain ? "p" : "c", asio::buffer(out),
                                                 asio::use_awaitable);
            } else {
              co_await ping.async_write(asio::buffer(out), asio::use_awaitable);
              co_await pong.async_read(asio::buffer(in), asio::use_awaitable);
            }
            rtt[i] = std::chrono::duration<double, std::nano>(clock_type::now() - t0).count();
          }
        }());
    }
    while (l.done.load(std::memory_order_acquire) < block)
      if (s.children_gone()) throw_child_gone();
    return median_of(rtt);
  };

  std::array<std::vector<double>, family_count> ratios, medians;
  std::array<std::vector<double>, family_count> all_rtts;
  for (auto _ : state) {
    for (int f = line; f < family_count; ++f)  // warm-up round
      run_block(f);
    for (int round = 0; round < rounds; ++round) {
      double before = run_block(line);
      medians[line].push_back(before);
      for (int k = 0; k < family_count - 1; ++k) {
        const int f = 1 + (round + k) % (family_count - 1);
        const double m = run_block(f);
        if (f == co_await_family || f == co_fast || f == rpc_plain || f == rpc_coroutine ||
            f == rpc_in_place || f == co_fast_spsc)
          all_rtts[f].insert(all_rtts[f].end(), rtt.begin(), rtt.end());
        const double after = run_block(line);
        medians[line].push_back(after);
        medians[f].push_back(m);
        ratios[f].push_back(m / ((before + after) / 2));
        before = after;
      }
    }
  }
  state.counters["line_median_ns"] = median_of(medians[line]);
  for (int f = spin_ring_family; f < family_count; ++f) {
    const std::string fam = name_of(f);
    state.counters[fam + "_over_line"] = median_of(ratios[f]);
    state.counters[fam + "_median_ns"] = median_of(medians[f]);
    if (!all_rtts[f].empty()) {
      std::vector<double> v = all_rtts[f];
      std::sort(v.begin(), v.end());
      const double p50 = v[v.size() / 2];
      const double p99 = v[v.size() * 99 / 100];
      state.counters[fam + "_p99_over_median"] = p99 / p50;
    }
  }
  s.stop_children([] {});  // the child looks at stop while it waits for a block
  ::munmap(&l, sizeof(shared_lines));
}

void register_all() {
  benchmark::RegisterBenchmark("BM_roundtrip_pairs/64",
                               [](benchmark::State& st) {
                                 std::string error;
                                 try {
                                   session s(placement::split);
                                   roundtrip_pairs(st, s);
                                 } catch (const std::exception& e) {
                                   error = e.what();
                                 }
                                 if (!error.empty()) st.SkipWithError(error.c_str());
                               })
      ->Iterations(1)
      ->Unit(benchmark::kMillisecond);
}

}  // namespace

int main(int argc, char** argv) {
  return bench_main(argc, argv, register_all);
}
