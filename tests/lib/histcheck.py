#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""histcheck: judges a history of lock grants for mutual exclusion.

Clients under test (libkeylock, keylock(1), the Python package), usually
behind tests/lib/faultproxy.py, write one JSON object per line for every
grant they were told of, once its hold is over:

    {"client":"c1","key":"chaos:3","token":812,"mode":"exclusive",
     "start_us":1733300000123456,"end_us":1733300000170000,"end":"unlock"}

  client    who held it (any string; a process, a task)
  key       one key; a multi-key grant is one line per key, same token
  token     the grant's fencing token (OK TOKEN)
  mode      "exclusive" (only exclusive holds are judged for overlap;
            others are counted)
  start_us  CLOCK_REALTIME in microseconds when the client learnt of the
            grant (or later: when it started to act on it)
  end_us    when the client stopped believing it held the lock: before it
            sent UNLOCK, or when it was told the lock was lost
  end       "unlock", or "lost" (the client's loss report: the session's
            window ended, or RESUME said GONE)

Every client of one run must be on one host (one realtime clock).

    histcheck.py [--server HOST:PORT] [--grants-before N]
                 [--settle-ms MS] HISTORY_FILE...

It checks:
  - tokens: no token is reported twice for one key, or by two clients;
  - overlaps: for each key, in the server's order (by token), every
    exclusive holder's window ends no later than the next holder's starts
    (end_us <= next start_us): 0 overlaps;
  - with --server: STATS (a plain connection, no secret) must come to
    "keys":0, "sessions":0 and "sessions_detached":0 within --settle-ms
    (default 15000; a client that gave up on its session leaves it to
    expire by its grace), and with --grants-before (STATS "grants" before
    the run) the grants the server made during the run must all have been
    reported: grants_after - grants_before == distinct tokens (0 lost
    grants). Nobody but the clients under test may lock meanwhile.

It prints one JSON line of figures ({"records":N,"tokens":N,"keys":N,
"overlaps":0,"lost_grants":0,"losses":N,...}) and each violation on
stderr; exit status 0 when all holds, 1 otherwise, 2 on bad input.
"""

import argparse
import json
import socket
import sys
import time


def stats(server):
    host, _, port = server.rpartition(":")
    with socket.create_connection((host.strip("[]"), int(port)),
                                  timeout=10) as s:
        s.sendall(b"STATS\nQUIT\n")
        f = s.makefile("rb")
        line = f.readline().decode()
    if not line.startswith("OK {"):
        raise RuntimeError("STATS answered %r" % line.strip())
    return json.loads(line[3:])


def main(argv):
    ap = argparse.ArgumentParser(prog="histcheck.py")
    ap.add_argument("--server")
    ap.add_argument("--grants-before", type=int)
    ap.add_argument("--settle-ms", type=int, default=15000)
    ap.add_argument("files", nargs="+")
    opts = ap.parse_args(argv)

    recs = []
    for path in opts.files:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    r = json.loads(line)
                    for k in ("client", "key", "token", "start_us",
                              "end_us", "end"):
                        r[k]
                    int(r["token"]), int(r["start_us"]), int(r["end_us"])
                except (ValueError, KeyError, TypeError) as e:
                    print("%s:%d: not a history record (%s): %s" %
                          (path, n, e, line.strip()), file=sys.stderr)
                    return 2
                r["where"] = "%s:%d" % (path, n)
                recs.append(r)

    bad = 0
    overlaps = 0
    by_key = {}
    token_owner = {}
    for r in recs:
        by_key.setdefault(r["key"], []).append(r)
        t = int(r["token"])
        if t in token_owner and token_owner[t] != r["client"]:
            print("token %d reported by %s and %s" %
                  (t, token_owner[t], r["client"]), file=sys.stderr)
            bad += 1
        token_owner[t] = r["client"]
        if int(r["end_us"]) < int(r["start_us"]):
            print("%s: ends before it starts" % r["where"], file=sys.stderr)
            bad += 1
    for key, rs in by_key.items():
        rs.sort(key=lambda r: int(r["token"]))
        prev = None
        for r in rs:
            if prev is not None and int(prev["token"]) == int(r["token"]):
                print("%s: token %s twice for %s" %
                      (r["where"], r["token"], key), file=sys.stderr)
                bad += 1
            if prev is not None and \
                    prev.get("mode", "exclusive") == "exclusive" and \
                    r.get("mode", "exclusive") == "exclusive" and \
                    int(prev["end_us"]) > int(r["start_us"]):
                print("OVERLAP on %s: %s (token %s, %s) held until %d, "
                      "%s (token %s) from %d: %.3f ms" %
                      (key, prev["client"], prev["token"], prev["end"],
                       int(prev["end_us"]), r["client"], r["token"],
                       int(r["start_us"]),
                       (int(prev["end_us"]) - int(r["start_us"])) / 1000.0),
                      file=sys.stderr)
                overlaps += 1
            prev = r

    out = {
        "records": len(recs),
        "tokens": len(token_owner),
        "keys": len(by_key),
        "overlaps": overlaps,
        "losses": sum(1 for r in recs if r["end"] == "lost"),
        "clients": len(set(r["client"] for r in recs)),
    }
    if opts.server:
        deadline = time.monotonic() + opts.settle_ms / 1000.0
        while True:
            st = stats(opts.server)
            idle = st.get("keys") == 0 and st.get("sessions") == 0 and \
                st.get("sessions_detached") == 0
            if idle or time.monotonic() >= deadline:
                break
            time.sleep(0.1)
        for k in ("keys", "sessions", "sessions_detached",
                  "sessions_resumed", "sessions_expired", "grants"):
            out["server_" + k] = st.get(k)
        if not idle:
            print("the server is not idle %d ms after the run: keys %s, "
                  "sessions %s, detached %s" %
                  (opts.settle_ms, st.get("keys"), st.get("sessions"),
                   st.get("sessions_detached")), file=sys.stderr)
            bad += 1
        if opts.grants_before is not None:
            lost = st["grants"] - opts.grants_before - len(token_owner)
            out["lost_grants"] = lost
            if lost != 0:
                print("%d grants made by the server were never reported "
                      "by a client" % lost, file=sys.stderr)
                bad += 1
    print(json.dumps(out, separators=(",", ":")))
    return 1 if bad or overlaps else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
