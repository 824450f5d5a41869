#pragma once
// Construction tags shared by every named object in shmio (Boost.Interprocess's spelling).

namespace shmio {

/// Create the named object; fail with errc::already_exists if a live one has the name.
/// A stale object of that name (its last user died without closing it) is removed first.
struct create_only_t {
  explicit create_only_t() = default;
};
/// Open an existing named object; fail with errc::not_found if there is none (or only a stale one).
struct open_only_t {
  explicit open_only_t() = default;
};
/// Open the named object if it exists, otherwise create it.
struct open_or_create_t {
  explicit open_or_create_t() = default;
};

inline constexpr create_only_t create_only{};
inline constexpr open_only_t open_only{};
inline constexpr open_or_create_t open_or_create{};

}  // namespace shmio
