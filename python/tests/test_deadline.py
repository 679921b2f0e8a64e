# keylock, the Python client of keylockd. SPDX-License-Identifier: MIT
"""The reply deadline (libkeylock's rule): a server that stops answering
fails the request in flight with ConnectionFailed once its reply is
overdue, a LOCK with a timeout by that timeout plus ``reply_timeout``,
any other request by ``reply_timeout``, and its connection is dropped
(with a session: resumed as after any drop). Against a fake server that
never answers, and a real daemon under SIGSTOP, with both faces, with
channels and without (the ``mode`` fixture)."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from typing import Any, Callable, Iterator, List, Optional, TypeVar

import pytest

import keylock
import keylock.aio
from conftest import (SLOW, Daemon, FakeServer, channels_used,
                      speaks_sessions)

T = TypeVar("T")

REPLY = 0.5 * SLOW          # reply_timeout of these tests
LOCK_TIMEOUT = 0.3 * SLOW
SLACK = 3.0 * SLOW          # what a loaded machine may add


def bounded(fn: Callable[[], T], seconds: float) -> T:
    """``fn()`` on a thread of its own: its result, or a failure (not a
    hung test) when it takes longer than ``seconds``."""
    box: List[Any] = []

    def run() -> None:
        try:
            box.append((True, fn()))
        except BaseException as e:       # handed to the test
            box.append((False, e))
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert box, f"still waiting after {seconds:g} s: no deadline"
    ok, value = box[0]
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]


def silent(prefix: bytes, line: str) -> Optional[bytes]:
    """Reads every request, answers none (the hello but)."""
    return None


@pytest.fixture
def mute() -> Iterator[FakeServer]:
    f = FakeServer(silent)
    yield f
    f.close()


def wait_dropped(f: FakeServer) -> None:
    deadline = time.monotonic() + 5 * SLOW
    while f.closed < f.accepted and time.monotonic() < deadline:
        time.sleep(0.01)
    assert f.closed == f.accepted, "the connection was not dropped"


def test_a_silent_server_fails_each_request_aio(mute: FakeServer) -> None:
    async def main() -> None:
        async with keylock.aio.KeyedLock(mute.addr,
                                         reply_timeout=REPLY) as locks:
            t0 = time.monotonic()
            with pytest.raises(keylock.ConnectionFailed) as e:
                async with locks.lock("k", timeout=LOCK_TIMEOUT):
                    pass
            took = time.monotonic() - t0
            assert "no reply to LOCK" in str(e.value)
            assert LOCK_TIMEOUT + REPLY - 0.05 <= took
            assert took < LOCK_TIMEOUT + REPLY + SLACK
            for call in (locks.stats, lambda: locks.info("k")):
                t0 = time.monotonic()
                with pytest.raises(keylock.ConnectionFailed):
                    await call()
                took = time.monotonic() - t0
                assert REPLY - 0.05 <= took < REPLY + SLACK
    asyncio.run(asyncio.wait_for(main(), 30 * SLOW))
    wait_dropped(mute)


def test_a_silent_server_fails_each_request_sync(mute: FakeServer) -> None:
    def main() -> None:
        with keylock.KeyedLock(mute.addr, reply_timeout=REPLY) as locks:
            t0 = time.monotonic()
            with pytest.raises(keylock.ConnectionFailed):
                with locks.hold("k", timeout=LOCK_TIMEOUT):
                    pass
            took = time.monotonic() - t0
            assert LOCK_TIMEOUT + REPLY - 0.05 <= took
            assert took < LOCK_TIMEOUT + REPLY + SLACK
            with pytest.raises(keylock.ConnectionFailed):
                locks.stats()
            with pytest.raises(keylock.ConnectionFailed):
                locks.info("k")
    bounded(main, 30 * SLOW)
    wait_dropped(mute)


def test_the_deadline_counts_from_the_lock_timeout(mute: FakeServer) -> None:
    """A LOCK that may wait longer than reply_timeout is not given up
    before its own timeout is out."""
    async def main() -> None:
        async with keylock.aio.KeyedLock(mute.addr,
                                         reply_timeout=REPLY) as locks:
            t0 = time.monotonic()
            with pytest.raises(keylock.ConnectionFailed):
                async with locks.lock("k", timeout=3 * REPLY):
                    pass
            assert time.monotonic() - t0 >= 4 * REPLY - 0.05
    asyncio.run(asyncio.wait_for(main(), 30 * SLOW))


def test_reply_timeout_argument_is_checked() -> None:
    for bad in (0, -1, float("inf"), float("nan"), "1"):
        with pytest.raises(ValueError):
            keylock.KeyedLock("127.0.0.1:1", reply_timeout=bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            keylock.aio.KeyedLock("127.0.0.1:1", reply_timeout=bad)  # type: ignore[arg-type]
    keylock.KeyedLock("127.0.0.1:1", reply_timeout=None)


class Stopped:
    """SIGSTOPs a daemon now; SIGCONTs it on leaving (or earlier)."""

    def __init__(self, d: Daemon) -> None:
        assert d.proc is not None
        self.pid = d.proc.pid
        os.kill(self.pid, signal.SIGSTOP)
        self.stopped = True

    def cont(self) -> None:
        if self.stopped:
            self.stopped = False
            os.kill(self.pid, signal.SIGCONT)

    def __enter__(self) -> "Stopped":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.cont()


def test_a_stopped_daemon_aio(daemon: Daemon) -> None:
    async def main() -> None:
        async with keylock.aio.KeyedLock(daemon.addr,
                                         reply_timeout=REPLY) as locks:
            async with locks.lock("warm"):
                pass
            with Stopped(daemon):
                t0 = time.monotonic()
                with pytest.raises(keylock.ConnectionFailed):
                    async with locks.lock("x", timeout=LOCK_TIMEOUT):
                        pass
                took = time.monotonic() - t0
                assert LOCK_TIMEOUT + REPLY - 0.05 <= took
                assert took < LOCK_TIMEOUT + REPLY + SLACK
                with pytest.raises(keylock.ConnectionFailed):
                    await locks.stats()
            # the server answers again: a new connection, nothing left
            async with locks.lock("x", timeout=5) as h:
                assert (await locks.info("x"))["holders"][0]["token"] == \
                    h.token
    asyncio.run(asyncio.wait_for(main(), 30 * SLOW))
    daemon.wait_idle(5 * SLOW)


def test_a_stopped_daemon_sync(daemon: Daemon) -> None:
    def main() -> None:
        with keylock.KeyedLock(daemon.addr, reply_timeout=REPLY) as locks:
            with locks.hold("warm"):
                pass
            with Stopped(daemon):
                t0 = time.monotonic()
                with pytest.raises(keylock.ConnectionFailed):
                    with locks.hold("x", timeout=LOCK_TIMEOUT):
                        pass
                took = time.monotonic() - t0
                assert LOCK_TIMEOUT + REPLY - 0.05 <= took
                assert took < LOCK_TIMEOUT + REPLY + SLACK
                with pytest.raises(keylock.ConnectionFailed):
                    locks.info("x")
            with locks.hold("x", timeout=5):
                assert locks.info("x")["holders"]
    bounded(main, 30 * SLOW)
    daemon.wait_idle(5 * SLOW)


def test_a_stopped_daemon_with_a_session_is_resumed(daemon: Daemon) -> None:
    """The overdue LOCK drops the transport; the session is resumed once
    the daemon runs again, its lock kept, and the LOCK's timeout is
    over (Timeout)."""
    if not speaks_sessions(daemon):
        pytest.skip("this keylockd has no sessions")
    grace = 6 * SLOW

    async def main() -> None:
        other = keylock.aio.KeyedLock(daemon.addr)
        locks = keylock.aio.KeyedLock(daemon.addr, session=grace,
                                      reply_timeout=REPLY)
        try:
            async with other.lock("b"):
                async with locks.lock("a") as h:
                    stop = Stopped(daemon)
                    try:
                        loop = asyncio.get_running_loop()
                        loop.call_later(LOCK_TIMEOUT + REPLY + 1.0 * SLOW,
                                        stop.cont)
                        with pytest.raises(keylock.Timeout):
                            async with locks.lock("b",
                                                  timeout=LOCK_TIMEOUT):
                                pass
                        assert locks._core.conns, "the session ended"
                        assert sum(c.resumes for c in locks._core.conns) \
                            >= 1, "no resume: the LOCK was not given up"
                    finally:
                        stop.cont()
                    assert not h.lost.is_set(), h.lost_reason
                    info = await other.info("a")
                    assert info["holders"][0]["token"] == h.token
        finally:
            await locks.aclose()
            await other.aclose()
    asyncio.run(asyncio.wait_for(main(), 30 * SLOW))
    daemon.wait_idle(5 * SLOW)


@pytest.mark.parametrize("face", ["aio", "sync"])
def test_a_lock_reported_lost_is_released_by_a_later_resume(
        daemon: Daemon, face: str) -> None:
    """The daemon is stopped past the session's window: the lock is
    reported lost. Continued before the client gives the session up, the
    RESUME finds the lock still held: the client releases it then, so
    another client takes the key while the block has not been left."""
    if not speaks_sessions(daemon):
        pytest.skip("this keylockd has no sessions")
    grace = 3.0 * SLOW

    # what was seen inside the block (an assertion failing there would
    # be replaced by the LockLost of leaving it)
    seen: List[str] = []

    def after_lost(stop: Stopped) -> None:
        stop.cont()
        # (the server itself would let go a grace after it saw the
        # connection die, once continued: not before)
        deadline = time.monotonic() + grace / 2
        while daemon.info("lr")["holders"]:
            if time.monotonic() > deadline:
                seen.append("still held after the resume")
                return
            time.sleep(0.02)
        try:
            with keylock.KeyedLock(daemon.addr) as other:
                with other.hold("lr", timeout=0):
                    seen.append("taken by another client")
        except keylock.Error as e:
            seen.append(f"another client: {e}")

    if face == "aio":
        async def main() -> None:
            locks = keylock.aio.KeyedLock(daemon.addr, session=grace)
            try:
                with pytest.raises(keylock.LockLost):
                    async with locks.lock("lr") as h:
                        with Stopped(daemon) as stop:
                            await asyncio.wait_for(h.lost.wait(), 3 * grace)
                            await asyncio.to_thread(after_lost, stop)
                        seen.append(f"resumes "
                                    f"{sum(c.resumes for c in locks._core.conns)}")
            finally:
                await locks.aclose()
        asyncio.run(asyncio.wait_for(main(), 30 * SLOW))
    else:
        def sync_main() -> None:
            with keylock.KeyedLock(daemon.addr, session=grace) as locks:
                with pytest.raises(keylock.LockLost):
                    with locks.hold("lr") as h:
                        with Stopped(daemon) as stop:
                            assert h.lost.wait(3 * grace)
                            after_lost(stop)
        bounded(sync_main, 30 * SLOW)
    assert seen[0] == "taken by another client", seen
    if face == "aio":
        assert seen[1] == "resumes 1", seen
    daemon.wait_idle(5 * SLOW)


def test_a_task_that_only_waits_is_watched_with_channels(
        daemon: Daemon, mode: str) -> None:
    """With channels and a session, a task that holds nothing and waits
    (no timeout: no reply deadline) still has its connection watched
    by channel 0's PINGs: a stopped daemon is noticed within two thirds
    of the grace, the session resumed once it runs again, and the wait
    goes on to its grant."""
    if not speaks_sessions(daemon) or not channels_used(mode, daemon):
        pytest.skip("channels and sessions only")
    grace = 1.5 * SLOW

    async def main() -> None:
        other = keylock.aio.KeyedLock(daemon.addr)
        locks = keylock.aio.KeyedLock(daemon.addr, session=grace)
        try:
            async with other.lock("w") as held:
                async def wait() -> int:
                    async with locks.lock("w") as h:
                        return h.token
                waiter = asyncio.ensure_future(wait())
                while not (await other.info("w"))["waiters"]:
                    await asyncio.sleep(0.01)
                with Stopped(daemon):
                    [conn] = locks._core.conns
                    t0 = time.monotonic()
                    while not conn.suspended:
                        assert time.monotonic() - t0 < grace + SLACK, \
                            "a dead link under a waiting task not noticed"
                        await asyncio.sleep(0.01)
                while conn.suspended:
                    await asyncio.sleep(0.01)
                assert conn.resumes == 1 and not waiter.done()
            token = await asyncio.wait_for(waiter, 5 * SLOW)
            assert token > held.token
        finally:
            await locks.aclose()
            await other.aclose()
    asyncio.run(asyncio.wait_for(main(), 30 * SLOW))
    daemon.wait_idle(5 * SLOW)
