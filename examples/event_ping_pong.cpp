// Two processes play ping-pong with two named events.
//
//   event_ping_pong [rounds]          starts the "pong" process itself, then plays "ping"
//   event_ping_pong pong NAME         the other side (started by the first)
//
// The ping side is a coroutine on an io_context: it sets "ping" and co_awaits "pong".
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <asio.hpp>
#include <chrono>
#include <cstdio>
#include <exception>
#include <functional>
#include <shmio/shmio.hpp>
#include <string>

#include "args.hpp"

using namespace std::chrono_literals;

namespace {

int play_pong(const std::string& name) {
  asio::io_context io;
  shmio::named_event ping(io.get_executor(), shmio::open_only, name + ".ping",
                          shmio::event_mode::auto_reset);
  shmio::named_event pong(io.get_executor(), shmio::open_only, name + ".pong",
                          shmio::event_mode::auto_reset);
  // Blocking waits are fine here: this process does nothing else.
  while (ping.wait(5s))
    pong.set();
  return 0;  // the ping side went quiet: done
}

asio::awaitable<void> play_ping(shmio::named_event& ping, shmio::named_event& pong, int rounds) {
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < rounds; ++i) {
    ping.set();
    co_await pong.async_wait(asio::use_awaitable);
    if (i < 3 || i == rounds - 1) std::printf("ping %d -> pong\n", i + 1);
  }
  auto us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start);
  std::printf("%d round trips between two processes, %.2f us each\n", rounds, us.count() / rounds);
}

}  // namespace

int run_main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "pong") return play_pong(argv[2]);

  unsigned long rounds = 10000;
  if (argc > 2 ||
      (argc == 2 && (!examples::parse_number(argv[1], 100'000'000, rounds) || rounds == 0))) {
    std::fprintf(stderr, "usage: event_ping_pong [ROUNDS (1 to 100000000)]\n");
    return 2;
  }
  const std::string name = "event-ping-pong." + std::to_string(::getpid());
  asio::io_context io;
  shmio::named_event ping(io.get_executor(), shmio::create_only, name + ".ping",
                          shmio::event_mode::auto_reset);
  shmio::named_event pong(io.get_executor(), shmio::create_only, name + ".pong",
                          shmio::event_mode::auto_reset);

  // SIGCHLD is waited for before the child starts: it cannot exit unseen.
  asio::signal_set child_exit(io, SIGCHLD);
  const pid_t parent = ::getpid();
  pid_t child = ::fork();
  if (child < 0) {
    std::perror("fork");
    return 1;
  }
  if (child == 0) {
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != parent) ::_exit(1);
    ::execl("/proc/self/exe", argv[0], "pong", name.c_str(), static_cast<char*>(nullptr));
    std::perror("exec");
    ::_exit(127);
  }
  std::printf("pong is process %d\n", static_cast<int>(child));
  // A pong that died would leave the ping waiting for ever.
  bool pong_died = false;
  bool game_over = false;
  std::function<void(std::error_code, int)> on_child = [&](std::error_code ec, int) {
    if (ec || game_over) return;
    if (::waitpid(child, nullptr, WNOHANG) == child) {
      pong_died = true;
      io.stop();
      return;
    }
    child_exit.async_wait(on_child);
  };
  child_exit.async_wait(on_child);
  std::exception_ptr failure;
  asio::co_spawn(io, play_ping(ping, pong, static_cast<int>(rounds)), [&](std::exception_ptr e) {
    failure = e;
    game_over = true;
    child_exit.cancel();
  });
  io.run();
  if (pong_died) {
    std::fprintf(stderr, "event_ping_pong: the pong process died\n");
    return 1;
  }
  if (failure) {
    ::kill(child, SIGTERM);
    ::waitpid(child, nullptr, 0);
    try {
      std::rethrow_exception(failure);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "event_ping_pong: %s\n", e.what());
    }
    return 1;
  }
  ::kill(child, SIGTERM);
  ::waitpid(child, nullptr, 0);
  return 0;
}

int main(int argc, char** argv) {
  try {
    return run_main(argc, argv);
  } catch (const std::exception& e) {  // a name already taken, a port in use, ...
    std::fprintf(stderr, "event_ping_pong: %s\n", e.what());
    return 1;
  }
}
