#pragma once
// The peer program: a separate executable that tests start with fork + exec to play the other
// process. Each test file adds the commands it needs with SHMIO_PEER_COMMAND; the program runs
// `shmio_test_peer COMMAND ARGS...` and exits with the command's return value.

#include <map>
#include <string>
#include <vector>

namespace shmio::test::peer {

using args = std::vector<std::string>;
using command = int (*)(const args&);

std::map<std::string, command>& commands();

struct registration {
  registration(const char* name, command fn) { commands()[name] = fn; }
};

}  // namespace shmio::test::peer

#define SHMIO_PEER_CONCAT2(a, b) a##b
#define SHMIO_PEER_CONCAT(a, b) SHMIO_PEER_CONCAT2(a, b)
/// Defines a peer command: SHMIO_PEER_COMMAND("event-set", args) { ...; return 0; }
#define SHMIO_PEER_COMMAND(name, argsname)                                             \
  static int SHMIO_PEER_CONCAT(peer_cmd_, __LINE__)(const ::shmio::test::peer::args&); \
  static ::shmio::test::peer::registration SHMIO_PEER_CONCAT(peer_reg_, __LINE__)(     \
      name, &SHMIO_PEER_CONCAT(peer_cmd_, __LINE__));                                  \
  static int SHMIO_PEER_CONCAT(peer_cmd_, __LINE__)(const ::shmio::test::peer::args& argsname)
