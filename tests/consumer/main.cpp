// The consumer: one message through a ring, awaited by a coroutine. Exits 0 on success.
#include <unistd.h>

#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/use_awaitable.hpp>
#include <cstdio>
#include <shmio/circular_buffer.hpp>
#include <string>

asio::awaitable<std::string> receive(shmio::circular_buffer& ring) {
  char text[64];
  std::size_t n = co_await ring.async_read(asio::buffer(text), asio::use_awaitable);
  co_return std::string(text, n);
}

int main() {
  asio::io_context io;
  const std::string name = "shmio-test.consumer." + std::to_string(::getpid());
  shmio::circular_buffer ring(io.get_executor(), shmio::create_only, name, 4, 64);
  std::string got;
  asio::co_spawn(io, receive(ring), [&](std::exception_ptr, std::string s) { got = s; });
  ring.write(asio::buffer(std::string("hello from a consumer")), std::chrono::seconds(1));
  io.run();
  std::printf("%s\n", got.c_str());
  return got == "hello from a consumer" ? 0 : 1;
}
