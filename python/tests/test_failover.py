# keylock, the Python client of keylockd. SPDX-License-Identifier: MIT
"""Server lists: ``server="a,b"`` and ``$KEYLOCK_SERVER`` with commas.

The servers are tried in order and the first that answers is used; when
none does, ConnectionFailed names each and why; a malformed list is a
ValueError before anything is tried; a wrong secret is not taken to the
next server; a drop while a lock is held is LockLost, with no reconnect
to the next server of the list.

A LOCK refused with ERR SHUTDOWN (here: a daemon stopping while the LOCK
waits) or ERR BACKEND (test_failover_etcd.py) before it is granted moves
to the next server of the list, within what is left of its timeout, and
new locks go to that server from then on; with nothing left to try, the
refusal is raised naming each server and why. A task that already holds
locks there, and a KeyedLock with a session, do not move.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import pathlib
import signal
import socket
import threading
import time
from typing import Any, Dict, Iterator, List, Tuple

import pytest

import keylock
import keylock.aio
from conftest import SLOW, Daemon, channels_used, speaks_sessions


def closed_port() -> str:
    """A TCP address nobody listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture
def two(tmp_path: pathlib.Path) -> Iterator[Tuple[Daemon, Daemon]]:
    """Two daemons of this test's own."""
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    d1 = Daemon(tmp_path / "one")
    d2 = Daemon(tmp_path / "two")
    yield d1, d2
    d1.stop()
    d2.stop()


def token_through(server: str) -> int:
    with keylock.KeyedLock(server) as locks:
        with locks.hold("fo") as h:
            return h.token


def test_a_dead_first_server_is_passed_over(daemon: Daemon,
                                            tmp_path: pathlib.Path) -> None:
    assert token_through(f"{closed_port()},{daemon.addr}") > 0
    assert token_through(f" {tmp_path}/none.sock , {daemon.addr} ") > 0
    assert daemon.stats()["grants"] == 2


def test_every_server_down_names_each(tmp_path: pathlib.Path) -> None:
    dead = closed_port()
    with keylock.KeyedLock(f"{dead},{tmp_path}/none.sock") as locks:
        with pytest.raises(keylock.ConnectionFailed) as e:
            locks.stats()
    text = str(e.value)
    assert text.startswith("cannot reach keylockd: "), text
    assert f"{dead}: " in text and f"{tmp_path}/none.sock: " in text
    assert text.index(dead) < text.index("none.sock")


def test_two_live_servers_use_the_first(
        two: Tuple[Daemon, Daemon]) -> None:
    d1, d2 = two
    assert token_through(f"{d1.addr},{d2.addr}") > 0
    assert d2.stats()["connections"] == 1      # that STATS alone
    assert d1.stats()["grants"] == 1


