#!/bin/sh
# The shell tests' launcher (tests/lib/daemon.sh) keeps its daemons and
# clients hermetic: a daemon reads /dev/null as its config file and never
# the one this build reads by default (the --config default in --help,
# where an installed keylockd keeps the operator's settings), a test's own
# --config still wins, run_keylockd is hermetic too, and no KEYLOCK_*
# variable of the caller's, planted here before daemon.sh is sourced,
# reaches the test or its daemon.
for v in KEYLOCK_SERVER KEYLOCK_AUTH_FILE KEYLOCK_TLS_CA KEYLOCK_TLS_CERT \
    KEYLOCK_TLS_KEY; do
	eval "$v=/nonexistent/planted-by-hermetic.sh"
	export "$v"
done
KEYLOCKD_HARNESS_KEPT=yes
KEYLOCK_AFTER_A_KEPT_ONE=1
export KEYLOCKD_HARNESS_KEPT KEYLOCK_AFTER_A_KEPT_ONE
. "$(dirname "$0")/daemon.sh"

left=$(env | grep '^KEYLOCK_')
[ -z "$left" ] || fail "KEYLOCK_* survived daemon.sh: $left"
[ "${KEYLOCKD_HARNESS_KEPT:-}" = yes ] ||
    fail "daemon.sh unset KEYLOCKD_HARNESS_KEPT too"
pass "no KEYLOCK_* variable left; KEYLOCKD* kept"

default=$(run_keylockd --help |
    sed -n 's/.*--config FILE .*(default \(.*\), if present).*/\1/p')
[ -n "$default" ] || fail "no default config file in keylockd --help"
daemon_launch
grep -q 'starting, config /dev/null$' "$TMP/daemon.log" ||
    fail "the daemon did not read /dev/null: $(cat "$TMP/daemon.log")"
! grep -qF "$default" "$TMP/daemon.log" ||
    fail "the daemon names $default: $(cat "$TMP/daemon.log")"
env=$(tr '\0' '\n' <"/proc/$DPID/environ")
! printf '%s\n' "$env" | grep -q '^KEYLOCK_' ||
    fail "the daemon's environment: $(printf '%s\n' "$env" | grep '^KEYLOCK_')"
printf '%s\n' "$env" | grep -qx 'KEYLOCKD_HARNESS_KEPT=yes' ||
    fail "the daemon lost KEYLOCKD_HARNESS_KEPT"
daemon_stop
if [ -e "$default" ]; then
	where="present here"
else
	where="absent here"
fi
pass "the daemon read /dev/null, not $default ($where)"

out=$(run_keylockd --check-config)
expect_status 0 $? "run_keylockd --check-config"
[ "$out" = "keylockd: configuration /dev/null is valid" ] ||
    fail "run_keylockd --check-config said: $out"
pass "run_keylockd checks /dev/null"

printf 'max-keys 2\n' >"$TMP/own.conf"
daemon_launch --config "$TMP/own.conf"
grep -q "starting, config $TMP/own.conf\$" "$TMP/daemon.log" ||
    fail "a test's own --config lost: $(cat "$TMP/daemon.log")"
if command -v nc >/dev/null 2>&1; then
	out=$(printf 'LOCK a b c\nQUIT\n' | timeout 5 nc -N 127.0.0.1 "$PORT")
	case $out in
	"ERR LIMIT "*) ;;
	*) fail "LOCK of three keys under max-keys 2: $out" ;;
	esac
fi
daemon_stop
pass "a test's own --config wins"
