#!/bin/bash
# bench/seed.sh [BUILDDIR] [--write]: the seed headline, alone and often.
#
# `keylock-bench -w seed` (1,000 connections, each LOCK seed:<i mod 50>,
# hold 1 ms, UNLOCK; and the same 1,000 clients as channels of one
# connection) RUNS times (11) against one keylockd and against the
# echo floor (bench/echo_server, which grants every LOCK at once), in turns,
# servers on CPU SERVER_CPU (0) and the client on CLIENT_CPU (1) as in
# compare.sh. A figure is the median of the runs (min-max). With BEFORE
# naming another keylock-bench (an older build, BEFORE_REV saying of what
# source), each turn also runs that one, against the same servers, so that
# before and after share the machine's moment. RT=1 runs servers and clients under SCHED_FIFO
# (chrt -f 5): a machine shared with other work then disturbs the runs
# less. --write replaces the section between this script's markers in
# RESULTS (bench/RESULTS.md beside this script); compare.sh keeps it.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
write=0
build=.
for a in "$@"; do
	case $a in
	--write) write=1 ;;
	*) build=$a ;;
	esac
done
build=$(cd "$build" && pwd)
KEYLOCKD=${KEYLOCKD:-$build/src/keylockd}
KEYLOCK_BENCH=${KEYLOCK_BENCH:-$build/tools/keylock-bench}
ECHO_SERVER=${ECHO_SERVER:-$build/bench/echo_server}
BEFORE=${BEFORE:-}
RUNS=${RUNS:-11}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
RESULTS=${RESULTS:-$here/RESULTS.md}
RT=${RT:-0}
BEFORE_REV=${BEFORE_REV:-an earlier source}	# what BEFORE was built from
TARGET_S=0.025			# issue 22

for p in "$KEYLOCKD" "$KEYLOCK_BENCH" "$ECHO_SERVER" ${BEFORE:+"$BEFORE"}; do
	[ -x "$p" ] || { echo "seed.sh: $p: not found (run make, or set" \
	    "KEYLOCKD, KEYLOCK_BENCH, ECHO_SERVER, BEFORE)" >&2; exit 1; }
done
perl -MJSON::PP -e 1 2>/dev/null ||
    { echo "seed.sh: needs perl's JSON::PP" >&2; exit 1; }

