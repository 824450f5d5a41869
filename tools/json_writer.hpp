#pragma once
// A minimal streaming JSON writer: enough for the inspector's output, always valid JSON
// (strings that are not valid UTF-8 have their stray bytes written as \u00XX).

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace shmio::tool {

/// Length of the valid UTF-8 sequence starting at s[i], or 0 (RFC 3629: no overlong forms, no
/// surrogates, nothing past U+10FFFF).
std::size_t utf8_sequence(std::string_view s, std::size_t i);

class json_writer {
 public:
  void begin_object();
  void end_object();
  void begin_array();
  void end_array();
  /// The key of the next value in an object.
  json_writer& key(std::string_view k);
  void value(std::string_view s);
  void value(const char* s) { value(std::string_view(s)); }
  void value(std::uint64_t n);
  void value(bool b);
  void null();
  const std::string& str() const noexcept { return out_; }

 private:
  void before_value();
  void write_string(std::string_view s);

  std::string out_;
  std::vector<bool> first_;  // per open container: no element written yet
  bool after_key_ = false;
};

}  // namespace shmio::tool
