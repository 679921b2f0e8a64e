#!/bin/bash
# bench/refresh.sh [BUILDDIR]: what one REFRESH costs (a client keeping
# its lock alive past its ttl), through backend local and through backend
# etcd, with keylock-bench -w refresh, and its section of
# bench/ETCD_RESULTS.md from the figures.
#
# It builds nothing: run `make` first (a build without sanitizers). One
# keylockd runs backend local; a private 3-member etcd cluster on loopback
# (tests/etcd/cluster.sh) carries two front ends (the first with m1 first
# in its endpoints, the second with m2 first, as on hosts that each run a
# member and a front end); the clients use the first, and the second
# watches, as a real deployment's would. A row is CLIENTS:PIPELINE[:2]
# (ROWS, default "50:1 50:16 50:1:2"); with :2 the clients take both
# front ends in turn (keylock-bench -S A,B), through etcd only. Each row
# runs ROUNDS times (3), alternately local and etcd (reversed in even
# rounds), DURATION seconds (5) each, with locks of TTL ms (30000); a
# figure is the median of the rounds with their min-max. Through etcd, each run also reads, before it and a
# second after it, etcd's revision, the puts m1 applied and the Txn calls
# the members handled (their /metrics), and the CPU time
# (/proc/PID/stat) the three members used; each over the REFRESHes etcd
# took (the puts, but for the setup's one TRYLOCK put per client) gives a
# figure per REFRESH, the setup's and the end's few transactions (the
# TRYLOCKs, and the deletes when the clients leave) included.
# KEYLOCKD_OPTS are more options for the front ends (e.g.
# --etcd-connections 16), named in the section. RESULTS names the output
# (bench/ETCD_RESULTS.md), whose section between its markers is replaced;
# KEEP=1 keeps the raw JSON.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
builddir=${1:-.}
build=$(cd "$builddir" && pwd)
KEYLOCKD=${KEYLOCKD:-$build/src/keylockd}
KEYLOCK_BENCH=${KEYLOCK_BENCH:-$build/tools/keylock-bench}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
TTL=${TTL:-30000}
ROWS=${ROWS:-"50:1 50:16 50:1:2"}
RESULTS=${RESULTS:-$here/ETCD_RESULTS.md}
KEYLOCKD_OPTS=${KEYLOCKD_OPTS:-}

for p in "$KEYLOCKD" "$KEYLOCK_BENCH"; do
	[ -x "$p" ] || { echo "refresh.sh: $p: not found" >&2; exit 1; }
done
command -v curl >/dev/null || { echo "refresh.sh: needs curl" >&2; exit 1; }
NAME=refresh.sh
# shellcheck source=bench/etcd_lib.sh
. "$here/etcd_lib.sh"
etcd_bench_need
etcd_bench_start refresh
member1=${endpoints%%,*}

# daemon NAME OPTIONS...: a keylockd of this build (etcd_bench_keylockd)
daemon() {
	local name=$1
	shift
	etcd_bench_keylockd "$name" "$KEYLOCKD" "$@"
}
daemon local
# shellcheck disable=SC2086 # KEYLOCKD_OPTS: options, split
daemon etcd1 --backend etcd --etcd-endpoints "$endpoints" \
    --etcd-prefix keylock/ $KEYLOCKD_OPTS
# shellcheck disable=SC2086
daemon etcd2 --backend etcd --etcd-endpoints "$endpoints2" \
    --etcd-prefix keylock/ $KEYLOCKD_OPTS

# ticks: the CPU ticks (user + system) the three members used so far.
ticks() {
	local p t=0
	for p in $members; do
		# utime and stime: the 12th and 13th fields after the ")"
		t=$((t + $(sed 's/.*) //' "/proc/$p/stat" |
		    awk '{ print $12 + $13 }')))
	done
	echo "$t"
}

