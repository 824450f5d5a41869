// BM_connect_pairs: what a thin command-line client pays per use, connect + one 64-byte call +
// close, between the same two processes (the measuring parent on CPU 0, the server in a forked
// child on CPU 1), in alternating blocks of:
//   socket        what a user would use instead: asio::local::stream_protocol, a blocking
//                 connect() to the child's acceptor, co_await one frame and its echo (a u32
//                 length, then the bytes), close()
//   shmio         shmio::rpc_buffer client(ex); client.connect(name) (blocking; the client makes
//                 the connection's channel, a segment of its own, and the child's rpc_server
//                 maps it); co_await client.async_request(); client.close()
//   mapped_floor  the floor of any design that maps a file per connection, even a file the
//                 service made ahead of time (a pool of ready channels): open a file the child
//                 made at start-up, as large as a connection's channel; mmap it; claim it with a
//                 compare-and-swap on its first word; write 64 bytes into its second page and
//                 wake the child with a futex; wait (futex) for the 64-byte answer in its third
//                 page; give the claim back; munmap; close. The child answers from a thread of
//                 its own that sleeps in futex_wait: no reactor, no io_context, nothing of shmio,
//                 so cheaper than anything a service in an event loop can be.
//   wake_floor    the same round trip on that file kept mapped: the two wake-ups and the copies
//                 alone, what the mapping's own cost is measured against
// Every other block is a socket block, and each block is compared with the socket blocks on
// either side (the wake-up costs move with vCPU placement: only adjacent blocks compare). The
// order of the other families rotates every round.
//
// Counters: <family>_over_socket (the median over blocks of the block's median connect + call +
// close over the mean of its two socket neighbours' medians); <family>_median_us (the median over
// blocks of the block's median). The io_context, and the process's one-time state (thread-locals,
// shmio's wait hub), are made once and kept: a real CLI process pays them once more.
//
// Every process is reaped and every file removed, also when the benchmark fails (session and
// leftovers, processes.hpp).
#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/local/stream_protocol.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/use_awaitable.hpp>
#include <atomic>
#include <chrono>
#include <cstring>
#include <ctime>
#include <optional>
#include <shmio/rpc_buffer.hpp>
#include <shmio/rpc_server.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "processes.hpp"
#include "stream_frames.hpp"
#include "support.hpp"

namespace {

using namespace std::chrono_literals;
using namespace shmio_bench;
using stream_protocol = asio::local::stream_protocol;
using stream_socket = stream_protocol::socket;

constexpr std::size_t message = 64;
constexpr int block_connects = 64;
constexpr int rounds = 8;  // timed, after one warm-up round
constexpr auto connect_timeout = 10s;

enum family : int { socket_family, shmio_family, mapped_floor, wake_floor, family_count };

const char* name_of(int f) {
  switch (f) {
    case socket_family:
      return "socket";
    case shmio_family:
      return "shmio";
    case mapped_floor:
      return "mapped_floor";
    case wake_floor:
      return "wake_floor";
  }
  return "?";
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// ---- the floor's file ------------------------------------------------------------------------

// As large as a connection's channel with rpc_connection_options(): the two headers, then two
// rings of 16 nodes of 4 KiB (each node 4 KiB and its 16-byte header, rounded up to 64 bytes)
// behind a 1344-byte ring state (as BM_connect_floor/segment_file in cli_bench.cpp).
constexpr std::size_t channel_bytes = 128 + 2 * (1344 + 16 * ((4096 + 16 + 63) / 64 * 64));
constexpr std::size_t page = 4096;

// What the floor touches: the claim and the stop flag in the header's page, one node in each
// direction in the next two pages (as a call and its reply touch one node of each ring).
struct floor_words {
  std::atomic<std::uint32_t>* claim;
  std::atomic<std::uint32_t>* stop;
  std::atomic<std::uint32_t>* request_seq;
  std::byte* request;
  std::atomic<std::uint32_t>* reply_seq;
  std::byte* reply;
};

floor_words words_of(void* base) {
  auto* b = static_cast<std::byte*>(base);
  return {reinterpret_cast<std::atomic<std::uint32_t>*>(b),
          reinterpret_cast<std::atomic<std::uint32_t>*>(b + 64),
          reinterpret_cast<std::atomic<std::uint32_t>*>(b + page),
          b + page + 64,
          reinterpret_cast<std::atomic<std::uint32_t>*>(b + 2 * page),
          b + 2 * page + 64};
}

void futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected,
                const timespec* timeout = nullptr) {
  // Shared (no FUTEX_PRIVATE_FLAG): the two processes map the file at different addresses.
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAIT, expected, timeout,
            nullptr, 0);
}

