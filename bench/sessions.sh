#!/bin/bash
# bench/sessions.sh [BUILDDIR]: what sessions cost (issue 20, Performance),
# and the "Sessions" section of bench/RESULTS.md with --write.
#
# 1. Throughput: keylock-bench lock-unlock on random keys of 1,000,000,
#    c=50 P=16, DURATION (3) s, with plain connections and with
#    --session (SESSION on every connection before the workload), against
#    the same fresh keylockd in each of ROUNDS (5) rounds, the order
#    alternating; a figure is the median of the rounds (min-max), and the
#    ratio session/plain is given of the medians and as the median of the
#    same-round ratios. Target: within 5%.
# 2. Instructions (unless INSTRUCTIONS=0): bench/instructions.sh with
#    plain connections and with SESSION=1; with BASE_KEYLOCKD (a keylockd
#    built from an earlier commit, -O2) also that daemon's plain figure.
#    BASE_REV names its commit, for the text. Target: plain within 2% of
#    before, and the session path the same.
# 3. Mass reconnect: bench/session_storm against a fresh keylockd with
#    --max-clients 30000, --session-grace-max 600000 and --auth-timeout 0
#    (idle connections are silent on purpose): two waves of
#    STORM_N (10000) sessions, grace 600000 ms, each holding one lock,
#    dropped at once and resumed (time from the first RESUME sent to the
#    last answered, every lock back), and the daemon's memory per
#    detached session; then STORM_N idle plain connections on another fresh
#    keylockd, for comparison. Target: a detached session costs no more
#    than an idle connection plus its lock.
#
# It builds nothing: run `make` first (an -O2 build, configure's default).
# Programs come from BUILDDIR (or the current directory) unless KEYLOCKD,
# KEYLOCK_BENCH or SESSION_STORM name them. Servers run on CPU SERVER_CPU
# (0) and clients on CLIENT_CPU (1), with taskset. The descriptor limit is
# raised to its hard limit, which must allow STORM_N + 64. RT=1 runs the
# throughput rounds, the mass reconnect and the idle connections (keylockd
# and the client)
# under SCHED_FIFO (chrt -f 5), so that other work on a shared machine
# disturbs them less. --write
# replaces the section between this script's markers in RESULTS
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
SESSION_STORM=${SESSION_STORM:-$build/bench/session_storm}
ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-3}
STORM_N=${STORM_N:-10000}
STORM_GRACE=600000		# ms: the two waves take a minute on a busy machine
INSTRUCTIONS=${INSTRUCTIONS:-1}
BASE_KEYLOCKD=${BASE_KEYLOCKD:-}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
RESULTS=${RESULTS:-$here/RESULTS.md}
READY_S=20
RT=${RT:-0}

for p in "$KEYLOCKD" "$KEYLOCK_BENCH" "$SESSION_STORM"; do
	[ -x "$p" ] || { echo "sessions.sh: $p: not found (run make, or set" \
	    "KEYLOCKD, KEYLOCK_BENCH, SESSION_STORM)" >&2; exit 1; }
done
perl -MJSON::PP -e 1 2>/dev/null ||
    { echo "sessions.sh: needs perl's JSON::PP" >&2; exit 1; }

TMP=$(mktemp -d "${TMPDIR:-/tmp}/keylock-sessions.XXXXXX")
KD_PID=

