#include <asio.hpp>
#include <cstdio>
#include <shmio/shmio.hpp>

asio::awaitable<void> consume(shmio::circular_buffer& jobs) {
  char text[256];  // co_await: this coroutine holds no thread while the ring is empty;
                   // a message already there is taken without a trip through the scheduler
  std::size_t n = co_await jobs.co_read(asio::buffer(text));
  std::printf("got: %.*s\n", static_cast<int>(n), text);
}

int main() {
  asio::io_context io;
  // 16 nodes of 256 bytes in /dev/shm; any process of this user can open "readme-jobs" too.
  shmio::circular_buffer jobs(io.get_executor(), shmio::open_or_create, "readme-jobs", 16, 256);
  asio::co_spawn(io, consume(jobs), asio::detached);
  jobs.write(asio::buffer("hello, shared memory", 20), std::chrono::seconds(1));
  io.run();
}
