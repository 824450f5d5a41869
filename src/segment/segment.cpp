// Named segments: creation by rename, opening with validation, and lifetime by file locks.
#include "shmio/segment.hpp"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <new>

#include "shmio/detail/layout.hpp"
#include "shmio/detail/names.hpp"
#include "shmio/detail/platform.hpp"
#include "shmio/detail/segment_locks.hpp"

namespace shmio {
namespace {

namespace platform = detail::platform;
namespace layout = detail::layout;
using namespace std::chrono_literals;

// Rename/remove races with other creators resolve in a few rounds; this bounds pathological ones.
constexpr int max_create_rounds = 64;
using layout::max_body_size;

// Only a regular file of ours, readable by nobody else, is a segment we may use.
std::error_code check_ownership(const platform::file_status& st) {
  if (!st.regular || st.owner_uid != platform::user_id() || (st.mode & 077) != 0)
    return errc::access_denied;
  return {};
}

struct mapping {
  platform::unique_fd fd;
  std::byte* base = nullptr;
  std::size_t size = 0;
};

std::error_code validate_header(const layout::segment_header& h, std::uint64_t file_size,
                                object_kind kind) {
  if (h.magic != layout::segment_magic || h.version != layout::layout_version)
    return errc::incompatible;
  if (h.kind != static_cast<std::uint32_t>(kind)) return errc::incompatible;
  if (h.total_size != file_size || h.body_offset != sizeof(layout::segment_header))
    return errc::corrupted;
  return {};
}

enum class existing { opened, missing, stale_removed, live };

bool release_holder_lock(int fd, const std::string& path,
                         std::chrono::milliseconds patience = detail::admin_patience) noexcept;

// The header's page is touched right after the mapping (validated or written), and by every
// object after it: mapped in one call rather than by a page fault.
void populate_first_page(void* base) noexcept {
  platform::page_populator pages;
  pages.add(base, sizeof(layout::segment_header));
}

// The kinds whose mappings the truncation guard covers (platform.hpp): RPC's, where a service
// maps files its clients made, and every RPC end checks for a fault (docs/protocol.md).
bool guarded_kind(object_kind kind) noexcept {
  return kind == object_kind::rpc || kind == object_kind::rpc_listener;
}

// Looks at the file at `path`. A stale one is removed; a live one is opened (if `adopt`) or
// reported as live. `out` holds the mapping when the result is `opened`.
existing probe_existing(const std::string& path, object_kind kind, bool adopt, mapping& out,
                        std::error_code& ec,
                        std::chrono::milliseconds patience = detail::admin_patience) {
  platform::unique_fd fd = platform::open_existing(path, ec);
  if (ec) {
    if (ec == std::errc::no_such_file_or_directory) {
      ec.clear();
      return existing::missing;
    }
    ec = detail::file_error(ec);
    return existing::live;
  }
  auto st = platform::status(fd.get(), ec);
  if (!ec) ec = check_ownership(st);
  if (ec || !detail::lock_admin(fd.get(), ec, patience)) return existing::live;

  switch (detail::remove_if_unheld(fd.get(), path, ec)) {
    case detail::stale_test::gone:
      return existing::missing;  // removed since we opened it: look again
    case detail::stale_test::removed:
      return existing::stale_removed;  // closing fd drops our locks
    case detail::stale_test::held:
      // Why it could not tell (for a stale file: why its unlink failed).
      ec = detail::file_error(ec);
      break;
  }
  if (!ec && adopt) st = platform::status(fd.get(), ec);  // its size, as of under the lock
  if (ec || !adopt) {
    detail::unlock_admin(fd.get());
    return existing::live;
  }
  // Only a last closer whose unlink failed holds it exclusively without the admin lock, from
  // its upgrade until its descriptor closes: the file is on its way out, look again.
  const bool held =
      platform::try_lock_byte(fd.get(), layout::holder_lock_byte, platform::lock_kind::shared, ec);
  detail::unlock_admin(fd.get());
  if (ec) return existing::live;
  if (!held) return existing::missing;

  // From here on we are a holder: a failure leaves as a closer does, removing the file if every
  // other holder closed meanwhile (they kept it for us).
  const auto fail = [&](std::error_code why) {
    release_holder_lock(fd.get(), path);
    ec = why;
    return existing::live;
  };
  if (st.size < sizeof(layout::segment_header)) return fail(errc::corrupted);
  void* base = platform::map_shared(fd.get(), st.size, ec, guarded_kind(kind));
  if (ec) return fail(ec);
  populate_first_page(base);
  const std::error_code invalid =
      validate_header(*static_cast<const layout::segment_header*>(base), st.size, kind);
  if (invalid) {
    platform::unmap(base, st.size);
    return fail(invalid);
  }
  out.base = static_cast<std::byte*>(base);
  out.size = st.size;
  out.fd = std::move(fd);
  return existing::opened;
}

std::string temp_path() {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%u.%016llx", platform::process_id(),
                static_cast<unsigned long long>(platform::random_u64()));
  return std::string(detail::shm_directory) + std::string(detail::temporary_file_prefix) + buf;
}

// What creators killed before their rename left behind, removed by the next creates (at most
// one sweep a minute in a process: it lists the directory).
void sweep_temporaries_now_and_then() noexcept {
  static std::atomic<std::int64_t> next_sweep_ns{0};
  if (detail::turn_due(next_sweep_ns, std::chrono::minutes(1)))
    detail::sweep_abandoned_temporaries();
}

// Builds a complete segment under a private name, locked and initialised.
mapping build_private(const std::string& temp, object_kind kind, std::size_t body_size,
                      const segment::initializer& init, std::error_code& ec) {
  mapping m;
  if (body_size > max_body_size) {
    ec = errc::invalid_argument;
    return m;
  }
  const std::size_t total = sizeof(layout::segment_header) + body_size;
  m.fd = platform::create_exclusive(temp, ec);
  if (ec) {
    ec = detail::file_error(ec);
    return m;
  }
  // Held from the start, before the reserve (which may take long for a large file): a sweep
  // of abandoned temporaries never takes a file being built (segment_locks.hpp).
  if (!platform::try_lock_byte(m.fd.get(), layout::holder_lock_byte, platform::lock_kind::shared,
                               ec) &&
      !ec)
    ec = std::make_error_code(std::errc::resource_unavailable_try_again);  // swept: never, fresh
  if (!ec) platform::reserve(m.fd.get(), total, ec);
  void* base = ec ? nullptr : platform::map_shared(m.fd.get(), total, ec, guarded_kind(kind));
  if (ec) {
    ec = detail::file_error(ec);
    std::error_code ignored;
    platform::unlink(temp, ignored);
    m = {};
    return m;
  }
  m.base = static_cast<std::byte*>(base);
  m.size = total;
  populate_first_page(base);
  auto* h = new (m.base) layout::segment_header{};
  h->magic = layout::segment_magic;
  h->version = layout::layout_version;
  h->kind = static_cast<std::uint32_t>(kind);
  h->total_size = total;
  h->body_offset = sizeof(layout::segment_header);
  h->creator_pid = platform::process_id();
  h->created_ns = platform::realtime_ns();
  try {
    if (init) init({m.base + sizeof(layout::segment_header), body_size});
  } catch (...) {
    platform::unmap(m.base, m.size);
    std::error_code ignored;
    platform::unlink(temp, ignored);
    throw;
  }
  return m;
}

// Last user? Upgrading our shared holder lock succeeds only if nobody else holds one; then
// the file is removed. Under the admin lock no opener can slip in between that test and the
// unlink. When it fails, our holder lock is dropped before the admin lock: another closer that
// takes the admin lock next must not see it, or the two could each find the other still there
// and neither would remove the file. Returns false if the admin lock could not be taken within
// `patience` (our holder lock is kept: we still count as a user).
bool release_holder_lock(int fd, const std::string& path,
                         std::chrono::milliseconds patience) noexcept {
  std::error_code ec;
  if (!detail::lock_admin(fd, ec, patience)) return false;
  if (platform::try_lock_byte(fd, layout::holder_lock_byte, platform::lock_kind::exclusive, ec)) {
    auto st = platform::status(fd, ec);
    if (!ec && st.links > 0) platform::unlink(path, ec);
    // A file that stays (its unlink failed) is still in use until the descriptor closes, which
    // may be later (segment::release_name): held shared again, not as one on its way out,
    // which would turn opens and creates away meanwhile.
    std::error_code ignored;
    if (ec)
      platform::try_lock_byte(fd, layout::holder_lock_byte, platform::lock_kind::shared, ignored);
  } else {
    std::error_code ignored;
    platform::try_lock_byte(fd, layout::holder_lock_byte, platform::lock_kind::unlock, ignored);
  }
  detail::unlock_admin(fd);
  return true;
}

}  // namespace

