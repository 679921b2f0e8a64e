#!/bin/sh
# The HTTP listener's bounds (keylockd(8), SECURITY, The HTTP listener):
# header and body sizes, GET and HEAD only (405 for any other method),
# the Host check against DNS rebinding, nosniff and no-store on every
# reply, the connection cap on both sides of its limit, the cap per
# address (one address full, another served), a flood of slow
# clients that leaves the lock service answering, a request's line and
# headers ended 10 s after its start however slowly they come, client
# names in /status.json only with status-names, the warning for a listener
# beyond loopback, and, out of descriptors, a paused listener instead of a
# spinning one.
. "$(dirname "$0")/lib.sh"
need nc curl python3
CAP=4
SLOW=${KEYLOCKD_TEST_SLOW:-1}

daemon_start --metrics 127.0.0.1:0 --metrics-max-connections $CAP \
    --metrics-hosts mon.example,other.example
wait_for "grep -q '^metrics [0-9][0-9]*$' '$TMP/port'" "$READY_S" ||
    fail "no metrics port in the port file: $(cat "$TMP/port")"
MPORT=$(sed -n 's/^metrics //p' "$TMP/port")
URL=http://127.0.0.1:$MPORT
expect_nogrep 'not a loopback' "$TMP/daemon.log" "a loopback listener"

# code ARGS...: the status of one request (000: no reply).
code() {
	curl -s -o /dev/null -w '%{http_code}' --max-time "$REPLY_S" "$@"
}

# Every reply, errors included, says nosniff and no-store.
for r in "200 /metrics" "200 /stats" "200 /healthz" "200 /" \
    "200 /status.json" "200 /status.js" "404 /nope" "405 /metrics -X POST" \
    "405 /healthz -X DELETE" "403 /metrics -H Host:rebind.example"; do
	set -- $r
	want=$1 path=$2
	shift 2
	curl -sS -o /dev/null -D "$TMP/h" --max-time "$REPLY_S" "$@" \
	    "$URL$path" || fail "$path $*"
	expect_grep "^HTTP/1\.1 $want " "$TMP/h" "$path $* status"
	expect_grep '^X-Content-Type-Options: nosniff' "$TMP/h" \
	    "$path $* nosniff"
	expect_grep '^Cache-Control: no-store' "$TMP/h" "$path $* no-store"
done
curl -sS -o /dev/null -D "$TMP/h" -X PUT "$URL/metrics" || fail "PUT"
expect_grep '^Allow: GET, HEAD' "$TMP/h" "405's Allow"
expect_eq 200 "$(code -I "$URL/metrics")" "HEAD /metrics"
pass "nosniff and no-store on every reply; POST, PUT, DELETE 405 with Allow"

