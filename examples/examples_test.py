#!/usr/bin/env python3
"""Runs the examples as a user would and checks what they do.

usage: examples_test.py kvd|tcp_bridge|worker_pool|broadcast|echo|event_ping_pong|ticker PROGRAM

Synchronisation is by what the programs print ("ready" lines) or by bounded retries, never by
fixed sleeps. Ends with the line "N passed, M failed"; exits 1 on any failure."""
import os
import signal
import socket
import subprocess
import sys
import time

example, program = sys.argv[1], sys.argv[2]
failures = []
checks = 0


def check(cond, what):
    global checks
    checks += 1
    if not cond:
        failures.append(what)
        print("FAILED:", what, flush=True)


def run(*args, env=None, timeout=30):
    return subprocess.run([program, *args], capture_output=True, text=True, timeout=timeout,
                          env=env)


def start(*args, env=None, session=False, errors=False):
    """Starts a long-running example and waits for its "ready" line; returns (process, line).
    session: in a process group of its own, as a shell job or a service is; errors: its stderr
    is kept for the test to read."""
    p = subprocess.Popen([program, *args], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE if errors else None, text=True, env=env,
                         start_new_session=session)
    line = p.stdout.readline()
    check("ready" in line, f"{example} {' '.join(args)} said {line!r}")
    return p, line


