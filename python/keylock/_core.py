# keylock, the Python client of keylockd. SPDX-License-Identifier: MIT
"""The client's engine, on an asyncio event loop: connections, the pool,
who owns which connection, LOCK and its withdrawal, release, ttl.

Both faces run this: ``keylock.aio`` on the caller's loop, the threading
face on one private loop thread (``_sync``). Everything here runs on that
one loop, so no state needs a lock. Rules it keeps (keylockd-protocol(7)):

- one connection per owner (a task, or a thread) while the owner holds
  anything, so that the server's HELD and DEADLOCK checks see the owner;
  no connection ever carries a waiting LOCK of two owners;
- a connection that drops marks every lock it held lost at once, and is
  never replaced behind the back of an owner that still holds locks;
- a LOCK whose caller stops waiting is withdrawn with CANCEL, and a grant
  that won the race is released before the caller hears of the
  cancellation (CANCEL's section of the man page).
"""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
import weakref
from collections import deque
from typing import (Any, Callable, Coroutine, Deque, List, Optional,
                    Set, Tuple, Union)

from . import _fork
from ._errors import (AuthError, ConnectionFailed, Error, LockLost,
                      ProtocolError)
from ._wire import (Address, Key, check_name, default_name, parse_reply,
                    parse_servers, unique)

REPLY_MAX = 1 << 20          # bytes of one reply line (INFO lists stop at 1000)
MAX_IDLE_DEFAULT = 8
CONNECT_TIMEOUT_DEFAULT = 10.0
CANCEL_TIMEOUT_DEFAULT = 10.0

# A reply line, or None: the connection closed before it came.
Reply = Optional[str]


class Pending:
    """A request whose reply is to come. ``fut`` is what the caller
    awaits; the reply is kept in ``line`` even if that future was
    cancelled with its task, for whoever settles the request then."""

    __slots__ = ("fut", "line", "done")

    def __init__(self, fut: "asyncio.Future[Reply]") -> None:
        self.fut = fut
        self.line: Reply = None
        self.done = False

    def answer(self, line: Reply) -> None:
        self.line = line
        self.done = True
        if not self.fut.done():
            self.fut.set_result(line)


class Conn(asyncio.Protocol):
    """One connection: a FIFO of pending replies over one transport."""

    def __init__(self, loop: asyncio.AbstractEventLoop, addr: Address,
                 sock: socket.socket,
                 on_close: Callable[["Conn"], None]) -> None:
        self.loop = loop
        self.addr = addr
        self.sock = sock
        self.transport: Optional[asyncio.Transport] = None
        self.waiters: Deque[Pending] = deque()
        self.grants: Set[HandleBase] = set()
        self.closed = False
        self.reason = ""
        self._buf = b""
        self._on_close = on_close

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        buf = self._buf + data if self._buf else data
        start = 0
        while True:
            nl = buf.find(b"\n", start)
            if nl < 0:
                break
            end = nl - 1 if nl > start and buf[nl - 1] == 13 else nl
            line = buf[start:end].decode("utf-8", "replace")
            start = nl + 1
            if not self.waiters:
                self.abort("the server sent a line nobody asked for: "
                           f"{line[:60]!r}")
                return
            self.waiters.popleft().answer(line)
        self._buf = buf[start:]
        if len(self._buf) > REPLY_MAX:
            self.abort(f"a reply line over {REPLY_MAX} bytes")

    def eof_received(self) -> bool:
        self._closed("the server closed the connection")
        return False

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self._closed(f"{exc}" if exc else "the connection closed")

    def send(self, line: str) -> Pending:
        """Sends one request; its reply line (None: the connection closed
        first) comes in the Pending."""
        pending = Pending(self.loop.create_future())
        if self.closed or self.transport is None:
            pending.answer(None)
            return pending
        self.waiters.append(pending)
        self.transport.write(line.encode("utf-8") + b"\n")
        return pending

    def request(self, line: str) -> "asyncio.Future[Reply]":
        """Sends one request; the future gets its reply line, or None. A
        cancelled awaiter drops the reply; the order stays intact."""
        return self.send(line).fut

    def abort(self, reason: str) -> None:
        """Drops the connection now (the server releases its locks)."""
        self._closed(reason)
        if self.transport is not None:
            self.transport.abort()

    def close(self) -> None:
        """Closes after the queued requests are written."""
        self._closed("closed by the client")
        if self.transport is not None:
            self.transport.close()

    def _closed(self, reason: str) -> None:
        if self.closed:
            return
        self.closed = True
        self.reason = reason
        while self.waiters:
            self.waiters.popleft().answer(None)
        for grant in list(self.grants):
            grant._set_lost(f"the connection to {self.addr.text} is gone "
                            f"({reason}): the server has released it")
        self.grants.clear()
        self._on_close(self)


