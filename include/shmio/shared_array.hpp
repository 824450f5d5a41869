#pragma once
// shmio::shared_array<T> — a fixed-length array of T that processes share by name (the C#
// SharedMemory library's SharedArray<T>), with the cross-process reader/writer lock of
// shmio/rw_lock.hpp.
//
// T must be trivially copyable: elements are shared as bytes between processes. The segment
// records sizeof(T) and alignof(T), so opening it as a shared_array of another size or
// alignment fails with errc::incompatible (types of equal size and alignment cannot be told
// apart). The length is fixed by the creator and learnt by openers.
//
// Access:
// - operator[], at() and the iterators reach the elements in shared memory directly and never
//   take the lock: use lock()/lock_shared() (std::unique_lock, std::shared_lock) around them
//   when other processes write at the same time.
// - write() and copy_to() copy ranges, checking bounds first; with
//   access_options::lock_each_access they hold the lock while they copy.
//
// Example (the C# SharedMemory library's):
//   shmio::shared_array<int> producer(ex, shmio::create_only, "MySharedArray", 10);
//   producer[0] = 123;
//   producer[producer.size() - 1] = 456;
//   // another process:
//   shmio::shared_array<int> consumer(ex, shmio::open_only, "MySharedArray");
//   std::cout << consumer[0] << '\n' << consumer[consumer.size() - 1] << '\n';

#include <cstddef>
#include <cstring>
#include <span>
#include <string_view>
#include <system_error>
#include <type_traits>

#include "shmio/detail/bounds.hpp"
#include "shmio/open_mode.hpp"
#include "shmio/rw_lock.hpp"

namespace shmio {

template <class T>
class shared_array : public rw_lock {
  static_assert(std::is_trivially_copyable_v<T>,
                "shmio::shared_array<T>: T must be trivially copyable, because elements are "
                "shared between processes as bytes");
  static_assert(!std::is_const_v<T> && !std::is_volatile_v<T>,
                "shmio::shared_array<T>: T must not be const or volatile");
  static_assert(alignof(T) <= 4096, "shmio::shared_array<T>: alignof(T) must be at most 4096");

 public:
  using value_type = T;
  using size_type = std::size_t;
  using reference = T&;
  using const_reference = const T&;
  using iterator = T*;
  using const_iterator = const T*;

  /// Creates the array `name` with `length` (>= 1) zero-filled elements. Throws shmio::error
  /// (errc::invalid_argument, errc::already_exists, errc::no_space, ...).
  shared_array(const executor_type& ex, create_only_t, std::string_view name, std::size_t length,
               const access_options& options = {}) {
    std::error_code ec;
    *this = shared_array(ex, create_only, name, length, options, ec);
    detail::throw_if(ec, "create shared array", name);
  }
  /// Opens the array `name`; its elements must be of T's size and alignment.
  shared_array(const executor_type& ex, open_only_t, std::string_view name,
               const access_options& options = {}) {
    std::error_code ec;
    *this = shared_array(ex, open_only, name, options, ec);
    detail::throw_if(ec, "open shared array", name);
  }
  /// Opens the array `name`, or creates it with `length` elements.
  shared_array(const executor_type& ex, open_or_create_t, std::string_view name, std::size_t length,
               const access_options& options = {}) {
    std::error_code ec;
    *this = shared_array(ex, open_or_create, name, length, options, ec);
    detail::throw_if(ec, "open_or_create shared array", name);
  }
  /// The error_code forms: on failure `ec` is set and the array is closed.
  shared_array(const executor_type& ex, create_only_t, std::string_view name, std::size_t length,
               const access_options& options, std::error_code& ec)
      : rw_lock(ex) {
    std::size_t body = 0;
    if (length == 0 || !body_size(length, sizeof(T), alignof(T), body)) {
      ec = errc::invalid_argument;
      return;
    }
    segment seg = segment::create(name, object_kind::shared_array, body,
                                  initializer(length, sizeof(T), alignof(T)), ec);
    if (!ec) attach(ex, std::move(seg), sizeof(T), alignof(T), options, ec);
  }
  shared_array(const executor_type& ex, open_only_t, std::string_view name,
               const access_options& options, std::error_code& ec)
      : rw_lock(ex) {
    segment seg = segment::open(name, object_kind::shared_array, ec);
    if (!ec) attach(ex, std::move(seg), sizeof(T), alignof(T), options, ec);
  }
  shared_array(const executor_type& ex, open_or_create_t, std::string_view name, std::size_t length,
               const access_options& options, std::error_code& ec)
      : rw_lock(ex) {
    std::size_t body = 0;
    if (length == 0 || !body_size(length, sizeof(T), alignof(T), body)) {
      ec = errc::invalid_argument;
      return;
    }
    segment seg = segment::open_or_create(name, object_kind::shared_array, body,
                                          initializer(length, sizeof(T), alignof(T)), ec);
    if (!ec) attach(ex, std::move(seg), sizeof(T), alignof(T), options, ec);
  }

