#!/bin/sh
# backend etcd on a locked-down etcd (issue 24, review H3): a real etcd
# member serving https only, with client certificates required
# (--client-cert-auth) and etcd's own authentication enabled, and a role
# that covers keylockd's prefix alone (keylockd.conf(5), BACKEND ETCD). A
# front end with the CA, a client certificate and its user's password
# file locks and unlocks through it, and authenticates again when its
# token expires; each wrong setting (another CA, no client certificate,
# a wrong password, an open password file, plain http) stops the start
# with a log line that says why; a role taken away mid-way gives ERR
# BACKEND, never a crash.
. "$(dirname "$0")/lib.sh"

ETCD=${ETCD:-etcd}
ETCDCTL=${ETCDCTL:-etcdctl}
command -v "$ETCD" >/dev/null 2>&1 || skip "etcd is not installed (etcd-server)"
command -v "$ETCDCTL" >/dev/null 2>&1 || skip "etcdctl is not installed"
KEYLOCK=${KEYLOCK:-$top_builddir/tools/keylock}
C=$TEST_CERTS

port_busy() {
	ss -Htan "( sport = :$1 or dport = :$1 )" 2>/dev/null | grep -q .
}
free_port() {
	while :; do
		_p=$((20000 + $(od -An -N2 -tu2 /dev/urandom) % 12768))
		port_busy "$_p" || { echo "$_p"; return; }
	done
}

# The CA is tests/certs'. etcd's JSON gateway dials etcd's own gRPC port
# with the server's certificate as its client certificate, so that
# certificate needs both uses (tests/certs/srv is a server's only); and
# etcd 3.4's gateway refuses a client certificate with a Common Name when
# auth is on (it would not be the user): both are made here.
command -v openssl >/dev/null 2>&1 || skip "no openssl"
# cert NAME SUBJECT USAGE [SAN]: a P-256 key and a certificate of the
# test CA in $TMP/NAME.{key,pem}
cert() {
	openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 \
	    -out "$TMP/$1.key" 2>/dev/null || fail "$1's key"
	openssl req -new -key "$TMP/$1.key" -subj "$2" \
	    -out "$TMP/$1.csr" 2>/dev/null || fail "$1's request"
	printf '%s\n' basicConstraints=CA:FALSE \
	    keyUsage=critical,digitalSignature "extendedKeyUsage=$3" \
	    ${4:+"subjectAltName=$4"} >"$TMP/$1.ext"
	openssl x509 -req -in "$TMP/$1.csr" -CA "$C/ca.pem" \
	    -CAkey "$C/ca.key" -set_serial "$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')" \
	    -days 2 -extfile "$TMP/$1.ext" -out "$TMP/$1.pem" 2>/dev/null ||
	    fail "$1's certificate"
}
cert etcd /CN=etcd serverAuth,clientAuth IP:127.0.0.1
# etcd 3.4's gateway refuses (HTTP 400) a client certificate with a CN
cert fe /O=keylockd clientAuth

CP=$(free_port)
PP=$(free_port)
[ "$CP" != "$PP" ] || PP=$((CP + 1))
URL=https://127.0.0.1:$CP
# a token lives 2 s unless used, and the front end's keepalives come
# every 10 s (a third of its lease): requests 3 s apart find it expired
"$ETCD" --name s1 --data-dir "$TMP/etcd" \
    --listen-client-urls "$URL" --advertise-client-urls "$URL" \
    --listen-peer-urls "http://127.0.0.1:$PP" \
    --initial-advertise-peer-urls "http://127.0.0.1:$PP" \
    --initial-cluster "s1=http://127.0.0.1:$PP" \
    --cert-file "$TMP/etcd.pem" --key-file "$TMP/etcd.key" \
    --trusted-ca-file "$C/ca.pem" --client-cert-auth \
    --auth-token simple --auth-token-ttl 2 \
    --logger zap --log-level warn >"$TMP/etcd.log" 2>&1 &
BGPIDS="$BGPIDS $!"

