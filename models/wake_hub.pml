/*
 * wake_hub.pml -- the wait hub: group parking for async waits that found no wait slot of their
 * own (src/wait/wait_hub.cpp), on one queue shared with ordinary waiters.
 *
 * Mirrors (the code as it is, with the fixes of F1, F2 and N1 in models/README.md):
 *   src/wait/wait_hub.cpp    wait_hub_member::arm (the first member to want a ring arms the
 *                            group: the slot, or a sleeper's count and the futex_seq to sleep
 *                            on; a later one, if the group is `taken` or rang() with a ring the
 *                            hub thread has not seen, re-arms it (shard::rearm), wakes the
 *                            others for an unseen ring, and pokes the hub thread),
 *                            wait_hub_member::withdraw (forward = rang_; the last wanting member
 *                            also takes `taken` (exchange), withdraws the group's arming, pokes,
 *                            and passes a claim or a taken ring on with notify_one),
 *                            ~wait_hub_member (RETIRE: the last member pokes and waits for the
 *                            hub thread's pass to let the group go),
 *                            shard::run, shard::pass (the hub thread, under the mutex: a wanted
 *                            group that is not `taken` and was woken on its futex_seq or
 *                            rang() is marked `taken` and its members woken; else
 *                            forward_unwanted_wake, for which a wake on futex_seq counts as a
 *                            move of it; a group with no members is deleted; the group's word
 *                            is watched only while it is wanted and not taken; then
 *                            futex_waitv on control_ and the words, whose returned index run()
 *                            keeps: `seq_woken`, N1),
 *                            shard::rang, shard::rearm, shard::poke, shard::wake_members,
 *                            shard::forward_unwanted_wake
 *   src/wait/waiter.cpp      a member object: park (arm_for -> arm, take_ready,
 *                            withdraw_and_forward -> withdraw), recheck (posted by the hub's
 *                            wake function: arm_for, take_ready, withdraw_and_forward), cancel
 *                            (complete -> withdraw_and_forward). The look is made after every
 *                            arming here, as in the code (arm_for does not arm for a head the
 *                            op queue's gate holds: F3); the gate is not modelled.
 *   src/wait/wait_queue.cpp  notify_all, notify_one, claim_and_ring, wake_sleepers, arm (count
 *                            first), disarm, sleeper: as wake_protocol.pml checks them, in the
 *                            form the code has now
 * Besides the group, ordinary waiters share the queue: async waiters with a slot and a doorbell
 * of their own (`awaiter`), blocking waiters with a slot (`fwaiter`) and blocking waiters that
 * found none (`swaiter`, counted on futex_seq), as in wake_protocol.pml.
 *
 * The condition: an event's (notify_all) is one bit, set() sets it, an auto-reset look takes it
 * with CAS 1 -> 0, a manual-reset look reads it. A wake-one queue's (SET_NOTIFY_ONE, auto-reset:
 * a ring's publish) counts messages: set() adds one, a successful look takes exactly one. So
 * two rings that one look answers leave a message behind, where one bit would merge them.
 *
 * Modelling rule, as in wake_protocol.pml: one Promela step is one atomic instruction or one
 * system call (load, store, exchange, CAS, fetch_add, sendto, recv, futex_wait, futex_waitv,
 * futex_wake), and the orders the protocol depends on are seq_cst, so interleaving is the right
 * semantics. d_steps also hold ghost bookkeeping and the harness, which the protocol never reads.
 * Beyond that, steps are merged only where no interleaving is lost:
 *   - The shard's mutex is a lock bit. Signallers and ordinary waiters never take it, so their
 *     steps interleave with a holder's. Taking it is merged into the holder's next step and
 *     releasing it into the step before (an acquisition commutes with any other thread's step
 *     that could follow it, a release with any that could precede it). What only holders read
 *     or write (the group's wanting count, seq and taken, each member's wanting_ and rang_)
 *     goes with the step next to it.
 *   - Coming back from a sleep is merged into the sleeper's next step: only the sleeper sets
 *     its wait flag, so once a waker cleared it nothing can tell the two apart (KERNEL_LAZY
 *     gives the hub thread's return from futex_waitv a step of its own).
 *   - A poke (with the unlock after it) is one step, and the posts of one wake_members go with
 *     the holder's step next to them; POKE_UNLOCK and WAKE_MEMBERS say why.
 * The hub's wake function is waiter::post_recheck: it queues a re-check on the member's
 * executor (`posted[m]`); the re-check runs later under the member's own mutex. A member is
 * one process: its mutex and its executor keep its park, its re-checks and its cancel in order.
 *
 * Not modelled: joining the group (the group exists, with its slot or without one, before the
 * first wait; leaving it only with RETIRE, after every member's last wait), slot release and
 * dead owners, several groups or shards (so run()'s rule that every group at or below the index
 * futex_waitv returned counts as woken is not exercised: with one group the index is its own;
 * models/README.md, N1, says why the rule is sound), spinning before parking (members park at once, as
 * with no spin budget), several pending operations on one member and the op queue's gate
 * (F3), the re-check timers (they would turn a lost wake-up into a delay and hide it), poll
 * mode (no futex_waitv), spurious returns from futex_waitv (another pass of the loop).
 * FUTEX_WAKE(&futex_seq, 1) wakes any one thread queued there (futex(2) promises no order).
 *
 * Configuration (spin -DNAME=value):
 *   AUTO_RESET=1|0  auto-reset event (a wait takes the signal with CAS 1->0) | manual-reset
 *   NM=1..3         members of the group (async waiters on the queue with no slot)
 *   MROUNDS=1..     waits each member makes, one after another
 *   GSLOT=1|0       the group holds a slot (the hub thread sleeps on its armed word) | none was
 *                   free (the group counts itself among the sleepers, the hub sleeps on
 *                   futex_seq)
 *   NA=0..2         ordinary async waiters (a slot and a doorbell each; one wait each)
 *   NF=0..2         ordinary blocking waiters with a slot (futex on `armed`)
 *   NS=0..2         ordinary blocking waiters without a slot (counted on futex_seq)
 *   NSIG=1..3       signallers, each calls set() once
 *   SERIAL=0|1      harness: the signallers take turns (each publishes and notifies before the
 *                   next starts), as one producer thread publishing several messages does
 *   CANCEL=0|1      one cancellation, of any pending member's or async waiter's wait, at any
 *                   moment it is pending
 *   SET_NOTIFY_ONE  set() wakes one (notify_one), as the node ring's publish and release do,
 *                   and counts messages; else notify_all, as event_view::set does
 *   RETIRE=0|1      after its last wait each member leaves the group (~wait_hub_member); the
 *                   last one's leaving lets the group go
 *   KERNEL_LAZY=0|1 the kernel keeps the hub thread queued on every word of its futex_waitv
 *                   until it returns: a FUTEX_WAKE on futex_seq after a poke woke it still
 *                   counts it (and futex_waitv then returns futex_seq's index)
 * Variants (spin -DNAME; check.sh --findings):
 *   WAKE_BEFORE_REARM  arm() posts the other members' re-checks for an unseen ring before it
 *                      re-arms (with MUTANT_HUB_REARMS: the hub thread's take_ring, as before)
 *   WITHDRAW_EACH      every member's withdraw withdraws the group's arming, even while other
 *                      members still want a ring (a group with a slot: GSLOT=1)
 * Mutants (spin -DNAME; check.sh --mutant: each must fail):
 *   MUTANT_NO_RECHECK  a member parks right after arming through the group, with no re-check
 *   MUTANT_NO_POKE     the first member to want a ring arms the group but does not poke the
 *                      hub thread, which so goes on sleeping without the group's word
 *   MUTANT_NO_MISSED_FORWARD  a member that withdraws does not pass on a ring the group took
 *                      in after its last arming (rang_; wake-one: finding H2)
 *   MUTANT_NO_EATEN_FORWARD   the hub thread does not pass on a futex_seq wake it took while
 *                      no member wanted one (no slot, wake-one: finding H1)
 *   MUTANT_HUB_REARMS  the code before the fix of F1: no `taken`; shard::take_ring (the hub
 *                      thread's and arm()'s) re-arms the slot, or takes futex_seq in, as soon
 *                      as it sees a ring, and the hub thread watches the word again at once
 *   MUTANT_NO_REARM_POKE      arm() re-arms a taken group but does not poke the hub thread
 *   MUTANT_NO_TAKEN_FORWARD   the last withdraw does not forward a ring left `taken`
 *   MUTANT_RETIRE_IN_DTOR     (RETIRE) the code before the fix of F2: the last member's
 *                      destructor deletes the group at once; the hub thread's next pass does
 *                      not see it, so forward_unwanted_wake never runs for it
 *   MUTANT_NO_SEQ_WAKE_RING   (no slot) the code before the fix of N1: run() drops
 *                      futex_wait_any's index, so a FUTEX_WAKE on futex_seq that woke the hub
 *                      thread counts only if futex_seq differs from the group's seq, in pass()
 *                      and in forward_unwanted_wake alike
 * The names of the code are in models/README.md's findings H1-H5, F1-F3 and N1.
 */

