#!/bin/sh
# --auth-file: keylock AUTHs with the file's first line; a wrong or missing
# secret exits 77.
. "$(dirname "$0")/lib.sh"
(umask 077 && printf 's3cret\n' >"$TMP/secret")
printf 'wrong\n' >"$TMP/wrong"
daemon_start --auth-file "$TMP/secret"

"$KEYLOCK" --auth-file "$TMP/secret" k -- true
expect_status 0 $? "the right secret"
KEYLOCK_AUTH_FILE=$TMP/secret "$KEYLOCK" ping >/dev/null
expect_status 0 $? "the right secret from KEYLOCK_AUTH_FILE"
pass "the right secret"

"$KEYLOCK" --auth-file "$TMP/wrong" k -- touch "$TMP/ran" 2>"$TMP/err"
expect_status 77 $? "a wrong secret"
expect_grep "AUTH" "$TMP/err" "the message"
"$KEYLOCK" k -- touch "$TMP/ran" 2>"$TMP/err"
expect_status 77 $? "no secret"
"$KEYLOCK" stats 2>/dev/null
expect_status 77 $? "stats without a secret"
[ ! -e "$TMP/ran" ] || fail "a command ran without authentication"
pass "a wrong or missing secret: exit 77, nothing run"

: >"$TMP/empty"
"$KEYLOCK" --auth-file "$TMP/empty" k -- true 2>/dev/null
expect_status 66 $? "an empty auth file"

# A user: "user secret" on the file's first line is AUTH user secret, and
# the user's keys are all it may lock.
daemon_stop
printf 'alice-Secret\n' >"$TMP/alice"
chmod 600 "$TMP/alice"
printf 'alice alice-Secret\n' >"$TMP/as-alice"
printf 'alice wrong\n' >"$TMP/as-wrong"
daemon_start --user "alice secret-file=$TMP/alice keys=a:*"
"$KEYLOCK" --auth-file "$TMP/as-alice" a:1 -- true
expect_status 0 $? "alice's key as alice"
"$KEYLOCK" --auth-file "$TMP/as-alice" b:1 -- touch "$TMP/ran" 2>"$TMP/err"
[ $? -ne 0 ] || fail "alice locked b:1"
expect_grep "NOPERM" "$TMP/err" "the message"
"$KEYLOCK" --auth-file "$TMP/as-wrong" a:1 -- touch "$TMP/ran" 2>"$TMP/err"
expect_status 77 $? "a wrong user secret"
[ ! -e "$TMP/ran" ] || fail "a command ran without its lock"
pass "a user's secret file: its keys only"
