#!/bin/sh
# -n on a held key: the command does not run, keylock exits 1 or the -E
# code at once, silently unless -v, which names the holder.
. "$(dirname "$0")/lib.sh"
daemon_start
hold k --name holder

t0=$(now_ms)
bounded 10 "$KEYLOCK" -n k -- touch "$TMP/ran" 2>"$TMP/err"
expect_status 1 $? "-n on a held key"
# Not waiting is the point, not speed: an instrumented keylock on a loaded
# machine takes seconds to start, and one that waited would still be
# waiting when bounded kills it at 10 s.
expect_window 0 8000 $(($(now_ms) - t0)) "-n"
[ ! -e "$TMP/ran" ] || fail "the command ran without the lock"
[ ! -s "$TMP/err" ] || fail "-n without -v printed: $(cat "$TMP/err")"
pass "-n: exit 1 at once, silent, command not run"

bounded 10 "$KEYLOCK" -n -E 42 k -- touch "$TMP/ran"
expect_status 42 $? "-n -E 42"
bounded 10 "$KEYLOCK" --nonblock --conflict-exit-code 0 k -- \
    touch "$TMP/ran"
expect_status 0 $? "-n -E 0"
[ ! -e "$TMP/ran" ] || fail "the command ran without the lock"
pass "-E sets the not-acquired code (42, 0)"

bounded 10 "$KEYLOCK" -n -v k -- true 2>"$TMP/err"
expect_status 1 $? "-n -v"
expect_grep "keylock: LOCKED k held by client [0-9]* (holder)" "$TMP/err" \
    "-v names the holder"
pass "-n -v prints the server's reason, naming the holder"

bounded 10 "$KEYLOCK" -w 0 k -- true
expect_status 1 $? "-w 0"
bounded 10 "$KEYLOCK" --max-waiters 0 -E 7 k -- true
expect_status 7 $? "--max-waiters 0 (BUSY)"
pass "-w 0 and --max-waiters 0 are not-acquired too"

bounded 10 "$KEYLOCK" -n other -- true
expect_status 0 $? "-n on another key"
release k
bounded 10 "$KEYLOCK" -n k -- true
expect_status 0 $? "-n after the holder left"
pass "other keys are unaffected; the key is free after release"
