#pragma once
// Operations an RPC channel keeps until they complete: a caller waiting for its reply or its
// next stream item, and a wait for an event without a value. The channel sees them through the
// two interfaces; the templates hold the user's completion handler.

#include <cstddef>
#include <memory>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include <asio/any_io_executor.hpp>
#include <asio/associated_executor.hpp>
#include <asio/dispatch.hpp>
#include <asio/execution.hpp>
#include <asio/experimental/append.hpp>
#include <asio/post.hpp>
#include <asio/prefer.hpp>

namespace shmio::detail {

/// A caller waiting for its reply (or a stream's reader for its next item); completes once.
struct pending_call {
  virtual ~pending_call() = default;
  /// `may_dispatch`: we run on an executor thread outside any initiating function, so the
  /// handler may run here if its executor allows (saves a trip through the scheduler).
  virtual void complete(std::error_code ec, std::vector<std::byte> reply, bool may_dispatch) = 0;
};

/// Waits for an event without a value (connected, the other end gone, room for a stream item);
/// completes once.
struct pending_signal {
  virtual ~pending_signal() = default;
  /// `may_dispatch`: as for pending_call.
  virtual void complete(std::error_code ec, bool may_dispatch) = 0;
};

/// A completion handler kept until its one completion, with work tracked on its associated
/// executor meanwhile (so that io_context::run() does not return under it).
template <class Handler>
class tracked_handler {
  using work_type = std::decay_t<
      typename asio::prefer_result<asio::associated_executor_t<Handler, asio::any_io_executor>,
                                   asio::execution::outstanding_work_t::tracked_t>::type>;

 public:
  tracked_handler(Handler h, const asio::any_io_executor& ex)
      : handler_(std::move(h)),
        work_(asio::prefer(asio::get_associated_executor(handler_, ex),
                           asio::execution::outstanding_work.tracked)) {}

  /// `may_dispatch`: see pending_call::complete.
  template <class... Args>
  void deliver(bool may_dispatch, Args&&... args) {
    auto work = std::move(work_);
    auto bound = asio::experimental::append(std::move(handler_), std::forward<Args>(args)...);
    if (may_dispatch)
      asio::dispatch(work, std::move(bound));
    else
      asio::post(work, std::move(bound));
  }

 private:
  Handler handler_;
  work_type work_;
};

/// A caller's completion handler, kept until its reply comes.
template <class Handler>
class rpc_call final : public pending_call {
 public:
  rpc_call(Handler h, const asio::any_io_executor& ex) : handler_(std::move(h), ex) {}
  void complete(std::error_code ec, std::vector<std::byte> reply, bool may_dispatch) override {
    handler_.deliver(may_dispatch, ec, std::move(reply));
  }

 private:
  tracked_handler<Handler> handler_;
};

/// A handler waiting for an event without a value.
template <class Handler>
class rpc_signal final : public pending_signal {
 public:
  rpc_signal(Handler h, const asio::any_io_executor& ex) : handler_(std::move(h), ex) {}
  void complete(std::error_code ec, bool may_dispatch) override {
    handler_.deliver(may_dispatch, ec);
  }

 private:
  tracked_handler<Handler> handler_;
};

}  // namespace shmio::detail
