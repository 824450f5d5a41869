// RPC service benchmarks: one server, many client processes. shmio::rpc_server (clients connect
// with rpc_buffer::connect) beside what a user would use instead, a server of request/response
// frames over asio::local::stream_protocol, in one binary so that one run gives every number.
//
// Both servers serve every connection in one io_context on one thread, in a forked child; both
// echo the request. shmio's handler is the plain function
//   [](std::uint64_t, std::span<const std::byte> in) {
//     return std::vector<std::byte>(in.begin(), in.end()); }
// which the server runs inline as each request arrives. The stream server runs one coroutine
// per connection: read a u32 length and the bytes, write them back the same way. It listens on
// an abstract socket name (nothing in the file system to leave behind); a path costs the same.
//
// BM_service_clients/<family>/clients:<N>: N client processes (N = 1, 16), each with 8 calls in
//     flight, 64-byte requests, 64-byte echoes. Placement: the server on CPU 0 and every client
//     on CPU 1, so that one client and sixteen share the same CPU time. One iteration = one batch
//     of 16384 calls over all the clients together: the parent (which only coordinates, and
//     sleeps in poll() meanwhile) resets a shared claim counter and sends each client 'B' on its
//     own pipe; each client's 8 callers claim calls from the counter until 16384 are claimed,
//     finish the ones they started, and the client writes {calls, allocations} to a shared pipe.
//     The iteration's time (manual time) runs from the first 'B' to the last report, so a client
//     the scheduler holds back leaves its share to the others instead of stretching the batch.
//     items_per_second = all the clients' completed calls per second. Every client is connected
//     (and ready) before the first, untimed, warm-up batch.
//       shmio_service      rpc_server; each client process connects one rpc_buffer with the
//                          blocking rpc_buffer::connect(), then its 8 callers co_await
//                          async_request() on the client's own io_context (one thread)
//       asio_local_stream  the stream server; each client has 8 connections, one per caller, each
//                          caller co_awaits its write of a frame and its read of the reply on the
//                          client's own io_context. A connection pool, as a user would do without
//                          a protocol with request ids to match replies to pipelined requests
//                          (and as BM_rpc_pipelined/asio_local_stream in rpc_bench.cpp does)
// A thin client's connect + call + close is in connect_pairs.cpp (shmio_bench_connect).
//
// Counters: items_per_second (calls, all clients together); median_items_per_second (the median
// over batches of each batch's rate: a preemption by another tenant moves it less);
// allocs_per_call (BM_service_clients): heap allocations per call in the calling processes, the
// clients' counts summed over the timed batches; min_over_max_client: the client that completed
// fewest calls over the one that completed most, over the timed batches (1 = served evenly);
// with SHMIO_BENCH_PER_CLIENT set in the environment, each client's count goes to stderr.
//
// Every process is reaped and every segment removed, also when a benchmark fails: the session
// (support.hpp) kills what does not exit, and removes the service's name; what the clients made
// (their connections' segments, "<service>#<pid>.<nonce>", and any half-made segment of a
// killed child) is swept after the session has reaped them.
#include <poll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/io_context.hpp>
#include <asio/local/stream_protocol.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/read.hpp>
#include <asio/redirect_error.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <shmio/inspect.hpp>
#include <shmio/rpc_buffer.hpp>
#include <shmio/rpc_server.hpp>
#include <shmio/segment.hpp>
#include <stdexcept>
#include <string>
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
constexpr int in_flight = 8;                  // calls in flight per client
constexpr std::uint64_t batch_calls = 16384;  // per iteration, all clients together
constexpr int client_counts[] = {1, 16};

constexpr auto connect_timeout = 10s;
constexpr auto batch_timeout = 60s;

enum class family { shmio_service, asio_local_stream };

const char* name_of(family f) {
  switch (f) {
    case family::shmio_service:
      return "shmio_service";
    case family::asio_local_stream:
      return "asio_local_stream";
  }
  return "?";
}

// ---- the stream protocol: u32 length, then the bytes -----------------------------------------

/// One connection of the stream server: echoes frames until its client closes.
asio::awaitable<void> stream_serve(stream_socket sock) {
  co_await serve_frames(sock, true);
}

