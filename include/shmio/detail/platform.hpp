#pragma once
// The platform layer: every Linux call shmio makes, behind declarations that include no system
// header. Implemented in src/platform/. Functions report failures as std::error_code values in
// the system category unless they say otherwise.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace shmio::detail::platform {

// ---- files --------------------------------------------------------------------------------

/// An owned file descriptor; -1 when empty.
class unique_fd {
 public:
  unique_fd() noexcept = default;
  explicit unique_fd(int fd) noexcept : fd_(fd) {}
  unique_fd(unique_fd&& o) noexcept : fd_(o.release()) {}
  unique_fd& operator=(unique_fd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  ~unique_fd() { reset(); }
  int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }
  int release() noexcept { return std::exchange(fd_, -1); }
  void reset(int fd = -1) noexcept;

 private:
  int fd_ = -1;
};

struct file_status {
  std::uint64_t size = 0;
  std::uint64_t inode = 0;
  std::uint32_t owner_uid = 0;
  std::uint32_t mode = 0;  // permission bits only
  std::uint32_t links = 0;
  bool regular = false;
  std::uint64_t modified_ns = 0;  // last modification, realtime clock
};

/// Creates `path` exclusively (O_CREAT|O_EXCL|O_NOFOLLOW), mode 0600.
unique_fd create_exclusive(const std::string& path, std::error_code& ec);
/// Opens an existing `path` read-write without following a final symlink.
unique_fd open_existing(const std::string& path, std::error_code& ec);
/// The same, read-only: for looking without the power to change anything.
unique_fd open_read_only(const std::string& path, std::error_code& ec);
/// The names in `directory` (no "." or ".."), in no particular order.
std::vector<std::string> list_directory(const std::string& directory, std::error_code& ec);
file_status status(int fd, std::error_code& ec);
/// The same for `path` itself (a final symlink is not followed): for a file we may not open.
file_status link_status(const std::string& path, std::error_code& ec);
/// Reserves `size` bytes so that a full /dev/shm fails here (ENOSPC), never as SIGBUS later.
void reserve(int fd, std::uint64_t size, std::error_code& ec);
/// Renames `from` to `to` unless `to` exists (then errc::file_exists).
void rename_no_replace(const std::string& from, const std::string& to, std::error_code& ec);
void unlink(const std::string& path, std::error_code& ec);

/// `guarded`: registered with the truncation guard (below).
void* map_shared(int fd, std::size_t size, std::error_code& ec, bool guarded = false);
/// A read-only shared mapping, of a file opened read-only.
const void* map_read_only(int fd, std::size_t size, std::error_code& ec, bool guarded = false);
void unmap(void* address, std::size_t size) noexcept;

/// The truncation guard. A process that truncates a segment's file makes every other process's
/// next access to the pages it took fault (SIGBUS), which kills the process by default. Once
/// installed (once per process; it chains to the SIGBUS handler that was there before for
/// faults elsewhere), the handler maps private zero pages over the rest of a guarded mapping
/// that faulted and marks it: the access completes, reads zeros and writes nowhere, and the
/// object that owns the mapping asks mapping_faulted and fails. A mapping is guarded when it
/// is made so (map_shared, map_read_only) and until it is unmapped; a fault in any other goes
/// to the handler that was there before (by default the process dies, as without the guard):
/// only an object that asks mapping_faulted may be left to run on zeros.
void install_truncation_guard(std::error_code& ec) noexcept;
bool truncation_guard_installed() noexcept;
/// True once the guard replaced pages of the mapping that starts at `base`.
bool mapping_faulted(const void* base) noexcept;
/// Faults the guard recovered in this process so far.
std::uint64_t faults_recovered() noexcept;
void guard_mapping(const void* base, std::size_t size) noexcept;
void unguard_mapping(const void* base) noexcept;

/// Gathers byte ranges of a shared mapping into runs of adjacent pages and fills in the page
/// table entries of each run with one system call (MADV_POPULATE_WRITE), so that touching them
/// afterwards takes no page fault: a fault costs several times a system call that maps many
/// pages (docs/performance.md). Only for pages the caller is about to touch: every page mapped
/// costs its share of the unmap. Best effort: where the kernel lacks it (before 5.14) or a
/// page is beyond the file's end, nothing is mapped and the touch faults as it would have (the
/// call reports an error instead of raising SIGBUS).
class page_populator {
 public:
  page_populator() = default;
  page_populator(const page_populator&) = delete;
  page_populator& operator=(const page_populator&) = delete;
  ~page_populator() { flush(); }
  /// `size` bytes from `address` (size 0: nothing).
  void add(const void* address, std::size_t size) noexcept;
  /// Populates the run gathered so far.
  void flush() noexcept;

 private:
  std::uintptr_t begin_ = 0;  // page-aligned; begin_ == end_: no run
  std::uintptr_t end_ = 0;
};

// Open-file-description record locks on single bytes of a file: they belong to the open file,
// not the process, so they are released when its last descriptor closes or the process dies.
enum class lock_kind { shared, exclusive, unlock };
/// Tries once; returns false if another open file holds a conflicting lock.
bool try_lock_byte(int fd, std::uint64_t byte, lock_kind kind, std::error_code& ec);
/// True if another open file holds a lock on `byte` (ours do not count).
bool byte_locked_by_other(int fd, std::uint64_t byte, std::error_code& ec);

