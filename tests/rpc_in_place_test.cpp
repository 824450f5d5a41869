// Calls made in place (rpc_buffer::async_request with a reply buffer) and in-place handlers
// (rpc_in_place_handler): replies into the caller's buffer, sizes and errors, the borrowed
// bytes copied whenever they must wait, and the operations' memory from the handler's
// allocator.
#include <asio/bind_allocator.hpp>
#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/io_context.hpp>
#include <atomic>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "rpc_test_support.hpp"
#include "shmio/rpc_buffer.hpp"

using namespace shmio::test;
using namespace shmio::test::rpc;
using shmio::errc;
using shmio::rpc_buffer;
using shmio::rpc_options;
using shmio::rpc_reply;

namespace {

// "upper": the request in capitals, written in place.
void upper(std::uint64_t, std::span<const std::byte> in, rpc_reply& reply) {
  auto out = reply.prepare(in.size());
  for (std::size_t i = 0; i < in.size(); ++i)
    out[i] = static_cast<std::byte>(std::toupper(std::to_integer<unsigned char>(in[i])));
  reply.commit(in.size());
}

shmio::rpc_methods in_place_methods() {
  shmio::rpc_methods m;
  m.add("upper", shmio::rpc_in_place_handler(upper));
  m.add("fail", shmio::rpc_in_place_handler(
                    [](std::uint64_t, std::span<const std::byte>, rpc_reply& reply) {
                      reply.append(std::string_view("half a reply"));  // dropped: the throw wins
                      throw std::runtime_error("no such account");
                    }));
  m.add("twice", shmio::rpc_in_place_handler(
                     [](std::uint64_t, std::span<const std::byte> in, rpc_reply& reply) {
                       reply.append(in);
                       reply.append(in);
                     }));
  // A plain handler returning a vector answers in-place callers the same way.
  m.add("echo",
        [](std::uint64_t, std::span<const std::byte> in) { return bytes_t(in.begin(), in.end()); });
  return m;
}

// An allocator that counts what it hands out and takes back.
struct alloc_counts {
  std::atomic<int> allocated{0};
  std::atomic<int> freed{0};
};
template <class T>
struct counting_allocator {
  using value_type = T;
  alloc_counts* counts;
  explicit counting_allocator(alloc_counts* c) noexcept : counts(c) {}
  template <class U>
  counting_allocator(const counting_allocator<U>& o) noexcept : counts(o.counts) {}
  T* allocate(std::size_t n) {
    ++counts->allocated;
    return std::allocator<T>().allocate(n);
  }
  void deallocate(T* p, std::size_t n) noexcept {
    ++counts->freed;
    std::allocator<T>().deallocate(p, n);
  }
  template <class U>
  bool operator==(const counting_allocator<U>& o) const noexcept {
    return counts == o.counts;
  }
};

}  // namespace

TEST_CASE("rpc in place: the reply comes into the caller's buffer, with its size",
          "[rpc][in_place]") {
  scoped_name name("rpc");
  asio::io_context io;
  rpc_buffer owner(io, shmio::create_only, name, in_place_methods());
  rpc_buffer opener(io, shmio::open_only, name, shmio::rpc_in_place_handler(upper));
  run_until_done(io, [&]() -> asio::awaitable<void> {
    std::string reply(64, '.');
    const std::string hello = "hello";
    auto [ec, n] = co_await opener.async_request("upper", asio::buffer(hello), asio::buffer(reply),
                                                 tuple_awaitable);
    CHECK_FALSE(ec);
    CO_REQUIRE(n == 5);
    CHECK(reply.substr(0, 6) == "HELLO.");  // nothing past the reply is touched
    // The unnamed method, the other way round; use_awaitable gives the size alone.
    const std::size_t m = co_await owner.async_request(asio::buffer(std::string_view("shout")),
                                                       asio::buffer(reply), asio::use_awaitable);
    CHECK(reply.substr(0, m) == "SHOUT");
    // A handler that returns a vector answers an in-place call too, and an empty reply is one.
    std::tie(ec, n) = co_await opener.async_request("echo", asio::buffer(hello),
                                                    asio::buffer(reply), tuple_awaitable);
    CHECK_FALSE(ec);
    CHECK(reply.substr(0, n) == "hello");
    std::tie(ec, n) =
        co_await opener.async_request("upper", {}, asio::buffer(reply), tuple_awaitable);
    CHECK_FALSE(ec);
    CHECK(n == 0);
    // An in-place handler answers an ordinary call.
    auto [ec2, vec] = co_await opener.async_request("twice", asio::buffer(hello), tuple_awaitable);
    CHECK_FALSE(ec2);
    CHECK(text(vec) == "hellohello");
    // A reply larger than one packet reaches the buffer whole.
    const bytes_t big = pattern(3 * 16 * 1024 + 17, 7);
    bytes_t big_reply(2 * big.size());
    std::tie(ec, n) = co_await opener.async_request("twice", asio::buffer(big),
                                                    asio::buffer(big_reply), tuple_awaitable);
    CHECK_FALSE(ec);
    CO_REQUIRE(n == 2 * big.size());
    CHECK(std::equal(big.begin(), big.end(), big_reply.begin()));
    CHECK(std::equal(big.begin(), big.end(), big_reply.begin() + big.size()));
    owner.close();
    opener.close();
  });
}

