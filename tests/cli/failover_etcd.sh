#!/bin/sh
# A server list over two backend etcd front ends on a private 3-member
# cluster: keylock -S fe1,fe2 takes the lock through fe1 (the first that
# answers); fe1 is SIGKILLed: its holder loses the lock (75) and does not
# reconnect; the same keylock -S fe1,fe2 then passes over the dead fe1
# and gets the lock through fe2 once fe1's lease has let go of it. Then a
# front end cut off from etcd (fe3, whose only member is SIGKILLed) answers
# ERR BACKEND, and keylock -S fe3,fe2 moves on to fe2 (keylock_failover()).
. "$(dirname "$0")/lib.sh"

EC_SH=${top_srcdir:-$(dirname "$0")/../..}/tests/etcd/cluster.sh
LEASE_S=3

cleanup_suite() {
	sh "$EC_SH" "$TMP/etcd" down 2>/dev/null
}

ENDPOINTS=$(sh "$EC_SH" "$TMP/etcd" start 3 --watch $$)
rc=$?
[ "$rc" -ne 77 ] || skip "etcd is not installed (etcd-server)"
[ "$rc" -eq 0 ] || fail "no etcd cluster of 3 members"
PREFIX="klfailover-$$/"
FE="--backend etcd --etcd-endpoints $ENDPOINTS --etcd-prefix $PREFIX
    --etcd-lease-ttl $LEASE_S --etcd-timeout 1000"
# shellcheck disable=SC2086
daemon_start $FE
FE1=127.0.0.1:$PORT
# shellcheck disable=SC2086
daemon2_start $FE
FE2=127.0.0.1:$D2PORT
unset KEYLOCK_SERVER

"$KEYLOCK" -S "$FE1,$FE2" job -c "trap 'exit 0' TERM
    touch '$TMP/running'; while :; do sleep 0.02; done" 2>"$TMP/err" &
kpid=$!
BGPIDS="$BGPIDS $kpid"
wait_ran "$TMP/running" 10 "the holder never ran"
"$KEYLOCK" -S "$FE2" -n job -- true 2>/dev/null
expect_status 1 $? "the lock through fe2 while fe1's client holds it"
[ "$(stat_of grants "$FE1")" -eq 1 ] || fail "the holder is not on fe1"
pass "-S fe1,fe2: the lock is held through fe1, LOCKED through fe2"

c2=$(stat_of connections "$FE2")
daemon_kill
t0=$(now_ms)
wait_exit "$kpid" 10
expect_status 75 $? "the holder after fe1 was SIGKILLed"
expect_grep "lost the lock on job" "$TMP/err" "the holder's message"
[ "$(stat_of connections "$FE2")" -eq $((c2 + 1)) ] ||
    fail "the holder reconnected to fe2"
"$KEYLOCK" -S "$FE1,$FE2" -v -w 20 job -- true 2>"$TMP/err2"
expect_status 0 $? "keylock -S fe1,fe2 with fe1 dead"
took=$(($(now_ms) - t0))
expect_window 0 $((LEASE_S * 1000 + 5000)) "$took" \
    "the lock through fe2 after fe1's lease"
expect_grep "got job" "$TMP/err2" "the grant"
# (STATS counts grants cluster-wide in etcd mode, connections per front end)
[ "$(stat_of connections "$FE2")" -eq $((c2 + 3)) ] ||
    fail "the lock did not come through fe2"
pass "fe1 SIGKILLed: its holder exits 75; -S fe1,fe2 gets the lock" \
    "through fe2 in $took ms (lease $LEASE_S s)"

# A front end cut off from etcd: fe3 reaches member m1 only, and m1 is
# SIGKILLed (the other two keep the quorum, so fe2 still serves). fe3
# still accepts connections, but a LOCK through it is ERR BACKEND: keylock
# with fe3 alone exits 69 saying so; -S fe3,fe2 moves on to fe2 and gets
# the lock there, within the same -w.
# What an operator reads says so too: /healthz is 503 and systemd's
# STATUS= text leads with it (fe3 runs under a NOTIFY_SOCKET of the test's).
M1=$(sh "$EC_SH" "$TMP/etcd" url m1) || fail "no URL for m1"
RECV=${top_builddir:-$(dirname "$KEYLOCKD")/..}/tests/service/notify_recv
"$RECV" "$TMP/notify" 120 >"$TMP/notify.out" 2>&1 &
BGPIDS="$BGPIDS $!"
wait_for "grep -q '^listening$' '$TMP/notify.out'" 10 ||
    fail "notify_recv did not bind: $(cat "$TMP/notify.out")"
