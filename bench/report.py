#!/usr/bin/env python3
"""Tables, ratios, target checks and plots from the ring and RPC benchmarks' JSON output.

Usage:
    build/bench/shmio_bench_ring --benchmark_repetitions=3 \
        --benchmark_out=ring.json --benchmark_out_format=json
    build/bench/shmio_bench_rpc --benchmark_repetitions=3 \
        --benchmark_out=rpc.json --benchmark_out_format=json
    build/bench/shmio_bench_locks --benchmark_repetitions=3 \
        --benchmark_out=locks.json --benchmark_out_format=json
    build/bench/shmio_bench_broadcast --benchmark_repetitions=3 \
        --benchmark_out=broadcast.json --benchmark_out_format=json
    build/bench/shmio_bench_rpc_service --benchmark_repetitions=3 \
        --benchmark_out=service.json --benchmark_out_format=json
    python3 bench/report.py --ring ring.json --rpc rpc.json [--locks locks.json]
        [--broadcast broadcast.json] [--service service.json] [--plots docs/img]

Prints Markdown: per benchmark the median over repetitions of its figure (round trips: the
median_ns counter, see bench/support.hpp; flows: items or bytes per second), its ratio to the
same-run baseline, and each target with PASS or MISS. With --plots DIR it also writes, with
gnuplot (Debian: gnuplot-nox), DIR/ring_latency_vs_size.png and DIR/ring_throughput.png.
Only the Python standard library is used (and gnuplot for the plots).
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile


def load(path):
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    runs, errors = {}, []
    for b in doc.get("benchmarks", []):
        if b.get("run_type", "iteration") != "iteration":
            continue
        name = re.sub(r"/(iterations:\d+|min_time:[\d.]+|real_time|manual_time)", "", b["run_name"]
                      if "run_name" in b else b["name"])
        if b.get("error_occurred"):
            errors.append((name, b.get("error_message", "")))
            continue
        runs.setdefault(name, []).append(b)
    return doc.get("context", {}), runs, errors


def median_of(runs, name, key):
    vals = []
    for b in runs.get(name, []):
        if key == "ns":
            v = b.get("median_ns")
            if v is None:
                v = b["real_time"] * {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}[b["time_unit"]]
        else:
            v = b.get(key)
        if v is not None:
            vals.append(float(v))
    return statistics.median(vals) if vals else None


def fmt_ns(v):
    if v is None:
        return "-"
    return f"{v / 1e3:.2f} µs" if v >= 1e3 else f"{v:.0f} ns"


def fmt_rate(v, unit):
    if v is None:
        return "-"
    if unit == "B/s":
        return f"{v / 1e9:.2f} GB/s" if v >= 1e9 else f"{v / 1e6:.0f} MB/s"
    return f"{v / 1e6:.2f} M/s" if v >= 1e6 else f"{v / 1e3:.1f} k/s"


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


def fmt_ratio(r):
    return "-" if r is None else f"{r:.2f}×"


class targets:
    rows = []

    @classmethod
    def check(cls, label, value, limit, higher_is_better, shown, floor_shown="-"):
        """`floor_shown`: the same figure for the same run's bare floor (no library), where the
        target is one the floor itself may miss on this machine."""
        ok = None if value is None else (value >= limit if higher_is_better else value <= limit)
        verdict = "-" if ok is None else ("PASS" if ok else "MISS")
        sign = "≥" if higher_is_better else "≤"
        cls.rows.append((label, shown, f"{sign} {limit:g}", verdict, floor_shown))


SHMIO_FLOWS = ("shmio_sync", "shmio_async", "shmio_sync_batch", "shmio_async_batch")


def best_flow(runs, shape):
    """The highest 64-byte message rate of the shmio families at `shape`, and its family."""
    rates = [(median_of(runs, f"BM_ring_throughput/{f}/{shape}", "items_per_second"), f)
             for f in SHMIO_FLOWS]
    rates = [(v, f) for v, f in rates if v is not None]
    return max(rates) if rates else (None, None)


def ring_tables(runs):
    out = ["### Ring round trip (two rings, echo; median of batch medians)", "",
           "| family | placement | bytes | round trip | p99 of batches | / spin_ring | / asio_local_stream |",
           "|---|---|---|---|---|---|---|"]
    def key(n):
        _, fam, pl, size = n.split("/")
        return (pl != "split", int(size), fam)

    names = sorted((n for n in runs if n.startswith("BM_ring_roundtrip/")), key=key)
    for n in names:
        _, fam, pl, size = n.split("/")
        v = median_of(runs, n, "ns")
        floor = median_of(runs, f"BM_ring_roundtrip/spin_ring/split/{size}", "ns")
        stream = median_of(runs, f"BM_ring_roundtrip/asio_local_stream/{pl}/{size}", "ns")
        out.append(f"| {fam} | {pl} | {size} | {fmt_ns(v)} | "
                   f"{fmt_ns(median_of(runs, n, 'p99_batch_ns'))} | "
                   f"{fmt_ratio(ratio(v, floor)) if pl == 'split' else '-'} | "
                   f"{fmt_ratio(ratio(v, stream))} |")
    out += ["", "### Ring throughput, 64-byte messages, producer and consumer processes", "",
            "| family | shape | messages/s | / spin_ring 1p1c |", "|---|---|---|---|"]
    floor = median_of(runs, "BM_ring_throughput/spin_ring/1p1c", "items_per_second")
    for n in sorted(n for n in runs if n.startswith("BM_ring_throughput/")):
        _, fam, shape = n.split("/")
        v = median_of(runs, n, "items_per_second")
        out.append(f"| {fam} | {shape} | {fmt_rate(v, 'msg/s')} | {fmt_ratio(ratio(v, floor))} |")
    pair = "BM_ring_flow_pairs/1p1c"
    if median_of(runs, pair, "spin_ring_rate") is not None:
        out += ["", "### 1p1c flows interleaved (BM_ring_flow_pairs): blocks of 200 000 messages "
                "through each family in turn, same two processes", "",
                "| family | messages/s (median block) | / spin_ring, paired (median round) |",
                "|---|---|---|"]
        references = ("node_ring_release", "node_ring_parkable", "node_ring_claims",
                      "node_ring_atomics", "co_node_floor")
        for fam in ("spin_ring", *references, *SHMIO_FLOWS, "shmio_co"):
            if median_of(runs, pair, f"{fam}_rate") is None:
                continue  # a run from before the family was added
            r = median_of(runs, pair, f"{fam}_over_spin")
            out.append(f"| {fam} | {fmt_rate(median_of(runs, pair, f'{fam}_rate'), 'msg/s')} | "
                       f"{'1.00×' if fam == 'spin_ring' else fmt_ratio(r)} |")
    out += ["", "### Ring bandwidth, 1 MiB messages, one producer and one consumer process", "",
            "| family | bytes/s | / spin_ring |", "|---|---|---|"]
    floor_bw = median_of(runs, "BM_ring_bandwidth/spin_ring", "bytes_per_second")
    for n in sorted(n for n in runs if n.startswith("BM_ring_bandwidth/")):
        v = median_of(runs, n, "bytes_per_second")
        out.append(f"| {n.split('/')[1]} | {fmt_rate(v, 'B/s')} | {fmt_ratio(ratio(v, floor_bw))} |")
    out += ["", "### One process: write then read one 64-byte message", "",
            "| form | per write + read | allocations |", "|---|---|---|"]
    for n in sorted(n for n in runs if n.startswith("BM_ring_local/")):
        allocs = median_of(runs, n, "allocs_per_iter")
        out.append(f"| {n.split('/')[1]} | {fmt_ns(median_of(runs, n, 'ns'))} | "
                   f"{'-' if allocs is None else f'{allocs:.3f}'} |")

    rt = median_of(runs, "BM_ring_roundtrip/shmio_async/split/64", "ns")
    fl = median_of(runs, "BM_ring_roundtrip/spin_ring/split/64", "ns")
    r = ratio(rt, fl)
    targets.check("ring round trip 64 B, async / spin floor", r, 3.0, False, fmt_ratio(r))
    stream = median_of(runs, "BM_ring_roundtrip/asio_local_stream/split/64", "ns")
    r = ratio(stream, rt)
    targets.check("ring round trip 64 B, async: times faster than asio local stream", r, 100,
                  True, fmt_ratio(r), fmt_ratio(ratio(stream, fl)))
    for shape, limit in (("1p1c", 20), ("4p4c", 5)):
        best, fam = best_flow(runs, shape)
        targets.check(f"ring {shape} 64 B (best of sync/async/sync_batch/async_batch"
                      f"{': ' + fam if fam else ''}), M msg/s",
                      None if best is None else best / 1e6, limit, True, fmt_rate(best, "msg/s"),
                      fmt_rate(floor, "msg/s") if shape == "1p1c" else "-")
    bw = max(filter(None, [median_of(runs, f"BM_ring_bandwidth/{f}", "bytes_per_second")
                           for f in ("shmio_sync", "shmio_async")]), default=None)
    r = ratio(bw, floor_bw)
    targets.check("ring 1 MiB bandwidth / spin ring", r, 0.7, True, fmt_ratio(r))
    return out


def rpc_tables(runs):
    out = ["### RPC round trip, 64 bytes each way (median of batch medians)", "",
           "| family | placement | round trip | p99 of batches | / spin_ring | / asio_local_stream | "
           "allocations per call |", "|---|---|---|---|---|---|---|"]
    floor = median_of(runs, "BM_rpc_roundtrip/spin_ring/split", "ns")
    for n in sorted(n for n in runs if n.startswith("BM_rpc_roundtrip/")):
        _, fam, pl = n.split("/")
        v = median_of(runs, n, "ns")
        stream = median_of(runs, f"BM_rpc_roundtrip/asio_local_stream/{pl}", "ns")
        allocs = median_of(runs, n, "allocs_per_iter")
        out.append(f"| {fam} | {pl} | {fmt_ns(v)} | "
                   f"{fmt_ns(median_of(runs, n, 'p99_batch_ns'))} | "
                   f"{fmt_ratio(ratio(v, floor)) if pl == 'split' else '-'} | "
                   f"{fmt_ratio(ratio(v, stream))} | {'-' if allocs is None else f'{allocs:.1f}'} |")
    def allocs_text(v):
        return '-' if v is None else f'{v:.1f}'

    out += ["", "### RPC pipelined 1 KiB calls and 512 KiB requests", "",
            "| benchmark | family | rate | allocations per call | the server's |",
            "|---|---|---|---|---|"]
    for n in sorted(n for n in runs if n.startswith("BM_rpc_pipelined/")):
        v = median_of(runs, n, "items_per_second")
        out.append(f"| pipelined, calls/s | {'/'.join(n.split('/')[1:])} | {fmt_rate(v, 'calls/s')} | "
                   f"{allocs_text(median_of(runs, n, 'allocs_per_call'))} | "
                   f"{allocs_text(median_of(runs, n, 'server_allocs_per_call'))} |")
    for n in sorted(n for n in runs if n.startswith("BM_rpc_bulk/")):
        v = median_of(runs, n, "bytes_per_second")
        out.append(f"| 512 KiB requests | {n.split('/')[1]} | {fmt_rate(v, 'B/s')} | "
                   f"{allocs_text(median_of(runs, n, 'allocs_per_iter'))} | - |")

    # The owner's handler may be a coroutine (shmio_rpc) or a plain function (shmio_rpc_plain):
    # each target takes the better of the two and names it.
    def best(kind, key, lower_is_better):
        vals = [(median_of(runs, kind.format(f), key), f) for f in ("shmio_rpc", "shmio_rpc_plain")]
        vals = [(v, f) for v, f in vals if v is not None]
        if not vals:
            return None, None
        return (min if lower_is_better else max)(vals)

    rt, fam = best("BM_rpc_roundtrip/{}/split", "ns", True)
    r = ratio(rt, floor)
    targets.check(f"rpc round trip 64 B / spin floor{' (' + fam + ')' if fam else ''}", r, 3.0,
                  False, fmt_ratio(r))
    stream = median_of(runs, "BM_rpc_roundtrip/asio_local_stream/split", "ns")
    r = ratio(stream, rt)
    targets.check("rpc round trip: times faster than asio local stream", r, 100, True, fmt_ratio(r),
                  fmt_ratio(ratio(stream, floor)))
    p, fam = best("BM_rpc_pipelined/{}", "items_per_second", False)
    targets.check(f"rpc pipelined 1 KiB{' (' + fam + ')' if fam else ''}, k calls/s",
                  None if p is None else p / 1e3, 300, True, fmt_rate(p, "calls/s"))
    return out


def service_tables(runs):
    """bench/rpc_service_bench.cpp: one server, many client processes."""
    out = ["### RPC service: 64-byte calls from client processes, 8 in flight each", "",
           "| family | clients | calls/s, all clients | median batch | / 1 client | "
           "/ asio_local_stream | allocations per call (clients) | fewest / most calls per client |",
           "|---|---|---|---|---|---|---|---|"]

    def rate(fam, n):
        return median_of(runs, f"BM_service_clients/{fam}/clients:{n}", "items_per_second")

    def num(v, digits):
        return "-" if v is None else f"{v:.{digits}f}"

    def key(n):
        _, fam, clients = n.split("/")
        return (fam != "shmio_service", int(clients.split(":")[1]))

    for n in sorted((n for n in runs if n.startswith("BM_service_clients/")), key=key):
        _, fam, clients = n.split("/")
        count = clients.split(":")[1]
        v = median_of(runs, n, "items_per_second")
        out.append(f"| {fam} | {count} | {fmt_rate(v, 'calls/s')} | "
                   f"{fmt_rate(median_of(runs, n, 'median_items_per_second'), 'calls/s')} | "
                   f"{fmt_ratio(ratio(v, rate(fam, 1)))} | "
                   f"{fmt_ratio(ratio(v, rate('asio_local_stream', count)))} | "
                   f"{num(median_of(runs, n, 'allocs_per_call'), 2)} | "
                   f"{num(median_of(runs, n, 'min_over_max_client'), 3)} |")

    r = ratio(rate("shmio_service", 16), rate("shmio_service", 1))
    targets.check("rpc service: 16 clients' calls/s / 1 client's (shmio_service)", r, 0.8, True,
                  fmt_ratio(r))
    r = ratio(rate("shmio_service", 16), rate("asio_local_stream", 16))
    targets.check("rpc service: 16 clients, times the same over asio local stream", r, 10, True,
                  fmt_ratio(r))
    return out


def lock_tables(runs):
    out = ["### Reader/writer lock: one acquire + release (median over repetitions)", "",
           "| mode | contention | shmio rw_lock | pthread_rwlock (process-shared) | shmio / pthread |",
           "|---|---|---|---|---|"]
    for mode in ("exclusive", "shared"):
        for shape, suffix in (("uncontended", "/uncontended"), ("2 threads", "/threads:2"),
                              ("2 processes", "/process")):
            names = {impl: f"{mode}/{impl}{suffix}" for impl in ("shmio", "pthread")}
            v = {impl: median_of(runs, n, "ns") for impl, n in names.items()}
            out.append(f"| {mode} | {shape} | {fmt_ns(v['shmio'])} | {fmt_ns(v['pthread'])} | "
                       f"{fmt_ratio(ratio(v['shmio'], v['pthread']))} |")
    return out


def broadcast_tables(runs):
    out = ["### Broadcast, 64-byte messages, one writer process (median over repetitions)", "",
           "| mode | subscribers | messages/s published | mean latency | slowest subscriber's "
           "mean latency | received per subscriber | rate received / local stream |",
           "|---|---|---|---|---|---|---|"]
    for n in sorted(n for n in runs if n.startswith("BM_broadcast")):
        m = re.search(r"subscribers:(\d+)(?:/lossy:(\d))?", n)
        if not m:
            continue
        rate = median_of(runs, n, "items_per_second")
        base = median_of(runs, f"BM_broadcast_local_stream/subscribers:{m.group(1)}",
                         "items_per_second")
        received = median_of(runs, n, "received_per_sub")
        # Compared with the socket by what each subscriber receives: a lossy one gets only part
        # of what is published (the socket's subscribers get every message).
        # Per repetition, then the median: the three figures of one run belong together.
        per_run = [b["items_per_second"] * b["received_per_sub"] / b["iterations"]
                   for b in runs.get(n, []) if b.get("items_per_second") is not None and
                   b.get("received_per_sub") is not None and b.get("iterations")]
        delivered = statistics.median(per_run) if per_run else rate
        mode = ("asio local stream, a socket per subscriber" if m.group(2) is None else
                "shmio lossy" if m.group(2) == "1" else "shmio reliable")
        out.append(f"| {mode} | {m.group(1)} | "
                   f"{fmt_rate(rate, 'msg/s')} | {fmt_ns(median_of(runs, n, 'latency_mean_ns'))} | "
                   f"{fmt_ns(median_of(runs, n, 'latency_worst_mean_ns'))} | "
                   f"{'-' if received is None else f'{received:.0f}'} | "
                   f"{fmt_ratio(ratio(delivered, base))} |")
    return out


def plot(runs, directory):
    os.makedirs(directory, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        series = []
        for fam in ("spin_ring", "asio_local_stream", "shmio_sync", "shmio_async"):
            rows = []
            for n in runs:
                parts = n.split("/")
                if parts[:3] == ["BM_ring_roundtrip", fam, "split"]:
                    rows.append((int(parts[3]), median_of(runs, n, "ns") / 1e3))
            if rows:
                path = os.path.join(tmp, f"lat_{fam}.dat")
                with open(path, "w", encoding="utf-8") as f:
                    for size, us in sorted(rows):
                        f.write(f"{size} {us}\n")
                series.append(f"'{path}' using 1:2 with linespoints title '{fam}'")
        shapes = ["1p1c", "2p2c", "4p4c"]
        bars = os.path.join(tmp, "thr.dat")
        fams = ["spin_ring", "asio_local_stream", *SHMIO_FLOWS]
        with open(bars, "w", encoding="utf-8") as f:
            f.write("shape " + " ".join(fams) + "\n")
            for sh in shapes:
                vals = []
                for fam in fams:
                    v = median_of(runs, f"BM_ring_throughput/{fam}/{sh}", "items_per_second")
                    vals.append("0" if v is None else f"{v / 1e6}")
                f.write(sh + " " + " ".join(vals) + "\n")
        script = f"""
