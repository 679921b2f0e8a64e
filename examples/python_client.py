#!/usr/bin/env python3
"""keylockd from Python's standard library: a lock is one line, one reply."""
import os
import socket


class KeyLock:
    def __init__(self, server=None):
        server = server or os.environ.get("KEYLOCK_SERVER", "127.0.0.1:7711")
        if "/" in server:
            self.sock = socket.socket(socket.AF_UNIX)
            self.sock.connect(server)
        else:
            host, port = server.rsplit(":", 1)
            self.sock = socket.create_connection((host.strip("[]"), int(port)))
        self.replies = self.sock.makefile("rb")

    def request(self, line):  # "OK value" -> value; "ERR CODE text" raises
        self.sock.sendall(line.encode() + b"\n")
        reply = self.replies.readline().decode().rstrip("\r\n")
        if not reply.startswith("OK"):
            raise RuntimeError(reply or "connection closed")
        return reply[3:]

    def lock(self, *keys, timeout_ms=5000):  # returns the fencing token
        return int(self.request(f"LOCK {' '.join(keys)} timeout={timeout_ms}"))

if __name__ == "__main__":
    a, b = KeyLock(), KeyLock()
    token = a.lock("report:2026")
    print("a holds report:2026 with fencing token", token)
    try:
        b.request("TRYLOCK report:2026")  # b would hold it twice below: HELD
    except RuntimeError as e:
        print("b is told:", e)
    a.request("QUIT")  # a lock dies with its connection (or: UNLOCK it)
    later = b.lock("report:2026", timeout_ms=2000)
    assert later > token, "fencing tokens only grow"
    print("b holds it now that a is gone, token", later)
