// How shmio names map to files in /dev/shm (include/shmio/detail/names.hpp).
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <string_view>
#include <system_error>

#include "shmio/detail/names.hpp"
#include "shmio/error.hpp"
#include "shmio/segment.hpp"
#include "support.hpp"

using namespace std::string_literals;
using namespace std::string_view_literals;
using shmio::detail::escape_name;
using shmio::detail::max_file_name;
using shmio::detail::name_hash;

namespace {

std::string user_prefix() {
  return "shmio.u" + std::to_string(::geteuid()) + ".";
}

std::string file_of(std::string_view name) {
  std::error_code ec;
  std::string file = shmio::detail::segment_file_name(name, ec);
  REQUIRE_FALSE(ec);
  return file;
}

// An FNV-1a-64 written from its definition, independent of the library's.
std::uint64_t reference_fnv1a64(std::string_view s) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string hash_suffix(std::string_view name) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "~%016llx",
                static_cast<unsigned long long>(reference_fnv1a64(name)));
  return buf;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

TEST_CASE("a plain name maps to a file of the user's own in /dev/shm", "[names]") {
  CHECK(file_of("jobs") == user_prefix() + "jobs");
  std::error_code ec;
  CHECK(shmio::detail::segment_path("jobs", ec) == "/dev/shm/" + user_prefix() + "jobs");
  CHECK_FALSE(ec);
}

TEST_CASE("a Local name maps to the same file as the plain name", "[names]") {
  CHECK(file_of("Local\\jobs") == user_prefix() + "jobs");
  CHECK(file_of("Local\\jobs") == file_of("jobs"));
}

TEST_CASE("a Global name maps to one machine-wide file", "[names]") {
  CHECK(file_of("Global\\jobs") == "shmio.global.jobs");
  std::error_code ec;
  CHECK(shmio::detail::segment_path("Global\\jobs", ec) == "/dev/shm/shmio.global.jobs");
  CHECK(file_of("Global\\jobs") != file_of("jobs"));
}

TEST_CASE("only a leading prefix is special", "[names]") {
  CHECK(file_of("jobs\\Global\\x") == user_prefix() + "jobs\\Global\\x");
  CHECK(file_of("global\\x") == user_prefix() + "global\\x");  // the prefix is case-sensitive
  CHECK(file_of("Local\\Global\\x") == user_prefix() + "Global\\x");
}

TEST_CASE("slash and percent are escaped as %XX", "[names]") {
  CHECK(escape_name("a/b%c") == "a%2Fb%25c");
  CHECK(file_of("a/b%c") == user_prefix() + "a%2Fb%25c");
  CHECK(file_of("Global\\a/b%c") == "shmio.global.a%2Fb%25c");
  CHECK(escape_name("/") == "%2F");
  CHECK(escape_name("..") == "..");  // harmless: it never stands alone, the prefix precedes it
}

TEST_CASE("control bytes, NUL and DEL are escaped with upper-case hex", "[names]") {
  CHECK(escape_name("a\x01"
                    "b\n\x1f\x7f") == "a%01b%0A%1F%7F");
  CHECK(escape_name("a\0b"s) == "a%00b");
  CHECK(file_of("x\ty"s) == user_prefix() + "x%09y");
}

TEST_CASE("other printable bytes and bytes above 0x7F are kept as they are", "[names]") {
  const std::string kept = " !\"#$&'()*+,-.:;<=>?@[\\]^_`{|}~azAZ09\xc3\xa9\x80\xff";
  CHECK(escape_name(kept) == kept);
}

TEST_CASE("a name whose file would look cut is an invalid_name: no two names share a file",
          "[names]") {
  // The file a long name was cut to, given as a name, would be that long name's segment.
  const std::string long_name(400, 'q');
  const std::string cut = file_of(long_name).substr(user_prefix().size());
  std::error_code ec;
  CHECK(shmio::detail::segment_path(cut, ec).empty());
  CHECK(ec == shmio::errc::invalid_name);
  // One byte shorter, or with a hash digit that is not lower-case hex, is a name like any other.
  CHECK(file_of(cut.substr(1)) == user_prefix() + cut.substr(1));
  std::string upper = cut;
  upper.back() = 'G';
  CHECK(file_of(upper) == user_prefix() + upper);
  CHECK(file_of("a~b") == user_prefix() + "a~b");
  // The inspector tells cut files by the same test: upper-case digits are a name's own.
  CHECK(shmio::detail::looks_cut(file_of(long_name)));
  std::string upper_hex = user_prefix() + cut;
  upper_hex.back() = 'A';
  CHECK_FALSE(shmio::detail::looks_cut(upper_hex));
}

TEST_CASE("escaping keeps different names different", "[names]") {
  CHECK(file_of("a/b") != file_of("a%2Fb"));
  CHECK(file_of("a%b") != file_of("a%25b"));
  CHECK(file_of("a\nb") != file_of("a%0Ab"));
}

TEST_CASE("the name hash is FNV-1a-64", "[names]") {
  CHECK(name_hash("") == 0xcbf29ce484222325ull);
  CHECK(name_hash("a") == 0xaf63dc4c8601ec8cull);
  CHECK(name_hash("foobar") == 0x85944171f73967e8ull);
  const std::string long_name(1000, 'q');
  CHECK(name_hash(long_name) == reference_fnv1a64(long_name));
}

