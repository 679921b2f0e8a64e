#!/bin/sh
# keylock-bench smoke test, run by make check: one second of lock-unlock
# cycles against a private keylockd, then the --json output must parse and
# report cycles. No timing is asserted here; bench/compare.sh judges speed.
# The daemon, the mktemp directory and the EXIT trap are those of the shell
# tests (tests/lib/daemon.sh); KEYLOCK_BENCH defaults to the build tree's.
BENCH=${KEYLOCK_BENCH:-}	# read first: daemon.sh unsets KEYLOCK_*
. "$(dirname "$0")/../tests/lib/daemon.sh"

BENCH=${BENCH:-$(dirname "$KEYLOCKD")/../tools/keylock-bench}
[ -x "$BENCH" ] || skip "no keylock-bench at $BENCH"

# On failure, what the bench wrote (daemon.sh adds the daemon's log).
cleanup_suite() {
	[ "$status" -ne 0 ] && [ "$status" -ne 77 ] || return 0
	for f in bench.json hold.json seed.json bench.err; do
		[ -s "$TMP/$f" ] || continue
		echo "--- $TEST: $f" >&2
		tail -n 30 "$TMP/$f" >&2
	done
}

# json_get A B ...: reads the JSON document on stdin and prints its member
# A.B...: with jq, python3 or perl's JSON::PP, whichever is here (perl is on
# every Debian machine that has build-essential).
json_get() {
	if command -v jq >/dev/null 2>&1; then
		jq -e ".$(echo "$*" | tr ' ' '.')" 2>/dev/null
	elif command -v python3 >/dev/null 2>&1; then
		python3 -c 'import json, sys
v = json.load(sys.stdin)
for k in sys.argv[1:]:
    v = v[k]
print(v)' "$@" 2>/dev/null
	elif perl -MJSON::PP -e 1 2>/dev/null; then
		perl -MJSON::PP -e 'local $/; my $v = decode_json(<STDIN>);
		    for my $k (@ARGV) { ref $v eq "HASH" && exists $v->{$k}
		    or exit 1; $v = $v->{$k} } print "$v\n"' "$@"
	else
		skip "no JSON parser (jq, python3, perl)"
	fi
}

daemon_launch --unix ''

"$BENCH" -S "127.0.0.1:$PORT" -c 4 -P 4 -t 1 --no-progress --json \
    >"$TMP/bench.json" 2>"$TMP/bench.err" ||
    fail "keylock-bench exited with status $?"
cycles=$(json_get cycles <"$TMP/bench.json") ||
    fail "the --json output does not parse or has no cycles"
case $cycles in
'' | *[!0-9]* | 0)
	fail "cycles is '$cycles', not a positive whole number"
	;;
esac

# clean_run WHAT: the run whose --json is $TMP/bench.json had no error
# reply and did cycles (a positive whole number, in CYCLES), or WHAT fails.
clean_run() {
	_v=$(json_get errors <"$TMP/bench.json") ||
	    fail "$1: the output has no errors"
	[ "$_v" = 0 ] || fail "$1: $_v error replies:" \
	    "$(json_get first_error <"$TMP/bench.json")"
	CYCLES=$(json_get cycles <"$TMP/bench.json") ||
	    fail "$1: the output has no cycles"
	case $CYCLES in
	'' | *[!0-9]* | 0)
		fail "$1: cycles is '$CYCLES', not a positive whole number"
		;;
	esac
}

# --channels: the clients as channels of a few connections, each reply
# routed by its @N to its client: lock-unlock on random keys (pipelined)
# and one contended key handed over between channels of one connection
# and of another; no error reply, cycles done, and a workload without
# channels (-w connect) refused as a usage error.
ccycles=
for w in "lock-unlock -c 12 -P 4 --channels 3" "contended -c 12 --channels 2"; do
	# shellcheck disable=SC2086 # $w is the workload and its options
	"$BENCH" -S "127.0.0.1:$PORT" -w $w -t 1 --no-progress --json \
	    >"$TMP/bench.json" 2>"$TMP/bench.err" ||
	    fail "keylock-bench -w $w exited with status $?"
	v=$(json_get channels_over <"$TMP/bench.json") ||
	    fail "-w $w: the output has no channels_over"
	[ "$v" = "${w##* }" ] || fail "-w $w: channels_over is '$v'"
	clean_run "-w $w"
	ccycles="${ccycles:+$ccycles, }$CYCLES ${w%% *}"
done
v=0
"$BENCH" -S "127.0.0.1:$PORT" -w connect -c 4 --channels 2 -t 1 \
    >/dev/null 2>"$TMP/bench.err" || v=$?
[ "$v" = 64 ] || fail "-w connect --channels exited with status $v, not 64"
grep -q -e '--channels: not with -w connect' "$TMP/bench.err" ||
    fail "-w connect --channels: $(cat "$TMP/bench.err")"

# --session: every connection opens a session first, and QUITs at the
# end, which ends it: none left detached, no key left held.
"$BENCH" -S "127.0.0.1:$PORT" -c 4 -P 4 -t 1 --session=5000 --no-progress \
    --json >"$TMP/bench.json" 2>"$TMP/bench.err" ||
    fail "keylock-bench --session exited with status $?"
sessions=$(json_get sessions <"$TMP/bench.json") ||
    fail "the --session output has no sessions"
[ "$sessions" = 4 ] || fail "sessions is '$sessions', not 4"
scycles=$(json_get cycles <"$TMP/bench.json") ||
    fail "the --session output has no cycles"
case $scycles in
'' | *[!0-9]* | 0)
	fail "--session: cycles is '$scycles', not a positive whole number"
	;;
