#!/usr/bin/env python3
"""Summarise shmio_bench_events' Google Benchmark JSON output as ratios within one run.

Usage:
    build/bench/shmio_bench_events --benchmark_repetitions=3 \
        --benchmark_out=/tmp/ev.json --benchmark_out_format=json
    python3 bench/ratios.py /tmp/ev.json            # plain text
    python3 bench/ratios.py --markdown /tmp/ev.json # the tables of docs/performance.md

Reads BM_roundtrip/<family>/<placement>[/...] entries (per-repetition runs; Google Benchmark's
own aggregate rows are ignored and recomputed, so any --benchmark_repetitions works, including
1). For each placement it prints each family's median and mean (over repetitions) real time per
round trip and the ratio of its median to the medians of spin_floor/split, eventfd_blocking
(same placement), epoll_eventfd (same placement: the floor of a parked async wait) and
asio_local_stream (same placement).

Google Benchmark's real time is the mean over all round trips of a repetition, so a few long
stalls (another tenant preempting us) move it. The benchmark also reports the counter
median_ns: the median, over batches of 16 round trips, of the batch's mean round trip. A second
table gives that figure (median over repetitions) and the same ratios computed from it.

BM_parked_pairs/<placement> (see bench/event_pingpong.cpp) measures eventfd_blocking,
epoll_eventfd and shmio_async_park in alternating blocks between the same two processes and
reports paired ratios; a third table gives them (median over repetitions, and the range), and
the parked targets are checked with them too. BM_syscall/<probe> prices single system calls.

Then it checks the targets, with both figures:

    hot async round trip   shmio_async/split       <= 3.0 x spin_floor/split
    parked                 shmio_async_park/P      <= 1.1 x eventfd_blocking/P   (P = split, same)
    same core              shmio_async/same        <= 2.0 x eventfd_blocking/same

Only the Python standard library is used. Reading '-' reads standard input.
"""

import argparse
import json
import statistics
import sys

UNIT_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}

FAMILY_ORDER = [
    "spin_floor",
    "eventfd_blocking",
    "epoll_eventfd",
    "asio_local_stream",
    "shmio_sync",
    "shmio_async",
    "shmio_async_park",
    "shmio_co_wait",
    "shmio_sync_pinlate",
    "shmio_async_pinlate",
]
PLACEMENTS = ["split", "same"]

# (label, numerator family, numerator placement, denominator family, denominator placement, limit)
TARGETS = [
    ("hot async round trip", "shmio_async", "split", "spin_floor", "split", 3.0),
    ("parked, split cores", "shmio_async_park", "split", "eventfd_blocking", "split", 1.1),
    ("parked, same core", "shmio_async_park", "same", "eventfd_blocking", "same", 1.1),
    ("same core (default strategy)", "shmio_async", "same", "eventfd_blocking", "same", 2.0),
]
# Not targets: shown so that the reader sees what the diagnostic families say.
DIAGNOSTICS = [
    # The fast coroutine form: what a coroutine that waits for a set event pays, against the
    # same limit as the default token path.
    ("hot coroutine round trip (co_wait)", "shmio_co_wait", "split", "spin_floor", "split", 3.0),
    # The floor of a parked async wait: no wait that runs in a reactor wakes faster than a bare
    # epoll_wait does, so when this row is over the parked limit, so is any reactor-based wait.
    ("bare epoll wake-up (the floor for any reactor), split", "epoll_eventfd", "split",
     "eventfd_blocking", "split", 1.1),
    ("bare epoll wake-up (the floor for any reactor), same", "epoll_eventfd", "same",
     "eventfd_blocking", "same", 1.1),
    ("parked, split cores, over the bare epoll wake-up", "shmio_async_park", "split",
     "epoll_eventfd", "split", 1.1),
    ("parked, same core, over the bare epoll wake-up", "shmio_async_park", "same",
     "epoll_eventfd", "same", 1.1),
    ("hot async, events made before pinning", "shmio_async_pinlate", "split", "spin_floor",
     "split", 3.0),
    ("hot sync, default strategy", "shmio_sync", "split", "spin_floor", "split", 3.0),
    ("same core, sync", "shmio_sync", "same", "eventfd_blocking", "same", 2.0),
    ("same core, events made before pinning", "shmio_async_pinlate", "same", "eventfd_blocking",
     "same", 2.0),
]