#ifndef AUTO_RESET
#define AUTO_RESET 1
#endif
#ifndef NM
#define NM 2
#endif
#ifndef MROUNDS
#define MROUNDS 1
#endif
#ifndef GSLOT
#define GSLOT 1
#endif
#ifndef NA
#define NA 0
#endif
#ifndef NF
#define NF 1
#endif
#ifndef NS
#define NS 0
#endif
#ifndef NSIG
#define NSIG 1
#endif
#ifndef CANCEL
#define CANCEL 0
#endif
#ifndef RETIRE
#define RETIRE 0
#endif
#ifndef SERIAL
#define SERIAL 0
#endif
#ifndef KERNEL_LAZY
#define KERNEL_LAZY 0
#endif
/* A wake-one queue carries messages: one set() is one message, one successful look takes one
   (a ring's publish and a reader's claim). An event (notify_all) is one bit. */
#if defined(SET_NOTIFY_ONE) && AUTO_RESET
#define COUNTING 1
#else
#define COUNTING 0
#endif
#define CAP 1                    /* doorbell queue capacity in datagrams */
#define G (NA + NF)              /* the group's slot, if it has one */
#define SLOTS (NA + NF + GSLOT)  /* slots: the awaiters', the slot sleepers', the group's */
#define NOPS (NA + NM)           /* cancellable waits: the awaiters' 0..NA-1, the members' */

/* ---------------- shared memory ---------------- */
#if COUNTING
byte  cond;                 /* messages published and not yet taken */
#else
bit   cond;                 /* event_state::signalled */
#endif
bit   armed[SLOTS + 1];     /* wait_queue::slots[i].armed (one spare: SLOTS may be 0) */
short parked_a;             /* wait_queue::parked, high half: armed slots */
short parked_s;             /* wait_queue::parked, low half: futex sleepers */
byte  seq;                  /* wait_queue::futex_seq */

