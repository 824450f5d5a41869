#!/usr/bin/env python3
"""Prints BM_roundtrip_pairs' (or BM_connect_pairs') counters from a Google Benchmark JSON file
as a markdown table: one row per repetition, each family's median over the reference blocks beside
it (the line floor, or the socket's connect + call + close)."""
import json
import sys

FAMILIES = ["spin_ring", "sync", "co_await", "co_fast", "post_floor", "rpc_plain",
            "rpc_coroutine", "rpc_in_place"]


CONNECT_FAMILIES = ["shmio", "mapped_floor", "wake_floor"]


def connect_table(runs):
    print("| socket (µs) | " + " | ".join(f"{f} (µs) | {f} / socket" for f in CONNECT_FAMILIES) +
          " |")
    print("|---" * (2 * len(CONNECT_FAMILIES) + 1) + "|")
    for b in runs:
        cells = [f"{b['socket_median_us']:.1f}"]
        for f in CONNECT_FAMILIES:
            cells += [f"{b[f + '_median_us']:.1f}", f"{b[f + '_over_socket']:.2f}×"]
        print("| " + " | ".join(cells) + " |")


def main(path):
    with open(path) as f:
        all_runs = [b for b in json.load(f)["benchmarks"] if b.get("run_type") != "aggregate"]
    if any(b["name"].startswith("BM_connect_pairs") for b in all_runs):
        return connect_table([b for b in all_runs if b["name"].startswith("BM_connect_pairs")])
    runs = [b for b in all_runs if b["name"].startswith("BM_roundtrip_pairs")]
    print("| line (ns) | " + " | ".join(f"{f} / line" for f in FAMILIES) +
          " | co_await p99/p50 | co_fast p99/p50 |")
    print("|---" * (len(FAMILIES) + 3) + "|")
    for b in runs:
        cells = [f"{b['line_median_ns']:.0f}"]
        # A family a binary did not run (an older one) is a dash.
        cells += [f"{b[f + '_over_line']:.2f}×" if f + "_over_line" in b else "–" for f in FAMILIES]
        cells += [f"{b['co_await_p99_over_median']:.2f}", f"{b['co_fast_p99_over_median']:.2f}"]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1])
