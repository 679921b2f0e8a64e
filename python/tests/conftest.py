# keylock, the Python client of keylockd. SPDX-License-Identifier: MIT
"""Fixtures: a real keylockd from the build tree on a free port.

``$KEYLOCKD`` names the daemon (``make check`` sets it). Every daemon is
started with ``--config /dev/null --port 0 --port-file FILE --unix ''
--state-dir TMP`` and without the caller's ``KEYLOCK_*`` environment; the
tests run without it too.
"""

from __future__ import annotations

import json
import os
import pathlib
import queue
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from typing import (Any, Callable, Dict, Iterator, List, Optional, Set,
                    Tuple)

import pytest

PYDIR = pathlib.Path(__file__).resolve().parents[1]
if str(PYDIR) not in sys.path:
    sys.path.insert(0, str(PYDIR))

READY_S = 10.0
#: Timing of the session tests, scaled on a loaded machine as the rest of
#: the suite is (KEYLOCKD_TEST_SLOW=2 doubles every grace and bound).
SLOW = float(os.environ.get("KEYLOCKD_TEST_SLOW") or 1)


def clean_env() -> Dict[str, str]:
    """The environment without KEYLOCK_*, with the package importable."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("KEYLOCK_")}
    env["PYTHONPATH"] = str(PYDIR) + (
        os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


class Daemon:
    """One keylockd process and how to reach it."""

    def __init__(self, tmp: pathlib.Path, *extra: str,
                 port: int = 0) -> None:
        self.tmp = tmp
        self.extra = extra
        self.proc: Optional[subprocess.Popen[bytes]] = None
        self.port = port
        self.tls_port = 0
        self.start()

    def start(self) -> None:
        daemon = os.environ.get("KEYLOCKD")
        if not daemon or not os.access(daemon, os.X_OK):
            pytest.skip("KEYLOCKD must name the built daemon "
                        "(make check sets it)")
        portfile = self.tmp / "port"
        if portfile.exists():
            portfile.unlink()
        self.log = open(self.tmp / "daemon.log", "ab")
        wrapper = os.environ.get("KEYLOCKD_WRAPPER", "").split()
        self.proc = subprocess.Popen(
            [*wrapper, daemon, "--config", "/dev/null", "--bind",
             "127.0.0.1", "--port", str(self.port), "--port-file",
             str(portfile), "--unix", "", "--state-dir", str(self.tmp),
             *self.extra],
            stdout=self.log, stderr=self.log, stdin=subprocess.DEVNULL,
            env=clean_env())
        deadline = time.monotonic() + READY_S
        while True:
            try:
                lines = portfile.read_text().split("\n")
                if lines[0].isdigit():
                    self.port = int(lines[0])
                    for line in lines[1:]:
                        if line.startswith("tls "):
                            self.tls_port = int(line[4:])
                    break
            except FileNotFoundError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("keylockd did not start: " +
                                   (self.tmp / "daemon.log").read_text())
            time.sleep(0.01)

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def request(self, line: str) -> str:
        """One request on a fresh connection, as nc would send it."""
        with socket.create_connection(("127.0.0.1", self.port), 5) as s:
            s.sendall(line.encode() + b"\n")
            data = b""
            while not data.endswith(b"\n"):
                chunk = s.recv(1 << 20)
                if not chunk:
                    break
                data += chunk
        return data.decode().rstrip("\r\n")

    def stats(self) -> Dict[str, Any]:
        reply = self.request("STATS")
        assert reply.startswith("OK "), reply
        value: Dict[str, Any] = json.loads(reply[3:])
        return value

    def info(self, key: str) -> Dict[str, Any]:
        reply = self.request(f"INFO {key}")
        assert reply.startswith("OK "), reply
        value: Dict[str, Any] = json.loads(reply[3:])
        return value

    def wait_idle(self, seconds: float = 5.0, clients: Optional[int] = None
                  ) -> Dict[str, Any]:
        """Polls STATS until nothing is held or waits (and, if given, at
        most ``clients`` other connections are open); the last STATS."""
        deadline = time.monotonic() + seconds
        while True:
            st = self.stats()
            if st["keys"] == 0 and st["held"] == 0 and st["waiting"] == 0 \
                    and (clients is None or st["clients"] - 1 <= clients):
                return st
            if time.monotonic() > deadline:
                raise AssertionError(f"server not idle: {st}")
            time.sleep(0.02)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.log.close()


@pytest.fixture(autouse=True, scope="session")
def _no_keylock_env() -> Iterator[None]:
    saved = {k: os.environ.pop(k) for k in list(os.environ)
             if k.startswith("KEYLOCK_")}
    yield
    os.environ.update(saved)


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """The shared daemon; each test leaves it idle."""
    d = Daemon(tmp_path_factory.mktemp("keylockd"))
    yield d
    d.stop()


@pytest.fixture
def daemon(tmp_path: pathlib.Path) -> Iterator[Daemon]:
    """A daemon of this test's own (to kill or restart)."""
    d = Daemon(tmp_path)
    yield d
    d.stop()


