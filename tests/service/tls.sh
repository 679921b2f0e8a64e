#!/bin/sh
# TLS listener, checked with openssl s_client as an independent client:
# requests over TLS, mutual TLS refusing a missing or foreign client
# certificate, and a TLS holder's disconnect granting a plain waiter. The
# certificates are the shared ones (tests/certs: ca signs srv and cli;
# other, a CA nobody trusts, signs rogue).

. "$(dirname "$0")/lib.sh"

command -v openssl >/dev/null || skip "openssl not installed"
cd "$TMP" || exit 1
cp "$TEST_CERTS"/*.pem "$TEST_CERTS"/*.key . || fail "no certificates"

# The port file is written whole (rename), so its tls line is there once
# daemon_launch has read the TCP port.
daemon_launch --tls-port 0 --unix '' --tls-cert "$TMP/srv.pem" \
    --tls-key "$TMP/srv.key" --tls-client-ca "$TMP/ca.pem" --log-level debug
grep -q '^tls ' port || fail "no tls line in the port file: $(cat port)"
tcp=$(head -n 1 port)
tls=$(awk '/^tls /{print $2}' port)

# s_client as the client: send lines, keep the connection for a moment.
tlsc() {	# cert-name, seconds to stay, lines...
	cert=$1; stay=$2; shift 2
	if [ -n "$cert" ]; then set -- -cert "$cert.pem" -key "$cert.key" "$@"
	fi
	{ cat lines; sleep "$stay"; } | timeout 20 openssl s_client -quiet \
	    -no_ign_eof -connect "127.0.0.1:$tls" -CAfile ca.pem -servername localhost \
	    "$@" 2>/dev/null
}
plain() { nc -N 127.0.0.1 "$tcp"; }

# (the input stays open 2 s, times KEYLOCKD_TEST_SLOW, for the replies
# of a loaded machine to come back)
printf 'PING\nNAME tls-client\nLOCK t:1\nINFO t:1\n' > lines
out=$(tlsc cli "$(awk "BEGIN { print 2 * ${KEYLOCKD_TEST_SLOW:-1} }")") || true
echo "$out" | grep -qx 'OK PONG' || fail "no PONG over TLS: $out"
echo "$out" | grep -q '"name":"tls-client"' || fail "INFO over TLS: $out"
echo "$out" | grep -Eq '^OK [0-9]+$' || fail "no grant over TLS: $out"

printf 'PING\n' > lines
out=$(tlsc "" 0.5) || true
[ -z "$out" ] || fail "a client without a certificate was served: $out"
out=$(tlsc rogue 0.5) || true
[ -z "$out" ] || fail "a client with a foreign certificate was served: $out"

# A TLS holder's disconnect grants a plain waiter at once.
printf 'LOCK t:2\n' > lines
tlsc cli 1.5 >holder.out &
holder=$!
BGPIDS="$BGPIDS $holder"
holds_t2() { printf 'INFO t:2\n' | plain | grep -q '"holders":\[{'; }
wait_for holds_t2 5 || fail "TLS holder never held t:2"
# (nc -N half-closes at the end of input, which would withdraw the wait:
# keep the input open until the grant has had time to arrive.)
out=$({ printf 'LOCK t:2 timeout=5000\n'; sleep 2.5; } | plain)
echo "$out" | grep -Eq '^OK [0-9]+$' || fail "waiter not granted: $out"
wait "$holder"
grep -Eq '^OK [0-9]+$' holder.out || fail "TLS holder: $(cat holder.out)"
out=$(printf 'STATS\n' | plain)
echo "$out" | grep -q '"keys":0' || fail "table not empty: $out"

# OpenSSL is opened for TLS (tls.c), and only then: the daemon is not
# linked with it, and one without TLS never maps it.
grep -q 'libssl' "/proc/$DPID/maps" || fail "TLS daemon has no libssl mapped"
daemon_stop
if command -v readelf >/dev/null; then
	readelf -d "$KEYLOCKD" | grep -Eq 'NEEDED.*lib(ssl|crypto)' &&
	    fail "keylockd is linked with OpenSSL"
fi
daemon_launch --unix ''
grep -Eq 'lib(ssl|crypto)' "/proc/$DPID/maps" &&
    fail "a daemon without TLS mapped OpenSSL"
daemon_stop
pass "requests, mutual TLS, a TLS holder's disconnect, OpenSSL only for TLS"
