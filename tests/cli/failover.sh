#!/bin/sh
# Server lists (-S a,b and $KEYLOCK_SERVER with commas): the servers are
# tried in order and the first that answers is used; when none does, the
# error names each and why, exit 69; a malformed list is a usage error
# (64); a wrong secret is not a reason to try the next server (77); and a
# drop while the command holds the lock is still "lock lost" (75), with no
# reconnect to the next server.
. "$(dirname "$0")/lib.sh"

# A closed port: a daemon's, once it is gone.
daemon2_start
DEAD=127.0.0.1:$D2PORT
daemon2_kill
daemon_start
ONE=127.0.0.1:$PORT
unset KEYLOCK_SERVER

"$KEYLOCK" -S "$DEAD,$ONE" k -- true 2>"$TMP/err"
expect_status 0 $? "-S DEAD,ONE"
"$KEYLOCK" --server "$TMP/none.sock, $TMP/sock" k -- true 2>"$TMP/err"
expect_status 0 $? "--server 'MISSING.sock, SOCK'"
[ "$(stat_of grants "$ONE")" -eq 2 ] || fail "two grants, want 2 on $ONE"
pass "a closed port or a missing socket first: the next server is used"

"$KEYLOCK" -S "$DEAD,$TMP/none.sock" k -- touch "$TMP/ran" 2>"$TMP/err"
expect_status 69 $? "every server down"
expect_grep "cannot reach keylockd: connect $DEAD: Connection refused; " \
    "$TMP/err" "the first server and why"
expect_grep "connect $TMP/none.sock: No such file or directory" \
    "$TMP/err" "the second server and why"
[ "$(wc -l <"$TMP/err")" -eq 1 ] || fail "more than one line: $(cat \
    "$TMP/err")"
"$KEYLOCK" -S "$DEAD,$TMP/none.sock" stats 2>"$TMP/err"
expect_status 69 $? "stats, every server down"
expect_grep "none.sock" "$TMP/err" "stats' message"
[ ! -e "$TMP/ran" ] || fail "the command ran without a lock"
pass "every server down: exit 69, one line naming each and why"

KEYLOCK_SERVER="$DEAD,$ONE" "$KEYLOCK" k -- true
expect_status 0 $? "KEYLOCK_SERVER=DEAD,ONE"
for sub in stats ping "info k"; do
	# shellcheck disable=SC2086
	KEYLOCK_SERVER="$DEAD,$ONE" "$KEYLOCK" $sub >/dev/null 2>"$TMP/err"
	expect_status 0 $? "KEYLOCK_SERVER=DEAD,ONE keylock $sub"
done
# the operator's, over the unix socket
KEYLOCK_SERVER="$TMP/none.sock,$TMP/sock" "$KEYLOCK" clients >/dev/null
expect_status 0 $? "KEYLOCK_SERVER=MISSING.sock,SOCK keylock clients"
pass "\$KEYLOCK_SERVER with commas, for locks and subcommands"

for bad in "$ONE," ",$ONE" "$ONE,,$ONE" "$ONE, ,$ONE" "$ONE,127.0.0.1:0"; do
	"$KEYLOCK" -S "$bad" k -- touch "$TMP/ran" 2>"$TMP/err"
	expect_status 64 $? "-S '$bad'"
	expect_grep "Try 'keylock --help'" "$TMP/err" "-S '$bad': usage"
	KEYLOCK_SERVER=$bad "$KEYLOCK" stats 2>"$TMP/err"
	expect_status 64 $? "KEYLOCK_SERVER='$bad' keylock stats"
done
"$KEYLOCK" -S "$ONE," k -- true 2>"$TMP/err"
expect_grep "server list \"$ONE,\": server 2 is empty" "$TMP/err" \
    "the trailing comma's message"
"$KEYLOCK" -S "$DEAD,nohost:99999" k -- true 2>"$TMP/err"
expect_status 64 $? "a bad port late in the list"
expect_grep "nohost:99999: bad port" "$TMP/err" "its message"
[ ! -e "$TMP/ran" ] || fail "a command ran under a malformed list"
pass "a malformed list (empty element, trailing comma, bad port): exit 64"

# Two live daemons: the first is used, the second never hears of it.
daemon2_start
TWO=127.0.0.1:$D2PORT
g1=$(stat_of grants "$ONE")
"$KEYLOCK" -S "$ONE,$TWO" k -- true
expect_status 0 $? "-S ONE,TWO"
"$KEYLOCK" -S "$ONE,$TWO" stats >/dev/null
[ "$(stat_of grants "$ONE")" -eq $((g1 + 1)) ] || fail "no grant on $ONE"
[ "$(stat_of connections "$TWO")" -eq 1 ] ||
    fail "$TWO had connections beside this STATS"
