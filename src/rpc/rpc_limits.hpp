#pragma once
// The checks of an end's own bounds in rpc_options (max_in_flight, max_concurrent_handlers,
// stream_window, stream_window_limit): a value out of range is refused with
// errc::invalid_argument where the options are given (a channel's or a service's creation,
// rpc_buffer::set_limits), never quietly changed into another.

#include <string>
#include <string_view>

#include "shmio/detail/layout/rpc.hpp"
#include "shmio/rpc_options.hpp"

namespace shmio::detail {

/// What is wrong with `o`'s bounds, for an error's text; null if nothing is.
inline const char* limits_problem(const rpc_options& o) noexcept {
  if (o.max_in_flight == 0) return "max_in_flight must be at least 1";
  if (o.max_concurrent_handlers == 0) return "max_concurrent_handlers must be at least 1";
  if (o.stream_window == 0 || o.stream_window > layout::max_stream_window)
    return "stream_window must be 1 to 65536";
  if (o.stream_window_limit == 0 || o.stream_window_limit > layout::max_stream_window)
    return "stream_window_limit must be 1 to 65536";
  return nullptr;
}

/// `operation`, with what is wrong with `o`'s bounds if anything is: an exception's text.
inline std::string with_limits_problem(std::string_view operation, const rpc_options& o) {
  std::string what(operation);
  if (const char* problem = limits_problem(o)) (what += " (") += problem, what += ')';
  return what;
}

}  // namespace shmio::detail
