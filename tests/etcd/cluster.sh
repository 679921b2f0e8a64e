#!/bin/sh
# A private etcd cluster for the tests: 1 or 3 members (etcd-server,
# Debian's 3.4) on free loopback ports, each with its own data directory
# and log under DIR, torn down however the test ends. One script serves
# the shell tests (tests/etcd/lib.sh) and the C tests (tests/etcd/ec.c):
# every call names the cluster's directory, which holds all its state.
#
#   cluster.sh DIR start N [--watch PID]   start m1..mN; print endpoints
#   cluster.sh DIR endpoints               client URLs, comma-separated
#   cluster.sh DIR url NAME                one member's client URL
#   cluster.sh DIR kill|stop|cont NAME     SIGKILL, SIGSTOP, SIGCONT
#   cluster.sh DIR restart NAME            (kill and) start it again
#   cluster.sh DIR wait-healthy [SECONDS]  every running member healthy
#   cluster.sh DIR heal                    continue the stopped, start the
#                                          dead, wait until all are healthy
#   cluster.sh DIR leader                  name of the leader
#   cluster.sh DIR ctl ARGS...             etcdctl on the endpoints
#   cluster.sh DIR down                    kill every member, remove DIR
#
# With --watch PID, a watchdog brings the cluster down once PID is gone,
# so a test killed by a signal cannot leave members behind. Ports are
# picked at random below the ephemeral range among those nobody listens
# on; a start that loses a race for one retries with others. Exit status
# 77 means etcd is not installed (the tests then skip).
set -u

ETCD=${ETCD:-etcd}
ETCDCTL=${ETCDCTL:-etcdctl}
# Member options on top of the cluster's own; e.g. a shorter election.
EC_ETCD_OPTS=${EC_ETCD_OPTS:-}
EC_LOG_LEVEL=${EC_LOG_LEVEL:-warn}
EC_READY_S=${EC_READY_S:-30}

die() {
	echo "cluster.sh: $*" >&2
	exit 1
}

now_ms() {
	date +%s%3N
}

[ $# -ge 2 ] || die "usage: cluster.sh DIR COMMAND [ARGS...]"
DIR=$1
CMD=$2
shift 2

command -v "$ETCD" >/dev/null 2>&1 || {
	echo "cluster.sh: $ETCD not found (Debian: etcd-server)" >&2
	exit 77
}

# port_busy PORT: something listens on or uses it.
port_busy() {
	ss -Htan "( sport = :$1 or dport = :$1 )" 2>/dev/null | grep -q .
}

# free_port: a random port in 20000-32767 that is not in use and not
# already picked for this cluster.
free_port() {
	while :; do
		_p=$((20000 + $(od -An -N2 -tu2 /dev/urandom) % 12768))
		if ! port_busy "$_p" &&
		    ! grep -qx "$_p" "$DIR/ports" 2>/dev/null; then
			echo "$_p" >>"$DIR/ports"
			echo "$_p"
			return
		fi
	done
}

members() {
	cat "$DIR/members"
}

# member_var NAME VAR: client, peer or pid of a member.
member_var() {
	cat "$DIR/$1.$2" 2>/dev/null
}

# launch NAME: starts a member in the background from its saved ports.
launch() {
	_n=$1
	_c=$(member_var "$_n" client)
	_pp=$(member_var "$_n" peer)
	# shellcheck disable=SC2086
	setsid "$ETCD" --name "$_n" --data-dir "$DIR/$_n" \
	    --listen-client-urls "http://127.0.0.1:$_c" \
	    --advertise-client-urls "http://127.0.0.1:$_c" \
	    --listen-peer-urls "http://127.0.0.1:$_pp" \
	    --initial-advertise-peer-urls "http://127.0.0.1:$_pp" \
	    --initial-cluster "$(cat "$DIR/initial")" \
	    --initial-cluster-state new \
	    --initial-cluster-token "kltest-$$" \
	    --logger zap --log-level "$EC_LOG_LEVEL" $EC_ETCD_OPTS \
	    </dev/null >>"$DIR/$_n.log" 2>&1 &
	echo $! >"$DIR/$_n.pid"
}

# pid_alive PID: the process exists and is not a zombie (stopped counts).
pid_alive() {
	_st=$(sed -n 's/^[0-9]* (.*) \([A-Za-z]\).*/\1/p' "/proc/$1/stat" \
	    2>/dev/null)
	[ -n "$_st" ] && [ "$_st" != Z ] && [ "$_st" != X ]
}

# member_pid NAME: the pid of member NAME while that process is still the
# member (stopped counts: its command line names the member's data
# directory), else nothing. A member that died leaves its number in its
# pid file, and with pid_max 32768 a machine busy with other suites soon
# gives that number to another process: a SIGKILL sent by the stale
# number would reach whatever has it now, a front end of a test running
# alongside as well as anything else.
member_pid() {
	_mp=$(member_var "$1" pid)
	[ -n "$_mp" ] && pid_alive "$_mp" &&
	    tr '\0' '\n' <"/proc/$_mp/cmdline" 2>/dev/null |
	    grep -qxF -- "$DIR/$1" && echo "$_mp"
}

# alive NAME: its process exists (stopped counts).
alive() {
	[ -n "$(member_pid "$1")" ]
}

healthy() {
	curl -s -m 1 "http://127.0.0.1:$(member_var "$1" client)/health" \
	    2>/dev/null | grep -q '"health":"true"'
}

# wait_healthy SECONDS [NAME...]: the named (default: every running)
# members answer healthy; fails early when one has exited.
wait_healthy() {
	_deadline=$(($(now_ms) + $1 * 1000))
	shift
	_names=${*:-$(members)}
	for _n in $_names; do
		while ! healthy "$_n"; do
			alive "$_n" || return 1
			[ "$(now_ms)" -lt "$_deadline" ] || return 1
			sleep 0.05
		done
	done
}

endpoints() {
	_e=
	for _n in $(members); do
		_e="$_e${_e:+,}http://127.0.0.1:$(member_var "$_n" client)"
	done
	echo "$_e"
}

# kill_all: SIGKILL every member (continued first, so it dies at once).
kill_all() {
	for _n in $(members 2>/dev/null); do
		_pid=$(member_pid "$_n")
		[ -n "$_pid" ] || continue
		kill -KILL "$_pid" 2>/dev/null
		kill -CONT "$_pid" 2>/dev/null
	done
	for _n in $(members 2>/dev/null); do
		while alive "$_n"; do
			sleep 0.02
		done
	done
}

# try_start N: one attempt at a fresh cluster of N members.
try_start() {
	rm -rf "$DIR"/m[0-9]* "$DIR/ports"
	: >"$DIR/members"
	_init=
	_i=1
	while [ "$_i" -le "$1" ]; do
		_n=m$_i
		echo "$_n" >>"$DIR/members"
		free_port >"$DIR/$_n.client"
		free_port >"$DIR/$_n.peer"
		_init="$_init${_init:+,}$_n=http://127.0.0.1:$(cat "$DIR/$_n.peer")"
		_i=$((_i + 1))
	done
	echo "$_init" >"$DIR/initial"
	for _n in $(members); do
		launch "$_n"
	done
	wait_healthy "$EC_READY_S"
}

# watchdog PID: in the background, brings the cluster down once PID has
# gone (or the cluster has been brought down).
watchdog() {
	(
		trap '' HUP INT
		while pid_alive "$1"; do
			[ -d "$DIR" ] || exit 0
			sleep 0.5
		done
		"$0" "$DIR" down
	) </dev/null >/dev/null 2>&1 &
}

case $CMD in
start)
	[ $# -ge 1 ] || die "start N [--watch PID]"
	n=$1
	case $n in
	1 | 3 | 5) ;;
	*) die "start: 1, 3 or 5 members, not $n" ;;
	esac
	mkdir -p "$DIR" || exit 1
	if [ $# -ge 3 ] && [ "$2" = --watch ]; then
		watchdog "$3"
	fi
	for attempt in 1 2 3; do
		if try_start "$n"; then
			endpoints
			exit 0
		fi
		kill_all
		if ! grep -q "address already in use" "$DIR"/m*.log \
		    2>/dev/null; then
			break
		fi
		echo "cluster.sh: attempt $attempt lost a port, again" >&2
		rm -f "$DIR"/m*.log
	done
	for f in "$DIR"/m*.log; do
		echo "--- $f" >&2
		tail -n 20 "$f" >&2
	done
	die "no healthy cluster of $n within $EC_READY_S s"
	;;
endpoints)
	endpoints
	;;
