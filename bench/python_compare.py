#!/usr/bin/env python3
# keylock, the Python client of keylockd. SPDX-License-Identifier: MIT
"""keylock.aio against asyncio.Lock and redis-py's asyncio Lock, side by
side in one run.

    bench/python_compare.py BUILDDIR [--write]

Starts keylockd (BUILDDIR/src/keylockd, or $KEYLOCKD) and Debian's
redis-server on free loopback ports (PIN=1 pins them to CPU 0 and this
client to CPU 1, as compare.sh does; by default the kernel places them,
which on a small machine shared with other work keeps a busy CPU from
stalling one side), and runs the same tasks and keys against both,
alternating over ROUNDS rounds (default 5) of DURATION seconds (default
2):

- uncontended: C tasks (default 50), each on its own key, each looping
  ``async with lock(key): pass``; lock + unlock cycles per second;
- contended: C tasks on one key, the same loop: grants per second,
  hand-offs per second (a grant to another task than the previous
  holder's) and the wait for a grant, p50 and p99;
- the seed's workload against the in-process lock it replaces: SEED_N
  tasks (default 1,000) started at once on SEED_KEYS keys (default 50),
  each ``async with lock(key): await asyncio.sleep(0.001)``, the wall
  time until all are done; a dict of ``asyncio.Lock`` against
  keylock.aio, as a new user runs it (a new KeyedLock, its connection
  opened inside the clock) and with its connection already open,
  SEED_REPEAT times (default 5) each round.

keylock.aio runs as it does by default: its tasks are channels of one
connection (CHANNELS=0: ``channels=False``, a connection per task).

RT=1 runs the seed's workload (all three, this process and keylockd)
under SCHED_FIFO priority 5, as bench/seed.sh's RT=1 does with chrt -f
5: on a machine shared with other work, a run then waits less for a
CPU. keylock.aio needs keylockd and this process to take turns on a
CPU for every hand-off, the in-process lock only this process, so a
loaded machine slows the first more. The 2-second uncontended and
contended runs stay at normal priority (they keep a CPU busy).

redis-py's Lock is used as documented: ``async with r.lock(key,
timeout=60)`` (a 60 s lease, as keylockd's lock dies with its connection
instead), which takes ``SET key token NX PX 60000``, polls every
``sleep=0.1`` s while the key is taken, and releases with a Lua
compare-and-delete. keylock.aio waits in the server's FIFO queue.

Prints a markdown section; --write puts it into bench/RESULTS.md (replacing
its earlier copy, between the markers below).
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import platform
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from typing import Any, Callable, Dict, List, Tuple

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "python"))

import keylock  # noqa: E402
import keylock.aio  # noqa: E402

BEGIN = "<!-- bench/python_compare.py: begin -->"
END = "<!-- bench/python_compare.py: end -->"
Result = Dict[str, float]
LockFactory = Callable[[str], Any]
CHANNELS = os.environ.get("CHANNELS", "1") != "0"
RT = os.environ.get("RT", "0") == "1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pin(cpu: int) -> Callable[[], None]:
    """Pins to one CPU with PIN=1, when there are two or more."""
    def f() -> None:
        if os.environ.get("PIN", "0") == "1" and \
                hasattr(os, "sched_setaffinity") and \
                (os.cpu_count() or 1) > 1:
            os.sched_setaffinity(0, {cpu})
    return f


def realtime(pids: List[int], on: bool) -> None:
    """RT=1: SCHED_FIFO priority 5 (on) or back to SCHED_OTHER for this
    thread (0) and the other processes."""
    if not RT:
        return
    policy = os.SCHED_FIFO if on else os.SCHED_OTHER
    for pid in pids:
        try:
            os.sched_setscheduler(pid, policy,
                                  os.sched_param(5 if on else 0))
        except OSError as e:
            raise SystemExit(f"RT=1: sched_setscheduler: {e}")


def wait_port(port: int, proc: "subprocess.Popen[bytes]") -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), 1).close()
            return
        except OSError:
            time.sleep(0.02)
    raise SystemExit(f"nothing listens on {port}")


def start_keylockd(daemon: str, tmp: str) -> Tuple["subprocess.Popen[bytes]",
                                                   int]:
    port = free_port()
    proc = subprocess.Popen(
        [daemon, "--config", "/dev/null", "--bind", "127.0.0.1", "--port",
         str(port), "--unix", "", "--state-dir", tmp, "--log-level",
         "error"], preexec_fn=pin(0), stdout=subprocess.DEVNULL,
        env={k: v for k, v in os.environ.items()
             if not k.startswith("KEYLOCK_")})
    wait_port(port, proc)
    return proc, port


def start_redis(tmp: str) -> Tuple["subprocess.Popen[bytes]", int]:
    port = free_port()
    proc = subprocess.Popen(
        [os.environ.get("REDIS_SERVER", "redis-server"), "--port", str(port),
         "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--daemonize", "no", "--dir", tmp, "--loglevel", "warning"],
        preexec_fn=pin(0), stdout=subprocess.DEVNULL)
    wait_port(port, proc)
    return proc, port


async def uncontended(make: LockFactory, c: int, duration: float,
                      warm: Callable[[], Any]) -> Result:
    await warm()
    go = asyncio.Event()
    counts = [0] * c
    end = 0.0

    async def worker(i: int) -> None:
        key = f"bench:u:{i}"
        await go.wait()
        n = 0
        while time.perf_counter() < end:
            async with make(key):
                pass
            n += 1
        counts[i] = n
    tasks = [asyncio.ensure_future(worker(i)) for i in range(c)]
    await asyncio.sleep(0.05)
    start = time.perf_counter()
    end = start + duration
    go.set()
    await asyncio.gather(*tasks)
    return {"cycles": sum(counts) / (time.perf_counter() - start)}


async def contended(make: LockFactory, c: int, duration: float,
                    warm: Callable[[], Any]) -> Result:
    await warm()
    go = asyncio.Event()
    grants: List[Tuple[float, int, float]] = []
    end = 0.0

    async def worker(i: int) -> None:
        await go.wait()
        while time.perf_counter() < end:
            t0 = time.perf_counter()
            async with make("bench:hot"):
                t1 = time.perf_counter()
                grants.append((t1, i, t1 - t0))
    tasks = [asyncio.ensure_future(worker(i)) for i in range(c)]
    await asyncio.sleep(0.05)
    start = time.perf_counter()
    end = start + duration
    go.set()
    await asyncio.gather(*tasks)
    window = [g for g in grants if g[0] < end]
    window.sort()
    handoffs = sum(1 for a, b in zip(window, window[1:]) if a[1] != b[1])
    waits = sorted(g[2] for g in window)

    def pct(q: float) -> float:
        return waits[min(len(waits) - 1, int(q * len(waits)))] * 1000
    return {"grants": len(window) / duration,
            "handoffs": handoffs / duration,
            "p50": pct(0.50), "p99": pct(0.99)}


async def seed_asyncio(n: int, keys: int, seed: int) -> float:
    """The seed's workload over a dict of asyncio.Lock: the wall time."""
    rng = random.Random(seed)
    locks: Dict[str, asyncio.Lock] = {}

    async def op(key: str) -> None:
        lock = locks.get(key)
        if lock is None:
            lock = locks[key] = asyncio.Lock()
        async with lock:
            await asyncio.sleep(0.001)
    t0 = time.perf_counter()
    await asyncio.gather(*(op(f"seed:{rng.randrange(keys)}")
                           for _ in range(n)))
    return time.perf_counter() - t0


