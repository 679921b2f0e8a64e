# keylock, the Python client of keylockd. SPDX-License-Identifier: MIT
"""Failover on ERR BACKEND, over real etcd members (tests/etcd/cluster.sh).

A front end of ``backend etcd`` that can no longer reach etcd still
accepts connections but answers LOCK with ERR BACKEND: the client moves
such a LOCK to the next server of its list and takes new locks there from
then on, while the locks its other owners hold through that front end
are left alone (they are theirs until the front end lets them go). Each
test starts its own cluster and skips, saying so, where etcd is not
installed (Debian: etcd-server).
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import subprocess
import time
from typing import Any, Dict, Iterator, List, Optional

import pytest

import keylock
import keylock.aio
from conftest import PYDIR, SLOW, Daemon, clean_env

CLUSTER_SH = PYDIR.parent / "tests" / "etcd" / "cluster.sh"


class Cluster:
    """A private etcd cluster of ``n`` members under ``tmp``."""

    def __init__(self, tmp: pathlib.Path, n: int) -> None:
        if not CLUSTER_SH.is_file():
            pytest.skip(f"no {CLUSTER_SH} (these tests run from a checkout)")
        self.dir = tmp / "etcd"
        self.up = False
        r = self._run("start", str(n), "--watch", str(os.getpid()))
        if r.returncode == 77:
            pytest.skip("etcd is not installed (etcd-server)")
        assert r.returncode == 0, f"no etcd cluster of {n}: {r.stderr}"
        self.up = True
        self.endpoints = r.stdout.strip()

    def _run(self, *args: str) -> "subprocess.CompletedProcess[str]":
        return subprocess.run(["sh", str(CLUSTER_SH), str(self.dir), *args],
                              stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, env=clean_env(), timeout=120)

    def __call__(self, *args: str) -> str:
        r = self._run(*args)
        assert r.returncode == 0, f"cluster.sh {' '.join(args)}: {r.stderr}"
        return r.stdout.strip()

    def down(self) -> None:
        if self.up:
            self._run("down")
            self.up = False


@pytest.fixture
def daemons() -> Iterator[List[Daemon]]:
    """The test's daemons, stopped at its end."""
    started: List[Daemon] = []
    yield started
    for d in started:
        d.stop()


def front_end(tmp: pathlib.Path, name: str, endpoints: str,
              lease_s: int) -> Daemon:
    (tmp / name).mkdir()
    return Daemon(tmp / name, "--backend", "etcd", "--etcd-endpoints",
                  endpoints, "--etcd-prefix", f"pyfailover-{os.getpid()}/",
                  "--etcd-lease-ttl", str(lease_s), "--etcd-timeout", "1000")


def wait_until(what: str, cond: Any, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds * SLOW
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"not {what} within {seconds * SLOW} s")
        time.sleep(0.02)


def test_backend_refusal_moves_on_and_leaves_the_holders_alone(
        tmp_path: pathlib.Path, daemons: List[Daemon], mode: str,
        report: Any) -> None:
    """fe (backend etcd on one member) and d2: once the member is
    SIGKILLed, a LOCK through fe (timeout=0: a move keeps it) is ERR
    BACKEND and goes to d2; a lock held through fe meanwhile is not lost
    nor its connection closed (fe's lease outlives the test's steps), the
    next lock goes to d2 at once, and once the holder lets go its
    connection to fe is closed."""
    cluster = Cluster(tmp_path, 1)
    try:
        fe = front_end(tmp_path, "fe", cluster.endpoints, int(60 * SLOW))
        daemons.append(fe)
        (tmp_path / "d2").mkdir()
        d2 = Daemon(tmp_path / "d2")
        daemons.append(d2)
        got: Dict[str, Any] = {}

        async def main() -> None:
            locks = keylock.aio.KeyedLock(f"{fe.addr},{d2.addr}")
            held = asyncio.Event()
            done = asyncio.Event()

            async def holder() -> None:
                try:
                    async with locks.lock("a") as h:
                        got["a"] = h
                        held.set()
                        await done.wait()
                except keylock.Error as e:
                    # (its UNLOCK through the cut-off fe may be refused)
                    got["a-exit"] = e
            task = asyncio.ensure_future(holder())
            await asyncio.wait_for(held.wait(), 10 * SLOW)
            assert fe.info("a")["holders"], "a is not held through fe"
            cluster("kill", "m1")
            t0 = time.monotonic()
            async with locks.lock("k", timeout=0):
                got["took"] = time.monotonic() - t0
                assert len(d2.info("k")["holders"]) == 1
            assert got["a"].lost_reason is None, got["a"].lost_reason
            # the holder's and this STATS's (the refused task's own
            # connection, without channels, is closed)
            wait_until("2 clients on fe", lambda: fe.stats()["clients"] == 2)
            errors = fe.stats()["errors"]
            assert errors >= 1                      # the refusal
            t0 = time.monotonic()
            async with locks.lock("c"):
                got["next"] = time.monotonic() - t0
            assert fe.stats()["errors"] == errors   # not asked of fe
            assert d2.stats()["grants"] == 2
            assert (await locks.stats())["pid"] == d2.stats()["pid"]
            done.set()
            await task
            wait_until("the connection to fe closed",
                       lambda: fe.stats()["clients"] == 1)
            await locks.aclose()
        asyncio.run(main())
    finally:
        cluster.down()
    report(f"[{mode}] ERR BACKEND from a front end cut off from etcd: "
           f"granted through the next server in "
           f"{got['took'] * 1000:.1f} ms; the next lock in "
           f"{got['next'] * 1000:.1f} ms")


