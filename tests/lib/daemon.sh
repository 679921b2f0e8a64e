# The one daemon launcher of the shell tests, sourced by the suites in
# tests/cli/ and tests/service/ (through their lib.sh), by tests/lib/ and by
# bench/smoke.sh, in tmux's regress manner: each script works in its own
# mktemp -d directory, starts its own keylockd there (TCP on port 0, learnt
# from the port file; a unix socket), polls with deadlines instead of
# sleeping, and is cleaned up by the EXIT trap however it ends. Its exit
# status is the verdict (77: skipped). KEYLOCKD names the daemon
# (AM_TESTS_ENVIRONMENT). A suite's lib.sh adds its own helpers and may
# define cleanup_suite, run first by the EXIT trap (the exit status is in
# $status).
#
# Hermetic: every keylockd a test runs gets --config /dev/null ahead of the
# test's own options (a test's --config comes later and wins), so the
# operator's keylockd.conf never reaches it; and the caller's KEYLOCK_*
# variables (KEYLOCK_SERVER, KEYLOCK_AUTH_FILE, KEYLOCK_TLS_*) are unset
# here, so they never reach the test's clients. tests/lib/hermetic.sh
# checks both.
# shellcheck shell=sh

set -u

TEST=$(basename "$0" .sh)
exec 9>&2		# the verdict's stderr, whatever a step redirects

skip() {
	echo "$TEST: SKIP: $*" >&2
	exit 77
}

for _v in $(env | sed -n 's/^\(KEYLOCK_[A-Za-z0-9_]*\)=.*/\1/p'); do
	unset "$_v"
done

if [ -z "${KEYLOCKD:-}" ] || [ ! -x "$KEYLOCKD" ]; then
	skip "KEYLOCKD must name the built daemon (make check sets it)"
fi
case $(date +%s%3N) in
*[!0-9]*)
	skip "date(1) cannot print milliseconds"
	;;
esac

# The certificates every TLS test uses, read-only (tests/certs/make.sh).
TEST_CERTS=${top_srcdir:-$(dirname "$0")/../..}/tests/certs
TMP=$(mktemp -d "${TMPDIR:-/tmp}/keylockd-$TEST.XXXXXX") || exit 1
DPID=
BGPIDS=
READY_S=10		# daemon readiness deadline, seconds

cleanup_suite() {
	:
}

# own_child PID: PID is still a child of this shell. One that ended was
# reaped by the shell, and its number may belong to any process since:
# pid_max is 32768 on a small machine, and a full make check goes round
# it in minutes, so a SIGKILL by a stale number reaches a daemon or an
# etcd member of a suite running alongside as readily as anything.
own_child() {
	_oc=$(sed -n 's/^.*) [A-Za-z] \([0-9]*\) .*/\1/p' "/proc/$1/stat" \
	    2>/dev/null)
	[ "$_oc" = "$$" ]
}

cleanup() {
	status=$?
	trap - EXIT INT TERM HUP
	cleanup_suite
	for p in $BGPIDS; do
		own_child "$p" && kill -KILL "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	done
	if [ -n "$DPID" ]; then
		own_child "$DPID" && kill -TERM "$DPID" 2>/dev/null
		wait "$DPID" 2>/dev/null
	fi
	if [ "$status" -ne 0 ] && [ "$status" -ne 77 ] &&
	    [ -f "$TMP/daemon.log" ]; then
		echo "--- $TEST: last lines of the daemon's log" >&2
		tail -n 30 "$TMP/daemon.log" >&2
	fi
	rm -rf "$TMP"
	exit "$status"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

fail() {
	echo "FAIL: $TEST: $*" >&9
	exit 1
}

pass() {
	echo "ok: $TEST: $*"
}

now_ms() {
	date +%s%3N
}

# wait_for CONDITION SECONDS: polls the shell condition until it holds;
# false after the deadline.
wait_for() {
	_deadline=$(($(now_ms) + $2 * 1000))
	while ! eval "$1"; do
		if [ "$(now_ms)" -gt "$_deadline" ]; then
			return 1
		fi
		sleep 0.02
	done
	return 0
}

# expect_status WANT GOT WHAT
expect_status() {
	[ "$2" -eq "$1" ] || fail "$3: exit status $2, want $1"
}

# run_keylockd [OPTIONS...]: keylockd in the foreground, as every test runs
# it (--config /dev/null first), for --check-config, --help and the like.
run_keylockd() {
	"$KEYLOCKD" --config /dev/null "$@"
}

# daemon_spawn [OPTIONS...]: starts a private daemon in the background
# (OPTIONS after the defaults), its output appended to $TMP/daemon.log, and
# sets DPID; it does not wait for readiness. Exported variables reach it
# (NOTIFY_SOCKET, for one).
daemon_spawn() {
	rm -f "$TMP/port"
	"$KEYLOCKD" --config /dev/null --bind 127.0.0.1 --port 0 \
	    --port-file "$TMP/port" --unix "$TMP/sock" --state-dir "$TMP" \
	    "$@" >>"$TMP/daemon.log" 2>&1 &
	DPID=$!
}

# daemon_launch [OPTIONS...]: daemon_spawn, then readiness: the port file
# holds a port number (written once it listens); sets PORT.
daemon_launch() {
	daemon_spawn "$@"
	wait_for "grep -q '^[0-9][0-9]*\$' '$TMP/port' 2>/dev/null ||
	    ! kill -0 $DPID 2>/dev/null" "$READY_S" ||
	    fail "keylockd not ready within $READY_S s"
	if ! grep -q '^[0-9][0-9]*$' "$TMP/port" 2>/dev/null; then
		wait "$DPID"
		_rc=$?
		DPID=
		fail "keylockd exited during startup with status $_rc"
	fi
	PORT=$(head -n 1 "$TMP/port")
}

# daemon_start [OPTIONS...]: daemon_launch, unless the suite's lib.sh
# redefines it (tests/cli adds debug logging and KEYLOCK_SERVER).
daemon_start() {
	daemon_launch "$@"
}

# daemon_stop: SIGTERM, then the exit status must be 0.
daemon_stop() {
	kill -TERM "$DPID"
	wait "$DPID"
	_rc=$?
	DPID=
	expect_status 0 "$_rc" "keylockd after SIGTERM"
}

# daemon_kill: SIGKILL; every connection drops at once.
daemon_kill() {
	kill -KILL "$DPID"
	wait "$DPID" 2>/dev/null
	DPID=
}
