#!/bin/bash
# bench/etcd_compare.sh [BUILDDIR]: keylockd front ends in backend etcd
# against etcd's own lock API (/v3/lock/lock + /v3/lock/unlock), side by
# side on one private 3-member etcd cluster on loopback, with the same
# client (keylock-bench, --etcd for etcd's API), and bench/ETCD_RESULTS.md
# from the figures (issue 11).
#
# It builds nothing: run `make` first (a build without sanitizers). Two
# front ends run on the cluster, each with its own member first in its
# endpoints (the first front end m1, the second m2), as on hosts that each
# run a member and a front end. A row is WORK:CLIENTS[:SPREAD]: without
# SPREAD the keylockd runs use the first front end (the second watches, as
# a real deployment's would) and the etcd runs m1; with 2, the clients
# take both front ends in turn against etcd's API on m1 and m2 in turn
# (keylock-bench -S A,B). ROWS overrides the rows. Each row runs ROUNDS
# times (3), alternately keylockd and etcd (reversed in even rounds); a
# figure is the median of the rounds with their min-max. DURATION (3) is
# seconds per run. The writes per cycle are etcd revisions per cycle,
# from etcd's revision before and after each run. RESULTS names the
# output; KEEP=1 keeps the raw JSON. With --write, the same section also
# replaces the one between its markers in bench/RESULTS.md (RESULTS_MD),
# which bench/compare.sh keeps when it rewrites that file. The section
# gives the machine's load average before and after the runs.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
WRITE=0
builddir=.
for a in "$@"; do
	case $a in
	--write) WRITE=1 ;;
	-*) echo "usage: etcd_compare.sh [BUILDDIR] [--write]" >&2; exit 2 ;;
	*) builddir=$a ;;
	esac
done
build=$(cd "$builddir" && pwd)
KEYLOCKD=${KEYLOCKD:-$build/src/keylockd}
KEYLOCK_BENCH=${KEYLOCK_BENCH:-$build/tools/keylock-bench}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-3}
RESULTS=${RESULTS:-$here/ETCD_RESULTS.md}
RESULTS_MD=${RESULTS_MD:-$here/RESULTS.md}
ROWS=${ROWS:-"lock-unlock:50 lock-unlock:50:2 contended:4 contended:50"}

for p in "$KEYLOCKD" "$KEYLOCK_BENCH"; do
	[ -x "$p" ] || { echo "etcd_compare.sh: $p: not found" >&2; exit 1; }
done
command -v etcd >/dev/null || { echo "etcd_compare.sh: no etcd" \
    "(Debian: etcd-server)" >&2; exit 1; }
perl -MJSON::PP -e 1 2>/dev/null ||
    { echo "etcd_compare.sh: needs perl's JSON::PP" >&2; exit 1; }

