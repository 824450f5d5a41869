// kvd — a key/value daemon and its command-line client, talking over a shmio rpc_buffer.
//
//   kvd serve          run the daemon: it owns the channel and holds the map in memory
//   kvd set KEY VALUE  store a value
//   kvd get KEY        print a value (exit 1 if there is none)
//   kvd status         how many keys, how many requests served, the daemon's pid
//   kvd stop           ask the daemon to exit
//
// Each client command opens the channel, makes one call and closes it: the state lives only in
// the daemon, and nothing is reloaded per call. The channel is named "kvd", or $KVD_NAME.
//
// Requests are text fields separated by NUL bytes ("set\0KEY\0VALUE"); a failed request
// (unknown key, bad command) throws in the handler, which reaches the client as
// errc::remote_error carrying the exception's text.
#include <unistd.h>

#include <asio.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <shmio/shmio.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;

std::string channel_name() {
  const char* env = std::getenv("KVD_NAME");
  return env && *env ? env : "kvd";
}

std::vector<std::string> split(std::span<const std::byte> payload) {
  std::vector<std::string> fields(1);
  for (std::byte b : payload) {
    if (b == std::byte{0})
      fields.emplace_back();
    else
      fields.back() += static_cast<char>(b);
  }
  return fields;
}

std::vector<std::byte> bytes_of(std::string_view s) {
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  return {p, p + s.size()};
}

// ---- the daemon -------------------------------------------------------------------------

class key_value_daemon {
 public:
  // Runs on the channel's strand; it never waits, so one request is served at a time.
  std::vector<std::byte> handle(std::span<const std::byte> request) {
    ++served_;
    auto f = split(request);
    if (f[0] == "set" && f.size() == 3) {
      store_[f[1]] = f[2];
      return bytes_of("OK");
    }
    if (f[0] == "get" && f.size() == 2) {
      auto it = store_.find(f[1]);
      if (it == store_.end()) throw std::out_of_range("no key '" + f[1] + "'");
      return bytes_of(it->second);
    }
    if (f[0] == "status" && f.size() == 1)
      return bytes_of("pid " + std::to_string(::getpid()) + ", " + std::to_string(store_.size()) +
                      " keys, " + std::to_string(served_) + " requests served");
    if (f[0] == "stop" && f.size() == 1) {
      // Posted: the reply is written when this handler returns, the close runs after that.
      asio::post(io_, [this] { shut_down(); });
      return bytes_of("stopping");
    }
    throw std::invalid_argument("bad request '" + f[0] + "'");
  }

  int run() {
    const std::string name = channel_name();
    std::error_code ec;
    server_.emplace(
        io_.get_executor(), shmio::create_only, name,
        [this](std::uint64_t, std::span<const std::byte> request)
            -> asio::awaitable<std::vector<std::byte>> { co_return handle(request); },
        shmio::rpc_options{.node_size = 4096}, ec);
    if (ec == shmio::errc::already_exists) {
      std::fprintf(stderr, "kvd: a daemon is already serving '%s'\n", name.c_str());
      return 1;
    }
    if (ec) {
      std::fprintf(stderr, "kvd: cannot serve '%s': %s\n", name.c_str(), ec.message().c_str());
      return 1;
    }
    // Ctrl-C or kill: close the channel (the segment goes with it) and return from run().
    signals_.async_wait([this](std::error_code e, int) {
      if (!e) shut_down();
    });
    std::printf("kvd: serving '%s' (pid %d); ready\n", name.c_str(), ::getpid());
    std::fflush(stdout);
    io_.run();
    std::printf("kvd: stopped after %llu requests\n", static_cast<unsigned long long>(served_));
    return 0;
  }

 private:
  // Closing the channel removes its segment; with the signal wait gone too, run() returns.
  void shut_down() {
    server_->close();
    signals_.cancel();
  }

  asio::io_context io_;
  asio::signal_set signals_{io_, SIGINT, SIGTERM};
  std::optional<shmio::rpc_buffer> server_;
  std::map<std::string, std::string> store_;
  std::uint64_t served_ = 0;
};

// ---- the client -------------------------------------------------------------------------

// One call: open the channel, send `request`, print the reply, close. Returns the exit status.
int call(const std::vector<std::string>& fields) {
  std::string request;
  for (std::size_t i = 0; i < fields.size(); ++i) {
    if (i) request += '\0';
    request += fields[i];
  }
  const std::string name = channel_name();
  asio::io_context io;
  std::error_code ec;
  std::optional<shmio::rpc_buffer> client;
  // A channel has one opener at a time: while another client is connected, try again.
  const auto give_up = std::chrono::steady_clock::now() + 5s;
  do {
    client.emplace(io.get_executor(), shmio::open_only, name, shmio::rpc_handler{},
                   shmio::wait_strategy{}, ec);
    if (ec == shmio::errc::busy) std::this_thread::sleep_for(1ms);
  } while (ec == shmio::errc::busy && std::chrono::steady_clock::now() < give_up);
  if (ec == shmio::errc::not_found) {
    std::fprintf(stderr, "kvd: no daemon is running on '%s' (start one with: kvd serve)\n",
                 name.c_str());
    return 1;
  }
  if (ec) {
    std::fprintf(stderr, "kvd: cannot reach the daemon: %s\n", ec.message().c_str());
    return 1;
  }

  int status = 1;
  client->async_request(
      asio::buffer(request), 5s, [&](std::error_code e, std::vector<std::byte> reply) {
        std::string text(reinterpret_cast<const char*>(reply.data()), reply.size());
        if (!e) {
          std::printf("%s\n", text.c_str());
          status = 0;
        } else if (e == shmio::errc::remote_error) {
          std::fprintf(stderr, "kvd: %s\n", text.c_str());
        } else {
          std::fprintf(stderr, "kvd: %s\n", e.message().c_str());
        }
        client->close();
      });
  io.run();
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() == 1 && args[0] == "serve") return key_value_daemon().run();
  if ((args.size() == 3 && args[0] == "set") || (args.size() == 2 && args[0] == "get") ||
      (args.size() == 1 && (args[0] == "status" || args[0] == "stop")))
    return call(args);
  std::fprintf(stderr,
               "usage: kvd serve | kvd set KEY VALUE | kvd get KEY | kvd status | kvd stop\n");
  return 2;
}
