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
//   asio_local_stream  a local::stream_protocol socket pair, 64 bytes each way, co_await
//   shmio_sync         two auto-reset shmio::named_events, blocking wait(), default strategy
//   shmio_async        the same, parent and child co_await async_wait(), default (hybrid)
//   shmio_async_park   as shmio_async with wait_strategy::park_only() on both sides
//
// and two placements: split (parent on CPU 0, child on CPU 1) and same (both on CPU 0).
// Every process pins itself before it creates or opens anything, as a pinned deployment would.
//
// Diagnostic families, not targets (see docs/performance.md):
//
//   shmio_sync_pinlate, shmio_async_pinlate   as shmio_sync / shmio_async, but each process
//       creates or opens its events while it may still run on every CPU and pins itself only
//       afterwards. shmio decides once, at construction, whether to spin at all
//       (spin_policy: usable_cpus() > 1, i.e. the process's own affinity mask), so this shows
//       what the default strategy does when it does spin.
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
// Cleanup: the child gets PR_SET_PDEATHSIG(SIGKILL); teardown asks it to stop, kills it if it
// has not exited within two seconds, reaps it, and removes the events' segments by name, also
// when setup or the run failed. Segment names carry the parent's pid. A run killed from outside
// may leave /dev/shm/shmio.u$(id -u).shmio-bench.* behind.
#include <benchmark/benchmark.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
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
#include <vector>

namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

enum class family {
  spin_floor,
  eventfd_blocking,
  asio_local_stream,
  shmio_sync,
  shmio_async,
  shmio_async_park,
  shmio_sync_pinlate,
  shmio_async_pinlate,
};
enum class placement { split, same };

constexpr int parent_cpu = 0;
int child_cpu(placement p) {
  return p == placement::split ? 1 : 0;
}

/// Round trips before timing starts: long enough for the adaptive spin to settle.
constexpr auto warmup_time = 50ms;
constexpr int warmup_min_round_trips = 4;
/// --roundtrips=N (diagnosis, e.g. under `perf stat`): every benchmark runs exactly N timed
/// round trips after exactly N/10 warm-up ones, so that counts divide by 1.1 N.
long g_fixed_round_trips = 0;

/// Decides when the warm-up is over: after warmup_time (and at least warmup_min_round_trips),
/// or after exactly N/10 round trips under --roundtrips=N.
class warmup {
 public:
  warmup() : end_(clock_type::now() + warmup_time) {}
  bool more(long done) const {
    if (g_fixed_round_trips > 0) return done < g_fixed_round_trips / 10;
    return done < warmup_min_round_trips || clock_type::now() < end_;
  }

 private:
  clock_type::time_point end_;
};
/// spin_floor/same: each round trip waits for a preemption; keep it short.
constexpr int spin_floor_same_iterations = 32;
constexpr std::size_t stream_payload = 64;

/// Shared between parent and child: MAP_SHARED | MAP_ANONYMOUS, mapped before the fork.
struct control_block {
  alignas(64) std::atomic<std::uint32_t> ping{0};
  alignas(64) std::atomic<std::uint32_t> pong{0};
  alignas(64) std::atomic<std::uint32_t> stop{0};
};
constexpr std::uint32_t spin_stop_value = 0xffffffffu;

volatile std::sig_atomic_t g_child_exited = 0;
void on_sigchld(int) {
  g_child_exited = 1;
}

[[noreturn]] void throw_errno(const char* what) {
  throw std::system_error(errno, std::system_category(), what);
}

bool pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return ::sched_setaffinity(0, sizeof set, &set) == 0;
}

void write_all(int fd, const void* data, std::size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t r = ::write(fd, p, n);
    if (r < 0) {
      if (errno == EINTR) continue;
      throw_errno("write");
    }
    p += r;
    n -= static_cast<std::size_t>(r);
  }
}