async def seed_keylock(port: int, n: int, keys: int, seed: int,
                       warm: bool) -> float:
    """The seed's workload through keylock.aio: the wall time, from a new
    KeyedLock (``warm``: its connection open before the clock)."""
    rng = random.Random(seed)
    locks = keylock.aio.KeyedLock(f"127.0.0.1:{port}", max_idle=n,
                                  channels=CHANNELS)
    if warm:
        async with locks.lock("seed:warm"):
            pass

    async def op(key: str) -> None:
        async with locks.lock(key):
            await asyncio.sleep(0.001)
    t0 = time.perf_counter()
    await asyncio.gather(*(op(f"seed:{rng.randrange(keys)}")
                           for _ in range(n)))
    wall = time.perf_counter() - t0
    assert await locks.key_count() == 0
    await locks.aclose()
    return wall


async def run_seed(port: int, n: int, keys: int, repeat: int,
                   rnd: int) -> Dict[str, List[float]]:
    out: Dict[str, List[float]] = {"asyncio": [], "cold": [], "warm": []}
    for i in range(repeat):
        seed = rnd * 1000 + i
        order = ["asyncio", "cold", "warm"]
        if (rnd + i) % 2:
            order.reverse()
        for name in order:
            if name == "asyncio":
                out[name].append(await seed_asyncio(n, keys, seed))
            else:
                out[name].append(await seed_keylock(port, n, keys, seed,
                                                    name == "warm"))
    return out


