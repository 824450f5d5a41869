// Makes segments for tests/inspector_test.py to look at with the `shmio` tool.
//
//   inspector_fixture hold NAME     creates a ring (8 x 64 B) with 3 messages, an event and an
//                                   rpc channel named NAME.ring / NAME.event / NAME.rpc, prints
//                                   "ready", and keeps them until its stdin closes
//   inspector_fixture reader NAME   opens the ring NAME (empty) and waits to read; prints "ready"
//                                   first; exits when a message comes
//   inspector_fixture abandon NAME  creates the ring NAME with 2 messages and exits without
//                                   closing it, as if killed: the segment stays behind, stale
#include <unistd.h>

#include <asio/io_context.hpp>
#include <cstdio>
#include <shmio/shmio.hpp>
#include <string>

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
    std::printf("ready\n");
    std::fflush(stdout);
    char c;
    while (::read(0, &c, 1) > 0) {
    }
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
  return 2;
}