/* ---------------- the hub (memory of the process) ---------------- */
bit   hub_lock;             /* shard::mutex_ */
bit   poked;                /* shard::control_ has moved since the hub thread loaded it */
byte  gwanting;             /* wait_hub_group::wanting (under the mutex) */
byte  gseq;                 /* wait_hub_group::seq (under the mutex; no slot) */
bit   gtaken;               /* wait_hub_group::taken (under the mutex): the hub thread took a
                               ring in and left the group's arming down for a member to renew */
byte  gleft;                /* members that have left the group (RETIRE; under the mutex) */
bit   gretired;             /* the group is out of the hub thread's list (deleted) */
bit   mrang[NM];            /* wait_hub_member::rang_: the group took a ring in since the
                               member's last arming (under the mutex) */
bit   wanting[NM];          /* wait_hub_member::wanting_ (under the mutex) */
byte  posted[NM];           /* re-checks posted to member m's executor, not yet run */
bit   mdone[NM];            /* member m has made all its waits: a re-check would find nothing
                               pending, so none is counted for it any more */

/* ---------------- kernel ---------------- */
byte  bell[NA + 1];         /* datagrams queued on awaiter i's doorbell socket */
bit   fsleep[NS + 1];       /* futex queue of &futex_seq: blocking waiter j is asleep */
bit   fslot[SLOTS + 1];     /* futex queue of &slots[i].armed: slot sleeper i is asleep */
bit   hub_asleep;           /* the hub thread is in futex_waitv, on control_ and ... */
bit   hub_on_slot;          /* ... the group's slot word, */
bit   hub_on_seq;           /* ... or futex_seq (or neither: nobody wants a ring) */
bit   hub_seq_woken;        /* wait_hub_group::seq_woken (under the mutex): futex_waitv
                               returned the index of the group's futex_seq (a FUTEX_WAKE on
                               it woke the hub thread). One group: its index is the highest,
                               so run()'s "every group up to the index returned" is this one */

/* ---------------- ghosts (assertions only) and harness ---------------- */
byte  sets;                 /* set() calls that have published */
byte  completions;          /* waits that completed successfully */
byte  cancels;              /* waits that completed with operation_aborted */
byte  waiting;              /* waits started and not completed */
byte  sdone;                /* blocking waiters without a slot that returned */
#if SERIAL
byte  sigturn;              /* harness: the signaller whose turn it is */
#endif
bit   op_pending[NOPS];     /* harness: wait n is pending (its cancellation slot is live) */
bit   cancel_req[NOPS];     /* harness: a cancellation was emitted for wait n */

/* parked's halves go down only here, checked in the same step */
#define DEC_A  d_step { parked_a--; assert(parked_a >= 0) }
#define DEC_S  d_step { parked_s--; assert(parked_s >= 0) }

/* event_view::try_take: one atomic op (auto: CAS 1 -> 0; manual: load) */
#if AUTO_RESET
#define TRY_BODY(got)                                                              \
  if                                                                               \
  :: cond > 0 -> cond--; got = 1; completions++; waiting--;                        \
                  assert(completions <= sets)                                      \
  :: else -> got = 0                                                               \
  fi
#else
#define TRY_BODY(got)                                                              \
  got = cond;                                                                      \
  if                                                                               \
  :: got -> completions++; waiting--                                               \
  :: else                                                                          \
  fi
#endif

/* ---------------- wait_queue.cpp ---------------- */

/* ring_owner: an awaiter's doorbell, sendto(MSG_DONTWAIT) (a full queue drops it: a ring is
   pending); a slot sleeper's word, FUTEX_WAKE(&armed, 1): the group's slot is the hub
   thread's, which sleeps on it as a slot sleeper does */
#define RING(k)  d_step { if                                                       \
                          :: k < NA && bell[k] < CAP -> bell[k]++                  \
                          :: k >= NA && k < G -> fslot[k] = 0                      \
                          :: k == G && hub_asleep && hub_on_slot -> hub_asleep = 0 \
                          :: else -> skip                                          \
                          fi }

/* claim_and_ring: CAS(armed 1 -> 0); the winner does parked -= 1<<32 and rings */
inline claim_and_ring(k, ok)
{
  d_step {
    if
    :: armed[k] == 1 -> armed[k] = 0; ok = 1
    :: else -> ok = 0
    fi
  };
  if
  :: ok -> DEC_A; RING(k)
  :: else
  fi
}

/* A FUTEX_WAKE on futex_seq that takes the hub thread makes its futex_waitv return futex_seq's
   index, which run() keeps for the next pass (seq_woken; N1). MUTANT_NO_SEQ_WAKE_RING: it
   drops it. (The model sets the flag in the waker's step: only the hub thread reads it, in the
   pass after it has returned, so this is the same as setting it at the return.) */
#ifndef MUTANT_NO_SEQ_WAKE_RING
#define SEQ_WOKEN  hub_seq_woken = 1
#else
#define SEQ_WOKEN  skip
#endif
/* The hub thread is queued on futex_seq: asleep on it, or (KERNEL_LAZY) woken on another word
   and not yet returned from futex_waitv, which leaves it on every word until it runs: a
   FUTEX_WAKE there counts it among those it wakes, and futex_waitv returns the highest index
   woken, futex_seq's (control_ is index 0). */
