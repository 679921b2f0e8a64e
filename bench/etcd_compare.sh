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
# from etcd's revision before and after each run; the members' CPU per
# cycle is the user and system time (/proc/PID/stat) the three members
# used during a run, over its cycles, and the estimate for members on
# their own cores is the cycles per second at which the busiest member
# would use one core whole (both machine-independent, unlike cycles/s
# on a shared 2-core machine). With BEFORE=KEYLOCKD (another build's
# keylockd, e.g. main's before a change), two more front ends of that
# binary run on the same cluster under their own prefix (kbefore/,
# idle but for their watch and lease while the others run) and every row
# runs it too, as "before", in the same rounds. KEYLOCKD_OPTS and
# BEFORE_OPTS are more options for each one's front ends (e.g. the same
# binary twice with another --etcd-connections), named in the section.
# RESULTS names the
# output; KEEP=1 keeps the raw JSON. With --write, the same section also
# replaces the one between its markers in bench/RESULTS.md (RESULTS_MD),
# which bench/compare.sh keeps when it rewrites that file. The section
# gives the machine's load average before and after the runs; it
# replaces its own section of RESULTS (between the same markers) and
# keeps the rest of that file.
#
# Every run also reads etcd's own counters (/metrics) before and after:
# gRPC calls and stream messages per method, watch events, gRPC bytes,
# the puts, deletes and transactions applied; per cycle in a table.
# PERF=1 records the members with `perf record -g` (PERF_FREQ, 499 Hz)
# during the runs of PERF_ROWS (lock-unlock:50) and adds where their CPU
# goes, by Go package and by goroutine (bench/etcd_perf.py, which names
# the functions of Debian's stripped etcd from its .gopclntab). WIRE=1
# then replays keylockd's etcd traffic (WIRE_BATCH puts and deletes a
# transaction, 26; WIRE_RATE cycles/s, 1000; WIRE_INFLIGHT, 2) over the
# JSON gateway and over gRPC, alternately, ROUNDS times each, on the same
# cluster (bench/etcd_wire.py; needs python3-grpcio, WIRE_PYTHON), and
# adds the members' CPU per cycle of each transport (issue 23).
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
BEFORE=${BEFORE:-}
KEYLOCKD_OPTS=${KEYLOCKD_OPTS:-}
BEFORE_OPTS=${BEFORE_OPTS:-}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-3}
RESULTS=${RESULTS:-$here/ETCD_RESULTS.md}
RESULTS_MD=${RESULTS_MD:-$here/RESULTS.md}
ROWS=${ROWS:-"lock-unlock:50 lock-unlock:50:2 contended:4 contended:50"}
PERF=${PERF:-0}
PERF_ROWS=${PERF_ROWS:-lock-unlock:50}
PERF_FREQ=${PERF_FREQ:-499}
WIRE=${WIRE:-0}
if [ "$WIRE" = 1 ]; then
	wirepy=
	for py in ${WIRE_PYTHON:-python3 /usr/bin/python3}; do
		if "$py" -c 'import grpc' 2>/dev/null; then
			wirepy=$py
			break
		fi
	done
	[ -n "$wirepy" ] || { echo "etcd_compare.sh: WIRE=1 needs a" \
	    "python3 with grpc (Debian: python3-grpcio)" >&2; exit 1; }
	export BATCH=${WIRE_BATCH:-26} RATE=${WIRE_RATE:-1000}
	export INFLIGHT=${WIRE_INFLIGHT:-2}
fi
if [ "$PERF" = 1 ]; then
	command -v perf >/dev/null ||
	    { echo "etcd_compare.sh: PERF=1 needs perf" >&2; exit 1; }
	python3 -c 1 2>/dev/null ||
	    { echo "etcd_compare.sh: PERF=1 needs python3" >&2; exit 1; }
fi

for p in "$KEYLOCKD" "$KEYLOCK_BENCH" ${BEFORE:+"$BEFORE"}; do
	[ -x "$p" ] || { echo "etcd_compare.sh: $p: not found" >&2; exit 1; }
