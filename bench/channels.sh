#!/bin/bash
# bench/channels.sh [--write] [BUILDDIR]: 1,000 lock owners as 1,000
# connections against the same owners as channels of one connection and of
# a few (issue 25, Performance), and the "Channels" section of
# bench/RESULTS.md with --write.
#
# One keylockd (--max-clients OWNERS + 100) serves every run. keylock-bench
# runs OWNERS (1000) clients, P=1, DURATION (4) s, in each of the modes:
# a connection each (-c 1000), and channels of N connections
# (-c 1000 --channels N) for each N of CHANNEL_CONNS ("1 4"); on two
# workloads: lock-unlock on random keys of 1,000,000 (uncontended) and
# contended (one key handed from owner to owner). Each of ROUNDS (5) rounds
# runs every workload in every mode, the order of the modes rotating from
# round to round; a figure is the median of the rounds (min-max).
#
# cycles/s is keylock-bench's, over its measured run. System calls of
# the server are counted by perf stat on the tracepoints
# raw_syscalls:sys_enter (every system call), syscalls:sys_enter_recvfrom,
# sys_enter_sendto and sys_enter_epoll_wait of the keylockd process over
# keylock-bench's whole life (perf runs it), and divided by the requests
# keylockd served meanwhile (its STATS "requests" before and after), less
# the requests and the system calls of the setup and the end (with 1,000
# connections about 7 system calls each: accept4, epoll_ctl, the PING's
# recv and send, the end's recv and close), counted the same way once per
# workload and mode in a run of one request (-n 1). Server CPU is keylockd's user and
# system time over the same span (/proc/PID/stat), in per cent of one CPU.
# /proc/PID/io's syscr and syscw do not count recv(2) and send(2) on
# sockets, which is all keylockd's I/O, so they are not used. SYSCALLS=0
# skips the counting (no perf here, or no permission:
# perf_event_paranoid).
#
# It builds nothing: run `make` first (an -O2 build, configure's default).
# Programs come from BUILDDIR (or the current directory) unless KEYLOCKD,
# KEYLOCK_BENCH or KEYLOCK name them. keylockd runs on CPU SERVER_CPU (0),
# keylock-bench on CLIENT_CPU (1), with taskset. The descriptor limit is
# raised to its hard limit, which must allow OWNERS + 64. RT=1 runs
# keylockd and keylock-bench under SCHED_FIFO (chrt -f 5), so that other
# work on a shared machine delays their wake-ups less: a contended
# hand-off is a round trip, and its rate is the wake-up latency of both
# sides more than any work done; perf then runs under chrt -f 6.
# --write replaces
# the section between this script's markers in RESULTS
# (bench/RESULTS.md beside this script), or appends it.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
WRITE=0
if [ "${1:-}" = --write ]; then
	WRITE=1
	shift
fi
build=$(cd "${1:-.}" && pwd)
KEYLOCKD=${KEYLOCKD:-$build/src/keylockd}
KEYLOCK_BENCH=${KEYLOCK_BENCH:-$build/tools/keylock-bench}
KEYLOCK=${KEYLOCK:-$build/tools/keylock}
ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-4}
OWNERS=${OWNERS:-1000}
CHANNEL_CONNS=${CHANNEL_CONNS:-1 4}
SYSCALLS=${SYSCALLS:-1}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
RESULTS=${RESULTS:-$here/RESULTS.md}
READY_S=20
RT=${RT:-0}

for p in "$KEYLOCKD" "$KEYLOCK_BENCH" "$KEYLOCK"; do
	[ -x "$p" ] || { echo "channels.sh: $p: not found (run make, or set" \
	    "KEYLOCKD, KEYLOCK_BENCH, KEYLOCK)" >&2; exit 1; }
done
perl -MJSON::PP -e 1 2>/dev/null ||
    { echo "channels.sh: needs perl's JSON::PP" >&2; exit 1; }
if [ "$SYSCALLS" = 1 ] && ! command -v perf >/dev/null 2>&1; then
	echo "channels.sh: needs perf to count system calls (or SYSCALLS=0)" >&2
	exit 1
