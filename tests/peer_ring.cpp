// Peer commands for tests/ring_test.cpp: the other processes of the circular_buffer tests.
//
// Messages of ring-write / ring-read are the text "m<N>" (N a decimal sequence number). The
// stress commands (ring-produce, ring-consume) use the checksummed stress_message below; its
// definition and the mix/checksum functions are repeated in ring_test.cpp, which must agree.
//
// The batch modes of ring-produce and ring-consume move up to batch_max messages per call. A batch
// consumer ends its batch at a stop message by throwing from its `use` (nothing after the stop is
// consumed), so several consumers still get one stop each; except a "copy-batch" consumer, which
// copies its whole batch before looking at it, and so must be a ring's only consumer.
//
// Exit codes: 0 success, 1 a blocking call timed out, 2 bad arguments, 3 a message was not the
// one expected, 97 an exception.
#include <algorithm>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/use_awaitable.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "peer.hpp"
#include "shmio/circular_buffer.hpp"

namespace {

using namespace std::chrono_literals;
using shmio::circular_buffer;

constexpr int exit_timed_out = 1;
constexpr int exit_usage = 2;
constexpr int exit_wrong_message = 3;

// A blocking call that takes longer than this counts as lost: every test bounds its run far
// below.
constexpr auto wait_bound = std::chrono::milliseconds(10'000);

constexpr std::size_t batch_max = 32;

std::string numbered(unsigned long n) {
  return "m" + std::to_string(n);
}

// ---- the stress protocol (the same definitions are in ring_test.cpp) -------------------------

constexpr std::uint32_t stop_producer = 0xffffffffu;
constexpr std::size_t stress_data_max = 48;

struct stress_message {
  std::uint32_t producer;  // 1 or 2; stop_producer asks a consumer to stop
  std::uint32_t seq;       // 0, 1, 2, ... per producer
  std::uint64_t checksum;  // fnv1a over producer, seq and the data bytes actually sent
  std::uint8_t data[stress_data_max];
};
constexpr std::size_t stress_header = offsetof(stress_message, data);

struct consumer_result {
  std::uint32_t consumer;
  std::uint32_t bad;           // messages with a wrong size, checksum or producer
  std::uint32_t out_of_order;  // a producer's seq not greater than the last one seen from it
  std::uint32_t reserved;
  std::uint64_t count[2];  // per producer
  std::uint64_t sum[2];    // sum of mix(producer, seq)
  std::uint64_t xors[2];   // xor of mix(producer, seq)
};

std::uint64_t mix(std::uint32_t producer, std::uint32_t seq) {  // splitmix64
  std::uint64_t z = (std::uint64_t{producer} << 32 | seq) + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::uint64_t fnv1a(std::span<const std::byte> bytes, std::uint64_t h = 0xcbf29ce484222325ull) {
  for (std::byte b : bytes) {
    h ^= static_cast<std::uint8_t>(b);
    h *= 0x100000001b3ull;
  }
  return h;
}

std::uint64_t stress_checksum(const stress_message& m, std::size_t data_size) {
  auto h = fnv1a(std::as_bytes(std::span(&m.producer, 1)));
  h = fnv1a(std::as_bytes(std::span(&m.seq, 1)), h);
  return fnv1a(std::as_bytes(std::span(m.data, data_size)), h);
}

// Fills `m` as producer `producer`'s message `seq`, with random data; returns its size.
std::size_t make_stress_message(stress_message& m, std::uint32_t producer, std::uint32_t seq,
                                std::uint64_t& rng) {
  auto next = [&rng] {  // xorshift64
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
  };
  m.producer = producer;
  m.seq = seq;
  const std::size_t data_size = next() % (stress_data_max + 1);
  for (std::size_t i = 0; i < data_size; ++i)
    m.data[i] = static_cast<std::uint8_t>(next());
  m.checksum = stress_checksum(m, data_size);
  return stress_header + data_size;
}

// What a consumer learns from one message; false for a stop message.
bool consume(consumer_result& r, std::uint32_t (&last)[2], bool (&seen)[2],
             std::span<const std::byte> bytes) {
  stress_message m{};
  if (bytes.size() < stress_header || bytes.size() > sizeof m) {
    ++r.bad;
    return true;
  }
  std::memcpy(&m, bytes.data(), bytes.size());
  if (m.producer == stop_producer) return false;
  if ((m.producer != 1 && m.producer != 2) ||
      m.checksum != stress_checksum(m, bytes.size() - stress_header)) {
    ++r.bad;
    return true;
  }
  const std::size_t p = m.producer - 1;
  if (seen[p] && m.seq <= last[p]) ++r.out_of_order;
  seen[p] = true;
  last[p] = m.seq;
  ++r.count[p];
  r.sum[p] += mix(m.producer, m.seq);
  r.xors[p] ^= mix(m.producer, m.seq);
  return true;
}

}  // namespace

// ring-write NAME FIRST COUNT: writes the messages "m<FIRST>" ... "m<FIRST+COUNT-1>", each with
// a blocking write bounded by wait_bound.
SHMIO_PEER_COMMAND("ring-write", args) {
  if (args.size() != 3) return exit_usage;
  asio::io_context io;
  circular_buffer ring(io.get_executor(), shmio::open_only, args[0]);
  const unsigned long first = std::stoul(args[1]);
  const unsigned long count = std::stoul(args[2]);
  for (unsigned long i = first; i < first + count; ++i) {
    const std::string m = numbered(i);
    std::error_code ec;
    ring.write(asio::buffer(m), wait_bound, ec);
    if (ec == shmio::errc::timed_out) return exit_timed_out;
    if (ec) throw std::system_error(ec, "ring-write");
  }
  return 0;
}

// ring-read NAME FIRST COUNT: reads COUNT messages with blocking reads bounded by wait_bound;
// unless FIRST is "-", they must be "m<FIRST>" ... in order.
SHMIO_PEER_COMMAND("ring-read", args) {
  if (args.size() != 3) return exit_usage;
  asio::io_context io;
  circular_buffer ring(io.get_executor(), shmio::open_only, args[0]);
  const bool check = args[1] != "-";
  const unsigned long first = check ? std::stoul(args[1]) : 0;
  const unsigned long count = std::stoul(args[2]);
  std::string buf(ring.node_size(), '\0');
  for (unsigned long i = first; i < first + count; ++i) {
    std::error_code ec;
    const std::size_t n = ring.read(asio::buffer(buf), wait_bound, ec);
    if (ec == shmio::errc::timed_out) return exit_timed_out;
    if (ec) throw std::system_error(ec, "ring-read");
    if (check && buf.substr(0, n) != numbered(i)) return exit_wrong_message;
  }
  return 0;
}

// Writes `count` stress messages as `producer` in batches of up to batch_max, resubmitting what a
// batch did not take, with write_batch or (async) co_await async_write_batch.
int produce_batches(circular_buffer& ring, asio::io_context& io, std::uint32_t producer,
                    std::uint32_t count, std::uint64_t& rng, bool async) {
  std::vector<stress_message> batch(batch_max);
  std::vector<asio::const_buffer> buffers(batch_max);
  int rc = 0;
  auto next_batch = [&](std::uint32_t seq) {
    const std::size_t n = std::min<std::size_t>(batch_max, count - seq);
    for (std::size_t i = 0; i < n; ++i)
      buffers[i] = asio::buffer(
          &batch[i],
          make_stress_message(batch[i], producer, seq + static_cast<std::uint32_t>(i), rng));
    return std::span<const asio::const_buffer>(buffers.data(), n);
  };
  if (!async) {
    for (std::uint32_t seq = 0; seq < count;) {
      auto rest = next_batch(seq);
      while (!rest.empty()) {
        std::error_code ec;
        const std::size_t n = ring.write_batch(rest, wait_bound, ec);
        if (ec == shmio::errc::timed_out) return exit_timed_out;
        if (ec) throw std::system_error(ec, "ring-produce");
        rest = rest.subspan(n);
        seq += static_cast<std::uint32_t>(n);
      }
    }
    return 0;
  }
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        for (std::uint32_t seq = 0; seq < count;) {
          auto rest = next_batch(seq);
          while (!rest.empty()) {
            const std::size_t n = co_await ring.async_write_batch(rest, asio::use_awaitable);
            if (n == 0) throw std::runtime_error("an async write batch wrote nothing");
            rest = rest.subspan(n);
            seq += static_cast<std::uint32_t>(n);
          }
        }
      },
      [&](std::exception_ptr e) {
        if (e) rc = 97;
      });
  io.run_for(3 * wait_bound);
  if (!io.stopped()) return exit_timed_out;
  return rc;
}