NOTIFY_SOCKET=$TMP/notify
export NOTIFY_SOCKET
# shellcheck disable=SC2086
daemon_start --backend etcd --etcd-endpoints "$M1" --etcd-prefix "$PREFIX" \
    --etcd-lease-ttl "$LEASE_S" --etcd-timeout 1000 --metrics 127.0.0.1:0
unset NOTIFY_SOCKET
FE3=127.0.0.1:$PORT
MURL=http://127.0.0.1:$(sed -n 's/^metrics //p' "$TMP/port")
[ "$(curl -sS "$MURL/healthz")" = ok ] || fail "fe3's /healthz before the cut"
"$KEYLOCK" -S "$FE3" -w 20 cut -- true 2>/dev/null
expect_status 0 $? "keylock -S fe3 with every member up"
sh "$EC_SH" "$TMP/etcd" kill m1 || fail "cannot kill m1"
"$KEYLOCK" -S "$FE3" -w 20 cut -- true 2>"$TMP/err3"
expect_status 69 $? "keylock -S fe3 once m1 is gone"
expect_grep "BACKEND" "$TMP/err3" "the refusal through fe3"
# the details (etcd's members, their texts) are the log's, not the client's
! grep -q "${M1#*://}" "$TMP/err3" ||
    fail "the refusal names an etcd member: $(cat "$TMP/err3")"
# (not ready once its lease can no longer be renewed in time)
wait_for "[ \"\$(curl -s -o /dev/null -w '%{http_code}' '$MURL/healthz')\" = 503 ]" \
    $((LEASE_S + 5)) || fail "fe3's /healthz once cut off:" \
    "$(curl -s -o /dev/null -w '%{http_code}' "$MURL/healthz"), want 503"
wait_for "grep -q '^STATUS=cut off from its etcd backend, LOCK is ERR BACKEND; ' '$TMP/notify.out'" 15 ||
    fail "no STATUS= saying fe3 is cut off: $(grep STATUS= "$TMP/notify.out" | tail -n 2)"
c2=$(stat_of connections "$FE2")
t0=$(now_ms)
"$KEYLOCK" -S "$FE3,$FE2" -v -w 20 cut -- true 2>"$TMP/err4"
expect_status 0 $? "keylock -S fe3,fe2 once m1 is gone"
took=$(($(now_ms) - t0))
expect_grep "BACKEND .*; trying the next server" "$TMP/err4" "the move"
expect_grep "got cut" "$TMP/err4" "the grant"
[ "$(stat_of connections "$FE2")" -gt "$c2" ] ||
    fail "the lock did not come through fe2"
pass "fe3 cut off from etcd: /healthz 503, STATUS= says so; alone it exits 69 (ERR BACKEND);" \
    "-S fe3,fe2 moves to fe2 and gets the lock in $took ms"

# The move to a next server that does not answer: fe3 refuses (ERR
# BACKEND), and fe2, next in the list, is stopped (SIGSTOP: its kernel
# still completes the TCP connection), so the NAME keylock sends first
# after the move gets no reply within --connect-timeout: exit 69 naming
# the missed reply, the command not run. (fe2 is let go on before any
# check: a failed check's cleanup could not stop a stopped daemon.)
kill -STOP "$D2PID"
t0=$(now_ms)
"$KEYLOCK" --connect-timeout 1 -S "$FE3,$FE2" -v -w 5 cut -- \
    touch "$TMP/ran5" 2>"$TMP/err5"
rc5=$?
took=$(($(now_ms) - t0))
kill -CONT "$D2PID"
expect_status 69 "$rc5" "keylock -S fe3,fe2 with fe3 cut off and fe2 stopped"
expect_grep "BACKEND .*; trying the next server" "$TMP/err5" "the move"
expect_grep "no reply within 1000 ms" "$TMP/err5" "the missed NAME reply"
[ ! -e "$TMP/ran5" ] || fail "the command ran without a lock"
# within -w: the NAME after the move waits --connect-timeout, not the
# 10 s a reply may take once connected
expect_window 0 $((5000 + 2000 * ${KEYLOCKD_TEST_SLOW:-1})) "$took" \
    "keylock -S fe3,fe2's exit"
pass "fe3 cut off, fe2 stopped: -S fe3,fe2 exits 69 in $took ms naming" \
    "fe2's missed reply"
