// Immediate completion for coroutines (detail/immediate.hpp): an operation ready inside its
// initiating function resumes a use_awaitable coroutine at once instead of posting, one after
// the other in a chain of bounded length at constant stack depth; every other kind of handler
// is still posted.

#include <pthread.h>

#include <asio/co_spawn.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/strand.hpp>
#include <asio/use_awaitable.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstddef>
#include <exception>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <tuple>

#include "shmio/circular_buffer.hpp"
#include "shmio/detail/immediate.hpp"
#include "shmio/named_event.hpp"
#include "support.hpp"

namespace {

using namespace std::chrono_literals;
using shmio::circular_buffer;
using shmio::event_mode;
using shmio::named_event;
using shmio::detail::immediate_chain;
using shmio::test::scoped_name;

constexpr std::chrono::milliseconds bound = shmio::test::default_bound;

static_assert(
    shmio::detail::resumes_coroutine<asio::async_result<
        asio::use_awaitable_t<>, void(std::error_code, std::size_t)>::handler_type>::value);

// Spawns `coroutine` on `io`, runs `io` until it has no work (or `bound` passes) and returns how
// many handlers it ran; rethrows what the coroutine threw.
template <class Fn>
std::size_t handlers_to_finish(asio::io_context& io, Fn coroutine) {
  std::exception_ptr failure;
  bool finished = false;
  asio::co_spawn(io, std::move(coroutine), [&](std::exception_ptr e) {
    failure = e;
    finished = true;
  });
  const std::size_t handlers = io.run_for(bound);
  REQUIRE(finished);
  if (failure) std::rethrow_exception(failure);
  return handlers;
}

// Runs `fn` in a thread whose stack is `stack_bytes` (a deep recursion there crashes the test).
void run_on_small_stack(std::size_t stack_bytes, std::function<void()> fn) {
  pthread_attr_t attr;
  REQUIRE(pthread_attr_init(&attr) == 0);
  REQUIRE(pthread_attr_setstacksize(&attr, stack_bytes) == 0);
  pthread_t thread;
  auto entry = [](void* p) -> void* {
    (*static_cast<std::function<void()>*>(p))();
    return nullptr;
  };
  REQUIRE(pthread_create(&thread, &attr, entry, &fn) == 0);
  pthread_attr_destroy(&attr);
  REQUIRE(pthread_join(thread, nullptr) == 0);
}

}  // namespace

TEST_CASE("a coroutine's reads of messages already in the ring resume it without a post each",
          "[immediate][ring][async]") {
  asio::io_context io;
  scoped_name name("ring");
  constexpr int messages = 200;
  circular_buffer ring(io.get_executor(), shmio::create_only, name, messages, 16);
  for (int i = 0; i < messages; ++i) {
    const std::string m = "m" + std::to_string(i);
    REQUIRE(ring.write(asio::buffer(m), bound) == m.size());
  }
  std::string received;
  const bool as_tuple = GENERATE(false, true);
  const std::size_t handlers = handlers_to_finish(io, [&]() -> asio::awaitable<void> {
    std::string buf(16, '\0');
    for (int i = 0; i < messages; ++i) {
      std::size_t n = 0;
      if (as_tuple) {
        std::error_code ec;
        std::tie(ec, n) = co_await ring.async_read(
            asio::buffer(buf), asio::experimental::as_tuple(asio::use_awaitable));
        if (ec) throw std::system_error(ec);
      } else {
        n = co_await ring.async_read(asio::buffer(buf), asio::use_awaitable);
      }
      if (buf.substr(0, n) != "m" + std::to_string(i)) throw std::runtime_error("out of order");
    }
  });
  CAPTURE(as_tuple, handlers);
  // At most one post per max_resumptions reads, a few for co_spawn; a post per read: 200.
  CHECK(handlers <= messages / immediate_chain::max_resumptions + 4);
}

