# keylock, the Python client of keylockd. SPDX-License-Identifier: MIT
"""keylock.aio: the asyncio face of keylock.

::

    import keylock.aio

    locks = keylock.aio.KeyedLock()          # $KEYLOCK_SERVER, or :7711
    async with locks.lock(("balance", user_id), timeout=2) as h:
        ...                                  # h.token fences the writes

Each task that holds locks is an owner of its own (a channel of the
loop's one connection, or with ``channels=False`` a connection of its
own), so nested locks of one task go through one owner (re-entering a
key raises
:class:`keylock.Held` at once; a cycle between tasks raises
:class:`keylock.Deadlock`), and a cancelled task withdraws its wait with
``CANCEL`` and never leaves a grant behind.
"""

from __future__ import annotations

import asyncio
import ssl
from types import TracebackType
from typing import Any, Dict, Optional, Tuple, Type

from . import _core
from ._core import Core, HandleBase
from ._wire import (Key, Request, encode_key, keys_gauge, prepare,
                    want_refresh)

__all__ = ["KeyedLock", "Lock", "Handle"]


class Handle(HandleBase):
    """A held lock: ``token``, ``keys``, ``lost``, ``lost_reason``,
    ``suspended``.

    ``lost`` is an :class:`asyncio.Event`, set the moment the lock is known
    to be gone (its connection dropped, its ttl ran out, a refresh
    failed; with a session: the window of the client's rule closed
    without a resume, or the server said GONE); leaving the block of a
    lost lock raises :class:`keylock.LockLost`. ``suspended``, another
    Event, is set while a session's connection is down and the lock
    still counts (its window is open), and cleared by the resume (or
    the loss).
    """

    # made on first use (most handles never need them)
    _event: Optional[asyncio.Event] = None
    _suspended_event: Optional[asyncio.Event] = None

    @property
    def lost(self) -> asyncio.Event:
        """Set when the lock is lost; ``await h.lost.wait()`` to watch."""
        if self._event is None:
            self._event = asyncio.Event()
            if self._lost_reason is not None:
                self._event.set()
        return self._event

    def _signal_lost(self) -> None:
        if self._event is not None:
            self._event.set()

    @property
    def suspended(self) -> asyncio.Event:
        """Set while the session's connection is down within the window
        (the lock still counts; the client is resuming)."""
        if self._suspended_event is None:
            self._suspended_event = asyncio.Event()
            if self._suspended:
                self._suspended_event.set()
        return self._suspended_event

    def _signal_suspended(self, on: bool) -> None:
        if self._suspended_event is not None:
            if on:
                self._suspended_event.set()
            else:
                self._suspended_event.clear()


class Lock:
    """``async with`` this to hold the keys; made by :meth:`KeyedLock.lock`.

    Entering waits for the grant and returns the :class:`Handle`; leaving
    releases (and raises :class:`keylock.LockLost` if the lock was lost
    meanwhile). One ``Lock`` is entered once.
    """

    __slots__ = ("_core", "_keys", "_req", "_refresh", "_handle")

    def __init__(self, core: Core, keys: Tuple[Key, ...],
                 req: Request, refresh: bool) -> None:
        self._core = core
        self._keys = keys
        self._req = req
        self._refresh = refresh
        self._handle: Optional[HandleBase] = None

    async def __aenter__(self) -> Handle:
        """Waits for the grant; the handle."""
        if self._handle is not None:
            raise RuntimeError("this Lock was entered already; call "
                               "lock() again")
        task = self._core.current_task()
        if task is None:
            raise RuntimeError("keylock.aio locks are taken by tasks")
        req = self._req
        handle = await self._core.acquire(
            task, self._keys, req.names, req.line, req.ttl_ms,
            self._refresh, Handle)
        self._handle = handle
        assert isinstance(handle, Handle)
        return handle

    async def __aexit__(self, exc_type: Optional[Type[BaseException]],
                        exc: Optional[BaseException],
                        tb: Optional[TracebackType]) -> None:
        handle = self._handle
        assert handle is not None
        await self._core.release(handle)
        if handle.lost_reason is not None and not handle.inherited and \
                (exc_type is None or issubclass(exc_type, Exception)):
            raise handle._lost_error()


