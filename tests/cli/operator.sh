#!/bin/sh
# The operator's subcommands (keylock(1), keylockd-protocol(7) OPERATOR
# COMMANDS): keylock clients and keylock kill ID over the unix socket or
# with the operator's secret, refused over plain TCP; a killed holder's
# keylock sees its lock lost (exit 75) and its waiter gets the key at
# once; keylock info hints at keylock kill.
. "$(dirname "$0")/lib.sh"
(umask 077 && printf 'operator-secret\n' >"$TMP/admin")
daemon_start --admin-auth-file "$TMP/admin"

hold k --name stuck
"$KEYLOCK" -w 120 k -c 'echo granted' >"$TMP/waiter.out" &
WAITER=$!
BGPIDS="$BGPIDS $WAITER"
wait_for "\"$KEYLOCK\" -S '$TMP/sock' clients | grep -q 'waits'" 5 ||
    fail "the waiter never showed in keylock clients"

"$KEYLOCK" clients >"$TMP/out" 2>"$TMP/err"
expect_status 77 $? "clients over TCP without the operator's secret"
expect_grep "for the operator" "$TMP/err" "the refusal says who may"

"$KEYLOCK" -S "$TMP/sock" clients >"$TMP/out"
expect_status 0 $? "clients over the unix socket"
expect_grep "^[0-9]* clients$" "$TMP/out" "clients header"
expect_grep " stuck  *tcp .* holds 1$" "$TMP/out" "the holder's line"
expect_grep "holds 0, waits [0-9]* ms for k$" "$TMP/out" "the waiter's line"
"$KEYLOCK" --auth-file "$TMP/admin" clients --json >"$TMP/json"
expect_status 0 $? "clients over TCP with the operator's secret"
expect_grep '"total":' "$TMP/json" "clients --json"
pass "clients: over the unix socket or with the operator's secret only"

"$KEYLOCK" info k >"$TMP/out"
expect_grep "keylock kill CLIENT" "$TMP/out" "info's hint"
id=$("$KEYLOCK" -S "$TMP/sock" clients |
    sed -n 's/^ *\([0-9][0-9]*\)  *stuck .*/\1/p')
[ -n "$id" ] || fail "no id for the holder"
"$KEYLOCK" kill "$id" 2>"$TMP/err"
expect_status 77 $? "kill over TCP without the operator's secret"
"$KEYLOCK" -S "$TMP/sock" kill "$id" >"$TMP/out"
expect_status 0 $? "kill of the holder"
expect_grep "client $id closed" "$TMP/out" "kill's report"
_pid=$(eval "echo \$HOLDPID_k")
wait_exit "$_pid" 10
expect_status 75 $? "the killed holder's keylock: lock lost"
wait_exit "$WAITER" 10
expect_status 0 $? "the waiter"
expect_grep "^granted$" "$TMP/waiter.out" "the waiter ran its command"
pass "kill: the holder's lock is lost (75), its waiter is granted"

"$KEYLOCK" -S "$TMP/sock" kill "$id" 2>"$TMP/err"
expect_status 1 $? "kill of a client that is gone"
expect_grep "no client $id" "$TMP/err" "the message"
"$KEYLOCK" -S "$TMP/sock" kill nobody 2>/dev/null
expect_status 64 $? "kill of a non-number"
pass "kill: 1 for an unknown id, 64 for a bad one"
