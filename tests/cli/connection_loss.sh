#!/bin/sh
# The connection drops while the command runs: the lock is gone, so the
# command gets SIGTERM (SIGKILL after --grace) and keylock exits 75.
. "$(dirname "$0")/lib.sh"

# A command that notes SIGTERM and exits at once.
daemon_start
"$KEYLOCK" k -c "trap 'echo TERM >\"$TMP/got\"; exit 0' TERM
    touch '$TMP/running'; while :; do sleep 0.02; done" 2>"$TMP/err" &
kpid=$!
BGPIDS="$BGPIDS $kpid"
wait_ran "$TMP/running" 5 "the command never ran"
t0=$(now_ms)
daemon_kill
wait_exit "$kpid" 10
expect_status 75 $? "keylock after the daemon died"
expect_window 0 4000 $(($(now_ms) - t0)) "noticing the lost connection"
expect_grep TERM "$TMP/got" "the command's SIGTERM"
expect_grep "lost the lock on k" "$TMP/err" "the message"
pass "daemon SIGKILLed: command got SIGTERM, keylock exit 75"

# A command that ignores SIGTERM gets SIGKILL after the grace period.
rm -f "$TMP/running"
daemon_start
"$KEYLOCK" --grace 0.5 k -c "trap '' TERM; echo \$\$ >'$TMP/running';
    exec sleep 30" 2>"$TMP/err" &
kpid=$!
BGPIDS="$BGPIDS $kpid"
wait_for "[ -s '$TMP/running' ]" 5 || fail "the command never ran"
child=$(cat "$TMP/running")
BGPIDS="$BGPIDS $child"
t0=$(now_ms)
daemon_kill
wait_exit "$kpid" 10
expect_status 75 $? "keylock, command ignoring SIGTERM"
expect_window 400 8000 $(($(now_ms) - t0)) "SIGKILL after --grace 0.5"
! kill -0 "$child" 2>/dev/null || fail "the command outlived keylock"
expect_grep "SIGKILL after 0.500 s" "$TMP/err" "the message"
pass "SIGTERM ignored: SIGKILL after --grace 0.5, exit 75"

# The daemon stopped cleanly (SIGTERM): a waiter is told SHUTDOWN (69), the
# holder's command is stopped (75).
daemon_start
rm -f "$TMP/running" "$TMP/got"
"$KEYLOCK" k -c "trap 'echo TERM >\"$TMP/got\"; exit 0' TERM
    touch '$TMP/running'; while :; do sleep 0.02; done" 2>"$TMP/err" &
kpid=$!
BGPIDS="$BGPIDS $kpid"
wait_ran "$TMP/running" 5 "the command never ran"
"$KEYLOCK" k -- touch "$TMP/ran" 2>"$TMP/err2" &
wpid=$!
BGPIDS="$BGPIDS $wpid"
wait_for "\"\$KEYLOCK\" info k --json | grep -q '\"waiters\":\[{'" 5 ||
    fail "the waiter never queued"
kill -TERM "$DPID"
wait "$DPID"
DPID=
wait_exit "$wpid" 10
expect_status 69 $? "a waiter when the daemon stops"
expect_grep "SHUTDOWN" "$TMP/err2" "the waiter's message"
[ ! -e "$TMP/ran" ] || fail "the waiter's command ran"
wait_exit "$kpid" 10
expect_status 75 $? "the holder when the daemon stops"
expect_grep TERM "$TMP/got" "the command's SIGTERM"
pass "daemon stopped: waiter exit 69 (SHUTDOWN), holder's command stopped, 75"

# keylock itself killed outright: its connection closes, so the lock is
# released, and (on Linux) the command is told with SIGTERM.
if [ "$(uname -s)" = Linux ]; then
	daemon_start
	rm -f "$TMP/running" "$TMP/got"
	"$KEYLOCK" k -c "trap 'echo TERM >\"$TMP/got\"; exit 0' TERM
	    touch '$TMP/running'; while :; do sleep 0.02; done" &
	kpid=$!
	wait_ran "$TMP/running" 5 "the command never ran"
	kill -KILL "$kpid"
	wait "$kpid" 2>/dev/null
	wait_for "[ -s '$TMP/got' ]" 3 ||
	    fail "the command got no SIGTERM when keylock died"
	wait_for "\"\$KEYLOCK\" -n k -- true" 3 ||
	    fail "the lock outlived keylock"
	pass "keylock SIGKILLed: command got SIGTERM, lock released"
fi
