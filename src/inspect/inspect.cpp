// Read-only inspection of segment files: parse, validate, never lock or write (except the
// stale removal at the end, which follows the same protocol as segment creation).
#include "shmio/inspect.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <tuple>

#include "read_segments.hpp"
#include "shmio/detail/layout.hpp"
#include "shmio/detail/names.hpp"
#include "shmio/detail/platform.hpp"
#include "shmio/detail/rpc_listener.hpp"
#include "shmio/detail/segment_locks.hpp"

namespace shmio::inspect {
namespace {

namespace platform = detail::platform;
namespace layout = detail::layout;
using namespace std::chrono_literals;

constexpr std::string_view temp_prefix = detail::temporary_file_prefix;
constexpr std::string_view global_part = "global.";
constexpr std::string_view global_name_prefix = "Global\\";
constexpr std::string_view local_name_prefix = "Local\\";

std::string user_part() {
  return "u" + std::to_string(platform::user_id()) + ".";
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// The inverse of detail::escape_name; a malformed escape is kept as it is.
std::string unescape(std::string_view escaped) {
  std::string out;
  for (std::size_t i = 0; i < escaped.size(); ++i) {
    if (escaped[i] == '%' && i + 2 < escaped.size() && hex_value(escaped[i + 1]) >= 0 &&
        hex_value(escaped[i + 2]) >= 0) {
      out += static_cast<char>(hex_value(escaped[i + 1]) * 16 + hex_value(escaped[i + 2]));
      i += 2;
    } else {
      out += escaped[i];
    }
  }
  return out;
}

// Fills name, name_cut, temporary and temp_pid from a file name. False if it is not one of
// this user's shmio files by its name.
bool parse_file_name(std::string_view file, segment_info& info) {
  if (file.starts_with(temp_prefix)) {
    info.temporary = true;
    std::string_view rest = file.substr(temp_prefix.size());
    std::uint64_t pid = 0;
    std::size_t i = 0;
    for (; i < rest.size() && rest[i] >= '0' && rest[i] <= '9' && pid <= UINT32_MAX; ++i)
      pid = pid * 10 + static_cast<std::uint64_t>(rest[i] - '0');
    info.temp_pid = pid <= UINT32_MAX ? static_cast<std::uint32_t>(pid) : 0;
    info.name = std::string(file);
    return i > 0;
  }
  if (!file.starts_with(detail::file_prefix)) return false;
  std::string_view rest = file.substr(detail::file_prefix.size());
  const std::string mine = user_part();
  std::string prefix;
  if (rest.starts_with(mine)) {
    rest.remove_prefix(mine.size());
  } else if (rest.starts_with(global_part)) {
    rest.remove_prefix(global_part.size());
    prefix = global_name_prefix;
  } else {
    return false;  // another user's
  }
  if (rest.empty()) return false;
  info.name_cut = detail::looks_cut(file);
  if (info.name_cut) rest.remove_suffix(detail::hash_suffix_length);
  info.name = prefix + unescape(rest);
  // A user's own name that itself begins with a prefix ("Local\\Global\\x") is shown with the
  // "Local\\" that reaches it again: without it, "Global\\x" names another file.
  if (prefix.empty() &&
      (info.name.starts_with(global_name_prefix) || info.name.starts_with(local_name_prefix)))
    info.name.insert(0, local_name_prefix);
  return true;
}

bool is_shmio_file(std::string_view file) {
  return file.starts_with(detail::file_prefix) || file.starts_with(temp_prefix);
}

// Whether `path` names a file of shm_directory itself (nothing under a directory in it, no
// "..") whose name is one of ours; `info` gets what the name says.
bool parse_path(std::string_view path, segment_info& info) {
  const std::string_view dir = detail::shm_directory;
  if (!path.starts_with(dir)) return false;
  const std::string_view file = path.substr(dir.size());
  return file.find('/') == std::string_view::npos && parse_file_name(file, info);
}

}  // namespace

std::string lock_state_name(lock_info::state_kind state) {
  switch (state) {
    case lock_info::state_kind::free:
      return "free";
    case lock_info::state_kind::shared:
      return "shared";
    case lock_info::state_kind::claimed:
      return "claimed";
    case lock_info::state_kind::exclusive:
      return "exclusive";
  }
  return "?";
}

std::string kind_name(std::uint32_t kind) {
  switch (static_cast<object_kind>(kind)) {
    case object_kind::raw:
      return "raw";
    case object_kind::event:
      return "event";
    case object_kind::circular_buffer:
      return "circular_buffer";
    case object_kind::rpc:
      return "rpc";
    case object_kind::shared_array:
      return "shared_array";
    case object_kind::buffer_read_write:
      return "buffer_read_write";
    case object_kind::broadcast:
      return "broadcast";
    case object_kind::rpc_listener:
      return "rpc_service";
  }
  return "kind " + std::to_string(kind);
}

namespace {

// examine_file without the search for a service's clients: list() finds them in its own listing.
segment_info examine_one(const std::string& path, std::error_code& ec) {
  ec.clear();
  segment_info info;
  info.file = path;
  if (!parse_path(path, info)) {
    ec = errc::invalid_name;
    return info;
  }
  // A file under one of our names that the library refuses to use (segment.cpp): listed with
  // why, so that an operator sees what stands in the way of a create or an open of the name.
  // (A temporary file is nobody's to open: one that is not ours is only left out.)
  const auto refused = [&](std::string why) {
    ec = errc::access_denied;
    if (!info.temporary)
      set_problem(info, errc::access_denied, std::move(why) + " (the library refuses it)");
    return info;
  };
  platform::unique_fd fd = platform::open_read_only(path, ec);
  if (ec == std::errc::too_many_symbolic_link_levels) return refused("a symbolic link");
  if (ec == std::errc::permission_denied || ec == std::errc::operation_not_permitted) {
    // Another user's file, readable by its owner only: who owns it is still to be seen.
    std::error_code lec;
    const auto lst = platform::link_status(path, lec);
    if (!lec && lst.owner_uid != platform::user_id()) {
      info.file_size = lst.size;
      return refused("owned by uid " + std::to_string(lst.owner_uid));
    }
  }
  if (ec) {
    ec = detail::file_error(ec);
    return info;
  }
  auto st = platform::status(fd.get(), ec);
  if (ec) return info;
  info.file_size = st.size;
  if (!st.regular) return refused("not a regular file");
  if (st.owner_uid != platform::user_id())
    return refused("owned by uid " + std::to_string(st.owner_uid));
  if ((st.mode & 077) != 0 && !info.temporary) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.mode & 07777));
    return refused(std::string("mode ") + mode + ": readable or writable by others");
  }
  std::error_code lock_ec;
  info.live = platform::byte_locked_by_other(fd.get(), layout::holder_lock_byte, lock_ec);
  // A creator locks its temporary file a moment after creating it: until then only the file's
  // age tells (segment_locks.hpp). Not the pid in its name: a creator in another pid namespace
  // that shares /dev/shm is not one of ours, and would lose its file between the two steps.
  info.stale =
      !info.live && !(info.temporary && !detail::old_enough_to_be_abandoned(st.modified_ns));
  // A create in progress sizes its temporary file, then writes its header and body: what it
  // holds is not looked into until it is abandoned.
  if (info.temporary && !info.stale) return info;
  if (st.size < sizeof(layout::segment_header)) {
    set_problem(info, errc::corrupted, "shorter than a segment header");
    return info;
  }
  if (st.size > sizeof(layout::segment_header) + layout::max_body_size) {
    set_problem(info, errc::corrupted,
                std::to_string(st.size) + " bytes: larger than any segment (16 TiB of body)");
    return info;
  }
  // A file truncated while we read it must not kill the inspector: the guard turns the fault
  // into pages of zeros, and the file is reported damaged (below).
  std::error_code no_guard;  // without it, such a truncation faults as it would have anyway
  platform::install_truncation_guard(no_guard);
  const void* base = platform::map_read_only(fd.get(), st.size, ec, true);
  if (ec) return info;
  // Unmapped on every way out: reading the contents allocates, and may throw.
  struct unmapper {
    const void* base;
    std::size_t size;
    ~unmapper() { platform::unmap(const_cast<void*>(base), size); }
  } mapped{base, st.size};
  read_contents(static_cast<const std::byte*>(base), st.size, fd.get(), info);
  if (platform::mapping_faulted(base))
    set_problem(info, errc::corrupted, "truncated while it was being read");
  return info;
}

