# keylock, the Python client of keylockd. SPDX-License-Identifier: MIT
"""Both faces against the real daemon: grants, options, errors, the
connection per task, the pool, the observability helpers."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Awaitable, List, TypeVar

import pytest

import keylock
import keylock.aio
from conftest import Daemon, channels_used

T = TypeVar("T")


def run(coro: Awaitable[T]) -> T:
    async def main() -> T:
        return await coro
    return asyncio.run(main())


def test_sync_hold_info_and_tokens(server: Daemon) -> None:
    with keylock.KeyedLock(server.addr, name="sync-test") as locks:
        with locks.hold(("balance", 42)) as h:
            assert h.keys == (("balance", 42),)
            assert not h.lost.is_set() and h.lost_reason is None
            info = locks.info(("balance", 42))
            assert info["key"] == "balance:42"
            [holder] = info["holders"]
            assert holder["token"] == h.token
            assert holder["name"] == "sync-test"
            assert locks.key_count() == 1
        with locks.hold("balance:42") as h2:
            assert h2.token > h.token
        assert locks.key_count() == 0
        assert locks.stats()["keys"] == 0


def test_aio_lock_info_and_tokens(server: Daemon) -> None:
    async def main() -> None:
        async with keylock.aio.KeyedLock(server.addr) as locks:
            tokens = []
            for _ in range(5):
                async with locks.lock(("acct", 1), ("acct", 2)) as h:
                    assert h.keys == (("acct", 1), ("acct", 2))
                    info = await locks.info(("acct", 2))
                    assert info["holders"][0]["token"] == h.token
                    assert (await locks.stats())["held"] == 2
                    tokens.append(h.token)
            assert tokens == sorted(set(tokens))
            assert await locks.key_count() == 0
    run(main())


def test_multi_key_is_one_atomic_grant(server: Daemon) -> None:
    """Two tasks asking for the same keys in opposite orders: no deadlock,
    and never does one hold a key while the other holds the other."""
    async def main() -> None:
        locks = keylock.aio.KeyedLock(server.addr)
        inside: List[str] = []

        async def worker(keys: List[str]) -> None:
            for _ in range(50):
                async with locks.lock(*keys):
                    inside.append("in")
                    assert inside.count("in") == 1
                    await asyncio.sleep(0)
                    inside.remove("in")
        await asyncio.wait_for(asyncio.gather(worker(["x", "y"]),
                                              worker(["y", "x"])), 20)
        await locks.aclose()
    run(main())


def test_reentry_raises_held_at_once(server: Daemon) -> None:
    async def main() -> None:
        locks = keylock.aio.KeyedLock(server.addr)
        async with locks.lock("re"):
            t0 = time.monotonic()
            with pytest.raises(keylock.Held) as e:
                async with locks.lock("other", "re"):
                    pass
            assert time.monotonic() - t0 < 1.0
            assert "re" in str(e.value)
            # the failed request changed nothing: the outer lock stays
            assert (await locks.info("re"))["holders"]
            assert (await locks.info("other"))["holders"] == []
        await locks.aclose()
    run(main())

    locks = keylock.KeyedLock(server.addr)
    with locks.hold("re"):
        t0 = time.monotonic()
        with pytest.raises(keylock.Held):
            with locks.hold("re", timeout=5):
                pass
        assert time.monotonic() - t0 < 1.0
    locks.close()


def test_nested_locks_of_a_task_share_its_connection(server: Daemon) -> None:
    async def main() -> None:
        locks = keylock.aio.KeyedLock(server.addr)
        async with locks.lock("n1"):
            async with locks.lock("n2"):
                a = (await locks.info("n1"))["holders"][0]["client"]
                b = (await locks.info("n2"))["holders"][0]["client"]
                assert a == b
        await locks.aclose()
    run(main())


def test_two_task_cycle_raises_deadlock(server: Daemon) -> None:
    async def main() -> None:
        locks = keylock.aio.KeyedLock(server.addr)
        a_holds, b_holds = asyncio.Event(), asyncio.Event()

        async def a() -> str:
            async with locks.lock("cy:x"):
                a_holds.set()
                await b_holds.wait()
                async with locks.lock("cy:y", timeout=10):
                    return "a got y"

        async def b() -> str:
            async with locks.lock("cy:y"):
                b_holds.set()
                await a_holds.wait()
                # wait until a's request for y is queued behind us
                while not (await locks.info("cy:y"))["waiters"]:
                    await asyncio.sleep(0.01)
                t0 = time.monotonic()
                with pytest.raises(keylock.Deadlock) as e:
                    async with locks.lock("cy:x", timeout=10):
                        pass
                assert time.monotonic() - t0 < 1.0
                return str(e.value)
        got_a, got_b = await asyncio.wait_for(asyncio.gather(a(), b()), 20)
        assert got_a == "a got y"
        assert got_b.startswith("DEADLOCK")
        await locks.aclose()
    run(main())


def test_waiting_tasks_have_owners_of_their_own(server: Daemon,
                                               mode: str) -> None:
    """Ten tasks wait for one key: each is an owner of its own, a
    connection of its own (without channels; at most max_idle kept
    after) or a channel of its own on one connection."""
    chans = channels_used(mode, server)

    async def main() -> None:
        locks = keylock.aio.KeyedLock(server.addr, max_idle=3)
        async with locks.lock("pool"):
            waiters = [asyncio.ensure_future(_hold(locks, "pool"))
                       for _ in range(10)]
            while len((await locks.info("pool"))["waiters"]) < 10:
                await asyncio.sleep(0.01)
            info = await locks.info("pool")
            owners = {(w["client"], w.get("channel", 0))
                      for w in (*info["waiters"], *info["holders"])}
            assert len(owners) == 11
            clients = {client for client, _ in owners}
            assert len(clients) == (1 if chans else 11)
            if chans:
                assert (await locks.stats())["channels"] >= 11
        await asyncio.gather(*waiters)
        st = await locks.stats()
        if chans:
            assert locks.idle == 1      # the one connection
            assert st["clients"] - 1 <= 1
        else:
            assert locks.idle == 3       # the pool is bounded
            assert st["clients"] - 1 <= 3 + 1  # others: closed (closing)
        await locks.aclose()
    run(main())


async def _hold(locks: keylock.aio.KeyedLock, key: str) -> None:
    async with locks.lock(key):
        await asyncio.sleep(0.001)


def test_threads_have_owners_of_their_own(server: Daemon,
                                          mode: str) -> None:
    locks = keylock.KeyedLock(server.addr)
    barrier = threading.Barrier(4)
    seen: List[Any] = []

    def worker(i: int) -> None:
        with locks.hold(f"th:{i}"):
            barrier.wait(10)
            holder = locks.info(f"th:{i}")["holders"][0]
            seen.append((holder["client"], holder.get("channel", 0)))
            barrier.wait(10)
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert len(set(seen)) == 4
    clients = {client for client, _ in seen}
    assert len(clients) == (1 if channels_used(mode, server) else 4)
    locks.close()


def test_timeout_locked_and_the_holders_name(server: Daemon) -> None:
    async def main() -> None:
        holder = keylock.aio.KeyedLock(server.addr, name="the-holder")
        other = keylock.aio.KeyedLock(server.addr)
        async with holder.lock("to"):
            t0 = time.monotonic()
            with pytest.raises(keylock.Timeout) as e:
                async with other.lock("to", timeout=0.3):
                    pass
            elapsed = time.monotonic() - t0
            assert 0.29 <= elapsed < 2.0
            assert isinstance(e.value, TimeoutError)
            assert "the-holder" in str(e.value)
            with pytest.raises(keylock.Locked) as e2:
                async with other.lock("to", timeout=0):
                    pass
            assert "the-holder" in str(e2.value)
            with pytest.raises(keylock.Busy):
                async with other.lock("to", max_waiters=0):
                    pass
            with pytest.raises(keylock.Conflict):
                async with other.lock("to", limit=2, timeout=0):
                    pass
        await holder.aclose()
        await other.aclose()
    run(main())


def test_shared_and_semaphore(server: Daemon) -> None:
    async def main() -> None:
        locks = keylock.aio.KeyedLock(server.addr)
        peak = 0
        now = 0

        async def reader(key: str, **kw: Any) -> None:
            nonlocal peak, now
            async with locks.lock(key, **kw):
                now += 1
                peak = max(peak, now)
                await asyncio.sleep(0.05)
                now -= 1
        await asyncio.gather(*(reader("sh", shared=True) for _ in range(5)))
        assert peak == 5
        peak = 0
        await asyncio.gather(*(reader("sem", limit=2) for _ in range(6)))
        assert peak == 2
        await locks.aclose()
    run(main())


def test_bad_arguments_send_nothing(server: Daemon) -> None:
    locks = keylock.aio.KeyedLock(server.addr)
    with pytest.raises(keylock.BadKey):
        locks.lock("a b")
    with pytest.raises(TypeError):
        locks.lock()
    with pytest.raises(ValueError):
        locks.lock("k", ttl=0)
    with pytest.raises(ValueError):
        locks.lock("k", refresh=True)
    with pytest.raises(ValueError):
        keylock.KeyedLock("host:99999")
    assert locks.idle == 0


def test_server_strings_unix_list_and_environment(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    sock = tmp_path / "k.sock"
    d = Daemon(tmp_path, "--unix", str(sock))
    try:
        async def main(server: Any) -> int:
            async with keylock.aio.KeyedLock(server) as locks:
                async with locks.lock("where") as h:
                    return h.token
        assert run(main(str(sock))) > 0
        # a dead server first: the list goes on to the next one
        dead = socket_free_port()
        assert run(main(f"127.0.0.1:{dead},{d.addr}")) > 0
        with pytest.raises(keylock.ConnectionFailed) as e:
            run(main(f"127.0.0.1:{dead},{tmp_path}/none.sock"))
        assert str(dead) in str(e.value) and "none.sock" in str(e.value)
        monkeypatch.setenv("KEYLOCK_SERVER", d.addr)
        assert run(main(None)) > 0
    finally:
        d.stop()


def socket_free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_auth(tmp_path: Any) -> None:
    secret = tmp_path / "secret"
    secret.write_text("s3cret\n")
    secret.chmod(0o600)  # a private secret, or the daemon refuses it
    d = Daemon(tmp_path, "--auth-file", str(secret))
    try:
        with keylock.KeyedLock(d.addr, auth_file=str(secret)) as locks:
            with locks.hold("auth") as h:
                assert h.token > 0
        with keylock.KeyedLock(d.addr, secret="wrong") as locks:
            with pytest.raises(keylock.AuthError):
                with locks.hold("auth"):
                    pass
        with keylock.KeyedLock(d.addr) as locks:
            with pytest.raises(keylock.AuthError):
                locks.stats()
    finally:
        d.stop()


def test_ttl_without_refresh_is_lost_loudly(server: Daemon) -> None:
    async def main() -> None:
        locks = keylock.aio.KeyedLock(server.addr)
        with pytest.raises(keylock.LockLost) as e:
            async with locks.lock("ttl", ttl=0.2) as h:
                await asyncio.wait_for(h.lost.wait(), 2)
                assert "ttl" in (h.lost_reason or "")
        assert "ttl" in str(e.value)
        await locks.aclose()
    run(main())

    locks = keylock.KeyedLock(server.addr)
    with pytest.raises(keylock.LockLost):
        with locks.hold("ttl", ttl=0.1):
            time.sleep(0.3)
    locks.close()


def test_ttl_with_refresh_keeps_the_lease(server: Daemon) -> None:
    async def main() -> None:
        locks = keylock.aio.KeyedLock(server.addr)
        other = keylock.aio.KeyedLock(server.addr)
        async with locks.lock("lease", ttl=0.3, refresh=True) as h:
            await asyncio.sleep(1.0)        # more than three ttls
            assert not h.lost.is_set()
            with pytest.raises(keylock.Locked):
                async with other.lock("lease", timeout=0):
                    pass
        await locks.aclose()
        await other.aclose()
    run(main())

    with keylock.KeyedLock(server.addr, refresh=True) as locks:
        with locks.hold("lease", ttl=0.2) as h:
            time.sleep(0.7)
            assert not h.lost.is_set()
            assert locks.info("lease")["holders"][0]["token"] == h.token


def test_a_failed_refresh_is_a_lost_lock(server: Daemon) -> None:
    """Another connection cannot refresh a key it does not hold; here the
    lease runs out while a nested wait holds the refresh back."""
    async def main() -> None:
        locks = keylock.aio.KeyedLock(server.addr)
        other = keylock.aio.KeyedLock(server.addr)
        async with other.lock("blocker"):
            with pytest.raises(keylock.LockLost):
                async with locks.lock("leased", ttl=0.3, refresh=True) as h:
                    with pytest.raises(keylock.Timeout):
                        # REFRESH queues behind this LOCK on the task's
                        # connection and comes too late
                        async with locks.lock("blocker", timeout=0.6):
                            pass
                    assert h.lost.is_set()
                    assert "REFRESH" in (h.lost_reason or "")
        await locks.aclose()
        await other.aclose()
    run(main())


def test_tls(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil
    import ssl
    import subprocess
    if not shutil.which("openssl"):
        pytest.skip("no openssl")

    def sh(*args: str) -> None:
        subprocess.run(args, check=True, capture_output=True, cwd=tmp_path)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
          "-nodes"]
    # extensions that Python 3.13's strict verification wants
    sh("openssl", "req", "-x509", *ec, "-keyout", "ca.key", "-out",
       "ca.pem", "-days", "2", "-subj", "/CN=testca", "-addext",
       "basicConstraints=critical,CA:TRUE", "-addext",
       "keyUsage=critical,keyCertSign,cRLSign")
    sh("openssl", "req", *ec, "-keyout", "srv.key", "-out", "srv.csr",
       "-subj", "/CN=localhost")
    (tmp_path / "san").write_text(
        "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature\n"
        "extendedKeyUsage=serverAuth\n"
        "authorityKeyIdentifier=keyid\nsubjectKeyIdentifier=hash\n")
    sh("openssl", "x509", "-req", "-in", "srv.csr", "-CA", "ca.pem",
       "-CAkey", "ca.key", "-CAcreateserial", "-out", "srv.pem", "-days",
       "2", "-extfile", "san")
    d = Daemon(tmp_path, "--tls-port", "0", "--tls-cert",
               str(tmp_path / "srv.pem"), "--tls-key",
               str(tmp_path / "srv.key"))
    try:
        assert d.tls_port
        ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
        with keylock.KeyedLock(f"tls://localhost:{d.tls_port}",
                               ssl_context=ctx) as locks:
            with locks.hold("tls:k") as h:
                assert d.info("tls:k")["holders"][0]["token"] == h.token
        # the default context: $KEYLOCK_TLS_CA, as for libkeylock
        monkeypatch.setenv("KEYLOCK_TLS_CA", str(tmp_path / "ca.pem"))
        with keylock.KeyedLock(f"tls://localhost:{d.tls_port}") as locks:
            assert locks.stats()["keys"] == 0
        monkeypatch.delenv("KEYLOCK_TLS_CA")
        # a server the system's CAs do not vouch for: refused
        with keylock.KeyedLock(f"tls://localhost:{d.tls_port}") as locks:
            with pytest.raises(keylock.ConnectionFailed):
                locks.stats()
    finally:
        d.stop()
