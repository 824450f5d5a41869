/*
 * wake_hub.pml -- the wait hub: group parking for async waits that found no wait slot of their
 * own (src/wait/wait_hub.cpp), on one queue shared with ordinary waiters.
 *
 * Mirrors (the code as it is):
 *   src/wait/wait_hub.cpp    wait_hub_member::arm (the first member to want a ring arms the
 *                            group: the slot, or a sleeper's count and the futex_seq to sleep
 *                            on; a later one takes in a ring the hub thread has not seen yet),
 *                            wait_hub_member::withdraw (the last wanting member withdraws the
 *                            group's arming; a claim on the slot is passed on with notify_one),
 *                            shard::run (the hub thread: take_ring and wake_members under the
 *                            mutex, then futex_waitv on the control word and the group's word),
 *                            shard::poke, shard::take_ring, shard::wake_members
 *   src/wait/waiter.cpp      a member object: park (arm_for -> arm, take_ready,
 *                            withdraw_and_forward -> withdraw), recheck (posted by the hub's
 *                            wake function: arm_for, take_ready, withdraw_and_forward), cancel
 *                            (complete -> withdraw_and_forward)
 *   src/wait/wait_queue.cpp  notify_all, notify_one, claim_and_ring, wake_sleepers, arm (count
 *                            first), disarm, sleeper: as wake_protocol.pml checks them, in the
 *                            form the code has now
 * Besides the group, ordinary waiters share the queue: async waiters with a slot and a doorbell
 * of their own (`awaiter`), blocking waiters with a slot (`fwaiter`) and blocking waiters that
 * found none (`swaiter`, counted on futex_seq), as in wake_protocol.pml.
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
 *     or write (the group's wanting count and seq, each member's wanting_) goes with the step
 *     next to it.
 *   - Coming back from a sleep is merged into the sleeper's next step: only the sleeper sets
 *     its wait flag, so once a waker cleared it nothing can tell the two apart.
 *   - A poke (with the unlock after it) is one step, and so are the posts of one wake_members;
 *     POKE_UNLOCK and WAKE_MEMBERS say why.
 * The hub's wake function is waiter::post_recheck: it queues a re-check on the member's
 * executor (`posted[m]`); the re-check runs later under the member's own mutex. A member is
 * one process: its mutex and its executor keep its park, its re-checks and its cancel in order.
 *
 * Not modelled: joining and leaving the group (the group exists, with its slot or without one,
 * before the first wait), slot release and dead owners, several groups or shards, spinning
 * before parking (members park at once, as with no spin budget), several pending operations
 * on one member, the re-check timers (they would turn a lost wake-up into a delay and hide it),
 * poll mode (no futex_waitv), spurious returns from futex_waitv (another pass of the loop).
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
 *   CANCEL=0|1      one cancellation, of any pending member's or async waiter's wait, at any
 *                   moment it is pending
 *   SET_NOTIFY_ONE  set() wakes one (notify_one), as the node ring's publish and release do;
 *                   else notify_all, as event_view::set does
 * Variants (spin -DNAME; check.sh --findings):
 *   WAKE_BEFORE_REARM  the hub thread posts the members' re-checks before it re-arms the slot
 *   WITHDRAW_EACH      every member's withdraw withdraws the group's arming, even while other
 *                      members still want a ring (a group with a slot: GSLOT=1)
 * Mutants (spin -DNAME; check.sh --mutant: each must fail):
 *   MUTANT_NO_RECHECK  a member parks right after arming through the group, with no re-check
 *   MUTANT_NO_POKE     the first member to want a ring arms the group but does not poke the
 *                      hub thread, which so goes on sleeping without the group's word
 *   MUTANT_NO_MISSED_FORWARD  a member that withdraws does not pass on a ring the group took
 *                      in after its last arming (wake-one: finding H2 in models/README.md)
 *   MUTANT_NO_EATEN_FORWARD   the hub thread does not pass on a futex_seq wake it took while
 *                      no member wanted one (no slot, wake-one: finding H1)
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
#define CAP 1                    /* doorbell queue capacity in datagrams */
#define G (NA + NF)              /* the group's slot, if it has one */
#define SLOTS (NA + NF + GSLOT)  /* slots: the awaiters', the slot sleepers', the group's */
#define NOPS (NA + NM)           /* cancellable waits: the awaiters' 0..NA-1, the members' */

/* ---------------- shared memory ---------------- */
bit   cond;                 /* event_state::signalled */
bit   armed[SLOTS + 1];     /* wait_queue::slots[i].armed (one spare: SLOTS may be 0) */
short parked_a;             /* wait_queue::parked, high half: armed slots */
short parked_s;             /* wait_queue::parked, low half: futex sleepers */
byte  seq;                  /* wait_queue::futex_seq */

/* ---------------- the hub (memory of the process) ---------------- */
bit   hub_lock;             /* shard::mutex_ */
bit   poked;                /* shard::control_ has moved since the hub thread loaded it */
byte  gwanting;             /* wait_hub_group::wanting (under the mutex) */
byte  gseq;                 /* wait_hub_group::seq (under the mutex; no slot) */
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

/* ---------------- ghosts (assertions only) and harness ---------------- */
byte  sets;                 /* set() calls that have published */
byte  completions;          /* waits that completed successfully */
byte  cancels;              /* waits that completed with operation_aborted */
byte  waiting;              /* waits started and not completed */
byte  sdone;                /* blocking waiters without a slot that returned */
bit   op_pending[NOPS];     /* harness: wait n is pending (its cancellation slot is live) */
bit   cancel_req[NOPS];     /* harness: a cancellation was emitted for wait n */