cleanup() {
	status=$?
	trap - EXIT INT TERM HUP
	stop_keylockd
	rm -rf "$TMP"
	exit "$status"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

say() {
	echo "sessions.sh: $*" >&2
}

if command -v taskset >/dev/null 2>&1 && [ "$(nproc)" -ge 2 ]; then
	PIN_SERVER="taskset -c $SERVER_CPU"
	PIN_CLIENT="taskset -c $CLIENT_CPU"
	PINNING="keylockd on CPU $SERVER_CPU, clients on CPU $CLIENT_CPU"
else
	PIN_SERVER=
	PIN_CLIENT=
	PINNING="none (taskset missing or one CPU)"
fi
RT_PREFIX=
if [ "$RT" = 1 ]; then
	RT_PREFIX="chrt -f 5"
	PINNING="$PINNING; the throughput rounds, the mass reconnect and the"
	PINNING="$PINNING idle connections"
	PINNING="$PINNING under SCHED_FIFO (chrt -f 5)"
fi
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
if [ "$(ulimit -n)" != unlimited ] &&
    [ "$(ulimit -n)" -lt $((STORM_N + 64)) ]; then
	say "ulimit -n is $(ulimit -n): STORM_N $STORM_N needs $((STORM_N + 64))"
	exit 1
fi

# start_keylockd [MAX_CLIENTS [PREFIX]]: a fresh keylockd; sets KD_PID,
# KD_PORT.
start_keylockd() {
	local dir="$TMP/kd.$RANDOM" deadline=$((SECONDS + READY_S))

	mkdir -p "$dir"
	# shellcheck disable=SC2086 # a command or nothing
	${2:-} $PIN_SERVER "$KEYLOCKD" --config /dev/null --bind 127.0.0.1 --port 0 \
	    --port-file "$dir/port" --unix '' --state-dir "$dir" \
	    --max-clients "${1:-1000}" --session-grace-max 600000 --auth-timeout 0 \
	    --log-level warn >>"$TMP/keylockd.log" 2>&1 &
	KD_PID=$!
	until grep -qx '[0-9][0-9]*' "$dir/port" 2>/dev/null; do
		kill -0 "$KD_PID" 2>/dev/null ||
		    { say "keylockd died at start"; return 1; }
		[ "$SECONDS" -le "$deadline" ] ||
		    { say "keylockd not ready in $READY_S s"; return 1; }
		sleep 0.05
	done
	KD_PORT=$(cat "$dir/port")
}

stop_keylockd() {
	if [ -n "$KD_PID" ]; then
		kill -TERM "$KD_PID" 2>/dev/null || true
		wait "$KD_PID" 2>/dev/null || true
		KD_PID=
	fi
}

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

fmt_cell() {	# median min max, digits
	awk -v m="$1" -v lo="$2" -v hi="$3" -v d="$4" 'BEGIN {
	    printf "%." d "f (%." d "f–%." d "f)", m, lo, hi }'
}

bench_run() {	# NAME ROUND [OPTION]: one timed run, its cycles/s kept
	local json="$TMP/tp.$1.$2.json"

	# shellcheck disable=SC2086 # a command or nothing
	$RT_PREFIX $PIN_CLIENT "$KEYLOCK_BENCH" -S "127.0.0.1:$KD_PORT" \
	    -c 50 -P 16 \
	    -t "$DURATION" --no-progress --json ${3:-} >"$json" \
	    2>"$TMP/bench.err" ||
	    { say "keylock-bench failed: $(tail -n 1 "$TMP/bench.err")";
	    return 1; }
	[ "$(jget "$json" errors)" = 0 ] ||
	    { say "$1 run $2: error replies"; return 1; }
	jget "$json" cycles_per_s >>"$TMP/tp.$1"
	jget "$json" cycles_per_s >"$TMP/tp.$1.$2"
}

T0=$SECONDS
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
STARTED=$(date -u '+%Y-%m-%d %H:%M UTC')
CPU=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')
REV=${KEYLOCKD_REV:-$(git -C "$here" describe --always --dirty 2>/dev/null ||
    echo unknown)}

# --- 1. throughput --------------------------------------------------------
say "c=50 P=16 lock-unlock, plain and --session, $ROUNDS rounds of" \
    "$DURATION s each"
: >"$TMP/tp.plain"
: >"$TMP/tp.session"
: >"$TMP/tp.ratio"
for r in $(seq 1 "$ROUNDS"); do
	start_keylockd 1000 "$RT_PREFIX"
	if [ $((r % 2)) = 1 ]; then
		bench_run plain "$r"
		bench_run session "$r" --session
	else
		bench_run session "$r" --session
		bench_run plain "$r"
	fi
	stop_keylockd
	awk -v s="$(cat "$TMP/tp.session.$r")" -v p="$(cat "$TMP/tp.plain.$r")" \
	    'BEGIN { printf "%.4f\n", s / p }' >>"$TMP/tp.ratio"
	say "round $r: plain $(cat "$TMP/tp.plain.$r"), session" \
	    "$(cat "$TMP/tp.session.$r") cycles/s"
done
read -r P_MED P_MIN P_MAX <<<"$(stat "$TMP/tp.plain")"
read -r S_MED S_MIN S_MAX <<<"$(stat "$TMP/tp.session")"
read -r R_MED R_MIN R_MAX <<<"$(stat "$TMP/tp.ratio")"
RATIO=$(awk -v s="$S_MED" -v p="$P_MED" 'BEGIN { printf "%.3f", s / p }')
say "cycles/s plain $P_MED, session $S_MED: session/plain $RATIO" \
    "(median of the rounds' ratios $R_MED)"

