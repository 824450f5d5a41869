#include "shmio/named_event.hpp"

#include <new>

namespace shmio {
namespace {

namespace layout = detail::layout;

std::uint32_t mode_word(event_mode m) {
  return m == event_mode::manual_reset ? layout::event_manual_reset : layout::event_auto_reset;
}

segment::initializer init_event(event_mode mode, bool initially_set) {
  return [mode, initially_set](std::span<std::byte> body) {
    auto* st = new (body.data()) layout::event_state{};
    st->signalled.store(initially_set ? 1 : 0, std::memory_order_relaxed);  // published by rename
    st->mode = mode_word(mode);
  };
}

// Checks an opened event's body before anything trusts it.
std::error_code validate(const segment& seg, event_mode mode) {
  if (seg.body().size() < sizeof(layout::event_state)) return errc::corrupted;
  const auto* st = reinterpret_cast<const layout::event_state*>(seg.body().data());
  if (st->mode != layout::event_auto_reset && st->mode != layout::event_manual_reset)
    return errc::corrupted;
  if (st->mode != mode_word(mode)) return errc::incompatible;
  return {};
}

}  // namespace

named_event::named_event(const executor_type& ex, create_only_t, std::string_view name,
                         event_mode mode, bool initially_set, wait_strategy strategy,
                         std::error_code& ec)
    : ex_(ex) {
  segment seg = segment::create(name, object_kind::event, sizeof(layout::event_state),
                                init_event(mode, initially_set), ec);
  if (!ec) impl_ = make_impl(ex, std::move(seg), mode, strategy, ec);
}

named_event::named_event(const executor_type& ex, open_only_t, std::string_view name,
                         event_mode mode, wait_strategy strategy, std::error_code& ec)
    : ex_(ex) {
  segment seg = segment::open(name, object_kind::event, ec);
  if (!ec) impl_ = make_impl(ex, std::move(seg), mode, strategy, ec);
}

named_event::named_event(const executor_type& ex, open_or_create_t, std::string_view name,
                         event_mode mode, bool initially_set, wait_strategy strategy,
                         std::error_code& ec)
    : ex_(ex) {
  segment seg = segment::open_or_create(name, object_kind::event, sizeof(layout::event_state),
                                        init_event(mode, initially_set), ec);
  if (!ec) impl_ = make_impl(ex, std::move(seg), mode, strategy, ec);
}

named_event::named_event(const executor_type& ex, create_only_t tag, std::string_view name,
                         event_mode mode, bool initially_set, wait_strategy strategy)
    : ex_(ex) {
  std::error_code ec;
  *this = named_event(ex, tag, name, mode, initially_set, strategy, ec);
  detail::throw_if(ec, "create event", name);
}

named_event::named_event(const executor_type& ex, open_only_t tag, std::string_view name,
                         event_mode mode, wait_strategy strategy)
    : ex_(ex) {
  std::error_code ec;
  *this = named_event(ex, tag, name, mode, strategy, ec);
  detail::throw_if(ec, "open event", name);
}

named_event::named_event(const executor_type& ex, open_or_create_t tag, std::string_view name,
                         event_mode mode, bool initially_set, wait_strategy strategy)
    : ex_(ex) {
  std::error_code ec;
  *this = named_event(ex, tag, name, mode, initially_set, strategy, ec);
  detail::throw_if(ec, "open_or_create event", name);
}

// Shared by the constructors: makes the impl around an opened segment, or sets `ec`.
std::shared_ptr<named_event::impl> named_event::make_impl(const executor_type& ex, segment seg,
                                                          event_mode mode, wait_strategy strategy,
                                                          std::error_code& ec) {
  ec = validate(seg, mode);
  if (ec) return nullptr;
  auto im = std::make_shared<named_event::impl>();
  auto* st = reinterpret_cast<layout::event_state*>(seg.body().data());
  im->state = {st, mode == event_mode::manual_reset};
  layout::wait_queue* queues[] = {&st->waiters};
  im->waiter = std::make_shared<detail::waiter>(ex, queues, strategy, ec);
  if (ec) return nullptr;
  im->seg = std::move(seg);
  return im;
}

named_event::~named_event() {
  close();
}

named_event::named_event(named_event&& other) noexcept
    : ex_(other.ex_), impl_(std::move(other.impl_)), closed_name_(std::move(other.closed_name_)) {}

named_event& named_event::operator=(named_event&& other) noexcept {
  if (this != &other) {
    close();
    ex_ = other.ex_;
    impl_ = std::move(other.impl_);
    closed_name_ = std::move(other.closed_name_);
  }
  return *this;
}

void named_event::close() noexcept {
  // Shut down explicitly: a pending operation's initiation may still hold the impl, and its
  // waits must end now, not when the last reference goes.
  if (impl_) detail::keep_name(impl_->seg.name(), closed_name_);
  if (auto im = std::exchange(impl_, nullptr)) {
    im->waiter->retire();
    im->seg.release_name();  // now: a completion on its way may keep the mapping for long
  }
}

named_event::executor_type named_event::get_executor() const noexcept {
  return ex_;
}

const std::string& named_event::name() const noexcept {
  return impl_ ? impl_->seg.name() : closed_name_;
}

event_mode named_event::mode() const noexcept {
  return impl_ && impl_->state.manual ? event_mode::manual_reset : event_mode::auto_reset;
}

void named_event::set() noexcept {
  if (impl_) impl_->state.set();
}

void named_event::reset() noexcept {
  if (impl_) impl_->state.reset();
}

bool named_event::is_set() const noexcept {
  return impl_ && impl_->state.is_set();
}

bool named_event::wait(std::chrono::milliseconds timeout, std::error_code& ec) {
  ec.clear();
  if (!impl_) {
    ec = asio::error::bad_descriptor;
    return false;
  }
  const auto limit = detail::wait_limit(timeout);
  detail::event_view state = impl_->state;
  auto r = impl_->waiter->wait(
      0, [state] { return state.try_take() ? std::optional<bool>(true) : std::nullopt; }, limit);
  return r.has_value();
}

bool named_event::wait(std::chrono::milliseconds timeout) {
  std::error_code ec;
  bool taken = wait(timeout, ec);
  detail::throw_if(ec, "wait on event", name());
  return taken;
}

}  // namespace shmio
