#pragma once
// One end of an RPC channel: the rings, the request table, the reader and writer loops, the
// running handlers and the watch on the other end. Everything mutable is touched only on the
// channel's strand; the public entry points go there first.
//
// A session is the time between two ends of the other side: the owner's sessions are its
// openers, one after the other (told apart by their generation, see layout/rpc.hpp); an opener has
// one session, with the owner. When a session ends (close packet, lock gone, or, at the owner, a
// new generation), its calls fail with peer_gone, its handlers are cancelled, and whatever was
// still to be sent to it (even the rest of a half-written message) is dropped.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/error.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/steady_timer.hpp>
#include <asio/strand.hpp>

#include "shmio/detail/ring.hpp"
#include "shmio/detail/ring_ops.hpp"
#include "shmio/detail/rpc_answer_bounds.hpp"
#include "shmio/detail/rpc_listener.hpp"
#include "shmio/detail/rpc_packet.hpp"
#include "shmio/detail/rpc_pending.hpp"
#include "shmio/detail/rpc_service.hpp"
#include "shmio/detail/rpc_stream_state.hpp"
#include "shmio/detail/segment_locks.hpp"
#include "shmio/detail/waiter.hpp"
#include "shmio/rpc_methods.hpp"
#include "shmio/rpc_options.hpp"
#include "shmio/segment.hpp"

namespace shmio::detail {

class rpc_channel : public std::enable_shared_from_this<rpc_channel> {
 public:
  using pending_call = detail::pending_call;
  using pending_signal = detail::pending_signal;

  /// A client's connection to the service `service`: creates its channel (as owner, with the
  /// listener's sizes) and writes the connect request. Wait for the acceptor with
  /// async_connected or wait_connected. errc::not_found if no acceptor serves `service`.
  static std::shared_ptr<rpc_channel> connect(const asio::any_io_executor& ex,
                                              std::string_view service, rpc_service handlers,
                                              wait_strategy strategy, std::error_code& ec);
  /// An acceptor's end of the connection `request` asked for: opens the client's channel
  /// (which must have the listener's sizes, `expected`). It reads nothing, and an async connect
  /// hears nothing of it, until the acceptor keeps it (send_accept, then start_accepted): an
  /// acceptor closing meanwhile gives it up (a blocking connect, which looks at the attach,
  /// learns it at its first call).
  static std::shared_ptr<rpc_channel> accept(const asio::any_io_executor& ex,
                                             std::string_view service,
                                             const layout::connect_request& request,
                                             rpc_service handlers, const rpc_options& expected,
                                             std::chrono::milliseconds admin_patience,
                                             std::error_code& ec);
  /// Writes the accept packet of an end accept() made: errc::busy if the client filled the
  /// ring first. Touches only the shared memory: no user code runs in it.
  std::error_code send_accept();
  /// Starts the loops of an end accept() made, after send_accept().
  void start_accepted() { start_loops(); }
  /// Completes `op` when the acceptor took the connection: errc::timed_out after `timeout`,
  /// errc::peer_gone if the acceptor went first. A failed connect closes the channel.
  void async_connected(pending_signal_ptr op, std::chrono::milliseconds timeout);
  /// The same, blocking the calling thread.
  std::error_code wait_connected(std::chrono::milliseconds timeout);
  /// Gives up on the connect in progress (cancellation through its slot).
  void cancel_connect();
  /// Completes `op` with no error when the other end closes or dies (a connection's other end
  /// for good; an owner's current opener), or with this end's failure or operation_aborted.
  /// `id` (next_id()) names it to cancel_wait_closed.
  void async_wait_closed(std::uint64_t id, pending_signal_ptr op);
  /// Completes the wait `id` with operation_aborted (cancellation through its slot).
  void cancel_wait_closed(std::uint64_t id);

  static std::shared_ptr<rpc_channel> create(const asio::any_io_executor& ex, std::string_view name,
                                             rpc_service service, const rpc_options& options,
                                             std::error_code& ec);
  static std::shared_ptr<rpc_channel> open(const asio::any_io_executor& ex, std::string_view name,
                                           rpc_service service, wait_strategy strategy,
                                           std::error_code& ec);
  rpc_channel(const asio::any_io_executor& ex, rpc_service service);
  ~rpc_channel();