[ "$(stat_of grants "$TWO")" -eq 0 ] || fail "a grant on $TWO"
pass "two live servers: the first is used"

# A wrong secret is reported, not taken to the next server.
(umask 077 && printf 's3cret\n' >"$TMP/secret")
printf 'wrong\n' >"$TMP/wrong"
daemon2_kill
daemon2_start --auth-file "$TMP/secret"
TWO=127.0.0.1:$D2PORT
"$KEYLOCK" --auth-file "$TMP/wrong" -S "$TWO,$ONE" k -- touch "$TMP/ran" \
    2>"$TMP/err"
expect_status 77 $? "a wrong secret for the first server"
expect_grep "AUTH" "$TMP/err" "the message"
[ ! -e "$TMP/ran" ] || fail "the command ran"
[ "$(stat_of grants "$ONE")" -eq $((g1 + 1)) ] ||
    fail "the wrong secret went on to $ONE"
"$KEYLOCK" --auth-file "$TMP/secret" -S "$DEAD,$TWO" k -- true
expect_status 0 $? "the right secret after a dead server"
pass "a wrong secret: exit 77, the next server not tried"

# A drop while holding: lock lost (75), no reconnect to the second server.
daemon2_kill
daemon2_start
TWO=127.0.0.1:$D2PORT
"$KEYLOCK" -S "$ONE,$TWO" k -c "trap 'echo TERM >\"$TMP/got\"; exit 0' TERM
    touch '$TMP/running'; while :; do sleep 0.02; done" 2>"$TMP/err" &
kpid=$!
BGPIDS="$BGPIDS $kpid"
wait_ran "$TMP/running" 5 "the command never ran"
daemon_kill
wait_exit "$kpid" 10
expect_status 75 $? "keylock -S ONE,TWO after ONE died"
expect_grep TERM "$TMP/got" "the command's SIGTERM"
expect_grep "lost the lock on k" "$TMP/err" "the message"
# the first STATS is the only request it ever had: no LOCK, no AUTH
[ "$(stat_of requests "$TWO")" -eq 1 ] ||
    fail "$TWO had requests beside this STATS"
[ "$(stat_of grants "$TWO")" -eq 0 ] || fail "a grant on $TWO"
pass "a drop while holding, with a list: exit 75, no reconnect"

# Without a lock held, each run connects afresh: with ONE dead, the same
# list now reaches TWO.
"$KEYLOCK" -S "$ONE,$TWO" k -- true
expect_status 0 $? "-S ONE,TWO with ONE dead"
[ "$(stat_of grants "$TWO")" -eq 1 ] || fail "no grant on $TWO"
pass "the next run goes to the second server"

# A stopped first server (SIGSTOP: its kernel still completes the TCP
# connection): NAME, the first request, gets no reply within
# --connect-timeout, and the next server is used; alone, or with only a
# dead one after it, it is exit 69. (The daemon is let go on before any
# check: a failed check's cleanup could not stop a stopped daemon.)
daemon_start
ONE=127.0.0.1:$PORT
kill -STOP "$DPID"
g2=$(stat_of grants "$TWO")
"$KEYLOCK" -v --connect-timeout 1 -S "$TWO,$ONE" -w 5 k -- true 2>/dev/null
rc1=$?
"$KEYLOCK" -v --connect-timeout 1 -S "$ONE,$TWO" -w 5 k -- \
    touch "$TMP/ran2" 2>"$TMP/err2"
rc2=$?
"$KEYLOCK" --connect-timeout 1 -S "$ONE" -w 5 k -- touch "$TMP/ran3" \
    2>"$TMP/err3"
rc3=$?
"$KEYLOCK" --connect-timeout 1 -S "$ONE,$DEAD" -w 5 k -- touch "$TMP/ran3" \
    2>"$TMP/err4"
rc4=$?
kill -CONT "$DPID"
expect_status 0 "$rc1" "-S TWO,ONE with TWO live (the stopped one unused)"
expect_status 0 "$rc2" "-S ONE,TWO with ONE stopped"
expect_grep "no reply within 1000 ms.*trying the next server" "$TMP/err2" \
    "the move, with -v"
[ -e "$TMP/ran2" ] || fail "the command did not run"
[ "$(stat_of grants "$TWO")" -eq $((g2 + 2)) ] || fail "no grants on $TWO"
expect_status 69 "$rc3" "-S ONE, stopped"
expect_grep "no reply within 1000 ms" "$TMP/err3" "the message"
expect_status 69 "$rc4" "-S ONE,DEAD with ONE stopped"
expect_grep "no reply within 1000 ms" "$TMP/err4" "the message"
[ ! -e "$TMP/ran3" ] || fail "the command ran without a lock"
pass "a stopped first server: passed over after --connect-timeout"
