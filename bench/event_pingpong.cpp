// Cross-process round trip ("ping-pong") benchmark: shmio named events against the floor and the
// alternatives, all in one binary so one run gives every number (this VM's timings drift by
// tens of percent between runs; compare within a run, as ratios; see bench/ratios.py).
//
// Each benchmark forks a child at setup. The child runs the echo side, the parent (this
// process, Google Benchmark's thread) measures: one iteration = ping the child, wait for its
// pong. Families:
//
//   spin_floor         two std::atomic<uint32_t> in a MAP_SHARED anonymous mapping, busy spin
//   eventfd_blocking   two eventfds, blocking write/read: the bare kernel wake-up
//   epoll_eventfd      two non-blocking eventfds, each side epoll_wait()s on its own, then reads
//                      it: the bare wake-up through epoll, with no library at all. Three system
//                      calls per side (write, epoll_wait, read), the fewest any wait that runs
//                      in a reactor (an io_context) needs, so the floor for the parked async
//                      families; Asio adds a fourth, its re-arm (epoll_ctl) or its
//                      speculative read (see docs/performance.md)
//   asio_local_stream  a local::stream_protocol socket pair, 64 bytes each way, co_await
//   shmio_sync         two auto-reset shmio::named_events, blocking wait(), default strategy
//   shmio_async        the same, parent and child co_await async_wait(), default (hybrid)
//   shmio_async_park   as shmio_async with wait_strategy::park_only() on both sides
//   shmio_co_wait      as shmio_async with the fast coroutine form, co_await co_wait(), on both
//                      sides: a set event is taken in the coroutine, with no trip through the
//                      scheduler (async_wait keeps Asio's rule and posts a ready completion)
//
// and two placements: split (parent on CPU 0, child on CPU 1) and same (both on CPU 0).
// Every process pins itself before it creates or opens anything, as a pinned deployment would.
//
// Diagnostic families, not targets (see docs/performance.md):
//
//   shmio_sync_pinlate, shmio_async_pinlate   as shmio_sync / shmio_async, but each process
//       creates or opens its events while it may still run on every CPU and pins itself only
//       afterwards. When shmio decided at construction whether to spin at all from the
//       process's own affinity mask, this showed what the default strategy does when it does
//       spin. It now decides from the machine's online CPUs (spin_policy), which pinning does
//       not change: these families take the path of the pinned ones, and their rows are a
//       check that they match.
//
// The spin floor on a single CPU makes progress only when the scheduler preempts the spinner,
// so spin_floor/same measures the scheduler's time slice, not a cache line. It runs a fixed,
// small number of iterations and is reported but never used as a denominator.
//
// Output: Google Benchmark's real time per round trip (UseRealTime; items_per_second = round
// trips per second) and the counter median_ns (see batch_timer). bench/ratios.py turns a JSON
// output file into the tables and ratios of docs/performance.md. The minimum time defaults to
// 0.5 s per benchmark, and repetitions are randomly interleaved by default (see main()).
// --roundtrips=N (ours, for `perf stat`; see bench/syscalls.py) runs exactly N timed round trips
// after N/10 warm-up ones in every benchmark (spin_floor/same excepted).
//
// BM_parked_pairs/<placement> measures the parked comparison a second way. The families above
// run one after the other, seconds to minutes apart, and on a shared VM the kernel's wake-up
// latency moves by tens of percent in that time: as much as the ratio being judged. Here one
// child serves eventfd_blocking, epoll_eventfd and shmio_async_park at once (a thread each), and
// the parent alternates between them in blocks of pair_block round trips, rotating the order
// every round. Per round it divides the block medians; the counters are the medians over rounds
// of those paired ratios (park_over_eventfd, epoll_over_eventfd, park_over_epoll) and of each
// mechanism's block medians (eventfd_ns, epoll_ns, park_ns).
//
// BM_syscall/<what> (one process, no wake-up) prices the system calls a parked round trip is
// made of on this machine: on a virtual machine a system call can cost a microsecond, and a
// parked wait makes four per side where a blocking eventfd makes two.
//
// Cleanup: the child gets PR_SET_PDEATHSIG(SIGKILL); teardown asks it to stop, kills it if it
// has not exited within two seconds, reaps it, and removes the events' segments by name, also
// when setup or the run failed. Segment names carry the parent's pid. A run killed from outside
// may leave /dev/shm/shmio.u$(id -u).shmio-bench.* behind.
#include "support.hpp"