url)
	[ -f "$DIR/$1.client" ] || die "no member $1"
	echo "http://127.0.0.1:$(member_var "$1" client)"
	;;
kill | stop | cont)
	[ $# -eq 1 ] && [ -f "$DIR/$1.pid" ] || die "$CMD: no member ${1:-}"
	pid=$(member_pid "$1")
	[ -n "$pid" ] || [ "$CMD" = kill ] || die "$CMD: $1 is not running"
	case $CMD in
	kill)
		[ -n "$pid" ] || exit 0	# gone already: nothing of ours
		kill -KILL "$pid" 2>/dev/null
		kill -CONT "$pid" 2>/dev/null
		while alive "$1"; do
			sleep 0.02
		done
		;;
	stop) kill -STOP "$pid" ;;
	cont) kill -CONT "$pid" ;;
	esac
	;;
restart)
	[ $# -eq 1 ] && [ -f "$DIR/$1.pid" ] || die "restart: no member ${1:-}"
	"$0" "$DIR" kill "$1"
	launch "$1"
	;;
wait-healthy)
	secs=${1:-$EC_READY_S}
	names=
	for n in $(members); do
		alive "$n" && names="$names $n"
	done
	# shellcheck disable=SC2086
	wait_healthy "$secs" $names || die "not healthy within $secs s"
	;;
heal)
	for n in $(members); do
		if alive "$n"; then
			kill -CONT "$(member_pid "$n")"
		else
			launch "$n"
		fi
	done
	wait_healthy "$EC_READY_S" || die "not healthy within $EC_READY_S s"
	;;
leader)
	# The member whose id the others name as leader; polled while an
	# election runs.
	deadline=$(($(now_ms) + EC_READY_S * 1000))
	while :; do
		for n in $(members); do
			s=$(curl -s -m 1 -X POST -d '{}' \
			    "http://127.0.0.1:$(member_var "$n" client)/v3/maintenance/status" \
			    2>/dev/null)
			id=$(echo "$s" | sed -n 's/.*"member_id":"\([0-9]*\)".*/\1/p')
			ld=$(echo "$s" | sed -n 's/.*"leader":"\([0-9]*\)".*/\1/p')
			if [ -n "$id" ] && [ "$id" = "$ld" ]; then
				echo "$n"
				exit 0
			fi
		done
		[ "$(now_ms)" -lt "$deadline" ] || die "no leader"
		sleep 0.05
	done
	;;
ctl)
	ETCDCTL_API=3 exec "$ETCDCTL" --endpoints "$(endpoints)" \
	    --command-timeout 15s "$@"
	;;
down)
	[ -d "$DIR" ] || exit 0
	kill_all
	rm -rf "$DIR"
	;;
*)
	die "unknown command $CMD"
	;;
esac