// Whether `name` is exactly a name detail::connection_name makes for `service`: the service's
// name, '#', a pid and a nonce, spelled as the library spells them and nothing else.
bool is_connection_of(std::string_view service, std::string_view name) {
  if (name.size() <= service.size() || !name.starts_with(service) || name[service.size()] != '#')
    return false;
  const std::string_view rest = name.substr(service.size() + 1);
  const std::size_t dot = rest.find('.');
  if (dot == std::string_view::npos || dot == 0 || dot > 10 || rest.size() - dot - 1 != 16)
    return false;
  std::uint64_t pid = 0;
  for (char c : rest.substr(0, dot)) {
    if (c < '0' || c > '9') return false;
    pid = pid * 10 + static_cast<std::uint64_t>(c - '0');
  }
  std::uint64_t nonce = 0;
  for (char c : rest.substr(dot + 1)) {
    const int v = hex_value(c);
    if (v < 0) return false;
    nonce = nonce << 4 | static_cast<std::uint64_t>(v);
  }
  // Rebuilt from the numbers: leading zeros or upper-case digits make another name.
  return pid <= UINT32_MAX &&
         detail::connection_name(service, static_cast<std::uint32_t>(pid), nonce) == name;
}

// Whether every connection of `service` keeps its name as its file name. A name too long for a
// file name is cut and ends in a hash: it cannot be told to belong to the service.
bool connection_names_fit(const segment_info& service) {
  if (service.name_cut) return false;
  const std::string longest = detail::connection_name(service.name, UINT32_MAX, UINT64_MAX);
  std::error_code ec;
  const std::string file = detail::segment_file_name(longest, ec);
  // An uncut file name ends with the name's own "#pid.nonce", a cut one with "~" and the hash.
  return !ec && file.ends_with(std::string_view(longest).substr(service.name.size()));
}