done
NAME=etcd_compare.sh
# shellcheck source=bench/etcd_lib.sh
. "$here/etcd_lib.sh"
etcd_bench_need
etcd_bench_start etcd-compare
member1=${endpoints%%,*}
member1=${member1#http://}
# the second front end's endpoints: m2 first, then m3, m1
member2=${endpoints2%%,*}
member2=${member2#http://}

# frontend NAME BINARY PREFIX I OPTIONS: front end I (1: m1 first, 2: m2
# first) of a system (etcd_bench_keylockd).
frontend() {
	local name=$1 bin=$2 prefix=$3 i=$4 eps=$endpoints opts=$5
	[ "$i" = 2 ] && eps=$endpoints2
	# shellcheck disable=SC2086 # opts: options, split
	etcd_bench_keylockd "$name" "$bin" --backend etcd \
	    --etcd-endpoints "$eps" --etcd-prefix "$prefix" $opts
}
frontend keylockd1 "$KEYLOCKD" keylock/ 1 "$KEYLOCKD_OPTS"
frontend keylockd2 "$KEYLOCKD" keylock/ 2 "$KEYLOCKD_OPTS"
SYSTEMS="keylockd etcd"
if [ -n "$BEFORE" ]; then
	frontend before1 "$BEFORE" kbefore/ 1 "$BEFORE_OPTS"
	frontend before2 "$BEFORE" kbefore/ 2 "$BEFORE_OPTS"
	SYSTEMS="keylockd before etcd"
fi
clk=$(getconf CLK_TCK)

# cpu PID...: user + system CPU ticks of each process, one a line.
cpu() {
	local p
	for p in "$@"; do
		# the fields after the command's closing parenthesis: utime is
		# the 12th, stime the 13th
		sed 's/.*) //' "/proc/$p/stat" | awk '{ print $12 + $13 }'
	done
}

# counters: etcd's own counters (its /metrics), one "NAME VALUE" a line:
# per gRPC method the calls the members handled (unary) or the messages
# they received and sent (streams: Watch, LeaseKeepAlive), summed over
# the members (the gateway turns each JSON call into one gRPC call); the
# watch events the members sent and the gRPC bytes in and out, summed;
# and the puts, deletes and transactions m1 applied (every member applies
# every write).
counters() {
	local i=0 m
	for m in $(echo "$endpoints" | tr ',' ' '); do
		i=$((i + 1))
		curl -s "$m/metrics" | awk -v m="$i" '
		/^grpc_server_handled_total\{/ {
			match($0, /grpc_method="[A-Za-z]+"/)
			k = "calls." substr($0, RSTART + 13, RLENGTH - 14)
			v[k] += $NF }
		/^grpc_server_msg_received_total\{.*grpc_type="bidi_stream"/ {
			match($0, /grpc_method="[A-Za-z]+"/)
			k = "msgs_in." substr($0, RSTART + 13, RLENGTH - 14)
			v[k] += $NF }
		/^grpc_server_msg_sent_total\{.*grpc_type="bidi_stream"/ {
			match($0, /grpc_method="[A-Za-z]+"/)
			k = "msgs_out." substr($0, RSTART + 13, RLENGTH - 14)
			v[k] += $NF }
		/^etcd_debugging_mvcc_events_total / { v["watch_events"] += $NF }
		/^etcd_network_client_grpc_sent_bytes_total / {
			v["grpc_bytes_out"] += $NF }
		/^etcd_network_client_grpc_received_bytes_total / {
			v["grpc_bytes_in"] += $NF }
		m == 1 && /^etcd_mvcc_(put|delete|txn)_total / {
			v[substr($1, 11)] += $NF }
		END { for (k in v) printf "%s %.0f\n", k, v[k] }'
	done | awk '{ v[$1] += $2 } END { for (k in v) print k, v[k] }' | sort
}

# timed FILE CMD...: runs CMD, and writes the CPU seconds (user + system)
# it used to FILE; CMD's exit status.
timed() {
	perl -e '
my $f = shift;
my $rc = system(@ARGV);
my @t = times;
open(my $h, ">", $f) or die "$f: $!";
printf $h "%.3f\n", $t[2] + $t[3];
close($h);
exit($rc == -1 ? 127 : $rc & 127 ? 128 + ($rc & 127) : $rc >> 8);
' "$@"
}

revision() {
	curl -s -X POST -d '{"key":"eA==","count_only":true}' \
	    "http://$member1/v3/kv/range" |
	    perl -MJSON::PP -e 'print decode_json(join("", <STDIN>))->{header}{revision}'
}

# count KEY RANGE_END (base64): how many keys etcd holds in the range.
count() {
	curl -s -X POST -d "{\"key\":\"$1\",\"range_end\":\"$2\",\"count_only\":true}" \
	    "http://$member1/v3/kv/range" |
	    perl -MJSON::PP -e 'print decode_json(join("", <STDIN>))->{count} // 0'
}

# leftovers: how many keys outside the front ends' prefixes (keylock/,
# kbefore/) etcd holds: etcd's lock API's keys of a run whose leases
# outlived it.
leftovers() {
	# [\0, kbefore/), [kbefore0, keylock/), [keylock0, the end)
	echo $(($(count AA== a2JlZm9yZS8=) + $(count a2JlZm9yZTA= a2V5bG9jay8=) +
	    $(count a2V5bG9jazA= AA==)))
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
# $TMP/SYSTEM.WORK.CONNS.SPREAD.ROUND, etcd's revisions before and after
# it in .rev, the CPU ticks the members (one a line) and the system's
# front ends (their sum, last line; 0 for etcd) used in .cpu
run() {
	local sys=$1 work=$2 conns=$3 spread=$4 round=$5 out before after
	local ee=$member1 ke='' fes='' c0 c1 perf rowname
	if [ "$sys" != etcd ]; then
		ke=$(cat "$TMP/${sys}1.addr")
		fes=$(cat "$TMP/${sys}1.pid" "$TMP/${sys}2.pid")
	fi
	if [ "$spread" = 2 ]; then
		[ "$sys" != etcd ] && ke=$ke,$(cat "$TMP/${sys}2.addr")
		ee=$member1,$member2
	fi
	out=$TMP/$sys.$work.$conns.$spread.$round.json
	if [ "$sys" = etcd ]; then wait_clean; fi
	before=$(revision)
	counters >"$out.cnt0"
	perf=
	rowname=$work:$conns
	[ "$spread" = 2 ] && rowname=$rowname:2
	if [ "$PERF" = 1 ] && [[ " $PERF_ROWS " = *" $rowname "* ]]; then
		# shellcheck disable=SC2086
		perf record -q -F "$PERF_FREQ" -g -o "$out.perf" \
		    -p "$(echo $members | tr ' ' ',')" >/dev/null 2>&1 &
		perf=$!
		sleep 0.5
	fi
	# shellcheck disable=SC2086
	c0=$(cpu $members $fes)
	# the client's own CPU (user + system s) in .ccpu
	if [ "$sys" = etcd ]; then
		timed "$out.ccpu" "$KEYLOCK_BENCH" --etcd -S "$ee" -w "$work" \
		    -c "$conns" -t "$DURATION" --json --no-progress >"$out"
	else
		timed "$out.ccpu" "$KEYLOCK_BENCH" -S "$ke" -w "$work" \
		    -c "$conns" -t "$DURATION" --json --no-progress >"$out"
	fi
	# shellcheck disable=SC2086
	c1=$(cpu $members $fes)
	if [ -n "$perf" ]; then
		kill -INT "$perf"
		wait "$perf" || true
	fi
	counters >"$out.cnt1"
	after=$(revision)
	echo "$before $after" >"$out.rev"
	paste <(echo "$c0") <(echo "$c1") | awk -v n=3 '
	    NR <= n { print $2 - $1 } NR > n { fe += $2 - $1 }
	    END { print fe + 0 }' >"$out.cpu"
}

load_before=$(cut -d ' ' -f 1-3 /proc/loadavg)
for round in $(seq "$ROUNDS"); do
	for row in $ROWS; do
		IFS=: read -r work conns spread <<EOF
$row
EOF
		spread=${spread:-1}
		order=$SYSTEMS
		[ $((round % 2)) -eq 0 ] &&
		    order=$(echo "$SYSTEMS" | tr ' ' '\n' | tac | tr '\n' ' ')
		for sys in $order; do
			run "$sys" "$work" "$conns" "$spread" "$round"
		done
		echo "round $round: $row done" >&2
	done
done

# WIRE=1: keylockd's etcd traffic replayed over the JSON gateway and
# over gRPC (bench/etcd_wire.py), alternately, on the same cluster
if [ "$WIRE" = 1 ]; then
	for round in $(seq "$ROUNDS"); do
		order="json grpc"
		[ $((round % 2)) -eq 0 ] && order="grpc json"
		for tr in $order; do
			# shellcheck disable=SC2086
			"$wirepy" "$here/etcd_wire.py" "$tr" "http://$member1" \
			    "http://$member1,http://$member2" \
			    "$(echo $members | tr ' ' ',')" "$DURATION" \
			    >"$TMP/wire.$tr.$round.json"
		done
		echo "round $round: wire done" >&2
	done
fi

load_after=$(cut -d ' ' -f 1-3 /proc/loadavg)
rev=$(cd "$top" && git describe --always --dirty 2>/dev/null || echo unknown)
etcdv=$(etcd --version | sed -n 's/^etcd Version: //p')
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
ncpu=$(nproc)
perl -MJSON::PP -e '
my ($tmp, $rounds, $rows, $dur, $rev, $etcdv, $cpu, $ncpu, $l0, $l1,
    $systems, $clk, $wire, $kopts, $bopts) = @ARGV;
my @sys = split " ", $systems;
my @kl = grep { $_ ne "etcd" } @sys;
my $before = grep { $_ eq "before" } @sys;
# issue 11 (keylockd/etcd), and issue 23 (5x at 50 clients on distinct keys)
my %target = ("lock-unlock:50" => 10, "lock-unlock:50:2" => 10,
    "contended:4" => 10, "contended:50" => 2);
my %target23 = ("lock-unlock:50" => 5);
my (@verdicts, @stalls, @mi, @cn, %c50, %c50all);
sub med { my @v = sort { $a <=> $b } @_; return $v[int($#v / 2)]; }
sub rd { my $f = shift; open(my $h, "<", $f) or die "$f: $!";
    local $/; my $j = decode_json(<$h>); close($h); return $j; }
sub lines { my $f = shift; open(my $h, "<", $f) or die "$f: $!";
    my @l = map { chomp; $_ } <$h>; close($h); return @l; }
sub rng { my @v = sort { $a <=> $b } @_;
    return sprintf("%.0f [%.0f-%.0f]", med(@v), $v[0], $v[-1]); }
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
    "connection with its lease) through etcd. ",
    ($before ? "\"before\" is the keylockd of `BEFORE=`, run in the same " .
    "rounds on the same cluster (its own two front ends, prefix kbefore/). "
    : ""),
    ($kopts ne "" ? "keylockd'"'"'s front ends run with `$kopts`. " : ""),
    ($bopts ne "" ? "before'"'"'s front ends run with `$bopts`. " : ""),
    "Load average (1, 5, 15 min) before the runs: $l0; after: $l1.\n\n";
my @h = ("workload", "clients", map("$_ cycles/s", @sys),
    map("$_/etcd", @kl), map("$_ p50/p99 ms", @sys));
print "| ", join(" | ", @h), " |\n|---|", "---:|" x (@h - 1), "\n";
for my $row (split " ", $rows) {
    my ($work, $conns, $spread) = split /:/, $row;
    $spread //= 1;
    my (%c, %p50, %p99, %w, %mcpu, %mmax, %fcpu, %ratio, %cnt, %ccpu,
        %all);
    for my $r (1 .. $rounds) {
        for my $s (@sys) {
            my $f = "$tmp/$s.$work.$conns.$spread.$r.json";
            my $j = rd($f);
            die "$f: not ok: $j->{failure}\n" unless $j->{ok};
            my $n = $j->{cycles};
            push @{$c{$s}}, $j->{cycles_per_s};
            push @{$p50{$s}}, $j->{latency_ms}{all}{p50};
            push @{$p99{$s}}, $j->{latency_ms}{all}{p99};
            my ($b, $a) = split " ", (lines("$f.rev"))[0];
            push @{$w{$s}}, $n > 0 ? ($a - $b) / $n : 0;
            # ticks to ms per cycle
            my @t = lines("$f.cpu");
            my $fe = pop @t;
            my ($sum, $max) = (0, 0);
            for (@t) { $sum += $_; $max = $_ if $_ > $max; }
            push @{$mcpu{$s}}, $n > 0 ? $sum * 1000 / $clk / $n : 0;
            push @{$mmax{$s}}, $n > 0 ? $max * 1000 / $clk / $n : 0;
            push @{$fcpu{$s}}, $n > 0 ? $fe * 1000 / $clk / $n : 0;
            my $cl = (lines("$f.ccpu"))[0];
            push @{$ccpu{$s}}, $n > 0 ? $cl * 1000 / $n : 0;
            push @{$all{$s}}, $mcpu{$s}[-1] + $fcpu{$s}[-1] + $ccpu{$s}[-1];
            # etcd'"'"'s counters, per cycle
            my (%k0, %k1);
            for (lines("$f.cnt0")) { my ($k, $v) = split " "; $k0{$k} = $v; }
            for (lines("$f.cnt1")) { my ($k, $v) = split " "; $k1{$k} = $v; }
            for my $k (keys %k1) {
                push @{$cnt{$s}{$k}}, $n > 0 ? ($k1{$k} - ($k0{$k} // 0)) / $n : 0;
            }
            push @{$cnt{$s}{"members_cpu_ms"}}, $mcpu{$s}[-1];
        }
        for my $s (@kl) {
            push @{$ratio{$s}}, $c{etcd}[-1] > 0 ?
                $c{$s}[-1] / $c{etcd}[-1] : 0;
        }
    }
    my $stalled = 0;
    for my $s (@sys) {
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
    my $what = ($work eq "contended" ? "one busy key" : "distinct keys") .
        ($spread == 2 ? ", both front ends (etcd: m1, m2)" : "");
    print "| $what | $conns | ", join(" | ", map(rng(@{$c{$_}}), @sys),
        map(sprintf("%.1f", med(@{$ratio{$_}})), @kl),
        map(sprintf("%.2f / %.2f", med(@{$p50{$_}}), med(@{$p99{$_}})),
        @sys)), " |\n";
    # the busiest member on a core of its own: 1000 ms / its ms per cycle
    push @mi, "| $what | $conns | " . join(" | ",
        join(" / ", map(sprintf("%.3f", med(@{$w{$_}})), @sys)),
        join(" / ", map(sprintf("%.3f", med(@{$mcpu{$_}})), @sys)),
        join(" / ", map(sprintf("%.3f", med(@{$fcpu{$_}})), @kl)),
        join(" / ", map(sprintf("%.3f", med(@{$ccpu{$_}})), @sys)),
        join(" / ", map(sprintf("%.3f", med(@{$all{$_}})), @sys)),
        join(" / ", map(sprintf("%.1f", med(@{$all{etcd}}) /
            (med(@{$all{$_}}) || 1)), @kl)),
        join(" / ", map { my $m = med(@{$mmax{$_}});
            $m > 0 ? sprintf("%.0f", 1000 / $m) : "-" } @sys)) . " |\n";
    if ($row eq "lock-unlock:50") {
        $c50{$_} = med(@{$mcpu{$_}}) for @sys;
        $c50all{$_} = med(@{$all{$_}}) for @sys;
    }
    for my $s (@sys) {
        my %m = map { $_ => med(@{$cnt{$s}{$_}}) } keys %{$cnt{$s}};
        my $g = sub { return $m{$_[0]} // 0; };
        my $ops = $g->("put_total") + $g->("delete_total");
        my @calls;
        for my $k (sort keys %m) {
            next unless $k =~ /^(calls|msgs_in|msgs_out)\.(.*)/;
            next if $m{$k} < 0.0005;
            push @calls, sprintf("%s %s %.3f", $2, $1 eq "calls" ? "calls" :
                $1 eq "msgs_in" ? "in" : "out", $m{$k});
        }
        push @cn, sprintf("| %s | %d | %s | %.3f | %.3f | %.3f | %s | %.3f | %.0f | %s |\n",
            $what, $conns, $s, $g->("members_cpu_ms"), $g->("txn_total"), $ops,
            $s ne "etcd" && $g->("calls.Txn") > 0 ?
            sprintf("%.1f", $ops / $g->("calls.Txn")) : "-",
            $g->("watch_events"), $g->("grpc_bytes_in") + $g->("grpc_bytes_out"),
            join(", ", @calls));
    }
    for my $s (@kl) {
        my $t = ($s eq "keylockd" ? "" : " ($s)");
        push @verdicts, sprintf("| %s, %d clients: keylockd/etcd >= %d%s " .
            "(issue 11) | %.1f | %s |\n", ($work eq "contended" ?
            "hand-offs/s on one busy key" : "cycles/s on distinct keys") .
            ($spread == 2 ? " over both front ends" : ""),
            $conns, $target{$row}, $t, med(@{$ratio{$s}}),
            $stalled ? "not judged: stalled rounds" :
            med(@{$ratio{$s}}) >= $target{$row} ? "met" : "not met")
            if exists $target{$row};
        push @verdicts, sprintf("| cycles/s on distinct keys, %d clients: " .
            "keylockd/etcd >= %d%s on this machine (issue 23) | %.1f | %s |\n",
            $conns, $target23{$row}, $t, med(@{$ratio{$s}}),
            $stalled ? "not judged: stalled rounds" :
            med(@{$ratio{$s}}) >= $target23{$row} ? "met" : "not met")
            if exists $target23{$row};
    }
}
my $order = join(" / ", @sys);
print "\nMachine-independent figures of the same runs (medians), $order: ",
    "etcd writes (revisions) per cycle; the three members'"'"' CPU time ",
    "(user + system) per cycle; the keylockd front ends'"'"' CPU time per ",
    "cycle; the client'"'"'s (keylock-bench'"'"'s) CPU time per cycle; all ",
    "three together, and etcd'"'"'s total over each keylockd'"'"'s (on a ",
    "machine whose cores all of them share, as here, the cycles/s ratio ",
    "tends to this one); and, for members each on a core of its own, the ",
    "cycles per ",
    "second at which the busiest member would fill its core (1000 ms over ",
    "its CPU ms per cycle: a paper estimate, which leaves out the network ",
    "and the disk).\n\n";
print "| workload | clients | etcd writes per cycle | members'"'"' CPU ms per ",
    "cycle | front ends'"'"' CPU ms per cycle | client'"'"'s CPU ms per ",
    "cycle | all CPU ms per cycle | etcd'"'"'s all over keylockd'"'"'s | ",
    "cycles/s, members on their own cores |\n",
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n", @mi;
print "\netcd'"'"'s own counters (its /metrics) over the same runs, per ",
    "cycle (medians): the members'"'"' CPU ms as above; the write ",
    "transactions, puts and deletes m1 applied (every member applies each); ",
    "operations per transaction of the front ends'"'"' Txn calls; the watch ",
    "events the members sent; the gRPC bytes in and out of the members (the ",
    "JSON gateway'"'"'s calls into its own member, and peers'"'"' none); and ",
    "the gRPC calls (unary) or stream messages in and out the members ",
    "handled per cycle, by method (etcd'"'"'s lock API calls Txn, Range and ",
    "Watch inside the member, which these do not count).\n\n";
print "| workload | clients | system | members'"'"' CPU ms | write txns | ",
    "puts + deletes | ops per Txn call | watch events | gRPC bytes | ",
    "gRPC calls and stream messages |\n",
    "|---|---:|---|---:|---:|---:|---:|---:|---:|---|\n", @cn;
if ($wire) {
    my (%w, $batch, $rate, $infl);
    for my $r (1 .. $rounds) {
        for my $t ("json", "grpc") {
            my $j = rd("$tmp/wire.$t.$r.json");
            die "wire $t round $r: no cycles\n" unless $j->{cycles} > 0;
            die "wire $t round $r: a transaction failed\n"
                if $j->{txns_failed};
            push @{$w{$t}{cpu}}, $j->{members_cpu_ms_per_cycle};
            push @{$w{$t}{cps}}, $j->{cycles_per_s};
            push @{$w{$t}{ev}}, $j->{watch_events} / $j->{cycles};
            push @{$w{$t}{bytes}}, $j->{client_bytes_per_cycle};
            ($batch, $rate, $infl) = @{$j}{qw(batch rate inflight)};
        }
    }
    sub rng3 { my @v = sort { $a <=> $b } @_;
        return sprintf("%.3f [%.3f-%.3f]", med(@v), $v[0], $v[-1]); }
    print "\nThe transport, side by side (WIRE=1: `bench/etcd_wire.py`, ",
        "the same rounds, the same cluster): keylockd'"'"'s etcd traffic at ",
        "c=50 as the counters above give it, replayed over the JSON gateway ",
        "(what keylockd speaks) and over gRPC (HTTP/2 and protobuf, no ",
        "gateway), the rest alike: transactions through m1 of $batch puts ",
        "under a lease and the $batch deletes of the previous one with the ",
        "fence compare, $infl in flight, paced at $rate cycles/s; a prefix ",
        "watch through m1 and one through m2 (the two front ends) reading ",
        "every event. Medians [min-max] of the rounds.\n\n";
    print "| transport | cycles/s (paced) | members'"'"' CPU ms per cycle | ",
        "watch events per cycle | client bytes per cycle |\n",
        "|---|---:|---:|---:|---:|\n";
    for my $t ("json", "grpc") {
        printf "| %s | %.0f | %s | %.2f | %.0f |\n",
            $t eq "json" ? "JSON gateway (HTTP/1.1)" : "gRPC (HTTP/2, h2c)",
            med(@{$w{$t}{cps}}), rng3(@{$w{$t}{cpu}}), med(@{$w{$t}{ev}}),
            med(@{$w{$t}{bytes}});
    }
    my ($rj, $rg) = (med(@{$w{json}{cps}}), med(@{$w{grpc}{cps}}));
    printf "\nNot at the same rate (%.0f and %.0f cycles/s: the client ran " .
        "short of CPU): a lower WIRE_RATE compares them better.\n", $rj, $rg
        if abs($rj - $rg) > 0.1 * ($rj > $rg ? $rj : $rg);
    my $f = med(@{$w{grpc}{cpu}}) / med(@{$w{json}{cpu}});
    printf "\ngRPC / JSON, members'"'"' CPU per cycle: %.2f (%.0f%% less).",
        $f, 100 * (1 - $f);
    if (exists $c50{keylockd} && $c50{keylockd} > 0) {
        my $k = $c50{keylockd} * $f;
        printf " Applied to keylockd'"'"'s members'"'"' CPU per cycle at c=50 "
        . "above (%.3f ms): %.3f ms, against %.3f ms of etcd'"'"'s lock API: "
        . "%.1fx fewer members'"'"' CPU per cycle than the lock API, from %.1fx "
        . "today (a projection, not a run of keylockd over gRPC).",
            $c50{keylockd}, $k, $c50{etcd}, $c50{etcd} / $k,
            $c50{etcd} / $c50{keylockd};
        # the front ends'"'"' and the client'"'"'s CPU as they are
        my $ka = $c50all{keylockd} - $c50{keylockd} * (1 - $f);
        printf " With the front ends'"'"' and the client'"'"'s CPU as they " .
            "are, all CPU per cycle: %.3f ms from %.3f, against %.3f ms of " .
            "the lock API'"'"'s: %.1fx from %.1fx.", $ka, $c50all{keylockd},
            $c50all{etcd}, $c50all{etcd} / $ka,
            $c50all{etcd} / $c50all{keylockd} if $ka > 0;
    }
    print "\n";
}
print "\n| target | keylockd/etcd, median of the rounds | |\n",
    "|---|---:|---|\n", @verdicts;
print "\nStalled rounds (under a tenth of the best round of the same row; ",
    "a median over them is not a figure of that system): ",
    join("; ", @stalls), ".\n" if @stalls;
' "$TMP" "$ROUNDS" "$ROWS" "$DURATION" "$rev" "$etcdv" "$cpu" "$ncpu" \
    "$load_before" "$load_after" "$SYSTEMS" "$clk" "$WIRE" \
    "$KEYLOCKD_OPTS" "$BEFORE_OPTS" >"$TMP/section.md"
if [ "$PERF" = 1 ]; then
	{
		# shellcheck disable=SC2016
		printf '\nWhere the members'"'"' CPU goes (PERF=1: `perf record -F %s -g` of the three members during every run of the rows %s, all rounds together, symbolized from the etcd binary'"'"'s .gopclntab by bench/etcd_perf.py; perf'"'"'s sampling costs the members some CPU, so the cycles/s above are a little low). Self time is the innermost Go function'"'"'s package group (kernel time is charged to the group that entered the kernel); an activity is the goroutine the sample ran in (by the functions of its stack, from its start inwards), and the gateway'"'"'s share is split by what its HTTP/1 handler was doing.\n' \
		    "$PERF_FREQ" "$PERF_ROWS"
		for row in $PERF_ROWS; do
			IFS=: read -r work conns spread <<EOF
$row
EOF
			spread=${spread:-1}
			for sys in $SYSTEMS; do
				set -- "$TMP/$sys.$work.$conns.$spread".*.json.perf
				[ -e "$1" ] || continue
				echo
				python3 "$here/etcd_perf.py" "$(command -v etcd)" \
				    "$sys, $row" "$@"
			done
		done
	} >>"$TMP/section.md"
fi
echo "<!-- bench/etcd_compare.sh: end -->" >>"$TMP/section.md"
# section FILE: the section between its markers in FILE, or appended;
# the rest of FILE stays
section() {
	perl "$here/section.pl" etcd_compare.sh "$1" "$TMP/section.md"
}
section "$RESULTS"
if [ "$WRITE" = 1 ]; then
	section "$RESULTS_MD"
	echo "etcd_compare.sh: wrote its section of $RESULTS_MD" >&2
fi
cat "$TMP/section.md"
