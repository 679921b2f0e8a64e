# keylock, the Python client of keylockd. SPDX-License-Identifier: MIT
"""Replies a real keylockd never sends: every one is a ProtocolError (a
keylock.Error), with channels and without, and the connection it came
on is dropped."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, Iterator, Optional

import pytest

import keylock
import keylock.aio
from conftest import FakeServer

BIG = 1 << 63


def replying(reply: bytes, words: tuple = ("LOCK", "STATS", "INFO")
             ) -> Callable[[bytes, str], Optional[bytes]]:
    """Answers ``words`` with ``reply`` (its channel's prefix first, unless
    the reply names a channel itself), the rest as a daemon would."""
    def answer(prefix: bytes, line: str) -> Optional[bytes]:
        word = line.split(" ")[0]
        if word in words:
            return (reply if reply.startswith((b"@", b"\x00"))
                    else prefix + reply)
        if word == "UNLOCK":
            return prefix + b"OK 1\n"
        if word == "CANCEL":
            return prefix + b"OK 0\n"
        return prefix + b"ERR SYNTAX unknown command\n"
    return answer


@pytest.fixture
def fake() -> Iterator[Callable[[bytes], FakeServer]]:
    made = []

    def make(reply: bytes) -> FakeServer:
        f = FakeServer(replying(reply))
        made.append(f)
        return f
    yield make
    for f in made:
        f.close()


def sync_lock(addr: str) -> int:
    with keylock.KeyedLock(addr, connect_timeout=5) as locks:
        with locks.hold("k", timeout=5) as h:
            return h.token


def aio_lock(addr: str) -> int:
    async def main() -> int:
        async with keylock.aio.KeyedLock(addr, connect_timeout=5) as locks:
            async with locks.lock("k", timeout=5) as h:
                return h.token
    return asyncio.run(main())


FACES = {"sync": sync_lock, "aio": aio_lock}


@pytest.mark.parametrize("face", FACES)
@pytest.mark.parametrize("reply", [
    "OK \u00b2\n",                     # a digit to str.isdigit(), not int()
    "OK \u0663\n",                     # an Arabic-Indic 3: int() takes it
    "OK 99999999999999999999999\n",
    f"OK {BIG}\n",                     # 2^63: one past the largest
    "OK -5\n", "OK +5\n", "OK 5 \n", "OK\n", "OK notanumber\n",
])
def test_lock_reply_without_a_token_is_a_protocol_error(
        fake: Callable[[bytes], FakeServer], face: str, reply: str) -> None:
    f = fake(reply.encode())
    with pytest.raises(keylock.ProtocolError) as e:
        FACES[face](f.addr)
    assert "LOCK answered" in str(e.value)


@pytest.mark.parametrize("face", FACES)
def test_the_largest_token_is_taken(fake: Callable[[bytes], FakeServer],
                                    face: str) -> None:
    f = fake(f"OK {BIG - 1}\n".encode())
    assert FACES[face](f.addr) == BIG - 1


@pytest.mark.parametrize("face", FACES)
@pytest.mark.parametrize("reply", [
    b"\x00\xff\xfegarbage here\n",      # no channel prefix: channel 0
    b"@77 OK 5\n",                      # a channel nobody uses
    b"@x OK 5\n",                       # a malformed channel
    b"OK " + b"7" * (2 << 20) + b"\n",  # over the 1 MiB of a reply line
])
def test_a_broken_stream_is_a_protocol_error_and_drops_the_link(
        fake: Callable[[bytes], FakeServer], face: str, reply: bytes
        ) -> None:
    f = fake(reply)
    with pytest.raises(keylock.ProtocolError):
        FACES[face](f.addr)
    deadline = time.monotonic() + 5
    while f.closed < f.accepted and time.monotonic() < deadline:
        time.sleep(0.01)
    assert f.closed == f.accepted       # the link was dropped


@pytest.mark.parametrize("reply", [b"OK {not json\n", b"OK [1, 2]\n",
                                   b"OK 5\n", b"OK\n", b"PONG\n"])
def test_stats_and_info_that_are_no_json_object(
        fake: Callable[[bytes], FakeServer], reply: bytes) -> None:
    f = fake(reply)
    with keylock.KeyedLock(f.addr, connect_timeout=5) as locks:
        with pytest.raises(keylock.ProtocolError):
            locks.stats()
        with pytest.raises(keylock.ProtocolError):
            locks.info("k")

    async def main() -> None:
        async with keylock.aio.KeyedLock(f.addr, connect_timeout=5) as al:
            with pytest.raises(keylock.ProtocolError):
                await al.stats()
            with pytest.raises(keylock.ProtocolError):
                await al.info("k")
    asyncio.run(main())
    time.sleep(0.1)
    assert f.closed == f.accepted


@pytest.mark.parametrize("reply", [b"OK {}\n", b'OK {"keys": "3"}\n',
                                   b'OK {"keys": -1}\n'])
def test_key_count_without_a_count(fake: Callable[[bytes], FakeServer],
                                   reply: bytes) -> None:
    f = fake(reply)
    with keylock.KeyedLock(f.addr, connect_timeout=5) as locks:
        with pytest.raises(keylock.ProtocolError):
            locks.key_count()

    async def main() -> None:
        async with keylock.aio.KeyedLock(f.addr, connect_timeout=5) as al:
            with pytest.raises(keylock.ProtocolError):
                await al.key_count()
    asyncio.run(main())


def test_an_error_reply_is_no_protocol_error(
        fake: Callable[[bytes], FakeServer]) -> None:
    """An ERR the package does not know is a plain keylock.Error, and the
    connection stays."""
    f = fake(b"ERR WHATEVER some text\n")
    with keylock.KeyedLock(f.addr, connect_timeout=5) as locks:
        for _ in range(2):
            with pytest.raises(keylock.Error) as e:
                locks.stats()
            assert type(e.value) is keylock.Error
            assert e.value.code == "WHATEVER"
        assert f.accepted == 1 and f.closed == 0
