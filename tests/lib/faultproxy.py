#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""faultproxy: a TCP proxy that breaks connections on purpose, for tests.

It sits between real clients (libkeylock, keylock(1), the Python package)
and a real keylockd, forwards bytes both ways, and on command or at random
resets connections, half-closes them, blackholes them (drops every byte
silently while both TCP connections stay up) or delays them. Python 3.8+
standard library only (asyncio).

Running it
    faultproxy.py --target HOST:PORT [--listen HOST:PORT]
                  [--port-file FILE] [--control-port-file FILE]
                  [--seed N] [--log FILE]
  --listen defaults to 127.0.0.1:0 (a free port). Once it listens, the
  proxy's port goes to --port-file and the control port (always on
  127.0.0.1) to --control-port-file, each as one line with a newline,
  written atomically (rename), so a test polls for the file. SIGTERM or
  "quit" stops it; it exits 0.

The control protocol: a TCP connection to the control port, one command
per line, one reply line each: "OK" and maybe a value, or "ERR text".
    pass                 forward faithfully; no random faults (the start)
    chaos MEAN_MS [KINDS]
                         from now on every connection, existing and new,
                         gets one fault after a random time (exponential,
                         mean MEAN_MS); KINDS is a comma list of reset,
                         halfclose, blackhole, delay (default all four)
    blackhole-ms MIN MAX how long a blackhole lasts (uniform, ms) before
                         both sides are reset, as a peer's TCP would give
                         up at last (default 200 1500)
    halfclose-ms MIN MAX how long a half-closed connection lingers before
                         the rest of it is reset (default 200 1500)
    delay-ms MIN MAX     latency of each chunk on a delayed connection
                         (default 20 300)
    reset all|ID         reset now (RST to both peers)
    halfclose all|ID     FIN to one peer, chosen at random; the other
                         side stays open and silent
    blackhole all|ID     drop everything silently from now on
    delay all|ID         delay every chunk from now on
    down                 reset every connection and refuse new ones
                         (accepted, then reset at once): the server is
                         unreachable; answers "OK MS", MS the moment it
                         did so (CLOCK_REALTIME, ms: date +%s%3N)
    up                   accept and forward again
    stats                OK {"accepted":N,"open":N,"reset":N,"halfclose":N,
                         "blackhole":N,"delay":N,"refused":N}
    quit                 stop the proxy
  "ctl" sends one command and prints the reply (exit 1 on ERR), for
  shell tests:
    faultproxy.py ctl CONTROL_PORT COMMAND [ARG...]

A reset closes both sockets with SO_LINGER 0, so each peer gets an RST
(ECONNRESET). A half-close sends FIN to one peer only: that peer sees EOF
while the other still thinks the connection alive (a half-open
connection, which a session's RESUME must take over). The proxy never
reorders or alters bytes that it forwards.
"""

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import struct
import sys
import time

KINDS = ("reset", "halfclose", "blackhole", "delay")


def parse_hostport(s):
    host, _, port = s.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError("want HOST:PORT, not %r" % s)
    return host.strip("[]"), int(port)


def write_atomically(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, path)


class Conn:
    """One client connection and its connection to the target."""

    def __init__(self, proxy, cid, creader, cwriter):
        self.proxy = proxy
        self.id = cid
        self.cr, self.cw = creader, cwriter
        self.sr = self.sw = None
        self.mode = "pass"          # pass, delay, blackhole, halfclose
        self.delay = (0, 0)
        self.closed = False
        self.tasks = []
        self.fault_timer = None

    def _abort(self, writer):
        if writer is None:
            return
        sock = writer.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                struct.pack("ii", 1, 0))
            except OSError:
                pass
        writer.transport.abort()

    def reset(self):
        if self.closed:
            return
        self.closed = True
        self._abort(self.cw)
        self._abort(self.sw)
        for t in self.tasks:
            if t is not asyncio.current_task():
                t.cancel()
        if self.fault_timer is not None:
            self.fault_timer.cancel()
        self.proxy.conns.pop(self.id, None)

    def later_reset(self, lo_hi):
        ms = random.uniform(*lo_hi)
        asyncio.get_running_loop().call_later(ms / 1000.0, self.reset)

    def fault(self, kind):
        if self.closed:
            return
        self.proxy.count[kind] += 1
        if kind == "reset":
            self.reset()
        elif kind == "blackhole":
            self.mode = "blackhole"
            self.later_reset(self.proxy.blackhole_ms)
        elif kind == "halfclose":
            self.mode = "halfclose"
            w = random.choice([self.cw, self.sw])
            try:
                w.write_eof()
            except (OSError, RuntimeError):
                pass
            self.later_reset(self.proxy.halfclose_ms)
        elif kind == "delay":
            self.mode = "delay"
            self.delay = self.proxy.delay_ms

    def arm(self):
        """Schedules this connection's random fault, in chaos mode."""
        if self.fault_timer is not None:
            self.fault_timer.cancel()
            self.fault_timer = None
        p = self.proxy
        if p.chaos_mean is None or self.closed:
            return
        after = random.expovariate(1.0 / p.chaos_mean) / 1000.0
        kind = random.choice(p.chaos_kinds)
        self.fault_timer = asyncio.get_running_loop().call_later(
            after, self.fault, kind)

    async def pump(self, reader, writer):
        try:
            while not self.closed:
                data = await reader.read(65536)
                if not data:
                    # an orderly close passes on as one
                    if self.mode in ("pass", "delay"):
                        try:
                            writer.write_eof()
                        except (OSError, RuntimeError):
                            pass
                    return
                if self.mode in ("blackhole", "halfclose"):
                    continue
                if self.mode == "delay":
                    await asyncio.sleep(random.uniform(*self.delay) / 1000.0)
                if self.closed:
                    return
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError, ConnectionError):
            self.reset()
        except asyncio.CancelledError:
            pass

    async def run(self):
        try:
            self.sr, self.sw = await asyncio.open_connection(
                *self.proxy.target)
        except OSError:
            self.reset()
            return
        if self.closed:
            self._abort(self.sw)
            return
        self.arm()
        a = asyncio.ensure_future(self.pump(self.cr, self.sw))
        b = asyncio.ensure_future(self.pump(self.sr, self.cw))
        self.tasks = [a, b]
        await asyncio.gather(a, b, return_exceptions=True)
        if not self.closed:
            self.closed = True
            self.cw.close()
            self.sw.close()
            if self.fault_timer is not None:
                self.fault_timer.cancel()
            self.proxy.conns.pop(self.id, None)


