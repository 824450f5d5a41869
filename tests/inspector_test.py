#!/usr/bin/env python3
"""Runs the `shmio` inspector on live, stale, parked-on and corrupted segments (made by
inspector_fixture or by hand) and checks its human and --json output and exit codes.

usage: inspector_test.py SHMIO_TOOL INSPECTOR_FIXTURE"""
import json
import os
import struct
import subprocess
import sys
import time

tool, fixture = sys.argv[1], sys.argv[2]
prefix = f"shmio-test.inspector.{os.getpid()}."
shm = "/dev/shm/"
uid = os.getuid()
failures = []
checks = 0


def check(cond, what):
    global checks
    checks += 1
    if not cond:
        failures.append(what)
        print("FAILED:", what)


def run(*args, expect=0):
    p = subprocess.run([tool, *args], capture_output=True, text=True, timeout=30)
    check(p.returncode == expect,
          f"shmio {' '.join(args)}: exit {p.returncode}, expected {expect}; stderr: {p.stderr}")
    return p


def js(*args):
    return json.loads(run(*args, "--json").stdout)


def path_of(name):
    return f"{shm}shmio.u{uid}.{name}"


def start(*args):
    p = subprocess.Popen([fixture, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()  # waits for "ready" (or EOF if it failed)
    check(line.strip() == "ready", f"fixture {args}: said {line!r}")
    return p


def until(cond, seconds=10):
    """Re-evaluates cond until it holds or time runs out (no fixed sleeps)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.01)
    return cond()


def dead_pid():
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


holder = start("hold", prefix + "live")
try:
    # ---- live segments -------------------------------------------------------------------
    listing = {s["name"]: s for s in js("ls", prefix)}
    ring = listing.get(prefix + "live.ring")
    check(ring is not None, "ls shows the live ring")
    if ring:
        check(ring["kind"] == "circular_buffer" and ring["live"] and not ring["stale"], "ring live")
        check(ring["creator_pid"] == holder.pid and ring["creator_alive"], "ring creator")
        r = ring["ring"]
        check(r["node_count"] == 8 and r["node_size"] == 64, "ring geometry")
        check(r["used"] == 3 and r["free"] == 5 and r["published"] == 3, f"ring nodes {r}")
        check(ring["status"] == "ok", "ring status ok")
    ev = listing.get(prefix + "live.event")
    check(ev is not None and ev["event"]["signalled"] and ev["event"]["manual_reset"], "event")
    rpc = listing.get(prefix + "live.rpc")
    check(rpc is not None and rpc["kind"] == "rpc" and rpc["rpc"]["owner_attached"]
          and not rpc["rpc"]["opener_attached"] and rpc["rpc"]["to_owner"]["node_count"] == 4
          and rpc["rpc"]["opener_generation"] == 0 and rpc["rpc"]["max_message_size"] > 0,
          f"rpc {rpc}")
    arr = listing.get(prefix + "live.array")
    check(arr is not None and arr["kind"] == "shared_array" and arr["status"] == "ok",
          f"array {arr}")
    if arr:
        a = arr["locked"]
        check(a["element_size"] == 4 and a["element_align"] == 4 and a["length"] == 10
              and a["data_size"] == 40, f"array geometry {a}")
        check(a["lock"]["state"] == "shared" and a["lock"]["share_holders"] == 2
              and a["lock"]["shares"] == 2 and a["lock"]["participants"] == 2
              and not a["lock"]["owner_dead"], f"array lock {a['lock']}")
    buf = listing.get(prefix + "live.buffer")
    check(buf is not None and buf["kind"] == "buffer_read_write", f"buffer {buf}")
    if buf:
        b = buf["locked"]
        check(b["element_size"] == 1 and b["length"] == 64, f"buffer geometry {b}")
        check(b["lock"]["state"] == "exclusive" and b["lock"]["writer_pid"] == holder.pid
              and not b["lock"]["owner_dead"], f"buffer lock {b['lock']}")
    bc = listing.get(prefix + "live.broadcast")
    check(bc is not None and bc["kind"] == "broadcast" and bc["status"] == "ok", f"broadcast {bc}")
    if bc:
        b = bc["broadcast"]
        check(b["mode"] == "reliable" and b["slot_count"] == 8 and b["message_size"] == 32
              and b["max_subscribers"] == 4, f"broadcast geometry {b}")
        check(b["write_sequence"] == 3 and b["subscribers"] == 1 and b["live_subscribers"] == 1
              and b["slowest_lag"] == 2 and b["slowest_pid"] == holder.pid
              and b["published"] == 3 and b["empty"] == 5 and b["writer"] == 0,
              f"broadcast state {b}")
    human = run("ls", prefix).stdout
    check(prefix + "live.ring" in human and "circular_buffer" in human and "live" in human
          and "3/8 used" in human, f"human ls: {human}")
    check("lock shared by 2 (2 shares)" in human, f"human ls of the array: {human}")
    check(f"lock exclusive (pid {holder.pid})" in human, f"human ls of the buffer: {human}")
    check("reliable; 1 subscriber (1 live), 8 slots, seq 3, slowest lag 2" in human,
          f"human ls of the broadcast: {human}")
    human = run("stat", prefix + "live.array").stdout
    check("10 elements of 4 B" in human and "shared by 2" in human
          and "2 handles open" in human, f"human stat of the array: {human}")
    human = run("stat", prefix + "live.broadcast").stdout
    check("mode:     reliable, 8 slots of 32 B" in human
          and "1 active (1 live)" in human and "slowest lag 2" in human
          and "3 published; writer lock free" in human, f"human stat of the broadcast: {human}")
    human = run("stat", prefix + "live.ring").stdout
    check("state:    live" in human and "3 published" in human, f"human stat: {human}")

    # ---- an rpc service and its two clients ------------------------------------------------
    svc = listing.get(prefix + "live.service")
    check(svc is not None and svc["kind"] == "rpc_service" and svc["status"] == "ok"
          and svc["live"], f"service {svc}")
    if svc:
        r = svc["rpc_service"]
        check(r["server_alive"] and r["server_pid"] == holder.pid and r["accepted"] == 2
              and r["node_count"] == 4 and r["node_size"] == 256
              and r["default_timeout_ms"] == 30000 and r["backlog"] == 256
              and r["waiting"] == 0 and r["requests"]["node_count"] == 256
              and r["clients_complete"] and r["live_clients"] == 2, f"service state {r}")
        clients = r["clients"]
        check(len(clients) == 2 and all(
            c["name"].startswith(prefix + "live.service#") and c["pid"] == holder.pid
            and c["alive"] and c["server_attached"] and c["status"] == "ok" for c in clients),
            f"service clients {clients}")
        # Each client's channel is listed too, as the rpc segment it is.
        for c in clients:
            ch = listing.get(c["name"], {})
            check(ch.get("kind") == "rpc" and ch["rpc"]["owner_pid"] == holder.pid
                  and ch["rpc"]["opener_attached"], f"client channel {ch}")
        check(js("stat", prefix + "live.service")["rpc_service"]["clients"] == clients,
              "stat finds the same clients as ls")
    human = run("ls", prefix).stdout
    check("rpc_service" in human
          and "server alive; 2 clients (2 live), 0/256 requests waiting, 2 accepted" in human,
          f"human ls of the service: {human}")
    human = run("stat", prefix + "live.service").stdout
    check(f"server:   pid {holder.pid}, alive; 2 connections accepted so far" in human
          and "channels: 4 nodes of 256 B each way" in human and "default timeout 30000 ms" in human
          and "requests: 0 waiting, backlog 256" in human and "clients:  2 (2 live)" in human
          and human.count(f"client pid {holder.pid} alive, server end attached") == 2
          and "connect ring: 256 nodes of 32 B" in human, f"human stat of the service: {human}")

    # ---- a parked reader shows up ---------------------------------------------------------
    # Four readers on the ring of three messages: three take one each and exit, one parks.
    target = prefix + "live.ring"
    readers = [start("reader", target) for _ in range(4)]
    try:
        def one_parked():
            r = js("stat", target)["ring"]
            return r if r["readers"]["parked_async"] + r["readers"]["parked_blocking"] == 1 else None
        parked = until(one_parked)
        check(bool(parked) and parked["used"] == 0 and parked["free"] == 8,
              f"one reader parked on the empty ring: {parked}")
        check(sum(1 for r in readers if r.poll() is None) >= 1, "the parked reader still waits")
    finally:
        for r in readers:
            r.kill()
            r.wait()

    # ---- live segments cannot be removed without --force ---------------------------------
    p = run("rm", prefix + "live.event", expect=1)
    check("in use" in p.stderr, "rm of a live segment refuses")
    check(os.path.exists(path_of(prefix + "live.event")), "the live event is still there")
    run("rm", prefix + "live.event", "--force")
    check(not os.path.exists(path_of(prefix + "live.event")), "rm --force removed it")
finally:
    holder.stdin.close()
    holder.wait(timeout=30)

# ---- unknown names and usage ---------------------------------------------------------------
p = run("stat", prefix + "nothing", expect=1)
check("no segment named" in p.stderr, "stat of an unknown name says so")
run("rm", prefix + "nothing", expect=1)
run("frobnicate", expect=2)
run("stat", expect=2)

# ---- stale segments, corrupted files, abandoned temporary files ----------------------------
stale = prefix + "stale"
start_ = subprocess.run([fixture, "abandon", stale], timeout=30)
check(start_.returncode == 0, "abandon fixture ran")
s = js("stat", stale)
check(not s["live"] and s["stale"] and s["state"] == "stale" and not s["creator_alive"], f"stale {s}")
check(s["ring"]["published"] == 2, "stale ring keeps its 2 messages")

def corrupt(name, offset, data):
    subprocess.run([fixture, "abandon", name], timeout=30, check=True)
    with open(path_of(name), "r+b") as f:
        f.seek(offset)
        f.write(data)

corrupt(prefix + "badmagic", 0, b"NOTSHMIO")
corrupt(prefix + "badsize", 16, struct.pack("<Q", 1 << 40))           # header total_size
corrupt(prefix + "badring", 64, struct.pack("<I", 0xFFFFFFFF))        # ring node_count
corrupt(prefix + "badnode", 64 + 1344 + 64 * 3, struct.pack("<Q", (12346 - 3) << 16))  # node 3 of 4, turn 12346
corrupt(prefix + "badversion", 8, struct.pack("<I", 99))
corrupt(prefix + "badkind", 12, struct.pack("<I", 42))                 # unknown kind: header only
with open(path_of(prefix + "short"), "wb") as f:
    f.write(b"SHM")
os.chmod(path_of(prefix + "short"), 0o600)
# A name with bytes that are not UTF-8 (a byte no sequence starts with, a surrogate's): --json
# must stay valid UTF-8 (the strict decoding of `run` fails otherwise).
badutf = os.fsencode(path_of(prefix + "badutf")) + b"\xf8\x80\x80\xed\xa0\x80"
with open(badutf, "wb") as f:
    f.write(b"SHM")
os.chmod(badutf, 0o600)
# A name with a right-to-left override (U+202E) in it: shown escaped, as control bytes are.
bidi = path_of(prefix + "bidi\u202eevil")
with open(bidi, "wb") as f:
    f.write(b"SHM")
os.chmod(bidi, 0o600)
def corrupt_as(what, name, offset, data):
    subprocess.run([fixture, what, name], timeout=30, check=True)
    with open(path_of(name), "r+b") as f:
        f.seek(offset)
        f.write(data)

# A locked buffer abandoned holding its lock: stale, and its owner dead (not damage).
subprocess.run([fixture, "abandon-locked", prefix + "deadlock"], timeout=30, check=True)
corrupt_as("abandon-locked", prefix + "badlockword", 128, struct.pack("<I", 0x123456))
corrupt_as("abandon-locked", prefix + "badelement", 64 + 24, struct.pack("<I", 0))
subprocess.run([fixture, "abandon-broadcast", prefix + "bcast"], timeout=30, check=True)
corrupt_as("abandon-broadcast", prefix + "badentry", 64 + 1408 + 8, struct.pack("<Q", 7))
corrupt_as("abandon-broadcast", prefix + "badslot", 64 + 1408 + 2 * 64 + 64,
           struct.pack("<Q", 2 * 2 + 2))  # slot 1 claims position 2
corrupt_as("abandon-broadcast", prefix + "badbcversion", 64, struct.pack("<I", 9))
# An rpc service whose server died; one whose channel node size has no room for a packet
# header; one whose backlog disagrees with its connect ring.
subprocess.run([fixture, "abandon-service", prefix + "deadservice"], timeout=30, check=True)
corrupt_as("abandon-service", prefix + "badservice", 64 + 8, struct.pack("<I", 8))
corrupt_as("abandon-service", prefix + "badbacklog", 64 + 44, struct.pack("<I", 7))
temp = f"{shm}.shmio.tmp.{dead_pid()}.00000000deadbeef"
with open(temp, "wb") as f:
    f.write(b"\0" * 100)
# Abandoned: unheld and last changed over 10 s ago (a young one may be another pid namespace's
# creator, between making its file and locking it).
os.utime(temp, (time.time() - 11, time.time() - 11))

listing = {s["name"]: s for s in js("ls", prefix)}
check(any(n.startswith(prefix + "badutf") for n in listing), f"name not UTF-8 listed: {list(listing)}")
human = run("ls", prefix).stdout
check("badutf\\xf8\\x80\\x80\\xed\\xa0\\x80" in human, f"bytes not UTF-8 escaped: {human}")
check("bidi\\xe2\\x80\\xaeevil" in human and "\u202e" not in human,
      f"direction override escaped: {human}")
for n, status in [("badmagic", "corrupted"), ("badsize", "corrupted"), ("badring", "corrupted"),
                  ("badnode", "corrupted"), ("badversion", "incompatible"), ("short", "corrupted"),
                  ("badkind", "ok"), ("deadlock", "ok"), ("badlockword", "corrupted"),
                  ("badelement", "corrupted"), ("bcast", "ok"), ("badentry", "corrupted"),
                  ("badslot", "corrupted"), ("badbcversion", "incompatible"),
                  ("deadservice", "ok"), ("badservice", "corrupted"), ("badbacklog", "corrupted")]:
    s = listing.get(prefix + n)
    check(s is not None and s["status"] == status and s["stale"], f"{n}: {s}")
check(listing[prefix + "badkind"]["kind"] == "kind 42", "unknown kind shown by number")
human = run("ls", prefix).stdout
check("CORRUPTED" in human, "human ls flags corruption")
human = run("stat", prefix + "badnode").stdout
check("CORRUPTED" in human and "INVALID" in human, f"human stat of a bad node: {human}")
dl = listing.get(prefix + "deadlock", {}).get("locked", {}).get("lock", {})
check(dl.get("state") == "exclusive" and dl.get("owner_dead") and dl.get("participants") == 0,
      f"abandoned lock: {dl}")
human = run("stat", prefix + "deadlock").stdout
check("OWNER DEAD" in human, f"human stat of an abandoned lock: {human}")
check("lock word 0x123456" in listing.get(prefix + "badlockword", {}).get("problem", ""),
      "bad lock word named")
bc = listing.get(prefix + "bcast", {}).get("broadcast", {})
check(bc.get("subscribers") == 1 and bc.get("live_subscribers") == 0
      and bc.get("slowest_lag") == 2 and bc.get("write_sequence") == 2, f"abandoned broadcast {bc}")
check(listing.get(prefix + "badslot", {}).get("broadcast", {}).get("invalid") == 1,
      "bad slot counted")
human = run("stat", prefix + "badslot").stdout
check("CORRUPTED" in human and "1 INVALID" in human, f"human stat of a bad slot: {human}")
ds = listing.get(prefix + "deadservice", {}).get("rpc_service", {})
check(ds.get("server_alive") is False and ds.get("clients") == [] and ds.get("accepted") == 0
      and ds.get("server_pid", 0) > 0, f"abandoned service: {ds}")
human = run("stat", prefix + "deadservice").stdout
check(", gone; 0 connections accepted so far" in human and "clients:  0 (0 live)" in human,
      f"human stat of an abandoned service: {human}")
check("backlog 7 but the connect ring has 256 nodes"
      in listing.get(prefix + "badbacklog", {}).get("problem", ""), "bad backlog named")
check("rpc_service" not in listing.get(prefix + "badservice", {}), "bad service not shown")
human = run("stat", prefix + "badservice").stdout
check("CORRUPTED: channel rings of" in human, f"human stat of a bad service: {human}")
temps = js("ls", os.path.basename(temp))
check(len(temps) == 1 and temps[0]["temporary"] and temps[0]["stale"], f"temporary file: {temps}")

removed = js("rm", "--stale", prefix)
names = {s["name"] for s in removed}
check(prefix + "stale" in names and prefix + "badmagic" in names and prefix + "short" in names,
      f"rm --stale removed: {names}")
check(not os.path.exists(badutf), "rm --stale removed the file whose name is not UTF-8")
check(not os.path.exists(bidi), "rm --stale removed the file with a direction override")
check(js("ls", prefix) == [], "nothing of ours left")
removed = js("rm", "--stale", os.path.basename(temp))
check(len(removed) == 1 and not os.path.exists(temp), "rm --stale swept the temporary file")
check(run("rm", "--stale", prefix).stdout.strip() == "nothing stale", "second sweep: nothing")

print(f"{checks - len(failures)} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
