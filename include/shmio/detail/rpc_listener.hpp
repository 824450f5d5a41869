#pragma once
// The listener segment of an RPC service (layout/rpc.hpp, "rpc listener"): creating and checking
// it, the names of its connections, and a client's short-lived link to it while it connects.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_map>

#include "shmio/detail/layout.hpp"
#include "shmio/detail/ring.hpp"
#include "shmio/rpc_options.hpp"
#include "shmio/segment.hpp"

namespace shmio::detail {

/// Installs the truncation guard (platform.hpp) in this process, once: every RPC end maps
/// files that other processes can truncate (a service, one made by each of its clients), and
/// one client must not be able to kill the service, or another client, by truncating one. The
/// channel or acceptor whose mapping faulted then fails with errc::corrupted. A process where
/// the handler cannot be installed (sigaction fails) goes on without it.
void guard_rpc_mappings() noexcept;

/// What the listener's header says, each field read once and checked.
struct listener_settings {
  rpc_options channel;  ///< the sizes and limits of every connection's channel
  std::uint64_t ring_offset = 0;
  ring_geometry ring;  ///< the connect ring's
  std::uint64_t methods_offset = 0;
};

/// The calls a service has taken per method, counted in its listener's method table
/// (layout/rpc.hpp) for `shmio stat`. Made by the acceptor; its connections' channels count through
/// it. It maps the listener's file a second time, so that a connection that outlives its
/// acceptor (whose close may remove the file) counts into memory that stays mapped until the
/// last of them goes.
class method_counters {
 public:
  static std::shared_ptr<method_counters> map(const segment& listener, std::uint64_t methods_offset,
                                              std::error_code& ec);
  method_counters(const method_counters&) = delete;
  method_counters& operator=(const method_counters&) = delete;
  ~method_counters();

  /// The counter of the method `name` ("": the unnamed one): its slot, taken on first use;
  /// null once every slot is another name's.
  std::atomic<std::uint64_t>* counter(std::string_view name);

 private:
  method_counters() = default;
  void* base_ = nullptr;
  std::size_t size_ = 0;
  layout::method_table* table_ = nullptr;
  std::mutex mutex_;
  std::unordered_map<std::string, std::atomic<std::uint64_t>*> by_name_;  // under mutex_
};

/// Nodes of the connect ring: connect requests that may wait at once for the acceptor.
inline constexpr std::uint32_t listener_backlog = 256;

/// The name of the channel a client with process id `pid` creates to connect to `service`:
/// the service's name, '#', the pid and the nonce in hex. Both ends derive it from the numbers.
std::string connection_name(std::string_view service, std::uint32_t pid, std::uint64_t nonce);

/// Creates the listener segment `name` for connections with `channel`'s sizes.
segment create_listener(std::string_view name, const rpc_options& channel, std::error_code& ec);
/// Checks a listener's body; errc::incompatible for another version, else errc::corrupted.
std::error_code validate_listener(std::span<const std::byte> body, listener_settings& out);

/// A client's link to a service's listener, held from the start of a connect until it is
/// accepted or fails: tells whether the acceptor is still there and writes the request.
class listener_link {
 public:
  /// Opens the listener `service`: errc::not_found if there is none or its acceptor is gone.
  static std::unique_ptr<listener_link> open(std::string_view service, std::error_code& ec);

  const listener_settings& settings() const noexcept { return settings_; }
  /// True while an acceptor holds the listener.
  bool server_alive();
  /// Writes the connect request for (pid, nonce): true if written, false if the backlog is
  /// full; errc::corrupted if the ring is damaged.
  bool post_request(std::uint32_t pid, std::uint64_t nonce, std::error_code& ec);

 private:
  segment seg_;
  listener_settings settings_;
  ring_view ring_;
};

}  // namespace shmio::detail
