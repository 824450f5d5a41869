// Tests of one service with many clients: rpc_acceptor, rpc_buffer::async_connect/connect,
// async_wait_closed and rpc_server. In this process first (several clients on one io_context),
// then with client and server processes: many at once, kill -9 of either, a thousand short-lived
// clients, forged and damaged connect requests. Peer commands are in tests/peer_rpc_service.cpp.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <csignal>

#include <algorithm>
#include <asio/bind_cancellation_slot.hpp>
#include <asio/bind_executor.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/use_future.hpp>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "rpc_service_support.hpp"
#include "shmio/detail/layout.hpp"
#include "shmio/detail/liveness.hpp"
#include "shmio/detail/names.hpp"
#include "shmio/detail/platform.hpp"
#include "shmio/detail/ring.hpp"
#include "shmio/detail/ring_ops.hpp"
#include "shmio/detail/rpc_listener.hpp"
#include "shmio/detail/rpc_packet.hpp"
#include "shmio/inspect.hpp"
#include "shmio/rpc_acceptor.hpp"
#include "shmio/rpc_buffer.hpp"
#include "shmio/rpc_server.hpp"
#include "shmio/segment.hpp"
#include "support.hpp"

namespace {

using namespace std::chrono_literals;
using shmio::errc;
using shmio::rpc_acceptor;
using shmio::rpc_buffer;
using shmio::rpc_options;
using shmio::rpc_server;
using shmio::test::child;
using shmio::test::eventually;
using shmio::test::io_thread;
using shmio::test::peer_path;
using shmio::test::scoped_name;
using shmio::test::write_proc;
using bytes_t = std::vector<std::byte>;
namespace detail = shmio::detail;
namespace layout = shmio::detail::layout;
namespace service = shmio::test::service;

constexpr auto bound = 10s;
constexpr auto tuple_awaitable = asio::experimental::as_tuple(asio::use_awaitable);

// Small rings: many connections at once stay small in /dev/shm.
rpc_options small_rings() {
  rpc_options o;
  o.node_count = 8;
  o.node_size = 1024;
  return o;
}

bytes_t bytes(std::string_view s) {
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  return {p, p + s.size()};
}

// Runs `body` as a coroutine on `io` until it is done, then lets `io` run out of work.
template <class Body>
void run_body(asio::io_context& io, Body body) {
  bool done = false;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        co_await body();
        done = true;
      },
      [](std::exception_ptr e) {
        if (e) std::rethrow_exception(e);
      });
  io.restart();
  io.run_for(bound);
  REQUIRE(done);
}

// /dev/shm files of this user whose segment name starts with `prefix`.
std::size_t shm_files_with(std::string_view prefix) {
  std::error_code ec;
  const std::string file = detail::segment_file_name(prefix, ec);
  std::size_t n = 0;
  if (DIR* d = ::opendir("/dev/shm")) {
    while (const dirent* e = ::readdir(d))
      n += std::string_view(e->d_name).starts_with(file);
    ::closedir(d);
  }
  return n;
}

// The entries of a directory of /proc (with "." and "..", which cancel out in comparisons).
std::size_t entries(const char* dir) {
  std::size_t n = 0;
  if (DIR* d = ::opendir(dir)) {
    while (::readdir(d))
      ++n;
    ::closedir(d);
  }
  return n;
}

std::size_t open_fds() {
  return entries("/proc/self/fd");
}

// Yields through the executor until `pred` holds (true) or `bound` passes (false): a condition
// poll with a deadline, for what another handler on the same io_context does.
template <class Pred>
asio::awaitable<bool> wait_until(Pred pred, std::chrono::milliseconds limit = bound) {
  auto ex = co_await asio::this_coro::executor;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= deadline) co_return false;
    co_await asio::post(ex, asio::use_awaitable);
  }
  co_return true;
}

// Connects `client` to `acceptor`'s service; the accepted end, serving `handler`.
asio::awaitable<rpc_buffer> connect_pair(rpc_acceptor& acceptor, rpc_buffer& client,
                                         shmio::rpc_handler handler) {
  std::optional<rpc_buffer> end;
  std::error_code accept_ec;
  acceptor.async_accept(std::move(handler), [&](std::error_code ec, rpc_buffer b) {
    accept_ec = ec;
    end.emplace(std::move(b));
  });
  co_await client.async_connect(acceptor.name(), asio::use_awaitable);
  {
    const bool waited = co_await wait_until([&] { return end.has_value(); });
    REQUIRE(waited);
  }
  REQUIRE_FALSE(accept_ec);
  co_return std::move(*end);
}

// Shared mappings only: every mapping shmio makes is MAP_SHARED over a segment's descriptor,
// while the count of private ones moves with the allocator (a sanitizer's grows by dozens).
std::size_t shared_mappings() {
  std::ifstream maps("/proc/self/maps");
  std::size_t n = 0;
  for (std::string line; std::getline(maps, line);) {
    const auto perms = line.find(' ');  // "start-end perms ...", perms as "rw-s"
    n += perms != std::string::npos && perms + 4 < line.size() && line[perms + 4] == 's';
  }
  return n;
}

std::size_t threads() {
  return entries("/proc/self/task");
}

}  // namespace

// ---- in one process ------------------------------------------------------------------------

TEST_CASE("rpc_acceptor: three clients connect, each is served on its own channel",
          "[rpc][service]") {
  scoped_name name("svc");
  asio::io_context io;
  service::hold_counts counts;
  rpc_acceptor acceptor(io.get_executor(), shmio::create_only, name, small_rings());
  run_body(io, [&]() -> asio::awaitable<void> {
    std::vector<rpc_buffer> ends, clients;
    for (int i = 0; i < 3; ++i) {
      clients.emplace_back(io.get_executor());
      ends.push_back(co_await connect_pair(acceptor, clients.back(), service::handler(counts)));
    }
    for (int round = 0; round < 3; ++round)
      for (std::size_t i = 0; i < clients.size(); ++i) {
        const auto request = service::payload(100 + 1500 * round, i * 10 + round);
        auto reply = co_await clients[i].async_request(asio::buffer(request), asio::use_awaitable);
        CHECK(reply == service::answer(request));
      }
    for (std::size_t i = 0; i < clients.size(); ++i) {
      CHECK(ends[i].statistics().requests_received == 3);
      CHECK(ends[i].name() == clients[i].name());
      CHECK(clients[i].name().starts_with(name.str() + "#"));
    }
    CHECK(clients[0].name() != clients[1].name());
    CHECK(acceptor.statistics().accepted == 3);
    CHECK(acceptor.statistics().refused == 0);
    for (auto& c : clients)
      c.close();
    for (auto& e : ends)
      e.close();
    acceptor.close();
  });
  CHECK(io.stopped());
  CHECK(shm_files_with(name.str()) == 0);
}

TEST_CASE("rpc_acceptor: its max_held_bytes reaches every connection it accepts",
          "[rpc][service][bounds]") {
  // 64 calls at once whose 8 KiB answers fill a connection's 8 KiB ring many times over: with
  // a bound of 16 KiB the service's end holds requests back (and serves them all); with none
  // it never does.
  const std::uint64_t bound_bytes = GENERATE(std::uint64_t{16 * 1024}, std::uint64_t{0});
  scoped_name name("svc");
  asio::io_context io;
  rpc_options o = small_rings();
  o.max_held_bytes = bound_bytes;
  rpc_acceptor acceptor(io.get_executor(), shmio::create_only, name, o);
  run_body(io, [&]() -> asio::awaitable<void> {
    rpc_buffer client(io.get_executor());
    rpc_buffer end = co_await connect_pair(
        acceptor, client,
        [](std::uint64_t, std::span<const std::byte> in) -> asio::awaitable<bytes_t> {
          bytes_t reply(8192, std::byte{1});
          std::copy(in.begin(), in.end(), reply.begin());
          co_return reply;
        });
    constexpr int calls = 64;
    int done = 0, right = 0;
    for (int i = 0; i < calls; ++i) {
      const auto request = service::payload(16, static_cast<std::uint64_t>(i));
      client.async_request(asio::buffer(request), [&, request](std::error_code ec, bytes_t r) {
        ++done;
        right += !ec && r.size() == 8192 && std::equal(request.begin(), request.end(), r.begin());
      });
    }
    const bool waited = co_await wait_until([&] { return done == calls; });
    REQUIRE(waited);
    CHECK(right == calls);
    const auto stats = end.statistics();
    CHECK(stats.requests_shed == 0);
    if (bound_bytes != 0)
      CHECK(stats.requests_deferred > 0);
    else
      CHECK(stats.requests_deferred == 0);
    client.close();
    end.close();
    acceptor.close();
  });
  CHECK(io.stopped());
}

TEST_CASE("rpc_server: a client that keeps its ring full does not keep another unserved",
          "[rpc][service]") {
  scoped_name name("svc");
  // Each call takes the server 50 µs, and the flooder keeps 16 in flight: its ring is seldom
  // empty, so a server that drained one ring until it ran dry would seldom read the other's (nor
  // its listener: connects wait too).
  asio::io_context server_io;
  rpc_server server(server_io.get_executor(), shmio::create_only, name,
                    [](std::uint64_t, std::span<const std::byte> in) {
                      const auto until = std::chrono::steady_clock::now() + 50us;
                      while (std::chrono::steady_clock::now() < until) {
                      }
                      return bytes_t(in.begin(), in.end());
                    });
  asio::io_context flood_io;
  rpc_buffer flooder(flood_io.get_executor());
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> flooded{0};
  std::thread server_thread, flood_thread;
  // Ends both threads, also when a check below throws: the flood first, while it is served.
  struct stop_threads {
    std::function<void()> f;
    ~stop_threads() { f(); }
  } guard{[&] {
    stop = true;
    if (flood_thread.joinable()) flood_thread.join();  // its callers end; idle, it holds no work
    asio::post(server_io, [&] { server.close(); });
    if (server_thread.joinable()) server_thread.join();
  }};
  server_thread = std::thread([&] { server_io.run(); });

  flooder.connect(name.str(), bound);
  for (int i = 0; i < 16; ++i)
    asio::co_spawn(
        flood_io,
        [&]() -> asio::awaitable<void> {
          const bytes_t request(64, std::byte{1});
          while (!stop.load()) {
            co_await flooder.async_request(asio::buffer(request), asio::use_awaitable);
            flooded.fetch_add(1);
          }
        },
        asio::detached);
  flood_thread = std::thread([&] { flood_io.run(); });
  REQUIRE(shmio::test::eventually([&] { return flooded.load() >= 500; }));

  // While the other client connects and makes one call, the server turns to it within a few
  // turns of the flooder's reader (reader_turn, 200 µs of packets, each): the flood goes on
  // meanwhile, and a server that kept to the full ring would serve the flooder thousands of times
  // first.
  asio::io_context io;
  rpc_buffer other(io.get_executor());
  // The connect (the listener's turn) and the call (the server's turn to the other client) are
  // bounded each on its own: a connect is much slower under a sanitizer than a flood call.
  const std::uint64_t before_connect = flooded.load();
  other.connect(name.str(), bound);
  const std::uint64_t flooded_while_connecting = flooded.load() - before_connect;
  CAPTURE(flooded_while_connecting);
  CHECK(flooded_while_connecting < 1000u * shmio::test::time_scale);
  const std::uint64_t flooded_before = flooded.load();
  const bytes_t request = bytes("the other client");
  std::optional<std::error_code> ec;
  bytes_t reply;
  other.async_request(asio::buffer(request), bound, [&](std::error_code e, bytes_t r) {
    ec = e;
    reply = std::move(r);
  });
  io.run_for(bound);
  CHECK(io.stopped());  // an idle client holds no work once its call completed
  const std::uint64_t flooded_meanwhile = flooded.load() - flooded_before;
  CAPTURE(flooded_before, flooded_meanwhile);
  REQUIRE(ec.has_value());
  CHECK_FALSE(*ec);
  CHECK(reply == request);
  CHECK(flooded_meanwhile < 1000);
  other.close();
}

