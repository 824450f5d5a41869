// ticker — streaming replies: one call, answered by a stream of items.
//
//   ticker serve NAME                    serve NAME until SIGINT or SIGTERM
//   ticker watch NAME SYMBOL COUNT [MS]  ask for COUNT ticks of SYMBOL, one every MS ms (10 by
//                                        default), print each as it comes; COUNT 0: for ever
//   ticker watch NAME SYMBOL 0 MS STOP   the same, but stop after STOP ticks: closing the stream
//                                        cancels the service's handler for it
//   ticker                               both: serve a name of its own, start two watchers and
//                                        one that stops early, and stop when they have exited
//
// The service's "ticks" method is a stream handler: a coroutine that writes ticks with
// co_await writer.async_write(...) and returns when it has written them all (the watcher then
// reads eof). A watcher that reads slowly slows the handler: a write completes only once the
// watcher has room for it (rpc_options::stream_window items), so nothing piles up anywhere.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <asio.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <shmio/shmio.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "args.hpp"

namespace {

using namespace std::chrono_literals;

constexpr auto as_tuple = asio::experimental::as_tuple(asio::use_awaitable);

std::string text_of(std::span<const std::byte> payload) {
  return {reinterpret_cast<const char*>(payload.data()), payload.size()};
}

// ---- the service ------------------------------------------------------------------------

// What a watcher asks for: "SYMBOL COUNT MS".
struct tick_request {
  std::string symbol;
  unsigned long count = 0;
  unsigned long interval_ms = 10;
};

bool parse(std::string_view text, tick_request& r) {
  std::istringstream in{std::string(text)};
  std::string count, interval;
  return static_cast<bool>(in >> r.symbol >> count >> interval) &&
         examples::parse_number(count, 1'000'000'000, r.count) &&
         examples::parse_number(interval, 60'000, r.interval_ms);
}

// The "ticks" method: COUNT ticks of SYMBOL (0: until the watcher stops), one every MS ms.
asio::awaitable<void> ticks(std::uint64_t, std::span<const std::byte> payload,
                            shmio::rpc_stream_writer out) {
  tick_request r;
  if (!parse(text_of(payload), r)) throw std::invalid_argument("expected 'SYMBOL COUNT MS'");
  asio::steady_timer next(co_await asio::this_coro::executor);
  unsigned long sent = 0;
  try {
    while (r.count == 0 || sent < r.count) {
      // A made-up price that moves, the same for every watcher of a symbol.
      const double price = 100.0 + static_cast<double>((sent * 7919 + r.symbol.size()) % 200) / 10;
      char line[96];
      const int n =
          std::snprintf(line, sizeof line, "%s #%lu %.2f", r.symbol.c_str(), sent + 1, price);
      if (n < 0) throw std::runtime_error("cannot format a tick");
      // snprintf returns the length the whole text would have had: a long symbol is cut.
      const std::size_t length = std::min(static_cast<std::size_t>(n), sizeof line - 1);
      co_await out.async_write(asio::buffer(line, length), asio::use_awaitable);
      ++sent;
      next.expires_after(std::chrono::milliseconds(r.interval_ms));
      co_await next.async_wait(asio::use_awaitable);
    }
  } catch (const std::system_error& e) {
    // The watcher closed its stream or went: this coroutine is cancelled.
    std::printf(
        "ticker: %s stopped after %lu ticks (%s)\n", r.symbol.c_str(), sent,
        e.code() == asio::error::operation_aborted ? "cancelled" : e.code().message().c_str());
    throw;
  }
  std::printf("ticker: %s done after %lu ticks\n", r.symbol.c_str(), sent);
}

// Starts this program with `args` (argv[0] first) as another process; its pid, or -1.
pid_t start_self(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  if (int e = ::posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), environ)) {
    std::fprintf(stderr, "ticker: cannot start a watcher: %s\n", std::strerror(e));
    return -1;
  }
  return pid;
}

// Serves `name` until SIGINT or SIGTERM; or, as the demo, until its watchers have exited.
int serve(const std::string& name, const char* self, bool demo) {
  asio::io_context io;
  std::error_code ec;
  shmio::rpc_server server(io.get_executor(), shmio::create_only, name,
                           shmio::rpc_methods().add("ticks", shmio::rpc_stream_handler(ticks)),
                           shmio::rpc_connection_options(), ec);
  if (ec) {
    std::fprintf(stderr, "ticker: cannot serve '%s': %s\n", name.c_str(),
                 ec == shmio::errc::already_exists ? "a service is already running there"
                                                   : ec.message().c_str());
    return 1;
  }
  asio::signal_set signals(io, SIGINT, SIGTERM);
  if (demo) signals.add(SIGCHLD);  // before any watcher starts: none can exit unseen
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
    server.close();  // the last work on the io_context: run() returns
  };
  signals.async_wait(on_signal);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::printf("ticker: serving '%s' (pid %d); ready\n", name.c_str(), ::getpid());
  if (demo) {
    for (auto args : {std::vector<std::string>{self, "watch", name, "ACME", "5", "20"},
                      std::vector<std::string>{self, "watch", name, "INITECH", "3", "30"},
                      std::vector<std::string>{self, "watch", name, "GLOBEX", "0", "10", "4"}})
      start_self(std::move(args)) < 0 ? ++failures : ++running;
    if (running == 0) server.close();
  }
  io.run();
  std::printf("ticker: stopped\n");
  return failures ? 1 : 0;
}

