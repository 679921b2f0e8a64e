# keylock, the Python client of keylockd. SPDX-License-Identifier: MIT
"""The seed's verify steps, written with this package, from several
processes at once against one daemon."""

from __future__ import annotations

import collections
import pathlib
import time
from typing import Any, Dict, List

import keylock
from conftest import Daemon, Workers, run_workers

PROCS = 4


def check_no_overlap(ops: List[List[Any]]) -> None:
    """[key, token, t_in, t_out]: per key, no two holders at once, and the
    tokens in the order of the grants."""
    by_key: Dict[str, List[List[Any]]] = collections.defaultdict(list)
    for op in ops:
        by_key[op[0]].append(op)
    for key, lst in by_key.items():
        lst.sort(key=lambda op: op[2])
        for before, after in zip(lst, lst[1:]):
            assert after[2] >= before[3], f"{key}: two holders at once"
            assert after[1] > before[1], f"{key}: tokens out of order"


def test_1000_ms_ops_over_50_keys(server: Daemon, report: Any) -> None:
    go, out = run_workers("ops", PROCS, server.addr, str(1000 // PROCS),
                          "50", "1")
    ops = [op for o in out for op in o["ops"]]
    assert len(ops) == 1000
    check_no_overlap(ops)
    wall = max(o["end"] for o in out) - go
    assert server.wait_idle()["keys"] == 0
    report(f"1,000 one-millisecond operations over 50 keys from {PROCS} "
           f"processes (connections open): {wall:.3f} s wall, no "
           "overlaps, keys 0 after")


def test_100_credits_exactly(server: Daemon, tmp_path: pathlib.Path,
                             report: Any) -> None:
    account = tmp_path / "account"
    account.write_text("0")
    go, _ = run_workers("credit", PROCS, server.addr, str(100 // PROCS),
                        str(account))
    wall = time.monotonic() - go
    assert int(account.read_text()) == 100
    server.wait_idle()
    report(f"100 credits of 1 from {PROCS} processes x {100 // PROCS} "
           f"threads: +{account.read_text()} exactly, {wall:.3f} s")


def test_timeouts_fail_after_2s_and_the_table_empties(
        server: Daemon, report: Any) -> None:
    with keylock.KeyedLock(server.addr, name="seed-holder") as locks:
        with locks.hold("seed:slow"):
            workers = Workers("timeout", PROCS, server.addr, "25")
            go = workers.go()
            time.sleep(5.0)
        held = time.monotonic() - go
        outs = [o for r in workers.results() for o in r]
    assert len(outs) == 100
    assert all(o[0] == "timeout" for o in outs), outs
    waits = [o[1] for o in outs]
    # not before 2 s, and long before the holder let go at 5 s (the upper
    # bound leaves room for a loaded machine)
    assert min(waits) >= 2.0 - 0.005 and max(waits) < 4.5, waits
    assert all("seed-holder" in o[2] for o in outs)
    st = server.wait_idle()
    report(f"a key held {held:.1f} s: 100 callers with timeout=2 from "
           f"{PROCS} processes failed after {min(waits):.3f}-"
           f"{max(waits):.3f} s; keys {st['keys']} after")


def test_max_waiters_100_of_1000_refuses_900_at_once(
        server: Daemon, report: Any) -> None:
    busy0 = server.stats()["busy"]
    with keylock.KeyedLock(server.addr) as locks:
        with locks.hold("seed:hot"):
            workers = Workers("busy", PROCS, server.addr,
                              str(1000 // PROCS))
            workers.go()
            deadline = time.monotonic() + 30
            while True:
                st = server.stats()
                if st["busy"] - busy0 >= 900 and st["waiting"] >= 100:
                    break
                assert time.monotonic() < deadline, st
                time.sleep(0.02)
            # the server refused 900 while the key was still held, and
            # queued no more than 100: BUSY came at once, not after a wait
            assert st["waiting"] == 100 and st["busy"] - busy0 == 900
        outs = [o for r in workers.results() for o in r]
    refused = sorted(o[1] for o in outs if o[0] == "busy")
    assert len(refused) == 900 and len(outs) == 1000
    server.wait_idle()
    report(f"1,000 requests at one key with max_waiters=100 from {PROCS} "
           f"processes: 100 granted, 900 BUSY while the key was held "
           f"(refusal median {refused[450]:.3f} s, slowest "
           f"{refused[-1]:.3f} s)")


def test_1000_random_transfers_keep_the_total(
        server: Daemon, tmp_path: pathlib.Path, report: Any) -> None:
    for i in range(10):
        (tmp_path / str(i)).write_text("1000")
    go, out = run_workers("transfer", PROCS, server.addr,
                          str(1000 // PROCS), str(tmp_path), "7")
    wall = time.monotonic() - go
    assert sum(o["moved"] for o in out) == 1000
    total = sum(int((tmp_path / str(i)).read_text()) for i in range(10))
    assert total == 10000
    server.wait_idle()
    report(f"1,000 random transfers between 10 accounts from {PROCS} "
           f"processes, keys in random order: total {total} unchanged, "
           f"{wall:.3f} s")