TEST_CASE("rpc_buffer: connect to a service that is not there fails with not_found at once",
          "[rpc][service]") {
  scoped_name name("svc");
  asio::io_context io;
  rpc_buffer client(io.get_executor());
  std::error_code sync_ec;
  const auto start = std::chrono::steady_clock::now();
  client.connect(name.str(), 10s, sync_ec);
  CHECK(sync_ec == errc::not_found);
  CHECK_THROWS_AS(client.connect(name.str()), shmio::error);
  CHECK_THROWS_WITH(client.connect(name.str()),
                    Catch::Contains("none of that name is running") && Catch::Contains(name.str()));
  std::optional<std::error_code> async_ec;
  client.async_connect(name.str(), [&](std::error_code ec) { async_ec = ec; });
  CHECK_FALSE(async_ec);  // never inside the initiating function
  io.run_for(bound);
  REQUIRE(async_ec);
  CHECK(*async_ec == errc::not_found);
  CHECK(std::chrono::steady_clock::now() - start < 5s);

  // A listener whose acceptor died: the same.
  {
    child dead([&] {
      asio::io_context other;
      rpc_acceptor a(other.get_executor(), shmio::create_only, name, small_rings());
      ::_exit(0);  // no destructor: leaves the listener behind, its lock gone with the process
      return 0;
    });
    REQUIRE(dead.wait() == 0);  // it made the listener (99: the create threw)
  }
  client.connect(name.str(), 10s, sync_ec);
  CHECK(sync_ec == errc::not_found);
}

TEST_CASE("rpc_buffer: a service that does not accept in time: timed_out, and nothing is left",
          "[rpc][service]") {
  scoped_name name("svc");
  asio::io_context io;
  rpc_acceptor acceptor(io.get_executor(), shmio::create_only, name, small_rings());
  rpc_buffer client(io.get_executor());
  std::optional<std::error_code> result;
  client.async_connect(name.str(), 100ms, [&](std::error_code ec) { result = ec; });
  io.run_for(bound);
  REQUIRE(result);
  CHECK(*result == errc::timed_out);
  // Its channel is gone: an acceptor that gets to the request now refuses it.
  CHECK(shm_files_with(name.str() + "#") == 0);
  std::error_code ec;
  client.async_request(asio::buffer(bytes("x")), [&](std::error_code e, bytes_t) { ec = e; });
  io.restart();
  io.run_for(bound);
  CHECK(ec == errc::peer_gone);
  std::optional<std::error_code> accept_ec;
  acceptor.async_accept([&](std::error_code e, rpc_buffer) { accept_ec = e; });
  io.restart();
  io.poll();
  io.poll();
  CHECK_FALSE(accept_ec);  // still waiting: the stale request was refused, not accepted
  CHECK(acceptor.statistics().refused == 1);
  acceptor.close();
  io.restart();
  io.run_for(bound);
  REQUIRE(accept_ec);
  CHECK(*accept_ec == asio::error::operation_aborted);

  // The blocking form.
  rpc_acceptor again(io.get_executor(), shmio::create_only, name, small_rings());
  std::error_code sync_ec;
  client.connect(name.str(), 50ms, sync_ec);
  CHECK(sync_ec == errc::timed_out);
}

TEST_CASE("rpc_buffer: an acceptor that closes while a client waits: peer_gone", "[rpc][service]") {
  scoped_name name("svc");
  asio::io_context io;
  std::optional<rpc_acceptor> acceptor;
  acceptor.emplace(io.get_executor(), shmio::create_only, name, small_rings());
  rpc_buffer client(io.get_executor());
  std::optional<std::error_code> result;
  client.async_connect(name.str(), 1h, [&](std::error_code ec) { result = ec; });
  io.poll();
  acceptor.reset();
  io.run_for(bound);
  REQUIRE(result);
  CHECK(*result == errc::peer_gone);
}

TEST_CASE(
    "rpc_acceptor: a request taken before close() whose step runs after it makes no connection",
    "[rpc][service]") {
  scoped_name name("svc");
  asio::io_context io;
  asio::io_context other;  // where the accept's handler runs
  rpc_acceptor acceptor(io.get_executor(), shmio::create_only, name, small_rings());
  rpc_buffer client(io.get_executor());
  std::optional<std::error_code> connected;
  client.async_connect(name.str(), 1h, [&](std::error_code ec) { connected = ec; });
  // The request is in the listener: the accept takes it at once, and its next step waits in
  // `other`'s queue.
  std::optional<std::error_code> accepted;
  bool open = false;
  acceptor.async_accept(asio::bind_executor(other, [&](std::error_code ec, rpc_buffer end) {
    accepted = ec;
    open = end.is_open();
  }));
  acceptor.close();
  other.run_for(bound);
  CHECK(other.stopped());
  REQUIRE(accepted);
  CHECK(*accepted == asio::error::operation_aborted);
  CHECK_FALSE(open);
  CHECK(acceptor.statistics().accepted == 0);
  io.run_for(bound);
  REQUIRE(connected);
  CHECK(*connected == errc::peer_gone);
  CHECK(shm_files_with(name.str() + "#") == 0);
}

TEST_CASE(
    "rpc_acceptor: an accept making its connection on another thread while close() runs "
    "completes with it only if it was made before",
    "[rpc][service]") {
  // The step runs on `other`'s thread while this one closes; the delay before close() moves
  // across the step's making of the connection from round to round. Whatever the
  // interleaving, the count that close() keeps holds every connection the accepts completed
  // with, and one they gave up leaves its client nothing that works.
  for (int round = 0; round < 40; ++round) {
    CAPTURE(round);
    scoped_name name("svc");
    asio::io_context io;
    asio::io_context other;
    rpc_acceptor acceptor(io.get_executor(), shmio::create_only, name, small_rings());
    rpc_buffer client(io.get_executor());
    std::optional<std::error_code> connected;
    client.async_connect(name.str(), 1h, [&](std::error_code ec) { connected = ec; });
    std::atomic<bool> done{false};
    std::error_code accepted;
    std::optional<rpc_buffer> end;  // kept open until the client has heard
    acceptor.async_accept(asio::bind_executor(other, [&](std::error_code ec, rpc_buffer e) {
      accepted = ec;
      end.emplace(std::move(e));
      done = true;  // seq_cst: publishes accepted and end
    }));
    struct runner {
      asio::io_context& io;
      asio::executor_work_guard<asio::io_context::executor_type> guard{io.get_executor()};
      io_thread thread{io};  // stopped and joined also when a check fails
      bool join() {
        guard.reset();
        return thread.join();
      }
    } run_other{other};
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(25 * round);
    while (std::chrono::steady_clock::now() < until) {
    }
    acceptor.close();
    const std::uint64_t accepted_at_close = acceptor.statistics().accepted;
    CHECK(run_other.join());  // runs out of work: nothing left behind by either outcome
    REQUIRE(done);
    CHECK(end->is_open() == !accepted);
    CHECK(accepted_at_close == (accepted ? 0 : 1));
    if (accepted) CHECK(accepted == asio::error::operation_aborted);
    REQUIRE(shmio::test::run_until(io, [&] { return connected.has_value(); }));
    if (!accepted) {
      CHECK_FALSE(*connected);
      continue;
    }
    // Given up: never made, or made and closed again, which its client may hear after its
    // connect completed.
    if (!*connected) {
      std::optional<std::error_code> closed;
      client.async_wait_closed([&](std::error_code ec) { closed = ec; });
      REQUIRE(shmio::test::run_until(io, [&] { return closed.has_value(); }));
    } else {
      CHECK(*connected == errc::peer_gone);
    }
    client.close();  // its channel's file goes in a step it leaves to io
    CHECK(shmio::test::run_until(io, [&] { return shm_files_with(name.str() + "#") == 0; }));
  }
}

