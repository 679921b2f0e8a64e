#!/bin/bash
# bench/compare.sh [BUILDDIR]: keylockd against Redis and against a bare
# line server, on loopback, and bench/RESULTS.md from the figures.
#
# It builds nothing: run `make` first. The programs come from BUILDDIR (or
# the current directory) unless KEYLOCKD, KEYLOCK_BENCH, ECHO_SERVER or
# REDIS_SERVER name them. Servers run on CPU SERVER_CPU (0) and
# keylock-bench on CLIENT_CPU (1), with taskset, for every system alike.
# Each row runs ROUNDS times (3), alternately keylockd, Redis, the echo
# floor, Redis with the script unlock (reversed in even rounds); a figure is
# the median of the rounds with their min-max, and ratios are given both of
# the medians and as the median of the same-round ratios. DURATION (3) is
# seconds per timed run; HOLD_KEYS (1000000) and IDLE_CONNS (50000, or as
# many as the descriptor limit allows) size the memory rows; RESULTS names the output (bench/RESULTS.md beside this
# script); KEEP=1 keeps the raw JSON; KEYLOCKD_REV names the daemon's
# source revision (default: git describe of this tree). Last, unless
# INSTRUCTIONS=0, bench/instructions.sh counts the user-space instructions
# per request of keylockd and of the echo floor under callgrind (c=50
# P=16), printed beside the ratios and in RESULTS.md. Sections of
# RESULTS.md between another script's markers are kept.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:-.}" && pwd)
KEYLOCKD=${KEYLOCKD:-$build/src/keylockd}
KEYLOCK_BENCH=${KEYLOCK_BENCH:-$build/tools/keylock-bench}
ECHO_SERVER=${ECHO_SERVER:-$build/bench/echo_server}
REDIS_SERVER=${REDIS_SERVER:-$(command -v redis-server ||
    echo /usr/bin/redis-server)}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-3}
HOLD_KEYS=${HOLD_KEYS:-1000000}
IDLE_CONNS=${IDLE_CONNS:-50000}
IDLE_TARGET=50000		# issue 5: connections held, fresh p99 <= 10 ms
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
RESULTS=${RESULTS:-$here/RESULTS.md}
READY_S=20			# server readiness deadline, seconds
HOLD_CONNS=100			# keylockd's max-locks: 10000 keys each
THROUGHPUT_ROWS="1:1 1:16 50:1 50:16 1000:1 1000:16"
SEED_TARGET_S=0.025		# issue 22 (issue 5 asked 0.035)
SEED_RUNS=3			# seed runs per round: each takes well under 1 s

for p in "$KEYLOCKD" "$KEYLOCK_BENCH" "$ECHO_SERVER" "$REDIS_SERVER"; do
	[ -x "$p" ] || { echo "compare.sh: $p: not found (run make, or" \
	    "set KEYLOCKD, KEYLOCK_BENCH, ECHO_SERVER, REDIS_SERVER)" >&2;
	    exit 1; }
done
perl -MJSON::PP -e 1 2>/dev/null ||
    { echo "compare.sh: needs perl's JSON::PP" >&2; exit 1; }

TMP=$(mktemp -d "${TMPDIR:-/tmp}/keylock-compare.XXXXXX")
mkdir -p "$TMP/d" "$TMP/runs"
PIDS=