#include <benchmark/benchmark.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <asio/awaitable.hpp>
#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/local/stream_protocol.hpp>
#include <asio/read.hpp>
#include <asio/signal_set.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <optional>
#include <shmio/shmio.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using namespace shmio_bench;

enum class family {
  spin_floor,
  eventfd_blocking,
  epoll_eventfd,
  asio_local_stream,
  shmio_sync,
  shmio_async,
  shmio_async_park,
  shmio_co_wait,
  shmio_sync_pinlate,
  shmio_async_pinlate,
};

/// spin_floor/same: each round trip waits for a preemption; keep it short.
constexpr int spin_floor_same_iterations = 32;
constexpr std::size_t stream_payload = 64;
constexpr std::uint32_t spin_stop_value = 0xffffffffu;

// ---- spin_floor ------------------------------------------------------------------------------

void run_spin_floor(benchmark::State& state, session& s) {
  control_block& c = s.ctl();
  s.pin_parent();
  s.fork_child([&c](const std::function<void()>& ready) {
    ready();
    std::uint32_t last = 0;
    for (;;) {
      std::uint32_t v;
      while ((v = c.ping.load(std::memory_order_acquire)) == last) {
      }
      if (v == spin_stop_value) return;
      c.pong.store(v, std::memory_order_release);
      last = v;
    }
  });
  s.start_children();
  std::uint32_t seq = 0;
  warm_up_then_measure(state, [&] {
    if (++seq == spin_stop_value) seq = 1;
    c.ping.store(seq, std::memory_order_release);
    while (c.pong.load(std::memory_order_acquire) != seq)
      if (g_child_exited) throw_child_gone();
  });
  s.stop_children([&c] { c.ping.store(spin_stop_value, std::memory_order_release); });
}

// ---- eventfd_blocking ------------------------------------------------------------------------

void efd_signal(int fd) {
  const std::uint64_t one = 1;
  while (::write(fd, &one, sizeof one) < 0)
    if (errno != EINTR) throw_errno("eventfd write");
}

/// Blocks until `fd` is signalled. `check` runs after an interrupted read.
template <class Check>
void efd_wait(int fd, Check&& check) {
  std::uint64_t v;
  while (::read(fd, &v, sizeof v) < 0) {
    if (errno != EINTR) throw_errno("eventfd read");
    check();
  }
}

void run_eventfd(benchmark::State& state, session& s) {
  control_block& c = s.ctl();
  const int ping = ::eventfd(0, EFD_CLOEXEC);
  if (ping < 0) throw_errno("eventfd");
  s.own_fd(ping);
  const int pong = ::eventfd(0, EFD_CLOEXEC);
  if (pong < 0) throw_errno("eventfd");
  s.own_fd(pong);
  s.pin_parent();
  s.fork_child([&c, ping, pong](const std::function<void()>& ready) {
    ready();
    for (;;) {
      efd_wait(ping, [] {});
      if (c.stop.load(std::memory_order_acquire)) return;
      efd_signal(pong);
    }
  });
  s.start_children();
  warm_up_then_measure(state, [&] {
    efd_signal(ping);
    efd_wait(pong, [] {
      if (g_child_exited) throw_child_gone();
    });
  });
  s.stop_children([ping] { efd_signal(ping); });
}

// ---- epoll_eventfd ---------------------------------------------------------------------------