TEST_CASE(
    "rpc_acceptor: a connection given up as close() runs never starts a handler for a request "
    "already waiting in it",
    "[rpc][service]") {
  // The client calls as soon as it hears the accept packet, and the acceptor's end runs on two
  // threads: were the packet sent, or the end's reader started, before the acceptor's last
  // check, the request could reach the handler of a connection then given up.
  for (int round = 0; round < 40; ++round) {
    CAPTURE(round);
    scoped_name name("svc");
    asio::io_context io;
    asio::io_context other;
    auto io_guard = asio::make_work_guard(io);
    auto other_guard = asio::make_work_guard(other);
    std::optional<io_thread> io_runner, other_runners[2];
    io_runner.emplace(io);
    for (auto& r : other_runners)
      r.emplace(other);
    std::atomic<int> handled{0};
    shmio::rpc_methods methods;
    methods.add("", shmio::rpc_sync_handler([&](std::uint64_t, std::span<const std::byte> in) {
                  handled.fetch_add(1);
                  return bytes_t(in.begin(), in.end());
                }));
    rpc_acceptor acceptor(other.get_executor(), shmio::create_only, name, small_rings());
    rpc_buffer client(io.get_executor());
    std::promise<std::error_code> connected, called;
    client.async_connect(name.str(), bound, [&](std::error_code ec) {
      connected.set_value(ec);
      client.async_request(asio::buffer(bytes("x")),
                           [&](std::error_code e, bytes_t) { called.set_value(e); });
    });
    std::promise<std::error_code> accepted;
    std::optional<rpc_buffer> end;  // kept open until the client has heard
    // Destroyed before the ends, the acceptor and the promises, also when a check below fails:
    // stops both contexts and joins their threads.
    struct stop_runners {
      std::function<void()> f;
      ~stop_runners() { f(); }
    } stop_guard{[&] {
      io_runner.reset();
      for (auto& r : other_runners)
        r.reset();
    }};
    acceptor.async_accept(methods, [&](std::error_code ec, rpc_buffer e) {
      end.emplace(std::move(e));
      accepted.set_value(ec);
    });
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(5 * round);
    while (std::chrono::steady_clock::now() < until) {
    }
    acceptor.close();
    // Each completes within the connect's timeout (the call fails at once without a
    // connection, and a connection serves it at once).
    auto ready = [](std::future<std::error_code> f) -> std::optional<std::error_code> {
      if (f.wait_for(bound) != std::future_status::ready) return std::nullopt;
      return f.get();
    };
    const auto accept_ec = ready(accepted.get_future());
    REQUIRE(accept_ec);
    const auto connect_ec = ready(connected.get_future());
    REQUIRE(connect_ec);
    CHECK(*connect_ec == (*accept_ec ? std::error_code(errc::peer_gone) : std::error_code()));
    const auto call_ec = ready(called.get_future());
    REQUIRE(call_ec);
    client.close();
    end.reset();
    io_guard.reset();
    other_guard.reset();
    CHECK(io_runner->join());  // both contexts run out of work
    for (auto& r : other_runners)
      CHECK(r->join());
    // Read after both contexts stopped: a handler started late would be counted too.
    if (*accept_ec) {
      CHECK(*accept_ec == asio::error::operation_aborted);
      CHECK(*call_ec == errc::peer_gone);
      CHECK(handled == 0);
    } else {
      CHECK_FALSE(*call_ec);
      CHECK(handled == 1);
    }
  }
}

TEST_CASE("rpc_buffer: a cancelled connect completes with operation_aborted", "[rpc][service]") {
  scoped_name name("svc");
  asio::io_context io;
  rpc_acceptor acceptor(io.get_executor(), shmio::create_only, name, small_rings());
  rpc_buffer client(io.get_executor());
  asio::cancellation_signal cancel;
  std::optional<std::error_code> result;
  client.async_connect(
      name.str(), 1h,
      asio::bind_cancellation_slot(cancel.slot(), [&](std::error_code ec) { result = ec; }));
  io.poll();
  cancel.emit(asio::cancellation_type::terminal);
  io.run_for(bound);
  REQUIRE(result);
  CHECK(*result == asio::error::operation_aborted);
  CHECK(shm_files_with(name.str() + "#") == 0);
}

TEST_CASE("rpc_buffer: each end of a connection learns that the other closed", "[rpc][service]") {
  scoped_name name("svc");
  asio::io_context io;
  service::hold_counts counts;
  rpc_acceptor acceptor(io.get_executor(), shmio::create_only, name, small_rings());
  for (const bool client_closes : {true, false}) {
    run_body(io, [&]() -> asio::awaitable<void> {
      rpc_buffer client(io.get_executor());
      rpc_buffer end = co_await connect_pair(acceptor, client, service::handler(counts));
      rpc_buffer& closer = client_closes ? client : end;
      rpc_buffer& other = client_closes ? end : client;
      std::optional<std::error_code> closed, own;
      other.async_wait_closed([&](std::error_code ec) { closed = ec; });
      closer.async_wait_closed([&](std::error_code ec) { own = ec; });
      // A call that the closing end is serving is cancelled by the close too.
      std::optional<std::error_code> held;
      client.async_request(asio::buffer(service::hold),
                           [&](std::error_code ec, bytes_t) { held = ec; });
      {
        const bool waited = co_await wait_until([&] { return counts.holding == 1; });
        REQUIRE(waited);
      }
      closer.close();
      {
        const bool waited =
            co_await wait_until([&] { return closed && own && held && counts.holding == 0; });
        REQUIRE(waited);
      }
      CHECK(!*closed);
      CHECK(*own == asio::error::operation_aborted);
      CHECK(*held == (client_closes ? std::error_code(asio::error::operation_aborted)
                                    : std::error_code(errc::peer_gone)));
      // The other end's calls fail at once now.
      auto [ec2, reply2] = co_await other.async_request(asio::buffer(bytes("x")), tuple_awaitable);
      CHECK((ec2 == errc::peer_gone || ec2 == asio::error::operation_aborted));
      other.close();
    });
  }
  acceptor.close();
}

TEST_CASE("rpc_buffer: async_wait_closed is cancelled through its slot", "[rpc][service]") {
  scoped_name name("svc");
  asio::io_context io;
  service::hold_counts counts;
  rpc_acceptor acceptor(io.get_executor(), shmio::create_only, name, small_rings());
  const auto type = GENERATE(asio::cancellation_type::terminal, asio::cancellation_type::partial,
                             asio::cancellation_type::total);
  run_body(io, [&]() -> asio::awaitable<void> {
    rpc_buffer client(io.get_executor());
    rpc_buffer end = co_await connect_pair(acceptor, client, service::handler(counts));
    std::optional<std::error_code> first, second;
    asio::cancellation_signal cancel;
    client.async_wait_closed(
        asio::bind_cancellation_slot(cancel.slot(), [&](std::error_code ec) { first = ec; }));
    co_await asio::post(io, asio::use_awaitable);  // it is waiting
    cancel.emit(type);
    {
      const bool waited = co_await wait_until([&] { return first.has_value(); });
      REQUIRE(waited);
    }
    CHECK(*first == asio::error::operation_aborted);
    // Another wait still hears the other end close.
    client.async_wait_closed([&](std::error_code ec) { second = ec; });
    end.close();
    {
      const bool waited = co_await wait_until([&] { return second.has_value(); });
      REQUIRE(waited);
    }
    CHECK_FALSE(*second);
    client.close();
  });
  acceptor.close();
}

TEST_CASE("rpc_buffer: a blocking connect from a thread that does not run the io_context",
          "[rpc][service]") {
  scoped_name name("svc");
  asio::io_context server_io, client_io;
  service::hold_counts counts;
  rpc_server server(server_io.get_executor(), shmio::create_only, name, service::handler(counts),
                    small_rings());
  io_thread server_thread(server_io);
  rpc_buffer client(client_io.get_executor());
  client.connect(name.str());  // client_io does not run yet
  CHECK(eventually([&] { return server.connection_count() == 1; }));
  const auto request = service::payload(5000, 7);
  std::optional<bytes_t> reply;
  client.async_request(asio::buffer(request), [&](std::error_code ec, bytes_t r) {
    CHECK_FALSE(ec);
    reply = std::move(r);
    client.close();
  });
  client_io.run_for(bound);
  REQUIRE(reply);
  CHECK(*reply == service::answer(request));
  // The server drops the connection its client closed.
  CHECK(eventually([&] { return server.connection_count() == 0; }));
  CHECK(server.statistics().accepted == 1);
  server.close();
  CHECK(server_thread.join());  // closed, the server leaves its io_context nothing to do
  CHECK(shm_files_with(name.str()) == 0);
}

// ---- client and server processes -----------------------------------------------------------

namespace {

// The io_context of an rpc_server, run on a thread of its own for the length of a test.
struct server_thread {
  asio::io_context io;
  service::hold_counts counts;
  rpc_server server;
  io_thread runner;
  explicit server_thread(std::string_view name)
      : server(io.get_executor(), shmio::create_only, name, service::methods(counts),
               small_rings()),
        runner(io) {}
  ~server_thread() {
    server.close();
    CHECK(runner.join());  // closed, the server leaves its io_context nothing to do
  }
};

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr int many_clients = 32;  // each sanitized process is large
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr int many_clients = 32;
#else
constexpr int many_clients = 256;
#endif
#else
constexpr int many_clients = 256;
#endif

}  // namespace

TEST_CASE("rpc_server: many client processes connected at once, each with checksummed calls",
          "[rpc][service][process]") {
  // Each connection costs the server a few descriptors (segment, doorbell, pidfd).
  rlimit files{};
  ::getrlimit(RLIMIT_NOFILE, &files);
  files.rlim_cur = std::min<rlim_t>(files.rlim_max, 8192);
  ::setrlimit(RLIMIT_NOFILE, &files);

  scoped_name name("svc");
  server_thread s(name);
  int gate[2];
  REQUIRE(::pipe(gate) == 0);
  // Only the read end goes to the clients: they see EOF when this process closes the write end.
  REQUIRE(::fcntl(gate[1], F_SETFD, FD_CLOEXEC) == 0);
  std::vector<std::unique_ptr<child>> clients;
  for (int i = 0; i < many_clients; ++i)
    clients.push_back(std::make_unique<child>(
        std::vector<std::string>{peer_path(), "rpc-service-client", name.str(), "10",
                                 std::to_string(i), std::to_string(gate[0])}));
  // Every client is connected (and waits at the gate) before any calls.
  INFO("connected: " << s.server.connection_count());
  CHECK(eventually([&] { return s.server.connection_count() == many_clients; }, 60s));
  ::close(gate[1]);
  ::close(gate[0]);
  int failed = 0;
  for (auto& c : clients) {
    const int rc = c->wait(60s);
    if (rc != 0) {
      ++failed;
      UNSCOPED_INFO("client " << c->pid() << " exited with " << rc);
    }
  }
  CHECK(failed == 0);
  CHECK(eventually([&] { return s.server.connection_count() == 0; }));
  CHECK(s.server.statistics().accepted == many_clients);
  CHECK(s.server.statistics().refused == 0);
}