cleanup() {
	status=$?
	trap - EXIT INT TERM HUP
	for p in $PIDS; do
		kill -TERM "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	if [ "${KEEP:-0}" = 1 ]; then
		echo "compare.sh: raw results kept in $TMP" >&2
	else
		rm -rf "$TMP"
	fi
	exit "$status"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

say() {
	echo "compare.sh: $*" >&2
}

# Pinning, and enough descriptors for IDLE_CONNS in both processes.
if command -v taskset >/dev/null 2>&1 && [ "$(nproc)" -ge 2 ]; then
	PIN_SERVER="taskset -c $SERVER_CPU"
	PIN_CLIENT="taskset -c $CLIENT_CPU"
	PINNING="servers on CPU $SERVER_CPU, keylock-bench on CPU"
	PINNING="$PINNING $CLIENT_CPU (taskset)"
else
	PIN_SERVER=
	PIN_CLIENT=
	PINNING="none (taskset missing or one CPU): figures are less stable"
fi
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
NOFILE=$(ulimit -n)
if [ "$NOFILE" != unlimited ] && [ "$NOFILE" -lt $((IDLE_CONNS + 64)) ]; then
	IDLE_CONNS=$((NOFILE - 64))
	say "ulimit -n is $NOFILE: IDLE_CONNS lowered to $IDLE_CONNS"
fi

# --- servers -----------------------------------------------------------

# wait_port FILE PID: the port a server wrote, once it is there.
wait_port() {
	local deadline=$((SECONDS + READY_S))

	until grep -qx '[0-9][0-9]*' "$1" 2>/dev/null; do
		kill -0 "$2" 2>/dev/null || { say "server $2 died at start"; \
		    return 1; }
		[ "$SECONDS" -le "$deadline" ] ||
		    { say "server $2 not ready in $READY_S s"; return 1; }
		sleep 0.05
	done
	cat "$1"
}

# Sets KD_PID and KD_PORT: a keylockd with a fresh state directory.
start_keylockd() {
	local dir="$TMP/kd.$RANDOM"

	mkdir -p "$dir"
	$PIN_SERVER "$KEYLOCKD" --bind 127.0.0.1 --port 0 \
	    --port-file "$dir/port" --unix '' --state-dir "$dir" \
	    --max-clients 1000000 --log-level warn >>"$TMP/keylockd.log" 2>&1 &
	KD_PID=$!
	PIDS="$PIDS $KD_PID"
	KD_PORT=$(wait_port "$dir/port" "$KD_PID")
}

# Sets RD_PID and RD_PORT: a Redis that neither saves nor logs to disk.
start_redis() {
	for _ in 1 2 3 4 5 6 7 8; do
		RD_PORT=$((20000 + RANDOM % 30000))
		(exec 3<>"/dev/tcp/127.0.0.1/$RD_PORT") 2>/dev/null && continue
		$PIN_SERVER "$REDIS_SERVER" --port "$RD_PORT" --bind 127.0.0.1 \
		    --save '' --appendonly no --protected-mode no \
		    --maxclients 1000000 --daemonize no --loglevel warning \
		    >>"$TMP/redis.log" 2>&1 &
		RD_PID=$!
		PIDS="$PIDS $RD_PID"
		local deadline=$((SECONDS + READY_S))
		while kill -0 "$RD_PID" 2>/dev/null; do
			if (exec 3<>"/dev/tcp/127.0.0.1/$RD_PORT") 2>/dev/null
			then
				return 0
			fi
			[ "$SECONDS" -le "$deadline" ] || break
			sleep 0.05
		done
		stop "$RD_PID"
	done
	say "redis-server did not start (see $TMP/redis.log)"
	return 1
}

start_echo() {
	local dir="$TMP/echo.$RANDOM"

	mkdir -p "$dir"
	$PIN_SERVER "$ECHO_SERVER" --port 0 --port-file "$dir/port" \
	    >>"$TMP/echo.log" 2>&1 &
	EC_PID=$!
	PIDS="$PIDS $EC_PID"
	EC_PORT=$(wait_port "$dir/port" "$EC_PID")
}

stop() {
	kill -TERM "$1" 2>/dev/null || true
	wait "$1" 2>/dev/null || true
	PIDS=$(echo "$PIDS" | tr ' ' '\n' | { grep -vx "$1" || true; } |
	    tr '\n' ' ')
}

# --- runs and figures --------------------------------------------------

# jget FILE PATH...: members of a JSON file, a/b/c paths, "-" if absent.
jget() {
	perl -MJSON::PP -e '
	    local $/; open(my $f, "<", shift) or die; my $j = decode_json(<$f>);
	    my @out;
	    for my $p (@ARGV) {
		my $v = $j;
		for my $k (split m{/}, $p) {
			$v = ref($v) eq "HASH" && exists $v->{$k} ? $v->{$k} :
			    undef;
		}
		push @out, defined($v) && !ref($v) ? $v + 0 : "-";
	    }
	    print "@out\n";' "$@"
}

# rec ROW SYSTEM METRIC VALUE: one round's figure ("-": the run failed).
rec() {
	echo "$4" >>"$TMP/d/$1.$2.$3.last"
	[ "$4" = - ] || echo "$4" >>"$TMP/d/$1.$2.$3"
}

# run NAME ARGS...: one keylock-bench run, pinned; its JSON is runs/NAME.
# Returns 1 (and says why) if the run failed.
run() {
	local name=$1 out="$TMP/runs/$1.json"

	shift
	if ! $PIN_CLIENT "$KEYLOCK_BENCH" --no-progress --json "$@" \
	    >"$out" 2>"$TMP/runs/$name.err"; then
		say "run $name failed: $(tail -n 1 "$TMP/runs/$name.err")"
		return 1
	fi
	echo "$out"
}

# stat ROW SYSTEM METRIC: "median min max" of the rounds, or "- - -".
stat() {
	local f="$TMP/d/$1.$2.$3"

	[ -s "$f" ] || { echo "- - -"; return; }
	sort -g "$f" | awk '{ v[NR] = $1 } END {
	    m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
	    print m, v[1], v[NR] }'
}

# num VALUE DIGITS: a number with thousands separators, or "n/a".
num() {
	awk -v v="$1" -v d="$2" 'BEGIN {
	    if (v == "-" || v == "") { print "n/a"; exit }
	    s = sprintf("%." d "f", v); neg = s ~ /^-/; sub(/^-/, "", s)
	    i = index(s, "."); ip = i ? substr(s, 1, i - 1) : s
	    fp = i ? substr(s, i) : ""
	    out = ""
	    while (length(ip) > 3) {
		out = "," substr(ip, length(ip) - 2) out
		ip = substr(ip, 1, length(ip) - 3)
	    }
	    print (neg ? "-" : "") ip out fp }'
}