ctl() {
	"$ETCDCTL" --endpoints "$URL" --cacert "$C/ca.pem" --cert "$C/cli.pem" \
	    --key "$C/cli.key" --dial-timeout 5s "$@"
}
root() {
	ctl --user root:rootpw "$@"
}
wait_for "ctl endpoint health >/dev/null 2>&1" 30 ||
    fail "etcd did not come up: $(tail -n 5 "$TMP/etcd.log")"

# root, and a user whose role is the prefix kl/ and nothing else
ctl user add root:rootpw >/dev/null || fail "user add root"
ctl user add kl:s3cret-pw >/dev/null || fail "user add kl"
ctl role add klrole >/dev/null || fail "role add"
ctl role grant-permission klrole --prefix=true readwrite kl/ >/dev/null ||
    fail "grant-permission"
ctl user grant-role kl klrole >/dev/null || fail "grant-role"
ctl user grant-role root root >/dev/null || fail "grant-role root"
ctl auth enable >/dev/null || fail "auth enable"
root put other/secret 1 >/dev/null || fail "root put"
ctl --user kl:s3cret-pw put other/x 1 >/dev/null 2>&1 &&
    fail "the role reaches beyond kl/"

printf 's3cret-pw\n' >"$TMP/pw"
chmod 600 "$TMP/pw"
printf 'wrong-pw\n' >"$TMP/badpw"
chmod 600 "$TMP/badpw"

# A front end on this etcd: ENDS (the endpoint), TLS (CA and client
# certificate), AUTH (user and password file), COMMON; a refused start
# leaves one of them out or changes it.
ENDS="--backend etcd --etcd-endpoints $URL --etcd-prefix kl/"
TLS="--etcd-ca $C/ca.pem --etcd-cert $TMP/fe.pem --etcd-key $TMP/fe.key"
AUTH="--etcd-user kl --etcd-password-file $TMP/pw"
# etcd-timeout is the default's 5000 ms: the first refused start opens
# libssl and shakes hands under ASan, which took more than 1000 ms on a
# busy machine and then said "no connection free" for the reason sought.
COMMON="--etcd-timeout 5000 --etcd-lease-ttl 30 --log-level debug"

# refused_start AS OPTIONS...: a front end with OPTIONS in the
# background, its socket, state and log in $TMP/AS.d; its pid in RPID.
refused_start() {
	_as=$1
	shift
	mkdir -p "$TMP/$_as.d"
	"$KEYLOCKD" --config /dev/null --bind 127.0.0.1 --port 0 \
	    --unix "$TMP/$_as.d/sock" --state-dir "$TMP/$_as.d" "$@" \
	    >"$TMP/$_as.d/log" 2>&1 &
	RPID=$!
	BGPIDS="$BGPIDS $RPID"
}

# refused_check AS PID WHAT PATTERN: that front end does not start: it
# exits within 60 s, non-zero (not by a signal), and its log says PATTERN.
refused_check() {
	_log=$TMP/$1.d/log _pid=$2 _what=$3 _pat=$4
	wait_for "! pid_running $_pid" 60 ||
	    fail "$_what: still running after 60 s: $(tail -n 5 "$_log")"
	wait "$_pid"
	_rc=$?
	[ "$_rc" -ne 0 ] || fail "$_what: exit 0: $(tail -n 5 "$_log")"
	[ "$_rc" -lt 128 ] || fail "$_what: killed by signal $((_rc - 128))"
	grep -q -- "$_pat" "$_log" ||
	    fail "$_what: no \"$_pat\" in: $(tail -n 5 "$_log") etcd: $(tail -n 5 "$TMP/etcd.log")"
	pass "$_what: refused, exit $_rc: $(grep -- "$_pat" "$_log" |
	    head -n 1)"
}

# refused WHAT PATTERN OPTIONS...: refused_start, then refused_check.
refused() {
	_w=$1 _p=$2
	shift 2
	refused_start refused "$@"
	refused_check refused "$RPID" "$_w" "$_p"
}

