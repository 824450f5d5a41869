#pragma once
// Operations an RPC channel keeps until they complete: a caller waiting for its reply or its
// next stream item, and a wait for an event without a value. The channel sees them through the
// two interfaces; the templates hold the user's completion handler.

#include <cstddef>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include <asio/any_io_executor.hpp>
#include <asio/associated_allocator.hpp>
#include <asio/associated_executor.hpp>
#include <asio/dispatch.hpp>
#include <asio/execution.hpp>
#include <asio/experimental/append.hpp>
#include <asio/post.hpp>
#include <asio/prefer.hpp>
#include <asio/use_awaitable.hpp>

#include "shmio/bytes.hpp"
#include "shmio/detail/handler_wait_op.hpp"
#include "shmio/detail/op_memory.hpp"
#include "shmio/detail/op_queue.hpp"
#include "shmio/rpc_error.hpp"

namespace shmio::detail {

/// A reply (or stream item, or error text) as it reaches its caller: bytes seen where they are
/// (a message of one packet, still in the channel's packet buffer; valid during the completion
/// call only), or a vector the caller may take.
struct reply_bytes {
  std::span<const std::byte> view;
  std::vector<std::byte>* owned = nullptr;  // if set, `view` is its contents

  reply_bytes() = default;
  reply_bytes(std::span<const std::byte> v) noexcept : view(v) {}  // NOLINT: implicit on purpose
  static reply_bytes of(std::vector<std::byte>& v) noexcept {
    reply_bytes r(v);
    r.owned = &v;
    return r;
  }
  /// The bytes as a vector of their own: moved if owned, else copied.
  std::vector<std::byte> take() const {
    return owned ? std::move(*owned) : std::vector<std::byte>(view.begin(), view.end());
  }
};

/// Destroys an operation through its own allocator (the one its handler is associated with).
struct pending_delete {
  template <class Op>
  void operator()(Op* op) const noexcept {
    op->destroy();
  }
};

/// A caller waiting for its reply (or a stream's reader for its next item); completes once.
/// complete() frees the operation (its memory goes back before the handler runs, as Asio's
/// operations do): call it on a released pointer, complete(std::move(p), ...).
struct pending_call {
  /// `may_dispatch`: we run on an executor thread outside any initiating function, so the
  /// handler may run here if its executor allows (saves a trip through the scheduler).
  virtual void complete(std::error_code ec, reply_bytes reply, bool may_dispatch) = 0;
  /// complete(), with `ticket` punched just before the upcall: a stream's reads (see
  /// ordered_delivery). Others punch it at once.
  virtual void complete_counted(delivery_ticket ticket, std::error_code ec, reply_bytes reply,
                                bool may_dispatch) {
    ticket.punch();
    complete(ec, reply, may_dispatch);
  }
  virtual void destroy() noexcept = 0;

 protected:
  ~pending_call() = default;
};
using pending_call_ptr = std::unique_ptr<pending_call, pending_delete>;

/// Waits for an event without a value (connected, the other end gone, room for a stream item);
/// completes once, freeing itself as pending_call does.
struct pending_signal {
  /// `may_dispatch`: as for pending_call.
  virtual void complete(std::error_code ec, bool may_dispatch) = 0;
  /// complete(), with `ticket` punched just before the upcall (see pending_call).
  virtual void complete_counted(delivery_ticket ticket, std::error_code ec, bool may_dispatch) {
    ticket.punch();
    complete(ec, may_dispatch);
  }
  virtual void destroy() noexcept = 0;

 protected:
  ~pending_signal() = default;
};
using pending_signal_ptr = std::unique_ptr<pending_signal, pending_delete>;

/// A stream's reader taking every item that is there, up to a count (async_read_batch);
/// completes once, freeing itself as pending_call does.
struct pending_items {
  /// `may_dispatch`: as for pending_call.
  virtual void complete(std::error_code ec, std::vector<std::vector<std::byte>> items,
                        bool may_dispatch) = 0;
  /// complete(), with `ticket` punched just before the upcall (see pending_call).
  virtual void complete_counted(delivery_ticket ticket, std::error_code ec,
                                std::vector<std::vector<std::byte>> items, bool may_dispatch) = 0;
  virtual void destroy() noexcept = 0;

