#!/usr/bin/env bash
# Model-checks a Promela model with spin, exhaustively, in several configurations: the wake-up
# protocol (wake_protocol.pml, the default), the node ring (ring.pml) or the wait hub
# (wake_hub.pml).
#
#   check.sh [--mutant | --findings | --full] [model.pml]
#
#   (default)   the quick suite (the code as it is): every run must pass.
#               ~2 min (wake), ~60 s (ring), ~3 min (hub, one job)
#   --full      the quick suite plus larger configurations.                   several minutes
#   --mutant    broken copies of the protocol (wake: no re-check after arming, or none after a
#               drain; ring: skipping a live writer's node, or plain Vyukov's advance-then-claim;
#               hub: no re-check after arming through the group, no poke of the hub thread,
#               and the fixes of H1, H2, F1, F2 and N1 taken out again):
#               passes only if spin FINDS the violation (proves the model and the checks can
#               fail).
#   --findings  (wake, hub) variants behind the findings in models/README.md: each must show its
#               expected result (a violation, or a pass).
#
# The runs of a model other than wake_protocol.pml are selected by its file name (wake_protocol's
# lists are the fallback).
# A run fails on: errors > 0, an assertion violation, an invalid end state (deadlock), or an
# incomplete search (depth limit -- retried deeper -- or memory limit).
# Environment: SPIN_JOBS (parallel runs, default: CPUs, at most 2), SPIN_MEMLIM (MB per run).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mode=quick
model=""
for arg in "$@"; do
  case "$arg" in
    --mutant) mode=mutant ;;
    --findings) mode=findings ;;
    --full) mode=full ;;
    -h|--help) sed -n '2,23p' "${BASH_SOURCE[0]}"; exit 0 ;;
    -*) echo "check.sh: unknown option $arg" >&2; exit 2 ;;
    *) model=$arg ;;
  esac
done
model=${model:-$here/wake_protocol.pml}
[[ -r $model ]] || { echo "check.sh: cannot read $model" >&2; exit 2; }
model=$(cd "$(dirname "$model")" && pwd)/$(basename "$model")
name=$(basename "$model" .pml)

for tool in spin gcc; do
  command -v "$tool" >/dev/null || { echo "check.sh: $tool not found" >&2; exit 2; }
done

cpus=$(nproc 2>/dev/null || echo 1)
jobs=${SPIN_JOBS:-$(( cpus < 2 ? cpus : 2 ))}
memlim=${SPIN_MEMLIM:-3000}
work=$(mktemp -d "${TMPDIR:-/tmp}/$name.XXXXXX")
trap 'rm -rf "$work"' EXIT