# cell ROW SYSTEM METRIC DIGITS: "median (min–max)".
cell() {
	local m lo hi

	read -r m lo hi <<<"$(stat "$1" "$2" "$3")"
	[ "$m" = - ] && { echo "n/a"; return; }
	echo "$(num "$m" "$4") ($(num "$lo" "$4")–$(num "$hi" "$4"))"
}

med() {
	stat "$1" "$2" "$3" | cut -d' ' -f1
}

# pcell ROW A B METRIC: the ratio of the medians of A and B, in bold, and
# the median of the same-round ratios ("paired").
pcell() {
	echo "**$(ratio "$(med "$1" "$2" "$4")" "$(med "$1" "$3" "$4")")**" \
	    "(paired $(num "$(med "$1" "$2_$3" "$4")" 2))"
}

# ratio A B: A/B to two decimals, or n/a.
ratio() {
	awk -v a="$1" -v b="$2" 'BEGIN {
	    if (a == "-" || b == "-" || a == "" || b == "" || b + 0 == 0)
		print "n/a"
	    else
		printf "%.2f\n", a / b }'
}

# A row of lock-unlock cycles at c=$1, P=$2, round $3: keylockd (k), Redis
# (r), the echo floor (e) and Redis with the script unlock (s), in the order
# k r e s in odd rounds and s e r k in even ones, so that none always runs
# first. The same-round ratios k/r, k/e, k/s are kept for paired medians.
throughput_round() {
	local c=$1 p=$2 r=$3 row="tp.$1.$2" sys order="k r e s"

	[ $((r % 2)) -eq 0 ] && order="s e r k"
	for sys in $order; do
		throughput_run "$row" "$sys" "$r" -c "$c" -P "$p" -t "$DURATION"
	done
	pair "$row" k r cps
	pair "$row" k e cps
	pair "$row" k s cps
	pair "$row" k r p99
	say "c=$c P=$p round $r: keylockd $(last "$row" k cps), Redis" \
	    "$(last "$row" r cps), echo $(last "$row" e cps) cycles/s"
}

# throughput_run ROW SYSTEM ROUND ARGS...
throughput_run() {
	local row=$1 sys=$2 r=$3 f

	shift 3
	case $sys in
	k) set -- -S "127.0.0.1:$KD_PORT" "$@" ;;
	r) set -- --redis -S "127.0.0.1:$RD_PORT" "$@" ;;
	e) set -- -S "127.0.0.1:$EC_PORT" "$@" ;;
	s) set -- --redis --redis-unlock script -S "127.0.0.1:$RD_PORT" "$@" ;;
	esac
	if f=$(run "$row.$sys.$r" "$@"); then
		rec_tp "$row" "$sys" "$f"
	else
		rec "$row" "$sys" cps -
		echo - >>"$TMP/d/$row.$sys.last"
	fi
}

# last ROW SYSTEM METRIC: this round's figure, or "-".
last() {
	tail -n 1 "$TMP/d/$1.$2.$3.last" 2>/dev/null || echo -
}

# pair ROW A B METRIC: records this round's A/B as ROW.A_B.METRIC.
pair() {
	local x

	x=$(ratio "$(last "$1" "$2" "$4")" "$(last "$1" "$3" "$4")")
	[ "$x" = n/a ] || rec "$1" "$2_$3" "$4" "$x"
}

rec_tp() {
	local cps p50 p99 fails

	read -r cps p50 p99 fails <<<"$(jget "$3" cycles_per_s \
	    latency_ms/all/p50 latency_ms/all/p99 lock_failures)"
	rec "$1" "$2" cps "$cps"
	rec "$1" "$2" p50 "$p50"
	rec "$1" "$2" p99 "$p99"
	rec "$1" "$2" fails "$fails"
}

contended_round() {
	local r=$1 f cps p50 p99 retries secs

	if f=$(run "cont.k.$r" -S "127.0.0.1:$KD_PORT" -w contended -c 50 \
	    -t "$DURATION"); then
		read -r cps p50 p99 <<<"$(jget "$f" cycles_per_s \
		    latency_ms/LOCK/p50 latency_ms/LOCK/p99)"
		rec cont k cps "$cps"
		rec cont k p50 "$p50"
		rec cont k p99 "$p99"
	fi
	if f=$(run "cont.r.$r" --redis -S "127.0.0.1:$RD_PORT" -w contended \
	    -c 50 -t "$DURATION"); then
		read -r cps retries secs <<<"$(jget "$f" cycles_per_s retries \
		    seconds)"
		rec cont r cps "$cps"
		rec cont r retries "$(ratio "$retries" "$secs")"
	fi
}

