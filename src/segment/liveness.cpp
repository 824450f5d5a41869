#include "shmio/detail/liveness.hpp"

#include "shmio/detail/layout.hpp"
#include "shmio/detail/platform.hpp"
#include "shmio/error.hpp"

namespace shmio::detail {

bool patience::spent(std::uint64_t key) noexcept {
  const std::int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                               std::chrono::steady_clock::now().time_since_epoch())
                               .count();
  if (key_.exchange(key, std::memory_order_relaxed) != key) {
    since_.store(now, std::memory_order_relaxed);
    return false;
  }
  constexpr std::int64_t patience_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(holder_patience).count();
  if (now - since_.load(std::memory_order_relaxed) < patience_ns) return false;
  since_.store(now, std::memory_order_relaxed);  // ask at most once per patience period
  return true;
}

std::uint16_t claim_participant(int fd, std::uint32_t limit, std::error_code& ec) noexcept {
  for (std::uint32_t i = 0; i < limit; ++i) {
    if (platform::try_lock_byte(fd, layout::participant_lock_base + i,
                                platform::lock_kind::exclusive, ec))
      return static_cast<std::uint16_t>(i + 1);
    if (ec) return 0;
  }
  ec = errc::too_many_participants;
  return 0;
}

bool lock_byte_held(int fd, std::uint64_t byte) noexcept {
  std::error_code ec;
  const bool held = platform::byte_locked_by_other(fd, byte, ec);
  return held || ec;
}

bool participant_alive(int fd, std::uint32_t number) noexcept {
  return lock_byte_held(fd, layout::participant_lock_base + number - 1);
}

}  // namespace shmio::detail
