#!/bin/bash
# bench/instructions.sh [BUILDDIR]: user-space instructions per request of
# keylockd, and of the echo floor under the same load, counted by
# valgrind --tool=callgrind (issue 14).
#
# The load is keylock-bench(1) lock-unlock on random keys of 1,000,000,
# c=50 P=16, REQUESTS (200000) requests, with a fixed --seed (SEED, 1), so
# that every run asks for the same keys in the same order. Each server runs
# under callgrind (on CPU SERVER_CPU, keylock-bench on CLIENT_CPU, as in
# compare.sh); instructions are counted over the server's whole life,
# start and exit included, and divided by the requests keylock-bench
# reports. A second run of each server that only starts and exits gives
# the fixed part, so "net" is the cost of the requests alone. Then the
# TOP (15) functions by instructions per request (self cost, the pieces
# callgrind_annotate lists per file summed by function name), and the same
# instructions by the source folder they come from (src/core, src/daemon,
# src/backend, ...; a library's name for code without source), so that a
# target can be set for, and met by, the layer that owns the cost.
#
# Instruction counts do not depend on the machine's speed or load (only on
# how the requests happen to fall into batches, a few per cent at most),
# so two commits can be compared on any machine.
#
# It builds nothing: run `make` first (an -O2 build, as configure's
# default). The programs come from BUILDDIR (or the current directory)
# unless KEYLOCKD, KEYLOCK_BENCH or ECHO_SERVER name them. SUMMARY=FILE
# also writes "NAME TOTAL_PER_REQUEST NET_PER_REQUEST" lines there, for
# compare.sh. KEEP=1 keeps the callgrind files; CALLGRIND_OPTS adds
# options (--dump-instr=yes for counts per instruction, say). SESSION=1
# (or SESSION=MS, a grace) makes every keylock-bench connection open a
# session first (keylock-bench --session) and measures keylockd alone
# (the echo floor has no sessions); its name in SUMMARY is
# keylockd+session. CONNS and PIPELINE change the load's c and P, WORK
# its workload (keylock-bench -w: lock-unlock, contended, ...);
# CHANNELS=N runs its clients as channels of N connections
# (keylock-bench --channels N) and measures keylockd alone (the echo floor
# speaks no channels); its name in SUMMARY is keylockd+channels.
set -euo pipefail

build=$(cd "${1:-.}" && pwd)
KEYLOCKD=${KEYLOCKD:-$build/src/keylockd}
KEYLOCK_BENCH=${KEYLOCK_BENCH:-$build/tools/keylock-bench}
ECHO_SERVER=${ECHO_SERVER:-$build/bench/echo_server}
VALGRIND=${VALGRIND:-valgrind}
REQUESTS=${REQUESTS:-200000}
CONNS=${CONNS:-50}
PIPELINE=${PIPELINE:-16}
CHANNELS=${CHANNELS:-0}
WORK=${WORK:-lock-unlock}
SEED=${SEED:-1}
TOP=${TOP:-15}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
READY_S=60			# valgrind starts slowly on a busy machine
SESSION=${SESSION:-0}
case $SESSION in
0) SESSION_OPT= ;;
1) SESSION_OPT=--session ;;
*[!0-9]*) echo "instructions.sh: SESSION is 0, 1 or a grace in ms" >&2
	exit 1 ;;
*) SESSION_OPT=--session=$SESSION ;;
esac

for p in "$KEYLOCKD" "$KEYLOCK_BENCH" "$ECHO_SERVER"; do
	[ -x "$p" ] || { echo "instructions.sh: $p: not found (run make, or" \
	    "set KEYLOCKD, KEYLOCK_BENCH, ECHO_SERVER)" >&2; exit 1; }
done
if ! command -v "$VALGRIND" >/dev/null 2>&1 ||
    ! command -v callgrind_annotate >/dev/null 2>&1; then
	echo "instructions.sh: needs valgrind and callgrind_annotate" \
	    "(apt-get install valgrind)" >&2
	exit 1
fi
perl -MJSON::PP -e 1 2>/dev/null ||
    { echo "instructions.sh: needs perl's JSON::PP" >&2; exit 1; }

TMP=$(mktemp -d "${TMPDIR:-/tmp}/keylock-instr.XXXXXX")
SRV_PID=

