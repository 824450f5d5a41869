#include "shmio/circular_buffer.hpp"

#include <algorithm>

#include "shmio/detail/platform.hpp"

namespace shmio {
namespace {

namespace layout = detail::layout;
namespace platform = detail::platform;

std::error_code check_sizes(std::size_t node_count, std::size_t node_size, std::uint64_t& body) {
  if (!detail::ring_view::body_size_for(node_count, node_size, body)) return errc::invalid_argument;
  return {};
}

segment::initializer init_ring(std::size_t node_count, std::size_t node_size, ring_mode mode) {
  return [node_count, node_size, mode](std::span<std::byte> body) {
    detail::ring_view::initialize(body, static_cast<std::uint32_t>(node_count),
                                  static_cast<std::uint32_t>(node_size), mode == ring_mode::spsc);
  };
}

std::error_code check_mode(ring_mode mode) {
  if (mode != ring_mode::mpmc && mode != ring_mode::spsc) return errc::invalid_argument;
  return {};
}

// Both open_or_create forms: the segment, found or made with these sizes and mode.
segment open_or_create_ring(std::string_view name, std::size_t node_count, std::size_t node_size,
                            ring_mode mode, std::error_code& ec) {
  std::uint64_t body = 0;
  ec = check_sizes(node_count, node_size, body);
  if (!ec) ec = check_mode(mode);
  if (ec) return {};
  return segment::open_or_create(name, object_kind::circular_buffer, body,
                                 init_ring(node_count, node_size, mode), ec);
}

}  // namespace

std::shared_ptr<circular_buffer::impl> circular_buffer::make_impl(const executor_type& ex,
                                                                  segment seg,
                                                                  wait_strategy strategy,
                                                                  std::error_code& ec) {
  detail::ring_geometry geometry;
  ec = detail::ring_view::validate(seg.body(), geometry, true);
  if (ec) return nullptr;
  // Our publications may go without the StoreLoad fence only if other processes' parkers reach
  // us with theirs; and our parks must be able to issue it (ring_view::publish_order).
  if (geometry.single && (ec = platform::enable_heavy_fence())) return nullptr;
  const std::uint16_t me =
      detail::claim_participant(seg.native_handle(), layout::max_participants, ec);
  if (ec) return nullptr;
  auto im = std::make_shared<impl>();
  auto* state = reinterpret_cast<layout::ring_state*>(seg.body().data());
  im->seg = std::move(seg);
  std::construct_at(&im->ring, state, geometry, im->seg.native_handle(), me);
  im->opened_by = platform::process_id();
  // A previous holder of our number died: whatever it left claimed is skipped or freed now. A
  // new file holds no claims (and looking would touch every page of its nodes). A role naming
  // our number is that holder's too: given back first, as anyone asking for it now would take
  // us for its live holder.
  if (!im->seg.created()) {
    im->ring.leave_roles();
    im->ring.recover_own_nodes();
  }
  layout::wait_queue* queues[] = {&state->readers, &state->writers};
  im->waiter = std::make_shared<detail::waiter>(ex, queues, strategy, ec);
  if (ec) return nullptr;
  return im;
}

circular_buffer::circular_buffer(const executor_type& ex, create_only_t tag, std::string_view name,
                                 std::size_t node_count, std::size_t node_size,
                                 wait_strategy strategy, std::error_code& ec)
    : circular_buffer(ex, tag, name, node_count, node_size, ring_mode::mpmc, strategy, ec) {}

circular_buffer::circular_buffer(const executor_type& ex, create_only_t, std::string_view name,
                                 std::size_t node_count, std::size_t node_size, ring_mode mode,
                                 wait_strategy strategy, std::error_code& ec)
    : ex_(ex) {
  std::uint64_t body = 0;
  ec = check_sizes(node_count, node_size, body);
  if (!ec) ec = check_mode(mode);
  if (ec) return;
  segment seg = segment::create(name, object_kind::circular_buffer, body,
                                init_ring(node_count, node_size, mode), ec);
  if (!ec) impl_ = make_impl(ex, std::move(seg), strategy, ec);
}

circular_buffer::circular_buffer(const executor_type& ex, open_only_t, std::string_view name,
                                 wait_strategy strategy, std::error_code& ec)
    : ex_(ex) {
  segment seg = segment::open(name, object_kind::circular_buffer, ec);
  if (!ec) impl_ = make_impl(ex, std::move(seg), strategy, ec);
}

circular_buffer::circular_buffer(const executor_type& ex, open_or_create_t, std::string_view name,
                                 std::size_t node_count, std::size_t node_size,
                                 wait_strategy strategy, std::error_code& ec)
    : ex_(ex) {
  segment seg = open_or_create_ring(name, node_count, node_size, ring_mode::mpmc, ec);
  if (!ec) impl_ = make_impl(ex, std::move(seg), strategy, ec);
}

circular_buffer::circular_buffer(const executor_type& ex, open_or_create_t, std::string_view name,
                                 std::size_t node_count, std::size_t node_size, ring_mode mode,
                                 wait_strategy strategy, std::error_code& ec)
    : ex_(ex) {
  segment seg = open_or_create_ring(name, node_count, node_size, mode, ec);
  if (!ec) impl_ = make_impl(ex, std::move(seg), strategy, ec);
  if (impl_ && this->mode() != mode) {
    // The one we found has the other mode: its thread contract is not the one asked for.
    close();
    ec = errc::incompatible;
  }
}

circular_buffer::circular_buffer(const executor_type& ex, create_only_t tag, std::string_view name,
                                 std::size_t node_count, std::size_t node_size,
                                 wait_strategy strategy)
    : ex_(ex) {
  std::error_code ec;
  *this = circular_buffer(ex, tag, name, node_count, node_size, strategy, ec);
  detail::throw_if(ec, "create circular buffer", name);
}

circular_buffer::circular_buffer(const executor_type& ex, create_only_t tag, std::string_view name,
                                 std::size_t node_count, std::size_t node_size, ring_mode mode,
                                 wait_strategy strategy)
    : ex_(ex) {
  std::error_code ec;
  *this = circular_buffer(ex, tag, name, node_count, node_size, mode, strategy, ec);
  detail::throw_if(ec, "create circular buffer", name);
}

circular_buffer::circular_buffer(const executor_type& ex, open_or_create_t tag,
                                 std::string_view name, std::size_t node_count,
                                 std::size_t node_size, ring_mode mode, wait_strategy strategy)
    : ex_(ex) {
  std::error_code ec;
  *this = circular_buffer(ex, tag, name, node_count, node_size, mode, strategy, ec);
  detail::throw_if(ec, "open_or_create circular buffer", name);
}

circular_buffer::circular_buffer(const executor_type& ex, open_only_t tag, std::string_view name,
                                 wait_strategy strategy)
    : ex_(ex) {
  std::error_code ec;
  *this = circular_buffer(ex, tag, name, strategy, ec);
  detail::throw_if(ec, "open circular buffer", name);
}

circular_buffer::circular_buffer(const executor_type& ex, open_or_create_t tag,
                                 std::string_view name, std::size_t node_count,
                                 std::size_t node_size, wait_strategy strategy)
    : ex_(ex) {
  std::error_code ec;
  *this = circular_buffer(ex, tag, name, node_count, node_size, strategy, ec);
  detail::throw_if(ec, "open_or_create circular buffer", name);
}

circular_buffer::~circular_buffer() {
  close();
}

circular_buffer::circular_buffer(circular_buffer&& other) noexcept
    : ex_(other.ex_), impl_(std::move(other.impl_)), closed_name_(std::move(other.closed_name_)) {}

circular_buffer& circular_buffer::operator=(circular_buffer&& other) noexcept {
  if (this != &other) {
    close();
    ex_ = other.ex_;
    impl_ = std::move(other.impl_);
    closed_name_ = std::move(other.closed_name_);
  }
  return *this;
}

void circular_buffer::close() noexcept {
  // Shut down explicitly: a pending operation's initiation may still hold the impl, and its
  // waits must end now, not when the last reference goes.
  if (impl_) detail::keep_name(impl_->seg.name(), closed_name_);
  if (auto im = std::exchange(impl_, nullptr)) {
    im->waiter->retire();
    im->seg.release_name();  // now: a completion on its way may keep the mapping for long
  }
}

circular_buffer::executor_type circular_buffer::get_executor() const noexcept {
  return ex_;
}

const std::string& circular_buffer::name() const noexcept {
  return impl_ ? impl_->seg.name() : closed_name_;
}

std::size_t circular_buffer::node_count() const noexcept {
  return impl_ ? impl_->ring.node_count() : 0;
}

std::size_t circular_buffer::node_size() const noexcept {
  return impl_ ? impl_->ring.node_size() : 0;
}

ring_mode circular_buffer::mode() const noexcept {
  return impl_ && impl_->ring.single() ? ring_mode::spsc : ring_mode::mpmc;
}

std::size_t circular_buffer::write(asio::const_buffer message, std::chrono::milliseconds timeout,
                                   std::error_code& ec) {
  if (!impl_) return ec = asio::error::bad_descriptor, 0;
  impl& im = *impl_;
  if (message.size() > im.ring.node_size()) {
    ec = errc::message_too_large;
    return 0;
  }
  auto copy = [message](std::span<std::byte> node) {
    detail::copy_bytes(node.data(), message.data(), message.size());
    return message.size();
  };
  auto r = im.blocking(
      detail::writers_queue, [&] { return detail::attempt_write(im.ring, copy); },
      detail::wait_limit(timeout));
  return detail::finish_blocking(r, ec);
}

std::size_t circular_buffer::write(asio::const_buffer message, std::chrono::milliseconds timeout) {
  std::error_code ec;
  const std::size_t n = write(message, timeout, ec);
  return detail::size_or_throw(n, ec, "write to circular buffer", name());
}

std::size_t circular_buffer::read(asio::mutable_buffer buffer, std::chrono::milliseconds timeout,
                                  std::error_code& ec) {
  if (!impl_) return ec = asio::error::bad_descriptor, 0;
  impl& im = *impl_;
  auto copy = [buffer](std::span<const std::byte> msg) {
    detail::copy_bytes(buffer.data(), msg.data(), msg.size());
  };
  auto r = im.blocking(
      detail::readers_queue, [&] { return detail::attempt_read(im.ring, copy, buffer.size()); },
      detail::wait_limit(timeout));
  return detail::finish_blocking(r, ec);
}

std::size_t circular_buffer::read(asio::mutable_buffer buffer, std::chrono::milliseconds timeout) {
  std::error_code ec;
  const std::size_t n = read(buffer, timeout, ec);
  return detail::size_or_throw(n, ec, "read from circular buffer", name());
}

std::size_t circular_buffer::write_batch(std::span<const asio::const_buffer> messages,
                                         std::chrono::milliseconds timeout, std::error_code& ec) {
  if (!impl_) return ec = asio::error::bad_descriptor, 0;
  impl& im = *impl_;
  if (!detail::all_fit(im.ring, messages)) return ec = errc::message_too_large, 0;
  auto r = im.blocking(
      detail::writers_queue, [&] { return detail::attempt_write_batch(im.ring, messages); },
      detail::wait_limit(timeout));
  return detail::finish_blocking(r, ec);
}

std::size_t circular_buffer::write_batch(std::span<const asio::const_buffer> messages,
                                         std::chrono::milliseconds timeout) {
  std::error_code ec;
  const std::size_t n = write_batch(messages, timeout, ec);
  return detail::size_or_throw(n, ec, "write to circular buffer", name());
}

std::size_t circular_buffer::read_batch(std::span<const asio::mutable_buffer> buffers,
                                        std::span<std::size_t> sizes,
                                        std::chrono::milliseconds timeout, std::error_code& ec) {
  if (!impl_) return ec = asio::error::bad_descriptor, 0;
  impl& im = *impl_;
  auto capacity = [buffers](std::size_t i) { return buffers[i].size(); };
  auto copy = [buffers, sizes](std::size_t i, std::span<const std::byte> msg) {
    detail::copy_bytes(buffers[i].data(), msg.data(), msg.size());
    sizes[i] = msg.size();
  };
  const std::size_t max = std::min(buffers.size(), sizes.size());
  std::size_t done = 0;
  auto r = im.blocking(
      detail::readers_queue,
      [&] { return detail::attempt_read_batch(im.ring, max, capacity, copy, done); },
      detail::wait_limit(timeout));
  return detail::finish_blocking(r, ec);
}

std::size_t circular_buffer::read_batch(std::span<const asio::mutable_buffer> buffers,
                                        std::span<std::size_t> sizes,
                                        std::chrono::milliseconds timeout) {
  std::error_code ec;
  const std::size_t n = read_batch(buffers, sizes, timeout, ec);
  return detail::size_or_throw(n, ec, "read from circular buffer", name());
}

}  // namespace shmio