async def run_keylockd(port: int, c: int, duration: float) -> Result:
    async with keylock.aio.KeyedLock(f"127.0.0.1:{port}", max_idle=c,
                                     channels=CHANNELS) as locks:
        async def warm() -> None:
            async def one(i: int) -> None:
                async with locks.lock(f"bench:warm:{i}"):
                    await asyncio.sleep(0.01)
            await asyncio.gather(*(one(i) for i in range(c)))
        out = await uncontended(locks.lock, c, duration, warm)
        out.update(await contended(locks.lock, c, duration, warm))
        assert (await locks.stats())["keys"] == 0
    return out


async def run_redis(port: int, c: int, duration: float) -> Result:
    import redis.asyncio as aioredis
    r: Any = aioredis.Redis(host="127.0.0.1", port=port)

    def make(key: str) -> Any:
        return r.lock(key, timeout=60)

    async def warm() -> None:
        await asyncio.gather(*(r.ping() for _ in range(c)))
    try:
        out = await uncontended(make, c, duration, warm)
        out.update(await contended(make, c, duration, warm))
        assert await r.dbsize() == 0
    finally:
        await r.close()
        await r.connection_pool.disconnect()
    return out


def cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def fmt(values: List[float], digits: int = 0) -> str:
    med = statistics.median(values)
    f = f"{{:,.{digits}f}}"
    return (f"{f.format(med)} ({f.format(min(values))}–"
            f"{f.format(max(values))})")


def ratio(a: List[float], b: List[float]) -> str:
    med = statistics.median(a) / statistics.median(b)
    paired = statistics.median(x / y for x, y in zip(a, b) if y)
    return f"**{med:.2f}** (paired {paired:.2f})"


