# keylock, the Python client of keylockd. SPDX-License-Identifier: MIT
"""Channels (protocol 1.2, keylockd-protocol(7) "Channels"): the owners of
one KeyedLock ride channels of one connection.

First the framing, without a server: what goes out (``@N`` before a
request, everything written in one turn of the loop in one send), how
replies find their request (by channel, in order within one, in any
order across them), and what a bad line does. Then against the real
daemon: ten thousand tasks waiting at once in a process that may open
256 files, a cancellation storm over hundreds of channels, and every
holder's LockLost when the connection is lost.
"""

from __future__ import annotations

import asyncio
import collections
import random
import subprocess
import sys
import textwrap
import time
from typing import Any, Dict, List, Optional, Tuple

import pytest

import keylock
import keylock.aio
from conftest import Daemon, channels_used, clean_env
from keylock import _core


class Transport(asyncio.Transport):
    """What the Link writes to, kept: each write is one send."""

    def __init__(self) -> None:
        super().__init__()
        self.sends: List[bytes] = []
        self.aborted = False
        self.closed = False

    def write(self, data: bytes) -> None:
        self.sends.append(data)

    def abort(self) -> None:
        self.aborted = True

    def close(self) -> None:
        self.closed = True


def wired(mux: bool = True) -> Tuple[_core.Core, _core.Conn, _core.Link,
                                     Transport]:
    """A connection on a fake transport, as the hello leaves it."""
    core = _core.Core("127.0.0.1:1", name=None, secret=None, auth_file=None,
                      ssl_context=None, max_idle=8, connect_timeout=1.0,
                      cancel_timeout=1.0)
    core.loop = asyncio.get_running_loop()
    conn = _core.Conn(core, core.loop, core._conn_closed)
    conn.mux = mux
    link = _core.Link(conn, conn.addr, None)  # type: ignore[arg-type]
    transport = Transport()
    link.connection_made(transport)
    conn.link = link
    core.conns.add(conn)
    return core, conn, link, transport


async def turn() -> None:
    """Lets the loop run the flush of this turn's writes."""
    await asyncio.sleep(0)
    await asyncio.sleep(0)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_requests_of_one_turn_leave_in_one_send() -> None:
    async def main() -> None:
        _, conn, _, transport = wired()
        a, b = conn.take_chan(), conn.take_chan()
        assert (a.n, b.n) == (1, 2)
        a.send("LOCK x timeout=5", _core.LOCK)
        b.send("LOCK y", _core.LOCK)
        conn.send("PING", _core.PING)
        a.send("CANCEL", _core.CANCEL)
        assert transport.sends == []        # not before the turn ends
        await turn()
        assert transport.sends == [
            b"@1 LOCK x timeout=5\n@2 LOCK y\nPING\n@1 CANCEL\n"]
        b.send("UNLOCK y", _core.UNLOCK)
        await turn()
        assert transport.sends[1:] == [b"@2 UNLOCK y\n"]
    run(main())


def test_replies_find_their_channel_in_any_interleaving() -> None:
    async def main() -> None:
        _, conn, link, _ = wired()
        a, b = conn.take_chan(), conn.take_chan()
        a1 = a.send("LOCK x", _core.LOCK)
        a2 = a.send("CANCEL", _core.CANCEL)
        b1 = b.send("LOCK y", _core.LOCK)
        p0 = conn.send("PING", _core.PING)
        await turn()
        # b's first, then channel 0, then a's two, split anywhere
        data = b"@2 OK 17\r\nOK PONG\n@1 ERR CANCELLED withdrawn\n@1 OK 1\n"
        for i in range(0, len(data), 5):
            link.data_received(data[i:i + 5])
        assert b1.line == "OK 17" and p0.line == "OK PONG"
        assert a1.line == "ERR CANCELLED withdrawn" and a2.line == "OK 1"
        assert not conn.closed
    run(main())


def test_channel_numbers_are_reused_once_free() -> None:
    async def main() -> None:
        _, conn, _, transport = wired()
        chans = [conn.take_chan() for _ in range(3)]
        assert [c.n for c in chans] == [1, 2, 3] and conn.busy == 3
        conn.give_back(chans[1])
        again = conn.take_chan()
        assert again is chans[1] and conn.busy == 3
        assert conn.take_chan().n == 4
        await turn()
        assert transport.sends == []        # a channel needs no opening
    run(main())


@pytest.mark.parametrize("line", [
    b"@x OK\n", b"@ OK\n", b"@1OK\n", b"@-1 OK\n", b"@9 OK 3\n",
    b"OK stray\n", b"@2 OK\n"])
