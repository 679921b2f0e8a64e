#!/bin/sh
# ping, stats, info, top; and the rule that tells a subcommand from a key:
# with "--" or "-c" the words are keys, otherwise the first is a subcommand.
. "$(dirname "$0")/lib.sh"
daemon_start

out=$("$KEYLOCK" ping)
expect_status 0 $? "ping"
case $out in "PONG from $KEYLOCK_SERVER in "*" ms") ;;
*) fail "ping printed \"$out\"" ;; esac
"$KEYLOCK" -S "$TMP/sock" ping >/dev/null
expect_status 0 $? "ping over the unix socket"
"$KEYLOCK" -S "$TMP/no-such-socket" ping 2>/dev/null
expect_status 69 $? "ping without a server"
pass "ping: PONG, 69 without a server"

hold k --name holder
"$KEYLOCK" stats >"$TMP/out"
expect_status 0 $? "stats"
expect_grep "^keylockd .*, up .*, [0-9]* clients$" "$TMP/out" "stats header"
expect_grep "keys 1, held 1, waiting 0" "$TMP/out" "stats gauges"
expect_grep "^k  *1  *0 " "$TMP/out" "stats hot keys"
"$KEYLOCK" stats --json >"$TMP/out"
expect_status 0 $? "stats --json"
expect_grep '^{"version":.*"keys":1,' "$TMP/out" "stats --json"
if command -v python3 >/dev/null; then
	python3 -m json.tool "$TMP/out" >/dev/null ||
	    fail "stats --json is not JSON"
fi
pass "stats: readable summary and --json"

"$KEYLOCK" info k >"$TMP/out"
expect_status 0 $? "info"
expect_grep "^key k, limit 1$" "$TMP/out" "info header"
expect_grep "^  client [0-9]* (holder), token [0-9]*, exclusive, held" \
    "$TMP/out" "info holder"
expect_grep "^waiters: 0$" "$TMP/out" "info waiters"
"$KEYLOCK" info k --json >"$TMP/out"
expect_grep '"name":"holder"' "$TMP/out" "info --json"
# A holder and a waiter on channels: client/channel, as the protocol's
# texts name them (keylockd-protocol(7), CHANNELS).
cat >"$TMP/chan.py" <<'PY'
import os, socket, sys, time
host, port = sys.argv[1].rsplit(":", 1)
s = socket.create_connection((host, int(port)))
s.sendall(b"NAME chans\r\n@7 LOCK kc\r\n@9 LOCK kc timeout=60000\r\n")
f = s.makefile("rb")
print(f.readline().decode().strip(), f.readline().decode().strip(),
    flush=True)
while not os.path.exists(sys.argv[2]):
    time.sleep(0.02)
PY
python3 "$TMP/chan.py" "$KEYLOCK_SERVER" "$TMP/chan.done" >"$TMP/chan.out" &
BGPIDS="$BGPIDS $!"
# (python's start on a loaded host: the readiness bound, not a reply's)
wait_for "grep -q '@7 OK' '$TMP/chan.out'" "$READY_S" ||
    fail "no channel 7 grant: $(cat "$TMP/chan.out")"
wait_for "\"\$KEYLOCK\" info kc | grep -q '^waiters: 1'" "$READY_S" ||
    fail "no waiter on channel 9"
"$KEYLOCK" info kc >"$TMP/out"
expect_grep "^  client [0-9]*/7 (chans), token [0-9]*, exclusive, held" \
    "$TMP/out" "info: a channel's holder"
expect_grep "^  client [0-9]*/9 (chans), exclusive, waited" \
    "$TMP/out" "info: a channel's waiter"
touch "$TMP/chan.done"
"$KEYLOCK" info "$(printf 'bad\377')" 2>"$TMP/err"
expect_status 65 $? "info of a bad key"
pass "info: holders and waiters, --json"

bounded 10 "$KEYLOCK" top -n 3 -d 0.1 >"$TMP/out" </dev/null
expect_status 0 $? "top -n 3"
[ "$(grep -c '^keylockd ' "$TMP/out")" -eq 3 ] || fail "top: not 3 frames"
expect_grep "^per second: grants 0.0," "$TMP/out" "top rates"
expect_grep "^k  *1  *0 " "$TMP/out" "top hot keys"
pass "top -n 3 -d 0.1: three frames with rates and hot keys"
release k

out=$("$KEYLOCK" stats -- sh -c 'echo "$KEYLOCK_KEYS"')
[ "$out" = stats ] || fail "keylock stats -- CMD locked \"$out\""
out=$("$KEYLOCK" ping -c 'echo "$KEYLOCK_KEYS"')
[ "$out" = ping ] || fail "keylock ping -c CMD locked \"$out\""
"$KEYLOCK" stat 2>"$TMP/err"
expect_status 64 $? "an unknown subcommand"
expect_grep "not a subcommand" "$TMP/err" "unknown subcommand message"
pass "with -- or -c, \"stats\" and \"ping\" are keys"

"$KEYLOCK" --help >"$TMP/help" || fail "--help"
expect_grep '^usage: keylock' "$TMP/help" "--help"
# every exit status and long option keylock(1) gives, --help gives too
sed -n '/^\.SH EXIT STATUS/,/^\.SH/s/^\.B \([0-9][0-9]*\)$/\1/p' \
    "${top_srcdir:-$(dirname "$0")/../..}/man/keylock.1" >"$TMP/codes"
[ "$(wc -l <"$TMP/codes")" -ge 8 ] || fail "exit codes in keylock(1)"
tr '\n' ' ' <"$TMP/help" | sed 's/[;:,./]/ /g' >"$TMP/help1"
while read -r n; do
	grep -q " $n " "$TMP/help1" ||
	    fail "exit status $n of keylock(1) is not in --help"
done <"$TMP/codes"
# (the options' own lines, .B/.BR/.BI of OPTIONS: not other programs')
sed -n '/^\.SH OPTIONS/,/^\.SH/{/^\.TP/{n;/^\.B[RI]* /p;}}' \
    "${top_srcdir:-$(dirname "$0")/../..}/man/keylock.1" |
    grep -o '\\-\\-[a-z][a-z\\-]*' | sed 's/\\//g' | sort -u \
    >"$TMP/longopts"
grep -q -- '--timeout' "$TMP/longopts" || fail "no --timeout in keylock(1)"
while read -r o; do
	grep -q -- "$o" "$TMP/help" ||
	    fail "option $o of keylock(1) is not in --help"
done <"$TMP/longopts"
"$KEYLOCK" --version | grep -q '^keylock [0-9]' || fail "--version"
pass "--help, --version"