def load(path):
    if path == "-":
        return json.load(sys.stdin)
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def collect(doc):
    """Returns {(family, placement): [ns per round trip, one per repetition]} for the real time
    and for the median_ns counter, and the runs skipped because of an error."""
    runs, batch, errors = {}, {}, []
    for b in doc.get("benchmarks", []):
        if b.get("run_type", "iteration") != "iteration":
            continue
        name = b.get("run_name") or b.get("name", "")
        parts = name.split("/")
        if len(parts) < 3 or parts[0] != "BM_roundtrip":
            continue
        key = (parts[1], parts[2])
        if b.get("error_occurred"):
            errors.append((name, b.get("error_message", "")))
            continue
        ns = float(b["real_time"]) * UNIT_NS[b.get("time_unit", "ns")]
        runs.setdefault(key, []).append(ns)
        if "median_ns" in b:
            batch.setdefault(key, []).append(float(b["median_ns"]))
    return runs, batch, errors


PAIR_COUNTERS = ["eventfd_ns", "epoll_ns", "park_ns", "park_over_eventfd", "epoll_over_eventfd",
                 "park_over_epoll"]


def runs_of(doc, benchmark):
    """Yields (second name part, entry) for each successful repetition of `benchmark`/..."""
    for b in doc.get("benchmarks", []):
        if b.get("run_type", "iteration") != "iteration" or b.get("error_occurred"):
            continue
        parts = (b.get("run_name") or b.get("name", "")).split("/")
        if len(parts) >= 2 and parts[0] == benchmark:
            yield parts[1], b


def collect_pairs(doc):
    """Returns {placement: {counter: [value, one per repetition]}} for BM_parked_pairs."""
    pairs = {}
    for placement, b in runs_of(doc, "BM_parked_pairs"):
        for c in PAIR_COUNTERS:
            if c in b:
                pairs.setdefault(placement, {}).setdefault(c, []).append(float(b[c]))
    return pairs


def collect_syscalls(doc):
    """Returns {probe: [ns per call, one per repetition]} for BM_syscall/<probe>."""
    costs = {}
    for probe, b in runs_of(doc, "BM_syscall"):
        costs.setdefault(probe, []).append(float(b["real_time"]) * UNIT_NS[b.get("time_unit", "ns")])
    return costs


def print_pairs(pairs, md):
    header = ["placement", "reps", "eventfd", "epoll_eventfd", "shmio_async_park",
              "park ÷ eventfd", "epoll ÷ eventfd", "park ÷ epoll"]
    rows = []
    for p in PLACEMENTS:
        if p not in pairs:
            continue
        v = pairs[p]
        med = {c: statistics.median(v[c]) for c in PAIR_COUNTERS if c in v}
        def span(c):
            return f"{fmt_ratio(med[c])} ({min(v[c]):.2f}–{max(v[c]):.2f})"
        rows.append([p, str(len(v["park_ns"])), fmt_time(med["eventfd_ns"]),
                     fmt_time(med["epoll_ns"]), fmt_time(med["park_ns"]),
                     span("park_over_eventfd"), span("epoll_over_eventfd"),
                     span("park_over_epoll")])
    title = ("parked mechanisms interleaved (BM_parked_pairs): median block medians, and the "
             "median over repetitions of the per-round paired ratios (range)")
    print(f"**{title}**\n" if md else title)
    print_table(header, rows, md)


def fmt_time(ns):
    if ns is None:
        return "-"
    if ns >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.2f} µs"
    return f"{ns:.0f} ns"