# shellcheck disable=SC2086
{
# Without a user, etcd refuses every request and keylockd gives up only
# at its start deadline (10 x etcd-timeout, 50 s): that one runs beside
# the rest, and is judged at the end.
refused_start nouser $ENDS $TLS $COMMON
NOUSER=$RPID
refused "a CA that did not sign etcd's certificate" \
    "unable to get local issuer certificate" \
    $ENDS --etcd-ca "$C/other.pem" --etcd-cert "$TMP/fe.pem" \
    --etcd-key "$TMP/fe.key" $AUTH $COMMON
refused "no client certificate" "TLS.*\\(bad certificate\\|certificate required\\|handshake\\)" \
    $ENDS --etcd-ca "$C/ca.pem" $AUTH $COMMON
refused "a client certificate of another CA" "TLS.*\\(unknown ca\\|bad certificate\\|handshake\\)" \
    $ENDS --etcd-ca "$C/ca.pem" --etcd-cert "$C/rogue.pem" \
    --etcd-key "$C/rogue.key" $AUTH $COMMON
refused "a wrong password" "invalid user ID or password" \
    $ENDS $TLS --etcd-user kl --etcd-password-file "$TMP/badpw" $COMMON
chmod 644 "$TMP/badpw"
refused "a password file others can read" "mode 0644 is too open" \
    $ENDS $TLS --etcd-user kl --etcd-password-file "$TMP/badpw" $COMMON
refused "plain http to the https port" "connection closed\\|HTTP 400" \
    --backend etcd --etcd-endpoints "http://127.0.0.1:$CP" $AUTH $COMMON
refused "a CA without https endpoints" "needs https:// endpoints" \
    --backend etcd --etcd-endpoints "http://127.0.0.1:$CP" $TLS $AUTH \
    $COMMON
refused "a client certificate without its key" "go together" \
    $ENDS --etcd-cert "$TMP/fe.pem" $AUTH $COMMON
refused "a user without a password file" "go together" \
    $ENDS $TLS --etcd-user kl $COMMON

daemon_launch $ENDS $TLS $AUTH $COMMON
}
kl() {
	"$KEYLOCK" -S "127.0.0.1:$PORT" "$@"
}
kl -n job -- true || fail "LOCK through https and etcd auth"
# held by one keylock, a second is refused
kl job -- "$KEYLOCK" -S "127.0.0.1:$PORT" -n job -- true 2>/dev/null &&
    fail "job taken twice"
root get --prefix kl/ --keys-only >"$TMP/keys" || fail "root get"
grep -q "^kl/" "$TMP/keys" || fail "no entries under kl/ in etcd"
pass "LOCK and UNLOCK over https, with a client certificate and a token"

# tokens expire after 2 s unused: with waits longer than that, calls
# come with an expired token and the front end authenticates again
for i in 1 2 3; do
	sleep 3
	kl -n "job$i" -- true || fail "LOCK after $((i * 3)) s: $(tail -n 3 \
	    "$TMP/daemon.log")"
done
grep -q "authenticating again" "$TMP/daemon.log" ||
    fail "no token expired in 9 s (etcd's --auth-token-ttl 2)"
pass "expired tokens are replaced: $(grep -c "authenticating again" \
    "$TMP/daemon.log") times, no request failed"

# the role taken away: ERR BACKEND, a log line, and service back with it
root role revoke-permission klrole kl/ --prefix=true >/dev/null ||
    fail "revoke-permission"
kl -n job2 -- true 2>"$TMP/err" && fail "LOCK without permission succeeded"
grep -q "BACKEND\|backend" "$TMP/err" || fail "not ERR BACKEND: $(cat "$TMP/err")"
wait_for "grep -q 'permission denied' '$TMP/daemon.log'" 10 ||
    fail "no log line for the refusal"
kill -0 "$DPID" || fail "keylockd died"
root role grant-permission klrole --prefix=true readwrite kl/ >/dev/null ||
    fail "grant-permission again"
wait_for "kl -n job3 -- true 2>/dev/null" 30 ||
    fail "no service after the role came back: $(tail -n 5 "$TMP/daemon.log")"
pass "a role taken away: ERR BACKEND and a log line; back with the role"
refused_check nouser "$NOUSER" "no etcd user" \
    "permission denied\\|user name is empty"
daemon_stop
