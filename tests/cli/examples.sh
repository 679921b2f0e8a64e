#!/bin/sh
# The examples in examples/ run against a private daemon, over TCP and the
# unix socket, and must succeed (each checks its own replies). An example
# whose interpreter or nc(1) is missing is skipped, not failed.
. "$(dirname "$0")/lib.sh"
daemon_start
src=${top_srcdir:-$(dirname "$0")/../..}/examples
builddir=${top_builddir:-.}
tcp=$KEYLOCK_SERVER
ran=0

# run_example NAME COMMAND...: over TCP, then over the unix socket
run_example() {
	name=$1
	shift
	for server in "$tcp" "$TMP/sock"; do
		KEYLOCK_SERVER=$server
		bounded 20 "$@" >"$TMP/out" 2>&1
		status=$?
		[ "$status" -eq 0 ] ||
		    fail "$name on $server: exit $status: $(cat "$TMP/out")"
	done
	KEYLOCK_SERVER=$tcp
	ran=$((ran + 1))
	pass "$name over TCP and the unix socket"
}

# OpenBSD netcat: -N (shut down after input) and -U (unix socket)
if command -v nc >/dev/null && nc -h 2>&1 | grep -q -- '-N'; then
	run_example nc.sh sh "$src/nc.sh"
	if command -v bash >/dev/null; then
		run_example bash-coproc.sh bash "$src/bash-coproc.sh"
	fi
else
	echo "$TEST: nc.sh, bash-coproc.sh skipped: no OpenBSD nc"
fi
if command -v python3 >/dev/null; then
	[ "$(wc -l <"$src/python_client.py")" -lt 40 ] ||
	    fail "python_client.py is 40 lines or more"
	run_example python_client.py python3 "$src/python_client.py"
else
	echo "$TEST: python_client.py skipped: no python3"
fi
run_example fenced_writer "$builddir/examples/fenced_writer"
grep -q "refused A's write" "$TMP/out" || fail "fenced_writer: $(cat \
    "$TMP/out")"

"$KEYLOCK" stats --json >"$TMP/out"
expect_grep '"keys":0' "$TMP/out" "the examples left no key behind"