#if KERNEL_LAZY
#define HUB_ON_SEQ  hub_on_seq
#define SEQ_OFF     hub_on_seq = 0                 /* the wake takes it off futex_seq */
#else
#define HUB_ON_SEQ  (hub_asleep && hub_on_seq)
#define SEQ_OFF     skip
#endif

/* FUTEX_WAKE(&futex_seq, INT_MAX): every blocking waiter asleep on it, and the hub thread if
   it sleeps on it */
#define WAKE_SEQ_ALL                                                               \
  d_step {                                                                         \
    k = 0;                                                                         \
    do                                                                             \
    :: k < NS -> fsleep[k] = 0; k++                                                \
    :: else -> break                                                               \
    od;                                                                            \
    k = 0;                                                                         \
    if                                                                             \
    :: HUB_ON_SEQ -> hub_asleep = 0; SEQ_WOKEN; SEQ_OFF                      \
    :: else                                                                        \
    fi                                                                             \
  }

/* FUTEX_WAKE(&futex_seq, 1): any one of the threads asleep on it (the kernel's choice) */
#define WAKE_SEQ_ONE                                                               \
  atomic {                                                                         \
    if                                                                             \
    :: fsleep[0] == 1 -> fsleep[0] = 0                                             \
    :: NS > 1 && fsleep[NS - 1] == 1 -> fsleep[NS - 1] = 0                         \
    :: HUB_ON_SEQ -> hub_asleep = 0; SEQ_WOKEN; SEQ_OFF                      \
    :: else -> skip                                                                \
    fi                                                                             \
  }

/* notify_all (event_view::set) */
inline notify_all(pa, ps, k, ok)
{
  d_step { pa = parked_a; ps = parked_s };            /* load parked (seq_cst) */
  if
  :: pa == 0 && ps == 0 -> skip                       /* nobody parked: no syscall */
  :: else ->
     if
     :: ps != 0 ->                                    /* wake_sleepers(INT_MAX) */
        seq++;                                        /* futex_seq.fetch_add */
        WAKE_SEQ_ALL
     :: else
     fi;
     if
     :: pa == 0 -> skip                               /* parked < 1<<32: no armed slot */
     :: else ->
        k = 0;
        do
        :: k < SLOTS -> claim_and_ring(k, ok); k++
        :: else -> break
        od
     fi
  fi
}

/* notify_one (the node ring; a forward): wake one sleeper, and ring one armed slot, from a
   start that rotates per thread (any start, here; chosen in the load's step) */
inline notify_one(pa, ps, k, ok, n)
{
  atomic {                                            /* load parked (seq_cst) */
    pa = parked_a; ps = parked_s;
    if
    :: k = 0
#if SLOTS > 1
    :: k = 1
#endif
#if SLOTS > 2
    :: k = 2
#endif
#if SLOTS > 3
    :: k = 3
#endif
    fi
  };
  if
  :: ps != 0 ->                                       /* wake_sleepers(1) */
     seq++;
     WAKE_SEQ_ONE
  :: else
  fi;
  if
  :: pa == 0 -> skip                                  /* (and so parked == 0) */
  :: else ->
     n = 0;
     do
     :: n < SLOTS ->
        claim_and_ring((k + n) % (SLOTS + (SLOTS == 0)), ok);
        if
        :: ok -> break                                /* rang one */
        :: else -> n++
        fi
     :: else -> break
     od
  fi
}

/* arm(q, s), its first step guarded by `ready` (coming back from a sleep, or true):
   parked += 1<<32, exchange(armed, 1), and parked -= 1<<32 if it was armed already */
#define ARM_WHEN(ready, s)                                                         \
  atomic { ready -> parked_a++ };                                                  \
  d_step { old = armed[s]; armed[s] = 1 };                                         \
  if                                                                               \
  :: old == 1 -> DEC_A; old = 0                                                    \
  :: else                                                                          \
  fi
#define ARM(s)  ARM_WHEN(true, s)

/* disarm(q, s), its first step guarded by `ready`: CAS(armed 1 -> 0), then parked -= 1<<32
   if it succeeded; ok = it succeeded. `ghost`: bookkeeping in the CAS's step. */
#define DISARM_WHEN(ready, s, ok, ghost)                                           \
  atomic {                                                                         \
    ready -> ghost;                                                                \
    if                                                                             \
    :: armed[s] == 1 -> armed[s] = 0; ok = 1                                       \
    :: else -> ok = 0                                 /* a signaller claimed it */ \
    fi                                                                             \
  };                                                                               \
  if                                                                               \
  :: ok -> DEC_A                                                                   \
  :: else                                                                          \
  fi
#define DISARM(s, ok)  DISARM_WHEN(true, s, ok, skip)

/* ---------------- wait_hub.cpp: everything here is under the shard's mutex ---------------- */

/* shard::poke: control_.fetch_add(1) (`poked`: only the hub thread reads the word, to compare
   it with the value it loaded), then futex_wake(control_, 1), then the unlock that follows
   every poke, in one step: whether the hub thread's futex_waitv comes between the two and
   returns at once, or sleeps and is woken, it goes round its loop again. */
#define POKE       poked = 1; if :: hub_asleep -> hub_asleep = 0 :: else fi
#define POKE_UNLOCK  d_step { POKE; hub_lock = 0 }

/* shard::rang, its load (seq_cst): the group's slot was found claimed, or futex_seq has moved
   since the group last took it in. shard::rearm: the slot armed again, or futex_seq loaded
   again to sleep on (the caller clears `taken` in its step under the mutex). */
