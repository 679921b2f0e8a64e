# Sourced by the service tests in tests/service/, in tmux's regress manner:
# each script works in its own mktemp -d directory, starts its own keylockd
# (TCP on port 0, learnt from the port file; a unix socket there), polls
# with deadlines instead of sleeping, and is cleaned up by the EXIT trap
# however it ends. Its exit status is the verdict (77: skipped).
#
# KEYLOCKD names the daemon (AM_TESTS_ENVIRONMENT). The build tree is the
# directory above its src/; the source tree is the one above this file.
# shellcheck shell=sh

set -u

TEST=$(basename "$0" .sh)
if [ -z "${KEYLOCKD:-}" ] || [ ! -x "$KEYLOCKD" ]; then
	echo "$TEST: SKIP: KEYLOCKD must name the built daemon" >&2
	exit 77
fi
TOP_BUILDDIR=$(cd "$(dirname "$KEYLOCKD")/.." && pwd)
TOP_SRCDIR=$(cd "$(dirname "$0")/../.." && pwd)
case $(date +%s%3N) in
*[!0-9]*)
	echo "$TEST: SKIP: date(1) cannot print milliseconds" >&2
	exit 77
	;;
esac

TMP=$(mktemp -d "${TMPDIR:-/tmp}/keylockd-$TEST.XXXXXX") || exit 1
DPID=
BGPIDS=
SESSIONS=
READY_S=10		# readiness deadline, seconds
REPLY_S=5		# deadline for one reply, seconds

cleanup() {
	status=$?
	trap - EXIT INT TERM HUP
	for s in $SESSIONS; do
		eval "exec $(session_fd "$s")>&-"
	done
	for p in $BGPIDS; do
		kill -KILL "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	done
	if [ -n "$DPID" ]; then
		kill -TERM "$DPID" 2>/dev/null
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
	echo "FAIL: $TEST: $*" >&2
	exit 1
}

skip() {
	echo "$TEST: SKIP: $*" >&2
	exit 77
}

pass() {
	echo "ok: $TEST: $*"
}

need() {
	for _t in "$@"; do
		command -v "$_t" >/dev/null 2>&1 || skip "$_t is not installed"
	done
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

# expect_eq WANT GOT WHAT
expect_eq() {
	[ "$2" = "$1" ] || fail "$3: got \"$2\", want \"$1\""
}

# expect_grep EXTENDED_REGEX FILE WHAT
expect_grep() {
	grep -Eq -- "$1" "$2" ||
	    fail "$3: no /$1/ in: $(head -c 800 "$2")"
}

# expect_nogrep EXTENDED_REGEX FILE WHAT
expect_nogrep() {
	! grep -Eq -- "$1" "$2" ||
	    fail "$3: unexpected /$1/ in: $(grep -E -- "$1" "$2" | head -3)"
}

# wait_log EXTENDED_REGEX WHAT: waits until the daemon logs a line.
wait_log() {
	wait_for "grep -Eq -- '$1' '$TMP/daemon.log'" "$READY_S" ||
	    fail "$2: no /$1/ in the log"
}

# Starts a private daemon (extra options in "$@"); sets PORT. Readiness:
# the port file holds a port number (written once it listens).
daemon_start() {
	rm -f "$TMP/port"
	"$KEYLOCKD" --bind 127.0.0.1 --port 0 --port-file "$TMP/port" \
	    --unix "$TMP/sock" --state-dir "$TMP" "$@" \
	    >>"$TMP/daemon.log" 2>&1 &
	DPID=$!
	wait_for "grep -q '^[0-9][0-9]*\$' '$TMP/port' 2>/dev/null" \
	    "$READY_S" || fail "keylockd not ready within $READY_S s"
	PORT=$(head -n 1 "$TMP/port")
}

# daemon_stop: SIGTERM, then the exit status must be 0.
daemon_stop() {
	kill -TERM "$DPID"
	wait "$DPID"
	_rc=$?
	DPID=
	expect_status 0 "$_rc" "keylockd after SIGTERM"
}

# ask NC_TARGET... -- LINES: sends the lines on one connection, prints the
# replies (the server answers everything before the end of input).
ask() {
	_n=0
	for _a in "$@"; do
		_n=$((_n + 1))
		[ "$_a" = -- ] && break
	done
	[ "$_n" -le "$#" ] || fail "ask: no -- in $*"
	_t=
	while [ "$1" != -- ]; do
		_t="$_t $1"
		shift
	done
	shift
	# shellcheck disable=SC2086
	printf '%s\n' "$@" | timeout "$REPLY_S" nc -N $_t
}

# ask_tcp LINES...: ask over this test's daemon's TCP port.
ask_tcp() {
	ask 127.0.0.1 "$PORT" -- "$@"
}

# Sessions: a connection that stays open, fed through a fifo, its replies
# collected in $TMP/NAME.out.
# session_open NAME FD NC_TARGET...
session_open() {
	_s=$1 _fd=$2
	shift 2
	mkfifo "$TMP/$_s.in"
	: >"$TMP/$_s.out"
	nc -N "$@" <"$TMP/$_s.in" >"$TMP/$_s.out" 2>&1 &
	BGPIDS="$BGPIDS $!"
	eval "exec $_fd>\"\$TMP/\$_s.in\""
	eval "SESSION_FD_$_s=$_fd"
	SESSIONS="$SESSIONS $_s"
}

session_fd() {
	eval "echo \$SESSION_FD_$1"
}

# session_send NAME LINE
session_send() {
	printf '%s\n' "$2" >&"$(session_fd "$1")" ||
	    fail "session $1: cannot send $2"
}

# session_expect NAME N EXTENDED_REGEX WHAT: reply line N must match.
session_expect() {
	wait_for "[ \$(wc -l <'$TMP/$1.out') -ge $2 ]" "$REPLY_S" ||
	    fail "$4: no reply $2 on session $1: $(cat "$TMP/$1.out")"
	_line=$(sed -n "$2p" "$TMP/$1.out")
	printf '%s\n' "$_line" | grep -Eq -- "$3" ||
	    fail "$4: reply $2 on session $1 is \"$_line\", want /$3/"
}

# session_none NAME N WHAT: no reply N yet (the request waits).
session_none() {
	[ "$(wc -l <"$TMP/$1.out")" -lt "$2" ] ||
	    fail "$3: unexpected reply on session $1: $(cat "$TMP/$1.out")"
}

# json_int JSON NAME: the integer member NAME of a flat JSON object.
json_int() {
	printf '%s\n' "$1" | sed -n "s/.*\"$2\":\([0-9][0-9]*\).*/\1/p"
}