class KeyedLock:
    """Per-key locks held in keylockd, for the tasks of any process.

    ``server`` is written as for libkeylock: ``host:port``, ``[v6]:port``,
    a unix socket path, ``tls://host:port``, or a comma-separated list of
    those tried in order (a lock that a server refuses with ``ERR
    BACKEND`` or ``ERR SHUTDOWN`` before granting it moves to the next
    one: python/README.md, "Failover"); ``None`` means ``$KEYLOCK_SERVER`` or
    ``127.0.0.1:7711``. ``name`` labels the connections in ``INFO`` and in
    other clients' error texts (default ``python:HOST:PID``). ``secret`` (or
    the first line of ``auth_file``, default ``$KEYLOCK_AUTH_FILE``) is
    sent with ``AUTH``. ``ssl_context`` is used for ``tls://`` servers
    (default: the system's CAs, or ``$KEYLOCK_TLS_CA``, with
    ``$KEYLOCK_TLS_CERT``/``$KEYLOCK_TLS_KEY`` as the client's). At most
    ``max_idle`` connections are kept open for reuse. ``connect_timeout``
    bounds a connect (per server), ``cancel_timeout`` the withdrawal of a
    cancelled wait (past it the connection is dropped). ``refresh`` is
    the default of :meth:`lock`'s ``refresh``. ``session`` (seconds, off
    by default) opens a session of that grace on every connection: its
    locks outlive a dropped connection for the grace while the client
    reconnects and RESUMEs (see python/README.md, "Sessions").
    ``channels`` (on by default): the tasks ride channels of one
    connection where the server speaks them; ``False``: a connection per
    task (python/README.md, "Channels"). ``reply_timeout`` (seconds, 10
    by default; ``None``: none) is the reply deadline: a ``LOCK`` with a
    timeout not answered by that timeout plus ``reply_timeout``, any
    other request not answered within ``reply_timeout``, fails with
    :class:`keylock.ConnectionFailed`, and its connection is dropped as
    a stopped server's (with a session: resumed).

    A KeyedLock is used from one event loop at a time; it opens nothing
    until the first lock.
    """

    def __init__(self, server: Optional[str] = None, *,
                 name: Optional[str] = None, secret: Optional[str] = None,
                 auth_file: Optional[str] = None,
                 ssl_context: Optional[ssl.SSLContext] = None,
                 max_idle: int = _core.MAX_IDLE_DEFAULT,
                 connect_timeout: float = _core.CONNECT_TIMEOUT_DEFAULT,
                 cancel_timeout: float = _core.CANCEL_TIMEOUT_DEFAULT,
                 refresh: bool = False,
                 session: Optional[float] = None,
                 channels: Optional[bool] = None,
                 reply_timeout: Optional[float] = (
                     _core.REPLY_TIMEOUT_DEFAULT)) -> None:
        self._core = Core(server, name=name, secret=secret,
                          auth_file=auth_file, ssl_context=ssl_context,
                          max_idle=max_idle, connect_timeout=connect_timeout,
                          cancel_timeout=cancel_timeout, session=session,
                          channels=(_core.CHANNELS_DEFAULT if channels is None
                                    else channels),
                          reply_timeout=reply_timeout)
        self._refresh = refresh

    def lock(self, *keys: Key, timeout: Optional[float] = None,
             ttl: Optional[float] = None, shared: bool = False,
             limit: Optional[int] = None, max_waiters: Optional[int] = None,
             refresh: Optional[bool] = None) -> Lock:
        """The keys as one atomic grant: ``async with locks.lock(k) as h``.

        Keys are protocol keys (``str``) or tuples of ``str`` and ``int``
        (see :func:`keylock.encode_key`); several keys are granted together
        or not at all, in any order, without deadlock. ``timeout`` (seconds)
        bounds the wait (:class:`keylock.Timeout`; 0: only if free now,
        else :class:`keylock.Locked`); ``None`` waits as the server's
        default says (normally forever). ``ttl`` (seconds) makes the grant
        expire unless released first; with ``refresh=True`` it is renewed
        every third of the ttl while the block runs, and a failed renewal
        is a lost lock. ``shared=True`` takes a reader's lock; ``limit=N``
        makes the key a semaphore of N holders; ``max_waiters=N`` refuses
        at once (:class:`keylock.Busy`) when N requests already wait.
        Arguments are checked here, before anything is sent.
        """
        req = prepare(keys, timeout, ttl, shared, limit, max_waiters)
        return Lock(self._core, keys, req,
                    want_refresh(self._refresh, refresh, ttl))

    #: The threading face's name for :meth:`lock`.
    hold = lock

    async def stats(self) -> Dict[str, Any]:
        """The server's ``STATS``, parsed (see keylockd-protocol(7))."""
        return await self._core.command_json("STATS")

    async def info(self, key: Key) -> Dict[str, Any]:
        """The server's ``INFO`` of one key: its holders and waiters."""
        return await self._core.command_json(f"INFO {encode_key(key)}")

    async def key_count(self) -> int:
        """The server's ``keys`` gauge: entries in its lock table now, over
        every client (0 when nobody holds or waits)."""
        return keys_gauge(await self.stats())

    @property
    def idle(self) -> int:
        """Idle connections kept for reuse now (at most ``max_idle``)."""
        return self._core.idle()

    async def aclose(self) -> None:
        """Closes every connection; locks still held are released (and
        their handles lost)."""
        await self._core.aclose()

    async def __aenter__(self) -> "KeyedLock":
        """The KeyedLock itself; leaving closes its connections."""
        return self

    async def __aexit__(self, exc_type: Optional[Type[BaseException]],
                        exc: Optional[BaseException],
                        tb: Optional[TracebackType]) -> None:
        await self.aclose()
