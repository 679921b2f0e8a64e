#!/bin/sh
# The user setting (keylockd.conf(5)): a user's secret file must be as
# private as ssh wants a key (the start and --check-config refuse a file
# group or others may read or write, or that another uid owns, naming it
# and its mode); bad user lines are FILE:LINE errors; a live upgrade keeps
# each connection's user by name; and a client certificate whose CN a user
# names (tls-cn=) authenticates as that user over mutual TLS, with that
# user's keys, checked with openssl s_client.
. "$(dirname "$0")/lib.sh"
cd "$TMP" || exit 1

printf 'alice-Secret\n' >alice
chmod 600 alice
run_keylockd --check-config --user "alice secret-file=$TMP/alice keys=a:*" \
    >out 2>&1
expect_status 0 $? "a secret file of mode 0600"
for mode in 640 604 620 602 644; do
	chmod "$mode" alice
	run_keylockd --check-config \
	    --user "alice secret-file=$TMP/alice keys=a:*" >out 2>&1
	expect_status 78 $? "a secret file of mode $mode"
	expect_grep "user alice: secret-file $TMP/alice: mode 0$mode is too open" \
	    out "the message for mode $mode"
done
chmod 600 alice
run_keylockd --unix '' --port 0 --state-dir "$TMP" \
    --user "alice secret-file=$TMP/alice-missing keys=a:*" >out 2>&1
expect_status 78 $? "starting with a missing secret file"
expect_grep "alice-missing" out "the message names the file"
if [ "$(id -u)" = 0 ]; then
	cp alice nobodys && chown 65534 nobodys && chmod 600 nobodys
	run_keylockd --check-config \
	    --user "alice secret-file=$TMP/nobodys keys=a:*" >out 2>&1
	expect_status 78 $? "a secret file another uid owns"
	expect_grep "owned by uid 65534" out "the owner in the message"
fi
pass "secret files: 0600 passes; group or other bits, another owner, or none stop it"

cat >bad.conf <<CONF
user alice secret-file=$TMP/alice keys=a:*
user bob keys=b:*
user carol secret-file=$TMP/alice keys=c*d
user dave secret-file=$TMP/alice
user erin secret-file=$TMP/alice keys=e:* colour=red
CONF
run_keylockd --check-config --config bad.conf >out 2>&1
expect_status 78 $? "four bad user lines"
expect_eq 4 "$(grep -c "^bad.conf:[0-9]*: user: " out)" "FILE:LINE messages"
expect_grep "^bad.conf:2: user: user bob: needs secret-file=" out "line 2"
expect_grep "^bad.conf:3: .* may only end a pattern" out "line 3"
expect_grep "^bad.conf:4: user: user dave: needs keys=" out "line 4"
expect_grep "^bad.conf:5: user: user erin: colour=: unknown" out "line 5"
printf 'user alice secret-file=%s keys=a:*\nuser alice secret-file=%s keys=b:*\n' \
    "$TMP/alice" "$TMP/alice" >twice.conf
run_keylockd --check-config --config twice.conf >out 2>&1
expect_status 78 $? "a user defined twice"
expect_grep "user alice: defined twice" out "the message"
pass "bad user lines: FILE:LINE errors, exit 78"

# A live upgrade keeps who each connection is, by name: alice is still
# alice (her keys only), and bob, whom the new process's configuration no
# longer has, must AUTH again, as after a reload; their locks stay.
need nc
NEWPID=
cleanup_suite() {
	for s in $SESSIONS; do
		eval "exec $(session_fd "$s")>&-"
	done
	[ -z "$NEWPID" ] || kill -TERM "$NEWPID" 2>/dev/null
}
printf 'bob-Secret\n' >bob
chmod 600 bob
printf 'user alice secret-file=%s keys=a:*\nuser bob secret-file=%s keys=b:*\n' \
    "$TMP/alice" "$TMP/bob" >up.conf
daemon_start --config "$TMP/up.conf"
session_open al 5 127.0.0.1 "$PORT"
session_send al "AUTH alice alice-Secret"
session_send al "LOCK a:1"
session_expect al 2 '^OK [0-9]+$' "alice before the upgrade"
session_open bo 6 127.0.0.1 "$PORT"
session_send bo "AUTH bob bob-Secret"
session_send bo "LOCK b:1"
session_expect bo 2 '^OK [0-9]+$' "bob before the upgrade"
printf 'user alice secret-file=%s keys=a:*\n' "$TMP/alice" >up.conf
OLD=$DPID
session_open op 7 -U "$TMP/sock"
session_send op "AUTH alice alice-Secret"
session_send op UPGRADE
session_expect op 2 '^OK \{"pid":' "UPGRADE"
wait "$OLD"
DPID=
NEWPID=$(sed -n 's/.*"pid":\([0-9]*\).*/\1/p' op.out)
session_send al "LOCK b:2"
session_expect al 3 '^ERR NOPERM ' "alice after the upgrade, bob's key"
session_send al "LOCK a:2"
session_expect al 4 '^OK [0-9]+$' "alice after the upgrade, her key"
session_send bo "LOCK b:2"
session_expect bo 3 '^ERR AUTH .*changed or is gone' "bob after the upgrade"
out=$(ask_tcp "AUTH alice alice-Secret" "INFO a:1" "INFO b:2") || true
echo "$out" | sed -n 2p | grep -q '"holders":\[{' ||
    fail "alice's lock after the upgrade: $out"
kill -TERM "$NEWPID"
wait_for "! kill -0 $NEWPID 2>/dev/null" 10 || fail "the new process stays"
NEWPID=
pass "a live upgrade: alice keeps her user and keys, bob (gone) must AUTH again"

# tls-cn=: the certificate of CN "client" is user tls-alice.
command -v openssl >/dev/null || skip "openssl not installed"
cp "$TEST_CERTS"/*.pem "$TEST_CERTS"/*.key . || fail "no certificates"
daemon_launch --tls-port 0 --unix '' --tls-cert "$TMP/srv.pem" \
    --tls-key "$TMP/srv.key" --tls-client-ca "$TMP/ca.pem" \
    --user "tls-alice tls-cn=client keys=t:*" \
    --user "bob secret-file=$TMP/alice keys=b:*"
tls=$(awk '/^tls /{print $2}' port)
printf 'LOCK t:1\nLOCK b:1\nSTATS\n' >lines
# The input ends (and s_client with it) once the three replies are in,
# however long the handshake takes on a loaded machine.
: >tls.out
{ cat lines; wait_for "[ \$(wc -l <tls.out) -ge 3 ]" 20 || true; } |
    timeout 30 openssl s_client -quiet -no_ign_eof \
    -connect "127.0.0.1:$tls" -CAfile ca.pem -servername localhost \
    -cert cli.pem -key cli.key >tls.out 2>/dev/null || true
out=$(cat tls.out)
echo "$out" | sed -n 1p | grep -Eq '^OK [0-9]+$' ||
    fail "the certificate's user may not lock its key: $out"
echo "$out" | sed -n 2p | grep -q '^ERR NOPERM tls-alice may not use key b:1' ||
    fail "the certificate's user locked another's key: $out"
expect_grep 'certificate CN client: user tls-alice' daemon.log "the log"
printf 'LOCK t:1\n' >lines
out=$(ask_tcp "LOCK t:2") || true
echo "$out" | grep -q '^ERR AUTH' || fail "plain TCP without AUTH: $out"
daemon_stop
pass "tls-cn=: a client certificate stands for its user, with its keys"