  const asio::any_io_executor& get_executor() const noexcept { return ex_; }
  /// The strand every handler of this end runs on.
  const asio::any_io_executor& strand() const noexcept { return strand_; }
  bool is_owner() const noexcept { return owner_; }
  const std::string& name() const noexcept { return seg_.name(); }
  std::chrono::milliseconds default_timeout() const noexcept { return default_timeout_; }
  rpc_statistics statistics() const;

  /// A fresh request id: random start per end, then +1, so ids of a previous peer never match.
  std::uint64_t next_id() noexcept { return next_id_.fetch_add(1, std::memory_order_relaxed); }
  /// Sends a request; `call` completes when its reply, timeout, cancellation or end comes.
  /// With `stream` (a stream request: `flags` has packet_flag_stream), `call` completes as the
  /// request is sent, and the stream's items go to `stream` until it ends.
  /// `request`: its payload and flags (the rest is set here). Borrowed bytes in it (a call made
  /// in place) must stay valid until `call` completes.
  void start_call(std::uint64_t id, pending_call_ptr call, outgoing_message request,
                  std::chrono::milliseconds timeout,
                  std::shared_ptr<stream_state> stream = nullptr);
  /// The window this end's stream requests announce (rpc_options::stream_window).
  std::uint32_t stream_window() const noexcept {
    return stream_window_.load(std::memory_order_relaxed);  // relaxed: a setting, no data with it
  }
  /// Sets this end's bounds (max_in_flight, max_concurrent_handlers, max_held_bytes,
  /// stream_window, stream_window_limit) from any thread; they apply from the strand's next
  /// turn.
  void apply_limits(const rpc_options& o);

  // Streams (rpc_streams.cpp): see rpc_stream_core.hpp.
  void read_stream(std::shared_ptr<stream_state> st, stream_state::read r);
  void cancel_stream_read(std::shared_ptr<stream_state> st, std::uint64_t read_id,
                          asio::cancellation_type type);
  void close_stream(std::shared_ptr<stream_state> st);
  void write_stream(std::uint64_t request_id, std::uint64_t session, std::uint64_t write_id,
                    std::vector<std::byte> item, pending_signal_ptr op);
  void cancel_stream_write(std::uint64_t request_id, std::uint64_t write_id);
  bool try_write_stream(std::uint64_t request_id, std::uint64_t session,
                        std::span<const std::byte> item);
  /// Gives up on a call (cancellation through its slot): completes it with operation_aborted.
  /// `total` alone cancels only a request not yet sent (Asio's "no side effects").
  void cancel_call(std::uint64_t id, asio::cancellation_type type);
  void close() noexcept;

 private:
  struct call_entry {
    pending_call_ptr call;
    std::chrono::steady_clock::time_point deadline;
    // A request still waiting for credit (max_in_flight), not yet given to send().
    std::optional<outgoing_message> waiting;
    // A stream request's: where its items go (`call` completed when the request was sent).
    std::shared_ptr<stream_state> stream;
    // Given to send(), and waiting in the outbox (or the writer's hands) with none of it written.
    bool queued_whole = false;
  };
  struct counters {
    std::atomic<std::uint64_t> requests_sent{0}, requests_received{0}, responses_sent{0},
        responses_received{0}, errors_sent{0}, errors_received{0}, bytes_sent{0}, bytes_received{0},
        packets_sent{0}, packets_received{0}, packets_rejected{0}, packets_stale{0},
        discarded_replies{0}, timeouts{0}, cancellations{0}, pending{0}, send_failures{0},
        requests_withdrawn{0}, stream_items_sent{0}, stream_items_received{0}, requests_shed{0},
        requests_deferred{0};
  };

  // A running handler, in serving_ by request id. Its table node is recycled with the signal in
  // it, so the memory Asio keeps in the signal for the coroutine's cancellation state is reused
  // too: a steady flow of requests allocates neither.
  struct serving_call {
    asio::cancellation_signal signal;  // cancels the handler; lives until its coroutine is over
    stream_writer_state stream;        // a stream handler's
  };
  struct geometry {  // where the rings are and their sizes, as checked (read once)
    std::uint64_t to_opener_offset, to_owner_offset;
    ring_geometry ring;
  };