esac
KEYLOCK=$(dirname "$BENCH")/keylock
if [ -x "$KEYLOCK" ]; then
	# QUIT is served after the replies before it: wait for the daemon.
	left() {
		"$KEYLOCK" -S "127.0.0.1:$PORT" stats --json >"$TMP/stats.json" ||
		    fail "keylock stats exited with status $?"
		echo "$(json_get sessions <"$TMP/stats.json")" \
		    "$(json_get sessions_detached <"$TMP/stats.json")" \
		    "$(json_get keys <"$TMP/stats.json")"
	}
	# shellcheck disable=SC2016 # wait_for evaluates it
	wait_for '[ "$(left)" = "0 0 0" ]' 10 ||
	    fail "after --session: sessions, detached, keys: $(left)"
	# With channels: a session per connection, on its channel 0, and
	# its QUIT ends every channel's locks with it (a grace of a minute:
	# only the QUIT can end them within the wait below).
	"$BENCH" -S "127.0.0.1:$PORT" -c 8 -P 2 --channels 2 -t 1 \
	    --session=60000 --no-progress --json >"$TMP/bench.json" \
	    2>"$TMP/bench.err" ||
	    fail "keylock-bench --session --channels 2 exited with status $?"
	v=$(json_get sessions <"$TMP/bench.json") ||
	    fail "--session --channels 2: the output has no sessions"
	[ "$v" = 2 ] || fail "--session --channels 2: sessions is '$v', not 2"
	# shellcheck disable=SC2016 # wait_for evaluates it
	wait_for '[ "$(left)" = "0 0 0" ]' 10 ||
	    fail "after --session --channels 2: sessions, detached, keys:" \
	    "$(left)"
fi

# -w refresh: each client takes a lock with ttl=300 and keeps it a second
# with pipelined REFRESHes: every reply OK (a REFRESH refused, or one that
# did not restart the ttl, whose lock then ends at 300 ms, gives an error
# reply: ERR NOTHELD), and a REFRESH per cycle.
"$BENCH" -S "127.0.0.1:$PORT" -w refresh -c 4 -P 4 --ttl 300 -t 1 \
    --no-progress --json >"$TMP/bench.json" 2>"$TMP/bench.err" ||
    fail "keylock-bench -w refresh exited with status $?"
clean_run "-w refresh"
rcycles=$CYCLES
for m in count:$rcycles failed:0; do
	v=$(json_get latency_ms REFRESH "${m%%:*}" <"$TMP/bench.json") ||
	    fail "-w refresh: the output has no latency_ms.REFRESH.${m%%:*}"
	[ "$v" = "${m#*:}" ] ||
	    fail "-w refresh: latency_ms.REFRESH.${m%%:*} is '$v', not ${m#*:}"
done

# Holding keys: the table's own bytes per key come from STATS table_bytes.
"$BENCH" -S "127.0.0.1:$PORT" -w hold -n 2000 -c 2 -P 16 --no-progress \
    --server-pid "$DPID" --json >"$TMP/hold.json" 2>"$TMP/bench.err" ||
    fail "keylock-bench -w hold exited with status $?"
keys=$(json_get hold keys <"$TMP/hold.json") ||
    fail "the hold output has no hold.keys"
[ "$keys" = 2000 ] || fail "hold.keys is '$keys', not 2000"
per=$(json_get hold table_bytes_per_key <"$TMP/hold.json") ||
    fail "the hold output has no hold.table_bytes_per_key"
case $per in
'' | *[!0-9.]* | 0 | 0.0)
	fail "table_bytes_per_key is '$per', not a positive number"
	;;
esac
# The seed: 200 one-millisecond holds, 20 in a row on each of 10 keys, each
# next LOCK written before the UNLOCK that hands the key over: all done, no
# grant of a key still held, fencing tokens growing per key.
"$BENCH" -S "127.0.0.1:$PORT" -w seed -c 200 -r 10 --hold-ms 1 \
    --no-progress --json >"$TMP/seed.json" 2>"$TMP/bench.err" ||
    fail "keylock-bench -w seed exited with status $?"
for m in operations:200 overlaps:0 token_errors:0; do
	v=$(json_get seed "${m%%:*}" <"$TMP/seed.json") ||
	    fail "the seed output has no seed.${m%%:*}"
	[ "$v" = "${m#*:}" ] || fail "seed.${m%%:*} is '$v', not ${m#*:}"
done
# The seed on channels: 200 clients as channels of 3 connections, each
# hold's end (a timer per client) queued on its connection and sent with
# the others of its turn: all done, no overlap, tokens growing.
"$BENCH" -S "127.0.0.1:$PORT" -w seed -c 200 -r 10 --hold-ms 1 --channels 3 \
    --no-progress --json >"$TMP/seed.json" 2>"$TMP/bench.err" ||
    fail "keylock-bench -w seed --channels 3 exited with status $?"
for m in operations:200 overlaps:0 token_errors:0; do
	v=$(json_get seed "${m%%:*}" <"$TMP/seed.json") ||
	    fail "--channels: the seed output has no seed.${m%%:*}"
	[ "$v" = "${m#*:}" ] ||
	    fail "--channels: seed.${m%%:*} is '$v', not ${m#*:}"
done
pass "$cycles lock-unlock cycles in about a second ($scycles with" \
    "sessions; with channels $ccycles); $rcycles REFRESHes of ttl=300" \
    "locks in a second, all OK;" \
    "$per table bytes per held key; the seed's 200 holds without overlap" \
    "on connections and on channels"
