// Crash trials: kill -9 a ring writer, a ring reader, an rpc owner or an rpc opener at a random
// moment (or while it holds a node inside an in-place callback, a batch read's included), and
// check what the survivor sees (the ring victims mix single calls and batches):
//
//   - it never stalls: after the kill it drains what is left and pushes 2 x node_count fresh
//     messages through the ring within 1 s (so the dead party's node was skipped or freed);
//   - every message whose write completed (the writer reports each completed sequence number
//     through a pipe) is delivered exactly once, except the one message a killed reader held;
//   - no half-written message is delivered (each message carries a checksum);
//   - an rpc call pending at the kill fails with peer_gone within 100 ms;
//   - the segment file is gone once the survivor closes its end.
//
//   shmio_crash_trials [TRIALS] [SEED]    (TRIALS: default 24, or $SHMIO_CRASH_TRIALS)
//   SHMIO_CRASH_TIME_SCALE=N multiplies the 1 s and 100 ms bounds (sanitizer builds).
//
// Prints one summary line and exits 1 on any violation. The program is its own peer: it runs
// the victim as `shmio_crash_trials --victim ROLE ...` (fork + exec).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "shmio/circular_buffer.hpp"
#include "shmio/rpc_buffer.hpp"
#include "shmio/segment.hpp"

namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
using shmio::circular_buffer;

constexpr std::uint64_t marker_holding = ~std::uint64_t{0};  // "I am inside the callback now"
// "A write batch of (this & 0xffff) messages starts now": they may be published but not reported.
constexpr std::uint64_t batch_marker = std::uint64_t{0xfffe} << 48;
constexpr std::size_t batch_max = 8;
// SHMIO_CRASH_TIME_SCALE multiplies both bounds, for sanitizer builds (several times slower).
long time_scale() {
  const char* v = std::getenv("SHMIO_CRASH_TIME_SCALE");
  return v ? std::max(1L, std::atol(v)) : 1L;
}
const auto stall_bound = 1000ms * time_scale();
const auto peer_gone_bound = 100ms * time_scale();
constexpr std::size_t data_max = 40;

// ---- messages ---------------------------------------------------------------------------------

struct message {
  std::uint32_t writer;
  std::uint32_t seq;
  std::uint64_t checksum;  // fnv1a over writer, seq and the data bytes sent
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

std::uint64_t checksum(const message& m, std::size_t data_size) {
  std::uint64_t h = fnv1a(&m.writer, sizeof m.writer);
  h = fnv1a(&m.seq, sizeof m.seq, h);
  return fnv1a(m.data, data_size, h);
}

std::size_t make_message(message& m, std::uint32_t writer, std::uint32_t seq) {
  m.writer = writer;
  m.seq = seq;
  const std::size_t n = (seq * 7u + writer) % (data_max + 1);
  for (std::size_t i = 0; i < n; ++i)
    m.data[i] = static_cast<std::uint8_t>(seq * 31u + i);
  m.checksum = checksum(m, n);
  return header_size + n;
}

// The message's key (writer << 32 | seq), or nullopt-like false if it is torn.
bool check_message(std::span<const std::byte> bytes, std::uint64_t& key) {
  message m{};
  if (bytes.size() < header_size || bytes.size() > sizeof m) return false;
  std::memcpy(&m, bytes.data(), bytes.size());
  if (m.checksum != checksum(m, bytes.size() - header_size)) return false;
  key = std::uint64_t{m.writer} << 32 | m.seq;
  return true;
}

// ---- the pipe a victim reports through ----------------------------------------------------------

void report(int fd, std::uint64_t v) {
  if (::write(fd, &v, sizeof v) != sizeof v) ::_exit(90);
}

// Reads every whole record available (waiting up to `timeout` for the first); false at EOF.
bool collect(int fd, std::vector<std::uint64_t>& out, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, timeout_ms) <= 0) return true;
  std::uint64_t buf[512];
  const ssize_t n = ::read(fd, buf, sizeof buf);
  if (n <= 0) return false;
  out.insert(out.end(), buf, buf + n / sizeof(std::uint64_t));
  return true;
}

