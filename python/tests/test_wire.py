# keylock, the Python client of keylockd. SPDX-License-Identifier: MIT
"""The pure parts: key encoding, server strings, request lines, replies."""

from __future__ import annotations

import random
import re

import pytest

import keylock
from keylock import _wire
from keylock._wire import Address, lock_line, parse_reply, parse_servers

KEY_RULES = re.compile(r"[^\x00-\x20\x7f=]{1,250}")


def test_plain_keys_are_sent_as_they_are() -> None:
    assert keylock.encode_key("balance:42") == "balance:42"
    assert keylock.encode_key("file:/srv/a%b") == "file:/srv/a%b"
    assert keylock.encode_key("é") == "é"


@pytest.mark.parametrize("bad", ["", "a b", "a=b", "tab\there", "nl\n",
                                 "del\x7f", "x" * 251, "é" * 126,
                                 "\ud800"])
def test_bad_plain_keys_are_refused_locally(bad: str) -> None:
    with pytest.raises(keylock.BadKey) as e:
        keylock.encode_key(bad)
    assert isinstance(e.value, ValueError) and e.value.code == "BADKEY"


def test_tuple_encoding_examples() -> None:
    enc = keylock.encode_key
    assert enc(("balance", 42)) == "balance:42"
    assert enc(("user", "42")) == "user:%342"
    assert enc(("n", -7, "-7")) == "n:-7:%2D7"
    assert enc(("a b", "x=y", "p%q", "c:d")) == "a%20b:x%3Dy:p%25q:c%3Ad"
    assert enc(("é", "\x00")) == "é:%00"
    assert enc(("a", "")) == "a:"
    assert keylock.decode_key("balance:42") == ("balance", 42)
    assert keylock.decode_key("user:%342") == ("user", "42")


def test_tuple_encoding_is_reversible_and_injective() -> None:
    rng = random.Random(12)
    alphabet = ["a", "Z", "0", "9", "-", ":", "%", "=", " ", "\t", "\x7f",
                "é", "€", "\U0001f512", "\ud800", "\x00", "_", "/"]
    seen = {}
    for _ in range(5000):
        parts = []
        for _ in range(rng.randint(1, 4)):
            if rng.random() < 0.3:
                parts.append(rng.choice([0, 1, -1, 42, 10**18, -10**9]))
            else:
                parts.append("".join(rng.choice(alphabet)
                                     for _ in range(rng.randint(0, 5))))
        key = tuple(parts)
        try:
            wire = keylock.encode_key(key)
        except keylock.BadKey:
            assert key == ("",) or len(str(key)) > 40
            continue
        assert KEY_RULES.fullmatch(wire), (key, wire)
        assert len(wire.encode()) <= 250
        assert keylock.decode_key(wire) == key, (key, wire)
        assert seen.setdefault(wire, key) == key, "two tuples, one key"


def test_tuple_key_type_errors() -> None:
    with pytest.raises(TypeError):
        keylock.encode_key(("a", True))
    with pytest.raises(TypeError):
        keylock.encode_key(("a", 1.5))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        keylock.encode_key(["a"])  # type: ignore[arg-type]
    with pytest.raises(keylock.BadKey):
        keylock.encode_key(())
    with pytest.raises(keylock.BadKey):
        keylock.encode_key(("x" * 300,))
    with pytest.raises(ValueError):
        keylock.decode_key("a:007")
    with pytest.raises(ValueError):
        keylock.decode_key("a:-0")


