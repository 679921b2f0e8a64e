#!/usr/bin/env python3
# bench/etcd_perf.py BINARY LABEL PERF_DATA...: where a Go program's CPU
# goes, from `perf record -g` of it, by Go package and by activity, for
# a stripped Go binary such as Debian's etcd (no .symtab: the function
# names come from the binary's own .gopclntab, which every Go binary
# keeps for its tracebacks; Go 1.18 to 1.22's layout).
#
# Prints a Markdown table: the share of the samples whose innermost
# frame (self) is in each group of packages, and the share whose stack
# (inclusive) goes through each activity, with the number of samples.
# Used by bench/etcd_compare.sh with PERF=1 (issue 23).
import bisect
import struct
import subprocess
import sys


def elf_sections(data):
    """Section name -> (address, offset, size) of a 64-bit little-endian
    ELF."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        sys.exit("etcd_perf.py: not a 64-bit little-endian ELF")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    hdrs = []
    for i in range(shnum):
        h = struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)
        hdrs.append(h)
    stroff = hdrs[shstrndx][4]
    out = {}
    for h in hdrs:
        end = data.index(b"\0", stroff + h[0])
        out[data[stroff + h[0]:end].decode()] = (h[3], h[4], h[5])
    return out


def go_funcs(path):
    """Sorted entry addresses and names of a Go binary's functions."""
    with open(path, "rb") as f:
        data = f.read()
    secs = elf_sections(data)
    if ".gopclntab" not in secs:
        sys.exit("etcd_perf.py: %s has no .gopclntab" % path)
    _, base, _ = secs[".gopclntab"]
    magic, = struct.unpack_from("<I", data, base)
    if magic not in (0xFFFFFFF0, 0xFFFFFFF1):
        sys.exit("etcd_perf.py: pclntab magic %#x: not Go 1.18-1.22" % magic)
    if data[base + 7] != 8:
        sys.exit("etcd_perf.py: not a 64-bit Go binary")
    (nfunc, _nfiles, text, nameoff, _cu, _file, _pc,
     clnoff) = struct.unpack_from("<QQQQQQQQ", data, base + 8)
    if text == 0:
        text = secs[".text"][0]
    names = base + nameoff
    cln = base + clnoff
    addrs, funcs = [], []
    for i in range(nfunc):
        entry, funcoff = struct.unpack_from("<II", data, cln + 8 * i)
        _e, name = struct.unpack_from("<Ii", data, cln + funcoff)
        end = data.index(b"\0", names + name)
        addrs.append(text + entry)
        funcs.append(data[names + name:end].decode(errors="replace"))
    # perf script gives a stripped binary's addresses as file offsets
    taddr, toff, _ = secs[".text"]
    return addrs, funcs, taddr - toff


def package(fn):
    """The import path of a Go function name."""
    slash = fn.rfind("/")
    dot = fn.find(".", slash + 1)
    return fn if dot < 0 else fn[:dot]


# Groups of packages (self time), first match wins: prefixes of the
# import path (with the vendored form of each).
GROUPS = [
    ("HTTP/1 + JSON gateway (grpc-gateway, net/http, encoding/json, "
     "jsonpb, cmux)",
     ("github.com/grpc-ecosystem/grpc-gateway", "net/http",
      "encoding/json", "github.com/golang/protobuf/jsonpb",
      "go.etcd.io/etcd/etcdserver/etcdserverpb/gw",
      "go.etcd.io/etcd/etcdserver/api/v3rpc/gw", "github.com/soheilhy/cmux",
      "go.etcd.io/etcd/etcdserver/api/v3lock/v3lockpb/gw",
      "github.com/tmc/grpc-websocket-proxy", "encoding/base64",
      "github.com/json-iterator/go", "github.com/modern-go",
      "reflect", "strconv", "unicode/utf8", "bufio")),
    ("gRPC + HTTP/2 (grpc, x/net/http2, hpack)",
     ("google.golang.org/grpc", "golang.org/x/net/http2",
      "github.com/grpc-ecosystem/go-grpc-prometheus",
      "github.com/grpc-ecosystem/go-grpc-middleware")),
    ("protobuf (gogo, golang)",
     ("github.com/gogo/protobuf", "github.com/golang/protobuf",
      "google.golang.org/protobuf", "go.etcd.io/etcd/etcdserver/etcdserverpb",
      "go.etcd.io/etcd/mvcc/mvccpb", "go.etcd.io/etcd/raft/raftpb",
      "go.etcd.io/etcd/lease/leasepb", "go.etcd.io/etcd/auth/authpb",
      "go.etcd.io/etcd/etcdserver/api/membership",
      "go.etcd.io/etcd/wal/walpb")),
    ("raft, WAL, peer transport (raft, wal, rafthttp)",
     ("go.etcd.io/etcd/raft", "go.etcd.io/etcd/wal",
      "go.etcd.io/etcd/etcdserver/api/rafthttp",
      "go.etcd.io/etcd/pkg/fileutil", "go.etcd.io/etcd/pkg/ioutil",
      "go.etcd.io/etcd/pkg/pbutil", "hash/crc32")),
    ("mvcc, watch, bolt (mvcc, backend, bbolt)",
     ("go.etcd.io/etcd/mvcc", "go.etcd.io/bbolt", "github.com/google/btree",
      "go.etcd.io/etcd/pkg/adt")),
    ("etcdserver, v3rpc, lease, auth",
     ("go.etcd.io/etcd/etcdserver", "go.etcd.io/etcd/lease",
      "go.etcd.io/etcd/auth", "go.etcd.io/etcd/pkg")),
    ("logging, metrics (zap, prometheus)",
     ("go.uber.org/zap", "github.com/prometheus", "go.uber.org")),
    ("Go runtime: GC, scheduler, allocation (runtime)",
     ("runtime", "sync", "internal/", "time")),
    ("syscalls, network (syscall, net, os)",
     ("syscall", "net", "os", "crypto", "io")),
]