struct segment_access {
  static void set_admin_patience(segment& s, std::chrono::milliseconds patience) noexcept {
    s.admin_patience_ms_ = static_cast<std::uint32_t>(patience.count());
  }
  static segment make(std::string_view name, std::string path, mapping m, object_kind kind,
                      bool created) {
    segment s;
    s.name_ = std::string(name);
    s.path_ = std::move(path);
    s.fd_ = m.fd.release();
    s.base_ = m.base;
    s.size_ = m.size;
    s.kind_ = kind;
    s.created_ = created;
    s.opened_by_ = platform::process_id();
    return s;
  }

  static segment create_or_adopt(std::string_view name, object_kind kind, std::size_t body_size,
                                 const segment::initializer& init, bool adopt,
                                 std::error_code& ec) {
    ec.clear();
    std::string path = detail::segment_path(name, ec);
    if (ec) return {};
    sweep_temporaries_now_and_then();
    const std::string temp = temp_path();
    mapping mine = build_private(temp, kind, body_size, init, ec);
    if (ec) return {};
    auto discard_mine = [&] {
      platform::unmap(mine.base, mine.size);
      std::error_code ignored;
      platform::unlink(temp, ignored);
    };
    for (int round = 0; round < max_create_rounds; ++round) {
      platform::rename_no_replace(temp, path, ec);
      if (!ec) return make(name, std::move(path), std::move(mine), kind, true);
      if (ec != std::errc::file_exists) {
        ec = detail::file_error(ec);
        discard_mine();
        return {};
      }
      ec.clear();
      mapping theirs;
      switch (probe_existing(path, kind, adopt, theirs, ec)) {
        case existing::opened:
          discard_mine();
          return make(name, std::move(path), std::move(theirs), kind, false);
        case existing::live:
          if (!ec) ec = errc::already_exists;
          discard_mine();
          return {};
        case existing::missing:
        case existing::stale_removed:
          continue;
      }
    }
    discard_mine();
    ec = errc::busy;
    return {};
  }
};

