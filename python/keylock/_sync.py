# keylock, the Python client of keylockd. SPDX-License-Identifier: MIT
"""The threading face: the same engine, run on one private loop thread.

Calls from any thread hand a coroutine to the loop thread and wait for it.
The loop thread blocks every asynchronous signal, so that none is taken
there. A KeyboardInterrupt (or any exception a signal handler raises)
while a call waits cancels the coroutine, which withdraws a waiting LOCK
with CANCEL, waits for the cleanup (a grant that won the race is released
first), and then re-raises in the caller. After fork the child starts its
own thread on first use.
"""

from __future__ import annotations

import asyncio
import signal
import ssl
import threading
from types import TracebackType
from typing import (Any, Callable, Coroutine, Dict, List, Optional, Tuple,
                    Type, TypeVar, cast)

from . import _core, _fork
from ._core import Chan, Core, HandleBase, Owner
from ._wire import (Key, Request, encode_key, keys_gauge, prepare,
                    want_refresh)

__all__ = ["KeyedLock", "Hold", "Handle"]

T = TypeVar("T")

#: What the loop thread never takes: every signal but those a fault of
#: its own raises.
_ASYNC_SIGNALS = signal.valid_signals() - {
    signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGILL,
    signal.SIGKILL, signal.SIGSTOP}


class _Runner:
    """The loop thread of this process."""

    def __init__(self) -> None:
        self.generation = _fork.generation
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(ready,),
                                       name="keylock-io", daemon=True)
        # The loop thread starts with every signal blocked (a thread
        # inherits its creator's mask), so the kernel hands the process's
        # signals to a thread that takes them: Ctrl-C sent while the main
        # thread sits in a system call (stdin, sleep) must interrupt that
        # call; taken by this thread it would only set Python's flag, and
        # the KeyboardInterrupt would wait for the main thread's next
        # bytecode, perhaps for ever.
        old = signal.pthread_sigmask(signal.SIG_BLOCK, _ASYNC_SIGNALS)
        try:
            self.thread.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
        ready.wait()

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(ready.set)
        self.loop.run_forever()

    def call(self, coro: Coroutine[Any, Any, T],
             undo: Optional[Callable[[T], Coroutine[Any, Any, Any]]] = None,
             cancel: bool = True) -> T:
        """Runs ``coro`` on the loop and returns its result. Interrupted,
        it cancels the coroutine (unless ``cancel`` is false: a release
        runs to its end), waits for it, runs ``undo`` on a result that
        came anyway, and re-raises."""
        done = threading.Event()
        # The task lives and dies on the loop thread; this thread sees only
        # its outcome, (True, result) or (False, exception). A Task freed
        # here would run asyncio's WeakSet callback (its registry of
        # tasks) in this thread, and a KeyboardInterrupt raised inside a
        # weakref callback is printed as "Exception ignored" and lost: a
        # Ctrl-C sent as a grant came in was seen so, now and then.
        held: List["asyncio.Task[T]"] = []
        outcome: List[Tuple[bool, Any]] = []

        def finished(task: "asyncio.Task[T]") -> None:
            # nothing raised here: a traceback through this frame would
            # keep the task alive in the exception handed over
            if task.cancelled():
                outcome.append((False, asyncio.CancelledError()))
            elif task.exception() is not None:
                outcome.append((False, task.exception()))
            else:
                outcome.append((True, task.result()))
            held.clear()
            done.set()

        def start() -> None:
            task = self.loop.create_task(coro)
            held.append(task)
            task.add_done_callback(finished)

        def stop() -> None:         # runs after start, if start was sent
            if held:
                held[0].cancel()
            elif not outcome:
                coro.close()
                done.set()

        try:
            self.loop.call_soon_threadsafe(start)
            done.wait()
            ok, value = outcome[0]
            if ok:
                # returned from inside the try: an interrupt that lands
                # after the result is known is still caught below
                return cast(T, value)
        except BaseException:
            if cancel:
                self.loop.call_soon_threadsafe(stop)
            _wait_through_interrupts(done)
            if undo is not None and outcome and outcome[0][0]:
                self.call(undo(cast(T, outcome[0][1])), cancel=False)
            raise
        raise value                 # what the coroutine raised


def _wait_through_interrupts(done: threading.Event) -> None:
    """Waits for the loop thread's cleanup, which is bounded by the
    cancel_timeout; another Ctrl-C meanwhile does not abandon it."""
    while True:
        try:
            done.wait()
            return
        except BaseException:
            continue


_runner: Optional[_Runner] = None
_runner_lock = threading.Lock()


def _get_runner() -> _Runner:
    global _runner
    runner = _runner
    if runner is not None and runner.generation == _fork.generation:
        return runner
    with _runner_lock:
        if _runner is None or _runner.generation != _fork.generation:
            if _runner is not None:
                _fork.orphan(_runner)       # the parent's thread and loop
            _runner = _Runner()
        return _runner


def _child_reset() -> None:
    global _runner_lock
    _runner_lock = threading.Lock()


_fork.at_child(_child_reset)


