// Reader/writer lock acquire + release cost: shmio's rw_lock (through a buffer_read_write)
// beside pthread_rwlock_t with PTHREAD_PROCESS_SHARED in a MAP_SHARED mapping, in one binary,
// so that one run gives both (compare within a run, as ratios; see docs/performance.md).
//
// Families (one iteration = one acquire and one release):
//
//   exclusive/{shmio,pthread}/uncontended    lock(); unlock(); nobody else uses the lock
//   shared/{shmio,pthread}/uncontended       lock_shared(); unlock_shared()
//   exclusive/{shmio,pthread}/threads:2      both threads of this process lock and unlock, each
//                                            with a handle of its own (shmio)
//   shared/{shmio,pthread}/threads:2         both threads take and drop shares
//   exclusive/{shmio,pthread}/process        a forked child locks and unlocks in a loop while
//                                            this process measures
//   shared/{shmio,pthread}/process           the same with shares on both sides
//
// Cleanup: the child gets PR_SET_PDEATHSIG(SIGKILL) and is stopped, killed if need be, and
// reaped at teardown. Segment names carry the parent's pid; the last handle removes them.
#include <benchmark/benchmark.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <asio/io_context.hpp>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "shmio/buffer_read_write.hpp"

namespace {

enum class mode { exclusive, shared };

// ---- the two locks, behind one shape ----------------------------------------------------------

// A forked contender's word that it runs, and holds the lock in turn: until then the benchmark
// would time an uncontended lock.
void say_ready(int fd) {
  const char c = 'r';
  if (::write(fd, &c, 1) != 1) ::_exit(3);
}

// A pthread_rwlock_t and a stop flag in memory shared with forked children.
struct pthread_side {
  struct shared_block {
    pthread_rwlock_t lock;
    std::atomic<std::uint32_t> stop;
  };
  shared_block* block = nullptr;

  pthread_side() {
    void* p = ::mmap(nullptr, sizeof(shared_block), PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) std::abort();
    block = new (p) shared_block{};
    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    pthread_rwlock_init(&block->lock, &attr);
    pthread_rwlockattr_destroy(&attr);
  }
  ~pthread_side() {
    pthread_rwlock_destroy(&block->lock);
    ::munmap(block, sizeof(shared_block));
  }
  void acquire_release(mode m, int /*handle*/) {
    if (m == mode::exclusive) {
      pthread_rwlock_wrlock(&block->lock);
      pthread_rwlock_unlock(&block->lock);
    } else {
      pthread_rwlock_rdlock(&block->lock);
      pthread_rwlock_unlock(&block->lock);
    }
  }
  // Runs in a forked child until stopped; says so on `ready` after its first round.
  void hammer(mode m, int ready) {
    acquire_release(m, 0);
    say_ready(ready);
    while (block->stop.load(std::memory_order_relaxed) == 0)
      acquire_release(m, 0);
  }
  void request_stop() { block->stop.store(1, std::memory_order_relaxed); }
};

// A buffer_read_write with one handle per benchmark thread; the stop flag is in its data.
struct shmio_side {
  asio::io_context io;
  std::string name = "shmio-bench.lock." + std::to_string(::getpid());
  std::unique_ptr<shmio::buffer_read_write> handles[2];

