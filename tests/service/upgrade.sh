#!/bin/sh
# Live upgrade (keylockd(8), LIVE UPGRADE). The daemon runs from a copy of
# the binary in $TMP/bin, which each case replaces: a new binary that is
# missing, fails --check-config, exits 1, crashes, hangs past the deadline
# or reads a state version other than this one's leaves the running daemon
# serving, with the same pid, not one descriptor more, and a holder still
# holding its lock on its connection. A good one takes over on UPGRADE
# with every connection: INFO, CLIENTS and STATS read the same, a line
# half sent before is served after, a ttl runs out on time, a waiter is
# granted on its old connection with a larger token; then once more on
# SIGUSR2. Sessions across an upgrade: upgrade_sessions.sh.
. "$(dirname "$0")/lib.sh"
need nc
need python3
need timeout
REAL=$KEYLOCKD
BIN=$TMP/bin
NEWPID=
HOLDER_N=0

cleanup_suite() {
	for s in $SESSIONS; do
		eval "exec $(session_fd "$s")>&-"
	done
	# A takeover the test failed before it read (UPGRADE's reply late,
	# say): the state directory's lock names the process holding it, and
	# its command line names this test's directory.
	if [ -z "$NEWPID" ]; then
		_h=$(sed -n 1p "$TMP/lock" 2>/dev/null)
		if [ -n "$_h" ] && [ "$_h" != "$DPID" ] &&
		    tr '\0' ' ' <"/proc/$_h/cmdline" 2>/dev/null |
		    grep -qF "$TMP/"; then
			NEWPID=$_h
		fi
	fi
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
: >"$TMP/keylockd.conf"
daemon_start --config "$TMP/keylockd.conf"
unset NOTIFY_SOCKET

stats() {
	ask_tcp STATS QUIT | sed -n '1p'
}

fds() {
	ls "/proc/$1/fd" | wc -l
}

verdicts() {
	grep -Ec 'upgrade (failed|refused): ' "$TMP/daemon.log"
}

holder_ping() {
	HOLDER_N=$((HOLDER_N + 1))
	session_send holder "PING"
	session_expect holder "$HOLDER_N" '^OK PONG$' "$1: the holder"
}

# upgrade_fails WHAT REASON_REGEX: SIGUSR2 with the binary in place fails
# with that reason; the daemon serves on, same pid, same descriptors, and
# the holder still holds its lock on its connection.
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
	ask_tcp "LOCK after" "UNLOCK after" "TRYLOCK kept" QUIT >"$TMP/out"
	expect_grep '^OK [0-9]+$' "$TMP/out" "$1: LOCK after"
	expect_grep '^ERR LOCKED' "$TMP/out" "$1: the holder's lock"
	holder_ping "$1"
	pass "$1: the daemon carries on, the holder holds"
}

# reload_with LINE: the daemon's file holds LINE alone, and it has read it
# (SIGHUP). upgrade-timeout is live: the hang below ends after 1.5 s.
reload_with() {
	printf '%s\n' "$1" >"$TMP/keylockd.conf"
	_n=$(grep -c 'SIGHUP: reloading' "$TMP/daemon.log")
	kill -HUP "$DPID"
	wait_for "[ \$(grep -c 'SIGHUP: reloading' '$TMP/daemon.log') -gt $_n ]" \
	    10 || fail "no reload after SIGHUP"
	ask_tcp PING QUIT >/dev/null	# answered: the reload is over
}

# second_refused WHAT PID: another keylockd on the same state directory
# exits 1, naming it and PID, which holds it (keylockd(8), FILES).
# (bounded: one that started anyway would serve until killed)
second_refused() {
	timeout -s KILL "$READY_S" "$REAL" --config /dev/null --port 0 \
	    --unix '' --state-dir "$TMP" >"$TMP/second.out" 2>&1
	_rc=$?
	[ "$_rc" -eq 1 ] ||
	    fail "$1: a second keylockd on $TMP: status $_rc, want 1"
	expect_grep "state dir $TMP is in use by another keylockd, pid $2 " \
	    "$TMP/second.out" "$1: the second keylockd's error"
	pass "$1: a second keylockd on the state directory exits $_rc"
}
second_refused "before any upgrade" "$DPID"