TEST_CASE(
    "rpc_server: client processes calling in place, several at once, get checksummed "
    "replies in their buffers",
    "[rpc][service][process][in_place]") {
  // The server process serves "reverse" in place; each client sends from its own buffer and
  // reads each reply into one, with sizes of up to three packets.
  scoped_name name("svc");
  child server({peer_path(), "rpc-service-server", name.str()});
  REQUIRE(eventually([&] {
    asio::io_context io;
    rpc_buffer probe(io.get_executor());
    std::error_code ec;
    probe.connect(name.str(), 10s, ec);
    return !ec;
  }));
  std::vector<std::unique_ptr<child>> clients;
  for (int i = 0; i < 8; ++i)
    clients.push_back(std::make_unique<child>(std::vector<std::string>{
        peer_path(), "rpc-service-client-in-place", name.str(), "200", std::to_string(i)}));
  for (auto& c : clients)
    CHECK(c->wait(60s) == 0);
  // Each client closed its end: the server closes its own, the last user of the channel's
  // file, which goes with it (killed first, the server would leave them behind).
  CHECK(eventually([&] { return shm_files_with(name.str() + "#") == 0; }));
  server.kill9();
}

TEST_CASE("rpc_server: a client killed mid-call frees its connection; others are unaffected",
          "[rpc][service][process]") {
  scoped_name name("svc");
  server_thread s(name);
  child holder({peer_path(), "rpc-service-hold", name.str()});
  REQUIRE(eventually([&] { return s.counts.holding == 1; }));
  // The accept's completion, which adds the connection, may come after its first call.
  CHECK(eventually([&] { return s.server.connection_count() == 1; }));
  holder.kill9();
  // Its death is seen through its pidfd: the handler is cancelled, the channel goes.
  CHECK(eventually([&] { return s.server.connection_count() == 0 && s.counts.cancelled == 1; }));
  CHECK(eventually([&] { return shm_files_with(name.str() + "#") == 0; }));
  child next({peer_path(), "rpc-service-client", name.str(), "20", "5"});
  CHECK(next.wait() == 0);
}