 protected:
  ~pending_items() = default;
};
using pending_items_ptr = std::unique_ptr<pending_items, pending_delete>;

/// Completes `op`, which frees itself before its handler runs.
inline void complete(pending_call_ptr op, std::error_code ec, reply_bytes reply,
                     bool may_dispatch) {
  op.release()->complete(ec, reply, may_dispatch);
}
inline void complete(pending_signal_ptr op, std::error_code ec, bool may_dispatch) {
  op.release()->complete(ec, may_dispatch);
}
inline void complete_counted(pending_signal_ptr op, delivery_ticket ticket, std::error_code ec,
                             bool may_dispatch) {
  op.release()->complete_counted(std::move(ticket), ec, may_dispatch);
}
inline void complete(pending_items_ptr op, std::error_code ec,
                     std::vector<std::vector<std::byte>> items, bool may_dispatch) {
  op.release()->complete(ec, std::move(items), may_dispatch);
}
/// complete(), with `ticket` punched just before the handler is called.
inline void complete_counted(pending_call_ptr op, delivery_ticket ticket, std::error_code ec,
                             reply_bytes reply, bool may_dispatch) {
  op.release()->complete_counted(std::move(ticket), ec, reply, may_dispatch);
}
inline void complete_counted(pending_items_ptr op, delivery_ticket ticket, std::error_code ec,
                             std::vector<std::vector<std::byte>> items, bool may_dispatch) {
  op.release()->complete_counted(std::move(ticket), ec, std::move(items), may_dispatch);
}

/// Memory for an operation `Op` holding a `Handler`: from the handler's associated allocator,
/// and by default from op_memory (blocks cached per thread), so that a steady flow of calls
/// allocates nothing.
template <class Op, class Handler>
struct handler_memory {
  using alloc_type = typename std::allocator_traits<
      asio::associated_allocator_t<Handler, op_allocator<void>>>::template rebind_alloc<Op>;

  /// Makes an `Op` from the handler and `args`.
  template <class... Args>
  static std::unique_ptr<Op, pending_delete> make(Handler h, Args&&... args) {
    alloc_type alloc(asio::get_associated_allocator(h, op_allocator<void>()));
    Op* p = std::allocator_traits<alloc_type>::allocate(alloc, 1);
    try {
      return std::unique_ptr<Op, pending_delete>(
          new (p) Op(alloc, std::move(h), std::forward<Args>(args)...));
    } catch (...) {
      std::allocator_traits<alloc_type>::deallocate(alloc, p, 1);
      throw;
    }
  }
  /// Destroys `op` and gives its memory back.
  static void free(Op* op) noexcept {
    alloc_type alloc(std::move(op->alloc_));
    op->~Op();
    std::allocator_traits<alloc_type>::deallocate(alloc, op, 1);
  }
};

/// Makes the operation `Op<Handler>` for `handler`: see handler_memory.
template <template <class> class Op, class Handler, class... Args>
std::unique_ptr<Op<Handler>, pending_delete> make_pending(Handler handler, Args&&... args) {
  return handler_memory<Op<Handler>, Handler>::make(std::move(handler),
                                                    std::forward<Args>(args)...);
}

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
    deliver_as(std::move(handler_), may_dispatch, std::forward<Args>(args)...);
  }
  /// deliver(), with `ticket` punched just before the upcall (counted_handler).
  template <class... Args>
  void deliver_counted(delivery_ticket ticket, bool may_dispatch, Args&&... args) {
    deliver_as(counted_handler<Handler>(std::move(handler_), std::move(ticket)), may_dispatch,
               std::forward<Args>(args)...);
  }
  /// deliver(), with two tickets punched just before the upcall, `second` first.
  template <class... Args>
  void deliver_counted(delivery_ticket first, delivery_ticket second, bool may_dispatch,
                       Args&&... args) {
    deliver_as(
        counted_handler<counted_handler<Handler>>(
            counted_handler<Handler>(std::move(handler_), std::move(first)), std::move(second)),
        may_dispatch, std::forward<Args>(args)...);
  }

 private:
  template <class H, class... Args>
  void deliver_as(H h, bool may_dispatch, Args&&... args) {
    auto work = std::move(work_);
    auto bound = asio::experimental::append(std::move(h), std::forward<Args>(args)...);
    if (may_dispatch)
      asio::dispatch(work, std::move(bound));
    else
      asio::post(work, std::move(bound));
  }

  Handler handler_;
  work_type work_;
};

/// What the operations below share: the handler, kept with work counted on its executor, in
/// memory from its allocator, which goes back before the handler runs.
template <class Op, class Handler>
class pending_handler {
 public:
  using memory = handler_memory<Op, Handler>;
  pending_handler(typename memory::alloc_type alloc, Handler h, const asio::any_io_executor& ex)
      : alloc_(std::move(alloc)), handler_(std::move(h), ex) {}