  shared_array(shared_array&&) noexcept = default;
  /// Closes this handle first (see rw_lock::close()).
  shared_array& operator=(shared_array&&) noexcept = default;

  /// Elements in the array (0 once closed).
  std::size_t size() const noexcept { return element_count(); }
  bool empty() const noexcept { return size() == 0; }

  T* data() const noexcept { return reinterpret_cast<T*>(rw_lock::data().data()); }
  /// The element at `i`, in shared memory; no bounds check, no lock.
  T& operator[](std::size_t i) const noexcept { return data()[i]; }
  /// The element at `i`, in shared memory; throws std::out_of_range if `i >= size()`.
  T& at(std::size_t i) const {
    if (i >= size()) detail::throw_out_of_range("at", name(), i, 1, size(), "elements");
    return data()[i];
  }
  T* begin() const noexcept { return data(); }
  T* end() const noexcept { return data() + size(); }
  const T* cbegin() const noexcept { return begin(); }
  const T* cend() const noexcept { return end(); }

  /// Copies `values` into the elements from `start` on. Throws std::out_of_range if they do
  /// not fit; shmio::error with errc::timed_out if the lock (lock_each_access) did not come.
  void write(std::span<const T> values, std::size_t start = 0) {
    std::error_code ec;
    write(values, start, ec);
    raise(ec, "write", start, values.size());
  }
  /// As above; out of range is errc::invalid_argument, and nothing is written then.
  void write(std::span<const T> values, std::size_t start, std::error_code& ec) {
    if (!check(start, values.size(), ec)) return;
    access_guard guard(*this, true, ec);
    if (ec) return;
    if (!values.empty()) std::memcpy(data() + start, values.data(), values.size_bytes());
    guard.access_done(ec);
  }

  /// Copies the elements from `start` on into `out` (out.size() of them). Errors as write().
  void copy_to(std::span<T> out, std::size_t start = 0) const {
    std::error_code ec;
    copy_to(out, start, ec);
    raise(ec, "copy_to", start, out.size());
  }
  void copy_to(std::span<T> out, std::size_t start, std::error_code& ec) const {
    if (!check(start, out.size(), ec)) return;
    access_guard guard(*this, false, ec);
    if (ec) return;
    if (!out.empty()) std::memcpy(out.data(), data() + start, out.size_bytes());
    guard.access_done(ec);
  }

 private:
  bool check(std::size_t start, std::size_t count, std::error_code& ec) const {
    ec.clear();
    if (!is_open()) {
      ec = asio::error::bad_descriptor;
      return false;
    }
    if (!detail::in_bounds(start, count, size())) {
      ec = errc::invalid_argument;
      return false;
    }
    return true;
  }
  void raise(const std::error_code& ec, std::string_view operation, std::size_t start,
             std::size_t count) const {
    if (ec == errc::invalid_argument)
      detail::throw_out_of_range(operation, name(), start, count, size(), "elements");
    if (ec != errc::owner_died) detail::throw_if(ec, operation, name());  // done: see lock()
  }
};

}  // namespace shmio