  // create and open without the loops started: the caller sets what the loops read first.
  static std::shared_ptr<rpc_channel> make_owner(const asio::any_io_executor& ex,
                                                 std::string_view name, rpc_service service,
                                                 const rpc_options& options, std::error_code& ec);
  // With `expected`, a channel whose sizes, limit or timeout differ is refused (incompatible)
  // before anything of it is used: a client's, which the service checks against its listener.
  static std::shared_ptr<rpc_channel> make_opener(
      const asio::any_io_executor& ex, std::string_view name, rpc_service service,
      wait_strategy strategy, std::error_code& ec, const rpc_options* expected = nullptr,
      std::chrono::milliseconds admin_patience = detail::admin_patience);
  std::error_code attach(segment seg, bool owner, const geometry& g, wait_strategy strategy);
  // Whether a node of either ring can carry a claim made under our participant number by a
  // process that is gone (which recover_own_nodes() then gives back). Reading every node touches
  // every page of the channel; a connection's first opener, the usual case, needs none of it.
  bool may_hold_stale_claims(int fd, bool owner) const noexcept;
  void on_accepted();
  void connect_failed(std::error_code ec);
  /// Closing: close() (from any thread) or a failure has begun. No request handler starts and
  /// no packet is taken after it.
  bool closing() const noexcept {
    // acquire: pairs with release()'s exchange; a reader that sees it stops.
    return closed_ || released_.load(std::memory_order_acquire);
  }
  /// The reader found its ring empty (on every path that does): after a ringful or more taken
  /// since it last did, the other end's close packet may have found no room, and a pidfd only
  /// tells of a death. Its lock tells (check_peer_after_full_ring).
  void ring_found_empty();
  void check_peer_after_full_ring();
  /// attempt_write into the out ring, unless close() began (operation_aborted): nothing is
  /// written after the close packet, even when close() comes from another thread (release()
  /// waits for a write in progress before it writes the close).
  template <class Fill>
  std::optional<outcome<std::size_t>> write_unless_closing(Fill& fill) {
    // seq_cst, with release()'s exchange and load: either this sees released_ and writes
    // nothing, or release() sees writing_ and waits for this write to end first.
    writing_.store(true, std::memory_order_seq_cst);
    struct done_writing {
      std::atomic<bool>& flag;
      // release: the write is complete before release() sees the flag clear.
      ~done_writing() { flag.store(false, std::memory_order_release); }
    } guard{writing_};
    if (released_.load(std::memory_order_seq_cst))
      return outcome<std::size_t>{asio::error::operation_aborted, 0};
    auto written = attempt_write(out_, fill);
    // The other end truncated the file under us (the truncation guard kept us alive): what
    // was written reached nobody.
    if (seg_.faulted()) return outcome<std::size_t>{errc::corrupted, 0};
    return written;
  }
  void forget_name() noexcept;
  void complete_closed_waiters(std::error_code ec);
  void watch_peer_death();
  bool connecting() const noexcept { return connect_op_ != nullptr; }
  void start_loops();
  /// True when nothing of this end needs the reader: it serves nothing, and has no call,
  /// stream, close waiter or connect pending. Its reader then stops (an idle end holds no work,
  /// as an idle socket), and starts again with the next of them.
  bool idle() const noexcept {
    return !serves_ && calls_.empty() && closed_waiters_.empty() && !connecting() &&
           serving_.empty();
  }
  void ensure_reader();
  /// Request `m`, just read, waits in held_back_ (answers wait, or requests already do); if no
  /// more may wait it is answered busy, or shed while max_concurrent_handlers answers wait.
  void hold_back(incoming_message m);
  /// Keeps request `m` in `queue` (held_back_ or deferred_) until it may start. A request new
  /// to both is answered with errc::busy instead past max_concurrent_handlers requests waiting
  /// or max_held_bytes of them; one that already waited (`moved`) was counted and checked.
  void defer(incoming_message m, std::deque<incoming_message>& queue, bool moved);
  /// Message `m` (an answer or an item, or anything else: then nothing) left the outbox: below
  /// both bounds again, the requests held back go.
  void answer_left(const outgoing_message& m);
  /// Stops a parked reader once this end is idle (after a completion that may have made it so),
  /// and the housekeeping tick once it has nothing to watch.
  void stop_reader_if_idle();
  /// Whatever the housekeeping tick watches: calls (their deadlines), handlers serving (their
  /// caller's life), close waiters without a pidfd, a connect.
  bool housekeeping_due() const noexcept {
    return !calls_.empty() || !serving_.empty() || poll_peer_ || connecting();
  }
  void stop_ticking_if_quiet(int passes = 2);
  // The reader, on the strand: takes packets while there are some, then parks a wait on its
  // ring, or stops once this end is idle. Handlers rather than a coroutine: a coroutine's
  // frame for each park would come from Asio's per-thread cache, which the frames of a
  // caller's own coroutine need (docs/performance.md, "Calls in place").
  void reader_run(std::shared_ptr<rpc_channel> self);
  // Has reader_run go on from the strand's queue.
  void post_reader_run(std::shared_ptr<rpc_channel> self);
  // Its parked wait completed with (ec, n).
  void reader_woken(std::shared_ptr<rpc_channel> self, std::error_code ec, std::size_t n);
  // A throw went through the reader: it stops, and starts again if anything waits.
  void reader_failed() noexcept;
  // Takes the packet read (ec, n) and those that follow at once. True: the ring was found
  // empty, look again or park. False: the reader stopped, or its turn is over and it goes on
  // from a posted handler.
  bool reader_take(std::shared_ptr<rpc_channel>& self, std::error_code ec, std::size_t n);
  // One packet from the ring into packet_: its size, an error, or nothing there.
  size_outcome read_packet();
  asio::awaitable<void> writer_loop(std::shared_ptr<rpc_channel> self);
  asio::awaitable<void> housekeeping_loop(std::shared_ptr<rpc_channel> self);
  asio::awaitable<void> serve(std::shared_ptr<rpc_channel> self, incoming_message request,
                              std::size_t skip, const rpc_handler* handler, std::uint64_t session);
  asio::awaitable<void> serve_stream(std::shared_ptr<rpc_channel> self, incoming_message request,
                                     std::size_t skip, const rpc_stream_handler* handler,
                                     std::uint64_t session);
  /// Runs the coroutine `body` as the handler of request `id`, in serving_ until it is over.
  void spawn_handler(std::uint64_t id, serving_call* call, asio::awaitable<void> body);
  // Streams, the caller's side: an item, the end, or credit arrived.
  void on_stream_item(incoming_message m);
  void on_stream_credit(const incoming_message& m);
  /// Hands `st`'s items (then its end) to its waiting reads and grants credit for them. Stream
  /// completions are always posted: one dispatched inline could pass an earlier one still
  /// queued, and reads (and writes) complete in the order they were started.
  void pump_stream(stream_state& st);
  /// Completes a read of `st` in its turn (ordered_delivery).
  void deliver_read(stream_state& st, ordered_delivery::entry e);
  /// An item of `st` was read: counts it, and grants credit for what was read once that is
  /// half a window.
  void credit_read(stream_state& st);
  /// Sends the writes of `w` that its credit (and the outbox, see stream_writer_state) allows.
  void flush_stream_writes(std::uint64_t request_id, stream_writer_state& w);
  /// A stream item may go now: `w` has credit and room (stream_writer_state::may_send), and the
  /// answers waiting in the outbox are under max_held_bytes. A running stream handler is slowed
  /// by that bound (its writes wait), where a plain answer, made once, is only counted in it.
  bool may_send_item(const stream_writer_state& w) const noexcept {
    return w.may_send() && !bounds_.over_budget();
  }
  /// The answers waiting fell under max_held_bytes: the stream writes it held wait no longer.
  void post_stream_flush();
  void flush_all_stream_writes();
  /// Sends the stream item `m`, paying one of `w`'s credits for it. False if close() began
  /// (on any thread) before it had wholly gone: the item is not delivered (the credit is spent;
  /// nothing more goes out for the stream).
  bool send_stream_item(stream_writer_state& w, outgoing_message m);
  /// The writer loop is done with a stream item of request `request_id` that waited in the
  /// outbox (written, or dropped): its stream may send more.
  void stream_item_left_outbox(std::uint64_t request_id);
  /// A handler's stream can go no further: its waiting writes fail with `why`.
  void end_stream_writes(stream_writer_state& w, std::error_code why);
  /// Write `op` of `w` finished with `ec`: it completes in its turn (ordered_delivery).
  void finish_stream_write(stream_writer_state& w, pending_signal_ptr op, std::error_code ec);
  void on_packet(std::span<const std::byte> bytes);
  void on_message(incoming_message m);
  void serve_now(std::uint64_t id, const rpc_sync_handler& handler,
                 std::span<const std::byte> payload);
  void serve_in_place(std::uint64_t id, const rpc_in_place_handler& handler,
                      std::span<const std::byte> payload);
  /// The entry of a coroutine handler about to run for request `id`; null if `id` has one.
  serving_call* start_serving(std::uint64_t id);
  /// Drops the entry once the handler's co_spawn has completed, keeping its node for reuse.
  void end_serving(std::uint64_t id, const serving_call* call);
  void answer(std::uint64_t request_id, std::vector<std::byte> reply, std::error_code failure,
              std::string_view text);
  // A message of `type` refused as it arrived (too large, or dropped in part) that will never be
  // whole: fails what waited for it with `ec` (a request is answered, with `request_text`).
  void fail_waiting(layout::packet_type type, std::uint64_t id, std::uint64_t response_to,
                    std::error_code ec, std::string_view request_text);
  // `may_dispatch`: see pending_call::complete. `stream_end`: the answer is a stream's end;
  // a stream answered otherwise, or a call answered so, broke the protocol (errc::corrupted).
  void finish_call(std::uint64_t id, std::error_code ec, reply_bytes reply,
                   bool may_dispatch = false, bool stream_end = false);
  /// A call's request went out (or will, queued whole): a stream's opening completes.
  void call_sent(call_entry& entry);
  /// Sends the request of call `id`, which has its credit (max_in_flight); if close() began
  /// meanwhile, the call completes with operation_aborted instead.
  void send_admitted(std::uint64_t id, outgoing_message request);
  /// Counts a response sent with `bytes` of payload.
  void count_response(std::size_t bytes) noexcept;
  /// Writes `m` now as far as the ring has room, and queues the rest for the writer loop.
  /// False if it was dropped because close() began (the close packet goes last).
  bool send(outgoing_message m);
  /// `m` goes into the outbox: notes it where its request or stream keeps count.
  void note_queued(const outgoing_message& m) noexcept;
  /// Takes back request `id` if none of it has been written (waiting for credit, or queued
  /// whole): true if it was, and then the other end never hears of it.
  bool withdraw(std::uint64_t id);
  /// The writer loop wrote the first packet of request `id`, which had waited whole.
  void request_started(std::uint64_t id) noexcept;
  /// Gives up on call `id` with `ec`: completes it, and tells the other end if it was sent.
  void abandon_call(std::uint64_t id, std::error_code ec);
  void admit_waiting();
  /// Takes this end's bounds from `o` (checked: limits_problem), on the strand or before
  /// the loops start.
  void set_limits(const rpc_options& o) noexcept;
  /// All of them but the stream window (strand-only: the window is an atomic, set at once).
  void set_strand_limits(const rpc_options& o) noexcept;
  void set_stream_window(const rpc_options& o) noexcept;
  /// Where a request to start comes from: just read, or one of the two queues of those waiting.
  enum class request_from : std::uint8_t { wire, held_back, deferred };
  /// Starts serving request `m` (after its counts): its method's handler, now or once the
  /// answers waiting go (max_held_bytes) and a handler slot frees (max_concurrent_handlers), or
  /// an error answer. One from a queue is not held back again, nor counted as waiting again.
  void start_request(incoming_message m, request_from from = request_from::wire);
  /// Starts what waits and may start now: deferred_ first, then held_back_, each in its order.
  void start_deferred();
  void send_failed(const outgoing_message& m, std::error_code ec);
  void send_error(std::uint64_t to, std::error_code ec, std::string_view text);
  bool peer_attached();
  /// What the other end's lock bytes say: there, an opener arriving or leaving (it holds only
  /// its admission byte), gone, or unknown (the look failed).
  enum class peer_locks { held, admitted, free, unknown };
  peer_locks look_at_peer_locks();
  /// The other end's locks say it is gone.
  bool peer_left() { return look_at_peer_locks() == peer_locks::free; }
  /// After an acceptor counted itself: waits (briefly) for its lock byte, or for it to let go.
  std::error_code await_acceptor_lock(std::chrono::steady_clock::time_point deadline);
  bool from_peer(std::uint64_t generation);
  void follow_opener();
  void end_session();
  /// Cancels every running handler; their streams' writes fail with `why`.
  void cancel_serving(std::error_code why);
  void wake_housekeeping();
  void shutdown_on_strand();
  /// The channel cannot go on (its ring is damaged): closes it, failing calls with `why`.
  void fail(std::error_code why);
  /// Tells the other end we go and drops our lock byte and waits: once, from close or fail.
  void release() noexcept;
  std::uint64_t reassembler_max() const noexcept { return reassembler_.max_message_size(); }

