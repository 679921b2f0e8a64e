#!/bin/sh
# Sets up and starts keylockd in the foreground on its defaults: TCP
# 127.0.0.1:7711; options go to keylockd (scripts/start.sh --port 7712).
# It builds in build/, out of the source tree, so that scripts/test.sh
# (build-*/) never trips over it, and configures afresh only when its
# configure line (below, plus $CONFIGURE_FLAGS) differs from the last
# one's. Without root, the state (fencing-token mark) and the unix socket
# live in ./state instead of /var/lib/keylockd and /run/keylockd.
set -eu
cd "$(dirname "$0")/.."
. scripts/lib.sh
prepare
# shellcheck disable=SC2086
configure_in build --sysconfdir=/etc --localstatedir=/var --runstatedir=/run \
    ${CONFIGURE_FLAGS:-}
make -C build -j"$JOBS"
if [ "$(id -u)" -eq 0 ]; then
	exec build/src/keylockd "$@"
fi
mkdir -p state
exec build/src/keylockd --state-dir "$PWD/state" \
    --unix "$PWD/state/keylockd.sock" "$@"
