#!/usr/bin/env python3
# bench/etcd_wire.py TRANSPORT WRITER_EP WATCH_EPS PIDS SECONDS: the etcd
# traffic of keylockd's front ends at c=50 (issue 23), replayed against a
# cluster over etcd's JSON gateway (TRANSPORT json: what keylockd speaks)
# or over gRPC (grpc: HTTP/2 and protobuf, no gateway), to measure what
# the transport costs the members per LOCK/UNLOCK cycle, the rest alike.
#
# The shape is the one bench/etcd_compare.sh counts for keylockd (its
# "etcd's own counters" table): group transactions through one member
# (WRITER_EP) of BATCH puts of new entries under a lease (a LOCK each)
# and the deletes of the previous transaction's BATCH entries (an UNLOCK
# each), with the fence compare every transaction with puts carries; and
# one prefix watch per front end (WATCH_EPS, comma-separated: each front
# end watches through its own member), which reads every event. One put
# and one delete make a cycle. Transactions go at RATE cycles/s (the
# same for both transports, so that the members batch alike) with
# INFLIGHT writers. Keys and values have the sizes of keylockd's
# (bench key names, the "k1 ..." value of backend_etcd_replica.c; VALUE_LEN
# sets another length).
#
# Prints one JSON object: cycles, transactions, watch events read, the
# members' CPU ms (user + system, /proc/PID/stat of PIDS, comma-separated)
# and the bytes the client sent and received. Needs python3-grpcio for
# grpc (the protobuf messages are encoded here by hand: TxnRequest,
# WatchRequest, LeaseGrant/Revoke; only the fields used).
import base64
import http.client
import json
import os
import sys
import threading
import time

BATCH = int(os.environ.get("BATCH", "26"))
RATE = float(os.environ.get("RATE", "1000"))
INFLIGHT = int(os.environ.get("INFLIGHT", "2"))
VALUE_LEN = int(os.environ.get("VALUE_LEN", "-1"))   # -1: keylockd's
PREFIX = b"kwire/"


# -- protobuf, by hand (etcd's rpc.proto and kv.proto field numbers) --
def varint(n):
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def fld_bytes(num, b):
    return varint(num << 3 | 2) + varint(len(b)) + b


def fld_int(num, n):
    return varint(num << 3) + varint(n) if n else b""


def pb_fields(buf):
    """(field, wire type, value) of one message's top level."""
    i = 0
    while i < len(buf):
        key, i = read_varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = read_varint(buf, i)
        elif wt == 2:
            n, i = read_varint(buf, i)
            v = buf[i:i + n]
            i += n
        elif wt == 1:
            v = buf[i:i + 8]
            i += 8
        elif wt == 5:
            v = buf[i:i + 4]
            i += 4
        else:
            raise ValueError("wire type %d" % wt)
        yield num, wt, v


def read_varint(buf, i):
    n = shift = 0
    while True:
        b = buf[i]
        i += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return n, i


def header_revision(resp):
    """header (1) . revision (3) of a response."""
    for num, _, v in pb_fields(resp):
        if num == 1:
            for n2, _, v2 in pb_fields(v):
                if n2 == 3:
                    return v2
    return 0


def pb_txn(fence, known_rev, puts, dels, value, lease):
    # Compare: result 1 (LESS 2), target 2 (MOD 2), key 3, mod_revision 6
    cmp = fld_int(1, 2) + fld_int(2, 2) + fld_bytes(3, fence) + \
        fld_int(6, known_rev + 1)
    out = bytearray(fld_bytes(1, cmp))
    for k in dels:
        # RequestOp.request_delete_range 3: DeleteRangeRequest.key 1
        out += fld_bytes(2, fld_bytes(3, fld_bytes(1, k)))
    for k in puts:
        # RequestOp.request_put 2: PutRequest key 1, value 2, lease 3
        out += fld_bytes(2, fld_bytes(2, fld_bytes(1, k) +
                                      fld_bytes(2, value) + fld_int(3, lease)))
    return bytes(out)


def txn_succeeded_pb(resp):
    return any(num == 2 and v for num, _, v in pb_fields(resp))


# -- JSON, as keylockd's client writes it --
def b64(b):
    return base64.b64encode(b).decode()


