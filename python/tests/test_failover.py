# keylock, the Python client of keylockd. SPDX-License-Identifier: MIT
"""Server lists: ``server="a,b"`` and ``$KEYLOCK_SERVER`` with commas.

The servers are tried in order and the first that answers is used; when
none does, ConnectionFailed names each and why; a malformed list is a
ValueError before anything is tried; a wrong secret is not taken to the
next server; a drop while a lock is held is LockLost, with no reconnect
to the next server of the list.
"""

from __future__ import annotations

import asyncio
import pathlib
import socket
from typing import Iterator, Tuple

import pytest

import keylock
import keylock.aio
from conftest import Daemon


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
