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

"$KEYLOCK" --help | grep -q '^usage: keylock' || fail "--help"
"$KEYLOCK" --version | grep -q '^keylock [0-9]' || fail "--version"
pass "--help, --version"
