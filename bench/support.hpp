#pragma once
// What every cross-process benchmark in bench/ shares: a forked partner process pinned to a
// CPU, cleanup of everything it made (also when setup or the run fails), warm-up, the
// median-of-batches timer, and the command-line defaults. See docs/performance.md.

#include <benchmark/benchmark.h>
#include <sched.h>
#include <signal.h>
#include <sys/types.h>

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/redirect_error.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace shmio_bench {

using clock_type = std::chrono::steady_clock;

/// split = parent on CPU 0, child on CPU 1; same = both on CPU 0.
enum class placement { split, same };
inline constexpr int parent_cpu = 0;
inline int child_cpu(placement p) {
  return p == placement::split ? 1 : 0;
}

/// --roundtrips=N (diagnosis, e.g. under `perf stat`): every benchmark runs exactly N timed
/// iterations after exactly N/10 warm-up ones, so that counts divide by 1.1 N.
extern long g_fixed_round_trips;

/// Decides when the warm-up is over: after 50 ms (and at least 4 round trips), or after
/// exactly N/10 round trips under --roundtrips=N.
class warmup {
 public:
  warmup();
  bool more(long done) const;

 private:
  clock_type::time_point end_;
};

/// Shared between parent and child: MAP_SHARED | MAP_ANONYMOUS, mapped before the fork.
struct control_block {
  alignas(64) std::atomic<std::uint32_t> ping{0};
  alignas(64) std::atomic<std::uint32_t> pong{0};
  alignas(64) std::atomic<std::uint32_t> stop{0};
  alignas(64) std::atomic<std::uint64_t> count{0};  // free for a benchmark's own use
};

[[noreturn]] void throw_errno(const char* what);
[[noreturn]] void throw_child_gone();
bool pin_to(int cpu);
void write_all(int fd, const void* data, std::size_t n);

/// Set by the SIGCHLD handler a session installs; a spinning parent checks it.
extern volatile int g_child_exited;

/// One or more forked partner processes and everything that must be undone after them: the
/// parent's CPU affinity, the SIGCHLD handler, the control mapping, pipes, and named segments.
class session {
 public:
  explicit session(placement p);
  session(const session&) = delete;
  session& operator=(const session&) = delete;
  ~session();

  control_block& ctl() noexcept { return *ctl_; }
  /// A unique segment name; removed at teardown whatever happened.
  std::string segment_name(std::string_view suffix);
  /// Closed in the parent at teardown.
  void own_fd(int fd);

  void pin_parent();
  /// Pins the calling child to its placement's CPU.
  void pin_child() const;

  /// Forks a partner. `child(ready)` runs in it: it must call ready() once it can serve, and
  /// returns when told to stop. With pin_early the child pins itself before `child` runs. May
  /// be called several times (for several children); start_children() then waits for all.
  void fork_child(const std::function<void(const std::function<void()>& ready)>& child,
                  bool pin_early = true);
  /// Lets the children start, then waits until each is ready. Throws if one failed.
  void start_children();
  /// True once every child has exited (reaps them).
  bool children_gone();
  /// Sets ctl().stop, runs `poke` (to wake the children), waits up to two seconds for them to
  /// exit, then kills them. Always reaps them.
  void stop_children(const std::function<void()>& poke) noexcept;

 private:
  void release() noexcept;

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
  std::vector<pid_t> children_;
};

/// Google Benchmark's time is the mean over every iteration, so one preemption by another
/// tenant of a shared VM shows in it. Next to it we report a figure such rare stalls do not
/// move: the loop reads the clock once per `batch` iterations, and median_ns is the median over
/// batches of the batch's mean iteration.
class batch_timer {
 public:
  static constexpr int batch = 16;
  explicit batch_timer(const benchmark::State& state);
  void start() noexcept { t0_ = clock_type::now(); }
  void tick() noexcept {
    if (++k_ < batch) return;
    const auto t = clock_type::now();
    means_.push_back(std::chrono::duration<double, std::nano>(t - t0_).count() / batch);
    t0_ = t;
    k_ = 0;
  }
  /// Sets median_ns, p99_batch_ns (the 99th percentile of the batch means), and allocs_per_iter:
  /// heap allocations in this process per iteration since the timer was made (see allocations()).
  void report(benchmark::State& state);

 private:
  std::uint64_t allocations_at_start_ = 0;
  std::vector<double> means_;
  clock_type::time_point t0_{};
  int k_ = 0;
};

/// Runs the warm-up iterations, then the timed loop, one `step()` per iteration.
template <class Step>
void warm_up_then_measure(benchmark::State& state, Step&& step) {
  const warmup w;
  for (long i = 0; w.more(i); ++i)
    step();
  batch_timer bt(state);
  bt.start();
  for (auto _ : state) {
    step();
    bt.tick();
  }
  bt.report(state);
}

/// The floor for moving messages between processes: a single-producer single-consumer ring of
/// fixed-size slots in a MAP_SHARED anonymous mapping (made before the fork), busy-spinning on
/// both sides. No names, no wake-ups, no dead-peer handling: what any ring costs at least.
class spin_ring {
 public:
  spin_ring(std::size_t slots, std::size_t slot_size);
  ~spin_ring();
  spin_ring(const spin_ring&) = delete;
  spin_ring& operator=(const spin_ring&) = delete;

  std::size_t slot_size() const noexcept { return slot_size_; }
  /// Copies `n` (<= slot_size) bytes into the next slot, if one is free.
  bool try_write(const void* data, std::size_t n) noexcept;
  /// Copies the next message (its size is returned) out, if there is one; 0 if none. Messages
  /// are never empty here.
  std::size_t try_read(void* out) noexcept;

 private:
  struct header {
    alignas(64) std::atomic<std::uint64_t> head{0};  // next slot to write
    alignas(64) std::atomic<std::uint64_t> tail{0};  // next slot to read
  };
  std::byte* slot(std::uint64_t i) const noexcept;

  std::size_t slots_;
  std::size_t slot_size_;
  std::size_t mapped_;
  header* h_;
  // The writer's and the reader's cached view of the other side's index (each process has its
  // own copy after the fork, which is what we want).
  std::uint64_t cached_tail_ = 0;
  std::uint64_t cached_head_ = 0;
};

/// A reference ring whose nodes carry their own state, as shmio's do: a bare single-producer,
/// single-consumer ring (no compare-and-swap, no cursor: each side counts its own positions)
/// whose node is a state word, a length and the payload, in as many cache lines as they take (64
/// bytes of payload: two). The word of node i says "free for the write of position p" (4p),
/// "claimed by the writer of p" (4p + 1), "position p published" (4p + 2) or "claimed by its
/// reader" (4p + 3). With `parkable`, a side stores the word seq_cst and then loads the other
/// side's "parked" word, the Dekker pair a ring whose waiters may sleep needs (nobody parks
/// here: the word stays 0); without it, the word is stored with release and nothing is loaded
/// after it. With `claims` as well, each side first stores a claim in the word (writer: before
/// it writes the node; reader: before it copies out), as shmio's claims do with their
/// compare-and-swap, but with a plain store (one writer, one reader). With `atomics`, the claims
/// are compare-and-swaps and each side takes its position from a shared cursor (a line of its
/// own) that it advances with a compare-and-swap, as shmio's ring does: its atomic operations
/// without the rest of its code.
class node_ring {
 public:
  enum class kind { release, parkable, claims, atomics };
  node_ring(std::size_t nodes, std::size_t payload, kind k);
  ~node_ring();
  node_ring(const node_ring&) = delete;
  node_ring& operator=(const node_ring&) = delete;

  /// Copies `n` (at most the payload size, more than 0) bytes into the next node, if it is free.
  bool try_write(const void* data, std::size_t n) noexcept;
  /// Copies the next message out, if one is published, and returns its size; 0 if none.
  std::size_t try_read(void* out) noexcept;

 private:
  struct header {
    alignas(64) std::atomic<std::uint64_t> readers_parked{0};
    alignas(64) std::atomic<std::uint64_t> writers_parked{0};
    alignas(64) std::atomic<std::uint64_t> tail{0};  // next write, with `atomics`
    alignas(64) std::atomic<std::uint64_t> head{0};  // next read, with `atomics`
  };
  std::byte* node(std::uint64_t position) const noexcept;

  std::size_t nodes_;
  std::size_t stride_;
  std::size_t mapped_;
  kind kind_;
  header* h_;
  // Each side's own next position (each process has its own copy after the fork).
  std::uint64_t write_at_ = 0;
  std::uint64_t read_at_ = 0;
};

/// Runs `body` as a coroutine on `io` until it finishes; ends it early, with an exception, if
/// a child exits. Rethrows what `body` threw.
void run_parent_coroutine(session& s, asio::io_context& io, asio::awaitable<void> body);

/// Runs `body` in a child on `io` (the io_context its I/O objects use) until it returns or
/// throws.
void run_child_coroutine(asio::io_context& io, asio::awaitable<void> body);

/// Allocation counting: the bench binaries replace operator new (support.cpp), so that a
/// benchmark can report heap allocations per operation.
std::uint64_t allocations() noexcept;

/// main() of every bench binary: our defaults (--benchmark_min_time=0.5, random interleaving of
/// repetitions), our flag --roundtrips=N, then `register_all()` and Google Benchmark.
int bench_main(int argc, char** argv, const std::function<void()>& register_all);

/// Runs `f`, turning an exception into the benchmark's error.
template <class F>
void guarded(benchmark::State& state, F&& f) {
  std::string error;
  try {
    f();
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (!error.empty()) state.SkipWithError(error.c_str());
}

/// Runs `lane(0)` .. `lane(n - 1)` (each returning asio::awaitable<void>) at once on `ex` and
/// waits for all of them; rethrows the first failure. A counter and a timer stand for the
/// condition "all done".
template <class Lane>
asio::awaitable<void> all_lanes(asio::any_io_executor ex, int n, Lane lane) {
  int running = n;
  asio::steady_timer all_done(ex, clock_type::time_point::max());
  std::exception_ptr failure;
  for (int i = 0; i < n; ++i)
    asio::co_spawn(ex, lane(i), [&](std::exception_ptr e) {
      if (e && !failure) failure = e;
      if (--running == 0) all_done.cancel();
    });
  std::error_code ec;
  co_await all_done.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  if (failure) std::rethrow_exception(failure);
}

}  // namespace shmio_bench