# --- 2b. instructions per RESUME (called from 2) ------------------------
# session_storm -n IR_N against keylockd under callgrind: 2 IR_N SESSIONs
# and RESUMEs; the inclusive instructions of their commands, per command.
IR_N=${IR_N:-2000}
IR_RESUME='' IR_RESUME_JSON='' IR_SESSION_CMD=''
storm_instructions() {
	local dir="$TMP/cg" deadline=$((SECONDS + 60)) pid

	mkdir -p "$dir"
	# shellcheck disable=SC2086 # PIN_SERVER is a command or nothing
	$PIN_SERVER valgrind --tool=callgrind --vgdb=no \
	    --callgrind-out-file="$dir/out" "$KEYLOCKD" --config /dev/null \
	    --bind 127.0.0.1 --port 0 --port-file "$dir/port" --unix '' \
	    --state-dir "$dir" --max-clients 30000 \
	    --session-grace-max 600000 --auth-timeout 0 --log-level warn 2>"$dir/log" &
	pid=$!
	until grep -qx '[0-9][0-9]*' "$dir/port" 2>/dev/null; do
		if ! kill -0 "$pid" 2>/dev/null ||
		    [ "$SECONDS" -gt "$deadline" ]; then
			say "keylockd under callgrind did not start"
			return 1
		fi
		sleep 0.1
	done
	$PIN_CLIENT "$SESSION_STORM" -S "127.0.0.1:$(cat "$dir/port")" \
	    -n "$IR_N" -g 600000 >"$dir/storm.json"
	kill -TERM "$pid"
	wait "$pid" || true
	IR_RESUME=$(incl "$dir/out" cmd_resume $((2 * IR_N)))
	IR_RESUME_JSON=$(incl "$dir/out" stats_resume_json $((2 * IR_N)))
	IR_SESSION_CMD=$(incl "$dir/out" cmd_session $((2 * IR_N)))
	say "instructions per RESUME $IR_RESUME, of which its reply's JSON" \
	    "$IR_RESUME_JSON; per SESSION $IR_SESSION_CMD"
}

# incl FILE FUNCTION CALLS: the function's inclusive instructions per call.
incl() {
	callgrind_annotate --inclusive=yes --auto=no --threshold=100 "$1" |
	    awk -v f=":$2 " -v n="$3" 'index($0, f) && !done {
	    v = $1; gsub(/,/, "", v); printf "%.0f\n", v / n; done = 1 }'
}

# --- 2. instructions ------------------------------------------------------
IR_PLAIN='' IR_SESSION='' IR_BASE=''
ir_of() {	# SUMMARYFILE NAME: "total net"
	awk -v n="$2" '$1 == n { print $2, $3 }' "$1"
}
if [ "$INSTRUCTIONS" != 0 ]; then
	say "instructions per request under callgrind (a few minutes)"
	KEYLOCKD=$KEYLOCKD KEYLOCK_BENCH=$KEYLOCK_BENCH SUMMARY=$TMP/ir.plain \
	    "$here/instructions.sh" "$build" >"$TMP/ir.plain.out"
	KEYLOCKD=$KEYLOCKD KEYLOCK_BENCH=$KEYLOCK_BENCH SESSION=1 \
	    SUMMARY=$TMP/ir.session "$here/instructions.sh" "$build" \
	    >"$TMP/ir.session.out"
	IR_PLAIN=$(ir_of "$TMP/ir.plain" keylockd)
	IR_SESSION=$(ir_of "$TMP/ir.session" keylockd+session)
	if [ -n "$BASE_KEYLOCKD" ]; then
		KEYLOCKD=$BASE_KEYLOCKD KEYLOCK_BENCH=$KEYLOCK_BENCH \
		    SUMMARY=$TMP/ir.base "$here/instructions.sh" "$build" \
		    >"$TMP/ir.base.out"
		IR_BASE=$(ir_of "$TMP/ir.base" keylockd)
	fi
	say "instructions per request: plain $IR_PLAIN, session $IR_SESSION" \
	    "${IR_BASE:+, before $IR_BASE} (total net)"
	storm_instructions
fi