/// An epoll instance watching one non-blocking eventfd, level-triggered (so no re-arm).
class epoll_bell {
 public:
  explicit epoll_bell(int fd) : fd_(fd), ep_(::epoll_create1(EPOLL_CLOEXEC)) {
    if (ep_ < 0) throw_errno("epoll_create1");
    epoll_event ev{};
    ev.events = EPOLLIN;
    if (::epoll_ctl(ep_, EPOLL_CTL_ADD, fd_, &ev) != 0) {
      ::close(ep_);
      throw_errno("epoll_ctl");
    }
  }
  ~epoll_bell() { ::close(ep_); }
  epoll_bell(const epoll_bell&) = delete;
  epoll_bell& operator=(const epoll_bell&) = delete;
  /// Sleeps in epoll_wait until the eventfd is signalled, then reads it (resets it to 0).
  template <class Check>
  void wait(Check&& check) {
    epoll_event ev;
    for (;;) {
      const int n = ::epoll_wait(ep_, &ev, 1, -1);
      if (n < 0 && errno != EINTR) throw_errno("epoll_wait");
      if (n <= 0) {
        check();
        continue;
      }
      std::uint64_t v;
      if (::read(fd_, &v, sizeof v) == sizeof v) return;
      if (errno != EAGAIN && errno != EINTR) throw_errno("eventfd read");
    }
  }

 private:
  int fd_;
  int ep_;
};

void run_epoll_eventfd(benchmark::State& state, session& s) {
  control_block& c = s.ctl();
  const int ping = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (ping < 0) throw_errno("eventfd");
  s.own_fd(ping);
  const int pong = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (pong < 0) throw_errno("eventfd");
  s.own_fd(pong);
  s.pin_parent();
  s.fork_child([&c, ping, pong](const std::function<void()>& ready) {
    epoll_bell bell(ping);  // the child's own epoll instance, made after the fork
    ready();
    for (;;) {
      bell.wait([] {});
      if (c.stop.load(std::memory_order_acquire)) return;
      efd_signal(pong);
    }
  });
  epoll_bell bell(pong);
  s.start_children();
  warm_up_then_measure(state, [&] {
    efd_signal(ping);
    bell.wait([] {
      if (g_child_exited) throw_child_gone();
    });
  });
  s.stop_children([ping] { efd_signal(ping); });
}

// ---- asio_local_stream ----------------------------------------------------------------------

using stream_socket = asio::local::stream_protocol::socket;

asio::awaitable<void> stream_echo(stream_socket& sock) {
  std::array<char, stream_payload> buf{};
  try {
    for (;;) {
      co_await asio::async_read(sock, asio::buffer(buf), asio::use_awaitable);
      co_await asio::async_write(sock, asio::buffer(buf), asio::use_awaitable);
    }
  } catch (const std::system_error&) {
    // EOF or reset: the parent closed its end, we are done
  }
}

void run_asio_stream(benchmark::State& state, session& s) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) throw_errno("socketpair");
  s.own_fd(fds[0]);
  const int parent_fd = fds[1];  // handed to an asio socket below, which then owns it
  s.pin_parent();
  s.fork_child([fds](const std::function<void()>& ready) {
    ::close(fds[1]);
    asio::io_context io;
    stream_socket sock(io);
    sock.assign(asio::local::stream_protocol(), fds[0]);
    asio::co_spawn(io, stream_echo(sock), [](std::exception_ptr e) {
      if (e) std::rethrow_exception(e);
    });
    ready();
    io.run();
  });
  asio::io_context io;
  stream_socket sock(io);
  sock.assign(asio::local::stream_protocol(), parent_fd);
  s.start_children();
  auto body = [&]() -> asio::awaitable<void> {
    std::array<char, stream_payload> out{}, in{};
    auto round_trip = [&]() -> asio::awaitable<void> {
      co_await asio::async_write(sock, asio::buffer(out), asio::use_awaitable);
      co_await asio::async_read(sock, asio::buffer(in), asio::use_awaitable);
    };
    const warmup w;
    for (long i = 0; w.more(i); ++i)
      co_await round_trip();
    batch_timer bt(state);
    bt.start();
    for (auto _ : state) {
      co_await round_trip();
      bt.tick();
    }
    bt.report(state);
  };
  run_parent_coroutine(s, io, body());
  s.stop_children([&sock] {
    std::error_code ignored;
    sock.shutdown(stream_socket::shutdown_both, ignored);
  });
}

