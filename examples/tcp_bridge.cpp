// tcp_bridge — one io_context serving a TCP port and shmio rings at once.
//
//   tcp_bridge [PORT [NAME]]   listen on 127.0.0.1:PORT (0, the default: any free port), print
//                              "ready PORT", start the worker process, serve until SIGINT or
//                              SIGTERM
//   tcp_bridge worker NAME     the worker process (started by the bridge)
//
// Every line a TCP client sends is pushed into the ring NAME.in; a separate worker process
// reads it there, turns it to upper case and pushes it into NAME.out; the bridge reads NAME.out
// and writes each line back to the client it came from. The TCP accept, the socket reads and
// writes and the ring reads and writes are all operations of one io_context on one thread:
// a shmio ring is just another Asio I/O object in an existing event loop.
#include <poll.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <asio.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <shmio/shmio.hpp>
#include <string>

#include "args.hpp"

namespace {

using asio::ip::tcp;
// Completion as (error_code, result) tuples: errors are values here, not exceptions.
constexpr auto as_tuple = asio::experimental::as_tuple(asio::use_awaitable);
constexpr std::size_t max_line = 1000;  // characters, before the newline
// A message: the connection's id, then the line with its newline.
constexpr std::size_t node_size = sizeof(std::uint32_t) + max_line + 1;

// ---- the worker: blocking calls, in a process of its own ------------------------------------

int work(const std::string& name) {
  asio::io_context io;  // the rings need an executor; the worker never runs it
  // Rings already gone: the bridge was stopped before this process got to them.
  std::error_code ec;
  shmio::circular_buffer in(io.get_executor(), shmio::open_only, name + ".in", {}, ec);
  if (ec == shmio::errc::not_found) return 0;
  if (ec) throw shmio::error(ec, "open circular buffer", name + ".in");
  shmio::circular_buffer out(io.get_executor(), shmio::open_only, name + ".out", {}, ec);
  if (ec == shmio::errc::not_found) return 0;
  if (ec) throw shmio::error(ec, "open circular buffer", name + ".out");
  char buf[node_size];
  for (;;) {
    std::size_t n = in.read(asio::buffer(buf), std::chrono::milliseconds::max());
    if (n <= sizeof(std::uint32_t)) return 0;  // an empty line: the bridge is shutting down
    for (std::size_t i = sizeof(std::uint32_t); i < n; ++i)
      buf[i] = static_cast<char>(std::toupper(static_cast<unsigned char>(buf[i])));
    out.write(asio::buffer(buf, n), std::chrono::milliseconds::max());
  }
}

// ---- the bridge -------------------------------------------------------------------------------

class bridge {
 public:
  bridge(asio::io_context& io, unsigned short port, const std::string& name)
      : io_(io),
        acceptor_(io, {asio::ip::make_address("127.0.0.1"), port}),
        in_(io.get_executor(), shmio::create_only, name + ".in", 64, node_size),
        out_(io.get_executor(), shmio::create_only, name + ".out", 64, node_size) {}

  unsigned short port() const { return acceptor_.local_endpoint().port(); }

  void start() {
    asio::co_spawn(io_, accept(), asio::detached);
    asio::co_spawn(io_, answer(), asio::detached);
  }

  // Tells the worker to finish, then closes everything; run() returns when all is done. False
  // if the worker could not be told (its ring stayed full): it must then be stopped otherwise.
  bool stop() {
    std::uint32_t none = 0;
    std::error_code ec;
    const bool told =
        in_.write(asio::buffer(&none, sizeof none), std::chrono::seconds(1), ec) == sizeof none;
    acceptor_.close();
    for (auto& [id, socket] : clients_)
      socket->close();
    in_.close();
    out_.close();
    return told;
  }

 private:
  // Accepts clients and starts a reader for each.
  asio::awaitable<void> accept() {
    for (;;) {
      auto [ec, socket] = co_await acceptor_.async_accept(as_tuple);
      if (ec) co_return;
      const std::uint32_t id = ++last_id_;
      auto s = std::make_shared<tcp::socket>(std::move(socket));
      clients_[id] = s;
      asio::co_spawn(io_, read_lines(id, s), asio::detached);
    }
  }

  // TCP -> ring: each line, prefixed with the client's id, becomes one message in NAME.in.
  asio::awaitable<void> read_lines(std::uint32_t id, std::shared_ptr<tcp::socket> socket) {
    std::string pending;
    auto buffer = asio::dynamic_buffer(pending, max_line + 1);
    for (;;) {
      auto [ec, n] = co_await asio::async_read_until(*socket, buffer, '\n', as_tuple);
      if (ec) break;  // closed, or a line longer than max_line
      std::string message(sizeof id, '\0');
      std::memcpy(message.data(), &id, sizeof id);
      message.append(pending, 0, n);
      buffer.consume(n);
      auto [wec, written] = co_await in_.async_write(asio::buffer(message), as_tuple);
      if (wec) break;
    }
    clients_.erase(id);
  }

