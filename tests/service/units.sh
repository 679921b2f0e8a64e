#!/bin/sh
# The generated systemd units pass `systemd-analyze verify` (no PID 1
# needed) and the service's sandbox keeps `systemd-analyze security` at or
# below 2.0 ("OK"). verify checks that ExecStart= names an executable and
# that Documentation= pages exist, so the units are checked as copies whose
# ExecStart= is the daemon just built, with MANPATH at this tree's pages.
. "$(dirname "$0")/lib.sh"
need systemd-analyze
UNITS=$TOP_BUILDDIR/systemd
[ -f "$UNITS/keylockd.service" ] && [ -f "$UNITS/keylockd.socket" ] ||
    fail "no generated units in $UNITS (make all builds them)"

# What will be installed: the configured sbindir, no @...@ left.
expect_grep '^ExecStart=/.*/keylockd ' "$UNITS/keylockd.service" "ExecStart="
expect_nogrep '@[a-z_]+@' "$UNITS/keylockd.service" "substitution"
expect_nogrep '@[a-z_]+@' "$UNITS/keylockd.socket" "substitution"
for want in '^Type=notify$' '^ExecReload=/bin/kill -HUP \$MAINPID$' \
    '^DynamicUser=yes$' '^StateDirectory=keylockd$' \
    '^RuntimeDirectory=keylockd$' '^NoNewPrivileges=yes$' \
    '^ProtectSystem=strict$' '^ProtectHome=yes$' '^PrivateTmp=yes$' \
    '^RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6$' \
    '^LimitNOFILE=65536$'; do
	expect_grep "$want" "$UNITS/keylockd.service" "keylockd.service"
done
for want in '^ListenStream=127.0.0.1:7711$' \
    '^ListenStream=/run/keylockd/keylockd.sock$' '^SocketMode=0660$' \
    '^Service=keylockd.service$'; do
	expect_grep "$want" "$UNITS/keylockd.socket" "keylockd.socket"
done
pass "the units say what they must"

mkdir -p "$TMP/units" "$TMP/man/man5" "$TMP/man/man7" "$TMP/man/man8"
sed "s|^ExecStart=[^ ]*|ExecStart=$KEYLOCKD|" "$UNITS/keylockd.service" \
    >"$TMP/units/keylockd.service"
cp "$UNITS/keylockd.socket" "$TMP/units/keylockd.socket"
cp "$TOP_SRCDIR/man/keylockd.8" "$TMP/man/man8/"
cp "$TOP_SRCDIR/man/keylockd.conf.5" "$TMP/man/man5/"
cp "$TOP_SRCDIR/man/keylockd-protocol.7" "$TMP/man/man7/"

MANPATH=$TMP/man SYSTEMD_LOG_COLOR=0 systemd-analyze verify \
    "$TMP/units/keylockd.service" "$TMP/units/keylockd.socket" \
    >"$TMP/verify" 2>&1
expect_status 0 $? "systemd-analyze verify: $(cat "$TMP/verify")"
[ ! -s "$TMP/verify" ] || fail "systemd-analyze verify said: $(cat "$TMP/verify")"
pass "systemd-analyze verify: clean"

# --offline needs systemd 250; --threshold makes the score the verdict.
if systemd-analyze security --help 2>/dev/null | grep -q -- --offline; then
	SYSTEMD_LOG_COLOR=0 systemd-analyze security --offline=yes \
	    --threshold=20 "$TMP/units/keylockd.service" >"$TMP/security" 2>&1
	rc=$?
	score=$(sed -n 's/.*Overall exposure level for keylockd.service: \([0-9.]*\).*/\1/p' \
	    "$TMP/security")
	[ -n "$score" ] || fail "no score from systemd-analyze security: $(tail -3 "$TMP/security")"
	expect_status 0 "$rc" "exposure $score is above 2.0"
	pass "systemd-analyze security: exposure $score"
else
	echo "$TEST: systemd-analyze security --offline unsupported; not scored"
fi
