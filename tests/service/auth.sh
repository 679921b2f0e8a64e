#!/bin/sh
# --auth-file: before AUTH only PING and QUIT work; a wrong secret is
# ERR AUTH, counted in STATS auth_failures and logged at warn with the
# peer's address at most once per 10 s; the right one lets LOCK through.
# The secret is never taken on the command line. The unix socket gets its
# mode and group; a non-loopback listener without a secret is warned about.
. "$(dirname "$0")/lib.sh"
need nc
printf 's3cret-Value\n' >"$TMP/secret"
chmod 600 "$TMP/secret"
daemon_start --auth-file "$TMP/secret"

ask_tcp PING "LOCK k" STATS "INFO k" UNLOCKALL QUIT >"$TMP/out"
expect_eq "OK PONG" "$(sed -n 1p "$TMP/out")" "PING before AUTH"
for n in 2 3 4 5; do
	expect_eq "ERR AUTH authentication required" \
	    "$(sed -n "${n}p" "$TMP/out")" "request $n before AUTH"
done
expect_eq "OK" "$(sed -n 6p "$TMP/out")" "QUIT before AUTH"
pass "before AUTH: PING and QUIT work, the rest gets ERR AUTH"

session_open c 3 127.0.0.1 "$PORT"
T0=$(now_ms)
session_send c "AUTH wrong"
session_expect c 1 '^ERR AUTH wrong secret$' "a wrong secret"
session_send c "AUTH s3cret-Valu"
session_expect c 2 '^ERR AUTH wrong secret$' "a prefix of the secret"
session_open d 4 127.0.0.1 "$PORT"
session_send d "AUTH s3cret-Value-and-more"
session_expect d 1 '^ERR AUTH wrong secret$' "the secret and more"
session_send c "LOCK k"
session_expect c 3 '^ERR AUTH authentication required$' "LOCK after failures"
session_send c "AUTH s3cret-Value"
session_expect c 4 '^OK$' "the right secret"
session_send c "LOCK k"
session_expect c 5 '^OK [0-9]+$' "LOCK after AUTH"
session_send c "STATS"
session_expect c 6 '^OK \{' "STATS after AUTH"
stats=$(sed -n 6p "$TMP/c.out")
expect_eq 3 "$(json_int "$stats" auth_failures)" "STATS auth_failures"
pass "wrong secrets: ERR AUTH, counted; the right one: OK, then LOCK works"

# The third wrong secret on one connection closes it.
printf 'AUTH a\nAUTH b\nAUTH c\nPING\n' |
    timeout "$REPLY_S" nc -N 127.0.0.1 "$PORT" >"$TMP/guess" 2>&1
expect_eq 3 "$(wc -l <"$TMP/guess")" "replies to a guesser"
expect_eq "ERR AUTH wrong secret, 3 times: closing the connection" \
    "$(sed -n 3p "$TMP/guess")" "the third wrong secret"
pass "three wrong secrets close the connection, the PING after is not served"

# Logged at warn once per 10 s, with the peer address: once, for the six
# failures, when they all came within 10 s (a loaded machine may take
# longer: then once per 10 s they took, and never once per failure).
T1=$(now_ms)
nwarn=$(grep -c 'warn: client [0-9]* from 127\.0\.0\.1:[0-9]*: AUTH failed' \
    "$TMP/daemon.log")
if [ $((T1 - T0)) -lt 10000 ]; then
	expect_eq 1 "$nwarn" "AUTH failure warnings"
else
	[ "$nwarn" -ge 1 ] && [ "$nwarn" -le $(((T1 - T0) / 10000 + 1)) ] ||
	    fail "$nwarn AUTH failure warnings in $((T1 - T0)) ms"
fi
expect_nogrep 's3cret' "$TMP/daemon.log" "the secret in the log"
pass "one warning for three failures, with the peer address, no secret"

# No option takes the secret itself: --help lists auth-file,
# admin-auth-file and etcd-password-file only (files; auth-timeout is a
# time), and the names a secret option might have are unknown (exit 64).
run_keylockd --help >"$TMP/help"
expect_eq "$(printf 'auth-file\nadmin-auth-file\netcd-password-file')" \
    "$(sed -n 's/^  --\([a-z-]*\) .*/\1/p' "$TMP/help" |
    grep -i -e secret -e auth -e pass | grep -vx auth-timeout)" \
    "the options about secrets"
