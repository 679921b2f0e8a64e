#!/bin/sh
# The integration suites of tests/integration, run against keylockd front
# ends in backend etcd instead of backend local (issue 11: the daemon's
# behaviour, through etcd): one private 3-member cluster, and every daemon
# the suites start made a front end on it by tests/etcd/frontend.sh (as
# KEYLOCKD_WRAPPER), each with an etcd prefix, so a lock table, of its
# own. A test may fail only if it is listed below with the documented
# difference of backend etcd (keylockd(8), BACKEND ETCD) that explains it;
# any other failure fails this test, and so does a listed test that
# passes, so the list cannot go stale, unless RACES lists it too: a
# difference that shows only when the grant's commit comes after the
# input's end, which a fast commit can beat.
. "$(dirname "$0")/lib.sh"

# Minutes: KEYLOCKD_SKIP_ETCD_INTEGRATION leaves it out (scripts/test.sh's
# distcheck does not run it at all: the asan step does).
[ -z "${KEYLOCKD_SKIP_ETCD_INTEGRATION:-}" ] ||
    skip "KEYLOCKD_SKIP_ETCD_INTEGRATION is set"

SUITES=${SUITES:-"protocol_commands_test protocol_errors_test
protocol_framing_test protocol_waits_test protocol_server_test
protocol_channels_test concurrency_test"}

# suite:tcase:test  why (keylockd(8), BACKEND ETCD)
DIFFERENCES='
'
RACES=''

ec_start 3
KL_ETCD_ENDPOINTS=$ETCD_ENDPOINTS
KEYLOCKD_WRAPPER="sh $(cd "$(dirname "$0")" && pwd)/frontend.sh"
KEYLOCKD_TEST_SLOW=${KEYLOCKD_TEST_SLOW:-2}
export KL_ETCD_ENDPOINTS KEYLOCKD_WRAPPER KEYLOCKD_TEST_SLOW

bad=0
for s in $SUITES; do
	prog=$top_builddir/tests/integration/$s
	[ -x "$prog" ] || fail "no $prog (make check builds it)"
	CK_VERBOSITY=normal "$prog" >"$TMP/$s.out" 2>&1
	rc=$?
	sed -n 's/^[^:]*:[0-9]*:[FE]:\([^:]*\):\([^:]*\):.*/\1:\2/p' \
	    "$TMP/$s.out" | sort -u >"$TMP/$s.failed"
	while read -r t; do
		if echo "$DIFFERENCES" | grep -q "^$s:$t "; then
			echo "$s: $t fails as documented: $(echo "$DIFFERENCES" |
			    sed -n "s/^$s:$t //p")"
		else
			echo "--- $s: $t" >&2
			grep ":[FE]:$t:" "$TMP/$s.out" >&2
			bad=1
		fi
	done <"$TMP/$s.failed"
	for t in $(echo "$DIFFERENCES" | sed -n "s/^$s:\([^ ]*\) .*/\1/p"); do
		grep -qx "$t" "$TMP/$s.failed" && continue
		if echo "$RACES" | grep -qx "$s:$t"; then
			echo "$s: $t passed: its commit came before the input's end"
			continue
		fi
		echo "--- $s: $t passes: take it off the list" >&2
		bad=1
	done
	if [ "$rc" -ne 0 ] && [ ! -s "$TMP/$s.failed" ]; then
		echo "--- $s: exit $rc without a failed test" >&2
		tail -n 20 "$TMP/$s.out" >&2
		bad=1
	fi
	pass "$s through backend etcd: $(grep -o 'Checks: [0-9]*' \
	    "$TMP/$s.out" | head -1)"
done
[ "$bad" -eq 0 ] || fail "failures beyond the documented differences"
