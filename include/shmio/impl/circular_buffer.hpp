#pragma once
// The template part of circular_buffer; included by shmio/circular_buffer.hpp.

#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <limits>
#include <system_error>

#include <asio/use_awaitable.hpp>

#include "shmio/detail/in_place.hpp"
#include "shmio/detail/platform.hpp"
#include "shmio/detail/ring_ops.hpp"
#include "shmio/detail/waiter.hpp"

namespace shmio {

struct circular_buffer::impl {
  segment seg;
  detail::ring_view ring;
  std::shared_ptr<detail::waiter> waiter;
  std::uint32_t opened_by = 0;  // the process that opened it (a forked child's copy is not)

  // A blocking call's wait. In a single-writer ring its claims are plain stores, which must not
  // race those that this handle's async operations of the same direction make on the
  // executor's threads: while one of them is pending, or holds a claim for its callback, the
  // call fails with errc::busy.
  template <class Attempt>
  detail::size_outcome blocking(std::size_t q, Attempt attempt, std::chrono::nanoseconds limit) {
    if (ring.single() && !waiter->quiet(q)) return detail::outcome<std::size_t>{errc::busy, 0};
    return waiter->wait(q, std::move(attempt), limit);
  }

  ~impl() {
    if (waiter) waiter->shutdown();  // abort operations before the memory they use goes
    // Only now, with nothing of this handle claiming any more, may another take its roles; and
    // not from a forked child's copy, which shares the parent's participant number.
    if (ring.single() && opened_by == detail::platform::process_id()) ring.leave_roles();
  }

  using held_write = detail::held_claim<detail::ring_view, detail::write_claim>;
  using held_read = detail::held_claim<detail::ring_view, detail::read_claim>;

  static void abandon(detail::ring_view& r, const detail::write_claim& c) noexcept {
    r.abandon(c);  // readers skip it: nothing half-written is ever delivered
  }
  static void release(detail::ring_view& r, const detail::read_claim& c) noexcept {
    r.release(c);  // a message whose reader went away unrun is lost, as with a killed reader
  }

  // The claim-only attempts of the in-place forms: no user code runs in them.
  static auto claim_write(const std::shared_ptr<impl>& im) {
    return [im]() -> std::optional<detail::outcome<held_write>> {
      detail::write_claim c;
      switch (im->ring.try_claim_write(c)) {
        case detail::claim_status::claimed:
          return detail::outcome<held_write>{
              {}, held_write(im, im->ring, c, &abandon, *im->waiter, detail::writers_queue)};
        case detail::claim_status::corrupted:
          return detail::outcome<held_write>{errc::corrupted, {}};
        case detail::claim_status::busy:
          return detail::outcome<held_write>{errc::busy, {}};
        default:
          return std::nullopt;
      }
    };
  }
  static auto claim_read(const std::shared_ptr<impl>& im) {
    return [im]() -> std::optional<detail::outcome<held_read>> {
      detail::read_claim c;
      switch (im->ring.try_claim_read(c, std::numeric_limits<std::size_t>::max())) {
        case detail::claim_status::claimed:
          return detail::outcome<held_read>{
              {}, held_read(im, im->ring, c, &release, *im->waiter, detail::readers_queue)};
        case detail::claim_status::would_block:
          return std::nullopt;
        case detail::claim_status::busy:
          return detail::outcome<held_read>{errc::busy, {}};
        default:  // any size fits: only a corrupted length (skipped) or a damaged head
          return detail::outcome<held_read>{errc::corrupted, {}};
      }
    };
  }

  template <class Attempt, class Handler>
  static void start(const std::shared_ptr<impl>& im, const executor_type& io_ex, std::size_t queue,
                    Attempt&& attempt, Handler&& handler) {
    if (!im || im->waiter->closed())  // closed: through the executor the handle was made with
      return detail::post_result<std::size_t>(std::move(handler), io_ex,
                                              {asio::error::bad_descriptor, 0});
    im->waiter->template async_wait<std::size_t>(io_ex, queue, detail::catching(std::move(attempt)),
                                                 std::forward<Handler>(handler));
  }

