#include "shmio/detail/wait_hub.hpp"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "shmio/detail/platform.hpp"
#include "shmio/detail/wait_queue.hpp"

namespace shmio::detail {
namespace {

// futex_waitv returns in a row that found nothing to wake before the thread pauses between
// passes (see run()).
constexpr int idle_returns_before_pause = 64;

namespace platform = detail::platform;

class shard;

}  // namespace

/// The members of one process that park on one queue (as mapped at one address) without a
/// slot of their own. Everything here is under its shard's mutex.
class wait_hub_group {
 public:
  layout::wait_queue* queue = nullptr;
  shard* owner = nullptr;
  int slot = no_slot;     // held for the hub thread, or no_slot: counted on futex_seq
  std::uint32_t seq = 0;  // futex_seq as last seen (no slot)
  unsigned wanting = 0;   // members that want a ring
  // The hub thread took a ring in and left the group's arming down (the slot claimed, or
  // futex_seq unwatched): the next member to arm, right before its look, arms again. Re-armed
  // by the hub thread, a second wake-one ring could claim the group before anyone had looked,
  // where one look takes one message (models/wake_hub.pml, F1).
  bool taken = false;
  // The hub thread's last futex_waitv watched futex_seq for the group (no slot).
  bool watched_seq = false;
  // ... and may have been woken there: a FUTEX_WAKE of a notify whose futex_seq increment a
  // member's re-arm loaded already (so the word shows no move) still stands for a message that
  // the queue's wake-one signaller meant for one sleeper (models/README.md, N1).
  bool seq_woken = false;
  std::vector<wait_hub_member*> members;
  // Set by the last member's destructor, which waits for the hub thread to let the group go.
  bool* gone = nullptr;
};

namespace {

// One hub thread and the groups it parks for: at most futex_wait_any_max - 1 of them (one word
// each, and the control word).
class shard {
 public:
  static constexpr std::size_t capacity = platform::futex_wait_any_max - 1;

  shard() : pid_(platform::process_id()) {
    std::thread([this] { run(); }).detach();
    std::unique_lock lock(mutex_);
    started_.wait(lock, [this] { return sleeper_id_ != 0; });
  }

  std::mutex mutex_;
  std::vector<wait_hub_group*> groups_;  // owned

  // Makes the hub thread build its wait list again (a group's word to watch changed).
  void poke() noexcept {
    // release: pairs with the thread's acquire load before it builds its list (under the
    // mutex anyway); the increment is what makes its futex_waitv return.
    control_.fetch_add(1, std::memory_order_release);
    platform::futex_wake(control_, 1);
  }

  std::uint64_t sleeper_id() const noexcept { return sleeper_id_; }
  // The thread has made its pass after every poke so far. Under the mutex.
  std::uint64_t passes() const noexcept { return passes_; }
  bool settled() const noexcept {
    // relaxed: a test's look; the mutex orders it with the pass that stored seen_control_.
    return seen_control_ == control_.load(std::memory_order_relaxed) && calling_ == 0;
  }
  /// False in a child forked from the process that made the shard: no thread runs it there.
  bool runs_here() const noexcept { return pid_ == platform::process_id(); }

  // Signalled (under the mutex) when the hub thread has let a group go.
  std::condition_variable retired_;

  // A group's queue rang (or was found claimed): its members look again. Under the mutex;
  // the caller then calls the wakes gathered on `wakes` (call_wakes).
  static void wake_members(wait_hub_group& g, const wait_hub_member* except,
                           wait_hub_member*& wakes) noexcept {
    for (wait_hub_member* m : g.members)
      if (m != except) {
        m->rang();
        m->add_to(wakes);
      }
  }
  // Calls the wakes gathered on `wakes`, each with the mutex (held by `lock` on entry and on
  // return) dropped, and wakes the destructors waiting for them (wakes_done_).
  void call_wakes(std::unique_lock<std::mutex>& lock, wait_hub_member*& wakes) noexcept {
    if (!wakes) return;
    ++calling_;
    while (wakes) {
      wait_hub_member* m = wait_hub_member::pop_wake(wakes);
      lock.unlock();
      m->call_wake();  // a post that throws (no memory) ends the process
      lock.lock();
      m->wake_called();
    }
    --calling_;
    wakes_done_.notify_all();
  }
  unsigned calling_ = 0;  // call_wakes running (under the mutex): for settled()
  std::condition_variable wakes_done_;

