// Fuzz target: what a hostile process can put in front of an RPC service: the listener segment's
// body (layout/rpc.hpp, "rpc listener") as validate_listener checks it, and the connect ring as the
// acceptor reads requests from it and a client writes them.
// Input: [mode][...], where mode is
//   bits 0-1: 0: the rest is a listener body, as is;
//             1: the rest is XORed into a valid listener body (from byte 0 on);
//             2, 3: the rest is a script of operations on a valid listener (below);
//   bits 2-4: the connect ring's node count: 2 + n, or 256 (the real backlog) for n = 7;
//   bits 5-7 all set: the script may wait once past holder_patience, when a node was found held
//   by another participant, so that nodes held by a dead one are taken over (an eighth of the
//   script inputs at most: they are slow).
// Modes 0 and 1: validate_listener must accept or fail with incompatible or corrupted, and what
// it accepts must be within the documented ranges; an accepted body is then driven: a client
// writes requests and the acceptor takes them, through the geometry validate returned.
// Scripts: the acceptor's and a client's views of the ring are made as create_listener and
// rpc_acceptor make them, from the intact body; then each operation either damages the body
// (node words, lengths, cursors, raw bytes: of the header, the ring header, the wait queues, the
// nodes) or acts as the client (a well-formed or forged request) or the acceptor (a take, as
// rpc_acceptor_impl::take_request does it: it is private, so it is mirrored here over ring_view
// and attempt_read). A take must return within node_count + 1 reads, each of which moves the
// head a bounded distance, and what it returns must be a whole connect_request read from inside
// a node.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <thread>

#include "fuzz_support.hpp"
#include "shmio/detail/layout.hpp"
#include "shmio/detail/liveness.hpp"
#include "shmio/detail/ring.hpp"
#include "shmio/detail/ring_ops.hpp"
#include "shmio/detail/rpc_listener.hpp"
#include "shmio/detail/rpc_packet.hpp"
#include "shmio/detail/stall.hpp"
#include "shmio/error.hpp"

namespace {

namespace layout = shmio::detail::layout;
using shmio::detail::listener_settings;
using shmio::detail::ring_geometry;
using shmio::detail::ring_view;

void require(bool ok) {
  if (!ok) std::abort();
}

constexpr std::uint64_t header_size = sizeof(layout::listener_header);
constexpr std::uint32_t request_size = sizeof(layout::connect_request);

// ---- memory and liveness ------------------------------------------------------------------------

/// A body in heap memory aligned as a mapping is (ring_cursor is cache-line aligned), and exactly
/// as long as the body, so that ASan sees any access past its end.
class body_memory {
 public:
  explicit body_memory(std::size_t size)
      : size_(size),
        data_(static_cast<std::byte*>(::operator new (size ? size : 1, std::align_val_t{64}))) {
    std::memset(data_, 0, size_);
  }
  ~body_memory() { ::operator delete (data_, std::align_val_t{64}); }
  body_memory(const body_memory&) = delete;
  body_memory& operator=(const body_memory&) = delete;

  std::span<std::byte> bytes() const noexcept { return {data_, size_}; }
  std::byte* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }

 private:
  std::size_t size_;
  std::byte* data_;
};

/// A ring_view asks the kernel whether a node's owner lives: a lock on byte
/// participant_lock_base + owner - 1 of the segment file held by another open file description.
/// A memfd opened three times: the acceptor (participant 1), the client (2) and a live stranger
/// (3) each hold their byte through their own; nobody holds 4 and up (dead).
struct participants {
  int acceptor_fd = -1;
  int client_fd = -1;
  std::uint16_t acceptor = 0;
  std::uint16_t client = 0;
  std::uint16_t stranger = 0;
};

const participants& the_participants() {
  static const participants p = [] {
    participants out;
    out.acceptor_fd = ::memfd_create("shmio-fuzz-listener", MFD_CLOEXEC);
    require(out.acceptor_fd >= 0);
    const std::string again = "/proc/self/fd/" + std::to_string(out.acceptor_fd);
    out.client_fd = ::open(again.c_str(), O_RDWR | O_CLOEXEC);
    const int stranger_fd = ::open(again.c_str(), O_RDWR | O_CLOEXEC);
    require(out.client_fd >= 0 && stranger_fd >= 0);
    std::error_code ec;
    out.acceptor = shmio::detail::claim_participant(out.acceptor_fd, 8, ec);
    out.client = shmio::detail::claim_participant(out.client_fd, 8, ec);
    out.stranger = shmio::detail::claim_participant(stranger_fd, 8, ec);
    require(!ec && out.acceptor == 1 && out.client == 2 && out.stranger == 3);
    return out;
  }();
  return p;
}