# A lock held across every failure below, on a connection that stays.
session_open holder 3 127.0.0.1 "$PORT"
session_send holder "NAME holder"
session_send holder "LOCK kept"
session_expect holder 2 '^OK [0-9]+$' "the holder's LOCK"
HOLDER_N=2
TOK1=$(sed -n '2s/^OK //p' "$TMP/holder.out")

ask_tcp UPGRADE QUIT >"$TMP/out"
expect_grep '^ERR AUTH UPGRADE is an operator command' "$TMP/out" \
    "UPGRADE over TCP without the operator's secret"
pass "UPGRADE is the operator's"

# Each broken binary in turn.
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
reload_with "upgrade-timeout 1500"
expect_grep "reload: upgrade-timeout changed from 10000 to 1500" \
    "$TMP/daemon.log" "the reload"
upgrade_fails "a binary that hangs" "was not ready within 1500 ms"

# While that one hangs, a second SIGUSR2 and an UPGRADE are refused alike:
# logged as refused, ERR UPGRADE to the UPGRADE, neither counted; the one
# under way fails and is counted once.
refusals() {
	grep -c 'upgrade refused: an upgrade is already under way' \
	    "$TMP/daemon.log"
}
_before=$(json_int "$(stats)" upgrade_failures)
_r=$(refusals)
_f=$(grep -c 'upgrade failed: ' "$TMP/daemon.log")
_c=$(grep -c 'upgrade: .* --check-config' "$TMP/daemon.log")
kill -USR2 "$DPID"
wait_for "[ \$(grep -c 'upgrade: .* --check-config' '$TMP/daemon.log') -gt $_c ]" \
    10 || fail "the first SIGUSR2 did not start an upgrade"
kill -USR2 "$DPID"
printf 'UPGRADE\nQUIT\n' | nc -U "$TMP/sock" >"$TMP/out"
expect_grep '^ERR UPGRADE an upgrade is already under way' "$TMP/out" \
    "UPGRADE while one is under way"
wait_for "[ \$(refusals) -ge $((_r + 2)) ]" 10 ||
    fail "refusals logged: $(($(refusals) - _r)), want 2"
wait_for "[ \$(grep -c 'upgrade failed: ' '$TMP/daemon.log') -gt $_f ]" 30 ||
    fail "the upgrade under way did not end"
expect_eq "$((_r + 2))" "$(refusals)" "refusals logged"
expect_eq "$((_before + 1))" "$(json_int "$(stats)" upgrade_failures)" \
    "upgrade_failures after two refusals and one failure"
holder_ping "refusals"
pass "an upgrade under way: SIGUSR2 and UPGRADE refused alike, not counted"

# A binary that is a wrapper script whose child never gets ready (it
# ignores SIGTERM, too), for the new process and for --check-config: the
# deadline kills the wrapper's process group, so no child of it is left.
# alive PID: running, not a zombie (one nobody reaped is dead).
alive() {
	_st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1)
	[ -n "$_st" ] && [ "$_st" != Z ]
}
for step in new check; do
	rm -f "$TMP/wrapped.pid"
	if [ $step = new ]; then
		_case='*" --check-config "*) exit 0;;'
		_why="was not ready within 1500 ms"
	else
		_case='*" --check-config "*) ;; *) exit 1;;'
		_why="--check-config did not finish within 1500 ms"
	fi
	cat >"$BIN/keylockd" <<WRAPPER
#!/bin/sh
case " \$* " in $_case esac
sh -c 'trap "" TERM; sleep 600' &
echo \$! >"$TMP/wrapped.pid"
wait
WRAPPER
	upgrade_fails "a wrapper script whose child hangs ($step)" "$_why"
	[ -s "$TMP/wrapped.pid" ] || fail "the wrapper ($step) did not start"
	_w=$(cat "$TMP/wrapped.pid")
	wait_for "! alive $_w" 5 ||
	    fail "the wrapper's child $_w ($step) survived the deadline"
	pass "a wrapper script ($step): its child is killed with it"
done
reload_with ""

# One that says it waits, and crashes once the old process froze and sent
# it the state and every descriptor (it reads the first message).
cat >"$BIN/keylockd" <<EOF
#!/bin/sh
case " \$* " in *" --check-config "*) exit 0;; esac
exec python3 -c '
import os, signal, socket, sys
s = socket.socket(fileno=int(os.environ["KEYLOCKD_UPGRADE"].split(",")[0]))
s.send(b"WAITING %d\\n" % os.getpid())
open(sys.argv[1], "wb").write(s.recv(256))
os.kill(os.getpid(), signal.SIGSEGV)
' "$TMP/handed"
EOF
upgrade_fails "a binary that crashes with the state in hand" \
    "was killed by signal 11"
