#pragma once
// Parking for async waits that found no wait slot of their own.
//
// A queue has wait_slot_count slots; an object that found them all held would otherwise have to
// poll. Instead, the objects of a process that share a queue without a slot form a group, and a
// thread of the process (the hub) parks for all groups at once: it holds one slot per group as
// a blocking sleeper does (owner: the hub thread, woken by FUTEX_WAKE on the slot's armed word),
// or, with no slot free at all, counts itself among the queue's sleepers on futex_seq. It sleeps
// in one futex_waitv over every group's word, with no timeout: an idle process makes no system
// call. When a group's queue rings, the hub calls each member's wake function, and each member
// re-checks its own condition; the group's arming stays down until a member arms again, right
// before its look (one ring, one look: a wake-one queue's next message rings someone else).
//
// The members keep the wake protocol's order (wait_queue.hpp): a member arms through the group
// before it re-checks, and the group's arming is withdrawn only when no member wants it; a ring
// claimed for the group that nobody took is passed on, as a single waiter's would be.
//
// Without futex_waitv (Linux before 5.16), or without a thread to be had, join() fails and the
// objects poll (waiter::slotless_interval).

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "shmio/detail/layout.hpp"

namespace shmio::detail {

class wait_hub_group;

/// One object's membership of the group for one queue.
class wait_hub_member {
 public:
  ~wait_hub_member();
  wait_hub_member(const wait_hub_member&) = delete;
  wait_hub_member& operator=(const wait_hub_member&) = delete;

  /// The member has a parked wait on the queue and is about to re-check its condition (the
  /// arming comes first, seq_cst). Idempotent while it wants a ring.
  void arm() noexcept;
  /// The member no longer has a parked wait on the queue.
  void withdraw() noexcept;

  /// The group took a ring in (under the hub's mutex).
  void rang() noexcept { rang_ = true; }

  /// Wakes are gathered under the hub's mutex and called with it dropped (a wake posts to the
  /// member's executor, the user's code), from a list threaded through the members: no
  /// allocation. A member still on a list is not added again: it comes off the list, under the
  /// mutex, only right before its wake is called, so that call comes after this ring. Its
  /// destructor waits until it is on no list and no call of its wake is running (the executor
  /// a wake posts to may go once the member is gone).
  bool wake_outstanding() const noexcept { return wake_pending_ || wake_calls_ != 0; }
  void add_to(wait_hub_member*& list) noexcept {
    if (wake_pending_) return;
    wake_pending_ = true;
    next_wake_ = list;
    list = this;
  }
  /// Takes the first member off `list` to call its wake (under the hub's mutex).
  static wait_hub_member* pop_wake(wait_hub_member*& list) noexcept {
    wait_hub_member* m = list;
    list = m->next_wake_;
    m->next_wake_ = nullptr;
    m->wake_pending_ = false;
    ++m->wake_calls_;
    return m;
  }
  /// Calls the wake of a member popped off a list (no mutex held).
  void call_wake() { wake_(); }
  /// The call is over (under the hub's mutex).
  void wake_called() noexcept { --wake_calls_; }

 private:
  friend class wait_hub;
  wait_hub_member() = default;
  wait_hub_group* group_ = nullptr;  // owned by the hub; lives while it has members
  std::function<void()> wake_;
  bool wanting_ = false;  // under the hub's mutex
  // The group took a ring in since this member last armed (under the hub's mutex).
  bool rang_ = false;
  // On a list of wakes to call (under the hub's mutex; the link is stable while it is set).
  bool wake_pending_ = false;
  wait_hub_member* next_wake_ = nullptr;
  unsigned wake_calls_ = 0;  // calls of the wake running (under the hub's mutex)
};

class wait_hub {
 public:
  /// Joins the group for `q` (a queue mapped in this process; the group is found by the
  /// queue's address, so members must share the mapping or accept their own group). `wake`
  /// is called when the queue rings while the member wants it, from the hub thread (or from a
  /// member's arm() that finds the ring first), under no lock of the hub's, possibly on two
  /// threads at once; it must be quick and safe to call concurrently with itself.
  /// Empty if the hub cannot run here.
  static std::unique_ptr<wait_hub_member> join(layout::wait_queue& q, std::function<void()> wake);
  /// True if every hub thread of the process has made its pass after the latest poke (for
  /// tests that count an idle process's wake-ups: the members' first armings poke).
  static bool settled() noexcept;
  /// The passes the hub threads of the process have made so far (for tests: a pass that
  /// started after a ring has taken it in once this has moved past its value at the ring).
  static std::uint64_t passes() noexcept;
};

}  // namespace shmio::detail
