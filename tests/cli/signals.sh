#!/bin/sh
# SIGTERM, SIGHUP, SIGINT, SIGUSR1 sent to keylock reach the command; the
# exit status is still the command's, and the lock is released after.
. "$(dirname "$0")/lib.sh"
daemon_start

# keylock leaves a signal it was started with ignored ignored, for its
# command too, and a shell cannot trap one either: a background job starts
# with SIGINT ignored, and a suite run under nohup(1) (as a CI runner or a
# detached shell may be) with SIGHUP ignored. Every keylock here starts
# with the signals the test sends at their defaults.
SIGS=TERM,HUP,USR1,INT
if env --default-signal=$SIGS true 2>/dev/null; then
	DFL="env --default-signal=$SIGS"
else
	# Without it nothing here can reset them: HUP, USR1 and TERM
	# (bits 0, 9 and 14 of SigIgn) must not be ignored already.
	DFL=
	ign=$(sed -n 's/^SigIgn:[[:space:]]*//p' /proc/$$/status)
	[ $((0x${ign#"${ign%????}"} & 0x4201)) -eq 0 ] ||
	    skip "env has no --default-signal, and SIGHUP, SIGUSR1 or" \
	    "SIGTERM is ignored"
fi

# run_signalled SIGNAL [launcher...]: the command traps SIGNAL and exits
# with a code of its own.
run_signalled() {
	sig=$1
	shift
	rm -f "$TMP/running" "$TMP/got"
	"$@" "$KEYLOCK" k -c "trap 'echo $sig >\"$TMP/got\"; exit 3' $sig
	    touch '$TMP/running'; while :; do sleep 0.02; done" &
	kpid=$!
	BGPIDS="$BGPIDS $kpid"
	wait_ran "$TMP/running" 5 "$sig: the command never ran"
	kill -s "$sig" "$kpid"
	wait_exit "$kpid" 10
	expect_status 3 $? "$sig forwarded, command exits 3"
	expect_grep "$sig" "$TMP/got" "the command's trap"
	bounded 10 "$KEYLOCK" -n k -- true
	expect_status 0 $? "the lock after the command exited on $sig"
	pass "$sig to keylock reaches the command; its status 3 is kept"
}

run_signalled TERM $DFL
run_signalled HUP $DFL
run_signalled USR1 $DFL
if [ -n "$DFL" ]; then
	run_signalled INT $DFL
else
	echo "$TEST: SIGINT not tested: env has no --default-signal"
fi

# Without a trap the command dies of the signal: 128 + 15.
rm -f "$TMP/running"
$DFL "$KEYLOCK" k -c "touch '$TMP/running'; exec sleep 30" &
kpid=$!
BGPIDS="$BGPIDS $kpid"
wait_ran "$TMP/running" 5 "the command never ran"
t0=$(now_ms)
kill -TERM "$kpid"
wait_exit "$kpid" 10
expect_status 143 $? "command killed by the forwarded SIGTERM"
expect_window 0 4000 $(($(now_ms) - t0)) "SIGTERM to exit"
pass "a forwarded SIGTERM kills a command without a trap: exit 143"