expect_grep '^STATE [0-9]+ [0-9]+' "$TMP/handed" "the state was handed over"

# The real binary, with the state's reader and writer of another version
# (tests/service/local.mk), handed this one's state: one that knows only
# the version after it, one only the version before (a binary reads its
# own version only).
KS=$(sed -n 's/^#define KS_VERSION[[:space:]]*\([0-9]*\).*/\1/p' \
    "$top_srcdir/src/core/kstate.h")
[ -n "$KS" ] || fail "no KS_VERSION in src/core/kstate.h"
for v in next prev; do
	case $v in
	next) n=$((KS + 1)) ;;
	prev) n=$((KS - 1)) ;;
	esac
	cp "$TOP_BUILDDIR/tests/service/keylockd_ks_$v" "$BIN/keylockd"
	upgrade_fails "a binary of state version $n" \
	    "state version $KS, this binary reads version $n only"
done
second_refused "after the failed upgrades" "$DPID"

# The good binary takes over everything: the holder (with a ttl lock too
# and half a line sent), a waiter queued behind it, the counters.
cp "$REAL" "$BIN/keylockd"
HOLDER_N=$((HOLDER_N + 1))
session_send holder "LOCK brief ttl=5000"
session_expect holder "$HOLDER_N" '^OK [0-9]+$' "the ttl LOCK"
TG=$(now_ms)	# brief was granted before this
session_open waiter 5 127.0.0.1 "$PORT"
session_send waiter "NAME waiter"
session_send waiter "LOCK kept timeout=60000"
session_expect waiter 1 '^OK$' "the waiter's NAME"
wait_for "ask_tcp 'INFO kept' | grep -q '\"waiters\":\[{'" "$REPLY_S" ||
    fail "the waiter is not queued"
printf 'PI' >&"$(session_fd holder)"
ask_tcp "INFO kept" QUIT | sed -n 1p >"$TMP/info0"
S0=$(stats)
OLD=$DPID
session_open op 6 -U "$TMP/sock"
session_send op UPGRADE
# its reply comes once the new process is ready: within upgrade-timeout
# (10 s here since the reload above), not one request's REPLY_S (an ASan
# build at load 12 took more than 5 s in a fresh-clone CI run)
session_expect op 1 '^OK' "UPGRADE's reply" 15
sed -n 1p "$TMP/op.out" >"$TMP/out"
TI=$(now_ms)	# the new process answers this INFO after this
ask_tcp "INFO brief" QUIT | sed -n 1p >"$TMP/brief"
expect_grep '^OK \{"pid":[0-9]+,"version":"[^"]+","pause_ms":[0-9]+,"connections":[0-9]+,"tls_closed":0\}$' \
    "$TMP/out" "UPGRADE's reply"
wait "$OLD"
expect_status 0 $? "the old process's exit"
DPID=
NEWPID=$(sed -n 's/.*"pid":\([0-9]*\).*/\1/p' "$TMP/out")
[ "$NEWPID" != "$OLD" ] || fail "the same pid after UPGRADE"
kill -0 "$NEWPID" || fail "the new process $NEWPID is not running"
expect_eq "$NEWPID" "$(json_int "$(stats)" pid)" "STATS pid"
pass "UPGRADE: pid $NEWPID took over from $OLD: $(cat "$TMP/out")"
# the new process holds the state directory's lock, passed on unbroken
second_refused "after UPGRADE" "$NEWPID"

# The same lock table, seen through INFO (the times aside, which run on).
ask_tcp "INFO kept" QUIT | sed -n 1p >"$TMP/info1"
expect_eq "$(sed 's/"[a-z]*_ms":[0-9]*//g' "$TMP/info0")" \
    "$(sed 's/"[a-z]*_ms":[0-9]*//g' "$TMP/info1")" \
    "INFO kept across the upgrade"
ask -U "$TMP/sock" -- CLIENTS QUIT | sed -n 1p >"$TMP/clients"
expect_grep '"name":"holder"' "$TMP/clients" "CLIENTS: the holder"
expect_grep '"name":"waiter"' "$TMP/clients" "CLIENTS: the waiter"
S1=$(stats)
expect_eq 1 "$(json_int "$S1" upgrades)" "upgrades"
for c in grants releases upgrade_failures waiting; do
	expect_eq "$(json_int "$S0" $c)" "$(json_int "$S1" $c)" \
	    "STATS $c across the upgrade"