TMP=$(mktemp -d "${TMPDIR:-/tmp}/keylock-etcd-compare.XXXXXX")
PIDS=
cleanup() {
	trap - EXIT INT TERM HUP
	for p in $PIDS; do
		kill -TERM "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	sh "$top/tests/etcd/cluster.sh" "$TMP/etcd" down || true
	if [ "${KEEP:-0}" = 1 ]; then
		echo "etcd_compare.sh: raw results kept in $TMP" >&2
	else
		rm -rf "$TMP"
	fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

endpoints=$(sh "$top/tests/etcd/cluster.sh" "$TMP/etcd" start 3 --watch $$)
member1=${endpoints%%,*}
member1=${member1#http://}
# the second front end's endpoints: m2 first, then m3, m1
endpoints2=${endpoints#*,},${endpoints%%,*}
member2=${endpoints2%%,*}
member2=${member2#http://}

for i in 1 2; do
	eps=$endpoints
	[ "$i" = 2 ] && eps=$endpoints2
	"$KEYLOCKD" --config /dev/null --bind 127.0.0.1 --port 0 \
	    --port-file "$TMP/port$i" --unix "" --state-dir "$TMP" \
	    --backend etcd --etcd-endpoints "$eps" \
	    --max-clients 100000 >"$TMP/frontend$i.log" 2>&1 &
	PIDS="$PIDS $!"
	for _ in $(seq 400); do
		grep -q '^[0-9]' "$TMP/port$i" 2>/dev/null && break
		sleep 0.05
	done
	grep -q '^[0-9]' "$TMP/port$i" ||
	    { cat "$TMP/frontend$i.log" >&2; exit 1; }
done
frontend1=127.0.0.1:$(head -n 1 "$TMP/port1")
frontend2=127.0.0.1:$(head -n 1 "$TMP/port2")

revision() {
	curl -s -X POST -d '{"key":"eA==","count_only":true}' \
	    "http://$member1/v3/kv/range" |
	    perl -MJSON::PP -e 'print decode_json(join("", <STDIN>))->{header}{revision}'
}

# leftovers: how many keys outside the front ends' prefix (keylock/) etcd
# holds: etcd's lock API's keys of a run whose leases outlived it.
leftovers() {
	local a b
	a=$(curl -s -X POST -d '{"key":"AA==","range_end":"a2V5bG9jay8=","count_only":true}' \
	    "http://$member1/v3/kv/range" |
	    perl -MJSON::PP -e 'print decode_json(join("", <STDIN>))->{count} // 0')
	b=$(curl -s -X POST -d '{"key":"a2V5bG9jazA=","range_end":"AA==","count_only":true}' \
	    "http://$member1/v3/kv/range" |
	    perl -MJSON::PP -e 'print decode_json(join("", <STDIN>))->{count} // 0')
	echo $((a + b))
}

# An etcd run starts on a cluster without another run's lock keys (their
# leases last the run plus a minute if a revoke was lost): waits up to
# 90 s for them to go, and says so.
wait_clean() {
	local n i
	for i in $(seq 900); do
		n=$(leftovers)
		[ "$n" -eq 0 ] && return
		[ "$i" -eq 1 ] && echo "etcd_compare.sh: $n lock keys of an" \
		    "earlier etcd run left; waiting for their leases" >&2
		sleep 0.1
	done
	echo "etcd_compare.sh: $n lock keys still there after 90 s" >&2
}

# run SYSTEM WORK CONNS SPREAD ROUND: one run, its JSON in
# $TMP/SYSTEM.WORK.CONNS.SPREAD.ROUND
run() {
	local sys=$1 work=$2 conns=$3 spread=$4 round=$5 out before after
	local ke=$frontend1 ee=$member1
	if [ "$spread" = 2 ]; then
		ke=$frontend1,$frontend2
		ee=$member1,$member2
	fi
	out=$TMP/$sys.$work.$conns.$spread.$round.json
	if [ "$sys" = etcd ]; then wait_clean; fi
	before=$(revision)
	if [ "$sys" = etcd ]; then
		"$KEYLOCK_BENCH" --etcd -S "$ee" -w "$work" -c "$conns" \
		    -t "$DURATION" --json --no-progress >"$out"
	else
		"$KEYLOCK_BENCH" -S "$ke" -w "$work" -c "$conns" \
		    -t "$DURATION" --json --no-progress >"$out"
	fi
	after=$(revision)
	echo "$before $after" >"$out.rev"
}

load_before=$(cut -d ' ' -f 1-3 /proc/loadavg)
for round in $(seq "$ROUNDS"); do
	for row in $ROWS; do
		IFS=: read -r work conns spread <<EOF
$row
EOF
		spread=${spread:-1}
		if [ $((round % 2)) -eq 1 ]; then
			run keylockd "$work" "$conns" "$spread" "$round"
			run etcd "$work" "$conns" "$spread" "$round"
		else
			run etcd "$work" "$conns" "$spread" "$round"
			run keylockd "$work" "$conns" "$spread" "$round"
		fi
		echo "round $round: $row done" >&2
	done
done

load_after=$(cut -d ' ' -f 1-3 /proc/loadavg)
rev=$(cd "$top" && git describe --always --dirty 2>/dev/null || echo unknown)
etcdv=$(etcd --version | sed -n 's/^etcd Version: //p')
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
ncpu=$(nproc)
perl -MJSON::PP -e '
my ($tmp, $rounds, $rows, $dur, $rev, $etcdv, $cpu, $ncpu, $l0, $l1) =
    @ARGV;
my %target = ("lock-unlock:50" => 10, "lock-unlock:50:2" => 10,
    "contended:4" => 10, "contended:50" => 2);
my (@verdicts, @stalls);
sub med { my @v = sort { $a <=> $b } @_; return $v[int($#v / 2)]; }
sub rd { my $f = shift; open(my $h, "<", $f) or die "$f: $!";
    local $/; my $j = decode_json(<$h>); close($h); return $j; }
print "<!-- bench/etcd_compare.sh: begin -->\n";
print "## keylockd backend etcd against etcd'"'"'s lock API\n\n";
print "From `bench/etcd_compare.sh` at $rev: etcd $etcdv, three members ",
    "on loopback, two keylockd front ends (the first with m1 first in its ",
    "endpoints, the second with m2; clients on the first, or taking both ",
    "in turn where the row says so, against etcd'"'"'s API on m1, or m1 ",
    "and m2 in turn), ",
    "keylock-bench on the same machine ($cpu, $ncpu CPUs, shared), ",
    "$rounds rounds of $dur s, medians [min-max]. A cycle is LOCK + ",
    "UNLOCK through keylockd, /v3/lock/lock + /v3/lock/unlock (each ",
    "connection with its lease) through etcd. Load average (1, 5, 15 ",
    "min) before the runs: $l0; after: $l1.\n\n";
print "| workload | clients | keylockd cycles/s | etcd cycles/s | ",
    "keylockd/etcd | keylockd p50/p99 ms | etcd p50/p99 ms | ",
    "etcd writes per cycle, keylockd / etcd |\n";
print "|---|---:|---:|---:|---:|---:|---:|---:|\n";
for my $row (split " ", $rows) {
    my ($work, $conns, $spread) = split /:/, $row;
    $spread //= 1;
    my (%c, %p50, %p99, %w, @ratio);
    for my $r (1 .. $rounds) {
        for my $s ("keylockd", "etcd") {
            my $f = "$tmp/$s.$work.$conns.$spread.$r.json";
            my $j = rd($f);
            die "$f: not ok: $j->{failure}\n" unless $j->{ok};
            push @{$c{$s}}, $j->{cycles_per_s};
            push @{$p50{$s}}, $j->{latency_ms}{all}{p50};
            push @{$p99{$s}}, $j->{latency_ms}{all}{p99};
            open(my $h, "<", "$f.rev") or die; my ($b, $a) = split " ",
                <$h>; close($h);
            push @{$w{$s}}, $j->{cycles} > 0 ? ($a - $b) / $j->{cycles} : 0;
        }
        push @ratio, $c{etcd}[-1] > 0 ? $c{keylockd}[-1] / $c{etcd}[-1] : 0;
    }
    my $stalled = 0;
    for my $s ("keylockd", "etcd") {
        my @v = @{$c{$s}};
        my $max = (sort { $b <=> $a } @v)[0];
        for my $r (1 .. $rounds) {
            next unless $v[$r - 1] < $max / 10;
            push @stalls, sprintf("%s, %s %d clients%s, round %d: " .
                "%.0f cycles/s against %.0f in its best round", $s, $work,
                $conns, $spread == 2 ? " over two" : "", $r, $v[$r - 1],
                $max);
            $stalled++;
        }
    }
    my @k = sort { $a <=> $b } @{$c{keylockd}};
    my @e = sort { $a <=> $b } @{$c{etcd}};
    printf "| %s | %d | %.0f [%.0f-%.0f] | %.0f [%.0f-%.0f] | %.1f | " .
        "%.2f / %.2f | %.2f / %.2f | %.2f / %.2f |\n",
        ($work eq "contended" ? "one busy key" : "distinct keys") .
        ($spread == 2 ? ", both front ends (etcd: m1, m2)" : ""), $conns,
        med(@k), $k[0], $k[-1], med(@e), $e[0], $e[-1], med(@ratio),
        med(@{$p50{keylockd}}), med(@{$p99{keylockd}}),
        med(@{$p50{etcd}}), med(@{$p99{etcd}}),
        med(@{$w{keylockd}}), med(@{$w{etcd}});
    push @verdicts, sprintf("| %s, %d clients: keylockd/etcd >= %d | " .
        "%.1f | %s |\n", ($work eq "contended" ?
        "hand-offs/s on one busy key" : "cycles/s on distinct keys") .
        ($spread == 2 ? " over both front ends" : ""),
        $conns, $target{$row}, med(@ratio),
        $stalled ? "not judged: stalled rounds" :
        med(@ratio) >= $target{$row} ? "met" : "not met")
        if exists $target{$row};
}
print "\n| target (issue 11) | keylockd/etcd, median of the rounds | |\n",
    "|---|---:|---|\n", @verdicts;
print "\nStalled rounds (under a tenth of the best round of the same row; ",
    "a median over them is not a figure of that system): ",
    join("; ", @stalls), ".\n" if @stalls;
print "<!-- bench/etcd_compare.sh: end -->\n";
' "$TMP" "$ROUNDS" "$ROWS" "$DURATION" "$rev" "$etcdv" "$cpu" "$ncpu" \
    "$load_before" "$load_after" >"$TMP/section.md"
cp "$TMP/section.md" "$RESULTS"
if [ "$WRITE" = 1 ]; then
	# the section between its markers, or appended
	perl -e '
my ($file, $secfile) = @ARGV;
my ($b, $e) = ("<!-- bench/etcd_compare.sh: begin -->",
    "<!-- bench/etcd_compare.sh: end -->");
local $/;
open(my $s, "<", $secfile) or die "$secfile: $!"; my $sec = <$s>; close($s);
my $text = "";
if (open(my $h, "<", $file)) { $text = <$h>; close($h); }
if ($text =~ /\Q$b\E.*?\Q$e\E\n?/s) {
    $text =~ s/\Q$b\E.*?\Q$e\E\n?/$sec/s;
} else {
    $text =~ s/\n*\z/\n\n/ if $text ne "";
    $text .= $sec;
}
open(my $o, ">", "$file.tmp") or die "$file.tmp: $!"; print $o $text;
close($o); rename("$file.tmp", $file) or die "$file: $!";
' "$RESULTS_MD" "$TMP/section.md"
	echo "etcd_compare.sh: wrote its section of $RESULTS_MD" >&2
fi
cat "$RESULTS"
