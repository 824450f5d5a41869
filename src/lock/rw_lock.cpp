// The lock API of shared_array and buffer_read_write, and the locked-buffer body they share.
#include "shmio/rw_lock.hpp"

#include <limits>
#include <memory>
#include <new>

namespace shmio {
namespace {

namespace layout = detail::layout;

bool valid_align(std::uint64_t a) {
  return a != 0 && (a & (a - 1)) == 0 && a <= layout::max_element_align;
}

}  // namespace

rw_lock::impl::~impl() {
  if (waiter) waiter->shutdown();  // abort waits (withdrawing their claims) before unmapping
}

bool rw_lock::body_size(std::size_t count, std::size_t element_size, std::size_t element_align,
                        std::size_t& out) noexcept {
  if (element_size == 0 || !valid_align(element_align) ||
      count > detail::max_locked_data_size / element_size)
    return false;
  out = layout::locked_data_offset_for(element_align) + count * element_size;
  return true;
}

segment::initializer rw_lock::initializer(std::size_t count, std::size_t element_size,
                                          std::size_t element_align) {
  return [=](std::span<std::byte> body) {
    auto* h = new (body.data()) layout::locked_buffer_header{};
    h->data_offset = layout::locked_data_offset_for(element_align);
    h->data_size = count * element_size;
    h->element_count = count;
    h->element_size = static_cast<std::uint32_t>(element_size);
    h->element_align = static_cast<std::uint32_t>(element_align);
    detail::rw_lock_view::initialize(
        reinterpret_cast<layout::rw_lock_state*>(body.data() + layout::locked_lock_offset));
  };
}

void rw_lock::attach(const executor_type& ex, segment seg, std::size_t element_size,
                     std::size_t element_align, const access_options& options,
                     std::error_code& ec) {
  ex_ = ex;  // also when the open fails: the closed handle's async calls complete through it
  layout::locked_buffer_header h;
  ec = detail::validate_locked_body(seg.body(), element_size, element_align, h);
  if (ec) return;
  const std::uint16_t me =
      detail::claim_participant(seg.native_handle(), layout::rw_reader_slots, ec);
  if (ec) return;
  auto im = std::make_shared<impl>();
  std::byte* body = seg.body().data();
  // The header as validated above (a copy), so a hostile peer's later changes cannot move our
  // bounds.
  im->data = body + h.data_offset;
  im->data_size = h.data_size;
  im->count = h.element_count;
  im->options = options;
  auto* state = reinterpret_cast<layout::rw_lock_state*>(body + layout::locked_lock_offset);
  std::construct_at(&im->view, state, seg.native_handle(), me);
  im->seg = std::move(seg);
  layout::wait_queue* queues[] = {&state->readers, &state->writers};
  im->waiter = std::make_shared<detail::waiter>(ex, queues, options.strategy, ec);
  if (ec) return;
  im->view.join();
  impl_ = std::move(im);
}

rw_lock& rw_lock::operator=(rw_lock&& other) noexcept {
  if (this != &other) {
    close();
    impl_ = std::move(other.impl_);
    ex_ = other.ex_;
    closed_name_ = std::move(other.closed_name_);
  }
  return *this;
}

rw_lock::~rw_lock() {
  close();
}

void rw_lock::close() noexcept {
  // Explicitly: a pending operation's initiation may still hold the impl, and its waits (and
  // whatever this handle holds) must end now, not when the last reference goes.
  if (impl_) detail::keep_name(impl_->seg.name(), closed_name_);
  if (auto im = std::exchange(impl_, nullptr)) {
    im->waiter->retire();
    im->view.leave();
    im->seg.release_name();  // now: a completion on its way may keep the mapping for long
  }
}

rw_lock::executor_type rw_lock::get_executor() const noexcept {
  return ex_;
}

const std::string& rw_lock::name() const noexcept {
  return impl_ ? impl_->seg.name() : closed_name_;
}

std::span<std::byte> rw_lock::data() const noexcept {
  if (!impl_) return {};
  return {impl_->data, impl_->data_size};
}

std::size_t rw_lock::element_count() const noexcept {
  return impl_ ? impl_->count : 0;
}

// ---- exclusive ----------------------------------------------------------------------------

bool rw_lock::try_lock_for(std::chrono::milliseconds timeout, std::error_code& ec) {
  ec.clear();
  if (!impl_) {
    ec = asio::error::bad_descriptor;
    return false;
  }
  auto r = impl_->waiter->wait(detail::lock_writers_queue, detail::exclusive_attempt(impl_->view),
                               detail::wait_limit(timeout));
  if (!r) return false;
  if (r->value) ec = errc::owner_died;
  return true;
}

void rw_lock::lock(std::error_code& ec) {
  try_lock_for(std::chrono::milliseconds::max(), ec);
}

bool rw_lock::try_lock_for(std::chrono::milliseconds timeout, throw_on_error) {
  std::error_code ec;
  const bool locked = try_lock_for(timeout, ec);
  if (ec != errc::owner_died) detail::throw_if(ec, "lock", name());
  return locked;
}

void rw_lock::lock() {
  try_lock_for(std::chrono::milliseconds::max(), throw_on_error());
}

bool rw_lock::try_lock() {
  return try_lock_for(std::chrono::milliseconds(0), throw_on_error());
}

void rw_lock::unlock() noexcept {
  if (impl_) impl_->view.unlock();
}

// ---- shared -------------------------------------------------------------------------------

bool rw_lock::try_lock_shared_for(std::chrono::milliseconds timeout, std::error_code& ec) {
  ec.clear();
  if (!impl_) {
    ec = asio::error::bad_descriptor;
    return false;
  }
  auto r = impl_->waiter->wait(detail::lock_readers_queue, detail::shared_attempt(impl_->view),
                               detail::wait_limit(timeout));
  if (!r) return false;
  if (r->value) ec = errc::owner_died;
  return true;
}

void rw_lock::lock_shared(std::error_code& ec) {
  try_lock_shared_for(std::chrono::milliseconds::max(), ec);
}

bool rw_lock::try_lock_shared_for(std::chrono::milliseconds timeout, throw_on_error) {
  std::error_code ec;
  const bool locked = try_lock_shared_for(timeout, ec);
  if (ec != errc::owner_died) detail::throw_if(ec, "lock_shared", name());
  return locked;
}

void rw_lock::lock_shared() {
  try_lock_shared_for(std::chrono::milliseconds::max(), throw_on_error());
}

bool rw_lock::try_lock_shared() {
  return try_lock_shared_for(std::chrono::milliseconds(0), throw_on_error());
}

void rw_lock::unlock_shared() noexcept {
  if (impl_) impl_->view.unlock_shared();
}

// ---- guarded access -----------------------------------------------------------------------

rw_lock::access_guard::access_guard(const rw_lock& l, bool exclusive, std::error_code& ec)
    : lock_(l) {
  ec.clear();
  if (!l.impl_) {
    ec = asio::error::bad_descriptor;
    return;
  }
  if (!l.impl_->options.lock_each_access) return;
  auto& self = const_cast<rw_lock&>(l);  // locking is not a change of the handle's data
  // This handle holds it already: a read or write under our own exclusive lock needs no
  // other (a share would wait for our own writer until the timeout).
  if (l.impl_->view.held_exclusively()) return;
  const auto timeout = l.impl_->options.lock_timeout;
  const bool ok =
      exclusive ? self.try_lock_for(timeout, ec) : self.try_lock_shared_for(timeout, ec);
  if (!ok) {
    if (!ec) ec = errc::timed_out;
    return;
  }
  // A recovered lock is still a lock: the access goes ahead, and reports it after (access_done).
  died_ = ec == errc::owner_died;
  ec.clear();
  held_ = exclusive ? held::exclusive : held::share;
}

rw_lock::access_guard::~access_guard() {
  auto& self = const_cast<rw_lock&>(lock_);
  if (held_ == held::exclusive) self.unlock();
  if (held_ == held::share) self.unlock_shared();
}

}  // namespace shmio