done
# brief's ttl may run out meanwhile: held moves to expired, nothing else
expect_eq "$(($(json_int "$S0" held) + $(json_int "$S0" expired)))" \
    "$(($(json_int "$S1" held) + $(json_int "$S1" expired)))" \
    "STATS held + expired across the upgrade"
pass "INFO, CLIENTS and STATS are the same after the upgrade"

# The half line, completed now, is served by the new process.
printf 'NG\n' >&"$(session_fd holder)"
HOLDER_N=$((HOLDER_N + 1))
session_expect holder "$HOLDER_N" '^OK PONG$' "the half-sent PING"
pass "a line half sent before the upgrade is served after it"

# The ttl runs out when it should (extended by the pause at most): what
# the new process said was left of it is no more than its 5000 ms, less
# what had passed from its grant (before TG) to that INFO (after TI),
# plus the pause (and a millisecond's rounding each). Judged on the
# daemon's own figures: the checks since then took the test's time, not
# the daemon's (at load 10, 7.5 s from the UPGRADE to seeing it gone).
LEFT=$(sed -n 's/.*"expires_in_ms":\([0-9]*\).*/\1/p' "$TMP/brief")
PAUSE=$(sed -n 's/.*"pause_ms":\([0-9]*\).*/\1/p' "$TMP/out")
if [ -n "$LEFT" ]; then
	[ "$LEFT" -le $((5000 + PAUSE + 2 - (TI - TG))) ] ||
	    fail "brief had $LEFT ms left $((TI - TG)) ms after its grant" \
	    "(ttl 5000, pause $PAUSE ms): $(cat "$TMP/brief")"
else
	expect_grep '"holders":\[\]' "$TMP/brief" \
	    "brief, if not held, has run out"
fi
wait_for "ask_tcp 'INFO brief' QUIT | grep -q '\"holders\":\[\]'" 10 ||
    fail "the ttl of brief never ran out"
pass "a ttl set before the upgrade runs out after it (${LEFT:-no} ms left $((TI - TG)) ms after its grant, pause $PAUSE ms)"

# The waiter is granted on its old connection, with a larger token.
HOLDER_N=$((HOLDER_N + 1))
session_send holder "UNLOCK kept"
session_expect holder "$HOLDER_N" '^OK 1$' "the holder's UNLOCK"
session_expect waiter 2 '^OK [0-9]+$' "the waiter's grant"
TOK2=$(sed -n '2s/^OK //p' "$TMP/waiter.out")
[ "$TOK2" -gt "$TOK1" ] || fail "tokens went back: $TOK1 then $TOK2"
pass "the waiter is granted on its old connection, token $TOK2 > $TOK1"

# Once more by signal, back to back: upgrades counts 2, and the
# descriptors are the same as after the first.
_fds=$(fds "$NEWPID")
kill -USR2 "$NEWPID"
wait_for "[ \"\$(json_int \"\$(stats)\" upgrades)\" = 2 ]" 30 ||
    fail "no second upgrade"
OLD=$NEWPID
NEWPID=$(json_int "$(stats)" pid)
wait_for "! kill -0 $OLD 2>/dev/null" 10 || fail "pid $OLD still runs"
expect_eq "$_fds" "$(fds "$NEWPID")" "descriptors after a second upgrade"
session_send waiter "UNLOCK kept"
session_expect waiter 3 '^OK 1$' "the waiter's UNLOCK after two upgrades"
session_send holder "QUIT"
session_send waiter "QUIT"
wait_for "[ \"\$(json_int \"\$(stats)\" keys)\" = 0 ]" "$REPLY_S" ||
    fail "keys left: $(stats)"
pass "SIGUSR2: a second upgrade, then every lock released"

_m=$(grep -n "^MAINPID=$NEWPID\$" "$TMP/notify.out" | head -n 1 | cut -d: -f1)
[ -n "$_m" ] || fail "no MAINPID=$NEWPID: $(cat "$TMP/notify.out")"
sed -n "$((_m + 1)),\$p" "$TMP/notify.out" | grep -q '^READY=1$' ||
    fail "no READY=1 after MAINPID=$NEWPID: $(cat "$TMP/notify.out")"
pass "systemd: MAINPID=$NEWPID, then READY=1"