// ---- a listener body, as create_listener makes it -----------------------------------------------

std::uint64_t ring_bytes_for(std::uint32_t backlog) {
  std::uint64_t bytes = 0;
  require(ring_view::body_size_for(backlog, request_size, bytes));
  return bytes;
}

/// A listener body's size: the header, the connect ring, the method table.
std::uint64_t body_size_for(std::uint32_t backlog) {
  return header_size + ring_bytes_for(backlog) + sizeof(layout::method_table);
}

void init_listener(std::span<std::byte> body, std::uint32_t backlog) {
  const std::uint64_t ring_bytes = ring_bytes_for(backlog);
  require(body.size() == body_size_for(backlog));
  auto* h = new (body.data()) layout::listener_header{};
  h->version = layout::listener_version;
  h->node_count = 64;
  h->node_size = 16 * 1024;
  h->max_message_size = 0xFFFF'FFFFu;
  h->default_timeout_ms = 30'000;
  h->ring_offset = header_size;
  h->ring_bytes = ring_bytes;
  h->backlog = backlog;
  h->methods_offset = header_size + ring_bytes;
  h->server_pid.store(static_cast<std::uint32_t>(::getpid()), std::memory_order_relaxed);
  ring_view::initialize(body.subspan(header_size, ring_bytes), backlog, request_size);
  auto* table = new (body.data() + header_size + ring_bytes) layout::method_table{};
  table->slot_count = layout::method_slots;  // as create_listener makes it
}

std::uint32_t backlog_of(std::uint8_t mode) {
  const unsigned n = (mode >> 2) & 7;
  return n == 7 ? shmio::detail::listener_backlog : 2 + n;
}

// ---- validate_listener --------------------------------------------------------------------------

/// Validates `body`; checks the result against the documented ranges and the header's bytes.
bool validate(std::span<const std::byte> body, listener_settings& out) {
  const std::error_code ec = shmio::detail::validate_listener(body, out);
  if (ec) {
    require(ec == shmio::errc::corrupted || ec == shmio::errc::incompatible);
    return false;
  }
  require(body.size() >= header_size);
  layout::listener_header h;
  std::memcpy(static_cast<void*>(&h), body.data(), sizeof h);
  require(h.version == layout::listener_version);
  // The connection's channel: a ring that can be made, nodes that hold more than a packet header.
  const auto& ch = out.channel;
  std::uint64_t channel_ring = 0;
  require(ch.node_count == h.node_count && ch.node_size == h.node_size);
  require(ch.node_count >= 2 && ch.node_size > shmio::detail::packet_header_size);
  require(ring_view::body_size_for(ch.node_count, ch.node_size, channel_ring));
  require(ch.max_message_size == h.max_message_size);
  if (h.default_timeout_ms == layout::rpc_no_timeout) {
    require(ch.default_timeout == std::chrono::milliseconds::max());
  } else {
    require(ch.default_timeout.count() >= 0);
    require(static_cast<std::uint64_t>(ch.default_timeout.count()) == h.default_timeout_ms);
  }
  // The connect ring: right after the header, nodes of one connect_request, up to the method
  // table, which fills the rest.
  require(out.ring_offset == header_size && h.ring_offset == header_size);
  require(out.ring.node_size == request_size);
  require(out.ring.node_count >= 2);
  require(out.ring.node_stride == layout::node_stride_for(request_size));
  require(out.ring.nodes_offset == layout::ring_nodes_offset);
  std::uint64_t ring_bytes = 0;
  require(ring_view::body_size_for(out.ring.node_count, request_size, ring_bytes));
  require(h.ring_bytes == ring_bytes &&
          body.size() == header_size + ring_bytes + sizeof(layout::method_table));
  require(out.methods_offset == header_size + ring_bytes && h.methods_offset == out.methods_offset);
  return true;
}

// ---- the acceptor and the client ----------------------------------------------------------------

/// What the fuzzer may not make the ring do, for the views over one body.
class connect_ring {
 public:
  connect_ring(const body_memory& mem, const ring_geometry& g)
      : mem_(mem),
        state_(reinterpret_cast<layout::ring_state*>(mem.data() + header_size)),
        geometry_(g),
        acceptor_(state_, g, the_participants().acceptor_fd, the_participants().acceptor),
        client_(state_, g, the_participants().client_fd, the_participants().client) {}

