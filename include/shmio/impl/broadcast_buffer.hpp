#pragma once
// The template part of broadcast_buffer; included by shmio/broadcast_buffer.hpp.

#include <limits>
#include <optional>

#include "shmio/detail/broadcast_ring.hpp"
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

  static std::error_code wrong_role() noexcept {
    return std::make_error_code(std::errc::operation_not_supported);
  }

  template <class Attempt, class Handler>
  static void start(const std::shared_ptr<impl>& im, const executor_type& io_ex,
                    broadcast_role needed, Attempt&& attempt, Handler&& handler) {
    if (!im || im->role != needed) {  // closed: still through the handle's executor
      auto ex = im ? im->waiter->get_executor() : asio::get_associated_executor(handler, io_ex);
      const std::error_code ec = im ? wrong_role() : asio::error::bad_descriptor;
      return detail::deliver<std::size_t>(std::move(handler), ex, {ec, 0}, false);
    }
    im->waiter->template async_wait<std::size_t>(queue, detail::catching(std::move(attempt)),
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
  impl& im = *impl_;
  return im.blocking(
      broadcast_role::publisher, [&] { return im.publisher->attempt_write(fill); }, timeout, ec);
}

template <class Fill>
std::size_t broadcast_buffer::write_in_place(Fill&& fill, std::chrono::milliseconds timeout) {
  std::error_code ec;
  const std::size_t n = write_in_place(std::forward<Fill>(fill), timeout, ec);
  return detail::size_or_throw(n, ec, "write to broadcast buffer", name());
}

template <class Use>
std::size_t broadcast_buffer::read_in_place(Use&& use, std::chrono::milliseconds timeout,
                                            std::error_code& ec) {
  if (!impl_) return ec = asio::error::bad_descriptor, 0;
  impl& im = *impl_;
  return im.blocking(
      broadcast_role::subscriber,
      [&] { return im.subscriber->attempt_read(use, std::numeric_limits<std::size_t>::max()); },
      timeout, ec);
}

template <class Use>
std::size_t broadcast_buffer::read_in_place(Use&& use, std::chrono::milliseconds timeout) {
  std::error_code ec;
  const std::size_t n = read_in_place(std::forward<Use>(use), timeout, ec);
  return detail::size_or_throw(n, ec, "read from broadcast buffer", name());
}

template <class CompletionToken>
auto broadcast_buffer::async_write(asio::const_buffer message, CompletionToken&& token) {
  return asio::async_initiate<CompletionToken, void(std::error_code, std::size_t)>(
      [](auto handler, const std::shared_ptr<impl>& im, const executor_type& ex,
         asio::const_buffer msg) {
        if (im && im->role == broadcast_role::publisher &&
            msg.size() > im->geometry.message_size()) {
          return detail::deliver<std::size_t>(std::move(handler), im->waiter->get_executor(),
                                              {errc::message_too_large, 0}, false);
        }
        impl* raw = im.get();
        impl::start(
            im, ex, broadcast_role::publisher,
            [raw, msg] {
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
        impl* raw = im.get();
        impl::start(
            im, ex, broadcast_role::publisher,
            [raw, f = std::move(f)]() mutable { return raw->publisher->attempt_write(f); },
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
        impl* raw = im.get();
        impl::start(
            im, ex, broadcast_role::subscriber,
            [raw, u = std::move(u)]() mutable {
              return raw->subscriber->attempt_read(u, std::numeric_limits<std::size_t>::max());
            },
            std::move(handler));
      },
      token, impl_, ex_, std::move(use));
}

}  // namespace shmio