// ---- shmio -----------------------------------------------------------------------------------

/// The child's side of an async event ping-pong: answers each `ping` with a `pong` until told to
/// stop. A coroutine function, not a lambda: a lambda coroutine refers to its closure, which
/// would be gone once spawn_async_echo returns.
asio::awaitable<void> async_echo(shmio::named_event& ping, shmio::named_event& pong,
                                 control_block& c, bool fast) {
  for (;;) {
    if (fast)
      co_await ping.co_wait();
    else
      co_await ping.async_wait(asio::use_awaitable);
    if (c.stop.load(std::memory_order_acquire)) co_return;
    pong.set();
  }
}

/// Runs async_echo on `io` (once `io` runs); an exception it throws leaves io.run().
void spawn_async_echo(asio::io_context& io, shmio::named_event& ping, shmio::named_event& pong,
                      control_block& c, bool fast = false) {
  asio::co_spawn(io, async_echo(ping, pong, c, fast), [](std::exception_ptr e) {
    if (e) std::rethrow_exception(e);
  });
}

struct shmio_options {
  bool async = false;
  shmio::wait_strategy strategy{};
  bool pin_late = false;  // create/open the events before pinning (see the header comment)
  bool fast = false;      // co_wait() where async_wait(use_awaitable)
};

void run_shmio(benchmark::State& state, session& s, shmio_options opt) {
  control_block& c = s.ctl();
  const std::string ping_name = s.segment_name("ping");
  const std::string pong_name = s.segment_name("pong");
  if (!opt.pin_late) s.pin_parent();

  s.fork_child(
      [&](const std::function<void()>& ready) {
        asio::io_context io;
        shmio::named_event ping(io.get_executor(), shmio::open_only, ping_name,
                                shmio::event_mode::auto_reset, opt.strategy);
        shmio::named_event pong(io.get_executor(), shmio::open_only, pong_name,
                                shmio::event_mode::auto_reset, opt.strategy);
        s.pin_child();  // a no-op unless pin_late: fork_child pinned us already
        if (!opt.async) {
          ready();
          for (;;) {
            if (!ping.wait(1s)) continue;  // the parent's death kills us (PDEATHSIG)
            if (c.stop.load(std::memory_order_acquire)) return;
            pong.set();
          }
        }
        spawn_async_echo(io, ping, pong, c, opt.fast);
        ready();
        io.run();
      },
      !opt.pin_late);

  asio::io_context io;
  shmio::named_event ping(io.get_executor(), shmio::create_only, ping_name,
                          shmio::event_mode::auto_reset, false, opt.strategy);
  shmio::named_event pong(io.get_executor(), shmio::create_only, pong_name,
                          shmio::event_mode::auto_reset, false, opt.strategy);
  if (opt.pin_late) s.pin_parent();
  s.start_children();

  if (!opt.async) {
    warm_up_then_measure(state, [&] {
      ping.set();
      while (!pong.wait(1s))
        if (s.children_gone()) throw_child_gone();
    });
  } else {
    auto wait_pong = [&]() -> asio::awaitable<void> {
      if (opt.fast)
        co_await pong.co_wait();
      else
        co_await pong.async_wait(asio::use_awaitable);
    };
    auto body = [&]() -> asio::awaitable<void> {
      const warmup w;
      for (long i = 0; w.more(i); ++i) {
        ping.set();
        co_await wait_pong();
      }
      batch_timer bt(state);
      bt.start();
      for (auto _ : state) {
        ping.set();
        co_await wait_pong();
        bt.tick();
      }
      bt.report(state);
    };
    run_parent_coroutine(s, io, body());
  }
  // Stop the child before our handles close, so that ours are the last and remove the segments.
  s.stop_children([&ping] { ping.set(); });
}

// ---- parked_pairs -----------------------------------------------------------------------------

