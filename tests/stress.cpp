// Stress: P producers and C consumers pass checksummed messages through one circular_buffer,
// as separate processes or as threads of this one (each with its own handle). Every consumer
// sums what it got per producer (count, sum and xor of a hash of each sequence number) and
// counts torn messages and messages out of order; the totals must match what was sent: no
// loss, no duplicate, nothing torn.
//
//   shmio_stress processes|threads [PRODUCERS CONSUMERS MESSAGES_PER_PRODUCER NODES [spsc]]
//   (defaults 4 4 20000 16; the long mode is `shmio_stress processes 4 4 2500000`: 10 M;
//   `spsc` makes a single-writer ring, for 1 producer and 1 consumer)
//
// Prints one summary line and exits 1 on any violation.
#include <sys/wait.h>
#include <unistd.h>

#include <asio/io_context.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "shmio/circular_buffer.hpp"

namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

constexpr std::uint32_t stop_marker = 0xffffffffu;
constexpr std::size_t max_producers = 16;
constexpr std::size_t data_max = 40;
constexpr auto bound = 60s;  // a blocking call that takes this long counts as a stall

struct message {
  std::uint32_t producer;
  std::uint32_t seq;
  std::uint64_t checksum;
  std::uint8_t data[data_max];
};
constexpr std::size_t header_size = offsetof(message, data);

