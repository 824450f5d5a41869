/*
 * wake_protocol.pml -- shmio's cross-process "arm / re-check / ring" wake-up protocol.
 *
 * Mirrors (by default, the code as it is):
 *   src/wait/wait_queue.cpp            notify_all, notify_one, claim_and_ring, wake_sleepers, arm,
 *                                 disarm, sleeper (the shared-memory side)
 *   src/wait/waiter.cpp                park (drain if due, arm, re-check), on_bell/recheck (re-arm,
 *                                 re-check; still parked: drain, re-check), cancel (forward)
 *   include/shmio/detail/blocking_wait.hpp  blocking_wait (the blocking loop on the futex)
 *   include/shmio/detail/event_state.hpp  try_take (auto: CAS 1->0, manual: load), set
 * Layout: layout::wait_queue { parked = armed slots << 32 | sleepers; futex_seq; slots[].armed }.
 * The model keeps the two halves of `parked` as parked_a / parked_s and reads them together in one
 * step, as the code's single 64-bit load does; a half that goes below 0 here is a half that wraps
 * in the code (0 - 1<<32 leaves the high half at 0xffffffff and the low half untouched).
 *
 * Modelling rule: one Promela step (a statement or a d_step) == one atomic instruction or one
 * syscall of the code (load, store, exchange, CAS, fetch_add, sendto, recv, futex_wait,
 * futex_wake). Two atomics are never merged. Besides that, d_steps hold only ghost variables
 * (bookkeeping for assertions, never read by the protocol) and test harness (when a
 * cancellation is emitted, pacing of signallers). The orders in the code are seq_cst at every
 * place the protocol depends on, so interleaving (sequential consistency) is the right semantics;
 * the relaxed `armed` load before the claim CAS is folded into the CAS (it only filters).
 *
 * Not modelled: the re-check timers and futex timeouts (a held-up wait's, the opt-in safety
 * re-check: they would turn a lost wake-up into a delay and hide it; here a lost wake-up is a
 * waiter blocked for ever), spinning
 * before parking (more tries, no shared writes), several pending ops on one waiter object (FIFO
 * list, one slot), dead owners and slot reclaim, reset().
 *
 * Configuration (spin -DNAME=value):
 *   AUTO_RESET=1|0  auto-reset event (a wait takes the signal with CAS 1->0) | manual-reset
 *   NA=1..3         async waiters (one slot and one doorbell each)
 *   NS=0..2         blocking waiters that found no free slot (counted sleepers, futex_seq)
 *   NF=0..2         blocking waiters with a slot of their own (slot sleepers: futex on `armed`)
 *   NSIG=1..3       signallers, each calls set() once
 *   AROUNDS=1..     waits each async waiter performs one after another (2 exercises stale rings)
 *   CAP=1..         doorbell queue capacity in datagrams (a ring to a full queue is dropped)
 *   CANCEL=0|1      one cancellation, emitted at any moment an async wait is pending
 *   PACED=0|1       harness: a signaller sets only while the event is clear, so sets never
 *                   coalesce (lets us assert exactly NSIG completions)
 *   FORWARD=1|0     a cancelled waiter whose slot was claimed calls notify_one (waiter::cancel)
 * Variants (spin -DNAME), each used by check.sh --findings or --mutant:
 *   ARM_COUNT_FIRST parked += 1<<32 before the exchange, undone if it was armed already
 *   ARM_STORE       arm as first described: armed = 1 (plain store); parked += 1<<32
 *   STRICT_NONNEG   assert the armed half of parked never goes below zero, not even briefly
 *   SET_NOTIFY_ONE  set() wakes one (notify_one), as circular_buffer's publish/release do
 *   FORWARD_ON_DONE a waiter that completes but finds its slot claimed (failed disarm) forwards
 *                   with notify_one, as cancel does
 *   NOTIFY_ONE_BOTH notify_one wakes one sleeper AND rings one armed slot (sleepers do not shadow
 *                   parked async waiters)
 *   MUTANT_NO_RECHECK  the async waiter parks right after arming, with no re-check (must fail)
 *   MUTANT_DRAIN_NO_RECHECK  a waiter still parked after a wake drains its doorbell and waits
 *                   again with no look after the drain (must fail)
 *   DRAIN_NO_REARM  that waiter looks again after the drain but does not re-arm first
 *   LOST_WAKEUP_ONLY   check only the wake-up properties, not the parked-counter ones
 */

