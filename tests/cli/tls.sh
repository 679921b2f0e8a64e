#!/bin/sh
# TLS: keylock over the daemon's TLS listener, checking the server's
# certificate (IP address and DNS name) and presenting a client certificate
# for mutual TLS. An untrusted server exits 77 before anything is sent; a
# foreign or missing client certificate is refused and nothing runs. The
# certificates are the shared ones (tests/certs: ca signs srv, for
# 127.0.0.1 and localhost, and cli; other, a CA nobody trusts, signs
# rogue).
. "$(dirname "$0")/lib.sh"

cd "$TMP" || exit 1
cp "$TEST_CERTS"/*.pem "$TEST_CERTS"/*.key . || fail "no certificates"

daemon_start --tls-port 0 --tls-cert srv.pem --tls-key srv.key \
    --tls-client-ca ca.pem
wait_for "grep -q '^tls [0-9][0-9]*$' port" "$READY_S" ||
    fail "no TLS listener in the port file"
TLS=$(awk '/^tls /{print $2}' port)
S=tls://127.0.0.1:$TLS
set -- --tls-ca ca.pem --tls-cert cli.pem --tls-key cli.key

out=$(bounded 20 "$KEYLOCK" -S "$S" "$@" ping)
expect_status 0 $? "ping over TLS"
case $out in "PONG from $S in "*" ms") ;;
*) fail "ping over TLS printed \"$out\"" ;; esac
KEYLOCK_TLS_CA=ca.pem KEYLOCK_TLS_CERT=cli.pem KEYLOCK_TLS_KEY=cli.key \
    bounded 20 "$KEYLOCK" -S "tls://localhost:$TLS" ping >/dev/null
expect_status 0 $? "ping to a DNS name, files from the environment"
pass "ping over TLS, by IP address and by DNS name"

# The grant is the daemon's, whatever the transport: plain INFO sees it.
bounded 20 "$KEYLOCK" -S "$S" "$@" --name tls-holder t:1 -c \
    "'$KEYLOCK' info t:1 --json >info.out" 2>err
expect_status 0 $? "a command under a lock taken over TLS"
expect_grep '"holders":\[{[^]]*"name":"tls-holder"' info.out \
    "the TLS holder in plain INFO"
"$KEYLOCK" info t:1 --json >info.out
expect_grep '"holders":\[\]' info.out "released after the command"
pass "a lock over TLS runs the command, plain TCP sees the holder"

bounded 20 "$KEYLOCK" -S "$S" --tls-ca other.pem --tls-cert cli.pem \
    --tls-key cli.key k -- touch ran 2>err
expect_status 77 $? "a server signed by an unknown CA"
expect_grep "TLS handshake with $S: server certificate not trusted" \
    err "the message"
bounded 20 "$KEYLOCK" -S "$S" --tls-ca srv.pem ping 2>err
expect_status 77 $? "a server that is not its own CA"
pass "an untrusted server: exit 77, \"$(cat err)\""

# TLS 1.3 refuses the client after its handshake ends: the refusal (an
# alert, or a reset that overtakes it) comes with the first request, and
# is TLS (77) either way.
for cert in rogue none; do
	if [ $cert = none ]; then
		bounded 20 "$KEYLOCK" -S "$S" --tls-ca ca.pem k -- touch ran \
		    2>err
	else
		bounded 20 "$KEYLOCK" -S "$S" --tls-ca ca.pem \
		    --tls-cert $cert.pem --tls-key $cert.key k -- touch ran \
		    2>err
	fi
	rc=$?
	[ $rc -eq 77 ] ||
	    fail "client certificate $cert: exit $rc, want 77"
	expect_grep "TLS" err "client certificate $cert: the message"
	[ ! -e ran ] || fail "client certificate $cert: the command ran"
done
pass "a foreign or missing client certificate: refused, nothing run"

bounded 20 "$KEYLOCK" -S "$S" --tls-ca missing.pem ping 2>err
expect_status 66 $? "an unreadable CA file"
expect_grep "missing.pem" err "the message"
bounded 20 "$KEYLOCK" -S "$S" --tls-ca ca.pem --tls-cert cli.pem \
    --tls-key rogue.key ping 2>err
expect_status 66 $? "a key that does not match the certificate"
bounded 20 "$KEYLOCK" -S "$S" --tls-key cli.key ping 2>/dev/null
expect_status 64 $? "a key without a certificate"
bounded 20 "$KEYLOCK" -S "tls://$TMP/sock" ping 2>/dev/null
expect_status 64 $? "TLS to a unix socket"
bounded 20 "$KEYLOCK" --connect-timeout 1 -S "tls://127.0.0.1:$PORT" "$@" \
    ping 2>/dev/null
rc=$?
[ $rc -ne 0 ] || fail "TLS to the plain port succeeded"
pass "bad TLS files: 66; a key alone or a unix socket: 64"

# A TLS holder notices the daemon's death as a plain one does (the poll
# loop under TLS: keylock_check() through the TLS layer).
"$KEYLOCK" -S "$S" "$@" --grace 1 t:loss -c \
    "touch held; while :; do sleep 0.05; done" 2>err &
holder=$!
BGPIDS="$BGPIDS $holder"
wait_for "[ -e held ]" 10 || fail "the TLS holder never ran its command"
sleep 0.3	# long enough for idle TLS records (session tickets) to land
kill -0 $holder 2>/dev/null || fail "the TLS holder quit while holding"
daemon_kill
wait_exit $holder 10
expect_status 75 $? "the TLS holder after the daemon died"
pass "daemon killed under a TLS holder: exit 75"

# SIGHUP reads the certificate, key, client CA and CRL again, for new
# connections: a renewed server certificate is served at once, a TLS
# holder connected before the reloads keeps its session, a reload whose
# files are bad keeps the running ones, and a client certificate the CRL
# revokes is refused from then on. The second server certificate and the
# CRL are made here, with the test CA.
command -v openssl >/dev/null 2>&1 || skip "no openssl to make a CRL"
cp srv.pem live.pem
cp srv.key live.key
CONF=$TMP/tls.conf
printf 'tls-cert %s\ntls-key %s\ntls-client-ca %s\n' "$TMP/live.pem" \
    "$TMP/live.key" "$TMP/ca.pem" >"$CONF"
daemon_start --config "$CONF" --tls-port 0
TLS=$(awk '/^tls /{print $2}' port)
S=tls://127.0.0.1:$TLS
served() {
	openssl s_client -connect "127.0.0.1:$TLS" -CAfile ca.pem \
	    -cert cli.pem -key cli.key </dev/null 2>/dev/null |
	    openssl x509 -noout -serial 2>/dev/null
}
[ "$(served)" = serial=01 ] || fail "served at the start: $(served)"
rm -f held go
"$KEYLOCK" -S "$S" "$@" t:across -c \
    "touch held; while [ ! -e go ]; do sleep 0.05; done" 2>holder.err &
holder=$!
BGPIDS="$BGPIDS $holder"
wait_for "[ -e held ]" 10 || fail "the TLS holder never ran its command"

openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 \
    -out srv2.key 2>/dev/null &&
openssl req -new -key srv2.key -subj /CN=localhost -out srv2.csr \
    2>/dev/null &&
printf '%s\n' basicConstraints=CA:FALSE keyUsage=critical,digitalSignature \
    extendedKeyUsage=serverAuth subjectKeyIdentifier=hash \
    authorityKeyIdentifier=keyid subjectAltName=IP:127.0.0.1,DNS:localhost \
    >srv2.ext &&
openssl x509 -req -in srv2.csr -CA ca.pem -CAkey ca.key -set_serial 9 \
    -days 2 -extfile srv2.ext -out srv2.pem 2>/dev/null ||
    fail "openssl could not make a second server certificate"
cp srv2.pem live.pem
cp srv2.key live.key
kill -HUP "$DPID"
wait_for "grep -q 'reload: TLS certificate, key, client CA and CRL read again' '$TMP/daemon.log'" 10 ||
    fail "no TLS reload in the log"
[ "$(served)" = serial=09 ] || fail "served after the reload: $(served)"
bounded 20 "$KEYLOCK" -S "$S" "$@" ping >/dev/null
expect_status 0 $? "ping over TLS after the reload"
pass "SIGHUP: the renewed certificate is served to new connections"

# A key that does not go with the certificate: the reload is refused and
# says why; the running certificate stays.
cp srv.key live.key
kill -HUP "$DPID"
wait_for "grep -q 'reload: tls-key .*keeping the running configuration' '$TMP/daemon.log'" 10 ||
    fail "no refused reload in the log: $(tail -3 "$TMP/daemon.log")"
[ "$(served)" = serial=09 ] || fail "served after a bad reload: $(served)"
bounded 20 "$KEYLOCK" -S "$S" "$@" ping >/dev/null
expect_status 0 $? "ping over TLS after a bad reload"
pass "SIGHUP with a bad key: refused, logged, the running TLS kept"

# A CRL that revokes cli (serial 2): new connections with it are refused,
# a client certificate it does not revoke is served.
mkdir db && : >db/index.txt && echo 01 >db/crlnumber &&
printf '[ca]\ndefault_ca=t\n[t]\ndatabase=db/index.txt\ncrlnumber=db/crlnumber\ncertificate=ca.pem\nprivate_key=ca.key\ndefault_md=sha256\ndefault_crl_days=2\n' \
    >ca.cnf &&
openssl req -new -key cli.key -subj /CN=second -out cli2.csr 2>/dev/null &&
printf '%s\n' basicConstraints=CA:FALSE keyUsage=critical,digitalSignature \
    extendedKeyUsage=clientAuth >cli2.ext &&
openssl x509 -req -in cli2.csr -CA ca.pem -CAkey ca.key -set_serial 10 \
    -days 2 -extfile cli2.ext -out cli2.pem 2>/dev/null &&
openssl ca -config ca.cnf -revoke cli.pem >/dev/null 2>&1 &&
openssl ca -config ca.cnf -gencrl -out crl.pem >/dev/null 2>&1 ||
    fail "openssl could not make a CRL"
cp srv2.key live.key
printf 'tls-crl %s\n' "$TMP/crl.pem" >>"$CONF"
kill -HUP "$DPID"
wait_for "[ \$(grep -c 'reload: TLS certificate, key, client CA and CRL read again' '$TMP/daemon.log') -eq 2 ]" 10 ||
    fail "no second TLS reload in the log"
bounded 20 "$KEYLOCK" -S "$S" "$@" k -- touch ran 2>err
rc=$?
[ $rc -eq 77 ] || fail "a revoked client certificate: exit $rc, want 77"
[ ! -e ran ] || fail "a revoked client certificate: the command ran"
bounded 20 "$KEYLOCK" -S "$S" --tls-ca ca.pem --tls-cert cli2.pem \
    --tls-key cli.key ping >/dev/null
expect_status 0 $? "a client certificate the CRL does not revoke"
pass "SIGHUP with tls-crl: the revoked client certificate is refused"

# The holder connected before all three reloads still has its session:
# its command ends and it unlocks over the same connection.
kill -0 $holder 2>/dev/null || fail "the TLS holder lost its connection"
touch go
wait_exit $holder 10
expect_status 0 $? "the TLS holder across the reloads"
"$KEYLOCK" info t:across --json >info.out
expect_grep '"holders":\[\]' info.out "t:across released by its holder"
pass "a TLS connection open across the reloads keeps its session"
daemon_stop
