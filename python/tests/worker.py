# keylock, the Python client of keylockd. SPDX-License-Identifier: MIT
"""One process of the seed's verify steps (test_seed.py runs several).

    worker.py MODE INDEX SERVER ARGS...

prints "ready", waits for a line on its stdin (the test's "go", so that
all processes start together), and prints one JSON value. Times are time.monotonic(), which every process
of the machine shares.
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import random
import sys
import threading
import time
from typing import Any, List

import keylock
import keylock._core
import keylock.aio

# the test's mode (conftest.py's ``mode`` fixture): channels or not
keylock._core.CHANNELS_DEFAULT = \
    os.environ.get("KEYLOCKD_TEST_CHANNELS", "1") != "0"


async def warm(locks: keylock.aio.KeyedLock, n: int) -> None:
    """Opens n connections into the pool, as the seed's headline had its
    1,000 connections open before the clock started."""
    async def one(i: int) -> None:
        async with locks.lock(f"seed:warm:{i}"):
            await asyncio.sleep(0.01)
    await asyncio.gather(*(one(i) for i in range(n)))


def ready() -> None:
    """Tells the test this process is set up; returns at its "go"."""
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    sys.stdin.readline()


async def ops(server: str, n: int, keys: int, seed: int) -> Any:
    """n one-millisecond operations on random keys of ``keys``, at once."""
    locks = keylock.aio.KeyedLock(server, max_idle=n)
    rng = random.Random(seed)
    done: List[Any] = []

    async def op(key: str) -> None:
        async with locks.lock(key) as h:
            t_in = time.monotonic()
            await asyncio.sleep(0.001)
            done.append([key, h.token, t_in, time.monotonic()])
    await warm(locks, n)
    ready()
    start = time.monotonic()
    await asyncio.gather(*(op(f"seed:op:{rng.randrange(keys)}")
                           for _ in range(n)))
    end = time.monotonic()
    await locks.aclose()
    return {"start": start, "end": end, "ops": done}


def credit(server: str, n: int, path: str) -> Any:
    """n threads, each adds 1 to the account file under the lock."""
    locks = keylock.KeyedLock(server)
    account = pathlib.Path(path)

    def one() -> None:
        with locks.hold(("seed", "account", 1)):
            value = int(account.read_text())
            time.sleep(0.001)           # a lost update, were it unlocked
            account.write_text(str(value + 1))
    threads = [threading.Thread(target=one) for _ in range(n)]
    ready()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    locks.close()
    return {"credits": n}


async def timeouts(server: str, n: int) -> Any:
    """n tasks wait for a held key with timeout=2, on connections opened
    beforehand."""
    locks = keylock.aio.KeyedLock(server, max_idle=n)

    async def one() -> Any:
        t0 = time.monotonic()
        try:
            async with locks.lock("seed:slow", timeout=2):
                return ["granted", time.monotonic() - t0, ""]
        except keylock.Timeout as e:
            return ["timeout", time.monotonic() - t0, str(e)]
    await warm(locks, n)
    ready()
    out = await asyncio.gather(*(one() for _ in range(n)))
    await locks.aclose()
    return out


async def busy(server: str, n: int) -> Any:
    """n tasks ask for one key with max_waiters=100, on connections
    opened beforehand (so the time measured is the request's)."""
    locks = keylock.aio.KeyedLock(server, max_idle=n)
    await warm(locks, n)

    async def one() -> Any:
        t0 = time.monotonic()
        try:
            async with locks.lock("seed:hot", max_waiters=100):
                return ["granted", time.monotonic() - t0]
        except keylock.Busy:
            return ["busy", time.monotonic() - t0]
    ready()
    out = await asyncio.gather(*(one() for _ in range(n)))
    await locks.aclose()
    return out


async def transfers(server: str, n: int, folder: str,
                    seed: int) -> Any:
    """n random transfers between 10 account files, keys in random
    order: one atomic grant for both."""
    locks = keylock.aio.KeyedLock(server, max_idle=n)
    rng = random.Random(seed)
    root = pathlib.Path(folder)
    moved = 0

    async def one(src: int, dst: int, amount: int, flip: bool) -> None:
        nonlocal moved
        keys = [("seed", "acct", src), ("seed", "acct", dst)]
        if flip:
            keys.reverse()
        async with locks.lock(*keys):
            a = int((root / str(src)).read_text())
            b = int((root / str(dst)).read_text())
            await asyncio.sleep(0.0005)
            (root / str(src)).write_text(str(a - amount))
            (root / str(dst)).write_text(str(b + amount))
            moved += 1
    jobs = []
    for _ in range(n):
        src, dst = rng.sample(range(10), 2)
        jobs.append(one(src, dst, rng.randint(1, 20), rng.random() < 0.5))
    await warm(locks, n)
    ready()
    await asyncio.gather(*jobs)
    await locks.aclose()
    return {"moved": moved}


def main(argv: List[str]) -> None:
    mode, index, server = argv[1], int(argv[2]), argv[3]
    args = argv[4:]
    if mode == "ops":
        out = asyncio.run(ops(server, int(args[0]), int(args[1]),
                              int(args[2]) + index))
    elif mode == "credit":
        out = credit(server, int(args[0]), args[1])
    elif mode == "timeout":
        out = asyncio.run(timeouts(server, int(args[0])))
    elif mode == "busy":
        out = asyncio.run(busy(server, int(args[0])))
    elif mode == "transfer":
        out = asyncio.run(transfers(server, int(args[0]), args[1],
                                    int(args[2]) + index))
    else:
        raise SystemExit(f"unknown mode {mode}")
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main(sys.argv)