// ring-produce NAME PRODUCER COUNT HOW: writes COUNT stress messages as producer PRODUCER (1 or
// 2), with write ("copy"), write_in_place ("in-place"), write_batch ("batch") or
// async_write_batch ("async-batch").
SHMIO_PEER_COMMAND("ring-produce", args) {
  if (args.size() != 4) return exit_usage;
  asio::io_context io;
  circular_buffer ring(io.get_executor(), shmio::open_only, args[0]);
  const auto producer = static_cast<std::uint32_t>(std::stoul(args[1]));
  const auto count = static_cast<std::uint32_t>(std::stoul(args[2]));
  const bool in_place = args[3] == "in-place";
  std::uint64_t rng = 0x2545f4914f6cdd1dull * producer;
  if (args[3] == "batch" || args[3] == "async-batch")
    return produce_batches(ring, io, producer, count, rng, args[3] == "async-batch");
  stress_message m{};
  for (std::uint32_t seq = 0; seq < count; ++seq) {
    std::error_code ec;
    if (in_place) {
      ring.write_in_place(
          [&](std::span<std::byte> node) {
            const std::size_t n = make_stress_message(m, producer, seq, rng);
            std::memcpy(node.data(), &m, n);
            return n;
          },
          wait_bound, ec);
    } else {
      const std::size_t n = make_stress_message(m, producer, seq, rng);
      ring.write(asio::buffer(&m, n), wait_bound, ec);
    }
    if (ec == shmio::errc::timed_out) return exit_timed_out;
    if (ec) throw std::system_error(ec, "ring-produce");
  }
  return 0;
}

