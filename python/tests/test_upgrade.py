# keylock, the Python client of keylockd. SPDX-License-Identifier: MIT
"""Live upgrade (keylockd(8), LIVE UPGRADE): the daemon is replaced by
SIGUSR2 while a client with a session holds a lock. Its connection moves
to the new process byte for byte, so the client notices nothing: the
lock is never lost or suspended, the new process shows the same holder
with the same token, and the next lock and the releases go through it.
A failed upgrade's ``ERR UPGRADE`` is :class:`keylock.UpgradeFailed`.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Optional

import pytest

import keylock
import keylock.aio
from conftest import SLOW, Daemon, speaks_sessions
from keylock._errors import error_from_reply


def test_err_upgrade_is_upgrade_failed() -> None:
    e = error_from_reply("UPGRADE", "the new process exited with status 1")
    assert isinstance(e, keylock.UpgradeFailed)
    assert (e.code, e.text) == ("UPGRADE",
                                "the new process exited with status 1")


def test_a_session_rides_through_a_live_upgrade(daemon: Daemon) -> None:
    if not speaks_sessions(daemon):
        pytest.skip("this keylockd has no sessions")
    old = int(daemon.stats()["pid"])
    new: Optional[int] = None

    async def main() -> None:
        nonlocal new
        locks = keylock.aio.KeyedLock(daemon.addr,
                                      session=min(30.0 * SLOW, 60.0))
        try:
            async with locks.lock("up:a") as h:
                [before] = daemon.info("up:a")["holders"]
                os.kill(old, signal.SIGUSR2)
                deadline = time.monotonic() + 30 * SLOW
                while int(daemon.stats()["upgrades"]) < 1:
                    assert time.monotonic() < deadline, "no upgrade"
                    await asyncio.sleep(0.02)
                new = int(daemon.stats()["pid"])
                assert new != old
                assert not h.lost.is_set() and not h.suspended.is_set()
                [after] = daemon.info("up:a")["holders"]
                assert (after["client"], after["token"]) == \
                    (before["client"], h.token)
                async with locks.lock("up:b"):      # served by the new one
                    pass
            assert not h.lost.is_set() and h.lost_reason is None
        finally:
            await locks.aclose()

    try:
        asyncio.run(main())
        st = daemon.wait_idle()
        assert int(st["pid"]) == new
        assert st["disconnect_releases"] == 0, st
        assert st["sessions_expired"] == 0, st
    finally:
        # the new process is no child of this one: it goes by its pid
        if new is not None:
            os.kill(new, signal.SIGTERM)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                try:
                    os.kill(new, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.02)