# etcd_now: etcd's revision, the puts m1 applied, the Txn calls the three
# members handled, and their CPU ticks, one a line.
etcd_now() {
	local m
	curl -s -X POST -d '{"key":"eA==","count_only":true}' \
	    "$member1/v3/kv/range" | perl -MJSON::PP -e \
	    'print decode_json(join("", <STDIN>))->{header}{revision}, "\n"'
	curl -s "$member1/metrics" |
	    awk '/^etcd_mvcc_put_total / { printf "%.0f\n", $NF }'
	for m in $(echo "$endpoints" | tr ',' ' '); do
		curl -s "$m/metrics"
	done | awk '/^grpc_server_handled_total\{.*grpc_method="Txn"/ {
	    n += $NF } END { printf "%.0f\n", n }'
	ticks
}

# run SYSTEM CLIENTS PIPELINE SPREAD ROUND: one run, its JSON in
# $TMP/SYSTEM.CLIENTS.PIPELINE.SPREAD.ROUND.json; through etcd, etcd_now
# before it and a second after it (its deletes applied) in .etcd
run() {
	local sys=$1 c=$2 p=$3 spread=$4 r=$5 out addr
	out=$TMP/$sys.$c.$p.$spread.$r.json
	addr=$(cat "$TMP/${sys/etcd/etcd1}.addr")
	[ "$spread" = 2 ] && addr=$addr,$(cat "$TMP/etcd2.addr")
	[ "$sys" = etcd ] && etcd_now | tr '\n' ' ' >"$out.etcd"
	"$KEYLOCK_BENCH" -S "$addr" -w refresh \
	    --ttl "$TTL" -c "$c" -P "$p" -t "$DURATION" --json --no-progress \
	    >"$out"
	if [ "$sys" = etcd ]; then
		sleep 1
		etcd_now | tr '\n' ' ' >>"$out.etcd"
	fi
}

load_before=$(cut -d ' ' -f 1-3 /proc/loadavg)
for round in $(seq "$ROUNDS"); do
	for row in $ROWS; do
		IFS=: read -r c p spread <<EOF
$row
EOF
		spread=${spread:-1}
		order="local etcd"
		[ $((round % 2)) -eq 0 ] && order="etcd local"
		[ "$spread" = 2 ] && order=etcd
		for sys in $order; do
			run "$sys" "$c" "$p" "$spread" "$round"
		done
		echo "round $round: $row done" >&2
	done
done
load_after=$(cut -d ' ' -f 1-3 /proc/loadavg)

rev=$(cd "$top" && git describe --always --dirty 2>/dev/null || echo unknown)
etcdv=$(etcd --version | sed -n 's/^etcd Version: //p')
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
tmpfs=$(stat -f -c %T "$TMP")
perl -MJSON::PP -e '
my ($tmp, $rounds, $rows, $dur, $ttl, $rev, $etcdv, $cpu, $ncpu, $l0, $l1,
    $clk, $fs, $kopts) = @ARGV;