segment segment::create(std::string_view name, object_kind kind, std::size_t body_size,
                        const initializer& init, std::error_code& ec) {
  return segment_access::create_or_adopt(name, kind, body_size, init, false, ec);
}

segment segment::open_or_create(std::string_view name, object_kind kind, std::size_t body_size,
                                const initializer& init, std::error_code& ec) {
  ec.clear();
  std::string path = detail::segment_path(name, ec);
  if (ec) return {};
  // Opening first keeps the common case (it exists) free of a throw-away build.
  mapping m;
  for (int round = 0; round < max_create_rounds; ++round) {
    auto r = probe_existing(path, kind, true, m, ec);
    if (r == existing::opened) return segment_access::make(name, path, std::move(m), kind, false);
    if (ec) return {};
    if (r == existing::missing) break;
  }
  return segment_access::create_or_adopt(name, kind, body_size, init, true, ec);
}

segment segment::open(std::string_view name, object_kind kind, std::error_code& ec) {
  return detail::open_segment(name, kind, detail::admin_patience, ec);
}

bool detail::file_shrunk(const segment& s) noexcept {
  if (!s.is_open()) return false;
  std::error_code ec;
  const auto st = platform::status(s.native_handle(), ec);
  return !ec && st.size < sizeof(layout::segment_header) + s.body().size();
}

void detail::set_close_patience(segment& s, std::chrono::milliseconds patience) noexcept {
  segment_access::set_admin_patience(s, patience);
}

