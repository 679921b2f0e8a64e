#!/bin/sh
# Live upgrade (keylockd(8), LIVE UPGRADE). The daemon runs from a copy of
# the binary in $TMP/bin, which each case replaces: a new binary that is
# missing, fails --check-config, exits 1, crashes, hangs past the deadline
# or is handed a state of a future version leaves the running daemon
# serving, with the same pid, its locks' tokens going on and not one
# descriptor more; a good one takes over on SIGUSR2 with the listeners,
# the counters and the token mark. UPGRADE is an operator command and
# answers ERR UPGRADE with the reason while it cannot hand everything over.
. "$(dirname "$0")/lib.sh"
need nc
REAL=$KEYLOCKD
BIN=$TMP/bin
NEWPID=

cleanup_suite() {
	for s in $SESSIONS; do
		eval "exec $(session_fd "$s")>&-"
	done
	if [ -n "$NEWPID" ]; then
		kill -TERM "$NEWPID" 2>/dev/null
		wait_for "! kill -0 $NEWPID 2>/dev/null" 10
	fi
}

# The test plays systemd too (tests/service/notify.sh): the new process
# must become MAINPID, told by the old one, then say READY=1 itself.
RECV=$TOP_BUILDDIR/tests/service/notify_recv
"$RECV" "$TMP/notify" 120 >"$TMP/notify.out" 2>&1 &
BGPIDS="$BGPIDS $!"
wait_for "grep -q '^listening$' '$TMP/notify.out'" "$READY_S" ||
    fail "notify_recv did not bind: $(cat "$TMP/notify.out")"

mkdir "$BIN"
cp "$REAL" "$BIN/keylockd"
KEYLOCKD=$BIN/keylockd
NOTIFY_SOCKET=$TMP/notify
export NOTIFY_SOCKET
daemon_start
unset NOTIFY_SOCKET

stats() {
	ask_tcp STATS QUIT | sed -n '1p'
}

fds() {
	ls "/proc/$1/fd" | wc -l
}

# upgrade_fails WHAT REASON_REGEX: SIGUSR2 with the binary in place fails
# with that reason; the daemon serves on, same pid, same descriptors.
verdicts() {
	grep -Ec 'upgrade (failed|refused): ' "$TMP/daemon.log"
}

# upgrade_fails WHAT REASON_REGEX: SIGUSR2 with the binary in place fails
# with that reason; the daemon serves on, same pid, same descriptors. No
# connection is opened while the attempt runs: this version refuses to
# hand one over, which would be another verdict.
upgrade_fails() {
	_before=$(json_int "$(stats)" upgrade_failures)
	_n=$(verdicts)
	_fds=$(fds "$DPID")
	kill -USR2 "$DPID"
	wait_for "[ \$(verdicts) -gt $_n ]" 30 || fail "$1: no verdict"
	expect_grep "upgrade (failed|refused): .*$2" "$TMP/daemon.log" "$1"
	kill -0 "$DPID" || fail "$1: the daemon is gone"
	_s=$(stats)
	expect_eq "$DPID" "$(json_int "$_s" pid)" "$1: the pid"
	expect_eq "$((_before + 1))" "$(json_int "$_s" upgrade_failures)" \
	    "$1: upgrade_failures"
	expect_eq "$_fds" "$(fds "$DPID")" "$1: descriptors after"
	ask_tcp "LOCK after" "UNLOCK after" QUIT >"$TMP/out"
	expect_grep '^OK [0-9]+$' "$TMP/out" "$1: LOCK after"
	pass "$1: the daemon carries on"
}

# A lock held across every failure below, on a connection that stays.
session_open holder 3 127.0.0.1 "$PORT"
session_send holder "NAME holder"
session_send holder "LOCK kept"
session_expect holder 2 '^OK [0-9]+$' "the holder's LOCK"
TOK1=$(sed -n '2s/^OK //p' "$TMP/holder.out")

ask_tcp UPGRADE QUIT >"$TMP/out"
expect_grep '^ERR AUTH UPGRADE is an operator command' "$TMP/out" \
    "UPGRADE over TCP without the operator's secret"
ask -U "$TMP/sock" -- UPGRADE QUIT >"$TMP/out"
expect_grep '^ERR UPGRADE .*hands over no open connection' "$TMP/out" \
    "UPGRADE with connections open"
pass "UPGRADE is the operator's, and says why it cannot run"

# SIGUSR2 with connections open: refused, counted, nothing changes.
_fds=$(fds "$DPID")
kill -USR2 "$DPID"
wait_log 'upgrade refused: this version hands over no open connection' \
    "SIGUSR2 with connections open"
