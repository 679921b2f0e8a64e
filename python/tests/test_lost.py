# keylock, the Python client of keylockd. SPDX-License-Identifier: MIT
"""A daemon killed under a holder: ``lost`` at once, LockLost on leaving,
no silent reconnect while anything is held."""

from __future__ import annotations

import asyncio
import time

import pytest

import keylock
import keylock.aio
from conftest import Daemon


def test_killed_daemon_sets_lost_and_raises_locklost(daemon: Daemon) -> None:
    async def main() -> None:
        locks = keylock.aio.KeyedLock(daemon.addr)
        with pytest.raises(keylock.LockLost) as e:
            async with locks.lock("precious") as h:
                daemon.kill()
                t0 = time.monotonic()
                await asyncio.wait_for(h.lost.wait(), 2)
                assert time.monotonic() - t0 < 1.0
                # a nested lock would need a new connection: refused
                with pytest.raises(keylock.LockLost):
                    async with locks.lock("more"):
                        pass
        assert "precious" in str(e.value)
        assert "gone" in str(e.value)
        # nothing held any more: the next lock may connect again
        daemon.start()
        async with locks.lock("precious") as h2:
            assert h2.token > 0 and not h2.lost.is_set()
        await locks.aclose()
    asyncio.run(main())


def test_killed_daemon_sync_face(daemon: Daemon) -> None:
    locks = keylock.KeyedLock(daemon.addr)
    with pytest.raises(keylock.LockLost):
        with locks.hold("precious") as h:
            daemon.kill()
            assert h.lost.wait(2)
            assert h.lost_reason
    locks.close()


def test_lost_does_not_mask_a_cancellation(daemon: Daemon) -> None:
    """A body that ends by BaseException (cancellation, KeyboardInterrupt)
    keeps its exception; LockLost never replaces it."""
    async def main() -> None:
        locks = keylock.aio.KeyedLock(daemon.addr)

        async def body() -> None:
            async with locks.lock("k") as h:
                daemon.kill()
                await h.lost.wait()
                await asyncio.sleep(10)
        task = asyncio.ensure_future(body())
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    asyncio.run(main())
