#include "shmio/error.hpp"

namespace shmio {
namespace {

class category final : public std::error_category {
 public:
  const char* name() const noexcept override { return "shmio"; }

  std::string message(int value) const override {
    switch (static_cast<errc>(value)) {
      case errc::not_found:
        return "not found";
      case errc::already_exists:
        return "already exists";
      case errc::incompatible:
        return "incompatible kind, version or element type";
      case errc::corrupted:
        return "corrupted shared memory";
      case errc::no_space:
        return "no space left in shared memory";
      case errc::timed_out:
        return "timed out";
      case errc::peer_gone:
        return "peer closed or died";
      case errc::message_too_large:
        return "message too large";
      case errc::remote_error:
        return "remote handler failed";
      case errc::access_denied:
        return "access denied";
      case errc::invalid_name:
        return "invalid name";
      case errc::invalid_argument:
        return "invalid argument";
      case errc::busy:
        return "busy";
      case errc::callback_failed:
        return "in-place callback threw";
      case errc::too_many_participants:
        return "too many participants";
      case errc::no_handler:
        return "no handler at the other end";
      case errc::owner_died:
        return "acquired; the previous holder died holding it";
      case errc::messages_lost:
        return "messages lost: a writer lapped this subscriber";
      case errc::evicted:
        return "evicted: this subscriber held writers back past its lease, or died";
      case errc::no_such_method:
        return "no such method at the other end";
    }
    return "unknown shmio error";
  }

  // Lets shmio codes compare equal to the portable conditions they correspond to.
  std::error_condition default_error_condition(int value) const noexcept override {
    switch (static_cast<errc>(value)) {
      case errc::not_found:
        return std::errc::no_such_file_or_directory;
      case errc::already_exists:
        return std::errc::file_exists;
      case errc::no_space:
        return std::errc::no_space_on_device;
      case errc::timed_out:
        return std::errc::timed_out;
      case errc::message_too_large:
        return std::errc::message_size;
      case errc::access_denied:
        return std::errc::permission_denied;
      case errc::invalid_argument:
        return std::errc::invalid_argument;
      case errc::busy:
        return std::errc::device_or_resource_busy;
      default:
        return {value, *this};
    }
  }
};

}  // namespace

const std::error_category& error_category() noexcept {
  static const category instance;
  return instance;
}

error::error(std::error_code ec, std::string_view operation, std::string_view name)
    : std::system_error(ec, std::string(operation) + " '" + std::string(name) + "'") {}

namespace detail {
void throw_if(const std::error_code& ec, std::string_view operation, std::string_view name) {
  if (ec) throw error(ec, operation, name);
}
void keep_name(const std::string& from, std::string& to) noexcept {
  try {
    to = from;
  } catch (...) {
  }
}

}  // namespace detail

}  // namespace shmio