connect_round() {
	local r=$1 f cps p99

	if f=$(run "conn.k.$r" -S "127.0.0.1:$KD_PORT" -w connect -c 50 \
	    -t "$DURATION"); then
		read -r cps p99 <<<"$(jget "$f" cycles_per_s latency_ms/all/p99)"
		rec conn k cps "$cps"
		rec conn k p99 "$p99"
	fi
	if f=$(run "conn.r.$r" --redis -S "127.0.0.1:$RD_PORT" -w connect \
	    -c 50 -t "$DURATION"); then
		read -r cps p99 <<<"$(jget "$f" cycles_per_s latency_ms/all/p99)"
		rec conn r cps "$cps"
		rec conn r p99 "$p99"
	fi
}

# The same cycle at c=50 P=1 with no other keys, then with HOLD_KEYS held.
held_round() {
	local r=$1 f cps p50 max

	if f=$(run "held.0.$r" -S "127.0.0.1:$KD_PORT" -c 50 \
	    -t "$DURATION"); then
		rec held none cps "$(jget "$f" cycles_per_s)"
	else
		rec held none cps -
	fi
	if f=$(run "held.1.$r" -S "127.0.0.1:$KD_PORT" -c 50 \
	    -t "$DURATION" --held "$HOLD_KEYS" \
	    --held-connections "$HOLD_CONNS"); then
		read -r cps p50 max <<<"$(jget "$f" cycles_per_s \
		    latency_ms/STATS/p50 latency_ms/STATS/max)"
		rec held many cps "$cps"
		rec held stats p50 "$p50"
		rec held stats max "$max"
	else
		rec held many cps -
	fi
	pair held many none cps
}

# The seed on keylockd, and on the echo floor, where every LOCK is answered
# at once: what 1,000 connections x 2 round trips + 1 ms cost the client
# and the kernel alone. Short runs: SEED_RUNS of each per round.
seed_round() {
	local r=$1 i f s o t

	for i in $(seq 1 "$SEED_RUNS"); do
		if f=$(run "seed.k.$r.$i" -S "127.0.0.1:$KD_PORT" -w seed \
		    -c 1000 -r 50 --hold-ms 1); then
			read -r s o t <<<"$(jget "$f" seed/elapsed_s \
			    seed/overlaps seed/token_errors)"
			rec seed k secs "$s"
			rec seed k overlaps "$o"
			rec seed k tokens "$t"
		fi
		if f=$(run "seed.e.$r.$i" -S "127.0.0.1:$EC_PORT" -w seed \
		    -c 1000 -r 50 --hold-ms 1); then
			rec seed e secs "$(jget "$f" seed/elapsed_s)"
		fi
	done
}

# Memory: fresh servers, so that nothing freed earlier is reused.
memory_round() {
	local r=$1 f a b c

	start_keylockd
	if f=$(run "mem.k.$r" -S "127.0.0.1:$KD_PORT" -w hold \
	    -n "$HOLD_KEYS" -c "$HOLD_CONNS" -P 64 --server-pid "$KD_PID"); then
		read -r a b c <<<"$(jget "$f" hold/rss_per_key hold/seconds \
		    hold/table_bytes_per_key)"
		rec mem k rss "$a"
		rec mem k secs "$b"
		rec mem k table "$c"
	fi
	stop "$KD_PID"
	start_redis
	if f=$(run "mem.r.$r" --redis -S "127.0.0.1:$RD_PORT" -w hold \
	    -n "$HOLD_KEYS" -c "$HOLD_CONNS" -P 64 --server-pid "$RD_PID"); then
		read -r a b c <<<"$(jget "$f" hold/rss_per_key \
		    hold/used_memory_per_key hold/seconds)"
		rec mem r rss "$a"
		rec mem r used "$b"
		rec mem r secs "$c"
	fi
	stop "$RD_PID"
	start_keylockd
	if f=$(run "idle.k.$r" -S "127.0.0.1:$KD_PORT" -w idle \
	    -c "$IDLE_CONNS" --sources 4 -t "$DURATION" \
	    --server-pid "$KD_PID"); then
		read -r a b <<<"$(jget "$f" idle/rss_per_conn latency_ms/all/p99)"
		rec idle k rss "$a"
		rec idle k p99 "$b"
	fi
	stop "$KD_PID"
	start_redis
	if f=$(run "idle.r.$r" --redis -S "127.0.0.1:$RD_PORT" -w idle \
	    -c "$IDLE_CONNS" --sources 4 -t "$DURATION" \
	    --server-pid "$RD_PID"); then
		read -r a b <<<"$(jget "$f" idle/rss_per_conn latency_ms/all/p99)"
		rec idle r rss "$a"
		rec idle r p99 "$b"
	fi
	stop "$RD_PID"
	say "memory round $r: per key keylockd $(tail -n 1 \
	    "$TMP/d/mem.k.rss" 2>/dev/null) B RSS, Redis $(tail -n 1 \
	    "$TMP/d/mem.r.used" 2>/dev/null) B used_memory; per connection" \
	    "keylockd $(tail -n 1 "$TMP/d/idle.k.rss" 2>/dev/null) B," \
	    "Redis $(tail -n 1 "$TMP/d/idle.r.rss" 2>/dev/null) B"
}