sub med { my @v = sort { $a <=> $b } @_; return $v[int($#v / 2)]; }
sub rng { my @v = sort { $a <=> $b } @_;
    return sprintf("%.0f [%.0f-%.0f]", med(@v), $v[0], $v[-1]); }
sub rd { my $f = shift; open(my $h, "<", $f) or die "$f: $!";
    local $/; my $j = decode_json(<$h>); close($h); return $j; }
my $third = $ttl / 3000;
print "<!-- bench/refresh.sh: begin -->\n";
print "## What one REFRESH costs, backend local and backend etcd\n\n";
print "From `bench/refresh.sh` at $rev: keylock-bench -w refresh (each ",
    "client takes a lock of its own with ttl=$ttl, then sends `REFRESH key ",
    "ttl=$ttl` over and over, P in flight), against one keylockd in ",
    "backend local and against the first of two front ends in backend etcd ",
    "(or both in turn, where the row says so) on a private 3-member etcd ",
    "$etcdv cluster on loopback (data on $fs; the front ends with ",
    $kopts ne "" ? "`$kopts`" : "keylockd'"'"'s defaults, 4 etcd connections",
    "), ",
    "on the same machine ($cpu, $ncpu CPUs, shared; load average $l0 ",
    "before, $l1 after), $rounds rounds of $dur s, local and etcd ",
    "alternately, medians [min-max]. Every REFRESH answered OK (an error ",
    "reply fails the script). The command: `",
    $kopts ne "" ? "KEYLOCKD_OPTS=\"$kopts\" " : "",
    "ROUNDS=$rounds DURATION=$dur ",
    "TTL=$ttl ROWS=\"$rows\" bench/refresh.sh BUILDDIR`, each run ",
    "`keylock-bench -S FRONTEND[,FRONTEND2] -w refresh --ttl $ttl -c C ",
    "-P P -t $dur ",
    "--json`. Locks carried: the locks whose refreshers, one REFRESH ",
    "every third of a ${ttl} ms ttl (${third} s), the REFRESH/s of the ",
    "row would keep alive (REFRESH/s times $third). Through etcd, per ",
    "REFRESH that etcd took (the puts m1 applied, but for the setup'"'"'s ",
    "TRYLOCK put per client; more than the REFRESHes answered in the run ",
    "by those in flight at its end), over the whole run, its setup'"'"'s ",
    "and its end'"'"'s few transactions included: etcd revisions (writes), ",
    "the Txn calls the members handled, and the three members'"'"' CPU ",
    "time (user + system); and the REFRESHes etcd took over those ",
    "answered.\n\n";
print "| backend | clients | P | REFRESH/s | p50 ms | p99 ms | locks ",
    "carried (ttl ${ttl} ms) | etcd writes | Txn calls | ",
    "members'"'"' CPU ms | taken / answered |\n",
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
for my $row (split " ", $rows) {
    my ($c, $p, $spread) = split /:/, $row;
    $spread //= 1;
    for my $sys ($spread == 2 ? ("etcd") : ("local", "etcd")) {
        my (@rps, @p50, @p99, @w, @u, @t, @cpu);
        for my $r (1 .. $rounds) {
            my $f = "$tmp/$sys.$c.$p.$spread.$r.json";
            my $j = rd($f);
            die "$sys $row round $r: not ok: $j->{failure}\n" unless $j->{ok};
            die "$sys $row round $r: $j->{errors} error replies, first: " .
                "$j->{first_error}\n" if $j->{errors};
            my $answered = $j->{latency_ms}{REFRESH}{count} or
                die "$sys $row round $r: no REFRESH\n";
            push @rps, $j->{requests_per_s};
            push @p50, $j->{latency_ms}{REFRESH}{p50};
            push @p99, $j->{latency_ms}{REFRESH}{p99};
            next unless $sys eq "etcd";
            open(my $h, "<", "$f.etcd") or die "$f.etcd: $!";
            my @a = split " ", <$h>;
            close($h);
            die "$f.etcd: odd\n" unless @a == 8;
            # the REFRESHes etcd took: its puts, the TRYLOCKs'"'"' aside
            my $n = $a[5] - $a[1] - $c;
            die "$sys $row round $r: etcd took no REFRESH\n"
                unless $n > 0;
            push @w, ($a[4] - $a[0]) / $n;
            push @t, ($a[6] - $a[2]) / $n;
            push @cpu, ($a[7] - $a[3]) * 1000 / $clk / $n;
            push @u, $n / $answered;
        }
        printf "| %s | %d | %d | %s | %.3f | %.3f | %.0f | %s |\n",
            $sys eq "local" ? "local" : $spread == 2 ?
            "etcd, both front ends" : "etcd", $c, $p,
            rng(@rps), med(@p50), med(@p99), med(@rps) * $third,
            join(" | ", map { @$_ ? sprintf("%.3f", med(@$_)) : "-" }
            \@w, \@t, \@cpu, \@u);
    }
}
print "<!-- bench/refresh.sh: end -->\n";
' "$TMP" "$ROUNDS" "$ROWS" "$DURATION" "$TTL" "$rev" "$etcdv" "$cpu" \
    "$(nproc)" "$load_before" "$load_after" "$(getconf CLK_TCK)" "$tmpfs" \
    "$KEYLOCKD_OPTS" >"$TMP/section.md"
perl "$here/section.pl" refresh.sh "$RESULTS" "$TMP/section.md"
cat "$TMP/section.md"