class Proxy:
    def __init__(self, target):
        self.target = target
        self.conns = {}
        self.next_id = 1
        self.down = False
        self.chaos_mean = None
        self.chaos_kinds = list(KINDS)
        self.blackhole_ms = (200, 1500)
        self.halfclose_ms = (200, 1500)
        self.delay_ms = (20, 300)
        self.count = dict((k, 0) for k in KINDS)
        self.count.update(accepted=0, refused=0)
        self.stop = asyncio.Event()

    async def on_client(self, reader, writer):
        if self.down:
            self.count["refused"] += 1
            c = Conn(self, 0, reader, writer)
            c._abort(writer)
            return
        self.count["accepted"] += 1
        cid = self.next_id
        self.next_id += 1
        c = Conn(self, cid, reader, writer)
        self.conns[cid] = c
        await c.run()

    def pick(self, what):
        if what == "all":
            return list(self.conns.values())
        if what.isdigit() and int(what) in self.conns:
            return [self.conns[int(what)]]
        raise ValueError("no connection %s" % what)

    def command(self, words):
        cmd, args = words[0].lower(), words[1:]
        if cmd == "pass" and not args:
            self.chaos_mean = None
            for c in self.conns.values():
                c.arm()
            return "OK"
        if cmd == "chaos" and 1 <= len(args) <= 2:
            mean = float(args[0])
            kinds = args[1].split(",") if len(args) == 2 else list(KINDS)
            if mean <= 0 or any(k not in KINDS for k in kinds):
                raise ValueError("chaos MEAN_MS [reset,halfclose,...]")
            self.chaos_mean, self.chaos_kinds = mean, kinds
            for c in self.conns.values():
                c.arm()
            return "OK"
        if cmd in ("blackhole-ms", "halfclose-ms", "delay-ms") and \
                len(args) == 2:
            lo, hi = float(args[0]), float(args[1])
            if not 0 <= lo <= hi:
                raise ValueError("want 0 <= MIN <= MAX")
            setattr(self, cmd.replace("-", "_"), (lo, hi))
            return "OK"
        if cmd in KINDS and len(args) == 1:
            cs = self.pick(args[0])
            for c in cs:
                c.fault(cmd)
            return "OK %d" % len(cs)
        if cmd == "down" and not args:
            self.down = True
            for c in list(self.conns.values()):
                c.reset()
            return "OK %d" % int(time.time() * 1000)
        if cmd == "up" and not args:
            self.down = False
            return "OK"
        if cmd == "stats" and not args:
            d = dict(self.count)
            d["open"] = len(self.conns)
            return "OK " + json.dumps(d, separators=(",", ":"))
        if cmd == "quit" and not args:
            return "OK"     # on_control stops once it is sent
        raise ValueError("unknown command or arguments: %s" % " ".join(words))

    async def on_control(self, reader, writer):
        try:
            while True:
                line = await reader.readline()
                if not line:
                    break
                words = line.decode("utf-8", "replace").split()
                if not words:
                    continue
                try:
                    reply = self.command(words)
                except ValueError as e:
                    reply = "ERR %s" % e
                writer.write((reply + "\n").encode())
                await writer.drain()
                if words[0].lower() == "quit" and reply == "OK":
                    self.stop.set()
        except (OSError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()


async def serve(opts):
    proxy = Proxy(opts.target)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, proxy.stop.set)
    server = await asyncio.start_server(proxy.on_client, opts.listen[0],
                                        opts.listen[1])
    control = await asyncio.start_server(proxy.on_control, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    cport = control.sockets[0].getsockname()[1]
    if opts.port_file:
        write_atomically(opts.port_file, "%d\n" % port)
    if opts.control_port_file:
        write_atomically(opts.control_port_file, "%d\n" % cport)
    if not opts.port_file and not opts.control_port_file:
        print("%d %d" % (port, cport), flush=True)
    await proxy.stop.wait()
    server.close()
    control.close()
    for c in list(proxy.conns.values()):
        c.reset()
    if opts.log:
        with open(opts.log, "a") as f:
            f.write(proxy.command(["stats"]) + "\n")


def ctl(port, words):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall((" ".join(words) + "\n").encode())
        f = s.makefile("r")
        reply = f.readline().strip()
    print(reply)
    return 0 if reply.startswith("OK") else 1


def main(argv):
    if len(argv) >= 3 and argv[0] == "ctl":
        return ctl(int(argv[1]), argv[2:])
    ap = argparse.ArgumentParser(prog="faultproxy.py")
    ap.add_argument("--target", type=parse_hostport, required=True)
    ap.add_argument("--listen", type=parse_hostport,
                    default=("127.0.0.1", 0))
    ap.add_argument("--port-file")
    ap.add_argument("--control-port-file")
    ap.add_argument("--seed", type=int)
    ap.add_argument("--log")
    opts = ap.parse_args(argv)
    if opts.seed is not None:
        random.seed(opts.seed)
    asyncio.run(serve(opts))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
