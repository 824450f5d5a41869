#include "shmio/broadcast_buffer.hpp"

#include "shmio/detail/ring.hpp"

namespace shmio {
namespace {

namespace layout = detail::layout;

std::error_code check_options(const broadcast_options& o, detail::broadcast_params& p,
                              std::uint64_t& body) {
  const auto lease = o.lease.count();
  p = {static_cast<std::uint32_t>(o.mode), o.capacity, o.message_size, o.max_subscribers,
       lease < 0 ? 0 : static_cast<std::uint64_t>(lease)};
  if (!detail::broadcast_geometry::body_size_for(p, body)) return errc::invalid_argument;
  return {};
}

segment::initializer init_broadcast(const detail::broadcast_params& p) {
  return [p](std::span<std::byte> body) { detail::broadcast_geometry::initialize(body, p); };
}

}  // namespace

std::shared_ptr<broadcast_buffer::impl> broadcast_buffer::make_impl(const executor_type& ex,
                                                                    segment seg,
                                                                    broadcast_role role,
                                                                    wait_strategy strategy,
                                                                    std::error_code& ec) {
  layout::broadcast_header header{};
  ec = detail::broadcast_geometry::validate(seg.body(), header);
  if (ec) return nullptr;
  auto im = std::make_shared<impl>();
  auto* state = reinterpret_cast<layout::broadcast_state*>(seg.body().data());
  im->seg = std::move(seg);
  im->role = role;
  im->geometry = detail::broadcast_geometry(state, header);
  layout::wait_queue* queue = nullptr;
  if (role == broadcast_role::publisher) {
    const int fd = im->seg.native_handle();
    const std::uint16_t me = detail::claim_participant(fd, layout::max_participants, ec);
    if (ec) return nullptr;
    im->publisher = std::make_unique<detail::broadcast_publisher>(im->geometry, fd, me);
    im->publisher->recover_own_lock();  // a dead previous holder of our number may have held it
    queue = &state->writers;
  } else {
    im->subscriber = std::make_unique<detail::broadcast_subscriber>(im->geometry);
    ec = im->subscriber->join(im->seg.native_handle());
    if (ec) {
      im->subscriber.reset();  // never joined: nothing to leave
      return nullptr;
    }
    queue = &state->readers;
  }
  im->waiter = std::make_shared<detail::waiter>(ex, std::span(&queue, 1), strategy, ec);
  if (ec) return nullptr;
  return im;
}

broadcast_buffer::broadcast_buffer(const executor_type& ex, create_only_t, std::string_view name,
                                   broadcast_role role, const broadcast_options& options,
                                   wait_strategy strategy, std::error_code& ec)
    : ex_(ex) {
  detail::broadcast_params p;
  std::uint64_t body = 0;
  ec = check_options(options, p, body);
  if (ec) return;
  segment seg = segment::create(name, object_kind::broadcast, body, init_broadcast(p), ec);
  if (!ec) impl_ = make_impl(ex, std::move(seg), role, strategy, ec);
}

broadcast_buffer::broadcast_buffer(const executor_type& ex, open_only_t, std::string_view name,
                                   broadcast_role role, wait_strategy strategy, std::error_code& ec)
    : ex_(ex) {
  segment seg = segment::open(name, object_kind::broadcast, ec);
  if (!ec) impl_ = make_impl(ex, std::move(seg), role, strategy, ec);
}

broadcast_buffer::broadcast_buffer(const executor_type& ex, open_or_create_t, std::string_view name,
                                   broadcast_role role, const broadcast_options& options,
                                   wait_strategy strategy, std::error_code& ec)
    : ex_(ex) {
  detail::broadcast_params p;
  std::uint64_t body = 0;
  ec = check_options(options, p, body);
  if (ec) return;
  segment seg = segment::open_or_create(name, object_kind::broadcast, body, init_broadcast(p), ec);
  if (!ec) impl_ = make_impl(ex, std::move(seg), role, strategy, ec);
}

broadcast_buffer::broadcast_buffer(const executor_type& ex, create_only_t tag,
                                   std::string_view name, broadcast_role role,
                                   const broadcast_options& options, wait_strategy strategy)
    : ex_(ex) {
  std::error_code ec;
  *this = broadcast_buffer(ex, tag, name, role, options, strategy, ec);
  detail::throw_if(ec, "create broadcast buffer", name);
}

broadcast_buffer::broadcast_buffer(const executor_type& ex, open_only_t tag, std::string_view name,
                                   broadcast_role role, wait_strategy strategy)
    : ex_(ex) {
  std::error_code ec;
  *this = broadcast_buffer(ex, tag, name, role, strategy, ec);
  detail::throw_if(ec, "open broadcast buffer", name);
}

broadcast_buffer::broadcast_buffer(const executor_type& ex, open_or_create_t tag,
                                   std::string_view name, broadcast_role role,
                                   const broadcast_options& options, wait_strategy strategy)
    : ex_(ex) {
  std::error_code ec;
  *this = broadcast_buffer(ex, tag, name, role, options, strategy, ec);
  detail::throw_if(ec, "open_or_create broadcast buffer", name);
}

broadcast_buffer::~broadcast_buffer() {
  close();
}

broadcast_buffer::broadcast_buffer(broadcast_buffer&& other) noexcept
    : ex_(other.ex_), impl_(std::move(other.impl_)), closed_name_(std::move(other.closed_name_)) {}

broadcast_buffer& broadcast_buffer::operator=(broadcast_buffer&& other) noexcept {
  if (this != &other) {
    close();
    ex_ = other.ex_;
    impl_ = std::move(other.impl_);
    closed_name_ = std::move(other.closed_name_);
  }
  return *this;
}

void broadcast_buffer::close() noexcept {
  // Shut down explicitly: a pending operation's initiation may still hold the impl, and its
  // waits must end now; a subscriber leaves now, so writers stop waiting for it.
  if (impl_) detail::keep_name(impl_->seg.name(), closed_name_);
  if (auto im = std::exchange(impl_, nullptr)) {
    im->waiter->retire();
    if (im->subscriber) im->subscriber->leave();
    im->seg.release_name();  // now: a completion on its way may keep the mapping for long
  }
}

broadcast_buffer::executor_type broadcast_buffer::get_executor() const noexcept {
  return ex_;
}

const std::string& broadcast_buffer::name() const noexcept {
  return impl_ ? impl_->seg.name() : closed_name_;
}

broadcast_role broadcast_buffer::role() const noexcept {
  return impl_ ? impl_->role : broadcast_role::publisher;
}

broadcast_mode broadcast_buffer::mode() const noexcept {
  return impl_ && !impl_->geometry.reliable() ? broadcast_mode::lossy : broadcast_mode::reliable;
}

std::size_t broadcast_buffer::capacity() const noexcept {
  return impl_ ? impl_->geometry.slot_count() : 0;
}

std::size_t broadcast_buffer::message_size() const noexcept {
  return impl_ ? impl_->geometry.message_size() : 0;
}

std::size_t broadcast_buffer::max_subscribers() const noexcept {
  return impl_ ? impl_->geometry.subscriber_capacity() : 0;
}

std::chrono::milliseconds broadcast_buffer::lease() const noexcept {
  return impl_ ? impl_->geometry.lease() : std::chrono::milliseconds(0);
}

std::size_t broadcast_buffer::subscriber_count() const noexcept {
  return impl_ ? impl_->geometry.active_subscribers() : 0;
}

std::uint64_t broadcast_buffer::lost() const noexcept {
  return impl_ && impl_->subscriber ? impl_->subscriber->lost() : 0;
}

void broadcast_buffer::heartbeat() noexcept {
  if (impl_ && impl_->subscriber) impl_->subscriber->heartbeat();
}

std::size_t broadcast_buffer::write(asio::const_buffer message, std::chrono::milliseconds timeout,
                                    std::error_code& ec) {
  if (!impl_) return ec = asio::error::bad_descriptor, 0;
  impl& im = *impl_;
  if (im.role == broadcast_role::publisher && message.size() > im.geometry.message_size())
    return ec = errc::message_too_large, 0;
  auto copy = [message](std::span<std::byte> slot) {
    detail::copy_bytes(slot.data(), message.data(), message.size());
    return message.size();
  };
  return im.blocking(
      broadcast_role::publisher, [&] { return im.publisher->attempt_write(copy); }, timeout, ec);
}

std::size_t broadcast_buffer::write(asio::const_buffer message, std::chrono::milliseconds timeout) {
  std::error_code ec;
  const std::size_t n = write(message, timeout, ec);
  return detail::size_or_throw(n, ec, "write to broadcast buffer", name());
}

std::size_t broadcast_buffer::read(asio::mutable_buffer buffer, std::chrono::milliseconds timeout,
                                   std::error_code& ec) {
  if (!impl_) return ec = asio::error::bad_descriptor, 0;
  impl& im = *impl_;
  auto copy = [buffer](std::span<const std::byte> msg) {
    detail::copy_bytes(buffer.data(), msg.data(), msg.size());
  };
  return im.blocking(
      broadcast_role::subscriber, [&] { return im.subscriber->attempt_read(copy, buffer.size()); },
      timeout, ec);
}

std::size_t broadcast_buffer::read(asio::mutable_buffer buffer, std::chrono::milliseconds timeout) {
  std::error_code ec;
  const std::size_t n = read(buffer, timeout, ec);
  return detail::size_or_throw(n, ec, "read from broadcast buffer", name());
}

}  // namespace shmio
