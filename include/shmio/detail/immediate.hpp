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
// goes through it), which is where the handler must run.
//
// Calling the handler inside the initiation would nest: the resumed coroutine's next ready
// operation would resume it again one level deeper, 600-750 bytes of stack each. So the first
// such resumption on a thread starts a chain, which runs it; a ready operation initiated while
// the chain runs, for a coroutine of the same executor, is handed to the chain instead and
// resumed when the running resumption has returned (its coroutine suspended). A loop, at
// constant depth. After max_resumptions the chain posts what is left, so that the executor's
// other handlers get their turn. A ready operation the chain cannot take (another executor's,
// or its queue is full) is posted.

#include <cstddef>
#include <exception>
#include <new>
#include <type_traits>
#include <utility>

#include <asio/any_io_executor.hpp>
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

class immediate_chain {
 public:
  /// Resumptions one chain runs before it posts the rest. Each post costs Asio 1.22 a reactor
  /// poll (a system call), so a long run of ready operations makes one per max_resumptions; a
  /// handler posted meanwhile waits at most this many resumptions (~25 µs of ring reads).
  static constexpr int max_resumptions = 256;

  /// A resumption handed to the chain: a handler and its arguments, type-erased.
  struct entry {
    static constexpr std::size_t capacity = 128;
    /// Takes the payload out (the slot is free again before the handler runs), then calls it;
    /// or, with `post`, posts it to `ex`.
    void (*act)(entry&, bool post, const asio::any_io_executor& ex) = nullptr;
    alignas(std::max_align_t) unsigned char bytes[capacity];
  };

  /// Whether a payload of type T can be handed to a chain.
  template <class T>
  static constexpr bool fits = sizeof(T) <= entry::capacity &&
                               alignof(T) <= alignof(std::max_align_t);

  static bool running() noexcept { return current_ != nullptr; }

  /// Hands `p` (a function object called once) to the chain running on this thread, if there is
  /// one for `handler_ex` with room; true if it took it (moved from `p`).
  template <class Payload>
  static bool defer(const asio::any_io_executor& handler_ex, Payload& p) {
    static_assert(fits<Payload>);
    chain* c = current_;
    if (!c || c->count == queue_size || !(c->ex == handler_ex)) return false;
    entry& e = c->queue[(c->head + c->count) % queue_size];
    ::new (static_cast<void*>(e.bytes)) Payload(std::move(p));
    e.act = [](entry& self, bool post, const asio::any_io_executor& ex) {
      auto* stored = std::launder(reinterpret_cast<Payload*>(self.bytes));
      Payload taken(std::move(*stored));
      stored->~Payload();
      if (post)
        asio::post(ex, std::move(taken));
      else
        taken();
    };
    ++c->count;
    return true;
  }

  /// Starts a chain on this thread (none may be running) for coroutines of `handler_ex`: runs
  /// `resume`, then every resumption handed to the chain meanwhile. An exception escaping one (a
  /// coroutine's completion handler that rethrows) is thrown again from a posted handler, so it
  /// leaves run() as it would have after a post. `handler_ex` is a copy: the resumed coroutine
  /// may destroy the object whose executor it came from.
  template <class Resume>
  static void start(asio::any_io_executor handler_ex, Resume&& resume) noexcept {
    chain c(std::move(handler_ex));
    current_ = &c;
    c.guarded(resume);
    for (int resumed = 1; c.count > 0 && resumed < max_resumptions; ++resumed) {
      entry& e = c.pop();
      c.guarded([&] { e.act(e, false, c.ex); });
    }
    current_ = nullptr;
    while (c.count > 0) {
      entry& e = c.pop();
      c.guarded([&] { e.act(e, true, c.ex); });
    }
  }

 private:
  // Each resumption usually hands over one (its coroutine's next ready operation); several
  // only when it started other coroutines of the same executor, as awaitable operators do.
  static constexpr std::size_t queue_size = 4;

  struct chain {
    explicit chain(asio::any_io_executor e) noexcept : ex(std::move(e)) {}

    asio::any_io_executor ex;
    entry queue[queue_size];
    std::size_t head = 0;
    std::size_t count = 0;

    entry& pop() noexcept {
      entry& e = queue[head];
      head = (head + 1) % queue_size;
      --count;
      return e;
    }
    template <class F>
    void guarded(F&& f) noexcept {
      try {
        f();
      } catch (...) {
        asio::post(ex, [e = std::current_exception()] { std::rethrow_exception(e); });
      }
    }
  };

  static inline thread_local chain* current_ = nullptr;
};

}  // namespace shmio::detail