expect_eq "$_fds" "$(fds "$DPID")" "descriptors after a refusal"
session_send holder "PING"
session_expect holder 3 '^OK' "the holder after a refusal"
session_send holder "QUIT"
session_expect holder 4 '^OK' "the holder's QUIT"
wait_for "[ \"\$(json_int \"\$(stats)\" clients)\" = 1 ]" "$REPLY_S" ||
    fail "the holder did not leave"

# Each broken binary in turn (with no connection open, so that the
# attempt goes as far as it can).
rm "$BIN/keylockd"
upgrade_fails "a missing binary" ".*keylockd: No such file or directory"

printf '#!/bin/sh\necho "bad: line 3: no-such-setting"\nexit 78\n' \
    >"$BIN/keylockd"
chmod +x "$BIN/keylockd"
upgrade_fails "a binary whose --check-config fails" \
    "--check-config exited with status 78: bad: line 3"

cat >"$BIN/keylockd" <<EOF
#!/bin/sh
case " \$* " in *" --check-config "*) exit 0;; esac
exit 1
EOF
upgrade_fails "a binary that exits 1" "exited with status 1 before it was"

cat >"$BIN/keylockd" <<EOF
#!/bin/sh
case " \$* " in *" --check-config "*) exit 0;; esac
kill -SEGV \$\$
EOF
upgrade_fails "a binary that crashes" "was killed by signal 11"

cat >"$BIN/keylockd" <<EOF
#!/bin/sh
case " \$* " in *" --check-config "*) exit 0;; esac
exec sleep 600
EOF
upgrade_fails "a binary that hangs" "was not ready within [0-9]+ ms"

# The real binary, handed the same state with a version it does not know.
cat >"$BIN/keylockd" <<EOF
#!/bin/sh
case " \$* " in *" --check-config "*) exec "$REAL" "\$@";; esac
s=\${KEYLOCKD_UPGRADE%,*}
head -c 8 "/proc/self/fd/\$s" >"$TMP/future"
printf '\\002\\000\\000\\000' >>"$TMP/future"
tail -c +13 "/proc/self/fd/\$s" >>"$TMP/future"
exec 7<"$TMP/future"
KEYLOCKD_UPGRADE=7,\${KEYLOCKD_UPGRADE#*,} exec "$REAL" "\$@"
EOF
upgrade_fails "a state of a future version" \
    "state version 2, this binary reads version 1 only"

# The good binary takes over.
ask_tcp "LOCK before" "UNLOCK before" QUIT >"$TMP/out"
TOK2=$(sed -n '1s/^OK //p' "$TMP/out")
[ "$TOK2" -gt "$TOK1" ] || fail "tokens went back: $TOK1 then $TOK2"
S0=$(stats)
cp "$REAL" "$BIN/keylockd"
OLD=$DPID
kill -USR2 "$OLD"
wait "$OLD"
expect_status 0 $? "the old process's exit"
DPID=
NEWPID=$(json_int "$(stats)" pid)
[ -n "$NEWPID" ] && [ "$NEWPID" != "$OLD" ] ||
    fail "no new pid after the upgrade: $(stats)"
S1=$(stats)
expect_eq 1 "$(json_int "$S1" upgrades)" "upgrades"
for c in grants releases upgrade_failures; do
	expect_eq "$(json_int "$S0" $c)" "$(json_int "$S1" $c)" \
	    "STATS $c across the upgrade"
done
# S0's QUIT, the STATS and QUIT that found the new pid, S1's STATS
expect_eq "$(($(json_int "$S0" requests) + 4))" \
    "$(json_int "$S1" requests)" "STATS requests across the upgrade"
# the one that found the new pid, and S1's
expect_eq "$(($(json_int "$S0" connections) + 2))" \
    "$(json_int "$S1" connections)" "STATS connections across the upgrade"
ask -U "$TMP/sock" -- "LOCK after" QUIT >"$TMP/out"
TOK3=$(sed -n '1s/^OK //p' "$TMP/out")
[ "$TOK3" -gt "$TOK2" ] || fail "tokens went back: $TOK2 then $TOK3"
expect_grep "upgrade: took over from pid $OLD" "$TMP/daemon.log" \
    "the new process's log"
pass "SIGUSR2: pid $NEWPID took over from $OLD with the listeners, the \
counters and the token mark"
_m=$(grep -n "^MAINPID=$NEWPID\$" "$TMP/notify.out" | head -n 1 | cut -d: -f1)
[ -n "$_m" ] || fail "no MAINPID=$NEWPID: $(cat "$TMP/notify.out")"
sed -n "$((_m + 1)),\$p" "$TMP/notify.out" | grep -q '^READY=1$' ||
    fail "no READY=1 after MAINPID=$NEWPID: $(cat "$TMP/notify.out")"
pass "systemd: MAINPID=$NEWPID, then READY=1"
