#pragma once
// shmio::buffer_read_write — a fixed-size block of bytes that processes share by name and read
// and write values at offsets in (the C# SharedMemory library's BufferReadWrite), with the
// cross-process reader/writer lock of shmio/rw_lock.hpp.
//
// Every access names an offset and a length that are checked against size() before anything
// is copied (written so that offset + length cannot overflow): out of range throws
// std::out_of_range, or sets errc::invalid_argument in the error_code forms, and copies nothing.
// Values are copied as bytes (memcpy), so they need not be aligned in the buffer; their types
// must be trivially copyable. With access_options::lock_each_access every read holds a share
// of the lock and every write the exclusive lock while it copies (errc::timed_out after
// access_options::lock_timeout).
//
// Example (the C# SharedMemory library's):
//   shmio::buffer_read_write producer(ex, shmio::create_only, "MySharedBuffer", 1024);
//   producer.write(123);
//   producer.write(456, 1000);
//   // another process:
//   shmio::buffer_read_write consumer(ex, shmio::open_only, "MySharedBuffer");
//   std::cout << consumer.read<int>() << '\n' << consumer.read<int>(1000) << '\n';

#include <cstddef>
#include <cstring>
#include <ranges>
#include <span>
#include <string_view>
#include <system_error>
#include <type_traits>

#include "shmio/detail/bounds.hpp"
#include "shmio/open_mode.hpp"
#include "shmio/rw_lock.hpp"

namespace shmio {

namespace detail {
template <class R>
concept byte_copyable_range = std::ranges::contiguous_range<R> && std::ranges::sized_range<R> &&
    std::is_trivially_copyable_v<std::ranges::range_value_t<R>>;
}  // namespace detail

class buffer_read_write : public rw_lock {
 public:
  /// Creates the buffer `name` of `size` (>= 1) zero bytes. Throws shmio::error
  /// (errc::invalid_argument, errc::already_exists, errc::no_space, ...).
  buffer_read_write(const executor_type& ex, create_only_t, std::string_view name, std::size_t size,
                    const access_options& options = {});
  /// Opens the buffer `name`; size() comes from the segment.
  buffer_read_write(const executor_type& ex, open_only_t, std::string_view name,
                    const access_options& options = {});
  /// Opens the buffer `name`, or creates it with `size` bytes.
  buffer_read_write(const executor_type& ex, open_or_create_t, std::string_view name,
                    std::size_t size, const access_options& options = {});
  /// The error_code forms: on failure `ec` is set and the buffer is closed.
  buffer_read_write(const executor_type& ex, create_only_t, std::string_view name, std::size_t size,
                    const access_options& options, std::error_code& ec);
  buffer_read_write(const executor_type& ex, open_only_t, std::string_view name,
                    const access_options& options, std::error_code& ec);
  buffer_read_write(const executor_type& ex, open_or_create_t, std::string_view name,
                    std::size_t size, const access_options& options, std::error_code& ec);

  buffer_read_write(buffer_read_write&&) noexcept = default;
  /// Closes this handle first (see rw_lock::close()).
  buffer_read_write& operator=(buffer_read_write&&) noexcept = default;

  /// Bytes in the buffer (0 once closed).
  std::size_t size() const noexcept { return element_count(); }

  // ---- one value ---------------------------------------------------------------------------

  /// Copies `value` to `offset`. T must be trivially copyable: its bytes are all it is.
  template <class T>
  requires(!std::ranges::contiguous_range<T> &&
           std::is_trivially_copyable_v<T>) void write(const T& value, std::size_t offset = 0) {
    write_bytes(std::as_bytes(std::span(&value, 1)), offset);
  }
  template <class T>
  requires(!std::ranges::contiguous_range<T> &&
           std::is_trivially_copyable_v<T>) void write(const T& value, std::size_t offset,
                                                       std::error_code& ec) {
    write_bytes(std::as_bytes(std::span(&value, 1)), offset, ec);
  }

  /// The T at `offset` (T trivially copyable).
  template <class T>
  requires std::is_trivially_copyable_v<T> T read(std::size_t offset = 0)
  const {
    T value;
    read_bytes(std::as_writable_bytes(std::span(&value, 1)), offset);
    return value;
  }
  template <class T>
  requires std::is_trivially_copyable_v<T> T read(std::size_t offset, std::error_code& ec)
  const {
    T value{};
    read_bytes(std::as_writable_bytes(std::span(&value, 1)), offset, ec);
    return value;
  }

  // ---- ranges (spans, arrays, vectors: any contiguous range of trivially copyable values) ---

  /// Copies every element of `values` to the bytes from `offset` on.
  template <detail::byte_copyable_range R>
  void write(const R& values, std::size_t offset = 0) {
    write_bytes(std::as_bytes(std::span(std::ranges::data(values), std::ranges::size(values))),
                offset);
  }
  template <detail::byte_copyable_range R>
  void write(const R& values, std::size_t offset, std::error_code& ec) {
    write_bytes(std::as_bytes(std::span(std::ranges::data(values), std::ranges::size(values))),
                offset, ec);
  }

  /// Fills every element of `out` from the bytes from `offset` on.
  template <detail::byte_copyable_range R>
  void read(R&& out, std::size_t offset = 0) const {
    read_bytes(std::as_writable_bytes(std::span(std::ranges::data(out), std::ranges::size(out))),
               offset);
  }
  template <detail::byte_copyable_range R>
  void read(R&& out, std::size_t offset, std::error_code& ec) const {
    read_bytes(std::as_writable_bytes(std::span(std::ranges::data(out), std::ranges::size(out))),
               offset, ec);
  }

  // ---- in place ------------------------------------------------------------------------------

  /// Calls `use(std::span<std::byte>)` on the `length` bytes at `offset`, in shared memory
  /// (holding the exclusive lock for the call with lock_each_access), and returns its result.
  /// If `use` throws, the exception propagates (the lock is released).
  template <class F>
  decltype(auto) write_in_place(std::size_t offset, std::size_t length, F&& use) {
    std::error_code ec;
    enter_checked(offset, length, ec, "write_in_place");
    access_guard guard(*this, true, ec);
    detail::throw_if(ec, "write_in_place", name());
    return std::forward<F>(use)(bytes().subspan(offset, length));
  }
  /// As write_in_place, with the bytes read-only (and a share of the lock).
  template <class F>
  decltype(auto) read_in_place(std::size_t offset, std::size_t length, F&& use) const {
    std::error_code ec;
    enter_checked(offset, length, ec, "read_in_place");
    access_guard guard(*this, false, ec);
    detail::throw_if(ec, "read_in_place", name());
    return std::forward<F>(use)(std::span<const std::byte>(bytes().subspan(offset, length)));
  }

  // ---- bytes ---------------------------------------------------------------------------------

  void write_bytes(std::span<const std::byte> bytes, std::size_t offset);
  void write_bytes(std::span<const std::byte> bytes, std::size_t offset, std::error_code& ec);
  void read_bytes(std::span<std::byte> out, std::size_t offset) const;
  void read_bytes(std::span<std::byte> out, std::size_t offset, std::error_code& ec) const;

 private:
  std::span<std::byte> bytes() const noexcept { return rw_lock::data(); }
  // Throws (std::out_of_range, or shmio::error if closed) unless [offset, offset + length) fits.
  void enter_checked(std::size_t offset, std::size_t length, std::error_code& ec,
                     std::string_view operation) const;
};

}  // namespace shmio
