#!/bin/sh
# Makes the test certificates in this directory, which every TLS test uses
# (tests/lib/daemon.sh names the directory TEST_CERTS). They are checked in,
# so that no test makes its own; run this only to replace them. Test keys,
# valid for 100 years, never to be trusted outside the tests:
#   ca     a CA, "keylockd test CA"
#   srv    the server: CN localhost, subjectAltName IP:127.0.0.1 and
#          DNS:localhost, signed by ca
#   cli    a client, CN client, signed by ca
#   other  a second CA, "other", that nothing trusts
#   rogue  a client, CN client, signed by other
# with the extensions strict verifiers want (Python 3.13's default
# context): key usages, and key identifiers on every certificate.
set -eu
cd "$(dirname "$0")"
DAYS=36500

# key NAME: a P-256 key in NAME.key
key() {
	openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 \
	    -out "$1.key"
}

# ca NAME CN: a self-signed CA certificate
ca() {
	key "$1"
	openssl req -x509 -new -key "$1.key" -out "$1.pem" -days "$DAYS" \
	    -subj "/CN=$2" -addext basicConstraints=critical,CA:TRUE \
	    -addext keyUsage=critical,keyCertSign,cRLSign
}

# leaf NAME CN CA SERIAL USAGE [EXTENSION]: a certificate signed by CA for
# USAGE (serverAuth, clientAuth)
leaf() {
	key "$1"
	openssl req -new -key "$1.key" -out "$1.csr" -subj "/CN=$2" \
	    2>/dev/null
	printf '%s\n' basicConstraints=CA:FALSE \
	    keyUsage=critical,digitalSignature "extendedKeyUsage=$5" \
	    subjectKeyIdentifier=hash authorityKeyIdentifier=keyid \
	    "${6:-}" >"$1.ext"
	openssl x509 -req -in "$1.csr" -CA "$3.pem" -CAkey "$3.key" \
	    -set_serial "$4" -days "$DAYS" -extfile "$1.ext" -out "$1.pem"
	rm -f "$1.csr" "$1.ext"
}

ca ca "keylockd test CA"
ca other other
leaf srv localhost ca 1 serverAuth \
    "subjectAltName=IP:127.0.0.1,DNS:localhost"
leaf cli client ca 2 clientAuth
leaf rogue client other 3 clientAuth
chmod 644 ./*.key ./*.pem