  asio::any_io_executor ex_;
  // A strand over ex_, held in an any_io_executor. Over an io_context's own executor it is a
  // strand<io_context::executor_type>, which fits in the any_io_executor's in-place storage;
  // a strand<any_io_executor> does not, and then every copy, prefer and require Asio makes of it
  // (several per handler) allocates. See make_channel_strand.
  asio::any_io_executor strand_;
  rpc_service service_;
  segment seg_;
  layout::rpc_header* header_ = nullptr;
  ring_view in_;                    // the ring the other end writes
  ring_view out_;                   // the ring we write
  std::shared_ptr<waiter> waiter_;  // queue 0: in_ readers; queue 1: out_ writers
  bool owner_ = false;
  std::uint64_t peer_lock_byte_ = 0;
  std::uint64_t peer_serves_byte_ = 0;
  std::chrono::milliseconds default_timeout_{30000};
  std::atomic<std::uint64_t> next_id_{1};
  counters stats_;
  // The opener's own generation (fixed at attach), or the generation of the opener the owner
  // addresses (strand-only; 0 before the first). Stamped on every packet sent.
  std::uint64_t generation_ = 0;

  // Strand-only state.
  using call_table = std::unordered_map<std::uint64_t, call_entry>;
  using serving_table = std::unordered_map<std::uint64_t, serving_call>;
  call_table calls_;
  std::size_t in_flight_ = 0;               // calls given to send() and not yet completed
  std::deque<std::uint64_t> credit_queue_;  // calls waiting for credit, oldest first
  std::size_t waiting_ = 0;  // calls whose entry still waits for credit (some ids above are stale)
  std::size_t max_in_flight_ = 1024;
  // What this end holds for the other end to read, and its bounds; held_back_ and deferred_
  // below wait for it.
  answer_bounds bounds_;
  std::uint32_t served_window_limit_ = 1024;      // rpc_options::stream_window_limit
  std::atomic<std::uint32_t> stream_window_{32};  // read by callers off the strand
  // Requests waiting, in their order: for the answers to go (max_held_bytes; any handler kind),
  // and then for a handler slot (max_concurrent_handlers; coroutine handlers only). Two queues,
  // so that a plain handler's request held back for bytes never waits for a coroutine's slot.
  std::deque<incoming_message> held_back_;
  std::deque<incoming_message> deferred_;
  std::vector<std::uint64_t> expired_;  // housekeeping's scratch list, kept for its capacity
  serving_table serving_;               // by request id
  // Nodes of erased entries, for the next insertions: a steady flow of calls allocates none.
  std::vector<call_table::node_type> spare_calls_;
  std::vector<serving_table::node_type> spare_serving_;
  std::uint64_t session_ = 0;  // sessions ended so far
  std::deque<outgoing_message> outbox_;
  // The requests whose answer waits whole in the outbox (how many answers, for a forged id
  // served twice): a cancel looks here before it looks through the outbox (which may hold many
  // stream items) for an answer to drop. Its nodes are recycled, as calls_' are: answers that
  // keep queueing allocate none.
  using answer_index = std::unordered_map<std::uint64_t, std::uint32_t>;
  answer_index answers_whole_;
  std::vector<answer_index::node_type> spare_answers_;
  asio::cancellation_signal writer_cancel_;  // cuts short the writer's wait for room
  asio::cancellation_signal reader_cancel_;  // cuts short the reader's wait (idle(), close)
  asio::steady_timer tick_;  // timeouts and the peer watch, while anything is pending
  bool ticking_ = false;
  bool tick_stop_posted_ = false;  // stop_ticking_if_quiet's look is on its way
  bool writer_busy_ = false;       // the writer loop is part-way through a message
  // The message the writer loop holds while it waits for room for its first packet: until that
  // packet is written (current_started_), withdraw() may still drop it (current_withdrawn_).
  outgoing_message* current_ = nullptr;
  bool current_started_ = false;
  bool current_withdrawn_ = false;
  bool admitting_ = false;  // admit_waiting() runs (it is not re-entered)
  // Packets taken since the reader last found its ring empty: a ring that was full may have had
  // no room for the other end's close packet (see check_peer_after_full_ring).
  std::size_t taken_since_empty_ = 0;
  std::uint32_t corrupt_run_ = 0;      // bad results from the ring since the last good packet
  bool stream_flush_posted_ = false;   // post_stream_flush has a flush on its way
  bool stream_writes_held_ = false;    // a stream write waits for max_held_bytes
  std::size_t stream_flush_turn_ = 0;  // where flush_all_stream_writes starts
  bool writer_running_ = false;        // the writer loop runs: the outbox holds something
  bool reader_running_ = false;        // the reader loop runs (see idle())
  bool reader_parked_ = false;         // ... and waits for a packet
  bool reader_stop_ = false;           // its wait was cut short because this end became idle
  bool serves_ = false;                // this end has a handler (and holds its serves byte)
  bool peer_serves_ = false;           // the other end's serves byte, as seen when it came
  bool peer_present_ = false;
  bool closed_ = false;
  // A connection (rpc_acceptor, async_connect) has one other end, once: when it goes, the
  // channel takes no other (peer_lost_), and an owner ignores any later opener's packets.
  bool connection_ = false;
  // An acceptor's end: its reader takes short turns with the other connections (reader_turn).
  bool takes_turns_ = false;
  bool peer_lost_ = false;
  bool accepted_ = false;        // a connecting owner: the accept packet came (strand-only)
  bool request_posted_ = false;  // a connecting owner: the connect request is in the backlog
  int acceptor_left_looks_ = 0;  // a connecting owner: peer checks in a row that found it gone
  std::uint32_t connect_pid_ = 0;
  std::uint64_t connect_nonce_ = 0;
  std::unique_ptr<listener_link> link_;  // a connecting owner's listener, until the outcome
  pending_signal_ptr connect_op_;
  std::chrono::steady_clock::time_point connect_deadline_;
  std::vector<std::pair<std::uint64_t, pending_signal_ptr>> closed_waiters_;
  // Becomes readable when the other end's process exits; without one (no pidfd, or its pid
  // was not the holder's), the housekeeping tick watches the other end for closed_waiters_.
  std::unique_ptr<asio::posix::stream_descriptor> death_watch_;
  bool poll_peer_ = false;
  std::error_code failure_;  // why the channel failed, if it did (then closed_ too)
  std::atomic<bool> released_{false};
  std::atomic<bool> writing_{false};        // the strand is writing a packet (write_unless_closing)
  std::atomic<bool> name_given_up_{false};  // close() released the segment's name
  reassembler reassembler_;
  std::vector<std::byte> packet_;  // the packet being read, copied out of its node
  rpc_reply reply_;                // what in-place handlers write into, one at a time
};

}  // namespace shmio::detail