TEST_CASE("rpc in place: a reply larger than the buffer fills it and reports its whole size",
          "[rpc][in_place]") {
  scoped_name name("rpc");
  asio::io_context io;
  rpc_buffer owner(io, shmio::create_only, name, in_place_methods());
  rpc_buffer opener(io, shmio::open_only, name);
  run_until_done(io, [&]() -> asio::awaitable<void> {
    std::string reply(4, '.');
    const std::string request = "abcdef";
    auto [ec, n] = co_await opener.async_request("twice", asio::buffer(request),
                                                 asio::buffer(reply), tuple_awaitable);
    CHECK(ec == errc::message_too_large);
    CHECK(n == 12);  // how large the buffer must be
    CHECK(reply == "abcd");
    // Thrown with use_awaitable, saying what happened.
    auto caught = co_await rpc_error_of(opener.async_request(
        "twice", asio::buffer(request), asio::buffer(reply), asio::use_awaitable));
    CO_REQUIRE(caught.has_value());
    CHECK(caught->code() == errc::message_too_large);
    CHECK(caught->remote_what().find("12 bytes") != std::string::npos);
    // The channel goes on.
    std::string fits(12, '.');
    std::tie(ec, n) = co_await opener.async_request("twice", asio::buffer(request),
                                                    asio::buffer(fits), tuple_awaitable);
    CHECK_FALSE(ec);
    CHECK(fits == "abcdefabcdef");
    owner.close();
    opener.close();
  });
}

TEST_CASE("rpc in place: a handler's exception reaches the caller's buffer as remote_error",
          "[rpc][in_place]") {
  scoped_name name("rpc");
  asio::io_context io;
  rpc_buffer owner(io, shmio::create_only, name, in_place_methods());
  rpc_buffer opener(io, shmio::open_only, name);
  run_until_done(io, [&]() -> asio::awaitable<void> {
    std::string reply(64, '.');
    auto [ec, n] = co_await opener.async_request("fail", {}, asio::buffer(reply), tuple_awaitable);
    CHECK(ec == errc::remote_error);
    CHECK(reply.substr(0, n) == "no such account");
    // The text as far as it fits.
    std::string small(5, '.');
    std::tie(ec, n) =
        co_await opener.async_request("fail", {}, asio::buffer(small), tuple_awaitable);
    CHECK(ec == errc::remote_error);
    CHECK(n == 5);
    CHECK(small == "no su");
    auto caught = co_await rpc_error_of(
        opener.async_request("fail", {}, asio::buffer(small), asio::use_awaitable));
    CO_REQUIRE(caught.has_value());
    CHECK(caught->remote_what() == "no such account");  // whole, not cut to the buffer
    // Unknown method, a name out of range, a closed end: as async_request's.
    std::tie(ec, n) =
        co_await opener.async_request("nope", {}, asio::buffer(reply), tuple_awaitable);
    CHECK(ec == errc::no_such_method);
    CHECK(reply.substr(0, n) == "the other end has no method 'nope'");
    std::tie(ec, n) = co_await opener.async_request(std::string(256, 'x'), {}, asio::buffer(reply),
                                                    tuple_awaitable);
    CHECK(ec == errc::invalid_argument);
    CHECK(n == 0);
    owner.close();
    opener.close();
    std::tie(ec, n) =
        co_await opener.async_request("upper", {}, asio::buffer(reply), tuple_awaitable);
    CHECK(ec == asio::error::operation_aborted);
  });
}

