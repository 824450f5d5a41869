// Makes segments for tests/inspector_test.py to look at with the `shmio` tool.
//
//   inspector_fixture hold NAME     creates a ring (8 x 64 B) with 3 messages, an event and an
//                                   rpc channel named NAME.ring / NAME.event / NAME.rpc; a
//                                   shared_array<uint32_t> of 10 (two shares held) NAME.array,
//                                   a buffer_read_write of 64 bytes (locked) NAME.buffer, and a
//                                   reliable broadcast (8 x 32 B) with 3 messages and one
//                                   subscriber that read 1 of them, NAME.broadcast, and an rpc
//                                   service (channels of 4 x 256 B) with two clients of its
//                                   own connected, NAME.service; prints "ready", and keeps them
//                                   until its stdin closes
//   inspector_fixture reader NAME   opens the ring NAME (empty) and waits to read; prints "ready"
//                                   first; exits when a message comes
//   inspector_fixture abandon NAME  creates the ring NAME with 2 messages and exits without
//                                   closing it, as if killed: the segment stays behind, stale
//   inspector_fixture abandon-locked NAME     the same with a buffer_read_write of 64 bytes
//                                             whose lock it holds
//   inspector_fixture abandon-broadcast NAME  the same with a broadcast (4 x 32 B, 2 entries),
//                                             a subscriber, and 2 messages
//   inspector_fixture abandon-service NAME    the same with an rpc service: its server gone
#include <unistd.h>

#include <asio/io_context.hpp>
#include <chrono>
#include <cstdio>
#include <shmio/shmio.hpp>
#include <span>
#include <string>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  const std::string cmd = argv[1], name = argv[2];
  asio::io_context io;
  auto ex = io.get_executor();
  const auto forever = std::chrono::milliseconds::max();
  if (cmd == "hold") {
    shmio::circular_buffer ring(ex, shmio::create_only, name + ".ring", 8, 64);
    for (int i = 0; i < 3; ++i)
      ring.write(asio::buffer("message", 7), forever);
    shmio::named_event event(ex, shmio::create_only, name + ".event",
                             shmio::event_mode::manual_reset, true);
    shmio::rpc_buffer rpc(ex, shmio::create_only, name + ".rpc", shmio::rpc_handler{},
                          shmio::rpc_options{.node_count = 4, .node_size = 256});
    shmio::shared_array<std::uint32_t> array(ex, shmio::create_only, name + ".array", 10);
    shmio::shared_array<std::uint32_t> array2(ex, shmio::open_only, name + ".array");
    array.lock_shared();
    array2.lock_shared();
    shmio::buffer_read_write buffer(ex, shmio::create_only, name + ".buffer", 64);
    buffer.lock();
    shmio::broadcast_buffer publisher(ex, shmio::create_only, name + ".broadcast",
                                      shmio::broadcast_role::publisher,
                                      {.capacity = 8, .message_size = 32, .max_subscribers = 4});
    shmio::broadcast_buffer subscriber(ex, shmio::open_only, name + ".broadcast",
                                       shmio::broadcast_role::subscriber);
    for (int i = 0; i < 3; ++i)
      publisher.write(asio::buffer("news", 4), forever);
    char news[32];
    subscriber.read(asio::buffer(news), forever);
    // The service accepts on a thread of its own; the blocking connects need nothing run here.
    asio::io_context server_io;
    const shmio::rpc_options channels{.node_count = 4, .node_size = 256};
    shmio::rpc_server server(
        server_io.get_executor(), shmio::create_only, name + ".service",
        shmio::rpc_sync_handler([](std::uint64_t, std::span<const std::byte> in) {
          return std::vector<std::byte>(in.begin(), in.end());
        }),
        channels);
    std::thread server_thread([&] { server_io.run(); });
    shmio::rpc_buffer client1(ex), client2(ex);
    client1.connect(name + ".service");
    client2.connect(name + ".service");
    io.poll();  // what the connects leave to the clients' strands: they let go of the service
    // A connect returns once the server's end holds the channel, a moment before the server
    // counts it as accepted.
    for (int ms = 0; server.connection_count() != 2; ++ms) {
      if (ms == 10'000) ::_exit(1);  // no "ready": the test reports it
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::printf("ready\n");
    std::fflush(stdout);
    char c;
    while (::read(0, &c, 1) > 0) {
    }
    client1.close();
    client2.close();
    server.close();
    server_thread.join();
    return 0;
  }
  if (cmd == "reader") {
    shmio::circular_buffer ring(ex, shmio::open_only, name);
    std::printf("ready\n");
    std::fflush(stdout);
    char buf[64];
    return ring.read(asio::buffer(buf), forever) > 0 ? 0 : 1;
  }
  if (cmd == "abandon") {
    shmio::circular_buffer ring(ex, shmio::create_only, name, 4, 32);
    for (int i = 0; i < 2; ++i)
      ring.write(asio::buffer("left", 4), forever);
    std::fflush(stdout);
    ::_exit(0);  // no destructors: the file stays, and the exit drops its locks
  }
  if (cmd == "abandon-locked") {
    shmio::buffer_read_write buffer(ex, shmio::create_only, name, 64);
    buffer.lock();
    ::_exit(0);
  }
  if (cmd == "abandon-broadcast") {
    shmio::broadcast_buffer publisher(ex, shmio::create_only, name,
                                      shmio::broadcast_role::publisher,
                                      {.capacity = 4, .message_size = 32, .max_subscribers = 2});
    shmio::broadcast_buffer subscriber(ex, shmio::open_only, name,
                                       shmio::broadcast_role::subscriber);
    for (int i = 0; i < 2; ++i)
      publisher.write(asio::buffer("left", 4), forever);
    ::_exit(0);
  }
  if (cmd == "abandon-service") {
    shmio::rpc_acceptor acceptor(ex, shmio::create_only, name);
    ::_exit(0);
  }
  return 2;
}
