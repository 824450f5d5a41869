#include "support.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <asio/co_spawn.hpp>
#include <asio/signal_set.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <shmio/segment.hpp>
#include <stdexcept>
#include <system_error>

namespace shmio_bench {

using namespace std::chrono_literals;

long g_fixed_round_trips = 0;
volatile int g_child_exited = 0;

namespace {
constexpr auto warmup_time = 50ms;
constexpr int warmup_min_round_trips = 4;

void on_sigchld(int) {
  g_child_exited = 1;
}
void close_fd(int& fd) noexcept {
  if (fd >= 0) ::close(fd);
  fd = -1;
}
}  // namespace

warmup::warmup() : end_(clock_type::now() + warmup_time) {}
bool warmup::more(long done) const {
  if (g_fixed_round_trips > 0) return done < g_fixed_round_trips / 10;
  return done < warmup_min_round_trips || clock_type::now() < end_;
}

void throw_errno(const char* what) {
  throw std::system_error(errno, std::system_category(), what);
}
void throw_child_gone() {
  throw std::runtime_error("a partner process exited");
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

session::session(placement p) : placement_(p) {
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

session::~session() {
  release();
}

std::string session::segment_name(std::string_view suffix) {
  segments_.push_back(prefix_ + "." + std::string(suffix));
  return segments_.back();
}

void session::own_fd(int fd) {
  extra_fds_.push_back(fd);
}

void session::pin_parent() {
  if (!pin_to(parent_cpu)) throw_errno("sched_setaffinity(parent)");
}

void session::pin_child() const {
  if (!pin_to(child_cpu(placement_))) throw_errno("sched_setaffinity(child)");
}

void session::fork_child(const std::function<void(const std::function<void()>& ready)>& child,
                         bool pin_early) {
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) throw_errno("fork");
  if (pid > 0) {
    children_.push_back(pid);
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
    if (pin_early) pin_child();
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

void session::start_children() {
  // One 'G' per child: each reads exactly one byte.
  const std::string go(children_.size(), 'G');
  write_all(go_[1], go.data(), go.size());
  close_fd(ready_[1]);  // so that dead children read as EOF
  std::size_t ready = 0;
  const auto deadline = clock_type::now() + 10s;
  while (ready < children_.size()) {
    pollfd p{ready_[0], POLLIN, 0};
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now());
    int r = ::poll(&p, 1, static_cast<int>(std::max<long>(0, left.count())));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) throw std::runtime_error("partner not ready within 10 s");
    char buf[512];
    ssize_t n = ::read(ready_[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::runtime_error("a partner exited during setup");
    if (buf[0] == 'E')
      throw std::runtime_error("partner: " + std::string(buf + 1, static_cast<std::size_t>(n - 1)));
    ready += static_cast<std::size_t>(std::count(buf, buf + n, 'R'));
  }
}

bool session::children_gone() {
  std::erase_if(children_, [](pid_t c) {
    int status = 0;
    pid_t r = ::waitpid(c, &status, WNOHANG);
    return r == c || (r < 0 && errno == ECHILD);
  });
  return children_.empty();
}

void session::stop_children(const std::function<void()>& poke) noexcept {
  if (children_.empty()) return;
  ctl_->stop.store(1, std::memory_order_seq_cst);
  if (poke) {
    try {
      poke();
    } catch (...) {
    }
  }
  const auto deadline = clock_type::now() + 2s;
  while (!children_gone() && clock_type::now() < deadline)
    ::usleep(1000);
  for (pid_t c : children_) {
    ::kill(c, SIGKILL);
    while (::waitpid(c, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  children_.clear();
}

void session::release() noexcept {
  close_fd(go_[1]);   // a child still waiting for its start reads EOF and exits
  stop_children({});  // no-op if already stopped
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

batch_timer::batch_timer(const benchmark::State& state) {
  means_.reserve(static_cast<std::size_t>(state.max_iterations / batch + 1));
  allocations_at_start_ = allocations();  // after the timer's own
}

void batch_timer::report(benchmark::State& state) {
  const auto iterations = static_cast<double>(state.iterations());
  if (iterations > 0)
    state.counters["allocs_per_iter"] =
        benchmark::Counter(static_cast<double>(allocations() - allocations_at_start_) / iterations);
  if (means_.empty()) return;
  auto mid = means_.begin() + static_cast<std::ptrdiff_t>(means_.size() / 2);
  std::nth_element(means_.begin(), mid, means_.end());
  state.counters["median_ns"] = benchmark::Counter(*mid);
  // The tail: a batch that met a preemption or a slow wake-up shows here, not in the median.
  auto p99 = means_.begin() + static_cast<std::ptrdiff_t>(means_.size() * 99 / 100);
  std::nth_element(means_.begin(), p99, means_.end());
  state.counters["p99_batch_ns"] = benchmark::Counter(*p99);
}

// Each slot: a u32 size in its first cache line, the bytes from the next one on; head and tail
// order everything.
spin_ring::spin_ring(std::size_t slots, std::size_t slot_size)
    : slots_(slots), slot_size_(slot_size) {
  mapped_ = sizeof(header) + slots_ * (slot_size_ + 64);
  void* m = ::mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) throw_errno("mmap");
  h_ = new (m) header{};
}

spin_ring::~spin_ring() {
  ::munmap(h_, mapped_);
}

std::byte* spin_ring::slot(std::uint64_t i) const noexcept {
  return reinterpret_cast<std::byte*>(h_ + 1) + (i % slots_) * (slot_size_ + 64);
}

bool spin_ring::try_write(const void* data, std::size_t n) noexcept {
  // Relaxed: only this process writes head.
  const std::uint64_t head = h_->head.load(std::memory_order_relaxed);
  if (head - cached_tail_ == slots_) {
    // Acquire: the reader's copy out of the slot happens before we overwrite it.
    cached_tail_ = h_->tail.load(std::memory_order_acquire);
    if (head - cached_tail_ == slots_) return false;
  }
  std::byte* s = slot(head);
  const auto size = static_cast<std::uint32_t>(n);
  std::memcpy(s, &size, sizeof size);
  std::memcpy(s + 64, data, n);
  // Release: publishes the slot's bytes with the new head.
  h_->head.store(head + 1, std::memory_order_release);
  return true;
}

std::size_t spin_ring::try_read(void* out) noexcept {
  // Relaxed: only this process writes tail.
  const std::uint64_t tail = h_->tail.load(std::memory_order_relaxed);
  if (tail == cached_head_) {
    // Acquire: pairs with the writer's release of head, so the slot's bytes are visible.
    cached_head_ = h_->head.load(std::memory_order_acquire);
    if (tail == cached_head_) return 0;
  }
  const std::byte* s = slot(tail);
  std::uint32_t size;
  std::memcpy(&size, s, sizeof size);
  std::memcpy(out, s + 64, size);
  // Release: our copy out is done before the writer may reuse the slot.
  h_->tail.store(tail + 1, std::memory_order_release);
  return size;
}

namespace {
struct node_head {
  std::atomic<std::uint64_t> word;
  std::uint32_t length;
  std::uint32_t reserved;
};
// The same size as shmio's node header (layout::node_header), so the payload sits where it does.
static_assert(sizeof(node_head) == 16);
}  // namespace

node_ring::node_ring(std::size_t nodes, std::size_t payload, kind k)
    : nodes_(nodes), stride_((sizeof(node_head) + payload + 63) / 64 * 64), kind_(k) {
  mapped_ = sizeof(header) + nodes_ * stride_;
  void* m = ::mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) throw_errno("mmap");
  h_ = new (m) header{};
  for (std::uint64_t i = 0; i < nodes_; ++i)
    new (node(i)) node_head{{4 * i}, 0, 0};  // free for the write of position i
}

node_ring::~node_ring() {
  ::munmap(h_, mapped_);
}

std::byte* node_ring::node(std::uint64_t position) const noexcept {
  return reinterpret_cast<std::byte*>(h_ + 1) + (position % nodes_) * stride_;
}

bool node_ring::try_write(const void* data, std::size_t n) noexcept {
  const bool atomics = kind_ == kind::atomics;
  // relaxed: a cursor is only where to look; the node's word carries the ordering.
  const std::uint64_t at = atomics ? h_->tail.load(std::memory_order_relaxed) : write_at_;
  auto* nh = reinterpret_cast<node_head*>(node(at));
  // acquire: the reader's copy out of the node happens before we overwrite it.
  std::uint64_t w = nh->word.load(std::memory_order_acquire);
  if (w != 4 * at) return false;
  if (atomics) {
    // acquire, as the load above; relaxed on failure (never here: one writer).
    if (!nh->word.compare_exchange_strong(w, 4 * at + 1, std::memory_order_acquire,
                                          std::memory_order_relaxed))
      return false;
    std::uint64_t expected = at;
    // relaxed: as the cursor's load.
    h_->tail.compare_exchange_strong(expected, at + 1, std::memory_order_relaxed);
  } else if (kind_ == kind::claims) {
    // relaxed: only a mark, published with the bytes by the store below.
    nh->word.store(4 * at + 1, std::memory_order_relaxed);
  }
  nh->length = static_cast<std::uint32_t>(n);
  std::memcpy(reinterpret_cast<std::byte*>(nh + 1), data, n);
  if (kind_ != kind::release) {
    // seq_cst, then the load: a reader that parks after its last look must be seen parked.
    nh->word.store(4 * at + 2, std::memory_order_seq_cst);
    // The load is the cost measured; nobody parks in this benchmark, so a set word means a
    // broken ring.
    if (h_->readers_parked.load(std::memory_order_seq_cst) != 0) std::abort();
  } else {
    nh->word.store(4 * at + 2, std::memory_order_release);  // publishes the bytes
  }
  write_at_ = at + 1;
  return true;
}

std::size_t node_ring::try_read(void* out) noexcept {
  const bool atomics = kind_ == kind::atomics;
  // relaxed: as in try_write.
  const std::uint64_t at = atomics ? h_->head.load(std::memory_order_relaxed) : read_at_;
  auto* nh = reinterpret_cast<node_head*>(node(at));
  // acquire: pairs with the writer's store, so the node's bytes are visible.
  std::uint64_t w = nh->word.load(std::memory_order_acquire);
  if (w != 4 * at + 2) return 0;
  if (atomics) {
    // acquire, as the load above; relaxed on failure (never here: one reader).
    if (!nh->word.compare_exchange_strong(w, 4 * at + 3, std::memory_order_acquire,
                                          std::memory_order_relaxed))
      return 0;
    std::uint64_t expected = at;
    // relaxed: as the cursor's load.
    h_->head.compare_exchange_strong(expected, at + 1, std::memory_order_relaxed);
  } else if (kind_ == kind::claims) {
    // relaxed: only a mark; the store that frees the node below orders our reads.
    nh->word.store(4 * at + 3, std::memory_order_relaxed);
  }
  const std::uint32_t size = nh->length;
  std::memcpy(out, reinterpret_cast<const std::byte*>(nh + 1), size);
  const std::uint64_t next_lap = 4 * (at + nodes_);
  if (kind_ != kind::release) {
    // seq_cst, then the load: as in try_write, for a writer waiting for room.
    nh->word.store(next_lap, std::memory_order_seq_cst);
    // As in try_write: measured, never set here.
    if (h_->writers_parked.load(std::memory_order_seq_cst) != 0) std::abort();
  } else {
    nh->word.store(next_lap, std::memory_order_release);  // our copy out is done
  }
  read_at_ = at + 1;
  return size;
}

void run_parent_coroutine(session& s, asio::io_context& io, asio::awaitable<void> body) {
  asio::signal_set child_signal(io, SIGCHLD);
  bool child_died = false;
  child_signal.async_wait([&](const std::error_code& ec, int) {
    if (ec) return;
    child_died = true;
    io.stop();
  });
  std::exception_ptr failure;
  asio::co_spawn(io, std::move(body), [&](std::exception_ptr e) {
    failure = e;
    io.stop();  // I/O objects that watch their peer (rpc_buffer) keep `io` busy for ever
  });
  io.run();
  io.restart();
  if (failure) std::rethrow_exception(failure);
  if (child_died) {
    s.children_gone();
    throw_child_gone();
  }
}

void run_child_coroutine(asio::io_context& io, asio::awaitable<void> body) {
  asio::co_spawn(io, std::move(body), [](std::exception_ptr e) {
    if (e) std::rethrow_exception(e);
  });
  io.run();
}

int bench_main(int argc, char** argv, const std::function<void()>& register_all) {
  // Defaults, which a flag on the command line overrides:
  //  --benchmark_min_time=0.5, set here rather than with MinTime() so that benchmark names
  //    carry no suffix;
  //  --benchmark_enable_random_interleaving=true: with --benchmark_repetitions=N the runs of
  //    all benchmarks are shuffled, so that the load of a shared machine drifting during the
  //    run weighs on every family alike.
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

}  // namespace shmio_bench