#if GSLOT
#define RANG(ok)   ok = (armed[G] == 0)                      /* armed.load */
#define REARM      ARM(G)                                    /* arm(): seq_cst inside */
#else
#define RANG(ok)   ok = (seq != gseq)                        /* futex_seq.load */
#define REARM      d_step { gseq = seq }                     /* futex_seq.load */
#endif
/* The hub thread's (shard::pass: woken || rang(g)): a FUTEX_WAKE on futex_seq that woke it is
   a ring even where futex_seq equals the group's seq (rearm() loaded it after a notify's
   fetch_add and before that notify's FUTEX_WAKE, which then chose the hub thread: N1) */
#if GSLOT
#define HUB_RANG(ok)  RANG(ok)
#else
#define HUB_RANG(ok)  ok = (seq != gseq || hub_seq_woken)
#endif

/* MUTANT_HUB_REARMS, the code before the fix of F1: shard::take_ring, its load: ok = the group
   wants a ring, and its slot was found claimed (TAKE_IN then re-arms it) or its futex_seq has
   moved (taken in here) */
#if GSLOT
#define RING_SEEN(ok)  ok = (gwanting != 0 && armed[G] == 0)  /* armed.load (seq_cst) */
#define TAKE_IN        ARM(G)                                /* arm(): seq_cst inside */
#else
#define RING_SEEN(ok)                                                              \
  if                                                          /* futex_seq.load */ \
  :: gwanting != 0 && seq != gseq -> gseq = seq; ok = 1                            \
  :: else -> ok = 0                                                                \
  fi
#define TAKE_IN        skip
#endif
/* ... the hub thread's (a wake on futex_seq is a ring here too, as in HUB_RANG) */
#if GSLOT
#define HUB_RING_SEEN(ok)  RING_SEEN(ok)
#else
#define HUB_RING_SEEN(ok)                                                          \
  if                                                                               \
  :: gwanting != 0 && (seq != gseq || hub_seq_woken) -> gseq = seq; ok = 1         \
  :: else -> ok = 0                                                                \
  fi
#endif

/* shard::wake_members: the wake function of every member but `except` (NM: none excepted),
   an asio::post of a re-check to that member's executor, each marked `rang_`. The posts of one
   wake_members go in one step with the poster's step next to them under the mutex: what they
   write only a holder of the mutex reads (the marks; a re-check starts with arm(), which takes
   the mutex), but for a re-check with nothing pending, which reads nothing else. The code
   makes the posts after dropping the mutex (a post calls the user's executor); a post made
   later is only a re-check that the member's executor runs later, which the model's
   executors, free to run at any step, already cover. */
#define WAKE_MEMBERS(except)                                                       \
    x = 0;                                                                         \
    do                                                                             \
    :: x < NM -> if :: x != except -> mrang[x] = 1 :: else fi;                     \
                 if :: x != except && !mdone[x] -> posted[x]++ :: else fi; x++     \
    :: else -> x = 0; break                                                        \
    od

/* wait_hub_member::arm. A posted re-check's (`dequeue`): the step that takes the mutex also
   takes the re-check off the member's executor. `tk`: the group was `taken` (the hub thread
   woke the members for a ring and left its arming down); `ok`: a ring the hub thread has not
   seen (rang() with !taken). Either way this member arms again (rearm), pokes the hub thread
   to watch again, and, for an unseen ring, wakes the others. */
inline hub_arm(m, dequeue, first, ok, tk, old, x)
{
  atomic {
    hub_lock == 0 && (!dequeue || posted[m] > 0) ->   /* lock */
    hub_lock = 1;
    if
    :: dequeue -> posted[m]--
    :: else
    fi;
    first = (!wanting[m] && gwanting == 0);
    if
    :: !wanting[m] -> wanting[m] = 1; gwanting++
    :: else
    fi;
    ok = 0; tk = 0;
    if
    :: !first ->                                      /* armed already, unless ... */
#ifdef MUTANT_HUB_REARMS
       RING_SEEN(ok);                                 /* take_ring */
#else
       tk = gtaken;                                   /* ... taken, or */
       if
       :: !tk -> RANG(ok)                             /* ... rang, unseen (the load) */
       :: else
       fi;
       gtaken = 0;                                    /* rearm() (it was 0 unless tk) */
#endif
       if
       :: !ok && !tk -> hub_lock = 0                  /* (unlock) */
       :: else
       fi
    :: else
    fi;
    mrang[m] = 0                                      /* rang_ = false: it looks next */
  };
  if
  :: first ->                                         /* the first to want arms the group */
#if GSLOT
     ARM(G);                                          /* the slot (seq_cst inside) */
#else
     parked_s++;                                      /* a sleeper's count (seq_cst), ... */
     d_step { gseq = seq };                           /* ... then the seq to sleep on */
#endif
#ifndef MUTANT_NO_POKE
     POKE_UNLOCK;                                     /* the hub thread watches it from now */
#else
     hub_lock = 0;
#endif
     first = 0
  :: ok || tk ->
#ifdef MUTANT_HUB_REARMS
     TAKE_IN;                                         /* a ring the hub thread has not seen: */
     d_step { WAKE_MEMBERS(m); POKE; hub_lock = 0 }   /* ours, the others look again too */
#else
#ifndef WAKE_BEFORE_REARM
     REARM;                                           /* arm again, right before our look */
     d_step {
       if
       :: ok -> WAKE_MEMBERS(m)                       /* unseen: the others look again too */
       :: else
       fi;
#ifndef MUTANT_NO_REARM_POKE
       POKE;                                          /* the hub thread watches again */
#endif
       hub_lock = 0
     };
#else
     d_step { if :: ok -> WAKE_MEMBERS(m) :: else fi };
     REARM;
     POKE_UNLOCK;
#endif
#endif
     ok = 0; tk = 0
  :: else
  fi
}