  std::uint32_t node_count() const noexcept { return geometry_.node_count; }
  layout::ring_state& state() const noexcept { return *state_; }
  layout::node_header& node_at(std::uint64_t position) const noexcept {
    return *reinterpret_cast<layout::node_header*>(reinterpret_cast<std::byte*>(state_) +
                                                   geometry_.nodes_offset +
                                                   position % node_count() * geometry_.node_stride);
  }

  /// rpc_acceptor_impl::take_request, with checks.
  std::optional<shmio::detail::outcome<layout::connect_request>> take() {
    std::uint32_t reads = 0;
    for (std::uint32_t bad = 0; bad <= acceptor_.node_count(); ++bad) {
      layout::connect_request request{};
      std::size_t length = 0;
      auto copy = [&](std::span<const std::byte> message) {
        require_in_node(message);
        length = message.size();
        std::memcpy(&request, message.data(), std::min(message.size(), sizeof request));
      };
      require(++reads <= node_count() + 1);
      const std::uint64_t head = state_->head.position.load(std::memory_order_relaxed);
      const auto got = shmio::detail::attempt_read(acceptor_, copy, acceptor_.node_size());
      require_bounded_walk(head, state_->head.position.load(std::memory_order_relaxed));
      if (!got) return std::nullopt;
      // A message longer than the node is reported corrupted, never too large (the capacity is
      // the node's size): one or the other error, and no other.
      require(!got->ec || got->ec == shmio::errc::corrupted);
      if (!got->ec) require(got->value == length && length <= request_size);
      if (!got->ec && length == sizeof request) {
        check_request(request);
        return shmio::detail::outcome<layout::connect_request>{{}, request};
      }
    }
    return shmio::detail::outcome<layout::connect_request>{shmio::errc::corrupted, {}};
  }

  /// Takes until the ring says it is empty, for at most `limit` takes.
  void drain(std::size_t limit) {
    for (std::size_t i = 0; i < limit; ++i)
      if (!take()) return;
  }

  /// listener_link::post_request: a well-formed request.
  void post(std::uint32_t pid, std::uint64_t nonce) {
    layout::connect_request request{};
    request.version = layout::listener_version;
    request.pid = pid;
    request.nonce = nonce;
    write(&request, sizeof request);
  }

  /// A forged request: `bytes`, up to one past the node's size.
  void post_forged(std::span<const std::uint8_t> bytes) { write(bytes.data(), bytes.size()); }

  void recover_client() { client_.recover_own_writes(); }  // as listener_link::open

 private:
  void write(const void* what, std::size_t length) {
    auto fill = [&](std::span<std::byte> node) {
      require_in_node(node);
      require(node.size() == request_size);
      if (length <= node.size()) std::memcpy(node.data(), what, length);
      return length;
    };
    const std::uint64_t tail = state_->tail.position.load(std::memory_order_relaxed);
    const auto written = shmio::detail::attempt_write(client_, fill);
    require_bounded_walk(tail, state_->tail.position.load(std::memory_order_relaxed));
    if (!written) return;
    if (length > request_size)
      require(written->ec == shmio::errc::message_too_large ||
              written->ec == shmio::errc::corrupted);
    else
      require(written->ec ? written->ec == shmio::errc::corrupted : written->value == length);
  }

  /// A message handed out lies within the data bytes of one node of this body.
  void require_in_node(std::span<const std::byte> m) const {
    const auto* nodes = reinterpret_cast<const std::byte*>(state_) + geometry_.nodes_offset;
    require(m.data() >= nodes);
    const auto at = static_cast<std::size_t>(m.data() - nodes);
    require(at % geometry_.node_stride == sizeof(layout::node_header));
    require(at / geometry_.node_stride < node_count() && m.size() <= geometry_.node_size);
    require(m.data() + m.size() <= mem_.data() + mem_.size());
  }

  /// One read or write moves its cursor past at most every node about three times over (a node
  /// is passed while its turn is 1 to 2 laps ahead, and once more if a dead owner's is skipped):
  /// a damaged cursor must be reported, never walked.
  void require_bounded_walk(std::uint64_t before, std::uint64_t after) const {
    require(after - before <= 4 * std::uint64_t{node_count()} + 4);
  }

