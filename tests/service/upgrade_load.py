#!/usr/bin/env python3
# tests/service/upgrade_load.sh's load (issue 21, Tests): CLIENTS clients
# cycle LOCK and UNLOCK on a few shared keys while UPGRADES upgrades run
# back to back by UPGRADE over the unix socket. Half the clients are
# libkeylock processes (tests/service/upgrade_load_client, CLIENT_BIN),
# half raw sockets here, which pipeline a PING behind each LOCK. Every
# grant goes into one history, and the check:
# - no connection is dropped, no request refused, every reply comes in
#   the order of the requests (PONG after the grant, never before);
# - no overlap: on each key, by token, every hold ended (UNLOCK sent)
#   before the next one was granted (its reply read), and tokens rise;
# - no lost grant: STATS grants rose by exactly the grants the clients
#   were told of;
# - STATS keys 0 at the end, upgrades as many as asked, and the daemon's
#   descriptor count once the clients left the same as before them.
# Exit 0 or 1 with the first broken promise on stderr.
import json
import os
import socket
import subprocess
import sys
import threading
import time

port, path = int(sys.argv[1]), sys.argv[2]
clients, upgrades = int(sys.argv[3]), int(sys.argv[4])
client_bin, tmp = sys.argv[5], sys.argv[6]
NKEYS = 4
lock = threading.Lock()
history = []        # (key, token, granted_us, released_us, who)
errors = []
stop = threading.Event()
stopfile = os.path.join(tmp, "upgrade_load.stop")


def fail(msg):
    with lock:
        errors.append(msg)
    stop.set()


def mono_us():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000


def line(sock, buf):
    while b"\n" not in buf[0]:
        data = sock.recv(4096)
        if not data:
            raise EOFError("connection closed by the server")
        buf[0] += data
    out, buf[0] = buf[0].split(b"\n", 1)
    return out.decode()


def raw_client(n):
    who = "raw %d" % n
    try:
        s = socket.create_connection(("127.0.0.1", port))
        buf = [b""]
        i = 0
        while not stop.is_set():
            key = "load:%d" % ((n + i) % NKEYS)
            i += 1
            s.sendall(("LOCK %s timeout=30000\nPING\n" % key).encode())
            r = line(s, buf)
            if not r.startswith("OK "):
                return fail("%s: LOCK %s: %s" % (who, key, r))
            t0 = mono_us()
            tok = int(r[3:])
            r = line(s, buf)
            if r != "OK PONG":
                return fail("%s: PING after LOCK %s: %s" % (who, key, r))
            t1 = mono_us()
            s.sendall(("UNLOCK %s\n" % key).encode())
            with lock:
                history.append((key, tok, t0, t1, who))
            r = line(s, buf)
            if r != "OK 1":
                return fail("%s: UNLOCK %s: %s" % (who, key, r))
        s.sendall(b"QUIT\n")
        if line(s, buf) != "OK":
            fail("%s: QUIT" % who)
    except (OSError, EOFError) as e:
        fail("%s: %s" % (who, e))


def lib_client(n, proc):
    who = "libkeylock %d" % n
    for ln in proc.stdout:
        f = ln.split()
        if len(f) == 5 and f[0] == "G":
            with lock:
                history.append((f[1], int(f[2]), int(f[3]), int(f[4]), who))
        else:
            fail("%s: %s" % (who, ln.strip()))
    if proc.wait() != 0:
        fail("%s: exit status %d" % (who, proc.returncode))


def ask(req):
    u = socket.socket(socket.AF_UNIX)
    u.connect(path)
    u.sendall(req.encode() + b"\n")
    buf = [b""]
    r = line(u, buf)
    u.close()
    return r


def stats():
    return json.loads(ask("STATS")[3:])


def fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def check_history():
    bykey = {}
    for h in history:
        bykey.setdefault(h[0], []).append(h)
    for key, hs in bykey.items():
        hs.sort(key=lambda h: h[1])
        for a, b in zip(hs, hs[1:]):
            if a[1] == b[1]:
                return fail("%s: token %d granted twice (%s, %s)" %
                            (key, a[1], a[4], b[4]))
            if b[2] <= a[3]:
                return fail("%s: %s granted token %d at %d us, before %s "
                            "released token %d at %d us" %
                            (key, b[4], b[1], b[2], a[4], a[1], a[3]))


st0 = stats()
pid0 = st0["pid"]
time.sleep(0.3)
fd0 = fds(pid0)
nlib = clients // 2
threads, procs = [], []
for n in range(nlib):
    p = subprocess.Popen([client_bin, "127.0.0.1:%d" % port, "lib-%d" % n,
                          str(n), str(NKEYS), stopfile],
                         stdout=subprocess.PIPE, universal_newlines=True)
    procs.append(p)
    threads.append(threading.Thread(target=lib_client, args=(n, p)))
threads += [threading.Thread(target=raw_client, args=(n,))
            for n in range(clients - nlib)]
for t in threads:
    t.start()
time.sleep(0.5)
pids = [pid0]
for u in range(upgrades):
    if stop.is_set():
        break
    r = ask("UPGRADE")
    if not r.startswith("OK "):
        fail("UPGRADE %d: %s" % (u + 1, r))
        break
    pids.append(json.loads(r[3:])["pid"])
    time.sleep(0.2)
time.sleep(0.5)
stop.set()
open(stopfile, "w").close()
for t in threads:
    t.join(120)
for p in procs:
    if p.poll() is None:
        p.kill()
        fail("a libkeylock client did not stop")
st = stats()
if not errors:
    check_history()
if not errors:
    if st["upgrades"] != upgrades:
        fail("upgrades %d, want %d" % (st["upgrades"], upgrades))
    if st["grants"] - st0["grants"] != len(history):
        fail("%d grants counted by the server, %d told to the clients" %
             (st["grants"] - st0["grants"], len(history)))
    if st["keys"] != 0:
        fail("keys %d at the end" % st["keys"])
    # the clients have gone: the count is that of the idle server
    deadline = time.time() + 10
    while fds(st["pid"]) > fd0 and time.time() < deadline:
        time.sleep(0.1)
    if fds(st["pid"]) != fd0:
        fail("descriptors %d after %d upgrades, %d before" %
             (fds(st["pid"]), upgrades, fd0))
print("pids %s, %d grants, %d clients (%d libkeylock, %d raw)" %
      (" ".join(map(str, pids)), len(history), clients, nlib,
       clients - nlib))
print("PID %d" % st["pid"])
if errors:
    sys.stderr.write("\n".join(errors) + "\n")
    sys.exit(1)
