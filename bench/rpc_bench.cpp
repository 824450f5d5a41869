// RPC benchmarks: shmio::rpc_buffer beside the floor (an echo over two bare spin rings) and what
// a user would use instead (request/response framed over asio::local::stream_protocol with
// co_await), in one binary so that one run gives every number.
//
// The serving side is a forked child: the rpc_buffer's owner (as a service would be), or the
// stream server; the measuring parent is the caller (the rpc_buffer's opener).
//
// BM_rpc_roundtrip/<family>/<placement>: one 64-byte request, its 64-byte echo; one iteration =
//     one call.
//       spin_ring          two spin rings (support.hpp), spinning on both sides: the floor
//       asio_local_stream  a socket pair, a 4-byte length then the bytes, each way, co_await
//       shmio_rpc          co_await opener.async_request(), the owner's handler (a coroutine)
//                          echoes
//       shmio_rpc_plain    the same with a plain function as the owner's handler, which the
//                          channel runs inline as the request arrives
//       shmio_rpc_plain_tuple  the same, awaited with as_tuple(use_awaitable): the completion
//                          as Asio delivers it, where use_awaitable goes through the coroutine
//                          that throws shmio::rpc_error (one more frame per call)
//       shmio_rpc_in_place the call made in place (the request sent from the caller's buffer,
//                          the reply read into one of its own) to an rpc_in_place_handler that
//                          writes its echo into the channel's rpc_reply
// BM_rpc_pipelined/<family>: 1 KiB requests (1 KiB echo) from `in_flight` concurrent callers in
//     the parent's one thread; items_per_second = completed calls per second. The stream family
//     uses one connection per caller (a connection pool, as a user would without a protocol
//     with request ids). BM_rpc_pipelined/shmio_rpc_plain/nodes:16: the same over rings of 16
//     nodes, fewer than the calls in flight, so senders keep waiting for room.
// BM_rpc_bulk/<family>: sequential 512 KiB requests with an empty reply; bytes_per_second. shmio
//     cuts each request into node-sized packets (16 KiB nodes by default: 33 packets) and puts it
//     together on arrival.
//
// Counters: median_ns (round trips; see support.hpp); allocs_per_iter / allocs_per_call: heap
// allocations in the calling process per call; server_allocs_per_call (pipelined shmio): in the
// serving process, the echo's own (its reply vector, for the coroutine and plain handlers)
// included. The pipelined counts leave out the first pipelined_warmup calls: what the lanes'
// coroutines and the first calls in flight set up once (frames, tables grown to 32 calls) is
// not a cost per call.
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/io_context.hpp>
#include <asio/local/stream_protocol.hpp>
#include <asio/read.hpp>
#include <asio/redirect_error.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>
#include <cstring>
#include <memory>
#include <shmio/shmio.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "stream_frames.hpp"
#include "support.hpp"

namespace {

using namespace std::chrono_literals;
using namespace shmio_bench;
using stream_socket = asio::local::stream_protocol::socket;

constexpr std::size_t small_message = 64;
constexpr std::size_t pipelined_message = 1024;
constexpr std::size_t bulk_message = 512 * 1024;
constexpr int in_flight = 32;
constexpr std::uint64_t pipelined_calls = 200'000;
constexpr std::uint64_t pipelined_warmup = 2'048;  // calls not counted (see above)

enum class family {
  spin_ring,
  asio_local_stream,
  shmio_rpc,
  shmio_rpc_plain,
  shmio_rpc_plain_tuple,
  shmio_rpc_in_place
};
enum class handler_kind { coroutine, plain, in_place };

handler_kind handler_of(family f) {
  return f == family::shmio_rpc            ? handler_kind::coroutine
         : f == family::shmio_rpc_in_place ? handler_kind::in_place
                                           : handler_kind::plain;
}
enum class reply_kind { echo, empty };

const char* name_of(family f) {
  switch (f) {
    case family::spin_ring:
      return "spin_ring";
    case family::asio_local_stream:
      return "asio_local_stream";
    case family::shmio_rpc:
      return "shmio_rpc";
    case family::shmio_rpc_plain:
      return "shmio_rpc_plain";
    case family::shmio_rpc_plain_tuple:
      return "shmio_rpc_plain_tuple";
    case family::shmio_rpc_in_place:
      return "shmio_rpc_in_place";
  }
  return "?";
}

/// Ends a child's io_context once the parent sets ctl().stop (checked every 10 ms).
asio::awaitable<void> stop_watch(control_block& c, asio::io_context& io) {
  asio::steady_timer t(io);
  while (!c.stop.load(std::memory_order_acquire)) {
    t.expires_after(10ms);
    co_await t.async_wait(asio::use_awaitable);
  }
  io.stop();
}

// ---- the stream protocol: u32 length, then the bytes -----------------------------------------

asio::awaitable<void> stream_serve(std::shared_ptr<stream_socket> sock, reply_kind kind) {
  co_await serve_frames(*sock, kind == reply_kind::echo);
}

/// Makes `n` socket pairs; the child serves one end of each, the parent gets the others.
std::vector<int> fork_stream_server(session& s, int n, reply_kind kind) {
  std::vector<int> child_ends, parent_ends;
  for (int i = 0; i < n; ++i) {
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) throw_errno("socketpair");
    s.own_fd(fds[0]);
    child_ends.push_back(fds[0]);
    parent_ends.push_back(fds[1]);
  }
  s.fork_child([&](const std::function<void()>& ready) {
    for (int fd : parent_ends)
      ::close(fd);
    asio::io_context io;
    for (int fd : child_ends) {
      auto sock = std::make_shared<stream_socket>(io, asio::local::stream_protocol(), fd);
      asio::co_spawn(io, stream_serve(sock, kind), asio::detached);
    }
    ready();
    io.run();
  });
  return parent_ends;
}