// ---- victims (run in the child process) -----------------------------------------------------

[[noreturn]] void hold_forever() {
  for (;;)
    ::pause();
}

// Writes seq 0, 1, ... as writer 1, in turn with write, write_in_place and write_batch (up to
// batch_max messages), reporting each completed one (a batch's in one pipe write, which a kill
// cannot split, after a batch_marker record naming how many it tries). At seq `hold_at`, fills
// half the node inside write_in_place and stays there.
int victim_writer(const std::string& name, int fd, long hold_at) {
  asio::io_context io;
  circular_buffer ring(io.get_executor(), shmio::open_only, name);
  message m{};
  message batch[batch_max];
  asio::const_buffer buffers[batch_max];
  for (std::uint32_t seq = 0;;) {
    if (seq % 3 == 2 && seq != hold_at) {
      // Never past hold_at: the hold is a write_in_place of its own.
      std::size_t k = batch_max;
      if (hold_at > static_cast<long>(seq))
        k = std::min<std::size_t>(k, static_cast<std::size_t>(hold_at - seq));
      for (std::size_t i = 0; i < k; ++i)
        buffers[i] = asio::buffer(&batch[i], make_message(batch[i], 1, seq + std::uint32_t(i)));
      report(fd, batch_marker | k);
      const std::size_t n = ring.write_batch(std::span(buffers, k), 10s);
      std::uint64_t done[batch_max];
      for (std::size_t i = 0; i < n; ++i)
        done[i] = std::uint64_t{1} << 32 | (seq + i);
      if (n > 0 && ::write(fd, done, n * sizeof done[0]) != static_cast<ssize_t>(n * 8)) _exit(90);
      seq += static_cast<std::uint32_t>(n);
      continue;
    }
    const std::size_t n = make_message(m, 1, seq);
    if (seq == hold_at) {
      ring.write_in_place(
          [&](std::span<std::byte> node) -> std::size_t {
            std::memcpy(node.data(), &m, n / 2);  // half a message: never to be delivered
            report(fd, marker_holding);
            hold_forever();
          },
          10s);
    } else if (seq % 3 == 1) {
      ring.write_in_place(
          [&](std::span<std::byte> node) {
            std::memcpy(node.data(), &m, n);
            return n;
          },
          10s);
    } else {
      ring.write(asio::buffer(&m, n), 10s);
    }
    report(fd, std::uint64_t{1} << 32 | seq);
    ++seq;
  }
}

// Reads messages, in turn with read, read_in_place and read_batch_in_place (up to batch_max),
// reporting each one it got (inside the in-place calls, before the node is released). At its
// `hold_at`-th message it reports the message inside read_in_place, or inside the batch it falls
// in, and stays there.
int victim_reader(const std::string& name, int fd, long hold_at) {
  asio::io_context io;
  circular_buffer ring(io.get_executor(), shmio::open_only, name);
  report(fd, marker_holding - 1);  // ready
  auto take = [&](std::span<const std::byte> bytes, bool hold) {
    std::uint64_t key = 0;
    if (!check_message(bytes, key)) ::_exit(91);
    report(fd, key);
    if (hold) {
      report(fd, marker_holding);
      hold_forever();
    }
  };
  long i = 0;  // messages taken so far
  for (unsigned call = 0;; ++call) {
    auto one = [&](std::span<const std::byte> bytes) {
      const bool hold = i++ == hold_at;
      take(bytes, hold);
    };
    if (call % 3 == 2) {
      ring.read_batch_in_place(one, batch_max, 10s);
    } else if (i == hold_at || call % 3 == 1) {
      ring.read_in_place(one, 10s);
    } else {
      message m{};
      const std::size_t n = ring.read(asio::buffer(&m, sizeof m), 10s);
      one(std::as_bytes(std::span(&m, 1)).first(n));
    }
  }
}

