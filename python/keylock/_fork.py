# keylock, the Python client of keylockd. SPDX-License-Identifier: MIT
"""What a forked child must not inherit: the parent's sockets and state.

The child of ``fork`` shares its parent's open sockets. Using one would mix
two processes' requests on one connection; merely keeping one open would
keep the parent's locks alive after the parent dies. So at fork the child
detaches and closes every socket the package opened (the parent's copies
stay open and untouched: closing a descriptor in the child sends nothing),
and bumps ``generation``: every KeyedLock compares it with its own and
starts afresh, and every handle granted in an older generation releases
nothing.
"""

from __future__ import annotations

import os
import socket
import weakref
from typing import Any, Callable, List

__all__ = ["generation", "track", "at_child", "orphan"]

generation = 0
_sockets: "weakref.WeakSet[socket.socket]" = weakref.WeakSet()
_child_hooks: List[Callable[[], None]] = []
# Objects of the parent's generation, kept referenced so that the garbage
# collector never runs their finalizers (which would touch dead event
# loops) in the child.
_orphans: List[Any] = []


def track(sock: socket.socket) -> None:
    """Marks ``sock`` as the parent's, to be dropped in a forked child."""
    _sockets.add(sock)


def at_child(hook: Callable[[], None]) -> None:
    """Runs ``hook`` in every forked child, after the sockets are gone."""
    _child_hooks.append(hook)


def orphan(obj: Any) -> None:
    """Keeps ``obj`` (state of the parent) alive and untouched."""
    _orphans.append(obj)


def _after_in_child() -> None:
    global generation
    generation += 1
    for sock in list(_sockets):
        try:
            fd = sock.detach()
        except OSError:
            continue
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass
    _sockets.clear()
    for hook in _child_hooks:
        hook()


os.register_at_fork(after_in_child=_after_in_child)
