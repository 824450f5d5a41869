#pragma once
// The template part of broadcast_buffer; included by shmio/broadcast_buffer.hpp.

#include <limits>
#include <optional>

#include "shmio/detail/broadcast_ring.hpp"
#include "shmio/detail/in_place.hpp"
#include "shmio/detail/ring_ops.hpp"
#include "shmio/detail/waiter.hpp"

namespace shmio {

struct broadcast_buffer::impl {
  segment seg;
  broadcast_role role = broadcast_role::publisher;
  detail::broadcast_geometry geometry;
  std::unique_ptr<detail::broadcast_publisher> publisher;    // role publisher
  std::unique_ptr<detail::broadcast_subscriber> subscriber;  // role subscriber
  std::shared_ptr<detail::waiter> waiter;  // one queue: readers or writers, by role

  ~impl() {
    if (waiter) waiter->shutdown();  // abort operations before the memory they use goes
    if (subscriber) subscriber->leave();
  }

  static constexpr std::size_t queue = 0;

  using held_write = detail::held_claim<detail::broadcast_publisher, detail::broadcast_write>;
  using held_read = detail::held_claim<detail::broadcast_subscriber, detail::broadcast_read>;
  using begin_write_status = detail::broadcast_publisher::begin_status;
  using begin_read_status = detail::broadcast_subscriber::begin_status;

  static void abandon(detail::broadcast_publisher& p, const detail::broadcast_write& w) noexcept {
    p.abandon_write(w);  // nothing half-written is ever published
  }
  static void finish(detail::broadcast_subscriber& s, const detail::broadcast_read& r) noexcept {
    s.finish_read(r);  // a message whose reader went away unrun counts as read
  }

  // The claim-only attempts of the in-place forms: no user code runs in them.
  static auto claim_write(const std::shared_ptr<impl>& im) {
    return [im]() -> std::optional<detail::outcome<held_write>> {
      detail::broadcast_write w;
      std::error_code ec;
      switch (im->publisher->begin_write(w, ec)) {
        case begin_write_status::ready:
          return detail::outcome<held_write>{
              {}, held_write(im, *im->publisher, w, &abandon, *im->waiter, queue)};
        case begin_write_status::failed:
          return detail::outcome<held_write>{ec, {}};
        default:
          return std::nullopt;
      }
    };
  }
  static auto claim_read(const std::shared_ptr<impl>& im) {
    return [im]() -> std::optional<detail::outcome<held_read>> {
      detail::broadcast_read r;
      detail::outcome<std::size_t> failure;
      switch (im->subscriber->begin_read(r, std::numeric_limits<std::size_t>::max(), failure)) {
        case begin_read_status::ready:
          return detail::outcome<held_read>{
              {}, held_read(im, *im->subscriber, r, &finish, *im->waiter, queue)};
        case begin_read_status::failed:
          return detail::outcome<held_read>{failure.ec, held_read(failure.value)};
        default:
          return std::nullopt;
      }
    };
  }

  // An in-place operation: `claim` takes the slot or message, `work` runs the user's callback
  // on it in the handler's context (in_place.hpp).
  template <class Held, class Claim, class Work, class Handler>
  static void start_in_place(const std::shared_ptr<impl>& im, const executor_type& io_ex,
                             broadcast_role needed, Claim (*claim)(const std::shared_ptr<impl>&),
                             Work work, Handler&& handler) {
    if (!im || im->waiter->closed())
      return detail::post_result<std::size_t>(std::move(handler), io_ex,
                                              {asio::error::bad_descriptor, 0});
    if (im->role != needed) return refuse_in_turn(im, io_ex, std::forward<Handler>(handler));
    im->waiter->template async_wait<Held>(
        io_ex, queue, claim(im),
        detail::make_in_place_handler(std::forward<Handler>(handler), std::move(work)));
  }

  static std::error_code wrong_role() noexcept {
    return std::make_error_code(std::errc::operation_not_supported);
  }

  template <class Attempt, class Handler>
  static void start(const std::shared_ptr<impl>& im, const executor_type& io_ex,
                    broadcast_role needed, Attempt&& attempt, Handler&& handler) {
    if (!im || im->waiter->closed())  // closed: the handle's executor
      return detail::post_result<std::size_t>(std::move(handler), io_ex,
                                              {asio::error::bad_descriptor, 0});
    if (im->role != needed) return refuse_in_turn(im, io_ex, std::forward<Handler>(handler));
    im->waiter->template async_wait<std::size_t>(io_ex, queue, detail::catching(std::move(attempt)),
                                                 std::forward<Handler>(handler));
  }

  // An operation of the other role fails in its turn, after the handle's operations started
  // before it, as one too large does.
  template <class Handler>
  static void refuse_in_turn(const std::shared_ptr<impl>& im, const executor_type& io_ex,
                             Handler&& handler) {
    im->waiter->template async_wait<std::size_t>(
        io_ex, queue,
        []() -> std::optional<detail::outcome<std::size_t>> {
          return detail::outcome<std::size_t>{wrong_role(), 0};
        },
        std::forward<Handler>(handler));
  }

