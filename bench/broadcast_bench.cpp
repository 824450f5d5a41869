// Broadcast throughput and per-subscriber latency: one writer process, 1 or 4 subscriber
// processes, 64-byte messages.
//
//   BM_broadcast/subscribers:N/lossy:L
//   BM_broadcast_local_stream/subscribers:N   the baseline: what a user would write instead, one
//                                             asio::local::stream_protocol socket pair per
//                                             subscriber, the writer writing each message to
//                                             every socket in turn (blocking: "reliable")
//
// The writer publishes as fast as the buffer lets it (reliable: it waits for the slowest
// subscriber; lossy: never). Each message carries the CLOCK_MONOTONIC time it was written; each
// subscriber measures now - stamp for every message it reads, so its latency includes the time
// a message queued behind others (up to `capacity` of them). Counters:
//   items_per_second      messages published per second
//   latency_mean_ns       mean over subscribers of their mean write-to-read latency
//   latency_worst_mean_ns the slowest subscriber's mean latency
//   received_per_sub      messages each subscriber read, on average (lossy: < published)
//
// Numbers mean something only on a quiet machine with at least 1 + N CPUs to spare.
#include <benchmark/benchmark.h>
#include <sys/wait.h>
#include <unistd.h>

#include <asio/io_context.hpp>
#include <asio/local/connect_pair.hpp>
#include <asio/local/stream_protocol.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <shmio/broadcast_buffer.hpp>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;

constexpr std::size_t message_size = 64;

struct message {
  std::uint64_t seq;      // 1, 2, ...; 0 ends the run
  std::int64_t stamp_ns;  // steady_clock (CLOCK_MONOTONIC, the same in every process)
  std::uint8_t pad[message_size - 16];
};
static_assert(sizeof(message) == message_size);

