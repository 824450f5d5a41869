/*
 * The circular_buffer node ring (src/ring/ring.cpp): node-claim-first Vyukov MPMC with recovery of
 * nodes left claimed by a participant that was killed.
 *
 * One Promela step is one atomic instruction of the code: a load of a node word, a CAS on it, a
 * store to it, a CAS on a cursor. Node words are (turn, owner, reading) read and written as one
 * value, as the 64-bit word in layout::node_header is. Ghost bookkeeping (which message is
 * where, what was published and claimed) rides along inside those steps; the code never reads it.
 *
 * Waiting: a party whose attempt would block waits until the cursor or the node it looked at
 * changed (or that node's owner died), then retries. In the code a change wakes it (the wake-ups
 * are wake_protocol.pml's), and a wait held up by a node in another participant's hands
 * re-checks on a timer until it moves or its owner is found dead (detail/stall.hpp). So an
 * invalid end state here is a real stall: nothing any party could ever do again would move the
 * ring.
 *
 * Death: `killer` may kill one participant (KILL=1) between any two of its steps (`unless`).
 * The code learns of a death from the participant's file lock; here `alive[]`.
 *
 * Parameters: NP producers writing MSGS messages each (producer 1: EXTRA more), NC consumers,
 * N nodes.
 * Checked: every published message is claimed by exactly one reader; no reader claims a
 * message that was not published at that position (no half-written message); no stall.
 * Mutants, which the checker must catch:
 * MUTANT_SKIP_LIVE: readers skip a stuck writer's node without asking whether it lives.
 * MUTANT_ADVANCE_FIRST: writers move the tail before claiming the node (plain Vyukov), so a
 * writer killed in between leaves a node that names nobody (run with KILL=1).
 */

#ifndef NP
#define NP 2
#endif
#ifndef NC
#define NC 2
#endif
#ifndef N
#define N 2
#endif
#ifndef MSGS
#define MSGS 1
#endif
#ifndef KILL
#define KILL 0
#endif
#ifndef EXTRA
#define EXTRA 0  /* producer 1 writes this many messages more than MSGS */
#endif

#define NPART (NP + NC + 1)    /* participant numbers 1..NP+NC; 0 is "nobody" */
#define NMSG (NP * MSGS + EXTRA + 1)  /* message ids 1..NP*MSGS+EXTRA */

/* the shared ring */
byte turn[N];
byte owner[N];
bit reading[N];
byte data[N];      /* the message bytes: here the id of the message written into the node */
byte head = 0;
byte tail = 0;

/* liveness, as the participant locks tell it */
bit alive[NPART];
bit kill[NPART];

/* ghosts */
bit published[NMSG];
byte pubpos[NMSG];
byte claimed[NMSG];
byte npublished = 0;
byte nclaimed = 0;
byte pdone = 0;          /* producers finished or dead */

/* A blocked party retries once the cursor or the node it looked at changed, or the node's owner
   died: until then a retry would decide the same. */
#define WAIT_FOR_CHANGE(cursor) \
  (cursor != pos || turn[i] != wt || owner[i] != wo || reading[i] != wr || (wo != 0 && !alive[wo]))

/* Locals are dead after a message is done; zeroing them keeps equal states equal. */
#define FORGET pos = 0; i = 0; wt = 0; wo = 0; wr = 0; ok = 0; d = 0

#define help_advance(cursor, p) atomic { if :: cursor == p -> cursor = p + 1 :: else fi }

