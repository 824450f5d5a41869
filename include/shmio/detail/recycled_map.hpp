#pragma once
// Map entries that keep their nodes: an erased node, value and all, is kept for the next insert,
// so that a steady flow of entries (an RPC channel's calls and running handlers) allocates none.

#include <cstddef>
#include <utility>
#include <vector>

namespace shmio::detail {

/// Erased nodes kept for reuse, at most this many per map (reserve the vector up front).
inline constexpr std::size_t max_spare_nodes = 64;

/// Inserts `key` through a node kept from an earlier erase, if there is one, and returns its
/// value: what that erase left in the node (the caller sets what it needs), or a default-made
/// one. Null if `key` is there already.
template <class Map>
typename Map::mapped_type* insert_recycled(Map& map, std::vector<typename Map::node_type>& spare,
                                           typename Map::key_type key) {
  if (spare.empty()) {
    auto [it, inserted] = map.try_emplace(key);
    return inserted ? &it->second : nullptr;
  }
  auto node = std::move(spare.back());
  spare.pop_back();
  node.key() = key;
  auto r = map.insert(std::move(node));
  if (!r.inserted) {
    spare.push_back(std::move(r.node));  // within the capacity it came from
    return nullptr;
  }
  return &r.position->second;
}

/// Erases `it`, keeping its node, value and all, for the next insert: move out first what must
/// go now.
template <class Map>
void erase_recycled(Map& map, std::vector<typename Map::node_type>& spare,
                    typename Map::iterator it) {
  auto node = map.extract(it);
  if (spare.size() < max_spare_nodes) spare.push_back(std::move(node));
}

}  // namespace shmio::detail