# Activities (inclusive), by the goroutine a sample ran in: the first
# entry whose prefix one of the sample's frames starts with, looking from
# the goroutine's start (the outermost frame) inwards.
ACTIVITIES = [
    ("JSON gateway: its HTTP/1 connections (request and JSON in, "
     "JSON <-> proto, the gRPC call out, JSON out; watch events too)",
     ("net/http.(*Server).Serve.func", "net/http.(*conn).serve",
      "go.etcd.io/etcd/etcdserver/etcdserverpb/gw.",
      "go.etcd.io/etcd/etcdserver/api/v3lock/v3lockpb/gw.",
      "github.com/grpc-ecosystem/grpc-gateway",
      "github.com/tmc/grpc-websocket-proxy")),
    ("JSON gateway: its gRPC client (HTTP/2 to its own member)",
     ("google.golang.org/grpc/internal/transport.newHTTP2Client",
      "google.golang.org/grpc/internal/transport.(*http2Client)",
      "google.golang.org/grpc.(*ccBalancerWrapper)",
      "google.golang.org/grpc.(*addrConn)",
      "google.golang.org/grpc.newClientStream",
      "google.golang.org/grpc.(*clientStream)")),
    ("gRPC server: watch streams (v3rpc, mvcc watchers)",
     ("go.etcd.io/etcd/etcdserver/api/v3rpc.(*watchServer)",
      "go.etcd.io/etcd/etcdserver/api/v3rpc.(*serverWatchStream)",
      "go.etcd.io/etcd/mvcc.newWatchableStore",
      "go.etcd.io/etcd/mvcc.(*watchableStore)")),
    ("gRPC server: HTTP/2 transport and calls up to etcdserver",
     ("google.golang.org/grpc/internal/transport.newHTTP2Server",
      "google.golang.org/grpc/internal/transport.(*http2Server)",
      "google.golang.org/grpc.(*Server)")),
    ("apply: the FIFO scheduler (mvcc, bolt writes, lease checks)",
     ("go.etcd.io/etcd/pkg/schedule.",)),
    ("raft: ready loop, WAL, raft node",
     ("go.etcd.io/etcd/etcdserver.(*raftNode)", "go.etcd.io/etcd/raft.",
      "go.etcd.io/etcd/etcdserver.(*EtcdServer).run",
      "go.etcd.io/etcd/etcdserver.(*EtcdServer).start",
      "go.etcd.io/etcd/wal.")),
    ("peers: rafthttp streams and pipelines",
     ("go.etcd.io/etcd/etcdserver/api/rafthttp.",)),
    ("bolt: backend commit loop",
     ("go.etcd.io/etcd/mvcc/backend.",)),
    ("lease: lessor loops",
     ("go.etcd.io/etcd/lease.",)),
    ("Go GC (mark workers, sweep, scavenge)",
     ("runtime.gcBgMarkWorker", "runtime.bgsweep", "runtime.bgscavenge",
      "runtime.gcenable")),
    ("Go scheduler: idle Ms, wake-ups, sysmon (runtime.mstart, mcall)",
     ("runtime.mstart", "runtime.mcall", "runtime.sysmon",
      "runtime.morestack")),
]


# The gateway's HTTP/1 connections, split by the innermost of these
GATEWAY = [
    ("watch: each event turned into JSON and written out",
     ("github.com/grpc-ecosystem/grpc-gateway/runtime.ForwardResponseStream",
      "go.etcd.io/etcd/etcdserver/etcdserverpb/gw.RegisterWatchHandlerClient",
      "go.etcd.io/etcd/etcdserver/etcdserverpb/gw.request_Watch_")),
    ("unary replies turned into JSON (Txn, Lock, lease)",
     ("github.com/grpc-ecosystem/grpc-gateway/runtime.ForwardResponseMessage",
      )),
    ("Txn: the JSON request into protobuf, the gRPC call",
     ("go.etcd.io/etcd/etcdserver/etcdserverpb/gw.request_KV_Txn",)),
    ("Lock/Unlock: the JSON request into protobuf, the gRPC call",
     ("go.etcd.io/etcd/etcdserver/api/v3lock/v3lockpb/gw.request_",)),
    ("other calls: the JSON request into protobuf, the gRPC call",
     ("go.etcd.io/etcd/etcdserver/etcdserverpb/gw.request_",)),
]