TEST_CASE("rpc_server: an idle client in a pid namespace of its own that dies is seen",
          "[rpc][service][process]") {
  // A client that is pid 1 in a pid namespace of its own writes 1 into its channel's header,
  // which here names another process, one that lives on. Killed while idle (at its gate, with
  // no call), it must still be seen to die: the server asks the kernel which process holds the
  // client's lock, in its own numbering, and frees the connection.
  scoped_name name("svc");
  server_thread s(name);
  int gate[2], told[2];
  REQUIRE(::pipe(gate) == 0);
  REQUIRE(::pipe(told) == 0);
  enum : int { not_tried = 50 };
  // The child enters the namespace (its children are born in it) and starts the client, then
  // tells us the client's pid as we number it, and waits for it.
  child parent_of_client([&]() -> int {
    if (::unshare(CLONE_NEWPID) != 0) {
      const uid_t uid = ::geteuid();
      const gid_t gid = ::getegid();
      if (::unshare(CLONE_NEWUSER | CLONE_NEWPID) != 0) return not_tried;
      if (!write_proc("/proc/self/setgroups", "deny") ||
          !write_proc("/proc/self/uid_map",
                      std::to_string(uid) + " " + std::to_string(uid) + " 1") ||
          !write_proc("/proc/self/gid_map", std::to_string(gid) + " " + std::to_string(gid) + " 1"))
        return not_tried;
    }
    const std::string path = peer_path();
    const std::vector<std::string> argv{path, "rpc-service-client",   name.str(), "1",
                                        "7",  std::to_string(gate[0])};
    std::vector<char*> args;
    for (const auto& a : argv)
      args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    const pid_t client = ::fork();
    if (client == 0) {
      ::execv(args[0], args.data());
      ::_exit(98);
    }
    if (client < 0) return 2;
    const std::int32_t ours = client;
    if (::write(told[1], &ours, sizeof ours) != sizeof ours) return 3;
    int status = 0;
    ::waitpid(client, &status, 0);
    return 0;
  });
  ::close(gate[0]);
  ::close(told[1]);
  std::int32_t client_pid = 0;
  pollfd p{told[0], POLLIN, 0};
  const bool told_pid = ::poll(&p, 1, 10'000) == 1 &&
                        ::read(told[0], &client_pid, sizeof client_pid) == sizeof client_pid;
  ::close(told[0]);
  if (!told_pid) {
    ::close(gate[1]);
    REQUIRE(parent_of_client.wait() == not_tried);
    WARN("no pid namespace to be had here (neither CAP_SYS_ADMIN nor user namespaces)");
    return;
  }
  REQUIRE(client_pid > 1);
  CHECK(eventually([&] { return s.server.connection_count() == 1; }));
  ::kill(client_pid, SIGKILL);
  CHECK(eventually([&] { return s.server.connection_count() == 0; }));
  CHECK(eventually([&] { return shm_files_with(name.str() + "#") == 0; }));
  ::close(gate[1]);
  CHECK(parent_of_client.wait() == 0);
}

TEST_CASE("rpc_buffer: a server killed mid-call fails its clients' calls with peer_gone",
          "[rpc][service][process]") {
  scoped_name name("svc");
  shmio::test::signal_pipe hold_started;
  child server(
      {peer_path(), "rpc-service-server", name.str(), std::to_string(hold_started.write_fd())});
  asio::io_context io;
  rpc_buffer client(io.get_executor());
  // The server process is up when its service answers a connect.
  REQUIRE(eventually([&] {
    std::error_code ec;
    client.connect(name.str(), 10s, ec);
    return !ec;
  }));
  std::optional<std::error_code> call, closed;
  std::chrono::steady_clock::time_point killed, failed;
  client.async_wait_closed([&](std::error_code ec) { closed = ec; });
  client.async_request(asio::buffer(service::hold), [&](std::error_code ec, bytes_t) {
    failed = std::chrono::steady_clock::now();
    call = ec;
  });
  // The call reaches the server: its handler says so.
  REQUIRE(shmio::test::run_until(io, [&] { return hold_started.wait(0ms) == 'h'; }));
  REQUIRE(server.kill9() == 128 + SIGKILL);
  killed = std::chrono::steady_clock::now();  // from the reap: the kernel's teardown is not ours
  CHECK(shmio::test::run_until(io, [&] { return call && closed; }));
  REQUIRE(call);
  CHECK(*call == errc::peer_gone);
  REQUIRE(closed);
  CHECK_FALSE(*closed);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(failed - killed).count();
  INFO("peer_gone after " << ms << " ms");
  CHECK(ms < 1000);  // within the 50 ms peer check (or the pidfd) on a quiet machine
  client.close();
}

TEST_CASE("rpc_server: a thousand short-lived clients leave no descriptors, mappings or files",
          "[rpc][service]") {
  scoped_name name("svc");
  server_thread s(name);
  asio::io_context io;
  auto work = asio::make_work_guard(io);
  io_thread client_thread(io);  // stopped and joined also when a check fails
  auto one_client = [&](int i) {
    rpc_buffer client(io.get_executor());
    client.connect(name.str());
    const auto request = service::payload(64, i);
    auto reply = client.async_request(asio::buffer(request), asio::use_future);
    REQUIRE(reply.wait_for(bound) == std::future_status::ready);
    CHECK(reply.get() == service::answer(request));
    client.close();
  };
  for (int i = 0; i < 20; ++i)
    one_client(i);  // warm-up: thread-locals, the wait hub, allocator pools
  REQUIRE(eventually([&] { return s.server.connection_count() == 0; }));
  const std::size_t fds = open_fds(), maps = shared_mappings(), tasks = threads();
  for (int i = 0; i < 1000; ++i)
    one_client(i);
  CHECK(eventually([&] { return s.server.connection_count() == 0; }));
  CHECK(eventually([&] { return open_fds() <= fds; }));
  CHECK(eventually([&] { return shared_mappings() <= maps; }));
  CHECK(eventually([&] { return threads() <= tasks; }));
  CHECK(eventually([&] { return shm_files_with(name.str() + "#") == 0; }));
  CHECK(s.server.statistics().accepted == 1020);
  work.reset();
  CHECK(client_thread.join());
}

// ---- hostile connect requests ----------------------------------------------------------------

namespace {

// A writer into a listener's connect ring that goes around the client's rules.
class connect_ring {
 public:
  explicit connect_ring(std::string_view name)
      : seg_(shmio::open_only, name, shmio::object_kind::rpc_listener) {
    detail::listener_settings settings;
    REQUIRE_FALSE(detail::validate_listener(seg_.body(), settings));
    std::error_code ec;
    const std::uint16_t me =
        detail::claim_participant(seg_.native_handle(), layout::max_participants, ec);
    REQUIRE_FALSE(ec);
    state_ = reinterpret_cast<layout::ring_state*>(seg_.body().data() + settings.ring_offset);
    ring_.emplace(state_, settings.ring, seg_.native_handle(), me);
  }
  void publish(std::span<const std::byte> node) {
    detail::write_claim c;
    REQUIRE(ring_->try_claim_write(c) == detail::claim_status::claimed);
    std::memcpy(c.data.data(), node.data(), std::min(node.size(), c.data.size()));
    ring_->publish(c, static_cast<std::uint32_t>(node.size()));
  }
  /// One empty node if there is room: false if there was none.
  bool try_publish(std::span<const std::byte> node) {
    detail::write_claim c;
    if (ring_->try_claim_write(c) != detail::claim_status::claimed) return false;
    if (!node.empty())  // memcpy's source must not be null, even for no bytes
      std::memcpy(c.data.data(), node.data(), std::min(node.size(), c.data.size()));
    ring_->publish(c, static_cast<std::uint32_t>(node.size()));
    return true;
  }
  layout::ring_state& state() { return *state_; }

 private:
  shmio::segment seg_;
  layout::ring_state* state_ = nullptr;
  std::optional<detail::ring_view> ring_;
};

bytes_t as_bytes(const layout::connect_request& r) {
  const auto* p = reinterpret_cast<const std::byte*>(&r);
  return {p, p + sizeof r};
}

}  // namespace

TEST_CASE("rpc_acceptor: forged connect requests are refused and counted; real clients go on",
          "[rpc][service]") {
  scoped_name name("svc");
  asio::io_context io;
  service::hold_counts counts;
  rpc_acceptor acceptor(io.get_executor(), shmio::create_only, name, small_rings());
  connect_ring ring(name);
  layout::connect_request good{};
  good.version = layout::listener_version;
  good.pid = static_cast<std::uint32_t>(::getpid());
  good.nonce = 12345;  // no such channel
  auto bad_version = good;
  bad_version.version = 9;
  auto zero_nonce = good;
  zero_nonce.nonce = 0;
  ring.publish(bytes_t(5, std::byte{7}));  // too short
  ring.publish(as_bytes(bad_version));
  ring.publish(as_bytes(zero_nonce));
  ring.publish(as_bytes(good));  // well formed, but nobody made the channel
  // A channel of the right name but the wrong sizes: refused too.
  auto wrong_sizes = good;
  wrong_sizes.nonce = 777;
  rpc_options big = small_rings();
  big.node_count = 64;
  shmio::rpc_buffer impostor(io.get_executor(), shmio::create_only,
                             detail::connection_name(name, good.pid, wrong_sizes.nonce),
                             shmio::rpc_handler{}, big);
  ring.publish(as_bytes(wrong_sizes));
  run_body(io, [&]() -> asio::awaitable<void> {
    rpc_buffer client(io.get_executor());
    rpc_buffer end = co_await connect_pair(acceptor, client, service::handler(counts));
    const auto request = service::payload(10, 1);
    {
      const auto reply = co_await client.async_request(asio::buffer(request), asio::use_awaitable);
      CHECK(reply == service::answer(request));
    }
    CHECK(acceptor.statistics().refused == 5);
    CHECK(acceptor.statistics().accepted == 1);
    client.close();
    end.close();
  });
  impostor.close();
  acceptor.close();
}

// A channel made for the request it holds, as a client of `service` would make it, whose admin
// lock this process holds through a descriptor of its own (as a client stopped in its close, or
// a hostile one, would hold it).
struct held_channel {
  held_channel(asio::io_context& io, std::string_view service, std::uint64_t nonce)
      : request{layout::listener_version, static_cast<std::uint32_t>(::getpid()), nonce, {}},
        name(detail::connection_name(service, request.pid, request.nonce)),
        channel(io.get_executor(), shmio::create_only, name, shmio::rpc_handler{}, small_rings()) {
    std::error_code ec;
    admin.reset(::open(detail::segment_path(name, ec).c_str(), O_RDWR | O_CLOEXEC));
    REQUIRE(admin.get() >= 0);
    REQUIRE(detail::platform::try_lock_byte(admin.get(), layout::admin_lock_byte,
                                            detail::platform::lock_kind::exclusive, ec));
  }
  layout::connect_request request;
  std::string name;
  shmio::rpc_buffer channel;
  detail::platform::unique_fd admin;
};

// Writes `copies` of `request` into `service`'s connect ring, then connects a client behind
// them: how long that took.
std::chrono::steady_clock::duration connect_behind(asio::io_context& io, rpc_acceptor& acceptor,
                                                   std::string_view service,
                                                   const layout::connect_request& request,
                                                   int copies) {
  connect_ring ring(service);
  for (int i = 0; i < copies; ++i)
    ring.publish(as_bytes(request));
  const auto start = std::chrono::steady_clock::now();
  run_body(io, [&]() -> asio::awaitable<void> {
    rpc_buffer client(io.get_executor());
    rpc_buffer end = co_await connect_pair(acceptor, client, shmio::rpc_handler{});
    client.close();
    end.close();
  });
  return std::chrono::steady_clock::now() - start;
}

TEST_CASE("rpc_acceptor: a request for a channel whose admin lock is held is refused at once",
          "[rpc][service]") {
  // The acceptor opens its clients' channels on its executor's thread. One whose admin lock a
  // process holds (a client stopped in its close, or a hostile one) must not stall it: it used
  // to wait 2 s for each such request, and so every other client of the service.
  scoped_name name("svc");
  asio::io_context io;
  rpc_acceptor acceptor(io.get_executor(), shmio::create_only, name, small_rings());
  held_channel held(io, name, 4321);
  const auto took = connect_behind(io, acceptor, name, held.request, 5);
  CAPTURE(std::chrono::duration_cast<std::chrono::milliseconds>(took).count());
  CHECK(acceptor.statistics().refused == 5);
  CHECK(took < 1500ms);  // one wait for the lock would be 2 s; the five, 10 s
  held.admin.reset();    // before its channel's close, which would otherwise wait 2 s for it
  held.channel.close();
  acceptor.close();
  CHECK(shm_files_with(name) == 0);
}

TEST_CASE("rpc_acceptor: a sweep of stale channels looks at 64 files at most, and the next goes on",
          "[rpc][service]") {
  // Files that look like a service's channels are swept on the service's thread. Any process
  // of the user may make such files, as many as it likes: 50 000 once held the thread for a
  // second. Each sweep now looks at 64, in the order of their names, and the next goes on
  // after the last one looked at.
  scoped_name name("svc");
  std::error_code ec;
  constexpr int junk = 150;
  std::vector<std::string> paths;
  struct cleanup {
    std::vector<std::string>& paths;
    ~cleanup() {
      for (const auto& p : paths)
        ::unlink(p.c_str());
    }
  } remove_all{paths};
  for (int i = 0; i < junk; ++i) {
    char suffix[16];
    std::snprintf(suffix, sizeof suffix, "#junk%03d", i);
    paths.push_back(detail::segment_path(std::string(name) + suffix, ec));
    REQUIRE_FALSE(ec);
    detail::platform::unique_fd fd(::open(paths.back().c_str(), O_RDWR | O_CREAT | O_EXCL, 0600));
    REQUIRE(fd.get() >= 0);
  }
  auto left = [&] {
    return std::count_if(paths.begin(), paths.end(),
                         [](const std::string& p) { return ::access(p.c_str(), F_OK) == 0; });
  };
  asio::io_context io;
  {
    // A service sweeps as it starts: the first 64 go (stale: nobody holds them), the rest stay.
    rpc_acceptor acceptor(io.get_executor(), shmio::create_only, name, small_rings());
    CHECK(left() == junk - 64);
    CHECK(::access(paths[63].c_str(), F_OK) != 0);
    CHECK(::access(paths[64].c_str(), F_OK) == 0);
    acceptor.close();
  }
  // The next sweeps go on from there (as the acceptor's do, a second apart while any are left).
  detail::sweep_part part{paths[63].substr(paths[63].rfind('/') + 1), 64};
  detail::sweep_stale_segments(std::string(name) + '#', part);
  CHECK(left() == junk - 128);
  CHECK_FALSE(part.after.empty());
  detail::sweep_stale_segments(std::string(name) + '#', part);
  CHECK(left() == 0);
  CHECK(part.after.empty());
}

TEST_CASE(
    "rpc_acceptor: the same request for a held channel, sent again and again, stalls the "
    "service for at most its budget",
    "[rpc][service]") {
  // Each such request used to cost the service's thread the acceptor's whole patience (10 ms),
  // for as many requests as a hostile client cared to write: 200 here, 2 s. The waits now come
  // from a budget (20 ms, refilled at 1 % of the time); past it, a held lock refuses at once.
  scoped_name name("svc");
  asio::io_context io;
  rpc_acceptor acceptor(io.get_executor(), shmio::create_only, name, small_rings());
  held_channel held(io, name, 4322);
  constexpr int forged = 200;
  const auto took = connect_behind(io, acceptor, name, held.request, forged);
  CAPTURE(std::chrono::duration_cast<std::chrono::milliseconds>(took).count());
  CHECK(acceptor.statistics().refused == forged);
  CHECK(took < 1000ms);  // 2 s before; about 20 ms of waits and 200 opens now
  CHECK(took >= 15ms);   // the budget was spent waiting, not skipped
  held.channel.close();
  acceptor.close();
}

TEST_CASE("rpc_acceptor: a channel whose admin lock is held closes at once on the service's side",
          "[rpc][service]") {
  // The acceptor's end of a connection closes on the service's thread, and a close takes the
  // file's admin lock. Held by the client (stopped, or hostile), it used to stall the whole
  // service 2 s per close, as the open did before it.
  scoped_name name("svc");
  std::chrono::steady_clock::duration took{};
  {
    asio::io_context io;
    service::hold_counts counts;
    rpc_acceptor acceptor(io.get_executor(), shmio::create_only, name, small_rings());
    run_body(io, [&]() -> asio::awaitable<void> {
      rpc_buffer client(io.get_executor()), other(io.get_executor());
      rpc_buffer end = co_await connect_pair(acceptor, client, service::handler(counts));
      rpc_buffer other_end = co_await connect_pair(acceptor, other, service::handler(counts));
      std::error_code ec;
      detail::platform::unique_fd admin(
          ::open(detail::segment_path(client.name(), ec).c_str(), O_RDWR | O_CLOEXEC));
      REQUIRE(admin.get() >= 0);
      REQUIRE(detail::platform::try_lock_byte(admin.get(), layout::admin_lock_byte,
                                              detail::platform::lock_kind::exclusive, ec));
      const auto start = std::chrono::steady_clock::now();
      end.close();
      const auto request = service::payload(64, 7);
      const auto answered =
          co_await other.async_request(asio::buffer(request), asio::use_awaitable);
      CHECK(answered == service::answer(request));
      took = std::chrono::steady_clock::now() - start;
      admin.reset();
      client.close();
      other.close();
      other_end.close();
      acceptor.close();
    });
  }
  CAPTURE(std::chrono::duration_cast<std::chrono::milliseconds>(took).count());
  CHECK(took < 1500ms);  // the old wait for the lock alone was 2 s
  // The service's end gave up the admin lock's wait at its close; the client, closing after
  // the lock was let go, still saw that end hold the file. The end looks once more as its
  // descriptor goes, finds itself last, and removes the file.
  CHECK(shm_files_with(name) == 0);
}

TEST_CASE(
    "rpc_acceptor: a client that truncates its channel's file fails that channel, not the "
    "service",
    "[rpc][service][hostile]") {
  // The service maps a file its client made, and any process that can write a file can
  // truncate it: the next access to a page it took raises SIGBUS, which would kill the service
  // and every other client's connection with it. The truncation guard an RPC end installs
  // turns that into zero pages, and the channel whose file it was fails with corrupted.
  const bool service_calls = GENERATE(true, false);
  CAPTURE(service_calls);
  scoped_name name("svc");
  asio::io_context io;
  service::hold_counts counts;
  rpc_acceptor acceptor(io.get_executor(), shmio::create_only, name, small_rings());
  REQUIRE(detail::platform::truncation_guard_installed());
  run_body(io, [&]() -> asio::awaitable<void> {
    rpc_buffer client(io.get_executor());
    rpc_buffer end = co_await connect_pair(acceptor, client, service::handler(counts));
    const auto request = service::payload(100, 3);
    const auto answered = co_await client.async_request(asio::buffer(request), asio::use_awaitable);
    CHECK(answered == service::answer(request));
    // Cut to its first page: the headers and the rings' states stay, every node goes (a node
    // of these rings is over 1 KiB, and the first begins past the two rings' headers).
    std::error_code ec;
    const std::string path = detail::segment_path(client.name(), ec);
    REQUIRE_FALSE(ec);
    {
      detail::platform::unique_fd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
      REQUIRE(fd.get() >= 0);
      REQUIRE(::ftruncate(fd.get(), 4096) == 0);
    }
    const auto faults = detail::platform::faults_recovered();
    // The client's call writes a node of a ring the truncation took: the write faults, the
    // guard maps zeros in its place, and the call fails at once rather than at its timeout.
    // The service's call may find the client's end failed first (its own look at the file
    // every 50 ms while it has anything pending, or its reader's fault): then the client is
    // gone for it. Either way, at once.
    rpc_buffer& caller = service_calls ? end : client;
    const auto failed = [&](std::error_code ec) {
      return ec == errc::corrupted || (service_calls && ec == errc::peer_gone);
    };
    auto [call_ec, reply] =
        co_await caller.async_request(asio::buffer(request), 5s, tuple_awaitable);
    CHECK(failed(call_ec));
    if (!service_calls) CHECK(detail::platform::faults_recovered() > faults);
    // The channel has failed: later calls fail at once too.
    auto [again_ec, again] =
        co_await caller.async_request(asio::buffer(request), 5s, tuple_awaitable);
    CHECK(failed(again_ec));
    // The service goes on serving its other clients.
    rpc_buffer other(io.get_executor());
    rpc_buffer other_end = co_await connect_pair(acceptor, other, service::handler(counts));
    const auto served = co_await other.async_request(asio::buffer(request), asio::use_awaitable);
    CHECK(served == service::answer(request));
    other.close();
    other_end.close();
    client.close();
    end.close();
    acceptor.close();
  });
  CHECK(shm_files_with(name.str()) == 0);
}

TEST_CASE("rpc_acceptor: a service removes the channels its killed clients left unannounced",
          "[rpc][service]") {
  // A client makes its channel, then posts its request: one killed in between (or while it
  // retried against a full backlog) leaves a channel that no request names, so no accept
  // opens it and finds it stale, and its random name is never made again.
  scoped_name name("svc");
  const std::string left = detail::connection_name(name, 4242, 0x5eed);
  child maker([&] {
    std::error_code ec;
    auto s = shmio::segment::create(left, shmio::object_kind::rpc, 4096, {}, ec);
    ::_exit(ec ? 1 : 0);  // no close: the file stays, held by nobody
    return 0;
  });
  REQUIRE(maker.wait() == 0);
  REQUIRE(shm_files_with(left) == 1);
  asio::io_context io;
  rpc_acceptor acceptor(io.get_executor(), shmio::create_only, name, small_rings());
  CHECK(shm_files_with(left) == 0);
  // A live one (its maker holds it) stays.
  const std::string live = detail::connection_name(name, 4243, 0x5eed);
  shmio::rpc_buffer held(io.get_executor(), shmio::create_only, live, shmio::rpc_handler{},
                         small_rings());
  acceptor.close();
  rpc_acceptor again(io.get_executor(), shmio::create_only, name, small_rings());
  CHECK(shm_files_with(live) == 1);
}

TEST_CASE("rpc_acceptor: a closed service's name is free at once, its accepts still pending",
          "[rpc][service]") {
  // Its pending accept keeps its state until the io_context runs the abort; a service made
  // again under the name meanwhile (in the same handler, say) must not find it in its way.
  scoped_name name("svc"), other("svc");
  asio::io_context io;
  service::hold_counts counts;
  {
    rpc_server first(io.get_executor(), shmio::create_only, name, service::handler(counts),
                     small_rings());
    first.close();
    rpc_server second(io.get_executor(), shmio::create_only, name, service::handler(counts),
                      small_rings());
    rpc_acceptor gone(io.get_executor(), shmio::create_only, other, small_rings());
    bool aborted = false;
    gone.async_accept(
        [&](std::error_code ec, rpc_buffer) { aborted = ec == asio::error::operation_aborted; });
    gone.close();
    rpc_acceptor back(io.get_executor(), shmio::create_only, other, small_rings());
    // The new service serves.
    run_body(io, [&]() -> asio::awaitable<void> {
      rpc_buffer client(io.get_executor());
      co_await client.async_connect(name, asio::use_awaitable);
      const auto request = service::payload(10, 1);
      const auto reply = co_await client.async_request(asio::buffer(request), asio::use_awaitable);
      CHECK(reply == service::answer(request));
      client.close();
    });
    CHECK(aborted);
  }
  CHECK(shm_files_with(name) == 0);
  CHECK(shm_files_with(other) == 0);
}

TEST_CASE(
    "rpc_acceptor: an accept on a closed or moved-from acceptor is aborted through its executor",
    "[rpc][service]") {
  // As an Asio I/O object's: a moved-from acceptor keeps its executor, and an accept started on
  // one that is closed completes with operation_aborted as any completion does, never inside
  // the call (and never with an executor that is not there).
  const int how = GENERATE(0, 1, 2);  // closed, moved from by construction, by assignment
  CAPTURE(how);
  scoped_name name("svc"), other("svc");
  asio::io_context io;
  rpc_acceptor acceptor(io.get_executor(), shmio::create_only, name, small_rings());
  std::optional<rpc_acceptor> kept;
  if (how == 0) acceptor.close();
  if (how == 1) kept.emplace(std::move(acceptor));
  if (how == 2) {
    kept.emplace(io.get_executor(), shmio::create_only, other, small_rings());
    *kept = std::move(acceptor);
  }
  // NOLINTBEGIN(bugprone-use-after-move): a moved-from acceptor is closed, and usable as such
  CHECK_FALSE(acceptor.is_open());
  CHECK(acceptor.get_executor() == io.get_executor());
  int calls = 0;
  std::error_code result;
  acceptor.async_accept([&](std::error_code ec, rpc_buffer end) {
    ++calls;
    result = ec;
    CHECK_FALSE(end.is_open());
  });
  // NOLINTEND(bugprone-use-after-move)
  CHECK(calls == 0);
  io.run();
  CHECK(calls == 1);
  CHECK(result == asio::error::operation_aborted);
  if (kept) CHECK(kept->is_open());
}

TEST_CASE("rpc_server: a moved-from server is closed and keeps its executor", "[rpc][service]") {
  scoped_name name("svc"), other("svc");
  asio::io_context io;
  service::hold_counts counts;
  rpc_server first(io.get_executor(), shmio::create_only, name, service::handler(counts),
                   small_rings());
  rpc_server second(std::move(first));
  rpc_server third(io.get_executor(), shmio::create_only, other, service::handler(counts),
                   small_rings());
  third = std::move(second);
  // NOLINTBEGIN(bugprone-use-after-move)
  for (rpc_server* s : {&first, &second}) {
    CHECK_FALSE(s->is_open());
    CHECK(s->get_executor() == io.get_executor());
  }
  // NOLINTEND(bugprone-use-after-move)
  CHECK(third.is_open());
  CHECK(third.name() == std::string(name));
}

TEST_CASE("rpc_acceptor: async_accept is cancelled by every cancellation type", "[rpc][service]") {
  const auto type = GENERATE(asio::cancellation_type::terminal, asio::cancellation_type::partial,
                             asio::cancellation_type::total);
  CAPTURE(static_cast<int>(type));
  scoped_name name("svc");
  asio::io_context io;
  rpc_acceptor acceptor(io.get_executor(), shmio::create_only, name, small_rings());
  asio::cancellation_signal signal;
  int calls = 0;
  std::error_code result;
  acceptor.async_accept(
      asio::bind_cancellation_slot(signal.slot(), [&](std::error_code ec, rpc_buffer) {
        ++calls;
        result = ec;
      }));
  io.poll();
  CHECK(calls == 0);
  signal.emit(type);
  CHECK(shmio::test::run_until(io, [&] { return calls == 1; }));
  CHECK(result == asio::error::operation_aborted);
  // The service goes on: a client is accepted by the next accept.
  run_body(io, [&]() -> asio::awaitable<void> {
    rpc_buffer client(io.get_executor());
    rpc_buffer end = co_await connect_pair(acceptor, client, shmio::rpc_handler{});
    client.close();
    end.close();
  });
  CHECK(calls == 1);
}

TEST_CASE(
    "rpc_acceptor: a cancellation that comes after the accept took a request it then refuses "
    "ends the accept",
    "[rpc][service]") {
  // The wait had completed (it took the request) when the cancellation came, so no wait was
  // there to cancel; the accept hears it before it would wait again.
  const auto type = GENERATE(asio::cancellation_type::terminal, asio::cancellation_type::partial,
                             asio::cancellation_type::total);
  CAPTURE(static_cast<int>(type));
  scoped_name name("svc");
  asio::io_context io, steps;  // the accept's handler, and so its steps, on `steps`
  rpc_acceptor acceptor(io.get_executor(), shmio::create_only, name, small_rings());
  connect_ring ring(name);
  layout::connect_request gone{};  // well formed, for a channel nobody made: refused
  gone.version = layout::listener_version;
  gone.pid = static_cast<std::uint32_t>(::getpid());
  gone.nonce = 99;
  ring.publish(as_bytes(gone));
  asio::cancellation_signal signal;
  int calls = 0;
  std::error_code result;
  acceptor.async_accept(asio::bind_cancellation_slot(
      signal.slot(), asio::bind_executor(steps, [&](std::error_code ec, rpc_buffer) {
        ++calls;
        result = ec;
      })));
  // The wait takes the request, and its next step waits in `steps`' queue.
  REQUIRE(shmio::test::run_until(io, [&] { return ring.state().head.position.load() == 1; }));
  io.poll();
  signal.emit(type);
  CHECK(shmio::test::run_until(steps, [&] { return calls == 1; }));
  CHECK(result == asio::error::operation_aborted);
  CHECK(acceptor.statistics().refused == 1);
}

TEST_CASE("rpc_acceptor: accepts complete in the order started when the first one takes no client",
          "[rpc][service]") {
  // The first accept's look at the ring takes no client: a request for a channel nobody made
  // (refused), or a ringful of refused nodes (it looks again). The second, started meanwhile,
  // must not take the client that comes next before it.
  const bool ringful = GENERATE(false, true);
  CAPTURE(ringful);
  scoped_name name("svc");
  asio::io_context io;
  rpc_acceptor acceptor(io.get_executor(), shmio::create_only, name, small_rings());
  connect_ring ring(name);
  if (ringful) {
    for (std::uint32_t i = 0; i < detail::listener_backlog; ++i)
      REQUIRE(ring.try_publish({}));
  } else {
    layout::connect_request gone{};  // well formed, for a channel nobody made
    gone.version = layout::listener_version;
    gone.pid = static_cast<std::uint32_t>(::getpid());
    gone.nonce = 4242;
    ring.publish(as_bytes(gone));
  }
  std::vector<int> order;
  rpc_buffer first_end(io.get_executor()), second_end(io.get_executor());
  acceptor.async_accept(shmio::rpc_handler{}, [&](std::error_code ec, rpc_buffer end) {
    CHECK_FALSE(ec);
    order.push_back(1);
    first_end = std::move(end);
  });
  acceptor.async_accept(shmio::rpc_handler{}, [&](std::error_code ec, rpc_buffer end) {
    order.push_back(2);
    if (!ec) second_end = std::move(end);
  });
  rpc_buffer client(io.get_executor());
  std::optional<std::error_code> connected;
  client.async_connect(name.str(), [&](std::error_code ec) { connected = ec; });
  REQUIRE(shmio::test::run_until(io, [&] { return !order.empty() && connected; }));
  CHECK(order == std::vector<int>{1});
  CHECK_FALSE(*connected);
  CHECK(acceptor.statistics().refused == (ringful ? detail::listener_backlog : 1));
  client.close();
  first_end.close();
  acceptor.close();  // the second completes with operation_aborted
  REQUIRE(shmio::test::run_until(io, [&] { return order.size() == 2; }));
  CHECK(order == std::vector<int>{1, 2});
}

TEST_CASE("rpc_acceptor: one look at the connect ring refuses at most as many nodes as it holds",
          "[rpc][service]") {
  scoped_name name("svc");
  asio::io_context io;
  std::error_code ec;
  auto acceptor = detail::rpc_acceptor_impl::create(io.get_executor(), name, small_rings(), ec);
  REQUIRE_FALSE(ec);
  connect_ring ring(name);
  const auto backlog = detail::listener_backlog;
  layout::connect_request good{};
  good.version = layout::listener_version;
  good.pid = 1;
  good.nonce = 2;
  // A full ring of refused nodes, then (once there is room) a request: the look that refused
  // the ring's worth stops there, and says to look again, however many more there are.
  for (std::uint32_t i = 0; i < backlog; ++i)
    REQUIRE(ring.try_publish({}));
  auto first = acceptor->take_request();
  REQUIRE(first);
  CHECK_FALSE(first->ec);
  CHECK(first->value.look_again);
  CHECK(acceptor->statistics().refused == backlog);
  ring.publish(as_bytes(good));
  auto second = acceptor->take_request();
  REQUIRE(second);
  CHECK_FALSE(second->ec);
  CHECK_FALSE(second->value.look_again);
  CHECK(second->value.request.nonce == good.nonce);
  CHECK_FALSE(acceptor->take_request());  // empty
  acceptor->close();
}

TEST_CASE(
    "rpc_acceptor: clients flooding the connect ring with refused nodes do not hold its "
    "thread",
    "[rpc][service]") {
  scoped_name name("svc");
  asio::io_context io;
  rpc_acceptor acceptor(io.get_executor(), shmio::create_only, name, small_rings());
  // Writers of empty nodes (each refused: too short), as fast as they can, each with its own
  // participant number; they wait for room by spinning.
  std::atomic<bool> stop{false};
  std::vector<std::unique_ptr<connect_ring>> rings;
  for (int i = 0; i < 3; ++i)
    rings.push_back(std::make_unique<connect_ring>(name));
  std::vector<std::thread> flooders;
  for (auto& r : rings)
    flooders.emplace_back([&stop, &r] {
      // relaxed: a flag polled between writes.
      while (!stop.load(std::memory_order_relaxed))
        static_cast<void>(r->try_publish({}));
    });
  bool accept_done = false;
  std::error_code accept_ec;
  acceptor.async_accept(shmio::rpc_handler{}, [&](std::error_code ec, rpc_buffer) {
    accept_ec = ec;
    accept_done = true;
  });
  // The acceptor has gone through the ring several times over; a timer started then on its
  // thread still fires: each look at the ring ends after as many nodes as the ring holds.
  const auto backlog = detail::listener_backlog;
  const bool flooded =
      shmio::test::run_until(io, [&] { return acceptor.statistics().refused > 4 * backlog; });
  bool fired = false;
  asio::steady_timer timer(io, 1ms);
  timer.async_wait([&](std::error_code) { fired = true; });
  const bool timer_ran = shmio::test::run_until(io, [&] { return fired; });
  stop = true;
  for (auto& t : flooders)
    t.join();
  CHECK(flooded);
  CHECK(timer_ran);
  CHECK_FALSE(accept_done);
  acceptor.close();
  CHECK(shmio::test::run_until(
      io, [&] { return accept_done; }, std::chrono::milliseconds(100 * shmio::test::time_scale)));
  CHECK(accept_ec == asio::error::operation_aborted);
}

TEST_CASE("rpc_acceptor: a client's channel of other sizes is refused before any of it is read",
          "[rpc][service]") {
  scoped_name name("svc");
  asio::io_context io;
  rpc_acceptor acceptor(io.get_executor(), shmio::create_only, name, small_rings());
  connect_ring ring(name);
  layout::connect_request request{};
  request.version = layout::listener_version;
  request.pid = static_cast<std::uint32_t>(::getpid());
  request.nonce = 4242;
  // Rings of 4096 nodes of 4 KiB each way, which their maker never touched; and a header that
  // says an opener was there once, after which an opener looks through every node for claims
  // a dead holder of its number left. Read, each node's word would bring its page in.
  rpc_options big;
  big.node_count = 4096;
  big.node_size = 4096;
  const std::string channel = detail::connection_name(name, request.pid, request.nonce);
  rpc_buffer impostor(io.get_executor(), shmio::create_only, channel, shmio::rpc_handler{}, big);
  shmio::test::raw_segment raw(channel);
  auto& header = raw.at<layout::rpc_header>(sizeof(layout::segment_header));
  header.opener_generation.store(1);
  // Its nodes' memory given back (they are all zero, as a hole reads): a client that never
  // allocated it, as one making its file with ftruncate alone would not have.
  std::error_code path_ec;
  const int fd = ::open(detail::segment_path(channel, path_ec).c_str(), O_RDWR | O_CLOEXEC);
  REQUIRE(fd >= 0);
  struct fd_closer {
    int fd;
    ~fd_closer() { ::close(fd); }
  } close_fd{fd};
  for (const std::uint64_t ring : {header.to_opener_offset, header.to_owner_offset}) {
    const std::uint64_t nodes = sizeof(layout::segment_header) + ring + layout::ring_nodes_offset;
    REQUIRE(::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(nodes),
                        static_cast<off_t>(header.ring_bytes - layout::ring_nodes_offset)) == 0);
  }
  auto allocated = [&] {
    struct stat st {};
    REQUIRE(::fstat(fd, &st) == 0);
    return static_cast<std::uint64_t>(st.st_blocks) * 512;
  };
  const std::uint64_t before = allocated();
  REQUIRE(before < 1024 * 1024);
  std::optional<std::error_code> accepted;
  acceptor.async_accept([&](std::error_code ec, rpc_buffer) { accepted = ec; });
  ring.publish(as_bytes(request));
  REQUIRE(shmio::test::run_until(io, [&] { return acceptor.statistics().refused == 1; }));
  CHECK_FALSE(accepted);  // refused, and the accept waits for the next request
  CHECK(allocated() - before < 64 * 1024);
  acceptor.close();
  REQUIRE(shmio::test::run_until(io, [&] { return accepted.has_value(); }));
  CHECK(*accepted == asio::error::operation_aborted);
}

