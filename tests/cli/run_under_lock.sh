#!/bin/sh
# keylock KEY... -- COMMAND and -c: the command runs while the keys are held,
# with KEYLOCK_TOKEN and KEYLOCK_KEYS, and the keys are free once it ends.
. "$(dirname "$0")/lib.sh"
daemon_start

out=$("$KEYLOCK" k -- sh -c 'echo "$KEYLOCK_TOKEN|$KEYLOCK_KEYS"')
expect_status 0 $? "-- COMMAND"
t1=${out%%|*}
case $t1 in '' | *[!0-9]*) fail "KEYLOCK_TOKEN is \"$t1\"" ;; esac
[ "${out#*|}" = k ] || fail "KEYLOCK_KEYS is \"${out#*|}\", want \"k\""
pass "the command runs with KEYLOCK_TOKEN=$t1 KEYLOCK_KEYS=k"

out=$("$KEYLOCK" -c 'echo "$KEYLOCK_TOKEN|$KEYLOCK_KEYS"' a b c)
[ "${out#*|}" = "a b c" ] || fail "-c CMD before the keys: \"$out\""
out=$("$KEYLOCK" a b c -c 'echo "$KEYLOCK_TOKEN|$KEYLOCK_KEYS"')
expect_status 0 $? "-c"
t2=${out%%|*}
[ "${out#*|}" = "a b c" ] || fail "KEYLOCK_KEYS is \"${out#*|}\""
[ "$t2" -gt "$t1" ] || fail "token $t2 after $t1: not increasing"
pass "-c with three keys: KEYLOCK_KEYS=\"a b c\", token $t2 > $t1"

# While the command runs, the server says who holds the key, and another
# client cannot take it.
bounded 10 "$KEYLOCK" --name runner k -c '"$KEYLOCK" info k;
    "$KEYLOCK" -n k -- true; echo "inner $?"' >"$TMP/out" 2>&1
expect_status 0 $? "nested"
expect_grep "holders: 1" "$TMP/out" "INFO during the command"
expect_grep "(runner), token" "$TMP/out" "INFO names the holder"
expect_grep "inner 1" "$TMP/out" "-n on a held key"
"$KEYLOCK" -n k -- true
expect_status 0 $? "-n once the command ended"
pass "the key is held during the command and free after it"

# Every grant of keylock(1) is named by default.
"$KEYLOCK" k -c '"$KEYLOCK" info k' >"$TMP/out" 2>&1
expect_grep "(keylock:[^,]*:[0-9][0-9]*), token" "$TMP/out" "default name"
pass "default name keylock:HOST:PID"

out=$("$KEYLOCK" -S "$TMP/sock" k -- sh -c 'echo "$KEYLOCK_TOKEN"')
expect_status 0 $? "over the unix socket"
[ "$out" -gt "$t2" ] || fail "unix socket token $out, not above $t2"
out=$(KEYLOCK_SERVER=$TMP/sock "$KEYLOCK" k -- sh -c 'echo ok')
[ "$out" = ok ] || fail "KEYLOCK_SERVER=path: \"$out\""
out=$("$KEYLOCK" -S "[127.0.0.1]:$PORT" k -- echo ok)
[ "$out" = ok ] || fail "-S [127.0.0.1]:$PORT: \"$out\""
pass "-S path, KEYLOCK_SERVER=path, -S [address]:port"

"$KEYLOCK" -v k -- true 2>"$TMP/err"
expect_status 0 $? "-v"
expect_grep "keylock: got k, token [0-9][0-9]* after" "$TMP/err" "-v"
pass "-v reports the grant and its token"

# Shared locks admit each other and keep writers out.
bounded 10 "$KEYLOCK" -s k -c '"$KEYLOCK" -s -n k -- true; echo "shared $?";
    "$KEYLOCK" -n k -- true; echo "exclusive $?"' >"$TMP/out" 2>&1
expect_grep "shared 0" "$TMP/out" "-s beside -s"
expect_grep "exclusive 1" "$TMP/out" "-x beside -s"
pass "-s shares, -x waits"

# A semaphore admits N; a different limit is refused by the server.
bounded 10 "$KEYLOCK" -N 2 k -c '"$KEYLOCK" -N 2 -n k -- true; echo "second $?";
    "$KEYLOCK" -n k -- true; echo "no-limit $?"' >"$TMP/out" 2>&1
expect_grep "second 0" "$TMP/out" "-N 2: a second holder"
expect_grep "no-limit 65" "$TMP/out" "another limit: CONFLICT"
expect_grep "CONFLICT" "$TMP/out" "the CONFLICT text"
pass "-N 2 admits two; another limit exits 65 with CONFLICT"

"$KEYLOCK" stats --json >"$TMP/out"
expect_grep '"keys":0' "$TMP/out" "no key left in the table"
pass "nothing left in the lock table"