  typename memory::alloc_type alloc_;  // taken back by memory::free

 protected:
  /// Frees the operation, then calls the handler with `args` (none of them may point into it).
  template <class... Args>
  void finish(bool may_dispatch, Args&&... args) {
    auto h = std::move(handler_);
    memory::free(static_cast<Op*>(this));
    h.deliver(may_dispatch, std::forward<Args>(args)...);
  }
  /// finish(), with `ticket` punched just before the upcall.
  template <class... Args>
  void finish_counted(delivery_ticket ticket, bool may_dispatch, Args&&... args) {
    auto h = std::move(handler_);
    memory::free(static_cast<Op*>(this));
    h.deliver_counted(std::move(ticket), may_dispatch, std::forward<Args>(args)...);
  }
  /// finish(), with two tickets punched just before the upcall.
  template <class... Args>
  void finish_counted(delivery_ticket first, delivery_ticket second, bool may_dispatch,
                      Args&&... args) {
    auto h = std::move(handler_);
    memory::free(static_cast<Op*>(this));
    h.deliver_counted(std::move(first), std::move(second), may_dispatch,
                      std::forward<Args>(args)...);
  }
  void free() noexcept { memory::free(static_cast<Op*>(this)); }

 private:
  tracked_handler<Handler> handler_;
};

/// A caller's completion handler, kept until its reply comes.
template <class Handler>
class rpc_call final : public pending_call, public pending_handler<rpc_call<Handler>, Handler> {
 public:
  using pending_handler<rpc_call, Handler>::pending_handler;
  void complete(std::error_code ec, reply_bytes reply, bool may_dispatch) override {
    this->finish(may_dispatch, ec, reply.take());
  }
  void complete_counted(delivery_ticket ticket, std::error_code ec, reply_bytes reply,
                        bool may_dispatch) override {
    this->finish_counted(std::move(ticket), may_dispatch, ec, reply.take());
  }
  void destroy() noexcept override { this->free(); }
};

class rpc_channel;
/// The channel's name, for the rpc_error its callers' failures throw.
const std::string& channel_name(const rpc_channel& ch) noexcept;

/// A caller's completion handler of the signature `void(std::exception_ptr, reply)`: what
/// use_awaitable gets, so that a failure throws rpc_error with the other end's text (the
/// error_code form would throw a std::system_error without it). For a call's reply and for a
/// stream's next item alike.
template <class Handler>
class rpc_throwing_call final : public pending_call,
                                public pending_handler<rpc_throwing_call<Handler>, Handler> {
 public:
  rpc_throwing_call(typename rpc_throwing_call::memory::alloc_type alloc, Handler h,
                    const asio::any_io_executor& ex, const rpc_channel* ch)
      : pending_handler<rpc_throwing_call, Handler>(std::move(alloc), std::move(h), ex),
        channel_(ch) {}
  void destroy() noexcept override { this->free(); }
  void complete(std::error_code ec, reply_bytes reply, bool may_dispatch) override {
    if (!ec) return this->finish(may_dispatch, std::exception_ptr(), reply.take());
    // The channel completes its calls while it lives: its name is still there.
    auto e = std::make_exception_ptr(rpc_error(ec, channel_name(*channel_), to_string(reply.view)));
    this->finish(may_dispatch, std::move(e), std::vector<std::byte>());
  }
  void complete_counted(delivery_ticket ticket, std::error_code ec, reply_bytes reply,
                        bool may_dispatch) override {
    if (!ec)
      return this->finish_counted(std::move(ticket), may_dispatch, std::exception_ptr(),
                                  reply.take());
    auto e = std::make_exception_ptr(rpc_error(ec, channel_name(*channel_), to_string(reply.view)));
    this->finish_counted(std::move(ticket), may_dispatch, std::move(e), std::vector<std::byte>());
  }

 private:
  const rpc_channel* channel_;
};

/// True for asio::use_awaitable itself: the one token whose operations complete with an
/// exception_ptr (rpc_throwing_call) rather than an error_code.
template <class T>
struct use_awaitable_token : std::false_type {};
template <class Executor>
struct use_awaitable_token<asio::use_awaitable_t<Executor>> : std::true_type {};

