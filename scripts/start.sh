#!/bin/sh
# Sets up and starts keylockd in the foreground on its defaults: TCP
# 127.0.0.1:7711. Without root, the state (fencing-token mark) and the unix
# socket live in ./state instead of /var/lib/keylockd and /run/keylockd.
set -eu
cd "$(dirname "$0")/.."
scripts/deps.sh
[ -x configure ] || autoreconf -fi
[ -f Makefile ] || ./configure --sysconfdir=/etc --localstatedir=/var \
    --runstatedir=/run
make -j"$(nproc)"
if [ "$(id -u)" -eq 0 ]; then
	exec ./src/keylockd "$@"
fi
mkdir -p state
exec ./src/keylockd --state-dir "$PWD/state" \
    --unix "$PWD/state/keylockd.sock" "$@"
