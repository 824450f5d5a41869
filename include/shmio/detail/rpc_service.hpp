#pragma once
// What serves the requests that reach an RPC end: its unnamed method and its named ones, and
// the counters of calls per method a service's connection keeps.

#include <atomic>
#include <cstdint>
#include <memory>
#include <string_view>
#include <unordered_map>

#include "shmio/detail/rpc_listener.hpp"
#include "shmio/rpc_methods.hpp"

namespace shmio::detail {

/// A connection's counters per method (method_counters), for the methods of its table.
struct method_count_index {
  std::shared_ptr<method_counters> counters;  // keeps their memory mapped
  std::unordered_map<const rpc_method*, std::atomic<std::uint64_t>*> by_method;
  std::atomic<std::uint64_t>* unnamed = nullptr;
};

/// What serves the requests that reach this end: the unnamed method (a coroutine handler, a
/// plain one, or neither) and the named ones.
struct rpc_service {
  rpc_method unnamed;
  std::shared_ptr<const method_table> methods;  // may hold "" too, for a service without `unnamed`
  std::shared_ptr<const method_count_index> counts;  // a service's connection: calls per method

  /// Counts a call of `m` (a method find() returned), if this end counts calls.
  void count(const rpc_method* m) const noexcept {
    if (!counts) return;
    std::atomic<std::uint64_t>* c = nullptr;
    if (m == &unnamed) {
      c = counts->unnamed;
    } else if (auto it = counts->by_method.find(m); it != counts->by_method.end()) {
      c = it->second;
    }
    if (c) c->fetch_add(1, std::memory_order_relaxed);  // relaxed: a counter, read as a snapshot
  }
  /// Counters for this service's methods in `counters` (a service's connection).
  void count_into(const std::shared_ptr<method_counters>& counters) {
    auto index = std::make_shared<method_count_index>();
    index->counters = counters;
    if (methods)
      for (const auto& [name, m] : *methods)
        if (auto* c = counters->counter(name)) index->by_method.emplace(&m, c);
    if (unnamed.async || unnamed.sync || unnamed.stream || unnamed.in_place)
      index->unnamed = counters->counter("");
    counts = std::move(index);
  }

  static rpc_service of(const rpc_methods& m) {
    rpc_service s{{}, m.table(), {}};
    // The unnamed method without a lookup per call.
    if (s.methods)
      if (auto it = s.methods->find(std::string_view()); it != s.methods->end())
        s.unnamed = it->second;
    return s;
  }

  /// True if it serves any request at all.
  bool any() const noexcept {
    return unnamed.async || unnamed.sync || unnamed.stream || unnamed.in_place ||
           (methods && !methods->empty());
  }

  /// The method a request for `name` ("" for an unnamed call) reaches; null if none.
  const rpc_method* find(std::string_view name) const {
    if (name.empty() && (unnamed.async || unnamed.sync || unnamed.stream || unnamed.in_place))
      return &unnamed;
    if (!methods) return nullptr;
    auto it = methods->find(name);
    return it == methods->end() ? nullptr : &it->second;
  }
};

}  // namespace shmio::detail
