// Doorbells: one datagram socket per waiting object, bound to a random name in the abstract
// namespace. Any process of the machine that knows the id can ring it; the kernel removes the
// name when the owner closes the socket or dies, and a ring to it then fails with ECONNREFUSED,
// which is how a signaller learns that a waiter is gone. No file is left behind.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
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

// One unbound socket per process sends every ring; sendto on it is thread-safe. Made at the
// first ring, and again at a later one if that failed (a process out of descriptors then).
int sender() noexcept {
  static std::atomic<int> shared{-1};
  // acquire/release: the descriptor is published with the socket made behind it.
  int fd = shared.load(std::memory_order_acquire);
  if (fd >= 0) return fd;
  const int made = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (made < 0) return -1;
  if (shared.compare_exchange_strong(fd, made, std::memory_order_acq_rel)) return made;
  ::close(made);  // another thread's came first
  return fd;
}

// Sends the ring from `fd`: 0, or the errno of the failure.
int send_ring(int fd, const sockaddr_un& addr, socklen_t len) noexcept {
  const char byte = 1;
  for (;;) {
    if (::sendto(fd, &byte, 1, MSG_DONTWAIT | MSG_NOSIGNAL,
                 reinterpret_cast<const sockaddr*>(&addr), len) == 1)
      return 0;
    if (errno != EINTR) return errno;
  }
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
  const int shared = sender();
  int error = shared >= 0 ? send_ring(shared, addr, len) : EBADF;
  if (error == EAGAIN || error == EBADF) {
    // EAGAIN says that the receiver's queue is full, or that the sender's is: a datagram is
    // charged to the socket that sent it until it is read, and the shared sender's budget may
    // be spent on rings that idle doorbells have not read yet. Only the first means a ring is
    // pending. A socket of our own, with nothing charged to it, tells the two apart.
    const unique_fd own(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (own) error = send_ring(own.get(), addr, len);
  }
  switch (error) {
    case 0:
      return ring_result::rung;
    // The receiver's queue is full: it has rings it has not read yet, so it will wake.
    case EAGAIN:
      return ring_result::already_pending;
    case ECONNREFUSED:
    case ENOENT:
      return ring_result::gone;
    default:
      // Transient (ENOBUFS, ENOMEM) or no socket to be had: not proof of death. A ring lost
      // this way is not made up for; the process is out of memory or descriptors.
      return ring_result::already_pending;
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