  /// The acceptor names the connection from the listener's name and the request's numbers.
  static void check_request(const layout::connect_request& request) {
    const std::string name = shmio::detail::connection_name("svc", request.pid, request.nonce);
    const std::string pid = std::to_string(request.pid);
    require(name.size() == 3 + 1 + pid.size() + 1 + 16);
    require(name.compare(0, 4, "svc#") == 0 && name.compare(4, pid.size(), pid) == 0);
    require(name[4 + pid.size()] == '.');
    const std::string hex = name.substr(4 + pid.size() + 1);
    require(hex.find_first_not_of("0123456789abcdef") == std::string::npos);
    require(std::stoull(hex, nullptr, 16) == request.nonce);
    shmio::fuzz::sink = static_cast<unsigned>(name.size());
  }

  const body_memory& mem_;
  layout::ring_state* state_;
  ring_geometry geometry_;
  ring_view acceptor_;
  ring_view client_;
};

// ---- modes 0 and 1: a body from the input -------------------------------------------------------

void drive_accepted(const body_memory& mem, const listener_settings& s) {
  connect_ring ring(mem, s.ring);
  ring.take();
  ring.post(4242, 0x5eed);
  ring.post(4243, ~std::uint64_t{0});
  ring.drain(ring.node_count() + 2);
  ring.post(1, 1);
  ring.take();
}

void run_body(std::span<const std::uint8_t> input, bool xor_into_valid, std::uint32_t backlog) {
  const std::size_t size = xor_into_valid ? body_size_for(backlog) : input.size();
  body_memory mem(size);
  if (xor_into_valid) {
    init_listener(mem.bytes(), backlog);
    for (std::size_t i = 0; i < input.size() && i < size; ++i)
      mem.data()[i] ^= static_cast<std::byte>(input[i]);
  } else if (size != 0) {
    std::memcpy(mem.data(), input.data(), size);
  }
  listener_settings s;
  if (validate(mem.bytes(), s)) drive_accepted(mem, s);
}

// ---- modes 2 and 3: a script --------------------------------------------------------------------

class input_reader {
 public:
  explicit input_reader(std::span<const std::uint8_t> in) : in_(in) {}
  bool done() const noexcept { return at_ >= in_.size(); }
  std::uint8_t u8() noexcept { return done() ? 0 : in_[at_++]; }
  std::uint64_t u64() noexcept {
    std::uint64_t v = 0;
    for (int i = 0; i < 8; ++i)
      v |= std::uint64_t{u8()} << (8 * i);
    return v;
  }

 private:
  std::span<const std::uint8_t> in_;
  std::size_t at_ = 0;
};

std::uint64_t make_word(std::uint64_t turn, std::uint16_t owner, bool reading) {
  constexpr std::uint64_t turn_mask = (std::uint64_t{1} << (64 - layout::node_turn_shift)) - 1;
  return (turn & turn_mask) << layout::node_turn_shift | (reading ? layout::node_reading_bit : 0) |
         (owner & layout::node_owner_mask);
}

/// A position near the head or the tail, where damage matters.
std::uint64_t pick_position(input_reader& r, const connect_ring& ring) {
  const std::uint8_t a = r.u8();
  auto& cursor = a & 1 ? ring.state().tail : ring.state().head;
  return cursor.position.load(std::memory_order_relaxed) + (a >> 1) % (ring.node_count() + 2) - 1;
}

void set_word(input_reader& r, const connect_ring& ring) {
  const std::uint64_t pos = pick_position(r, ring);
  const std::uint8_t how = r.u8();
  const std::uint8_t who = r.u8();
  const std::uint64_t n = ring.node_count();
  // The turn: the states of layout/ring.hpp around this position (free, being written, published,
  // being read, freed for a later lap), the edges of "at most two laps ahead", or anything.
  const std::uint64_t deltas[] = {
      0,         1,         2,     n - 1, n,  n + 1, 2 * n,
      2 * n + 1, 2 * n + 2, 3 * n, -1ull, -n, 1 - n, std::uint64_t{1} << 47};
  const std::uint64_t turn = how < 0xf0 ? pos + deltas[how % std::size(deltas)] : r.u64();
  const auto& p = the_participants();
  const std::uint16_t owners[] = {0, p.acceptor, p.client, p.stranger, 4, 0x7fff};
  std::uint16_t owner = owners[(who & 0x7f) % std::size(owners)];
  if ((who & 0x7f) >= 0x70) {
    owner = r.u8();
    owner |= static_cast<std::uint16_t>(r.u8() << 8);
  }
  // The word holds the turn less the node's index (layout/ring.hpp).
  ring.node_at(pos).word.store(make_word(turn - pos % n, owner, who & 0x80),
                               std::memory_order_relaxed);
}