TEST_CASE("a coroutine's waits on a set event resume it without a post each",
          "[immediate][event][async]") {
  asio::io_context io;
  scoped_name name("event");
  named_event ev(io.get_executor(), shmio::create_only, name, event_mode::manual_reset, true);
  constexpr int waits = 200;
  const std::size_t handlers = handlers_to_finish(io, [&]() -> asio::awaitable<void> {
    for (int i = 0; i < waits; ++i)
      co_await ev.async_wait(asio::use_awaitable);
  });
  CAPTURE(handlers);
  CHECK(handlers <= waits / immediate_chain::max_resumptions + 4);
}

TEST_CASE("a long run of ready waits neither grows the stack nor starves other handlers",
          "[immediate][event][async]") {
  scoped_name name("event");
  constexpr int waits = 100'000;
  int waits_done = 0;
  int done_when_other_ran = -1;
  std::size_t handlers = 0;
  bool failed = false;
  // Were each resumption nested in the initiation before it: far more than 512 KiB of stack.
  run_on_small_stack(512 * 1024, [&] {
    asio::io_context io;
    named_event ev(io.get_executor(), shmio::create_only, name, event_mode::manual_reset, true);
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          asio::post(io, [&] { done_when_other_ran = waits_done; });  // queued behind us
          for (; waits_done < waits; ++waits_done)
            co_await ev.async_wait(asio::use_awaitable);
        },
        [&](std::exception_ptr e) { failed = e != nullptr; });
    handlers = io.run_for(bound);
  });
  CHECK_FALSE(failed);
  CHECK(waits_done == waits);
  // The handler posted beside the coroutine ran long before the coroutine's last wait.
  CHECK(done_when_other_ran > 0);
  CHECK(done_when_other_ran <= immediate_chain::max_resumptions + 2);
  CHECK(handlers >= static_cast<std::size_t>(waits / (immediate_chain::max_resumptions + 1)));
}

TEST_CASE("an exception thrown after an immediate resumption leaves run(), as after a post",
          "[immediate][event][async]") {
  asio::io_context io;
  // On a strand, unlike on the io_context's own executor, Asio's dispatch lets it through.
  const bool on_strand = GENERATE(false, true);
  CAPTURE(on_strand);
  const asio::any_io_executor ex =
      on_strand ? asio::any_io_executor(asio::make_strand(io)) : io.get_executor();
  scoped_name name("event");
  std::optional<named_event> ev;
  ev.emplace(ex, shmio::create_only, name, event_mode::manual_reset, true);
  int waits_done = 0;
  asio::co_spawn(
      ex,
      [&]() -> asio::awaitable<void> {
        co_await ev->async_wait(asio::use_awaitable);  // ready: resumed at once
        co_await ev->async_wait(asio::use_awaitable);  // and again, inside the one before
        ++waits_done;
        ev.reset();  // the initiations below us belong to an object that is gone (ASan watches)
        throw std::runtime_error("from the coroutine");
      },
      [](std::exception_ptr e) {
        if (e) std::rethrow_exception(e);
      });
  CHECK_THROWS_WITH(io.run_for(bound), "from the coroutine");
  CHECK(waits_done == 1);
  io.restart();
  CHECK(io.run_for(bound) == 0);  // nothing else was left behind
}

TEST_CASE("a callback for a ready operation still runs only from run()", "[immediate][ring]") {
  asio::io_context io;
  scoped_name name("ring");
  circular_buffer ring(io.get_executor(), shmio::create_only, name, 4, 16);
  REQUIRE(ring.write(asio::buffer("ready", 5), bound) == 5);
  int calls = 0;
  std::string buf(16, '\0');
  ring.async_read(asio::buffer(buf),
                  [&](std::error_code ec, std::size_t n) { calls += !ec && n == 5; });
  CHECK(calls == 0);
  CHECK(io.run_for(bound) == 1);
  CHECK(calls == 1);
}
