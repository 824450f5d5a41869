#pragma once
// Errors reported by shmio: an error category with its own values, each comparable with the
// matching std::errc where one exists (so `ec == std::errc::file_exists` works too).

#include <string>
#include <string_view>
#include <system_error>

namespace shmio {

/// The ways a shmio call can fail. Values are stable: they may be logged or sent across processes.
enum class errc {
  not_found = 1,      ///< No segment of that name (or only a stale one a dead process left).
  already_exists,     ///< create_only found a live segment of that name.
  incompatible,       ///< The segment is of another kind, layout version or element type.
  corrupted,          ///< A value read from shared memory is out of range: the segment is unusable.
  no_space,           ///< /dev/shm has no room for the segment.
  timed_out,          ///< The operation's timeout passed.
  peer_gone,          ///< The other side closed or died.
  message_too_large,  ///< The message does not fit in a node or packet.
  remote_error,       ///< The remote handler failed; the text travels with the reply.
  access_denied,      ///< The file is a link, not a regular file, not owned by this user, or
                      ///< readable or writable by others (mode 0600 only).
  invalid_name,       ///< The name is empty or only a prefix, or its file would be a cut name's.
  invalid_argument,   ///< An argument is out of its documented range.
  busy,               ///< Another operation holds what this one needs (e.g. a second pending wait).
  callback_failed,    ///< An in-place callback of an async operation threw; nothing was kept.
  too_many_participants,  ///< The object has as many open handles as its layout allows.
  no_handler,             ///< The other end of an RPC channel serves no requests.
  owner_died,     ///< The lock is yours, but its previous holder died holding it (see rw_lock.hpp).
  messages_lost,  ///< A lossy broadcast subscriber was lapped; the value says how many it lost.
  evicted,        ///< A reliable broadcast subscriber died or stalled past its lease, and left.
  no_such_method,  ///< The RPC service has no method of the name called.
};

/// The category of shmio::errc values; its name is "shmio".
const std::error_category& error_category() noexcept;

inline std::error_code make_error_code(errc e) noexcept {
  return {static_cast<int>(e), error_category()};
}

/// The exception thrown by calls without an error_code overload argument: a std::system_error
/// whose what() names the operation and the segment, e.g. "open 'jobs': not found".
class error : public std::system_error {
 public:
  error(std::error_code ec, std::string_view operation, std::string_view name);
};

namespace detail {
/// Throws shmio::error if `ec` is set.
void throw_if(const std::error_code& ec, std::string_view operation, std::string_view name);
/// `to` = `from`: a handle's name as it closes, for its later errors. A copy, as the handle may
/// be a move's source or target; left as it was in the (unlikely: names are short) case that
/// the copy cannot allocate.
void keep_name(const std::string& from, std::string& to) noexcept;
}  // namespace detail

}  // namespace shmio

template <>
struct std::is_error_code_enum<shmio::errc> : std::true_type {};