// ---- a watcher --------------------------------------------------------------------------

asio::awaitable<int> watch(std::string name, std::string request, unsigned long stop_after) {
  shmio::rpc_buffer client(co_await asio::this_coro::executor);
  if (auto [ec] = co_await client.async_connect(name, 2s, as_tuple); ec) {
    std::fprintf(stderr, "ticker: %s\n",
                 ec == shmio::errc::not_found ? ("no service is running on '" + name + "'").c_str()
                                              : ec.message().c_str());
    co_return 1;
  }
  auto [ec, stream] =
      co_await client.async_request_stream("ticks", asio::buffer(request), as_tuple);
  if (ec) {
    std::fprintf(stderr, "ticker: %s\n", ec.message().c_str());
    co_return 1;
  }
  for (unsigned long n = 0; stop_after == 0 || n < stop_after; ++n) {
    auto [e, tick] = co_await stream.async_read(as_tuple);
    if (e == asio::error::eof) {
      std::printf("end of stream\n");
      co_return 0;
    }
    if (e) {
      std::fprintf(stderr, "ticker: %s%s%s\n", e.message().c_str(), tick.empty() ? "" : ": ",
                   text_of(tick).c_str());
      co_return 1;
    }
    // Every byte of the item as it came, a NUL included.
    const std::string text = text_of(tick);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::putchar('\n');
  }
  stream.close();  // stops the service's handler for it
  std::printf("stopped after %lu ticks\n", stop_after);
  co_return 0;
}

int run_watch(const std::vector<std::string>& args) {
  // NAME SYMBOL COUNT [MS [STOP]]
  if (args.size() < 3 || args.size() > 5) return 2;
  const std::string ms = args.size() > 3 ? args[3] : "10";
  // COUNT and MS are the service's to check (its refusal comes back as the read's error); STOP
  // is the watcher's own.
  unsigned long stop = 0;
  if (args.size() > 4 && !examples::parse_number(args[4], 1'000'000'000, stop)) return 2;
  asio::io_context io;
  int rc = 1;
  asio::co_spawn(io, watch(args[0], args[1] + " " + args[2] + " " + ms, stop),
                 [&](std::exception_ptr e, int r) { rc = e ? 1 : r; });
  io.run();
  return rc;
}

int usage() {
  std::fprintf(stderr,
               "usage: ticker serve NAME | ticker watch NAME SYMBOL COUNT [MS [STOP]] | ticker\n"
               "  (COUNT and STOP: 0 to 1000000000; MS: 0 to 60000)\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    if (args.empty()) return serve("ticker-demo." + std::to_string(::getpid()), argv[0], true);
    if (args[0] == "serve" && args.size() == 2) return serve(args[1], argv[0], false);
    if (args[0] == "watch") {
      const int rc = run_watch({args.begin() + 1, args.end()});
      return rc == 2 ? usage() : rc;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ticker: %s\n", e.what());
    return 1;
  }
  return usage();
}