fi
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
if [ "$(ulimit -n)" != unlimited ] &&
    [ "$(ulimit -n)" -lt $((OWNERS + 64)) ]; then
	echo "channels.sh: ulimit -n is $(ulimit -n): OWNERS $OWNERS needs" \
	    "$((OWNERS + 64))" >&2
	exit 1
fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/keylock-channels.XXXXXX")
KD_PID=
BENCH_PID=

cleanup() {
	status=$?
	trap - EXIT INT TERM HUP
	[ -z "$BENCH_PID" ] || kill -TERM "$BENCH_PID" 2>/dev/null || true
	if [ -n "$KD_PID" ]; then
		kill -TERM "$KD_PID" 2>/dev/null || true
		wait "$KD_PID" 2>/dev/null || true
	fi
	rm -rf "$TMP"
	exit "$status"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

say() {
	echo "channels.sh: $*" >&2
}

if command -v taskset >/dev/null 2>&1 && [ "$(nproc)" -ge 2 ]; then
	PIN_SERVER="taskset -c $SERVER_CPU"
	PIN_CLIENT="taskset -c $CLIENT_CPU"
	PINNING="keylockd on CPU $SERVER_CPU, keylock-bench on CPU $CLIENT_CPU"
else
	PIN_SERVER=
	PIN_CLIENT=
	PINNING="none (taskset missing or one CPU)"
fi
RT_PREFIX=
PERF_PREFIX=
if [ "$RT" = 1 ]; then
	RT_PREFIX="chrt -f 5"
	# perf above them, so that it starts and stops counting on time
	PERF_PREFIX="chrt -f 6"
	PINNING="$PINNING; both under SCHED_FIFO (chrt -f 5), perf above"
	PINNING="$PINNING them (chrt -f 6)"
fi

# jget FILE KEY...: a value of a JSON file, by its path of keys.
jget() {
	perl -MJSON::PP -e 'local $/; open my $f, "<", shift or die;
	    my $v = decode_json(<$f>); for my $k (@ARGV) {
	    $v = ref $v eq "ARRAY" ? $v->[$k] : $v->{$k} }
	    print defined $v ? $v : "", "\n"' "$@"
}

# stat FILE: "median min max" of the numbers in FILE, one a line.
stat() {
	sort -g "$1" | awk '{ v[NR] = $1 } END {
	    m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
	    printf "%s %s %s\n", m, v[1], v[NR] }'
}

cell() {	# FILE DIGITS: "median (min–max)"
	# shellcheck disable=SC2046 # three numbers
	set -- $(stat "$1") "$2"
	awk -v m="$1" -v lo="$2" -v hi="$3" -v d="$4" 'BEGIN {
	    printf "%." d "f (%." d "f–%." d "f)", m, lo, hi }'
}

med() {		# FILE: the median alone
	stat "$1" | cut -d' ' -f1
}

# --- the server -----------------------------------------------------------
dir="$TMP/kd"
mkdir -p "$dir"
# shellcheck disable=SC2086 # a command or nothing
$RT_PREFIX $PIN_SERVER "$KEYLOCKD" --config /dev/null --bind 127.0.0.1 --port 0 \
    --port-file "$dir/port" --unix '' --state-dir "$dir" \
    --max-clients $((OWNERS + 100)) --log-level warn \
    >>"$TMP/keylockd.log" 2>&1 &
KD_PID=$!
deadline=$((SECONDS + READY_S))
until grep -qx '[0-9][0-9]*' "$dir/port" 2>/dev/null; do
	kill -0 "$KD_PID" 2>/dev/null || { say "keylockd died at start"; exit 1; }
	[ "$SECONDS" -le "$deadline" ] ||
	    { say "keylockd not ready in $READY_S s"; exit 1; }
	sleep 0.05
done
KD_PORT=$(cat "$dir/port")

server_requests() {
	"$KEYLOCK" -S "127.0.0.1:$KD_PORT" stats --json >"$TMP/stats.json" &&
	    jget "$TMP/stats.json" requests
}