# One run per line: label | kind | expectation | spin -D flags
#   kind: safety (assertions + invalid end states) or progress (non-progress cycles: -DNP -l)
#   expectation: ok, or a fixed string that the violation report must contain
lost='(cond==1)&&(waiting>0)'
quick_runs=(
  "auto 2a+1s 1sig x2 rounds|safety|ok|-DNA=2 -DNS=1 -DNSIG=1 -DAROUNDS=2"
  "auto 1a+2s 1sig|safety|ok|-DNA=1 -DNS=2 -DNSIG=1"
  "auto 1a+1s 2sig|safety|ok|-DNA=1 -DNS=1 -DNSIG=2"
  "manual 2a+1s 1sig x2 rounds|safety|ok|-DAUTO_RESET=0 -DNA=2 -DNS=1 -DNSIG=1 -DAROUNDS=2"
  "manual 1a+1s 2sig|safety|ok|-DAUTO_RESET=0 -DNA=1 -DNS=1 -DNSIG=2"
  "auto+cancel 2a+1s 1sig|safety|ok|-DCANCEL=1 -DNA=2 -DNS=1 -DNSIG=1"
  "auto+cancel 2a 1sig x2 rounds|safety|ok|-DCANCEL=1 -DNA=2 -DNS=0 -DNSIG=1 -DAROUNDS=2"
  "manual+cancel 2a 2sig|safety|ok|-DCANCEL=1 -DAUTO_RESET=0 -DNA=2 -DNS=0 -DNSIG=2"
  "auto 2a+1s 1sig x2 rounds|progress|ok|-DNA=2 -DNS=1 -DNSIG=1 -DAROUNDS=2"
  "auto+cancel 2a 1sig x2 rounds|progress|ok|-DCANCEL=1 -DNA=2 -DNS=0 -DNSIG=1 -DAROUNDS=2"
  "wake-one 1a+1s 2sig|safety|ok|-DSET_NOTIFY_ONE -DNA=1 -DNS=1 -DNSIG=2"
  "wake-one 2a 2sig|safety|ok|-DSET_NOTIFY_ONE -DNA=2 -DNS=0 -DNSIG=2"
  "wake-one+cancel 2a 1sig|safety|ok|-DSET_NOTIFY_ONE -DCANCEL=1 -DNA=2 -DNS=0 -DNSIG=1"
  "slot sleeper 1a+1f 2sig|safety|ok|-DNA=1 -DNS=0 -DNF=1 -DNSIG=2"
  "slot sleeper 1a+1f 2sig|progress|ok|-DNA=1 -DNS=0 -DNF=1 -DNSIG=2"
  "wake-one 1a+1f+1s 1sig|safety|ok|-DSET_NOTIFY_ONE -DNA=1 -DNS=1 -DNF=1 -DNSIG=1"
  "wake-one+cancel 1a+1f 1sig|safety|ok|-DSET_NOTIFY_ONE -DCANCEL=1 -DNA=1 -DNS=0 -DNF=1 -DNSIG=1"
  "wake-one 1a+2f 1sig|safety|ok|-DSET_NOTIFY_ONE -DNA=1 -DNS=0 -DNF=2 -DNSIG=1"
  "manual 1a+1f 2sig|safety|ok|-DAUTO_RESET=0 -DNA=1 -DNS=0 -DNF=1 -DNSIG=2"
  "manual 1a+1f+1s 1sig|safety|ok|-DAUTO_RESET=0 -DNA=1 -DNS=1 -DNF=1 -DNSIG=1"
)
full_runs=(
  "auto+cancel 2a 2sig|safety|ok|-DCANCEL=1 -DNA=2 -DNS=0 -DNSIG=2"
  "auto 2a 2sig x2 rounds|safety|ok|-DNA=2 -DNS=0 -DNSIG=2 -DAROUNDS=2"
  "auto 2a 2sig x2 rounds paced (exactly 2 complete)|safety|ok|-DNA=2 -DNS=0 -DNSIG=2 -DAROUNDS=2 -DPACED=1"
  "auto 2a+1s 2sig|safety|ok|-DNA=2 -DNS=1 -DNSIG=2"
  "auto 2a+1s 2sig paced (exactly 2 complete)|safety|ok|-DPACED=1 -DNA=2 -DNS=1 -DNSIG=2"
  "manual 2a+1s 2sig|safety|ok|-DAUTO_RESET=0 -DNA=2 -DNS=1 -DNSIG=2"
  "auto 3a 2sig|safety|ok|-DNA=3 -DNS=0 -DNSIG=2"
  "auto 1a+2s 2sig|safety|ok|-DNA=1 -DNS=2 -DNSIG=2"
  "auto+cancel 2a+1s 1sig x2 rounds|safety|ok|-DCANCEL=1 -DNA=2 -DNS=1 -DNSIG=1 -DAROUNDS=2"
  "manual+cancel 2a+1s 1sig x2 rounds|safety|ok|-DCANCEL=1 -DAUTO_RESET=0 -DNA=2 -DNS=1 -DNSIG=1 -DAROUNDS=2"
  "auto+cancel 1a+1f 2sig|safety|ok|-DCANCEL=1 -DNA=1 -DNS=0 -DNF=1 -DNSIG=2"
)
mutant_runs=(
  "mutant auto 2a 1sig|safety|$lost|-DMUTANT_NO_RECHECK -DNA=2 -DNS=0 -DNSIG=1"
  "mutant manual 2a+1s 1sig|safety|$lost|-DMUTANT_NO_RECHECK -DAUTO_RESET=0 -DNA=2 -DNS=1 -DNSIG=1"
  "mutant slot sleeper 1a+1f 1sig|safety|$lost|-DMUTANT_NO_RECHECK -DNA=1 -DNS=0 -DNF=1 -DNSIG=1"
  "mutant drain without a look after it 1a 2sig x2 rounds|safety|$lost|-DMUTANT_DRAIN_NO_RECHECK -DNA=1 -DNS=0 -DNSIG=2 -DAROUNDS=2"
)
findings_runs=(
  "F1 arm exchange-then-count: parked dips below 0|safety|(parked_a>=0)|-DSTRICT_NONNEG -DNA=2 -DNS=0 -DNSIG=1"
  "F1 fix: count, then exchange (undo if armed)|safety|ok|-DSTRICT_NONNEG -DARM_COUNT_FIRST -DNA=2 -DNS=0 -DNSIG=2 -DAROUNDS=2"
  "F2 arm by plain store: stale ring double-counts|safety|(parked_a==ma)|-DARM_STORE -DNA=2 -DNS=0 -DNSIG=2 -DAROUNDS=2"
  "F3 wake-one: completing waiter swallows the ring|safety|$lost|-DSET_NOTIFY_ONE -DNA=2 -DNS=0 -DNSIG=2"
  "F4 wake-one: a leaving sleeper shadows the armed|safety|$lost|-DSET_NOTIFY_ONE -DFORWARD_ON_DONE -DNA=1 -DNS=1 -DNSIG=2"
  "F3+F4 fix 1a+1s 2sig|safety|ok|-DSET_NOTIFY_ONE -DFORWARD_ON_DONE -DNOTIFY_ONE_BOTH -DNA=1 -DNS=1 -DNSIG=2"
  "F3+F4 fix 2a+1s 1sig x2 rounds|safety|ok|-DSET_NOTIFY_ONE -DFORWARD_ON_DONE -DNOTIFY_ONE_BOTH -DNA=2 -DNS=1 -DNSIG=1 -DAROUNDS=2"
  "F5 wake-one needs the cancel forward|safety|$lost|-DSET_NOTIFY_ONE -DCANCEL=1 -DFORWARD=0 -DNA=2 -DNS=0 -DNSIG=1"
  "F5 with forward|safety|ok|-DSET_NOTIFY_ONE -DCANCEL=1 -DNA=2 -DNS=0 -DNSIG=1"
  "F6 wake-all needs no cancel forward|safety|ok|-DCANCEL=1 -DFORWARD=0 -DNA=2 -DNS=0 -DNSIG=2"
  "F8 a drain after arming needs a re-arm after it|safety|$lost|-DDRAIN_NO_REARM -DNA=1 -DNS=0 -DNF=1 -DNSIG=2"
  "F8 with the re-arm|safety|ok|-DNA=1 -DNS=0 -DNF=1 -DNSIG=2"
)

