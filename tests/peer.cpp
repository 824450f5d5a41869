// Entry point of shmio_test_peer: dispatches to the commands the peer_*.cpp files register.
#include "peer.hpp"

#include <cstdio>
#include <exception>

namespace shmio::test::peer {
std::map<std::string, command>& commands() {
  static std::map<std::string, command> all;
  return all;
}
}  // namespace shmio::test::peer

int main(int argc, char** argv) {
  using namespace shmio::test::peer;
  if (argc < 2 || !commands().count(argv[1])) {
    std::fprintf(stderr, "usage: shmio_test_peer COMMAND [ARGS...]; commands:\n");
    for (const auto& [name, fn] : commands())
      std::fprintf(stderr, "  %s\n", name.c_str());
    return 2;
  }
  try {
    return commands()[argv[1]](args(argv + 2, argv + argc));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shmio_test_peer %s: %s\n", argv[1], e.what());
    return 97;
  }
}