TEST_CASE("rpc_acceptor: a damaged connect ring fails the accept with corrupted, never spins",
          "[rpc][service]") {
  scoped_name name("svc");
  asio::io_context io;
  rpc_acceptor acceptor(io.get_executor(), shmio::create_only, name, small_rings());
  connect_ring ring(name);
  // Three laps behind its nodes, where no healthy head ever is: every read reports damage.
  ring.state().head.position.store((std::uint64_t{1} << 48) -
                                   3 * std::uint64_t{detail::listener_backlog});
  ring.publish(bytes_t(sizeof(layout::connect_request)));  // wakes the acceptor
  std::optional<std::error_code> result;
  acceptor.async_accept([&](std::error_code ec, rpc_buffer) { result = ec; });
  io.run_for(bound);
  CHECK(io.stopped());
  REQUIRE(result);
  CHECK(*result == errc::corrupted);
}

TEST_CASE("rpc_server: a damaged connect ring stops its accepting, says why, and looks closed",
          "[rpc][service]") {
  scoped_name name("svc");
  asio::io_context io;
  service::hold_counts counts;
  rpc_server server(io.get_executor(), shmio::create_only, name, service::handler(counts),
                    small_rings());
  CHECK_FALSE(server.accept_error());
  connect_ring ring(name);
  ring.state().head.position.store((std::uint64_t{1} << 48) -
                                   3 * std::uint64_t{detail::listener_backlog});
  ring.publish(bytes_t(sizeof(layout::connect_request)));  // wakes the server's accept
  REQUIRE(shmio::test::run_until(io, [&] { return static_cast<bool>(server.accept_error()); }));
  CHECK(server.accept_error() == errc::corrupted);
  // A new client is told at once that nobody accepts, rather than timing out.
  rpc_buffer client(io.get_executor());
  std::error_code ec;
  client.connect(name.str(), 5s, ec);
  CHECK(ec == errc::not_found);
  server.close();
  CHECK(server.accept_error() == errc::corrupted);  // kept after close
}

