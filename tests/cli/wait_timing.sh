#!/bin/sh
# -w SECONDS: give up after that long (fractions allowed), exit 1 or -E;
# a waiter that is granted in time runs its command.
. "$(dirname "$0")/lib.sh"
daemon_start
hold k

# waited_ms FILE: the wait keylock -v measured, free of process start-up
# (slow under sanitizers and a loaded make -j)
waited_ms() {
	sed -n 's/^keylock: no lock on .* after \([0-9.]*\) s$/\1/p' "$1" |
	    tr -d . | sed 's/^0*//; s/^$/0/'
}

t0=$(now_ms)
bounded 10 "$KEYLOCK" -w 0.5 -v k -- touch "$TMP/ran" 2>"$TMP/err"
expect_status 1 $? "-w 0.5 on a held key"
expect_window 400 5000 $(($(now_ms) - t0)) "-w 0.5, start to exit"
expect_window 400 1500 "$(waited_ms "$TMP/err")" "-w 0.5, the wait"
[ ! -e "$TMP/ran" ] || fail "the command ran without the lock"
bounded 10 "$KEYLOCK" -w 0.5 k -- true 2>"$TMP/err"
expect_status 1 $? "-w 0.5 without -v"
[ ! -s "$TMP/err" ] || fail "-w without -v printed: $(cat "$TMP/err")"
pass "-w 0.5 gives up after 0.4-1.5 s with exit 1, silent without -v"

bounded 10 "$KEYLOCK" --timeout 1.2 -E 9 -v k -- true 2>"$TMP/err"
expect_status 9 $? "-w 1.2 -E 9"
expect_window 1100 2500 "$(waited_ms "$TMP/err")" "-w 1.2, the wait"
expect_grep "waiting for k, up to 1.200 s" "$TMP/err" "-v while waiting"
expect_grep "TIMEOUT" "$TMP/err" "-v after the timeout"
pass "-w 1.2 -E 9: exit 9 after 1.1-2.5 s; -v says it waits"

# A waiter within its -w gets the lock when the holder leaves.
t0=$(now_ms)
"$KEYLOCK" -w 10 k -- touch "$TMP/ran" &
waiter=$!
BGPIDS="$BGPIDS $waiter"
wait_for "\"\$KEYLOCK\" info k --json | grep -q '\"waiters\":\[{'" 5 ||
    fail "the waiter never queued"
release k
wait_exit "$waiter" 10
expect_status 0 $? "the waiter"
[ -e "$TMP/ran" ] || fail "the waiter's command did not run"
expect_window 0 9000 $(($(now_ms) - t0)) "a granted waiter"
pass "a queued -w 10 waiter runs once the holder leaves"

for bad in -1 1e3 0x10 abc 1.2.3 . ""; do
	"$KEYLOCK" -w "$bad" k -- true 2>/dev/null
	expect_status 64 $? "-w \"$bad\""
done
pass "malformed -w is a usage error (64)"