def test_environment_with_commas(daemon: Daemon,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KEYLOCK_SERVER", f"{closed_port()},{daemon.addr}")
    with keylock.KeyedLock() as locks:
        with locks.hold("env") as h:
            assert h.token > 0
    assert daemon.stats()["grants"] == 1


@pytest.mark.parametrize("bad", ["A,", ",A", "A,,A", "A, ,A", " ",
                                 "A,127.0.0.1:0"])
def test_a_malformed_list_is_a_value_error(
        bad: str, daemon: Daemon, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = bad.replace("A", daemon.addr)
    with pytest.raises(ValueError):
        keylock.KeyedLock(bad)
    with pytest.raises(ValueError):
        keylock.aio.KeyedLock(bad)
    monkeypatch.setenv("KEYLOCK_SERVER", bad)
    with pytest.raises(ValueError):
        keylock.KeyedLock()
    assert daemon.stats()["connections"] == 1


def test_a_wrong_secret_does_not_move_on(tmp_path: pathlib.Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("s3cret\n")
    secret.chmod(0o600)  # a private secret, or the daemon refuses it
    (tmp_path / "auth").mkdir()
    (tmp_path / "open").mkdir()
    auth = Daemon(tmp_path / "auth", "--auth-file", str(secret))
    other = Daemon(tmp_path / "open")
    try:
        with keylock.KeyedLock(f"{auth.addr},{other.addr}",
                               secret="wrong") as locks:
            with pytest.raises(keylock.AuthError):
                locks.stats()
        assert other.stats()["connections"] == 1
        with keylock.KeyedLock(f"{closed_port()},{auth.addr}",
                               secret="s3cret") as locks:
            assert locks.stats()["auth_failures"] == 1
    finally:
        auth.stop()
        other.stop()


def test_a_drop_while_holding_is_lost_not_reconnected(
        two: Tuple[Daemon, Daemon]) -> None:
    d1, d2 = two

    async def main() -> None:
        locks = keylock.aio.KeyedLock(f"{d1.addr},{d2.addr}")
        with pytest.raises(keylock.LockLost):
            async with locks.lock("precious") as h:
                d1.kill()
                await asyncio.wait_for(h.lost.wait(), 2)
                with pytest.raises(keylock.LockLost):
                    async with locks.lock("more"):
                        pass
        # the second server never heard of it
        assert d2.stats()["requests"] == 1
        # nothing held: the next lock takes the list again, to d2
        async with locks.lock("precious") as h2:
            assert h2.token > 0
        await locks.aclose()
    asyncio.run(main())
    assert d2.stats()["grants"] == 1


def test_a_user_gets_noperm_outside_its_keys(tmp_path: pathlib.Path) -> None:
    """keylockd-protocol(7), ACCESS CONTROL: a secret of two words is
    AUTH user secret; a key outside the user's patterns is NoPermission,
    and nothing changed."""
    secret = tmp_path / "alice.secret"
    secret.write_text("alice-pw\n")
    secret.chmod(0o600)
    conf = tmp_path / "keylockd.conf"
    conf.write_text(f"user alice secret-file={secret} keys=a:*\n")
    (tmp_path / "d").mkdir()
    d = Daemon(tmp_path / "d", "--config", str(conf))
    try:
        with keylock.KeyedLock(d.addr, secret="alice alice-pw") as locks:
            with locks.lock("a:1"):
                with pytest.raises(keylock.NoPermission) as e:
                    with locks.lock("b:1"):
                        pass
                assert e.value.code == "NOPERM"
                assert isinstance(e.value, PermissionError)
                st = locks.stats()
                assert st["held"] == 1 and st["waiting"] == 0, st
        with keylock.KeyedLock(d.addr, secret="alice wrong") as locks:
            with pytest.raises(keylock.AuthError):
                locks.stats()
        with keylock.KeyedLock(d.addr, secret="alice alice-pw") as locks:
            assert locks.stats()["keys"] == 0
    finally:
        d.stop()


class Holder:
    """A client of one daemon holding ``key`` on a connection of its own,
    as nc would."""

    def __init__(self, d: Daemon, key: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", d.port), 5)
        self.sock.sendall(f"LOCK {key}\n".encode())
        reply = self.sock.makefile("rb").readline()
        assert reply.startswith(b"OK "), reply

    def close(self) -> None:
        self.sock.close()


def wait_until(what: str, cond: Any, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds * SLOW
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"not {what} within {seconds * SLOW} s")
        time.sleep(0.01)


def waiting(d: Daemon, n: int = 1) -> bool:
    return bool(d.stats()["waiting"] == n)


def test_shutdown_while_waiting_moves_to_the_next_server(
        two: Tuple[Daemon, Daemon], report: Any,
        caplog: pytest.LogCaptureFixture) -> None:
    """A LOCK waiting on d1 is answered ERR SHUTDOWN (d1 gets SIGTERM):
    it is asked again of d2 and granted there; d2 is the working server
    from then on: a new connection goes to d2 first, even once d1 is
    back (d2 is restarted to drop the one the client has)."""
    d1, d2 = two
    caplog.set_level(logging.INFO, logger="keylock")
    holder = Holder(d1, "k")
    got: Dict[str, Any] = {}
    with keylock.KeyedLock(f"{d1.addr},{d2.addr}") as locks:
        def wait() -> None:
            try:
                with locks.hold("k", timeout=20 * SLOW) as h:
                    got["at"] = time.monotonic()
                    got["token"] = h.token
                    got["holders"] = d2.info("k")["holders"]
            except BaseException as e:      # for the assertion below
                got["error"] = e
        t = threading.Thread(target=wait)
        t.start()
        wait_until("waiting on d1", lambda: waiting(d1))
        t0 = time.monotonic()
        assert d1.proc is not None
        d1.proc.send_signal(signal.SIGTERM)
        t.join(20 * SLOW)
        assert not t.is_alive()
        assert "error" not in got, got
        assert got["token"] > 0 and len(got["holders"]) == 1
        took = got["at"] - t0
        assert [r.getMessage() for r in caplog.records
                if r.name == "keylock"] == [
            f"{d1.addr}: SHUTDOWN the server is stopping; trying the next "
            "server"]
        holder.close()
        d1.stop()
        d1.start()                  # back, on the same port
        d2.stop()
        d2.start()
        wait_until("the connection to d2 seen closed",
                   lambda: locks.idle == 0)
        with locks.hold("again") as h:
            assert h.token > 0
        assert locks.stats()["pid"] == d2.stats()["pid"]
    assert d1.stats()["grants"] == 0
    assert d2.stats()["grants"] == 1
    report(f"ERR SHUTDOWN to a waiting LOCK: granted through the next "
           f"server {took * 1000:.1f} ms after the SIGTERM")


def test_what_is_left_of_the_timeout_goes_to_the_next_server(
        two: Tuple[Daemon, Daemon]) -> None:
    """timeout=T: refused by d1 after T/2, the LOCK waits on d2 for what
    is left, and its Timeout comes T after the first LOCK, not later."""
    d1, d2 = two
    holders = [Holder(d1, "k"), Holder(d2, "k")]
    T = 2.0 * SLOW

    async def main() -> float:
        locks = keylock.aio.KeyedLock(f"{d1.addr},{d2.addr}")
        try:
            t0 = time.monotonic()
            task = asyncio.ensure_future(locks.lock("k", timeout=T)
                                         .__aenter__())
            await asyncio.sleep(T / 2)
            assert d1.stats()["waiting"] == 1
            assert d1.proc is not None
            d1.proc.send_signal(signal.SIGTERM)
            with pytest.raises(keylock.Timeout):
                await task
            return time.monotonic() - t0
        finally:
            await locks.aclose()
    took = asyncio.run(main())
    assert T - 0.01 <= took < T * 1.4, took
    assert d2.stats()["timeouts"] == 1
    for h in holders:
        h.close()


def test_every_server_refusing_names_each(
        two: Tuple[Daemon, Daemon]) -> None:
    """d1 then d2 answer ERR SHUTDOWN: the Shutdown raised names both, in
    the order they were tried."""
    d1, d2 = two
    holders = [Holder(d1, "k"), Holder(d2, "k")]
    with keylock.KeyedLock(f"{d1.addr},{d2.addr}") as locks:
        errors: List[BaseException] = []

        def wait() -> None:
            try:
                with locks.hold("k", timeout=30 * SLOW):
                    pass
            except BaseException as e:      # for the assertion below
                errors.append(e)
        t = threading.Thread(target=wait)
        t.start()
        wait_until("waiting on d1", lambda: waiting(d1))
        assert d1.proc is not None and d2.proc is not None
        d1.proc.send_signal(signal.SIGTERM)
        wait_until("waiting on d2", lambda: waiting(d2))
        d2.proc.send_signal(signal.SIGTERM)
        t.join(20 * SLOW)
        assert not t.is_alive()
    for h in holders:
        h.close()
    assert len(errors) == 1 and isinstance(errors[0], keylock.Shutdown), \
        errors
    e = errors[0]
    assert isinstance(e, keylock.Shutdown) and e.code == "SHUTDOWN"
    text = str(e)
    assert text.startswith("SHUTDOWN no server of the list could grant "
                           "it: "), text
    assert text.index(f"{d1.addr}: SHUTDOWN ") < \
        text.index(f"{d2.addr}: SHUTDOWN "), text


def test_a_task_holding_locks_there_does_not_move(
        two: Tuple[Daemon, Daemon]) -> None:
    """A task that holds a lock through d1 gets d1's refusal of its next
    LOCK: its locks are d1's, one task's locks are never split."""
    d1, d2 = two
    holder = Holder(d1, "k")

    async def main() -> None:
        locks = keylock.aio.KeyedLock(f"{d1.addr},{d2.addr}")
        # (d1 closes the connection: "mine" is lost, LockLost on leaving
        # its block, unless its UNLOCK went out before the close was read)
        with contextlib.suppress(keylock.LockLost):
            async with locks.lock("mine"):
                async def refuse() -> None:
                    await asyncio.sleep(0.2 * SLOW)
                    assert d1.stats()["waiting"] == 1
                    assert d1.proc is not None
                    d1.proc.send_signal(signal.SIGTERM)
                killer = asyncio.ensure_future(refuse())
                with pytest.raises(keylock.Shutdown) as e:
                    async with locks.lock("k", timeout=20 * SLOW):
                        pass
                assert "no server of the list" not in str(e.value)
                await killer
        await locks.aclose()
    asyncio.run(main())
    holder.close()
    assert d2.stats()["requests"] == 1      # that STATS alone


def test_a_session_does_not_move(two: Tuple[Daemon, Daemon]) -> None:
    """With a session, as libkeylock's keylock_failover(): the refusal is
    raised and nothing is asked of the next server."""
    d1, d2 = two
    if not speaks_sessions(d1):
        pytest.skip("the daemon has no sessions (protocol 1.1)")
    holder = Holder(d1, "k")

    async def main() -> None:
        locks = keylock.aio.KeyedLock(f"{d1.addr},{d2.addr}",
                                      session=5 * SLOW)
        task = asyncio.ensure_future(locks.lock("k", timeout=20 * SLOW)
                                     .__aenter__())
        for _ in range(int(500 * SLOW)):
            if d1.stats()["waiting"] == 1:
                break
            await asyncio.sleep(0.01)
        assert d1.proc is not None
        d1.proc.send_signal(signal.SIGTERM)
        with pytest.raises(keylock.Shutdown) as e:
            await task
        assert "no server of the list" not in str(e.value)
        await locks.aclose()
    asyncio.run(main())
    holder.close()
    assert d2.stats()["grants"] == 0


def test_many_waiting_tasks_move_together(two: Tuple[Daemon, Daemon],
                                          mode: str) -> None:
    """20 tasks wait on d1 when it refuses them all at once: each is
    granted through d2, over one new connection with channels (one
    opening for all), a connection each without."""
    d1, d2 = two
    n = 20
    holder = Holder(d1, " ".join(f"k{i}" for i in range(n)))
    c0 = d2.stats()["connections"]

    async def main() -> List[int]:
        locks = keylock.aio.KeyedLock(f"{d1.addr},{d2.addr}")
        all_in = asyncio.Event()
        tokens: List[int] = []

        async def one(i: int) -> None:
            async with locks.lock(f"k{i}", timeout=20 * SLOW) as h:
                tokens.append(h.token)
                if len(tokens) == n:
                    all_in.set()
                await all_in.wait()
        tasks = [asyncio.ensure_future(one(i)) for i in range(n)]
        for _ in range(int(1000 * SLOW)):
            if d1.stats()["waiting"] == n:
                break
            await asyncio.sleep(0.01)
        assert d1.proc is not None
        d1.proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(asyncio.gather(*tasks), 20 * SLOW)
        await locks.aclose()
        return tokens
    tokens = asyncio.run(main())
    holder.close()
    assert len(set(tokens)) == n
    st = d2.stats()
    assert st["grants"] == n
    # (each stats() is a connection of its own)
    assert st["connections"] - c0 - 1 == (1 if channels_used(mode, d2)
                                          else n)
