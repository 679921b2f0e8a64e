# keylock, the Python client of keylockd. SPDX-License-Identifier: MIT
"""keylock: per-key locks held in keylockd, across threads, tasks,
processes and hosts.

::

    import keylock

    locks = keylock.KeyedLock()              # $KEYLOCK_SERVER, or :7711
    with locks.hold(("balance", user_id), timeout=2) as h:
        ...                                  # h.token fences the writes

``keylock.KeyedLock`` is the threading face; ``keylock.aio.KeyedLock`` the
asyncio one (``async with locks.lock(key) as h``). Errors are
:class:`keylock.Error` and its subclasses: one per protocol error code a
caller can meet (``GONE`` is seen as :class:`keylock.LockLost`; a code
without a class of its own, such as ``SESSION``, is a plain
:class:`keylock.Error` with that ``code``), and the client's own
(:class:`keylock.LockLost`, :class:`keylock.ConnectionFailed`,
:class:`keylock.ProtocolError`). A bad argument (``timeout=-1``) is a
``ValueError`` or ``TypeError`` raised before anything is sent, not
:class:`keylock.BadRequest` (the server's ``SYNTAX``); a malformed key is
:class:`keylock.BadKey`, a ``ValueError`` too.
"""

from ._errors import (AuthError, Backend, BadKey, BadRequest, Busy,
                      Cancelled, Conflict, ConnectionFailed, Deadlock, Error,
                      Held, Limit, Locked, LockLost, NoPermission, NotHeld,
                      ProtocolError, Shutdown, Timeout, UpgradeFailed)
from ._sync import Handle, Hold, KeyedLock
from ._wire import Key, KeyPart, decode_key, encode_key

__version__ = "0.1.0"

__all__ = [
    "KeyedLock", "Hold", "Handle", "Key", "KeyPart", "encode_key",
    "decode_key", "Error", "Timeout", "Locked", "Busy", "Deadlock", "Held",
    "NotHeld", "Conflict", "Limit", "AuthError", "NoPermission",
    "Shutdown", "Backend",
    "Cancelled", "LockLost", "BadRequest", "BadKey", "ConnectionFailed",
    "ProtocolError", "UpgradeFailed",
]
