# keylock, the Python client of keylockd. SPDX-License-Identifier: MIT
"""The exception tree: one class per keylockd-protocol(7) error code that
a caller can meet, and the client's own.

Every exception the package raises on purpose is a :class:`keylock.Error`,
but the checks of a call's arguments (``timeout=-1``: ``ValueError``; a
wrong type: ``TypeError``), made before anything is sent. ``GONE`` (a
session the server ended) is never raised: its locks are lost, and
leaving their blocks raises :class:`LockLost`. A code without a class of
its own (``SESSION``, which the client never earns, or a newer server's)
is a plain :class:`Error` whose ``code`` names it.
``code`` is the protocol's code word (``"TIMEOUT"``, ``"BUSY"``, ...), or
``None`` when the client itself raised it (a lost lock, a failed connect);
``text`` is the server's human-readable text, which for ``TIMEOUT``,
``LOCKED``, ``BUSY`` and ``DEADLOCK`` names the key and who blocks it, so
``str(error)`` is what belongs in a log line.
"""

from __future__ import annotations

from typing import Dict, Optional, Type

__all__ = [
    "Error", "Timeout", "Locked", "Busy", "Deadlock", "Held", "NotHeld",
    "Conflict", "Limit", "AuthError", "Shutdown", "Backend", "Cancelled",
    "LockLost", "BadRequest", "BadKey", "ConnectionFailed", "ProtocolError",
    "UpgradeFailed",
]


class Error(Exception):
    """Root of every keylock error.

    ``code`` is the protocol's error code word, or ``None`` for errors the
    client raised itself; ``text`` is the server's (or the client's)
    explanation. ``str(e)`` is ``"CODE text"``.
    """

    #: The code word this class stands for (``None``: raised by the client).
    CODE: Optional[str] = None

    def __init__(self, text: str, code: Optional[str] = None) -> None:
        self.code: Optional[str] = code if code is not None else self.CODE
        self.text: str = text
        super().__init__(f"{self.code} {text}" if self.code else text)


class Timeout(Error, TimeoutError):
    """``TIMEOUT``: the lock was not granted within ``timeout=``."""

    CODE = "TIMEOUT"


class Locked(Error):
    """``LOCKED``: ``timeout=0`` and a key was not free."""

    CODE = "LOCKED"


class Busy(Error):
    """``BUSY``: a key already had ``max_waiters`` waiters; nothing queued."""

    CODE = "BUSY"


class Deadlock(Error):
    """``DEADLOCK``: waiting would close a cycle of waiting clients."""

    CODE = "DEADLOCK"


class Held(Error):
    """``HELD``: this task or thread already holds one of the keys.

    Locks are not reentrant; the server says so at once instead of letting
    the task wait for itself.
    """

    CODE = "HELD"


class NotHeld(Error):
    """``NOTHELD``: a key is not held by this connection (its ttl ran out)."""

    CODE = "NOTHELD"


class Conflict(Error):
    """``CONFLICT``: ``limit=`` differs from the one the key is in use with."""

    CODE = "CONFLICT"


class Limit(Error):
    """``LIMIT``: a server limit (keys per request, locks, clients)."""

    CODE = "LIMIT"


class AuthError(Error):
    """``AUTH``: the server wants a secret, or the secret was wrong."""

    CODE = "AUTH"


class NoPermission(Error, PermissionError):
    """``NOPERM``: the user the connection authenticated as may not use
    one of the keys, or this command (an operator command for a user who
    is not an operator; keylockd-protocol(7), ACCESS CONTROL); nothing was
    changed. A user authenticates with ``secret="user secret"``."""

    CODE = "NOPERM"


class Shutdown(Error):
    """``SHUTDOWN``: the server is stopping; nothing was granted."""

    CODE = "SHUTDOWN"


class Backend(Error):
    """``BACKEND``: the server cannot reach the store behind its table."""

    CODE = "BACKEND"


class UpgradeFailed(Error):
    """``UPGRADE``: the answer to ``UPGRADE`` when the new binary failed
    (keylockd-protocol(7), LIVE UPGRADE); ``text`` is the reason. The
    running server carries on with every connection, lock and session."""

    CODE = "UPGRADE"


class Cancelled(Error):
    """``CANCELLED``: a waiting ``LOCK`` was withdrawn by ``CANCEL``.

    The package sends ``CANCEL`` itself when a waiting task is cancelled;
    the task then sees :class:`asyncio.CancelledError`, not this.
    """

    CODE = "CANCELLED"


class BadRequest(Error, ValueError):
    """``SYNTAX`` or ``TOOLONG``: the request was malformed."""


class BadKey(BadRequest):
    """``BADKEY``: a key breaks the protocol's rules (checked locally too)."""

    CODE = "BADKEY"


class LockLost(Error):
    """A held lock is gone: its connection dropped or its ttl ran out.

    Raised when leaving the block of a lost lock, and by a nested lock
    request on a connection that is gone (the client never reconnects
    silently while it holds anything).
    """


class ConnectionFailed(Error, ConnectionError):
    """No server of the list could be reached, a connection closed while
    a request (not a held lock) was in flight, or the server did not
    answer a request by its deadline (``reply_timeout`` past a lock's
    timeout, or past any other request): the connection is dropped."""


class ProtocolError(Error):
    """The server sent something that is not keylockd protocol: a line
    that is neither ``OK`` nor ``ERR``, a reply nobody asked for or on a
    channel nobody uses, a line over 1 MiB, a ``LOCK`` grant without a
    token (ASCII decimal digits, below 2^63), ``STATS`` or ``INFO``
    without a JSON object. The connection it came on is dropped (a
    session on it is not resumed), and every request it carried fails
    with this error, with channels or without."""


_BY_CODE: Dict[str, Type[Error]] = {
    cls.CODE: cls for cls in (
        Timeout, Locked, Busy, Deadlock, Held, NotHeld, Conflict, Limit,
        AuthError, NoPermission, Shutdown, Backend, Cancelled, BadKey,
        UpgradeFailed)
    if cls.CODE is not None
}
_BY_CODE["SYNTAX"] = BadRequest
_BY_CODE["TOOLONG"] = BadRequest


def error_from_reply(code: str, text: str) -> Error:
    """The exception for ``ERR CODE text`` (unknown codes: :class:`Error`)."""
    return _BY_CODE.get(code, Error)(text, code)