/* parked's halves go down only here, checked in the same step */
#define DEC_A  d_step { parked_a--; assert(parked_a >= 0) }
#define DEC_S  d_step { parked_s--; assert(parked_s >= 0) }

/* event_view::try_take: one atomic op (auto: CAS 1 -> 0; manual: load) */
#if AUTO_RESET
#define TRY_BODY(got)                                                              \
  if                                                                               \
  :: cond == 1 -> cond = 0; got = 1; completions++; waiting--;                     \
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
    :: hub_asleep && hub_on_seq -> hub_asleep = 0                                  \
    :: else                                                                        \
    fi                                                                             \
  }

/* FUTEX_WAKE(&futex_seq, 1): any one of the threads asleep on it (the kernel's choice) */
#define WAKE_SEQ_ONE                                                               \
  atomic {                                                                         \
    if                                                                             \
    :: fsleep[0] == 1 -> fsleep[0] = 0                                             \
    :: NS > 1 && fsleep[NS - 1] == 1 -> fsleep[NS - 1] = 0                         \
    :: hub_asleep && hub_on_seq -> hub_asleep = 0                                  \
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
#define POKE_UNLOCK                                                                \
  d_step { poked = 1; if :: hub_asleep -> hub_asleep = 0 :: else fi; hub_lock = 0 }

/* shard::take_ring, its load: ok = the group wants a ring, and its slot was found claimed
   (TAKE_IN then re-arms it) or its futex_seq has moved (taken in here) */
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

/* shard::wake_members: the wake function of every member but `except` (NM: none excepted),
   an asio::post of a re-check to that member's executor. One step for all: a member that
   picks its re-check up first needs the mutex the poster holds before it can do anything. */
#define WAKE_MEMBERS(except)                                                       \
  d_step {                                                                         \
    x = 0;                                                                         \
    do                                                                             \
    :: x < NM -> if :: x != except -> mrang[x] = 1 :: else fi;                     \
                 if :: x != except && !mdone[x] -> posted[x]++ :: else fi; x++     \
    :: else -> x = 0; break                                                        \
    od                                                                             \
  }

/* wait_hub_member::arm. A posted re-check's (`dequeue`): the step that takes the mutex also
   takes the re-check off the member's executor. */
inline hub_arm(m, dequeue, first, ok, old, x)
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
    ok = 0;
    if
    :: !first ->                                      /* armed already, unless claimed: */
       RING_SEEN(ok);                                 /* take_ring */
       if
       :: !ok -> hub_lock = 0                         /* (unlock) */
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
  :: ok ->                                            /* a ring the hub thread has not seen: */
     TAKE_IN;                                         /* it is this one's, and the others */
     WAKE_MEMBERS(m);                                 /* look again too */
     POKE_UNLOCK;
     ok = 0
  :: else
  fi
}

/* wait_hub_member::withdraw */
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
        d_step { poked = 1; if :: hub_asleep -> hub_asleep = 0 :: else fi };   /* poke */
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

/* ---------------- the hub thread: shard::run ---------------- */
proctype hub()
{
  byte wseq, x, pa, ps, k, n;
  bit ok, old, w, watched, eaten;

end_asleep:                                           /* back from futex_waitv: lock */
  atomic {
    hub_asleep == 0 && hub_lock == 0 -> hub_lock = 1;
    poked = 0;                                        /* control_.load (acquire) */
    RING_SEEN(ok);                                    /* take_ring */
    eaten = 0;
#if !GSLOT
#ifndef MUTANT_NO_EATEN_FORWARD
    if                                                /* watched futex_seq, nobody wants it */
    :: !ok && watched && gwanting == 0 && seq != gseq -> gseq = seq; eaten = 1
    :: else
    fi;
#endif
#endif
    watched = 0;
    if
    :: !ok && !eaten -> w = (gwanting != 0); wseq = gseq; hub_lock = 0  /* the words; unlock */
    :: else
    fi
  };
  if
  :: eaten ->                                         /* a wake taken for nobody goes on */
     notify_one(pa, ps, k, ok, n);
     atomic { w = (gwanting != 0); wseq = gseq; hub_lock = 0; pa = 0; ps = 0; k = 0; n = 0;
              ok = 0; eaten = 0 }
  :: else
  fi;
  if
  :: ok ->
#ifndef WAKE_BEFORE_REARM
     TAKE_IN;                                         /* re-arm, ... */
     WAKE_MEMBERS(NM);                                /* ... then every member looks again */
#else
     WAKE_MEMBERS(NM);
     TAKE_IN;
#endif
     atomic { w = (gwanting != 0); wseq = gseq; hub_lock = 0; ok = 0 }  /* unlock */
  :: else
  fi;
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
  bit got, ok, old, first, last, missed;

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
     hub_arm(m, 0, first, ok, old, x);                /* park(): arm_for, ... */
#ifndef MUTANT_NO_RECHECK
     d_step { TRY_BODY(got) };                        /* ... take_ready */
     if
     :: got -> goto done                              /* withdraw_and_forward */
     :: else
     fi;
#endif
end_parked:
     if
     :: hub_arm(m, 1, first, ok, old, x);             /* recheck(): parked, so arm_for, ... */
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
  od
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

/* ---------------- signaller: event_view::set, or a wake-one publication ---------------- */
proctype signaller()
{
  byte pa, ps, k, n;
  bit ok;
  d_step { cond = 1; sets++ };                        /* signalled.exchange(1) */
#ifdef SET_NOTIFY_ONE
  notify_one(pa, ps, k, ok, n)
#else
  notify_all(pa, ps, k, ok)
#endif
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
  /* no lost wake-up: nobody still waits for ever while the event is set */
  assert(!(cond == 1 && waiting > 0));
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
    :: x < NSIG -> run signaller(); x++
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