# The protocol as src/ now implements it: count before arming, pass a claimed ring on whenever
# a waiter withdraws, wake-one rings an armed slot even with sleepers counted. The findings
# runs below switch these off one at a time to show why each is there.
current="-DARM_COUNT_FIRST -DFORWARD_ON_DONE -DNOTIFY_ONE_BOTH -DSTRICT_NONNEG"

# ring.pml: P producers writing m messages each (EXTRA: one more), C consumers, n nodes; "kill" lets one of the
# four participants be killed at any step. Memory: each quick run needs < 1 GB; the full runs
# several GB (COLLAPSE compression is on in --full).
stall='invalid end state'
if [[ $name == ring ]]; then
  quick_runs=(
    "2p2c 2 nodes 1 msg each|safety|ok|-DNP=2 -DNC=2 -DN=2 -DMSGS=1"
    "2p2c 2 nodes 3 msgs (a second lap)|safety|ok|-DNP=2 -DNC=2 -DN=2 -DMSGS=1 -DEXTRA=1"
    "2p2c 2 nodes 1 msg each + kill|safety|ok|-DNP=2 -DNC=2 -DN=2 -DMSGS=1 -DKILL=1"
    "2p2c 3 nodes 1 msg each + kill|safety|ok|-DNP=2 -DNC=2 -DN=3 -DMSGS=1 -DKILL=1"
  )
  full_runs=(
    "2p2c 2 nodes 2 msgs each (two laps)|safety|ok|-DNP=2 -DNC=2 -DN=2 -DMSGS=2"
    "2p2c 3 nodes 2 msgs each|safety|ok|-DNP=2 -DNC=2 -DN=3 -DMSGS=2"
    "2p2c 2 nodes 3 msgs + kill|safety|ok|-DNP=2 -DNC=2 -DN=2 -DMSGS=1 -DEXTRA=1 -DKILL=1"
  )
  mutant_runs=(
    "mutant skip a live writer|safety|$stall|-DMUTANT_SKIP_LIVE -DN=2 -DMSGS=1"
    "mutant advance then claim + kill|safety|$stall|-DMUTANT_ADVANCE_FIRST -DN=2 -DMSGS=1 -DKILL=1"
  )
  findings_runs=()
  current=""
fi

