#!/bin/sh
# KEYLOCKD_WRAPPER for the C integration suites run through backend etcd
# (tests/etcd/integration.sh): starts the daemon it is given, with its
# arguments, as a front end on the cluster named by KL_ETCD_ENDPOINTS,
# under an etcd prefix of its own (a fresh lock table per daemon, as a
# fresh backend local daemon has).
bin=$1
shift
exec "$bin" "$@" --backend etcd --etcd-endpoints "$KL_ETCD_ENDPOINTS" \
    --etcd-prefix "kltest-$$-$(od -An -N4 -tx4 /dev/urandom | tr -d ' ')/" \
    --etcd-lease-ttl "${KL_ETCD_LEASE_TTL:-6}" \
    --etcd-timeout "${KL_ETCD_TIMEOUT:-2000}"