cleanup() {
	status=$?
	trap - EXIT INT TERM HUP
	if [ -n "$SRV_PID" ]; then
		kill -TERM "$SRV_PID" 2>/dev/null || true
		wait "$SRV_PID" 2>/dev/null || true
	fi
	if [ "${KEEP:-0}" = 1 ]; then
		echo "instructions.sh: callgrind files kept in $TMP" >&2
	else
		rm -rf "$TMP"
	fi
	exit "$status"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

say() {
	echo "instructions.sh: $*" >&2
}

if command -v taskset >/dev/null 2>&1 && [ "$(nproc)" -ge 2 ]; then
	PIN_SERVER="taskset -c $SERVER_CPU"
	PIN_CLIENT="taskset -c $CLIENT_CPU"
else
	PIN_SERVER=
	PIN_CLIENT=
fi

# start NAME: the server NAME (keylockd or echo) under callgrind; sets
# SRV_PID and SRV_PORT once it listens.
start() {
	local name=$1 dir="$TMP/$1.$RANDOM" deadline=$((SECONDS + READY_S))

	mkdir -p "$dir"
	# shellcheck disable=SC2086 # PIN_SERVER is a command or nothing
	set -- $PIN_SERVER "$VALGRIND" --tool=callgrind --vgdb=no \
	    --callgrind-out-file="$dir/callgrind.out" ${CALLGRIND_OPTS:-}
	if [ "$name" = keylockd ]; then
		set -- "$@" "$KEYLOCKD" --config /dev/null --bind 127.0.0.1 \
		    --port 0 --port-file "$dir/port" --unix '' \
		    --state-dir "$dir" --log-level warn
	else
		set -- "$@" "$ECHO_SERVER" --port 0 --port-file "$dir/port"
	fi
	"$@" 2>"$dir/log" &
	SRV_PID=$!
	SRV_DIR=$dir
	until grep -qx '[0-9][0-9]*' "$dir/port" 2>/dev/null; do
		kill -0 "$SRV_PID" 2>/dev/null ||
		    { say "$name died at start:"; tail -n 5 "$dir/log" >&2;
		    return 1; }
		[ "$SECONDS" -le "$deadline" ] ||
		    { say "$name not ready in $READY_S s"; return 1; }
		sleep 0.1
	done
	SRV_PORT=$(cat "$dir/port")
}

# stop: SIGTERM, and callgrind writes its file as the server exits.
stop() {
	kill -TERM "$SRV_PID"
	wait "$SRV_PID" || true
	SRV_PID=
	[ -s "$SRV_DIR/callgrind.out" ] ||
	    { say "no callgrind output in $SRV_DIR"; return 1; }
}

# total FILE: the instructions a callgrind file counted.
total() {
	awk '$1 == "totals:" { print $2; exit }' "$1"
}

# num VALUE DIGITS: a number with thousands separators.
num() {
	awk -v v="$1" -v d="$2" 'BEGIN {
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

# measure NAME: one loaded run and one idle run of the server NAME.
measure() {
	local name=$1 loaded idle requests errors json opt=

	if [ "$name" = keylockd ] && [ -n "$SESSION_OPT" ]; then
		opt=$SESSION_OPT
	fi
	if [ "$name" = keylockd ] && [ "$CHANNELS" != 0 ]; then
		opt="$opt --channels $CHANNELS"
	fi
	start "$name"
	json="$TMP/$name.json"
	# shellcheck disable=SC2086 # opt is one option or nothing
	if ! $PIN_CLIENT "$KEYLOCK_BENCH" -S "127.0.0.1:$SRV_PORT" \
	    -w "$WORK" -c "$CONNS" -P "$PIPELINE" -n "$REQUESTS" \
	    --seed "$SEED" $opt \
	    --no-progress --json >"$json" 2>"$TMP/$name.err"; then
		say "keylock-bench against $name failed:" \
		    "$(tail -n 1 "$TMP/$name.err")"
		return 1
	fi
	stop
	loaded=$SRV_DIR/callgrind.out
	read -r requests errors <<<"$(perl -MJSON::PP -e 'local $/;
	    my $j = decode_json(<STDIN>);
	    print $j->{requests} + 0, " ", $j->{errors} + 0, "\n"' <"$json")"
	[ "$errors" = 0 ] || say "$name answered $errors requests with an error"
	[ "$requests" -gt 0 ] || { say "$name: no requests done"; return 1; }
	start "$name"
	stop
	idle=$SRV_DIR/callgrind.out

	[ -z "$SESSION_OPT" ] || [ "$name" != keylockd ] ||
	    name=$name+session
	[ "$CHANNELS" = 0 ] || [ "${name%%+*}" != keylockd ] ||
	    name=$name+channels
	awk -v name="$name" -v t="$(total "$loaded")" -v i="$(total "$idle")" \
	    -v n="$requests" 'BEGIN {
	    printf "%s %.1f %.1f\n", name, t / n, (t - i) / n }' \
	    >>"$TMP/summary"
	echo "$name: $(num "$(total "$loaded")" 0) instructions over" \
	    "$(num "$requests" 0) requests:" \
	    "$(awk -v t="$(total "$loaded")" -v n="$requests" \
	    'BEGIN { printf "%.1f", t / n }') per request"
	echo "  of which start and exit alone: $(num "$(total "$idle")" 0);" \
	    "net of them: $(awk -v t="$(total "$loaded")" \
	    -v i="$(total "$idle")" -v n="$requests" \
	    'BEGIN { printf "%.1f", (t - i) / n }') per request"
	echo "  top $TOP functions, self instructions per request:"
	top "$loaded" "$requests"
	echo "  by source folder (code inlined from a header counts where" \
	    "the header is), self instructions per request:"
	folders "$loaded" "$requests"
}

# top FILE REQUESTS: the most expensive functions, summed over the files
# callgrind_annotate splits them by (inlined code counts where it lands).
top() {
	callgrind_annotate --inclusive=no --auto=no --threshold=100 "$1" |
	    awk -v n="$2" -v top="$TOP" '
	    /^-+$/ { sep++; next }
	    sep >= 4 && $1 ~ /^[0-9,]+$/ && /:/ {
		ir = $1; gsub(/,/, "", ir)
		fn = $0
		sub(/^ *[0-9,]+ +\( *[0-9.]+%\) +/, "", fn)
		obj = ""
		if (match(fn, / \[[^]]*\]$/)) {
			obj = substr(fn, RSTART + 2, RLENGTH - 3)
			sub(/.*\//, "", obj)
			fn = substr(fn, 1, RSTART - 1)
		}
		sub(/^.*:/, "", fn)
		sum[fn] += ir
		if (obj != "")
			where[fn] = obj
	    }
	    END {
		for (f in sum)
			printf "%12.1f  %s%s\n", sum[f] / n, f,
			    where[f] != "" ? "  (" where[f] ")" : ""
	    }' | sort -k1,1gr | awk -v top="$TOP" 'NR <= top'
}

# folders FILE REQUESTS: the instructions of the whole run by the folder
# of the source they come from (src/core, src/daemon, ...), and by
# library for code without source, largest first.
folders() {
	callgrind_annotate --inclusive=no --auto=no --threshold=100 "$1" |
	    awk -v n="$2" '
	    /^-+$/ { sep++; next }
	    sep >= 4 && $1 ~ /^[0-9,]+$/ && /:/ {
		ir = $1; gsub(/,/, "", ir)
		fn = $0
		sub(/^ *[0-9,]+ +\( *[0-9.]+%\) +/, "", fn)
		obj = ""
		if (match(fn, / \[[^]]*\]$/)) {
			obj = substr(fn, RSTART + 2, RLENGTH - 3)
			sub(/.*\//, "", obj)
			fn = substr(fn, 1, RSTART - 1)
		}
		file = fn
		sub(/:[^:]*$/, "", file)
		if (match(file, /(^|\/)(src|lib|tools|bench)\/[^\/]+\//)) {
			where = substr(file, RSTART, RLENGTH)
			sub(/^\//, "", where)
			sub(/\/$/, "", where)
		} else if (match(file, /(^|\/)(src|lib|tools|bench)\//)) {
			where = substr(file, RSTART, RLENGTH)
			sub(/^\//, "", where)
			sub(/\/$/, "", where)
		} else
			where = obj != "" ? obj : "other"
		sum[where] += ir
	    }
	    END {
		for (w in sum)
			if (sum[w] / n >= 0.05)
				printf "%12.1f  %s\n", sum[w] / n, w
	    }' | sort -k1,1gr
}

CHANNELS_NOTE=
[ "$CHANNELS" = 0 ] || CHANNELS_NOTE=", channels of $CHANNELS connections"
say "c=$CONNS P=$PIPELINE $WORK, $(num "$REQUESTS" 0) requests," \
    "seed $SEED${SESSION_OPT:+, $SESSION_OPT}$CHANNELS_NOTE; under" \
    "callgrind (a minute or two)"
measure keylockd
[ -n "$SESSION_OPT" ] || [ "$CHANNELS" != 0 ] || measure echo
if [ -n "${SUMMARY:-}" ]; then
	cp "$TMP/summary" "$SUMMARY"
fi
