// The opening half of rpc_channel: an owner creates the segment with its two rings, an opener
// validates what it finds (each header field read once) and takes a generation of its own.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <span>
#include <utility>

#include "rpc_limits.hpp"
#include "shmio/detail/platform.hpp"
#include "shmio/detail/rpc_channel.hpp"
#include "shmio/detail/segment_locks.hpp"

namespace shmio::detail {
namespace {

namespace platform = detail::platform;

// What an opener takes from the header, each field read once (the memory is shared: a value
// checked must be the value used).
struct channel_settings {
  std::uint64_t to_opener_offset = 0;
  std::uint64_t to_owner_offset = 0;
  std::uint32_t max_message_size = 0;
  std::chrono::milliseconds default_timeout{0};
  ring_geometry ring;  // both rings': checked to be the same
};

// The pages of each ring that an end maps in one go as it joins (ring_view::populate), rather
// than take a page fault for each as it first touches them: the ring's state and its first
// nodes. A connection with one call puts two packets into each ring (the request and the
// client's close packet; the accept packet and the reply), and the acceptor's end, which stays
// until it has read the close, also looks at the third node of one ring and writes the third of
// the other. A node's page is its own in the usual sizes, and each page mapped costs a share of
// the unmap, so no more than that.
constexpr std::uint32_t owner_first_nodes = 2;
constexpr std::uint32_t acceptor_first_nodes = 3;

void populate_rings(std::byte* body, std::uint64_t ring_bytes, const ring_geometry& g,
                    std::uint32_t nodes) noexcept {
  platform::page_populator pages;
  ring_view::populate(body + sizeof(layout::rpc_header), g, 0, nodes, pages);
  ring_view::populate(body + sizeof(layout::rpc_header) + ring_bytes, g, 0, nodes, pages);
}

std::error_code validate_channel(std::span<const std::byte> body, channel_settings& out) {
  if (body.size() < sizeof(layout::rpc_header)) return errc::corrupted;
  const auto& h = *reinterpret_cast<const layout::rpc_header*>(body.data());
  if (h.version != layout::rpc_version) return errc::incompatible;
  const std::uint32_t node_count = h.node_count;
  const std::uint32_t node_size = h.node_size;
  const std::uint64_t to_opener = h.to_opener_offset;
  const std::uint64_t to_owner = h.to_owner_offset;
  const std::uint64_t timeout_ms = h.default_timeout_ms;
  const std::uint32_t max_message_size = h.max_message_size;
  std::uint64_t ring_bytes = 0;
  if (!ring_view::body_size_for(node_count, node_size, ring_bytes) ||
      node_size <= packet_header_size || h.ring_bytes != ring_bytes ||
      to_opener != sizeof(layout::rpc_header) ||
      to_owner != sizeof(layout::rpc_header) + ring_bytes ||
      body.size() != sizeof(layout::rpc_header) + 2 * ring_bytes)
    return errc::corrupted;
  if (!decode_timeout(timeout_ms, out.default_timeout)) return errc::corrupted;
  for (const std::uint64_t offset : {to_opener, to_owner}) {
    ring_geometry g;
    if (auto ec = ring_view::validate(body.subspan(offset, ring_bytes), g)) return ec;
    if (g.node_count != node_count || g.node_size != node_size) return errc::corrupted;
    out.ring = g;
  }
  out.to_opener_offset = to_opener;
  out.to_owner_offset = to_owner;
  out.max_message_size = max_message_size;
  return {};
}

}  // namespace

std::shared_ptr<rpc_channel> rpc_channel::create(const asio::any_io_executor& ex,
                                                 std::string_view name, rpc_service service,
                                                 const rpc_options& options, std::error_code& ec) {
  auto ch = make_owner(ex, name, std::move(service), options, ec);
  if (ch) ch->start_loops();
  return ch;
}

std::shared_ptr<rpc_channel> rpc_channel::open(const asio::any_io_executor& ex,
                                               std::string_view name, rpc_service service,
                                               wait_strategy strategy, std::error_code& ec) {
  auto ch = make_opener(ex, name, std::move(service), strategy, ec);
  if (ch) ch->start_loops();
  return ch;
}

std::shared_ptr<rpc_channel> rpc_channel::make_owner(const asio::any_io_executor& ex,
                                                     std::string_view name, rpc_service service,
                                                     const rpc_options& options,
                                                     std::error_code& ec) {
  guard_rpc_mappings();
  std::uint64_t ring_bytes = 0;
  if (!ring_view::body_size_for(options.node_count, options.node_size, ring_bytes) ||
      options.node_size <= packet_header_size || options.max_message_size > 0xFFFF'FFFFull ||
      limits_problem(options)) {
    ec = errc::invalid_argument;
    return nullptr;
  }
  const auto count = static_cast<std::uint32_t>(options.node_count);
  const auto size = static_cast<std::uint32_t>(options.node_size);
  const geometry where{sizeof(layout::rpc_header),
                       sizeof(layout::rpc_header) + ring_bytes,
                       {count, size, static_cast<std::uint32_t>(layout::node_stride_for(size)),
                        layout::ring_nodes_offset}};
  auto init = [&](std::span<std::byte> body) {
    populate_rings(body.data(), ring_bytes, where.ring, owner_first_nodes);
    auto* h = new (body.data()) layout::rpc_header{};
    h->version = layout::rpc_version;
    h->node_count = count;
    h->node_size = size;
    h->max_message_size = static_cast<std::uint32_t>(options.max_message_size);
    h->ring_bytes = ring_bytes;
    h->to_opener_offset = where.to_opener_offset;
    h->to_owner_offset = where.to_owner_offset;
    h->default_timeout_ms = encode_timeout(options.default_timeout);
    ring_view::initialize(body.subspan(where.to_opener_offset, ring_bytes), count, size);
    ring_view::initialize(body.subspan(where.to_owner_offset, ring_bytes), count, size);
  };
  segment seg = segment::create(name, object_kind::rpc, sizeof(layout::rpc_header) + 2 * ring_bytes,
                                init, ec);
  if (ec) return nullptr;
  auto ch = std::make_shared<rpc_channel>(ex, std::move(service));
  // The value as the header holds it: "none" (negative or max()) becomes max().
  decode_timeout(encode_timeout(options.default_timeout), ch->default_timeout_);
  ch->reassembler_ = reassembler(options.max_message_size, reassembler::default_partial_messages,
                                 options.max_reassembly_bytes);
  ch->set_limits(options);
  ec = ch->attach(std::move(seg), true, where, options.strategy);
  if (ec) return nullptr;
  return ch;
}

std::shared_ptr<rpc_channel> rpc_channel::make_opener(const asio::any_io_executor& ex,
                                                      std::string_view name, rpc_service service,
                                                      wait_strategy strategy, std::error_code& ec,
                                                      const rpc_options* expected,
                                                      std::chrono::milliseconds admin_patience) {
  // An acceptor opens its clients' channels on its executor's thread: it passes a patience of
  // at most acceptor_admin_patience, from a budget (rpc_acceptor_impl::admin_patience_now).
  // Its close waits little longer (acceptor_close_patience).
  guard_rpc_mappings();
  segment seg = open_segment(name, object_kind::rpc, admin_patience, ec);
  if (ec) return nullptr;
  if (expected) set_close_patience(seg, acceptor_close_patience);
  // An acceptor's new connection, made with the sizes it expects: mapped before it is
  // validated (which reads both rings' states), and only if the file is as large as those
  // sizes make it, so that every page populated is in the mapping.
  std::uint64_t expected_ring_bytes = 0;
  if (expected &&
      ring_view::body_size_for(expected->node_count, expected->node_size, expected_ring_bytes) &&
      seg.body().size() == sizeof(layout::rpc_header) + 2 * expected_ring_bytes) {
    const auto size = static_cast<std::uint32_t>(expected->node_size);
    populate_rings(
        seg.body().data(), expected_ring_bytes,
        {static_cast<std::uint32_t>(expected->node_count), size,
         static_cast<std::uint32_t>(layout::node_stride_for(size)), layout::ring_nodes_offset},
        acceptor_first_nodes);
  }
  channel_settings settings;
  ec = validate_channel(seg.body(), settings);
  if (ec) return nullptr;
  // Before attach, which may read every node (recover_own_nodes): a channel far larger than
  // the service's, which its maker may size as it likes, would have us page all of it in.
  if (expected && (settings.ring.node_count != expected->node_count ||
                   settings.ring.node_size != expected->node_size ||
                   settings.max_message_size != expected->max_message_size ||
                   settings.default_timeout != expected->default_timeout)) {
    ec = errc::incompatible;
    return nullptr;
  }
  auto ch = std::make_shared<rpc_channel>(ex, std::move(service));
  // The owner's limits, so that both ends agree on them.
  ch->default_timeout_ = settings.default_timeout;
  ch->reassembler_ = reassembler(settings.max_message_size);
  ec = ch->attach(std::move(seg), false,
                  {settings.to_opener_offset, settings.to_owner_offset, settings.ring}, strategy);
  if (ec) return nullptr;
  return ch;
}

bool rpc_channel::may_hold_stale_claims(int fd, bool owner) const noexcept {
  // Nodes are claimed only by an end that holds its participant number: the owner (which takes
  // one, once, as it creates the channel) and openers after they took a generation. acquire:
  // pairs with an opener's increment, made before its first claim.
  if (header_->opener_generation.load(std::memory_order_acquire) != 0) return true;
  // No opener ever claimed a node. The owner's claims carry its own number, which cannot be
  // ours while it still holds it (we took ours before this look).
  if (owner) return false;
  std::error_code ec;
  return !platform::byte_locked_by_other(fd, layout::rpc_owner_lock_byte, ec) || ec;
}

std::error_code rpc_channel::attach(segment seg, bool owner, const geometry& where,
                                    wait_strategy strategy) {
  std::error_code ec;
  const int fd = seg.native_handle();
  const std::uint64_t own_byte = owner ? layout::rpc_owner_lock_byte : layout::rpc_opener_lock_byte;
  const std::uint64_t serves_byte =
      owner ? layout::rpc_owner_serves_lock_byte : layout::rpc_opener_serves_lock_byte;
  // The serves byte first: whoever sees this end there sees whether it serves.
  serves_ = service_.any();
  // Openers are let in one at a time by their admission byte, held while attached. An opener
  // takes its own lock byte only after it has counted itself (below), so an owner that finds
  // that byte held reads the holder's generation, never the one before it.
  if (!owner && !platform::try_lock_byte(fd, layout::rpc_opener_admit_lock_byte,
                                         platform::lock_kind::exclusive, ec))
    return ec ? ec : std::error_code(errc::busy);
  // A second opener that finds the first still there fails before it shows a serves byte, or an
  // owner looking meanwhile could take a first opener that serves nothing for one that serves.
  const bool first_still_there =
      (serves_ || !owner) && platform::byte_locked_by_other(fd, own_byte, ec);
  if (ec) return ec;
  if (first_still_there) return errc::busy;
  if (serves_ && !platform::try_lock_byte(fd, serves_byte, platform::lock_kind::shared, ec))
    return ec ? ec : std::error_code(errc::busy);
  // Our process's byte before our lock byte: an end that finds us there finds which process we
  // are (rpc_channel::watch_peer_death). Not taken (another process holds it): we are watched
  // by our claim or our lock byte instead.
  const std::uint64_t process_byte =
      owner ? layout::rpc_owner_process_lock_byte : layout::rpc_opener_process_lock_byte;
  if (owner) static_cast<void>(platform::lock_byte_for_process(fd, process_byte));
  if (owner && !platform::try_lock_byte(fd, own_byte, platform::lock_kind::exclusive, ec)) {
    // The channel already has this end. (Our shared lock goes with it; the other's stays.)
    platform::unlock_byte_for_process(fd, process_byte);
    std::error_code ignored;
    if (serves_) platform::try_lock_byte(fd, serves_byte, platform::lock_kind::unlock, ignored);
    return ec ? ec : std::error_code(errc::busy);
  }
  const std::uint16_t me = claim_participant(fd, layout::max_participants, ec);
  if (ec) return ec;
  seg_ = std::move(seg);
  owner_ = owner;
  peer_lock_byte_ = owner ? layout::rpc_opener_lock_byte : layout::rpc_owner_lock_byte;
  peer_serves_byte_ =
      owner ? layout::rpc_opener_serves_lock_byte : layout::rpc_owner_serves_lock_byte;
  std::byte* body = seg_.body().data();
  header_ = reinterpret_cast<layout::rpc_header*>(body);
  auto* to_opener = reinterpret_cast<layout::ring_state*>(body + where.to_opener_offset);
  auto* to_owner = reinterpret_cast<layout::ring_state*>(body + where.to_owner_offset);
  std::construct_at(&in_, owner ? to_owner : to_opener, where.ring, fd, me);
  std::construct_at(&out_, owner ? to_opener : to_owner, where.ring, fd, me);
  if (may_hold_stale_claims(fd, owner)) {
    in_.recover_own_nodes();
    out_.recover_own_nodes();
  }
  // relaxed (both pids): informational only.
  if (owner) header_->owner_pid.store(platform::process_id(), std::memory_order_relaxed);
  if (!owner) {
    // A new opener: a generation of its own, taken while it holds the admission byte (so no
    // other opener takes one meanwhile), then its lock byte, which shows it there. acq_rel: the
    // count is ordered before every packet we publish and before the lock (a system call), so
    // the owner, having read one of them, reads this count or a later one.
    generation_ = header_->opener_generation.fetch_add(1, std::memory_order_acq_rel) + 1;
    // The pid after the count: an owner that has not yet seen the count reads the pid of the
    // opener it still addresses, and watches the right process; one that found our lock byte
    // held reads ours.
    header_->opener_pid.store(platform::process_id(), std::memory_order_relaxed);
    static_cast<void>(platform::lock_byte_for_process(fd, process_byte));  // as the owner's
    // Free, as the admission byte is ours (an opener of an earlier version, which took this
    // byte without it, is refused by the version); looked at all the same.
    if (!platform::try_lock_byte(fd, own_byte, platform::lock_kind::exclusive, ec))
      return ec ? ec : std::error_code(errc::busy);
  }
  layout::wait_queue* queues[] = {&in_.state().readers, &out_.state().writers};
  waiter_ = std::make_shared<waiter>(strand_, queues, strategy, ec);
  packet_.reserve(in_.node_size());
  return ec;
}

}  // namespace shmio::detail
