#!/bin/sh
# keylock-bench --etcd against a private 1-member etcd: a second of
# lock-unlock cycles on distinct keys and of hand-offs on one busy key,
# each a JSON report with cycles, no error, and about two etcd writes
# per cycle (the lock's put and the unlock's delete); a second run on the
# same key is not held up by the first one's locks, since its leases are
# revoked at the end. Then -w refresh through a keylockd front end
# (backend etcd) on the same member: a second of pipelined REFRESHes of
# ttl=300 locks, each answered once etcd has its put, every reply OK (a
# REFRESH refused, or one that did not restart the ttl, whose lock then
# ends at 300 ms, gives ERR replies). No timing is asserted; bench/
# judges speed.
. "$(dirname "$0")/lib.sh"

BENCH=$top_builddir/tools/keylock-bench
[ -x "$BENCH" ] || skip "no keylock-bench at $BENCH"

ec_start 1
addr=${ETCD_ENDPOINTS#http://}

# jval FILE NAME: a top-level member of the report (two spaces deep).
jval() {
	sed -n "s/^  \"$2\": \(.*\),\{0,1\}\$/\1/p" "$1" | sed 's/,$//; s/"//g'
}

# run NAME ARGS...: one run, its JSON in $TMP/NAME.json, checked.
run() {
	_name=$1
	shift
	_j=$TMP/$_name.json
	"$BENCH" --etcd -S "$addr" -t 1 --json --no-progress "$@" \
	    >"$_j" 2>"$TMP/$_name.err" ||
	    fail "$_name: exit $?: $(cat "$TMP/$_name.err")"
	[ "$(jval "$_j" ok)" = true ] || fail "$_name: not ok: $(cat "$_j")"
	[ "$(jval "$_j" protocol)" = etcd ] || fail "$_name: protocol"
	[ "$(jval "$_j" errors)" = 0 ] || fail "$_name: errors: $(cat "$_j")"
	_c=$(jval "$_j" cycles)
	[ "$_c" -gt 0 ] || fail "$_name: no cycles"
	_w=$(jval "$_j" etcd_writes_per_cycle)
	case $_w in
	1.[5-9]* | 2 | 2.* | 3.0) ;;
	*) fail "$_name: $_w etcd writes per cycle, want about 2" ;;
	esac
	pass "$_name: $_c cycles, $_w etcd writes each"
}

run distinct -c 8 -r 1000
run contended -w contended -c 4
run again -w contended -c 4

"$BENCH" --etcd -w trylock >/dev/null 2>&1
expect_status 64 $? "--etcd -w trylock"
"$BENCH" --etcd -P 4 >/dev/null 2>&1
expect_status 64 $? "--etcd -P 4"

daemon_launch --unix '' --backend etcd --etcd-endpoints "$ETCD_ENDPOINTS" \
    --etcd-prefix kbench/
j=$TMP/refresh.json
"$BENCH" -S "127.0.0.1:$PORT" -w refresh -c 4 -P 4 --ttl 300 -t 1 --json \
    --no-progress >"$j" 2>"$TMP/refresh.err" ||
    fail "refresh: exit $?: $(cat "$TMP/refresh.err")"
[ "$(jval "$j" ok)" = true ] || fail "refresh: not ok: $(cat "$j")"
[ "$(jval "$j" workload)" = refresh ] || fail "refresh: workload"
[ "$(jval "$j" errors)" = 0 ] || fail "refresh: errors: $(cat "$j")"
c=$(jval "$j" cycles)
[ "$c" -gt 0 ] || fail "refresh: no REFRESH answered"
pass "refresh: $c REFRESHes of ttl=300 locks through backend etcd, all OK"