#ifndef AUTO_RESET
#define AUTO_RESET 1
#endif
#ifndef NA
#define NA 2
#endif
#ifndef NS
#define NS 1
#endif
#ifndef NSIG
#define NSIG 2
#endif
#ifndef AROUNDS
#define AROUNDS 1
#endif
#ifndef CAP
#define CAP 1
#endif
#ifndef CANCEL
#define CANCEL 0
#endif
#ifndef PACED
#define PACED 0
#endif
#ifndef FORWARD
#define FORWARD 1
#endif
#ifndef NF
#define NF 0
#endif
#define SLOTS (NA + NF)   /* slots 0..NA-1: async waiters; NA..SLOTS-1: slot sleepers */

/* ---------------- shared memory ---------------- */
bit   cond;              /* event_state::signalled */
bit   armed[SLOTS];      /* wait_queue::slots[i].armed */
short parked_a;          /* wait_queue::parked, high half: armed slots */
short parked_s;          /* wait_queue::parked, low half: futex sleepers */
byte  seq;               /* wait_queue::futex_seq */

/* ---------------- kernel ---------------- */
byte  bell[NA];          /* datagrams queued on async waiter i's doorbell socket */
bit   fsleep[NS + 1];    /* futex wait queue of &futex_seq: blocking waiter j is asleep */
bit   fslot[SLOTS];      /* futex wait queue of &slots[i].armed: slot sleeper i is asleep */

/* ---------------- ghosts (assertions only) and harness ---------------- */
byte  sets;              /* set() calls that have published */
byte  completions;       /* waits that completed successfully */
byte  cancels;           /* waits that completed with operation_aborted */
byte  waiting;           /* waits started and not completed */
byte  sdone;             /* blocking waiters that returned */
byte  arming;            /* async waiters between their exchange 0->1 and their parked += 1<<32 */
bit   op_pending[NA];    /* harness: async wait i is pending (its cancellation slot is live) */
bit   cancel_req[NA];    /* harness: a cancellation was emitted for async wait i */

/* parked's halves: checked after every decrement, the only place they can go down */
#ifdef STRICT_NONNEG
#define NONNEG_A  assert(parked_a >= 0)
#else
/* the high half may dip below 0 only by arms in flight (exchange done, fetch_add not yet) */
#define NONNEG_A  assert(parked_a + arming >= 0)
#endif
#define NONNEG_S  assert(parked_s >= 0)
#ifdef LOST_WAKEUP_ONLY
#undef NONNEG_A
#define NONNEG_A  skip
#endif

/* event_view::try_take: one atomic op (auto: CAS 1 -> 0; manual: load). The code's load before
   its CAS only filters, like the relaxed `armed` load in notify. */
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

/* ring_owner: an async waiter's doorbell, sendto(MSG_DONTWAIT) (EAGAIN, queue full, drops it: a
   ring is pending); a slot sleeper's futex, FUTEX_WAKE on its `armed` word */
#define RING(k)  d_step { if                                                       \
                          :: k >= NA -> fslot[k] = 0                               \
                          :: k < NA && bell[k] < CAP -> bell[k]++                  \
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
  :: ok -> parked_a--; NONNEG_A; RING(k)
  :: else
  fi
}

