// Must not compile: a handler of the wrong shape is refused with one message that says what
// shape an rpc handler has (checked by the rpc_rejects_wrong_handler tests): given as an end's
// one handler, or (SHMIO_WRONG_SHAPE_IN_ADD) added by name to a method table.
#include <asio/io_context.hpp>
#include <string>

#include "shmio/rpc_buffer.hpp"
#include "shmio/rpc_methods.hpp"

void make() {
  // Returns a string, not std::vector<std::byte> or an awaitable of one.
  auto wrong = [](std::uint64_t, std::span<const std::byte>) { return std::string(); };
#ifdef SHMIO_WRONG_SHAPE_IN_ADD
  shmio::rpc_methods methods;
  methods.add("get", wrong);
#else
  asio::io_context io;
  shmio::rpc_buffer end(io.get_executor(), shmio::create_only, "x", wrong);
#endif
}
