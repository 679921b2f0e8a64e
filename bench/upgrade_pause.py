#!/usr/bin/env python3
# bench/upgrade_pause.py: the pause of a live upgrade as a client sees it
# (issue 21, Performance), driven by bench/upgrade.sh.
#
# Against a running keylockd (TCP port, unix socket): CONNS connections
# hold LOCKS locks between them (each pipelines its share of "LOCK u:N"
# lines and waits for every grant); a probe connection sends PING and
# waits for PONG in a loop; ROUNDS times, an operator connection on the
# unix socket sends UPGRADE. For each upgrade: the largest gap between two
# PONGs around it (the last reply of the old process to the first of the
# new, what a client sees), and the pause the new process reports
# (pause_ms: from the freeze to its taking over). After each, STATS must
# still show every lock held and every connection open. Prints one line
# per upgrade and a summary line: "SUMMARY conns locks n gap_p50 gap_max
# pause_p50 pause_max" (ms).
import json
import selectors
import socket
import sys
import threading
import time


def recv_lines(sock, n, buf=b""):
    lines = []
    while len(lines) < n:
        data = sock.recv(1 << 16)
        if not data:
            raise SystemExit("connection closed by the server")
        buf += data
        *done, buf = buf.split(b"\n")
        lines.extend(done)
    return lines, buf


def ask(path, line):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    s.sendall(line.encode() + b"\n")
    (reply,), _ = recv_lines(s, 1)
    s.close()
    return reply.decode()


def stats(path):
    reply = ask(path, "STATS")
    return json.loads(reply[3:])


def hold(port, conns, locks):
    socks = []
    per, extra = divmod(locks, conns)
    key = 0
    sel = selectors.DefaultSelector()
    want = {}
    for i in range(conns):
        s = socket.create_connection(("127.0.0.1", port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        n = per + (1 if i < extra else 0)
        lines = b"".join(b"LOCK u:%d\n" % (key + j) for j in range(n))
        key += n
        socks.append(s)
        if n == 0:
            continue
        s.sendall(lines)
        want[s] = [n, b""]
        sel.register(s, selectors.EVENT_READ)
    left = len(want)
    while left > 0:
        for k, _ in sel.select(30):
            s = k.fileobj
            data = s.recv(1 << 16)
            if not data:
                raise SystemExit("a holder was closed")
            w = want[s]
            w[1] += data
            *done, w[1] = w[1].split(b"\n")
            for d in done:
                if not d.startswith(b"OK "):
                    raise SystemExit("LOCK refused: %r" % d)
            w[0] -= len(done)
            if w[0] == 0:
                sel.unregister(s)
                left -= 1
    return socks


class Probe(threading.Thread):
    def __init__(self, port):
        super().__init__(daemon=True)
        self.s = socket.create_connection(("127.0.0.1", port))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.times = []
        self.stop = False

    def run(self):
        buf = b""
        while not self.stop:
            self.s.sendall(b"PING\n")
            (line,), buf = recv_lines(self.s, 1, buf)
            if line != b"OK PONG":
                raise SystemExit("probe: %r" % line)
            self.times.append(time.monotonic())

    def gap_since(self, t0):
        ts = [t for t in self.times if t >= t0 - 0.5]
        return max((b - a for a, b in zip(ts, ts[1:])), default=0) * 1000


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def main():
    port, path = int(sys.argv[1]), sys.argv[2]
    conns, locks, rounds = map(int, sys.argv[3:6])
    socks = hold(port, conns, locks)
    st = stats(path)
    assert st["held"] == locks, st
    probe = Probe(port)
    probe.start()
    time.sleep(0.3)
    gaps, pauses = [], []
    for r in range(rounds):
        t0 = time.monotonic()
        reply = ask(path, "UPGRADE")
        if not reply.startswith("OK "):
            raise SystemExit("UPGRADE: " + reply)
        info = json.loads(reply[3:])
        time.sleep(0.3)
        gap = probe.gap_since(t0)
        st = stats(path)
        if st["held"] != locks or st["clients"] != conns + 2:
            raise SystemExit("after upgrade %d: held %d clients %d" %
                             (r + 1, st["held"], st["clients"]))
        gaps.append(gap)
        pauses.append(info["pause_ms"])
        print("upgrade %d: pid %d, pause_ms %d, client gap %.1f ms, "
              "connections %d" % (r + 1, info["pid"], info["pause_ms"],
                                 gap, info["connections"]), flush=True)
    probe.stop = True
    print("SUMMARY %d %d %d %.1f %.1f %d %d" % (
        conns, locks, rounds, pct(gaps, 0.5), max(gaps), pct(pauses, 0.5),
        max(pauses)), flush=True)
    for s in socks:
        s.close()


main()