// An rpc end that answers "ready" requests at once and holds every other one for an hour.
int victim_rpc(const std::string& name, int fd, bool owner) {
  asio::io_context io;
  auto handler = [](std::uint64_t,
                    std::span<const std::byte> in) -> asio::awaitable<std::vector<std::byte>> {
    if (in.size() == 1) co_return std::vector<std::byte>(in.begin(), in.end());
    asio::steady_timer forever(co_await asio::this_coro::executor, 1h);
    co_await forever.async_wait(asio::use_awaitable);
    co_return std::vector<std::byte>{};
  };
  shmio::rpc_options options;
  options.node_count = 4;
  options.node_size = 1024;
  std::optional<shmio::rpc_buffer> rpc;
  if (owner)
    rpc.emplace(io.get_executor(), shmio::create_only, name, shmio::rpc_handler(handler), options);
  else
    rpc.emplace(io.get_executor(), shmio::open_only, name, shmio::rpc_handler(handler));
  report(fd, marker_holding - 1);  // ready
  io.run();
  return 0;
}

// ---- the survivor (this process) --------------------------------------------------------------

struct totals {
  unsigned trials = 0, kills = 0, in_callback = 0;  // kills that landed inside an in-place call
  std::uint64_t checked = 0, lost = 0, duplicated = 0, torn = 0, stalls = 0, late = 0,
                wrong_error = 0, leftover_files = 0, lost_with_reader = 0;
  std::int64_t max_recovery_ms = 0, max_peer_gone_ms = 0;
  std::uint64_t violations() const {
    return lost + duplicated + torn + stalls + late + wrong_error + leftover_files;
  }
  bool ok() const { return violations() == 0; }
};

struct victim {
  pid_t pid = -1;
  int fd = -1;  // read end of its report pipe
};

victim spawn(const std::string& self, const std::vector<std::string>& args) {
  int p[2];
  if (::pipe(p) != 0) std::abort();
  std::vector<std::string> argv{self, "--victim"};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back(std::to_string(p[1]));
  std::vector<char*> cargv;
  for (auto& a : argv)
    cargv.push_back(a.data());
  cargv.push_back(nullptr);
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(p[0]);
    ::execv(cargv[0], cargv.data());
    ::_exit(98);
  }
  ::close(p[1]);
  return {pid, p[0]};
}

void kill9(victim& v) {
  ::kill(v.pid, SIGKILL);
  ::waitpid(v.pid, nullptr, 0);
}

bool file_exists(const std::string& path) {
  return ::access(path.c_str(), F_OK) == 0;
}

std::int64_t ms_since(clock_type::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - t).count();
}

// After a kill: the survivor writes and reads back 2 x node_count messages as writer 2. False
// if that does not finish by `deadline`.
bool ring_still_flows(circular_buffer& ring, clock_type::time_point deadline, totals& t) {
  message m{};
  for (std::uint32_t seq = 0; seq < 2 * ring.node_count(); ++seq) {
    const std::size_t n = make_message(m, 2, seq);
    std::error_code ec;
    while (ring.write(asio::buffer(&m, n), 5ms, ec) == 0)
      if (clock_type::now() > deadline) return false;
    message r{};
    std::size_t got = 0;
    while ((got = ring.read(asio::buffer(&r, sizeof r), 5ms, ec)) == 0)
      if (clock_type::now() > deadline) return false;
    std::uint64_t key = 0;
    if (!check_message(std::as_bytes(std::span(&r, 1)).first(got), key)) ++t.torn;
    if (key != (std::uint64_t{2} << 32 | seq)) ++t.lost;  // a stale message came first
  }
  return true;
}