// POSIX record locks (F_SETLK) on single bytes: owned by the process, so F_GETLK names the
// holder. Any close of any descriptor of the file in the process drops them all: only for
// naming a process, never for exclusion.
/// Takes a write lock on `byte` for this process; false if another process holds one.
bool lock_byte_for_process(int fd, std::uint64_t byte) noexcept;
/// Gives it back.
void unlock_byte_for_process(int fd, std::uint64_t byte) noexcept;
/// Who holds `byte` against this process: nobody (or only this process itself, whose own locks
/// F_GETLK does not report), a process this pid namespace can see (its pid here), or a lock
/// whose holder it cannot name (a process not visible from here, or an open file's lock).
struct byte_holder {
  bool held = false;
  std::uint32_t pid = 0;  // when held: 0 if it cannot be named
};
byte_holder process_holding_byte(int fd, std::uint64_t byte) noexcept;

// ---- futex on a word in shared memory -----------------------------------------------------

enum class futex_result { woken, value_changed, timed_out, interrupted };
/// Sleeps while `*word == expected`, for at most `timeout` (negative: no limit).
futex_result futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected,
                        std::chrono::nanoseconds timeout) noexcept;
/// Wakes up to `count` sleepers on `word`, in any process; returns how many it woke.
int futex_wake(std::atomic<std::uint32_t>& word, int count) noexcept;

/// One word of futex_wait_any: sleep while it holds `expected`. `shared`: a word in shared
/// memory (woken from any process), else a private one of this process.
struct futex_watch {
  std::atomic<std::uint32_t>* word = nullptr;
  std::uint32_t expected = 0;
  bool shared = true;
};
inline constexpr int futex_wait_any_max = 128;
/// Sleeps until one of `words` (at most futex_wait_any_max) is woken, or returns at once if
/// one differs from its expected value. Returns the index woken (the highest, if several were
/// woken before the thread ran), -1 for "look again" (a value
/// differed, a signal, a word that is no longer mapped), -2 if the kernel has no
/// futex_waitv (Linux before 5.16), -3 if the call failed otherwise (a seccomp filter's EPERM).
int futex_wait_any(const futex_watch* words, std::size_t count) noexcept;

// ---- doorbells: datagram sockets in the abstract namespace --------------------------------

/// Binds a new non-blocking doorbell socket named after a fresh random id; returns it and sets
/// `id` (never 0, top bit clear: see wait_queue.cpp for the ids with the top bit set).
unique_fd open_doorbell(std::uint64_t& id, std::error_code& ec);
enum class ring_result { rung, already_pending, gone };
/// Sends one datagram to the doorbell `id` without blocking. `gone` means nobody owns it any more.
ring_result ring_doorbell(std::uint64_t id) noexcept;
/// Reads and discards every datagram waiting on `fd`; returns how many there were.
std::size_t drain_doorbell(int fd) noexcept;
/// In a child forked without exec, makes the number `fd` name /dev/null instead of the file it
/// shares with the parent, so that a reactor's deregistration of `fd` by number, in an epoll
/// set the two processes may share, finds nothing of the parent's (as when a socket the
/// reactor opened itself is closed). Does nothing if /dev/null cannot be opened.
void orphan_inherited(int fd) noexcept;
/// Waits up to `timeout` for `fd` to become readable (negative: no limit).
bool wait_readable(int fd, std::chrono::nanoseconds timeout) noexcept;

// ---- the asymmetric fence ----------------------------------------------------------------
// Dekker's pattern between a frequent side (a publisher: store, then load) and a rare one (a
// party about to park: store, then load) without a StoreLoad fence on the frequent side: the
// rare side issues heavy_fence() between its store and its load, which makes every thread of
// every registered process execute a full barrier (membarrier(2), Linux 4.16).

/// Checks that membarrier's global expedited command exists here and registers this process
/// for it. Once done, heavy_fence_registered() holds until a fork() (in the child).
std::error_code enable_heavy_fence() noexcept;
/// True if this process's plain stores are ordered by other processes' heavy_fence().
bool heavy_fence_registered() noexcept;
/// True once enable_heavy_fence() succeeded in this process (or in its parent before fork()).
bool heavy_fence_enabled() noexcept;
/// A full barrier on every CPU that runs a registered process. Only after enable_heavy_fence()
/// succeeded; aborts if the kernel refuses it afterwards (a seccomp filter installed since).
void heavy_fence() noexcept;

// ---- the process -------------------------------------------------------------------------

std::uint32_t process_id() noexcept;
/// The calling thread's kernel id (gettid).
std::uint32_t thread_id() noexcept;
std::uint32_t user_id() noexcept;
bool process_alive(std::uint32_t pid) noexcept;
/// A descriptor that becomes readable when process `pid` exits (pidfd_open, Linux 5.3), with
/// close-on-exec set; -1 with `ec` set if there is no such process or no pidfd here.
int open_process_watch(std::uint32_t pid, std::error_code& ec) noexcept;
/// True while thread `tid` of process `pid` exists (ids may be reused, like any pid).
bool thread_alive(std::uint32_t pid, std::uint32_t tid) noexcept;
std::uint64_t random_u64() noexcept;
std::uint64_t realtime_ns() noexcept;
/// CPUs this process may run on.
unsigned usable_cpus() noexcept;
/// CPUs the machine has online.
unsigned online_cpus() noexcept;
void yield() noexcept;
void sleep_for(std::chrono::nanoseconds d) noexcept;

/// A pause hint for spin loops (cheap; lets the sibling hyperthread run).
inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace shmio::detail::platform
