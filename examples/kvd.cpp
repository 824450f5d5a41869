// kvd — a key/value daemon and its command-line client: an rpc_server of named methods.
//
//   kvd serve          run the daemon: it runs the service and holds the map in memory
//   kvd set KEY VALUE  store a value
//   kvd get KEY        print a value (exit 1 if there is none)
//   kvd status         how many keys, how many requests served, the daemon's pid
//   kvd stop           ask the daemon to exit
//
// The daemon is an rpc_server: every client connects on a channel of its own, so any number of
// commands may run at once and none waits for another to finish. Each client command connects,
// makes one call of the method of its name and exits: the state lives only in the daemon, and
// nothing is reloaded per call. The service is named "kvd", or $KVD_NAME.
//
// A request carries the method's arguments: get's is KEY; set's is KEY, a NUL byte, VALUE (no
// command-line argument holds a NUL); status and stop take none. A failed request (unknown key)
// throws in the method, which reaches the client as errc::remote_error carrying the exception's
// text.
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
#include <vector>

namespace {

using namespace std::chrono_literals;

std::string service_name() {
  const char* env = std::getenv("KVD_NAME");
  return env && *env ? env : "kvd";
}

std::string text_of(std::span<const std::byte> payload) {
  return {reinterpret_cast<const char*>(payload.data()), payload.size()};
}

std::vector<std::byte> bytes_of(std::string_view s) {
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  return {p, p + s.size()};
}

// ---- the daemon -------------------------------------------------------------------------

class key_value_daemon {
 public:
  int run() {
    const std::string name = service_name();
    std::error_code ec;
    // Each connection gets two rings of these sizes: kvd's messages are small, and a larger
    // value still fits, as several packets.
    server_.emplace(io_.get_executor(), shmio::create_only, name, methods(),
                    shmio::rpc_options{.node_count = 8, .node_size = 4096}, ec);
    if (ec == shmio::errc::already_exists) {
      std::fprintf(stderr, "kvd: a daemon is already serving '%s'\n", name.c_str());
      return 1;
    }
    if (ec) {
      std::fprintf(stderr, "kvd: cannot serve '%s': %s\n", name.c_str(), ec.message().c_str());
      return 1;
    }
    // Ctrl-C or kill: close the service (its segments go with it) and return from run().
    signals_.async_wait([this](std::error_code e, int) {
      if (!e) shut_down();
    });
    std::printf("kvd: serving '%s' (pid %d); ready\n", name.c_str(), ::getpid());
    std::fflush(stdout);
    // One thread runs every connection's methods, so they never run at once: the map needs no
    // lock. The methods never wait, which keeps one client from holding up the others.
    io_.run();
    std::printf("kvd: stopped after %llu requests\n", static_cast<unsigned long long>(served_));
    return 0;
  }

 private:
  // Plain (rpc_sync_handler) methods: each runs inline as its request is read.
  shmio::rpc_methods methods() {
    using request = std::span<const std::byte>;
    shmio::rpc_methods m;
    m.add("set", shmio::rpc_sync_handler([this](std::uint64_t, request in) {
            ++served_;
            const std::string kv = text_of(in);
            const auto nul = kv.find('\0');
            if (nul == std::string::npos) throw std::invalid_argument("set needs KEY\\0VALUE");
            store_[kv.substr(0, nul)] = kv.substr(nul + 1);
            return bytes_of("OK");
          }));
    m.add("get", shmio::rpc_sync_handler([this](std::uint64_t, request in) {
            ++served_;
            const std::string key = text_of(in);
            auto it = store_.find(key);
            if (it == store_.end()) throw std::out_of_range("no key '" + key + "'");
            return bytes_of(it->second);
          }));
    m.add("status", shmio::rpc_sync_handler([this](std::uint64_t, request) {
            ++served_;
            return bytes_of("pid " + std::to_string(::getpid()) + ", " +
                            std::to_string(store_.size()) + " keys, " + std::to_string(served_) +
                            " requests served");
          }));
    m.add("stop", shmio::rpc_sync_handler([this](std::uint64_t, request) {
            ++served_;
            // Posted: the reply is written when this method returns, the close runs after that.
            asio::post(io_, [this] { shut_down(); });
            return bytes_of("stopping");
          }));
    return m;
  }

  // Closing the server closes every connection and removes the service; with the signal wait
  // gone too, nothing is left to do and run() returns.
  void shut_down() {
    server_->close();
    signals_.cancel();
  }

  asio::io_context io_;
  asio::signal_set signals_{io_, SIGINT, SIGTERM};
  std::optional<shmio::rpc_server> server_;
  std::map<std::string, std::string> store_;
  std::uint64_t served_ = 0;
};

// ---- the client -------------------------------------------------------------------------

// One call: connect, call `method` with `payload`, print the reply. Returns the exit status.
int call(const std::string& method, const std::string& payload) {
  const std::string name = service_name();
  asio::io_context io;
  shmio::rpc_buffer client(io.get_executor());
  std::error_code ec;
  // Blocking: this process has nothing else to do meanwhile. A running daemon accepts every
  // client as it comes, with no turn to wait for; with no daemon, not_found comes at once.
  client.connect(name, 2s, ec);
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
  client.async_request(method, asio::buffer(payload), 5s,
                       [&](std::error_code e, std::vector<std::byte> reply) {
                         if (!e) {
                           std::printf("%s\n", text_of(reply).c_str());
                           status = 0;
                         } else if (e == shmio::errc::remote_error) {
                           std::fprintf(stderr, "kvd: %s\n", text_of(reply).c_str());
                         } else {
                           std::fprintf(stderr, "kvd: %s\n", e.message().c_str());
                         }
                         // The connection is this end's last work: closed, run() returns.
                         client.close();
                       });
  io.run();
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() == 1 && args[0] == "serve") return key_value_daemon().run();
  if (args.size() == 3 && args[0] == "set") return call("set", args[1] + '\0' + args[2]);
  if (args.size() == 2 && args[0] == "get") return call("get", args[1]);
  if (args.size() == 1 && (args[0] == "status" || args[0] == "stop")) return call(args[0], "");
  std::fprintf(stderr,
               "usage: kvd serve | kvd set KEY VALUE | kvd get KEY | kvd status | kvd stop\n");
  return 2;
}