def fmt_ratio(r):
    if r is None:
        return "-"
    return f"{r:.2f}×" if r < 100 else f"{r:.0f}×"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json", help="Google Benchmark JSON output ('-' for stdin)")
    ap.add_argument("--markdown", action="store_true", help="print Markdown tables")
    args = ap.parse_args()

    doc = load(args.json)
    runs, batch, errors = collect(doc)
    pairs = collect_pairs(doc)
    if not runs:
        sys.exit("no BM_roundtrip results in " + args.json)

    median = {k: statistics.median(v) for k, v in runs.items()}
    mean = {k: statistics.fmean(v) for k, v in runs.items()}
    bmedian = {k: statistics.median(v) for k, v in batch.items()}

    def ratio_of(table):
        def ratio(num, den):
            if num not in table or den not in table or table[den] == 0:
                return None
            return table[num] / table[den]
        return ratio

    ratio, bratio = ratio_of(median), ratio_of(bmedian)

    ctx = doc.get("context", {})
    md = args.markdown
    print(("**Run:** " if md else "run: ") + f"{ctx.get('date', '?')}, {ctx.get('num_cpus', '?')} "
          f"CPUs at {ctx.get('mhz_per_cpu', '?')} MHz, load average "
          f"{', '.join(f'{x:.2f}' for x in ctx.get('load_avg', [])) or '?'} "
          f"(at start), executable {ctx.get('executable', '?')}")
    print()
    families = [f for f in FAMILY_ORDER if any((f, p) in runs for p in PLACEMENTS)]
    families += sorted({f for f, _ in runs} - set(families))

    for p in PLACEMENTS:
        if not any((f, p) in runs for f in families):
            continue
        where = " (parent CPU 0, child CPU 1)" if p == "split" else " (both on CPU 0)"
        den = [("spin_floor", "split"), ("eventfd_blocking", p), ("epoll_eventfd", p),
               ("asio_local_stream", p)]
        den_names = ["÷ spin_floor/split", f"÷ eventfd/{p}", f"÷ epoll_eventfd/{p}",
                     f"÷ asio_stream/{p}"]

        header = ["family", "reps", "median", "mean", "min", "max"] + den_names
        rows = []
        for f in families:
            k = (f, p)
            if k not in runs:
                continue
            v = runs[k]
            rows.append([f, str(len(v)), fmt_time(median[k]), fmt_time(mean[k]),
                         fmt_time(min(v)), fmt_time(max(v))]
                        + [fmt_ratio(ratio(k, d)) for d in den])
        title = f"placement: {p}{where}, Google Benchmark real time per round trip"
        print(f"**{title}**\n" if md else title)
        print_table(header, rows, md)
        print()

        header = ["family", "reps", "median_ns", "min", "max"] + den_names
        rows = []
        for f in families:
            k = (f, p)
            if k not in batch:
                continue
            v = batch[k]
            rows.append([f, str(len(v)), fmt_time(bmedian[k]), fmt_time(min(v)),
                         fmt_time(max(v))] + [fmt_ratio(bratio(k, d)) for d in den])
        if rows:
            title = f"placement: {p}{where}, median of 16-round-trip batches (median_ns)"
            print(f"**{title}**\n" if md else title)
            print_table(header, rows, md)
            print()

    if pairs:
        print_pairs(pairs, md)
        print()
    costs = collect_syscalls(doc)
    if costs:
        title = "system calls, one process, no wake-up (BM_syscall; median over repetitions)"
        print(f"**{title}**\n" if md else title)
        print_table(["probe", "reps", "time"],
                    [[k, str(len(v)), fmt_time(statistics.median(v))] for k, v in costs.items()],
                    md)
        print()

    print("**Targets** (ratios of medians over repetitions)\n" if md
          else "targets (ratios of medians over repetitions):")
    print_targets(TARGETS, ratio, bratio, md)
    if pairs:
        print()
        header = ["check", "measured", "limit", "paired ratio", "result",
                  "the floor for a reactor (epoll ÷ eventfd)"]
        rows = []
        for p in PLACEMENTS:
            if p not in pairs:
                continue
            r = statistics.median(pairs[p]["park_over_eventfd"])
            floor = statistics.median(pairs[p]["epoll_over_eventfd"])
            rows.append([f"parked, {p}, interleaved", f"BM_parked_pairs/{p}", "≤ 1.1×",
                         fmt_ratio(r), "met" if r <= 1.1 else "NOT met", fmt_ratio(floor)])
        print_table(header, rows, md)
    print()
    print("**Diagnostics, not targets**\n" if md else "diagnostics, not targets:")
    print_targets(DIAGNOSTICS, ratio, bratio, md)

    if errors:
        print()
        print("skipped (error):")
        for name, msg in errors:
            print(f"  {name}: {msg}")


def print_targets(targets, ratio, bratio, md):
    header = ["check", "measured", "limit", "real time", "result", "median_ns", "result"]
    rows = []
    for label, nf, np_, df, dp, limit in targets:
        row = [label, f"{nf}/{np_} ÷ {df}/{dp}", f"≤ {limit:g}×"]
        for rf in (ratio, bratio):
            r = rf((nf, np_), (df, dp))
            row += [fmt_ratio(r), "no data" if r is None else ("met" if r <= limit else "NOT met")]
        rows.append(row)
    print_table(header, rows, md)


def print_table(header, rows, md):
    if md:
        print("| " + " | ".join(header) + " |")
        print("|" + "|".join("---" if i == 0 else "--:" for i in range(len(header))) + "|")
        for r in rows:
            print("| " + " | ".join(r) + " |")
        return
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    print("  " + "  ".join(h.ljust(w) if i == 0 else h.rjust(w)
                           for i, (h, w) in enumerate(zip(header, widths))))
    for r in rows:
        print("  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                               for i, (c, w) in enumerate(zip(r, widths))))


if __name__ == "__main__":
    main()
