// Doorbells: one datagram socket per waiting object, bound to a random name in the abstract
// namespace. Any process of the machine that knows the id can ring it; the kernel removes the
// name when the owner closes the socket or dies, and a ring to it then fails with ECONNREFUSED,
// which is how a signaller learns that a waiter is gone. No file is left behind.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "shmio/detail/platform.hpp"

namespace shmio::detail::platform {
namespace {

socklen_t doorbell_address(std::uint64_t id, sockaddr_un& addr) {
  std::memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  // sun_path[0] == '\0' selects the abstract namespace; the name is not NUL-terminated.
  static const std::uint32_t uid = user_id();  // one system call per process, not per ring
  int n = std::snprintf(addr.sun_path + 1, sizeof addr.sun_path - 1, "shmio.%u.%016llx", uid,
                        static_cast<unsigned long long>(id));
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
}

// One unbound socket per process sends every ring; sendto on it is thread-safe.
int sender() noexcept {
  static const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  return fd;
}

}  // namespace

unique_fd open_doorbell(std::uint64_t& id, std::error_code& ec) {
  unique_fd fd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) {
    ec = {errno, std::system_category()};
    return {};
  }
  for (int attempt = 0; attempt < 8; ++attempt) {
    // Never 0 (a free slot), and the top bit clear (it marks a blocking sleeper's slot).
    std::uint64_t candidate = (random_u64() >> 1) | 1;
    sockaddr_un addr;
    socklen_t len = doorbell_address(candidate, addr);
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), len) == 0) {
      id = candidate;
      return fd;
    }
    if (errno != EADDRINUSE) break;
  }
  ec = {errno, std::system_category()};
  return {};
}

ring_result ring_doorbell(std::uint64_t id) noexcept {
  sockaddr_un addr;
  socklen_t len = doorbell_address(id, addr);
  const char byte = 1;
  for (;;) {
    if (::sendto(sender(), &byte, 1, MSG_DONTWAIT | MSG_NOSIGNAL,
                 reinterpret_cast<sockaddr*>(&addr), len) == 1)
      return ring_result::rung;
    switch (errno) {
      case EINTR:
        continue;
      // The receiver's queue is full: it has rings it has not read yet, so it will wake.
      case EAGAIN:
        return ring_result::already_pending;
      case ECONNREFUSED:
      case ENOENT:
        return ring_result::gone;
      default:
        return ring_result::already_pending;  // transient (ENOBUFS, ENOMEM): not proof of death
    }
  }
}

std::size_t drain_doorbell(int fd) noexcept {
  // One call takes a batch of rings; usually there is exactly one, and a short batch tells us
  // the socket is empty without a second call.
  constexpr unsigned batch = 16;
  char bytes[batch];
  iovec iov[batch];
  mmsghdr msgs[batch];
  std::memset(msgs, 0, sizeof msgs);
  for (unsigned i = 0; i < batch; ++i) {
    iov[i] = {&bytes[i], 1};
    msgs[i].msg_hdr.msg_iov = &iov[i];
    msgs[i].msg_hdr.msg_iovlen = 1;
  }
  std::size_t total = 0;
  for (;;) {
    const int n = ::recvmmsg(fd, msgs, batch, MSG_DONTWAIT, nullptr);
    if (n <= 0) return total;
    total += static_cast<std::size_t>(n);
    if (static_cast<unsigned>(n) < batch) return total;
  }
}

void orphan_inherited(int fd) noexcept {
  const int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null < 0) return;
  ::dup3(null, fd, O_CLOEXEC);
  ::close(null);
}

bool wait_readable(int fd, std::chrono::nanoseconds timeout) noexcept {
  pollfd p{fd, POLLIN, 0};
  int ms = timeout.count() < 0 ? -1 : static_cast<int>((timeout.count() + 999'999) / 1'000'000);
  return ::poll(&p, 1, ms) > 0;
}

}  // namespace shmio::detail::platform
