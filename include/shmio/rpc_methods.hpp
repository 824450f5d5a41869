#pragma once
// shmio::rpc_methods — the named methods an RPC service (or either end of a channel) serves.
//
//   shmio::rpc_methods methods;
//   methods.add("get", get_handler)        // a coroutine handler (rpc_handler)
//          .add("set", set_handler)        // or a plain one (rpc_sync_handler)
//          .add("put", put_handler)        // or a plain one in place (rpc_in_place_handler)
//          .add("watch", watch_handler)    // or a stream handler (rpc_stream_handler)
//          .add("", fallback);             // "": what calls without a method name reach
//   shmio::rpc_server server(ex, shmio::create_only, "kv", std::move(methods));
//
//   co_await client.async_request("get", asio::buffer(key), asio::use_awaitable);
//
// A call to a name that is not there completes at once with errc::no_such_method; a call
// without a name, where "" is not there, with errc::no_handler. A name has one handler: a stream
// handler answers async_request_stream only, the others async_request only; the wrong kind of
// call gets errc::no_such_method too. Names are 1 to 255 bytes.
// The table is shared, not copied, by every connection that serves it.

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>

#include "shmio/error.hpp"
#include "shmio/rpc_options.hpp"
#include "shmio/rpc_stream.hpp"

namespace shmio {

namespace detail {
/// One method: a coroutine handler, a plain one (returning its reply, or writing it in place)
/// or a stream handler.
struct rpc_method {
  rpc_handler async;
  rpc_sync_handler sync;
  rpc_stream_handler stream;
  rpc_in_place_handler in_place;
};
struct method_name_hash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept {
    return std::hash<std::string_view>{}(s);
  }
};
using method_table = std::unordered_map<std::string, rpc_method, method_name_hash, std::equal_to<>>;
}  // namespace detail

class rpc_methods {
 public:
  /// The longest method name.
  static constexpr std::size_t max_name = 255;

  /// No methods: calls get errc::no_handler (unnamed) or errc::no_such_method (named).
  rpc_methods() = default;
  rpc_methods(std::nullptr_t) {}

  /// One handler, as the unnamed method: what every constructor taking rpc_methods accepts in
  /// place of a table. A coroutine handler (returning asio::awaitable<std::vector<std::byte>>)
  /// runs on the channel's strand; a plain one (returning std::vector<std::byte>, or void with an
  /// rpc_reply& as its third argument: in place) runs inline as its request is read; a stream
  /// handler (returning asio::awaitable<void>, with an
  /// rpc_stream_writer as its third argument) answers async_request_stream. An empty
  /// std::function is no handler.
  template <class Handler>
  requires(!std::is_same_v<std::remove_cvref_t<Handler>, rpc_methods> &&
           !std::is_same_v<std::remove_cvref_t<Handler>, std::nullptr_t>)
      rpc_methods(Handler&& handler) {  // NOLINT: implicit on purpose
    bool callable = false;
    auto method = method_of(std::forward<Handler>(handler), callable);
    if (callable) put("", std::move(method), true);
  }

  /// Adds (or replaces) the method `name`; "" is the unnamed method. The handler is any of the
  /// kinds above (a handler of another shape fails to compile with one static_assert). Throws
  /// shmio::error (errc::invalid_argument) for a name over max_name bytes or an empty handler.
  template <class Handler>
  requires(!std::is_same_v<std::remove_cvref_t<Handler>, std::nullptr_t>)
      rpc_methods& add(std::string_view name, Handler&& handler) {
    bool callable = false;
    auto method = method_of(std::forward<Handler>(handler), callable);
    return put(name, std::move(method), callable);
  }

  bool empty() const noexcept { return !table_ || table_->empty(); }
  std::size_t size() const noexcept { return table_ ? table_->size() : 0; }
  bool contains(std::string_view name) const { return table_ && table_->contains(name); }

  /// The table, for the channels that serve it (shared: later add()s copy it first).
  std::shared_ptr<const detail::method_table> table() const noexcept { return table_; }

 private:
  // The handler as a method of its kind, and whether it is callable (an empty std::function is
  // not).
  template <class Handler>
  static detail::rpc_method method_of(Handler&& handler, bool& callable) {
    constexpr bool coroutine = std::is_constructible_v<rpc_handler, Handler&&>;
    constexpr bool plain = std::is_constructible_v<rpc_sync_handler, Handler&&>;
    constexpr bool stream = std::is_constructible_v<rpc_stream_handler, Handler&&>;
    constexpr bool in_place = std::is_constructible_v<rpc_in_place_handler, Handler&&>;
    static_assert(coroutine || plain || stream || in_place,
                  "an rpc handler is callable as (std::uint64_t request_id, "
                  "std::span<const std::byte> payload) and returns "
                  "asio::awaitable<std::vector<std::byte>> (a coroutine handler) or "
                  "std::vector<std::byte> (a plain handler); or as (request_id, payload, "
                  "shmio::rpc_stream_writer) returning asio::awaitable<void> (a stream handler); "
                  "or as (request_id, payload, shmio::rpc_reply&) returning void (a plain handler "
                  "in place)");
    detail::rpc_method m;
    if constexpr (coroutine) {
      m.async = rpc_handler(std::forward<Handler>(handler));
      callable = static_cast<bool>(m.async);
    } else if constexpr (plain) {
      m.sync = rpc_sync_handler(std::forward<Handler>(handler));
      callable = static_cast<bool>(m.sync);
    } else if constexpr (stream) {
      m.stream = rpc_stream_handler(std::forward<Handler>(handler));
      callable = static_cast<bool>(m.stream);
    } else if constexpr (in_place) {
      m.in_place = rpc_in_place_handler(std::forward<Handler>(handler));
      callable = static_cast<bool>(m.in_place);
    }
    return m;
  }
  rpc_methods& put(std::string_view name, detail::rpc_method method, bool callable) {
    if (name.size() > max_name || !callable)
      detail::throw_if(errc::invalid_argument, "add rpc method", name);
    // Copy on write: channels made from an earlier state keep theirs.
    auto next = table_ ? std::make_shared<detail::method_table>(*table_)
                       : std::make_shared<detail::method_table>();
    next->insert_or_assign(std::string(name), std::move(method));
    table_ = std::move(next);
    return *this;
  }

  std::shared_ptr<const detail::method_table> table_;
};

}  // namespace shmio