/* wait_hub_member::withdraw. `missed`: forward = rang_ (H2), and for the last one also
   exchange(taken, false): a ring the hub thread took that no member armed again for. */
inline hub_withdraw(m, last, ok, missed, pa, ps, k, n)
{
  atomic {
    hub_lock == 0 -> hub_lock = 1;                    /* lock */
    last = 0; missed = 0;
    if
#ifndef WITHDRAW_EACH
    :: wanting[m] -> missed = mrang[m]; mrang[m] = 0; wanting[m] = 0; gwanting--;
                     last = (gwanting == 0)
#else
    :: wanting[m] -> missed = mrang[m]; mrang[m] = 0; wanting[m] = 0; gwanting--; last = 1
#endif
    :: else
    fi;
#ifdef MUTANT_NO_MISSED_FORWARD
    missed = 0;
#endif
#ifndef MUTANT_HUB_REARMS
    if
#ifndef MUTANT_NO_TAKEN_FORWARD
    :: last -> missed = missed || gtaken; gtaken = 0
#else
    :: last -> gtaken = 0
#endif
    :: else
    fi;
#endif
    if
    :: !last && !missed -> hub_lock = 0               /* others want it: (unlock) */
    :: else
    fi
  };
  if
  :: last ->                                          /* nobody wants it: withdraw the group's */
#if GSLOT
     DISARM(G, ok);                                   /* forward = missed || !disarm() */
     ok = ok && !missed;
#else
     DEC_S;                                           /* forward = missed */
     ok = !missed;
#endif
     if
     :: ok -> POKE_UNLOCK
     :: else ->
        d_step { POKE };                              /* poke */
        notify_one(pa, ps, k, ok, n);                 /* the claim nobody took goes on */
        atomic { hub_lock = 0; pa = 0; ps = 0; k = 0; n = 0 }   /* (unlock) */
     fi;
     last = 0; ok = 0; missed = 0
  :: !last && missed ->                               /* a ring taken in since our last look */
     notify_one(pa, ps, k, ok, n);                    /* goes on */
     atomic { hub_lock = 0; pa = 0; ps = 0; k = 0; n = 0; ok = 0; missed = 0 }   /* (unlock) */
  :: else
  fi
}

/* The end of the hub thread's pass over the group, under the mutex: a group whose last member
   left is let go (RETIRE: shard::pass deletes it, after forward_unwanted_wake; the member's
   destructor waits for this), else the word to watch: none while nobody wants a ring or the
   group is `taken`; then the unlock. */
#if RETIRE && !defined(MUTANT_RETIRE_IN_DTOR)
#define HUB_RETIRE  if :: gleft == NM -> gretired = 1 :: else fi
#else
#define HUB_RETIRE  skip
#endif
#define HUB_WORDS_UNLOCK                                                           \
  HUB_RETIRE; w = (!gretired && gwanting != 0 && !gtaken); wseq = gseq; hub_lock = 0

/* ---------------- the hub thread: shard::run, shard::pass ---------------- */
proctype hub()
{
  byte wseq, x, pa, ps, k, n;
  bit ok, old, w, watched, eaten;

end_asleep:                                           /* back from futex_waitv: lock */
#if KERNEL_LAZY
  atomic { hub_asleep == 0 -> hub_on_seq = 0; hub_on_slot = 0 };  /* returns: off every word */
#endif
  atomic {
    hub_asleep == 0 && hub_lock == 0 -> hub_lock = 1;
    poked = 0;                                        /* control_.load (acquire) */
    ok = 0; eaten = 0;
    if
    :: gretired -> skip                               /* not in the list any more */
    :: else ->
#ifdef MUTANT_HUB_REARMS
       HUB_RING_SEEN(ok);                             /* take_ring */
#else
       if
       :: gwanting != 0 && !gtaken -> HUB_RANG(ok)    /* wanted, not taken: woken || rang() */
       :: else
       fi;
#endif
#if !GSLOT
#ifndef MUTANT_NO_EATEN_FORWARD
       if                                             /* forward_unwanted_wake: watched */
       :: !ok && watched && gwanting == 0 && (seq != gseq || hub_seq_woken) ->
          gseq = seq; eaten = 1                       /* futex_seq, nobody wants it, and it */
       :: else                                        /* moved or woke us (`woken`, N1) */
       fi;
#endif
#endif
       skip
    fi;
    watched = 0; hub_seq_woken = 0;
#ifndef MUTANT_HUB_REARMS
    if
    :: ok -> gtaken = 1; WAKE_MEMBERS(NM)             /* taken: every member looks, and the */
    :: else                                           /* next to arm arms the group again */
    fi;
    if
    :: !eaten -> HUB_WORDS_UNLOCK; ok = 0             /* the words; unlock */
    :: else
    fi
#else
    if
    :: !ok && !eaten -> HUB_WORDS_UNLOCK              /* the words; unlock */
    :: else
    fi
#endif
  };
  if
  :: eaten ->                                         /* a wake taken for nobody goes on */
     notify_one(pa, ps, k, ok, n);
     atomic { HUB_WORDS_UNLOCK; pa = 0; ps = 0; k = 0; n = 0; ok = 0; eaten = 0 }
  :: else
  fi;
#ifdef MUTANT_HUB_REARMS
  if
  :: ok ->
#ifndef WAKE_BEFORE_REARM
     TAKE_IN;                                         /* re-arm, ... */
     d_step { WAKE_MEMBERS(NM); HUB_WORDS_UNLOCK; ok = 0 }   /* ... then every member looks */
#else
     d_step { WAKE_MEMBERS(NM) };
     TAKE_IN;
     atomic { HUB_WORDS_UNLOCK; ok = 0 }
#endif
  :: else
  fi;
#endif
  d_step {                                            /* futex_waitv: sleep if every word holds */
    if                                                /* its value, else return at once */
#if GSLOT
    :: !poked && (!w || armed[G] == 1) ->
       hub_asleep = 1; hub_on_slot = w; hub_on_seq = 0
#else
    :: !poked && (!w || seq == wseq) ->
       hub_asleep = 1; hub_on_seq = w; hub_on_slot = 0
#endif
    :: else -> skip
    fi;
    watched = w; w = 0; wseq = 0
  };
  goto end_asleep
}

