# keylock, the Python client of keylockd. SPDX-License-Identifier: MIT
"""fork: a child never uses its parent's sockets, and an inherited handle
releases nothing in the child."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from typing import Any, Callable, Dict

import keylock
import keylock.aio
from conftest import Daemon, clean_env


def _child(fn: Callable[[], Dict[str, Any]]) -> Dict[str, Any]:
    """Runs ``fn`` in a forked child; its JSON-able result."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        code = 0
        try:
            out = fn()
        except BaseException as e:      # report, never return to pytest
            out = {"error": repr(e)}
            code = 1
        os.write(w, json.dumps(out).encode())
        os._exit(code)
    os.close(w)
    with os.fdopen(r) as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    assert data, f"child died: status {status}"
    result: Dict[str, Any] = json.loads(data)
    assert os.WEXITSTATUS(status) == 0, result
    return result


def test_forked_child_of_the_sync_face(server: Daemon) -> None:
    locks = keylock.KeyedLock(server.addr)
    with locks.hold("fork:parent") as h:
        parent_client = locks.info("fork:parent")["holders"][0]["client"]

        def child() -> Dict[str, Any]:
            assert h.inherited
            with locks.hold("fork:child") as mine:
                info = locks.info("fork:child")
                assert mine.token > h.token
            return {"client": info["holders"][0]["client"],
                    "parent_still": locks.info("fork:parent")["holders"]}
        out = _child(child)
        assert out["client"] != parent_client
        assert [x["client"] for x in out["parent_still"]] == [parent_client]
        # and after the child is gone, the parent still holds it
        assert locks.info("fork:parent")["holders"][0]["token"] == h.token
        assert not h.lost.is_set()
    locks.close()


def test_inherited_block_exit_in_child_releases_nothing(server: Daemon
                                                        ) -> None:
    locks = keylock.KeyedLock(server.addr)
    hold = locks.hold("fork:inherited")
    h = hold.__enter__()

    def child() -> Dict[str, Any]:
        hold.__exit__(None, None, None)
        return {"ok": True}
    assert _child(child) == {"ok": True}
    assert locks.info("fork:inherited")["holders"][0]["token"] == h.token
    hold.__exit__(None, None, None)
    assert locks.info("fork:inherited")["holders"] == []
    locks.close()


def test_forked_child_of_the_aio_face(server: Daemon) -> None:
    locks = keylock.aio.KeyedLock(server.addr)

    async def take(key: str) -> Dict[str, Any]:
        async with locks.lock(key):
            return (await locks.info(key))["holders"][0]
    parent = asyncio.run(take("fork:aio"))

    def child() -> Dict[str, Any]:
        return asyncio.run(take("fork:aio"))
    out = _child(child)
    assert out["client"] != parent["client"]
    assert out["token"] > parent["token"]


def test_parent_death_releases_although_the_child_lives(server: Daemon
                                                        ) -> None:
    """The child closed its copies of the sockets at fork: when the parent
    dies, the server sees the connection end and releases at once."""
    script = textwrap.dedent(f"""
        import os, sys, time, keylock
        locks = keylock.KeyedLock({server.addr!r})
        with locks.hold("fork:orphan"):
            pid = os.fork()
            if pid == 0:
                time.sleep(30)
                os._exit(0)
            print(pid, flush=True)
            time.sleep(30)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script],
                            stdout=subprocess.PIPE, env=clean_env())
    assert proc.stdout is not None
    child = int(proc.stdout.readline())
    try:
        assert server.info("fork:orphan")["holders"]
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 2
        while server.info("fork:orphan")["holders"]:
            assert time.monotonic() < deadline, "the child kept the lock"
            time.sleep(0.01)
        os.kill(child, 0)           # the child is still alive
    finally:
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            pass
