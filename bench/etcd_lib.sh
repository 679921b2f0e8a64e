# bench/etcd_lib.sh: what the benchmarks on a private etcd cluster share
# (bench/etcd_compare.sh, bench/refresh.sh source it after setting NAME,
# the script's name for its messages, and top, the source tree): their
# prerequisites, a temporary directory whose processes and cluster go
# with it, the cluster, and keylockd front ends on it.
# shellcheck shell=bash
# shellcheck disable=SC2034,SC2153,SC2154 # NAME and top come from the
# script, which uses endpoints2 and members

# etcd_bench_need: etcd and perl's JSON::PP, or exit 1 saying which.
etcd_bench_need() {
	command -v etcd >/dev/null || { echo "$NAME: no etcd" \
	    "(Debian: etcd-server)" >&2; exit 1; }
	perl -MJSON::PP -e 1 2>/dev/null ||
	    { echo "$NAME: needs perl's JSON::PP" >&2; exit 1; }
}

# etcd_bench_start TAG: TMP (a new directory), PIDS (the processes to
# stop, added to by etcd_bench_keylockd), a cleanup at exit that stops
# them, the cluster and removes TMP (KEEP=1 keeps it); then a 3-member
# cluster in $TMP/etcd: endpoints (m1 first), endpoints2 (m2 first, as
# the second front end's), members (their pids).
etcd_bench_start() {
	TMP=$(mktemp -d "${TMPDIR:-/tmp}/keylock-$1.XXXXXX")
	PIDS=
	trap etcd_bench_cleanup EXIT
	trap 'exit 1' INT TERM HUP
	endpoints=$(sh "$top/tests/etcd/cluster.sh" "$TMP/etcd" start 3 \
	    --watch $$)
	endpoints2=${endpoints#*,},${endpoints%%,*}
	members=$(cat "$TMP"/etcd/m[123].pid)
}

etcd_bench_cleanup() {
	trap - EXIT INT TERM HUP
	for p in $PIDS; do
		kill -TERM "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	sh "$top/tests/etcd/cluster.sh" "$TMP/etcd" down || true
	if [ "${KEEP:-0}" = 1 ]; then
		echo "$NAME: raw results kept in $TMP" >&2
	else
		rm -rf "$TMP"
	fi
}

# etcd_bench_keylockd NAME BINARY OPTIONS...: a keylockd on a free port;
# its address in $TMP/NAME.addr, its pid in $TMP/NAME.pid.
etcd_bench_keylockd() {
	local name=$1 bin=$2
	shift 2
	mkdir -p "$TMP/$name"
	"$bin" --config /dev/null --bind 127.0.0.1 --port 0 \
	    --port-file "$TMP/$name.port" --unix "" --state-dir "$TMP/$name" \
	    --max-clients 100000 "$@" >"$TMP/$name.log" 2>&1 &
	PIDS="$PIDS $!"
	echo $! >"$TMP/$name.pid"
	for _ in $(seq 400); do
		grep -q '^[0-9]' "$TMP/$name.port" 2>/dev/null && break
		sleep 0.05
	done
	grep -q '^[0-9]' "$TMP/$name.port" ||
	    { cat "$TMP/$name.log" >&2; exit 1; }
	echo "127.0.0.1:$(head -n 1 "$TMP/$name.port")" >"$TMP/$name.addr"
}
