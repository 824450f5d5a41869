// Peer commands for tests/rpc_test.cpp: the other process of the rpc_buffer tests.
//
//   rpc-serve NAME [CALL...]
//     Joins the channel NAME as its opener and serves it:
//       two bytes {a, b}  -> their sum as a 4-byte int (the seed's example)
//       "hold"            -> never answers (waits an hour; cancellation ends the wait)
//       "fail"            -> throws std::runtime_error("peer handler failed")
//       "quit"            -> answers "bye", then closes this end (the command then exits)
//       anything else     -> echoed back
//     First it calls the owner with "ready" (the owner learns that the opener is there), then
//     it calls the owner once with each CALL argument, without waiting for the answers.
//
//   rpc-serve-plain NAME [CALL...]
//     The same with a plain function as the handler (the channel runs it inline); "hold" is
//     echoed, as a plain function cannot wait.
//
// Exit codes: 0 closed after "quit" (or after the owner went away during "ready"), 1 the
// "ready" call failed, 2 bad arguments, 97 an exception (e.g. the open failed).
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "peer.hpp"
#include "shmio/rpc_buffer.hpp"

namespace {

using namespace std::chrono_literals;

constexpr int exit_ready_failed = 1;
constexpr int exit_usage = 2;

constexpr auto tuple_awaitable = asio::experimental::as_tuple(asio::use_awaitable);

std::vector<std::byte> bytes(std::string_view s) {
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  return {p, p + s.size()};
}

std::string_view text(std::span<const std::byte> b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

std::vector<std::byte> sum_of(std::span<const std::byte> in) {
  const std::int32_t sum = std::to_integer<int>(in[0]) + std::to_integer<int>(in[1]);
  std::vector<std::byte> reply(sizeof sum);
  std::memcpy(reply.data(), &sum, sizeof sum);
  return reply;
}

int serve_channel(const std::vector<std::string>& args, bool plain) {
  if (args.empty()) return exit_usage;
  asio::io_context io;
  std::optional<shmio::rpc_buffer> rpc;
  auto function = [&](std::uint64_t, std::span<const std::byte> in) -> std::vector<std::byte> {
    if (in.size() == 2) return sum_of(in);
    const std::string_view what = text(in);
    if (what == "fail") throw std::runtime_error("peer handler failed");
    if (what == "quit") {
      asio::post(io, [&] { rpc->close(); });
      return bytes("bye");
    }
    return {in.begin(), in.end()};
  };
  auto coroutine = [&](std::uint64_t,
                       std::span<const std::byte> in) -> asio::awaitable<std::vector<std::byte>> {
    if (in.size() == 2) co_return sum_of(in);
    const std::string_view what = text(in);
    if (what == "hold") {
      asio::steady_timer forever(co_await asio::this_coro::executor, 1h);
      co_await forever.async_wait(asio::use_awaitable);  // throws when cancelled
      co_return bytes("held");
    }
    if (what == "fail") throw std::runtime_error("peer handler failed");
    if (what == "quit") {
      // The reply is written as this handler returns; the close comes after it.
      asio::post(io, [&] { rpc->close(); });
      co_return bytes("bye");
    }
    co_return std::vector<std::byte>(in.begin(), in.end());
  };
  if (plain)
    rpc.emplace(io.get_executor(), shmio::open_only, args[0], shmio::rpc_sync_handler(function));
  else
    rpc.emplace(io.get_executor(), shmio::open_only, args[0], shmio::rpc_handler(coroutine));

  int rc = 0;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        auto [ec, reply] =
            co_await rpc->async_request(asio::buffer(std::string_view("ready")), tuple_awaitable);
        if (ec) {
          rc = ec == shmio::errc::peer_gone ? 0 : exit_ready_failed;
          rpc->close();
          co_return;
        }
        for (std::size_t i = 1; i < args.size(); ++i)
          rpc->async_request(asio::buffer(args[i]), [](std::error_code, std::vector<std::byte>) {});
      },
      asio::detached);
  io.run();
  return rc;
}

}  // namespace

SHMIO_PEER_COMMAND("rpc-serve", args) {
  return serve_channel(args, false);
}

SHMIO_PEER_COMMAND("rpc-serve-plain", args) {
  return serve_channel(args, true);
}