def test_a_reply_nobody_asked_for_ends_the_connection(line: bytes) -> None:
    """A malformed channel, a channel with nothing asked, a reply on
    channel 0 with nothing asked: the client cannot tell whose it is, so
    the connection is given up (its requests answered None)."""
    async def main() -> None:
        _, conn, link, transport = wired()
        a = conn.take_chan()
        conn.take_chan()
        p = a.send("LOCK x", _core.LOCK)
        await turn()
        link.data_received(line)
        assert conn.closed and transport.aborted
        assert p.done and p.line is None
        assert "nobody asked" in conn.reason or "channel" in conn.reason
    run(main())


def test_a_server_without_channels_answers_the_probe_on_channel_0() -> None:
    """The hello's ``@1 PING``: a server of protocol 1.1 answers it with
    ERR SYNTAX on channel 0, after the other hello replies."""
    async def main() -> None:
        for reply, mux in ((b"@1 OK PONG\n", True),
                           (b"ERR SYNTAX unknown command '@1'\n", False)):
            _, conn, link, transport = wired(mux=False)
            name = conn.send("NAME t")
            ping = conn.send("PING")
            probe = _core.Pending(asyncio.get_running_loop().create_future(),
                                  "PING", _core.PING)
            link.write(probe, 1)
            link.probe = probe
            await turn()
            assert transport.sends == [b"NAME t\nPING\n@1 PING\n"]
            link.data_received(b"OK\nOK PONG\n" + reply)
            assert name.line == "OK" and ping.line == "OK PONG"
            assert (probe.line == "OK PONG") == mux and probe.done
            assert not conn.closed and link.probe is None
    run(main())


def test_a_resume_reconciles_every_channel() -> None:
    """RESUME's reply lists the channels: each channel's requests are
    settled against its own entry; a grant of a channel the client does
    not know is released on that channel."""
    async def main() -> None:
        core, conn, link, _ = wired()
        conn.session = "S"
        conn.grace = 5.0
        a, b = conn.take_chan(), conn.take_chan()
        lock_a = a.send("LOCK x", _core.LOCK)       # granted while down
        lock_b = b.send("LOCK y", _core.LOCK)       # still waits
        await turn()
        link.lost("reset")
        assert conn.suspended and not lock_a.done and not lock_b.done
        new = _core.Link(conn, conn.addr, None)  # type: ignore[arg-type]
        transport = Transport()
        new.connection_made(transport)
        resume = _core.Pending(asyncio.get_running_loop().create_future(),
                               "RESUME S")
        state = ('{"session":"S","grace_ms":5000,"held":[],"waiting":null,'
                 '"channels":['
                 '{"channel":1,"held":[{"keys":["x"],"token":41}],'
                 '"waiting":null},'
                 '{"channel":2,"held":[],"waiting":{"keys":["y"]}},'
                 '{"channel":7,"held":[{"keys":["z"],"token":40}],'
                 '"waiting":null}]}')
        assert conn._resumed(new, resume, "OK " + state)
        conn._resumer = None
        assert conn.link is new and not conn.suspended
        assert lock_a.line == "OK 41"       # taken from "held"
        assert not lock_b.done              # its reply comes next
        await turn()
        assert transport.sends == [b"@7 UNLOCK z\n"]
        new.data_received(b"@2 OK 42\n@7 OK 1\n")
        assert lock_b.line == "OK 42"
        assert 7 in conn.chans and conn.chans[7] in conn.free
        core.conns.clear()
    run(main())


# Against the daemon

@pytest.fixture
def chans(server: Daemon, mode: str) -> Daemon:
    """The shared daemon, for tests of the channels mode only."""
    if not channels_used(mode, server):
        pytest.skip("channels only (this mode, or this daemon, has none)")
    return server


WAITERS = 10_000

_MANY_WAITERS = textwrap.dedent('''
    import asyncio, resource, sys, time
    import keylock.aio

    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))

    async def main() -> None:
        locks = keylock.aio.KeyedLock(sys.argv[1])
        n = int(sys.argv[2])
        holder = locks.lock("many:k")
        await holder.__aenter__()
        order = []

        async def waiter(i: int) -> None:
            async with locks.lock("many:k", timeout=120) as h:
                order.append(h.token)
        tasks = [asyncio.ensure_future(waiter(i)) for i in range(n)]
        t0 = time.monotonic()
        while (await locks.stats())["waiting"] < n:
            assert time.monotonic() - t0 < 60, "not all waiting"
            await asyncio.sleep(0.05)
        queued = time.monotonic() - t0
        st = await locks.stats()
        await holder.__aexit__(None, None, None)
        await asyncio.gather(*tasks)
        done = time.monotonic() - t0
        assert order == sorted(order) and len(set(order)) == n
        st2 = await locks.stats()
        await locks.aclose()
        print(st["waiting"], st["clients"], st.get("channels"),
              st2["keys"], st2["held"], f"{queued:.2f}", f"{done:.2f}")
    asyncio.run(main())
''')