  shmio_side() {
    handles[0] =
        std::make_unique<shmio::buffer_read_write>(io.get_executor(), shmio::create_only, name, 64);
    handles[1] =
        std::make_unique<shmio::buffer_read_write>(io.get_executor(), shmio::open_only, name);
  }
  void acquire_release(mode m, int handle) {
    auto& h = *handles[handle];
    if (m == mode::exclusive) {
      h.lock();
      h.unlock();
    } else {
      h.lock_shared();
      h.unlock_shared();
    }
  }
  void hammer(mode m, int ready) {
    asio::io_context child_io;
    shmio::buffer_read_write mine(child_io.get_executor(), shmio::open_only, name);
    mine.lock();
    mine.unlock();
    say_ready(ready);
    // The lock calls are opaque to the compiler, so this read is made on every round.
    while (mine.read<std::uint8_t>(0) == 0) {
      if (m == mode::exclusive) {
        mine.lock();
        mine.unlock();
      } else {
        mine.lock_shared();
        mine.unlock_shared();
      }
    }
  }
  void request_stop() { handles[0]->write(std::uint8_t{1}, 0); }
};

// ---- benchmarks -------------------------------------------------------------------------------

template <class Side>
Side& side() {
  static Side s;  // one per kind of lock, made on first use, shared by the threads of a family
  return s;
}

template <class Side>
void uncontended(benchmark::State& state, mode m) {
  Side& s = side<Side>();
  for (auto _ : state)
    s.acquire_release(m, 0);
  state.SetItemsProcessed(state.iterations());
}

template <class Side>
void two_threads(benchmark::State& state, mode m) {
  Side& s = side<Side>();
  const int handle = state.thread_index() % 2;
  for (auto _ : state)
    s.acquire_release(m, handle);
  state.SetItemsProcessed(state.iterations());
}

template <class Side>
void two_processes(benchmark::State& state, mode m) {
  Side& s = side<Side>();
  int ready[2];
  if (::pipe(ready) != 0) return state.SkipWithError("pipe failed");
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::close(ready[0]);
    try {
      s.hammer(m, ready[1]);
    } catch (...) {
      ::_exit(2);
    }
    ::_exit(0);
  }
  ::close(ready[1]);
  if (pid < 0) {
    ::close(ready[0]);
    state.SkipWithError("fork failed");
    return;
  }
  pollfd p{ready[0], POLLIN, 0};
  char c = 0;
  const bool running = ::poll(&p, 1, 10'000) == 1 && ::read(ready[0], &c, 1) == 1;
  ::close(ready[0]);
  if (running) {
    for (auto _ : state)
      s.acquire_release(m, 0);
    state.SetItemsProcessed(state.iterations());
  }
  s.request_stop();
  int status = 0;
  for (int i = 0; i < 200 && ::waitpid(pid, &status, WNOHANG) == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (::waitpid(pid, &status, WNOHANG) == 0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  // A contender that never ran, or did not end as asked, leaves nothing this run can be
  // trusted for.
  if (!running)
    state.SkipWithError("the contending process did not start");
  else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    state.SkipWithError("the contending process failed");
  // Ready for the next run: clear the stop flag.
  if constexpr (std::is_same_v<Side, pthread_side>)
    s.block->stop.store(0, std::memory_order_relaxed);
  else
    s.handles[0]->write(std::uint8_t{0}, 0);
}

void register_all() {
  for (mode m : {mode::exclusive, mode::shared}) {
    const std::string family = m == mode::exclusive ? "exclusive" : "shared";
    benchmark::RegisterBenchmark((family + "/shmio/uncontended").c_str(),
                                 [m](benchmark::State& st) { uncontended<shmio_side>(st, m); });
    benchmark::RegisterBenchmark((family + "/pthread/uncontended").c_str(),
                                 [m](benchmark::State& st) { uncontended<pthread_side>(st, m); });
    benchmark::RegisterBenchmark((family + "/shmio").c_str(),
                                 [m](benchmark::State& st) { two_threads<shmio_side>(st, m); })
        ->Threads(2)
        ->UseRealTime();
    benchmark::RegisterBenchmark((family + "/pthread").c_str(),
                                 [m](benchmark::State& st) { two_threads<pthread_side>(st, m); })
        ->Threads(2)
        ->UseRealTime();
    benchmark::RegisterBenchmark((family + "/shmio/process").c_str(), [m](benchmark::State& st) {
      two_processes<shmio_side>(st, m);
    })->UseRealTime();
    benchmark::RegisterBenchmark((family + "/pthread/process").c_str(), [m](benchmark::State& st) {
      two_processes<pthread_side>(st, m);
    })->UseRealTime();
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