/* ---------------- a member: an async waiter object whose queue has no slot ----------------
   waiter::async_wait (the ready path's attempt), park (arm_for -> hub arm, take_ready,
   withdraw_and_forward -> hub withdraw), recheck (posted by the hub), cancel (complete ->
   withdraw_and_forward) */
proctype member(byte m)
{
  byte r, x, pa, ps, k, n;
  bit got, ok, old, first, last, missed, tk;

  do
  :: r < MROUNDS ->
     d_step {                                         /* async_wait: attempt() */
       waiting++; TRY_BODY(got);
       op_pending[NA + m] = 1 - got
     };
     if
     :: got -> goto complete                          /* posted */
     :: else
     fi;
     hub_arm(m, 0, first, ok, tk, old, x);              /* park(): arm_for, ... */
#ifndef MUTANT_NO_RECHECK
     d_step { TRY_BODY(got) };                        /* ... take_ready */
     if
     :: got -> goto done                              /* withdraw_and_forward */
     :: else
     fi;
#endif
end_parked:
     if
     :: hub_arm(m, 1, first, ok, tk, old, x);            /* recheck(): parked, so arm_for, ... */
        d_step { TRY_BODY(got) };                     /* ... take_ready */
        if
        :: got -> goto done                           /* withdraw_and_forward */
        :: else -> goto end_parked                    /* still parked: nothing to withdraw */
        fi
     :: atomic { cancel_req[NA + m] -> cancels++; waiting-- }   /* cancel(): out of the list */
     fi;
done:                                                 /* none parked: withdraw */
     hub_withdraw(m, last, ok, missed, pa, ps, k, n);
complete:
     atomic { op_pending[NA + m] = 0; cancel_req[NA + m] = 0; r++ }
  :: r > 0 && r < MROUNDS && posted[m] > 0 ->         /* a re-check with nothing pending */
     posted[m]--
  :: else -> atomic { mdone[m] = 1; posted[m] = 0 }; break
  od;
#if RETIRE
  /* ~wait_hub_member: withdraw (done: nothing to withdraw), then leave the group, under the
     mutex; the last one (its slot released: not modelled) pokes the hub thread and waits
     until its pass has let the group go (F2). A wait that never ends is a deadlock. */
  atomic {
    hub_lock == 0 -> gleft++; last = (gleft == NM);
    if
#ifdef MUTANT_RETIRE_IN_DTOR
    :: last -> gretired = 1                           /* out of the list, deleted at once */
#else
    :: last -> POKE                                   /* poke; retired_.wait (unlocks) */
#endif
    :: else
    fi
  };
  if
  :: last -> gretired                                 /* woken: the hub thread let it go */
  :: else
  fi
#endif
}

/* ---------------- ordinary async waiter with a slot (wake_protocol.pml's awaiter) ---------- */
proctype awaiter(byte i)
{
  byte pa, ps, k, n;
  bit got, ok, old;

  d_step {                                            /* async_wait: attempt() */
    waiting++; TRY_BODY(got);
    op_pending[i] = 1 - got
  };
  if
  :: got -> goto complete
  :: else
  fi;
  ARM(i);                                             /* park(): arm, ... */
  d_step { TRY_BODY(got) };                           /* ... re-check */
  if
  :: got -> goto withdraw
  :: else
  fi;
end_parked:
  if                                                  /* watch(): the doorbell */
  :: ARM_WHEN(bell[i] > 0, i);                        /* on_wake, recheck(): re-arm, ... */
     d_step { TRY_BODY(got) };                        /* ... re-check */
     if
     :: got -> goto withdraw
     :: else
     fi;
     do                                               /* still parked: drain_doorbell, */
     :: bell[i] > 0 -> bell[i]--
     :: else -> break
     od;
     ARM(i);                                          /* re-arm, and look again */
     d_step { TRY_BODY(got) };
     if
     :: got -> goto withdraw
     :: else -> goto end_parked
     fi
  :: DISARM_WHEN(cancel_req[i], i, ok, cancels++; waiting--);  /* cancel(): withdraw */
     goto forward
  fi;
withdraw:                                             /* withdraw_and_forward */
  DISARM(i, ok);
forward:
  if
  :: !ok -> notify_one(pa, ps, k, ok, n)              /* a claim we did not use goes on */
  :: else
  fi;
complete:
  atomic { op_pending[i] = 0; cancel_req[i] = 0 }
}