asio::awaitable<void> stream_accept(stream_protocol::acceptor& acceptor) {
  for (;;) {
    stream_socket sock = co_await acceptor.async_accept(asio::use_awaitable);
    asio::co_spawn(acceptor.get_executor(), stream_serve(std::move(sock)), asio::detached);
  }
}

/// The stream server's address: an abstract socket name, unique to this process and call.
std::string stream_address() {
  static int counter = 0;
  return std::string(1, '\0') + "shmio-bench-stream." + std::to_string(::getpid()) + "." +
         std::to_string(++counter);
}

// ---- the server child ------------------------------------------------------------------------

/// Runs in the server's child: serves `f` at `address` on one io_context on this thread, calls
/// `up()` once clients can connect, and returns when `stop_fd` reads EOF (the parent closed it).
void run_server(family f, const std::string& address, int stop_fd,
                const std::function<void()>& up) {
  asio::io_context io;
  asio::posix::stream_descriptor stop(io, stop_fd);
  std::optional<shmio::rpc_server> server;
  std::optional<stream_protocol::acceptor> acceptor;
  if (f == family::shmio_service) {
    server.emplace(io.get_executor(), shmio::create_only, address,
                   [](std::uint64_t, std::span<const std::byte> in) {
                     return std::vector<std::byte>(in.begin(), in.end());
                   });
  } else {
    acceptor.emplace(io, stream_protocol::endpoint(address));
    asio::co_spawn(io, stream_accept(*acceptor), asio::detached);
  }
  stop.async_wait(asio::posix::descriptor_base::wait_read, [&](std::error_code) {
    if (server) server->close();
    if (acceptor) acceptor->close();
    io.stop();
  });
  up();
  io.run();
}

// ---- BM_service_clients ----------------------------------------------------------------------

/// What a client writes to the parent after each batch (one write, under PIPE_BUF: atomic).
struct report {
  std::uint64_t client = 0;  // its index
  std::uint64_t calls = 0;
  std::uint64_t allocations = 0;
};

/// Runs `in_flight` callers on this coroutine's executor; each claims calls from `claimed` until
/// `batch_calls` are claimed over all the clients. Returns the calls it completed.
template <class Call>
asio::awaitable<std::uint64_t> run_callers(std::atomic<std::uint64_t>& claimed, Call& call) {
  auto ex = co_await asio::this_coro::executor;
  std::uint64_t done = 0;
  auto caller = [&](int lane) -> asio::awaitable<void> {
    const std::vector<std::byte> request(message, std::byte{7});
    std::vector<std::byte> reply;
    // Relaxed: a count; the parent resets it while every client waits for its 'B'.
    while (claimed.fetch_add(1, std::memory_order_relaxed) < batch_calls) {
      co_await call(lane, request, reply);
      if (reply.size() != message) throw std::runtime_error("a reply of the wrong size");
      ++done;
    }
  };
  co_await all_lanes(ex, in_flight, caller);
  co_return done;
}

/// A client's life after it is connected: a batch for each 'B' on `go`, its report to `done_fd`
/// after each; returns at EOF on `go`.
template <class Call>
asio::awaitable<void> client_loop(int index, asio::posix::stream_descriptor& go, int done_fd,
                                  std::atomic<std::uint64_t>& claimed, Call& call) {
  for (;;) {
    char command = 0;
    auto [ec, n] = co_await asio::async_read(go, asio::buffer(&command, 1),
                                             asio::experimental::as_tuple(asio::use_awaitable));
    if (ec == asio::error::eof) co_return;
    if (ec) throw std::system_error(ec, "read from the parent");
    if (command != 'B') throw std::runtime_error("unknown command");
    const std::uint64_t allocations_before = allocations();
    report r;
    r.client = static_cast<std::uint64_t>(index);
    r.calls = co_await run_callers(claimed, call);
    r.allocations = allocations() - allocations_before;
    write_all(done_fd, &r, sizeof r);
  }
}