  // A blocking call in `needed` role; `attempt` runs until it yields or the timeout passes.
  template <class Attempt>
  std::size_t blocking(broadcast_role needed, Attempt attempt, std::chrono::milliseconds timeout,
                       std::error_code& ec) {
    if (role != needed) return ec = wrong_role(), 0;
    auto r = waiter->wait(queue, attempt, detail::wait_limit(timeout));
    if (r && r->ec) {  // errors that carry a size (messages lost, message length) keep it
      ec = r->ec;
      return r->value;
    }
    return detail::finish_blocking(r, ec);
  }
};

template <class Fill>
std::size_t broadcast_buffer::write_in_place(Fill&& fill, std::chrono::milliseconds timeout,
                                             std::error_code& ec) {
  if (!impl_) return ec = asio::error::bad_descriptor, 0;
  // Held for the call: the user's callback may close the handle.
  const std::shared_ptr<impl> keep = impl_;
  impl& im = *keep;
  return im.blocking(
      broadcast_role::publisher, [&] { return im.publisher->attempt_write(fill); }, timeout, ec);
}

template <class Fill>
std::size_t broadcast_buffer::write_in_place(Fill&& fill, std::chrono::milliseconds timeout) {
  // Its segment's name, for the error, outlives the call: the callback may close or destroy
  // this handle.
  const std::shared_ptr<impl> keep = impl_;
  std::error_code ec;
  const std::size_t n = write_in_place(std::forward<Fill>(fill), timeout, ec);
  return detail::size_or_throw(n, ec, "write to broadcast buffer",
                               keep ? std::string_view(keep->seg.name()) : std::string_view());
}

template <class Use>
std::size_t broadcast_buffer::read_in_place(Use&& use, std::chrono::milliseconds timeout,
                                            std::error_code& ec) {
  if (!impl_) return ec = asio::error::bad_descriptor, 0;
  // Held for the call: the user's callback may close the handle.
  const std::shared_ptr<impl> keep = impl_;
  impl& im = *keep;
  return im.blocking(
      broadcast_role::subscriber,
      [&] { return im.subscriber->attempt_read(use, std::numeric_limits<std::size_t>::max()); },
      timeout, ec);
}

template <class Use>
std::size_t broadcast_buffer::read_in_place(Use&& use, std::chrono::milliseconds timeout) {
  // Its segment's name, for the error, outlives the call: the callback may close or destroy
  // this handle.
  const std::shared_ptr<impl> keep = impl_;
  std::error_code ec;
  const std::size_t n = read_in_place(std::forward<Use>(use), timeout, ec);
  return detail::size_or_throw(n, ec, "read from broadcast buffer",
                               keep ? std::string_view(keep->seg.name()) : std::string_view());
}

template <class CompletionToken>
auto broadcast_buffer::async_write(asio::const_buffer message, CompletionToken&& token) {
  return asio::async_initiate<CompletionToken, void(std::error_code, std::size_t)>(
      [](auto handler, const std::shared_ptr<impl>& im, const executor_type& ex,
         asio::const_buffer msg) {
        // A message too large is refused in its turn: its completion must not overtake a
        // write started before it that still waits.
        impl* raw = im.get();
        impl::start(
            im, ex, broadcast_role::publisher,
            [raw, msg]() -> detail::size_outcome {
              if (msg.size() > raw->geometry.message_size())
                return detail::outcome<std::size_t>{errc::message_too_large, 0};
              auto copy = [msg](std::span<std::byte> slot) {
                detail::copy_bytes(slot.data(), msg.data(), msg.size());
                return msg.size();
              };
              return raw->publisher->attempt_write(copy);
            },
            std::move(handler));
      },
      token, impl_, ex_, message);
}

template <class Fill, class CompletionToken>
auto broadcast_buffer::async_write_in_place(Fill fill, CompletionToken&& token) {
  return asio::async_initiate<CompletionToken, void(std::error_code, std::size_t)>(
      [](auto handler, const std::shared_ptr<impl>& im, const executor_type& ex, Fill f) {
        // A slot whose `fill` throws or overruns is abandoned: nothing is published.
        auto work = detail::in_place_write_work(
            std::move(f), [](detail::broadcast_publisher& p, const detail::broadcast_write& w,
                             std::size_t n) { p.commit_write(w, n); });
        impl::start_in_place<impl::held_write>(im, ex, broadcast_role::publisher,
                                               &impl::claim_write, std::move(work),
                                               std::move(handler));
      },
      token, impl_, ex_, std::move(fill));
}

template <class CompletionToken>
auto broadcast_buffer::async_read(asio::mutable_buffer buffer, CompletionToken&& token) {
  return asio::async_initiate<CompletionToken, void(std::error_code, std::size_t)>(
      [](auto handler, const std::shared_ptr<impl>& im, const executor_type& ex,
         asio::mutable_buffer buf) {
        impl* raw = im.get();
        impl::start(
            im, ex, broadcast_role::subscriber,
            [raw, buf] {
              auto copy = [buf](std::span<const std::byte> msg) {
                detail::copy_bytes(buf.data(), msg.data(), msg.size());
              };
              return raw->subscriber->attempt_read(copy, buf.size());
            },
            std::move(handler));
      },
      token, impl_, ex_, buffer);
}

template <class Use, class CompletionToken>
auto broadcast_buffer::async_read_in_place(Use use, CompletionToken&& token) {
  return asio::async_initiate<CompletionToken, void(std::error_code, std::size_t)>(
      [](auto handler, const std::shared_ptr<impl>& im, const executor_type& ex, Use u) {
        auto work = [u = std::move(u)](impl::held_read& h) mutable -> detail::outcome<std::size_t> {
          bool threw = false;
          try {
            u(h.claim().data);
          } catch (...) {
            threw = true;  // the message counts as read, as in read_in_place
          }
          const detail::outcome<std::size_t> r = h.view().finish_read(h.claim());
          h.consumed();
          if (threw && !r.ec) return {errc::callback_failed, 0};
          return r;  // overtaken while `use` ran: what it saw may be torn, and is reported so
        };
        impl::start_in_place<impl::held_read>(im, ex, broadcast_role::subscriber, &impl::claim_read,
                                              std::move(work), std::move(handler));
      },
      token, impl_, ex_, std::move(use));
}

}  // namespace shmio