void futex_wake(std::atomic<std::uint32_t>* word) {
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAKE, 1, nullptr, nullptr, 0);
}

/// The parent's file: made before the fork, removed when the benchmark ends.
class floor_file {
 public:
  floor_file() : path_("/dev/shm/shmio-bench.connect-floor." + std::to_string(::getpid())) {
    const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) throw_errno("open");
    const int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(channel_bytes));
    ::close(fd);
    if (rc != 0) {
      ::unlink(path_.c_str());
      throw std::runtime_error("posix_fallocate failed");
    }
  }
  floor_file(const floor_file&) = delete;
  floor_file& operator=(const floor_file&) = delete;
  ~floor_file() { ::unlink(path_.c_str()); }

  const std::string& path() const noexcept { return path_; }

  /// Maps the whole file; throws on failure.
  static void* map(int fd) {
    void* p = ::mmap(nullptr, channel_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) throw_errno("mmap");
    return p;
  }

 private:
  std::string path_;
};

/// One round trip through a mapped floor file: the parent's side.
void floor_call(const floor_words& w, std::uint32_t& seq, const std::vector<std::byte>& request,
                std::vector<std::byte>& reply) {
  std::memcpy(w.request, request.data(), request.size());
  ++seq;
  // release: publishes the request's bytes with the number the child waits for.
  w.request_seq->store(seq, std::memory_order_release);
  futex_wake(w.request_seq);
  // acquire: pairs with the child's release store after it wrote the reply. Bounded: a child
  // that died would otherwise leave the benchmark waiting for ever.
  const auto deadline = clock_type::now() + std::chrono::seconds(10);
  const timespec slice{0, 100'000'000};
  for (std::uint32_t v; (v = w.reply_seq->load(std::memory_order_acquire)) != seq;) {
    if (clock_type::now() >= deadline)
      throw std::runtime_error("the floor's answering thread did not answer in 10 s");
    futex_wait(w.reply_seq, v, &slice);
  }
  reply.assign(w.reply, w.reply + message);
}

// ---- the child -------------------------------------------------------------------------------

/// Runs in the child: an rpc_server and a stream acceptor echo on one io_context on this thread,
/// and a thread of its own answers the floor's round trips. Returns when `stop_fd` reads EOF.
void run_child(const std::string& service, const std::string& address, const std::string& path,
               int stop_fd, const std::function<void()>& up) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) throw_errno("open");
  void* base = floor_file::map(fd);
  ::close(fd);
  const floor_words w = words_of(base);
  std::thread floor_thread([w] {
    std::uint32_t seen = 0;
    for (;;) {
      std::uint32_t v;
      // acquire: pairs with the parent's release store after it wrote the request.
      while ((v = w.request_seq->load(std::memory_order_acquire)) == seen) {
        if (w.stop->load(std::memory_order_relaxed)) return;
        futex_wait(w.request_seq, v);
      }
      if (w.stop->load(std::memory_order_relaxed)) return;
      seen = v;
      std::memcpy(w.reply, w.request, message);
      // release: publishes the reply's bytes with its number.
      w.reply_seq->store(v, std::memory_order_release);
      futex_wake(w.reply_seq);
    }
  });

  asio::io_context io;
  asio::posix::stream_descriptor stop(io, stop_fd);
  shmio::rpc_server server(io.get_executor(), shmio::create_only, service,
                           [](std::uint64_t, std::span<const std::byte> in) {
                             return std::vector<std::byte>(in.begin(), in.end());
                           });
  stream_protocol::acceptor acceptor(io, stream_protocol::endpoint(address));
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        for (;;) {
          auto sock =
              std::make_shared<stream_socket>(co_await acceptor.async_accept(asio::use_awaitable));
          asio::co_spawn(
              io, [sock]() -> asio::awaitable<void> { co_await serve_frames(*sock, true); },
              asio::detached);
        }
      },
      asio::detached);
  stop.async_wait(asio::posix::descriptor_base::wait_read, [&](std::error_code) {
    server.close();
    acceptor.close();
    io.stop();
  });
  up();
  io.run();
  w.stop->store(1, std::memory_order_relaxed);
  w.request_seq->fetch_add(1, std::memory_order_relaxed);  // what its futex_wait watches
  futex_wake(w.request_seq);
  floor_thread.join();
  ::munmap(base, channel_bytes);
}

// ---- the parent ------------------------------------------------------------------------------

