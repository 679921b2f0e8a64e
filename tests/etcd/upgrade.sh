#!/bin/sh
# Live upgrade with backend etcd (keylockd(8), LIVE UPGRADE): not handed
# over yet, since the lease, the replica and the commit queue would have
# to move. keylock upgrade gets ERR UPGRADE with that reason (exit 65),
# SIGUSR2 is refused the same way in the log, and the front end serves on
# with the same pid and the lock a client holds through etcd.
. "$(dirname "$0")/lib.sh"
[ -n "${KEYLOCK:-}" ] || skip "KEYLOCK must name the client"
WHY="backend etcd: its lease, replica and commit queue are not handed over"

ec_start 1
daemon_launch --backend etcd --etcd-endpoints "$ETCD_ENDPOINTS" \
    --etcd-prefix kl/ --etcd-lease-ttl 30
"$KEYLOCK" -S "127.0.0.1:$PORT" held -c "touch '$TMP/held';
    while [ ! -e '$TMP/release' ]; do sleep 0.02; done" &
HOLDER=$!
BGPIDS="$BGPIDS $HOLDER"
wait_for "[ -e '$TMP/held' ]" 30 || fail "no lock through etcd"

"$KEYLOCK" -S "$TMP/sock" upgrade >"$TMP/out" 2>"$TMP/err"
expect_status 65 $? "keylock upgrade with backend etcd"
grep -q "UPGRADE $WHY" "$TMP/err" || fail "the reason: $(cat "$TMP/err")"
pass "keylock upgrade: ERR UPGRADE, $(head -n 1 "$TMP/err")"

kill -USR2 "$DPID"
wait_for "grep -q 'upgrade refused: $WHY' '$TMP/daemon.log'" 10 ||
    fail "SIGUSR2: no refusal in the log"
kill -0 "$DPID" || fail "the front end is gone"
"$KEYLOCK" -S "127.0.0.1:$PORT" -n held -- true
expect_status 1 $? "the lock is still held"
touch "$TMP/release"
wait "$HOLDER"
expect_status 0 $? "the holder"
pass "SIGUSR2 refused too; the front end serves on, the lock held"
