#!/bin/sh
# Live upgrade with sessions (keylockd(8), LIVE UPGRADE; keylockd-
# protocol(7), Sessions). Before the upgrade: session A is attached and
# holds a lock; session B is detached with a lock on channel 0, one on
# channel 1 and a LOCK waiting on channel 2 (for A's key); session C is
# detached with a short grace and a lock that a plain connection waits
# for. After UPGRADE, by the new process: A still holds its lock under the
# same client id and its ID still resumes it; B resumes on a new
# connection with its locks, its channels and its waiting LOCK, which is
# granted when A lets go; C is not resumed and expires no earlier than its
# grace after its connection closed (the pause does not shorten it) and
# not much later, and its waiter is granted; nothing is left at the end.
. "$(dirname "$0")/lib.sh"
need nc
NEWPID=
SLOW=${KEYLOCKD_TEST_SLOW:-1}
GRACE_C=$((8000 * SLOW))	# room for the upgrade inside it, under load

cleanup_suite() {
	for s in $SESSIONS; do
		eval "exec $(session_fd "$s")>&-"
	done
	if [ -n "$NEWPID" ]; then
		kill -TERM "$NEWPID" 2>/dev/null
		wait_for "! kill -0 $NEWPID 2>/dev/null" 10
	fi
}

stats() {
	ask_tcp STATS QUIT | sed -n '1p'
}

# sid NAME: the session ID of the SESSION reply on line 1 of NAME.
sid() {
	sed -n '1s/^OK //p' "$TMP/$1.out"
}

daemon_start

# A: attached, holding sa.
session_open a 3 127.0.0.1 "$PORT"
session_send a "SESSION grace=60000"
session_send a "NAME sess-a"
session_send a "LOCK sa"
session_expect a 3 '^OK [0-9]+$' "A's LOCK"
ID_A=$(sid a)
TOK_A=$(sed -n '3s/^OK //p' "$TMP/a.out")
ask_tcp "INFO sa" QUIT | sed -n 1p >"$TMP/info_a0"
CLIENT_A=$(sed -n 's/.*"holders":\[{"client":\([0-9]*\).*/\1/p' \
    "$TMP/info_a0")
[ -n "$CLIENT_A" ] || fail "no holder in INFO sa: $(cat "$TMP/info_a0")"

# B: sb on channel 0, sbc on channel 1, channel 2 waits for sa; detached.
session_open b 4 127.0.0.1 "$PORT"
session_send b "SESSION grace=60000"
session_send b "NAME sess-b"
session_send b "LOCK sb"
session_expect b 3 '^OK [0-9]+$' "B's LOCK"
session_send b "@1 LOCK sbc"
session_expect b 4 '^@1 OK [0-9]+$' "B's channel 1 LOCK"
session_send b "@2 LOCK sa timeout=60000"
wait_for "ask_tcp 'INFO sa' QUIT | grep -q '\"waiters\":\[{'" "$REPLY_S" ||
    fail "B's channel 2 is not queued on sa"
ID_B=$(sid b)
eval "exec $(session_fd b)>&-"
wait_for "[ \"\$(json_int \"\$(stats)\" sessions_detached)\" = 1 ]" \
    "$REPLY_S" || fail "B did not detach: $(stats)"

# C: sc, a short grace; a plain connection waits for sc. (Opened before
# C's, so that its nc does not inherit the descriptor that ends C.)
session_open w 6 127.0.0.1 "$PORT"
session_open c 5 127.0.0.1 "$PORT"
session_send c "SESSION grace=$GRACE_C"
session_send c "LOCK sc"
session_expect c 2 '^OK [0-9]+$' "C's LOCK"
session_send w "LOCK sc timeout=60000"
wait_for "ask_tcp 'INFO sc' QUIT | grep -q '\"waiters\":\[{'" "$REPLY_S" ||
    fail "the waiter is not queued on sc"

# C detaches, and the upgrade runs within its grace.
T_C=$(now_ms)
eval "exec $(session_fd c)>&-"
wait_for "[ \"\$(json_int \"\$(stats)\" sessions_detached)\" = 2 ]" \
    "$REPLY_S" || fail "C did not detach: $(stats)"
