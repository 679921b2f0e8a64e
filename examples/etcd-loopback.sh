#!/bin/sh
# keylockd on several "hosts", on one machine: three etcd members and two
# keylockd front ends (backend etcd) on loopback, in a temporary
# directory, until Ctrl-C. README.md, "Run it on several hosts", is the
# real thing; this is its two-minute version.
#
#   examples/etcd-loopback.sh [-b BUILDDIR] [-- COMMAND...]
#
# keylockd comes from BUILDDIR/src (default: the PATH). With a COMMAND, it
# runs once the front ends serve, with FRONTEND1 and FRONTEND2 set to
# their host:port, and everything stops when it exits (its status is the
# script's). Needs etcd (Debian: etcd-server).
set -u

top=$(cd "$(dirname "$0")/.." && pwd)
KEYLOCKD=keylockd
if [ "${1:-}" = -b ]; then
	KEYLOCKD=$2/src/keylockd
	shift 2
fi
[ "${1:-}" = -- ] && shift

dir=$(mktemp -d "${TMPDIR:-/tmp}/keylockd-etcd.XXXXXX") || exit 1
pids=
cleanup() {
	trap - EXIT INT TERM
	for p in $pids; do
		kill "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	done
	sh "$top/tests/etcd/cluster.sh" "$dir/etcd" down
	rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

endpoints=$(sh "$top/tests/etcd/cluster.sh" "$dir/etcd" start 3 --watch $$) ||
    exit 1
echo "etcd: 3 members at $endpoints"

# frontend N: a keylockd front end on a free port, its log in $dir; sets
# FRONTENDN to its host:port.
frontend() {
	"$KEYLOCKD" --config /dev/null --bind 127.0.0.1 --port 0 \
	    --port-file "$dir/port$1" --unix "" --state-dir "$dir" \
	    --backend etcd --etcd-endpoints "$endpoints" \
	    >"$dir/frontend$1.log" 2>&1 &
	pids="$pids $!"
	i=0
	while ! grep -q '^[0-9]' "$dir/port$1" 2>/dev/null; do
		i=$((i + 1))
		if [ "$i" -gt 300 ] || ! kill -0 "$!" 2>/dev/null; then
			cat "$dir/frontend$1.log" >&2
			exit 1
		fi
		sleep 0.05
	done
	eval "FRONTEND$1=127.0.0.1:$(head -n 1 "$dir/port$1")"
}

frontend 1
frontend 2
export FRONTEND1 FRONTEND2
echo "keylockd front ends at $FRONTEND1 and $FRONTEND2 (logs in $dir)"

if [ $# -gt 0 ]; then
	"$@"
	exit $?
fi
cat <<EOF

One lock table through both. In two terminals:
    nc ${FRONTEND1%:*} ${FRONTEND1#*:}        then type: LOCK job
    nc ${FRONTEND2%:*} ${FRONTEND2#*:}        then type: LOCK job timeout=30000
The second waits until the first sends UNLOCK job (or is closed).
Or with the CLI: keylock -S $FRONTEND2 run job -- sleep 5
Ctrl-C stops everything.
EOF
while :; do
	sleep 3600
done
