// Peer commands for tests/broadcast_test.cpp: the other processes of the broadcast tests.
//
// Messages are the text "<tag><N>" (N a decimal sequence number; the tag "m" unless given).
// Exit codes: 0 success, 1 a blocking call timed out, 2 bad arguments, 3 a message was not the
// one expected, 4 another error, 97 an exception.
#include <unistd.h>

#include <asio/io_context.hpp>
#include <chrono>
#include <cstdio>
#include <string>
#include <system_error>

#include "peer.hpp"
#include "shmio/broadcast_buffer.hpp"

namespace {

using namespace std::chrono_literals;
using shmio::broadcast_buffer;
using shmio::broadcast_role;

constexpr int exit_timed_out = 1;
constexpr int exit_usage = 2;
constexpr int exit_wrong_message = 3;
constexpr int exit_error = 4;
constexpr auto wait_bound = std::chrono::milliseconds(10'000);

// Reads `count` messages and checks they are "m<from>", "m<from+1>", ... in order, with
// blocking copies ("sync"), in-place reads ("in-place") or async reads ("async").
int subscribe(const shmio::test::peer::args& a) {
  if (a.size() != 4) return exit_usage;
  const unsigned long from = std::stoul(a[1]), count = std::stoul(a[2]);
  const std::string& how = a[3];
  asio::io_context io;
  broadcast_buffer sub(io.get_executor(), shmio::open_only, a[0], broadcast_role::subscriber);
  std::string got;
  char buf[256];
  for (unsigned long i = from; i < from + count; ++i) {
    std::error_code ec;
    std::size_t n = 0;
    if (how == "async") {
      bool done = false;
      sub.async_read(asio::buffer(buf), [&](std::error_code e, std::size_t size) {
        ec = e;
        n = size;
        done = true;
      });
      io.restart();
      io.run_for(wait_bound);
      if (!done) return exit_timed_out;
      got.assign(buf, n);
    } else if (how == "in-place") {
      n = sub.read_in_place(
          [&](std::span<const std::byte> m) {
            got.assign(reinterpret_cast<const char*>(m.data()), m.size());
          },
          wait_bound, ec);
    } else {
      n = sub.read(asio::buffer(buf), wait_bound, ec);
      got.assign(buf, ec ? 0 : n);
    }
    if (ec == shmio::errc::timed_out) return exit_timed_out;
    if (ec) {
      std::fprintf(stderr, "subscriber: %s\n", ec.message().c_str());
      return exit_error;
    }
    if (got != "m" + std::to_string(i)) {
      std::fprintf(stderr, "subscriber: expected m%lu, got %s\n", i, got.c_str());
      return exit_wrong_message;
    }
  }
  return 0;
}

// Publishes "<tag><from>" .. "<tag><from+count-1>".
int publish(const shmio::test::peer::args& a) {
  if (a.size() != 3 && a.size() != 4) return exit_usage;
  const unsigned long from = std::stoul(a[1]), count = std::stoul(a[2]);
  const std::string tag = a.size() == 4 ? a[3] : "m";
  asio::io_context io;
  broadcast_buffer pub(io.get_executor(), shmio::open_only, a[0], broadcast_role::publisher);
  for (unsigned long i = from; i < from + count; ++i) {
    const std::string m = tag + std::to_string(i);
    std::error_code ec;
    pub.write(asio::buffer(m), wait_bound, ec);
    if (ec == shmio::errc::timed_out) return exit_timed_out;
    if (ec) return exit_error;
  }
  return 0;
}

}  // namespace

SHMIO_PEER_COMMAND("broadcast-subscribe", a) {
  return subscribe(a);
}

SHMIO_PEER_COMMAND("broadcast-publish", a) {
  return publish(a);
}

// Joins as a subscriber and never reads: the killed subscriber of the eviction tests (the test
// sees it join through subscriber_count()). Ends only when killed.
SHMIO_PEER_COMMAND("broadcast-hold", a) {
  if (a.size() != 1) return exit_usage;
  asio::io_context io;
  broadcast_buffer sub(io.get_executor(), shmio::open_only, a[0], broadcast_role::subscriber);
  for (;;)
    ::pause();
}
