#!/bin/sh
# keylock --session: the command keeps running while the connection is
# down within the session's window (a reset through tests/lib/faultproxy.py
# is resumed), and is stopped as on any loss (SIGTERM, exit 75) when the
# server stays unreachable: at the window's end, not before. Operators see
# the detached session in `keylock info` and `keylock clients`; the
# one-shot subcommands never open one; bad settings are usage errors.
. "$(dirname "$0")/lib.sh"

(umask 077 && printf 'operator-secret\n' >"$TMP/admin")
daemon_start --admin-auth-file "$TMP/admin"
D=127.0.0.1:$PORT
session_or_skip "$D"
proxy_start 7
P=127.0.0.1:$PPORT

# Bad settings: usage errors before anything is sent.
"$KEYLOCK" --session=x k -- true 2>"$TMP/err"
expect_status 64 $? "--session=x"
"$KEYLOCK" --session=50 k -- true 2>"$TMP/err"
expect_status 64 $? "--session=50 (under the 100 ms minimum)"
KEYLOCK_SESSION=soon "$KEYLOCK" k -- true 2>"$TMP/err"
expect_status 64 $? "KEYLOCK_SESSION=soon"
expect_grep KEYLOCK_SESSION "$TMP/err" "the usage error names the variable"
pass "--session=x, --session=50, KEYLOCK_SESSION=soon: exit 64"

# Subcommands never open a session, whatever KEYLOCK_SESSION says; a
# lock does, and ends it with QUIT when the command is done.
KEYLOCK_SESSION=5000 "$KEYLOCK" -S "$D" ping >/dev/null ||
    fail "ping with KEYLOCK_SESSION"
KEYLOCK_SESSION=5000 "$KEYLOCK" -S "$D" k -- true ||
    fail "a lock with KEYLOCK_SESSION"
[ "$(stat_of sessions "$D")" = 0 ] || fail "a session outlived keylock"
[ "$(stat_of sessions_expired "$D")" = 0 ] ||
    fail "keylock left its session to expire instead of QUIT"
pass "subcommands open no session; a lock's session ends with keylock"

# A reset while the command runs: the command carries on, the lock is
# still the same grant (the token), and keylock exits with its status.
"$KEYLOCK" -v --session=4000 -S "$P" k -c "echo \$KEYLOCK_TOKEN >'$TMP/token'
    while [ ! -e '$TMP/release' ]; do sleep 0.02; done; exit 3" \
    2>"$TMP/err" &
kpid=$!
BGPIDS="$BGPIDS $kpid"
wait_for "[ -s '$TMP/token' ]" 10 || fail "the command never ran"
r0=$(stat_of sessions_resumed "$D")
proxy_ctl reset all
wait_for "[ \$(stat_of sessions_resumed '$D') -gt $r0 ]" 10 ||
    fail "no RESUME after the reset: $(cat "$TMP/err")"
kill -0 "$kpid" 2>/dev/null || fail "keylock ended after the reset"
"$KEYLOCK" -S "$D" info k --json >"$TMP/info"
expect_grep "\"token\":$(cat "$TMP/token")" "$TMP/info" \
    "the same grant after RESUME"
proxy_ctl halfclose all
sleep 0.5
kill -0 "$kpid" 2>/dev/null || fail "keylock ended after a half-close"
touch "$TMP/release"
wait_exit "$kpid" 10
expect_status 3 $? "keylock after the command exited 3"
expect_grep "session resumed" "$TMP/err" "-v tells of the RESUME"
# keylock's QUIT may have gone down the half-closed connection: then the
# server lets go when the grace has passed
wait_for "[ \$(stat_of keys '$D') = 0 ]" 10 || fail "keys left after the command"
pass "reset and half-close: the command ran on, same token, exit 3"

# Unreachable past the window: SIGTERM at its end, not before. keylock
# pings every grace / 3, so the window ends between 2/3 of the grace and
# the grace after the proxy went down.
G=6000
rm -f "$TMP/got" "$TMP/running"
"$KEYLOCK" --session=$G -S "$P" k -c "trap 'date +%s%3N >\"$TMP/got\"; exit 0' TERM
    touch '$TMP/running'; while :; do sleep 0.01; done" 2>"$TMP/err" &
kpid=$!
BGPIDS="$BGPIDS $kpid"
wait_ran "$TMP/running" 10 "the command never ran"
sleep 0.8
proxy_ctl down
t0=$(sed -n 's/^OK \([0-9][0-9]*\)$/\1/p' "$TMP/proxy.reply")
# the daemon sees the reset too: the session is detached, on show
wait_for "\"$KEYLOCK\" -S '$D' info k | grep -q 'detached [0-9]* ms'" 5 ||
    fail "keylock info shows no detached holder: $("$KEYLOCK" -S "$D" info k)"
"$KEYLOCK" -S "$TMP/sock" clients >"$TMP/clients"
expect_grep "detached [0-9]* ms (session)" "$TMP/clients" \
    "keylock clients shows the detached session"
wait_exit "$kpid" 15
expect_status 75 $? "keylock when the window ended"
[ -s "$TMP/got" ] || fail "the command got no SIGTERM"
took=$(($(cat "$TMP/got") - t0))
expect_window $((G * 2 / 3 - 20)) $((G + 2000)) "$took" \
    "SIGTERM after the server became unreachable (grace $G ms)"
expect_grep "lost the lock on k" "$TMP/err" "the loss message"
proxy_ctl up
# the server lets go once the grace has passed since it saw the reset
wait_for "[ \$(stat_of keys '$D') = 0 ] && [ \$(stat_of sessions '$D') = 0 ]" \
    10 || fail "the server still holds k or the session"
pass "unreachable: SIGTERM after $took ms (grace $G), exit 75, then released"
