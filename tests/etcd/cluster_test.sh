#!/bin/sh
# The test cluster harness itself (tests/etcd/cluster.sh): three members
# come up healthy on distinct free ports, the leader is found, a stopped
# leader is replaced and continues as a follower, a killed member comes
# back with its data, and bringing the cluster down (by the command or by
# the watchdog when the test's process dies) leaves no member running.
. "$(dirname "$0")/lib.sh"

ec_start 3
n=$(echo "$ETCD_ENDPOINTS" | tr ',' '\n' | sort -u | wc -l)
[ "$n" -eq 3 ] || fail "3 distinct endpoints, got: $ETCD_ENDPOINTS"
ec ctl put k v >/dev/null || fail "put"
[ "$(ec ctl get --print-value-only k)" = v ] || fail "get"

leader=$(ec leader) || fail "no leader"
ec stop "$leader"
new=$(ec leader) || fail "no leader after stopping $leader"
[ "$new" != "$leader" ] || fail "stopped $leader still leads"
# an election takes seconds on a loaded machine: retry the write
wait_for "ec ctl put k2 v2 >/dev/null 2>&1" 30 || fail "put without $leader"
ec cont "$leader"
ec wait-healthy 30 || fail "$leader not healthy after SIGCONT"
pass "stopped leader $leader replaced by $new"

ec kill m2
wait_for "ec ctl put k3 v3 >/dev/null 2>&1" 30 || fail "put without m2"
ec restart m2
ec wait-healthy 30 || fail "m2 not healthy after restart"
[ "$(ETCDCTL_API=3 etcdctl --endpoints "$(ec url m2)" get \
    --print-value-only k3)" = v3 ] || fail "m2 did not catch up"
pass "killed m2 restarted and caught up"

pids=$(cat "$TMP"/etcd/m*.pid)
ec down
for p in $pids; do
	pid_running "$p" && fail "member $p still running after down"
done
[ ! -d "$TMP/etcd" ] || fail "down left $TMP/etcd"
pass "down stops every member"

# The watchdog: the cluster of a process that dies goes with it.
sleep 30 &
holder=$!
BGPIDS="$BGPIDS $holder"
sh "$EC_SH" "$TMP/wd" start 1 --watch "$holder" >/dev/null ||
    fail "no 1-member cluster"
pid=$(cat "$TMP/wd/m1.pid")
kill "$holder"
wait "$holder" 2>/dev/null
wait_for "! pid_running $pid" 5 ||
    fail "member $pid outlived its watched process"
pass "watchdog brings the cluster down with its process"
