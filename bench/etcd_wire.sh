#!/bin/bash
# bench/etcd_wire.sh [--write]: what keylockd's etcd traffic costs the
# members per LOCK/UNLOCK cycle, by transport and by shape (issue 23):
# bench/etcd_wire.py's replay of that traffic on one private 3-member
# cluster on loopback, in variants run alternately, ROUNDS (3) times each
# for DURATION (5) s, medians [min-max]. A variant is
# NAME:TRANSPORT:WATCHERS:BATCH:VALUE_LEN[:RATE] (VALUE_LEN -1: keylockd's
# value; WATCHERS 1 or 2: front ends, each watching through its own
# member; RATE: cycles/s, RATE's 1000 when left out); VARIANTS overrides
# the list. INFLIGHT (2) as in etcd_wire.py. Needs etcd (Debian: etcd-server) and a python3 with grpc
# (python3-grpcio; WIRE_PYTHON). Prints a Markdown section; with --write
# it replaces its own section of bench/ETCD_RESULTS.md (RESULTS), the rest
# of that file kept.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
WRITE=0
for a in "$@"; do
	case $a in
	--write) WRITE=1 ;;
	*) echo "usage: etcd_wire.sh [--write]" >&2; exit 2 ;;
	esac
done
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
RESULTS=${RESULTS:-$here/ETCD_RESULTS.md}
VARIANTS=${VARIANTS:-"json:json:2:26:-1 grpc:grpc:2:26:-1 \
json-1-watch:json:1:26:-1 grpc-1-watch:grpc:1:26:-1 \
json-value-8:json:2:26:8 json-value-200:json:2:26:200 \
json-batch-52:json:2:52:-1 grpc-batch-52:grpc:2:52:-1 \
json-rate-2000:json:2:26:-1:2000 grpc-rate-2000:grpc:2:26:-1:2000"}
export RATE=${RATE:-1000} INFLIGHT=${INFLIGHT:-2}

command -v etcd >/dev/null || { echo "etcd_wire.sh: no etcd" \
    "(Debian: etcd-server)" >&2; exit 1; }
py=
for p in ${WIRE_PYTHON:-python3 /usr/bin/python3}; do
	if "$p" -c 'import grpc' 2>/dev/null; then
		py=$p
		break
	fi
done
[ -n "$py" ] || { echo "etcd_wire.sh: needs a python3 with grpc" \
    "(Debian: python3-grpcio)" >&2; exit 1; }

TMP=$(mktemp -d "${TMPDIR:-/tmp}/keylock-etcd-wire.XXXXXX")
cleanup() {
	trap - EXIT INT TERM HUP
	sh "$top/tests/etcd/cluster.sh" "$TMP/etcd" down || true
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

endpoints=$(sh "$top/tests/etcd/cluster.sh" "$TMP/etcd" start 3 --watch $$)
m1=${endpoints%%,*}
rest=${endpoints#*,}
m2=${rest%%,*}
pids=$(cat "$TMP"/etcd/m[123].pid | paste -sd, -)

load_before=$(cut -d ' ' -f 1-3 /proc/loadavg)
for round in $(seq "$ROUNDS"); do
	order=$VARIANTS
	[ $((round % 2)) -eq 0 ] &&
	    order=$(echo "$VARIANTS" | tr ' ' '\n' | tac | tr '\n' ' ')
	for v in $order; do
		IFS=: read -r name tr watchers batch vlen rate <<EOF2
$v
EOF2
		weps=$m1
		[ "$watchers" = 2 ] && weps=$m1,$m2
		RATE=${rate:-$RATE} BATCH=$batch VALUE_LEN=$vlen "$py" "$here/etcd_wire.py" "$tr" \
		    "$m1" "$weps" "$pids" "$DURATION" >"$TMP/$name.$round.json"
	done
	echo "etcd_wire.sh: round $round done" >&2
done
load_after=$(cut -d ' ' -f 1-3 /proc/loadavg)

rev=$(cd "$top" && git describe --always --dirty 2>/dev/null || echo unknown)
etcdv=$(etcd --version | sed -n 's/^etcd Version: //p')
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
perl -MJSON::PP -e '
my ($tmp, $rounds, $variants, $dur, $rev, $etcdv, $cpu, $ncpu, $l0, $l1,
    $rate, $infl) = @ARGV;
sub med { my @v = sort { $a <=> $b } @_; return $v[int($#v / 2)]; }
sub rd { my $f = shift; open(my $h, "<", $f) or die "$f: $!";
    local $/; my $j = decode_json(<$h>); close($h); return $j; }
print "<!-- bench/etcd_wire.sh: begin -->\n";
print "## What keylockd'"'"'s etcd traffic costs the members, by transport ",
    "and shape\n\n";
print "From `bench/etcd_wire.sh` at $rev: etcd $etcdv, three members on ",
    "loopback, bench/etcd_wire.py on the same machine ($cpu, $ncpu CPUs, ",
    "shared), $rounds rounds of $dur s, the variants alternately, medians ",
    "[min-max]. Each variant replays keylockd'"'"'s etcd traffic at c=50 ",
    "(bench/etcd_compare.sh'"'"'s counters): transactions through m1, each ",
    "with the fence compare, BATCH puts under a lease (LOCKs) and the ",
    "deletes of the previous transaction'"'"'s puts (UNLOCKs), $infl in ",
    "flight, paced at $rate cycles/s unless the variant says otherwise ",
    "(the cycles/s column says what the client reached); and a prefix ",
    "watch per front end ",
    "(through m1, and m2), reading every event. A cycle is a put and its ",
    "delete; the members'"'"' CPU is their user + system time over the run. ",
    "Load average (1, 5, 15 min) before: $l0; after: $l1.\n\n";
print "| variant | transport | watches | batch | value bytes | paced at | cycles/s | ",
    "members'"'"' CPU ms per cycle | watch events per cycle | client bytes ",
    "per cycle |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
for my $v (split " ", $variants) {
    my ($name, $tr) = split /:/, $v;
    my (@cpu, @cps, @ev, @by, $j);
    for my $r (1 .. $rounds) {
        $j = rd("$tmp/$name.$r.json");
        die "$name round $r: no cycles\n" unless $j->{cycles} > 0;
        die "$name round $r: a transaction failed\n" if $j->{txns_failed};
        push @cpu, $j->{members_cpu_ms_per_cycle};
        push @cps, $j->{cycles_per_s};
        push @ev, $j->{watch_events} / $j->{cycles};
        push @by, $j->{client_bytes_per_cycle};
    }
    my @s = sort { $a <=> $b } @cpu;
    printf "| %s | %s | %d | %d | %d | %.0f | %.0f | %.3f [%.3f-%.3f] | %.2f | ",
        $name, $tr eq "json" ? "JSON gateway" : "gRPC", $j->{watchers},
        $j->{batch}, $j->{value_len}, $j->{rate}, med(@cps), med(@cpu), $s[0], $s[-1],
        med(@ev);
    printf "%.0f |\n", med(@by);
}
print "<!-- bench/etcd_wire.sh: end -->\n";
' "$TMP" "$ROUNDS" "$VARIANTS" "$DURATION" "$rev" "$etcdv" "$cpu" "$(nproc)" \
    "$load_before" "$load_after" "$RATE" "$INFLIGHT" >"$TMP/section.md"
if [ "$WRITE" = 1 ]; then
	perl "$here/section.pl" etcd_wire.sh "$RESULTS" "$TMP/section.md"
	echo "etcd_wire.sh: wrote its section of $RESULTS" >&2
fi
cat "$TMP/section.md"
