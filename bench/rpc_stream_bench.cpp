// Streaming replies: items per second from a forked server process to the measuring parent,
// beside the floor and what a user would use instead, in one binary so that one run gives every
// number. One iteration = `items` items of `item_size` bytes, read in order.
//
// BM_stream/<family>
//   spin_ring          the child writes into a bare spin ring (support.hpp), the parent spins
//                      reading it: the floor (no framing, no waiting, no flow control)
//   asio_local_stream  the child co_awaits async_write of a 4-byte length and the bytes per item
//                      on a socket pair; the parent co_awaits async_read of each
//   shmio_stream       an rpc_buffer stream: the child's stream handler co_awaits
//                      writer.async_write per item; the parent co_awaits rpc_stream::async_read
//                      (window: rpc_options::stream_window, 32 by default)
//   shmio_stream/window:256  the same with a window of 256 items
//   shmio_stream_fast/window:N  the fast forms: the handler co_awaits writer.co_write per item
//                      (sent at once while the window has room), the parent co_awaits
//                      rpc_stream::async_read_batch(N) (every item that has come, up to N)
//
// Counters: items_per_second; allocs_per_item: heap allocations in the parent per item read.
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/local/stream_protocol.hpp>
#include <asio/read.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>
#include <cstring>
#include <shmio/shmio.hpp>
#include <string>
#include <vector>

#include "support.hpp"

namespace {

using namespace std::chrono_literals;
using namespace shmio_bench;
using stream_socket = asio::local::stream_protocol::socket;

constexpr std::size_t item_size = 64;
constexpr std::uint64_t items = 20'000;

// Item `i`: its index in the first 8 bytes, so that the reader checks the order.
std::array<std::byte, item_size> make_item(std::uint64_t i) {
  std::array<std::byte, item_size> out{};
  std::memcpy(out.data(), &i, sizeof i);
  return out;
}

std::uint64_t index_of(const std::byte* item) {
  std::uint64_t i = 0;
  std::memcpy(&i, item, sizeof i);
  return i;
}

void report(benchmark::State& state, std::uint64_t allocations_before) {
  const auto read = static_cast<double>(state.iterations()) * static_cast<double>(items);
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(items));
  state.counters["allocs_per_item"] =
      read > 0 ? static_cast<double>(allocations() - allocations_before) / read : 0;
}

[[noreturn]] void out_of_order() {
  throw std::runtime_error("an item came out of order");
}

// ---- the floor -------------------------------------------------------------------------------

void stream_spin(benchmark::State& state, session& s) {
  spin_ring ring(64, item_size);
  control_block& c = s.ctl();
  s.fork_child([&](const std::function<void()>& ready) {
    ready();
    for (std::uint64_t i = 0; !c.stop.load(std::memory_order_relaxed); ++i) {
      const auto item = make_item(i);
      while (!ring.try_write(item.data(), item.size()))
        if (c.stop.load(std::memory_order_relaxed)) return;
    }
  });
  s.start_children();
  std::array<std::byte, item_size> buf{};
  std::uint64_t next = 0;
  const std::uint64_t before = allocations();
  for (auto _ : state)
    for (std::uint64_t k = 0; k < items; ++k) {
      while (ring.try_read(buf.data()) == 0) {
        if (g_child_exited) throw_child_gone();
      }
      if (index_of(buf.data()) != next++) out_of_order();
    }
  report(state, before);
  s.stop_children({});
}

// ---- asio::local::stream_protocol ----------------------------------------------------------

void stream_socket_pair(benchmark::State& state, session& s) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) throw_errno("socketpair");
  s.own_fd(fds[1]);
  s.fork_child([&](const std::function<void()>& ready) {
    ::close(fds[1]);
    asio::io_context io;
    stream_socket sock(io, asio::local::stream_protocol(), fds[0]);
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          for (std::uint64_t i = 0;; ++i) {
            const std::uint32_t length = item_size;
            const auto item = make_item(i);
            const std::array<asio::const_buffer, 2> frame{asio::buffer(&length, sizeof length),
                                                          asio::buffer(item)};
            co_await asio::async_write(sock, frame, asio::use_awaitable);  // throws once closed
          }
        },
        asio::detached);
    ready();
    io.run();
  });
  ::close(fds[0]);
  s.start_children();
  asio::io_context io;
  stream_socket sock(io, asio::local::stream_protocol(), ::dup(fds[1]));
  std::uint64_t before = 0;
  run_parent_coroutine(s, io, [&]() -> asio::awaitable<void> {
    std::uint64_t next = 0;
    std::uint32_t length = 0;
    std::vector<std::byte> item(item_size);
    before = allocations();
    for (auto _ : state)
      for (std::uint64_t k = 0; k < items; ++k) {
        co_await asio::async_read(sock, asio::buffer(&length, sizeof length), asio::use_awaitable);
        if (length != item_size) out_of_order();
        co_await asio::async_read(sock, asio::buffer(item), asio::use_awaitable);
        if (index_of(item.data()) != next++) out_of_order();
      }
  }());
  report(state, before);
  s.stop_children([&] {
    std::error_code ignored;
    sock.shutdown(stream_socket::shutdown_both, ignored);
  });
}

