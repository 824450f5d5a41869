// Must not compile: shared_array refuses element types that are not trivially copyable, with
// a message that says why (checked by the shared_array_rejects_non_trivial test).
#include <string>

#include "shmio/shared_array.hpp"

shmio::shared_array<std::string>* refused = nullptr;
std::size_t use() {
  return refused->size();
}