void set_length(input_reader& r, const connect_ring& ring) {
  const std::uint64_t pos = pick_position(r, ring);
  const std::uint8_t how = r.u8();
  const std::uint32_t lengths[] = {0,           1, request_size - 1, request_size, request_size + 1,
                                   0xFFFF'FFFFu};
  const std::uint32_t length =
      how < 0xf0 ? lengths[how % std::size(lengths)] : static_cast<std::uint32_t>(r.u64());
  std::atomic_ref<std::uint32_t>(ring.node_at(pos).length).store(length, std::memory_order_relaxed);
}

void set_cursor(input_reader& r, const connect_ring& ring) {
  const std::uint8_t how = r.u8();
  auto& cursor = how & 1 ? ring.state().tail : ring.state().head;
  auto& other = how & 1 ? ring.state().head : ring.state().tail;
  const std::uint64_t now = cursor.position.load(std::memory_order_relaxed);
  const std::uint64_t d = r.u8();
  const std::uint64_t n = ring.node_count();
  std::uint64_t to = now;
  switch ((how >> 1) % 7) {
    case 0:
      to = now + d;
      break;
    case 1:
      to = now - d;
      break;
    case 2:
      to = now + d * n;
      break;
    case 3:
      to = other.position.load(std::memory_order_relaxed);
      break;
    case 4:
      to = now + (std::uint64_t{1} << 48) * (d + 1);  // the same turn, another epoch
      break;
    case 5:
      to = now + (std::uint64_t{1} << 47);  // half the turn space away
      break;
    default:
      to = r.u64();
  }
  cursor.position.store(to, std::memory_order_relaxed);
}

/// Up to 16 raw bytes anywhere in the body: written (`xor_them` false) or XORed.
void poke(input_reader& r, const body_memory& mem, bool xor_them) {
  std::size_t at = r.u8();
  at = (at | std::size_t{r.u8()} << 8) % mem.size();
  const std::size_t n = std::min<std::size_t>(1 + r.u8() % 16, mem.size() - at);
  for (std::size_t i = 0; i < n; ++i) {
    // Atomic byte stores: the cursors and node words are atomics that we may hit here.
    std::atomic_ref<std::uint8_t> b(*reinterpret_cast<std::uint8_t*>(mem.data() + at + i));
    const std::uint8_t v = r.u8();
    b.store(xor_them ? static_cast<std::uint8_t>(b.load(std::memory_order_relaxed) ^ v) : v,
            std::memory_order_relaxed);
  }
}

void run_script(std::span<const std::uint8_t> input, std::uint32_t backlog, bool may_sleep) {
  body_memory mem(body_size_for(backlog));
  init_listener(mem.bytes(), backlog);
  listener_settings s;
  require(validate(mem.bytes(), s));  // as rpc_acceptor_impl::create: before anyone else sees it
  connect_ring ring(mem, s.ring);
  input_reader r(input);
  shmio::detail::take_stall_note();  // clears what an earlier input left
  for (unsigned op = 0; !r.done() && op < 256; ++op) {
    const unsigned code = r.u8() % 11u;
    switch (code) {
      case 0:
        ring.post(static_cast<std::uint32_t>(r.u64()), r.u64());
        break;
      case 1: {
        std::uint8_t forged[request_size + 1] = {};
        const std::size_t length = r.u8() % (request_size + 2);
        for (std::size_t i = 0; i < length; ++i)
          forged[i] = r.u8();
        ring.post_forged(std::span(forged, length));
        break;
      }
      case 2:
      case 3:
        ring.take();
        break;
      case 4:
        set_word(r, ring);
        break;
      case 5:
        set_length(r, ring);
        break;
      case 6:
        set_cursor(r, ring);
        break;
      case 7:
      case 8:
        poke(r, mem, code == 8);
        break;
      case 9:
        ring.recover_client();  // the client's participant number, opened again
        break;
      default:
        // A second look at a node held by another participant, past its holder's patience:
        // only if one was seen held since the last look (the note a wait re-checks on).
        if (may_sleep && shmio::detail::take_stall_note()) {
          std::this_thread::sleep_for(shmio::detail::holder_patience +
                                      std::chrono::milliseconds(1));
          may_sleep = false;
        }
    }
  }
  ring.drain(ring.node_count() + 2);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::uint8_t mode = data[0];
  const auto rest = std::span(data + 1, size - 1);
  switch (mode & 3) {
    case 0:
      run_body(rest, false, 0);
      break;
    case 1:
      run_body(rest, true, backlog_of(mode));
      break;
    default:
      run_script(rest, backlog_of(mode), (mode & 0xe0) == 0xe0);
  }
  return 0;
}
