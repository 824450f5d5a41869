// A two-process RPC demo: this process owns the channel and serves it; it starts a second
// process that joins the channel and calls it.
//
//   echo                 serve, and start "echo client NAME" as the other process
//   echo client NAME     call the server: the seed's add example, echoes of several sizes
//                        (large ones travel as many packets), then a latency loop
#include <sys/wait.h>
#include <unistd.h>

#include <asio.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <shmio/shmio.hpp>
#include <string>
#include <thread>
#include <vector>

namespace {

// The server's handler: a request of two bytes gets their sum (as a 32-bit int, like the seed's
// example), anything else is echoed back.
std::vector<std::byte> serve(std::uint64_t, std::span<const std::byte> request) {
  if (request.size() == 2) {
    std::int32_t sum = std::to_integer<int>(request[0]) + std::to_integer<int>(request[1]);
    std::vector<std::byte> reply(sizeof sum);
    std::memcpy(reply.data(), &sum, sizeof sum);
    return reply;
  }
  return {request.begin(), request.end()};
}

asio::awaitable<int> call_server(shmio::rpc_buffer& client) {
  const std::uint8_t add[] = {123, 10};
  auto sum = co_await client.async_request(asio::buffer(add), asio::use_awaitable);
  std::int32_t v = 0;
  std::memcpy(&v, sum.data(), sizeof v);
  std::printf("client: 123 + 10 = %d\n", v);

  for (std::size_t size : {0u, 1u, 1000u, 65'504u, 65'505u, 1u << 20, 16u << 20}) {
    std::vector<std::byte> payload(size);
    std::iota(reinterpret_cast<unsigned char*>(payload.data()),
              reinterpret_cast<unsigned char*>(payload.data()) + size, 0);
    auto start = std::chrono::steady_clock::now();
    auto reply = co_await client.async_request(asio::buffer(payload), asio::use_awaitable);
    auto us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start);
    std::printf("client: echo of %8zu bytes %s in %9.1f us\n", size,
                reply == payload ? "ok" : "WRONG", us.count());
    if (reply != payload) co_return 1;
  }

  const int rounds = 20000;
  std::byte small[64]{};
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < rounds; ++i)
    co_await client.async_request(asio::buffer(small), asio::use_awaitable);
  auto us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start);
  std::printf("client: %d round trips of 64 bytes, %.2f us each\n", rounds, us.count() / rounds);
  co_return 0;
}

int run_client(const std::string& name) {
  asio::io_context io;
  shmio::rpc_buffer client(io.get_executor(), shmio::open_only, name);
  int rc = 1;
  asio::co_spawn(io, call_server(client), [&](std::exception_ptr e, int r) {
    rc = r;
    if (e) try {
        std::rethrow_exception(e);
      } catch (const std::exception& x) {
        std::printf("client: %s\n", x.what());
      }
    client.close();
  });
  io.run();
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "client") return run_client(argv[2]);

  const std::string name = "echo-demo." + std::to_string(::getpid());
  asio::io_context io;
  shmio::rpc_buffer server(io.get_executor(), shmio::create_only, name,
                           shmio::rpc_sync_handler(serve));
  std::printf("server: channel '%s' is open; starting the client process\n", name.c_str());
  std::fflush(stdout);

  pid_t child = ::fork();
  if (child == 0) {
    ::execl("/proc/self/exe", argv[0], "client", name.c_str(), static_cast<char*>(nullptr));
    std::perror("exec");
    ::_exit(127);
  }
  // Serve until the client has exited; waitpid blocks, so it runs on a thread of its own.
  int status = 0;
  shmio::rpc_statistics s;
  std::thread reaper([&] {
    ::waitpid(child, &status, 0);
    asio::post(io, [&] {
      s = server.statistics();
      server.close();
    });
  });
  io.run();
  reaper.join();
  std::printf("server: served %llu requests (%llu packets in, %llu out); client exit %d\n",
              static_cast<unsigned long long>(s.requests_received),
              static_cast<unsigned long long>(s.packets_received),
              static_cast<unsigned long long>(s.packets_sent),
              WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
