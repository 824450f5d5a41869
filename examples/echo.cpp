// echo — one RPC service, several client processes at once: an rpc_acceptor's accept loop.
//
//   echo serve NAME          serve NAME until SIGINT or SIGTERM: every request is echoed back
//   echo call NAME TEXT...   connect to NAME, send each TEXT, print each reply on a line
//   echo                     both at once: serve a name of its own, start three "echo call"
//                            processes, and stop when they have exited (non-zero if one failed)
//
// The accept loop is a coroutine that co_awaits async_accept, as a TCP server's does. Each
// accepted rpc_buffer is the service's end of one client's channel, and serves the handler for
// as long as it lives: a coroutine of its own keeps it until async_wait_closed says the client
// closed or died. Clients never contend with each other (each has its own two rings), and one
// that goes takes only its own channel with it. rpc_server (see kvd.cpp) is this loop, ready
// made; the acceptor is for a service that wants its hands on each connection.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <asio.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <set>
#include <shmio/shmio.hpp>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;

constexpr auto as_tuple = asio::experimental::as_tuple(asio::use_awaitable);

std::string text_of(std::span<const std::byte> payload) {
  return {reinterpret_cast<const char*>(payload.data()), payload.size()};
}

// ---- the service ------------------------------------------------------------------------

class echo_service {
 public:
  echo_service(asio::io_context& io, const std::string& name, std::error_code& ec)
      : io_(io), acceptor_(io.get_executor(), shmio::create_only, name, {}, ec) {}

  // Accepts until close(); false if it had to stop before that.
  asio::awaitable<bool> accept_loop() {
    for (;;) {
      auto [ec, connection] = co_await acceptor_.async_accept(methods_, as_tuple);
      if (ec == asio::error::operation_aborted) co_return true;  // closed
      if (ec) {  // the connect ring is damaged: no client can reach us any more
        std::fprintf(stderr, "echo: cannot accept: %s\n", ec.message().c_str());
        co_return false;
      }
      asio::co_spawn(io_, hold(std::move(connection)), asio::detached);
    }
  }

  // Stops accepting and closes every connection: the accept loop ends, and each holder's wait
  // completes.
  void close() {
    acceptor_.close();
    // Each holder's wait completes later, never inside close(): live_ stays as it is meanwhile.
    for (shmio::rpc_buffer* c : live_)
      c->close();
  }

  int clients() const { return accepted_; }
  std::uint64_t requests() const { return requests_; }

 private:
  // Keeps one connection, and so its serving, until its client goes or close() closes it.
  asio::awaitable<void> hold(shmio::rpc_buffer connection) {
    const int id = ++accepted_;
    live_.insert(&connection);
    std::printf("echo: client %d connected (%zu now)\n", id, live_.size());
    auto [ec] = co_await connection.async_wait_closed(as_tuple);
    live_.erase(&connection);
    if (!ec)  // the client went (operation_aborted: close() closed it)
      std::printf("echo: client %d left after %llu requests (%zu now)\n", id,
                  static_cast<unsigned long long>(connection.statistics().requests_received),
                  live_.size());
  }

  asio::io_context& io_;
  shmio::rpc_acceptor acceptor_;
  // What every connection serves: one handler, as the unnamed method. A plain handler (one that
  // returns its reply) runs inline as its request is read: the fast path, for one that never
  // waits. Every connection's runs on the io_context's one thread, so the counter needs no lock.
  shmio::rpc_methods methods_ = shmio::rpc_methods().add(
      "", shmio::rpc_sync_handler([this](std::uint64_t, std::span<const std::byte> in) {
        ++requests_;
        return std::vector<std::byte>(in.begin(), in.end());
      }));
  std::set<shmio::rpc_buffer*> live_;  // for close(); each is owned by its hold()
  int accepted_ = 0;
  std::uint64_t requests_ = 0;
};

// Starts this program with `args` (argv[0] first) as another process; its pid, or -1.
pid_t start_self(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  if (int e = ::posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), environ)) {
    std::fprintf(stderr, "echo: cannot start a client: %s\n", std::strerror(e));
    return -1;
  }
  return pid;
}