// ---- shmio: the child owns the channel and serves -------------------------------------------

std::vector<std::byte> reply_to(std::span<const std::byte> in, reply_kind kind) {
  if (kind == reply_kind::empty) return {};
  return {in.begin(), in.end()};
}

/// The owner's handler: a coroutine, a plain function, or one writing its reply in place.
void fork_rpc_server(session& s, const std::string& name, reply_kind kind, handler_kind handler,
                     const shmio::rpc_options& options = {}) {
  control_block& c = s.ctl();
  s.fork_child([&](const std::function<void()>& ready) {
    asio::io_context io;
    // Each handler leaves the server's allocation count in c.count for the parent to read.
    shmio::rpc_handler coroutine =
        [kind, &c](std::uint64_t,
                   std::span<const std::byte> in) -> asio::awaitable<std::vector<std::byte>> {
      c.count.store(allocations(), std::memory_order_relaxed);
      co_return reply_to(in, kind);
    };
    shmio::rpc_sync_handler function = [kind, &c](std::uint64_t, std::span<const std::byte> in) {
      c.count.store(allocations(), std::memory_order_relaxed);
      return reply_to(in, kind);
    };
    shmio::rpc_in_place_handler in_place = [kind, &c](std::uint64_t, std::span<const std::byte> in,
                                                      shmio::rpc_reply& reply) {
      c.count.store(allocations(), std::memory_order_relaxed);
      if (kind == reply_kind::echo) reply.append(in);
    };
    shmio::rpc_methods methods = handler == handler_kind::coroutine ? shmio::rpc_methods(coroutine)
                                 : handler == handler_kind::plain   ? shmio::rpc_methods(function)
                                                                    : shmio::rpc_methods(in_place);
    shmio::rpc_buffer owner(io.get_executor(), shmio::create_only, name, std::move(methods),
                            options);
    asio::co_spawn(io, stop_watch(c, io), asio::detached);
    c.count.store(allocations(), std::memory_order_relaxed);  // the baseline, before any call
    ready();
    io.run();
  });
}

// ---- round trip ------------------------------------------------------------------------------

void roundtrip_spin(benchmark::State& state, session& s) {
  spin_ring ping(8, small_message), pong(8, small_message);
  control_block& c = s.ctl();
  s.fork_child([&](const std::function<void()>& ready) {
    ready();
    std::array<std::byte, small_message> buf{};
    for (;;) {
      std::size_t n;
      while ((n = ping.try_read(buf.data())) == 0) {
      }
      if (c.stop.load(std::memory_order_acquire)) return;
      while (!pong.try_write(buf.data(), n)) {
      }
    }
  });
  s.start_children();
  std::array<std::byte, small_message> out{}, in{};
  warm_up_then_measure(state, [&] {
    while (!ping.try_write(out.data(), out.size())) {
    }
    while (pong.try_read(in.data()) == 0)
      if (g_child_exited) throw_child_gone();
  });
  s.stop_children([&] { ping.try_write(out.data(), out.size()); });
}

/// Times sequential calls of `size` bytes: `call(request, reply)` is one call.
template <class Call>
asio::awaitable<void> measure_calls(benchmark::State& state, std::size_t size, Call call) {
  std::vector<std::byte> request(size, std::byte{7});
  std::vector<std::byte> reply;
  const warmup w;
  for (long i = 0; w.more(i); ++i)
    co_await call(request, reply);
  batch_timer bt(state);
  bt.start();
  for (auto _ : state) {
    co_await call(request, reply);
    bt.tick();
  }
  bt.report(state);
}