# --- 3. mass reconnect and memory -----------------------------------------
say "mass reconnect: 2 waves of $STORM_N sessions"
start_keylockd 30000 "$RT_PREFIX"
# shellcheck disable=SC2086 # a command or nothing
$RT_PREFIX $PIN_CLIENT "$SESSION_STORM" -S "127.0.0.1:$KD_PORT" \
    -n "$STORM_N" -p "$KD_PID" -g "$STORM_GRACE" >"$TMP/storm.json"
stop_keylockd
say "$STORM_N idle plain connections"
start_keylockd 30000 "$RT_PREFIX"
# shellcheck disable=SC2086 # a command or nothing
$RT_PREFIX $PIN_CLIENT "$SESSION_STORM" -S "127.0.0.1:$KD_PORT" \
    -n "$STORM_N" -p "$KD_PID" --idle >"$TMP/idle.json"
stop_keylockd
# and the bytes of one held key, as keylock-bench -w hold measures them
start_keylockd 30000
$PIN_CLIENT "$KEYLOCK_BENCH" -S "127.0.0.1:$KD_PORT" -w hold -n 100000 \
    -c 10 -P 64 --server-pid "$KD_PID" --no-progress --json \
    >"$TMP/hold.json"
stop_keylockd
KEY_BYTES=$(jget "$TMP/hold.json" hold rss_per_key)
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
ELAPSED=$((SECONDS - T0))

sj() { jget "$TMP/storm.json" "$@"; }
IDLE_BYTES=$(jget "$TMP/idle.json" bytes_per_idle_connection)
DET2=$(sj bytes_per_detached_session_second)
DET1=$(sj bytes_per_detached_session_first)
CONN1=$(sj bytes_per_connected_session_first)
MINUS_END=$(sj bytes_per_detached_session_minus_ended)
RA=$(sj resume_a first_sent_to_last_answered_s)
RA2=$(sj resume_a first_answered_to_last_answered_s)
RAS=$(sj resume_a send_s)
RB=$(sj resume_b first_sent_to_last_answered_s)
RB2=$(sj resume_b first_answered_to_last_answered_s)
RBS=$(sj resume_b send_s)
OKA=$(sj resume_a resumed_with_lock)
OKB=$(sj resume_b resumed_with_lock)
DETS=$(sj detach_seen_s 0)
say "RESUME of $STORM_N: first sent to last answered ${RA} s (with" \
    "$STORM_N others detached), ${RB} s (alone); $OKA and $OKB locks back"
say "bytes: detached session $DET2 (second wave), idle connection" \
    "$IDLE_BYTES, held key $KEY_BYTES"

verdict() {	# CONDITION-AS-AWK
	awk "BEGIN { exit !($1) }" && echo met || echo "**not met**"
}

RT_NOTE="ROUNDS=$ROUNDS DURATION=$DURATION "
[ "$RT" != 1 ] || RT_NOTE="${RT_NOTE}RT=1 "
[ "$STORM_N" = 10000 ] || RT_NOTE="${RT_NOTE}STORM_N=$STORM_N "
[ -z "$BASE_KEYLOCKD" ] || RT_NOTE="${RT_NOTE}BASE_KEYLOCKD=<keylockd of ${BASE_REV:-an earlier commit}> "