/// One forked echo process and everything that must be undone after it: the parent's CPU
/// affinity, the SIGCHLD handler, the control mapping, pipes, and named segments.
class session {
 public:
  explicit session(placement p) : placement_(p) {
    if (::sched_getaffinity(0, sizeof saved_affinity_, &saved_affinity_) != 0)
      throw_errno("sched_getaffinity");
    if (!CPU_ISSET(parent_cpu, &saved_affinity_) || !CPU_ISSET(child_cpu(p), &saved_affinity_))
      throw std::runtime_error("this benchmark needs CPUs 0 and 1");
    try {
      struct sigaction sa {};
      sa.sa_handler = on_sigchld;  // no SA_RESTART: a blocking read in the parent sees EINTR
      ::sigemptyset(&sa.sa_mask);
      if (::sigaction(SIGCHLD, &sa, &saved_sigchld_) != 0) throw_errno("sigaction");
      handler_installed_ = true;
      g_child_exited = 0;
      void* m = ::mmap(nullptr, sizeof(control_block), PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
      if (m == MAP_FAILED) throw_errno("mmap");
      ctl_ = new (m) control_block{};
      if (::pipe2(go_, O_CLOEXEC) != 0) throw_errno("pipe2");
      if (::pipe2(ready_, O_CLOEXEC) != 0) throw_errno("pipe2");
      static int counter = 0;
      prefix_ = "shmio-bench." + std::to_string(::getpid()) + "." + std::to_string(++counter);
    } catch (...) {
      release();
      throw;
    }
  }

  session(const session&) = delete;
  session& operator=(const session&) = delete;

  ~session() { release(); }

  control_block& ctl() noexcept { return *ctl_; }
  /// A unique segment name; removed at teardown whatever happened.
  std::string segment_name(std::string_view suffix) {
    segments_.push_back(prefix_ + "." + std::string(suffix));
    return segments_.back();
  }
  /// Closed in the parent at teardown (the child closes its own copies itself, or dies).
  void own_fd(int fd) { extra_fds_.push_back(fd); }

  void pin_parent() {
    if (!pin_to(parent_cpu)) throw_errno("sched_setaffinity(parent)");
  }

  /// Forks the echo process. `child(ready)` runs in it: it must call ready() once it can echo,
  /// and returns when told to stop. With pin_early, the child pins itself before `child` runs;
  /// otherwise `child` must call pin_child() itself.
  void fork_child(const std::function<void(const std::function<void()>& ready)>& child,
                  bool pin_early = true) {
    const pid_t parent = ::getpid();
    pid_t pid = ::fork();
    if (pid < 0) throw_errno("fork");
    if (pid > 0) {
      child_ = pid;
      return;
    }
    // The child: never return into Google Benchmark, never run the parent's destructors.
    ::close(go_[1]);  // so that the parent closing its end reads as EOF here
    ::close(ready_[0]);
    int code = 0;
    try {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(3);
      ::signal(SIGCHLD, SIG_DFL);
      if (pin_early && !pin_to(child_cpu(placement_))) throw_errno("sched_setaffinity(child)");
      char go = 0;
      while (::read(go_[0], &go, 1) < 0 && errno == EINTR) {
      }
      if (go != 'G') ::_exit(4);  // the parent gave up before the start
      child([this] {
        const char r = 'R';
        write_all(ready_[1], &r, 1);
      });
    } catch (const std::exception& e) {
      std::string msg = std::string("E") + e.what();
      try {
        write_all(ready_[1], msg.data(), msg.size());
      } catch (...) {
      }
      code = 2;
    } catch (...) {
      code = 2;
    }
    ::_exit(code);
  }

  void pin_child() const {
    if (!pin_to(child_cpu(placement_))) throw_errno("sched_setaffinity(child)");
  }

  /// Lets the child start, then waits until it is ready to echo. Throws if it failed.
  void start_child() {
    const char g = 'G';
    write_all(go_[1], &g, 1);
    close_fd(ready_[1]);  // so that a dead child reads as EOF
    pollfd p{ready_[0], POLLIN, 0};
    int r;
    do
      r = ::poll(&p, 1, 10'000);
    while (r < 0 && errno == EINTR);
    if (r == 0) throw std::runtime_error("child not ready within 10 s");
    char buf[512];
    ssize_t n;
    do
      n = ::read(ready_[0], buf, sizeof buf);
    while (n < 0 && errno == EINTR);
    if (n == 1 && buf[0] == 'R') return;
    if (n > 1 && buf[0] == 'E')
      throw std::runtime_error("child: " + std::string(buf + 1, static_cast<std::size_t>(n - 1)));
    throw std::runtime_error("child exited during setup");
  }

  /// True once the child has exited (reaps it).
  bool child_gone() {
    if (child_ <= 0) return true;
    int status = 0;
    pid_t r = ::waitpid(child_, &status, WNOHANG);
    if (r == child_ || (r < 0 && errno == ECHILD)) {
      child_ = -1;
      return true;
    }
    return false;
  }

  /// Asks the child to stop (sets `stop`, then `poke` wakes it), waits up to two seconds for
  /// it to exit, then kills it. Always reaps it.
  void stop_child(const std::function<void()>& poke) noexcept {
    if (child_ <= 0) return;
    ctl_->stop.store(1, std::memory_order_seq_cst);
    if (poke) {
      try {
        poke();
      } catch (...) {
      }
    }
    const auto deadline = clock_type::now() + 2s;
    while (!child_gone() && clock_type::now() < deadline)
      ::usleep(1000);
    if (child_ > 0) {
      ::kill(child_, SIGKILL);
      while (::waitpid(child_, nullptr, 0) < 0 && errno == EINTR) {
      }
      child_ = -1;
    }
  }

 private:
  void release() noexcept {
    close_fd(go_[1]);  // a child still waiting for its start reads EOF and exits
    stop_child({});    // no-op if already stopped
    for (const auto& n : segments_) {
      std::error_code ignored;
      shmio::segment::remove(n, ignored);  // false if the last close already removed it
    }
    for (int* fd : {&go_[0], &ready_[0], &ready_[1]})
      close_fd(*fd);
    for (int fd : extra_fds_)
      ::close(fd);
    extra_fds_.clear();
    if (ctl_) ::munmap(ctl_, sizeof(control_block));
    ctl_ = nullptr;
    ::sched_setaffinity(0, sizeof saved_affinity_, &saved_affinity_);
    if (handler_installed_) ::sigaction(SIGCHLD, &saved_sigchld_, nullptr);
    handler_installed_ = false;
  }
  static void close_fd(int& fd) noexcept {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }

  placement placement_;
  cpu_set_t saved_affinity_{};
  struct sigaction saved_sigchld_ {};
  bool handler_installed_ = false;
  control_block* ctl_ = nullptr;
  int go_[2] = {-1, -1};
  int ready_[2] = {-1, -1};
  std::vector<int> extra_fds_;
  std::vector<std::string> segments_;
  std::string prefix_;
  pid_t child_ = -1;
};

[[noreturn]] void throw_child_gone() {
  throw std::runtime_error("the echo process exited");
}

/// Google Benchmark's time is the mean over every round trip, so one preemption by another
/// tenant of this shared VM shows in it. Next to it we report a figure that such rare stalls do
/// not move: the timed loop reads the clock once per batch of `batch` round trips (cheap enough
/// not to disturb even the spin floor), and median_ns is the median over batches of the mean
/// round trip in the batch.
class batch_timer {
 public:
  static constexpr int batch = 16;
  explicit batch_timer(const benchmark::State& state) {
    means_.reserve(static_cast<std::size_t>(state.max_iterations / batch + 1));
  }
  void start() noexcept { t0_ = clock_type::now(); }
  void tick() noexcept {
    if (++k_ < batch) return;
    const auto t = clock_type::now();
    means_.push_back(std::chrono::duration<double, std::nano>(t - t0_).count() / batch);
    t0_ = t;
    k_ = 0;
  }
  void report(benchmark::State& state) {
    if (means_.empty()) return;
    auto mid = means_.begin() + static_cast<std::ptrdiff_t>(means_.size() / 2);
    std::nth_element(means_.begin(), mid, means_.end());
    state.counters["median_ns"] = benchmark::Counter(*mid);
  }

 private:
  std::vector<double> means_;
  clock_type::time_point t0_{};
  int k_ = 0;
};

/// Runs the warm-up round trips, then the timed loop.
template <class RoundTrip>
void warm_up_then_measure(benchmark::State& state, RoundTrip&& round_trip) {
  const warmup w;
  for (long i = 0; w.more(i); ++i)
    round_trip();
  batch_timer bt(state);
  bt.start();
  for (auto _ : state) {
    round_trip();
    bt.tick();
  }
  bt.report(state);
}

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
  s.start_child();
  std::uint32_t seq = 0;
  warm_up_then_measure(state, [&] {
    if (++seq == spin_stop_value) seq = 1;
    c.ping.store(seq, std::memory_order_release);
    while (c.pong.load(std::memory_order_acquire) != seq)
      if (g_child_exited) throw_child_gone();
  });
  s.stop_child([&c] { c.ping.store(spin_stop_value, std::memory_order_release); });
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
  s.start_child();
  warm_up_then_measure(state, [&] {
    efd_signal(ping);
    efd_wait(pong, [] {
      if (g_child_exited) throw_child_gone();
    });
  });
  s.stop_child([ping] { efd_signal(ping); });
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

/// Runs `body` as a coroutine on a fresh io_context until it finishes; ends it early, with an
/// exception, if the echo process exits. Rethrows what `body` threw.
void run_parent_coroutine(session& s, asio::io_context& io, asio::awaitable<void> body) {
  asio::signal_set child_signal(io, SIGCHLD);
  bool child_died = false;
  child_signal.async_wait([&](const std::error_code& ec, int) {
    if (ec) return;
    child_died = s.child_gone();
    if (child_died) io.stop();
  });
  std::exception_ptr failure;
  asio::co_spawn(io, std::move(body), [&](std::exception_ptr e) {
    failure = e;
    std::error_code ignored;
    child_signal.cancel(ignored);
  });
  io.run();
  if (failure) std::rethrow_exception(failure);
  if (child_died) throw_child_gone();
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
  s.start_child();
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
  s.stop_child([&sock] {
    std::error_code ignored;
    sock.shutdown(stream_socket::shutdown_both, ignored);
  });
}

// ---- shmio -----------------------------------------------------------------------------------

struct shmio_options {
  bool async = false;
  shmio::wait_strategy strategy{};
  bool pin_late = false;  // create/open the events before pinning (see the header comment)
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
        auto echo = [&]() -> asio::awaitable<void> {
          for (;;) {
            co_await ping.async_wait(asio::use_awaitable);
            if (c.stop.load(std::memory_order_acquire)) co_return;
            pong.set();
          }
        };
        asio::co_spawn(io, echo(), [](std::exception_ptr e) {
          if (e) std::rethrow_exception(e);
        });
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
  s.start_child();

  if (!opt.async) {
    warm_up_then_measure(state, [&] {
      ping.set();
      while (!pong.wait(1s))
        if (s.child_gone()) throw_child_gone();
    });
  } else {
    auto body = [&]() -> asio::awaitable<void> {
      const warmup w;
      for (long i = 0; w.more(i); ++i) {
        ping.set();
        co_await pong.async_wait(asio::use_awaitable);
      }
      batch_timer bt(state);
      bt.start();
      for (auto _ : state) {
        ping.set();
        co_await pong.async_wait(asio::use_awaitable);
        bt.tick();
      }
      bt.report(state);
    };
    run_parent_coroutine(s, io, body());
  }
  // Stop the child before our handles close, so that ours are the last and remove the segments.
  s.stop_child([&ping] { ping.set(); });
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
      {family::asio_local_stream, "asio_local_stream"},
      {family::shmio_sync, "shmio_sync"},
      {family::shmio_async, "shmio_async"},
      {family::shmio_async_park, "shmio_async_park"},
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
}

}  // namespace

int main(int argc, char** argv) {
  // Defaults, which a flag on the command line overrides:
  //  --benchmark_min_time=0.5, set here rather than with MinTime() so that the benchmark names
  //    stay BM_roundtrip/<family>/<placement>;
  //  --benchmark_enable_random_interleaving=true: with --benchmark_repetitions=N the runs of
  //    all benchmarks are shuffled, so that the load of a shared machine drifting during the
  //    run weighs on every family alike instead of on whichever ran at a bad moment.
  // --roundtrips=N is ours (see g_fixed_round_trips).
  std::vector<char*> args{argv[0]};
  static char default_min_time[] = "--benchmark_min_time=0.5";
  static char default_interleaving[] = "--benchmark_enable_random_interleaving=true";
  bool has_min_time = false;
  bool has_interleaving = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a(argv[i]);
    if (a.starts_with("--roundtrips=")) {
      g_fixed_round_trips = std::strtol(argv[i] + 13, nullptr, 10);
      if (g_fixed_round_trips < 10) {
        std::fprintf(stderr, "--roundtrips wants a number >= 10\n");
        return 1;
      }
      continue;
    }
    has_min_time |= a.starts_with("--benchmark_min_time");
    has_interleaving |= a.starts_with("--benchmark_enable_random_interleaving");
    args.push_back(argv[i]);
  }
  if (!has_min_time && g_fixed_round_trips == 0) args.insert(args.begin() + 1, default_min_time);
  if (!has_interleaving) args.insert(args.begin() + 1, default_interleaving);
  int n = static_cast<int>(args.size());
  args.push_back(nullptr);

  register_all();
  benchmark::Initialize(&n, args.data());
  if (benchmark::ReportUnrecognizedArguments(n, args.data())) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