/// Runs in a client's child, pinned to CPU 1: waits for the server (`up_fd`), connects, calls
/// `ready()`, then serves `client_loop` until the parent closes `go_fd`.
void run_client(family f, int index, const std::string& address, int up_fd, int go_fd, int done_fd,
                std::atomic<std::uint64_t>& claimed, const std::function<void()>& ready) {
  if (!read_byte(up_fd)) throw std::runtime_error("the server did not start");
  asio::io_context io;
  asio::posix::stream_descriptor go(io, go_fd);
  std::optional<shmio::rpc_buffer> client;
  std::vector<std::unique_ptr<stream_socket>> socks;
  if (f == family::shmio_service) {
    client.emplace(io.get_executor());
    client->connect(address, connect_timeout);
  } else {
    const stream_protocol::endpoint server(address);
    for (int i = 0; i < in_flight; ++i) {
      socks.push_back(std::make_unique<stream_socket>(io));
      socks.back()->connect(server);
    }
  }
  auto call = [&](int lane, const std::vector<std::byte>& request,
                  std::vector<std::byte>& reply) -> asio::awaitable<void> {
    if (client)
      reply = co_await client->async_request(asio::buffer(request), asio::use_awaitable);
    else
      co_await stream_call(*socks[static_cast<std::size_t>(lane)], request, reply);
  };
  ready();
  std::exception_ptr failure;
  asio::co_spawn(io, client_loop(index, go, done_fd, claimed, call), [&](std::exception_ptr e) {
    failure = e;
    io.stop();  // an rpc_buffer watching its peer keeps `io` busy for ever
  });
  io.run();
  if (client) client->close();
  if (failure) std::rethrow_exception(failure);
}

/// The result of one batch, as the parent saw it.
struct batch_result {
  double seconds = 0;
  std::vector<report> reports;  // one per client, in the order they came
};

/// Runs one batch: resets the claim counter, sends 'B' to every client, and waits for each
/// one's report. Throws if a child exits or the batch takes over `batch_timeout`.
batch_result run_batch(session& s, const std::vector<int>& go_fds, int done_fd) {
  s.ctl().count.store(0, std::memory_order_seq_cst);
  batch_result result;
  const auto start = clock_type::now();
  const auto deadline = start + batch_timeout;
  for (int fd : go_fds)
    write_all(fd, "B", 1);
  std::array<std::byte, 16 * sizeof(report)> buf;
  std::size_t have = 0;
  while (result.reports.size() < go_fds.size()) {
    if (g_child_exited) throw_child_gone();
    pollfd p{done_fd, POLLIN, 0};
    // poll() ends early with EINTR when a child exits (SIGCHLD); the timeout only bounds the
    // time until g_child_exited is seen if the signal came before the call.
    const int r = ::poll(&p, 1, 100);
    if (r < 0 && errno != EINTR) throw_errno("poll");
    if (r <= 0) {
      if (clock_type::now() > deadline) throw std::runtime_error("a batch took over 60 s");
      continue;
    }
    const ssize_t n = ::read(done_fd, buf.data() + have, buf.size() - have);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw_errno("read");
    if (n == 0) throw std::runtime_error("every client exited");
    have += static_cast<std::size_t>(n);
    std::size_t used = 0;
    for (; have - used >= sizeof(report); used += sizeof(report)) {
      report rep;
      std::memcpy(&rep, buf.data() + used, sizeof rep);
      result.reports.push_back(rep);
    }
    std::memmove(buf.data(), buf.data() + used, have - used);
    have -= used;
  }
  result.seconds = std::chrono::duration<double>(clock_type::now() - start).count();
  std::uint64_t calls = 0;
  for (const report& rep : result.reports)
    calls += rep.calls;
  if (calls != batch_calls)
    throw std::runtime_error("the clients completed " + std::to_string(calls) + " calls of " +
                             std::to_string(batch_calls));
  return result;
}

