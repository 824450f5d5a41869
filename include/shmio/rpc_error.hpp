#pragma once
// shmio::rpc_error — what a failed RPC call or stream read throws when awaited with
// asio::use_awaitable.

#include <string>
#include <string_view>
#include <system_error>

#include "shmio/error.hpp"

namespace shmio {

/// What a failed call or stream read throws when awaited with asio::use_awaitable (other tokens
/// get the error_code and the text as the reply's bytes): a shmio::error whose code() is the
/// call's error, and the text the other end sent with it, if any (for errc::remote_error, the
/// remote exception's what()), in remote_what() and in what().
class rpc_error : public error {
 public:
  rpc_error(std::error_code ec, std::string_view channel, std::string remote_what);
  const std::string& remote_what() const noexcept { return remote_what_; }
  const char* what() const noexcept override { return what_.c_str(); }

 private:
  std::string remote_what_;
  std::string what_;
};

}  // namespace shmio