void connect_pairs(benchmark::State& state, session& s, leftovers& left) {
  s.pin_parent();
  floor_file floor;
  pipes p;
  const std::string service = s.segment_name("svc");
  left.watch(service);
  const std::string address =
      std::string(1, '\0') + "shmio-bench-connect." + std::to_string(::getpid());
  const pipes::pair stop = p.make();
  s.fork_child([&](const std::function<void()>& ready) {
    left.note_child();
    p.keep_only({stop.read});
    run_child(service, address, floor.path(), stop.read, ready);
  });
  p.keep_only({stop.write});
  s.start_children();

  asio::io_context io;
  const std::vector<std::byte> request(message, std::byte{7});
  std::vector<std::byte> reply;
  const stream_protocol::endpoint server(address);
  // wake_floor's mapping, kept for the whole run; mapped_floor maps its own each time.
  const int kept_fd = ::open(floor.path().c_str(), O_RDWR | O_CLOEXEC);
  if (kept_fd < 0) throw_errno("open");
  void* kept = floor_file::map(kept_fd);
  ::close(kept_fd);
  const floor_words kept_words = words_of(kept);
  std::uint32_t seq = 0;  // the floor's round trips, both families

  auto step = [&](int f) -> asio::awaitable<void> {
    switch (f) {
      case socket_family: {
        stream_socket sock(io);
        sock.connect(server);
        co_await stream_call(sock, request, reply);
        sock.close();
        break;
      }
      case shmio_family: {
        shmio::rpc_buffer client(io.get_executor());
        client.connect(service, connect_timeout);
        reply = co_await client.async_request(asio::buffer(request), asio::use_awaitable);
        client.close();
        break;
      }
      case mapped_floor: {
        const int fd = ::open(floor.path().c_str(), O_RDWR | O_CLOEXEC);
        if (fd < 0) throw_errno("open");
        void* base = floor_file::map(fd);
        const floor_words w = words_of(base);
        std::uint32_t free_claim = 0;
        // acq_rel: a real pool's claim would order the channel's state after it.
        if (!w.claim->compare_exchange_strong(free_claim, 1, std::memory_order_acq_rel))
          throw std::runtime_error("the floor's file is claimed");
        floor_call(w, seq, request, reply);
        w.claim->store(0, std::memory_order_release);  // release: the next claimer sees our use
        ::munmap(base, channel_bytes);
        ::close(fd);
        break;
      }
      case wake_floor:
        floor_call(kept_words, seq, request, reply);
        break;
    }
    if (reply.size() != message || reply[0] != std::byte{7})
      throw std::runtime_error(std::string(name_of(f)) + ": a wrong reply");
  };

  std::vector<double> times(block_connects);
  auto run_block = [&](int f) -> asio::awaitable<double> {
    for (int i = 0; i < block_connects; ++i) {
      const auto t0 = clock_type::now();
      co_await step(f);
      times[static_cast<std::size_t>(i)] =
          std::chrono::duration<double, std::micro>(clock_type::now() - t0).count();
    }
    co_return median_of(times);
  };

  std::array<std::vector<double>, family_count> ratios, medians;
  for (auto _ : state) {
    run_parent_coroutine(s, io, [&]() -> asio::awaitable<void> {
      for (int f = 0; f < family_count; ++f)  // warm-up round
        co_await run_block(f);
      for (int round = 0; round < rounds; ++round) {
        double before = co_await run_block(socket_family);
        medians[socket_family].push_back(before);
        for (int k = 0; k < family_count - 1; ++k) {
          const int f = 1 + (round + k) % (family_count - 1);
          const double m = co_await run_block(f);
          const double after = co_await run_block(socket_family);
          medians[socket_family].push_back(after);
          medians[f].push_back(m);
          ratios[f].push_back(m / ((before + after) / 2));
          before = after;
        }
      }
    }());
  }
  ::munmap(kept, channel_bytes);
  state.counters["socket_median_us"] = median_of(medians[socket_family]);
  for (int f = shmio_family; f < family_count; ++f) {
    const std::string fam = name_of(f);
    state.counters[fam + "_over_socket"] = median_of(ratios[f]);
    state.counters[fam + "_median_us"] = median_of(medians[f]);
  }
  s.stop_children([&] { p.close_all(); });
}

void register_all() {
  benchmark::RegisterBenchmark("BM_connect_pairs",
                               [](benchmark::State& st) {
                                 guarded(st, [&] {
                                   // Before the session: sweeps after it has reaped the child.
                                   leftovers left;
                                   session s(placement::split);
                                   connect_pairs(st, s, left);
                                 });
                               })
      ->Iterations(1)
      ->Unit(benchmark::kMillisecond);
}

}  // namespace

int main(int argc, char** argv) {
  return bench_main(argc, argv, register_all);
}