// Serves `name` until SIGINT or SIGTERM; or, given `demo_clients`, starts that many
// "echo call" processes and serves until they have all exited.
int serve(const std::string& name, const char* self, int demo_clients) {
  asio::io_context io;
  std::error_code ec;
  echo_service service(io, name, ec);
  if (ec == shmio::errc::already_exists) {
    std::fprintf(stderr, "echo: a service is already running on '%s'\n", name.c_str());
    return 1;
  }
  if (ec) {
    std::fprintf(stderr, "echo: cannot serve '%s': %s\n", name.c_str(), ec.message().c_str());
    return 1;
  }
  // SIGCHLD is waited for before any child starts: none can exit unseen.
  asio::signal_set signals(io, SIGINT, SIGTERM);
  if (demo_clients > 0) signals.add(SIGCHLD);
  int running = 0, failures = 0;
  std::function<void(std::error_code, int)> on_signal = [&](std::error_code e, int sig) {
    if (e) return;
    if (sig == SIGCHLD) {
      int status = 0;
      while (running > 0 && ::waitpid(-1, &status, WNOHANG) > 0) {
        --running;
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failures;
      }
      if (running > 0) return signals.async_wait(on_signal);
    }
    service.close();
  };
  signals.async_wait(on_signal);
  // However the loop ends (closed, or failed), the rest goes with it: the connections, and the
  // signal wait, the last work on the io_context; then run() returns.
  asio::co_spawn(io, service.accept_loop(), [&](std::exception_ptr e, bool ok) {
    if (e || !ok) ++failures;
    service.close();
    signals.cancel();
  });
  // Line by line: a log read as it is written, through a pipe too; and the ready line is out
  // before any client started here writes to the same stdout.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::printf("echo: serving '%s' (pid %d); ready\n", name.c_str(), ::getpid());
  for (int i = 1; i <= demo_clients; ++i) {
    const std::string n = std::to_string(i);
    const pid_t pid =
        start_self({self, "call", name, "hello from client " + n, "goodbye from client " + n});
    if (pid < 0)
      ++failures;
    else
      ++running;
  }
  if (demo_clients > 0 && running == 0) service.close();  // none started: none to wait for
  io.run();
  std::printf("echo: stopped; served %d clients, %llu requests\n", service.clients(),
              static_cast<unsigned long long>(service.requests()));
  return failures ? 1 : 0;
}

// ---- a client ---------------------------------------------------------------------------

asio::awaitable<int> call(std::string name, std::vector<std::string> texts) {
  shmio::rpc_buffer client(co_await asio::this_coro::executor);
  auto [ec] = co_await client.async_connect(name, 2s, as_tuple);
  if (ec == shmio::errc::not_found) {
    std::fprintf(stderr, "echo: no service is running on '%s'\n", name.c_str());
    co_return 1;
  }
  if (ec) {
    std::fprintf(stderr, "echo: cannot connect to '%s': %s\n", name.c_str(), ec.message().c_str());
    co_return 1;
  }
  for (const std::string& text : texts) {
    // A TEXT over a packet (16 KiB by default) travels as several, put back together on arrival.
    auto [e, reply] = co_await client.async_request(asio::buffer(text), as_tuple);
    if (e) {
      std::fprintf(stderr, "echo: %s\n", e.message().c_str());
      co_return 1;
    }
    std::printf("%s\n", text_of(reply).c_str());
  }
  co_return 0;  // `client` closes as it goes: the service sees it leave
}

int run_call(const std::string& name, std::vector<std::string> texts) {
  asio::io_context io;
  int rc = 1;
  asio::co_spawn(io, call(name, std::move(texts)), [&](std::exception_ptr e, int r) {
    if (!e) rc = r;
    try {
      if (e) std::rethrow_exception(e);
    } catch (const std::exception& x) {
      std::fprintf(stderr, "echo: %s\n", x.what());
    }
  });
  io.run();
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() == 2 && args[0] == "serve") return serve(args[1], argv[0], 0);
  if (args.size() >= 2 && args[0] == "call")
    return run_call(args[1], {args.begin() + 2, args.end()});
  if (args.empty()) return serve("echo-demo." + std::to_string(::getpid()), argv[0], 3);
  std::fprintf(stderr, "usage: echo serve NAME | echo call NAME TEXT... | echo\n");
  return 2;
}
