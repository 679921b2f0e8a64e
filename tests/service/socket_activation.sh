#!/bin/sh
# Socket activation without PID 1: systemd-socket-activate binds a TCP and
# a unix socket, passes them as LISTEN_FDS with LISTEN_FDNAMES=tcp:unix and
# starts the daemon on the first connection. The daemon serves both, one
# lock table behind them, and ignores its own bind, port and unix settings.
. "$(dirname "$0")/lib.sh"
need systemd-socket-activate nc

# systemd-socket-activate takes no port 0: try free-looking ports until
# one binds.
attempt=0
while :; do
	attempt=$((attempt + 1))
	[ "$attempt" -le 20 ] || fail "no free port in 20 attempts"
	PORT=$((20000 + ($$ * 7 + attempt * 7919) % 40000))
	rm -f "$TMP/sock" "$TMP/daemon.log"
	systemd-socket-activate -l "127.0.0.1:$PORT" -l "$TMP/sock" \
	    --fdname=tcp:unix "$KEYLOCKD" --config /dev/null \
	    --state-dir "$TMP" --unix "$TMP/ignored.sock" --bind 127.0.0.2 \
	    --port 1 --port-file "$TMP/port" >"$TMP/daemon.log" 2>&1 &
	DPID=$!
	wait_for "grep -q 'as 4' '$TMP/daemon.log' ||
	    ! kill -0 $DPID 2>/dev/null" "$READY_S" ||
	    fail "systemd-socket-activate did not start"
	if kill -0 "$DPID" 2>/dev/null; then
		break
	fi
	wait "$DPID"
	DPID=
	grep -q "in use" "$TMP/daemon.log" ||
	    fail "systemd-socket-activate failed: $(cat "$TMP/daemon.log")"
done
[ -S "$TMP/sock" ] || fail "no unix socket from systemd-socket-activate"
expect_nogrep "^Execing|keylockd: " "$TMP/daemon.log" "the daemon before a connection"
pass "sockets bound on 127.0.0.1:$PORT and $TMP/sock"

# The first connection starts the daemon, which answers it.
ask_tcp PING >"$TMP/out"
expect_eq "OK PONG" "$(cat "$TMP/out")" "PING over TCP"
ask -U "$TMP/sock" -- PING >"$TMP/out"
expect_eq "OK PONG" "$(cat "$TMP/out")" "PING over unix"
expect_grep "listening on tcp 127.0.0.1:$PORT \(systemd tcp\)" \
    "$TMP/daemon.log" "the adopted TCP socket, named"
expect_grep "listening on unix $TMP/sock \(systemd unix\)" \
    "$TMP/daemon.log" "the adopted unix socket, named"
expect_grep "bind, port and unix settings are ignored" "$TMP/daemon.log" \
    "the log says the settings are ignored"
[ ! -e "$TMP/ignored.sock" ] || fail "the configured unix socket was created"
expect_nogrep "keylockd: .*127\\.0\\.0\\.2" "$TMP/daemon.log" "the configured bind"
expect_eq "$PORT" "$(head -n 1 "$TMP/port")" "the port file"
pass "PING over both; own bind, port and unix ignored"

# One table behind both: a lock taken over TCP shows in INFO over unix.
session_open holder 3 127.0.0.1 "$PORT"
session_send holder "NAME tcp-holder"
session_expect holder 1 '^OK$' "NAME"
session_send holder "LOCK shared-table"
session_expect holder 2 '^OK [0-9]+$' "LOCK over TCP"
token=$(sed -n '2s/^OK //p' "$TMP/holder.out")
ask -U "$TMP/sock" -- "INFO shared-table" "TRYLOCK shared-table" >"$TMP/out"
expect_grep '"name":"tcp-holder"' "$TMP/out" "INFO over unix names the holder"
expect_grep "\"token\":$token[,}]" "$TMP/out" "INFO over unix shows the token"
expect_grep '^ERR LOCKED shared-table held by client [0-9]+ \(tcp-holder\)' \
    "$TMP/out" "TRYLOCK over unix"
pass "a lock taken over TCP is seen over unix"

# SIGTERM: exit 0, and the socket systemd made is not the daemon's to
# remove.
daemon_stop
[ -S "$TMP/sock" ] || fail "the daemon removed the socket it was passed"
pass "SIGTERM: exit 0, the passed unix socket left in place"