  // An in-place operation: `claim` takes the node, `work` runs the user's callback on it in
  // the handler's context (in_place.hpp).
  template <class Held, class Claim, class Work, class Handler>
  static void start_in_place(const std::shared_ptr<impl>& im, const executor_type& io_ex,
                             std::size_t queue, Claim (*claim)(const std::shared_ptr<impl>&),
                             Work work, Handler&& handler) {
    if (!im || im->waiter->closed())
      return detail::post_result<std::size_t>(std::move(handler), io_ex,
                                              {asio::error::bad_descriptor, 0});
    im->waiter->template async_wait<Held>(
        io_ex, queue, claim(im),
        detail::make_in_place_handler(std::forward<Handler>(handler), std::move(work)));
  }
};

template <class Fill>
std::size_t circular_buffer::write_in_place(Fill&& fill, std::chrono::milliseconds timeout,
                                            std::error_code& ec) {
  if (!impl_) return ec = asio::error::bad_descriptor, 0;
  // Held for the call: the user's callback may close the handle.
  const std::shared_ptr<impl> keep = impl_;
  impl& im = *keep;
  auto r = im.blocking(
      detail::writers_queue, [&] { return detail::attempt_write(im.ring, fill); },
      detail::wait_limit(timeout));
  return detail::finish_blocking(r, ec);
}

template <class Fill>
std::size_t circular_buffer::write_in_place(Fill&& fill, std::chrono::milliseconds timeout) {
  // Its segment's name, for the error, outlives the call: the callback may close or destroy
  // this handle.
  const std::shared_ptr<impl> keep = impl_;
  std::error_code ec;
  const std::size_t n = write_in_place(std::forward<Fill>(fill), timeout, ec);
  return detail::size_or_throw(n, ec, "write to circular buffer",
                               keep ? std::string_view(keep->seg.name()) : std::string_view());
}

template <class Use>
std::size_t circular_buffer::read_in_place(Use&& use, std::chrono::milliseconds timeout,
                                           std::error_code& ec) {
  if (!impl_) return ec = asio::error::bad_descriptor, 0;
  // Held for the call: the user's callback may close the handle.
  const std::shared_ptr<impl> keep = impl_;
  impl& im = *keep;
  auto r = im.blocking(
      detail::readers_queue,
      [&] { return detail::attempt_read(im.ring, use, std::numeric_limits<std::size_t>::max()); },
      detail::wait_limit(timeout));
  return detail::finish_blocking(r, ec);
}

template <class Use>
std::size_t circular_buffer::read_in_place(Use&& use, std::chrono::milliseconds timeout) {
  // Its segment's name, for the error, outlives the call: the callback may close or destroy
  // this handle.
  const std::shared_ptr<impl> keep = impl_;
  std::error_code ec;
  const std::size_t n = read_in_place(std::forward<Use>(use), timeout, ec);
  return detail::size_or_throw(n, ec, "read from circular buffer",
                               keep ? std::string_view(keep->seg.name()) : std::string_view());
}

template <class Use>
std::size_t circular_buffer::read_batch_in_place(Use&& use, std::size_t max_messages,
                                                 std::chrono::milliseconds timeout,
                                                 std::error_code& ec) {
  if (!impl_) return ec = asio::error::bad_descriptor, 0;
  // Held for the call: the user's callback may close the handle.
  const std::shared_ptr<impl> keep = impl_;
  impl& im = *keep;
  std::size_t done = 0;
  auto r = im.blocking(
      detail::readers_queue,
      [&] {
        return detail::attempt_read_batch_in_place(im.ring, max_messages, use, done,
                                                   [&] { return !im.waiter->closed(); });
      },
      detail::wait_limit(timeout));
  return detail::finish_blocking(r, ec);
}

template <class Use>
std::size_t circular_buffer::read_batch_in_place(Use&& use, std::size_t max_messages,
                                                 std::chrono::milliseconds timeout) {
  // Its segment's name, for the error, outlives the call: the callback may close or destroy
  // this handle.
  const std::shared_ptr<impl> keep = impl_;
  std::error_code ec;
  const std::size_t n = read_batch_in_place(std::forward<Use>(use), max_messages, timeout, ec);
  return detail::size_or_throw(n, ec, "read from circular buffer",
                               keep ? std::string_view(keep->seg.name()) : std::string_view());
}

template <class CompletionToken>
auto circular_buffer::async_write(asio::const_buffer message, CompletionToken&& token) {
  return asio::async_initiate<CompletionToken, void(std::error_code, std::size_t)>(
      [](auto handler, const std::shared_ptr<impl>& im, const executor_type& ex,
         asio::const_buffer msg) {
        // A message too large is refused in its turn, through the queue: its completion must
        // not overtake a write started before it that still waits.
        impl* raw = im.get();
        impl::start(
            im, ex, detail::writers_queue,
            [raw, msg]() -> detail::size_outcome {
              if (msg.size() > raw->ring.node_size())
                return detail::outcome<std::size_t>{errc::message_too_large, 0};
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
        // A node whose `fill` throws or overruns is abandoned: readers skip it.
        auto work = detail::in_place_write_work(
            std::move(f), [](detail::ring_view& ring, const detail::write_claim& c, std::size_t n) {
              ring.publish(c, static_cast<std::uint32_t>(n));
            });
        impl::start_in_place<impl::held_write>(im, ex, detail::writers_queue, &impl::claim_write,
                                               std::move(work), std::move(handler));
      },
      token, impl_, ex_, std::move(fill));
}

template <class Use, class CompletionToken>
auto circular_buffer::async_read_in_place(Use use, CompletionToken&& token) {
  return asio::async_initiate<CompletionToken, void(std::error_code, std::size_t)>(
      [](auto handler, const std::shared_ptr<impl>& im, const executor_type& ex, Use u) {
        auto work = [u = std::move(u)](impl::held_read& h) mutable -> detail::outcome<std::size_t> {
          const std::size_t n = h.claim().data.size();
          std::error_code ec;
          try {
            u(h.claim().data);
          } catch (...) {
            ec = errc::callback_failed;  // the message counts as read, as in read_in_place
          }
          h.view().release(h.claim());
          h.consumed();
          return {ec, ec ? 0 : n};
        };
        impl::start_in_place<impl::held_read>(im, ex, detail::readers_queue, &impl::claim_read,
                                              std::move(work), std::move(handler));
      },
      token, impl_, ex_, std::move(use));
}

template <class CompletionToken>
auto circular_buffer::async_write_batch(std::span<const asio::const_buffer> messages,
                                        CompletionToken&& token) {
  return asio::async_initiate<CompletionToken, void(std::error_code, std::size_t)>(
      [](auto handler, const std::shared_ptr<impl>& im, const executor_type& ex,
         std::span<const asio::const_buffer> msgs) {
        // Refused in its turn, as async_write's message too large is.
        const bool fit = im && detail::all_fit(im->ring, msgs);
        impl* raw = im.get();
        impl::start(
            im, ex, detail::writers_queue,
            [raw, msgs, fit]() -> detail::size_outcome {
              if (!fit) return detail::outcome<std::size_t>{errc::message_too_large, 0};
              return detail::attempt_write_batch(raw->ring, msgs);
            },
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
        if (max == 0)  // takes nothing, in its turn: after the reads started before it
          return impl::start(
              im, ex, detail::readers_queue,
              []() -> detail::size_outcome {
                return detail::outcome<std::size_t>{{}, 0};
              },
              std::move(handler));
        // The first message is claimed by the wait; the rest are taken in the handler's
        // context, one claim at a time, while the queue is still held.
        auto work = [u = std::move(u),
                     max](impl::held_read& h) mutable -> detail::outcome<std::size_t> {
          detail::ring_view& ring = h.view();
          std::size_t done = 0;
          auto use_one = [&](const detail::read_claim& c) {
            ++done;  // counts as read even if `use` throws: it is released either way
            struct release_on_exit {
              detail::ring_view& ring;
              const detail::read_claim& claim;
              ~release_on_exit() { ring.release(claim); }
            } guard{ring, c};
            u(c.data);
          };
          try {
            h.consumed();
            if (max > 1) ring.prefetch(h.claim().position + 1);
            use_one(h.claim());
            detail::read_claim c;
            // A `use` that closed the handle ends the batch: the rest are the other readers'.
            while (done < max && !h.closed() &&
                   ring.try_claim_read(c, std::numeric_limits<std::size_t>::max(), false) ==
                       detail::claim_status::claimed) {
              if (done + 1 < max) ring.prefetch(c.position + 1);
              use_one(c);
            }
          } catch (...) {
            return {errc::callback_failed, done};
          }
          return {{}, done};
        };
        impl::start_in_place<impl::held_read>(im, ex, detail::readers_queue, &impl::claim_read,
                                              std::move(work), std::move(handler));
      },
      token, impl_, ex_, std::move(use), max_messages);
}

namespace detail {
/// A fast form's result: the value, or the error thrown as use_awaitable throws it.
inline std::size_t value_or_throw(const outcome<std::size_t>& r) {
  if (r.ec) throw std::system_error(r.ec);
  return r.value;
}

/// Runs `start(callback)` with a callback that calls `f` and keeps what it throws, and rethrows
/// that exception where the async form would report errc::callback_failed: the fast forms
/// propagate a callback's exception whether or not they had to wait.
template <class Start, class F>
asio::awaitable<std::size_t> rethrowing(Start start, F& f) {
  std::exception_ptr thrown;
  auto keep = [&f, &thrown](auto&& arg) -> decltype(f(std::forward<decltype(arg)>(arg))) {
    try {
      return f(std::forward<decltype(arg)>(arg));
    } catch (...) {
      thrown = std::current_exception();
      throw;
    }
  };
  try {
    co_return co_await start(keep);
  } catch (const std::system_error&) {
    if (thrown) std::rethrow_exception(thrown);
    throw;
  }
}
}  // namespace detail

inline asio::awaitable<std::size_t> circular_buffer::co_read(asio::mutable_buffer buffer) {
  if (impl_) {
    auto copy = [buffer](std::span<const std::byte> msg) {
      detail::copy_bytes(buffer.data(), msg.data(), msg.size());
    };
    auto attempt = [&] { return detail::attempt_read(impl_->ring, copy, buffer.size()); };
    if (auto r = impl_->waiter->try_linger(detail::readers_queue, attempt))
      co_return detail::value_or_throw(*r);
  }
  co_return co_await async_read(buffer, asio::use_awaitable);
}

inline asio::awaitable<std::size_t> circular_buffer::co_write(asio::const_buffer message) {
  if (impl_ && message.size() <= impl_->ring.node_size()) {
    auto copy = [message](std::span<std::byte> node) {
      detail::copy_bytes(node.data(), message.data(), message.size());
      return message.size();
    };
    auto attempt = [&] { return detail::attempt_write(impl_->ring, copy); };
    if (auto r = impl_->waiter->try_linger(detail::writers_queue, attempt))
      co_return detail::value_or_throw(*r);
  }
  co_return co_await async_write(message, asio::use_awaitable);
}

template <class Use>
asio::awaitable<std::size_t> circular_buffer::co_read_in_place(Use use) {
  // Held while `use` may run here: it may close the handle.
  if (const std::shared_ptr<impl> im = impl_) {
    auto attempt = [&] {
      return detail::attempt_read(im->ring, use, std::numeric_limits<std::size_t>::max());
    };
    if (auto r = im->waiter->try_linger(detail::readers_queue, attempt))
      co_return detail::value_or_throw(*r);
  }
  co_return co_await detail::rethrowing(
      [&](auto f) { return async_read_in_place(std::move(f), asio::use_awaitable); }, use);
}

template <class Fill>
asio::awaitable<std::size_t> circular_buffer::co_write_in_place(Fill fill) {
  // Held while `fill` may run here: it may close the handle.
  if (const std::shared_ptr<impl> im = impl_) {
    auto attempt = [&] { return detail::attempt_write(im->ring, fill); };
    if (auto r = im->waiter->try_linger(detail::writers_queue, attempt))
      co_return detail::value_or_throw(*r);
  }
  co_return co_await detail::rethrowing(
      [&](auto f) { return async_write_in_place(std::move(f), asio::use_awaitable); }, fill);
}

}  // namespace shmio
