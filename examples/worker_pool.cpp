// worker_pool — one producer, several competing worker processes, over two shmio rings.
//
//   worker_pool [WORKERS [JOBS [NAME]]]   the producer (defaults: 4 workers, 2000 jobs)
//   worker_pool worker NAME               one worker (started by the producer)
//
// The producer creates the rings NAME.jobs and NAME.results, starts the workers, and then, on
// one io_context, writes the jobs (then one "stop" per worker) while it collects the results.
// Each job goes to exactly one worker: readers of a circular_buffer compete for messages. The
// producer prints "job J worker PID" for each result and checks that every job came back
// exactly once with the right answer.
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <asio.hpp>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <shmio/shmio.hpp>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;

constexpr std::uint64_t stop_job = 0;  // job ids start at 1

struct result {
  std::uint64_t job;
  std::uint64_t answer;
  std::uint32_t worker;
};

// The "work": the number of steps of the Collatz sequence from `n` down to 1.
std::uint64_t collatz_steps(std::uint64_t n) {
  std::uint64_t steps = 0;
  for (; n > 1; ++steps)
    n = n % 2 ? 3 * n + 1 : n / 2;
  return steps;
}

// ---- a worker: plain blocking calls are fine in a process that does nothing else -------------

int work(const std::string& name) {
  asio::io_context io;  // the rings need an executor; a worker never runs it
  shmio::circular_buffer jobs(io.get_executor(), shmio::open_only, name + ".jobs");
  shmio::circular_buffer results(io.get_executor(), shmio::open_only, name + ".results");
  const auto forever = std::chrono::milliseconds::max();
  for (;;) {
    std::uint64_t job = 0;
    if (jobs.read(asio::buffer(&job, sizeof job), forever) != sizeof job) return 1;
    if (job == stop_job) return 0;
    result r{job, collatz_steps(job), static_cast<std::uint32_t>(::getpid())};
    results.write(asio::buffer(&r, sizeof r), forever);
  }
}

// ---- the producer ---------------------------------------------------------------------------

asio::awaitable<void> produce(shmio::circular_buffer& jobs, std::uint64_t count, int workers) {
  for (std::uint64_t job = 1; job <= count; ++job)
    co_await jobs.async_write(asio::buffer(&job, sizeof job), asio::use_awaitable);
  for (int i = 0; i < workers; ++i)
    co_await jobs.async_write(asio::buffer(&stop_job, sizeof stop_job), asio::use_awaitable);
}

asio::awaitable<void> collect(shmio::circular_buffer& results, std::uint64_t count,
                              std::vector<int>& seen, std::map<std::uint32_t, int>& per_worker,
                              int& wrong) {
  for (std::uint64_t i = 0; i < count; ++i) {
    result r{};
    std::size_t n = co_await results.async_read(asio::buffer(&r, sizeof r), asio::use_awaitable);
    if (n != sizeof r || r.job < 1 || r.job > count) {
      ++wrong;
      continue;
    }
    ++seen[r.job];
    ++per_worker[r.worker];
    if (r.answer != collatz_steps(r.job)) ++wrong;
    std::printf("job %llu worker %u\n", static_cast<unsigned long long>(r.job), r.worker);
  }
}

int run_pool(int workers, std::uint64_t count, const std::string& name) {
  asio::io_context io;
  shmio::circular_buffer jobs(io.get_executor(), shmio::create_only, name + ".jobs", 64,
                              sizeof(std::uint64_t));
  shmio::circular_buffer results(io.get_executor(), shmio::create_only, name + ".results", 64,
                                 sizeof(result));
  std::vector<pid_t> children;
  const pid_t parent = ::getpid();
  for (int i = 0; i < workers; ++i) {
    pid_t pid = ::fork();
    if (pid < 0) {
      std::perror("worker_pool: fork");
      for (pid_t child : children)
        ::kill(child, SIGKILL);
      return 1;
    }
    if (pid == 0) {
      // A worker dies with the pool: it would wait for ever for jobs nobody sends.
      if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != parent) ::_exit(1);
      ::execl("/proc/self/exe", "worker_pool", "worker", name.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    children.push_back(pid);
  }

  std::vector<int> seen(count + 1, 0);
  std::map<std::uint32_t, int> per_worker;
  int wrong = 0;
  bool finished = false;
  // A worker that died would leave us waiting for ever: give the whole run a deadline.
  asio::steady_timer deadline(io, 60s);
  deadline.async_wait([&](std::error_code e) {
    if (!e) io.stop();
  });
  asio::co_spawn(io, produce(jobs, count, workers), asio::detached);
  asio::co_spawn(io, collect(results, count, seen, per_worker, wrong), [&](std::exception_ptr e) {
    finished = !e;
    deadline.cancel();
  });
  io.run();

  int failed_workers = 0;
  for (pid_t pid : children) {
    if (!finished) ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed_workers;
  }
  std::uint64_t once = 0;
  for (std::uint64_t j = 1; j <= count; ++j)
    once += seen[j] == 1;
  std::printf("%llu jobs, %llu processed exactly once, %d wrong answers, %d workers failed;",
              static_cast<unsigned long long>(count), static_cast<unsigned long long>(once), wrong,
              failed_workers);
  for (auto [pid, n] : per_worker)
    std::printf(" worker %u: %d", pid, n);
  std::printf("\n");
  return finished && once == count && wrong == 0 && failed_workers == 0 ? 0 : 1;
}

}  // namespace

int run_main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "worker") == 0) return work(argv[2]);
  const int workers = argc > 1 ? std::atoi(argv[1]) : 4;
  const long long jobs = argc > 2 ? std::atoll(argv[2]) : 2000;
  const std::string name = argc > 3 ? argv[3] : "worker-pool." + std::to_string(::getpid());
  if (argc > 4 || workers < 1 || workers > 64 || jobs < 1) {
    std::fprintf(stderr, "usage: worker_pool [WORKERS (1-64) [JOBS [NAME]]]\n");
    return 2;
  }
  return run_pool(workers, static_cast<std::uint64_t>(jobs), name);
}

int main(int argc, char** argv) {
  try {
    return run_main(argc, argv);
  } catch (const std::exception& e) {  // a name already taken, a port in use, ...
    std::fprintf(stderr, "worker_pool: %s\n", e.what());
    return 1;
  }
}
