#pragma once
// Immediate completion for coroutines.
//
// An operation whose result is ready inside its initiating function must not run its handler
// there (the caller's code after the call would run after the handler), so it posts it. In
// Asio 1.22 a post costs a pass through the scheduler, which polls the reactor with an
// epoll_wait before it runs the handler: a system call per operation that a ring read or an
// event wait otherwise never makes.
//
// A handler that resumes a use_awaitable coroutine is the one case where running it at once is
// what a post would do, only sooner: Asio runs the initiation after the coroutine has
// suspended (awaitable_frame's await_transform calls it from await_suspend), so nothing of the
// caller's runs before the handler either way; and a coroutine's code, the initiation
// included, only ever runs on the coroutine's executor (co_spawn enters it, every resumption
// goes through it), which is where the handler must run. Each such resumption nests, under
// the initiation that made it, so a thread runs at most `max_depth` of them inside each other;
// the next one is posted, which also lets the executor's other handlers have their turn.

#include <exception>
#include <type_traits>

#include <asio/experimental/as_tuple.hpp>
#include <asio/post.hpp>
#if defined(ASIO_HAS_CO_AWAIT)
#include <asio/use_awaitable.hpp>
#endif

namespace shmio::detail {

/// True for the handler types that Asio makes for use_awaitable (also inside as_tuple).
template <class Handler>
struct resumes_coroutine : std::false_type {};
#if defined(ASIO_HAS_CO_AWAIT)
template <class Executor, class... Args>
struct resumes_coroutine<asio::detail::awaitable_handler<Executor, Args...>> : std::true_type {};
#endif
template <class Handler>
struct resumes_coroutine<asio::experimental::detail::as_tuple_handler<Handler>>
    : resumes_coroutine<Handler> {};

class immediate_depth {
 public:
  /// Nested resumptions per thread. Each takes 600-750 bytes of stack at -O2 (more without
  /// optimisation or with sanitizers), so under 50 KiB here; one post per 65 operations keeps
  /// the reactor polls below 0.02 per operation.
  static constexpr int max_depth = 64;

  static bool available() noexcept { return depth_ < max_depth; }

  /// Runs `resume` (which invokes a handler that resumes a coroutine) one level deeper. An
  /// exception escaping it (a coroutine's completion handler that rethrows) is thrown again
  /// from a posted handler, so it leaves run() as it would have after a post. `ex` is a copy:
  /// the resumed coroutine may destroy the object whose executor it is.
  template <class Executor, class Resume>
  static void run(Executor ex, Resume&& resume) noexcept {
    ++depth_;
    try {
      resume();
    } catch (...) {
      asio::post(ex, [e = std::current_exception()] { std::rethrow_exception(e); });
    }
    --depth_;
  }

 private:
  static inline thread_local int depth_ = 0;
};

}  // namespace shmio::detail