@pytest.fixture(autouse=True, params=["channels", "connections"])
def mode(request: pytest.FixtureRequest,
         monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test runs twice: with the default (channels: the owners of
    one KeyedLock ride channels of one connection, where the server
    speaks them) and with ``channels=False`` (a connection per owner).
    Worker processes learn it from KEYLOCKD_TEST_CHANNELS."""
    import keylock._core
    on = request.param == "channels"
    monkeypatch.setattr(keylock._core, "CHANNELS_DEFAULT", on)
    monkeypatch.setenv("KEYLOCKD_TEST_CHANNELS", "1" if on else "0")
    mode: str = request.param
    return mode


def speaks_channels(d: "Daemon") -> bool:
    """Whether the daemon answers ``@1 PING`` on channel 1."""
    return d.request("@1 PING") == "@1 OK PONG"


def channels_used(mode: str, d: "Daemon") -> bool:
    """Whether this test's KeyedLocks ride channels."""
    return mode == "channels" and speaks_channels(d)


@pytest.fixture(autouse=True)
def _leaves_server_idle(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if "server" in request.fixturenames:
        request.getfixturevalue("server").wait_idle()


@pytest.fixture
def report(capsys: pytest.CaptureFixture[str]) -> Any:
    """Prints past pytest's capture: figures that belong in the log."""
    def out(line: str) -> None:
        with capsys.disabled():
            print(f"\n    {line}", flush=True)
    return out


class Workers:
    """Worker processes (worker.py) started together: each says "ready"
    once set up, and all start at :meth:`go`."""

    def __init__(self, mode: str, count: int, *args: str) -> None:
        worker = pathlib.Path(__file__).with_name("worker.py")
        self.mode = mode
        self.procs = [subprocess.Popen(
            [sys.executable, str(worker), mode, str(i), *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=clean_env())
            for i in range(count)]
        for p in self.procs:
            assert p.stdout is not None
            assert p.stdout.readline() == b"ready\n", f"{mode} worker"

    def go(self) -> float:
        """Starts them all; the time it did."""
        now = time.monotonic()
        for p in self.procs:
            assert p.stdin is not None
            p.stdin.write(b"go\n")
            p.stdin.close()
        return now

    def results(self, timeout: float = 60) -> List[Any]:
        """Each worker's JSON result, once all have ended."""
        out = []
        for p in self.procs:
            assert p.stdout is not None
            stdout = p.stdout.read()
            p.wait(timeout)
            assert p.returncode == 0, f"{self.mode} worker exited " \
                f"{p.returncode}"
            out.append(json.loads(stdout))
        return out


def run_workers(mode: str, count: int, *args: str) -> Tuple[float, List[Any]]:
    """Runs ``count`` workers together: when they started, their results."""
    w = Workers(mode, count, *args)
    go = w.go()
    return go, w.results()


def speaks_sessions(d: Daemon) -> bool:
    """Whether the daemon knows SESSION. Only ``ERR SYNTAX`` (a daemon of
    protocol 1.1) says no; anything else is the daemon's answer to
    judge."""
    with socket.create_connection(("127.0.0.1", d.port), 5) as s:
        s.sendall(b"SESSION grace=1\nQUIT\n")
        data = b""
        while b"\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    first = data.split(b"\n")[0].decode()
    return not first.startswith("ERR SYNTAX")


# A function for the proxy's thread to run, its result, and its end.
Call = Tuple[Callable[[], Any], List[Any], threading.Event]


def _rst(sock: socket.socket) -> None:
    """Closes ``sock`` with a reset (SO_LINGER 0): the peer sees ECONNRESET,
    not an orderly EOF."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                        struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


class Proxy:
    """A TCP proxy between clients and a daemon, on its own thread, that a
    test can break: :meth:`reset` resets every connection through it
    (client and daemon both see a reset, as after a NAT or load balancer
    drops a flow), :meth:`refuse` makes new connections fail (reset at
    once: the server is unreachable) until :meth:`refuse` is called with
    False, and :meth:`blackhole` silently drops everything sent on the
    connections through it now (both ends believe them alive: half-open),
    while new ones pass."""

    def __init__(self, port: int) -> None:
        self.target = ("127.0.0.1", port)
        self.lsock = socket.socket()
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(128)
        self.lsock.setblocking(False)
        self.port: int = self.lsock.getsockname()[1]
        self.refusing = False
        self.accepted = 0
        self.refused = 0
        self._peer: Dict[socket.socket, socket.socket] = {}
        self._black: Set[socket.socket] = set()
        self._sel = selectors.DefaultSelector()
        self._sel.register(self.lsock, selectors.EVENT_READ)
        self._wake_r, self._wake_w = socket.socketpair()
        self._sel.register(self._wake_r, selectors.EVENT_READ)
        self._calls: "queue.Queue[Call]" = queue.Queue()
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name="test-proxy")
        self._thread.start()

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _call(self, fn: Callable[[], Any]) -> Any:
        done = threading.Event()
        box: List[Any] = []
        self._calls.put((fn, box, done))
        self._wake_w.send(b"x")
        assert done.wait(10), "the proxy thread is stuck"
        return box[0] if box else None

    def reset(self) -> int:
        """Resets every connection now; how many there were."""
        def go() -> int:
            n = 0
            for sock in list(self._peer):
                self._drop(sock, reset=True)
                n += 1
            return n // 2
        n: int = self._call(go)
        return n

    def blackhole(self) -> int:
        """Drops, from now on, every byte of the connections open now;
        how many there are."""
        def go() -> int:
            self._black.update(self._peer)
            return len(self._peer) // 2
        n: int = self._call(go)
        return n

    def refuse(self, on: bool = True) -> None:
        """New connections are reset at once (on) or pass (off)."""
        def go() -> None:
            self.refusing = on
        self._call(go)

    def connections(self) -> int:
        n: int = self._call(lambda: len(self._peer) // 2)
        return n

    def close(self) -> None:
        def go() -> None:
            self._stop = True
            for sock in list(self._peer):
                self._drop(sock, reset=True)
        self._call(go)
        self._thread.join(10)
        self._sel.close()
        self.lsock.close()
        self._wake_r.close()
        self._wake_w.close()

    def _drop(self, sock: socket.socket, reset: bool) -> None:
        other = self._peer.pop(sock, None)
        for s in (sock, other):
            if s is None:
                continue
            self._peer.pop(s, None)
            self._black.discard(s)
            try:
                self._sel.unregister(s)
            except (KeyError, ValueError):
                pass
            if reset:
                _rst(s)
            else:
                s.close()

    def _run(self) -> None:
        while not self._stop:
            for key, _ in self._sel.select(0.5):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if sock is self.lsock:
                    self._accept()
                elif sock is self._wake_r:
                    sock.recv(4096)
                    while not self._calls.empty():
                        fn, box, done = self._calls.get()
                        box.append(fn())
                        done.set()
                elif sock in self._peer:
                    self._pump(sock)

    def _accept(self) -> None:
        try:
            client, _ = self.lsock.accept()
        except BlockingIOError:
            return
        if self.refusing:
            self.refused += 1
            _rst(client)
            return
        try:
            upstream = socket.create_connection(self.target, 5)
        except OSError:
            _rst(client)
            return
        self.accepted += 1
        for s in (client, upstream):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.setblocking(False)
        self._peer[client] = upstream
        self._peer[upstream] = client
        self._sel.register(client, selectors.EVENT_READ)
        self._sel.register(upstream, selectors.EVENT_READ)

    def _pump(self, sock: socket.socket) -> None:
        try:
            data = sock.recv(1 << 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        other = self._peer.get(sock)
        if other is None:
            return
        if not data:
            self._drop(sock, reset=False)
            return
        if sock in self._black:
            return
        try:
            other.setblocking(True)
            other.settimeout(5)
            other.sendall(data)
            other.setblocking(False)
        except OSError:
            self._drop(sock, reset=True)


@pytest.fixture
def sessions(server: Daemon) -> Daemon:
    """The shared daemon, if it speaks sessions (protocol 1.2)."""
    if not speaks_sessions(server):
        pytest.skip("this keylockd answers SESSION with ERR SYNTAX "
                    "(no sessions yet)")
    return server


@pytest.fixture
def proxy(server: Daemon) -> Iterator[Proxy]:
    """A proxy to the shared daemon that the test can reset."""
    p = Proxy(server.port)
    yield p
    p.close()


# What a FakeServer answers to one request: the bytes to send (its
# channel prefix, "@N " or "", given), None for nothing at all.
Answer = Callable[[bytes, str], Optional[bytes]]


class FakeServer:
    """A server that speaks the hello as keylockd does (AUTH, NAME,
    SESSION, PING, channels) and answers every other request with
    ``answer(prefix, line)``: for the replies a real daemon never sends
    (hostile or broken ones, or none at all). ``accepted`` counts its
    connections, ``closed`` those the client ended."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.lsock = socket.socket()
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(16)
        self.port: int = self.lsock.getsockname()[1]
        self.accepted = 0
        self.closed = 0
        self.requests: List[str] = []
        self._conns: List[socket.socket] = []
        self._stop = False
        threading.Thread(target=self._run, daemon=True,
                         name="test-fake-server").start()

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _run(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.lsock.accept()
            except OSError:
                return
            self.accepted += 1
            self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,),
                             daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        buf = b""
        try:
            while True:
                data = conn.recv(65536)
                if not data:
                    break
                buf += data
                while b"\n" in buf:
                    raw, buf = buf.split(b"\n", 1)
                    line = raw.decode()
                    prefix = b""
                    if line.startswith("@"):
                        chan, line = line.split(" ", 1)
                        prefix = chan.encode() + b" "
                    self.requests.append(line)
                    word = line.split(" ")[0]
                    if word in ("AUTH", "NAME"):
                        out: Optional[bytes] = b"OK"
                    elif word == "PING":
                        out = b"OK PONG"
                    elif word == "SESSION":
                        out = b"OK 0123456789abcdef0123456789abcdef"
                    elif word == "QUIT":
                        conn.sendall(prefix + b"OK\n")
                        return
                    else:
                        out = self.answer(prefix, line)
                        if out is not None:
                            conn.sendall(out)
                        continue
                    conn.sendall(prefix + out + b"\n")
        except OSError:
            pass
        finally:
            self.closed += 1
            conn.close()

    def close(self) -> None:
        self._stop = True
        self.lsock.close()
        for conn in self._conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