# The modes: "conns" (a connection each) and "chN" (channels of N).
MODES=conns
for n in $CHANNEL_CONNS; do
	MODES="$MODES ch$n"
done
WORKS="lock-unlock contended"
PERF_STAT=
[ "$SYSCALLS" != 1 ] || PERF_STAT="perf stat -x, -o $TMP/perf.csv -p $KD_PID
    -e raw_syscalls:sys_enter -e syscalls:sys_enter_recvfrom
    -e syscalls:sys_enter_sendto -e syscalls:sys_enter_epoll_wait --"

mode_opts() {	# MODE: keylock-bench's options for it
	case $1 in
	conns) echo "-c $OWNERS" ;;
	ch*) echo "-c $OWNERS --channels ${1#ch}" ;;
	esac
}

mode_name() {
	case $1 in
	conns) echo "$OWNERS connections" ;;
	ch1) echo "channels of 1 connection" ;;
	ch*) echo "channels of ${1#ch} connections" ;;
	esac
}

# fixed WORK MODE: the setup's and the end's requests and system calls
# (perf's CSV) in a run of one request (-n 1: one client's one cycle), in
# $TMP/WORK.MODE.fixed.{reqs,csv}, for run to take off.
fixed() {
	local base="$TMP/$1.$2" before after

	before=$(server_requests)
	# shellcheck disable=SC2046,SC2086 # options; commands or nothing
	$PERF_PREFIX $PERF_STAT $RT_PREFIX $PIN_CLIENT "$KEYLOCK_BENCH" \
	    -S "127.0.0.1:$KD_PORT" -w "$1" $(mode_opts "$2") -n 1 \
	    --no-progress --json >"$TMP/fixed.json" 2>"$TMP/bench.err" ||
	    { say "$1 $2 -n 1: keylock-bench failed:" \
	    "$(tail -n 1 "$TMP/bench.err")"; exit 1; }
	after=$(server_requests)
	echo $((after - before - 1)) >"$base.fixed.reqs"
	grep -v '^#' "$TMP/perf.csv" | grep , >"$base.fixed.csv"
	say "$1, $(mode_name "$2"): setup and end $(cat "$base.fixed.reqs")" \
	    "requests, $(awk -F, '$3 == "raw_syscalls:sys_enter" { print $1 }' \
	    "$base.fixed.csv") system calls"
}

# run WORK MODE ROUND: one run; its cycles/s, system calls per request and
# the server's CPU appended to $TMP/WORK.MODE.{cps,sys,recv,send,epoll,cpu}.
run() {
	local w=$1 m=$2 r=$3 json="$TMP/run.$1.$2.$3.json" base="$TMP/$1.$2"
	local before after reqs t0 t1

	before=$(server_requests)
	cat "/proc/$KD_PID/stat" >"$TMP/stat.a"
	t0=$(date +%s.%N)
	# shellcheck disable=SC2046,SC2086 # options; commands or nothing
	$PERF_PREFIX $PERF_STAT $RT_PREFIX $PIN_CLIENT "$KEYLOCK_BENCH" \
	    -S "127.0.0.1:$KD_PORT" -w "$w" $(mode_opts "$m") -t "$DURATION" \
	    --no-progress --json >"$json" 2>"$TMP/bench.err" ||
	    { say "$w $m round $r: keylock-bench failed:" \
	    "$(tail -n 1 "$TMP/bench.err")"; exit 1; }
	t1=$(date +%s.%N)
	cat "/proc/$KD_PID/stat" >"$TMP/stat.b"
	after=$(server_requests)
	[ "$(jget "$json" errors)" = 0 ] ||
	    { say "$w $m round $r: error replies:" \
	    "$(jget "$json" first_error)"; exit 1; }
	jget "$json" cycles_per_s >>"$base.cps"
	# the server's CPU time (utime + stime, fields 14 and 15 after the
	# command's parentheses) over the run, in per cent of its time
	awk -v hz="$(getconf CLK_TCK)" -v wall="$t1 - $t0" '
	    BEGIN { split(wall, x, " - "); wall = x[1] - x[2] }
	    { sub(/^.*\) /, ""); t[NR] = $12 + $13 }
	    END { printf "%.0f\n", (t[2] - t[1]) / hz / wall * 100 }' \
	    "$TMP/stat.a" "$TMP/stat.b" >>"$base.cpu"
	[ "$SYSCALLS" = 1 ] || return 0
	# the run's requests: STATS's count moved by them and by the
	# second STATS itself; less the setup's and the end's, and their
	# system calls, from the same mode's run of one request
	reqs=$((after - before - 1 - $(cat "$base.fixed.reqs")))
	[ "$reqs" -gt 0 ] || { say "$w $m round $r: no requests"; exit 1; }
	awk -F, -v n="$reqs" -v base="$base" '
	    FNR == NR { fixed[$3] = $1; next }
	    $3 == "raw_syscalls:sys_enter" { f = base ".sys" }
	    $3 == "syscalls:sys_enter_recvfrom" { f = base ".recv" }
	    $3 == "syscalls:sys_enter_sendto" { f = base ".send" }
	    $3 == "syscalls:sys_enter_epoll_wait" { f = base ".epoll" }
	    f != "" { printf "%.4f\n", ($1 - fixed[$3]) / n >> f; f = "" }' \
	    "$base.fixed.csv" "$TMP/perf.csv"
	say "$w, $(mode_name "$m"), round $r: $(jget "$json" cycles_per_s)" \
	    "cycles/s, $(tail -n 1 "$base.sys") system calls per request," \
	    "server CPU $(tail -n 1 "$base.cpu")%"
}

