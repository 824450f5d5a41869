#pragma once
// Telling a dead participant from a slow one, for every object kind.
//
// Each open handle of a segment holds an exclusive record lock on its own byte of the segment
// file (participant_lock_base + number - 1), which the kernel drops when the process dies. A
// waiter that finds something held by another participant (a node, a lock word, reader shares)
// and unchanged for holder_patience asks the kernel whether that byte is still locked; if not,
// the holder is gone and what it held may be taken over. Asking costs a system call, so it is
// asked at most once per patience period.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <system_error>

namespace shmio::detail {

/// How long something must stay held, unchanged, before a waiter asks whether its holder lives.
inline constexpr std::chrono::milliseconds holder_patience{10};

/// A waiter's memory of what it last found held, and since when.
class patience {
 public:
  /// True once the same `key` (a node word, a lock word, ...) has been seen for holder_patience,
  /// and then at most once per patience period. A new key starts the period again.
  bool spent(std::uint64_t key) noexcept;

 private:
  // relaxed: bookkeeping of one handle; races between its threads only shift timing.
  std::atomic<std::uint64_t> key_{0};
  std::atomic<std::int64_t> since_{0};
};

/// Takes the first free participant number (1 .. limit) of the segment file `fd`: an exclusive
/// lock on its byte, held while the segment is open. errc::too_many_participants if none is free.
std::uint16_t claim_participant(int fd, std::uint32_t limit, std::error_code& ec) noexcept;

/// False only if participant `number`'s lock byte is provably free: its holder is gone. An
/// error asking is no proof of death (never take over on a guess); our own byte never counts as
/// held by another, so callers rule out their own number first.
bool participant_alive(int fd, std::uint32_t number) noexcept;

/// participant_alive for any lock byte of the file (broadcast subscribers have their own range).
bool lock_byte_held(int fd, std::uint64_t byte) noexcept;

}  // namespace shmio::detail
