#!/bin/sh
# keylock upgrade (keylock(1); keylockd(8), LIVE UPGRADE): the operator's,
# refused over plain TCP without the operator's secret (77); over the
# unix socket it prints the new pid, version and pause, and the daemon's
# pid changes; --json prints the reply. A new binary that fails leaves
# the daemon serving: keylock prints the server's reason and exits 65.
# Through all of it two keylock processes hold their locks, one of them
# in a session (libkeylock's), and exit 0: neither lock was lost.
. "$(dirname "$0")/lib.sh"
REAL=$KEYLOCKD
NEWPID=

cleanup_suite() {
	if [ -n "$NEWPID" ]; then
		kill -TERM "$NEWPID" 2>/dev/null
		wait_for "! kill -0 $NEWPID 2>/dev/null" 10
	fi
}

# The daemon runs from a copy, which a case replaces.
mkdir "$TMP/bin"
cp "$REAL" "$TMP/bin/keylockd"
KEYLOCKD=$TMP/bin/keylockd
(umask 077 && printf 'operator-secret\n' >"$TMP/admin")
daemon_start --admin-auth-file "$TMP/admin"
OLD=$DPID

hold plain --name plain
hold sess --name sess --session=30000

"$KEYLOCK" upgrade >"$TMP/out" 2>"$TMP/err"
expect_status 77 $? "upgrade over TCP without the operator's secret"
expect_grep "UPGRADE is for the operator" "$TMP/err" "the hint"
kill -0 "$OLD" || fail "the daemon is gone after a refused upgrade"
pass "upgrade: refused over TCP without the operator's secret (77)"

bounded 40 "$KEYLOCK" -S "$TMP/sock" upgrade >"$TMP/out" 2>"$TMP/err"
expect_status 0 $? "upgrade over the unix socket: $(cat "$TMP/err")"
grep -Eq '^keylockd [^ ]+, pid [0-9]+, took over after a pause of [0-9]+ ms: [0-9]+ connections handed over, 0 TLS connections closed$' \
    "$TMP/out" || fail "upgrade's line: $(cat "$TMP/out")"
NEWPID=$(sed -n 's/.*, pid \([0-9]*\),.*/\1/p' "$TMP/out")
wait_exit "$OLD" 10
expect_status 0 $? "the old process's exit"
DPID=
[ "$NEWPID" != "$OLD" ] || fail "the same pid after the upgrade"
kill -0 "$NEWPID" || fail "the new process $NEWPID is not running"
"$KEYLOCK" stats --json | grep -Eq "\"pid\":$NEWPID[,}]" ||
    fail "STATS does not name pid $NEWPID"
pass "upgrade: $(cat "$TMP/out")"

bounded 40 "$KEYLOCK" --auth-file "$TMP/admin" upgrade --json \
    >"$TMP/out" 2>"$TMP/err"
expect_status 0 $? "upgrade --json with the operator's secret"
grep -Eq '^\{"pid":[0-9]+,"version":"[^"]+","pause_ms":[0-9]+,"connections":[0-9]+,"tls_closed":0\}$' \
    "$TMP/out" || fail "upgrade --json: $(cat "$TMP/out")"
OLD=$NEWPID
NEWPID=$(sed -n 's/.*"pid":\([0-9]*\).*/\1/p' "$TMP/out")
wait_for "! kill -0 $OLD 2>/dev/null" 10 || fail "pid $OLD still runs"
pass "upgrade --json with the operator's secret: $(cat "$TMP/out")"

# A new binary that exits 1 instead of taking over (the running one's
# file is busy: a new file in its place).
rm "$TMP/bin/keylockd"
cat >"$TMP/bin/keylockd" <<EOF
#!/bin/sh
case " \$* " in *" --check-config "*) exec "$REAL" "\$@";; esac
exit 1
EOF
chmod +x "$TMP/bin/keylockd"
bounded 40 "$KEYLOCK" -S "$TMP/sock" upgrade >"$TMP/out" 2>"$TMP/err"
expect_status 65 $? "a failed upgrade"
expect_grep "UPGRADE .*exited with status 1" "$TMP/err" "the reason"
expect_grep "carries on" "$TMP/err" "what it means"
[ ! -s "$TMP/out" ] || fail "output on a failed upgrade: $(cat "$TMP/out")"
"$KEYLOCK" stats --json | grep -Eq "\"pid\":$NEWPID[,}]" ||
    fail "the daemon $NEWPID does not serve after the failed upgrade"
pass "a failed upgrade: exit 65 with the server's reason"

# Neither holder noticed: both still hold, and let go with status 0.
"$KEYLOCK" -n plain -c true 2>/dev/null
expect_status 1 $? "plain is still held"
"$KEYLOCK" -n sess -c true 2>/dev/null
expect_status 1 $? "sess is still held"
release plain
release sess
pass "a plain holder and a session's holder rode through two upgrades and a failed one"
