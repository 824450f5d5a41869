/*
 * wake_protocol.pml -- the cross-process "arm / re-check / ring" wake-up protocol of shmio.
 *
 * Mirrors the event's wait/set path (docs: /work/shared/DESIGN.md, "How a cross-process wait becomes
 * an Asio operation"): a shared `signalled` word, a small table of waiter slots with an `armed` flag,
 * a `parked` counter, one datagram doorbell per async waiter, and a futex word `seq` for blocking
 * (sync) waiters. Every shared access in the real code is a seq_cst atomic, which is what Promela's
 * interleaving semantics gives us (sequential consistency).
 *
 * Modelling rule: one Promela transition (a plain statement or a d_step) == one atomic instruction or
 * one syscall of the real code (a load, a store, a CAS, a fetch_add, a sendto, a recv, futex_wait,
 * futex_wake). Two separate atomics are never merged. The only other things inside a d_step are ghost
 * variables (bookkeeping for the assertions, never read by the protocol) and the test harness
 * (pacing of signallers, delivery of cancellation), which are not part of the protocol.
 *
 * Configuration (spin -D...):
 *   AUTO_RESET=1|0   auto-reset event (waiter consumes with CAS 1->0) / manual-reset (waiter observes 1)
 *   NA=1..3          async waiters (one slot + one doorbell each)
 *   NS=0..2          sync (futex) waiters
 *   NSIG=1..3        signallers, each calls set() once
 *   AROUNDS=1..      waits performed by each async waiter, one after the other (>=2 exercises stale
 *                    datagrams left behind by an earlier wait)
 *   CAP=1..          doorbell queue capacity in datagrams (a send to a full queue is dropped)
 *   CANCEL=0|1       a canceller may cancel one pending async wait, at any moment it is pending
 *   PACED=0|1        a signaller calls set() only while the event is not signalled (harness pacing, so
 *                    sets never coalesce; lets us assert "exactly NSIG completions")
 *   FORWARD=1|0      a cancelled auto-reset waiter whose slot was claimed forwards the notify
 *   ARM_COUNT_FIRST  arm as "parked++; armed=1" instead of the described "armed=1; parked++"
 *   ARM_XCHG         arm as "if (exchange(armed,1)==0) parked++" (tolerates a stale wake-up)
 *   MUTANT_NO_RECHECK  the async waiter parks right after arming, without the re-check (must fail)
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

/* ---------------- shared memory (the segment) ---------------- */
bit   cond;              /* event: signalled 0/1 */
bit   armed[NA];         /* waiter table: slot i armed */
short parked_a;          /* parked word, async part: number of armed slots               */
short parked_s;          /* parked word, sync part: number of sync waiters in their wait */
                         /* (one word in the real code; read together by one load)       */
byte  seq;               /* futex word */

/* ---------------- kernel objects ---------------- */
byte  bell[NA];          /* datagrams queued on waiter i's doorbell socket */
bit   fsleep[NS + 1];    /* futex wait queue on &seq: sync waiter j is asleep */

/* ---------------- ghost state (assertions only) ---------------- */
byte  sets;              /* set() calls that published */
byte  completions;       /* waits that completed successfully */
byte  cancels;           /* waits that completed with operation_aborted */
byte  waiting;           /* waits started and not yet completed */
bit   in_sync[NS + 1];   /* sync waiter j is counted in parked_s */
bit   op_pending[NA];    /* async wait i has been initiated and not completed (cancellable) */
bit   cancel_req[NA];    /* cancellation emitted for async wait i */

/* "parked never negative", checked right after every decrement (the only place it can go below 0) */
#ifdef ALLOW_NEGATIVE
#define NONNEG(x) skip
#else
#define NONNEG(x) assert(x >= 0)
#endif

/* try / re-check the condition: one atomic op (CAS 1->0 for auto-reset, a load for manual) */
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

/* one sendto(MSG_DONTWAIT) on doorbell k: dropped when the queue is full (a datagram is pending) */
#define SEND(k)  d_step { if :: bell[k] < CAP -> bell[k]++ :: else -> skip fi }

/* set() steps 2-4 (also used by a cancelled waiter that forwards). Each line one atomic op/syscall. */
inline notify(pa, ps, k, ok)
{
  d_step { pa = parked_a; ps = parked_s };            /* one load of the parked word */
  if
  :: pa + ps == 0 -> skip                             /* coalescing fast path: no syscall */
  :: else ->
     if
     :: ps > 0 ->
        seq++;                                        /* fetch_add on the futex word */
        d_step {                                      /* futex_wake(&seq, INT_MAX) */
          k = 0;
          do
          :: k < NS -> fsleep[k] = 0; k++
          :: else -> break
          od;
          k = 0
        }
     :: else
     fi;
     k = 0;
     do
     :: k < NA ->
        d_step {                                      /* CAS(armed[k], 1 -> 0) */
          if
          :: armed[k] == 1 -> armed[k] = 0; ok = 1
          :: else -> ok = 0
          fi
        };
        if
        :: ok ->
           parked_a--;                                /* fetch_sub */
           NONNEG(parked_a);
           SEND(k)                                    /* ring slot k's doorbell */
        :: else
        fi;
        k++
     :: else -> break
     od
  fi
}

