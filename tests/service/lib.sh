# Sourced by the service tests in tests/service/. The private daemon, the
# mktemp directory, the EXIT trap and the basic checks are in
# tests/lib/daemon.sh; here is what a service test needs: the build and
# source trees, tools it may lack, the daemon's log, and requests over nc,
# one-shot or as sessions that stay open.
#
# The build tree is the directory above KEYLOCKD's src/; the source tree is
# the one above this file.
# shellcheck shell=sh

. "$(dirname "$0")/../lib/daemon.sh"

TOP_BUILDDIR=$(cd "$(dirname "$KEYLOCKD")/.." && pwd)
TOP_SRCDIR=$(cd "$(dirname "$0")/../.." && pwd)
SESSIONS=
REPLY_S=5		# deadline for one reply, seconds

cleanup_suite() {
	for s in $SESSIONS; do
		eval "exec $(session_fd "$s")>&-"
	done
}

need() {
	for _t in "$@"; do
		command -v "$_t" >/dev/null 2>&1 || skip "$_t is not installed"
	done
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

# session_expect NAME N EXTENDED_REGEX WHAT [SECONDS]: reply line N must
# match, within SECONDS (REPLY_S).
session_expect() {
	wait_for "[ \$(wc -l <'$TMP/$1.out') -ge $2 ]" "${5:-$REPLY_S}" ||
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