# --- the runs ----------------------------------------------------------

T0=$SECONDS
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
start_keylockd
start_redis
start_echo
say "keylockd pid $KD_PID port $KD_PORT, Redis pid $RD_PID port $RD_PORT," \
    "echo pid $EC_PID port $EC_PORT; $ROUNDS rounds of $DURATION s"
for row in $THROUGHPUT_ROWS; do
	for r in $(seq 1 "$ROUNDS"); do
		throughput_round "${row%:*}" "${row#*:}" "$r"
	done
done
for r in $(seq 1 "$ROUNDS"); do
	contended_round "$r"
	connect_round "$r"
	seed_round "$r"
done
say "contended, connect, seed: done"
for r in $(seq 1 "$ROUNDS"); do
	held_round "$r"
done
say "held keys: done"
stop "$KD_PID"
stop "$RD_PID"
stop "$EC_PID"
for r in $(seq 1 "$ROUNDS"); do
	memory_round "$r"
done
# Instructions per request (issue 14; the target is issue 22's): "NAME
# TOTAL NET" lines, or none.
IR_TARGET=350
: >"$TMP/ir"
if [ "${INSTRUCTIONS:-1}" != 0 ]; then
	say "instructions per request under callgrind (bench/instructions.sh)"
	if ! KEYLOCKD=$KEYLOCKD KEYLOCK_BENCH=$KEYLOCK_BENCH \
	    ECHO_SERVER=$ECHO_SERVER SUMMARY="$TMP/ir" \
	    SERVER_CPU=$SERVER_CPU CLIENT_CPU=$CLIENT_CPU \
	    "$here/instructions.sh" "$build" >"$TMP/ir.out" 2>&1; then
		say "instructions.sh failed: $(tail -n 1 "$TMP/ir.out")"
		: >"$TMP/ir"
	fi
fi
ELAPSED=$((SECONDS - T0))
LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)

# ir NAME total|net: a figure of instructions.sh, or "-".
ir() {
	awk -v n="$1" -v f="$2" '$1 == n { print f == "net" ? $3 : $2; x = 1 }
	    END { if (!x) print "-" }' "$TMP/ir"
}

# --- RESULTS.md --------------------------------------------------------

version() {
	"$@" 2>&1 | head -n 1 || echo unknown
}

machine() {
	local cpu rev

	cpu=$(grep -m 1 '^model name' /proc/cpuinfo | cut -d: -f2- |
	    sed 's/^ *//')
	rev=${KEYLOCKD_REV:-$(git -C "$here" describe --always --dirty \
	    2>/dev/null || echo "?")}
	echo "| | |"
	echo "|---|---|"
	echo "| CPU | ${cpu:-unknown}, $(nproc) CPUs online |"
	echo "| memory | $(awk '/^MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' \
	    /proc/meminfo) |"
	echo "| kernel | $(uname -sr) |"
	echo "| keylockd | $(version "$KEYLOCKD" --version) (source $rev) |"
	echo "| Redis | $(version "$REDIS_SERVER" --version) |"
	echo "| libevent | $(pkg-config --modversion libevent 2>/dev/null ||
	    echo unknown) |"
	echo "| compiler | $(version "${CC:-cc}" --version) |"
	echo "| pinning | $PINNING |"
	echo "| method | $ROUNDS rounds of $DURATION s per run; per row and" \
	    "round: keylockd, Redis, echo floor, Redis with the script unlock" \
	    "(reversed in even rounds); a figure is the median of the rounds" \
	    "(min–max); a ratio in bold is of the medians, \"paired\" is the" \
	    "median of the same-round ratios |"
	echo "| run time | $ELAPSED s; load average $LOAD0 at the start," \
	    "$LOAD1 at the end (other work on this machine adds noise) |"
}