/// Completes an operation that could not start (its object closed, not open or moved from, or
/// an argument out of range) as any other completion: posted to the handler's associated
/// executor (`ex` by default), never inside the initiating function. A throwing handler
/// (`Throwing`: it takes an exception_ptr) gets rpc_error(ec, channel, {}); `values` follow.
template <bool Throwing, class Handler, class Executor, class... Values>
void post_refusal(Handler handler, const Executor& ex, std::error_code ec, std::string_view channel,
                  Values&&... values) {
  auto hex = asio::get_associated_executor(handler, ex);
  if constexpr (Throwing)
    asio::post(hex, asio::experimental::append(std::move(handler),
                                               std::make_exception_ptr(rpc_error(ec, channel, {})),
                                               std::forward<Values>(values)...));
  else
    asio::post(hex,
               asio::experimental::append(std::move(handler), ec, std::forward<Values>(values)...));
}

/// A stream reader's completion handler, kept until items (or the end) come.
template <class Handler>
class rpc_items final : public pending_items, public pending_handler<rpc_items<Handler>, Handler> {
 public:
  using pending_handler<rpc_items, Handler>::pending_handler;
  void complete(std::error_code ec, std::vector<std::vector<std::byte>> items,
                bool may_dispatch) override {
    this->finish(may_dispatch, ec, std::move(items));
  }
  void complete_counted(delivery_ticket ticket, std::error_code ec,
                        std::vector<std::vector<std::byte>> items, bool may_dispatch) override {
    this->finish_counted(std::move(ticket), may_dispatch, ec, std::move(items));
  }
  void destroy() noexcept override { this->free(); }
};

/// rpc_items for use_awaitable (`void(std::exception_ptr, items)`), as rpc_throwing_call is for
/// rpc_call: a batch that ends the stream with an error gets that error's text as its only item,
/// which goes into the rpc_error it throws instead.
template <class Handler>
class rpc_throwing_items final : public pending_items,
                                 public pending_handler<rpc_throwing_items<Handler>, Handler> {
 public:
  rpc_throwing_items(typename rpc_throwing_items::memory::alloc_type alloc, Handler h,
                     const asio::any_io_executor& ex, const rpc_channel* ch)
      : pending_handler<rpc_throwing_items, Handler>(std::move(alloc), std::move(h), ex),
        channel_(ch) {}
  void complete(std::error_code ec, std::vector<std::vector<std::byte>> items,
                bool may_dispatch) override {
    complete_counted({}, ec, std::move(items), may_dispatch);
  }
  void complete_counted(delivery_ticket ticket, std::error_code ec,
                        std::vector<std::vector<std::byte>> items, bool may_dispatch) override {
    if (!ec)
      return this->finish_counted(std::move(ticket), may_dispatch, std::exception_ptr(),
                                  std::move(items));
    auto e = std::make_exception_ptr(rpc_error(
        ec, channel_name(*channel_), items.empty() ? std::string() : to_string(items[0])));
    this->finish_counted(std::move(ticket), may_dispatch, std::move(e),
                         std::vector<std::vector<std::byte>>());
  }
  void destroy() noexcept override { this->free(); }

 private:
  const rpc_channel* channel_;
};

/// A handler waiting for an event without a value.
template <class Handler>
class rpc_signal final : public pending_signal,
                         public pending_handler<rpc_signal<Handler>, Handler> {
 public:
  using pending_handler<rpc_signal, Handler>::pending_handler;
  void complete(std::error_code ec, bool may_dispatch) override { this->finish(may_dispatch, ec); }
  void destroy() noexcept override { this->free(); }
};

/// A stream handler's write: a signal whose ticket counts it from its start until its handler
/// is reached, so that the fast form co_write never completes ahead of it.
template <class Handler>
class rpc_write_signal final : public pending_signal,
                               public pending_handler<rpc_write_signal<Handler>, Handler> {
  using base = pending_handler<rpc_write_signal, Handler>;

 public:
  rpc_write_signal(typename base::memory::alloc_type alloc, Handler h,
                   const asio::any_io_executor& ex, delivery_ticket ticket)
      : base(std::move(alloc), std::move(h), ex), ticket_(std::move(ticket)) {}
  void complete(std::error_code ec, bool may_dispatch) override {
    this->finish_counted(std::move(ticket_), may_dispatch, ec);  // moved out before the free
  }
  void complete_counted(delivery_ticket ticket, std::error_code ec, bool may_dispatch) override {
    this->finish_counted(std::move(ticket_), std::move(ticket), may_dispatch, ec);
  }
  void destroy() noexcept override { this->free(); }

 private:
  delivery_ticket ticket_;  // punched by its destructor too, if the write never completes
};

}  // namespace shmio::detail