def test_two_front_ends_one_cut_off(tmp_path: pathlib.Path,
                                    daemons: List[Daemon], mode: str,
                                    report: Any) -> None:
    """A 3-member cluster; fe3 reaches one member only (one that is not
    the leader: a leader's death is an election, which is not what this
    test is about), fe2 the other two. KeyedLock "fe3,fe2" takes its lock
    through fe3; once fe3's member is SIGKILLed (the other two keep the
    quorum), fe3 answers ERR BACKEND and the same KeyedLock gets the lock
    through fe2, as keylock -S fe3,fe2 does (tests/cli/failover_etcd.sh)."""
    cluster = Cluster(tmp_path, 3)
    took: Optional[float] = None
    try:
        leader = cluster("leader")
        assert leader in ("m1", "m2", "m3"), leader
        cut, *others = sorted({"m1", "m2", "m3"} - {leader}) + [leader]
        fe3 = front_end(tmp_path, "fe3", cluster("url", cut), 15)
        daemons.append(fe3)
        fe2 = front_end(tmp_path, "fe2", ",".join(cluster("url", m)
                                                  for m in others), 15)
        daemons.append(fe2)
        with keylock.KeyedLock(f"{fe3.addr},{fe2.addr}") as locks:
            with locks.hold("job", timeout=20 * SLOW):
                assert len(fe3.info("job")["holders"]) == 1
            cluster("kill", cut)
            cluster("wait-healthy", str(int(30 * SLOW)))
            errors = fe3.stats()["errors"]
            t0 = time.monotonic()
            with locks.hold("job") as h:        # (no timeout: none kept)
                took = time.monotonic() - t0
                assert h.token > 0
                assert len(fe2.info("job")["holders"]) == 1
            assert fe3.stats()["errors"] == errors + 1     # its refusal
    finally:
        cluster.down()
    assert took is not None
    report(f"[{mode}] fe3 cut off from etcd: KeyedLock('fe3,fe2') got "
           f"the lock through fe2 in {took * 1000:.1f} ms")


def test_a_session_through_backend_etcd_runs_its_owners_on_channels(
        tmp_path: pathlib.Path, daemons: List[Daemon]) -> None:
    """A session through backend etcd covers every channel of its
    connection (keylockd-protocol(7), SESSIONS, Across front ends, and
    CHANNELS), as through backend local: with session= and channels on,
    the client runs its owners as channels of the session's connection,
    and every front end shows their holds on their channels."""
    cluster = Cluster(tmp_path, 1)
    try:
        fe = front_end(tmp_path, "fe", cluster.endpoints, int(10 * SLOW))
        daemons.append(fe)

        async def main() -> None:
            locks = keylock.aio.KeyedLock(fe.addr, session=5,
                                          channels=True)
            seen: List[int] = []

            async def nested(k: str) -> None:
                async with locks.lock(k):
                    async with locks.lock(k + "2"):
                        holders = fe.info(k)["holders"]
                        assert holders
                        seen.append(holders[0].get("channel", 0))
                        seen.append(fe.stats()["channels"])
            await asyncio.gather(nested("a"), nested("b"))
            assert fe.stats()["sessions"] == 1
            assert max(seen) > 0, f"no channel in use: {seen}"
            await locks.aclose()
        asyncio.run(main())
        sync = keylock.KeyedLock(fe.addr, session=5)
        with sync.lock("x"):
            assert fe.info("x")["holders"]
        sync.close()
        assert fe.stats()["keys"] == 0
    finally:
        cluster.down()