void bm_service_clients(benchmark::State& state, family f, int clients) {
  std::vector<double> rates;  // per timed batch, calls per second
  std::uint64_t client_allocations = 0;
  std::vector<std::uint64_t> per_client(static_cast<std::size_t>(clients));  // timed calls
  guarded(state, [&] {
    leftovers left;  // before the session: sweeps after the session has reaped every child
    session s(placement::split);
    s.pin_parent();  // the server's CPU: the parent wakes only to start and end batches
    pipes p;         // after the session: closed (EOF to every child) before it reaps them
    const std::string address =
        f == family::shmio_service ? s.segment_name("svc") : stream_address();
    if (f == family::shmio_service) left.watch(address);
    const pipes::pair up = p.make(), stop = p.make(), done = p.make();
    std::vector<pipes::pair> go;
    for (int i = 0; i < clients; ++i)
      go.push_back(p.make());
    s.fork_child(
        [&](const std::function<void()>& ready) {
          left.note_child();
          p.keep_only({stop.read, up.write});
          if (!pin_to(parent_cpu)) throw_errno("sched_setaffinity(server)");
          run_server(f, address, stop.read, [&] {
            // One byte per client: each reads one before it connects.
            const std::string bytes(static_cast<std::size_t>(clients), 'U');
            write_all(up.write, bytes.data(), bytes.size());
            p.close(up.write);  // a client still waiting now would read EOF
            ready();
          });
        },
        false);  // pinned above, to the server's CPU
    for (int i = 0; i < clients; ++i)
      s.fork_child([&, i](const std::function<void()>& ready) {
        left.note_child();
        const pipes::pair mine = go[static_cast<std::size_t>(i)];
        p.keep_only({up.read, mine.read, done.write});
        run_client(f, i, address, up.read, mine.read, done.write, s.ctl().count, ready);
      });
    std::vector<int> go_fds, parent_ends{stop.write, done.read};
    for (const auto& g : go) {
      go_fds.push_back(g.write);
      parent_ends.push_back(g.write);
    }
    p.keep_only(parent_ends);  // the server alone holds up.write now: if it fails, EOF
    s.start_children();

    run_batch(s, go_fds, done.read);  // warm-up
    for (auto _ : state) {
      const batch_result b = run_batch(s, go_fds, done.read);
      state.SetIterationTime(b.seconds);
      rates.push_back(static_cast<double>(batch_calls) / b.seconds);
      for (const report& r : b.reports) {
        client_allocations += r.allocations;
        per_client.at(static_cast<std::size_t>(r.client)) += r.calls;
      }
    }
    // EOF on every pipe the children read: the clients close their ends and exit, then the
    // server.
    s.stop_children([&] { p.close_all(); });
  });
  const auto iterations = state.iterations();
  state.SetItemsProcessed(iterations * static_cast<std::int64_t>(batch_calls));
  if (iterations == 0 || rates.empty()) return;
  const double calls = static_cast<double>(iterations) * static_cast<double>(batch_calls);
  state.counters["allocs_per_call"] =
      benchmark::Counter(static_cast<double>(client_allocations) / calls);
  auto mid = rates.begin() + static_cast<std::ptrdiff_t>(rates.size() / 2);
  std::nth_element(rates.begin(), mid, rates.end());
  state.counters["median_items_per_second"] = benchmark::Counter(*mid);
  if (std::getenv("SHMIO_BENCH_PER_CLIENT")) {  // the counts behind min_over_max_client
    std::string line = std::string("BM_service_clients/") + name_of(f) +
                       "/clients:" + std::to_string(clients) + ": calls per client";
    for (const std::uint64_t c : per_client)
      line += " " + std::to_string(c);
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  const auto [fewest, most] = std::minmax_element(per_client.begin(), per_client.end());
  if (*most > 0)
    state.counters["min_over_max_client"] =
        benchmark::Counter(static_cast<double>(*fewest) / static_cast<double>(*most));
}

void register_all() {
  for (family f : {family::shmio_service, family::asio_local_stream})
    for (int clients : client_counts) {
      const std::string name =
          std::string("BM_service_clients/") + name_of(f) + "/clients:" + std::to_string(clients);
      benchmark::RegisterBenchmark(
          name.c_str(), [f, clients](benchmark::State& st) { bm_service_clients(st, f, clients); })
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
    }
}

}  // namespace

int main(int argc, char** argv) {
  return bench_main(argc, argv, register_all);
}