def report(res: Dict[str, List[Result]], seeds: Dict[str, List[float]],
           meta: Dict[str, str]) -> str:
    k, r = res["keylockd"], res["redis"]

    def col(rows: List[Result], name: str) -> List[float]:
        return [row[name] for row in rows]
    lines = [
        BEGIN,
        "## Python clients: keylock.aio against asyncio.Lock and "
        "redis-py's asyncio Lock",
        "",
        *textwrap.wrap(
            f"Written by `{meta['command']}` on {meta['date']}. One "
            f"asyncio process{meta['pin_client']} runs the same tasks and "
            f"keys against keylockd and redis-server{meta['pin_servers']}, "
            f"alternating, {meta['rounds']} rounds of {meta['duration']} s "
            "per run; a figure is the median of the rounds (min–max). "
            f"keylock.aio ({meta['mode']}): `async with locks.lock(key): "
            "pass`. redis-py: "
            "`async with r.lock(key, timeout=60): pass` (`SET NX PX`, a "
            "poll every 0.1 s while taken, a Lua compare-and-delete). A "
            "hand-off is a grant to another task than the previous "
            "holder's.", 72, break_long_words=False,
            break_on_hyphens=False),
        "",
        "| | |",
        "|---|---|",
        f"| CPU | {meta['cpu']}, {meta['cpus']} CPUs online |",
        f"| Python | {meta['python']} |",
        f"| keylockd | {meta['keylockd']} |",
        f"| Redis | {meta['redis']}, redis-py {meta['redis_py']} |",
        f"| load average | {meta['load0']} at the start, {meta['load1']} "
        "at the end (other work on this machine adds noise) |",
        "",
        f"| c={meta['c']} | keylock.aio | redis-py Lock | ratio |",
        "|---|---:|---:|---:|",
        f"| uncontended, {meta['c']} keys: lock + unlock cycles/s | "
        f"{fmt(col(k, 'cycles'))} | {fmt(col(r, 'cycles'))} | "
        f"{ratio(col(k, 'cycles'), col(r, 'cycles'))} |",
        f"| one key, {meta['c']} tasks: hand-offs/s | "
        f"{fmt(col(k, 'handoffs'))} | {fmt(col(r, 'handoffs'))} | "
        f"{ratio(col(k, 'handoffs'), col(r, 'handoffs'))} |",
        f"| one key: grants/s | {fmt(col(k, 'grants'))} | "
        f"{fmt(col(r, 'grants'))} | |",
        f"| one key: wait p50, ms | {fmt(col(k, 'p50'), 2)} | "
        f"{fmt(col(r, 'p50'), 2)} | |",
        f"| one key: wait p99, ms | {fmt(col(k, 'p99'), 2)} | "
        f"{fmt(col(r, 'p99'), 2)} | |",
        "",
        *textwrap.wrap(
            f"The seed's workload, in the same run: {meta['seed_n']} tasks "
            f"started at once on {meta['seed_keys']} keys, each `async with "
            "lock(key): await asyncio.sleep(0.001)`, the wall time until "
            "all are done; a dict of `asyncio.Lock` (the in-process lock "
            "keylock.aio replaces) against keylock.aio from a new "
            "KeyedLock (its connection opened inside the clock, as a new "
            "user runs it) and with its connection open; "
            f"{meta['seed_runs']} runs of each, interleaved, median "
            "(min–max); the ratio is of the medians, and the median of "
            "each run's ratio to the asyncio.Lock run next to it"
            f"{meta['rt']}.", 72,
            break_long_words=False, break_on_hyphens=False),
        "",
        "| seed workload | wall time, s | ratio to asyncio.Lock |",
        "|---|---:|---:|",
        f"| dict of asyncio.Lock | {fmt(seeds['asyncio'], 3)} | 1 |",
        f"| keylock.aio, new KeyedLock | {fmt(seeds['cold'], 3)} | "
        f"{ratio(seeds['cold'], seeds['asyncio'])} |",
        f"| keylock.aio, connection open | {fmt(seeds['warm'], 3)} | "
        f"{ratio(seeds['warm'], seeds['asyncio'])} |",
        "",
    ]
    unc = statistics.median(col(k, "cycles")) / statistics.median(
        col(r, "cycles"))
    ho_r = statistics.median(col(r, "handoffs"))
    ho = statistics.median(col(k, "handoffs")) / ho_r if ho_r else \
        float("inf")
    cold = statistics.median(seeds["cold"]) / statistics.median(
        seeds["asyncio"])
    warm = statistics.median(seeds["warm"]) / statistics.median(
        seeds["asyncio"])
    lines += [
        "| target (issue 25) | measured | verdict |",
        "|---|---:|---|",
        f"| seed workload ≤ 1.5× asyncio.Lock, new KeyedLock | "
        f"{cold:.2f}× | {'met' if cold <= 1.5 else 'not met'} |",
        f"| seed workload ≤ 1.5× asyncio.Lock, connection open | "
        f"{warm:.2f}× | {'met' if warm <= 1.5 else 'not met'} |",
        f"| uncontended cycles/s ≥ 10× redis-py | {unc:.2f}× | "
        f"{'met' if unc >= 10 else 'not met'} |",
        f"| contended hand-offs/s ≥ 10× redis-py | {ho:.1f}× | "
        f"{'met' if ho >= 10 else 'not met'} |",
        END,
    ]
    return "\n".join(lines) + "\n"


def write_results(section: str) -> None:
    path = HERE / "RESULTS.md"
    text = path.read_text()
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        tail = rest.split(END, 1)[1].lstrip("\n")
        text = head + section + ("\n" + tail if tail else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text)


