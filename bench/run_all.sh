#!/usr/bin/env bash
# Runs every benchmark in one go and writes what docs/performance.md quotes:
#   OUT/{events,ring,rpc,locks,broadcast,roundtrip,service,connect,stream}.json, and cli.json
#                                                if shmio_bench_cli was built: Google
#                                                Benchmark's output, REPS repetitions each (the
#                                                report quotes all but stream and cli, which
#                                                docs/performance.md reads from their JSON)
#   OUT/report.md                                the tables, ratios and target checks
#   PLOTS/ring_latency_vs_size.png, PLOTS/ring_throughput.png   (gnuplot; Debian gnuplot-nox)
# Usage: bench/run_all.sh [BUILD_DIR (build)] [OUT (bench-results)] [REPS (3)] [PLOTS (OUT/img)]
# Run it on an otherwise idle machine: the benchmarks fork busy processes onto both CPUs, and
# anything else running shows in the figures. The system-call counts need perf (linux-perf).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
out=${2:-bench-results}
reps=${3:-3}
plots=${4:-$out/img}
mkdir -p "$out" "$plots"

run() {  # run NAME BINARY: one benchmark binary, its JSON to OUT/NAME.json
  echo "== $1 (load average: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
  "$build/bench/$2" --benchmark_repetitions="$reps" --benchmark_out="$out/$1.json" \
    --benchmark_out_format=json >/dev/null
}

start=$(date -u +%FT%TZ)
run events shmio_bench_events
run ring shmio_bench_ring
run rpc shmio_bench_rpc
run locks shmio_bench_locks
run broadcast shmio_bench_broadcast
run roundtrip shmio_bench_roundtrip
run service shmio_bench_rpc_service
run connect shmio_bench_connect
run stream shmio_bench_rpc_stream
if [ -x "$build/bench/shmio_bench_cli" ]; then run cli shmio_bench_cli; fi

{
  echo "Started $start on $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- |
    sed 's/^ //')), kernel $(uname -r), commit $(git -C "$root" rev-parse --short HEAD)."
  echo
  echo "## Named events"
  echo
  python3 "$root/bench/ratios.py" --markdown "$out/events.json"
  echo
  echo "## Ring, RPC, locks, broadcast, RPC service"
  echo
  python3 "$root/bench/report.py" --ring "$out/ring.json" --rpc "$out/rpc.json" \
    --locks "$out/locks.json" --broadcast "$out/broadcast.json" --service "$out/service.json" \
    --plots "$plots"
  echo
  echo "## Interleaved round trips (BM_roundtrip_pairs), one row per repetition"
  echo
  python3 "$root/bench/pairs_table.py" "$out/roundtrip.json"
  echo
  echo "## Connect + one call + close, interleaved with the socket (BM_connect_pairs)"
  echo
  python3 "$root/bench/pairs_table.py" "$out/connect.json"
  if command -v perf >/dev/null; then
    echo
    echo "## System calls"
    echo
    python3 "$root/bench/syscalls.py" "$build/bench/shmio_bench_events" --roundtrips 20000 \
      --markdown
    echo
    python3 "$root/bench/flow_syscalls.py" "$build/bench/shmio_bench_ring" --markdown
  fi
} >"$out/report.md"
echo "report: $out/report.md" >&2
