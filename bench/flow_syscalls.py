#!/usr/bin/env python3
"""Counts the system calls per message of the ring's throughput benchmarks.

Usage:
    python3 bench/flow_syscalls.py build/bench/shmio_bench_ring [--markdown]
        [--filter REGEX]

Each BM_ring_throughput benchmark runs exactly one timed iteration (a fixed number of messages,
1 M for shmio), so one run of the binary filtered to it, under `perf stat`, counts the system
calls of that iteration plus the setup (forks, segment creation: a few thousand calls). The
message count comes from the benchmark's own JSON output (items per second x manual time).
Producers and consumers are busy the whole time, so this is the "both sides busy" figure.
Needs perf with access to the raw_syscalls tracepoint (root, or a permissive
kernel.perf_event_paranoid). Only the Python standard library is used.
"""

import argparse
import json
import re
import subprocess
import sys

DEFAULT = (r"^BM_ring_throughput/"
           r"(shmio_sync|shmio_async|shmio_sync_batch|shmio_async_batch|asio_local_stream)/")


def run(binary, name):
    cmd = ["perf", "stat", "-x", ",", "-e", "raw_syscalls:sys_enter,context-switches", binary,
           f"--benchmark_filter=^{re.escape(name)}$", "--benchmark_format=json"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{p.stderr}")
    doc = json.loads(p.stdout)
    b = doc["benchmarks"][0]
    if b.get("error_occurred"):
        sys.exit(f"{name}: {b.get('error_message')}")
    seconds = b["real_time"] * {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1}[b["time_unit"]]
    messages = b["items_per_second"] * seconds
    counts = {}
    for line in p.stderr.splitlines():
        fields = line.split(",")
        if len(fields) > 2 and fields[0].strip().isdigit():
            counts[fields[2]] = int(fields[0])
    return messages, counts.get("raw_syscalls:sys_enter", 0), counts.get("context-switches", 0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--filter", default=DEFAULT)
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    listed = subprocess.run([args.binary, "--benchmark_list_tests"], capture_output=True,
                            text=True, check=True).stdout.split()
    names = [n for n in listed if re.search(args.filter, n)]
    rows = []
    for n in names:
        messages, calls, switches = run(args.binary, n)
        rows.append((re.sub(r"/(iterations:\d+|manual_time|real_time)", "", n), messages,
                     calls / messages, switches / messages))
    if args.markdown:
        print("| benchmark | messages | syscalls per message | context switches per message |")
        print("|---|--:|--:|--:|")
        for n, m, c, s in rows:
            print(f"| {n} | {m:.0f} | {c:.4f} | {s:.4f} |")
    else:
        for n, m, c, s in rows:
            print(f"{n}: {m:.0f} messages, {c:.4f} syscalls/message, {s:.4f} switches/message")


if __name__ == "__main__":
    main()
