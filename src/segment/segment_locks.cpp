#include "shmio/detail/segment_locks.hpp"

#include <algorithm>
#include <chrono>

#include "shmio/detail/layout.hpp"
#include "shmio/detail/platform.hpp"
#include "shmio/error.hpp"

namespace shmio::detail {

using namespace std::chrono_literals;

bool lock_admin(int fd, std::error_code& ec) {
  const auto deadline = std::chrono::steady_clock::now() + 2s;
  auto backoff = std::chrono::microseconds(20);
  for (;;) {
    if (platform::try_lock_byte(fd, layout::admin_lock_byte, platform::lock_kind::exclusive, ec))
      return true;
    if (ec) return false;
    if (std::chrono::steady_clock::now() >= deadline) {
      ec = errc::timed_out;
      return false;
    }
    platform::sleep_for(backoff);
    backoff = std::min<std::chrono::microseconds>(backoff * 2, 5ms);
  }
}

void unlock_admin(int fd) noexcept {
  std::error_code ignored;
  platform::try_lock_byte(fd, layout::admin_lock_byte, platform::lock_kind::unlock, ignored);
}

stale_test remove_if_unheld(int fd, const std::string& path, std::error_code& ec) {
  const auto st = platform::status(fd, ec);
  if (ec) return stale_test::held;
  if (st.links == 0) return stale_test::gone;
  // An exclusive holder lock succeeds only if no process holds the segment: it is stale.
  if (!platform::try_lock_byte(fd, layout::holder_lock_byte, platform::lock_kind::exclusive, ec))
    return stale_test::held;
  std::error_code ignored;
  platform::unlink(path, ignored);  // still ours: names are only made by rename-no-replace
  return stale_test::removed;
}

}  // namespace shmio::detail