throughput_table() {
	local row c p

	echo "| c | P | keylockd | Redis SET NX PX + DEL | keylockd/Redis |" \
	    "Redis SET NX PX + EVALSHA | keylockd/EVALSHA | echo floor |" \
	    "keylockd/echo |"
	echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
	for row in $THROUGHPUT_ROWS; do
		c=${row%:*}
		p=${row#*:}
		echo "| $c | $p | $(cell "tp.$c.$p" k cps 0) |" \
		    "$(cell "tp.$c.$p" r cps 0) | $(pcell "tp.$c.$p" k r cps) |" \
		    "$(cell "tp.$c.$p" s cps 0) | $(pcell "tp.$c.$p" k s cps) |" \
		    "$(cell "tp.$c.$p" e cps 0) | $(pcell "tp.$c.$p" k e cps) |"
	done
}

latency_table() {
	local row c p

	echo "| c | P | keylockd p50 | keylockd p99 | Redis p50 | Redis p99 |" \
	    "p99 keylockd/Redis | echo p50 | echo p99 |"
	echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
	for row in $THROUGHPUT_ROWS; do
		c=${row%:*}
		p=${row#*:}
		echo "| $c | $p | $(cell "tp.$c.$p" k p50 3) |" \
		    "$(cell "tp.$c.$p" k p99 3) | $(cell "tp.$c.$p" r p50 3) |" \
		    "$(cell "tp.$c.$p" r p99 3) |" \
		    "$(pcell "tp.$c.$p" k r p99) |" \
		    "$(cell "tp.$c.$p" e p50 3) | $(cell "tp.$c.$p" e p99 3) |"
	done
}

# verdict OK?: "met" or "**not met**" from an awk condition on numbers.
verdict() {
	awk "BEGIN { exit !($1) }" 2>/dev/null && echo "met" ||
	    echo "**not met**"
}

# verdict2 OP LIMIT A B: both ratios (of the medians, and paired) against
# the limit; when they disagree, the noise decided, and we say so.
verdict2() {
	local a b

	a=$(verdict "\"$3\" != \"n/a\" && \"$3\" != \"-\" && $3 $1 $2")
	b=$(verdict "\"$4\" != \"n/a\" && \"$4\" != \"-\" && $4 $1 $2")
	if [ "$a" = "$b" ]; then
		echo "$a"
	else
		echo "unclear: the two ratios disagree (noise)"
	fi
}

# The c=50 P=16 row's instructions, under the throughput table.
instructions_line() {
	if [ "$(ir keylockd total)" = - ]; then
		echo "Instructions per request: not measured (valgrind missing," \
		    "or INSTRUCTIONS=0)."
		return
	fi
	cat <<EOT
User-space instructions per request at c=50 P=16, lock-unlock on random
keys, 200,000 requests under \`valgrind --tool=callgrind\`
(\`bench/instructions.sh\`; they do not depend on the machine's speed):

| | keylockd | echo floor | keylockd/echo |
|---|---:|---:|---:|
| whole run / requests | $(num "$(ir keylockd total)" 1) | $(num "$(ir echo total)" 1) | $(ratio "$(ir keylockd total)" "$(ir echo total)") |
| net of start and exit | $(num "$(ir keylockd net)" 1) | $(num "$(ir echo net)" 1) | $(ratio "$(ir keylockd net)" "$(ir echo net)") |
EOT
}

targets_table() {
	local x y

	echo "| target (issue 5, 14, 22) | measured | verdict |"
	echo "|---|---:|---|"
	x=$(ir keylockd total)
	if [ "$x" = - ]; then
		echo "| ≤ $IR_TARGET user-space instructions per request," \
		    "c=50 P=16 (issue 14) | not measured | not measured |"
	else
		echo "| ≤ $IR_TARGET user-space instructions per request," \
		    "c=50 P=16 (issue 14) | $(num "$x" 1) (net of start and" \
		    "exit $(num "$(ir keylockd net)" 1)); echo floor" \
		    "$(num "$(ir echo total)" 1) | $(verdict "$x <= $IR_TARGET") |"
	fi
	x=$(ratio "$(med tp.50.1 k cps)" "$(med tp.50.1 r cps)")
	y=$(med tp.50.1 k_r cps)
	echo "| cycles/s ≥ 1.1× Redis SET+DEL at c=50 P=1 | ${x}×" \
	    "(paired $(num "$y" 2)×) | $(verdict2 ">=" 1.1 "$x" "$y") |"
	x=$(ratio "$(med tp.50.16 k cps)" "$(med tp.50.16 r cps)")
	y=$(med tp.50.16 k_r cps)
	echo "| cycles/s ≥ 2.0× Redis at c=50 P=16 | ${x}×" \
	    "(paired $(num "$y" 2)×) | $(verdict2 ">=" 2.0 "$x" "$y") |"
	x=$(ratio "$(med tp.1000.16 k cps)" "$(med tp.1000.16 r cps)")
	y=$(med tp.1000.16 k_r cps)
	echo "| cycles/s ≥ 2.0× Redis at c=1000 P=16 | ${x}×" \
	    "(paired $(num "$y" 2)×) | $(verdict2 ">=" 2.0 "$x" "$y") |"
	for row in $THROUGHPUT_ROWS; do
		x=$(ratio "$(med "tp.${row%:*}.${row#*:}" k cps)" \
		    "$(med "tp.${row%:*}.${row#*:}" e cps)")
		y=$(med "tp.${row%:*}.${row#*:}" k_e cps)
		echo "| cycles/s ≥ 0.9× the echo floor, c=${row%:*}" \
		    "P=${row#*:} | ${x}× (paired $(num "$y" 2)×) |" \
		    "$(verdict2 ">=" 0.9 "$x" "$y") |"
	done
	for p in 1 16; do
		x=$(ratio "$(med "tp.50.$p" k p99)" "$(med "tp.50.$p" r p99)")
		y=$(med "tp.50.$p" k_r p99)
		echo "| p99 ≤ Redis's at c=50 P=$p | $(num "$(med "tp.50.$p" k \
		    p99)" 3) vs $(num "$(med "tp.50.$p" r p99)" 3) ms (${x}×," \
		    "paired $(num "$y" 2)×) | $(verdict2 "<=" 1.0 "$x" "$y") |"
	done
	x=$(ratio "$(med held many cps)" "$(med held none cps)")
	y=$(med held many_none cps)
	echo "| cycles/s with $(num "$HOLD_KEYS" 0) keys held ≥ 0.9× with" \
	    "none (c=50 P=1) | ${x}× (paired $(num "$y" 2)×) |" \
	    "$(verdict2 ">=" 0.9 "$x" "$y") |"
	x=$(stat held stats max | cut -d' ' -f3)
	echo "| STATS < 5 ms with $(num "$HOLD_KEYS" 0) keys held | slowest" \
	    "of $((ROUNDS * 9)): $(num "$x" 3) ms |" \
	    "$(verdict "\"$x\" != \"-\" && $x < 5") |"
	x=$(ratio "$(med mem k rss)" "$(med mem r used)")
	echo "| memory per held key ≤ 0.8× Redis's used_memory per key |" \
	    "$(num "$(med mem k rss)" 1) vs $(num "$(med mem r used)" 1)" \
	    "bytes (${x}×) | $(verdict "\"$x\" != \"n/a\" && $x <= 0.8") |"
	x=$(med idle k rss)
	echo "| memory per idle connection ≤ 4 KiB | $(num "$x" 0) bytes |" \
	    "$(verdict "\"$x\" != \"-\" && $x <= 4096") |"
	x=$(med idle k p99)
	if [ "$IDLE_CONNS" -ge "$IDLE_TARGET" ]; then
		echo "| $(num "$IDLE_TARGET" 0) connections, fresh client p99" \
		    "≤ 10 ms | $(num "$x" 3) ms with $(num "$IDLE_CONNS" 0)" \
		    "open | $(verdict "\"$x\" != \"-\" && $x <= 10") |"
	else
		echo "| $(num "$IDLE_TARGET" 0) connections, fresh client p99" \
		    "≤ 10 ms | not run: this machine allows $NOFILE" \
		    "descriptors per process; with $(num "$IDLE_CONNS" 0)" \
		    "open: $(num "$x" 3) ms | not measured |"
	fi
	x=$(med seed k secs)
	y=$(stat seed k overlaps | cut -d' ' -f3)
	echo "| seed: 1,000 × 1 ms over 50 keys ≤ ${SEED_TARGET_S} s, no" \
	    "overlaps | $(num "$x" 4) s, ${y:-?} overlaps (worst); echo" \
	    "floor $(num "$(med seed e secs)" 4) s |" \
	    "$(verdict "\"$x\" != \"-\" && $x <= $SEED_TARGET_S && \"$y\" == \"0\"") |"
}

write_results() {
	cat <<EOF
# keylockd benchmark results

Written by \`bench/compare.sh\` on $(date -u '+%Y-%m-%d %H:%M UTC'); do not
edit by hand. Rerun with \`bench/compare.sh BUILDDIR\` (ROUNDS=$ROUNDS,
DURATION=$DURATION). Every figure is keylock-bench(1) talking to the server
over TCP on 127.0.0.1; a cycle is \`LOCK key\` + \`UNLOCK key\` on keylockd and
\`SET key token NX PX 60000\` + \`DEL key\` (or \`EVALSHA\` of a
compare-and-delete script) on Redis, on random keys of 1,000,000. The echo
floor is \`bench/echo_server\`, which answers every line with \`OK\` and
nothing else: one \`recv\` and one \`send\` per batch.

## Machine

$(machine)

## Lock cycles per second (higher is better)

$(throughput_table)

$(instructions_line)

## Request latency, all requests, ms (lower is better)

$(latency_table)

## Contended: one key, 50 connections, P=1

| | keylockd | Redis (SET NX spin + DEL) | keylockd/Redis |
|---|---:|---:|---:|
| hand-offs/s | $(cell cont k cps 0) | $(cell cont r cps 0) | **$(ratio "$(med cont k cps)" "$(med cont r cps)")** |
| LOCK wait p50, ms | $(cell cont k p50 3) | n/a (no queue) | |
| LOCK wait p99, ms | $(cell cont k p99 3) | n/a (no queue) | |
| refused SETs retried per s | | $(cell cont r retries 0) | |

## Connect cycles: 50 connections, each connect, lock, disconnect

keylockd: connect, \`LOCK\`, close (released on disconnect). Redis:
connect, \`SET NX PX\`, \`DEL\`, close. The client connects from 16
loopback addresses (\`--sources\`): from one, the ports in TIME_WAIT cap
any server near 14,000 cycles/s on this kernel.

| | keylockd | Redis | keylockd/Redis |
|---|---:|---:|---:|
| cycles/s | $(cell conn k cps 0) | $(cell conn r cps 0) | **$(ratio "$(med conn k cps)" "$(med conn r cps)")** |
| request p99, ms | $(cell conn k p99 3) | $(cell conn r p99 3) | $(ratio "$(med conn k p99)" "$(med conn r p99)") |

## Cost per request with $(num "$HOLD_KEYS" 0) other keys held (keylockd, c=50, P=1)

| | none held | $(num "$HOLD_KEYS" 0) held | held/none |
|---|---:|---:|---:|
| cycles/s | $(cell held none cps 0) | $(cell held many cps 0) | $(pcell held many none cps) |
| STATS p50 of 9, ms | | $(cell held stats p50 3) | |
| STATS slowest of 9, ms | | $(cell held stats max 3) | |

## Seed headline: 1,000 one-millisecond operations over 50 keys

1,000 connections already open (each has answered a PING); each does
\`LOCK seed:<i mod 50>\`, holds it 1 ms, \`UNLOCK\`. Time from the first
\`LOCK\` to the last reply (\`keylock-bench -w seed\`); an overlap is a grant
of a key the client still believed held. The echo floor answers every
\`LOCK\` at once, so nothing waits: it is what the client and the kernel
alone need for 1,000 connections, two round trips each, and the 1 ms hold.
The client writes the LOCKs a few per turn of its loop, and each key's next
LOCK before the UNLOCK that hands the key over (keylock-bench(1));
\`bench/seed.sh\` runs this row alone, more often, and says where its time
goes.

| | keylockd | echo floor (no waiting) | target |
|---|---:|---:|---:|
| time to finish, s ($((ROUNDS * SEED_RUNS)) runs) | $(cell seed k secs 4) | $(cell seed e secs 4) | ≤ ${SEED_TARGET_S} |
| overlaps (sum of runs) | $(awk '{ s += $1 } END { print s + 0 }' "$TMP/d/seed.k.overlaps" 2>/dev/null || echo n/a) | | 0 |
| token errors (sum of runs) | $(awk '{ s += $1 } END { print s + 0 }' "$TMP/d/seed.k.tokens" 2>/dev/null || echo n/a) | | 0 |

## Memory (fresh servers each round)

Per held key: $(num "$HOLD_KEYS" 0) keys held on $HOLD_CONNS connections.
keylockd: growth of VmRSS (/proc/PID/status) over the keys, and of the
\`table_bytes\` that STATS reports (what the lock table allocated). Redis:
growth of \`used_memory\` (INFO memory) and of VmRSS, keys \`hold:<i>\`
with a 20-byte token and PX. The target compares keylockd's RSS, which
also counts malloc's overhead, with Redis's used_memory.
Per idle connection: growth of VmRSS over $(num "$IDLE_CONNS" 0) connections
that sent one PING.

| | keylockd | Redis | keylockd/Redis |
|---|---:|---:|---:|
| per held key, RSS bytes | $(cell mem k rss 1) | $(cell mem r rss 1) | $(ratio "$(med mem k rss)" "$(med mem r rss)") |
| per held key, table_bytes / used_memory | $(cell mem k table 1) | $(cell mem r used 1) | $(ratio "$(med mem k table)" "$(med mem r used)") |
| per held key, keylockd RSS / Redis used_memory | $(cell mem k rss 1) | $(cell mem r used 1) | **$(ratio "$(med mem k rss)" "$(med mem r used)")** |
| seconds to take the keys | $(cell mem k secs 2) | $(cell mem r secs 2) | |
| per idle connection, RSS bytes | $(cell idle k rss 0) | $(cell idle r rss 0) | $(ratio "$(med idle k rss)" "$(med idle r rss)") |
| fresh client LOCK/UNLOCK p99 with them open, ms | $(cell idle k p99 3) | $(cell idle r p99 3) | |

## Targets

A ratio target is met when the ratio of the medians and the paired ratio
both pass; when they disagree, the machine's noise decided, and the verdict
says so.

$(targets_table)
EOF
}

# The sections other scripts write between their own markers
# ("<!-- bench/python_compare.py: begin -->" ... ": end -->") are kept as
# they were, after this script's.
kept_sections() {
	[ -f "$RESULTS" ] || return 0
	awk '/^<!-- .*: begin -->$/ { keep = 1; print ""; }
	    keep { print }
	    /^<!-- .*: end -->$/ { keep = 0 }' "$RESULTS"
}

{ write_results; kept_sections; } >"$RESULTS.tmp"
mv "$RESULTS.tmp" "$RESULTS"
for row in $THROUGHPUT_ROWS; do
	say "c=${row%:*} P=${row#*:}: keylockd/Redis" \
	    "$(ratio "$(med "tp.${row%:*}.${row#*:}" k cps)" \
	    "$(med "tp.${row%:*}.${row#*:}" r cps)"), keylockd/echo" \
	    "$(ratio "$(med "tp.${row%:*}.${row#*:}" k cps)" \
	    "$(med "tp.${row%:*}.${row#*:}" e cps)")"
done
say "instructions per request (c=50 P=16): keylockd $(ir keylockd total)" \
    "(net $(ir keylockd net)), echo floor $(ir echo total)" \
    "(net $(ir echo net))"
say "wrote $RESULTS in $ELAPSED s"