// ---- shmio streams -------------------------------------------------------------------------

void stream_shmio(benchmark::State& state, session& s, std::uint32_t window, bool fast) {
  const std::string name = s.segment_name("stream");
  control_block& c = s.ctl();
  s.fork_child([&](const std::function<void()>& ready) {
    asio::io_context io;
    shmio::rpc_stream_handler endless = [fast](
                                            std::uint64_t, std::span<const std::byte>,
                                            shmio::rpc_stream_writer out) -> asio::awaitable<void> {
      for (std::uint64_t i = 0;; ++i) {
        const auto item = make_item(i);
        if (fast)
          co_await out.co_write(asio::buffer(item));  // throws when closed
        else
          co_await out.async_write(asio::buffer(item), asio::use_awaitable);
      }
    };
    shmio::rpc_buffer owner(io, shmio::create_only, name, endless);
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          asio::steady_timer t(io);
          while (!c.stop.load(std::memory_order_acquire)) {
            t.expires_after(10ms);
            co_await t.async_wait(asio::use_awaitable);
          }
          io.stop();
        },
        asio::detached);
    ready();
    io.run();
  });
  s.start_children();
  asio::io_context io;
  std::uint64_t before = 0;
  {
    shmio::rpc_buffer opener(io, shmio::open_only, name);
    shmio::rpc_options limits;
    limits.stream_window = window;
    opener.set_limits(limits);
    run_parent_coroutine(s, io, [&]() -> asio::awaitable<void> {
      shmio::rpc_stream items_in = co_await opener.async_request_stream({}, asio::use_awaitable);
      std::uint64_t next = 0;
      before = allocations();
      for (auto _ : state) {
        if (fast) {
          for (std::uint64_t k = 0; k < items;) {
            auto got = co_await items_in.async_read_batch(
                std::min<std::uint64_t>(items - k, window), asio::use_awaitable);
            for (const auto& item : got)
              if (item.size() != item_size || index_of(item.data()) != next++) out_of_order();
            k += got.size();
          }
          continue;
        }
        for (std::uint64_t k = 0; k < items; ++k) {
          auto item = co_await items_in.async_read(asio::use_awaitable);
          if (item.size() != item_size || index_of(item.data()) != next++) out_of_order();
        }
      }
    }());
  }
  report(state, before);
  s.stop_children({});
}

void register_all() {
  benchmark::RegisterBenchmark("BM_stream/spin_ring", [](benchmark::State& st) {
    guarded(st, [&] {
      session s(placement::split);
      s.pin_parent();
      stream_spin(st, s);
    });
  })->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("BM_stream/asio_local_stream", [](benchmark::State& st) {
    guarded(st, [&] {
      session s(placement::split);
      s.pin_parent();
      stream_socket_pair(st, s);
    });
  })->Unit(benchmark::kMillisecond);
  for (const bool fast : {false, true})
    for (std::uint32_t window : {32u, 256u}) {
      const std::string family = fast ? "BM_stream/shmio_stream_fast" : "BM_stream/shmio_stream";
      const std::string name =
          window == 32 && !fast ? family : family + "/window:" + std::to_string(window);
      benchmark::RegisterBenchmark(name.c_str(), [window, fast](benchmark::State& st) {
        guarded(st, [&] {
          session s(placement::split);
          s.pin_parent();
          stream_shmio(st, s, window, fast);
        });
      })->Unit(benchmark::kMillisecond);
    }
}

}  // namespace

int main(int argc, char** argv) {
  return bench_main(argc, argv, register_all);
}