S0=$(stats)
expect_eq 3 "$(json_int "$S0" sessions)" "sessions before"
OLD=$DPID
session_open op 8 -U "$TMP/sock"
session_send op UPGRADE
# the reply comes after the new binary's --check-config and the hand-off
wait_for "[ -s '$TMP/op.out' ]" $((30 * SLOW)) || fail "no reply to UPGRADE"
session_expect op 1 '^OK \{"pid":[0-9]+,' "UPGRADE with three sessions"
sed -n 1p "$TMP/op.out" >"$TMP/up"
wait "$OLD"
expect_status 0 $? "the old process's exit"
DPID=
NEWPID=$(sed -n '1s/.*"pid":\([0-9]*\).*/\1/p' "$TMP/up")
T_UP=$(now_ms)
[ $((T_UP - T_C)) -lt "$GRACE_C" ] ||
    fail "the upgrade took $((T_UP - T_C)) ms, past C's grace: the test \
proves nothing"
S1=$(stats)
expect_eq "$NEWPID" "$(json_int "$S1" pid)" "STATS pid"
for m in sessions sessions_detached sessions_resumed sessions_expired; do
	expect_eq "$(json_int "$S0" $m)" "$(json_int "$S1" $m)" \
	    "STATS $m across the upgrade"
done
expect_eq 3 "$(json_int "$S1" sessions)" "sessions after"
ask -U "$TMP/sock" -- CLIENTS QUIT | sed -n 1p >"$TMP/clients"
expect_grep '"name":"sess-b"[^}]*"detached_ms":[0-9]+' "$TMP/clients" \
    "CLIENTS: B detached"
expect_grep '"name":"sess-a"' "$TMP/clients" "CLIENTS: A"
pass "UPGRADE with an attached and two detached sessions: $(cat "$TMP/up")"

# A holds sa on its connection, as the same client.
session_send a "PING"
session_expect a 4 '^OK PONG$' "A after the upgrade"
ask_tcp "INFO sa" QUIT | sed -n 1p >"$TMP/info_a1"
expect_grep "\"holders\":\[\{\"client\":$CLIENT_A,[^]]*\"token\":$TOK_A" \
    "$TMP/info_a1" "A's hold of sa after the upgrade"
pass "an attached session keeps its lock and its client id"

# B resumes on the new process: its locks, its channels, its wait.
session_open b2 7 127.0.0.1 "$PORT"
session_send b2 "RESUME $ID_B"
session_expect b2 1 '^OK \{"session":' "B's RESUME"
expect_grep '"keys":\["sb"\]' "$TMP/b2.out" "B's RESUME: sb"
expect_grep '"keys":\["sbc"\]' "$TMP/b2.out" "B's RESUME: sbc on channel 1"
session_send b2 "@1 UNLOCK sbc"
session_expect b2 2 '^@1 OK 1$' "B's channel 1 after RESUME"
session_send a "UNLOCK sa"
session_expect a 5 '^OK 1$' "A's UNLOCK"
wait_for "grep -Eq '^@2 OK [0-9]+$' '$TMP/b2.out'" "$REPLY_S" ||
    fail "B's channel 2 was not granted sa: $(cat "$TMP/b2.out")"
pass "a detached session resumes after the upgrade: locks, channels, wait"

# C expires on time: not before its grace, not long after.
# (it comes after C's grace, 8 s scaled, and at most 4 s scaled later)
wait_for "grep -Eq '^OK [0-9]+$' '$TMP/w.out'" $((15 * SLOW)) ||
    fail "the waiter on sc was never granted: $(cat "$TMP/w.out")"
# when the grant arrived (its only reply), not when this shell, busy with
# B meanwhile, looked
T_W=$(date -r "$TMP/w.out" +%s%3N)
[ $((T_W - T_C)) -ge "$GRACE_C" ] ||
    fail "C expired $((T_W - T_C)) ms after it detached, before its grace"
[ $((T_W - T_C)) -lt $((GRACE_C + 4000 * SLOW)) ] ||
    fail "C expired $((T_W - T_C)) ms after it detached"
expect_eq 1 "$(json_int "$(stats)" sessions_expired)" "sessions_expired"
pass "a detached session not resumed expires $((T_W - T_C)) ms after it \
detached (grace $GRACE_C ms), its waiter granted"

# A's ID, carried over, still resumes A (its old connection is closed).
session_send a "LOCK sa2"
session_expect a 6 '^OK [0-9]+$' "A's second LOCK"
ask_tcp "RESUME $ID_A" "UNLOCK sa2" QUIT >"$TMP/ra"
expect_grep '^OK \{"session":.*"keys":\["sa2"\]' "$TMP/ra" "A's RESUME"
expect_grep '^OK 1$' "$TMP/ra" "A's UNLOCK after RESUME"
pass "an attached session's ID resumes it after the upgrade"

session_send b2 "QUIT"
session_send w "QUIT"
wait_for "[ \"\$(json_int \"\$(stats)\" keys)\" = 0 ] &&
    [ \"\$(json_int \"\$(stats)\" sessions)\" = 0 ]" "$REPLY_S" ||
    fail "left over: $(stats)"
pass "every lock and session released at the end"