for opt in --secret --auth-secret --password --requirepass; do
	run_keylockd --check-config "$opt" s3cret-Value >/dev/null 2>&1
	expect_status 64 $? "$opt on the command line"
done
pass "the secret is never taken on the command line"
daemon_stop

# One secret for clients and the operator would make every client an
# operator: refused at start (78), naming both files.
printf 'one-for-all\n' >"$TMP/client.secret"
printf 'one-for-all\n' >"$TMP/admin.secret"
chmod 600 "$TMP/client.secret" "$TMP/admin.secret"
run_keylockd --check-config --auth-file "$TMP/client.secret" \
    --admin-auth-file "$TMP/admin.secret" >"$TMP/out" 2>&1
expect_status 78 $? "the same secret in auth-file and admin-auth-file"
expect_grep 'hold the same secret: every client would be an operator' \
    "$TMP/out" "the refusal"
printf 'another-one\n' >"$TMP/admin.secret"
run_keylockd --check-config --auth-file "$TMP/client.secret" \
    --admin-auth-file "$TMP/admin.secret" >"$TMP/out" 2>&1
expect_status 0 $? "two secrets: $(cat "$TMP/out")"
pass "auth-file and admin-auth-file may not hold the same secret"

# A secret file is private (as a user's secret-file): one that group or
# others may read, or a symbolic link, stops the start (78) and says why.
printf 'open-secret\n' >"$TMP/open.secret"
chmod 644 "$TMP/open.secret"
for opt in --auth-file --admin-auth-file; do
	run_keylockd --check-config "$opt" "$TMP/open.secret" >"$TMP/out" 2>&1
	expect_status 78 $? "$opt of mode 0644"
	expect_grep "${opt#--} $TMP/open.secret: mode 0644 is too open" \
	    "$TMP/out" "the refusal of $opt"
done
ln -s "$TMP/client.secret" "$TMP/link.secret"
run_keylockd --check-config --auth-file "$TMP/link.secret" >"$TMP/out" 2>&1
expect_status 78 $? "an auth-file that is a symbolic link"
expect_grep "auth-file $TMP/link.secret: " "$TMP/out" "the refusal of the link"
pass "auth-file and admin-auth-file: a file group or others may read, or a link, is refused"

# The unix socket gets the configured mode and group.
group=$(id -gn)
daemon_start --unix-mode 0600 --unix-group "$group"
expect_eq 600 "$(stat -c %a "$TMP/sock")" "--unix-mode 0600"
expect_eq "$group" "$(stat -c %G "$TMP/sock")" "--unix-group $group"
ask -U "$TMP/sock" -- "LOCK u" >"$TMP/out"
expect_grep '^OK [0-9]+$' "$TMP/out" "LOCK over unix without a secret"
daemon_stop
pass "unix socket: mode 0600, group $group"

# Listening beyond loopback: a warning without a secret, none with one.
daemon_start --bind 0.0.0.0
expect_grep 'warn: 0\.0\.0\.0:[0-9]+ is not a loopback address and no auth-file is set' \
    "$TMP/daemon.log" "the warning without a secret"
daemon_stop
: >"$TMP/daemon.log"
daemon_start --bind 0.0.0.0 --auth-file "$TMP/secret"
expect_nogrep 'not a loopback address' "$TMP/daemon.log" \
    "the warning with a secret"
daemon_stop
pass "non-loopback without a secret: warned at start"

# Plain TCP beyond loopback beside a TLS listener: a secret sent to the
# wrong port travels in clear, so that is warned about; not on loopback.
TLSOPTS="--tls-port 0 --tls-cert $TEST_CERTS/srv.pem --tls-key $TEST_CERTS/srv.key"
: >"$TMP/daemon.log"
# shellcheck disable=SC2086
daemon_start --bind 0.0.0.0 --auth-file "$TMP/secret" $TLSOPTS
expect_grep 'warn: 0\.0\.0\.0:[0-9]+ is plain TCP beside the TLS listener' \
    "$TMP/daemon.log" "the warning for plain TCP beside TLS"
daemon_stop
: >"$TMP/daemon.log"
# shellcheck disable=SC2086
daemon_start --auth-file "$TMP/secret" $TLSOPTS
expect_nogrep 'beside the TLS listener' "$TMP/daemon.log" \
    "the warning on loopback"
daemon_stop
pass "plain TCP beyond loopback beside TLS: warned at start"