// Kills a writer at a random moment or holding a node; the survivor is the reader.
void trial_ring_writer(const std::string& self, const std::string& name, std::mt19937_64& rng,
                       totals& t) {
  asio::io_context io;
  const std::size_t nodes = 2 + rng() % 7;
  std::string path;
  circular_buffer ring(io.get_executor(), shmio::create_only, name, nodes, sizeof(message));
  {
    shmio::segment probe(shmio::open_only, name, shmio::object_kind::circular_buffer);
    path = probe.path();
  }
  const long hold_at = rng() % 2 ? static_cast<long>(rng() % 64) : -1;
  const auto kill_after = std::chrono::microseconds(rng() % 30'000);
  victim v = spawn(self, {"writer", name, std::to_string(hold_at)});
  std::vector<std::uint64_t> reported;
  std::map<std::uint64_t, int> delivered;
  auto read_some = [&](std::chrono::milliseconds timeout) {
    message m{};
    std::error_code ec;
    const std::size_t n = ring.read(asio::buffer(&m, sizeof m), timeout, ec);
    if (n == 0) return false;
    std::uint64_t key = 0;
    if (!check_message(std::as_bytes(std::span(&m, 1)).first(n), key))
      ++t.torn;
    else
      ++delivered[key];
    return true;
  };
  const auto start = clock_type::now();
  bool holding = false;
  while (!holding && clock_type::now() - start < (hold_at >= 0 ? 5s : kill_after)) {
    read_some(1ms);
    collect(v.fd, reported, 0);
    holding = !reported.empty() && reported.back() == marker_holding;
  }
  kill9(v);
  const auto killed = clock_type::now();
  ++t.kills;
  t.in_callback += holding;
  while (collect(v.fd, reported, 100)) {
  }
  ::close(v.fd);
  std::erase(reported, marker_holding);
  // Published but not reported: the message after the last reported one, or as many as the
  // batch under way at the kill was writing.
  auto is_batch_marker = [](std::uint64_t v) { return v >> 48 == batch_marker >> 48; };
  const std::uint64_t unreported =
      !reported.empty() && is_batch_marker(reported.back()) ? reported.back() & 0xffff : 1;
  std::erase_if(reported, is_batch_marker);
  // Drain: every reported message must come out; then the ring must still flow.
  std::set<std::uint64_t> want(reported.begin(), reported.end());
  const auto deadline = killed + stall_bound;
  for (;;) {
    bool all = true;
    for (auto k : want)
      if (!delivered.count(k)) all = false;
    if (all || clock_type::now() > deadline) break;
    read_some(5ms);
  }
  while (read_some(0ms)) {
  }
  if (!ring_still_flows(ring, deadline, t)) ++t.stalls;
  t.max_recovery_ms = std::max(t.max_recovery_ms, ms_since(killed));
  const std::uint64_t last = reported.empty() ? 0 : reported.back();
  for (auto k : want)
    if (!delivered.count(k)) ++t.lost;
  for (auto& [k, count] : delivered) {
    t.checked += count;
    if (count > 1) t.duplicated += count - 1;
    // Delivered but not reported: only what the writer finished just before the kill.
    const std::uint64_t next = reported.empty() ? std::uint64_t{1} << 32 : last + 1;
    if (!want.count(k) && !(k >= next && k < next + unreported)) ++t.torn;
  }
  ring.close();
  if (file_exists(path)) ++t.leftover_files;
}

// Kills a reader at a random moment or while it holds a node in read_in_place; the survivor is
// the writer (and reads what is left).
void trial_ring_reader(const std::string& self, const std::string& name, std::mt19937_64& rng,
                       totals& t) {
  asio::io_context io;
  const std::size_t nodes = 2 + rng() % 7;
  std::string path;
  circular_buffer ring(io.get_executor(), shmio::create_only, name, nodes, sizeof(message));
  {
    shmio::segment probe(shmio::open_only, name, shmio::object_kind::circular_buffer);
    path = probe.path();
  }
  const long hold_at = rng() % 2 ? static_cast<long>(rng() % 64) : -1;
  const auto kill_after = std::chrono::microseconds(rng() % 30'000);
  victim v = spawn(self, {"reader", name, std::to_string(hold_at)});
  std::vector<std::uint64_t> reported;
  while (reported.empty() && collect(v.fd, reported, 5000)) {
  }
  reported.clear();  // the "ready" record
  std::set<std::uint64_t> written;
  std::uint32_t seq = 0;
  message m{};
  const auto start = clock_type::now();
  bool holding = false;
  while (!holding && clock_type::now() - start < (hold_at >= 0 ? 5s : kill_after)) {
    const std::size_t n = make_message(m, 1, seq);
    std::error_code ec;
    if (ring.write(asio::buffer(&m, n), 1ms, ec) != 0)
      written.insert(std::uint64_t{1} << 32 | seq++);
    collect(v.fd, reported, 0);
    holding = !reported.empty() && reported.back() == marker_holding;
  }
  kill9(v);
  const auto killed = clock_type::now();
  ++t.kills;
  t.in_callback += holding;
  while (collect(v.fd, reported, 100)) {
  }
  ::close(v.fd);
  std::erase(reported, marker_holding);
  std::map<std::uint64_t, int> delivered;
  for (auto k : reported)
    ++delivered[k];
  // Drain what is left (the survivor is now the only writer: nothing is half-way).
  for (;;) {
    message r{};
    std::error_code ec;
    const std::size_t n = ring.read(asio::buffer(&r, sizeof r), 0ms, ec);
    if (n == 0) break;
    std::uint64_t key = 0;
    if (!check_message(std::as_bytes(std::span(&r, 1)).first(n), key))
      ++t.torn;
    else
      ++delivered[key];
  }
  if (!ring_still_flows(ring, killed + stall_bound, t)) ++t.stalls;
  t.max_recovery_ms = std::max(t.max_recovery_ms, ms_since(killed));
  std::uint64_t missing = 0;
  for (auto k : written)
    if (!delivered.count(k)) ++missing;
  // The one message the reader held (or had read but not yet reported) dies with it.
  t.lost_with_reader += std::min<std::uint64_t>(missing, 1);
  t.lost += missing > 1 ? missing - 1 : 0;
  for (auto& [k, count] : delivered) {
    t.checked += count;
    if (count > 1) t.duplicated += count - 1;
    if (!written.count(k)) ++t.torn;
  }
  ring.close();
  if (file_exists(path)) ++t.leftover_files;
}

// Kills one end of an rpc channel while the survivor has calls pending at it (some of them
// long enough to need many packets); they must fail with peer_gone within 100 ms.
void trial_rpc(const std::string& self, const std::string& name, bool kill_owner,
               std::mt19937_64& rng, totals& t) {
  asio::io_context io;
  shmio::rpc_options options;
  options.node_count = 4;
  options.node_size = 1024;
  std::optional<shmio::rpc_buffer> rpc;
  victim v;
  std::vector<std::uint64_t> reported;
  if (kill_owner) {
    v = spawn(self, {"rpc-owner", name});
    while (reported.empty() && collect(v.fd, reported, 5000)) {
    }
    rpc.emplace(io.get_executor(), shmio::open_only, name);
  } else {
    rpc.emplace(io.get_executor(), shmio::create_only, name, shmio::rpc_handler{}, options);
    v = spawn(self, {"rpc-opener", name});
    while (reported.empty() && collect(v.fd, reported, 5000)) {
    }
  }
  std::string path;
  {
    shmio::segment probe(shmio::open_only, name, shmio::object_kind::rpc);
    path = probe.path();
  }
  // One quick call proves the other end is attached; then the held ones.
  const unsigned held = 1 + rng() % 4;
  unsigned pending = 0, gone = 0;
  std::int64_t latest_ms = 0;
  clock_type::time_point killed{};
  bool quick_done = false;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        const char one = 'q';
        co_await rpc->async_request(asio::buffer(&one, 1), 5s, asio::use_awaitable);
        quick_done = true;
      },
      [&](std::exception_ptr e) {
        if (e) ++t.wrong_error;
      });
  while (!quick_done && io.run_one_for(5s)) {
  }
  for (unsigned i = 0; i < held; ++i) {
    const std::size_t size = rng() % 2 ? 2 + rng() % 64 : 2 + rng() % (64 * 1024);
    std::vector<char> payload(size, 'h');
    ++pending;
    rpc->async_request(asio::buffer(payload), 30s, [&](std::error_code ec, std::vector<std::byte>) {
      --pending;
      if (ec == shmio::errc::peer_gone)
        ++gone;
      else
        ++t.wrong_error;
      latest_ms = std::max(latest_ms, ms_since(killed));
    });
  }
  const auto until = clock_type::now() + std::chrono::microseconds(rng() % 20'000);
  while (clock_type::now() < until)
    io.run_one_until(until);
  killed = clock_type::now();
  kill9(v);
  ++t.kills;
  ::close(v.fd);
  while (pending > 0 && clock_type::now() - killed < stall_bound)
    io.run_one_for(10ms);
  t.checked += held;
  if (pending > 0) ++t.stalls;
  if (latest_ms > peer_gone_bound.count()) ++t.late;
  t.max_peer_gone_ms = std::max(t.max_peer_gone_ms, latest_ms);
  rpc->close();
  io.restart();
  io.poll();
  if (file_exists(path)) ++t.leftover_files;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc >= 2 && std::string(argv[1]) == "--victim") {
      const std::string role = argv[2];
      const int fd = std::atoi(argv[argc - 1]);
      if (role == "writer") return victim_writer(argv[3], fd, std::atol(argv[4]));
      if (role == "reader") return victim_reader(argv[3], fd, std::atol(argv[4]));
      if (role == "rpc-owner") return victim_rpc(argv[3], fd, true);
      if (role == "rpc-opener") return victim_rpc(argv[3], fd, false);
      return 2;
    }
    const char* env = std::getenv("SHMIO_CRASH_TRIALS");
    const unsigned trials = argc >= 2 ? std::stoul(argv[1]) : env ? std::stoul(env) : 24;
    const std::uint64_t seed = argc >= 3 ? std::stoull(argv[2]) : std::random_device{}();
    std::mt19937_64 rng(seed);
    const std::string self = "/proc/self/exe";
    char exe[4096];
    const ssize_t len = ::readlink(self.c_str(), exe, sizeof exe - 1);
    if (len <= 0) return 2;
    exe[len] = 0;
    totals t;
    const auto start = clock_type::now();
    for (unsigned i = 0; i < trials; ++i) {
      const std::string name =
          "shmio-test.crash." + std::to_string(::getpid()) + "." + std::to_string(i);
      const totals before = t;
      const char* kind = "";
      switch (i % 4) {
        case 0:
          kind = "ring writer", trial_ring_writer(exe, name, rng, t);
          break;
        case 1:
          kind = "ring reader", trial_ring_reader(exe, name, rng, t);
          break;
        case 2:
          kind = "rpc owner", trial_rpc(exe, name, true, rng, t);
          break;
        case 3:
          kind = "rpc opener", trial_rpc(exe, name, false, rng, t);
          break;
      }
      ++t.trials;
      if (t.violations() != before.violations())
        std::printf(
            "crash trials: trial %u (kill %s) failed: lost %llu, duplicated %llu, "
            "torn %llu, stalls %llu, late %llu, wrong errors %llu, files %llu\n",
            i, kind, (unsigned long long)(t.lost - before.lost),
            (unsigned long long)(t.duplicated - before.duplicated),
            (unsigned long long)(t.torn - before.torn),
            (unsigned long long)(t.stalls - before.stalls),
            (unsigned long long)(t.late - before.late),
            (unsigned long long)(t.wrong_error - before.wrong_error),
            (unsigned long long)(t.leftover_files - before.leftover_files));
      std::error_code ignored;
      shmio::segment::remove(name, ignored);
    }
    std::printf(
        "crash trials: %u trials, %u kills (%u inside an in-place callback), %llu messages "
        "checked, %llu lost, %llu duplicated, "
        "%llu stalls, %llu half-written, %llu late peer_gone, %llu wrong errors, %llu files left "
        "(%llu held by killed readers; max recovery %lld ms, max peer_gone %lld ms; seed %llu, "
        "%lld ms) %s\n",
        t.trials, t.kills, t.in_callback, (unsigned long long)t.checked, (unsigned long long)t.lost,
        (unsigned long long)t.duplicated, (unsigned long long)t.stalls, (unsigned long long)t.torn,
        (unsigned long long)t.late, (unsigned long long)t.wrong_error,
        (unsigned long long)t.leftover_files, (unsigned long long)t.lost_with_reader,
        (long long)t.max_recovery_ms, (long long)t.max_peer_gone_ms, (unsigned long long)seed,
        (long long)ms_since(start), t.ok() ? "PASS" : "FAIL");
    return t.ok() ? 0 : 1;
  } catch (const std::exception& e) {
    std::printf("crash trials: error: %s\n", e.what());
    return 1;
  }
}