# wake_hub.pml: m members of the hub's group, f blocking waiters with a slot, s without one,
# a async waiters with a slot and a doorbell; "no slot": the group found none and counts itself
# on futex_seq; "retire": the last member leaves and the group is let go (F2). Wake-one runs
# count messages (one per set(), one per successful look); the event runs keep one bit.
# "serial": the sets take turns (one producer publishing twice); "lazy kernel": the hub thread
# stays queued on futex_seq until futex_waitv returns (KERNEL_LAZY). Each quick run stays
# under ~6 M states (about 3 min on one job); "auto 2m+1f 1sig" (progress, 6.3 M states),
# "auto 2m 2sig", "auto 2m+1a 1sig" and "no slot: auto+cancel 2m 2sig" (15 M) moved to the
# full runs to keep it so. The full runs reach 51 M states and need SPIN_MEMLIM=8000; each
# "no slot" full run fits in 3000 MB (up to 39 M states). Without "serial", 1m+1f+1s 2sig and
# 1m+1a+1s 2sig do not (incomplete at 54 M states): they are in no list.
# History (models/README.md): "wake-one+cancel 1m+1f 1sig" (H2) and "no slot: wake-one+cancel
# 1m+1s 1sig" (H1) failed before the fixes that MUTANT_NO_MISSED_FORWARD and
# MUTANT_NO_EATEN_FORWARD take out again; "wake-one 1m+1f 2sig serial" fails with the hub
# thread's re-arm of before the fix of F1 (MUTANT_HUB_REARMS); "no slot, retire: wake-one+cancel
# 1m+1s 1sig" with the group deleted by its last member (MUTANT_RETIRE_IN_DTOR, F2); "no slot:
# wake-one 1m+1s 2sig" with run() dropping futex_waitv's index (MUTANT_NO_SEQ_WAKE_RING, N1).
if [[ $name == wake_hub ]]; then
  lost='(cond>0)&&(waiting>0)'
  quick_runs=(
    "auto 2m+1f 1sig|safety|ok|-DNM=2 -DNF=1 -DNSIG=1"
    "auto 3m 1sig|safety|ok|-DNM=3 -DNF=0 -DNSIG=1"
    "auto 2m 1sig x2 rounds|safety|ok|-DNM=2 -DNF=0 -DNSIG=1 -DMROUNDS=2"
    "manual 2m 2sig|safety|ok|-DAUTO_RESET=0 -DNM=2 -DNF=0 -DNSIG=2"
    "auto+cancel 2m 1sig|safety|ok|-DCANCEL=1 -DNM=2 -DNF=0 -DNSIG=1"
    "wake-one 2m+1f 1sig|safety|ok|-DSET_NOTIFY_ONE -DNM=2 -DNF=1 -DNSIG=1"
    "wake-one 2m 2sig|safety|ok|-DSET_NOTIFY_ONE -DNM=2 -DNF=0 -DNSIG=2"
    "wake-one 1m+1f 2sig serial|safety|ok|-DSET_NOTIFY_ONE -DNM=1 -DNF=1 -DNSIG=2 -DSERIAL=1"
    "wake-one+cancel 1m+1f 1sig|safety|ok|-DSET_NOTIFY_ONE -DCANCEL=1 -DNM=1 -DNF=1 -DNSIG=1"
    "wake-one+cancel 1m+1f 1sig|progress|ok|-DSET_NOTIFY_ONE -DCANCEL=1 -DNM=1 -DNF=1 -DNSIG=1"
    "no slot: auto 2m+1s 1sig|safety|ok|-DGSLOT=0 -DNM=2 -DNF=0 -DNS=1 -DNSIG=1"
    "no slot: auto 2m+1s 1sig|progress|ok|-DGSLOT=0 -DNM=2 -DNF=0 -DNS=1 -DNSIG=1"
    "no slot: auto 2m 2sig|safety|ok|-DGSLOT=0 -DNM=2 -DNF=0 -DNSIG=2"
    "no slot: manual 2m+1s 1sig|safety|ok|-DGSLOT=0 -DAUTO_RESET=0 -DNM=2 -DNF=0 -DNS=1 -DNSIG=1"
    "no slot: wake-one 2m 2sig|safety|ok|-DGSLOT=0 -DSET_NOTIFY_ONE -DNM=2 -DNF=0 -DNSIG=2"
    "no slot: wake-one 1m+1s 2sig|safety|ok|-DGSLOT=0 -DSET_NOTIFY_ONE -DNM=1 -DNF=0 -DNS=1 -DNSIG=2"
    "no slot: wake-one 1m+1s 2sig|progress|ok|-DGSLOT=0 -DSET_NOTIFY_ONE -DNM=1 -DNF=0 -DNS=1 -DNSIG=2"
    "no slot: wake-one+cancel 2m+1s 1sig|safety|ok|-DGSLOT=0 -DSET_NOTIFY_ONE -DCANCEL=1 -DNM=2 -DNF=0 -DNS=1 -DNSIG=1"
    "no slot: wake-one+cancel 1m+1s 1sig|safety|ok|-DGSLOT=0 -DSET_NOTIFY_ONE -DCANCEL=1 -DNM=1 -DNF=0 -DNS=1 -DNSIG=1"
    "no slot, retire: wake-one+cancel 1m+1s 1sig|safety|ok|-DGSLOT=0 -DRETIRE=1 -DSET_NOTIFY_ONE -DCANCEL=1 -DNM=1 -DNF=0 -DNS=1 -DNSIG=1"
    "retire: wake-one+cancel 1m+1f 1sig|safety|ok|-DRETIRE=1 -DSET_NOTIFY_ONE -DCANCEL=1 -DNM=1 -DNF=1 -DNSIG=1"
  )
  full_runs=(
    "auto 2m+1f 1sig|progress|ok|-DNM=2 -DNF=1 -DNSIG=1"
    "auto 2m 2sig|safety|ok|-DNM=2 -DNF=0 -DNSIG=2"
    "auto 2m+1a 1sig|safety|ok|-DNM=2 -DNF=0 -DNA=1 -DNSIG=1"
    "no slot: auto+cancel 2m 2sig|safety|ok|-DGSLOT=0 -DCANCEL=1 -DNM=2 -DNF=0 -DNSIG=2"
    "auto 2m 2sig x2 rounds|safety|ok|-DNM=2 -DNF=0 -DNSIG=2 -DMROUNDS=2"
    "auto+cancel 2m 2sig|safety|ok|-DCANCEL=1 -DNM=2 -DNF=0 -DNSIG=2"
    "auto 3m+1f 1sig|safety|ok|-DNM=3 -DNF=1 -DNSIG=1"
    "auto 1m+1a 2sig|safety|ok|-DNM=1 -DNF=0 -DNA=1 -DNSIG=2"
    "manual 2m+1f 1sig|safety|ok|-DAUTO_RESET=0 -DNM=2 -DNF=1 -DNSIG=1"
    "manual 1m+1f 2sig|safety|ok|-DAUTO_RESET=0 -DNM=1 -DNF=1 -DNSIG=2"
    "auto+cancel 2m+1f 1sig|safety|ok|-DCANCEL=1 -DNM=2 -DNF=1 -DNSIG=1"
    "wake-one+cancel 2m+1f 1sig|safety|ok|-DSET_NOTIFY_ONE -DCANCEL=1 -DNM=2 -DNF=1 -DNSIG=1"
    "wake-one 1m+1f 2sig|safety|ok|-DSET_NOTIFY_ONE -DNM=1 -DNF=1 -DNSIG=2"
    "retire: wake-one+cancel 2m+1f 1sig|safety|ok|-DRETIRE=1 -DSET_NOTIFY_ONE -DCANCEL=1 -DNM=2 -DNF=1 -DNSIG=1"
    "no slot: wake-one 2m+1s 2sig|safety|ok|-DGSLOT=0 -DSET_NOTIFY_ONE -DNM=2 -DNF=0 -DNS=1 -DNSIG=2"
    "no slot, retire: auto 2m+1s 1sig|safety|ok|-DGSLOT=0 -DRETIRE=1 -DNM=2 -DNF=0 -DNS=1 -DNSIG=1"
    "no slot: wake-one 1m+2s 2sig|safety|ok|-DGSLOT=0 -DSET_NOTIFY_ONE -DNM=1 -DNF=0 -DNS=2 -DNSIG=2"
    "no slot: wake-one+cancel 1m+1s 2sig|safety|ok|-DGSLOT=0 -DSET_NOTIFY_ONE -DCANCEL=1 -DNM=1 -DNF=0 -DNS=1 -DNSIG=2"
    "no slot: wake-one 1m+1s 3sig|safety|ok|-DGSLOT=0 -DSET_NOTIFY_ONE -DNM=1 -DNF=0 -DNS=1 -DNSIG=3"
    "no slot: wake-one 1m+1s 3sig x2 rounds|safety|ok|-DGSLOT=0 -DSET_NOTIFY_ONE -DNM=1 -DNF=0 -DNS=1 -DNSIG=3 -DMROUNDS=2"
    "no slot: wake-one 1m+2s 3sig serial|safety|ok|-DGSLOT=0 -DSET_NOTIFY_ONE -DNM=1 -DNF=0 -DNS=2 -DNSIG=3 -DSERIAL=1"
    "no slot: wake-one 1m+1f+1s 2sig serial|safety|ok|-DGSLOT=0 -DSET_NOTIFY_ONE -DNM=1 -DNF=1 -DNS=1 -DNSIG=2 -DSERIAL=1"
    "no slot: wake-one 1m+1a+1s 2sig serial|safety|ok|-DGSLOT=0 -DSET_NOTIFY_ONE -DNM=1 -DNA=1 -DNF=0 -DNS=1 -DNSIG=2 -DSERIAL=1"
    "no slot, retire: wake-one+cancel 2m+1s 1sig|safety|ok|-DGSLOT=0 -DRETIRE=1 -DSET_NOTIFY_ONE -DCANCEL=1 -DNM=2 -DNF=0 -DNS=1 -DNSIG=1"
    "no slot, retire: wake-one 2m+1s 1sig|progress|ok|-DGSLOT=0 -DRETIRE=1 -DSET_NOTIFY_ONE -DNM=2 -DNF=0 -DNS=1 -DNSIG=1"
    "no slot, lazy kernel: wake-one 2m+1s 2sig|safety|ok|-DKERNEL_LAZY=1 -DGSLOT=0 -DSET_NOTIFY_ONE -DNM=2 -DNF=0 -DNS=1 -DNSIG=2"
    "no slot, lazy kernel: wake-one 1m+2s 2sig|safety|ok|-DKERNEL_LAZY=1 -DGSLOT=0 -DSET_NOTIFY_ONE -DNM=1 -DNF=0 -DNS=2 -DNSIG=2"
    "no slot, lazy kernel: wake-one+cancel 1m+1s 2sig|safety|ok|-DKERNEL_LAZY=1 -DGSLOT=0 -DSET_NOTIFY_ONE -DCANCEL=1 -DNM=1 -DNF=0 -DNS=1 -DNSIG=2"
    "no slot, lazy kernel: wake-one 1m+1s 3sig|safety|ok|-DKERNEL_LAZY=1 -DGSLOT=0 -DSET_NOTIFY_ONE -DNM=1 -DNF=0 -DNS=1 -DNSIG=3"
    "no slot, lazy kernel: wake-one 1m+1s 2sig x2 rounds|safety|ok|-DKERNEL_LAZY=1 -DGSLOT=0 -DSET_NOTIFY_ONE -DNM=1 -DNF=0 -DNS=1 -DNSIG=2 -DMROUNDS=2"
    "no slot, retire, lazy kernel: wake-one+cancel 2m+1s 1sig|safety|ok|-DKERNEL_LAZY=1 -DRETIRE=1 -DGSLOT=0 -DSET_NOTIFY_ONE -DCANCEL=1 -DNM=2 -DNF=0 -DNS=1 -DNSIG=1"
  )
  mutant_runs=(
    "mutant no re-check after arming 2m 1sig|safety|$lost|-DMUTANT_NO_RECHECK -DNM=2 -DNF=0 -DNSIG=1"
    "mutant no re-check after arming, no slot 2m 1sig|safety|$lost|-DMUTANT_NO_RECHECK -DGSLOT=0 -DNM=2 -DNF=0 -DNSIG=1"
    "mutant no poke after the group's arming 2m 1sig|safety|$lost|-DMUTANT_NO_POKE -DNM=2 -DNF=0 -DNSIG=1"
    "mutant no poke, no slot 2m 1sig|safety|$lost|-DMUTANT_NO_POKE -DGSLOT=0 -DNM=2 -DNF=0 -DNSIG=1"
    "mutant H1 no slot, wake-one: a wake the hub thread took for nobody stays|safety|$lost|-DMUTANT_NO_EATEN_FORWARD -DGSLOT=0 -DSET_NOTIFY_ONE -DCANCEL=1 -DNM=1 -DNF=0 -DNS=1 -DNSIG=1"
    "mutant H1 ... 1m+1s 2sig (the run that found it)|safety|$lost|-DMUTANT_NO_EATEN_FORWARD -DGSLOT=0 -DSET_NOTIFY_ONE -DNM=1 -DNF=0 -DNS=1 -DNSIG=2"
    "mutant H2 (code before F1's fix) wake-one: a ring the hub re-armed is withdrawn (cancel)|safety|$lost|-DMUTANT_NO_MISSED_FORWARD -DMUTANT_HUB_REARMS -DSET_NOTIFY_ONE -DCANCEL=1 -DNM=1 -DNF=1 -DNSIG=1"
    "mutant F1 wake-one: the hub thread re-arms after a ring, a second one claims the group before a look|safety|$lost|-DMUTANT_HUB_REARMS -DSET_NOTIFY_ONE -DNM=1 -DNF=1 -DNSIG=2 -DSERIAL=1"
    "mutant F1 ... no slot|safety|$lost|-DMUTANT_HUB_REARMS -DGSLOT=0 -DSET_NOTIFY_ONE -DNM=1 -DNF=0 -DNS=1 -DNSIG=2 -DSERIAL=1"
    "mutant F1 fix without the poke after a re-arm 2m 2sig|safety|$lost|-DMUTANT_NO_REARM_POKE -DSET_NOTIFY_ONE -DNM=2 -DNF=0 -DNSIG=2"
    "mutant F1 fix: the last withdraw forwards neither taken nor rang_, no slot|safety|$lost|-DMUTANT_NO_TAKEN_FORWARD -DMUTANT_NO_MISSED_FORWARD -DGSLOT=0 -DSET_NOTIFY_ONE -DCANCEL=1 -DNM=1 -DNF=0 -DNS=1 -DNSIG=1"
    "mutant F2 the last member deletes the group, no slot|safety|$lost|-DMUTANT_RETIRE_IN_DTOR -DRETIRE=1 -DGSLOT=0 -DSET_NOTIFY_ONE -DCANCEL=1 -DNM=1 -DNF=0 -DNS=1 -DNSIG=1"
    "mutant N1 no slot, wake-one: run() drops futex_waitv's index, a FUTEX_WAKE the re-arm's load counted is lost|safety|$lost|-DMUTANT_NO_SEQ_WAKE_RING -DGSLOT=0 -DSET_NOTIFY_ONE -DNM=1 -DNF=0 -DNS=1 -DNSIG=2"
    "mutant N1 ... serial|safety|$lost|-DMUTANT_NO_SEQ_WAKE_RING -DGSLOT=0 -DSET_NOTIFY_ONE -DNM=1 -DNF=0 -DNS=1 -DNSIG=2 -DSERIAL=1"
  )
  findings_runs=(
    "H3 a re-arm may come after the wakes (arm's unseen ring)|safety|ok|-DWAKE_BEFORE_REARM -DNM=2 -DNF=1 -DNSIG=1"
    "H3 ... wake-one|safety|ok|-DWAKE_BEFORE_REARM -DSET_NOTIFY_ONE -DNM=2 -DNF=1 -DNSIG=1"
    "H4 withdrawing while others want is undone by the hub|safety|ok|-DWITHDRAW_EACH -DNM=2 -DNF=1 -DNSIG=1"
    "H4 ... 2sig|safety|ok|-DWITHDRAW_EACH -DNM=2 -DNF=0 -DNSIG=2"
    "H5 with taken, rang_'s forward is not needed (cancel)|safety|ok|-DMUTANT_NO_MISSED_FORWARD -DSET_NOTIFY_ONE -DCANCEL=1 -DNM=1 -DNF=1 -DNSIG=1"
    "H5 ... no slot 2m+1s|safety|ok|-DMUTANT_NO_MISSED_FORWARD -DGSLOT=0 -DSET_NOTIFY_ONE -DCANCEL=1 -DNM=2 -DNF=0 -DNS=1 -DNSIG=1"
    "H5 ... 1m+1f 2sig serial|safety|ok|-DMUTANT_NO_MISSED_FORWARD -DSET_NOTIFY_ONE -DNM=1 -DNF=1 -DNSIG=2 -DSERIAL=1"
    "N1 fixed (code as is; 1m+1s 2sig is quick) ... 1m+2s 2sig serial|safety|ok|-DGSLOT=0 -DSET_NOTIFY_ONE -DNM=1 -DNF=0 -DNS=2 -DNSIG=2 -DSERIAL=1"
    "N1 fixed ... 1m+1s 2sig x2 rounds|safety|ok|-DGSLOT=0 -DSET_NOTIFY_ONE -DNM=1 -DNF=0 -DNS=1 -DNSIG=2 -DMROUNDS=2"
    "N1 fixed ... retire 1m+1s 2sig|safety|ok|-DRETIRE=1 -DGSLOT=0 -DSET_NOTIFY_ONE -DNM=1 -DNF=0 -DNS=1 -DNSIG=2"
    "N1 fixed, lazy kernel ... 1m+1s 2sig|safety|ok|-DKERNEL_LAZY=1 -DGSLOT=0 -DSET_NOTIFY_ONE -DNM=1 -DNF=0 -DNS=1 -DNSIG=2"
    "N1 fixed, lazy kernel ... 1m+2s 2sig serial|safety|ok|-DKERNEL_LAZY=1 -DGSLOT=0 -DSET_NOTIFY_ONE -DNM=1 -DNF=0 -DNS=2 -DNSIG=2 -DSERIAL=1"
    "lazy kernel (code as is): no slot, retire: wake-one+cancel 1m+1s 1sig|safety|ok|-DKERNEL_LAZY=1 -DRETIRE=1 -DGSLOT=0 -DSET_NOTIFY_ONE -DCANCEL=1 -DNM=1 -DNF=0 -DNS=1 -DNSIG=1"
    "lazy kernel (code as is): no slot: wake-one+cancel 2m+1s 1sig|safety|ok|-DKERNEL_LAZY=1 -DGSLOT=0 -DSET_NOTIFY_ONE -DCANCEL=1 -DNM=2 -DNF=0 -DNS=1 -DNSIG=1"
  )
  current=""