class Handle(HandleBase):
    """A held lock: ``token``, ``keys``, ``lost``, ``lost_reason``,
    ``suspended``.

    ``lost`` is a :class:`threading.Event`, set the moment the lock is known
    to be gone (its connection dropped, its ttl ran out, a refresh
    failed; with a session: the window of the client's rule closed
    without a resume, or the server said GONE); leaving the block of a
    lost lock raises :class:`keylock.LockLost`. ``suspended``, another
    Event, is set while a session's connection is down and the lock
    still counts, and cleared by the resume (or the loss).
    """

    def __init__(self, token: int, keys: Tuple[Key, ...], names: List[str],
                 conn: Chan, owner: Owner, ttl_ms: Optional[int]) -> None:
        super().__init__(token, keys, names, conn, owner, ttl_ms)
        #: Set when the lock is lost; ``h.lost.wait(timeout)`` to watch.
        self.lost = threading.Event()
        #: Set while the session's connection is down within the window.
        self.suspended = threading.Event()

    def _signal_lost(self) -> None:
        self.lost.set()

    def _signal_suspended(self, on: bool) -> None:
        if on:
            self.suspended.set()
        else:
            self.suspended.clear()


class Hold:
    """``with`` this to hold the keys; made by :meth:`KeyedLock.hold`.

    Entering waits for the grant and returns the :class:`Handle`; leaving
    releases (and raises :class:`keylock.LockLost` if the lock was lost
    meanwhile). One ``Hold`` is entered once.
    """

    __slots__ = ("_core", "_keys", "_req", "_refresh", "_handle")

    def __init__(self, core: Core, keys: Tuple[Key, ...], req: Request,
                 refresh: bool) -> None:
        self._core = core
        self._keys = keys
        self._req = req
        self._refresh = refresh
        self._handle: Optional[HandleBase] = None

    def __enter__(self) -> Handle:
        """Waits for the grant; the handle."""
        if self._handle is not None:
            raise RuntimeError("this Hold was entered already; call "
                               "hold() again")
        req = self._req
        handle = _get_runner().call(
            self._core.acquire(threading.current_thread(), self._keys,
                               req.names, req.line, req.ttl_ms,
                               self._refresh, Handle),
            self._core.release)
        # No call from here on: a signal handler runs only at a call or a
        # loop, and the grant is the with block's once this returns.
        self._handle = handle
        return handle  # type: ignore[return-value]

    def __exit__(self, exc_type: Optional[Type[BaseException]],
                 exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        handle = self._handle
        if handle is None or handle._generation != _fork.generation:
            return              # the parent's lock: nothing to send
        _get_runner().call(self._core.release(handle), cancel=False)
        if handle.lost_reason is not None and \
                (exc_type is None or issubclass(exc_type, Exception)):
            raise handle._lost_error()


class KeyedLock:
    """Per-key locks held in keylockd, for the threads of any process.

    The arguments are those of :class:`keylock.aio.KeyedLock`: ``server``
    as for libkeylock (``host:port``, ``[v6]:port``, a unix socket path,
    ``tls://host:port``, a comma-separated list tried in order, whose
    next server a lock refused with ``ERR BACKEND`` or ``ERR SHUTDOWN``
    moves to; ``None``: ``$KEYLOCK_SERVER`` or ``127.0.0.1:7711``),
    ``name``, ``secret`` or
    ``auth_file``, ``ssl_context``, ``max_idle`` idle connections kept,
    ``connect_timeout``, ``cancel_timeout``, the default ``refresh``,
    ``session`` (seconds of grace; off by default), ``channels`` (on
    by default) and ``reply_timeout`` (the reply deadline: 10 s past a
    lock's timeout, or past any other request; then
    :class:`keylock.ConnectionFailed` and the connection is dropped).

    Each thread that holds locks is an owner of its own: a channel of
    the process's one connection (or, with ``channels=False`` or a
    server without channels, a connection of its own); any number of
    threads may share one KeyedLock. It opens nothing until the first
    lock.
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

    def hold(self, *keys: Key, timeout: Optional[float] = None,
             ttl: Optional[float] = None, shared: bool = False,
             limit: Optional[int] = None, max_waiters: Optional[int] = None,
             refresh: Optional[bool] = None) -> Hold:
        """The keys as one atomic grant: ``with locks.hold(k) as h``.

        The arguments are those of :meth:`keylock.aio.KeyedLock.lock`:
        ``timeout`` and ``ttl`` in seconds, ``shared``, ``limit``,
        ``max_waiters``, ``refresh``. A KeyboardInterrupt while waiting
        withdraws the wait (and releases a grant that won the race) before
        it propagates.
        """
        req = prepare(keys, timeout, ttl, shared, limit, max_waiters)
        return Hold(self._core, keys, req,
                    want_refresh(self._refresh, refresh, ttl))

    #: The asyncio face's name for :meth:`hold`.
    lock = hold

    def stats(self) -> Dict[str, Any]:
        """The server's ``STATS``, parsed (see keylockd-protocol(7))."""
        return _get_runner().call(self._core.command_json("STATS"))

    def info(self, key: Key) -> Dict[str, Any]:
        """The server's ``INFO`` of one key: its holders and waiters."""
        line = f"INFO {encode_key(key)}"
        return _get_runner().call(self._core.command_json(line))

    def key_count(self) -> int:
        """The server's ``keys`` gauge: entries in its lock table now, over
        every client (0 when nobody holds or waits)."""
        return keys_gauge(self.stats())

    @property
    def idle(self) -> int:
        """Idle connections kept for reuse now (at most ``max_idle``)."""
        return self._core.idle()

    def close(self) -> None:
        """Closes every connection; locks still held are released (and
        their handles lost)."""
        if self._core.loop is not None:
            _get_runner().call(self._core.aclose())

    def __enter__(self) -> "KeyedLock":
        """The KeyedLock itself; leaving closes its connections."""
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]],
                 exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self.close()