T0=$SECONDS
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
STARTED=$(date -u '+%Y-%m-%d %H:%M UTC')
CPU=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')
REV=${KEYLOCKD_REV:-$(git -C "$here" describe --always --dirty 2>/dev/null ||
    echo unknown)}

say "$OWNERS owners, modes: $MODES; $ROUNDS rounds of $DURATION s runs"
if [ "$SYSCALLS" = 1 ]; then
	for w in $WORKS; do
		for m in $MODES; do
			fixed "$w" "$m"
		done
	done
fi
# shellcheck disable=SC2086 # the words of MODES
set -- $MODES
nmodes=$#
for r in $(seq 1 "$ROUNDS"); do
	for w in $WORKS; do
		# the modes in turn, starting one further each round
		# shellcheck disable=SC2086 # the words of MODES
		set -- $MODES
		i=0
		while [ "$i" -lt "$nmodes" ]; do
			k=$(( (i + r - 1) % nmodes + 1 ))
			eval "m=\${$k}"
			run "$w" "$m" "$r"
			i=$((i + 1))
		done
	done
done
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
ELAPSED=$((SECONDS - T0))

verdict() {	# CONDITION-AS-AWK
	awk "BEGIN { exit !($1) }" && echo met || echo "**not met**"
}

NOTE=
[ "$ROUNDS" = 5 ] || NOTE="${NOTE}ROUNDS=$ROUNDS "
[ "$DURATION" = 4 ] || NOTE="${NOTE}DURATION=$DURATION "
[ "$OWNERS" = 1000 ] || NOTE="${NOTE}OWNERS=$OWNERS "
[ "$CHANNEL_CONNS" = "1 4" ] || NOTE="${NOTE}CHANNEL_CONNS=\"$CHANNEL_CONNS\" "
[ "$RT" != 1 ] || NOTE="${NOTE}RT=1 "

table() {	# WORK: the table of one workload
	local w=$1 m

	if [ "$SYSCALLS" = 1 ]; then
		echo "| $w, $OWNERS owners as | cycles/s | server system calls per request | recv | send | epoll_wait | server CPU |"
		echo "|---|---:|---:|---:|---:|---:|---:|"
	else
		echo "| $w, $OWNERS owners as | cycles/s |"
		echo "|---|---:|"
	fi
	for m in $MODES; do
		if [ "$SYSCALLS" = 1 ]; then
			echo "| $(mode_name "$m") | $(cell "$TMP/$w.$m.cps" 0) |" \
			    "$(cell "$TMP/$w.$m.sys" 3) |" \
			    "$(med "$TMP/$w.$m.recv") |" \
			    "$(med "$TMP/$w.$m.send") |" \
			    "$(med "$TMP/$w.$m.epoll") |" \
			    "$(med "$TMP/$w.$m.cpu")% |"
		else
			echo "| $(mode_name "$m") | $(cell "$TMP/$w.$m.cps" 0) |"
		fi
	done
}

