#!/usr/bin/env python3
"""Runs the examples as a user would and checks what they do.

usage: examples_test.py kvd|tcp_bridge|worker_pool PROGRAM

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


def start(*args, env=None):
    """Starts a long-running example and waits for its "ready" line; returns (process, line)."""
    p = subprocess.Popen([program, *args], stdout=subprocess.PIPE, text=True, env=env)
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
        # Clients at once: the channel takes one opener at a time, the others retry.
        clients = [subprocess.Popen([program, "set", f"k{i}", f"v{i}"], env=env,
                                    stdout=subprocess.PIPE, text=True) for i in range(6)]
        check(all(c.wait(timeout=30) == 0 for c in clients), "concurrent sets")
        check(all(kvd("get", f"k{i}").stdout == f"v{i}\n" for i in range(6)), "concurrent values")
        status = kvd("status").stdout
        check(f"pid {daemon.pid}, 8 keys" in status, f"status: {status!r}")
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


tests = {"kvd": test_kvd}
tests[example]()
print(f"{checks - len(failures)} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
