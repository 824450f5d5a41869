// The serving half of rpc_channel: a request's method found and run (a plain handler inline, a
// coroutine handler on the strand, or later when max_concurrent_handlers is reached), its
// answer sent, and running handlers cancelled.

#include <algorithm>
#include <asio/bind_cancellation_slot.hpp>
#include <asio/bind_executor.hpp>
#include <asio/co_spawn.hpp>
#include <asio/execution/blocking.hpp>
#include <asio/post.hpp>
#include <exception>
#include <string>
#include <utility>

#include "shmio/detail/inline_executor.hpp"
#include "shmio/detail/recycled_map.hpp"
#include "shmio/detail/rpc_channel.hpp"
#include "shmio/rpc_stream.hpp"

namespace shmio::detail {
namespace {

using layout::packet_type;

// What a handler's exception tells its caller: its what() text, if it has one.
std::string describe(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "unknown exception";
  }
}

}  // namespace

void rpc_channel::cancel_serving(std::error_code why) {
  // A snapshot: a cancellation handler may run code that changes serving_.
  std::vector<std::uint64_t> running;
  running.reserve(serving_.size());
  for (const auto& [id, call] : serving_)
    running.push_back(id);
  for (const std::uint64_t id : running)
    if (auto it = serving_.find(id); it != serving_.end()) {
      end_stream_writes(it->second.stream, why);
      if (auto again = serving_.find(id); again != serving_.end())
        again->second.signal.emit(asio::cancellation_type::terminal);
    }
}

