# keylock, the Python client of keylockd. SPDX-License-Identifier: MIT
"""Pure protocol helpers: keys, server strings, request lines, replies.

Nothing here touches a socket or a clock; keylockd-protocol(7) is the
contract (its KEYS, OPTIONS, REPLIES and COMMANDS sections).
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
from typing import (Any, Dict, Iterable, List, Mapping, NamedTuple, Optional,
                    Sequence, Tuple, Union)

from ._errors import BadKey, ProtocolError, error_from_reply

__all__ = ["Key", "KeyPart", "encode_key", "decode_key", "Address",
           "parse_servers", "lock_line", "parse_reply", "seconds_to_ms"]

#: One part of a tuple key.
KeyPart = Union[str, int]
#: What a lock call accepts as one key: a protocol key, or a tuple of parts.
Key = Union[str, Tuple[KeyPart, ...]]

KEY_MAX = 250            # bytes, keylockd-protocol(7), KEYS
NAME_MAX = 64            # bytes of a NAME label
SERVER_DEFAULT = "127.0.0.1:7711"
PORT_DEFAULT = 7711
TLS_PORT_DEFAULT = 7712
TLS_PREFIX = "tls://"

# Bytes a key cannot hold: ASCII controls, space, DEL and '='.
_BAD_KEY_CHAR = re.compile(r"[\x00-\x20\x7f=]")
# What a tuple part escapes: the above, plus '%' (the escape) and ':' (the
# separator). Lone surrogates are escaped too (below).
_ESCAPE_CHAR = re.compile(r"[\x00-\x20\x7f=%:\ud800-\udfff]")
_INT_PART = re.compile(r"-?[0-9]+")
_CANONICAL_INT = re.compile(r"0|-?[1-9][0-9]*")
_PERCENT = re.compile(r"%([0-9A-Fa-f]{2})")


def _check_key(key: str) -> str:
    if not key:
        raise BadKey("an empty key")
    if _BAD_KEY_CHAR.search(key):
        raise BadKey(f"{key!r}: a key holds no control byte, space, DEL "
                     "or '='")
    if key.isascii():
        size = len(key)
    else:
        try:
            size = len(key.encode("utf-8"))
        except UnicodeEncodeError:
            raise BadKey(f"{key!r}: not valid UTF-8") from None
    if size > KEY_MAX:
        raise BadKey(f"{key[:40]!r}...: {size} bytes, over {KEY_MAX}")
    return key


def _escape_match(m: "re.Match[str]") -> str:
    raw = m.group(0).encode("utf-8", "surrogatepass")
    return "".join(f"%{b:02X}" for b in raw)


def _encode_part(part: KeyPart) -> str:
    if isinstance(part, bool) or not isinstance(part, (str, int)):
        raise TypeError(f"a tuple key holds str and int parts, not "
                        f"{type(part).__name__} ({part!r})")
    if isinstance(part, int):
        return str(part)
    text = _ESCAPE_CHAR.sub(_escape_match, part)
    if _INT_PART.fullmatch(text):
        # A string of digits must not read back as an int: escape its
        # first character ("42" -> "%342", "-1" -> "%2D1").
        text = f"%{ord(text[0]):02X}{text[1:]}"
    return text


def encode_key(key: Key) -> str:
    """The protocol key for ``key``.

    A ``str`` is the protocol key itself and is only checked (1 to 250
    bytes of UTF-8, no control byte, space, DEL or ``=``). A tuple of
    ``str`` and ``int`` parts is joined with ``:``; in a ``str`` part every
    byte a key cannot hold, and ``%`` and ``:``, becomes ``%XX`` (upper-case
    hex of its UTF-8 bytes), and a ``str`` part that reads as an integer
    gets its first character escaped, so that ``("user", 42)`` is
    ``user:42`` and ``("user", "42")`` is ``user:%342``: two keys, as they
    are two keys of a ``dict``. :func:`decode_key` reverses it.

    Raises :class:`keylock.BadKey` (a ``ValueError``) for a key the server
    would refuse, ``TypeError`` for parts that are not ``str`` or ``int``
    (``bool`` included).
    """
    if isinstance(key, str):
        return _check_key(key)
    if not isinstance(key, tuple):
        raise TypeError(f"a key is a str or a tuple, not "
                        f"{type(key).__name__}")
    if not key:
        raise BadKey("an empty tuple is no key")
    return _check_key(":".join([_encode_part(p) for p in key]))


def decode_key(key: str) -> Tuple[KeyPart, ...]:
    """The tuple that :func:`encode_key` turned into ``key``.

    ``decode_key(encode_key(t)) == t`` for every tuple ``encode_key``
    accepts; a plain key decodes to a tuple of its ``:``-separated parts
    (``"balance:42"`` -> ``("balance", 42)``). A part of unescaped digits
    that ``encode_key`` cannot have written (``007``, ``-0``) is a
    ``ValueError``.
    """
    parts: List[KeyPart] = []
    for text in key.split(":"):
        if _INT_PART.fullmatch(text):
            if not _CANONICAL_INT.fullmatch(text):
                raise ValueError(f"{key!r}: {text!r} is not an encoded "
                                 "part")
            parts.append(int(text))
            continue
        raw = bytearray()
        pos = 0
        for m in _PERCENT.finditer(text):
            raw += text[pos:m.start()].encode("utf-8", "surrogatepass")
            raw.append(int(m.group(1), 16))
            pos = m.end()
        raw += text[pos:].encode("utf-8", "surrogatepass")
        parts.append(raw.decode("utf-8", "surrogatepass"))
    return tuple(parts)


class Address(NamedTuple):
    """One server of a server string: TCP (maybe TLS) or a unix socket."""

    text: str           # as written, for messages
    host: str           # host name or address; the path for a unix socket
    port: int           # 0 for a unix socket
    tls: bool
    unix: bool


def _parse_one(text: str) -> Address:
    tls = text.startswith(TLS_PREFIX)
    rest = text[len(TLS_PREFIX):] if tls else text
    if "/" in rest:
        if tls:
            raise ValueError(f"{text}: TLS needs a TCP server, not a unix "
                             "socket")
        return Address(text, rest, 0, False, True)
    port_text: Optional[str] = None
    if rest.startswith("["):
        end = rest.find("]")
        if end == -1 or rest[end + 1:end + 2] not in ("", ":"):
            raise ValueError(f"{text}: want [address]:port")
        host = rest[1:end]
        if rest[end + 1:end + 2] == ":":
            port_text = rest[end + 2:]
    elif rest.count(":") == 1:
        host, port_text = rest.split(":")
    else:
        host = rest         # a name, or a bare IPv6 address without port
    if not host:
        raise ValueError(f"{text}: bad host")
    if port_text is None:
        return Address(text, host, TLS_PORT_DEFAULT if tls
                       else PORT_DEFAULT, tls, False)
    if not (port_text.isascii() and port_text.isdigit()) or not 0 < int(port_text) <= 65535:
        raise ValueError(f"{text}: bad port")
    return Address(text, host, int(port_text), tls, False)


def parse_servers(server: Optional[str],
                  environ: Optional[Mapping[str, str]] = None
                  ) -> List[Address]:
    """The addresses of a server string, as libkeylock reads it.

    ``host:port``, ``host`` (port 7711), ``[v6]:port``, a bare IPv6
    address, a unix socket path (anything with a ``/``), ``tls://host:port``
    (port 7712 by default). ``None`` or ``""`` means ``$KEYLOCK_SERVER``,
    or ``127.0.0.1:7711`` when that is unset. A comma-separated list is
    tried in order. Raises ``ValueError`` for a malformed string.
    """
    env = os.environ if environ is None else environ
    if not server:
        server = env.get("KEYLOCK_SERVER") or SERVER_DEFAULT
    out = []
    for item in server.split(","):
        item = item.strip()
        if not item:
            raise ValueError(f"{server!r}: an empty server in the list")
        out.append(_parse_one(item))
    return out


def seconds_to_ms(what: str, seconds: float, minimum: int) -> int:
    """Seconds (a float, as ``threading`` takes them) as whole ms, rounded
    up so that nobody gives up earlier than asked."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError(f"{what}= is a number of seconds, not "
                        f"{type(seconds).__name__}")
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{what}={seconds!r}: want a finite number >= 0")
    ms = math.ceil(round(seconds * 1000.0, 6))
    if ms < minimum:
        raise ValueError(f"{what}={seconds!r}: at least {minimum} ms")
    return ms


