#!/usr/bin/env python3
"""Prints BM_roundtrip_pairs' counters from a Google Benchmark JSON file as a markdown table:
one row per repetition, each family's median round trip over the line blocks beside it."""
import json
import sys

FAMILIES = ["spin_ring", "sync", "co_await", "co_fast", "post_floor"]


def main(path):
    with open(path) as f:
        runs = [b for b in json.load(f)["benchmarks"]
                if b["name"].startswith("BM_roundtrip_pairs") and b.get("run_type") != "aggregate"]
    print("| line (ns) | " + " | ".join(f"{f} / line" for f in FAMILIES) +
          " | co_await p99/p50 | co_fast p99/p50 |")
    print("|---" * (len(FAMILIES) + 3) + "|")
    for b in runs:
        cells = [f"{b['line_median_ns']:.0f}"]
        cells += [f"{b[f + '_over_line']:.2f}×" for f in FAMILIES]
        cells += [f"{b['co_await_p99_over_median']:.2f}", f"{b['co_fast_p99_over_median']:.2f}"]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1])
