#include "json_writer.hpp"

#include <cstdio>

namespace shmio::tool {

std::size_t utf8_sequence(std::string_view s, std::size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  std::size_t n = 0;
  unsigned char low = 0x80, high = 0xBF;  // the allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) low = 0xA0;   // overlong below U+0800
    if (c == 0xED) high = 0x9F;  // surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) low = 0x90;   // overlong below U+10000
    if (c == 0xF4) high = 0x8F;  // past U+10FFFF
  }
  if (n == 0 || i + n > s.size()) return 0;
  const auto second = static_cast<unsigned char>(s[i + 1]);
  if (second < low || second > high) return 0;
  for (std::size_t k = 2; k < n; ++k)
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 0;
  return n;
}

void json_writer::before_value() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!first_.empty()) {
    if (!first_.back()) out_ += ',';
    first_.back() = false;
  }
}

void json_writer::begin_object() {
  before_value();
  out_ += '{';
  first_.push_back(true);
}

void json_writer::end_object() {
  out_ += '}';
  first_.pop_back();
}

void json_writer::begin_array() {
  before_value();
  out_ += '[';
  first_.push_back(true);
}

void json_writer::end_array() {
  out_ += ']';
  first_.pop_back();
}

json_writer& json_writer::key(std::string_view k) {
  before_value();
  write_string(k);
  out_ += ':';
  after_key_ = true;
  return *this;
}

void json_writer::value(std::string_view s) {
  before_value();
  write_string(s);
}

void json_writer::value(std::uint64_t n) {
  before_value();
  out_ += std::to_string(n);
}

void json_writer::value(bool b) {
  before_value();
  out_ += b ? "true" : "false";
}

void json_writer::null() {
  before_value();
  out_ += "null";
}

void json_writer::write_string(std::string_view s) {
  out_ += '"';
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    char buf[8];
    if (c == '"' || c == '\\') {
      out_ += '\\';
      out_ += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out_ += buf;
    } else if (c < 0x80) {
      out_ += static_cast<char>(c);
    } else if (std::size_t n = utf8_sequence(s, i)) {
      out_.append(s.substr(i, n));
      i += n - 1;
    } else {
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out_ += buf;
    }
  }
  out_ += '"';
}

}  // namespace shmio::tool