  // A futex_seq wake the hub thread took while the group wanted none (its last member left
  // while the thread still slept on the word): it was meant for a counted sleeper of the queue,
  // and a wake-one signaller woke nobody else. Passes it on. Under the mutex.
  // `woken`: futex_waitv may have returned for the group's word.
  static void forward_unwanted_wake(wait_hub_group& g, bool woken) noexcept {
    if (!g.watched_seq || g.slot != no_slot || g.wanting != 0) return;
    // seq_cst: as rang's load.
    const std::uint32_t seq = g.queue->futex_seq.load(std::memory_order_seq_cst);
    if (seq == g.seq && !woken) return;
    g.seq = seq;
    notify_one(*g.queue);  // models/wake_hub.pml, H1
  }

  // A ring the group's arming took since it was last armed: its slot claimed, or futex_seq
  // moved. Under the mutex.
  static bool rang(const wait_hub_group& g) noexcept {
    // seq_cst: the re-check that the members make after our wake must come after this.
    if (g.slot != no_slot) return g.queue->slots[g.slot].armed.load(std::memory_order_seq_cst) == 0;
    return g.queue->futex_seq.load(std::memory_order_seq_cst) != g.seq;  // seq_cst: as above
  }

  // Arms the group again after a ring, for a member that looks next. Under the mutex.
  static void rearm(wait_hub_group& g) noexcept {
    g.taken = false;
    if (g.slot != no_slot) {
      arm(*g.queue, g.slot);  // seq_cst inside: before the caller's look
    } else {
      // seq_cst: a notify that moved the word before this load published before it, and the
      // caller's look (after this) sees that; a later one moves it past what we sleep on.
      g.seq = g.queue->futex_seq.load(std::memory_order_seq_cst);
    }
  }

 private:
  // The hub thread's pass over one group, under the mutex: takes in a ring, lets a group go
  // whose last member left, and adds the word to sleep on to `watch`. False if the group is
  // gone.
  bool pass(wait_hub_group& g, std::vector<platform::futex_watch>& watch,
            std::vector<wait_hub_group*>& watched, wait_hub_member*& wakes) {
    const bool woken = std::exchange(g.seq_woken, false) && g.watched_seq;
    if (g.wanting != 0 && !g.taken && (woken || rang(g))) {
      g.taken = true;  // left down until a member arms, right before it looks (F1)
      wake_members(g, nullptr, wakes);
    } else {
      forward_unwanted_wake(g, woken);
    }
    g.watched_seq = false;
    if (g.members.empty() && g.gone) {
      // Its last member's destructor waits for this: our last futex_waitv has returned, so a
      // wake it took shows (futex_seq moved, or its index came back), and
      // forward_unwanted_wake above passed it on (F2). The slot goes back only now: while we
      // were still queued on its word, a sleeper that took it over would have had its first
      // FUTEX_WAKE go to us.
      if (g.slot != no_slot) release_slot(*g.queue, g.slot, sleeper_id_, false);
      *g.gone = true;
      std::erase(groups_, &g);
      delete &g;
      retired_.notify_all();
      return false;
    }
    if (g.wanting == 0 || g.taken) return true;
    if (g.slot != no_slot) {
      watch.push_back({&g.queue->slots[g.slot].armed, 1, true});
    } else {
      watch.push_back({&g.queue->futex_seq, g.seq, true});
      g.watched_seq = true;
    }
    watched.push_back(&g);
    return true;
  }

  void run() {
    {
      std::lock_guard lock(mutex_);
      sleeper_id_ = layout::slot_sleeper_bit | std::uint64_t{platform::process_id()} << 32 |
                    platform::thread_id();
    }
    started_.notify_all();
    std::vector<platform::futex_watch> watch;
    std::vector<wait_hub_group*> watched;  // the group of watch[i + 1]
    int woken = -1;
    int idle_returns = 0;  // futex_waitv returned at once, and the pass after woke nobody
    for (;;) {
      {
        std::unique_lock lock(mutex_);
        // Every entry up to the index futex_waitv returned may have been woken (it reports the
        // highest): a group's futex_seq wake there counts as a ring. The groups are still
        // there: only this thread deletes them, in pass().
        for (int i = 1; i <= woken && static_cast<std::size_t>(i) <= watched.size(); ++i)
          watched[static_cast<std::size_t>(i) - 1]->seq_woken = true;
        watch.clear();
        watched.clear();
        // acquire: as in poke().
        // Watched as a shared word: poke() wakes it with platform::futex_wake, which is not
        // FUTEX_PRIVATE, and a private wait would never match it.
        const std::uint32_t control_before = seen_control_;
        seen_control_ = control_.load(std::memory_order_acquire);
        watch.push_back({&control_, seen_control_, true});
        wait_hub_member* wakes = nullptr;
        for (std::size_t i = 0; i < groups_.size();)
          i += pass(*groups_[i], watch, watched, wakes) ? 1 : 0;
        ++passes_;
        // Idle: the wait returned at once, and neither a poke (a member arming or leaving)
        // nor a ring came of it.
        idle_returns =
            woken < 0 && wakes == nullptr && seen_control_ == control_before ? idle_returns + 1 : 0;
        // A wake posts to the member's executor, the user's code: not under the mutex. A ring
        // from here to the futex_waitv below is kept by the words themselves.
        call_wakes(lock, wakes);
      }
      // A word that never holds what a pass expects (damaged shared memory) or a call that
      // keeps failing would return at once for ever: the thread would burn a CPU. Such
      // returns in a row make it pause between passes (a real change is rare between a pass
      // and its wait, and is then found by the next pass).
      if (idle_returns > idle_returns_before_pause)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      woken = platform::futex_wait_any(watch.data(), watch.size());
    }
  }