def main(argv: List[str]) -> None:
    args = [a for a in argv[1:] if not a.startswith("--")]
    daemon = (str(pathlib.Path(args[0]) / "src" / "keylockd") if args
              else os.environ.get("KEYLOCKD", ""))
    if not daemon or not os.access(daemon, os.X_OK):
        raise SystemExit("usage: bench/python_compare.py BUILDDIR [--write]")
    if not shutil.which(os.environ.get("REDIS_SERVER", "redis-server")):
        raise SystemExit("no redis-server (apt-get install redis-server)")
    import redis
    rounds = int(os.environ.get("ROUNDS", "5"))
    duration = float(os.environ.get("DURATION", "2"))
    c = int(os.environ.get("C", "50"))
    seed_n = int(os.environ.get("SEED_N", "1000"))
    seed_keys = int(os.environ.get("SEED_KEYS", "50"))
    seed_repeat = int(os.environ.get("SEED_REPEAT", "5"))
    pin(1)()
    pinned = os.environ.get("PIN", "0") == "1"
    meta = {
        "command": f"{'PIN=1 ' if pinned else ''}{'RT=1 ' if RT else ''}"
        f"{f'SEED_REPEAT={seed_repeat} ' if seed_repeat != 5 else ''}"
        f"{'' if CHANNELS else 'CHANNELS=0 '}ROUNDS={rounds} "
        f"DURATION={duration:g} bench/python_compare.py BUILDDIR --write",
        "mode": "its tasks as channels of one connection" if CHANNELS
        else "channels=False: a connection per task",
        "seed_n": f"{seed_n:,}", "seed_keys": str(seed_keys),
        "seed_runs": str(rounds * seed_repeat),
        "rt": "; all three under SCHED_FIFO priority 5 (this process and "
        "keylockd; RT=1)" if RT else "",
        "pin_client": " (on CPU 1)" if pinned else "",
        "pin_servers": " (both on CPU 0)" if pinned else
        " (no CPU pinning)",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "rounds": str(rounds), "duration": f"{duration:g}", "c": str(c),
        "cpu": cpu_model(), "cpus": str(os.cpu_count()),
        "python": platform.python_version(),
        "redis_py": redis.__version__,
        "load0": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }
    meta["keylockd"] = subprocess.run([daemon, "--version"],
                                      capture_output=True,
                                      text=True).stdout.strip()
    rev = subprocess.run(["git", "-C", str(HERE), "rev-parse", "--short",
                          "HEAD"], capture_output=True, text=True)
    if rev.returncode == 0:
        meta["keylockd"] += f" (source {rev.stdout.strip()})"
    meta["redis"] = subprocess.run(
        [os.environ.get("REDIS_SERVER", "redis-server"), "--version"],
        capture_output=True, text=True).stdout.split(" sha=")[0].strip()
    res: Dict[str, List[Result]] = {"keylockd": [], "redis": []}
    seeds: Dict[str, List[float]] = {"asyncio": [], "cold": [], "warm": []}
    with tempfile.TemporaryDirectory() as tmp:
        kproc, kport = start_keylockd(daemon, tmp)
        rproc, rport = start_redis(tmp)
        try:
            for rnd in range(rounds):
                order = ["keylockd", "redis"]
                if rnd % 2:
                    order.reverse()
                for name in order:
                    if name == "keylockd":
                        out = asyncio.run(run_keylockd(kport, c, duration))
                    else:
                        out = asyncio.run(run_redis(rport, c, duration))
                    res[name].append(out)
                    print(f"round {rnd + 1} {name}: " + ", ".join(
                        f"{k} {v:,.2f}" for k, v in out.items()),
                        file=sys.stderr, flush=True)
                realtime([0, kproc.pid], True)
                try:
                    seed = asyncio.run(run_seed(kport, seed_n, seed_keys,
                                                seed_repeat, rnd))
                finally:
                    realtime([0, kproc.pid], False)
                for name, walls in seed.items():
                    seeds[name] += walls
                print(f"round {rnd + 1} seed: " + ", ".join(
                    f"{k} {statistics.median(v):.3f} s"
                    for k, v in seed.items()), file=sys.stderr, flush=True)
        finally:
            for proc in (kproc, rproc):
                proc.terminate()
                proc.wait()
    meta["load1"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    section = report(res, seeds, meta)
    print(section, end="")
    if "--write" in argv:
        write_results(section)


if __name__ == "__main__":
    main(sys.argv)
