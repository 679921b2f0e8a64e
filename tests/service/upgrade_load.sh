#!/bin/sh
# Live upgrade under load (issue 21, Tests): 50 clients, half of them
# libkeylock (tests/service/upgrade_load_client), half raw sockets, cycle
# locks on shared keys over TCP while 20 upgrades run back to back
# (tests/service/upgrade_load.py keeps the history and checks it): no
# connection dropped, every request answered in order, no two holders of
# a key at once, tokens rising, no grant lost (STATS grants against the
# clients' count), keys 0 at the end, and the daemon's descriptors as
# many after the upgrades as before.
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
CLIENTS=50
UPGRADES=20
python3 "$(dirname "$0")/upgrade_load.py" "$PORT" "$TMP/sock" "$CLIENTS" \
    "$UPGRADES" "$TOP_BUILDDIR/tests/service/upgrade_load_client" "$TMP" \
    >"$TMP/out" 2>"$TMP/err"
rc=$?
NEWPID=$(sed -n 's/^PID //p' "$TMP/out")
[ "$NEWPID" = "$OLD" ] && NEWPID=
wait "$OLD" 2>/dev/null
DPID=
[ "$rc" -eq 0 ] || fail "$(cat "$TMP/err") ($(cat "$TMP/out"))"
pass "$CLIENTS clients cycling locks through $UPGRADES upgrades: $(head -n 1 "$TMP/out")"
