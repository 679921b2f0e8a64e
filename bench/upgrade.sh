#!/bin/bash
# bench/upgrade.sh [BUILDDIR] [--write]: the pause of a live upgrade
# (issue 21, Performance), and the "Live upgrade" section of
# bench/RESULTS.md with --write.
#
# For each number of locks in LOCKS ("0 10000 100000") and of connections
# in CONNS ("100 10000"), a fresh keylockd (run from a copy of
# BUILDDIR/src/keylockd, so that UPGRADE starts that copy again) with that
# many locks held between the connections, a
# probe connection pinging in a loop and ROUNDS (5) upgrades back to back
# by UPGRADE over the unix socket (bench/upgrade_pause.py). A row gives the
# client's gap (the longest time between two PONGs around an upgrade: the
# last reply of the old process to the first of the new) and the pause the
# new process reports (freeze to taking over), median and largest of the
# rounds, and the size of the state handed over. Targets: largest gap at
# most 50 ms with 100 connections, 500 ms with 10,000, on this 2-core
# machine, both with 100,000 locks held.
#
# It builds nothing: run `make` first (an -O2 build, configure's default;
# not --enable-sanitizers). The server runs on CPU SERVER_CPU (0), the
# clients on CLIENT_CPU (1), with taskset. The descriptor limit is raised
# to its hard limit, which must allow the connections plus 64.
#
# RT=1 runs the server (and so the new process it starts) and the clients
# under SCHED_FIFO (chrt -f 5), so that the other work of a shared
# machine does not stretch the pause. BEFORE=PATH runs each row first with
# the keylockd binary at PATH (e.g. one built from an earlier commit), so
# that the table compares the two in the same run.
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
CONNS=${CONNS:-"100 10000"}
LOCKS=${LOCKS:-"0 10000 100000"}
ROUNDS=${ROUNDS:-5}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
KEYLOCKD=${KEYLOCKD:-$build/src/keylockd}
RESULTS=${RESULTS:-$here/RESULTS.md}
RT=${RT:-0}
BEFORE=${BEFORE:-}
[ -x "$KEYLOCKD" ] || { echo "no $KEYLOCKD: run make" >&2; exit 1; }
[ -z "$BEFORE" ] || [ -x "$BEFORE" ] || { echo "no $BEFORE" >&2; exit 1; }
RT_PREFIX=
[ "$RT" != 1 ] || RT_PREFIX="chrt -f 5"
ulimit -n "$(ulimit -Hn)"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/keylockd-upgrade-bench.XXXXXX")
dpid=
# Every keylockd running from this run's copy: after an upgrade the
# server is no longer the child this script started.
ours() {
	for p in /proc/[0-9]*; do
		[ "$(readlink "$p/exe" 2>/dev/null)" = "$tmp/bin/keylockd" ] &&
		    echo "${p#/proc/}"
	done
	return 0
}
cleanup() {
	for p in $(ours); do
		kill -TERM "$p" 2>/dev/null || true
	done
	rm -rf "$tmp"
}
trap cleanup EXIT

# run_row BINARY CONNS LOCKS: one row's upgrades with BINARY; sets
# SUMMARY ("conns locks rounds gap_p50 gap_max pause_p50 pause_max") and
# BYTES (the state's size).
run_row() {
	local bin=$1 n=$2 locks=$3
	mkdir -p "$tmp/bin"
	cp "$bin" "$tmp/bin/keylockd"
	rm -f "$tmp/port" "$tmp/daemon.log"
	$RT_PREFIX taskset -c "$SERVER_CPU" "$tmp/bin/keylockd" \
	    --config /dev/null --bind 127.0.0.1 --port 0 \
	    --port-file "$tmp/port" --unix "$tmp/sock" --state-dir "$tmp" \
	    --max-clients $((n + 64)) --auth-timeout 0 --log-level info \
	    >"$tmp/daemon.log" 2>&1 &
	dpid=$!
	for _ in $(seq 100); do
		[ -s "$tmp/port" ] && break
		sleep 0.1
	done
	port=$(head -n 1 "$tmp/port")
	$RT_PREFIX taskset -c "$CLIENT_CPU" python3 "$here/upgrade_pause.py" \
	    "$port" "$tmp/sock" "$n" "$locks" "$ROUNDS" | tee "$tmp/out"
	BYTES=$(grep -o 'took over ([0-9]* bytes' "$tmp/daemon.log" |
	    tail -n 1 | tr -dc 0-9) || BYTES=
	for p in $(ours); do
		kill -TERM "$p" 2>/dev/null || true
	done
	for _ in $(seq 100); do
		[ -z "$(ours)" ] && break
		sleep 0.1
	done
	wait "$dpid" 2>/dev/null || true
	dpid=
	SUMMARY=$(grep '^SUMMARY' "$tmp/out" | cut -d' ' -f2-)
}

