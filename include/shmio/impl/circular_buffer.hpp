#pragma once
// The template part of circular_buffer; included by shmio/circular_buffer.hpp.

#include <cstring>
#include <limits>

#include "shmio/detail/ring_ops.hpp"
#include "shmio/detail/waiter.hpp"

namespace shmio {

struct circular_buffer::impl {
  segment seg;
  detail::ring_view ring;
  std::shared_ptr<detail::waiter> waiter;

  ~impl() {
    if (waiter) waiter->shutdown();  // abort operations before the memory they use goes
  }

  template <class Attempt, class Handler>
  static void start(const std::shared_ptr<impl>& im, const executor_type& io_ex, std::size_t queue,
                    Attempt&& attempt, Handler&& handler) {
    if (!im) {  // closed: still through the executor the handle was made with
      auto ex = asio::get_associated_executor(handler, io_ex);
      return detail::deliver<std::size_t>(std::move(handler), ex, {asio::error::bad_descriptor, 0},
                                          false);
    }
    im->waiter->template async_wait<std::size_t>(queue, detail::catching(std::move(attempt)),
                                                 std::forward<Handler>(handler));
  }
};

template <class Fill>
std::size_t circular_buffer::write_in_place(Fill&& fill, std::chrono::milliseconds timeout,
                                            std::error_code& ec) {
  if (!impl_) return ec = asio::error::bad_descriptor, 0;
  impl& im = *impl_;
  auto r = im.waiter->wait(
      detail::writers_queue, [&] { return detail::attempt_write(im.ring, fill); },
      detail::wait_limit(timeout));
  return detail::finish_blocking(r, ec);
}

template <class Fill>
std::size_t circular_buffer::write_in_place(Fill&& fill, std::chrono::milliseconds timeout) {
  std::error_code ec;
  const std::size_t n = write_in_place(std::forward<Fill>(fill), timeout, ec);
  return detail::size_or_throw(n, ec, "write to circular buffer", name());
}

template <class Use>
std::size_t circular_buffer::read_in_place(Use&& use, std::chrono::milliseconds timeout,
                                           std::error_code& ec) {
  if (!impl_) return ec = asio::error::bad_descriptor, 0;
  impl& im = *impl_;
  auto r = im.waiter->wait(
      detail::readers_queue,
      [&] { return detail::attempt_read(im.ring, use, std::numeric_limits<std::size_t>::max()); },
      detail::wait_limit(timeout));
  return detail::finish_blocking(r, ec);
}

template <class Use>
std::size_t circular_buffer::read_in_place(Use&& use, std::chrono::milliseconds timeout) {
  std::error_code ec;
  const std::size_t n = read_in_place(std::forward<Use>(use), timeout, ec);
  return detail::size_or_throw(n, ec, "read from circular buffer", name());
}

template <class Use>
std::size_t circular_buffer::read_batch_in_place(Use&& use, std::size_t max_messages,
                                                 std::chrono::milliseconds timeout,
                                                 std::error_code& ec) {
  if (!impl_) return ec = asio::error::bad_descriptor, 0;
  impl& im = *impl_;
  std::size_t done = 0;
  auto r = im.waiter->wait(
      detail::readers_queue,
      [&] { return detail::attempt_read_batch_in_place(im.ring, max_messages, use, done); },
      detail::wait_limit(timeout));
  return detail::finish_blocking(r, ec);
}

template <class Use>
std::size_t circular_buffer::read_batch_in_place(Use&& use, std::size_t max_messages,
                                                 std::chrono::milliseconds timeout) {
  std::error_code ec;
  const std::size_t n = read_batch_in_place(std::forward<Use>(use), max_messages, timeout, ec);
  return detail::size_or_throw(n, ec, "read from circular buffer", name());
}

template <class CompletionToken>
auto circular_buffer::async_write(asio::const_buffer message, CompletionToken&& token) {
  return asio::async_initiate<CompletionToken, void(std::error_code, std::size_t)>(
      [](auto handler, const std::shared_ptr<impl>& im, const executor_type& ex,
         asio::const_buffer msg) {
        if (im && msg.size() > im->ring.node_size()) {
          return detail::deliver<std::size_t>(std::move(handler), im->waiter->get_executor(),
                                              {errc::message_too_large, 0}, false);
        }
        impl* raw = im.get();
        impl::start(
            im, ex, detail::writers_queue,
            [raw, msg] {
              auto copy = [msg](std::span<std::byte> node) {
                detail::copy_bytes(node.data(), msg.data(), msg.size());
                return msg.size();
              };
              return detail::attempt_write(raw->ring, copy);
            },
            std::move(handler));
      },
      token, impl_, ex_, message);
}

template <class CompletionToken>
auto circular_buffer::async_read(asio::mutable_buffer buffer, CompletionToken&& token) {
  return asio::async_initiate<CompletionToken, void(std::error_code, std::size_t)>(
      [](auto handler, const std::shared_ptr<impl>& im, const executor_type& ex,
         asio::mutable_buffer buf) {
        impl* raw = im.get();
        impl::start(
            im, ex, detail::readers_queue,
            [raw, buf] {
              auto copy = [buf](std::span<const std::byte> msg) {
                detail::copy_bytes(buf.data(), msg.data(), msg.size());
              };
              return detail::attempt_read(raw->ring, copy, buf.size());
            },
            std::move(handler));
      },
      token, impl_, ex_, buffer);
}

template <class Fill, class CompletionToken>
auto circular_buffer::async_write_in_place(Fill fill, CompletionToken&& token) {
  return asio::async_initiate<CompletionToken, void(std::error_code, std::size_t)>(
      [](auto handler, const std::shared_ptr<impl>& im, const executor_type& ex, Fill f) {
        impl* raw = im.get();
        impl::start(
            im, ex, detail::writers_queue,
            [raw, f = std::move(f)]() mutable { return detail::attempt_write(raw->ring, f); },
            std::move(handler));
      },
      token, impl_, ex_, std::move(fill));
}

template <class Use, class CompletionToken>
auto circular_buffer::async_read_in_place(Use use, CompletionToken&& token) {
  return asio::async_initiate<CompletionToken, void(std::error_code, std::size_t)>(
      [](auto handler, const std::shared_ptr<impl>& im, const executor_type& ex, Use u) {
        impl* raw = im.get();
        impl::start(
            im, ex, detail::readers_queue,
            [raw, u = std::move(u)]() mutable {
              return detail::attempt_read(raw->ring, u, std::numeric_limits<std::size_t>::max());
            },
            std::move(handler));
      },
      token, impl_, ex_, std::move(use));
}

template <class CompletionToken>
auto circular_buffer::async_write_batch(std::span<const asio::const_buffer> messages,
                                        CompletionToken&& token) {
  return asio::async_initiate<CompletionToken, void(std::error_code, std::size_t)>(
      [](auto handler, const std::shared_ptr<impl>& im, const executor_type& ex,
         std::span<const asio::const_buffer> msgs) {
        if (im && !detail::all_fit(im->ring, msgs))
          return detail::deliver<std::size_t>(std::move(handler), im->waiter->get_executor(),
                                              {errc::message_too_large, 0}, false);
        impl* raw = im.get();
        impl::start(
            im, ex, detail::writers_queue,
            [raw, msgs] { return detail::attempt_write_batch(raw->ring, msgs); },
            std::move(handler));
      },
      token, impl_, ex_, messages);
}

template <class Use, class CompletionToken>
auto circular_buffer::async_read_batch_in_place(Use use, std::size_t max_messages,
                                                CompletionToken&& token) {
  return asio::async_initiate<CompletionToken, void(std::error_code, std::size_t)>(
      [](auto handler, const std::shared_ptr<impl>& im, const executor_type& ex, Use u,
         std::size_t max) {
        impl* raw = im.get();
        // Not detail::catching: a throwing `use` still reports how many messages it consumed.
        impl::start(
            im, ex, detail::readers_queue,
            [raw, u = std::move(u), max]() mutable -> detail::size_outcome {
              std::size_t done = 0;
              try {
                return detail::attempt_read_batch_in_place(raw->ring, max, u, done);
              } catch (...) {
                return detail::outcome<std::size_t>{errc::callback_failed, done};
              }
            },
            std::move(handler));
      },
      token, impl_, ex_, std::move(use), max_messages);
}

}  // namespace shmio
