#!/bin/sh
# Sessions under fire: libkeylock clients (tests/cli/sess_worker) and
# keylock(1) clients lock, hold and unlock a few keys through
# tests/lib/faultproxy.py, which resets, half-closes, blackholes and
# delays their connections at random; tests/lib/histcheck.py then judges
# the history: 0 overlaps of any key, 0 lost grants, and a server with no
# key and no session left. A minute in make check; SESSION_SOAK_SECONDS
# makes it longer (make soak-sessions).
. "$(dirname "$0")/lib.sh"

SECS=${SESSION_SOAK_SECONDS:-60}
G=3000			# each client's session grace, ms
NKEYS=4
WORKER=$top_builddir/tests/cli/sess_worker
HISTCHECK=${top_srcdir:-$(dirname "$0")/../..}/tests/lib/histcheck.py
[ -x "$WORKER" ] || skip "no $WORKER (make check builds it)"

daemon_start
D=127.0.0.1:$PORT
session_or_skip "$D"
proxy_start 20
P=127.0.0.1:$PPORT
g0=$(stat_of grants "$D")

# A fault per connection after 1.5 s on average; a blackhole or a
# half-close lasts under a third of the grace, as TCP would give up on a
# dead peer eventually, so that every client can come back in its window.
proxy_ctl blackhole-ms 100 $((G / 3))
proxy_ctl halfclose-ms 100 $((G / 3))
proxy_ctl delay-ms 1 40
proxy_ctl chaos 1500

pids=
for i in 1 2 3; do
	"$WORKER" "$P" "$G" "$SECS" "$NKEYS" "$TMP/hist.c$i" "c$i" "$i" \
	    >"$TMP/worker.c$i" 2>&1 &
	pids="$pids $!"
done
# keylock(1): the command is the client that acts under the lock; it
# notes when it started and when it stopped (done, or SIGTERM).
cli_loop() {
	_end=$(($(now_ms) + SECS * 1000))
	_n=0
	while [ "$(now_ms)" -lt "$_end" ]; do
		_n=$((_n + 1))
		"$KEYLOCK" --session=$G -S "$P" -w 2 --grace 1 \
		    "chaos:$((_n % NKEYS))" -c '
		s=$(date +%s%6N)
		rec() { echo "{\"client\":\"'"$1"'\",\"key\":\"$KEYLOCK_KEYS\",\"token\":$KEYLOCK_TOKEN,\"mode\":\"exclusive\",\"start_us\":$s,\"end_us\":$(date +%s%6N),\"end\":\"$1\"}" >>"'"$2"'"; }
		trap "rec lost; exit 0" TERM
		sleep 0.0'"$((_n % 5))"'
		rec unlock' 2>>"$TMP/cli.$1.err"
		echo "$?" >>"$TMP/cli.$1.status"
	done
}
for i in 1 2; do
	( cli_loop "k$i" "$TMP/hist.k$i" ) &
	pids="$pids $!"
done
for p in $pids; do
	wait_exit "$p" $((SECS + 60)) || fail "a client failed (status $?)"
done
proxy_ctl pass
proxy_ctl stats
echo "proxy: $(cat "$TMP/proxy.reply")"
cat "$TMP"/worker.c*
for i in 1 2; do
	echo "keylock k$i: $(wc -l <"$TMP/cli.k$i.status") runs, exit codes" \
	    "$(sort "$TMP/cli.k$i.status" | uniq -c | tr -s ' \n' ' ')"
done
# Only the losses' own statuses may come from keylock: 0, 1 (-w ran
# out), 69 (no server through the proxy at the start), 75 (lost).
if sort -u "$TMP"/cli.k*.status | grep -qv '^\(0\|1\|69\|75\)$'; then
	fail "keylock exited with $(sort -u "$TMP"/cli.k*.status | tr '\n' ' ')"
fi
touch "$TMP/hist.none"
python3 "$HISTCHECK" --server "$D" --grants-before "$g0" \
    --settle-ms $((G * 3)) "$TMP"/hist.* >"$TMP/verdict" 2>"$TMP/why"
rc=$?
cat "$TMP/verdict"
[ "$rc" -eq 0 ] || fail "history: $(head -c 2000 "$TMP/why")"
grep -q '"records":[1-9]' "$TMP/verdict" || fail "no grant at all"
pass "$SECS s of chaos: $(cat "$TMP/verdict")"