// ---- named methods ---------------------------------------------------------------------------

TEST_CASE("rpc_server: a method's count is of the requests its handler took, once each",
          "[rpc][service][methods]") {
  // Two handlers at once: of four calls made together, two wait for a handler to end. Each is
  // counted once, as it starts; a call to a streaming method made as a plain call is refused
  // and not counted.
  scoped_name name("svc");
  asio::io_context io;
  shmio::rpc_methods methods;
  methods
      .add("slow", shmio::rpc_handler(
                       [](std::uint64_t, std::span<const std::byte>) -> asio::awaitable<bytes_t> {
                         asio::steady_timer t(co_await asio::this_coro::executor, 20ms);
                         co_await t.async_wait(asio::use_awaitable);
                         co_return bytes_t{};
                       }))
      .add("ticks", shmio::rpc_stream_handler(
                        [](std::uint64_t, std::span<const std::byte>,
                           shmio::rpc_stream_writer) -> asio::awaitable<void> { co_return; }));
  rpc_options options = small_rings();
  options.max_concurrent_handlers = 2;
  rpc_server server(io.get_executor(), shmio::create_only, name, methods, options);
  rpc_buffer client(io.get_executor());
  std::optional<std::error_code> connected;
  client.async_connect(name.str(), [&](std::error_code ec) { connected = ec; });
  REQUIRE(shmio::test::run_until(io, [&] { return connected.has_value(); }));
  REQUIRE_FALSE(*connected);
  int done = 0, failed = 0;
  for (int i = 0; i < 4; ++i)
    client.async_request("slow", asio::buffer("x", 1), [&](std::error_code ec, bytes_t) {
      ++done;
      failed += ec ? 1 : 0;
    });
  std::optional<std::error_code> refused;
  client.async_request("ticks", asio::buffer("x", 1),
                       [&](std::error_code ec, bytes_t) { refused = ec; });
  REQUIRE(shmio::test::run_until(io, [&] { return done == 4 && refused.has_value(); }));
  CHECK(failed == 0);
  CHECK(*refused == errc::no_such_method);
  std::error_code ec;
  const auto info = shmio::inspect::examine(name.str(), ec);
  REQUIRE_FALSE(ec);
  REQUIRE(info.rpc_service);
  std::map<std::string, std::uint64_t> calls;
  for (const auto& m : info.rpc_service->methods)
    calls[m.name] = m.calls;
  CHECK(calls["slow"] == 4);
  CHECK(calls["ticks"] == 0);
  client.close();
  server.close();
  io.poll();
}

