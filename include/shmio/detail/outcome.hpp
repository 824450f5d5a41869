#pragma once
// What one attempt at a wait's condition produced: shared by the shared-memory algorithms
// (which make attempts) and the waiter (which waits on them), without Asio.

#include <system_error>

namespace shmio::detail {

/// The value of an operation that completes with an error_code only.
struct no_value {};

/// An attempt returns std::optional<outcome>: empty means "not yet, keep waiting".
template <class R>
struct outcome {
  std::error_code ec;
  R value{};
};

}  // namespace shmio::detail
