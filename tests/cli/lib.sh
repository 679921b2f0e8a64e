# Sourced by the keylock(1) regress scripts in tests/cli/. The private
# daemon, the mktemp directory, the EXIT trap and the basic checks are in
# tests/lib/daemon.sh; here is what a client test needs: KEYLOCK_SERVER
# aimed at the daemon, deadlines on background keylock processes, timing
# windows, and a lock held in the background until released. make check
# sets KEYLOCKD and KEYLOCK (tools/local.mk).
# shellcheck shell=sh

. "$(dirname "$0")/../lib/daemon.sh"

if [ -z "${KEYLOCK:-}" ]; then
	skip "KEYLOCK must name the client (make check sets it)"
fi

# Starts a private daemon (extra options in "$@") with debug logging and
# points KEYLOCK_SERVER at it.
daemon_start() {
	daemon_launch --log-level debug "$@"
	KEYLOCK_SERVER=127.0.0.1:$PORT
	export KEYLOCK_SERVER
}

# wait_exit PID SECONDS: waits for a background process, with a deadline:
# a hang fails the test instead of stalling make check. Returns its status.
# The deadline guards against a hang and checks no timing (expect_window
# does that), so it is SECONDS times 3 times KEYLOCKD_TEST_SLOW: an ASan
# build on a machine busy with other suites once took more than 10 s
# for a keylock whose command sleeps 1 s.
wait_exit() {
	_ws=$(($2 * 3 * ${KEYLOCKD_TEST_SLOW:-1}))
	if ! wait_for "! kill -0 $1 2>/dev/null" "$_ws"; then
		kill -KILL "$1" 2>/dev/null
		wait "$1" 2>/dev/null
		fail "pid $1 still running after $_ws s"
	fi
	wait "$1"
}

# wait_ran FILE SECONDS WHAT: a command started in the background makes
# FILE once it runs; a hang guard as wait_exit's (SECONDS times 3 times
# KEYLOCKD_TEST_SLOW), since how soon it runs is not what is checked: an
# ASan keylock at load 16 once took more than 5 s to start its command.
wait_ran() {
	wait_for "[ -e '$1' ]" $(($2 * 3 * ${KEYLOCKD_TEST_SLOW:-1})) ||
	    fail "$3"
}

# bounded SECONDS COMMAND...: runs COMMAND with a deadline, as wait_exit.
bounded() {
	_secs=$1
	shift
	"$@" &
	BGPIDS="$BGPIDS $!"
	wait_exit $! "$_secs"
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
	wait_ran "$TMP/held.$_key" 5 "hold $_key: no lock"
}

# release KEY: ends the holder's command and checks that it exited 0.
release() {
	touch "$TMP/release.$1"
	_pid=$(eval "echo \$HOLDPID_$(echo "$1" | tr -c 'A-Za-z0-9\n' _)")
	wait_exit "$_pid" 10
	expect_status 0 $? "the holder of $1"
}

# daemon2_start [OPTIONS...]: a second private daemon, in $TMP/d2 (TCP port
# D2PORT, unix socket $TMP/d2/sock, pid D2PID), for server lists; killed
# by the EXIT trap like any background process. daemon2_kill: SIGKILL.
daemon2_start() {
	mkdir -p "$TMP/d2"
	rm -f "$TMP/d2/port"
	"$KEYLOCKD" --config /dev/null --bind 127.0.0.1 --port 0 \
	    --port-file "$TMP/d2/port" --unix "$TMP/d2/sock" \
	    --state-dir "$TMP/d2" --log-level debug "$@" \
	    >>"$TMP/d2/daemon.log" 2>&1 &
	D2PID=$!
	BGPIDS="$BGPIDS $D2PID"
	wait_for "grep -q '^[0-9][0-9]*\$' '$TMP/d2/port' 2>/dev/null ||
	    ! kill -0 $D2PID 2>/dev/null" "$READY_S" &&
	    grep -q '^[0-9][0-9]*$' "$TMP/d2/port" ||
	    fail "the second keylockd not ready within $READY_S s"
	D2PORT=$(head -n 1 "$TMP/d2/port")
}

daemon2_kill() {
	kill -KILL "$D2PID"
	wait "$D2PID" 2>/dev/null
}

# stat_of NAME SERVER: one integer of the server's STATS.
stat_of() {
	"$KEYLOCK" -S "$2" stats --json |
	    sed -n "s/.*\"$1\":\([0-9][0-9]*\).*/\1/p"
}

# proxy_start: tests/lib/faultproxy.py between the clients and the daemon
# (127.0.0.1:$PORT); sets PPORT (the proxy's port), CPORT (its control
# port) and PROXY_PID. Skips without python3. proxy_ctl COMMAND...: one
# control command (faultproxy.py's header), failing the test on ERR.
FAULTPROXY=${top_srcdir:-$(dirname "$0")/../..}/tests/lib/faultproxy.py
proxy_start() {
	command -v python3 >/dev/null 2>&1 || skip "no python3 for the proxy"
	rm -f "$TMP/proxy.port" "$TMP/proxy.ctl"
	python3 "$FAULTPROXY" --target "127.0.0.1:$PORT" --seed "${1:-1}" \
	    --port-file "$TMP/proxy.port" --control-port-file "$TMP/proxy.ctl" \
	    2>>"$TMP/proxy.log" &
	PROXY_PID=$!
	BGPIDS="$BGPIDS $PROXY_PID"
	wait_for "[ -s '$TMP/proxy.ctl' ] || ! kill -0 $PROXY_PID" 60 &&
	    [ -s "$TMP/proxy.ctl" ] || fail "faultproxy.py did not start"
	PPORT=$(cat "$TMP/proxy.port")
	CPORT=$(cat "$TMP/proxy.ctl")
}

proxy_ctl() {
	python3 "$FAULTPROXY" ctl "$CPORT" "$@" >"$TMP/proxy.reply" ||
	    fail "proxy_ctl $*: $(cat "$TMP/proxy.reply")"
}

# session_or_skip SERVER: skips the test when the daemon has no sessions
# (SESSION answered ERR SYNTAX: a keylockd before protocol 1.2).
session_or_skip() {
	if ! "$KEYLOCK" -S "$1" stats --json | grep -q '"sessions":'; then
		skip "this keylockd has no sessions (STATS has no \"sessions\")"
	fi
}