void rpc_channel::start_request(incoming_message m, request_from from) {
  std::string_view name;
  std::span<const std::byte> payload = m.bytes();
  const bool named = (m.flags & layout::packet_flag_method) != 0;
  const bool stream = (m.flags & layout::packet_flag_stream) != 0;
  std::uint32_t window = 0;
  if ((stream && !split_window(payload, window, payload)) ||
      (named && !split_named(payload, name, payload))) {
    stats_.packets_rejected.fetch_add(1, std::memory_order_relaxed);
    return send_error(m.id, errc::corrupted, "malformed stream window or method name");
  }
  const rpc_method* method = service_.find(name);
  if (!method) {
    if (!named) return send_error(m.id, errc::no_handler, "the other end has no handler");
    return send_error(m.id, errc::no_such_method,
                      "the other end has no method '" + std::string(name) + "'");
  }
  if (stream != static_cast<bool>(method->stream)) {
    const std::string which = named ? "method '" + std::string(name) + "'" : "the unnamed method";
    return send_error(m.id, errc::no_such_method,
                      stream ? which + " does not stream; call it with async_request"
                             : which + " streams; call it with async_request_stream");
  }
  // What a stream may hold here is ours to bound: the caller's window is the most its handler
  // sends ahead of the reads, and so waits in our outbox when the caller reads slowly.
  if (stream && window > served_window_limit_)
    return send_error(
        m.id, errc::invalid_argument,
        "stream window " + std::to_string(window) + " is above the other end's limit (" +
            std::to_string(served_window_limit_) + ", rpc_options::stream_window_limit)");
  // A method's count is of the requests its handler takes: counted as one starts, not for one
  // refused, nor for one deferred (it is counted when it starts later).
  // A plain handler runs here and now: no coroutine to start, no trip through the
  // scheduler, nothing to cancel (a cancel packet that comes later finds nothing).
  if (method->sync) {
    service_.count(method);
    return serve_now(m.id, method->sync, payload);
  }
  if (method->in_place) {
    service_.count(method);
    return serve_in_place(m.id, method->in_place, payload);
  }
  // Later, when a slot frees; behind those already waiting for one, which came first.
  if (serving_.size() >= bounds_.max_handlers ||
      (from != request_from::deferred && !deferred_.empty())) {
    if (serving_.size() < bounds_.max_handlers)  // a slot is free: they go now, this one after them
      asio::post(strand_, [self = shared_from_this()] { self->start_deferred(); });
    return defer(std::move(m), deferred_, from != request_from::wire);
  }
  const std::size_t skip = static_cast<std::size_t>(payload.data() - m.bytes().data());
  m.own();  // the coroutine keeps it
  const std::uint64_t id = m.id;
  serving_call* call = start_serving(id);
  if (!call) {
    // A sender never reuses an id: this request is forged or garbled. Running it would
    // leave two handlers under one id, one of them beyond the other's cancel.
    stats_.packets_rejected.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  service_.count(method);
  call->stream.reset();  // a recycled node's
  if (stream) {
    call->stream.active = true;
    call->stream.window = window;
    call->stream.credit = window;
    spawn_handler(id, call,
                  serve_stream(shared_from_this(), std::move(m), skip, &method->stream, session_));
  } else {
    spawn_handler(id, call,
                  serve(shared_from_this(), std::move(m), skip, &method->async, session_));
  }
}

void rpc_channel::spawn_handler(std::uint64_t id, serving_call* call, asio::awaitable<void> body) {
  wake_housekeeping();  // watch the caller while we serve it
  // The signal must outlive the coroutine (its slot holds the coroutine's cancellation
  // state), so the entry goes only when the coroutine has finished: in its completion.
  asio::co_spawn(strand_, std::move(body),
                 asio::bind_cancellation_slot(
                     call->signal.slot(),
                     asio::bind_executor(inline_executor{}, [self = shared_from_this(), id,
                                                             call](const std::exception_ptr&) {
                       self->end_serving(id, call);
                     })));
}

void rpc_channel::defer(incoming_message m, std::deque<incoming_message>& queue, bool moved) {
  if (!moved) {
    // Past as many again as handlers may run, or past the bytes this end may hold, the caller
    // hears at once. (The reader goes on reading meanwhile: cancels for running handlers, and
    // the other end's answers and credits, must still get through.)
    if (bounds_.waiting_full(held_back_.size() + deferred_.size()))
      return send_error(m.id, errc::busy, "too many requests at once at the other end");
    // relaxed: a counter.
    stats_.requests_deferred.fetch_add(1, std::memory_order_relaxed);
  }
  m.own();  // kept past its packet
  bounds_.deferred_bytes += m.bytes().size();
  queue.push_back(std::move(m));
}

void rpc_channel::hold_back(incoming_message m) {
  // If nothing more may wait while max_concurrent_handlers answers wait, the other end is not
  // reading them, and an answer (busy) would only wait with them: the request is shed,
  // counted, neither served nor answered (its caller times out). Else it waits, or hears busy
  // at once (defer).
  if (bounds_.answers_full() ||
      (bounds_.waiting_full(held_back_.size() + deferred_.size()) && bounds_.backlogged())) {
    stats_.requests_shed.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  defer(std::move(m), held_back_, false);
}

void rpc_channel::answer_left(const outgoing_message& m) {
  const std::uint64_t bytes = answer_bounds::held_size(m);
  if (bytes == 0 && !is_answer(m)) return;
  const bool was_holding = bounds_.holding_back();
  const bool was_over_budget = bounds_.over_budget();
  if (is_answer(m) && m.next_packet == 1)  // as send() counted it
    if (auto it = answers_whole_.find(m.response_to);
        it != answers_whole_.end() && --it->second == 0)
      erase_recycled(answers_whole_, spare_answers_, it);
  bounds_.left(m);
  // Posted: this runs inside the writer loop, or while the outbox is being changed.
  if (was_holding && !bounds_.holding_back() && (!held_back_.empty() || !deferred_.empty()))
    asio::post(strand_, [self = shared_from_this()] { self->start_deferred(); });
  if (was_over_budget && !bounds_.over_budget() && stream_writes_held_) post_stream_flush();
}

void rpc_channel::post_stream_flush() {
  if (stream_flush_posted_) return;
  asio::post(strand_, [self = shared_from_this()] {
    self->stream_flush_posted_ = false;
    self->flush_all_stream_writes();
  });
  stream_flush_posted_ = true;  // after the post: one that threw posted nothing
}

void rpc_channel::flush_all_stream_writes() {
  // Bounded by max_concurrent_handlers. Ids first: a flush completes writes, whose handlers
  // run later (posted), but a send may change serving_'s buckets no more than a lookup does.
  stream_writes_held_ = false;  // set again by a flush that the bound stops
  std::vector<std::uint64_t> waiting;
  for (const auto& [id, call] : serving_)
    if (call.stream.active && !call.stream.ended && !call.stream.writes.empty())
      waiting.push_back(id);
  // From a different stream each time: the first flushed may take all the room there is.
  if (!waiting.empty())
    std::rotate(waiting.begin(), waiting.begin() + (stream_flush_turn_++ % waiting.size()),
                waiting.end());
  for (const std::uint64_t id : waiting) {
    if (bounds_.over_budget()) {  // the next answer to leave flushes again
      stream_writes_held_ = true;
      return;
    }
    if (auto it = serving_.find(id); it != serving_.end())
      flush_stream_writes(id, it->second.stream);
  }
}

void rpc_channel::start_deferred() {
  // Those waiting for a slot first: every one of them came before every request held back.
  // Each that starts may fill the budget again (a plain handler answers at once), so both
  // loops look again before the next. A coroutine's request held back that then finds no slot,
  // or others waiting for one, joins deferred_ behind them; a plain handler's starts.
  auto take = [this](std::deque<incoming_message>& queue, request_from from) {
    incoming_message m = std::move(queue.front());
    queue.pop_front();
    bounds_.deferred_bytes -= m.bytes().size();
    start_request(std::move(m), from);
  };
  while (!deferred_.empty() && serving_.size() < bounds_.max_handlers && !bounds_.holding_back() &&
         !closing())
    take(deferred_, request_from::deferred);
  while (!held_back_.empty() && !bounds_.holding_back() && !closing())
    take(held_back_, request_from::held_back);
}

asio::awaitable<void> rpc_channel::serve_stream(std::shared_ptr<rpc_channel> self,
                                                incoming_message request, std::size_t skip,
                                                const rpc_stream_handler* handler,
                                                std::uint64_t session) {
  if (closing() || session != session_) co_return;  // its caller went before it started
  std::error_code failure;
  std::string text;
  try {
    // `handler` lives in service_, which lives as long as the channel (held by `self`).
    co_await (*handler)(request.id, std::span<const std::byte>(request.payload).subspan(skip),
                        rpc_stream_access::make_writer(self, request.id, session));
  } catch (...) {
    failure = errc::remote_error;
    text = describe(std::current_exception());
  }
  if (closed_ || session != session_) co_return;
  auto it = serving_.find(request.id);
  if (it == serving_.end() || it->second.stream.ended) co_return;  // the caller cancelled it
  it->second.stream.ended = true;
  // Writes it started and did not wait for come after its end: they fail, not the stream.
  end_stream_writes(it->second.stream, asio::error::operation_aborted);
  if (failure) co_return send_error(request.id, failure, text);
  // Counted only if it goes (not after close() began).
  if (send({packet_type::stream_end, next_id(), request.id, {}})) count_response(0);
}

asio::awaitable<void> rpc_channel::serve([[maybe_unused]] std::shared_ptr<rpc_channel> self,
                                         incoming_message request, std::size_t skip,
                                         const rpc_handler* handler, std::uint64_t session) {
  if (closing() || session != session_) co_return;  // its caller went before it started
  std::vector<std::byte> reply;
  std::error_code failure;
  std::string text;
  try {
    // `handler` lives in service_, which lives as long as the channel (held by `self`).
    reply =
        co_await (*handler)(request.id, std::span<const std::byte>(request.payload).subspan(skip));
  } catch (...) {
    failure = errc::remote_error;
    text = describe(std::current_exception());
  }
  // Nobody to answer if this end closed or the caller's session ended meanwhile. (The entry in
  // serving_ goes in the completion of this coroutine, not here.)
  if (closed_ || session != session_) co_return;
  answer(request.id, std::move(reply), failure, text);
}

void rpc_channel::serve_now(std::uint64_t id, const rpc_sync_handler& handler,
                            std::span<const std::byte> payload) {
  std::vector<std::byte> reply;
  std::error_code failure;
  std::string text;
  try {
    reply = handler(id, payload);
  } catch (...) {
    failure = errc::remote_error;
    text = describe(std::current_exception());
  }
  // The handler ran inside this strand's turn: neither a close nor a new session came between.
  answer(id, std::move(reply), failure, text);
}

void rpc_channel::serve_in_place(std::uint64_t id, const rpc_in_place_handler& handler,
                                 std::span<const std::byte> payload) {
  reply_.clear();
  try {
    handler(id, payload, reply_);
  } catch (...) {
    return send_error(id, errc::remote_error, describe(std::current_exception()));
  }
  const auto reply = reply_.data();
  if (reply.size() > reassembler_max())
    return send_error(id, errc::message_too_large, "reply larger than max_message_size");
  // Sent from reply_, which the next handler reuses: send() writes it now or copies it.
  outgoing_message m{packet_type::response, next_id(), id, {}};
  m.borrowed[0] = reply;
  if (send(std::move(m))) count_response(reply.size());
}

rpc_channel::serving_call* rpc_channel::start_serving(std::uint64_t id) {
  // The signal in a recycled node still holds the finished coroutine's cancellation state; the
  // next co_spawn replaces it in the same memory.
  return insert_recycled(serving_, spare_serving_, id);
}

void rpc_channel::end_serving(std::uint64_t id, const serving_call* call) {
  // The co_spawn has completed: its coroutine no longer uses the signal, which may serve again.
  auto it = serving_.find(id);
  // (Completions of its writes still waiting behind one on its way stay with their
  // ordered_delivery, which keeps itself until they have gone.)
  if (it != serving_.end() && &it->second == call) erase_recycled(serving_, spare_serving_, it);
  // A slot is free: the next request waiting for one starts, on the strand (this runs where
  // the coroutine finished, inside co_spawn's completion).
  if (!deferred_.empty())
    asio::post(strand_, [self = shared_from_this()] { self->start_deferred(); });
}

void rpc_channel::answer(std::uint64_t request_id, std::vector<std::byte> reply,
                         std::error_code failure, std::string_view text) {
  if (!failure && reply.size() > reassembler_max()) {
    failure = errc::message_too_large;
    text = "reply larger than max_message_size";
  }
  if (failure) return send_error(request_id, failure, text);
  const std::size_t bytes = reply.size();
  if (send({packet_type::response, next_id(), request_id, std::move(reply)})) count_response(bytes);
}

void rpc_channel::count_response(std::size_t bytes) noexcept {
  // relaxed: counters.
  stats_.responses_sent.fetch_add(1, std::memory_order_relaxed);
  stats_.bytes_sent.fetch_add(bytes, std::memory_order_relaxed);
}

}  // namespace shmio::detail
