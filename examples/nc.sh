#!/bin/sh
# One-shot queries with nc(1). Each query is one connection: send the
# request lines, half-close (nc -N), read one reply per line. keylockd
# answers what it can answer without waiting, then closes the connection,
# which releases whatever it took. Usage:
#   KEYLOCK_SERVER=host:port examples/nc.sh     (or a unix socket path)
# Needs OpenBSD netcat (Debian: netcat-openbsd), for -N and -U.
set -eu
server=${KEYLOCK_SERVER:-127.0.0.1:7711}

ask() {
	case $server in
	*/*) printf '%s\n' "$@" | nc -N -U "$server" ;;
	*) printf '%s\n' "$@" | nc -N "${server%:*}" "${server##*:}" ;;
	esac
}

# check REPLY PATTERN: the example fails if keylockd says otherwise
check() {
	# shellcheck disable=SC2254 # $2 is a pattern on purpose
	case $1 in
	$2) echo "$1" ;;
	*) echo "nc.sh: got \"$1\", want $2" >&2; exit 1 ;;
	esac
}

echo "== is it up?"
check "$(ask PING)" "OK PONG"

echo "== one connection: take two keys, see who holds one, give both back"
ask NAME\ nc-example "LOCK report:2026 audit timeout=2000" \
    "INFO report:2026" "UNLOCK report:2026 audit" >reply.$$ || true
i=0
while IFS= read -r line; do
	i=$((i + 1))
	case $i in
	1) check "$line" "OK" ;;
	2) check "$line" "OK [0-9]*" ;;
	3) check "$line" 'OK {"key":"report:2026",*"name":"nc-example"*' ;;
	4) check "$line" "OK 2" ;;
	esac
done <reply.$$
rm -f reply.$$
[ "$i" -eq 4 ] || { echo "nc.sh: $i replies, want 4" >&2; exit 1; }

echo "== a lock dies with its connection: the key is free again"
check "$(ask "TRYLOCK report:2026")" "OK [0-9]*"

echo "== the server's counters (first 60 bytes)"
check "$(ask STATS | cut -c1-60)" 'OK {"version":*'
