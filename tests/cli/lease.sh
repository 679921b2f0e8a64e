#!/bin/sh
# --ttl: a lease that keylock refreshes while the command runs; if keylock
# stops refreshing it (here: stopped with SIGSTOP), the server lets the
# lock go, and keylock, resumed, stops the command and exits 75.
. "$(dirname "$0")/lib.sh"
daemon_start

bounded 10 "$KEYLOCK" --ttl 0.3 k -c '"$KEYLOCK" info k; sleep 1;
    "$KEYLOCK" -n k -- true; echo "inner $?"' >"$TMP/out" 2>&1
expect_status 0 $? "a command running past its ttl"
expect_grep "expires in" "$TMP/out" "INFO shows the lease"
expect_grep "inner 1" "$TMP/out" "the lock after 1 s of a 0.3 s ttl"
pass "--ttl 0.3 is refreshed for a 1 s command"

"$KEYLOCK" --ttl 0.3 k -c "trap 'echo TERM >\"$TMP/got\"; exit 0' TERM
    touch '$TMP/running'; while :; do sleep 0.02; done" 2>"$TMP/err" &
kpid=$!
BGPIDS="$BGPIDS $kpid"
wait_ran "$TMP/running" 5 "the command never ran"
kill -STOP "$kpid"
wait_for "\"\$KEYLOCK\" -n k -- true" 5 ||
    fail "the lease of a stopped keylock did not run out"
kill -CONT "$kpid"
wait_exit "$kpid" 10
expect_status 75 $? "keylock resumed after its lease ran out"
expect_grep TERM "$TMP/got" "the command's SIGTERM"
expect_grep "lost the lock on k" "$TMP/err" "the message"
pass "a lease that ran out: command got SIGTERM, keylock exit 75"

for bad in 0 0.05 -1; do
	"$KEYLOCK" --ttl "$bad" k -- true 2>/dev/null
	expect_status 64 $? "--ttl $bad"
done
pass "--ttl below 0.1 s is a usage error"