/* ---------------- ordinary blocking waiter with a slot: waiter::wait + sleeper ------------
   Arms its slot, re-checks, futex_wait(&armed, 1); re-arms and re-checks after each wake; on
   the way out (~sleeper: release_slot) disarms, and passes on a claim it did not use. */
proctype fwaiter(byte i)
{
  byte pa, ps, k, n;
  bit got, ok, old;

  d_step { waiting++; TRY_BODY(got) };                /* attempt() */
  if
  :: got -> goto finished
  :: else
  fi;
  ARM(i);                                             /* announce(): arm, ... */
  d_step { TRY_BODY(got) };                           /* ... re-check */
  if
  :: got -> goto withdraw
  :: else
  fi;
sleep:
  atomic {                                            /* futex_wait(&armed, 1) */
    if
    :: armed[i] == 1 -> fslot[i] = 1
    :: else -> skip                                   /* EAGAIN: claimed already */
    fi
  };
end_asleep:
  ARM_WHEN(fslot[i] == 0, i);                         /* woken: announce() again, ... */
  d_step { TRY_BODY(got) };                           /* ... re-check */
  if
  :: got -> goto withdraw
  :: else -> goto sleep
  fi;
withdraw:                                             /* ~sleeper: release_slot */
  DISARM(i, ok);
  if
  :: !ok -> notify_one(pa, ps, k, ok, n)              /* claimed meanwhile: pass it on */
  :: else
  fi;
finished:
  skip
}

/* ---------------- ordinary blocking waiter without a slot: waiter::wait + sleeper ---------- */
proctype swaiter(byte j)
{
  byte old;
  bit got;

  d_step { waiting++; TRY_BODY(got) };                /* attempt() */
  if
  :: got -> sdone++
  :: else ->
     parked_s++;                                      /* announce(): parked += 1 (once) */
     old = seq;                                       /* seq_ = futex_seq.load() */
     do
     :: d_step { TRY_BODY(got) };                     /* the re-check after announcing */
        if
        :: got -> break
        :: else
        fi;
        d_step {                                      /* futex_wait(&futex_seq, seq_) */
          if
          :: seq == old -> fsleep[j] = 1
          :: else -> skip                             /* EAGAIN */
          fi
        };
end_asleep:
        atomic { fsleep[j] == 0 -> old = seq }        /* woken: announce() again */
     od;
     atomic { parked_s--; sdone++; assert(parked_s >= 0) }   /* ~sleeper() */
  fi
}

/* ---------------- signaller: event_view::set, or a wake-one publication ----------------
   SERIAL: the signallers take turns, each publishing and notifying before the next starts,
   as one producer thread publishing several messages in a row does. */
#if SERIAL
#define SERIAL_TURN(i)  sigturn == i ->
#define SERIAL_NEXT     sigturn++
#else
#define SERIAL_TURN(i)
#define SERIAL_NEXT     skip
#endif
proctype signaller(byte i)
{
  byte pa, ps, k, n;
  bit ok;
#if COUNTING
  atomic { SERIAL_TURN(i) cond++; sets++ };           /* the message is published */
#else
  atomic { SERIAL_TURN(i) cond = 1; sets++ };         /* signalled.exchange(1) */
#endif
#ifdef SET_NOTIFY_ONE
  notify_one(pa, ps, k, ok, n);
#else
  notify_all(pa, ps, k, ok);
#endif
  atomic { pa = 0; ps = 0; k = 0; n = 0; ok = 0; SERIAL_NEXT }   /* (locals: harness) */
}

#if CANCEL
/* emits one cancellation, for any one wait, at any moment it is pending (or none) */
proctype canceller()
{
  byte x;
  do
  :: x < NOPS - 1 -> x++
  :: break
  od;
end_idle:
  atomic { op_pending[x] -> cancel_req[x] = 1 }
}
#endif

/* ---------------- end-state monitor ----------------
   `timeout` is executable only when nothing else can move: every process has finished or is
   blocked for ever (parked, asleep). Lost wake-ups show there. */
active proctype monitor()
{
  byte x, ma;
  timeout ->
  /* no lost wake-up: nobody still waits for ever while the event is set (wake-one: while a
     message is there) */
  assert(!(cond > 0 && waiting > 0));
#if COUNTING
  /* every message published is taken once, or still there */
  assert(completions + cond == sets);
#endif
  d_step {
    x = 0; ma = 0;
    do
    :: x < SLOTS -> ma = ma + armed[x]; x++
    :: else -> break
    od
  };
  /* parked == armed slots << 32 | the blocking waiters without a slot still inside their
     wait, and the group if it counts itself (no slot, a member wants a ring) */
  assert(parked_a == ma && parked_s == NS - sdone + (1 - GSLOT) * (gwanting > 0));
#if AUTO_RESET
  assert(completions <= sets);
#endif
}

/* Created in this order so that the depth-first search tries the waiters' steps before the
   signallers': a counterexample, if any, comes sooner. */
init
{
  byte x;
  atomic {
#if CANCEL
    run canceller();
#endif
    x = 0;
    do
    :: x < NSIG -> run signaller(x); x++
    :: else -> break
    od;
    x = 0;
    do
    :: x < NS -> run swaiter(x); x++
    :: else -> break
    od;
    x = NA;
    do
    :: x < G -> run fwaiter(x); x++
    :: else -> break
    od;
    x = 0;
    do
    :: x < NA -> run awaiter(x); x++
    :: else -> break
    od;
    x = 0;
    do
    :: x < NM -> run member(x); x++
    :: else -> break
    od;
    run hub()
  }
}
