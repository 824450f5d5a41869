// Must not compile: a handler of the wrong shape is refused with one message that says what
// shape an rpc handler has (checked by the rpc_rejects_wrong_handler test).
#include <asio/io_context.hpp>
#include <string>

#include "shmio/rpc_buffer.hpp"

void make() {
  asio::io_context io;
  // Returns a string, not std::vector<std::byte> or an awaitable of one.
  shmio::rpc_buffer end(io.get_executor(), shmio::create_only, "x",
                        [](std::uint64_t, std::span<const std::byte>) { return std::string(); });
}