# Any method but GET and HEAD, one evhttp knows or not, is 405 with Allow
# (libevent's own answer would be 501).
cat >"$TMP/method.py" <<'PY'
import socket, sys
port = int(sys.argv[1])
for line in sys.argv[2:]:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(line.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Connection: close\r\n\r\n")
    r = b""
    while b"\r\n\r\n" not in r:
        b = s.recv(4096)
        if not b:
            break
        r += b
    s.close()
    head = r.split(b"\r\n\r\n")[0].split(b"\r\n")
    allow = [h for h in head if h.lower().startswith(b"allow:")]
    print("%s: %s; %s" % (line, head[0].decode(errors="replace") or "none",
        allow[0].decode() if allow else "no Allow"))
PY
python3 "$TMP/method.py" "$MPORT" "TRACE /metrics" "CONNECT 127.0.0.1:80" \
    "FOO /metrics" "get /healthz" "OPTIONS *" "PATCH /stats" \
    "CONNECT /metrics" >"$TMP/method.out" 2>&1 ||
    fail "method.py: $(cat "$TMP/method.out")"
for m in "TRACE /metrics" "CONNECT 127.0.0.1:80" "FOO /metrics" \
    "get /healthz" "OPTIONS \*" "PATCH /stats" "CONNECT /metrics"; do
	expect_grep "^$m: HTTP/1\.1 405 Method Not Allowed; Allow: GET, HEAD\$" \
	    "$TMP/method.out" "$m"
done
pass "TRACE, CONNECT, OPTIONS, PATCH and unknown methods 405 with Allow"

# Sizes: headers up to 8192 bytes pass, beyond them 400; no body at all.
pad() {
	head -c "$1" /dev/zero | tr '\0' a
}
expect_eq 200 "$(code -H "X-Pad: $(pad 7000)" "$URL/healthz")" \
    "7000 bytes of headers"
expect_eq 400 "$(code -H "X-Pad: $(pad 9000)" "$URL/healthz")" \
    "9000 bytes of headers"
# (within the socket buffers, so that curl has sent it all when the reply
# and the close come)
printf 'X-Pad: %s\n' "$(pad 60000)" >"$TMP/pad"
expect_eq 400 "$(code -H "@$TMP/pad" "$URL/healthz")" "60000 bytes of headers"
expect_eq 405 "$(code -X POST "$URL/healthz")" "POST without a body"
expect_eq 413 "$(code -d x "$URL/healthz")" "POST with a 1-byte body"
expect_eq 413 "$(code -H 'Content-Type: text/plain' --data-binary \
    "@$TOP_SRCDIR/src/http/status.js" "$URL/metrics")" "POST with a body"
expect_eq 413 "$(code -X GET -H 'Content-Length: 1000000000' "$URL/healthz")" \
    "GET announcing a 1 GB body"
expect_eq 200 "$(code "$URL/healthz")" "a request after the refusals"
pass "headers over 8192 bytes: 400; any body: 413, unread"

# The bounds to the byte (keylockd(8)): 8192 bytes of request line and
# header lines, line ends not counted, CRLF or LF; an empty body, chunked
# or Content-Length: 0, is no body; one chunk of data is 413.
cat >"$TMP/exact.py" <<'PY'
import socket, sys
port = int(sys.argv[1])
def status(data):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(data)
    r = b""
    while b"\r\n" not in r:
        b = s.recv(256)
        if not b:
            break
        r += b
    s.close()
    return r.split(b"\r\n")[0].split(b" ")[1].decode() if r else "000"
def head(n, eol):
    lines = [b"GET /healthz HTTP/1.1", b"Host: 127.0.0.1",
        b"Connection: close"]
    pad = n - sum(len(l) for l in lines) - len(b"X-Pad: ")
    lines.append(b"X-Pad: " + b"a" * pad)
    return eol.join(lines) + eol + eol
for eol, name in ((b"\r\n", "crlf"), (b"\n", "lf")):
    for n in (8192, 8193):
        d = head(n, eol)
        print(name, n, len(d), status(d))
te = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
print("chunked-empty", status(te + b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"))
print("chunked-data", status(te + b"Transfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n"))
print("length-0", status(te + b"Content-Length: 0\r\n\r\n"))
print("length-1", status(te + b"Content-Length: 1\r\n\r\nx"))
PY
python3 "$TMP/exact.py" "$MPORT" >"$TMP/exact.out" 2>&1 ||
    fail "exact.py: $(cat "$TMP/exact.out")"
for want in "crlf 8192 8202 200" "crlf 8193 8203 400" "lf 8192 8197 200" \
    "lf 8193 8198 400" "chunked-empty 200" "chunked-data 413" \
    "length-0 200" "length-1 413"; do
	expect_grep "^$want\$" "$TMP/exact.out" "$want"
done
pass "8192 bytes of lines without their ends: 200, 8193: 400; an empty body is none"

# Host: addresses, localhost, the configured names; anything else 403.
for h in "127.0.0.1:$MPORT" "127.0.0.1" "[::1]:$MPORT" "localhost:$MPORT" \
    "LocalHost" "localhost." "mon.example:$MPORT" "MON.Example" \
    "other.example:80" "10.1.2.3:9771"; do
	expect_eq 200 "$(code -H "Host: $h" "$URL/status.json")" "Host: $h"
done
for h in "rebind.example:$MPORT" "rebind.example" "localhost.rebind.example" \
    "mon.example.rebind.example" "127.0.0.1.rebind.example" "mon" \
    "localhost:x" "[::1" "[rebind]:80" ":$MPORT"; do
	expect_eq 403 "$(code -H "Host: $h" "$URL/status.json")" "Host: $h"
done
pass "Host: addresses, localhost and metrics-hosts 200; a rebinding name 403"

# slow.py PORT N SECONDS EVERY [back]: N clients (from SLOW_SRC, default
# 127.0.0.1) that trickle a request's
# headers, a byte every EVERY seconds (so that no idle timeout ends them),
# for SECONDS; each prints "closed S" when the server closes it after S
# seconds, and with "back" comes back at once if S >= 5 (a deadline, not
# the cap's refusal); at the end, "open N".
cat >"$TMP/slow.py" <<'PY'
import os, select, socket, sys, time
port, n, secs, every = int(sys.argv[1]), int(sys.argv[2]), \
    float(sys.argv[3]), float(sys.argv[4])
back = sys.argv[5:] == ["back"]
src = os.environ.get("SLOW_SRC", "127.0.0.1")
def connect():
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=2,
            source_address=(src, 0))
        s.sendall(b"GET /stats HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        socks[s] = time.time()
    except OSError:
        pass
socks = {}
for i in range(n):
    connect()
print("started", len(socks), flush=True)
end = time.time() + secs
tick = time.time()
while time.time() < end:
    r = select.select(list(socks), [], [], max(0, tick - time.time()))[0]
    for s in r:
        try:
            data = s.recv(4096)
        except OSError:
            data = b""
        if data:
            continue
        lived = time.time() - socks.pop(s)
        s.close()
        print("closed %.1f" % lived, flush=True)
        if back and lived >= 5:
            connect()
    if time.time() >= tick:
        for s in list(socks):
            try:
                s.sendall(b"a")
            except OSError:
                pass
        tick = time.time() + every
print("open", len(socks), flush=True)
PY
# slow_start NAME N: N slow clients in the background, until killed; one
# closed by the request deadline below comes back.
slow_start() {
	python3 "$TMP/slow.py" "$MPORT" "$2" 600 0.5 back >"$TMP/$1.out" 2>&1 &
	eval "SLOW_$1=$!"
	BGPIDS="$BGPIDS $!"
	wait_for "grep -q '^started' '$TMP/$1.out'" "$READY_S" ||
	    fail "the slow clients $1 did not start: $(cat "$TMP/$1.out")"
}

# The cap: CAP-1 slow clients and one request is CAP, answered; one more
# slow client, and a request is closed unanswered; that one gone, and a
# request is answered again.
slow_start under $((CAP - 1))
# accepted in order: once this one is answered, the others are counted
wait_for "[ \$(code '$URL/healthz') = 200 ]" "$REPLY_S" ||
    fail "a request with $((CAP - 1)) slow clients"
expect_eq 200 "$(code "$URL/healthz")" "the request that makes $CAP"
slow_start over 1
wait_for "[ \$(code '$URL/healthz') = 000 ]" "$REPLY_S" ||
    fail "a request past $CAP connections is answered"
wait_log 'HTTP connection\(s\) refused: metrics-max-connections 4 are open' \
    "the refusal's warning"
kill "$SLOW_over"
wait_for "[ \$(code '$URL/healthz') = 200 ]" "$REPLY_S" ||
    fail "a request once the last slow client has gone"
kill "$SLOW_under"
pass "metrics-max-connections $CAP: $CAP answered, one more refused"

# A flood: 200 slow clients. The lock service still answers, and HTTP
# once they go.
slow_start flood 200
session_open holder 3 127.0.0.1 "$PORT"
session_send holder "LOCK flood:key"
session_expect holder 1 '^OK [0-9]+$' "a LOCK during the flood"
session_open waiter 4 127.0.0.1 "$PORT"
session_send waiter "LOCK flood:key timeout=5000"
session_send holder "UNLOCK flood:key"
session_expect holder 2 '^OK 1$' "an UNLOCK during the flood"
session_expect waiter 1 '^OK [0-9]+$' "a grant during the flood"
expect_eq 000 "$(code "$URL/healthz")" "a request during the flood"
kill "$SLOW_flood"
wait_for "[ \$(code '$URL/healthz') = 200 ]" "$REPLY_S" ||
    fail "a request after the flood"
exec 3>&- 4>&-
SESSIONS=
pass "200 slow HTTP clients: the lock service answers, HTTP once they go"

# The request deadline: a client that trickles a request's headers, a byte
# every 2 s, keeps evhttp's idle timeout from ending it; without a bound
# of its own it would hold its connection for as long as its 8192 bytes
# last (4.5 hours at this pace). CAP-1 of them and a kept-alive client
# hold every slot; each trickler is closed 10 s after its accept, and
# /healthz is answered again. The kept-alive client's second request,
# trickled a byte a second from 3 s after its first, has its own 10 s from
# its first byte (so it ends 13 s after the accept, not 10).
cat >"$TMP/keepalive.py" <<'PY'
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=30)
s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
r = b""
while not r.endswith(b"ok\n"):
    b = s.recv(4096)
    if not b:
        break
    r += b
print("first", r.split(b" ")[1].decode() if r else "000", flush=True)
time.sleep(3)
t0 = time.time()
s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
s.settimeout(1)
while True:
    try:
        b = s.recv(4096)
    except socket.timeout:
        s.sendall(b"a")
        continue
    except OSError:
        b = b""
    if not b:
        break
    print("reply", b[:20], flush=True)
print("closed %.1f" % (time.time() - t0), flush=True)
PY
python3 "$TMP/keepalive.py" "$MPORT" >"$TMP/ka.out" 2>&1 &
BGPIDS="$BGPIDS $!"
wait_for "grep -q '^first' '$TMP/ka.out'" "$READY_S" ||
    fail "the kept-alive client: $(cat "$TMP/ka.out")"
expect_grep '^first 200$' "$TMP/ka.out" "the kept-alive client's first request"
python3 "$TMP/slow.py" "$MPORT" $((CAP - 1)) $((15 + 10 * SLOW)) 2 \
    >"$TMP/deadline.out" 2>&1 &
BGPIDS="$BGPIDS $!"
wait_for "grep -q '^started $((CAP - 1))\$' '$TMP/deadline.out'" "$READY_S" ||
    fail "the tricklers did not start: $(cat "$TMP/deadline.out")"
wait_for "[ \$(code '$URL/healthz') = 000 ]" "$REPLY_S" ||
    fail "a request while the tricklers hold every slot is answered"
wait_for "[ \$(grep -c '^closed' '$TMP/deadline.out') -eq $((CAP - 1)) ]" \
    $((10 + 5 * SLOW)) ||
    fail "tricklers still open $((10 + 5 * SLOW)) s after their accept: \
$(cat "$TMP/deadline.out")"
wait_for "[ \$(code '$URL/healthz') = 200 ]" "$REPLY_S" ||
    fail "no answer once the tricklers are closed"
wait_log 'HTTP connection\(s\) closed: a request.s line and headers not in within 10 s' \
    "the deadline's warning"
for t in $(sed -n 's/^closed //p' "$TMP/deadline.out"); do
	awk "BEGIN { exit !($t >= 9.5) }" ||
	    fail "a trickler closed after $t s, before the deadline"
done
wait_for "grep -q '^closed' '$TMP/ka.out'" $((10 + 5 * SLOW)) ||
    fail "the kept-alive client's trickled request: $(cat "$TMP/ka.out")"
t=$(sed -n 's/^closed //p' "$TMP/ka.out")
expect_nogrep '^reply' "$TMP/ka.out" "a reply to the trickled request"
awk "BEGIN { exit !($t >= 9.5) }" ||
    fail "the trickled second request was closed $t s after its first byte"
pass "tricklers closed after $(sed -n 's/^closed //p' "$TMP/deadline.out" |
    tr '\n' ' ')s; a kept-alive one's second request $t s after its first byte"

# Names: hidden by default, client ids still there; shown with
# status-names.
# names_json: /status.json while alice holds names:key and bob waits.
names_json() {
	session_open alice 5 127.0.0.1 "$PORT"
	session_send alice "NAME alice"
	session_send alice "LOCK names:key"
	session_expect alice 2 '^OK [0-9]+$' "alice's LOCK"
	session_open bob 6 127.0.0.1 "$PORT"
	session_send bob "NAME bob"
	session_send bob "LOCK names:key"
	wait_for "ask_tcp 'INFO names:key' | grep -q '\"waiters\":\[{'" \
	    "$REPLY_S" || fail "bob is not queued"
	curl -sS -o "$TMP/status.json" "$URL/status.json" ||
	    fail "GET /status.json"
	session_send alice "UNLOCK names:key"
	exec 5>&- 6>&-
	SESSIONS=
}
names_json
expect_grep '"key":"names:key"' "$TMP/status.json" "the key in /status.json"
expect_grep '"holders":\[\{"client":[0-9]+,"name":null' "$TMP/status.json" \
    "the holder's id, no name"
expect_grep '"waiters":\[\{"client":[0-9]+,"name":null' "$TMP/status.json" \
    "the waiter's id, no name"
expect_grep '"names":false' "$TMP/status.json" "names false"
expect_nogrep 'alice|bob' "$TMP/status.json" "a name"
daemon_stop

: >"$TMP/daemon.log"
daemon_start --metrics 127.0.0.1:0 --status-names
wait_for "grep -q '^metrics [0-9][0-9]*$' '$TMP/port'" "$READY_S" ||
    fail "no metrics port in the port file: $(cat "$TMP/port")"
URL=http://127.0.0.1:$(sed -n 's/^metrics //p' "$TMP/port")
rm -f "$TMP/alice.in" "$TMP/bob.in"
names_json
expect_grep '"holders":\[\{"client":[0-9]+,"name":"alice"' \
    "$TMP/status.json" "the holder's name"
expect_grep '"waiters":\[\{"client":[0-9]+,"name":"bob"' \
    "$TMP/status.json" "the waiter's name"
expect_grep '"names":true' "$TMP/status.json" "names true"
daemon_stop
pass "/status.json: client ids only by default, names with status-names"

# Beyond loopback: a warning at start.
: >"$TMP/daemon.log"
daemon_start --metrics 0.0.0.0:0
wait_log 'metrics 0\.0\.0\.0:0 is not a loopback address' \
    "the warning for 0.0.0.0"
daemon_stop
pass "a warning for a listener beyond loopback"

# Out of descriptors: a daemon with RLIMIT_NOFILE 40 (set by a wrapper that
# execs it), 45 lock clients, so that the last ones wait in the lock port's
# backlog, and then one HTTP client that connects and sends nothing. Every
# listener, the HTTP one too, pauses 100 ms at a time and says so once per
# 10 s, where libevent's listener would retry at once and warn at each
# try (3.3 s of CPU and 22 MB of log in 5 s); once lock clients go, the HTTP
# request is answered.
cat >"$TMP/nofile40" <<EOF
#!/bin/sh
ulimit -n 40 || exit 1
exec "$KEYLOCKD" "\$@"
EOF
chmod +x "$TMP/nofile40"
cat >"$TMP/fds.py" <<'PY'
import os, socket, sys, time
pid, port, mport, log, secs = int(sys.argv[1]), int(sys.argv[2]), \
    int(sys.argv[3]), sys.argv[4], float(sys.argv[5])
def cpu_ms():
    f = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) * 1000 // os.sysconf("SC_CLK_TCK")