TEST_CASE("a name whose file name fits in 255 bytes is kept whole", "[names]") {
  const std::string name(max_file_name - user_prefix().size(), 'n');
  const std::string file = file_of(name);
  CHECK(file == user_prefix() + name);
  CHECK(file.size() == 255);
}

TEST_CASE("a long name is cut to 255 bytes ending in ~ and the hash of the whole name", "[names]") {
  const std::string name(max_file_name - user_prefix().size() + 1, 'n');  // one byte too many
  const std::string file = file_of(name);
  CHECK(file.size() == 255);
  CHECK(ends_with(file, hash_suffix(name)));
  CHECK(file ==
        user_prefix() + std::string(255 - user_prefix().size() - 17, 'n') + hash_suffix(name));

  const std::string very_long(5000, 'v');
  CHECK(file_of(very_long).size() == 255);
  CHECK(ends_with(file_of(very_long), hash_suffix(very_long)));
}

TEST_CASE("a name that grows past 255 bytes by escaping is cut after escaping", "[names]") {
  const std::string name(100, '/');  // 300 bytes escaped
  const std::string file = file_of(name);
  CHECK(file.size() == 255);
  CHECK(file.rfind(user_prefix() + "%2F%2F", 0) == 0);
  CHECK(ends_with(file, hash_suffix(name)));
}

TEST_CASE("two long names that differ only at the end map to different files", "[names]") {
  const std::string stem(400, 's');
  const std::string a = file_of(stem + "a");
  const std::string b = file_of(stem + "b");
  CHECK(a != b);
  CHECK(a.size() <= 255);
  CHECK(b.size() <= 255);
  // Also for names that differ in escaped bytes only, past the cut.
  CHECK(file_of(stem + "/") != file_of(stem + "%"));
}

TEST_CASE("a long Local name maps to the same file as the long plain name", "[names]") {
  const std::string name(400, 'l');
  CHECK(file_of("Local\\" + name) == file_of(name));
}

TEST_CASE("a long Global name stays within 255 bytes and differs from the user's", "[names]") {
  const std::string name(400, 'g');
  const std::string file = file_of("Global\\" + name);
  CHECK(file.size() == 255);
  CHECK(file.rfind("shmio.global.ggg", 0) == 0);
  CHECK(file != file_of(name));
}

TEST_CASE("an empty name or a bare prefix is an invalid_name", "[names]") {
  for (std::string_view bad : {""sv, "Local\\"sv, "Global\\"sv}) {
    INFO("name: '" << bad << "'");
    std::error_code ec;
    CHECK(shmio::detail::segment_file_name(bad, ec).empty());
    CHECK(ec == shmio::errc::invalid_name);
    ec.clear();
    CHECK(shmio::detail::segment_path(bad, ec).empty());
    CHECK(ec == shmio::errc::invalid_name);
  }
}

TEST_CASE("segment calls refuse an invalid name with invalid_name", "[names][segment]") {
  using shmio::object_kind;
  using shmio::segment;
  for (std::string_view bad : {""sv, "Local\\"sv, "Global\\"sv}) {
    INFO("name: '" << bad << "'");
    std::error_code ec;
    CHECK_FALSE(segment::create(bad, object_kind::raw, 16, {}, ec).is_open());
    CHECK(ec == shmio::errc::invalid_name);
    CHECK_FALSE(segment::open(bad, object_kind::raw, ec).is_open());
    CHECK(ec == shmio::errc::invalid_name);
    CHECK_FALSE(segment::open_or_create(bad, object_kind::raw, 16, {}, ec).is_open());
    CHECK(ec == shmio::errc::invalid_name);
    CHECK_FALSE(segment::remove(bad, ec));
    CHECK(ec == shmio::errc::invalid_name);
    try {
      segment s(shmio::create_only, bad, object_kind::raw, 16);
      FAIL("no exception");
    } catch (const shmio::error& e) {
      CHECK(e.code() == shmio::errc::invalid_name);
    }
  }
}

TEST_CASE("segments of long names that differ only at the end are distinct files",
          "[names][segment]") {
  using shmio::object_kind;
  using shmio::segment;
  // scoped_name appends a counter, so these two differ only in their last bytes.
  shmio::test::scoped_name a(std::string(300, 'x'));
  shmio::test::scoped_name b(std::string(300, 'x'));
  std::error_code ec;
  auto sa = segment::create(
      a, object_kind::raw, 8, [](std::span<std::byte> body) { body[0] = std::byte{0xa}; }, ec);
  REQUIRE_FALSE(ec);
  auto sb = segment::create(
      b, object_kind::raw, 8, [](std::span<std::byte> body) { body[0] = std::byte{0xb}; }, ec);
  REQUIRE_FALSE(ec);  // not already_exists: the names map to different files
  CHECK(sa.path() != sb.path());
  CHECK(sa.path().size() - shmio::detail::shm_directory.size() == 255);

  auto oa = segment::open(a, object_kind::raw, ec);
  REQUIRE_FALSE(ec);
  auto ob = segment::open(b, object_kind::raw, ec);
  REQUIRE_FALSE(ec);
  CHECK(oa.body()[0] == std::byte{0xa});
  CHECK(ob.body()[0] == std::byte{0xb});
}