void sequential_stream(benchmark::State& state, session& s, std::size_t size, reply_kind kind) {
  const std::vector<int> fds = fork_stream_server(s, 1, kind);
  asio::io_context io;
  stream_socket sock(io, asio::local::stream_protocol(), fds[0]);
  s.start_children();
  run_parent_coroutine(s, io,
                       measure_calls(state, size,
                                     [&](const std::vector<std::byte>& rq,
                                         std::vector<std::byte>& rp) -> asio::awaitable<void> {
                                       co_await stream_call(sock, rq, rp);
                                     }));
  s.stop_children([&] {
    std::error_code ignored;
    sock.shutdown(stream_socket::shutdown_both, ignored);
  });
}

void sequential_rpc(benchmark::State& state, session& s, std::size_t size, reply_kind kind,
                    handler_kind handler, bool tuple = false) {
  const std::string name = s.segment_name("rpc");
  fork_rpc_server(s, name, kind, handler);
  s.start_children();
  asio::io_context io;
  {
    shmio::rpc_buffer opener(io.get_executor(), shmio::open_only, name);
    run_parent_coroutine(
        s, io,
        measure_calls(state, size,
                      [&](const std::vector<std::byte>& rq,
                          std::vector<std::byte>& rp) -> asio::awaitable<void> {
                        if (handler == handler_kind::in_place) {
                          rp.resize(size);  // once: the reply goes into it in place
                          co_await opener.async_request(asio::buffer(rq), asio::buffer(rp),
                                                        asio::use_awaitable);
                        } else if (tuple) {
                          std::error_code ec;
                          std::tie(ec, rp) = co_await opener.async_request(
                              asio::buffer(rq), asio::experimental::as_tuple(asio::use_awaitable));
                        } else {
                          rp = co_await opener.async_request(asio::buffer(rq), asio::use_awaitable);
                        }
                      }));
  }
  s.stop_children({});
}

void bm_roundtrip(benchmark::State& state, family f, placement p) {
  guarded(state, [&] {
    session s(p);
    s.pin_parent();
    switch (f) {
      case family::spin_ring:
        return roundtrip_spin(state, s);
      case family::asio_local_stream:
        return sequential_stream(state, s, small_message, reply_kind::echo);
      case family::shmio_rpc:
      case family::shmio_rpc_plain:
      case family::shmio_rpc_plain_tuple:
      case family::shmio_rpc_in_place:
        return sequential_rpc(state, s, small_message, reply_kind::echo, handler_of(f),
                              f == family::shmio_rpc_plain_tuple);
    }
  });
  state.SetItemsProcessed(state.iterations());
}

void bm_bulk(benchmark::State& state, family f) {
  guarded(state, [&] {
    session s(placement::split);
    s.pin_parent();
    if (f == family::asio_local_stream)
      sequential_stream(state, s, bulk_message, reply_kind::empty);
    else
      sequential_rpc(state, s, bulk_message, reply_kind::empty, handler_of(f));
  });
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(bulk_message));
}

// ---- pipelined -------------------------------------------------------------------------------

/// Runs `in_flight` caller coroutines until `pipelined_calls` calls completed; reports the time
/// through SetIterationTime and the allocations per call: the caller's, and with
/// `server_counts` the server's too (which its handler leaves in ctl().count).
template <class Call>
void measure_pipelined(benchmark::State& state, session& s, asio::io_context& io, Call call,
                       bool server_counts) {
  for (auto _ : state) {
    std::uint64_t started = 0;
    std::uint64_t allocations_before = 0, server_before = 0;
    const auto start = clock_type::now();
    auto caller = [&](int lane) -> asio::awaitable<void> {
      std::vector<std::byte> request(pipelined_message, std::byte{7});
      std::vector<std::byte> reply;
      while (started < pipelined_calls) {
        if (started++ == pipelined_warmup) {  // the calls counted are the ones started after
          allocations_before = allocations();
          // relaxed: as below, for the replies that came so far.
          server_before = s.ctl().count.load(std::memory_order_relaxed);
        }
        co_await call(lane, request, reply);
      }
    };
    run_parent_coroutine(s, io, all_lanes(io.get_executor(), in_flight, caller));
    state.SetIterationTime(std::chrono::duration<double>(clock_type::now() - start).count());
    constexpr auto counted = static_cast<double>(pipelined_calls - pipelined_warmup);
    state.counters["allocs_per_call"] =
        benchmark::Counter(static_cast<double>(allocations() - allocations_before) / counted);
    // The server's count as its last handler left it: relaxed is enough, as every reply (and so
    // the handler's store before it) has reached us through the ring's acquire.
    if (server_counts)
      state.counters["server_allocs_per_call"] = benchmark::Counter(
          static_cast<double>(s.ctl().count.load(std::memory_order_relaxed) - server_before) /
          counted);
  }
}