section() {
	cat <<EOF
<!-- bench/sessions.sh: begin -->
## Sessions: what they cost (issue 20)

Written by \`${RT_NOTE}bench/sessions.sh --write BUILDDIR\` (-O2 build${BASE_KEYLOCKD:+;
BASE_KEYLOCKD a keylockd built -O2 from the commit before sessions}) on
$STARTED at $REV: $CPU, $(nproc) CPUs online; $PINNING; load average
$LOAD_START at the start, $LOAD_END at the end, in $ELAPSED s (other work on
this machine adds noise to the times, not to instructions or memory).

**A session connection against a plain one**, lock-unlock on random keys
of 1,000,000, c=50 P=16, $DURATION s a run, both against the same fresh
keylockd in each of $ROUNDS rounds, the order alternating; median (min–max):

| | cycles/s |
|---|---:|
| plain | $(fmt_cell "$P_MED" "$P_MIN" "$P_MAX" 0) |
| --session (SESSION first on each connection) | $(fmt_cell "$S_MED" "$S_MIN" "$S_MAX" 0) |
| session/plain, of the medians | $RATIO |
| session/plain, median of the rounds' ratios | $(fmt_cell "$R_MED" "$R_MIN" "$R_MAX" 3) |

Target: within 5%: $(verdict "$R_MED >= 0.95 && $RATIO >= 0.95").
EOF
	if [ -n "$IR_PLAIN" ]; then
		cat <<EOF

**User-space instructions per request** (\`bench/instructions.sh\`, the
same load under callgrind; total, and net of start and exit):

| keylockd | total | net |
|---|---:|---:|
$( [ -z "$IR_BASE" ] || echo "| before sessions, plain | ${IR_BASE% *} | ${IR_BASE#* } |")
| plain | ${IR_PLAIN% *} | ${IR_PLAIN#* } |
| --session (SESSION=1) | ${IR_SESSION% *} | ${IR_SESSION#* } |

Target: the session path within 2% of the plain one:
$(verdict "${IR_SESSION% *} <= ${IR_PLAIN% *} * 1.02") ($(awk -v s="${IR_SESSION% *}" \
    -v p="${IR_PLAIN% *}" 'BEGIN { printf "%+.1f%%", (s / p - 1) * 100 }')).
EOF
		if [ -n "$IR_BASE" ]; then
			cat <<EOF
Plain connections within 2% of before sessions:
$(verdict "${IR_PLAIN% *} <= ${IR_BASE% *} * 1.02") ($(awk -v a="${IR_PLAIN% *}" \
    -v b="${IR_BASE% *}" 'BEGIN { printf "%+.1f%%", (a / b - 1) * 100 }')).
EOF
		fi
		[ -z "$IR_RESUME" ] || cat <<EOF

Instructions per command, inclusive, of keylockd under callgrind while
\`session_storm -n $IR_N\` runs (two waves, $((2 * IR_N)) of each):
\`RESUME\` $IR_RESUME, of which building and writing its JSON reply
(\`stats_resume_json\`) $IR_RESUME_JSON; \`SESSION\` $IR_SESSION_CMD.
EOF
	fi
	cat <<EOF

**Mass reconnect** (\`bench/session_storm\`, keylockd --max-clients 30000):
two waves of $STORM_N connections, each \`SESSION grace=$STORM_GRACE\` and one
\`LOCK\`, each wave closed at once without QUIT (sessions_detached reached
$STORM_N ${DETS} s after the first wave's last close); then each wave
reconnects and every connection sends \`RESUME ID\` in one loop, replies
read as they come:

| RESUME of $STORM_N sessions | first sent to last answered, s | first answered to last answered, s | writing them, s | lock back (held) |
|---|---:|---:|---:|---:|
| first wave ($STORM_N others still detached) | $RA | $RA2 | $RAS | $OKA |
| second wave (alone) | $RB | $RB2 | $RBS | $OKB |

**Memory** (the daemon's RssAnon, its heap, over $STORM_N):

| | bytes each |
|---|---:|
| idle plain connection (fresh daemon) | $IDLE_BYTES |
| held key (keylock-bench -w hold, 100,000 keys, VmRSS) | $KEY_BYTES |
| connected session holding one lock (fresh daemon) | $CONN1 |
| detached session, first wave (fresh daemon: keeps its closed connection's freed memory) | $DET1 |
| **detached session with its lock, second wave** (the first wave's freed memory reused) | **$DET2** |
| both waves detached minus all ended (glibc keeps what was freed) | $MINUS_END |

Target: a detached session no more than an idle connection plus its lock
($IDLE_BYTES + $KEY_BYTES bytes): $(verdict "$DET2 <= $IDLE_BYTES + $KEY_BYTES").
<!-- bench/sessions.sh: end -->
EOF
}

section >"$TMP/section.md"
cat "$TMP/section.md"
if [ "$WRITE" = 1 ]; then
	if grep -q '^<!-- bench/sessions.sh: begin -->$' "$RESULTS"; then
		awk -v f="$TMP/section.md" '
		    /^<!-- bench\/sessions.sh: begin -->$/ {
			while ((getline l < f) > 0) print l; skip = 1; next }
		    /^<!-- bench\/sessions.sh: end -->$/ { skip = 0; next }
		    !skip { print }' "$RESULTS" >"$RESULTS.tmp"
	else
		{ cat "$RESULTS"; echo; cat "$TMP/section.md"; } >"$RESULTS.tmp"
	fi
	mv "$RESULTS.tmp" "$RESULTS"
	say "wrote $RESULTS"
fi