def test_server_strings() -> None:
    def one(s: str) -> Address:
        [a] = parse_servers(s, {})
        return a
    assert one("h:1") == Address("h:1", "h", 1, False, False)
    assert one("h") == Address("h", "h", 7711, False, False)
    assert one("[::1]:9") == Address("[::1]:9", "::1", 9, False, False)
    assert one("[::1]") == Address("[::1]", "::1", 7711, False, False)
    assert one("::1") == Address("::1", "::1", 7711, False, False)
    assert one("/run/k.sock") == Address("/run/k.sock", "/run/k.sock", 0,
                                         False, True)
    assert one("./k.sock").unix
    assert one("tls://h") == Address("tls://h", "h", 7712, True, False)
    assert one("tls://[::1]:5").port == 5
    assert parse_servers(None, {}) == [
        Address("127.0.0.1:7711", "127.0.0.1", 7711, False, False)]
    assert parse_servers("", {"KEYLOCK_SERVER": "a:2"})[0].port == 2
    assert [a.text for a in parse_servers(" a:1 , /s ,tls://b", {})] == [
        "a:1", "/s", "tls://b"]
    for bad in ["h:0", "h:65536", "h:x", "[::1", "[::1]x", ":5", "a,,b",
                "tls:///s", "h:+5"]:
        with pytest.raises(ValueError):
            parse_servers(bad, {})


def test_lock_lines() -> None:
    assert lock_line(["a"], None, None, False, None, None) == "LOCK a"
    assert lock_line(["a", "b"], 0.1, 2.5, True, None, 0) == \
        "LOCK a b timeout=100 ttl=2500 mode=shared max_waiters=0"
    assert lock_line(["a"], 0, None, False, 3, None) == \
        "LOCK a timeout=0 limit=3"
    assert lock_line(["a"], 0.0001, None, False, None, None) == \
        "LOCK a timeout=1"
    for kw in [dict(ttl=0), dict(timeout=-1), dict(limit=0),
               dict(shared=True, limit=2), dict(max_waiters=-1),
               dict(timeout=float("nan")), dict(limit=True)]:
        args = dict(timeout=None, ttl=None, shared=False, limit=None,
                    max_waiters=None)
        args.update(kw)
        with pytest.raises(ValueError):
            lock_line(["a"], **args)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        lock_line(["a"], "1", None, False, None, None)  # type: ignore


def test_replies_and_the_error_tree() -> None:
    assert parse_reply("OK") == ""
    assert parse_reply("OK 17") == "17"
    with pytest.raises(keylock.Timeout) as e:
        parse_reply("ERR TIMEOUT k not granted in 100 ms: held by client 3")
    assert isinstance(e.value, TimeoutError)
    assert e.value.code == "TIMEOUT"
    assert e.value.text == "k not granted in 100 ms: held by client 3"
    assert str(e.value) == \
        "TIMEOUT k not granted in 100 ms: held by client 3"
    codes = {"LOCKED": keylock.Locked, "BUSY": keylock.Busy,
             "DEADLOCK": keylock.Deadlock, "HELD": keylock.Held,
             "NOTHELD": keylock.NotHeld, "CONFLICT": keylock.Conflict,
             "LIMIT": keylock.Limit, "AUTH": keylock.AuthError,
             "SHUTDOWN": keylock.Shutdown, "BACKEND": keylock.Backend,
             "CANCELLED": keylock.Cancelled, "BADKEY": keylock.BadKey,
             "SYNTAX": keylock.BadRequest, "TOOLONG": keylock.BadRequest}
    for code, cls in codes.items():
        with pytest.raises(cls) as err:
            parse_reply(f"ERR {code} some text")
        assert err.value.code == code and isinstance(err.value,
                                                     keylock.Error)
    with pytest.raises(keylock.Error) as err:
        parse_reply("ERR NEWCODE from a later server")
    assert type(err.value) is keylock.Error and err.value.code == "NEWCODE"
    for junk in ["", "OKAY", "ERR", "ERR ", "hello"]:
        with pytest.raises(keylock.ProtocolError):
            parse_reply(junk)
    assert issubclass(keylock.LockLost, keylock.Error)
    assert issubclass(keylock.ConnectionFailed, ConnectionError)


def test_default_name_fits_a_name() -> None:
    name = _wire.default_name("python", "a very=long.host.example", 123)
    assert name == "python:a_very_long:123"
    assert _wire.check_name(_wire.default_name("p" * 80, "h" * 80, 2**22))