def test_ten_thousand_tasks_wait_at_once_under_ulimit_256(
        chans: Daemon, report: Any) -> None:
    """10,000 tasks of one process wait for one key at once, in a process
    that may open 256 files: one connection carries them all. Each is
    granted in turn, in FIFO order (tokens ascending), and nothing is
    left."""
    proc = subprocess.run(
        [sys.executable, "-c", _MANY_WAITERS, chans.addr, str(WAITERS)],
        env=clean_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    waiting, clients, channels, keys, held, queued, done = \
        proc.stdout.split()
    assert int(waiting) == WAITERS
    assert int(clients) == 1, clients      # the one connection
    assert int(channels) >= WAITERS
    assert (int(keys), int(held)) == (0, 0)
    report(f"{WAITERS:,} tasks waiting at once under ulimit -n 256 on one "
           f"connection: all queued in {queued} s, all granted in turn "
           f"and released by {done} s")


def test_a_cancellation_storm_over_hundreds_of_channels(
        chans: Daemon, report: Any) -> None:
    """5,000 tasks on 5 keys, 500 at once (500 channels), cancelled at
    random while waiting, being granted, in the block and releasing;
    then nothing is held or waits, every grant was released by UNLOCK,
    and no channel is left."""
    rng = random.Random(25)
    outcome: Dict[str, int] = collections.Counter()
    keys = [f"cs:{i}" for i in range(5)]
    st0 = chans.stats()

    async def main() -> None:
        locks = keylock.aio.KeyedLock(chans.addr)
        sem = asyncio.Semaphore(500)
        inside: Dict[str, int] = collections.Counter()

        async def body(key: str) -> None:
            async with locks.lock(key):
                inside[key] += 1
                try:
                    assert inside[key] == 1, f"{key}: two in the block"
                    outcome["entered"] += 1
                    await asyncio.sleep(rng.random() * 0.002)
                finally:
                    inside[key] -= 1

        async def one() -> None:
            async with sem:
                try:
                    await asyncio.wait_for(body(rng.choice(keys)),
                                           10 ** rng.uniform(-3, 0))
                    outcome["completed"] += 1
                except asyncio.TimeoutError:
                    outcome["cancelled"] += 1
        await asyncio.gather(*(one() for _ in range(5000)))
        st = await locks.stats()
        assert st["clients"] - 1 <= 1, st
        await locks.aclose()
    t0 = time.monotonic()
    asyncio.run(main())
    wall = time.monotonic() - t0
    st = chans.wait_idle()
    grants = st["grants"] - st0["grants"]
    assert st["keys"] == 0 and st["held"] == 0 and st["waiting"] == 0
    assert st["releases"] - st0["releases"] == grants
    assert st["disconnect_releases"] == st0["disconnect_releases"]
    assert st.get("channels", 0) == 0, st
    assert outcome["cancelled"] > 1000 and outcome["entered"] > 0, outcome
    report(f"5,000 tasks over 500 channels, {outcome['cancelled']} "
           f"cancelled, {grants} grants all released by UNLOCK; keys 0, "
           f"held 0, channels 0; {wall:.2f} s")


def test_every_holder_hears_of_a_lost_connection(daemon: Daemon,
                                                 mode: str) -> None:
    """Three tasks hold locks (three channels of one connection, or three
    connections); the daemon dies: every handle is lost at once, every
    block raises LockLost, and a task waiting meanwhile gets
    ConnectionFailed."""
    async def main() -> None:
        locks = keylock.aio.KeyedLock(daemon.addr)
        holding = asyncio.Event()
        count = [0]
        results: List[Optional[BaseException]] = []

        async def holder(i: int) -> None:
            try:
                async with locks.lock(f"ll:{i}") as h:
                    count[0] += 1
                    if count[0] == 3:
                        holding.set()
                    await asyncio.wait_for(h.lost.wait(), 5)
            except BaseException as e:
                results.append(e)
            else:
                results.append(None)

        async def waiter() -> None:
            await holding.wait()
            try:
                async with locks.lock("ll:0"):
                    pass
            except BaseException as e:
                results.append(e)
        tasks = [asyncio.ensure_future(holder(i)) for i in range(3)]
        w = asyncio.ensure_future(waiter())
        await asyncio.wait_for(holding.wait(), 5)
        await asyncio.sleep(0.1)
        daemon.kill()
        await asyncio.wait_for(asyncio.gather(*tasks, w), 5)
        kinds = sorted(type(e).__name__ for e in results)
        assert kinds == ["ConnectionFailed", "LockLost", "LockLost",
                         "LockLost"], results
        await locks.aclose()
    asyncio.run(main())