TMP=$(mktemp -d "${TMPDIR:-/tmp}/keylock-seed.XXXXXX")
PIDS=
cleanup() {
	status=$?
	trap - EXIT INT TERM HUP
	for p in $PIDS; do
		kill -TERM "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	rm -rf "$TMP"
	exit "$status"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

say() {
	echo "seed.sh: $*" >&2
}

PIN_SERVER= PIN_CLIENT= PINNING="none (taskset missing or one CPU)"
if command -v taskset >/dev/null 2>&1 && [ "$(nproc)" -ge 2 ]; then
	PIN_SERVER="taskset -c $SERVER_CPU"
	PIN_CLIENT="taskset -c $CLIENT_CPU"
	PINNING="servers on CPU $SERVER_CPU, keylock-bench on CPU $CLIENT_CPU"
fi
if [ "$RT" = 1 ]; then
	PIN_SERVER="chrt -f 5 $PIN_SERVER"
	PIN_CLIENT="chrt -f 5 $PIN_CLIENT"
	PINNING="$PINNING, all under SCHED_FIFO (chrt -f 5)"
fi
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

# wait_port FILE PID: the port a server wrote, once it is there.
wait_port() {
	local deadline=$((SECONDS + 20))

	until grep -qx '[0-9][0-9]*' "$1" 2>/dev/null; do
		kill -0 "$2" 2>/dev/null || { say "server $2 died at start"; \
		    return 1; }
		[ "$SECONDS" -le "$deadline" ] ||
		    { say "server $2 not ready in 20 s"; return 1; }
		sleep 0.05
	done
	cat "$1"
}

mkdir -p "$TMP/kd" "$TMP/ec" "$TMP/d"
$PIN_SERVER "$KEYLOCKD" --config /dev/null --bind 127.0.0.1 --port 0 \
    --port-file "$TMP/kd/port" --unix '' --state-dir "$TMP/kd" \
    --max-clients 1000000 --log-level warn >>"$TMP/keylockd.log" 2>&1 &
KD_PID=$!
PIDS="$PIDS $KD_PID"
KD_PORT=$(wait_port "$TMP/kd/port" "$KD_PID")
$PIN_SERVER "$ECHO_SERVER" --port 0 --port-file "$TMP/ec/port" \
    >>"$TMP/echo.log" 2>&1 &
EC_PID=$!
PIDS="$PIDS $EC_PID"
EC_PORT=$(wait_port "$TMP/ec/port" "$EC_PID")

# jget FILE PATH...: members of a JSON document, one line, "-" if absent.
jget() {
	perl -MJSON::PP -e 'local $/; open my $f, "<", shift or die;
	    my $d = decode_json(<$f>); my @o;
	    for my $p (@ARGV) { my $v = $d; for (split m{/}, $p) {
	        $v = ref $v eq "HASH" && exists $v->{$_} ? $v->{$_} : undef }
	        push @o, defined $v ? $v : "-" } print "@o\n"' "$@"
}

# one NAME BENCH PORT [ARG...]: a seed run; its figures appended to
# $TMP/d/NAME.*.
one() {
	local out="$TMP/run.json" name=$1 bench=$2 port=$3

	shift 3
	if ! $PIN_CLIENT "$bench" --no-progress --json -S "127.0.0.1:$port" \
	    -w seed -c 1000 -r 50 --hold-ms 1 "$@" >"$out" 2>"$TMP/run.err"
	then
		say "a $name run failed: $(tail -n 1 "$TMP/run.err")"
		return 0
	fi
	read -r s o t f l h v <<<"$(jget "$out" seed/elapsed_s seed/overlaps \
	    seed/token_errors seed/first_grant_ms seed/locks_written_ms \
	    seed/handoff_ms/p50 seed/hold_overrun_ms/p50)"
	echo "$s" >>"$TMP/d/$name.secs"
	echo "$o" >>"$TMP/d/$name.overlaps"
	echo "$t" >>"$TMP/d/$name.tokens"
	[ "$f" = - ] || echo "$f" >>"$TMP/d/$name.first"
	[ "$l" = - ] || echo "$l" >>"$TMP/d/$name.written"
	[ "$h" = - ] || echo "$h" >>"$TMP/d/$name.handoff"
	[ "$v" = - ] || echo "$v" >>"$TMP/d/$name.overrun"
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
start=$SECONDS
for r in $(seq 1 "$RUNS"); do
	[ -z "$BEFORE" ] || one kb "$BEFORE" "$KD_PORT"
	one k "$KEYLOCK_BENCH" "$KD_PORT"
	one kc "$KEYLOCK_BENCH" "$KD_PORT" --channels 1
	[ -z "$BEFORE" ] || one eb "$BEFORE" "$EC_PORT"
	one e "$KEYLOCK_BENCH" "$EC_PORT"
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

# cell NAME METRIC DIGITS: "median (min–max)" of the runs, or "n/a".
cell() {
	local f="$TMP/d/$1.$2"

	[ -s "$f" ] || { echo "n/a"; return; }
	sort -g "$f" | awk -v d="$3" '{ v[NR] = $1 } END {
	    m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
	    printf "%.*f (%.*f–%.*f)", d, m, d, v[1], d, v[NR] }'
}
med() {
	sort -g "$TMP/d/$1.$2" 2>/dev/null | awk '{ v[NR] = $1 } END {
	    if (NR == 0) { print "-"; exit }
	    print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
sum() {
	awk '{ s += $1 } END { print s + 0 }' "$TMP/d/$1.$2" 2>/dev/null ||
	    echo n/a
}
runs() {
	wc -l <"$TMP/d/$1.secs" 2>/dev/null | tr -d ' ' || echo 0
}

cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')
rev=${KEYLOCKD_REV:-$(git -C "$here" describe --always --dirty 2>/dev/null ||
    echo unknown)}
k=$(med k secs)
kc=$(med kc secs)
ke=$(awk -v k="$k" -v e="$(med e secs)" 'BEGIN {
    if (k == "-" || e == "-" || e == 0) print "n/a"; else printf "%.2f", k / e }')
rtnote=
[ "$RT" != 1 ] || rtnote=" RT=1"
# verdict NAME: the target met by NAME's median, with no overlap?
verdict() {
	awk -v k="$(med "$1" secs)" -v t="$TARGET_S" -v o="$(sum "$1" overlaps)" \
	    'BEGIN { m = (k != "-" && k <= t && o == 0) ? "met" : "**not met**"
	    printf "%s (%.4f s)", m, k }'
}

table() {
	echo "| | keylockd, 1,000 connections | keylockd, 1,000 channels" \
	    "of one connection | echo floor (no waiting) |"
	echo "|---|---:|---:|---:|"
	echo "| time to finish, s${BEFORE:+, after} ($(runs k) runs) |" \
	    "$(cell k secs 4) | $(cell kc secs 4) | $(cell e secs 4) |"
	if [ -n "$BEFORE" ]; then
		echo "| time to finish, s, before ($(runs kb) runs) |" \
		    "$(cell kb secs 4) | | $(cell eb secs 4) |"
	fi
	echo "| first grant read, ms after the first LOCK |" \
	    "$(cell k first 3) | $(cell kc first 3) | $(cell e first 3) |"
	echo "| last LOCK written, ms after the first |" \
	    "$(cell k written 1) | $(cell kc written 1) |" \
	    "$(cell e written 1) |"
	echo "| hand-off p50, ms (UNLOCK written to the next grant read) |" \
	    "$(cell k handoff 3) | $(cell kc handoff 3) | |"
	echo "| hold past its 1 ms, p50, ms |" \
	    "$(cell k overrun 3) | $(cell kc overrun 3) | $(cell e overrun 3) |"
	echo "| overlaps, token errors (sum of runs) |" \
	    "$(sum k overlaps), $(sum k tokens)" \
	    "${BEFORE:+(before: $(sum kb overlaps), $(sum kb tokens))} |" \
	    "$(sum kc overlaps), $(sum kc tokens) | |"
	echo
	echo "Target (issue 22): at most ${TARGET_S} s, no overlaps: with" \
	    "1,000 connections $(verdict k); with 1,000 channels of one" \
	    "connection $(verdict kc)."
}

table
[ "$write" = 1 ] || exit 0

section=$(cat <<EOF
<!-- bench/seed.sh: begin -->
## The seed headline, understood (issue 22)

Written by \`RUNS=$RUNS${BEFORE:+ BEFORE=<keylock-bench of $BEFORE_REV>}$rtnote bench/seed.sh
BUILDDIR --write\` on $(date -u '+%Y-%m-%d %H:%M') UTC at $rev: $cpu, $(nproc) CPUs
online; $PINNING;
load average $load_before at the start, $load_after at the end, in
$((SECONDS - start)) s (other work on this machine adds noise).
A figure is the median of the runs (min–max); keylockd and the echo floor
(and the earlier client) take turns.

$(table)

**Where the time went.** Each key's chain is 20 holds of 1 ms, so about
20 ms is the floor. Before, the client lost about 9 ms before the first
hold began: its LOCKs were to go out 50 per turn of the loop, the next
batch being an \`event_base_once\` with a zero timeout, but libevent makes
such an event active at once and runs it in the same pass over its active
queue, before it polls again, so all 1,000 LOCKs were written before the
first grant was read (\`strace -tt -e trace=sendto,recvfrom\` of
\`keylock-bench -w seed\`: 1,000 \`sendto\` of a LOCK, then the first
\`recvfrom\`; after the change, 10). Now the next batch (10 LOCKs) is a
timer due at once, on the lowest of three event priorities, so it runs
only in a turn with no grant, reply or hold's end to handle, and each
key's next LOCK is written before the UNLOCK that hands the key over, so
the lock still passes through the server's queue. The workload is the
same: 1,000 connections, one LOCK, 1 ms hold and UNLOCK each, 20 in a row
per key.

**What is left is the client's and the kernel's.** keylockd now takes
${ke}× the echo floor's time, where nothing waits: the time is the
client's own work. Not delayed ACKs or Nagle: both ends set
\`TCP_NODELAY\` (keylockd at accept, keylock-bench and libkeylock at
connect) and \`nstat\` counts no delayed ACK over a run; not the hold's
timer: keylock-bench asks libevent for \`timerfd\`
(\`EVENT_BASE_FLAG_PRECISE_TIMER\`) and a hold ends a fraction of a
millisecond late (the row above). Every operation costs each side four
socket calls (\`sendto\` of the LOCK or the grant, \`recvfrom\`, \`sendto\`
of the UNLOCK or its OK, \`recvfrom\`) besides its share of the loop's
\`epoll_wait\` and \`timerfd_settime\`; on this virtual machine a system
call that does nothing (\`getppid\` in a loop) costs about 1.25 µs and a
loopback \`sendto\` 5 to 8 µs inside the kernel (\`perf record -e
raw_syscalls:sys_enter -e raw_syscalls:sys_exit -e sched:sched_switch\`
of either process over a run): some 20 ms or more of CPU per side for
the 1,000 operations, most of the run. The client never leaves the CPU
during the run (no \`sched_switch\` away from it), so its LOCKs go
out mostly just before the UNLOCKs that need them (the "last LOCK
written" row), and a hand-off waits behind the other work of the
server's turn and the client's, not in the server's work (the echo
floor's column: a server that grants at once takes nearly as long).

**Fewer system calls: channels.** The middle column runs the same 1,000
owners as channels @1 to @1000 of one connection (\`--channels 1\`), the
way keylock.aio runs a program's tasks (keylockd-protocol(7),
CHANNELS): the 1,000 LOCKs leave in 1.5 ms instead of 24 (the "last LOCK
written" row), a turn's replies go out in one \`sendto\`. The time to
finish hardly moves (2026-12-05, load 1 to 2: 0.0264 s against 0.0267 s,
the echo floor 0.0252 s): each key's chain is 20 hand-offs in a row, and
each costs 1 ms of hold, the hold timer's lateness (0.07 to 0.1 ms) and a
wake-up on each side (the hand-off row, about 0.15 ms on this virtual
machine), about 1.25 ms, whatever carries the bytes. The echo floor, which
grants at once, sits at the target itself: what is left is the wake-ups
of a chain of 20, which no server can shorten, and keylockd is within 5%
of a server that does no work.
<!-- bench/seed.sh: end -->
EOF
)
if [ -f "$RESULTS" ] && grep -q '<!-- bench/seed.sh: begin -->' "$RESULTS"
then
	awk -v s="$section" '
	    /<!-- bench\/seed.sh: begin -->/ { print s; skip = 1; next }
	    /<!-- bench\/seed.sh: end -->/ { skip = 0; next }
	    !skip { print }' "$RESULTS" >"$TMP/results"
else
	{ [ -f "$RESULTS" ] && cat "$RESULTS"; echo; echo "$section"; } \
	    >"$TMP/results"
fi
cat "$TMP/results" >"$RESULTS"
say "wrote its section of $RESULTS"
