#pragma once
// How a shmio name becomes a file in /dev/shm.
//
//   "jobs", "Local\jobs"  -> /dev/shm/shmio.u{uid}.jobs      (the user's own names)
//   "Global\jobs"         -> /dev/shm/shmio.global.jobs      (one per machine; owner-only access)
//
// Bytes that cannot or should not appear in a file name ('/', '%', control bytes, DEL) are
// escaped as %XX ("a/b%c" -> "a%2Fb%25c"). A name whose file name would pass max_file_name is
// cut, and "~" plus 16 hex digits of a hash of the whole name are appended, so different long
// names stay different files. A name whose file would look cut without being so is refused
// (errc::invalid_name): it would be another name's file.

#include <cstddef>
#include <string>
#include <string_view>
#include <system_error>

namespace shmio::detail {

inline constexpr std::string_view shm_directory = "/dev/shm/";
inline constexpr std::string_view file_prefix = "shmio.";
/// Leaves room under NAME_MAX (255) for nothing else: our file names are used as they are.
inline constexpr std::size_t max_file_name = 255;
/// A cut name's end: "~" and 16 lower-case hex digits.
inline constexpr std::size_t hash_suffix_length = 17;

/// True if `file` (a file name, without the directory) is exactly max_file_name bytes and ends
/// as a cut name does. No uncut name's file does (such names are refused).
bool looks_cut(std::string_view file) noexcept;

/// The file name (no directory) for `name`; errc::invalid_name if it is empty or only a prefix.
std::string segment_file_name(std::string_view name, std::error_code& ec);
/// shm_directory + segment_file_name(name).
std::string segment_path(std::string_view name, std::error_code& ec);
/// The %XX escaping alone, exposed for tests.
std::string escape_name(std::string_view name);
/// 64-bit FNV-1a, stable across processes and builds.
std::uint64_t name_hash(std::string_view name) noexcept;

}  // namespace shmio::detail
