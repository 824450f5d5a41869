#include <catch2/catch.hpp>

#include "shmio/error.hpp"

TEST_CASE("shmio error codes compare equal to the matching std::errc", "[error]") {
  using shmio::errc;
  CHECK(std::error_code(errc::not_found) == std::errc::no_such_file_or_directory);
  CHECK(std::error_code(errc::already_exists) == std::errc::file_exists);
  CHECK(std::error_code(errc::no_space) == std::errc::no_space_on_device);
  CHECK(std::error_code(errc::timed_out) == std::errc::timed_out);
  CHECK(std::error_code(errc::message_too_large) == std::errc::message_size);
  CHECK(std::error_code(errc::access_denied) == std::errc::permission_denied);
  CHECK(std::error_code(errc::not_found) != std::errc::file_exists);
  CHECK(std::error_code(errc::corrupted) != std::errc::invalid_argument);
}

TEST_CASE("shmio error codes have a named category and readable messages", "[error]") {
  std::error_code ec = shmio::errc::peer_gone;
  CHECK(std::string(ec.category().name()) == "shmio");
  CHECK(ec.message() == "peer closed or died");
  CHECK(ec == shmio::errc::peer_gone);
}

TEST_CASE("the exception names the operation and the segment", "[error]") {
  shmio::error e(shmio::errc::not_found, "open", "jobs");
  CHECK(e.code() == shmio::errc::not_found);
  CHECK(std::string(e.what()).find("open 'jobs'") != std::string::npos);
  CHECK(std::string(e.what()).find("not found") != std::string::npos);
}
