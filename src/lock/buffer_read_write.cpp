#include "shmio/buffer_read_write.hpp"

#include <stdexcept>
#include <string>

namespace shmio {

namespace detail {
void throw_out_of_range(std::string_view operation, std::string_view name, std::size_t start,
                        std::size_t length, std::size_t size, std::string_view unit) {
  std::string what(operation);
  what += " '";
  what += name;
  what += "': ";
  what += std::to_string(length);
  what += ' ';
  what += unit;
  what += " at ";
  what += std::to_string(start);
  what += " exceed the ";
  what += std::to_string(size);
  what += ' ';
  what += unit;
  what += " it has";
  throw std::out_of_range(what);
}
}  // namespace detail

buffer_read_write::buffer_read_write(const executor_type& ex, create_only_t, std::string_view name,
                                     std::size_t size, const access_options& options,
                                     std::error_code& ec)
    : rw_lock(ex) {
  std::size_t body = 0;
  if (size == 0 || !body_size(size, 1, 1, body)) {
    ec = errc::invalid_argument;
    return;
  }
  segment seg =
      segment::create(name, object_kind::buffer_read_write, body, initializer(size, 1, 1), ec);
  if (!ec) attach(ex, std::move(seg), 1, 1, options, ec);
}

buffer_read_write::buffer_read_write(const executor_type& ex, open_only_t, std::string_view name,
                                     const access_options& options, std::error_code& ec)
    : rw_lock(ex) {
  segment seg = segment::open(name, object_kind::buffer_read_write, ec);
  if (!ec) attach(ex, std::move(seg), 1, 1, options, ec);
}

buffer_read_write::buffer_read_write(const executor_type& ex, open_or_create_t,
                                     std::string_view name, std::size_t size,
                                     const access_options& options, std::error_code& ec)
    : rw_lock(ex) {
  std::size_t body = 0;
  if (size == 0 || !body_size(size, 1, 1, body)) {
    ec = errc::invalid_argument;
    return;
  }
  segment seg = segment::open_or_create(name, object_kind::buffer_read_write, body,
                                        initializer(size, 1, 1), ec);
  if (!ec) attach(ex, std::move(seg), 1, 1, options, ec);
}

buffer_read_write::buffer_read_write(const executor_type& ex, create_only_t tag,
                                     std::string_view name, std::size_t size,
                                     const access_options& options) {
  std::error_code ec;
  *this = buffer_read_write(ex, tag, name, size, options, ec);
  detail::throw_if(ec, "create buffer", name);
}

buffer_read_write::buffer_read_write(const executor_type& ex, open_only_t tag,
                                     std::string_view name, const access_options& options) {
  std::error_code ec;
  *this = buffer_read_write(ex, tag, name, options, ec);
  detail::throw_if(ec, "open buffer", name);
}

buffer_read_write::buffer_read_write(const executor_type& ex, open_or_create_t tag,
                                     std::string_view name, std::size_t size,
                                     const access_options& options) {
  std::error_code ec;
  *this = buffer_read_write(ex, tag, name, size, options, ec);
  detail::throw_if(ec, "open_or_create buffer", name);
}

void buffer_read_write::enter_checked(std::size_t offset, std::size_t length, std::error_code& ec,
                                      std::string_view operation) const {
  ec.clear();
  if (!is_open()) detail::throw_if(asio::error::bad_descriptor, operation, name());
  if (!detail::in_bounds(offset, length, size()))
    detail::throw_out_of_range(operation, name(), offset, length, size(), "bytes");
}

void buffer_read_write::write_bytes(std::span<const std::byte> in, std::size_t offset,
                                    std::error_code& ec) {
  ec.clear();
  if (!is_open()) {
    ec = asio::error::bad_descriptor;
    return;
  }
  if (!detail::in_bounds(offset, in.size(), size())) {
    ec = errc::invalid_argument;
    return;
  }
  access_guard guard(*this, true, ec);
  if (ec) return;
  if (!in.empty()) std::memcpy(bytes().data() + offset, in.data(), in.size());
  guard.access_done(ec);
}

void buffer_read_write::write_bytes(std::span<const std::byte> in, std::size_t offset) {
  std::error_code ec;
  enter_checked(offset, in.size(), ec, "write");
  write_bytes(in, offset, ec);
  if (ec != errc::owner_died) detail::throw_if(ec, "write", name());  // done: see lock()
}

void buffer_read_write::read_bytes(std::span<std::byte> out, std::size_t offset,
                                   std::error_code& ec) const {
  ec.clear();
  if (!is_open()) {
    ec = asio::error::bad_descriptor;
    return;
  }
  if (!detail::in_bounds(offset, out.size(), size())) {
    ec = errc::invalid_argument;
    return;
  }
  access_guard guard(*this, false, ec);
  if (ec) return;
  if (!out.empty()) std::memcpy(out.data(), bytes().data() + offset, out.size());
  guard.access_done(ec);
}

void buffer_read_write::read_bytes(std::span<std::byte> out, std::size_t offset) const {
  std::error_code ec;
  enter_checked(offset, out.size(), ec, "read");
  read_bytes(out, offset, ec);
  if (ec != errc::owner_died) detail::throw_if(ec, "read", name());  // done: see lock()
}

}  // namespace shmio
