#pragma once
// The template part of rw_lock; included by shmio/rw_lock.hpp.

#include "shmio/detail/rw_lock_view.hpp"
#include "shmio/detail/waiter.hpp"

namespace shmio {

struct rw_lock::impl {
  segment seg;
  detail::rw_lock_view view;
  std::shared_ptr<detail::waiter> waiter;
  std::byte* data = nullptr;
  std::size_t data_size = 0;
  std::size_t count = 0;
  access_options options;

  ~impl();
};

template <class Handler>
void rw_lock::start(const std::shared_ptr<impl>& im, const executor_type& ex, bool exclusive,
                    Handler&& handler) {
  if (!im || im->waiter->closed()) {
    // A handle that was never opened has no executor: then only the handler's own can run it.
    if (ex)
      return detail::deliver<bool>(std::move(handler), asio::get_associated_executor(handler, ex),
                                   {asio::error::bad_descriptor, false}, false);
    return detail::deliver<bool>(std::move(handler), asio::get_associated_executor(handler),
                                 {asio::error::bad_descriptor, false}, false);
  }
  // The attempts point into `im`, which shuts its waiter down (destroying them) before it goes.
  if (exclusive)
    im->waiter->template async_wait<bool>(ex, detail::lock_writers_queue,
                                          detail::exclusive_attempt(im->view),
                                          std::forward<Handler>(handler));
  else
    im->waiter->template async_wait<bool>(ex, detail::lock_readers_queue,
                                          detail::shared_attempt(im->view),
                                          std::forward<Handler>(handler));
}

template <class CompletionToken>
auto rw_lock::async_lock(CompletionToken&& token) {
  return asio::async_initiate<CompletionToken, void(std::error_code, bool)>(
      [](auto handler, const std::shared_ptr<impl>& im, const executor_type& ex) {
        start(im, ex, true, std::move(handler));
      },
      token, impl_, ex_);
}

template <class CompletionToken>
auto rw_lock::async_lock_shared(CompletionToken&& token) {
  return asio::async_initiate<CompletionToken, void(std::error_code, bool)>(
      [](auto handler, const std::shared_ptr<impl>& im, const executor_type& ex) {
        start(im, ex, false, std::move(handler));
      },
      token, impl_, ex_);
}

}  // namespace shmio