// ring-consume NAME RESULTS CONSUMER HOW: reads stress messages until a stop message, with read
// ("sync"), read_in_place ("in-place"), co_await async_read ("async"), read_batch_in_place
// ("batch"), read_batch ("copy-batch") or co_await async_read_batch_in_place ("async-batch"),
// then writes its consumer_result to the ring RESULTS.
SHMIO_PEER_COMMAND("ring-consume", args) {
  if (args.size() != 4) return exit_usage;
  asio::io_context io;
  circular_buffer ring(io.get_executor(), shmio::open_only, args[0]);
  circular_buffer results(io.get_executor(), shmio::open_only, args[1]);
  consumer_result r{};
  r.consumer = static_cast<std::uint32_t>(std::stoul(args[2]));
  std::uint32_t last[2] = {};
  bool seen[2] = {};
  const std::string& how = args[3];
  int rc = 0;
  struct stop_seen {};  // thrown from a batch's `use`: ends the batch right after the stop
  auto use = [&](std::span<const std::byte> msg) {
    if (!consume(r, last, seen, msg)) throw stop_seen{};
  };
  if (how == "batch" || how == "copy-batch") {
    std::vector<stress_message> batch(batch_max);
    std::vector<asio::mutable_buffer> buffers;
    for (auto& m : batch)
      buffers.push_back(asio::buffer(&m, sizeof m));
    std::vector<std::size_t> sizes(batch_max);
    try {
      for (;;) {
        std::error_code ec;
        if (how == "batch") {
          ring.read_batch_in_place(use, batch_max, wait_bound, ec);
        } else {
          const std::size_t n = ring.read_batch(buffers, sizes, wait_bound, ec);
          for (std::size_t i = 0; i < n; ++i)
            use(std::as_bytes(std::span(&batch[i], 1)).first(sizes[i]));
        }
        if (ec == shmio::errc::timed_out) return exit_timed_out;
        if (ec) throw std::system_error(ec, "ring-consume");
      }
    } catch (const stop_seen&) {
    }
  } else if (how == "async-batch") {
    bool stopped = false;
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          auto use_async = [&](std::span<const std::byte> msg) {
            if (!consume(r, last, seen, msg)) {
              stopped = true;
              throw stop_seen{};
            }
          };
          while (!stopped) {
            try {
              co_await ring.async_read_batch_in_place(use_async, batch_max, asio::use_awaitable);
            } catch (const std::system_error& e) {
              if (!stopped || e.code() != shmio::errc::callback_failed) throw;
            }
          }
        },
        [&](std::exception_ptr e) {
          if (e) rc = 97;
        });
    io.run_for(3 * wait_bound);
    if (!io.stopped()) return exit_timed_out;
  } else if (how == "async") {
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          stress_message m{};
          for (;;) {
            const std::size_t n =
                co_await ring.async_read(asio::buffer(&m, sizeof m), asio::use_awaitable);
            if (!consume(r, last, seen, std::as_bytes(std::span(&m, 1)).first(n))) break;
          }
        },
        [&](std::exception_ptr e) {
          if (e) rc = 97;
        });
    io.run_for(3 * wait_bound);
    if (!io.stopped()) return exit_timed_out;
  } else {
    for (bool more = true; more;) {
      std::error_code ec;
      if (how == "in-place") {
        ring.read_in_place(
            [&](std::span<const std::byte> msg) { more = consume(r, last, seen, msg); }, wait_bound,
            ec);
      } else {
        stress_message m{};
        const std::size_t n = ring.read(asio::buffer(&m, sizeof m), wait_bound, ec);
        if (!ec) more = consume(r, last, seen, std::as_bytes(std::span(&m, 1)).first(n));
      }
      if (ec == shmio::errc::timed_out) return exit_timed_out;
      if (ec) throw std::system_error(ec, "ring-consume");
    }
  }
  if (rc != 0) return rc;
  std::error_code ec;
  results.write(asio::buffer(&r, sizeof r), wait_bound, ec);
  return ec ? exit_timed_out : 0;
}
