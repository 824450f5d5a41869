// What a thin command-line client of an RPC service costs end to end, and the floors under it.
//
// BM_cli_exec/<family>: one iteration = posix_spawn a process and wait for its exit (exec to
//     exit), on whatever CPU the kernel picks.
//       kvd_usage   examples/kvd with no arguments: loads, prints its usage, exits. The floor of
//                   any use of that binary: starting the process, no IPC at all
//       kvd_get     `kvd get KEY` against a running `kvd serve` (spawned once, under a name of
//                   this run: $KVD_NAME): connect, one call, close, exit
// BM_connect_floor/segment_file: one iteration = what one connection's channel file costs with
//     nothing of shmio: open a new file in /dev/shm, posix_fallocate it to the size of a
//     connection's channel (rpc_connection_options(): 16 nodes of 4 KiB each way), mmap it, write
//     a byte into each page, munmap, close, unlink. rpc_buffer::connect makes one such file per
//     connection (the client creates it, the service maps it too): the floor of that design,
//     beside BM_connect_pairs in connect_pairs.cpp.
//
// Counters: median_ns over single iterations is not kept here; Google Benchmark's mean over the
// iterations is the figure (process start-up dominates; the spread is in the repetitions).
#include <fcntl.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <benchmark/benchmark.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <shmio/shmio.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

using namespace std::chrono_literals;

// Spawns `argv` with `env` added to this process's environment; returns its pid.
pid_t spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env = {}) {
  std::vector<char*> args;
  for (const auto& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> all_env(env);
  for (char** e = environ; *e; ++e)
    all_env.emplace_back(*e);
  std::vector<char*> envp;
  for (auto& e : all_env)
    envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw std::runtime_error("posix_spawn " + argv[0] + ": " + std::strerror(rc));
  return pid;
}

int wait_exit(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) throw std::runtime_error("waitpid");
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int run(const std::vector<std::string>& argv, const std::vector<std::string>& env = {}) {
  return wait_exit(spawn(argv, env));
}

void bm_kvd_usage(benchmark::State& state) {
  for (auto _ : state)
    if (run({SHMIO_KVD_PATH}) != 2) state.SkipWithError("kvd without arguments did not exit 2");
  state.SetItemsProcessed(state.iterations());
}

void bm_kvd_get(benchmark::State& state) {
  const std::vector<std::string> env = {"KVD_NAME=shmio-bench.kvd." + std::to_string(::getpid())};
  const pid_t daemon = spawn({SHMIO_KVD_PATH, "serve"}, env);
  // Up when a set succeeds (bounded: 10 s).
  bool up = false;
  for (int i = 0; i < 1000 && !up; ++i) {
    up = run({SHMIO_KVD_PATH, "set", "key", "value"}, env) == 0;
    if (!up) std::this_thread::sleep_for(10ms);
  }
  if (!up) {
    ::kill(daemon, SIGKILL);
    wait_exit(daemon);
    state.SkipWithError("kvd serve did not come up");
    return;
  }
  for (auto _ : state)
    if (run({SHMIO_KVD_PATH, "get", "key"}, env) != 0) {
      state.SkipWithError("kvd get failed");
      break;
    }
  run({SHMIO_KVD_PATH, "stop"}, env);
  if (wait_exit(daemon) != 0) state.SkipWithError("kvd serve did not exit cleanly");
  state.SetItemsProcessed(state.iterations());
}

void bm_segment_file(benchmark::State& state) {
  // A connection's channel: the rpc header, then two rings of 16 nodes of 4 KiB (each node 4 KiB
  // plus its 16-byte header, rounded up to 64 bytes) behind a 1344-byte ring state.
  const std::size_t ring = 1344 + 16 * ((4096 + 16 + 63) / 64 * 64);
  const std::size_t size = 128 + 2 * ring;  // the segment header and the rpc header, 64 each
  const std::string path = "/dev/shm/shmio-bench.floor." + std::to_string(::getpid());
  const long page = ::sysconf(_SC_PAGESIZE);
  for (auto _ : state) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 || ::posix_fallocate(fd, 0, static_cast<off_t>(size)) != 0) {
      state.SkipWithError("open or fallocate failed");
      break;
    }
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      state.SkipWithError("mmap failed");
      break;
    }
    for (std::size_t off = 0; off < size; off += static_cast<std::size_t>(page))
      static_cast<volatile char*>(p)[off] = 1;
    ::munmap(p, size);
    ::close(fd);
    ::unlink(path.c_str());
  }
  ::unlink(path.c_str());
  state.SetItemsProcessed(state.iterations());
}

}  // namespace

BENCHMARK(bm_kvd_usage)
    ->Name("BM_cli_exec/kvd_usage")
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(bm_kvd_get)->Name("BM_cli_exec/kvd_get")->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(bm_segment_file)
    ->Name("BM_connect_floor/segment_file")
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

BENCHMARK_MAIN();