/* ---------------- async waiter (one slot, one doorbell) ---------------- */
proctype awaiter(byte i)
{
  byte r, pa, ps, k;
  bit got, ok, old;

  do
  :: r < AROUNDS ->
     d_step { waiting++; TRY_BODY(got) };             /* 1. try */
     if
     :: got -> goto complete
     :: else
     fi;
arm:                                                  /* 2. arm */
#if defined(ARM_FLAG_FIRST) && defined(ARM_STORE)     /* as first described: armed = 1; parked++ */
     atomic { armed[i] = 1; op_pending[i] = 1 };      /* store */
     parked_a++;                                      /* fetch_add */
#elif defined(ARM_FLAG_FIRST)                         /* if (exchange(armed, 1) == 0) parked++ */
     atomic { old = armed[i]; armed[i] = 1; op_pending[i] = 1 };   /* exchange */
     if
     :: old == 0 -> parked_a++
     :: else                                          /* stale wake-up: still armed and counted */
     fi;
#elif defined(ARM_STORE)                              /* parked++; armed = 1 */
     parked_a++;                                      /* fetch_add */
     atomic { armed[i] = 1; op_pending[i] = 1 };      /* store */
#else                                                 /* the fixed arm (default): */
     parked_a++;                                      /* fetch_add: count before the flag is visible */
     atomic { old = armed[i]; armed[i] = 1; op_pending[i] = 1 };   /* exchange */
     if
     :: old == 1 -> parked_a--; NONNEG(parked_a)      /* stale wake-up: already armed and counted */
     :: else
     fi;
#endif
#ifndef MUTANT_NO_RECHECK
     d_step { TRY_BODY(got) };                        /* 3. re-check */
     if
     :: got ->
        d_step {                                      /* disarm: CAS(armed[i], 1 -> 0) */
          if
          :: armed[i] == 1 -> armed[i] = 0; ok = 1
          :: else -> ok = 0                            /* claimed: a datagram is or will be queued */
          fi
        };
        if
        :: ok -> parked_a--; NONNEG(parked_a)
        :: else
        fi;
        goto complete
     :: else
     fi;
#endif
end_park:                                             /* 4. park: wait for the doorbell (or cancel) */
     if
     :: bell[i] > 0 ->
        do                                            /* drain: recv(MSG_DONTWAIT) until EAGAIN */
        :: bell[i] > 0 -> bell[i]--
        :: else -> break
        od;
        goto arm                                      /* 5. re-arm, re-check */
     :: cancel_req[i] ->                              /* cancelled while parked */
        d_step {                                      /* disarm: CAS(armed[i], 1 -> 0) */
          if
          :: armed[i] == 1 -> armed[i] = 0; ok = 1
          :: else -> ok = 0
          fi;
          cancels++; waiting--                        /* ghost: completes with operation_aborted */
        };
        if
        :: ok -> parked_a--; NONNEG(parked_a)
        :: else ->                                    /* a signaller claimed us: datagram stays queued */
#if AUTO_RESET && FORWARD
           if
           :: cond == 1 -> notify(pa, ps, k, ok)      /* forward (notify re-reads parked) */
           :: else
           fi
#else
           skip
#endif
        fi;
        goto complete
     fi;
complete:
     atomic { op_pending[i] = 0; cancel_req[i] = 0; r++ }   /* harness: the op is over */
  :: else -> break
  od
}

/* ---------------- sync waiter (futex on seq) ---------------- */
proctype swaiter(byte j)
{
  byte old;
  bit got;

  d_step { waiting++; TRY_BODY(got) };                /* 1. try */
  if
  :: got -> goto done
  :: else
  fi;
  d_step { parked_s++; in_sync[j] = 1 };              /* 2. parked++ (sync part) */
again:
  old = seq;                                          /* 3. old = seq */
  d_step { TRY_BODY(got) };                           /* 4. re-check */
  if
  :: got -> d_step { parked_s--; in_sync[j] = 0 }; NONNEG(parked_s); goto done
  :: else
  fi;
  d_step {                                            /* 5. futex_wait(&seq, old) */
    if
    :: seq == old -> fsleep[j] = 1
    :: else -> skip                                   /* EAGAIN */
    fi
  };
end_futex:
  fsleep[j] == 0;                                     /* asleep until futex_wake */
  goto again;                                         /* 6. */
done:
  skip
}

/* ---------------- signaller: set() ---------------- */
proctype signaller()
{
  byte pa, ps, k;
  bit ok;
#if PACED
  atomic { cond == 0 ->                               /* harness: wait until the last signal is consumed */
    cond = 1; sets++                      /* 1. publish: store signalled = 1 */
  };
#else
  d_step {                                            /* 1. publish: store signalled = 1 */
    cond = 1; sets++
  };
#endif
  notify(pa, ps, k, ok)                               /* 2.-4. */
}

#if CANCEL
/* emits one cancellation for one pending async wait, at any moment it is pending (or none at all) */
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
/* `timeout` is executable only when no other process can move: every process has finished or is
   blocked for ever (parked on its doorbell, asleep on the futex). That is where lost wake-ups show. */
active proctype monitor()
{
  byte n, ma, ms;
  timeout ->
  /* no lost wake-up: nobody waits for ever while the event is signalled */
  assert(!(cond == 1 && waiting > 0));
  d_step {
    n = 0; ma = 0; ms = 0;
    do
    :: n < NA -> ma = ma + armed[n]; n++
    :: else -> break
    od;
    n = 0;
    do
    :: n < NS -> ms = ms + in_sync[n]; n++
    :: else -> break
    od
  };
  /* parked word == armed slots + sync waiters still waiting */
  assert(parked_a == ma && parked_s == ms);
#if AUTO_RESET
  /* each set() released at most one wait */
  assert(completions <= sets);
#if PACED && !CANCEL
  /* sets do not coalesce and there are enough waiters: exactly NSIG waits completed */
  assert(NA * AROUNDS + NS < NSIG || completions == NSIG);
#endif
#else
  /* manual reset, nobody resets: once set, every wait completes */
  assert(sets == 0 || waiting == 0);
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
