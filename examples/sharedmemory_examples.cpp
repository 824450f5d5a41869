// The C# SharedMemory library's README examples for SharedArray and BufferReadWrite, as two
// processes: this program creates each object and writes to it, then runs itself as a second
// process that opens the object by name and prints what it finds. Output:
//
//   shared_array:
//   123
//   456
//   buffer_read_write:
//   123
//   456
#include <sys/wait.h>
#include <unistd.h>

#include <asio/io_context.hpp>
#include <cstdio>
#include <iostream>
#include <string>

#include "shmio/buffer_read_write.hpp"
#include "shmio/shared_array.hpp"

namespace {

// The consumer half: opens `name` and prints the two values the producer wrote.
int consume(const std::string& what, const std::string& name) {
  asio::io_context io;
  if (what == "shared_array") {
    shmio::shared_array<int> consumer(io.get_executor(), shmio::open_only, name);
    std::cout << consumer[0] << '\n' << consumer[consumer.size() - 1] << '\n';
  } else {
    shmio::buffer_read_write consumer(io.get_executor(), shmio::open_only, name);
    std::cout << consumer.read<int>() << '\n' << consumer.read<int>(1000) << '\n';
  }
  return 0;
}

// Runs this program again as the consumer of `name` and waits for it.
bool run_consumer(const char* self, const std::string& what, const std::string& name) {
  std::cout.flush();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/proc/self/exe", self, "consume", what.c_str(), name.c_str(), nullptr);
    ::_exit(127);
  }
  int status = 0;
  return pid > 0 && ::waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
         WEXITSTATUS(status) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc == 4 && std::string(argv[1]) == "consume") return consume(argv[2], argv[3]);
    asio::io_context io;
    const std::string suffix = "." + std::to_string(::getpid());  // runs side by side differ

    std::cout << "shared_array:\n";
    const std::string array_name = "MySharedArray" + suffix;
    shmio::shared_array<int> producer(io.get_executor(), shmio::create_only, array_name, 10);
    producer[0] = 123;
    producer[producer.size() - 1] = 456;
    if (!run_consumer(argv[0], "shared_array", array_name)) return 1;

    std::cout << "buffer_read_write:\n";
    const std::string buffer_name = "MySharedBuffer" + suffix;
    shmio::buffer_read_write writer(io.get_executor(), shmio::create_only, buffer_name, 1024);
    writer.write(123);
    writer.write(456, 1000);
    if (!run_consumer(argv[0], "buffer_read_write", buffer_name)) return 1;
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "sharedmemory_examples: " << e.what() << '\n';
    return 1;
  }
}