TEST_CASE("rpc in place: replies that wait for room are copied first, and arrive intact",
          "[rpc][in_place]") {
  // Two nodes each way and 64 calls at once: most replies must wait for the ring, while the
  // in-place handler's room is reused by the next request. A reply sent from that room without
  // a copy would arrive as some later request's.
  scoped_name name("rpc");
  asio::io_context io;
  rpc_options o;
  o.node_count = 2;
  o.node_size = 256;
  shmio::rpc_methods m;
  m.add("twice", shmio::rpc_in_place_handler(
                     [](std::uint64_t, std::span<const std::byte> in, rpc_reply& reply) {
                       reply.append(in);
                       reply.append(in);
                     }));
  rpc_buffer owner(io, shmio::create_only, name, m, o);
  rpc_buffer opener(io, shmio::open_only, name);
  run_until_done(io, [&]() -> asio::awaitable<void> {
    constexpr int calls = 64;
    std::vector<bytes_t> requests, replies;
    for (int i = 0; i < calls; ++i) {
      requests.push_back(pattern(50 + i * 7, i));  // up to about three packets a reply
      replies.emplace_back(2 * requests.back().size() + 8);
    }
    int answered = 0, wrong = 0;
    async_flag done(co_await asio::this_coro::executor);
    for (int i = 0; i < calls; ++i)
      opener.async_request("twice", asio::buffer(requests[i]), asio::buffer(replies[i]),
                           [&, i](std::error_code ec, std::size_t n) {
                             const auto& r = requests[i];
                             const auto& got = replies[i];
                             if (ec || n != 2 * r.size() ||
                                 !std::equal(r.begin(), r.end(), got.begin()) ||
                                 !std::equal(r.begin(), r.end(), got.begin() + r.size()))
                               ++wrong;
                             if (++answered == calls) done.set();
                           });
    CO_CHECK(co_await done.wait());
    CHECK(wrong == 0);
    owner.close();
    opener.close();
  });
}

TEST_CASE("rpc in place: a call given up on while part of its request is sent lets its buffer go",
          "[rpc][in_place]") {
  // The owner's io_context does not run yet, so its ring fills after two packets of a
  // five-packet request; the rest waits. Cancelled then, the call completes and its caller
  // frees the buffer: what is still to go must be a copy (under ASan, reading the freed buffer
  // fails the test). The owner, run afterwards, gets the whole request.
  scoped_name name("rpc");
  asio::io_context owner_io, opener_io;
  rpc_options o;
  o.node_count = 2;
  o.node_size = 256;
  bytes_t seen;
  shmio::rpc_methods m;
  m.add("keep",
        shmio::rpc_in_place_handler([&](std::uint64_t, std::span<const std::byte> in, rpc_reply&) {
          seen.assign(in.begin(), in.end());
        }));
  rpc_buffer owner(owner_io, shmio::create_only, name, m, o);
  rpc_buffer opener(opener_io, shmio::open_only, name);
  const std::size_t size = 4 * (256 - sizeof(layout::packet_header)) + 10;
  const bytes_t expected = pattern(size, 3);
  auto request = std::make_unique<bytes_t>(expected);
  bytes_t reply(16);
  asio::cancellation_signal cancel;
  std::optional<std::error_code> result;
  opener.async_request("keep", asio::buffer(*request), asio::buffer(reply),
                       asio::bind_cancellation_slot(
                           cancel.slot(), [&](std::error_code ec, std::size_t) { result = ec; }));
  // Sent as far as the ring allows: two packets.
  REQUIRE(run_until(opener_io, [&] { return opener.statistics().packets_sent >= 2; }));
  cancel.emit(asio::cancellation_type::terminal);
  REQUIRE(run_until(opener_io, [&] { return result.has_value(); }));
  CHECK(*result == asio::error::operation_aborted);
  std::fill(request->begin(), request->end(), std::byte{0});
  request.reset();
  // Both run now: the rest goes out, from the copy, and the owner's handler sees it whole.
  REQUIRE(run_until(owner_io, [&] {
    opener_io.poll();
    return !seen.empty();
  }));
  CHECK(seen == expected);
  owner.close();
  opener.close();
  run_until_idle(owner_io);
  run_until_idle(opener_io);
}

TEST_CASE("rpc: a call's operation is made with its handler's associated allocator",
          "[rpc][in_place]") {
  scoped_name name("rpc");
  asio::io_context io;
  rpc_buffer owner(io, shmio::create_only, name, in_place_methods());
  rpc_buffer opener(io, shmio::open_only, name);
  alloc_counts counts;
  int done = 0;
  std::string reply(16, '.');
  const std::string hello = "hi";
  opener.async_request("upper", asio::buffer(hello), asio::buffer(reply),
                       asio::bind_allocator(counting_allocator<void>(&counts),
                                            [&](std::error_code ec, std::size_t n) {
                                              CHECK_FALSE(ec);
                                              CHECK(n == 2);
                                              // Its memory went back before it ran.
                                              CHECK(counts.allocated == counts.freed);
                                              ++done;
                                            }));
  REQUIRE(run_until(io, [&] { return done == 1; }));
  opener.async_request(
      "upper", asio::buffer(hello),
      asio::bind_allocator(counting_allocator<void>(&counts), [&](std::error_code ec, bytes_t r) {
        CHECK_FALSE(ec);
        CHECK(text(r) == "HI");
        CHECK(counts.allocated == counts.freed);
        ++done;
      }));
  REQUIRE(run_until(io, [&] { return done == 2; }));
  CHECK(counts.allocated >= 2);  // each call's operation (Asio may take more for its posts)
  CHECK(counts.allocated == counts.freed);
  owner.close();
  opener.close();
  run_until_idle(io);
}