def test_kvd():
    env = dict(os.environ, KVD_NAME=f"shmio-test.kvd.{os.getpid()}")
    kvd = lambda *a: run(*a, env=env)

    p = kvd("get", "a")
    check(p.returncode == 1 and "no daemon is running" in p.stderr, f"no daemon: {p.stderr!r}")

    daemon, _ = start("serve", env=env)
    try:
        again = kvd("serve")
        check(again.returncode == 1 and "already serving" in again.stderr, "second daemon refused")
        check(kvd("set", "a", "1").stdout == "OK\n", "set a")
        check(kvd("set", "greeting", "hello, world").returncode == 0, "set greeting")
        check(kvd("get", "a").stdout == "1\n", "get a")
        check(kvd("get", "greeting").stdout == "hello, world\n", "get greeting")
        p = kvd("get", "nothing")
        check(p.returncode == 1 and "no key 'nothing'" in p.stderr, f"unknown key: {p.stderr!r}")
        # Clients at once: each connects on a channel of its own, none waits for another.
        n = 8
        sets = [subprocess.Popen([program, "set", f"k{i}", f"v{i}"], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for i in range(n)]
        done = [c.communicate(timeout=30) for c in sets]
        check(all(c.returncode == 0 and out == "OK\n" for c, (out, _) in zip(sets, done)),
              f"concurrent sets: {[(c.returncode, err) for c, (_, err) in zip(sets, done)]}")
        gets = [subprocess.Popen([program, "get", f"k{i}"], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for i in range(n)]
        done = [c.communicate(timeout=30) for c in gets]
        check(all(c.returncode == 0 for c in gets) and
              [out for out, _ in done] == [f"v{i}\n" for i in range(n)],
              f"concurrent gets: {done}")
        status = kvd("status").stdout
        check(f"pid {daemon.pid}, {n + 2} keys" in status, f"status: {status!r}")
        p = kvd("stop")
        check(p.stdout == "stopping\n", "stop")
        check(daemon.wait(timeout=30) == 0, "the daemon exits after stop")
        check("stopped after" in daemon.stdout.read(), "the daemon says it stopped")
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
    p = kvd("status")
    check(p.returncode == 1 and "no daemon is running" in p.stderr, "no daemon after stop")

    # A daemon killed outright leaves a stale segment; clients still say "no daemon", and a new
    # daemon takes the name over.
    daemon, _ = start("serve", env=env)
    daemon.send_signal(signal.SIGKILL)
    daemon.wait()
    p = kvd("get", "a")
    check(p.returncode == 1 and "no daemon is running" in p.stderr, "no daemon after kill -9")
    daemon, _ = start("serve", env=env)
    check(kvd("get", "a").returncode == 1, "a new daemon starts empty")
    daemon.send_signal(signal.SIGTERM)
    check(daemon.wait(timeout=30) == 0, "SIGTERM stops the daemon cleanly")


def test_worker_pool():
    jobs, workers = 3000, 4
    p = run(str(workers), str(jobs), f"shmio-test.pool.{os.getpid()}", timeout=120)
    check(p.returncode == 0, f"worker_pool exit {p.returncode}: {p.stderr}")
    counts = {}
    pids = set()
    for line in p.stdout.splitlines():
        f = line.split()
        if len(f) == 4 and f[0] == "job" and f[2] == "worker":
            counts[int(f[1])] = counts.get(int(f[1]), 0) + 1
            pids.add(int(f[3]))
    # Checked here from the printed results, not only by the producer's own summary.
    check(sorted(counts) == list(range(1, jobs + 1)), "every job came back")
    check(all(n == 1 for n in counts.values()), "no job came back twice")
    check(1 <= len(pids) <= workers, f"results from {len(pids)} worker processes")
    check(f"{jobs} jobs, {jobs} processed exactly once, 0 wrong answers, 0 workers failed"
          in p.stdout, "the producer's own check agrees")
    p = run("0")
    check(p.returncode == 2 and "usage" in p.stderr, "bad arguments: usage")


def test_tcp_bridge():
    bridge, line = start("0", f"shmio-test.bridge.{os.getpid()}")
    try:
        port = int(line.split()[1])
        clients = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(3)]
        files = [c.makefile("rwb") for c in clients]
        sent = {i: [f"line {k} from client {i}" for k in range(20)] for i in range(3)}
        # Interleaved: every client has lines in flight through the same rings at once.
        for k in range(20):
            for i, f in enumerate(files):
                f.write((sent[i][k] + "\n").encode())
                f.flush()
        for i, f in enumerate(files):
            got = [f.readline().decode().rstrip("\n") for _ in range(20)]
            check(got == [x.upper() for x in sent[i]], f"client {i} got its own lines back, upper-cased")
        for c in clients:
            c.close()
        # A client that leaves does not disturb the others.
        late = socket.create_connection(("127.0.0.1", port), timeout=30).makefile("rwb")
        late.write(b"still there?\n")
        late.flush()
        check(late.readline() == b"STILL THERE?\n", "a later client is served")
        # The longest line the bridge takes (1000 characters) comes back whole.
        longest = "x" * 1000
        late.write((longest + "\n").encode())
        late.flush()
        check(late.readline() == (longest.upper() + "\n").encode(), "a 1000-character line")
        bridge.send_signal(signal.SIGTERM)
        check(bridge.wait(timeout=30) == 0, "SIGTERM stops bridge and worker cleanly")
        check("worker exit 0" in bridge.stdout.read(), "the worker finished")
    finally:
        if bridge.poll() is None:
            bridge.kill()
            bridge.wait()

    def ring_files(name):
        return [f for f in os.listdir("/dev/shm") if f.startswith(f"shmio.u{os.getuid()}.{name}.")]

    # SIGTERM to the whole process group (Ctrl-C, `timeout`, a service manager): the worker
    # ignores it and is told to finish by the bridge, so both exit cleanly and the rings go.
    name = f"shmio-test.bridge-group.{os.getpid()}"
    bridge, _ = start("0", name, session=True)
    try:
        check(len(ring_files(name)) == 2, "the bridge's two rings exist")
        os.killpg(bridge.pid, signal.SIGTERM)
        check(bridge.wait(timeout=30) == 0, "SIGTERM to the group stops bridge and worker cleanly")
        check(ring_files(name) == [], f"no ring files left: {ring_files(name)}")
    finally:
        if bridge.poll() is None:
            os.killpg(bridge.pid, signal.SIGKILL)
            bridge.wait()

    # A worker that dies: the bridge stops and says so, rather than leave clients unanswered.
    name = f"shmio-test.bridge-worker.{os.getpid()}"
    bridge, _ = start("0", name, errors=True)
    try:
        with open(f"/proc/{bridge.pid}/task/{bridge.pid}/children") as f:
            worker = int(f.read().split()[0])
        os.kill(worker, signal.SIGKILL)
        check(bridge.wait(timeout=30) == 1, "the bridge exits 1 when its worker dies")
        check("worker exited" in bridge.stderr.read(), "and says why")
        check(ring_files(name) == [], f"no ring files left: {ring_files(name)}")
    finally:
        if bridge.poll() is None:
            bridge.kill()
            bridge.wait()

    for port in ["99999", "abc", "-1"]:
        p = run(port, f"shmio-test.bridge-args.{os.getpid()}")
        check(p.returncode == 2 and "PORT" in p.stderr, f"port {port!r}: {p.returncode} {p.stderr!r}")


def test_echo():
    name = f"shmio-test.echo.{os.getpid()}"
    p = run("call", name, "anyone?")
    check(p.returncode == 1 and "no service is running" in p.stderr, f"no service: {p.stderr!r}")

    server, _ = start("serve", name)
    try:
        again = run("serve", name)
        check(again.returncode == 1 and "already running" in again.stderr, "second server refused")
        # Clients at once, each on a channel of its own. The last text is over one 16 KiB
        # packet: it travels as several.
        n = 4
        texts = [[f"hello from client {i}", f"line {i}.2", str(i) * 100_000] for i in range(n)]
        clients = [subprocess.Popen([program, "call", name, *texts[i]], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True) for i in range(n)]
        done = [c.communicate(timeout=60) for c in clients]
        for i, (c, (out, err)) in enumerate(zip(clients, done)):
            check(c.returncode == 0 and out.splitlines() == texts[i],
                  f"client {i} got its own texts back: exit {c.returncode}, {err!r}")
        server.send_signal(signal.SIGTERM)
        check(server.wait(timeout=30) == 0, "SIGTERM stops the server cleanly")
        log = server.stdout.read()
        check(log.count(" connected (") == n, f"{n} clients connected: {log!r}")
        check(f"served {n} clients, {3 * n} requests" in log, f"the server's count: {log!r}")
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    p = run("call", name, "anyone?")
    check(p.returncode == 1 and "no service is running" in p.stderr, "no service after stop")

    # Without arguments: the demo, server and three client processes from one command.
    p = run(timeout=120)
    check(p.returncode == 0, f"echo demo exit {p.returncode}: {p.stderr!r}")
    check(all(f"hello from client {i}\n" in p.stdout and f"goodbye from client {i}\n" in p.stdout
              for i in (1, 2, 3)), f"the demo's clients got their replies: {p.stdout!r}")
    check("served 3 clients, 6 requests" in p.stdout, "the demo's server count")


def test_ticker():
    name = f"shmio-test.ticker.{os.getpid()}"
    p = run("watch", name, "ACME", "3")
    check(p.returncode == 1 and "no service is running" in p.stderr, f"no service: {p.stderr!r}")

    server, _ = start("serve", name)
    try:
        again = run("serve", name)
        check(again.returncode == 1 and "already running" in again.stderr, "second server refused")
        # Watchers at once, each its own stream: every tick in order, then the end.
        watchers = [subprocess.Popen([program, "watch", name, sym, "20", "1"],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                    for sym in ("AAA", "BBBB", "CC")]
        for sym, w in zip(("AAA", "BBBB", "CC"), watchers):
            out, err = w.communicate(timeout=60)
            lines = out.splitlines()
            check(w.returncode == 0 and len(lines) == 21 and lines[-1] == "end of stream",
                  f"{sym}: 20 ticks then the end: exit {w.returncode}, {out!r} {err!r}")
            check([ln.split()[1] for ln in lines[:-1]] == [f"#{i}" for i in range(1, 21)] and
                  all(ln.startswith(sym + " ") for ln in lines[:-1]), f"{sym}: in order")
        # A symbol longer than a tick's line: the line is cut, nothing past it is sent.
        p = run("watch", name, "L" * 200, "1", "1")
        lines = p.stdout.splitlines()
        check(p.returncode == 0 and len(lines) == 2 and lines[0] == "L" * 95,
              f"a long symbol's tick is cut to the line: {p.stdout[:300]!r} {p.stderr!r}")
        # A watcher of an endless stream that stops: the service's handler is cancelled.
        p = run("watch", name, "FOREVER", "0", "5", "3")
        check(p.returncode == 0 and p.stdout.splitlines()[-1] == "stopped after 3 ticks",
              f"stopping watcher: {p.stdout!r} {p.stderr!r}")
        # A request the handler cannot read: its exception's text reaches the watcher.
        for bad in (["x"], ["-3", "1"], ["3", "60001"]):
            p = run("watch", name, "BAD", *bad)
            check(p.returncode == 1 and "expected 'SYMBOL COUNT MS'" in p.stderr,
                  f"bad request {bad}: {p.stderr!r}")
        p = run("watch", name, "FOREVER", "0", "5", "abc")
        check(p.returncode == 2 and "usage" in p.stderr, f"a STOP that is not a number: {p.stderr!r}")
        server.send_signal(signal.SIGTERM)
        check(server.wait(timeout=30) == 0, "SIGTERM stops the server cleanly")
        log = server.stdout.read()
        check(all(f"{sym} done after 20 ticks" in log for sym in ("AAA", "BBBB", "CC")),
              f"the server finished each stream: {log!r}")
        check("FOREVER stopped after" in log and "(cancelled)" in log,
              f"the stopped watcher's handler was cancelled: {log!r}")
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()

    p = run(timeout=120)
    check(p.returncode == 0, f"ticker demo exit {p.returncode}: {p.stderr!r}")
    check("stopped after 4 ticks" in p.stdout and p.stdout.count("end of stream") == 2,
          f"the demo's watchers: {p.stdout!r}")


def test_event_ping_pong():
    p = run("200")
    check(p.returncode == 0 and "200 round trips" in p.stdout, "ping-pong")
    for rounds in ["abc", "0", "-1"]:
        p = run(rounds)
        check(p.returncode == 2 and "usage" in p.stderr, f"rounds {rounds!r}: {p.returncode}")


def test_broadcast():
    subscribers, ticks = 4, 3000
    p = run(str(subscribers), str(ticks), f"shmio-test.broadcast.{os.getpid()}", timeout=120)
    check(p.returncode == 0, f"broadcast exit {p.returncode}: {p.stderr}")
    expected = sum(10000 + (seq * 7919) % 500 for seq in range(1, ticks + 1))
    reports = [line for line in p.stdout.splitlines() if line.startswith("subscriber ")]
    # Checked here from what each subscriber process printed, not only by the publisher.
    check(len(reports) == subscribers, f"{len(reports)} subscriber reports")
    check(all(line.endswith(f": {ticks} ticks in order, sum {expected}") for line in reports),
          f"every subscriber saw every tick in order: {reports}")
    check(len({line.split(":")[0] for line in reports}) == subscribers, "distinct processes")
    check(f"{subscribers} of {subscribers} subscribers saw every tick" in p.stdout,
          "the publisher's own check agrees")
    p = run("0")
    check(p.returncode == 2 and "usage" in p.stderr, "bad arguments: usage")


tests = {"kvd": test_kvd, "broadcast": test_broadcast, "worker_pool": test_worker_pool, "tcp_bridge": test_tcp_bridge,
         "echo": test_echo, "event_ping_pong": test_event_ping_pong, "ticker": test_ticker}
tests[example]()
print(f"{checks - len(failures)} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