def lock_line(names: Sequence[str], timeout: Optional[float],
              ttl: Optional[float], shared: bool, limit: Optional[int],
              max_waiters: Optional[int]) -> str:
    """The ``LOCK`` request for already encoded keys and the options."""
    words = ["LOCK", *names]
    if timeout is not None:
        words.append(f"timeout={seconds_to_ms('timeout', timeout, 0)}")
    if ttl is not None:
        words.append(f"ttl={seconds_to_ms('ttl', ttl, 1)}")
    if shared:
        if limit is not None:
            raise ValueError("shared=True and limit= do not mix")
        words.append("mode=shared")
    if limit is not None:
        words.append(f"limit={_count('limit', limit, 1)}")
    if max_waiters is not None:
        words.append(f"max_waiters={_count('max_waiters', max_waiters, 0)}")
    return " ".join(words)


def _count(what: str, n: int, minimum: int) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < minimum:
        raise ValueError(f"{what}={n!r}: want an integer >= {minimum}")
    return n


def check_name(label: str) -> str:
    """A NAME label: 1 to 64 bytes with the byte rules of a key."""
    _check_key(label)
    if len(label.encode("utf-8")) > NAME_MAX:
        raise BadKey(f"{label!r}: a name is at most {NAME_MAX} bytes")
    return label


