#include "shmio/detail/wait_hub.hpp"

#include <pthread.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "shmio/detail/platform.hpp"
#include "shmio/detail/wait_queue.hpp"

namespace shmio::detail {
namespace {

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
  // The hub thread's last futex_waitv watched futex_seq for the group (no slot).
  bool watched_seq = false;
  std::vector<wait_hub_member*> members;
};

namespace {

// One hub thread and the groups it parks for: at most futex_wait_any_max - 1 of them (one word
// each, and the control word).
class shard {
 public:
  static constexpr std::size_t capacity = platform::futex_wait_any_max - 1;

  shard() {
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

  // A group's queue rang (or was found claimed): its members look again. Under the mutex.
  static void wake_members(wait_hub_group& g, const wait_hub_member* except) {
    for (wait_hub_member* m : g.members)
      if (m != except) {
        m->rang();
        m->wake_now();
      }
  }

  // A futex_seq wake the hub thread took while the group wanted none (its last member left
  // while the thread still slept on the word): it was meant for a counted sleeper of the queue,
  // and a wake-one signaller woke nobody else. Passes it on. Under the mutex.
  static void forward_unwanted_wake(wait_hub_group& g) noexcept {
    if (!g.watched_seq || g.slot != no_slot || g.wanting != 0) return;
    // seq_cst: as take_ring's load.
    const std::uint32_t seq = g.queue->futex_seq.load(std::memory_order_seq_cst);
    if (seq == g.seq) return;
    g.seq = seq;
    notify_one(*g.queue);  // models/wake_hub.pml, H1
  }

  // Re-arms a group whose slot a signaller claimed, or takes in a futex_seq that moved; true if
  // the group's members must look again. Under the mutex.
  static bool take_ring(wait_hub_group& g) noexcept {
    if (g.wanting == 0) return false;
    if (g.slot != no_slot) {
      // seq_cst: the re-check that the members make after our wake must come after this.
      if (g.queue->slots[g.slot].armed.load(std::memory_order_seq_cst) != 0) return false;
      arm(*g.queue, g.slot);  // seq_cst inside
      return true;
    }
    const std::uint32_t seq = g.queue->futex_seq.load(std::memory_order_seq_cst);
    if (seq == g.seq) return false;
    g.seq = seq;
    return true;
  }

 private:
  void run() {
    {
      std::lock_guard lock(mutex_);
      sleeper_id_ = layout::slot_sleeper_bit | std::uint64_t{platform::process_id()} << 32 |
                    platform::thread_id();
    }
    started_.notify_all();
    std::vector<platform::futex_watch> watch;
    for (;;) {
      {
        std::lock_guard lock(mutex_);
        watch.clear();
        // acquire: as in poke().
        // Watched as a shared word: poke() wakes it with platform::futex_wake, which is not
        // FUTEX_PRIVATE, and a private wait would never match it.
        watch.push_back({&control_, control_.load(std::memory_order_acquire), true});
        for (wait_hub_group* g : groups_) {
          if (take_ring(*g))
            wake_members(*g, nullptr);
          else
            forward_unwanted_wake(*g);
          g->watched_seq = false;
          if (g->wanting == 0) continue;
          if (g->slot != no_slot) {
            watch.push_back({&g->queue->slots[g->slot].armed, 1, true});
          } else {
            watch.push_back({&g->queue->futex_seq, g->seq, true});
            g->watched_seq = true;
          }
        }
      }
      platform::futex_wait_any(watch.data(), watch.size());
    }
  }

  std::atomic<std::uint32_t> control_{0};
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
    return platform::futex_wait_any(&probe, 1) != -2;
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
      if (g->queue == &q) group = g;
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
  if (!group) {
    group = new wait_hub_group;
    group->queue = &q;
    group->owner = target;
    // The hub thread takes a slot as a blocking sleeper would; with none free the group
    // counts itself among the queue's sleepers when it arms.
    group->slot = claim_slot(q, target->sleeper_id(), false);
    target->groups_.push_back(group);
  }
  group->members.push_back(m.get());
  m->group_ = group;
  return m;
}

void wait_hub_member::arm() noexcept {
  wait_hub_group& g = *group_;
  auto& s = *g.owner;
  std::lock_guard lock(s.mutex_);
  if (!wanting_) {
    wanting_ = true;
    if (g.wanting++ == 0) {
      // The first member to want a ring arms for the group: the slot, or a sleeper's count.
      if (g.slot != no_slot) {
        detail::arm(*g.queue, g.slot);  // seq_cst inside: before the caller's re-check
      } else {
        // seq_cst: counted before the caller re-checks; then the sequence to sleep on.
        g.queue->parked.fetch_add(layout::parked_sleeper_unit, std::memory_order_seq_cst);
        g.seq = g.queue->futex_seq.load(std::memory_order_seq_cst);
      }
      s.poke();
      rang_ = false;
      return;
    }
  }
  // The group is armed already (that arming happened before this call, under the mutex, so
  // it is ordered before our caller's re-check), unless a signaller has claimed it and the hub
  // thread has not yet seen it: then this is that ring, for every member.
  if (shard::take_ring(g)) {
    shard::wake_members(g, this);
    s.poke();
  }
  rang_ = false;  // our caller looks next
}

void wait_hub_member::withdraw() noexcept {
  wait_hub_group& g = *group_;
  auto& s = *g.owner;
  std::unique_lock lock(s.mutex_);
  if (!wanting_) return;
  wanting_ = false;
  // A ring the group took in after our last arming, whose re-check we leave without making
  // (cancelled, or done with a result found before): it may have been the one a wake-one
  // signaller meant for the queue, and the group's arming no longer shows it (the hub thread
  // re-armed the slot): pass it on (models/wake_hub.pml, H2).
  bool forward = std::exchange(rang_, false);
  if (--g.wanting != 0) {
    if (forward) notify_one(*g.queue);
    return;
  }
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
  withdraw();
  wait_hub_group* g = group_;
  auto& s = *g->owner;
  std::lock_guard lock(s.mutex_);
  std::erase(g->members, this);
  if (!g->members.empty()) return;
  // The last member: the slot goes back before the queue's memory can go.
  if (g->slot != no_slot) release_slot(*g->queue, g->slot, s.sleeper_id(), false);
  std::erase(s.groups_, g);
  delete g;
  s.poke();
}

}  // namespace shmio::detail