class HandleBase:
    """What both faces' handles share: the token, the keys, lost-ness."""

    def __init__(self, token: int, keys: Tuple[Key, ...],
                 names: List[str], conn: Conn, owner: "Owner",
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
        self._signal_lost()

    def _signal_lost(self) -> None:
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
                 "lost" if self._lost_reason else "held")
        return (f"<{type(self).__name__} {' '.join(self._names)} "
                f"token={self.token} {state}>")


HandleFactory = Callable[[int, Tuple[Key, ...], List[str], Conn, "Owner",
                          Optional[int]], HandleBase]


class Owner:
    """A task's or thread's connection while it holds locks."""

    __slots__ = ("conn", "depth", "__weakref__")

    def __init__(self, conn: Conn) -> None:
        self.conn = conn
        self.depth = 0


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
                 connect_timeout: float, cancel_timeout: float) -> None:
        if max_idle < 0:
            raise ValueError(f"max_idle={max_idle}: want >= 0")
        self.addrs = parse_servers(server)
        self.name = check_name(name) if name is not None else None
        if secret is None:
            path = auth_file or os.environ.get("KEYLOCK_AUTH_FILE")
            secret = _read_secret(path) if path else None
        self.secret = secret
        self.ssl_context = ssl_context
        self.max_idle = max_idle
        self.connect_timeout = connect_timeout
        self.cancel_timeout = cancel_timeout
        self._reset()

    def _reset(self) -> None:
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self.generation = _fork.generation
        self.pool: List[Conn] = []
        self.conns: Set[Conn] = set()
        self.owners: "weakref.WeakKeyDictionary[Any, Owner]" = (
            weakref.WeakKeyDictionary())

    def _enter(self) -> asyncio.AbstractEventLoop:
        """The running loop; state of another process or loop is dropped."""
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
                conn.sock.close()
            self._reset()
            self.loop = loop
        return loop

    # Connections

    def _conn_closed(self, conn: Conn) -> None:
        self.conns.discard(conn)

    async def _checkout(self, loop: asyncio.AbstractEventLoop) -> Conn:
        while self.pool:
            conn = self.pool.pop()
            if not conn.closed:
                return conn
        return await self._connect(loop)

    def _checkin(self, conn: Conn) -> None:
        if conn.closed:
            return
        if conn.grants:
            conn.abort("returned to the pool with locks held")
        elif len(self.pool) >= self.max_idle:
            conn.close()
        else:
            self.pool.append(conn)

    async def _connect(self, loop: asyncio.AbstractEventLoop) -> Conn:
        failures = []
        for addr in self.addrs:
            try:
                return await asyncio.wait_for(self._open(loop, addr),
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
                    addr: Address) -> Conn:
        sock = await self._socket(loop, addr)
        conn = Conn(loop, addr, sock, self._conn_closed)
        try:
            if addr.unix:
                await loop.create_unix_connection(lambda: conn, sock=sock)
            else:
                ctx = self._tls_context() if addr.tls else None
                await loop.create_connection(
                    lambda: conn, sock=sock, ssl=ctx,
                    server_hostname=addr.host if ctx else None)
            self.conns.add(conn)
            await self._hello(conn)
        except BaseException:
            conn.abort("could not set up the connection")
            sock.close()
            raise
        return conn

    async def _socket(self, loop: asyncio.AbstractEventLoop,
                      addr: Address) -> socket.socket:
        if addr.unix:
            targets: List[Tuple[int, Any]] = [(socket.AF_UNIX, addr.host)]
        else:
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

    async def _hello(self, conn: Conn) -> None:
        """AUTH, NAME and PING in one write: the server answers, or the
        next one of the list is tried."""
        name = self.name or default_name(
            "python", socket.gethostname(), os.getpid())
        futs = []
        if self.secret is not None:
            futs.append(conn.request(f"AUTH {self.secret}"))
        futs.append(conn.request(f"NAME {name}"))
        futs.append(conn.request("PING"))
        for fut in futs:
            reply = await fut
            if reply is None:
                raise ConnectionFailed(conn.reason)
            parse_reply(reply)

    # Locks

    async def acquire(self, owner: Any, keys: Tuple[Key, ...],
                      names: List[str], line: str, ttl_ms: Optional[int],
                      refresh: bool, factory: HandleFactory) -> HandleBase:
        """LOCK for ``owner``, through its connection if it holds locks."""
        loop = self._enter()
        st = self.owners.get(owner)
        if st is not None and st.depth:
            conn = st.conn
            if conn.closed:
                raise LockLost(f"the connection holding this task's other "
                               f"locks is gone ({conn.reason}); leave "
                               "their blocks first (no silent reconnect)")
        else:
            conn = await self._checkout(loop)
            st = Owner(conn)
            self.owners[owner] = st
        st.depth += 1
        try:
            reply = await self._lock(conn, line, names)
            if reply is None:
                if st.depth > 1:
                    raise LockLost(f"the connection to {conn.addr.text} "
                                   f"dropped ({conn.reason}) with this "
                                   "task's locks")
                raise ConnectionFailed(f"{conn.addr.text}: {conn.reason} "
                                       "before LOCK was answered")
            value = parse_reply(reply)
            if not value.isdigit():
                conn.abort("LOCK's reply carried no token")
                raise ProtocolError(f"LOCK answered {reply[:60]!r}")
            token = int(value)
        except BaseException:
            st.depth -= 1
            if not st.depth:
                self._checkin(conn)
            raise
        handle = factory(token, keys, names, conn, st, ttl_ms)
        conn.grants.add(handle)
        if ttl_ms is not None:
            if refresh:
                handle._timer = loop.create_task(self._refresh(handle))
            else:
                handle._timer = loop.call_later(
                    ttl_ms / 1000.0, handle._set_lost,
                    f"its ttl of {ttl_ms} ms ran out")
        return handle

    async def _lock(self, conn: Conn, line: str, names: List[str]) -> Reply:
        pending = conn.send(line)
        try:
            return await pending.fut
        except asyncio.CancelledError:
            # CANCEL leaves now; the rest must finish whatever comes
            cancel = conn.request("CANCEL")
            await self._settle(conn, self._withdraw(conn, pending, cancel,
                                                    names))
            raise

    async def _withdraw(self, conn: Conn, lock: Pending,
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
            await conn.request("UNLOCK " + " ".join(unique(names)))

    async def _settle(self, conn: Conn,
                      work: Coroutine[Any, Any, None]) -> None:
        """Runs ``work`` to its end even if the caller is cancelled again;
        past cancel_timeout the connection is dropped, which withdraws and
        releases everything on it."""
        loop = asyncio.get_running_loop()
        task = loop.create_task(work)
        deadline = loop.time() + self.cancel_timeout
        while not task.done():
            left = deadline - loop.time()
            if left <= 0:
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
        handle._stop_timer()
        handle._released = True
        conn, st = handle._conn, handle._owner
        conn.grants.discard(handle)
        try:
            if conn.closed:
                return
            names = handle._names
            fut = conn.request("UNLOCK " + (names[0] if len(names) == 1
                                            else " ".join(unique(names))))
            reply = await fut       # cancelled: the reply is dropped
            if reply is not None and reply.startswith("ERR NOTHELD"):
                handle._set_lost("its ttl ran out before the release "
                                 f"({reply[12:]})", released=True)
            elif reply is not None:
                parse_reply(reply)
        finally:
            st.depth -= 1
            if not st.depth:
                self._checkin(conn)

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
            fut = conn.request(line)
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
        """One request on an idle connection; its reply's value."""
        loop = self._enter()
        conn = await self._checkout(loop)
        try:
            reply = await conn.request(line)
        finally:
            self._checkin(conn)
        if reply is None:
            raise ConnectionFailed(f"{conn.addr.text}: {conn.reason}")
        return parse_reply(reply)

    async def aclose(self) -> None:
        """Closes every connection; locks still held are lost."""
        if self.generation != _fork.generation or self.loop is None:
            return
        if self.loop is not asyncio.get_running_loop():
            self._enter()
            return
        for conn in list(self.conns):
            conn.close()
        self.pool.clear()

    def idle(self) -> int:
        """Connections in the pool now."""
        return sum(1 for c in self.pool if not c.closed)