locks = []
for i in range(45):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"PING\n")
    locks.append(s)
end = time.time() + 10 * secs
while b"pausing" not in open(log, "rb").read() and time.time() < end:
    time.sleep(0.05)
h = socket.create_connection(("127.0.0.1", mport), timeout=10 * secs)
time.sleep(0.2)
c0, l0 = cpu_ms(), os.path.getsize(log)
time.sleep(3)
print("cpu_ms", cpu_ms() - c0, "log_bytes", os.path.getsize(log) - l0,
    flush=True)
for s in locks[:20]:
    s.close()
h.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
r = h.recv(100)
print("then", r.split(b" ")[1].decode() if r else "000", flush=True)
PY
: >"$TMP/daemon.log"
_keylockd=$KEYLOCKD
KEYLOCKD=$TMP/nofile40
daemon_start --metrics 127.0.0.1:0
KEYLOCKD=$_keylockd
wait_for "grep -q '^metrics [0-9][0-9]*$' '$TMP/port'" "$READY_S" ||
    fail "no metrics port in the port file: $(cat "$TMP/port")"
MPORT=$(sed -n 's/^metrics //p' "$TMP/port")
python3 "$TMP/fds.py" "$DPID" "$PORT" "$MPORT" "$TMP/daemon.log" "$SLOW" \
    >"$TMP/fds.out" 2>&1 || fail "fds.py: $(cat "$TMP/fds.out")"
