#pragma once
// shmio::rw_lock — the cross-process reader/writer lock of a shared_array or buffer_read_write
// (both derive from it), with the standard shape: std::unique_lock and std::shared_lock work.
//
// - Writers exclude each other and every reader; readers are counted, any number at once.
// - Writers are preferred: once a writer asks, new readers wait, so a stream of readers never
//   starves a writer (a stream of writers may delay readers).
// - Ownership belongs to the handle (the shared_array or buffer_read_write object), not the
//   thread: any thread of the handle may unlock what another thread of it locked. Locking again
//   from the thread that holds the lock deadlocks, as with std::shared_mutex.
// - Robust: a process killed while holding the lock, or a share of it, does not block the
//   others for ever. Waiters notice within about 0.2 s that the holder is gone (the kernel
//   drops its file lock), reclaim what it held, and the next acquirer is told: the error_code
//   forms report errc::owner_died *with the lock held*, like a robust mutex's EOWNERDEAD, and
//   the async forms complete with `previous_owner_died == true`. The data the lock guarded may
//   be half-written then. A handle closed while holding the lock counts as having died.
// - At most 256 handles may have one segment open at a time (errc::too_many_participants).
//
// Waiting follows shmio/wait_strategy.hpp: spin briefly, then park (a futex for blocking calls,
// the executor's reactor for async ones). Unlocking costs one shared-memory load per wait
// queue when nobody waits, and no system call.

#include <chrono>
#include <cmath>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <system_error>

#include <asio/any_io_executor.hpp>
#include <asio/async_result.hpp>

#include "shmio/error.hpp"
#include "shmio/segment.hpp"
#include "shmio/wait_strategy.hpp"

namespace shmio {

/// How a shared_array or buffer_read_write handle accesses its data.
struct access_options {
  /// Plain reads and writes take no lock (as in the C# SharedMemory library). When true, each one
  /// waits at the lock — shared for reads, exclusive for writes — for up to `lock_timeout`, and
  /// fails with errc::timed_out after it. A read or write made while this handle already holds
  /// the lock exclusively goes ahead without waiting. In-place access through references
  /// (operator[], at(), iterators) never takes the lock. If the lock's previous holder died
  /// (rw_lock, "Robust"), the access still goes ahead, and its error_code form then reports
  /// errc::owner_died with the access done: what the dead holder guarded may be half-written.
  /// The throwing forms do not say so, as lock() does not.
  bool lock_each_access = false;
  /// The C# SharedMemory library's ReadWriteTimeout.
  std::chrono::milliseconds lock_timeout{100};
  /// How waits for the lock spin and park.
  wait_strategy strategy{};
};

class rw_lock {
 public:
  using executor_type = asio::any_io_executor;

  executor_type get_executor() const noexcept;
  bool is_open() const noexcept { return impl_ != nullptr; }
  /// The segment's name; kept after close(), for what a closed handle's calls report.
  const std::string& name() const noexcept;

  // ---- exclusive -------------------------------------------------------------------------
  // The forms without error_code acquire even after a holder died (they do not say so);
  // they throw shmio::error only if the handle is closed.

  void lock();
  bool try_lock();
  /// Tries for `timeout` (zero or less: once), as a timed mutex's try_lock_for does.
  template <class Rep, class Period>
  bool try_lock_for(const std::chrono::duration<Rep, Period>& timeout) {
    return try_lock_for(to_milliseconds(timeout), throw_on_error());
  }
  /// Releases the exclusive lock this handle holds; does nothing if it holds none.
  void unlock() noexcept;

  /// Waits for the lock. On return it is held if `ec` is clear or errc::owner_died (the
  /// previous holder died holding it), and not held for any other error.
  void lock(std::error_code& ec);
  /// As lock(ec), giving up after `timeout` (zero: one try; negative or milliseconds::max(): no
  /// limit, as for the library's other waits; the duration template above tries a negative
  /// once, as a timed mutex does): returns false then, `ec` clear.
  bool try_lock_for(std::chrono::milliseconds timeout, std::error_code& ec);

  // ---- shared ----------------------------------------------------------------------------

  void lock_shared();
  bool try_lock_shared();
  /// Tries for `timeout` (zero or less: once), as a timed mutex's try_lock_shared_for does.
  template <class Rep, class Period>
  bool try_lock_shared_for(const std::chrono::duration<Rep, Period>& timeout) {
    return try_lock_shared_for(to_milliseconds(timeout), throw_on_error());
  }
  /// Releases one share this handle holds; does nothing if it holds none.
  void unlock_shared() noexcept;

  void lock_shared(std::error_code& ec);
  bool try_lock_shared_for(std::chrono::milliseconds timeout, std::error_code& ec);

  // ---- asynchronous ----------------------------------------------------------------------

