#!/bin/sh
# `make install DESTDIR=...` from the build tree puts the daemon, the
# config file, both units and the man pages where the configured
# directories say; a second install keeps an edited config file; uninstall
# removes the config file only while it is the shipped one.
. "$(dirname "$0")/lib.sh"
need make
[ -f "$TOP_BUILDDIR/Makefile" ] || fail "no Makefile in $TOP_BUILDDIR"
DEST=$TMP/dest

# A clean make, whatever make check runs under: no jobserver, no command
# line variables, no MAKEFLAGS.
kmake() {
	env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u MAKEOVERRIDES \
	    make -s -C "$TOP_BUILDDIR" "$@"
}

# The directories as the Makefile expands them.
printf 'kl-print-dirs:\n\t@echo "$(sbindir)|$(sysconfdir)|$(mandir)|$(systemdsystemunitdir)|$(prefix)"\n' \
    >"$TMP/print.mk"
dirs=$(kmake -f Makefile -f "$TMP/print.mk" kl-print-dirs) ||
    fail "cannot read the directories from the Makefile"
IFS='|' read -r sbindir sysconfdir mandir unitdir prefix <<EOT
$dirs
EOT
expect_eq "$prefix/lib/systemd/system" "$unitdir" "the default unit dir"

kmake install DESTDIR="$DEST" >"$TMP/install.log" 2>&1 ||
    fail "make install: $(tail -20 "$TMP/install.log")"
(cd "$DEST" && find . -type f -o -type l) | sed 's|^\.||' | sort \
    >"$TMP/installed"
echo "installed files:"
sed 's/^/  /' "$TMP/installed"

for f in "$sbindir/keylockd" "$sysconfdir/keylockd/keylockd.conf" \
    "$unitdir/keylockd.service" "$unitdir/keylockd.socket" \
    "$mandir/man8/keylockd.8" "$mandir/man5/keylockd.conf.5" \
    "$mandir/man7/keylockd-protocol.7"; do
	grep -qx "$f" "$TMP/installed" || fail "not installed: $f"
done
[ -x "$DEST$sbindir/keylockd" ] || fail "keylockd is not executable"
cmp -s "$TOP_SRCDIR/etc/keylockd.conf" "$DEST$sysconfdir/keylockd/keylockd.conf" ||
    fail "the installed config differs from etc/keylockd.conf"
expect_grep "^ExecStart=$sbindir/keylockd " "$DEST$unitdir/keylockd.service" \
    "the installed unit's ExecStart"
"$DEST$sbindir/keylockd" --check-config \
    --config "$DEST$sysconfdir/keylockd/keylockd.conf" >/dev/null 2>&1
expect_status 0 $? "the installed daemon on the installed config"
pass "make install: daemon, config, units, man pages in place"

echo "max-keys 7" >>"$DEST$sysconfdir/keylockd/keylockd.conf"
kmake install DESTDIR="$DEST" >"$TMP/install.log" 2>&1 ||
    fail "second make install: $(tail -20 "$TMP/install.log")"
expect_grep '^max-keys 7$' "$DEST$sysconfdir/keylockd/keylockd.conf" \
    "the edited config after a second install"
expect_grep 'keeping the existing' "$TMP/install.log" "install says so"
pass "a second install keeps the edited config"

kmake uninstall DESTDIR="$DEST" >"$TMP/uninstall.log" 2>&1 ||
    fail "make uninstall: $(tail -20 "$TMP/uninstall.log")"
[ -f "$DEST$sysconfdir/keylockd/keylockd.conf" ] ||
    fail "uninstall removed an edited config"
for f in "$sbindir/keylockd" "$unitdir/keylockd.service" \
    "$mandir/man8/keylockd.8"; do
	[ ! -e "$DEST$f" ] || fail "uninstall left $f"
done
rm "$DEST$sysconfdir/keylockd/keylockd.conf"
kmake install DESTDIR="$DEST" >"$TMP/install.log" 2>&1 ||
    fail "third make install"
kmake uninstall DESTDIR="$DEST" >"$TMP/uninstall.log" 2>&1 ||
    fail "second make uninstall"
[ ! -e "$DEST$sysconfdir/keylockd/keylockd.conf" ] ||
    fail "uninstall left the shipped config"
pass "uninstall: removes the shipped config, keeps an edited one"
