#!/usr/bin/env python3
"""Counts the system calls and context switches of one round trip, per benchmark family.

Usage:
    python3 bench/syscalls.py build/bench/shmio_bench_events [--roundtrips N] [--markdown]
        [--filter REGEX]

For each BM_roundtrip/<family>/<placement> (spin_floor/same excepted: it runs a fixed 32 round
trips), runs the benchmark binary alone under `perf stat` with --roundtrips=N, which makes it do
exactly N timed round trips after N/10 warm-up ones, and divides the kernel's counts (parent and
child together, setup included: a few hundred calls, under 0.05 per round trip for N >= 5000)
by 1.1 N. Needs perf with access to the syscalls:* tracepoints (root, or a permissive
kernel.perf_event_paranoid). Only the Python standard library is used.
"""

import argparse
import re
import subprocess
import sys

SYSCALLS = ["epoll_wait", "epoll_ctl", "timerfd_settime", "sendto", "recvfrom", "recvmmsg",
            "futex", "sched_yield", "read", "write"]
FAMILIES = ["spin_floor", "eventfd_blocking", "epoll_eventfd", "asio_local_stream", "shmio_sync",
            "shmio_async", "shmio_async_park", "shmio_co_wait", "shmio_sync_pinlate",
            "shmio_async_pinlate"]
PLACEMENTS = ["split", "same"]


def count(binary, name, n):
    events = ["raw_syscalls:sys_enter", "context-switches"] + [
        f"syscalls:sys_enter_{s}" for s in SYSCALLS]
    cmd = ["perf", "stat", "-x", ",", "-e", ",".join(events), binary,
           f"--benchmark_filter=^{re.escape(name)}/", f"--roundtrips={n}",
           "--benchmark_format=json"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{p.stderr}")
    if '"error_occurred": true' in p.stdout:
        sys.exit(f"{name}: the benchmark reported an error:\n{p.stdout}")
    result = {}
    for line in p.stderr.splitlines():
        f = line.split(",")
        if len(f) < 3 or not f[0].strip().isdigit():
            continue
        ev = f[2]
        key = ("total" if ev == "raw_syscalls:sys_enter" else
               "ctx" if ev == "context-switches" else ev.replace("syscalls:sys_enter_", ""))
        result[key] = int(f[0]) / (1.1 * n)
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("binary", help="path to shmio_bench_events")
    ap.add_argument("--roundtrips", type=int, default=20000)
    ap.add_argument("--filter", default="", help="only names matching this regex")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()

    header = ["benchmark", "all syscalls", "ctx switches"] + SYSCALLS
    rows = []
    for f in FAMILIES:
        for p in PLACEMENTS:
            if f == "spin_floor" and p == "same":
                continue
            name = f"BM_roundtrip/{f}/{p}"
            if args.filter and not re.search(args.filter, name):
                continue
            c = count(args.binary, name, args.roundtrips)
            rows.append([f"{f}/{p}", f"{c.get('total', 0):.2f}", f"{c.get('ctx', 0):.2f}"]
                        + [f"{c.get(s, 0):.2f}" for s in SYSCALLS])
            if not args.markdown:
                print("  ".join(rows[-1]), flush=True)
    if args.markdown:
        print(f"Per round trip, both processes, --roundtrips={args.roundtrips}:\n")
        print("| " + " | ".join(header) + " |")
        print("|" + "|".join("---" if i == 0 else "--:" for i in range(len(header))) + "|")
        for r in rows:
            print("| " + " | ".join(r) + " |")
    else:
        print("columns: " + ", ".join(header))


if __name__ == "__main__":
    main()
