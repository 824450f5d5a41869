#pragma once
// What an I/O object accepts in place of an executor, as Asio's own do: an execution context
// (an io_context, a thread_pool), whose executor it then uses.

#include <asio/execution_context.hpp>
#include <type_traits>

namespace shmio::detail {

template <class T>
concept execution_context_ref = std::is_convertible_v<T&, asio::execution_context&>;

}  // namespace shmio::detail
