#!/bin/sh
# Live upgrade under load (issue 21): clients cycle locks on shared keys
# over TCP while upgrades run back to back (tests/service/upgrade_load.py
# keeps the history): no connection dropped, every request answered in
# order, no two holders of a key at once, tokens rising, keys 0 at the
# end, and the daemon's descriptors as many after the upgrades as before.
. "$(dirname "$0")/lib.sh"
need python3
NEWPID=

cleanup_suite() {
	if [ -n "$NEWPID" ]; then
		kill -TERM "$NEWPID" 2>/dev/null
		wait_for "! kill -0 $NEWPID 2>/dev/null" 10
	fi
}

mkdir "$TMP/bin"
cp "$KEYLOCKD" "$TMP/bin/keylockd"
KEYLOCKD=$TMP/bin/keylockd
daemon_start
OLD=$DPID
python3 "$(dirname "$0")/upgrade_load.py" "$PORT" "$TMP/sock" 20 5 \
    >"$TMP/out" 2>"$TMP/err"
rc=$?
NEWPID=$(sed -n 's/^PID //p' "$TMP/out")
[ "$NEWPID" = "$OLD" ] && NEWPID=
wait "$OLD" 2>/dev/null
DPID=
[ "$rc" -eq 0 ] || fail "$(cat "$TMP/err") ($(cat "$TMP/out"))"
pass "20 clients cycling locks through 5 upgrades: $(head -n 1 "$TMP/out")"
