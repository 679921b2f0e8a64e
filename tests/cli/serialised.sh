#!/bin/sh
# keylock runs on one key from several processes (over TCP and the unix
# socket) never overlap, and their tokens increase in the order they ran.
. "$(dirname "$0")/lib.sh"
daemon_start

N=6
# The critical section: fails loudly if someone else is inside.
cat >"$TMP/section.sh" <<EOS
if ! mkdir "$TMP/inside" 2>/dev/null; then
	echo "overlap at token \$KEYLOCK_TOKEN" >>"$TMP/errors"
fi
echo "\$(date +%s%3N) start \$KEYLOCK_TOKEN" >>"$TMP/log"
sleep 0.15
echo "\$(date +%s%3N) end \$KEYLOCK_TOKEN" >>"$TMP/log"
rmdir "$TMP/inside"
EOS

t0=$(now_ms)
pids=
i=0
while [ $i -lt $N ]; do
	if [ $((i % 2)) -eq 0 ]; then server=$KEYLOCK_SERVER; else
		server=$TMP/sock; fi
	"$KEYLOCK" -S "$server" shared-key -- sh "$TMP/section.sh" &
	pids="$pids $!"
	i=$((i + 1))
done
BGPIDS="$BGPIDS $pids"
for p in $pids; do
	wait_exit "$p" 20
	expect_status 0 $? "run $p"
done
elapsed=$(($(now_ms) - t0))

[ ! -e "$TMP/errors" ] || fail "$(cat "$TMP/errors")"
[ "$(grep -c start "$TMP/log")" -eq $N ] || fail "not all $N runs ran"
# In time order: start, end, start, end...; tokens increase.
sort -n -s -k1,1 "$TMP/log" | awk -v n=$N '
	{ want = (NR % 2 == 1) ? "start" : "end" }
	$2 != want { print "line " NR ": " $0 ", want " want; bad = 1 }
	$2 == "start" && $3 <= last { print "token " $3 " after " last;
	    bad = 1 }
	$2 == "start" { last = $3 }
	END { exit bad }' >"$TMP/order" ||
    fail "runs overlapped or tokens went back: $(cat "$TMP/order")"
[ "$elapsed" -ge $((N * 150)) ] ||
    fail "$N runs of 150 ms took $elapsed ms: they overlapped"
pass "$N runs (TCP and unix) one at a time in $elapsed ms, tokens rising"