def json_txn(fence, known_rev, puts, dels, value, lease):
    ops = [{"request_delete_range": {"key": b64(k)}} for k in dels]
    ops += [{"request_put": {"key": b64(k), "value": b64(value),
                             "lease": str(lease)}} for k in puts]
    return json.dumps({"compare": [{"result": "LESS", "target": "MOD",
                                    "key": b64(fence),
                                    "mod_revision": str(known_rev + 1)}],
                       "success": ops}).encode()


class Json:
    def __init__(self, ep):
        self.host = ep.split("://", 1)[-1]
        self.conn = http.client.HTTPConnection(self.host, timeout=30)
        self.sent = self.recv = 0

    def post(self, path, body):
        if isinstance(body, dict):
            body = json.dumps(body).encode()
        self.conn.request("POST", path, body,
                          {"Content-Type": "application/json"})
        r = self.conn.getresponse()
        data = r.read()
        self.sent += len(body)
        self.recv += len(data)
        j = json.loads(data)
        if r.status != 200:
            raise RuntimeError("%s: %s" % (path, data[:200]))
        return j

    def lease_grant(self, ttl):
        return int(self.post("/v3/lease/grant", {"TTL": str(ttl)})["ID"])

    def lease_revoke(self, lid):
        self.post("/v3/lease/revoke", {"ID": str(lid)})

    def put(self, k, v, lease):
        j = self.post("/v3/kv/put", {"key": b64(k), "value": b64(v),
                                     "lease": str(lease)})
        return int(j["header"]["revision"])

    def txn(self, fence, known_rev, puts, dels, value, lease):
        j = self.post("/v3/kv/txn",
                      json_txn(fence, known_rev, puts, dels, value, lease))
        return j.get("succeeded", False), int(j["header"]["revision"])

    def watch(self, stop, counts):
        end = PREFIX[:-1] + bytes([PREFIX[-1] + 1])
        body = json.dumps({"create_request": {"key": b64(PREFIX),
                                              "range_end": b64(end)}})
        conn = http.client.HTTPConnection(self.host, timeout=30)
        conn.request("POST", "/v3/watch", body)
        r = conn.getresponse()
        buf = b""
        while not stop.is_set():
            data = r.read1(65536)
            if not data:
                break
            counts["bytes"] += len(data)
            buf += data
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                # every event has a "kv" (the client's own cost kept low:
                # it shares the machine with the members)
                counts["events"] += line.count(b'"kv":')
                if b'"created":true' in line:
                    counts["created"] = True
        conn.close()


class Grpc:
    def __init__(self, ep):
        import grpc
        self.grpc = grpc
        self.ch = grpc.insecure_channel(ep.split("://", 1)[-1])
        self.sent = self.recv = 0

        def unary(path):
            return self.ch.unary_unary(path)
        self._txn = unary("/etcdserverpb.KV/Txn")
        self._put = unary("/etcdserverpb.KV/Put")
        self._grant = unary("/etcdserverpb.Lease/LeaseGrant")
        self._revoke = unary("/etcdserverpb.Lease/LeaseRevoke")

    def call(self, f, req):
        resp = f(req, timeout=30)
        self.sent += len(req)
        self.recv += len(resp)
        return resp

    def lease_grant(self, ttl):
        resp = self.call(self._grant, fld_int(1, ttl))
        return next(v for num, _, v in pb_fields(resp) if num == 2)

    def lease_revoke(self, lid):
        self.call(self._revoke, fld_int(1, lid))

    def put(self, k, v, lease):
        resp = self.call(self._put, fld_bytes(1, k) + fld_bytes(2, v) +
                         fld_int(3, lease))
        return header_revision(resp)

    def txn(self, fence, known_rev, puts, dels, value, lease):
        resp = self.call(self._txn, pb_txn(fence, known_rev, puts, dels,
                                           value, lease))
        return txn_succeeded_pb(resp), header_revision(resp)

    def watch(self, stop, counts):
        end = PREFIX[:-1] + bytes([PREFIX[-1] + 1])
        create = fld_bytes(1, fld_bytes(1, PREFIX) + fld_bytes(2, end))

        def reqs():
            yield create
            stop.wait()
        call = self.ch.stream_stream("/etcdserverpb.Watch/Watch")(reqs())
        try:
            for resp in call:
                counts["bytes"] += len(resp)
                for num, _, v in pb_fields(resp):
                    if num == 11:
                        counts["events"] += 1
                    elif num == 3 and v:
                        counts["created"] = True
                if stop.is_set():
                    break
        except self.grpc.RpcError:
            if not stop.is_set():
                raise
        call.cancel()