TEST_CASE("rpc_server: named methods, the unnamed one, and names that are not there",
          "[rpc][service][methods]") {
  scoped_name name("svc");
  asio::io_context io;
  std::map<std::string, std::string> store;
  auto text_of = [](std::span<const std::byte> b) {
    return std::string(reinterpret_cast<const char*>(b.data()), b.size());
  };
  shmio::rpc_methods methods;
  methods
      .add("set", shmio::rpc_sync_handler([&](std::uint64_t, std::span<const std::byte> in) {
             const std::string kv = text_of(in);
             const auto eq = kv.find('=');
             store[kv.substr(0, eq)] = kv.substr(eq + 1);
             return bytes_t{};
           }))
      .add("get",
           shmio::rpc_handler(
               [&](std::uint64_t, std::span<const std::byte> in) -> asio::awaitable<bytes_t> {
                 auto it = store.find(text_of(in));
                 if (it == store.end()) throw std::runtime_error("no key '" + text_of(in) + "'");
                 co_return bytes(it->second);
               }))
      .add("", shmio::rpc_sync_handler([](std::uint64_t, std::span<const std::byte> in) {
             return service::answer(in);
           }));
  const std::string long_name(shmio::rpc_methods::max_name, 'm');
  methods.add(long_name, shmio::rpc_sync_handler([](std::uint64_t, std::span<const std::byte>) {
                return bytes("long");
              }));
  CHECK_THROWS_AS(methods.add(long_name + "x", shmio::rpc_sync_handler(
                                                   [](std::uint64_t, std::span<const std::byte>) {
                                                     return bytes_t{};
                                                   })),
                  shmio::error);
  CHECK_THROWS_AS(methods.add("empty", shmio::rpc_handler{}), shmio::error);
  rpc_server server(io.get_executor(), shmio::create_only, name, methods, small_rings());
  run_body(io, [&]() -> asio::awaitable<void> {
    rpc_buffer client(io.get_executor());
    co_await client.async_connect(name.str(), asio::use_awaitable);
    co_await client.async_request("set", asio::buffer(std::string_view("colour=blue")),
                                  asio::use_awaitable);
    {
      const auto reply = co_await client.async_request(
          "get", asio::buffer(std::string_view("colour")), asio::use_awaitable);
      CHECK(text_of(reply) == "blue");
    }
    // The handler's exception travels back as remote_error with its text.
    auto [ec1, r1] = co_await client.async_request("get", asio::buffer(std::string_view("size")),
                                                   tuple_awaitable);
    CHECK(ec1 == errc::remote_error);
    CHECK(text_of(r1) == "no key 'size'");
    // Unnamed calls reach "".
    const auto request = service::payload(3000, 3);
    {
      const auto reply = co_await client.async_request(asio::buffer(request), asio::use_awaitable);
      CHECK(reply == service::answer(request));
    }
    {
      const auto reply =
          co_await client.async_request(long_name, asio::buffer(request), asio::use_awaitable);
      CHECK(text_of(reply) == "long");
    }
    // Not there: at once, not at the timeout.
    const auto start = std::chrono::steady_clock::now();
    auto [ec2, r2] =
        co_await client.async_request("del", asio::buffer(request), 1h, tuple_awaitable);
    CHECK(ec2 == errc::no_such_method);
    CHECK(text_of(r2) == "the other end has no method 'del'");
    CHECK(std::chrono::steady_clock::now() - start < 5s);
    // Names out of range never leave this process.
    auto [ec3, r3] = co_await client.async_request("", asio::buffer(request), tuple_awaitable);
    CHECK(ec3 == errc::invalid_argument);
    auto [ec4, r4] =
        co_await client.async_request(long_name + "x", asio::buffer(request), tuple_awaitable);
    CHECK(ec4 == errc::invalid_argument);
    client.close();
    server.close();
  });
}

TEST_CASE("rpc_buffer: an owner and opener serve named methods; a service without ones says so",
          "[rpc][methods]") {
  scoped_name name("rpc");
  asio::io_context io;
  shmio::rpc_methods methods;
  methods.add("twice", shmio::rpc_sync_handler([](std::uint64_t, std::span<const std::byte> in) {
                bytes_t out(in.begin(), in.end());
                out.insert(out.end(), in.begin(), in.end());
                return out;
              }));
  rpc_buffer owner(io.get_executor(), shmio::create_only, name, methods, small_rings());
  rpc_buffer opener(io.get_executor(), shmio::open_only, name);  // serves nothing
  run_body(io, [&]() -> asio::awaitable<void> {
    {
      const auto reply =
          co_await opener.async_request("twice", asio::buffer(bytes("ab")), asio::use_awaitable);
      CHECK(reply == bytes("abab"));
    }
    auto [ec1, r1] = co_await opener.async_request(asio::buffer(bytes("x")), tuple_awaitable);
    CHECK(ec1 == errc::no_handler);
    auto [ec2, r2] =
        co_await owner.async_request("twice", asio::buffer(bytes("x")), tuple_awaitable);
    CHECK(ec2 == errc::no_such_method);
    owner.close();
    opener.close();
  });
}

TEST_CASE("rpc packets: unknown flags, or flags on other packets, are refused", "[rpc][methods]") {
  layout::packet_header h{};
  h.type = static_cast<std::uint8_t>(layout::packet_type::request);
  h.version = static_cast<std::uint8_t>(layout::rpc_version);
  h.packet_index = 1;
  h.packet_count = 1;
  h.total_size = 0;
  h.message_id = 1;
  h.generation = 1;
  auto parse = [](const layout::packet_header& header) {
    bytes_t node(sizeof header);
    std::memcpy(node.data(), &header, sizeof header);
    return detail::parse_packet(node, 1024).has_value();
  };
  CHECK(parse(h));
  h.flags = layout::packet_flag_method;
  CHECK(parse(h));
  h.flags = layout::packet_flag_stream | layout::packet_flag_method;
  CHECK(parse(h));
  h.flags = 4;
  CHECK_FALSE(parse(h));
  h.flags = layout::packet_flag_method;
  h.type = static_cast<std::uint8_t>(layout::packet_type::response);
  CHECK_FALSE(parse(h));
  std::string_view method;
  std::span<const std::byte> payload;
  const auto named = detail::encode_named("get", bytes("key"));
  REQUIRE(detail::split_named(named, method, payload));
  CHECK(method == "get");
  CHECK(bytes_t(payload.begin(), payload.end()) == bytes("key"));
  CHECK_FALSE(detail::split_named(bytes_t{}, method, payload));
  CHECK_FALSE(detail::split_named(bytes_t{std::byte{0}, std::byte{1}}, method, payload));
  CHECK_FALSE(detail::split_named(bytes_t{std::byte{5}, std::byte{1}}, method, payload));
}

TEST_CASE("rpc: {} is no handler, a lambda is one, and name and statistics outlive close",
          "[rpc][service]") {
  scoped_name name("svc"), channel("rpc");
  asio::io_context io;
  // A lambda of either shape is taken as it is, without naming a std::function type.
  rpc_server server(
      io.get_executor(), shmio::create_only, name,
      [](std::uint64_t, std::span<const std::byte> in) { return service::answer(in); });
  rpc_buffer silent(io.get_executor(), shmio::create_only, channel, {}, small_rings());
  rpc_buffer caller(io.get_executor(), shmio::open_only, channel, {});
  run_body(io, [&]() -> asio::awaitable<void> {
    auto [ec, reply] = co_await caller.async_request(asio::buffer(bytes("x")), tuple_awaitable);
    CHECK(ec == errc::no_handler);
    rpc_buffer client(io.get_executor());
    co_await client.async_connect(name.str(), asio::use_awaitable);
    const auto request = service::payload(20, 2);
    {
      const auto reply = co_await client.async_request(asio::buffer(request), asio::use_awaitable);
      CHECK(reply == service::answer(request));
    }
    const std::string connection = client.name();
    const auto before = client.statistics();
    client.close();
    CHECK(client.name() == connection);
    CHECK(client.statistics().responses_received == before.responses_received);
    CHECK(client.statistics().requests_sent == 1);
    const auto caller_before = caller.statistics();
    caller.close();
    CHECK(caller.name() == channel.str());
    // Known at once (the other end holds no serves lock): nothing was sent for it.
    CHECK(caller.statistics().requests_sent == caller_before.requests_sent);
    CHECK(caller.statistics().requests_sent == 0);
    silent.close();
    server.close();
    CHECK(server.name() == name.str());
    CHECK(server.statistics().accepted == 1);
  });
}
