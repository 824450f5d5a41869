#include "shmio/detail/rpc_listener.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <new>

#include "shmio/detail/liveness.hpp"
#include "shmio/detail/platform.hpp"
#include "shmio/detail/ring_ops.hpp"
#include "shmio/detail/rpc_packet.hpp"

namespace shmio::detail {

std::string connection_name(std::string_view service, std::uint32_t pid, std::uint64_t nonce) {
  char numbers[40];
  std::snprintf(numbers, sizeof numbers, "#%u.%016llx", static_cast<unsigned>(pid),
                static_cast<unsigned long long>(nonce));
  std::string name(service);
  name += numbers;
  return name;
}

segment create_listener(std::string_view name, const rpc_options& channel, std::error_code& ec) {
  // The channel's sizes are checked here, as rpc_channel::create would check them, so that a
  // listener never tells its clients to make what cannot be made.
  std::uint64_t channel_ring = 0;
  if (!ring_view::body_size_for(channel.node_count, channel.node_size, channel_ring) ||
      channel.node_size <= packet_header_size || channel.max_message_size > 0xFFFF'FFFFull) {
    ec = errc::invalid_argument;
    return {};
  }
  std::uint64_t ring_bytes = 0;
  ring_view::body_size_for(listener_backlog, sizeof(layout::connect_request), ring_bytes);
  const std::uint64_t methods_offset = sizeof(layout::listener_header) + ring_bytes;
  auto init = [&](std::span<std::byte> body) {
    auto* h = new (body.data()) layout::listener_header{};
    h->version = layout::listener_version;
    h->node_count = static_cast<std::uint32_t>(channel.node_count);
    h->node_size = static_cast<std::uint32_t>(channel.node_size);
    h->max_message_size = static_cast<std::uint32_t>(channel.max_message_size);
    h->default_timeout_ms = encode_timeout(channel.default_timeout);
    h->ring_offset = sizeof(layout::listener_header);
    h->ring_bytes = ring_bytes;
    h->backlog = listener_backlog;
    h->methods_offset = methods_offset;
    auto* table = new (body.data() + methods_offset) layout::method_table{};
    table->slot_count = layout::method_slots;
    // relaxed: informational, and the segment is not visible to anyone yet.
    h->server_pid.store(platform::process_id(), std::memory_order_relaxed);
    ring_view::initialize(body.subspan(sizeof(layout::listener_header), ring_bytes),
                          listener_backlog, sizeof(layout::connect_request));
  };
  return segment::create(name, object_kind::rpc_listener,
                         methods_offset + sizeof(layout::method_table), init, ec);
}

std::error_code validate_listener(std::span<const std::byte> body, listener_settings& out) {
  if (body.size() < sizeof(layout::listener_header)) return errc::corrupted;
  // One copy of the fields that are not atomic: a value checked must be the value used.
  const auto& shared = *reinterpret_cast<const layout::listener_header*>(body.data());
  const std::uint32_t version = shared.version;
  if (version != layout::listener_version) return errc::incompatible;
  const std::uint32_t node_count = shared.node_count;
  const std::uint32_t node_size = shared.node_size;
  const std::uint32_t max_message_size = shared.max_message_size;
  const std::uint64_t timeout_ms = shared.default_timeout_ms;
  const std::uint64_t ring_offset = shared.ring_offset;
  const std::uint64_t ring_bytes = shared.ring_bytes;
  const std::uint64_t methods_offset = shared.methods_offset;
  std::uint64_t channel_ring = 0;
  if (!ring_view::body_size_for(node_count, node_size, channel_ring) ||
      node_size <= packet_header_size || ring_offset != sizeof(layout::listener_header) ||
      body.size() < ring_offset + sizeof(layout::method_table) ||
      ring_bytes != body.size() - ring_offset - sizeof(layout::method_table) ||
      methods_offset != ring_offset + ring_bytes)
    return errc::corrupted;
  std::chrono::milliseconds timeout{};
  if (!decode_timeout(timeout_ms, timeout)) return errc::corrupted;
  ring_geometry g;
  if (auto ec = ring_view::validate(body.subspan(ring_offset, ring_bytes), g)) return ec;
  if (g.node_size != sizeof(layout::connect_request)) return errc::corrupted;
  out.channel.node_count = node_count;
  out.channel.node_size = node_size;
  out.channel.max_message_size = max_message_size;
  out.channel.default_timeout = timeout;
  out.ring_offset = ring_offset;
  out.ring = g;
  out.methods_offset = methods_offset;
  return {};
}

std::shared_ptr<method_counters> method_counters::map(const segment& listener,
                                                      std::uint64_t methods_offset,
                                                      std::error_code& ec) {
  std::shared_ptr<method_counters> c(new method_counters);
  const std::size_t body_offset = sizeof(layout::segment_header);
  c->size_ = body_offset + listener.body().size();
  c->base_ = platform::map_shared(listener.native_handle(), c->size_, ec, true);
  if (ec) return nullptr;
  // Only this process writes the table (its acceptor made it): no one else's values to check.
  c->table_ = reinterpret_cast<layout::method_table*>(static_cast<std::byte*>(c->base_) +
                                                      body_offset + methods_offset);
  return c;
}

method_counters::~method_counters() {
  if (base_) platform::unmap(base_, size_);
}

std::atomic<std::uint64_t>* method_counters::counter(std::string_view name) {
  std::lock_guard lock(mutex_);
  if (auto it = by_name_.find(std::string(name)); it != by_name_.end()) return it->second;
  // relaxed: only this process writes `used`, under mutex_.
  const std::uint32_t used = table_->used.load(std::memory_order_relaxed);
  if (used >= layout::method_slots) return nullptr;
  layout::method_slot& slot = table_->slots[used];
  const std::size_t kept = std::min(name.size(), layout::method_name_bytes);
  std::memcpy(slot.name, name.data(), kept);
  slot.name_length = static_cast<std::uint8_t>(kept);
  slot.cut = name.size() > kept ? 1 : 0;
  // release: a reader that sees the slot taken (or counted in `used`) sees its name.
  slot.taken.store(1, std::memory_order_release);
  table_->used.store(used + 1, std::memory_order_release);
  by_name_.emplace(std::string(name), &slot.calls);
  return &slot.calls;
}

void guard_rpc_mappings() noexcept {
  std::error_code ignored;  // without it, a truncation faults as it would have anyway
  platform::install_truncation_guard(ignored);
}

std::unique_ptr<listener_link> listener_link::open(std::string_view service, std::error_code& ec) {
  guard_rpc_mappings();
  auto owned = std::make_unique<listener_link>();
  listener_link& link = *owned;
  link.seg_ = segment::open(service, object_kind::rpc_listener, ec);
  if (ec) return nullptr;
  if ((ec = validate_listener(link.seg_.body(), link.settings_))) return nullptr;
  const int fd = link.seg_.native_handle();
  // Our number first, then the acceptor's lock: a number held while the acceptor lives (it took
  // its own before that lock) is never the acceptor's, the one handle that reads this ring (see
  // recover_own_writes below). A listener file has one acceptor, its creator, for its life.
  const std::uint16_t me = claim_participant(fd, layout::max_participants, ec);
  // A listener whose acceptor is gone serves nobody: as good as none (whatever else failed).
  if (!link.server_alive()) {
    ec = errc::not_found;
    return nullptr;
  }
  if (ec) return nullptr;
  auto* state =
      reinterpret_cast<layout::ring_state*>(link.seg_.body().data() + link.settings_.ring_offset);
  std::construct_at(&link.ring_, state, link.settings_.ring, fd, me);
  // The page of the node this client is about to write mapped in one call, not by a fault.
  // relaxed: only a hint of which page; nothing is read through it.
  link.ring_.populate(state->tail.position.load(std::memory_order_relaxed), 1);
  // Clients only write this ring: the acceptor alone reads it, under a number it took before any
  // client could pass the check above, and held at the same time as ours: not ours.
  link.ring_.recover_own_writes();
  return owned;
}

bool listener_link::server_alive() {
  std::error_code ec;
  return platform::byte_locked_by_other(seg_.native_handle(), layout::listener_server_lock_byte,
                                        ec) &&
         !ec;
}

bool listener_link::post_request(std::uint32_t pid, std::uint64_t nonce, std::error_code& ec) {
  layout::connect_request request{};
  request.version = layout::listener_version;
  request.pid = pid;
  request.nonce = nonce;
  auto fill = [&](std::span<std::byte> node) {
    std::memcpy(node.data(), &request, sizeof request);
    return sizeof request;
  };
  const auto written = attempt_write(ring_, fill);
  // The listener truncated under us (the truncation guard kept us alive): nothing was sent.
  if (seg_.faulted()) {
    ec = errc::corrupted;
    return false;
  }
  if (!written) return false;
  ec = written->ec;
  return !ec;
}

}  // namespace shmio::detail
