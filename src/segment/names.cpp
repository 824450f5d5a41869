#include "shmio/detail/names.hpp"

#include <cstdint>
#include <cstdio>

#include "shmio/detail/platform.hpp"
#include "shmio/error.hpp"

namespace shmio::detail {
namespace {
constexpr std::string_view local_prefix = "Local\\";
constexpr std::string_view global_prefix = "Global\\";

bool needs_escape(unsigned char c) {
  return c == '/' || c == '%' || c < 0x20 || c == 0x7f;
}

}  // namespace

bool looks_cut(std::string_view file) noexcept {
  if (file.size() != max_file_name) return false;
  const std::string_view tail = file.substr(file.size() - hash_suffix_length);
  if (tail[0] != '~') return false;
  for (char c : tail.substr(1))
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

std::uint64_t name_hash(std::string_view name) noexcept {
  std::uint64_t h = 14695981039346656037ull;
  for (unsigned char c : name) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string escape_name(std::string_view name) {
  static constexpr char hex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(name.size());
  for (unsigned char c : name) {
    if (needs_escape(c)) {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 0xF];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string segment_file_name(std::string_view name, std::error_code& ec) {
  std::string file(file_prefix);
  if (name.starts_with(global_prefix)) {
    name.remove_prefix(global_prefix.size());
    file += "global.";
  } else {
    if (name.starts_with(local_prefix)) name.remove_prefix(local_prefix.size());
    file += 'u' + std::to_string(platform::user_id()) + '.';
  }
  if (name.empty()) {
    ec = errc::invalid_name;
    return {};
  }
  std::string escaped = escape_name(name);
  if (file.size() + escaped.size() <= max_file_name) {
    file += escaped;
    // Such a name would open the segment of the longer name its file was cut from: refused,
    // so that no two names share a file (short of a hash collision).
    if (looks_cut(file)) {
      ec = errc::invalid_name;
      return {};
    }
    return file;
  }

  char suffix[hash_suffix_length + 1];
  std::snprintf(suffix, sizeof suffix, "~%016llx",
                static_cast<unsigned long long>(name_hash(name)));
  escaped.resize(max_file_name - file.size() - hash_suffix_length);
  return file + escaped + suffix;
}

std::string segment_path(std::string_view name, std::error_code& ec) {
  std::string file = segment_file_name(name, ec);
  if (ec) return {};
  return std::string(shm_directory) + file;
}

}  // namespace shmio::detail
