// broadcast — one publisher, several subscriber processes: every subscriber sees every message.
//
//   broadcast [SUBSCRIBERS [MESSAGES [NAME]]]   the publisher (defaults: 3 subscribers, 2000)
//   broadcast subscriber NAME                   one subscriber (started by the publisher)
//
// The publisher creates the reliable broadcast buffer NAME, starts the subscribers, waits until
// they have all joined (each says so on the ring NAME.joined once it has), then publishes MESSAGES
// price ticks and an "end" message with async_write: a reliable writer waits (without blocking its
// thread) for the slowest subscriber. Each subscriber reads in a coroutine with async_read, checks
// that the ticks arrive complete and in order, and prints "subscriber PID: N ticks in order, sum
// S". The publisher prints the sum every subscriber must have reported, and exits 0 if all did.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <asio.hpp>
#include <cstdint>
#include <cstdio>
#include <shmio/shmio.hpp>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;

struct tick {
  std::uint64_t seq;    // 1, 2, 3, ...; 0 ends the stream
  std::uint64_t price;  // in cents
};

std::uint64_t price_of(std::uint64_t seq) {
  return 10'000 + (seq * 7919) % 500;  // a made-up but checkable price
}

// ---- a subscriber ---------------------------------------------------------------------------

asio::awaitable<int> subscribe(shmio::broadcast_buffer& prices) {
  std::uint64_t expected = 1, sum = 0;
  for (;;) {
    tick t{};
    const std::size_t n =
        co_await prices.async_read(asio::buffer(&t, sizeof t), asio::use_awaitable);
    if (n != sizeof t) co_return 1;
    if (t.seq == 0) break;
    if (t.seq != expected || t.price != price_of(t.seq)) {
      std::printf("subscriber %d: expected tick %llu, got %llu\n", ::getpid(),
                  static_cast<unsigned long long>(expected),
                  static_cast<unsigned long long>(t.seq));
      co_return 1;
    }
    ++expected;
    sum += t.price;
  }
  std::printf("subscriber %d: %llu ticks in order, sum %llu\n", ::getpid(),
              static_cast<unsigned long long>(expected - 1), static_cast<unsigned long long>(sum));
  co_return 0;
}

int run_subscriber(const std::string& name) {
  asio::io_context io;
  // Opening as a subscriber joins: from now on, this process sees every message.
  shmio::broadcast_buffer prices(io.get_executor(), shmio::open_only, name,
                                 shmio::broadcast_role::subscriber);
  const pid_t self = ::getpid();
  shmio::circular_buffer joined(io.get_executor(), shmio::open_only, name + ".joined");
  if (joined.write(asio::buffer(&self, sizeof self), 10s) == 0) return 1;
  int rc = 1;
  asio::co_spawn(io, subscribe(prices), [&](std::exception_ptr e, int r) { rc = e ? 1 : r; });
  io.run();
  return rc;
}

// ---- the publisher --------------------------------------------------------------------------

asio::awaitable<void> publish(shmio::broadcast_buffer& prices, std::uint64_t count) {
  for (std::uint64_t seq = 1; seq <= count + 1; ++seq) {
    const tick t = seq <= count ? tick{seq, price_of(seq)} : tick{0, 0};
    co_await prices.async_write(asio::buffer(&t, sizeof t), asio::use_awaitable);
  }
}

int run_publisher(int subscribers, std::uint64_t count, const std::string& name) {
  asio::io_context io;
  shmio::broadcast_options options;
  options.mode = shmio::broadcast_mode::reliable;
  options.capacity = 64;
  options.message_size = sizeof(tick);
  shmio::broadcast_buffer prices(io.get_executor(), shmio::create_only, name,
                                 shmio::broadcast_role::publisher, options);
  // A node per subscriber (a ring has at least 2): each writes its pid there once it has joined.
  shmio::circular_buffer joined(io.get_executor(), shmio::create_only, name + ".joined",
                                std::max<std::size_t>(2, static_cast<std::size_t>(subscribers)),
                                sizeof(pid_t));

  std::vector<pid_t> children;
  const pid_t parent = ::getpid();
  for (int i = 0; i < subscribers; ++i) {
    const pid_t pid = ::fork();
    if (pid < 0) {
      std::perror("broadcast: fork");
      for (pid_t child : children)
        ::kill(child, SIGKILL);
      return 1;
    }
    if (pid == 0) {
      // A subscriber dies with the publisher: it would wait for ever for ticks nobody sends.
      if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != parent) ::_exit(1);
      ::execl("/proc/self/exe", "broadcast", "subscriber", name.c_str(), nullptr);
      ::_exit(127);
    }
    children.push_back(pid);
  }
  auto kill_all = [&] {
    for (pid_t pid : children)
      ::kill(pid, SIGKILL);
    for (pid_t pid : children)
      ::waitpid(pid, nullptr, 0);
  };
  // Messages published before a subscriber joins are not for it: wait for all of them.
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  for (int i = 0; i < subscribers; ++i) {
    pid_t who = 0;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left <= 0ms || joined.read(asio::buffer(&who, sizeof who), left) == 0) {
      std::fprintf(stderr, "broadcast: the subscribers did not join\n");
      kill_all();
      return 1;
    }
  }
  std::uint64_t sum = 0;
  for (std::uint64_t seq = 1; seq <= count; ++seq)
    sum += price_of(seq);
  std::printf("publisher: %d subscribers joined; publishing %llu ticks, sum %llu\n", subscribers,
              static_cast<unsigned long long>(count), static_cast<unsigned long long>(sum));
  std::fflush(stdout);

  bool published = false;
  asio::co_spawn(io, publish(prices, count), [&](std::exception_ptr e) {
    if (!e) {
      published = true;
      return;
    }
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      std::fprintf(stderr, "broadcast: publishing failed: %s\n", x.what());
    }
  });
  io.run();
  if (!published) {  // the subscribers would wait for the end for ever
    kill_all();
    return 1;
  }

  int failed = 0;
  for (pid_t pid : children) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  std::printf("publisher: %d of %d subscribers saw every tick\n", subscribers - failed,
              subscribers);
  return failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc == 3 && std::string(argv[1]) == "subscriber") return run_subscriber(argv[2]);
    const int subscribers = argc > 1 ? std::atoi(argv[1]) : 3;
    const long long count = argc > 2 ? std::atoll(argv[2]) : 2000;
    const std::string name = argc > 3 ? argv[3] : "broadcast-demo." + std::to_string(::getpid());
    if (subscribers < 1 || count < 1 || argc > 4) {
      std::fprintf(stderr, "usage: broadcast [SUBSCRIBERS [MESSAGES [NAME]]]\n");
      return 2;
    }
    return run_publisher(subscribers, static_cast<std::uint64_t>(count), name);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "broadcast: %s\n", e.what());
    return 1;
  }
}