void bm_pipelined(benchmark::State& state, family f, const shmio::rpc_options& options = {}) {
  guarded(state, [&] {
    session s(placement::split);
    s.pin_parent();
    asio::io_context io;
    if (f == family::asio_local_stream) {
      const std::vector<int> fds = fork_stream_server(s, in_flight, reply_kind::echo);
      std::vector<std::unique_ptr<stream_socket>> socks;
      for (int fd : fds)
        socks.push_back(std::make_unique<stream_socket>(io, asio::local::stream_protocol(), fd));
      s.start_children();
      measure_pipelined(
          state, s, io,
          [&](int lane, const std::vector<std::byte>& rq,
              std::vector<std::byte>& rp) -> asio::awaitable<void> {
            co_await stream_call(*socks[static_cast<std::size_t>(lane)], rq, rp);
          },
          false);
      s.stop_children([&] {
        for (auto& sock : socks) {
          std::error_code ignored;
          sock->shutdown(stream_socket::shutdown_both, ignored);
        }
      });
      return;
    }
    const std::string name = s.segment_name("rpc");
    fork_rpc_server(s, name, reply_kind::echo, handler_of(f), options);
    s.start_children();
    {
      shmio::rpc_buffer opener(io.get_executor(), shmio::open_only, name);
      measure_pipelined(
          state, s, io,
          [&](int, const std::vector<std::byte>& rq,
              std::vector<std::byte>& rp) -> asio::awaitable<void> {
            if (f == family::shmio_rpc_in_place) {
              rp.resize(rq.size());  // once per caller: the reply goes into it in place
              co_await opener.async_request(asio::buffer(rq), asio::buffer(rp),
                                            asio::use_awaitable);
            } else {
              rp = co_await opener.async_request(asio::buffer(rq), asio::use_awaitable);
            }
          },
          true);
    }
    s.stop_children({});
  });
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(pipelined_calls));
  state.SetBytesProcessed(state.iterations() *
                          static_cast<std::int64_t>(pipelined_calls * pipelined_message));
}

void register_all() {
  const std::pair<placement, const char*> placements[] = {{placement::split, "split"},
                                                          {placement::same, "same"}};
  for (family f :
       {family::spin_ring, family::asio_local_stream, family::shmio_rpc, family::shmio_rpc_plain,
        family::shmio_rpc_plain_tuple, family::shmio_rpc_in_place})
    for (const auto& [p, pname] : placements) {
      if ((f == family::spin_ring || f == family::shmio_rpc_plain_tuple ||
           f == family::shmio_rpc_in_place) &&
          p == placement::same)
        continue;  // the spin ring measures time slices there
      const std::string name = std::string("BM_rpc_roundtrip/") + name_of(f) + "/" + pname;
      auto* b = benchmark::RegisterBenchmark(
          name.c_str(), [f = f, p = p](benchmark::State& st) { bm_roundtrip(st, f, p); });
      b->UseRealTime()->Unit(benchmark::kNanosecond);
      if (g_fixed_round_trips > 0) b->Iterations(g_fixed_round_trips);
    }
  for (family f : {family::asio_local_stream, family::shmio_rpc, family::shmio_rpc_plain,
                   family::shmio_rpc_in_place}) {
    const std::string pipelined = std::string("BM_rpc_pipelined/") + name_of(f);
    benchmark::RegisterBenchmark(pipelined.c_str(),
                                 [f](benchmark::State& st) { bm_pipelined(st, f); })
        ->UseManualTime()
        ->Iterations(1)
        ->Unit(benchmark::kMillisecond);
    const std::string bulk = std::string("BM_rpc_bulk/") + name_of(f);
    benchmark::RegisterBenchmark(bulk.c_str(), [f](benchmark::State& st) { bm_bulk(st, f); })
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  }
  benchmark::RegisterBenchmark("BM_rpc_pipelined/shmio_rpc_plain/nodes:16",
                               [](benchmark::State& st) {
                                 shmio::rpc_options few;
                                 few.node_count = 16;
                                 bm_pipelined(st, family::shmio_rpc_plain, few);
                               })
      ->UseManualTime()
      ->Iterations(1)
      ->Unit(benchmark::kMillisecond);
}

}  // namespace

int main(int argc, char** argv) {
  return bench_main(argc, argv, register_all);
}
