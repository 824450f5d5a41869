#pragma once
// shmio::named_event — an event that processes share by name, waited on blocking or from an
// Asio executor.
//
// An auto-reset event lets exactly one wait through per set(): the first waiter takes the
// signal and the event is clear again. A manual-reset event stays set, letting every wait
// through, until reset(). As with Windows events, set() on an event that is already set does
// nothing more: sets are not counted.
//
// The event's state lives in a segment of kind object_kind::event (see shmio/segment.hpp for
// names and lifetime). set() costs one atomic exchange and one load when nobody is parked; an
// async wait parks on a doorbell that the executor's reactor watches, so a waiting coroutine
// holds no thread.

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>

#include <asio/any_io_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/awaitable.hpp>
#include <asio/execution_context.hpp>
#include <asio/use_awaitable.hpp>

#include "shmio/error.hpp"
#include "shmio/open_mode.hpp"
#include "shmio/segment.hpp"
#include "shmio/wait_strategy.hpp"

namespace shmio {

enum class event_mode {
  auto_reset,    ///< set() lets one wait through, then the event clears itself
  manual_reset,  ///< set() lets every wait through until reset()
};

class named_event {
 public:
  using executor_type = asio::any_io_executor;

  /// Creates the event `name`. Throws shmio::error (errc::already_exists, errc::no_space, ...).
  named_event(const executor_type& ex, create_only_t, std::string_view name, event_mode mode,
              bool initially_set = false, wait_strategy strategy = {});
  /// Opens the event `name`, which must have been created with `mode` (else errc::incompatible).
  named_event(const executor_type& ex, open_only_t, std::string_view name, event_mode mode,
              wait_strategy strategy = {});
  /// Opens the event `name`, or creates it (then `initially_set` applies).
  named_event(const executor_type& ex, open_or_create_t, std::string_view name, event_mode mode,
              bool initially_set = false, wait_strategy strategy = {});
  /// The same three, reporting failure through `ec` (the object is then closed).
  named_event(const executor_type& ex, create_only_t, std::string_view name, event_mode mode,
              bool initially_set, wait_strategy strategy, std::error_code& ec);
  named_event(const executor_type& ex, open_only_t, std::string_view name, event_mode mode,
              wait_strategy strategy, std::error_code& ec);
  named_event(const executor_type& ex, open_or_create_t, std::string_view name, event_mode mode,
              bool initially_set, wait_strategy strategy, std::error_code& ec);

  /// The moved-from handle is closed and keeps its executor.
  named_event(named_event&& other) noexcept;
  /// Closes this handle first (see close()).
  named_event& operator=(named_event&& other) noexcept;
  /// Pending waits complete with asio::error::operation_aborted.
  ~named_event();

  executor_type get_executor() const noexcept;
  bool is_open() const noexcept { return impl_ != nullptr; }
  /// The segment's name; kept after close(), for what a closed handle's calls report.
  const std::string& name() const noexcept;
  event_mode mode() const noexcept;

  /// Sets the event, waking the waits it lets through, in any process.
  void set() noexcept;
  /// Clears the event.
  void reset() noexcept;
  /// True if the event is set now. Takes nothing, even from an auto-reset event.
  bool is_set() const noexcept;

  /// Blocks until the event lets this wait through (true) or `timeout` passes (false).
  /// A zero timeout polls; a negative one or milliseconds::max() waits for ever.
  bool wait(std::chrono::milliseconds timeout);
  bool wait(std::chrono::milliseconds timeout, std::error_code& ec);

  /// Waits asynchronously until the event lets this wait through.
  ///
  /// Completion signature: `void(std::error_code)`. A handler never runs inside this call: a
  /// wait that can finish at once is completed as if by asio::post to the handler's executor.
  /// Waits of one handle complete in the order they were started (a cancelled one completes at
  /// once, as circular_buffer's operations do). Closing, moving or destroying the handle must
  /// not overlap another call on it.
  ///
  /// Per-operation cancellation: terminal, partial and total. A cancelled wait completes once
  /// with asio::error::operation_aborted and has taken nothing: an auto-reset signal it did not
  /// take stays for the next waiter. Closing the event aborts pending waits the same way. An
  /// auto-reset signal taken for a wait whose handler never runs (destroyed with its
  /// io_context), or that the handle's close reached first, is set again for the next waiter.
  template <class CompletionToken>
  auto async_wait(CompletionToken&& token) {
    return asio::async_initiate<CompletionToken, void(std::error_code)>(
        [](auto handler, const std::shared_ptr<impl>& im, const executor_type& ex) {
          start_wait(im, ex, std::move(handler));
        },
        token, impl_, ex_);
  }

  /// The fast form for a use_awaitable coroutine: passes at once, without a trip through the
  /// executor's scheduler, when the event lets it through now and no wait started earlier on
  /// this handle is pending; otherwise co_awaits async_wait. Errors are thrown as
  /// std::system_error. (`co_await ev.co_wait();` where `co_await ev.async_wait(use_awaitable)`
  /// would post a ready result and resume a scheduler pass later.)
  asio::awaitable<void> co_wait();

  /// Closes this handle: pending waits are aborted; the last handle on the machine removes the
  /// event's segment.
  void close() noexcept;

 private:
  struct impl;
  template <class Handler>
  static void start_wait(const std::shared_ptr<impl>& im, const executor_type& ex,
                         Handler&& handler);
  static std::shared_ptr<impl> make_impl(const executor_type& ex, segment seg, event_mode mode,
                                         wait_strategy strategy, std::error_code& ec);

  executor_type ex_;  // kept after close(): a closed handle's operations complete through it
  std::shared_ptr<impl> impl_;
  std::string closed_name_;  // name() after close(): a closed handle's errors still name it
};

}  // namespace shmio

#include "shmio/impl/named_event.hpp"