rows=
load0=$(cut -d' ' -f1-3 /proc/loadavg)
for locks in $LOCKS; do
for n in $CONNS; do
	before=
	if [ -n "$BEFORE" ]; then
		echo "== $n connections, $locks locks: $BEFORE"
		run_row "$BEFORE" "$n" "$locks"
		read -r _ _ _ bp50 bmax _ bpmax <<<"$SUMMARY"
		before=" $bp50 | $bmax | $bpmax |"
	fi
	echo "== $n connections, $locks locks: $KEYLOCKD"
	run_row "$KEYLOCKD" "$n" "$locks"
	read -r c l r gp50 gmax pp50 pmax <<<"$SUMMARY"
	rows="$rows| $c | $l | $r |$before $gp50 | **$gmax** | $pp50 | $pmax | ${BYTES:-?} |
"
done
done
load1=$(cut -d' ' -f1-3 /proc/loadavg)

cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')
head="| connections | locks | upgrades | gap p50 | gap max | pause p50 | pause max | state bytes |
|---:|---:|---:|---:|---:|---:|---:|---:|"
compared=
if [ -n "$BEFORE" ]; then
	head="| connections | locks | upgrades | before: gap p50 | before: gap max | before: pause max | gap p50 | gap max | pause p50 | pause max | state bytes |
|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
	compared="
The \"before\" columns: the binary $(basename "$BEFORE") run first on each
row, in the same run."
fi
sched="server on CPU $SERVER_CPU, clients on CPU $CLIENT_CPU"
[ "$RT" != 1 ] || sched="$sched, both under SCHED_FIFO (RT=1: chrt -f 5)"
section="<!-- bench/upgrade.sh: begin -->
## Live upgrade: the pause (issue 21)

Written by \`bench/upgrade.sh\` on $(date -u '+%Y-%m-%d %H:%M') UTC, keylockd
$(git -C "$here" describe --always --dirty 2>/dev/null || echo '?'), $cpu,
$(nproc) CPUs online, $sched.
Load average $load0 at the start, $load1 at the end (other work shares
this machine). Locks held between the connections, a probe pinging,
$ROUNDS upgrades back to back by \`UPGRADE\` over the unix socket; the gap is the
longest time a pinging client waited around an upgrade (the last reply
of the old process to the first of the new), the pause the one the new
process reports (\`pause_ms\`: from the freeze to its taking over), both
in ms, median and largest of the rounds; the state's size in bytes.
Targets: largest gap at most 50 ms with 100 connections, 500 ms with
10,000, both with 100,000 locks.$compared

$head
$rows<!-- bench/upgrade.sh: end -->"
printf '%s\n' "$section"
if [ "$write" = 1 ]; then
	python3 - "$RESULTS" "$section" <<'EOF'
import re, sys
path, section = sys.argv[1], sys.argv[2]
text = open(path).read()
pat = re.compile(r"<!-- bench/upgrade.sh: begin -->.*?<!-- bench/upgrade.sh: end -->", re.S)
text = pat.sub(lambda m: section, text) if pat.search(text) else text.rstrip("\n") + "\n\n" + section + "\n"
open(path, "w").write(text)
EOF
fi