set -- $(sed -n 's/^cpu_ms \([0-9]*\) log_bytes \([0-9]*\)$/\1 \2/p' \
    "$TMP/fds.out")
[ $# -eq 2 ] || fail "fds.py: $(cat "$TMP/fds.out")"
expect_nogrep 'Error from accept' "$TMP/daemon.log" "libevent's accept warning"
[ "$2" -lt 1000 ] || fail "$2 bytes of log in 3 s out of descriptors"
[ "$1" -lt $((300 * SLOW)) ] ||
    fail "$1 ms of CPU in 3 s out of descriptors: the listener spins"
expect_grep 'accept \(pausing it for 100 ms' "$TMP/daemon.log" "the pause's warning"
expect_grep '^then 200$' "$TMP/fds.out" "the HTTP request once lock clients go"
daemon_stop
pass "out of descriptors: $1 ms of CPU and $2 bytes of log in 3 s; answered after"

# metrics-max-connections-per-address: two slow clients from 127.0.0.1
# fill its share, a third and a request from it are closed unanswered,
# while a request from 127.0.0.2 is answered (4 slots in all); once they
# go, 127.0.0.1 is answered again.
: >"$TMP/daemon.log"
daemon_start --metrics 127.0.0.1:0 --metrics-max-connections 4 \
    --metrics-max-connections-per-address 2
wait_for "grep -q '^metrics [0-9][0-9]*$' '$TMP/port'" "$READY_S" ||
    fail "no metrics port in the port file: $(cat "$TMP/port")"
MPORT=$(sed -n 's/^metrics //p' "$TMP/port")
URL=http://127.0.0.1:$MPORT
expect_eq 200 "$(code --interface 127.0.0.2 "$URL/healthz")" \
    "a request from 127.0.0.2 (can this host use it?)"
python3 "$TMP/slow.py" "$MPORT" 3 600 0.5 >"$TMP/addr.out" 2>&1 &
SLOW_addr=$!
BGPIDS="$BGPIDS $!"
wait_for "grep -q '^closed' '$TMP/addr.out'" "$READY_S" ||
    fail "the third slow client from 127.0.0.1 was not closed"
expect_eq 000 "$(code "$URL/healthz")" \
    "a request from 127.0.0.1 past its share"
wait_log 'refused: metrics-max-connections-per-address 2 are open from 127\.0\.0\.1' \
    "the refusal's warning"
expect_eq 200 "$(code --interface 127.0.0.2 "$URL/healthz")" \
    "a request from 127.0.0.2 meanwhile"
kill "$SLOW_addr"
wait_for "[ \$(code '$URL/healthz') = 200 ]" "$REPLY_S" ||
    fail "a request from 127.0.0.1 once its slow clients have gone"
daemon_stop
pass "metrics-max-connections-per-address 2: a third from one address" \
    "refused, another address answered"