// Adds `channel` to the clients of `service` if it is one of its connections.
void add_if_client(segment_info& service, const segment_info& channel) {
  if (channel.temporary || channel.name_cut || !channel.header_read ||
      channel.kind != static_cast<std::uint32_t>(object_kind::rpc) ||
      !is_connection_of(service.name, channel.name))
    return;
  rpc_client_info c;
  c.name = channel.name;
  c.status = channel.status;
  c.problem = channel.problem;
  if (channel.rpc) {
    // The client made the channel: it is the owner, the service's end the opener.
    c.pid = channel.rpc->owner_pid;
    c.alive = channel.rpc->owner_attached;
    c.server_attached = channel.rpc->opener_attached;
  }
  service.rpc_service->clients.push_back(std::move(c));
}

void sort_clients(rpc_service_info& s) {
  std::sort(s.clients.begin(), s.clients.end(),
            [](const rpc_client_info& a, const rpc_client_info& b) { return a.name < b.name; });
}

// Finds the clients of the service `service` among the files of /dev/shm.
void find_clients(segment_info& service) {
  rpc_service_info& s = *service.rpc_service;
  s.clients_complete = connection_names_fit(service);
  if (service.name_cut) return;  // its name is only a start: no other name can be matched to it
  std::error_code ec;
  const std::string dir(detail::shm_directory);
  for (const std::string& file : platform::list_directory(dir, ec)) {
    segment_info parsed;
    // By name first, so that only the files named for the service are opened.
    if (!parse_file_name(file, parsed) || parsed.temporary || parsed.name_cut ||
        !is_connection_of(service.name, parsed.name))
      continue;
    std::error_code one;
    const segment_info channel = examine_one(dir + file, one);
    if (!one) add_if_client(service, channel);  // gone meanwhile or another user's: not counted
  }
  if (ec) s.clients_complete = false;
  sort_clients(s);
}

}  // namespace