targets() {	# the issue's targets, for each workload and channel mode
	local w m c0 c1 s0 s1

	for w in $WORKS; do
		c0=$(med "$TMP/$w.conns.cps")
		for m in $MODES; do
			[ "$m" != conns ] || continue
			c1=$(med "$TMP/$w.$m.cps")
			printf -- '- %s, %s: cycles/s at least equal to %s connections: %s (%sx)' \
			    "$w" "$(mode_name "$m")" "$OWNERS" \
			    "$(verdict "$c1 >= $c0")" \
			    "$(awk -v a="$c1" -v b="$c0" 'BEGIN { printf "%.2f", a / b }')"
			if [ "$SYSCALLS" = 1 ]; then
				s0=$(med "$TMP/$w.conns.sys")
				s1=$(med "$TMP/$w.$m.sys")
				printf '; system calls per request lower: %s (%s against %s)' \
				    "$(verdict "$s1 < $s0")" "$s1" "$s0"
			fi
			echo
		done
	done
}

section() {
	cat <<EOF
<!-- bench/channels.sh: begin -->
## Channels: 1,000 owners as connections or as channels (issue 25)

Written by \`${NOTE}bench/channels.sh --write BUILDDIR\` (-O2 build) on
$STARTED at $REV: $CPU, $(nproc) CPUs online; $PINNING; load average
$LOAD_START at the start, $LOAD_END at the end, in $ELAPSED s (other work on
this machine adds noise to the rates, little to the system calls).

One keylockd serves every run. keylock-bench runs $OWNERS clients, each its
own lock owner, P=1, $DURATION s a run: as $OWNERS connections
(\`-c $OWNERS\`), and as channels of one connection and of a few
(\`-c $OWNERS --channels N\`, the clients taking turns over the N
connections); every mode in each of $ROUNDS rounds, the order rotating;
median (min–max) of the rounds. lock-unlock takes random keys of
1,000,000; contended hands one key from owner to owner.
EOF
	[ "$SYSCALLS" = 1 ] && cat <<EOF
The server's system calls are counted by \`perf stat\` on the tracepoints
\`raw_syscalls:sys_enter\` (all of them), \`syscalls:sys_enter_recvfrom\`,
\`sys_enter_sendto\` and \`sys_enter_epoll_wait\` of the keylockd process
over each keylock-bench run, divided by the requests keylockd's STATS
counted meanwhile, both less those of the setup and the end (the 1,000
connections' accepts, PINGs and closes), counted once per workload and
mode in a run of one request (\`-n 1\`) (/proc/PID/io's
syscr and syscw do not count recv and send on sockets); recv, send and
epoll_wait are medians. Server CPU is keylockd's user and system time
over the same span (/proc/PID/stat), in per cent of one CPU, median: near
100% the server is the bottleneck.
EOF
	echo
	for w in $WORKS; do
		table "$w"
		echo
	done
	echo "Targets (issue 25, medians):"
	echo
	targets
	echo "<!-- bench/channels.sh: end -->"
}

section >"$TMP/section.md"
cat "$TMP/section.md"
if [ "$WRITE" = 1 ]; then
	if grep -q '^<!-- bench/channels.sh: begin -->$' "$RESULTS"; then
		awk -v f="$TMP/section.md" '
		    /^<!-- bench\/channels.sh: begin -->$/ {
			while ((getline l < f) > 0) print l; skip = 1; next }
		    /^<!-- bench\/channels.sh: end -->$/ { skip = 0; next }
		    !skip' "$RESULTS" >"$TMP/results.md"
		cat "$TMP/results.md" >"$RESULTS"
	else
		{ echo; cat "$TMP/section.md"; } >>"$RESULTS"
	fi
	say "section written to $RESULTS"
fi
