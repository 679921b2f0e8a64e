# keylock, the Python client of keylockd. SPDX-License-Identifier: MIT
"""The client's engine, on an asyncio event loop: connections, their
channels, the pool, who owns which channel, LOCK and its withdrawal,
release, ttl.

Both faces run this: ``keylock.aio`` on the caller's loop, the threading
face on one private loop thread (``_sync``). Everything here runs on that
one loop, so no state needs a lock. Rules it keeps (keylockd-protocol(7)):

- one channel per owner (a task, or a thread) while the owner holds
  anything, so that the server's HELD and DEADLOCK checks see the owner:
  a channel 1, 2, ... of the loop's one connection where the server
  speaks channels, else a connection of its own (channel 0); no channel
  ever carries a waiting LOCK of two owners;
- the requests written in one turn of the loop leave in one send;
- a connection that drops marks every lock it held lost at once, and is
  never replaced behind the back of an owner that still holds locks;
  with a session (``session=``) it is suspended instead, reconnects and
  RESUMEs, and its locks count until the client's rule says (T, the send
  time of the last answered request, plus the grace, less 0.1%): lost
  exactly then, or at once on GONE;
- a LOCK whose caller stops waiting is withdrawn with CANCEL, and a grant
  that won the race is released before the caller hears of the
  cancellation (CANCEL's section of the man page);
- a LOCK refused with ERR BACKEND or ERR SHUTDOWN, of an owner that holds
  nothing and without a session, moves to the next server of the list
  that this acquire has not tried, for what is left of its timeout; the
  refusing server is cut off (new connections start past it, its
  connections take no new owner), and the locks held through it are left
  to that server (libkeylock's keylock_failover()).
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import json
import logging
import math
import os
import random
import re
import socket
import ssl
import threading
from collections import deque
from typing import (Any, Callable, Coroutine, Deque, Dict, FrozenSet, List,
                    Optional, Set, Tuple, Union)

from . import _fork
from ._errors import (AuthError, Backend, ConnectionFailed, Error, LockLost,
                      ProtocolError, Shutdown)
from ._wire import (TOKEN_LIMIT, Address, Key, check_name, default_name,
                    parse_json, parse_reply, parse_servers, parse_token,
                    seconds_to_ms, unique)

REPLY_MAX = 1 << 20          # bytes of one reply line (INFO lists stop at 1000)
MAX_IDLE_DEFAULT = 8
CHANNELS_DEFAULT = True      # KeyedLock(channels=None): channels where the
                             # server speaks them
CONNECT_TIMEOUT_DEFAULT = 10.0
CANCEL_TIMEOUT_DEFAULT = 10.0
REPLY_TIMEOUT_DEFAULT = 10.0    # s: libkeylock's keylock_timeout() default
WINDOW_MARGIN = 0.001        # of the grace: clock-rate error (the rule's)
BACKOFF_FIRST = 0.05         # s between reconnect rounds, doubling...
BACKOFF_MAX = 1.0            # ...up to this, with jitter
CHANNELS_PER_CONN = 65535    # owners on one connection (the server's
                             # max-channels is 65536 by default)
SUSPENDED_POLL = 0.05        # s: how often a withdrawal looks whether
                             # the resume it waits for has settled

_log = logging.getLogger("keylock")

# A reply line, or None: the connection closed before it came.
Reply = Optional[str]


class Pending:
    """A request whose reply is to come. ``fut`` is what the caller
    awaits; the reply is kept in ``line`` even if that future was
    cancelled with its task, for whoever settles the request then.

    ``request`` is the line as sent and ``kind`` what it is, so that a
    resumed session can tell which requests to send again, which the
    server answered already, and which it must answer itself; ``sent`` is
    when it left (the loop's clock), for the client's rule."""

    __slots__ = ("fut", "line", "done", "request", "kind", "sent", "token",
                 "names", "timeout_at", "cancelling", "hook", "due")

    def __init__(self, fut: "asyncio.Future[Reply]", request: str = "",
                 kind: str = "") -> None:
        self.fut = fut
        self.line: Reply = None
        self.done = False
        self.request = request
        self.kind = kind
        self.sent = 0.0
        self.token: Optional[int] = None     # UNLOCK: the grant it ends
        self.names: List[str] = []           # REFRESH: its keys
        self.timeout_at: Optional[float] = None   # LOCK with timeout=
        self.cancelling = False              # LOCK: CANCEL is on its way
        self.hook: Optional[Callable[[Reply], None]] = None
        # the loop's clock by which its reply must have come on the link
        # it was written to (None: no deadline; see Link.expect)
        self.due: Optional[float] = None

    def answer(self, line: Reply) -> None:
        if self.done:
            return
        self.line = line
        self.done = True
        if self.hook is not None:
            self.hook(line)
        if not self.fut.done():
            self.fut.set_result(line)


# Pending.kind: what a resumed session does with a request it sent on the
# connection that dropped.
LOCK, UNLOCK, CANCEL, REFRESH, PING, QUIT, OTHER = (
    "LOCK", "UNLOCK", "CANCEL", "REFRESH", "PING", "QUIT", "OTHER")

_TIMEOUT_OPT = re.compile(r" timeout=([0-9]+)")


class Link(asyncio.Protocol):
    """One transport of a connection: a FIFO of pending replies per
    channel (0 without channels). A connection with a session may go
    through several, one after the other (RESUME). Requests written in
    one turn of the event loop leave in one send."""

    def __init__(self, conn: "Conn", addr: Address,
                 sock: socket.socket) -> None:
        self.conn = conn
        self.addr = addr
        self.sock = sock
        self.transport: Optional[asyncio.Transport] = None
        self.waiters: Deque[Pending] = deque()      # channel 0's
        self.fifos: Dict[int, Deque[Pending]] = {0: self.waiters}
        # the hello's "@1 PING": a server without channels answers it
        # on channel 0 (ERR SYNTAX), after everything else there
        self.probe: Optional[Pending] = None
        self.dead = False
        self.reason = ""
        self._buf = b""
        self._out: List[str] = []       # this turn's requests
        # the send time of a request matters to the client's rule only
        self._timed = conn.core.session_ms is not None
        # the reply deadline (Link.expect): its margin, and the timer
        # that looks at the oldest request of each channel
        self._margin = conn.core.reply_timeout
        self._watch: Optional[asyncio.TimerHandle] = None
        self._watch_at = 0.0

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self._buf:
            data = self._buf + data
        cut = data.rfind(b"\n") + 1
        self._buf = data[cut:]      # an incomplete line waits for the rest
        conn = self.conn
        fifos = self.fifos
        # every complete line of the read in one decode
        for line in (data[:cut - 1].decode("utf-8", "replace").split("\n")
                     if cut else ()):
            if self.dead:
                return
            if line[-1:] == "\r":
                line = line[:-1]
            if line[:1] == "@":                 # "@N reply"
                sp = line.find(" ")
                num = line[1:sp]
                if sp < 0 or not (num.isdigit() and num.isascii()):
                    conn.violate("a reply with a malformed channel: "
                               f"{line[:60]!r}", self)
                    return
                n = int(num)
                line = line[sp + 1:]
            else:
                n = 0
            fifo = fifos.get(n)
            if not fifo:
                probe = self.probe
                if n == 0 and probe is not None:
                    # a server without channels: "@1" is no command
                    self.probe = None
                    fifos[1].remove(probe)
                    probe.answer(line)
                    continue
                conn.violate(f"the server sent a line nobody asked for "
                           f"(channel {n}): {line[:60]!r}", self)
                return
            pending = fifo.popleft()
            if pending is self.probe:
                self.probe = None
            if self._timed and conn.link is self and \
                    pending.sent > conn.last_ok:
                conn.last_ok = pending.sent     # the client's rule: T
            pending.answer(line)
        if len(self._buf) > REPLY_MAX and not self.dead:
            conn.violate(f"a reply line over {REPLY_MAX} bytes", self)

    def eof_received(self) -> bool:
        self.lost("the server closed the connection")
        return False

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self.lost(f"{exc}" if exc else "the connection closed")

    def write(self, pending: Pending, n: int = 0) -> None:
        """Queues ``pending`` on channel ``n``; the request leaves with
        every other one written in this turn of the loop."""
        if self._timed:
            pending.sent = self.conn.loop.time()
        self.expect(pending, n)
        out = self._out
        if not out:
            self.conn.loop.call_soon(self._flush)
        out.append(f"@{n} {pending.request}\n" if n else
                   f"{pending.request}\n")

    def expect(self, pending: Pending, n: int) -> None:
        """``pending``'s reply is the next one on channel ``n`` after those
        queued there, and is due (libkeylock's rule): a LOCK with a
        timeout by its end plus ``reply_timeout``, any other request
        within ``reply_timeout`` of its write, none after a request that
        has no deadline (a LOCK without a timeout) on its channel, and
        never before one ahead of it there. A reply overdue means the
        server stopped answering: the transport is dropped (Link.overdue)."""
        fifo = self.fifos.get(n)
        if fifo is None:
            fifo = self.fifos[n] = deque()
        margin = self._margin
        if margin is not None:
            if pending.kind != LOCK:
                due: Optional[float] = self.conn.loop.time() + margin
            elif pending.timeout_at is not None:
                due = pending.timeout_at + margin
            else:
                due = None
            if fifo and due is not None:
                ahead = fifo[-1].due
                due = None if ahead is None else max(due, ahead)
            pending.due = due
            if due is not None and (self._watch is None or
                                    due < self._watch_at):
                self._watch_in(due)
        fifo.append(pending)

    def _watch_in(self, at: float) -> None:
        if self._watch is not None:
            self._watch.cancel()
        self._watch_at = at
        self._watch = self.conn.loop.call_at(at, self.overdue)

    def overdue(self) -> None:
        """The oldest request of each channel: one past its deadline drops
        the transport, as a server that stopped answering (its requests
        fail with ConnectionFailed; a session resumes elsewhere)."""
        self._watch = None
        if self.dead:
            return
        now = self.conn.loop.time()
        first: Optional[float] = None
        for fifo in self.fifos.values():
            if not fifo:
                continue
            head = fifo[0]
            due = head.due
            if due is None:
                continue
            if due <= now:
                what = head.request.split(" ", 1)[0] or head.kind
                margin = self._margin
                self.drop(f"no reply to {what} in time (its "
                          + ("timeout plus " if head.kind == LOCK else "")
                          + f"reply_timeout of {margin:g} s): the server "
                          "stopped answering")
                return
            if first is None or due < first:
                first = due
        if first is not None:
            self._watch_in(first)

    def _flush(self) -> None:
        out, self._out = self._out, []
        if out and not self.dead and self.transport is not None:
            self.transport.write("".join(out).encode())

    def lost(self, reason: str) -> None:
        """The transport is gone (or given up): the connection decides
        what becomes of the requests it carried."""
        if self.dead:
            return
        self.dead = True
        self.reason = reason
        self._out = []
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        if self.conn.link is self:
            self.conn._link_lost(self, reason)
        for fifo in self.fifos.values():
            while fifo:
                fifo.popleft().answer(None)

    def drop(self, reason: str) -> None:
        """Resets the transport now; a session resumes elsewhere."""
        self.lost(reason)
        if self.transport is not None:
            self.transport.abort()

    def close(self, quit: bool) -> None:
        """Closes after the queued requests (and a QUIT) are written."""
        out, self._out = self._out, []
        self.dead = True
        if self.transport is not None:
            if quit:
                out.append("QUIT\n")
            if out:
                self.transport.write("".join(out).encode())
            self.transport.close()


# What a request may change in the lock table: a connection that drops
# with one of these unanswered is resumed to settle it.
_TABLE_KINDS = (LOCK, UNLOCK, CANCEL, QUIT)


class Chan:
    """One lock owner's request sequence on a connection: channel ``n``
    (0 on a connection without channels, the only one there). The
    owner's grants, and with a session what it sent that the resume
    must settle."""

    __slots__ = ("conn", "n", "grants", "limbo", "deferred", "in_use")

    def __init__(self, conn: "Conn", n: int) -> None:
        self.conn = conn
        self.n = n
        self.grants: Set[HandleBase] = set()
        self.limbo: List[Pending] = []      # sent, unanswered, link gone
        self.deferred: List[Pending] = []   # asked for while suspended
        self.in_use = False                 # an owner's now

    # what the owner sees of the connection
    @property
    def closed(self) -> bool:
        return self.conn.closed

    @property
    def suspended(self) -> bool:
        return self.conn.suspended

    @property
    def reason(self) -> str:
        return self.conn.reason

    @property
    def session(self) -> Optional[str]:
        return self.conn.session

    @property
    def grace(self) -> float:
        return self.conn.grace

    @property
    def last_ok(self) -> float:
        return self.conn.last_ok

    @property
    def addr(self) -> Address:
        return self.conn.addr

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self.conn.loop

    def abort(self, reason: str) -> None:
        self.conn.abort(reason)

    def failure(self, what: str) -> Error:
        return self.conn.failure(what)

    def _arm(self) -> None:
        self.conn._arm()

    def send(self, line: str, kind: str = OTHER) -> Pending:
        """Sends one request on this channel; its reply line (None: the
        connection ended first) comes in the Pending. While suspended,
        it is sent once the session is resumed."""
        conn = self.conn
        pending = Pending(conn.loop.create_future(), line, kind)
        if kind == LOCK and " timeout=" in line:
            m = _TIMEOUT_OPT.search(line)
            if m:
                pending.timeout_at = conn.loop.time() + int(m.group(1)) / 1e3
        if conn.closed:
            pending.answer(None)
        elif conn.suspended or conn.link is None:
            self.deferred.append(pending)
        else:
            conn.link.write(pending, self.n)
        return pending

    def request(self, line: str, kind: str = OTHER) -> "asyncio.Future[Reply]":
        """Sends one request; the future gets its reply line, or None. A
        cancelled awaiter drops the reply; the order stays intact."""
        return self.send(line, kind).fut

    def add_grant(self, handle: "HandleBase") -> None:
        conn = self.conn
        self.grants.add(handle)
        conn.grants.add(handle)
        if conn.session is not None:
            conn._arm()

    def drop_grant(self, handle: "HandleBase") -> None:
        self.grants.discard(handle)
        self.conn.grants.discard(handle)

    def _reconcile(self, link: Link, held: List[Tuple[int, List[str]]],
                   waiting: Any) -> bool:
        """RESUME's word on this channel: what the server says it holds
        and waits for, against what the client believed and sent. Every
        request left is sent again on ``link`` or answered here; a grant
        the client does not know of is released. True if a QUIT was
        among the requests."""
        limbo, self.limbo = self.limbo, []
        deferred, self.deferred = self.deferred, []
        quit = any(p.kind == QUIT for p in (*limbo, *deferred))
        tokens = {token: keys for token, keys in held}
        held_keys = {k for _, keys in held for k in keys}
        mine = {h.token for h in self.grants}
        given_up: List[HandleBase] = []
        for h in list(self.grants):
            if h.token not in tokens:
                self.drop_grant(h)
                h._set_lost("the server released it while the connection "
                            "was down (its ttl ran out)")
            elif h.lost_reason is not None:
                # reported lost already (its window closed before this
                # resume): the owner has stopped the work it guards, so
                # the server lets go of it now, not when the block is left
                self.drop_grant(h)
                given_up.append(h)
        releasing = {p.token for p in (*limbo, *deferred)
                     if p.kind == UNLOCK and p.token is not None}
        unknown = [t for t in tokens if t not in mine and t not in releasing]
        lock = next((p for p in limbo if p.kind == LOCK), None)
        lock_served = False
        if waiting is not None:
            lock_served = True
            if lock is not None:
                # its reply is the next one on this channel
                link.expect(lock, self.n)
            else:
                self._stray_wait(link, waiting)
        elif lock is not None and unknown:
            lock_served = True
            lock.answer(f"OK {unknown.pop(0)}")     # granted while detached
        before = lock is not None
        for p in limbo:
            if p is lock:
                before = False
                if not lock_served:
                    if lock.cancelling:
                        lock.answer("ERR CANCELLED withdrawn while the "
                                    "connection was down")
                    else:
                        self._send_lock(link, lock)
                continue
            served = before and lock_served     # ahead of a served LOCK
            if p.kind == UNLOCK:
                if p.token in tokens:
                    link.write(p, self.n)
                else:
                    p.answer(f"OK {len(unique(p.request.split()[1:]))}")
            elif p.kind == CANCEL:
                if waiting is not None and not served:
                    link.write(p, self.n)
                else:
                    p.answer("OK 0")
            elif p.kind == PING and served:
                p.answer("OK PONG")
            elif p.kind == REFRESH and served:
                p.answer(f"OK {sum(1 for k in p.names if k in held_keys)}")
            elif p.request:
                link.write(p, self.n)
            else:
                p.answer(None)      # a stray wait's, settled above
        for p in deferred:
            if p.kind == LOCK:
                if p.cancelling:
                    p.answer("ERR CANCELLED withdrawn before it was sent")
                else:
                    self._send_lock(link, p)
            else:
                link.write(p, self.n)
        for token in unknown:
            # a grant nobody here knows of (never expected): released
            self.send("UNLOCK " + " ".join(unique(tokens[token])), UNLOCK)
        for h in given_up:
            h._unlocked = True      # leaving its block sends nothing
            unlock = self.send("UNLOCK " + " ".join(unique(tokens[h.token])),
                               UNLOCK)
            unlock.token = h.token
        return quit

    def _send_lock(self, link: Link, p: Pending) -> None:
        """A LOCK that the server never saw, or answered with a reply that
        was lost: asked again, for the time it has left."""
        if p.timeout_at is not None:
            left = math.ceil((p.timeout_at - self.conn.loop.time()) * 1000.0)
            if left <= 0:
                p.answer("ERR TIMEOUT not granted within its timeout (the "
                         "connection dropped while it waited)")
                return
            p.request = _TIMEOUT_OPT.sub(f" timeout={left}", p.request, 1)
        link.write(p, self.n)

    def _stray_wait(self, link: Link, waiting: Any) -> None:
        """A waiting LOCK the client did not send: withdrawn (and its
        grant, if it won the race, released)."""
        keys = " ".join(unique(str(k) for k in waiting.get("keys", [])))
        stray = Pending(self.conn.loop.create_future(), "", LOCK)
        stray.cancelling = True     # never sent again

        def settle(line: Reply) -> None:
            if line is not None and line.startswith("OK ") and keys:
                self.send(f"UNLOCK {keys}", UNLOCK)
        stray.hook = settle
        link.expect(stray, self.n)
        self.send("CANCEL", CANCEL)


class Conn:
    """One connection to the server: its transport and, with a session,
    everything that makes the session outlive a transport. Its lock
    owners are channels (``Chan``): only channel 0 on a connection
    without channels (one owner at a time, pooled), channel 0 for the
    connection's own requests and 1, 2, ... for the owners, any number
    at once, on a connection with channels (``mux``).

    Without a session a transport that drops ends the connection. With
    one, the connection is suspended, reconnects with backoff to the
    server list and RESUMEs, and its requests and grants carry on; it
    ends when the session cannot be resumed in its window
    (keylockd-protocol(7), Sessions, the client's rule) or when the
    server says GONE."""

    def __init__(self, core: "Core", loop: asyncio.AbstractEventLoop,
                 on_close: Callable[["Conn"], None]) -> None:
        self.core = core
        self.loop = loop
        self.link: Optional[Link] = None
        self.addr: Address = core.addrs[0]
        self.grants: Set[HandleBase] = set()    # of every channel
        self.closed: bool = False
        self.reason: str = ""
        # ended because the server broke the protocol (ProtocolError to
        # the requests it carried, not ConnectionFailed)
        self.violation = False
        self._on_close = on_close
        self.generation = _fork.generation
        # channels
        self.ch0 = Chan(self, 0)
        self.chans: Dict[int, Chan] = {0: self.ch0}
        self.mux = False        # channels 1.. carry the owners
        self.free: List[Chan] = []
        self.busy = 0           # channels given to owners now
        self.next_chan = 1
        # the session
        self.session: Optional[str] = None
        self.grace: float = 0.0                    # seconds
        # T: the send time of the last answered request
        self.last_ok: float = 0.0
        self.suspended: bool = False
        self.ending = False     # dropped on purpose: never resumed
        self.retire = False     # back to the pool while suspended
        self.cut = False        # its server refused a LOCK (ERR BACKEND
                                # or SHUTDOWN): no new owner here; closed
                                # once its owners let go
        self.in_use = False     # out of the pool: an owner's, or a call's
        self.noticed = 0.0      # when the drop was seen
        self.resumes = 0
        self._window: Optional[asyncio.TimerHandle] = None
        self._ticker: Optional[asyncio.TimerHandle] = None
        self._resumer: Optional["asyncio.Task[None]"] = None

    @property
    def sock(self) -> Optional[socket.socket]:
        return self.link.sock if self.link is not None else None

    def send(self, line: str, kind: str = OTHER) -> Pending:
        """A request of the connection itself, on channel 0."""
        return self.ch0.send(line, kind)

    def request(self, line: str, kind: str = OTHER) -> "asyncio.Future[Reply]":
        return self.ch0.send(line, kind).fut

    # channels (mux)

    def take_chan(self) -> Chan:
        """A channel for an owner: a free one, or a new number."""
        if self.free:
            chan = self.free.pop()
        else:
            chan = self._chan(self.next_chan)
        chan.in_use = True
        self.busy += 1
        if self._ticker is None and self.session is not None:
            # an owner that only waits is watched too (Conn._tick)
            self._ticker = self.loop.call_later(self.grace / 3, self._tick)
        return chan

    def _chan(self, n: int) -> Chan:
        chan = self.chans.get(n)
        if chan is None:
            chan = self.chans[n] = Chan(self, n)
            if n >= self.next_chan:
                self.next_chan = n + 1
        return chan

    def give_back(self, chan: Chan) -> None:
        """The owner holds nothing any more: the channel is free (the
        server forgets it once its queued requests are served)."""
        chan.in_use = False
        self.busy -= 1
        if self.closed:
            return
        if chan.grants:
            # never expected: what the owner did not release goes now
            for h in list(chan.grants):
                chan.drop_grant(h)
                h._set_lost("its owner let go of its channel with it held")
            chan.send("UNLOCKALL")
        self.free.append(chan)

    def abort(self, reason: str, link: Optional[Link] = None) -> None:
        """Gives the connection up now. Without a session the server
        releases its locks; with one it keeps them for the grace (the
        session is not resumed)."""
        if link is not None and link is not self.link:
            link.drop(reason)           # a resume attempt's, not adopted
            return
        self.ending = True
        link = self.link
        self._closed(reason)
        if link is not None:
            link.dead = True
            if link.transport is not None:
                link.transport.abort()

    def violate(self, reason: str, link: Optional[Link] = None) -> None:
        """The server sent something that is not protocol: the connection
        is dropped (a session is not resumed: the stream cannot be
        trusted), and the requests it carried fail with ProtocolError."""
        if link is None or link is self.link:
            self.violation = True
        self.abort(reason, link)

    def failure(self, what: str, where: bool = True) -> Error:
        """The error of a request whose reply never came (the connection
        ended first): ProtocolError if the server broke the protocol,
        else ConnectionFailed (a dropped connection, a server that
        stopped answering)."""
        text = (f"{self.addr.text}: " if where else "") + self.reason + what
        if self.violation:
            return ProtocolError(text)
        return ConnectionFailed(text)

    def close(self) -> None:
        """Closes after the queued requests are written; a session is
        ended with QUIT (the server releases everything at once)."""
        self.ending = True
        link = self.link
        self._closed("closed by the client")
        if link is not None and not link.dead:
            link.close(self.session is not None)

    def _closed(self, reason: str) -> None:
        if self.closed:
            return
        self.closed = True
        self.reason = reason
        self.suspended = False
        for timer in (self._window, self._ticker):
            if timer is not None:
                timer.cancel()
        self._window = self._ticker = None
        resumer, self._resumer = self._resumer, None
        if resumer is not None and resumer is not _current_task():
            resumer.cancel()
        pendings: List[Pending] = []
        if self.link is not None:
            for fifo in self.link.fifos.values():
                pendings.extend(fifo)
                fifo.clear()
        for chan in self.chans.values():
            pendings += chan.limbo + chan.deferred
            chan.limbo, chan.deferred = [], []
        for pending in pendings:
            pending.answer(None)
        for grant in list(self.grants):
            grant._set_lost(f"the connection to {self.addr.text} is gone "
                            f"({reason}): the server has released it"
                            if self.session is None else
                            f"the session on {self.addr.text} is over "
                            f"({reason})")
        self.grants.clear()
        for chan in self.chans.values():
            chan.grants.clear()
        self._on_close(self)

    # The session: the client's rule, pings, resume

    def window_end(self) -> float:
        """The instant the locks stop counting without another answer:
        T + grace, less 0.1% for the clocks' rates."""
        return self.last_ok + self.grace * (1.0 - WINDOW_MARGIN)

    def _arm(self) -> None:
        if self._window is None:
            self._window = self.loop.call_at(self.window_end(),
                                             self._window_check)
        if self._ticker is None:
            self._ticker = self.loop.call_later(self.grace / 3, self._tick)

    def _window_check(self) -> None:
        self._window = None
        if self.closed or self.generation != _fork.generation:
            return
        if not self.grants and not self.suspended:
            return
        end = self.window_end()
        if self.loop.time() < end:
            self._window = self.loop.call_at(end, self._window_check)
            return
        why = ("the connection dropped and the session could not be "
               f"resumed within its grace of {self.grace:g} s"
               if self.suspended else
               f"the server did not answer for the session's grace of "
               f"{self.grace:g} s")
        for grant in list(self.grants):
            if not grant._confirming:       # not the caller's yet
                grant._set_lost(f"{why} ({self.reason})" if self.suspended
                                else why)

    def _tick(self) -> None:
        """Every grace/3 while locks are held, or with channels while an
        owner has a channel (one that only waits too): a PING if nothing
        was answered meanwhile; a request on channel 0 unanswered that
        long (but a waiting LOCK) means the transport is dead: resume
        elsewhere. (With channels no LOCK waits on channel 0, so its PING
        is answered however long the owners wait.)"""
        self._ticker = None
        if self.closed or self.generation != _fork.generation or \
                not (self.grants or (self.mux and self.busy)):
            return
        third = self.grace / 3
        link = self.link
        if not self.suspended and link is not None:
            now = self.loop.time()
            if link.waiters:
                head = link.waiters[0]
                if head.kind != LOCK and now - head.sent >= third * 0.999:
                    link.drop(f"no answer in {third:g} s")
            elif now - self.last_ok >= third * 0.9:
                self.send("PING", PING)
        self._ticker = self.loop.call_later(third, self._tick)

    def _link_lost(self, link: Link, reason: str) -> None:
        self.link = None
        if self.closed:
            return
        if self.generation != _fork.generation:
            self.closed = True
            return
        # resumed: a connection in use (an owner may hold, wait, or be
        # withdrawing a wait), or with requests that change the table
        keep = self.session is not None and not self.ending and (
            self.in_use or self.busy > 0 or bool(self.grants) or any(
                p.kind in _TABLE_KINDS
                for fifo in link.fifos.values() for p in fifo) or any(
                p.kind in _TABLE_KINDS
                for chan in self.chans.values() for p in chan.deferred))
        if not keep:
            self.link = link            # its waiters are answered None
            self._closed(reason)
            self.link = None
            return
        self.suspended = True
        self.reason = reason
        self.noticed = self.loop.time()
        for n, fifo in link.fifos.items():
            chan = self.chans.get(n)
            if chan is not None and fifo:
                chan.limbo.extend(fifo)
                fifo.clear()
        for chan in self.chans.values():
            for pending in chan.limbo:
                if pending.kind == UNLOCK and not pending.fut.done():
                    # the block is left at once: the UNLOCK is settled
                    # by the resume (or by the grace on the server)
                    pending.fut.set_result(None)
        for grant in self.grants:
            grant._set_suspended(True)
        self._arm()
        if self._resumer is None or self._resumer.done():
            self._resumer = self.loop.create_task(self._resume())

    async def _resume(self) -> None:
        """Reconnects with backoff to the server list, in order, and
        RESUMEs, until the session is back, GONE, or surely over."""
        try:
            await self._resume_loop()
        except asyncio.CancelledError:
            # not by _closed: the event loop is ending (asyncio.run's
            # end); nobody waits for a session that cannot come back
            if self.suspended and not self.closed:
                self._resumer = None
                self._closed("the resume was cancelled")
            raise

    async def _resume_loop(self) -> None:
        """The one resumer of this connection: it carries on if the
        transport it resumed on drops again before it is done."""
        loop = self.loop
        backoff = BACKOFF_FIRST
        failures: List[str] = []
        while self.suspended and not self.closed:
            give_up = max(self.window_end(), self.noticed + self.grace)
            for addr in self.core.addrs:
                left = give_up - loop.time()
                if left <= 0 or not self.suspended or self.closed:
                    break
                if self.generation != _fork.generation:
                    return      # a forked child never takes the session
                try:
                    await asyncio.wait_for(self._resume_at(addr),
                                           min(self.core.connect_timeout,
                                               left))
                    backoff = BACKOFF_FIRST
                    break       # resumed (or GONE)
                except asyncio.TimeoutError:
                    failures.append(f"{addr.text}: no answer in time")
                except (OSError, Error) as e:
                    failures.append(f"{addr.text}: {e}")
            if not self.suspended or self.closed:
                continue        # (the while ends, or resumes again)
            left = give_up - loop.time()
            if left <= 0:
                break
            await asyncio.sleep(min(left, backoff * (0.5 + random.random())))
            backoff = min(backoff * 2, BACKOFF_MAX)
        self._resumer = None
        if self.suspended and not self.closed:
            last = "; ".join(failures[-len(self.core.addrs):])
            self._closed(f"{self.reason}; no RESUME within the grace of "
                         f"{self.grace:g} s ({last})")

    async def _resume_at(self, addr: Address) -> None:
        """One attempt: a transport to ``addr``, AUTH, NAME and RESUME.
        Returns once RESUME is answered OK (the transport adopted) or
        GONE (the connection closed); raises otherwise."""
        core = self.core
        sock = await core._socket(self.loop, addr)
        link = await core._link(self, addr, sock)
        settled: List[bool] = []

        def hook(line: Reply) -> None:
            settled.append(self._resumed(link, resume, line))
        try:
            pendings = core._hello_requests(link, resume=self.session)
            resume = pendings[-1]
            resume.hook = hook
            for pending in pendings:
                link.write(pending, 0)
            for pending in pendings:
                reply = await pending.fut
                if reply is None:
                    raise ConnectionFailed(link.reason)
                if pending is resume and settled and settled[0]:
                    return
                parse_reply(reply)
            raise ProtocolError(f"RESUME answered {resume.line!r:.60}")
        except BaseException:
            if not (settled and settled[0]):
                link.drop("could not resume the session there")
            raise

    def _resumed(self, link: Link, resume: Pending, line: Reply) -> bool:
        """RESUME's reply, at once (a waiting LOCK's reply may follow in
        the same read): reconcile, channel by channel, what the client
        believed with what the server says is held and waiting. True
        when settled: resumed on ``link``, or ended (GONE)."""
        if line is None or not line.startswith("OK "):
            if line is not None and line.startswith("ERR GONE"):
                self.ending = True
                self._closed("the server ended the session (GONE): its "
                             "locks were released")
                return True
            return False
        if self.closed:
            link.close(True)            # given up meanwhile: end it now
            return True
        if not self.suspended:          # never: one resumer at a time
            link.drop("resumed twice")
            return False
        try:
            state = json.loads(line[3:])
            entries: Dict[int, Tuple[List[Tuple[int, List[str]]], Any]] = {
                0: (_held(state["held"]), state["waiting"])}
            for c in state.get("channels") or ():
                n = int(c["channel"])
                if n <= 0:
                    raise ValueError(f"channel {n}")
                entries[n] = (_held(c["held"]), c.get("waiting"))
            grace_ms = int(state.get("grace_ms") or 0)
        except (ValueError, KeyError, TypeError) as e:
            link.drop(f"RESUME's reply is not understood: {e}")
            return False
        self.link = link
        self.addr = link.addr
        self.suspended = False
        self.last_ok = resume.sent
        self.resumes += 1
        if grace_ms > 0:
            self.grace = grace_ms / 1000.0
        for n in entries:
            if n not in self.chans:
                # a channel the server knows and the client forgot: its
                # grants are released, its wait withdrawn
                self.free.append(self._chan(n))
        quit = False
        for n, chan in self.chans.items():
            held, waiting = entries.get(n, ((), None))
            if chan._reconcile(link, list(held), waiting) and n == 0:
                quit = True
        for grant in self.grants:
            grant._set_suspended(False)
        if self.retire and not self.grants and not quit:
            # QUIT after the requests above: the session ends once they
            # are answered (a drop before resumes again, to finish them)
            quit_pending = self.send("QUIT", QUIT)

            def ended(line: Reply) -> None:
                if line is not None:
                    self.ending = True
            quit_pending.hook = ended
        elif self.grants:
            self._arm()
        return True


def _command_reply(conn: Conn, line: str, reply: Reply,
                   want_json: bool) -> Any:
    """A command's reply: its value (or JSON object); a reply that is not
    protocol drops the connection (ProtocolError)."""
    if reply is None:
        raise conn.failure("")
    try:
        value = parse_reply(reply)
        return parse_json(value, line.split(" ", 1)[0]) if want_json \
            else value
    except ProtocolError as e:
        conn.violate(str(e))
        raise


def _held(entries: Any) -> List[Tuple[int, List[str]]]:
    """RESUME's ``held`` list: (token, keys) of each grant."""
    held = []
    for g in entries:
        token = g["token"]
        if type(token) is not int or not 0 <= token < TOKEN_LIMIT:
            raise ValueError(f"token {token!r}")
        held.append((token, [str(k) for k in g["keys"]]))
    return held


def _wake_all(waiters: List["asyncio.Future[None]"], _: Any) -> None:
    """The opening of a connection is done: its waiters go on."""
    for waiter in waiters:
        if not waiter.done():
            waiter.set_result(None)
    waiters.clear()


def _retrieve(task: "asyncio.Task[Any]") -> None:
    """Marks a task's exception seen (its awaiters have theirs)."""
    if not task.cancelled():
        task.exception()


def _current_task() -> "Optional[asyncio.Task[Any]]":
    try:
        return asyncio.current_task()
    except RuntimeError:
        return None


class HandleBase:
    """What both faces' handles share: the token, the keys, lost-ness."""

    def __init__(self, token: int, keys: Tuple[Key, ...],
                 names: List[str], conn: Chan, owner: "Owner",
                 ttl_ms: Optional[int]) -> None:
        #: The fencing token of the grant: larger than every earlier one.
        self.token = token
        #: The keys as the caller gave them.
        self.keys = keys
        self._names = names
        self._conn = conn
        self._owner = owner
        self._ttl_ms = ttl_ms
        self._timer: Optional[Union[asyncio.TimerHandle,
                                    "asyncio.Task[None]"]] = None
        self._released = False
        self._generation = _fork.generation
        self._lost_reason: Optional[str] = None
        self._suspended = False
        self._confirming = False
        # released on the server by the client already (a lost grant that
        # a resume found still held): its release sends nothing
        self._unlocked = False

    @property
    def lost_reason(self) -> Optional[str]:
        """Why the lock was lost, or None while it is held."""
        return self._lost_reason

    @property
    def inherited(self) -> bool:
        """True in a forked child: the lock is the parent's."""
        return self._generation != _fork.generation

    def _set_lost(self, reason: str, released: bool = False) -> None:
        if self._lost_reason is not None or (self._released and
                                             not released):
            return
        self._lost_reason = reason
        self._stop_timer()
        self._set_suspended(False)
        self._signal_lost()

    def _set_suspended(self, on: bool) -> None:
        if on and (self._lost_reason is not None or self._released):
            return
        if on != self._suspended:
            self._suspended = on
            self._signal_suspended(on)

    def _signal_lost(self) -> None:
        raise NotImplementedError

    def _signal_suspended(self, on: bool) -> None:
        raise NotImplementedError

    def _stop_timer(self) -> None:
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()

    def _lost_error(self) -> LockLost:
        keys = " ".join(self._names)
        return LockLost(f"lost the lock on {keys} (token {self.token}): "
                        f"{self._lost_reason}")

    def __repr__(self) -> str:
        state = ("released" if self._released else
                 "lost" if self._lost_reason else
                 "suspended" if self._suspended else "held")
        return (f"<{type(self).__name__} {' '.join(self._names)} "
                f"token={self.token} {state}>")


HandleFactory = Callable[[int, Tuple[Key, ...], List[str], Chan, "Owner",
                          Optional[int]], HandleBase]


class _Failover:
    """One acquire's walk of the server list after refusals (ERR BACKEND,
    ERR SHUTDOWN): the servers it tried and why, and its timeout."""

    __slots__ = ("start", "line", "timeout_ms", "tried", "failures")

    def __init__(self, start: float, line: str) -> None:
        self.start = start          # (the loop's clock) the first LOCK
        self.line = line            # the LOCK as first sent
        m = _TIMEOUT_OPT.search(line)
        #: its timeout= (ms), or None: as the server's default says
        self.timeout_ms = int(m.group(1)) if m else None
        self.tried: Set[Address] = set()
        self.failures: List[str] = []


class Owner:
    """A task's or thread's channel while it holds locks (``key``: the
    task or thread, while it does)."""

    __slots__ = ("conn", "depth", "key")

    def __init__(self, conn: Chan, key: Any) -> None:
        self.conn = conn
        self.depth = 0
        self.key = key


def _read_secret(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        secret = f.readline().rstrip("\r\n")
    if not secret:
        raise ValueError(f"{path}: holds no secret on its first line")
    return secret


class Core:
    """Connections to one server list, and the locks taken through them."""

    def __init__(self, server: Optional[str], *, name: Optional[str],
                 secret: Optional[str], auth_file: Optional[str],
                 ssl_context: Optional[ssl.SSLContext], max_idle: int,
                 connect_timeout: float, cancel_timeout: float,
                 session: Optional[float] = None,
                 channels: bool = True,
                 reply_timeout: Optional[float] = REPLY_TIMEOUT_DEFAULT
                 ) -> None:
        if max_idle < 0:
            raise ValueError(f"max_idle={max_idle}: want >= 0")
        #: The grace of the session each connection opens, in ms (None:
        #: plain connections, whose locks end with them).
        self.session_ms = (None if session is None else
                           seconds_to_ms("session", session, 1))
        self.addrs = parse_servers(server)
        #: The working server: new connections try the list from this
        #: index, round from its start. A LOCK refused with ERR BACKEND or
        #: ERR SHUTDOWN moves it past the refusing server (failover).
        self.at = 0
        self.name = check_name(name) if name is not None else None
        if secret is None:
            path = auth_file or os.environ.get("KEYLOCK_AUTH_FILE")
            secret = _read_secret(path) if path else None
        self.secret = secret
        self.ssl_context = ssl_context
        self.max_idle = max_idle
        self.connect_timeout = connect_timeout
        self.cancel_timeout = cancel_timeout
        if reply_timeout is not None and not (
                isinstance(reply_timeout, (int, float)) and
                0 < reply_timeout < math.inf):
            raise ValueError(f"reply_timeout={reply_timeout!r}: want "
                             "seconds > 0, or None")
        #: Seconds a reply may take past what the request itself waits
        #: (a LOCK's timeout), else the server is taken for stopped and
        #: the connection dropped (None: no deadline).
        self.reply_timeout = (None if reply_timeout is None
                              else float(reply_timeout))
        if not isinstance(channels, bool):
            raise TypeError(f"channels={channels!r}: want True or False")
        #: Whether the owners ride channels of one connection where the
        #: server speaks them (else: a connection per owner).
        self.channels = channels
        self._reset()

    def _reset(self) -> None:
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread = 0        # the thread that runs self.loop
        self.generation = _fork.generation
        self.pool: List[Conn] = []
        self.conns: Set[Conn] = set()
        # with channels: the connections whose channels the owners ride
        self.muxes: List[Conn] = []
        self.chan_mode: Optional[bool] = None   # None: not known yet
        # the openings of a connection with channels under way, one per
        # set of servers to avoid (none; those a failover has tried), and
        # the futures of those waiting for each
        self._openings: Dict[FrozenSet[Address],
                             Tuple["asyncio.Task[Conn]",
                                   List["asyncio.Future[None]"]]] = {}
        # the owners that hold (or wait for) something now, by task or
        # thread; one that holds nothing is forgotten
        self.owners: Dict[Any, Owner] = {}

    def current_task(self) -> "Optional[asyncio.Task[Any]]":
        """The task running now, as ``asyncio.current_task()``, without
        asking asyncio for the running loop in the common case (that
        costs a getpid() system call each time): when this Core's loop
        has a task running in this very thread, this code runs in it
        (asyncio runs no loop inside another's task in one thread)."""
        loop = self.loop
        if loop is not None and self._thread == threading.get_ident():
            task = asyncio.current_task(loop)
            if task is not None:
                return task
        return asyncio.current_task()

    def _enter(self) -> asyncio.AbstractEventLoop:
        """The running loop; state of another process or loop is dropped."""
        loop = self.loop
        if loop is not None and self._thread == threading.get_ident() and \
                self.generation == _fork.generation and \
                asyncio.current_task(loop) is not None:
            return loop         # (see current_task)
        loop = asyncio.get_running_loop()
        if self.generation != _fork.generation:
            _fork.orphan((self.pool, self.conns, self.owners))
            self._reset()
        if self.loop is not loop:
            if self.loop is not None and not self.loop.is_closed() and \
                    any(o.depth for o in self.owners.values()):
                raise RuntimeError("this KeyedLock holds locks on another "
                                   "event loop")
            for conn in list(self.conns):
                conn.closed = True      # of a loop that is gone: no events
                if conn.sock is not None:
                    conn.sock.close()
            self._reset()
            self.loop = loop
        self._thread = threading.get_ident()
        return loop

    # Connections

    def _conn_closed(self, conn: Conn) -> None:
        self.conns.discard(conn)
        if conn.mux and conn in self.muxes:
            self.muxes.remove(conn)

    async def _checkout(self, loop: asyncio.AbstractEventLoop,
                        avoid: FrozenSet[Address] = frozenset()) -> Chan:
        """A channel for an owner that holds nothing: of the shared
        connection where channels are used, else a pooled or new
        connection's own; on a server not in ``avoid`` (those a failover
        has tried already)."""
        if self.channels and self.chan_mode is not False:
            mux = await self._mux(loop, CHANNELS_PER_CONN, avoid)
            if mux is not None:
                return mux.take_chan()
        kept: List[Conn] = []
        try:
            while self.pool:
                conn = self.pool.pop()
                if conn.closed:
                    continue
                if conn.suspended:
                    conn.retire = True  # out of the pool: QUIT once resumed
                    continue
                if conn.addr in avoid:
                    kept.append(conn)
                    continue
                conn.in_use = True
                return conn.ch0
        finally:
            self.pool.extend(reversed(kept))
        conn = await self._connect(loop, avoid=avoid)
        conn.in_use = True
        return conn.ch0

    async def _mux(self, loop: asyncio.AbstractEventLoop, room: int,
                   avoid: FrozenSet[Address] = frozenset()
                   ) -> Optional[Conn]:
        """A connection with channels and fewer than ``room`` of them
        given out, on a server not in ``avoid``, opened if need be (one
        opening at a time per ``avoid``, whoever asks); None when the
        server speaks no channels."""
        while True:
            now = loop.time()
            for mux in self.muxes:
                # (one being resumed past its window is not lent out:
                # its resume may still fail)
                if mux.busy < room and not mux.closed and not (
                        mux.suspended and now >= mux.window_end()) and \
                        mux.addr not in avoid:
                    return mux
            entry = self._openings.get(avoid)
            if entry is None:
                opening = loop.create_task(self._open_mux(loop, avoid))
                opening.add_done_callback(_retrieve)
                entry = self._openings[avoid] = (opening, [])
                opening.add_done_callback(
                    functools.partial(_wake_all, entry[1]))
            opening, waiters = entry
            try:
                if not opening.done():
                    # a future of its own (a cancelled task cancels it,
                    # not the opening): cheaper than asyncio.shield()
                    # for the thousand tasks a new KeyedLock may start
                    waiter = loop.create_future()
                    waiters.append(waiter)
                    await waiter
                opening.result()        # its error, if it failed
            finally:
                if opening.done() and \
                        self._openings.get(avoid, (None,))[0] is opening:
                    del self._openings[avoid]
            if self.chan_mode is False:
                return None

    async def _open_mux(self, loop: asyncio.AbstractEventLoop,
                        avoid: FrozenSet[Address] = frozenset()) -> Conn:
        conn = await self._connect(loop, probe=True, avoid=avoid)
        if conn.mux:
            self.chan_mode = True
            if not conn.closed:
                self.muxes.append(conn)
        else:
            # a server without channels: a connection per owner, and
            # this one the first of the pool
            self.chan_mode = False
            self._checkin(conn.ch0)
        return conn

    def _let_go(self, st: Owner) -> None:
        """The owner holds nothing any more: it is forgotten, its channel
        is free."""
        if self.owners.get(st.key) is st:
            del self.owners[st.key]
        st.key = None
        self._checkin(st.conn)

    def _checkin(self, chan: Chan) -> None:
        """The owner of ``chan`` holds nothing any more."""
        conn = chan.conn
        if conn.mux:
            conn.give_back(chan)
            if conn.cut and not conn.busy:
                self._close_cut(conn)
            return
        conn.in_use = False
        if conn.closed:
            return
        if conn.cut and not conn.suspended:
            conn.close()            # its server refused: not pooled
            return
        if conn.suspended:
            conn.retire = True      # ended (QUIT) once it is resumed
        elif conn.grants:
            if conn.session is not None:
                conn.close()        # QUIT: the session ends at once
            else:
                conn.abort("returned to the pool with locks held")
        elif len(self.pool) >= self.max_idle:
            conn.close()
        else:
            self.pool.append(conn)

    def _cut_off(self, addr: Address) -> None:
        """``addr`` refused a LOCK with ERR BACKEND or ERR SHUTDOWN (a
        front end cut off from its store, a stopping server): while it is
        the working server, the next one of the list becomes it. Its
        connections take no new owner: idle ones are closed now, the
        others once their owners let go (their locks are theirs until
        that server drops them)."""
        addrs = self.addrs
        for _ in addrs:
            if addrs[self.at] != addr:
                break
            self.at = (self.at + 1) % len(addrs)
        for conn in [c for c in self.muxes if c.addr == addr]:
            self.muxes.remove(conn)
            conn.cut = True
            if not conn.busy:
                self._close_cut(conn)
        for conn in [c for c in self.pool if c.addr == addr]:
            self.pool.remove(conn)
            conn.cut = True
            if not conn.suspended:
                conn.close()
        for conn in self.conns:
            if conn.addr == addr:
                conn.cut = True     # in use: closed at its check-in

    def _close_cut(self, mux: Conn) -> None:
        """Closes a connection with channels whose server refused, once
        the requests of its channel 0 (STATS, INFO) are answered."""
        if mux.closed or mux.busy:
            return
        link = mux.link
        if link is not None and link.waiters and not mux.suspended:
            last = link.waiters[-1]
            then = last.hook

            def again(line: Reply) -> None:
                if then is not None:
                    then(line)
                mux.loop.call_soon(self._close_cut, mux)
            last.hook = again
            return
        if mux.suspended:
            mux.retire = True       # ended (QUIT) once it is resumed
            return
        mux.close()

    async def _connect(self, loop: asyncio.AbstractEventLoop,
                       probe: bool = False,
                       avoid: FrozenSet[Address] = frozenset()) -> Conn:
        """A connection to the first server that answers, trying the list
        from the working server round to its start, but those in
        ``avoid``."""
        failures = []
        addrs = self.addrs
        at = self.at
        for addr in addrs[at:] + addrs[:at]:
            if addr in avoid:
                continue
            try:
                return await asyncio.wait_for(self._open(loop, addr, probe),
                                              self.connect_timeout)
            except AuthError:
                raise
            except asyncio.TimeoutError:
                failures.append(f"{addr.text}: no answer in "
                                f"{self.connect_timeout:g} s")
            except (OSError, Error) as e:
                failures.append(f"{addr.text}: {e}")
        raise ConnectionFailed("cannot reach keylockd: " +
                               "; ".join(failures))

    async def _open(self, loop: asyncio.AbstractEventLoop,
                    addr: Address, probe: bool) -> Conn:
        sock = await self._socket(loop, addr)
        conn = Conn(self, loop, self._conn_closed)
        conn.addr = addr
        try:
            conn.link = await self._link(conn, addr, sock)
            self.conns.add(conn)
            await self._hello(conn, probe)
        except BaseException:
            conn.abort("could not set up the connection")
            sock.close()
            raise
        return conn

    async def _link(self, conn: Conn, addr: Address,
                    sock: socket.socket) -> Link:
        """A transport of ``conn`` over the connected ``sock``."""
        link = Link(conn, addr, sock)
        try:
            if addr.unix:
                await conn.loop.create_unix_connection(lambda: link,
                                                       sock=sock)
            else:
                ctx = self._tls_context() if addr.tls else None
                await conn.loop.create_connection(
                    lambda: link, sock=sock, ssl=ctx,
                    server_hostname=addr.host if ctx else None)
        except BaseException:
            sock.close()
            raise
        return link

    async def _socket(self, loop: asyncio.AbstractEventLoop,
                      addr: Address) -> socket.socket:
        if addr.unix:
            targets: List[Tuple[int, Any]] = [(socket.AF_UNIX, addr.host)]
        else:
            try:
                # an address needs no resolver (whose thread, on a busy
                # machine, is most of a first connection's time)
                ip = ipaddress.ip_address(addr.host)
                targets = [(socket.AF_INET6, (addr.host, addr.port, 0, 0))
                           if ip.version == 6 else
                           (socket.AF_INET, (addr.host, addr.port))]
            except ValueError:
                infos = await loop.getaddrinfo(addr.host, addr.port,
                                               type=socket.SOCK_STREAM)
                targets = [(info[0], info[4]) for info in infos]
        error: Optional[OSError] = None
        for family, target in targets:
            sock = socket.socket(family, socket.SOCK_STREAM)
            _fork.track(sock)
            sock.setblocking(False)
            try:
                await loop.sock_connect(sock, target)
            except OSError as e:
                sock.close()
                error = e
                continue
            except BaseException:
                sock.close()
                raise
            if family != socket.AF_UNIX:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            return sock
        raise error if error else OSError(f"{addr.host}: no address")

    def _tls_context(self) -> ssl.SSLContext:
        if self.ssl_context is None:
            env = os.environ
            ctx = ssl.create_default_context(
                cafile=env.get("KEYLOCK_TLS_CA") or None)
            if env.get("KEYLOCK_TLS_CERT"):
                ctx.load_cert_chain(env["KEYLOCK_TLS_CERT"],
                                    env.get("KEYLOCK_TLS_KEY") or None)
            self.ssl_context = ctx
        return self.ssl_context

    def _hello_requests(self, link: Link,
                        resume: Optional[str] = None) -> List[Pending]:
        """AUTH (with a secret), NAME, then SESSION and PING, or RESUME
        (nothing after it: a waiting LOCK's reply may come next)."""
        name = self.name or default_name(
            "python", socket.gethostname(), os.getpid())
        lines = []
        if self.secret is not None:
            lines.append(f"AUTH {self.secret}")
        lines.append(f"NAME {name}")
        if resume is not None:
            lines.append(f"RESUME {resume}")
        else:
            if self.session_ms is not None:
                lines.append(f"SESSION grace={self.session_ms}")
            lines.append("PING")
        return [Pending(link.conn.loop.create_future(), line, OTHER)
                for line in lines]

    async def _hello(self, conn: Conn, probe: bool) -> None:
        """AUTH, NAME, SESSION and PING in one write: the server answers,
        or the next one of the list is tried. With ``probe``, a PING on
        channel 1 too: ``@1 OK PONG`` says the server speaks channels
        (one without them answers ERR SYNTAX on channel 0)."""
        link = conn.link
        assert link is not None
        pendings = self._hello_requests(link)
        for pending in pendings:
            link.write(pending, 0)
        ping1: Optional[Pending] = None
        if probe:
            ping1 = Pending(conn.loop.create_future(), "PING", PING)
            link.write(ping1, 1)
            link.probe = ping1
        for pending in pendings:
            reply = await pending.fut
            if reply is None:
                raise conn.failure("", where=False)
            try:
                value = parse_reply(reply)
            except ProtocolError as e:
                conn.violate(str(e))
                raise
            if pending.request.startswith("SESSION "):
                if not value:
                    raise ProtocolError(f"SESSION answered {reply!r:.60}")
                conn.session = value
                assert self.session_ms is not None
                conn.grace = self.session_ms / 1000.0
        if ping1 is not None:
            reply = await ping1.fut
            if reply is None:
                raise conn.failure("", where=False)
            conn.mux = reply == "OK PONG"

    # Locks

    async def acquire(self, owner: Any, keys: Tuple[Key, ...],
                      names: List[str], line: str, ttl_ms: Optional[int],
                      refresh: bool, factory: HandleFactory) -> HandleBase:
        """LOCK for ``owner``, through its connection if it holds locks.
        An owner that holds nothing whose LOCK is refused with ERR
        BACKEND or ERR SHUTDOWN moves to the next server of the list
        (``_failover``)."""
        loop = self._enter()
        st = self.owners.get(owner)
        if st is not None and st.depth:
            conn = st.conn
            if conn.conn.closed:
                raise LockLost(f"the connection holding this task's other "
                               f"locks is gone ({conn.reason}); leave "
                               "their blocks first (no silent reconnect)")
        else:
            muxes = self.muxes
            if muxes and muxes[0].busy < CHANNELS_PER_CONN and \
                    not muxes[0].closed and not muxes[0].suspended:
                conn = muxes[0].take_chan()     # the common case
            else:
                conn = await self._checkout(loop)
                for _ in range(2):
                    if not conn.conn.closed:
                        break
                    conn = await self._checkout(loop)   # dropped, unused
            st = Owner(conn, owner)
            self.owners[owner] = st
        failover: Optional[_Failover] = None
        sent = loop.time()
        while True:
            st.depth += 1
            try:
                pending = conn.send(line, LOCK)
                try:
                    reply = await pending.fut
                except asyncio.CancelledError:
                    # CANCEL leaves now (or once the session is resumed);
                    # the rest must finish whatever comes
                    pending.cancelling = True
                    cancel = conn.request("CANCEL", CANCEL)
                    await self._settle(conn, self._withdraw(
                        conn, pending, cancel, names))
                    raise
                if reply is None:
                    if st.depth > 1:
                        raise LockLost(f"the connection to "
                                       f"{conn.addr.text} dropped "
                                       f"({conn.reason}) with this task's "
                                       "locks")
                    raise conn.failure(" before LOCK was answered")
                if reply[:3] == "OK ":
                    t = parse_token(reply[3:])  # the grant (and its token)
                    if t is not None:
                        token = t
                        break
                try:
                    parse_reply(reply)      # ERR: raises
                    raise ProtocolError(f"LOCK answered {reply[:60]!r}: no "
                                        "token (decimal, below 2^63)")
                except ProtocolError as e:
                    conn.conn.violate(str(e))
                    raise
            except (Backend, Shutdown) as e:
                alone = st.depth == 1       # the owner holds nothing else
                st.depth -= 1
                if not st.depth:
                    self._let_go(st)
                if not alone or conn.conn.session is not None or \
                        len(set(self.addrs)) < 2:
                    raise       # as libkeylock: no failover (README)
                if failover is None:
                    failover = _Failover(sent, line)
                conn, line = await self._failover(loop, failover, conn, e)
                st = Owner(conn, owner)
                self.owners[owner] = st
            except BaseException:
                st.depth -= 1
                if not st.depth:
                    self._let_go(st)
                raise
        handle = factory(token, keys, names, conn, st, ttl_ms)
        conn.add_grant(handle)
        if ttl_ms is not None:
            if refresh:
                handle._timer = loop.create_task(self._refresh(handle))
            else:
                handle._timer = loop.call_later(
                    ttl_ms / 1000.0, handle._set_lost,
                    f"its ttl of {ttl_ms} ms ran out")
        if conn.conn.session is not None and \
                loop.time() - conn.last_ok >= conn.grace / 3:
            await self._confirm(conn, handle)
        return handle

    async def _failover(self, loop: asyncio.AbstractEventLoop,
                        fo: "_Failover", conn: Chan,
                        refusal: Error) -> Tuple[Chan, str]:
        """``conn``'s server refused the LOCK of an owner that holds
        nothing (ERR BACKEND: a front end cut off from its store; ERR
        SHUTDOWN: a stopping server), as libkeylock's keylock_failover():
        that server is cut off (``_cut_off``) and a channel on the next
        server of the list that this acquire has not tried is returned,
        with the LOCK line for what is left of its timeout. Raises the
        refusal's class, naming every server tried and why, once none is
        left (or no time is)."""
        addr = conn.addr
        fo.tried.add(addr)
        fo.failures.append(f"{addr.text}: {refusal}")
        self._cut_off(addr)
        code = type(refusal)
        if all(a in fo.tried for a in self.addrs):
            raise code("no server of the list could grant it: " +
                       "; ".join(fo.failures))
        _log.info("%s: %s; trying the next server", addr.text, refusal)
        try:
            chan = await self._checkout(loop, frozenset(fo.tried))
        except ConnectionFailed as e:
            raise code("; ".join(fo.failures) + f"; {e}") from None
        line = fo.line
        if fo.timeout_ms:
            # what is left of it (timeout=0 stays: granted only if free)
            left = math.ceil((fo.start + fo.timeout_ms / 1e3 - loop.time())
                             * 1000.0)
            if left <= 0:
                self._checkin(chan)
                raise code("; ".join(fo.failures) + f"; its timeout of "
                           f"{fo.timeout_ms} ms ran out before the next "
                           "server was tried")
            line = _TIMEOUT_OPT.sub(f" timeout={left}", line, 1)
        return chan, line

    async def _confirm(self, conn: Chan, handle: HandleBase) -> None:
        """A grant whose LOCK waited a third of the grace or more: by the
        client's rule it counts only from the send time of a request
        answered after it, so a PING is answered before the caller gets
        the handle (one round trip; a quick grant needs none)."""
        handle._confirming = True
        ping = conn.send("PING", PING)
        try:
            reply = await ping.fut
        except BaseException:
            handle._confirming = False
            await self._settle(conn, self.release(handle))
            raise
        handle._confirming = False
        if reply is None or handle.lost_reason is not None:
            error = (handle._lost_error() if handle.lost_reason is not None
                     else conn.failure(""))
            await self._settle(conn, self.release(handle))
            raise error
        conn._arm()

    async def _withdraw(self, conn: Chan, lock: Pending,
                        cancel: "asyncio.Future[Reply]",
                        names: List[str]) -> None:
        """After CANCEL: the two replies, in order, say whether the grant
        won the race (keylockd-protocol(7), CANCEL); a grant is released."""
        if lock.done:
            reply = lock.line           # granted before the cancellation
        else:
            if lock.fut.done():         # cancelled with the task
                lock.fut = conn.loop.create_future()
            reply = await lock.fut
        await cancel
        if reply is not None and reply.startswith("OK"):
            unlock = conn.send("UNLOCK " + " ".join(unique(names)), UNLOCK)
            unlock.token = parse_token(reply[3:])
            await unlock.fut

    async def _settle(self, conn: Chan,
                      work: Coroutine[Any, Any, None]) -> None:
        """Runs ``work`` to its end even if the caller is cancelled again;
        past cancel_timeout the connection is dropped, which withdraws and
        releases everything on it (with a session: when its grace runs
        out). While a session is being resumed the clock waits."""
        loop = asyncio.get_running_loop()
        task = loop.create_task(work)
        deadline = loop.time() + self.cancel_timeout
        while not task.done():
            if conn.suspended:
                # the withdrawal waits for the resume (bounded by the
                # session's grace); its clock starts after it
                deadline = loop.time() + self.cancel_timeout
            left = deadline - loop.time()
            if conn.suspended:
                left = min(left, SUSPENDED_POLL)
            elif left <= 0:
                conn.abort(f"no answer to CANCEL in "
                           f"{self.cancel_timeout:g} s")
                left = self.cancel_timeout
            try:
                await asyncio.wait((task,), timeout=left)
            except asyncio.CancelledError:
                continue
        if not task.cancelled():
            task.exception()

    async def release(self, handle: HandleBase) -> None:
        """UNLOCK the handle's keys, and wait for the reply: once the block
        is left, the server has let go (another process told so at once
        finds the key free), and a ttl that ran out is a LockLost. The
        request is written before the first await, so a cancelled release
        still releases."""
        if handle.inherited or handle._released:
            return
        self._enter()
        if handle._timer is not None:
            handle._stop_timer()
        handle._released = True
        conn, st = handle._conn, handle._owner
        conn.drop_grant(handle)
        try:
            if conn.conn.closed or handle._unlocked:
                return
            names = handle._names
            unlock = conn.send("UNLOCK " + (names[0] if len(names) == 1
                                            else " ".join(unique(names))),
                               UNLOCK)
            unlock.token = handle.token
            if conn.conn.suspended:
                return      # sent once resumed; the server's grace else
            reply = await unlock.fut    # cancelled: the reply is dropped
            if reply is None or reply.startswith("OK "):
                pass
            elif reply.startswith("ERR NOTHELD"):
                handle._set_lost("its ttl ran out before the release "
                                 f"({reply[12:]})", released=True)
            else:
                parse_reply(reply)
        finally:
            st.depth -= 1
            if not st.depth:
                self._let_go(st)

    async def _refresh(self, handle: HandleBase) -> None:
        """REFRESH every third of the ttl; a failure is a lost lock."""
        loop = asyncio.get_running_loop()
        assert handle._ttl_ms is not None
        ttl = handle._ttl_ms / 1000.0
        names = unique(handle._names)
        line = f"REFRESH {' '.join(names)} ttl={handle._ttl_ms}"
        good_until = loop.time() + ttl
        conn = handle._conn
        while True:
            await asyncio.sleep(ttl / 3)
            sent = loop.time()
            refresh = conn.send(line, REFRESH)
            refresh.names = names
            fut = refresh.fut
            try:
                reply = await asyncio.wait_for(fut, good_until - sent)
            except asyncio.TimeoutError:
                handle._set_lost("REFRESH was not answered before the ttl "
                                 "ran out")
                return
            if reply is None:
                return          # Conn._closed has marked it lost
            try:
                count = parse_reply(reply)
            except Error as e:
                handle._set_lost(f"REFRESH failed: {e}")
                return
            if count != str(len(names)):
                handle._set_lost(f"REFRESH kept {count} of {len(names)} "
                                 "keys")
                return
            good_until = sent + ttl

    # Observability

    async def command(self, line: str) -> str:
        """One request on channel 0 of the shared connection, or on an
        idle connection; its reply's value."""
        value: str = await self._command(line, False)
        return value

    async def command_json(self, line: str) -> Dict[str, Any]:
        """A request whose reply is ``OK {json object}`` (STATS, INFO):
        the object; anything else is a ProtocolError."""
        value: Dict[str, Any] = await self._command(line, True)
        return value

    async def _command(self, line: str, want_json: bool) -> Any:
        loop = self._enter()
        mux = None
        if self.channels and self.chan_mode is not False:
            mux = await self._mux(loop, CHANNELS_PER_CONN + 1)
        if mux is not None:
            reply = await mux.request(line)
            return _command_reply(mux, line, reply, want_json)
        chan = await self._checkout(loop)
        try:
            reply = await chan.request(line)
            return _command_reply(chan.conn, line, reply, want_json)
        finally:
            self._checkin(chan)

    def suspended(self) -> int:
        """Connections whose session is being resumed now."""
        return sum(1 for c in self.conns if c.suspended)

    async def aclose(self) -> None:
        """Closes every connection; locks still held are lost. A
        connection whose session is being resumed is closed once the
        resume has settled (at most ``cancel_timeout``, and never past
        the session's window): what it still has to send (an UNLOCK of a
        block left while it was down, the release of a grant that came
        meanwhile) goes out before the QUIT, so nothing is left to the
        session's expiry."""
        if self.generation != _fork.generation or self.loop is None:
            return
        if self.loop is not asyncio.get_running_loop():
            self._enter()
            return
        resuming = [c._resumer for c in self.conns
                    if c.suspended and c._resumer is not None and
                    not c._resumer.done()]
        if resuming:
            await asyncio.wait(resuming, timeout=self.cancel_timeout)
        for conn in list(self.conns):
            conn.close()
        self.pool.clear()
        self.muxes.clear()

    def idle(self) -> int:
        """Connections open and used by nobody now: in the pool, or with
        channels and none of them given out."""
        return sum(1 for c in self.pool if not c.closed) + sum(
            1 for c in self.muxes if not c.closed and not c.busy)