  /// Waits asynchronously for the exclusive lock.
  ///
  /// Completion signature: `void(std::error_code, bool previous_owner_died)`. On success the
  /// lock is held by this handle (release it with unlock()); `previous_owner_died` is true if
  /// it was reclaimed from a holder that died. A handler never runs inside this call: a lock
  /// that can be taken at once completes as if by asio::post to the handler's executor.
  ///
  /// Per-operation cancellation: terminal, partial and total. A cancelled operation completes
  /// once with asio::error::operation_aborted and leaves nothing held or claimed. Closing the
  /// handle aborts pending operations the same way.
  template <class CompletionToken>
  auto async_lock(CompletionToken&& token);
  /// As async_lock, for a share (release it with unlock_shared()).
  template <class CompletionToken>
  auto async_lock_shared(CompletionToken&& token);

  /// Closes the handle: pending operations are aborted, whatever it holds is released (and
  /// reported to the next acquirer as a death), and the last handle removes the segment.
  void close() noexcept;

 protected:
  struct impl;

  // Rounds up to milliseconds, saturating: seconds::max() or a thousand years must not overflow
  // into a short (or negative) wait. A duration of zero or less (or NaN) tries once, as a
  // timed mutex's try_lock_for does (std::unique_lock calls these).
  template <class Rep, class Period>
  static std::chrono::milliseconds to_milliseconds(const std::chrono::duration<Rep, Period>& d) {
    using ms = std::chrono::milliseconds;
    const long double as_ms = std::chrono::duration<long double, std::milli>(d).count();
    if (!(as_ms > 0)) return ms(0);
    if (as_ms >= static_cast<long double>(ms::max().count())) return ms::max();
    return ms(static_cast<ms::rep>(std::ceil(as_ms)));
  }

  rw_lock() noexcept = default;
  /// A handle that has its executor before it opens: one whose open fails keeps it.
  explicit rw_lock(const executor_type& ex) noexcept : ex_(ex) {}
  /// As an Asio I/O object's: the moved-from handle keeps a copy of the executor, so that its
  /// async calls still complete through it.
  rw_lock(rw_lock&& other) noexcept
      : impl_(std::move(other.impl_)),
        ex_(other.ex_),
        closed_name_(std::move(other.closed_name_)) {}
  rw_lock& operator=(rw_lock&& other) noexcept;
  ~rw_lock();

  /// Validates an opened segment's locked-buffer body against the element type and joins its
  /// lock. On failure sets `ec` and leaves the handle closed.
  void attach(const executor_type& ex, segment seg, std::size_t element_size,
              std::size_t element_align, const access_options& options, std::error_code& ec);
  /// The initializer of a new segment's body, and its size; false if the sizes overflow.
  static segment::initializer initializer(std::size_t count, std::size_t element_size,
                                          std::size_t element_align);
  static bool body_size(std::size_t count, std::size_t element_size, std::size_t element_align,
                        std::size_t& out) noexcept;

  /// The data bytes (empty when closed); and the element count.
  std::span<std::byte> data() const noexcept;
  std::size_t element_count() const noexcept;

  /// Guarded access (access_options::lock_each_access): enter before, leave after. enter sets
  /// `ec` (errc::timed_out, or bad_descriptor if closed) and then must not be left. A lock
  /// whose previous holder died is entered (`ec` clear): owner_died() says so, and the
  /// error_code form of the access reports it once the access is done (access_done).
  class access_guard {
   public:
    access_guard(const rw_lock& l, bool exclusive, std::error_code& ec);
    ~access_guard();
    access_guard(const access_guard&) = delete;
    access_guard& operator=(const access_guard&) = delete;
    bool owner_died() const noexcept { return died_; }
    /// After the access: `ec` is errc::owner_died if the lock's previous holder died.
    void access_done(std::error_code& ec) const noexcept {
      if (died_) ec = errc::owner_died;
    }

   private:
    const rw_lock& lock_;
    enum class held { nothing, share, exclusive } held_ = held::nothing;
    bool died_ = false;
  };

  std::shared_ptr<impl> impl_;
  /// The executor the handle was opened with. Kept after close(): a closed handle's async
  /// operations still complete through it, never on a thread of Asio's system executor.
  executor_type ex_;
  std::string closed_name_;  // name() after close(): a closed handle's errors still name it

 private:
  struct throw_on_error {};
  bool try_lock_for(std::chrono::milliseconds timeout, throw_on_error);
  bool try_lock_shared_for(std::chrono::milliseconds timeout, throw_on_error);
  template <class Handler>
  static void start(const std::shared_ptr<impl>& im, const executor_type& ex, bool exclusive,
                    Handler&& handler);
};

}  // namespace shmio

#include "shmio/impl/rw_lock.hpp"
