#!/bin/sh
# The daemon's man pages render with man(1) without a single warning, and
# keylockd(8) documents every exit status the daemon uses.
. "$(dirname "$0")/lib.sh"
need man
for page in keylockd.8 keylockd.conf.5 keylockd-protocol.7; do
	f=$TOP_SRCDIR/man/$page
	[ -f "$f" ] || fail "no $f"
	LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -E UTF-8 -l "$f" \
	    >"$TMP/out" 2>"$TMP/err"
	expect_status 0 $? "man -l $page"
	[ ! -s "$TMP/err" ] || fail "$page: $(head -5 "$TMP/err")"
	[ "$(wc -l <"$TMP/out")" -gt 20 ] || fail "$page renders to nothing"
done
pass "keylockd(8), keylockd.conf(5), keylockd-protocol(7): no warnings"

LC_ALL=C.UTF-8 MANWIDTH=200 man -l "$TOP_SRCDIR/man/keylockd.8" \
    2>/dev/null >"$TMP/keylockd.txt"
for section in SYNOPSIS OPTIONS SIGNALS "EXIT STATUS" ENVIRONMENT FILES \
    "FAILURE MODEL" EXAMPLES; do
	expect_grep "^$section\$" "$TMP/keylockd.txt" "keylockd(8) section"
done
for word in LISTEN_FDS NOTIFY_SOCKET JOURNAL_STREAM SIGHUP SIGTERM \
    "fencing" "keepalive"; do
	expect_grep "$word" "$TMP/keylockd.txt" "keylockd(8) mentions"
done
for status in 0 1 64 78; do
	expect_grep "^ +$status\$|^ +$status  " "$TMP/keylockd.txt" \
	    "exit status $status in keylockd(8)"
done
pass "keylockd(8) has its sections, the environment and exit statuses"