proctype producer(byte me) {
  byte seq = 0, pos, i, wt, wo, id;
  bit wr, ok;
  short d;
  {
    do
    :: seq == MSGS + (me == 1 -> EXTRA : 0) -> break
    :: else ->
retry:
      pos = tail
look:
      atomic { i = pos % N; wt = turn[i]; wo = owner[i]; wr = reading[i]; d = wt - pos }
      if
      :: d == 0 && wo == 0 ->
#ifdef MUTANT_ADVANCE_FIRST
        /* plain Vyukov: take the position by moving the tail, then own the node */
        atomic {
          if
          :: tail == pos -> tail = pos + 1; ok = 1
          :: else -> ok = 0
          fi
        }
        if
        :: !ok -> goto reload
        :: else
        fi;
        owner[i] = me;
#else
        atomic {
          if
          :: turn[i] == wt && owner[i] == 0 && reading[i] == wr -> owner[i] = me; ok = 1
          :: else -> ok = 0
          fi
        }
        if
        :: !ok -> goto look
        :: else
        fi;
        help_advance(tail, pos);
#endif
        id = me + NP * seq;
        data[i] = id;
        atomic {  /* publish: one store of the word */
          turn[i] = pos + 1; owner[i] = 0;
          published[id] = 1; pubpos[id] = pos; npublished++; id = 0; FORGET
        };
        seq++
      :: d == 0 && wo != 0 ->  /* another writer holds this position */
        help_advance(tail, pos);
        goto reload
      :: d == 1 - N ->         /* the previous lap's message: unread or being read */
        if
        :: wo == 0 || alive[wo] -> goto block
        :: else ->             /* its reader died: free the node (that message is lost) */
          atomic {
            if
            :: turn[i] == wt && owner[i] == wo && reading[i] == wr ->
              turn[i] = pos; owner[i] = 0; reading[i] = 0
            :: else
            fi
          };
          goto look
        fi
      :: d < 0 && d != 1 - N -> goto block
      :: d > 0 ->
        help_advance(tail, pos);
        goto reload
      fi;
      goto next;
reload:
      pos = tail;
      goto look;
block:
      WAIT_FOR_CHANGE(tail);
      goto retry;
next:
      skip
    od;
    pdone++
  } unless {
    kill[me] -> pdone++
  }
}

proctype consumer(byte me) {
  byte pos, i, wt, wo, got;
  bit wr, ok;
  short d;
  {
    do
    :: true ->
retry:
      pos = head
look:
      atomic { i = pos % N; wt = turn[i]; wo = owner[i]; wr = reading[i]; d = wt - pos }
      if
      :: d == 1 && wo == 0 ->
        atomic {
          if
          :: turn[i] == wt && owner[i] == 0 && reading[i] == wr ->
            owner[i] = me; reading[i] = 1; ok = 1;
            /* ghost: the claim is the delivery (a reader killed from here on loses it) */
            got = data[i];
            assert(got > 0 && got < NMSG);
            assert(published[got] && pubpos[got] == pos);  /* never half-written, never stale */
            assert(claimed[got] == 0);                       /* never twice */
            claimed[got]++; nclaimed++
          :: else -> ok = 0
          fi
        }
        if
        :: !ok -> goto look
        :: else
        fi;
        help_advance(head, pos);
        assert(data[i] == got);  /* the bytes stay put while the reader holds the node */
        atomic { turn[i] = pos + N; owner[i] = 0; reading[i] = 0; got = 0; FORGET }  /* release */
      :: d == 1 && wo != 0 ->  /* another reader has it */
        help_advance(head, pos);
        goto reload
      :: d == 0 ->             /* empty, or a writer is filling it */
        if
#ifdef MUTANT_SKIP_LIVE
        :: wo == 0 -> goto block
        :: else ->
#else
        :: wo == 0 || alive[wo] -> goto block
        :: else ->             /* its writer died mid-write: skip the node */
#endif
          atomic {
            if
            :: turn[i] == wt && owner[i] == wo && reading[i] == wr ->
              turn[i] = pos + N; owner[i] = 0; reading[i] = 0
            :: else
            fi
          };
          goto look
        fi
      :: d > 1 ->              /* skipped for this lap */
        help_advance(head, pos);
        goto reload
      :: d < 0 -> goto block
      fi;
      goto next;
reload:
      pos = head;
      goto look;
block:
      if
      :: pdone == NP && nclaimed == npublished -> break
      :: WAIT_FOR_CHANGE(head) -> goto retry
      fi;
next:
      skip
    od
  } unless {
    kill[me] -> skip
  }
}

proctype killer() {
  byte victim;
  if
  :: KILL ->
    if
    :: victim = 1
    :: victim = 2
    :: victim = NP + 1
    :: victim = NP + 2
    fi;
    atomic { alive[victim] = 0; kill[victim] = 1 }
  :: skip
  fi
}

init {
  byte k;
  atomic {
    for (k : 0 .. N - 1) { turn[k] = k }
    for (k : 1 .. NP + NC) { alive[k] = 1 }
    for (k : 1 .. NP) { run producer(k) }
    for (k : NP + 1 .. NP + NC) { run consumer(k) }
    run killer()
  }
  (_nr_pr == 1);  /* everybody finished: not reached means a stall (invalid end state) */
  for (k : 1 .. NMSG - 1) {
    assert(claimed[k] == published[k])  /* no lost message, no duplicate */
  }
  assert(KILL || npublished == NMSG - 1)  /* without a death, every write completes */
}