def default_name(prog: str, host: str, pid: int) -> str:
    """``python:HOST:PID`` (or ``PROG:HOST:PID``), cut to fit a NAME."""
    def clean(s: str) -> str:
        return _BAD_KEY_CHAR.sub("_", s).encode(
            "utf-8", "ignore")[:24].decode("utf-8", "ignore") or "_"
    return f"{clean(prog)}:{clean(host.split('.')[0])}:{pid}"


def parse_reply(line: str) -> str:
    """The value of ``OK [value]``; ``ERR CODE text`` raises its error."""
    if line.startswith("OK"):
        if len(line) == 2:
            return ""
        if line[2] == " ":
            return line[3:]
    elif line.startswith("ERR "):
        code, _, text = line[4:].partition(" ")
        if code:
            raise error_from_reply(code, text)
    raise ProtocolError(f"not a keylockd reply: {line[:80]!r}")


TOKEN_LIMIT = 1 << 63   # a fencing token is below 2^63 (REPLIES)


def parse_token(value: str) -> Optional[int]:
    """A fencing token: ASCII decimal digits, below 2^63; else None."""
    if value.isascii() and value.isdigit() and len(value) <= 19:
        token = int(value)
        if token < TOKEN_LIMIT:
            return token
    return None


def parse_json(value: str, what: str) -> Dict[str, Any]:
    """The JSON object of a STATS or INFO reply; anything else is a
    ProtocolError."""
    try:
        obj = json.loads(value)
    except ValueError as e:     # json.JSONDecodeError, a bad surrogate
        raise ProtocolError(f"{what} answered with no JSON object "
                            f"({e}): {value[:60]!r}") from None
    if not isinstance(obj, dict):
        raise ProtocolError(f"{what} answered with no JSON object: "
                            f"{value[:60]!r}")
    return obj


def keys_gauge(stats: Mapping[str, Any]) -> int:
    """STATS's ``keys``: a count, else a ProtocolError."""
    keys = stats.get("keys")
    if type(keys) is not int or keys < 0:
        raise ProtocolError(f"STATS has no count of keys: {keys!r:.60}")
    return keys


def unique(names: Iterable[str]) -> List[str]:
    """The keys in order, each once (the server counts duplicates once)."""
    return list(dict.fromkeys(names))


class Request(NamedTuple):
    """A prepared LOCK: the protocol keys, the line, the ttl in ms."""

    names: List[str]
    line: str
    ttl_ms: Optional[int]


def want_refresh(default: bool, refresh: Optional[bool],
                 ttl: Optional[float]) -> bool:
    """Whether a lock call renews its ttl: its own ``refresh=``, else the
    KeyedLock's default (which applies to calls with a ttl only)."""
    if refresh and ttl is None:
        raise ValueError("refresh=True needs a ttl=")
    return (default if refresh is None else refresh) and ttl is not None


def prepare(keys: Sequence[Key], timeout: Optional[float],
            ttl: Optional[float], shared: bool, limit: Optional[int],
            max_waiters: Optional[int]) -> Request:
    """Checks a lock call's arguments; everything is refused before any
    byte is sent. A call of plain ``str`` keys is remembered (a service
    takes the same few shapes of lock again and again)."""
    if len(keys) == 1 and type(keys[0]) is str or \
            all(type(k) is str for k in keys):
        return _prepare_plain(tuple(keys), timeout, ttl, shared, limit,
                              max_waiters)
    return _prepare(keys, timeout, ttl, shared, limit, max_waiters)


def _prepare(keys: Sequence[Key], timeout: Optional[float],
             ttl: Optional[float], shared: bool, limit: Optional[int],
             max_waiters: Optional[int]) -> Request:
    if not keys:
        raise TypeError("lock() needs at least one key")
    names = [encode_key(k) for k in keys]
    line = lock_line(names, timeout, ttl, shared, limit, max_waiters)
    ttl_ms = seconds_to_ms("ttl", ttl, 1) if ttl is not None else None
    return Request(names, line, ttl_ms)


# Calls with str keys only; typed, so that True is never taken for 1 (a
# bool is refused where a number is wanted). A Request is never changed.
_prepare_plain = functools.lru_cache(maxsize=4096, typed=True)(_prepare)
