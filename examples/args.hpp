#pragma once
// Command-line numbers for the examples: all digits, nothing else, and within a bound. (atoi and
// stream extraction take "abc" for 0 and "-3" for a huge count.)
#include <charconv>
#include <string_view>

namespace examples {

/// Parses `text` as a decimal number from 0 to `max` into `out`; false (and `out` unchanged)
/// for anything else.
inline bool parse_number(std::string_view text, unsigned long max, unsigned long& out) {
  unsigned long value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty() || value > max)
    return false;
  out = value;
  return true;
}

}  // namespace examples