  const std::uint32_t pid_;
  std::atomic<std::uint32_t> control_{0};
  std::uint32_t seen_control_ = 0;  // control_ as the last pass loaded it (under the mutex)
  std::uint64_t passes_ = 0;        // passes made (under the mutex)
  std::condition_variable started_;
  std::uint64_t sleeper_id_ = 0;
};

// The process's shards. A child forked from a process with hub threads has none of them: it
// starts afresh (the parent's are left alone, unused).
struct hub_state {
  std::mutex mutex;
  std::vector<shard*> shards;  // never freed: their threads live as long as the process
};
hub_state* state = nullptr;
std::once_flag state_once;

bool futex_waitv_works() {
  // A word that differs from the value given returns at once: -1 where the call exists.
  static const bool works = [] {
    std::atomic<std::uint32_t> word{1};
    const platform::futex_watch probe{&word, 0, false};
    return platform::futex_wait_any(&probe, 1) == -1;  // "the value differed", as it does
  }();
  return works;
}

hub_state& hubs() {
  std::call_once(state_once, [] {
    state = new hub_state;
    ::pthread_atfork(nullptr, nullptr, [] { state = new hub_state; });
  });
  return *state;
}

}  // namespace

std::unique_ptr<wait_hub_member> wait_hub::join(layout::wait_queue& q, std::function<void()> wake) {
  if (!futex_waitv_works()) return nullptr;
  hub_state& hs = hubs();
  std::lock_guard hub_lock(hs.mutex);
  // The group of this queue, in whichever shard has it; else a shard with room.
  shard* target = nullptr;
  wait_hub_group* group = nullptr;
  for (shard* s : hs.shards) {
    std::lock_guard lock(s->mutex_);
    for (wait_hub_group* g : s->groups_)
      if (g->queue == &q && !g->gone) group = g;  // not one its last member is retiring
    if (group) {
      target = s;
      break;
    }
    if (!target && s->groups_.size() < shard::capacity) target = s;
  }
  if (!target) {
    try {
      target = new shard;
    } catch (const std::exception&) {
      return nullptr;  // no thread (or memory) to be had: the caller polls
    }
    hs.shards.push_back(target);
  }
  std::unique_ptr<wait_hub_member> m(new wait_hub_member);
  m->wake_ = std::move(wake);
  std::lock_guard lock(target->mutex_);
  // Found under a lock since dropped: its last member's destructor (which takes only the
  // shard's mutex) may have retired it, and the hub thread deleted it, meanwhile.
  if (group &&
      (std::find(target->groups_.begin(), target->groups_.end(), group) == target->groups_.end() ||
       group->gone))
    group = nullptr;
  if (group) {
    group->members.push_back(m.get());  // may throw: the caller polls, nothing changed
  } else {
    // Made whole before the hub thread can see it (a group without members is one being let go).
    auto fresh = std::make_unique<wait_hub_group>();
    fresh->queue = &q;
    fresh->owner = target;
    fresh->members.push_back(m.get());
    target->groups_.reserve(target->groups_.size() + 1);
    // The hub thread takes a slot as a blocking sleeper would; with none free the group
    // counts itself among the queue's sleepers when it arms.
    fresh->slot = claim_slot(q, target->sleeper_id(), false);
    group = fresh.release();
    target->groups_.push_back(group);  // room reserved: cannot throw
  }
  m->group_ = group;
  return m;
}

bool wait_hub::settled() noexcept {
  hub_state& hs = hubs();
  std::lock_guard hub_lock(hs.mutex);
  for (shard* s : hs.shards) {
    std::lock_guard lock(s->mutex_);
    if (!s->settled()) return false;
  }
  return true;
}

std::uint64_t wait_hub::passes() noexcept {
  hub_state& hs = hubs();
  std::lock_guard hub_lock(hs.mutex);
  std::uint64_t n = 0;
  for (shard* s : hs.shards) {
    std::lock_guard lock(s->mutex_);
    n += s->passes();
  }
  return n;
}

void wait_hub_member::arm() noexcept {
  wait_hub_group& g = *group_;
  auto& s = *g.owner;
  wait_hub_member* wakes = nullptr;  // called with the mutex dropped (none unless a ring is found)
  std::unique_lock lock(s.mutex_);
  if (!wanting_) {
    wanting_ = true;
    if (g.wanting++ == 0) {
      // The first member to want a ring arms for the group: the slot, or a sleeper's count.
      if (g.slot != no_slot) {
        detail::arm(*g.queue, g.slot);  // seq_cst inside: before the caller's re-check
      } else {
        // seq_cst: counted before the caller re-checks; then the sequence to sleep on.
        g.queue->parked.fetch_add(layout::parked_sleeper_unit, std::memory_order_seq_cst);
        fence_after_arming(*g.queue);
        g.seq = g.queue->futex_seq.load(std::memory_order_seq_cst);
      }
      s.poke();
      rang_ = false;
      return;
    }
  }
  // The group is armed already (that arming happened before this call, under the mutex, so
  // it is ordered before our caller's re-check), unless it took a ring: the hub thread woke
  // every member for it and left the arming to us, or it has not seen it yet, and then this is
  // that ring, for every member. We arm again, look next, and the hub thread watches again.
  const bool unseen = !g.taken && shard::rang(g);
  if (g.taken || unseen) {
    shard::rearm(g);
    if (unseen) shard::wake_members(g, this, wakes);
    s.poke();
  }
  rang_ = false;  // our caller looks next
  s.call_wakes(lock, wakes);
}

void wait_hub_member::withdraw() noexcept {
  wait_hub_group& g = *group_;
  auto& s = *g.owner;
  std::unique_lock lock(s.mutex_);
  if (!wanting_) return;
  wanting_ = false;
  // A ring the group took in after our last arming, whose re-check we leave without making
  // (cancelled, or done with a result found before): it may have been the one a wake-one
  // signaller meant for the queue, and the group's arming may no longer show it (another
  // member armed again since): pass it on (models/wake_hub.pml, H2).
  bool forward = std::exchange(rang_, false);
  if (--g.wanting != 0) {
    if (forward) notify_one(*g.queue);
    return;
  }
  // A ring the hub thread took in that no member looked for since (no one armed again).
  forward = std::exchange(g.taken, false) || forward;
  if (g.slot != no_slot) {
    // A claim we did not take was a ring for one waiter: pass it on (wait_queue.hpp).
    forward = !detail::disarm(*g.queue, g.slot) || forward;
  } else {
    g.queue->parked.fetch_sub(layout::parked_sleeper_unit, std::memory_order_acq_rel);
  }
  s.poke();
  if (forward) notify_one(*g.queue);
}

wait_hub_member::~wait_hub_member() {
  if (!group_) return;
  wait_hub_group* g = group_;
  auto& s = *g->owner;
  // A forked child's copy of a parent's membership: its group, slot and count are the
  // parent's, whose hub thread goes on parking for them, and the copied mutex may have been
  // held at the fork. Closing an inherited handle only unmaps it; the copy is left alone.
  if (!s.runs_here()) return;
  withdraw();
  std::unique_lock lock(s.mutex_);
  std::erase(g->members, this);
  // Decided now, under the mutex that the erase took: another member may leave while we wait
  // below, and only one may retire the group.
  bool gone = false;
  const bool last = g->members.empty();
  if (last) {
    // The hub thread may sleep on the group's word, or have taken a wake on futex_seq that was
    // meant for another sleeper: it lets the group go (and its slot) in its next pass, which
    // passes such a wake on, and the queue's memory stays until then (F2). join() skips it
    // from now on.
    g->gone = &gone;
    s.poke();
  }
  // A wake gathered for us may still be on a list or being called: what it posts to may go
  // once we return. (The group may be gone by then: the lists link members, not groups.)
  s.wakes_done_.wait(lock, [&] { return !wake_outstanding(); });
  if (last) s.retired_.wait(lock, [&] { return gone; });
}

}  // namespace shmio::detail