/* notify_all (set() of an event) */
inline notify_all(pa, ps, k, ok)
{
  d_step { pa = parked_a; ps = parked_s };            /* load parked (seq_cst) */
  if
  :: pa == 0 && ps == 0 -> skip                       /* nobody parked: no syscall */
  :: else ->
     if
     :: ps != 0 ->                                    /* wake_sleepers(INT_MAX) */
        seq++;                                        /* futex_seq.fetch_add */
        d_step {                                      /* FUTEX_WAKE all */
          k = 0;
          do
          :: k < NS -> fsleep[k] = 0; k++
          :: else -> break
          od;
          k = 0
        }
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

/* notify_one (circular_buffer, a forwarding cancel): sleepers first, else the first armed slot
   from a start that rotates per thread (any start, here) */
inline notify_one(pa, ps, k, ok, n)
{
  d_step { pa = parked_a; ps = parked_s };            /* load parked (seq_cst) */
  if
  :: pa == 0 && ps == 0 -> skip
  :: ps != 0 ->                                       /* wake_sleepers(1) and return */
     seq++;
     atomic {                                         /* FUTEX_WAKE one (any) */
       if
       :: fsleep[0] == 1 -> fsleep[0] = 0
#if NS > 1
       :: fsleep[1] == 1 -> fsleep[1] = 0
#endif
       :: else -> skip
       fi
     }
#ifdef NOTIFY_ONE_BOTH
  :: else
  fi;
  if
  :: pa == 0 -> skip                                  /* variant: also ring one armed slot */
#endif
  :: else ->
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
     fi;
     n = 0;
     do
     :: n < SLOTS ->
        claim_and_ring((k + n) % SLOTS, ok);
        if
        :: ok -> break                                /* rang one */
        :: else -> n++
        fi
     :: else -> break
     od
  fi
}

/* arm(): returns with `old` = the previous value of armed[i] */
#if defined(ARM_STORE)
#define ARM                                                                        \
  atomic { old = 0; armed[i] = 1; arming++ };            /* armed = 1 (store) */     \
  d_step { parked_a++; arming-- }                      /* parked += 1<<32 */
#elif defined(ARM_COUNT_FIRST)
#define ARM                                                                        \
  parked_a++;                                          /* parked += 1<<32 */       \
  d_step { old = armed[i]; armed[i] = 1 };             /* exchange */              \
  if                                                                               \
  :: old == 1 -> parked_a--; NONNEG_A                  /* was armed: undo */       \
  :: else                                                                          \
  fi
#else
#define ARM                                                                        \
  atomic { old = armed[i]; armed[i] = 1;               /* exchange */              \
           if :: old == 0 -> arming++ :: else fi };                                \
  if                                                                               \
  :: old == 0 -> d_step { parked_a++; arming-- }       /* parked += 1<<32 */       \
  :: else                                              /* still armed: counted */  \
  fi
#endif

/* disarm(): CAS(armed 1 -> 0), then parked -= 1<<32 if it succeeded; ok = the CAS succeeded.
   `ghost` is bookkeeping done in the same step. (atomic, not d_step: it is a goto target.) */
#define DISARM(ok, ghost)                                                          \
  atomic {                                                                         \
    ghost;                                                                         \
    if                                                                             \
    :: armed[i] == 1 -> armed[i] = 0; ok = 1                                       \
    :: else -> ok = 0                                  /* a signaller claimed it */ \
    fi                                                                             \
  };                                                                               \
  if                                                                               \
  :: ok -> parked_a--; NONNEG_A                                                    \
  :: else                                                                          \
  fi

/* ---------------- async waiter: waiter::async_wait / park / on_bell / cancel ---------------- */
proctype awaiter(byte i)
{
  byte r, pa, ps, k, n;
  bit got, ok, old;
  bit due;                                            /* drain_due_: rung since the last drain */

  do
  :: r < AROUNDS ->
     d_step {                                         /* async_wait: attempt() */
       waiting++; TRY_BODY(got);
       op_pending[i] = 1 - got                        /* harness: cancellable from now on */
     };
     if
     :: got -> goto complete                          /* posted */
     :: else
     fi;
#if CANCEL
     if
     :: cancel_req[i] -> goto cancelled_spinning      /* cancelled while spinning, before park */
     :: else
     fi;
#endif
     if                                               /* park(): a drain left from a wake ... */
     :: due ->
        do
        :: bell[i] > 0 -> bell[i]--
        :: else -> break
        od;
        due = 0
     :: else
     fi;
     ARM;                                             /* ... then arm ... */
#ifndef MUTANT_NO_RECHECK
     d_step { TRY_BODY(got) };                        /* ... and re-check */
     if
     :: got -> goto withdraw
     :: else
     fi;
#endif
end_parked:
     if                                               /* watch(): reactor waits on the doorbell */
     :: bell[i] > 0 ->                                /* on_bell: drain due          */
        due = 1;
        ARM;                                          /* recheck(): re-arm ... */
        d_step { TRY_BODY(got) };                     /* ... and re-check */
        if
        :: got -> goto withdraw                       /* the drain waits for the next park */
        :: else
        fi;
        do                                            /* still parked: drain_doorbell (recv */
        :: bell[i] > 0 -> bell[i]--                   /* until EAGAIN), ... */
        :: else -> break
        od;
        due = 0;
#ifndef MUTANT_DRAIN_NO_RECHECK
#ifndef DRAIN_NO_REARM
        ARM;                                          /* ... re-arm (a ring that claimed the */
#endif                                                /* slot may be what was drained) ... */
        d_step { TRY_BODY(got) };                     /* ... and look again */
        if
        :: got -> goto withdraw
        :: else
        fi;
#endif
        goto end_parked
     :: cancel_req[i] -> goto cancelled               /* cancel_handler -> waiter::cancel */
     fi;

withdraw:                                             /* list empty: disarm(), result unused */
     DISARM(ok, skip);
#if defined(FORWARD_ON_DONE)
     if
     :: !ok -> notify_one(pa, ps, k, ok, n)           /* the ring that claimed us: pass it on */
     :: else
     fi;
#endif
     goto complete;

cancelled:                                            /* removed from the list: it is ours */
     DISARM(ok, cancels++; waiting--);
#if FORWARD
     if
     :: !ok -> notify_one(pa, ps, k, ok, n)           /* forward = !disarm(): pass the ring on */
     :: else
     fi;
#endif
     skip;

     goto complete;

cancelled_spinning:                                   /* never armed: nothing to withdraw */
     atomic { cancels++; waiting-- };

complete:
     atomic { op_pending[i] = 0; cancel_req[i] = 0; r++ }   /* harness: the op is over */
  :: else -> break
  od
}

/* ---------------- blocking waiter: blocking_wait with no timeout ---------------- */
proctype swaiter(byte j)
{
  byte old;
  bit got;

  d_step { waiting++; TRY_BODY(got) };                /* attempt() */
  if
  :: got -> sdone++
  :: else ->
     do
     :: parked_s++;                                   /* sleeper(): parked += 1 */
        old = seq;                                    /* seq_ = futex_seq.load() */
        d_step { TRY_BODY(got) };                     /* re-check after announcing */
        if
        :: got -> break
        :: else
        fi;
        d_step {                                      /* futex_wait(futex_seq, seq_) */
          if
          :: seq == old -> fsleep[j] = 1
          :: else -> skip                             /* EAGAIN */
          fi
        };
end_asleep:
        fsleep[j] == 0;                               /* asleep until FUTEX_WAKE */
        d_step { TRY_BODY(got) };                     /* attempt() after the sleep */
        if
        :: got -> break
        :: else
        fi;
        parked_s--; NONNEG_S                          /* ~sleeper(), then loop */
     od;
     atomic { parked_s--; sdone++ };                  /* ~sleeper() on the way out */
     NONNEG_S
  fi
}

/* ---------------- slot sleeper: blocking_wait with a slot (slot_sleeper) ----------------
   Arms its own slot like an async waiter, but sleeps on the slot's `armed` word with
   futex_wait(&armed, 1): a signaller's claim (armed 1 -> 0) is the ring and FUTEX_WAKE the
   doorbell, so after one claim no other signaller finds it armed (one ring per arming). */
proctype fwaiter(byte i)
{
  byte pa, ps, k, n;
  bit got, ok, old;

  d_step { waiting++; TRY_BODY(got) };                /* attempt() */
  if
  :: got -> goto finished
  :: else
  fi;
  ARM;                                                /* arm ... */
#ifndef MUTANT_NO_RECHECK
  d_step { TRY_BODY(got) };                           /* ... and re-check */
  if
  :: got -> goto withdraw
  :: else
  fi;
#endif
sleep:                                                /* (atomic, not d_step: a goto target) */
  atomic {                                            /* futex_wait(&armed, 1) */
    if
    :: armed[i] == 1 -> fslot[i] = 1
    :: else -> skip                                   /* EAGAIN: claimed already */
    fi
  };
end_asleep:
  fslot[i] == 0;                                      /* asleep until FUTEX_WAKE */
  ARM;                                                /* re-arm ... */
  d_step { TRY_BODY(got) };                           /* ... and re-check */
  if
  :: got -> goto withdraw
  :: else -> goto sleep
  fi;

withdraw:                                             /* ~slot_sleeper: disarm, release */
  DISARM(ok, skip);
  if
  :: !ok -> notify_one(pa, ps, k, ok, n)              /* claimed meanwhile: pass the ring on */
  :: else
  fi;
finished:
  skip
}

/* ---------------- signaller: event_view::set ---------------- */
proctype signaller()
{
  byte pa, ps, k, n;
  bit ok;
#if PACED
  atomic { cond == 0 -> cond = 1; sets++ };           /* harness waits until clear; exchange */
#else
  d_step { cond = 1; sets++ };                        /* signalled.exchange(1) */
#endif
#ifdef SET_NOTIFY_ONE
  notify_one(pa, ps, k, ok, n)
#else
  notify_all(pa, ps, k, ok)
#endif
}

#if CANCEL
/* emits one cancellation for one pending async wait at any moment it is pending, or none */
proctype canceller()
{
  if
  :: atomic { op_pending[0] -> cancel_req[0] = 1 }
#if NA > 1
  :: atomic { op_pending[1] -> cancel_req[1] = 1 }
#endif
#if NA > 2
  :: atomic { op_pending[2] -> cancel_req[2] = 1 }
#endif
  :: skip
  fi
}
#endif

/* ---------------- end-state monitor ---------------- */
/* `timeout` is executable only when nothing else can move: every process has finished or is
   blocked for ever (parked on its doorbell, asleep on the futex). Lost wake-ups show there. */
active proctype monitor()
{
  byte x, ma;
  timeout ->
  /* no lost wake-up: nobody still waits for ever while the event is set */
  assert(!(cond == 1 && waiting > 0));
#ifndef LOST_WAKEUP_ONLY
  d_step {
    x = 0; ma = 0;
    do
    :: x < SLOTS -> ma = ma + armed[x]; x++
    :: else -> break
    od
  };
  /* parked == armed slots << 32 | blocking waiters still inside their wait */
  assert(parked_a == ma && parked_s == NS - sdone);
#endif
#if AUTO_RESET
  /* each set() let at most one wait through */
  assert(completions <= sets);
#if PACED && !CANCEL
  /* sets that do not coalesce, enough waits, nobody cancelled: exactly NSIG completions */
  assert(NA * AROUNDS + NS + NF < NSIG || completions == NSIG);
#endif
#endif
}

init
{
  byte x;
  atomic {
    x = 0;
    do
    :: x < NA -> run awaiter(x); x++
    :: else -> break
    od;
    x = 0;
    do
    :: x < NS -> run swaiter(x); x++
    :: else -> break
    od;
    x = NA;
    do
    :: x < SLOTS -> run fwaiter(x); x++
    :: else -> break
    od;
    x = 0;
    do
    :: x < NSIG -> run signaller(); x++
    :: else -> break
    od;
#if CANCEL
    run canceller();
#endif
  }
}