std::uint64_t fnv1a(const void* p, std::size_t n, std::uint64_t h = 0xcbf29ce484222325ull) {
  const auto* b = static_cast<const std::uint8_t*>(p);
  for (std::size_t i = 0; i < n; ++i) {
    h ^= b[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

std::uint64_t checksum(const message& m, std::size_t n) {
  return fnv1a(m.data, n, fnv1a(&m.seq, 4, fnv1a(&m.producer, 4)));
}

std::uint64_t mix(std::uint32_t producer, std::uint32_t seq) {  // splitmix64
  std::uint64_t z = (std::uint64_t{producer} << 32 | seq) + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

struct tally {
  std::uint64_t count[max_producers] = {};
  std::uint64_t sum[max_producers] = {};
  std::uint64_t xors[max_producers] = {};
  std::uint64_t torn = 0, out_of_order = 0, stalls = 0;
};

int produce(const std::string& name, std::uint32_t producer, std::uint32_t count) {
  asio::io_context io;
  shmio::circular_buffer ring(io.get_executor(), shmio::open_only, name);
  message m{};
  for (std::uint32_t seq = 0; seq < count; ++seq) {
    m.producer = producer;
    m.seq = seq;
    const std::size_t n = mix(producer, seq) % (data_max + 1);
    for (std::size_t i = 0; i < n; ++i)
      m.data[i] = static_cast<std::uint8_t>(seq + i);
    m.checksum = checksum(m, n);
    std::error_code ec;
    if (seq % 2) {
      ring.write_in_place(
          [&](std::span<std::byte> node) {
            std::memcpy(node.data(), &m, header_size + n);
            return header_size + n;
          },
          bound, ec);
    } else {
      ring.write(asio::buffer(&m, header_size + n), bound, ec);
    }
    if (ec) {
      std::fprintf(stderr, "stress: a producer's write failed: %s\n", ec.message().c_str());
      return 1;
    }
  }
  return 0;
}

void consume(const std::string& name, tally& t) {
  asio::io_context io;
  shmio::circular_buffer ring(io.get_executor(), shmio::open_only, name);
  std::int64_t last[max_producers];
  std::fill(std::begin(last), std::end(last), -1);
  for (;;) {
    message m{};
    std::error_code ec;
    const std::size_t n = ring.read(asio::buffer(&m, sizeof m), bound, ec);
    if (ec) {
      std::fprintf(stderr, "stress: a consumer's read failed: %s\n", ec.message().c_str());
      ++t.stalls;
      return;
    }
    if (n >= header_size && m.producer == stop_marker) return;
    if (n < header_size || m.producer >= max_producers ||
        m.checksum != checksum(m, n - header_size)) {
      ++t.torn;
      continue;
    }
    const auto p = m.producer;
    if (static_cast<std::int64_t>(m.seq) <= last[p]) ++t.out_of_order;
    last[p] = m.seq;
    ++t.count[p];
    t.sum[p] += mix(p, m.seq);
    t.xors[p] ^= mix(p, m.seq);
  }
}

void send_stops(const std::string& name, std::size_t consumers) {
  asio::io_context io;
  shmio::circular_buffer ring(io.get_executor(), shmio::open_only, name);
  message stop{};
  stop.producer = stop_marker;
  for (std::size_t i = 0; i < consumers; ++i)
    ring.write(asio::buffer(&stop, header_size), bound);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 ||
      (std::strcmp(argv[1], "processes") != 0 && std::strcmp(argv[1], "threads") != 0)) {
    std::fprintf(stderr, "usage: shmio_stress processes|threads [P C MESSAGES NODES [spsc]]\n");
    return 2;
  }
  const bool processes = std::strcmp(argv[1], "processes") == 0;
  const std::size_t producers = argc > 2 ? std::stoul(argv[2]) : 4;
  const std::size_t consumers = argc > 3 ? std::stoul(argv[3]) : 4;
  const auto per_producer = static_cast<std::uint32_t>(argc > 4 ? std::stoul(argv[4]) : 20000);
  const std::size_t nodes = argc > 5 ? std::stoul(argv[5]) : 16;
  const bool spsc = argc > 6 && std::strcmp(argv[6], "spsc") == 0;
  if (producers == 0 || producers > max_producers || consumers == 0) return 2;
  if (spsc && (producers != 1 || consumers != 1)) return 2;
  const std::string name = "shmio-test.stress." + std::to_string(::getpid());
  asio::io_context io;
  shmio::circular_buffer ring(io.get_executor(), shmio::create_only, name, nodes, sizeof(message),
                              spsc ? shmio::ring_mode::spsc : shmio::ring_mode::mpmc);
  const auto start = clock_type::now();
  std::vector<tally> tallies(consumers);
  bool producers_ok = true;
  if (processes) {
    // Each consumer sends its tally back through a pipe; nothing of this process is used in
    // the children but the name (they open their own handles).
    std::vector<int> pipes;
    std::vector<pid_t> consumer_pids, producer_pids;
    std::fflush(nullptr);
    for (std::size_t c = 0; c < consumers; ++c) {
      int p[2];
      if (::pipe(p) != 0) return 2;
      const pid_t pid = ::fork();
      if (pid == 0) {
        ::close(p[0]);
        tally t;
        consume(name, t);
        const bool ok = ::write(p[1], &t, sizeof t) == sizeof t;
        ::_exit(ok ? 0 : 1);
      }
      ::close(p[1]);
      pipes.push_back(p[0]);
      consumer_pids.push_back(pid);
    }
    for (std::size_t p = 0; p < producers; ++p) {
      const pid_t pid = ::fork();
      if (pid == 0) ::_exit(produce(name, static_cast<std::uint32_t>(p), per_producer));
      producer_pids.push_back(pid);
    }
    for (pid_t pid : producer_pids) {
      int st = 0;
      ::waitpid(pid, &st, 0);
      producers_ok = producers_ok && WIFEXITED(st) && WEXITSTATUS(st) == 0;
    }
    send_stops(name, consumers);
    for (std::size_t c = 0; c < consumers; ++c) {
      if (::read(pipes[c], &tallies[c], sizeof(tally)) != sizeof(tally)) tallies[c].stalls++;
      ::close(pipes[c]);
      ::waitpid(consumer_pids[c], nullptr, 0);
    }
  } else {
    std::vector<std::thread> threads;
    std::vector<int> results(producers, 0);
    for (std::size_t c = 0; c < consumers; ++c)
      threads.emplace_back([&, c] { consume(name, tallies[c]); });
    std::vector<std::thread> writers;
    for (std::size_t p = 0; p < producers; ++p)
      writers.emplace_back(
          [&, p] { results[p] = produce(name, static_cast<std::uint32_t>(p), per_producer); });
    for (auto& w : writers)
      w.join();
    for (int r : results)
      producers_ok = producers_ok && r == 0;
    send_stops(name, consumers);
    for (auto& t : threads)
      t.join();
  }
  // Compare with what was sent.
  std::uint64_t received = 0, lost = 0, duplicated = 0, torn = 0, out_of_order = 0, stalls = 0;
  for (std::size_t p = 0; p < producers; ++p) {
    std::uint64_t count = 0, sum = 0, xors = 0, want_sum = 0, want_xor = 0;
    for (auto& t : tallies) {
      count += t.count[p];
      sum += t.sum[p];
      xors ^= t.xors[p];
    }
    for (std::uint32_t s = 0; s < per_producer; ++s) {
      want_sum += mix(static_cast<std::uint32_t>(p), s);
      want_xor ^= mix(static_cast<std::uint32_t>(p), s);
    }
    received += count;
    if (count < per_producer) lost += per_producer - count;
    if (count > per_producer) duplicated += count - per_producer;
    // Same count but a different set: one lost and one duplicated at least.
    if (count == per_producer && (sum != want_sum || xors != want_xor)) lost += 1, duplicated += 1;
  }
  for (auto& t : tallies) {
    torn += t.torn;
    out_of_order += t.out_of_order;
    stalls += t.stalls;
  }
  if (!producers_ok) ++stalls;
  const bool ok = lost + duplicated + torn + out_of_order + stalls == 0;
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - start).count();
  std::printf(
      "stress (%s): %zu producers x %zu consumers, %llu messages sent, %llu received, %llu lost, "
      "%llu duplicated, %llu torn, %llu out of order, %llu stalls, %lld ms (%.0f msg/s) %s\n",
      argv[1], producers, consumers, (unsigned long long)(producers * per_producer),
      (unsigned long long)received, (unsigned long long)lost, (unsigned long long)duplicated,
      (unsigned long long)torn, (unsigned long long)out_of_order, (unsigned long long)stalls,
      (long long)ms,
      ms > 0 ? 1000.0 * static_cast<double>(received) / static_cast<double>(ms) : 0.0,
      ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
