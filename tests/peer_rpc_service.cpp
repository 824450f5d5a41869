// Peer commands for tests/rpc_service_test.cpp: clients and a server of an rpc service.
//
//   rpc-service-client NAME CALLS SEED [GATE_FD]
//     Connects to NAME (blocking connect), then, if GATE_FD is given, reads it until EOF (the
//     test holds every client there until all are connected at once). Then makes CALLS calls
//     with payload(size, SEED * 1000 + i) of sizes that include multi-packet ones, checks each
//     reply, closes and exits.
//   rpc-service-client-in-place NAME CALLS SEED
//     The same without a gate, each call made in place to the method "reverse" (the caller's
//     bytes sent from where they are, the reply read into its buffer).
//   rpc-service-hold NAME
//     Connects and calls "hold", which the service never answers: the test kills it meanwhile.
//   rpc-service-server NAME [HOLD_FD]
//     Serves NAME with an rpc_server (tests/rpc_service_support.hpp's handler) until killed.
//     With HOLD_FD, writes the byte 'h' to it as each "hold" call reaches the handler.
//
// Exit codes: 0 done, 1 connect failed, 2 bad arguments, 3 a wrong or failed reply,
// 97 an exception.
#include <unistd.h>

#include <algorithm>
#include <asio/io_context.hpp>
#include <asio/use_future.hpp>
#include <span>
#include <string>
#include <string_view>
#include <thread>

#include "peer.hpp"
#include "rpc_service_support.hpp"
#include "shmio/rpc_buffer.hpp"
#include "shmio/rpc_server.hpp"

namespace {

namespace service = shmio::test::service;

constexpr int exit_connect_failed = 1;
constexpr int exit_usage = 2;
constexpr int exit_wrong_reply = 3;

// Sizes of the calls, round robin: empty, small, and over one packet of 1 KiB nodes.
constexpr std::size_t sizes[] = {0, 1, 100, 1000, 3000};

}  // namespace

// Both client commands: connect, wait at the gate if there is one, then CALLS checked calls,
// each made by `call(client, request)` (true if its reply was the service's answer).
template <class Call>
int run_client(const shmio::test::peer::args& args, bool gated, Call call) {
  if (args.size() < 3) return exit_usage;
  const int calls = std::stoi(args[1]);
  const std::uint64_t seed = std::stoull(args[2]);
  asio::io_context io;
  shmio::rpc_buffer client(io.get_executor());
  std::error_code ec;
  client.connect(args[0], shmio::rpc_buffer::default_connect_timeout, ec);
  if (ec) return exit_connect_failed;
  if (gated && args.size() > 3) {
    const int gate = std::stoi(args[3]);
    char c;
    while (::read(gate, &c, 1) > 0) {
    }
  }
  std::thread runner([&] {
    auto work = asio::make_work_guard(io);
    io.run();
  });
  int rc = 0;
  for (int i = 0; i < calls && rc == 0; ++i) {
    const auto request = service::payload(sizes[i % std::size(sizes)], seed * 1000 + i);
    try {
      if (!call(client, request)) rc = exit_wrong_reply;
    } catch (...) {
      rc = exit_wrong_reply;
    }
  }
  client.close();
  io.stop();
  runner.join();
  return rc;
}

SHMIO_PEER_COMMAND("rpc-service-client", args) {
  return run_client(args, true, [](shmio::rpc_buffer& client, const std::vector<std::byte>& rq) {
    return client.async_request(asio::buffer(rq), asio::use_future).get() == service::answer(rq);
  });
}

SHMIO_PEER_COMMAND("rpc-service-client-in-place", args) {
  std::vector<std::byte> reply(4096);
  return run_client(args, false, [&](shmio::rpc_buffer& client, const std::vector<std::byte>& rq) {
    const std::size_t n =
        client.async_request("reverse", asio::buffer(rq), asio::buffer(reply), asio::use_future)
            .get();
    const auto expected = service::answer(rq);
    return n == expected.size() && std::equal(expected.begin(), expected.end(), reply.begin());
  });
}

SHMIO_PEER_COMMAND("rpc-service-hold", args) {
  if (args.empty()) return exit_usage;
  asio::io_context io;
  shmio::rpc_buffer client(io.get_executor());
  std::error_code ec;
  client.connect(args[0], shmio::rpc_buffer::default_connect_timeout, ec);
  if (ec) return exit_connect_failed;
  client.async_request(asio::buffer(service::hold), [](std::error_code, std::vector<std::byte>) {});
  io.run();
  return 0;
}

SHMIO_PEER_COMMAND("rpc-service-server", args) {
  if (args.empty()) return exit_usage;
  asio::io_context io;
  service::hold_counts counts;
  shmio::rpc_methods methods = service::methods(counts);
  if (args.size() > 1) {
    const int hold_fd = std::stoi(args[1]);
    methods.add("", shmio::rpc_handler([inner = service::handler(counts), hold_fd](
                                           std::uint64_t id, std::span<const std::byte> in) {
                  if (std::string_view(reinterpret_cast<const char*>(in.data()), in.size()) ==
                      service::hold) {
                    const char c = 'h';
                    if (::write(hold_fd, &c, 1) != 1) {
                      // the test waits for the byte in vain, and fails
                    }
                  }
                  return inner(id, in);
                }));
  }
  shmio::rpc_server server(io.get_executor(), shmio::create_only, args[0], std::move(methods));
  io.run();
  return 0;
}
