#pragma once
// An executor that runs what it is given at once, on the calling thread.
//
// The library uses it only for the completion of a coroutine handler's co_spawn, which drops
// the handler's entry in serving_ and nothing else: co_spawn posts that completion whenever
// the coroutine finished without suspending (the usual case), a trip through the strand per
// request for no purpose. It claims blocking.never because asio::post requires it; for this
// one completion, which runs no user code and starts nothing, running inline is what the post
// would have done a moment later on the same strand.

#include <utility>

#include <asio/execution/blocking.hpp>

namespace shmio::detail {

struct inline_executor {
  template <class F>
  void execute(F&& f) const {
    std::forward<F>(f)();
  }
  inline_executor require(asio::execution::blocking_t::never_t) const noexcept { return *this; }
  bool operator==(const inline_executor&) const noexcept = default;
};

}  // namespace shmio::detail