segment detail::open_segment(std::string_view name, object_kind kind,
                             std::chrono::milliseconds admin_patience, std::error_code& ec) {
  ec.clear();
  std::string path = detail::segment_path(name, ec);
  if (ec) return {};
  mapping m;
  for (int round = 0; round < max_create_rounds; ++round) {
    switch (probe_existing(path, kind, true, m, ec, admin_patience)) {
      case existing::opened:
        return segment_access::make(name, path, std::move(m), kind, false);
      case existing::live:
        return {};
      case existing::stale_removed:
        ec = errc::not_found;
        return {};
      case existing::missing:
        // A closer may have removed it between our open and our lock; one more look decides.
        if (round > 0) {
          ec = errc::not_found;
          return {};
        }
        continue;
    }
  }
  ec = errc::not_found;
  return {};
}

segment::segment(create_only_t, std::string_view name, object_kind kind, std::size_t body_size,
                 const initializer& init) {
  std::error_code ec;
  *this = create(name, kind, body_size, init, ec);
  detail::throw_if(ec, "create", name);
}

segment::segment(open_only_t, std::string_view name, object_kind kind) {
  std::error_code ec;
  *this = open(name, kind, ec);
  detail::throw_if(ec, "open", name);
}

segment::segment(open_or_create_t, std::string_view name, object_kind kind, std::size_t body_size,
                 const initializer& init) {
  std::error_code ec;
  *this = open_or_create(name, kind, body_size, init, ec);
  detail::throw_if(ec, "open_or_create", name);
}

segment::segment(segment&& o) noexcept
    : name_(std::move(o.name_)),
      path_(std::move(o.path_)),
      fd_(std::exchange(o.fd_, -1)),
      base_(std::exchange(o.base_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      kind_(o.kind_),
      created_(o.created_),
      name_released_(o.name_released_),
      name_undecided_(o.name_undecided_),
      opened_by_(o.opened_by_),
      admin_patience_ms_(o.admin_patience_ms_) {}

segment& segment::operator=(segment&& o) noexcept {
  if (this != &o) {
    close();
    name_ = std::move(o.name_);
    path_ = std::move(o.path_);
    fd_ = std::exchange(o.fd_, -1);
    base_ = std::exchange(o.base_, nullptr);
    size_ = std::exchange(o.size_, 0);
    kind_ = o.kind_;
    created_ = o.created_;
    name_released_ = o.name_released_;
    name_undecided_ = o.name_undecided_;
    opened_by_ = o.opened_by_;
    admin_patience_ms_ = o.admin_patience_ms_;
  }
  return *this;
}

segment::~segment() {
  close();
}

void segment::close() noexcept {
  if (!base_) return;
  // A release that found the admin lock held (by a process stopped in its open or close, or a
  // hostile one) left the decision open while we still held the file: the other users may all
  // have gone since, each seeing us as one. One more look, without waiting (a descriptor may
  // close on a thread that serves others), before it goes; otherwise the file waits for a sweep.
  if (name_released_ && name_undecided_ && platform::process_id() == opened_by_)
    release_holder_lock(fd_, path_, std::chrono::milliseconds(0));
  release_name();
  platform::unique_fd fd(std::exchange(fd_, -1));
  platform::unmap(base_, size_);
  base_ = nullptr;
  size_ = 0;
  name_released_ = false;
  name_undecided_ = false;
}  // closing fd releases any lock left

void segment::release_name() noexcept {
  if (!base_ || name_released_) return;
  name_released_ = true;
  // A child forked without exec shares our open file description and with it our locks: any
  // lock it dropped would be dropped for us. It only unmaps; the parent decides the removal.
  if (platform::process_id() == opened_by_)
    name_undecided_ =
        !release_holder_lock(fd_, path_, std::chrono::milliseconds(admin_patience_ms_));
}

bool segment::faulted() const noexcept {
  return platform::mapping_faulted(base_);
}

std::span<std::byte> segment::body() const noexcept {
  if (!base_) return {};
  return {base_ + sizeof(detail::layout::segment_header),
          size_ - sizeof(detail::layout::segment_header)};
}

bool segment::remove(std::string_view name, std::error_code& ec) {
  ec.clear();
  std::string path = detail::segment_path(name, ec);
  if (ec) return false;
  return detail::remove_path(path, ec);
}

}  // namespace shmio