segment_info examine_file(const std::string& path, std::error_code& ec) {
  segment_info info = examine_one(path, ec);
  if (!ec && info.rpc_service) find_clients(info);
  return info;
}

segment_info examine(std::string_view name, std::error_code& ec) {
  ec.clear();  // segment_path only sets it
  std::string path = detail::segment_path(name, ec);
  if (ec) return {};
  return examine_file(path, ec);
}

std::vector<segment_info> list(std::error_code& ec) {
  ec.clear();
  std::vector<segment_info> out;
  const std::string dir(detail::shm_directory);
  for (const std::string& file : platform::list_directory(dir, ec)) {
    if (!is_shmio_file(file)) continue;
    std::error_code one;
    segment_info info = examine_one(dir + file, one);
    // Gone meanwhile, or not one of ours by name: not listed. One the library refuses is, with
    // why (its status says so).
    if (one == errc::not_found || one == errc::invalid_name) continue;
    if (one == errc::access_denied && !info.status) continue;
    // One that could not be looked at (no descriptor or memory left) is listed with why, not
    // left out as if it were not there.
    if (one && !info.status) {
      info.status = one;
      info.problem = "could not be examined: " + one.message();
    }
    out.push_back(std::move(info));
  }
  std::sort(out.begin(), out.end(), [](const segment_info& a, const segment_info& b) {
    return std::tie(a.temporary, a.name, a.file) < std::tie(b.temporary, b.name, b.file);
  });
  // A service's clients are files of this same listing: no second look through the directory.
  for (segment_info& service : out) {
    if (!service.rpc_service) continue;
    service.rpc_service->clients_complete = connection_names_fit(service);
    if (service.name_cut) continue;
    for (const segment_info& channel : out)
      add_if_client(service, channel);
    sort_clients(*service.rpc_service);
  }
  return out;
}

bool remove_file_if_stale(const std::string& path, std::error_code& ec) {
  ec.clear();
  segment_info parsed;
  if (!parse_path(path, parsed)) {
    ec = errc::invalid_name;
    return false;
  }
  platform::unique_fd fd = platform::open_existing(path, ec);
  if (ec) {
    ec = detail::file_error(ec);
    return false;
  }
  auto st = platform::status(fd.get(), ec);
  if (ec) return false;
  if (!st.regular || st.owner_uid != platform::user_id()) {
    ec = errc::access_denied;
    return false;
  }
  // As a create that finds a stale file does (segment_locks.hpp). A temporary file goes only
  // once abandoned, whatever pid its name holds: its creator may still finish it.
  if (!detail::lock_admin(fd.get(), ec)) return false;
  const detail::stale_test found = parsed.temporary
                                       ? detail::remove_if_abandoned_temporary(fd.get(), path, ec)
                                       : detail::remove_if_unheld(fd.get(), path, ec);
  if (!ec && found == detail::stale_test::gone) ec = errc::not_found;  // removed meanwhile
  if (!ec && found == detail::stale_test::held) ec = errc::busy;       // some process holds it
  detail::unlock_admin(fd.get());
  return found == detail::stale_test::removed;
}

bool remove_file(const std::string& path, std::error_code& ec) {
  ec.clear();
  segment_info parsed;
  if (!parse_path(path, parsed)) {
    ec = errc::invalid_name;
    return false;
  }
  if (!detail::remove_path(path, ec) && !ec) ec = errc::not_found;
  return !ec;
}

bool remove_if_stale(std::string_view name, std::error_code& ec) {
  ec.clear();  // segment_path only sets it
  std::string path = detail::segment_path(name, ec);
  if (ec) return false;
  return remove_file_if_stale(path, ec);
}

}  // namespace shmio::inspect