fi
with_current() { for r in "$@"; do printf '%s %s\n' "$r" "$current"; done; }
case $mode in
  quick) mapfile -t runs < <(with_current "${quick_runs[@]}") ;;
  full) mapfile -t runs < <(with_current "${quick_runs[@]}" "${full_runs[@]}") ;;
  mutant) runs=("${mutant_runs[@]}") ;;
  findings) runs=("${findings_runs[@]}") ;;
esac
hash_bits=24
extra_cflags=""
if [[ $mode == full ]]; then hash_bits=26; extra_cflags="-DCOLLAPSE"; fi

# run_one INDEX LINE: writes $work/INDEX.result: "ok|label|message" or "fail|label|message"
run_one() {
  local idx=$1 label kind expect flags dir out states depth secs violation depth_limit
  IFS='|' read -r label kind expect flags <<<"$2"
  dir=$work/$idx
  mkdir -p "$dir"
  cd "$dir"
  cp "$model" "$name.pml"  # spin -t finds the trail beside the model it is given
  # shellcheck disable=SC2086  # flags are a list of -D options
  if ! spin $flags -a "$name.pml" >spin.log 2>&1; then
    echo "fail|$label|spin -a failed: $(tr '\n' ' ' <spin.log)" >"$dir.result"
    return
  fi
  local cflags="-O2 -w -DMEMLIM=$memlim $extra_cflags" pan_args=()
  if [[ $kind == progress ]]; then
    cflags+=" -DNP"
    pan_args=(-l)
  else
    cflags+=" -DSAFETY"
  fi
  # shellcheck disable=SC2086
  if ! gcc $cflags -o pan pan.c >gcc.log 2>&1; then
    echo "fail|$label|gcc failed: $(head -c 400 gcc.log)" >"$dir.result"
    return
  fi
  depth_limit=10000
  while :; do
    ./pan "${pan_args[@]}" -m$depth_limit -w$hash_bits >pan.out 2>&1 || true
    if grep -q 'max search depth too small' pan.out && ((depth_limit < 10000000)); then
      depth_limit=$((depth_limit * 10))
      continue
    fi
    break
  done
  out=pan.out
  local errors
  errors=$(sed -n 's/.*errors: \([0-9][0-9]*\).*/\1/p' $out | tail -n 1)
  states=$(sed -n 's/^ *\([0-9.e+]*\) states, stored.*/\1/p' $out | tail -n 1)
  depth=$(sed -n 's/.*depth reached \([0-9]*\).*/\1/p' $out | tail -n 1)
  secs=$(sed -n 's/^pan: elapsed time \([0-9.e+-]*\).*/\1/p' $out | tail -n 1)
  violation=$(grep -m1 -E '^pan:[0-9]+: ' $out || true)  # e.g. "pan:1: assertion violated .."
  local stats="states=${states:-?}, depth=${depth:-?}, ${secs:-?} s"
  local incomplete=""
  if grep -qiE 'search was not completed|search not completed|depth too small|out of memory|memlim|memory limit' $out; then
    incomplete=yes
  fi
  if [[ -z $errors ]]; then
    echo "fail|$label|$kind: no verdict from pan: $(tail -n 3 $out | tr '\n' ' ')" >"$dir.result"
  elif [[ $expect == ok ]]; then
    if ((errors > 0)) || [[ -n $violation ]]; then
      local keep="${TMPDIR:-/tmp}/$name.failed.$idx"
      rm -rf "$keep" && cp -r "$dir" "$keep"
      echo "fail|$label|$kind FAILED: ${violation:-errors: $errors} ($stats); trail: cd $keep && spin $flags -t -p -g $name.pml" >"$dir.result"
    elif [[ -n $incomplete ]]; then
      echo "fail|$label|$kind INCOMPLETE (depth or memory limit; raise SPIN_MEMLIM) ($stats)" >"$dir.result"
    else
      echo "ok|$label|$kind ok ($stats)" >"$dir.result"
    fi
  else
    if ((errors > 0)) && [[ $violation == *"$expect"* ]]; then
      echo "ok|$label|violation found as expected: ${violation#pan:1: } ($stats)" >"$dir.result"
    elif ((errors > 0)); then
      echo "fail|$label|found a different violation than expected ($expect): $violation" >"$dir.result"
    elif [[ -n $incomplete ]]; then
      echo "fail|$label|expected violation not found and search INCOMPLETE ($stats)" >"$dir.result"
    else
      echo "fail|$label|expected violation ($expect) NOT found ($stats)" >"$dir.result"
    fi
  fi
}

start=$SECONDS
pids=()
for i in "${!runs[@]}"; do
  while (($(jobs -rp | wc -l) >= jobs)); do wait -n || true; done
  ( run_one "$i" "${runs[$i]}" ) &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || true; done

status=0
found_all=1
for i in "${!runs[@]}"; do
  result=$(cat "$work/$i.result" 2>/dev/null || echo "fail|${runs[$i]%%|*}|no result")
  IFS='|' read -r verdict label message <<<"$result"
  echo "${name}[$label]: $message"
  if [[ $verdict != ok ]]; then status=1; found_all=0; fi
done
if [[ $mode == mutant ]]; then
  if ((found_all)); then
    echo "$name mutant: every violation found as expected"
  else
    echo "$name mutant: a violation was NOT found -- the model or its checks are broken"
  fi
fi
echo "$name: $mode: ${#runs[@]} runs, $((SECONDS - start)) s, $([[ $status == 0 ]] && echo PASS || echo FAIL)"
exit $status