def cpu_ticks(pids):
    t = 0
    for p in pids:
        with open("/proc/%s/stat" % p) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        t += int(fields[11]) + int(fields[12])
    return t


def main():
    if len(sys.argv) != 6 or sys.argv[1] not in ("json", "grpc"):
        sys.exit("usage: etcd_wire.py json|grpc WRITER_EP WATCH_EPS PIDS "
                 "SECONDS")
    kind, wep, weps, pids, secs = sys.argv[1:]
    pids = pids.split(",")
    secs = float(secs)
    cls = Json if kind == "json" else Grpc
    stop = threading.Event()
    watchers = []
    for i, ep in enumerate(weps.split(",")):
        counts = {"events": 0, "bytes": 0, "created": False}
        w = cls(ep)
        t = threading.Thread(target=w.watch, args=(stop, counts),
                             daemon=True)
        t.start()
        watchers.append((t, counts))
    admin = cls(wep)
    lease = admin.lease_grant(60)
    fence = PREFIX + b"fe/%016x" % lease
    state = {"rev": admin.put(fence, b"keylockd wire 1", lease),
             "cycles": 0, "txns": 0, "failed": 0}
    lock = threading.Lock()
    value = b"k1 1234 x 1 -1 0 0 1 bench-key-12345\n"
    if VALUE_LEN >= 0:
        value = (value * (VALUE_LEN // len(value) + 1))[:VALUE_LEN]
    deadline = [0.0]
    for _ in range(100):
        if all(c["created"] for _, c in watchers):
            break
        time.sleep(0.05)
    else:
        sys.exit("etcd_wire.py: a watch was not created")

    def writer(wi, cl):
        seq = 0
        prev = []
        period = BATCH * INFLIGHT / RATE
        nxt = time.monotonic()
        while time.monotonic() < deadline[0]:
            puts = [PREFIX + b"q/bench-key-%d/%016x-%d" % (wi * 100000 + j,
                                                         lease, seq)
                    for j in range(BATCH)]
            seq += 1
            with lock:
                known = state["rev"]
            ok, rev = cl.txn(fence, known, puts, prev, value, lease)
            with lock:
                state["rev"] = max(state["rev"], rev)
                state["txns"] += 1
                if ok:
                    state["cycles"] += len(prev)
                else:
                    state["failed"] += 1
            if ok:
                prev = puts
            nxt += period
            d = nxt - time.monotonic()
            if d > 0:
                time.sleep(d)
    clients = [cls(wep) for _ in range(INFLIGHT)]
    c0 = cpu_ticks(pids)
    t0 = time.monotonic()
    deadline[0] = t0 + secs
    ws = [threading.Thread(target=writer, args=(i, clients[i]))
          for i in range(INFLIGHT)]
    for t in ws:
        t.start()
    for t in ws:
        t.join()
    time.sleep(0.3)     # the last events
    c1 = cpu_ticks(pids)
    el = time.monotonic() - t0
    stop.set()
    admin.lease_revoke(lease)
    hz = os.sysconf("SC_CLK_TCK")
    n = max(state["cycles"], 1)
    out = {"transport": kind, "seconds": round(el, 3),
           "cycles": state["cycles"], "cycles_per_s": state["cycles"] / el,
           "txns": state["txns"], "txns_failed": state["failed"],
           "batch": BATCH, "inflight": INFLIGHT, "rate": RATE,
           "value_len": len(value), "watchers": len(watchers),
           "watch_events": sum(c["events"] for _, c in watchers),
           "members_cpu_ms": (c1 - c0) * 1000.0 / hz,
           "members_cpu_ms_per_cycle": (c1 - c0) * 1000.0 / hz / n,
           "client_bytes_per_cycle": (sum(c.sent + c.recv for c in clients) +
                                      sum(c["bytes"] for _, c in watchers)) / n}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