constexpr int pair_block = 200;  // round trips per block
constexpr int pair_rounds = 30;  // timed rounds (one block of each mechanism per round)
enum parked_mechanism { via_eventfd, via_epoll, via_shmio, mechanism_count };

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void run_parked_pairs(benchmark::State& state, session& s) {
  control_block& c = s.ctl();
  int fds[4];  // eventfd ping, eventfd pong, epoll ping, epoll pong
  for (int i = 0; i < 4; ++i) {
    fds[i] = ::eventfd(0, EFD_CLOEXEC | (i < 2 ? 0 : EFD_NONBLOCK));
    if (fds[i] < 0) throw_errno("eventfd");
    s.own_fd(fds[i]);
  }
  const std::string ping_name = s.segment_name("ping");
  const std::string pong_name = s.segment_name("pong");
  const auto park = shmio::wait_strategy::park_only();
  s.pin_parent();

  s.fork_child([&](const std::function<void()>& ready) {
    asio::io_context io;
    shmio::named_event ping(io.get_executor(), shmio::open_only, ping_name,
                            shmio::event_mode::auto_reset, park);
    shmio::named_event pong(io.get_executor(), shmio::open_only, pong_name,
                            shmio::event_mode::auto_reset, park);
    // The threads inherit the child's CPU; only the one the parent is using at the time runs.
    std::thread blocking([&c, &fds] {
      for (;;) {
        efd_wait(fds[0], [] {});
        if (c.stop.load(std::memory_order_acquire)) return;
        efd_signal(fds[1]);
      }
    });
    std::thread polling([&c, &fds] {
      epoll_bell bell(fds[2]);
      for (;;) {
        bell.wait([] {});
        if (c.stop.load(std::memory_order_acquire)) return;
        efd_signal(fds[3]);
      }
    });
    spawn_async_echo(io, ping, pong, c);
    ready();
    io.run();
    blocking.join();
    polling.join();
  });

  asio::io_context io;
  shmio::named_event ping(io.get_executor(), shmio::create_only, ping_name,
                          shmio::event_mode::auto_reset, false, park);
  shmio::named_event pong(io.get_executor(), shmio::create_only, pong_name,
                          shmio::event_mode::auto_reset, false, park);
  epoll_bell bell(fds[3]);
  s.start_children();

  auto check = [] {
    if (g_child_exited) throw_child_gone();
  };
  std::vector<double> trip(pair_block);
  // One block of round trips through `m`; returns the median round trip in ns.
  auto block = [&](parked_mechanism m) {
    auto timed = [&](int i, auto&& round_trip) {
      const auto t0 = clock_type::now();
      round_trip();
      trip[static_cast<std::size_t>(i)] =
          std::chrono::duration<double, std::nano>(clock_type::now() - t0).count();
    };
    if (m == via_eventfd) {
      for (int i = 0; i < pair_block; ++i)
        timed(i, [&] {
          efd_signal(fds[0]);
          efd_wait(fds[1], check);
        });
    } else if (m == via_epoll) {
      for (int i = 0; i < pair_block; ++i)
        timed(i, [&] {
          efd_signal(fds[2]);
          bell.wait(check);
        });
    } else {
      run_parent_coroutine(s, io, [&]() -> asio::awaitable<void> {
        for (int i = 0; i < pair_block; ++i) {
          const auto t0 = clock_type::now();
          ping.set();
          co_await pong.async_wait(asio::use_awaitable);
          trip[static_cast<std::size_t>(i)] =
              std::chrono::duration<double, std::nano>(clock_type::now() - t0).count();
        }
      }());
    }
    return median_of(trip);
  };

  std::vector<double> medians[mechanism_count];
  std::vector<double> park_over_eventfd, epoll_over_eventfd, park_over_epoll;
  for (auto _ : state) {
    for (int m = 0; m < mechanism_count; ++m)
      block(static_cast<parked_mechanism>(m));  // warm-up round, not counted
    for (int round = 0; round < pair_rounds; ++round) {
      double round_median[mechanism_count];
      for (int k = 0; k < mechanism_count; ++k) {
        const auto m = static_cast<parked_mechanism>((round + k) % mechanism_count);
        round_median[m] = block(m);
        medians[m].push_back(round_median[m]);
      }
      park_over_eventfd.push_back(round_median[via_shmio] / round_median[via_eventfd]);
      epoll_over_eventfd.push_back(round_median[via_epoll] / round_median[via_eventfd]);
      park_over_epoll.push_back(round_median[via_shmio] / round_median[via_epoll]);
    }
  }
  state.counters["eventfd_ns"] = median_of(medians[via_eventfd]);
  state.counters["epoll_ns"] = median_of(medians[via_epoll]);
  state.counters["park_ns"] = median_of(medians[via_shmio]);
  state.counters["park_over_eventfd"] = median_of(park_over_eventfd);
  state.counters["epoll_over_eventfd"] = median_of(epoll_over_eventfd);
  state.counters["park_over_epoll"] = median_of(park_over_epoll);
  s.stop_children([&] {
    efd_signal(fds[0]);
    efd_signal(fds[2]);
    ping.set();
  });
}