struct subscriber_report {
  std::uint64_t received = 0;
  std::uint64_t lost = 0;
  std::int64_t latency_sum_ns = 0;
  std::uint64_t failed = 0;  // it stopped before the end message: the run measures nothing
};

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A subscriber process: reads until the end message, then writes its report to `out`.
[[noreturn]] void subscriber(const std::string& name, int out) {
  subscriber_report r;
  try {
    asio::io_context io;
    shmio::broadcast_buffer sub(io.get_executor(), shmio::open_only, name,
                                shmio::broadcast_role::subscriber);
    message m{};
    for (;;) {
      std::error_code ec;
      const std::size_t n = sub.read(asio::buffer(&m, sizeof m), 30'000ms, ec);
      if (ec == shmio::errc::messages_lost) {
        r.lost += n;
        continue;
      }
      if (ec || n != sizeof m) {
        r.failed = 1;
        break;
      }
      if (m.seq == 0) break;  // the end message
      r.latency_sum_ns += now_ns() - m.stamp_ns;
      ++r.received;
    }
  } catch (...) {
    r.failed = 1;
  }
  if (::write(out, &r, sizeof r) != sizeof r) ::_exit(1);
  ::_exit(0);
}

// Reads each subscriber's report from its pipe, reaps it, and sets the latency counters.
void report_subscribers(benchmark::State& state, const std::vector<pid_t>& children,
                        const std::vector<int>& pipes) {
  double mean_sum = 0, worst = 0, received = 0;
  for (std::size_t i = 0; i < children.size(); ++i) {
    subscriber_report r;
    if (::read(pipes[i], &r, sizeof r) != sizeof r) state.SkipWithError("no report");
    if (r.failed != 0) state.SkipWithError("a subscriber failed before the end message");
    ::close(pipes[i]);
    ::waitpid(children[i], nullptr, 0);
    const double mean = r.received ? static_cast<double>(r.latency_sum_ns) / r.received : 0;
    mean_sum += mean;
    worst = std::max(worst, mean);
    received += static_cast<double>(r.received);
  }
  const auto n = static_cast<double>(children.size());
  state.counters["latency_mean_ns"] = mean_sum / n;
  state.counters["latency_worst_mean_ns"] = worst;
  state.counters["received_per_sub"] = received / n;
}

void BM_broadcast(benchmark::State& state) {
  const int subscribers = static_cast<int>(state.range(0));
  const bool lossy = state.range(1) != 0;
  const std::string name = "shmio-bench.broadcast." + std::to_string(::getpid());
  asio::io_context io;
  shmio::broadcast_options options;
  options.mode = lossy ? shmio::broadcast_mode::lossy : shmio::broadcast_mode::reliable;
  options.capacity = 256;
  options.message_size = message_size;
  shmio::broadcast_buffer pub(io.get_executor(), shmio::create_only, name,
                              shmio::broadcast_role::publisher, options);

  std::vector<pid_t> children;
  std::vector<int> pipes;
  for (int i = 0; i < subscribers; ++i) {
    int fds[2];
    if (::pipe(fds) != 0) return state.SkipWithError("pipe");
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(fds[0]);
      subscriber(name, fds[1]);
    }
    ::close(fds[1]);
    children.push_back(pid);
    pipes.push_back(fds[0]);
  }
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (pub.subscriber_count() < static_cast<std::size_t>(subscribers)) {
    if (std::chrono::steady_clock::now() > deadline)
      return state.SkipWithError("subscribers did not join");
    std::this_thread::sleep_for(1ms);
  }

  message m{};
  std::uint64_t seq = 0;
  bool published = true;
  for (auto _ : state) {
    m.seq = ++seq;
    m.stamp_ns = now_ns();
    if (pub.write(asio::buffer(&m, sizeof m), 30'000ms) != sizeof m) {
      published = false;  // timed out: a subscriber stuck for 30 s
      break;
    }
  }
  if (!published) state.SkipWithError("a publish timed out");
  state.SetItemsProcessed(static_cast<std::int64_t>(seq));

  // The end message: lossy subscribers may miss one, so repeat it until they are all gone.
  m.seq = 0;
  while (pub.subscriber_count() > 0) {
    pub.write(asio::buffer(&m, sizeof m), 1'000ms);
    std::this_thread::sleep_for(100us);
  }
  report_subscribers(state, children, pipes);
}

// A baseline subscriber process: reads 64-byte messages from its socket until the end message.
[[noreturn]] void stream_subscriber(asio::local::stream_protocol::socket& sock, int out) {
  subscriber_report r;
  try {
    message m{};
    for (;;) {
      asio::read(sock, asio::buffer(&m, sizeof m));
      if (m.seq == 0) break;
      r.latency_sum_ns += now_ns() - m.stamp_ns;
      ++r.received;
    }
  } catch (...) {
  }
  if (::write(out, &r, sizeof r) != sizeof r) ::_exit(1);
  ::_exit(0);
}

void BM_broadcast_local_stream(benchmark::State& state) {
  const int subscribers = static_cast<int>(state.range(0));
  asio::io_context io;
  std::vector<asio::local::stream_protocol::socket> writers;
  std::vector<pid_t> children;
  std::vector<int> pipes;
  for (int i = 0; i < subscribers; ++i) {
    asio::local::stream_protocol::socket ours(io), theirs(io);
    asio::local::connect_pair(ours, theirs);
    int fds[2];
    if (::pipe(fds) != 0) return state.SkipWithError("pipe");
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(fds[0]);
      ours.close();
      for (auto& w : writers)
        w.close();
      stream_subscriber(theirs, fds[1]);
    }
    ::close(fds[1]);
    theirs.close();
    writers.push_back(std::move(ours));
    children.push_back(pid);
    pipes.push_back(fds[0]);
  }

  message m{};
  std::uint64_t seq = 0;
  for (auto _ : state) {
    m.seq = ++seq;
    m.stamp_ns = now_ns();
    for (auto& w : writers)
      asio::write(w, asio::buffer(&m, sizeof m));
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(seq));

  m.seq = 0;
  for (auto& w : writers)
    asio::write(w, asio::buffer(&m, sizeof m));
  report_subscribers(state, children, pipes);
}

BENCHMARK(BM_broadcast_local_stream)
    ->Arg(1)
    ->Arg(4)
    ->ArgName("subscribers")
    ->UseRealTime()
    ->MinTime(0.5);

BENCHMARK(BM_broadcast)
    ->ArgsProduct({{1, 4}, {0, 1}})
    ->ArgNames({"subscribers", "lossy"})
    ->UseRealTime()
    ->MinTime(0.5);

}  // namespace

BENCHMARK_MAIN();
