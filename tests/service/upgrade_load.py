#!/usr/bin/env python3
# tests/service/upgrade_load.sh's clients: CLIENTS threads cycle LOCK and
# UNLOCK on a few shared keys over plain TCP while UPGRADES upgrades run
# back to back by UPGRADE over the unix socket. A history check: no client
# loses its connection, every request is answered in order, no two
# clients ever hold one key at once, every grant's token is above the
# key's last one, STATS says keys 0 at the end, and the daemon's
# descriptor count after the upgrades equals the count before them.
# Exit 0 or 1 with the first broken promise on stderr.
import json
import os
import socket
import sys
import threading
import time

port, path = int(sys.argv[1]), sys.argv[2]
clients, upgrades = int(sys.argv[3]), int(sys.argv[4])
KEYS = ["load:%d" % i for i in range(4)]
lock = threading.Lock()
holder = {}
last_token = {}
errors = []
stop = threading.Event()
cycles = [0]


def fail(msg):
    with lock:
        errors.append(msg)
    stop.set()


def line(sock, buf):
    while b"\n" not in buf[0]:
        data = sock.recv(4096)
        if not data:
            raise EOFError("connection closed by the server")
        buf[0] += data
    out, buf[0] = buf[0].split(b"\n", 1)
    return out.decode()


def client(n):
    try:
        s = socket.create_connection(("127.0.0.1", port))
        buf = [b""]
        i = 0
        while not stop.is_set():
            key = KEYS[(n + i) % len(KEYS)]
            i += 1
            s.sendall(("LOCK %s timeout=30000\n" % key).encode())
            r = line(s, buf)
            if not r.startswith("OK "):
                return fail("client %d: LOCK %s: %s" % (n, key, r))
            tok = int(r[3:])
            with lock:
                if holder.get(key) is not None:
                    return fail("%s held by %d and %d" %
                                (key, holder[key], n))
                if tok <= last_token.get(key, 0):
                    return fail("%s: token %d after %d" %
                                (key, tok, last_token[key]))
                holder[key] = n
                last_token[key] = tok
            with lock:
                holder[key] = None
            s.sendall(("UNLOCK %s\n" % key).encode())
            r = line(s, buf)
            if r != "OK 1":
                return fail("client %d: UNLOCK %s: %s" % (n, key, r))
            with lock:
                cycles[0] += 1
        s.sendall(b"QUIT\n")
        if line(s, buf) != "OK":
            fail("client %d: QUIT" % n)
    except (OSError, EOFError) as e:
        fail("client %d: %s" % (n, e))


def ask(req):
    u = socket.socket(socket.AF_UNIX)
    u.connect(path)
    u.sendall(req.encode() + b"\n")
    buf = [b""]
    r = line(u, buf)
    u.close()
    return r


def fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


pid0 = json.loads(ask("STATS")[3:])["pid"]
time.sleep(0.3)
fd0 = fds(pid0)
threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
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
for t in threads:
    t.join(60)
st = json.loads(ask("STATS")[3:])
if not errors:
    if st["upgrades"] != upgrades:
        fail("upgrades %d, want %d" % (st["upgrades"], upgrades))
    if st["keys"] != 0:
        fail("keys %d at the end" % st["keys"])
    # the clients have gone: the count is that of the idle server
    deadline = time.time() + 10
    while fds(st["pid"]) > fd0 and time.time() < deadline:
        time.sleep(0.1)
    if fds(st["pid"]) > fd0:
        fail("descriptors %d after %d upgrades, %d before" %
             (fds(st["pid"]), upgrades, fd0))
print("pids %s, %d lock cycles, %d clients" %
      (" ".join(map(str, pids)), cycles[0], clients))
print("PID %d" % st["pid"])
if errors:
    sys.stderr.write("\n".join(errors) + "\n")
    sys.exit(1)