set terminal pngcairo size 900,540 noenhanced
set output '{os.path.join(directory, "ring_latency_vs_size.png")}'
set title 'Round trip through two rings between two processes (split CPUs)'
set logscale xy
set xlabel 'message size (bytes)'
set ylabel 'round trip (µs, median)'
set key top left
set grid
plot {", ".join(series)}
unset logscale
set output '{os.path.join(directory, "ring_throughput.png")}'
set title '64-byte messages per second, producer and consumer processes'
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set ylabel 'million messages per second (log scale)'
set xlabel 'producers p, consumers c'
set key outside right
set logscale y
set yrange [0.01:*]
plot for [i=2:{len(fams) + 1}] '{bars}' using i:xtic(1) title columnheader(i)
"""
        try:
            subprocess.run(["gnuplot"], input=script, text=True, check=True)
        except FileNotFoundError:
            sys.exit("gnuplot not found (Debian: apt-get install gnuplot-nox)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ring")
    ap.add_argument("--rpc")
    ap.add_argument("--locks")
    ap.add_argument("--broadcast")
    ap.add_argument("--service")
    ap.add_argument("--plots")
    args = ap.parse_args()
    lines = []
    for path, tables in ((args.ring, ring_tables), (args.rpc, rpc_tables),
                         (args.locks, lock_tables), (args.broadcast, broadcast_tables),
                         (args.service, service_tables)):
        if not path:
            continue
        context, runs, errors = load(path)
        lines += [f"Run: {context.get('date', '?')}, {context.get('num_cpus', '?')} CPUs, "
                  f"load average {context.get('load_avg', '?')}", ""]
        lines += tables(runs) + [""]
        for name, message in errors:
            lines.append(f"ERROR {name}: {message}")
        if args.plots and tables is ring_tables:
            plot(runs, args.plots)
    lines += ["### Targets", "",
              "The last column is the same figure for the same run's bare floor (spin ring), "
              "where a target is one the floor itself may not reach on this machine.", "",
              "| target | measured | limit | verdict | the bare floor |", "|---|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {d} | {e} |" for a, b, c, d, e in targets.rows]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