# what a kernel sample is charged past: the way into the kernel
PLUMBING = ("runtime/internal/syscall.", "syscall.", "internal/poll.",
            "net.", "os.", "bufio.", "io.", "runtime.write", "runtime.read",
            "runtime.netpoll", "runtime.epoll")


def group_of(fn):
    pkg = package(fn)
    for name, prefixes in GROUPS:
        for p in prefixes:
            if pkg == p or pkg.startswith(p + "/") or \
               (p.endswith("/") and pkg.startswith(p)):
                return name
    return "other: " + pkg


def main():
    if len(sys.argv) < 4:
        sys.exit("usage: etcd_perf.py BINARY LABEL PERF_DATA...")
    binary, label = sys.argv[1], sys.argv[2]
    addrs, funcs, bias = go_funcs(binary)

    def sym(ip):
        ip += bias
        i = bisect.bisect_right(addrs, ip) - 1
        return funcs[i] if i >= 0 else "?"

    out = []
    for perfdata in sys.argv[3:]:
        p = subprocess.run(["perf", "script", "-i", perfdata, "-F", "ip,dso"],
                           capture_output=True, text=True, check=True)
        out.extend(p.stdout.splitlines())
        out.append("")
    samples = []
    cur = None
    for line in out:
        s = line.strip()
        if not s:
            if cur:
                samples.append(cur)
            cur = None
            continue
        if cur is None:
            cur = []
        parts = s.split(None, 1)
        try:
            ip = int(parts[0], 16)
        except ValueError:
            continue
        dso = parts[1] if len(parts) > 1 else ""
        if "kernel" in dso:
            cur.append("[kernel]")
        elif "etcd" in dso:
            cur.append(sym(ip))
        else:
            cur.append("[" + dso.strip("()").rsplit("/", 1)[-1] + "]")
    if cur:
        samples.append(cur)
    n = len(samples)
    if n == 0:
        sys.exit("etcd_perf.py: no samples")
    selfg, inc, fself, gw = {}, {}, {}, {}
    for st in samples:
        # the innermost frame of Go code; kernel time goes to the Go
        # function that entered the kernel
        leaf = next((f for f in st if not f.startswith("[") and
                     not f.startswith(PLUMBING)), None) or \
            next((f for f in st if not f.startswith("[")), "?")
        g = "kernel (on behalf of " + group_of(leaf) + ")" \
            if st[0] == "[kernel]" else group_of(leaf)
        selfg[g] = selfg.get(g, 0) + 1
        fself[st[0] if st[0] == "[kernel]" else leaf] = \
            fself.get(st[0] if st[0] == "[kernel]" else leaf, 0) + 1
        act = "other"
        for f in reversed(st):
            act = next((name for name, marks in ACTIVITIES
                        if any(f.startswith(m) for m in marks)), None)
            if act is not None:
                break
        act = act or "other"
        if act == ACTIVITIES[0][0]:
            part = next((name for f in st for name, marks in GATEWAY
                         if any(f.startswith(m) for m in marks)),
                        "HTTP/1 requests and replies (net/http)")
            gw[part] = gw.get(part, 0) + 1
        inc[act] = inc.get(act, 0) + 1
    print("%s: %d samples\n" % (label, n))
    print("| self time by package group | share |\n|---|---:|")
    for g, c in sorted(selfg.items(), key=lambda x: -x[1]):
        if c * 200 >= n:
            print("| %s | %.1f%% |" % (g, 100.0 * c / n))
    rest = sum(c for c in selfg.values() if c * 200 < n)
    if rest:
        print("| (groups under 0.5%% each) | %.1f%% |" % (100.0 * rest / n))
    print("\n| activity (the goroutine the sample ran in) | share "
          "|\n|---|---:|")
    for g, c in sorted(inc.items(), key=lambda x: -x[1]):
        print("| %s | %.1f%% |" % (g, 100.0 * c / n))
    if gw:
        print("\n| the gateway's HTTP/1 connections, by what they did | "
              "share of all |\n|---|---:|")
        for g, c in sorted(gw.items(), key=lambda x: -x[1]):
            print("| %s | %.1f%% |" % (g, 100.0 * c / n))
    print("\n| top functions (self) | share |\n|---|---:|")
    for g, c in sorted(fself.items(), key=lambda x: -x[1])[:12]:
        print("| `%s` | %.1f%% |" % (g, 100.0 * c / n))


if __name__ == "__main__":
    main()
