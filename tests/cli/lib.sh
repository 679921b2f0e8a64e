# Sourced by the keylock(1) regress scripts in tests/cli/, in tmux's manner:
# each script starts its own keylockd in a mktemp -d directory (TCP on port
# 0, a unix socket there), waits for its port file with a deadline, and is
# cleaned up by the EXIT trap however it ends. Its exit status is the
# verdict. make check sets KEYLOCKD and KEYLOCK (tools/local.mk).
# shellcheck shell=sh

set -u

TEST=$(basename "$0" .sh)
if [ -z "${KEYLOCKD:-}" ] || [ -z "${KEYLOCK:-}" ]; then
	echo "$TEST: SKIP: KEYLOCKD and KEYLOCK must name the daemon and" \
	    "the client (make check sets them)" >&2
	exit 77
fi
case $(date +%s%3N) in
*[!0-9]*)
	echo "$TEST: SKIP: date(1) cannot print milliseconds" >&2
	exit 77
	;;
esac

TMP=$(mktemp -d "${TMPDIR:-/tmp}/keylock-$TEST.XXXXXX") || exit 1
exec 9>&2		# the verdict's stderr, whatever a step redirects
DPID=
BGPIDS=
READY_S=10		# daemon readiness deadline, seconds

cleanup() {
	status=$?
	trap - EXIT INT TERM HUP
	for p in $BGPIDS; do
		kill -KILL "$p" 2>/dev/null
	done
	if [ -n "$DPID" ]; then
		kill -TERM "$DPID" 2>/dev/null
		wait "$DPID" 2>/dev/null
	fi
	if [ "$status" -ne 0 ] && [ "$status" -ne 77 ] &&
	    [ -f "$TMP/daemon.log" ]; then
		echo "--- $TEST: last lines of the daemon's log" >&2
		tail -n 20 "$TMP/daemon.log" >&2
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

# Starts a private daemon (extra options in "$@") and points KEYLOCK_SERVER
# at it. Readiness: the port file holds a port number.
daemon_start() {
	rm -f "$TMP/port"
	"$KEYLOCKD" --bind 127.0.0.1 --port 0 --port-file "$TMP/port" \
	    --unix "$TMP/sock" --state-dir "$TMP" --log-level debug "$@" \
	    >>"$TMP/daemon.log" 2>&1 &
	DPID=$!
	wait_for "grep -qx '[0-9][0-9]*' '$TMP/port' 2>/dev/null" "$READY_S" ||
	    fail "keylockd not ready within $READY_S s"
	PORT=$(head -n 1 "$TMP/port")
	KEYLOCK_SERVER=127.0.0.1:$PORT
	export KEYLOCK_SERVER
}

# Kills the daemon with SIGKILL: every connection drops at once.
daemon_kill() {
	kill -KILL "$DPID"
	wait "$DPID" 2>/dev/null
	DPID=
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

# wait_exit PID SECONDS: waits for a background process, with a deadline:
# a hang fails the test instead of stalling make check. Returns its status.
wait_exit() {
	if ! wait_for "! kill -0 $1 2>/dev/null" "$2"; then
		kill -KILL "$1" 2>/dev/null
		wait "$1" 2>/dev/null
		fail "pid $1 still running after $2 s"
	fi
	wait "$1"
}

# bounded SECONDS COMMAND...: runs COMMAND with a deadline, as wait_exit.
bounded() {
	_secs=$1
	shift
	"$@" &
	BGPIDS="$BGPIDS $!"
	wait_exit $! "$_secs"
}

# expect_status WANT GOT WHAT
expect_status() {
	[ "$2" -eq "$1" ] || fail "$3: exit status $2, want $1"
}

# expect_window LOW_MS HIGH_MS GOT_MS WHAT
expect_window() {
	[ "$3" -ge "$1" ] && [ "$3" -le "$2" ] ||
	    fail "$4: took $3 ms, want $1 to $2 ms"
}

# expect_grep PATTERN FILE WHAT
expect_grep() {
	grep -q -- "$1" "$2" ||
	    fail "$3: no \"$1\" in: $(head -c 600 "$2")"
}

# hold KEY [keylock options...]: a background keylock holds KEY until
# release KEY. Returns once the command runs, i.e. the lock is held.
hold() {
	_key=$1
	shift
	rm -f "$TMP/held.$_key" "$TMP/release.$_key"
	"$KEYLOCK" "$@" "$_key" -c "touch '$TMP/held.$_key';
	    while [ ! -e '$TMP/release.$_key' ]; do sleep 0.02; done" &
	eval "HOLDPID_$(echo "$_key" | tr -c 'A-Za-z0-9\n' _)=$!"
	BGPIDS="$BGPIDS $!"
	wait_for "[ -e '$TMP/held.$_key' ]" 5 || fail "hold $_key: no lock"
}

# release KEY: ends the holder's command and checks that it exited 0.
release() {
	touch "$TMP/release.$1"
	_pid=$(eval "echo \$HOLDPID_$(echo "$1" | tr -c 'A-Za-z0-9\n' _)")
	wait_exit "$_pid" 10
	expect_status 0 $? "the holder of $1"
}
