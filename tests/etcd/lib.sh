# Sourced by the shell tests in tests/etcd/: tests/lib/daemon.sh (the
# mktemp directory, the EXIT trap, fail/pass, wait_for, a private
# keylockd) plus a private etcd cluster in $TMP/etcd, brought down by the
# EXIT trap (and by cluster.sh's watchdog should this shell be killed).
# shellcheck shell=sh

. "$(dirname "$0")/../lib/daemon.sh"

EC_SH=$(cd "$(dirname "$0")" && pwd)/cluster.sh
ETCD_ENDPOINTS=

# ec COMMAND [ARGS...]: cluster.sh on this test's cluster.
ec() {
	sh "$EC_SH" "$TMP/etcd" "$@"
}

# ec_start N: N members, healthy; sets ETCD_ENDPOINTS. Skips without etcd.
ec_start() {
	ETCD_ENDPOINTS=$(ec start "$1" --watch $$)
	_rc=$?
	[ "$_rc" -ne 77 ] || skip "etcd is not installed (etcd-server)"
	[ "$_rc" -eq 0 ] || fail "no etcd cluster of $1 members"
}

# pid_running PID: it exists and is not a zombie (whose reaping may lag).
pid_running() {
	_st=$(sed -n 's/^[0-9]* (.*) \([A-Za-z]\).*/\1/p' "/proc/$1/stat" \
	    2>/dev/null)
	[ -n "$_st" ] && [ "$_st" != Z ] && [ "$_st" != X ]
}

cleanup_suite() {
	ec down 2>/dev/null
}
