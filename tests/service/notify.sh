#!/bin/sh
# sd_notify without PID 1: the test plays the service manager with a unix
# datagram socket of its own (notify_recv) and starts the daemon with
# NOTIFY_SOCKET pointing at it. READY=1 must come once the daemon answers
# (nothing is retried after it), STATUS= must count clients and keys,
# SIGHUP must give RELOADING=1 then READY=1, and SIGTERM STOPPING=1. Then
# again with an abstract socket address ("@name").
. "$(dirname "$0")/lib.sh"
need nc
RECV=$TOP_BUILDDIR/tests/service/notify_recv
[ -x "$RECV" ] || fail "no $RECV (make check builds it)"

# run_case ADDRESS: the whole sequence against one NOTIFY_SOCKET.
run_case() {
	addr=$1
	out=$TMP/notify.$2
	"$RECV" "$addr" 60 >"$out" 2>&1 &
	RPID=$!
	BGPIDS="$BGPIDS $RPID"
	wait_for "grep -q '^listening$' '$out'" "$READY_S" ||
	    fail "notify_recv did not bind $addr: $(cat "$out")"

	NOTIFY_SOCKET=$addr
	export NOTIFY_SOCKET
	daemon_spawn
	unset NOTIFY_SOCKET
	# Readiness comes from the notification alone, not from polling
	# the port: after READY=1 the very first attempt must be served.
	wait_for "grep -q '^READY=1$' '$out'" "$READY_S" ||
	    fail "$addr: no READY=1: $(cat "$out")"
	PORT=$(head -n 1 "$TMP/port")
	ask_tcp PING >"$TMP/out"
	expect_eq "OK PONG" "$(cat "$TMP/out")" "$addr: PING right after READY=1"
	ask -U "$TMP/sock" -- PING >"$TMP/out"
	expect_eq "OK PONG" "$(cat "$TMP/out")" "$addr: unix PING after READY=1"
	wait_for "grep -q '^STATUS=' '$out'" "$READY_S" ||
	    fail "$addr: no STATUS=: $(cat "$out")"
	expect_grep '^STATUS=[0-9]+ clients, [0-9]+ keys' "$out" \
	    "$addr: STATUS= counts clients and keys"
	[ "$(grep -n '^READY=1$' "$out" | head -n 1 | cut -d: -f1)" -lt \
	    "$(grep -n '^STATUS=' "$out" | head -n 1 | cut -d: -f1)" ] ||
	    fail "$addr: STATUS= before READY=1: $(cat "$out")"
	pass "$addr: READY=1 once serving, then STATUS=$(sed -n 's/^STATUS=//p' "$out" | head -n 1)"

	kill -HUP "$DPID"
	wait_for "[ \$(grep -c '^READY=1$' '$out') -ge 2 ]" "$READY_S" ||
	    fail "$addr: no READY=1 after SIGHUP: $(cat "$out")"
	expect_eq "RELOADING=1" \
	    "$(grep -E '^(RELOADING|READY)=' "$out" | sed -n 2p)" \
	    "$addr: RELOADING=1 between the READY=1s"
	pass "$addr: SIGHUP gives RELOADING=1, READY=1"

	daemon_stop
	wait "$RPID"
	expect_status 0 $? "$addr: notify_recv (it exits on STOPPING=1)"
	expect_grep '^STOPPING=1$' "$out" "$addr: STOPPING=1"
	pass "$addr: SIGTERM gives STOPPING=1"
}

run_case "$TMP/notify" path
run_case "@keylockd-notify-test-$$" abstract