void bm_parked_pairs(benchmark::State& state, placement p) {
  std::string error;
  try {
    session s(p);
    run_parked_pairs(state, s);
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (!error.empty()) state.SkipWithError(error.c_str());
}

// ---- syscall costs ----------------------------------------------------------------------------

enum class syscall_probe { getppid, eventfd_write_read, epoll_ctl_mod, dgram_sendto_recvmmsg };

void bm_syscall(benchmark::State& state, syscall_probe what) {
  std::vector<int> fds;
  auto keep = [&fds](int fd) {
    if (fd < 0) throw_errno("setup");
    fds.push_back(fd);
    return fd;
  };
  try {
    const int efd = keep(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    const int ep = keep(::epoll_create1(EPOLL_CLOEXEC));
    // A datagram socket bound in the abstract namespace, rung by name from an unbound one: the
    // shape of shmio's doorbell (src/platform/doorbell_socket.cpp).
    const int bell = keep(::socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    const int sender = keep(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    const int n = std::snprintf(addr.sun_path + 1, sizeof addr.sun_path - 1,
                                "shmio-bench.%d.syscall", static_cast<int>(::getpid()));
    const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
    if (::bind(bell, reinterpret_cast<sockaddr*>(&addr), len) != 0) throw_errno("bind");
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLET;
    if (::epoll_ctl(ep, EPOLL_CTL_ADD, bell, &ev) != 0) throw_errno("epoll_ctl");
    char byte = 1;
    char bytes[16];
    iovec iov[16];
    mmsghdr msgs[16]{};
    for (int i = 0; i < 16; ++i) {
      iov[i] = {&bytes[i], 1};
      msgs[i].msg_hdr.msg_iov = &iov[i];
      msgs[i].msg_hdr.msg_iovlen = 1;
    }
    std::uint64_t v = 1;
    for (auto _ : state) {
      switch (what) {
        case syscall_probe::getppid:
          benchmark::DoNotOptimize(::syscall(SYS_getppid));
          break;
        case syscall_probe::eventfd_write_read:
          benchmark::DoNotOptimize(::write(efd, &v, sizeof v));
          benchmark::DoNotOptimize(::read(efd, &v, sizeof v));
          break;
        case syscall_probe::epoll_ctl_mod:
          benchmark::DoNotOptimize(::epoll_ctl(ep, EPOLL_CTL_MOD, bell, &ev));
          break;
        case syscall_probe::dgram_sendto_recvmmsg:
          benchmark::DoNotOptimize(::sendto(sender, &byte, 1, MSG_DONTWAIT | MSG_NOSIGNAL,
                                            reinterpret_cast<sockaddr*>(&addr), len));
          benchmark::DoNotOptimize(::recvmmsg(bell, msgs, 16, MSG_DONTWAIT, nullptr));
          break;
      }
    }
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
  for (int fd : fds)
    ::close(fd);
}

// ---- the benchmark --------------------------------------------------------------------------

void bm_roundtrip(benchmark::State& state, family f, placement p) {
  std::string error;
  try {
    session s(p);
    switch (f) {
      case family::spin_floor:
        run_spin_floor(state, s);
        break;
      case family::eventfd_blocking:
        run_eventfd(state, s);
        break;
      case family::epoll_eventfd:
        run_epoll_eventfd(state, s);
        break;
      case family::asio_local_stream:
        run_asio_stream(state, s);
        break;
      case family::shmio_sync:
        run_shmio(state, s, {false, shmio::wait_strategy::hybrid(), false});
        break;
      case family::shmio_async:
        run_shmio(state, s, {true, shmio::wait_strategy::hybrid(), false});
        break;
      case family::shmio_async_park:
        run_shmio(state, s, {true, shmio::wait_strategy::park_only(), false});
        break;
      case family::shmio_co_wait:
        run_shmio(state, s, {true, shmio::wait_strategy::hybrid(), false, true});
        break;
      case family::shmio_sync_pinlate:
        run_shmio(state, s, {false, shmio::wait_strategy::hybrid(), true});
        break;
      case family::shmio_async_pinlate:
        run_shmio(state, s, {true, shmio::wait_strategy::hybrid(), true});
        break;
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (!error.empty()) {
    state.SkipWithError(error.c_str());
    return;
  }
  state.SetItemsProcessed(state.iterations());  // items = round trips
}

void register_all() {
  struct named_family {
    family f;
    const char* name;
  };
  const named_family families[] = {
      {family::spin_floor, "spin_floor"},
      {family::eventfd_blocking, "eventfd_blocking"},
      {family::epoll_eventfd, "epoll_eventfd"},
      {family::asio_local_stream, "asio_local_stream"},
      {family::shmio_sync, "shmio_sync"},
      {family::shmio_async, "shmio_async"},
      {family::shmio_async_park, "shmio_async_park"},
      {family::shmio_co_wait, "shmio_co_wait"},
      {family::shmio_sync_pinlate, "shmio_sync_pinlate"},
      {family::shmio_async_pinlate, "shmio_async_pinlate"},
  };
  const std::pair<placement, const char*> placements[] = {{placement::split, "split"},
                                                          {placement::same, "same"}};
  for (const auto& [f, fname] : families)
    for (const auto& [p, pname] : placements) {
      const std::string name = std::string("BM_roundtrip/") + fname + "/" + pname;
      auto* b = benchmark::RegisterBenchmark(
          name.c_str(), [f = f, p = p](benchmark::State& st) { bm_roundtrip(st, f, p); });
      b->UseRealTime()->Unit(benchmark::kNanosecond);
      if (f == family::spin_floor && p == placement::same)
        b->Iterations(spin_floor_same_iterations);
      else if (g_fixed_round_trips > 0)
        b->Iterations(g_fixed_round_trips);
    }
  const std::pair<syscall_probe, const char*> probes[] = {
      {syscall_probe::getppid, "getppid"},
      {syscall_probe::eventfd_write_read, "eventfd_write_read"},
      {syscall_probe::epoll_ctl_mod, "epoll_ctl_mod"},
      {syscall_probe::dgram_sendto_recvmmsg, "dgram_sendto_recvmmsg"}};
  for (const auto& [what, wname] : probes)
    benchmark::RegisterBenchmark((std::string("BM_syscall/") + wname).c_str(),
                                 [what = what](benchmark::State& st) { bm_syscall(st, what); })
        ->Unit(benchmark::kNanosecond);
  for (const auto& [p, pname] : placements) {
    const std::string name = std::string("BM_parked_pairs/") + pname;
    benchmark::RegisterBenchmark(name.c_str(),
                                 [p = p](benchmark::State& st) { bm_parked_pairs(st, p); })
        ->Iterations(1)
        ->Unit(benchmark::kMillisecond);
  }
}

}  // namespace

int main(int argc, char** argv) {
  return shmio_bench::bench_main(argc, argv, register_all);
}