  // Ring -> TCP: each answer from NAME.out goes back to the client it names, if still there.
  // Answers are written one at a time, so a slow client slows the others: fine for a demo.
  asio::awaitable<void> answer() {
    char buf[node_size];
    for (;;) {
      auto [ec, n] = co_await out_.async_read(asio::buffer(buf), as_tuple);
      if (ec) co_return;  // closed
      if (n < sizeof(std::uint32_t)) continue;
      std::uint32_t id = 0;
      std::memcpy(&id, buf, sizeof id);
      auto it = clients_.find(id);
      if (it == clients_.end()) continue;  // that client left meanwhile
      auto socket = it->second;
      co_await asio::async_write(*socket, asio::buffer(buf + sizeof id, n - sizeof id), as_tuple);
    }
  }

  asio::io_context& io_;
  tcp::acceptor acceptor_;
  shmio::circular_buffer in_;
  shmio::circular_buffer out_;
  std::map<std::uint32_t, std::shared_ptr<tcp::socket>> clients_;
  std::uint32_t last_id_ = 0;
};

}  // namespace

int run_main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "worker") == 0) return work(argv[2]);
  if (argc > 3) {
    std::fprintf(stderr, "usage: tcp_bridge [PORT [NAME]]\n");
    return 2;
  }
  unsigned long port = 0;
  if (argc > 1 && !examples::parse_number(argv[1], 65535, port)) {
    std::fprintf(stderr, "tcp_bridge: PORT must be a number from 0 to 65535\n");
    return 2;
  }
  const std::string name = argc > 2 ? argv[2] : "tcp-bridge." + std::to_string(::getpid());

  asio::io_context io;
  bridge b(io, static_cast<unsigned short>(port), name);
  asio::signal_set signals(io, SIGINT, SIGTERM);
  // The bridge tells the worker when to finish. A SIGINT or SIGTERM sent to the whole process
  // group (Ctrl-C, `timeout`, a service manager) must not kill the worker first: it would die
  // holding the rings, and the bridge, no longer their last user, would leave their files
  // behind. So the worker ignores both; they stay blocked from before the fork until it does,
  // and in the bridge until its handler is there (a signal meanwhile waits, it is not lost).
  sigset_t stop_signals, old_mask;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  ::pthread_sigmask(SIG_BLOCK, &stop_signals, &old_mask);
  const pid_t parent = ::getpid();
  pid_t worker = ::fork();
  if (worker == 0) {
    // The worker dies with the bridge: it would wait for ever for lines nobody sends.
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != parent) ::_exit(1);
    std::signal(SIGINT, SIG_IGN);
    std::signal(SIGTERM, SIG_IGN);
    ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
    ::execl("/proc/self/exe", "tcp_bridge", "worker", name.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  if (worker < 0) {
    std::perror("tcp_bridge: fork");
    return 1;
  }
  b.start();
  // The worker's pidfd turns readable when it exits.
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, worker, 0));
  std::unique_ptr<asio::posix::stream_descriptor> worker_exit;
  signals.async_wait([&](std::error_code ec, int) {
    if (ec) return;
    if (worker_exit) worker_exit->cancel();
    // A worker stuck writing answers nobody reads cannot be told to finish: stop it.
    if (!b.stop()) ::kill(worker, SIGKILL);
  });
  // A worker that dies (killed, say) would leave clients waiting for answers that never come:
  // the bridge stops, and says so.
  if (pidfd >= 0) {
    worker_exit = std::make_unique<asio::posix::stream_descriptor>(io, ::dup(pidfd));
    worker_exit->async_wait(asio::posix::stream_descriptor::wait_read, [&](std::error_code ec) {
      if (ec) return;
      std::fprintf(stderr, "tcp_bridge: the worker exited; stopping\n");
      signals.cancel();
      b.stop();
    });
  }
  std::printf("ready %u\n", b.port());
  std::fflush(stdout);
  io.run();
  // A worker told to finish may still be stuck writing answers nobody reads: give it 2 s
  // (its pidfd turns readable when it exits).
  int status = 0;
  worker_exit.reset();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  bool exited = false;
  while (pidfd >= 0 && !exited) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{pidfd, POLLIN, 0};
    const int n = ::poll(&p, 1, static_cast<int>(left.count()));
    if (n < 0 && errno != EINTR) break;
    exited = n > 0;
  }
  if (pidfd < 0) {  // no pidfd here (an old kernel, a seccomp filter): look every 10 ms
    while (!exited && std::chrono::steady_clock::now() < deadline) {
      exited = ::waitpid(worker, &status, WNOHANG) == worker;
      if (!exited) ::usleep(10'000);
    }
  }
  if (!exited) ::kill(worker, SIGKILL);
  if (pidfd >= 0 || !exited) ::waitpid(worker, &status, 0);  // else reaped above
  if (pidfd >= 0) ::close(pidfd);
  std::printf("tcp_bridge: stopped; worker exit %d\n",
              WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}

int main(int argc, char** argv) {
  try {
    return run_main(argc, argv);
  } catch (const std::exception& e) {  // a name already taken, a port in use, ...
    std::fprintf(stderr, "tcp_bridge: %s\n", e.what());
    return 1;
  }
}
