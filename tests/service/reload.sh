#!/bin/sh
# SIGHUP: a live setting (max-keys) changes at once and the LIMIT boundary
# moves; a held lock and its waiter live through the reload; a file with
# errors is reported and the old settings stay; a restart-only setting
# gets a warning and no effect.
. "$(dirname "$0")/lib.sh"
need nc
CONF=$TMP/keylockd.conf

printf 'max-keys 2\nlog-level info\n' >"$CONF"
daemon_start --config "$CONF"

ask_tcp "LOCK a b" "LOCK c d e" QUIT >"$TMP/out"
expect_grep '^OK [0-9]+$' "$TMP/out" "two keys under max-keys 2"
expect_grep '^ERR LIMIT 3 keys in one request, max-keys is 2$' "$TMP/out" \
    "three keys under max-keys 2"

# A holder and a waiter, across every reload below.
session_open holder 3 127.0.0.1 "$PORT"
session_open waiter 4 127.0.0.1 "$PORT"
session_send holder "NAME holder"
session_send holder "LOCK kept"
session_expect holder 2 '^OK [0-9]+$' "the holder's LOCK"
session_send waiter "NAME waiter"
session_expect waiter 1 '^OK$' "the waiter's NAME"
session_send waiter "LOCK kept"
wait_for "ask_tcp 'INFO kept' | grep -q '\"waiters\":\[{'" "$REPLY_S" ||
    fail "the waiter is not queued"

# A live change.
printf 'max-keys 3\nlog-level info\n' >"$CONF"
kill -HUP "$DPID"
wait_log 'reload: max-keys changed from 2 to 3' "the live change"
ask_tcp "LOCK c d e" "LOCK f g h i" QUIT >"$TMP/out"
expect_grep '^OK [0-9]+$' "$TMP/out" "three keys after the reload"
expect_grep '^ERR LIMIT 4 keys in one request, max-keys is 3$' "$TMP/out" \
    "four keys after the reload"
pass "SIGHUP: max-keys 2 -> 3 live, the LIMIT boundary moved"

ask_tcp "INFO kept" >"$TMP/out"
expect_grep '"holders":\[\{"client":[0-9]+,"name":"holder"' "$TMP/out" \
    "the holder after the reload"
expect_grep '"waiters":\[\{"client":[0-9]+,"name":"waiter"' "$TMP/out" \
    "the waiter after the reload"
session_none waiter 2 "the waiter during the reload"
pass "a held lock and its waiter survive the reload"

# A bad file: every error logged as FILE:LINE, the old settings stay.
printf 'max-keys 5\nmax-keys many\nno-such-thing 1\n' >"$CONF"
kill -HUP "$DPID"
wait_log 'keeping the running one' "the bad file's verdict"
expect_grep "^$CONF:2: max-keys: " "$TMP/daemon.log" "line 2 reported"
expect_grep "^$CONF:3: no-such-thing: unknown setting" "$TMP/daemon.log" \
    "line 3 reported"
expect_nogrep 'max-keys changed from 3 to 5' "$TMP/daemon.log" \
    "line 1 of a bad file applied"
ask_tcp "LOCK c d e" "LOCK f g h i" QUIT >"$TMP/out"
expect_grep '^OK [0-9]+$' "$TMP/out" "three keys after the bad reload"
expect_grep 'max-keys is 3$' "$TMP/out" "max-keys still 3"
kill -0 "$DPID" || fail "the daemon died on a bad reload"
pass "a bad file on SIGHUP: logged line by line, old settings kept"

# Settings that cannot work together are refused as at the start: a
# max-line whose line plus a read would not fit under max-input-total.
printf 'max-keys 3\nmax-input-total 131072\nmax-line 131072\n' >"$CONF"
kill -HUP "$DPID"
wait_log 'max-input-total 131072 is under max-line plus one read' \
    "the reload's verdict on max-input-total"
expect_nogrep 'max-line changed' "$TMP/daemon.log" "max-line applied"
kill -0 "$DPID" || fail "the daemon died on the reload"
pass "a reload with max-input-total under max-line plus a read: refused"

# A restart-only setting: a warning, and no effect.
printf 'max-keys 3\nunix-mode 0600\n' >"$CONF"
kill -HUP "$DPID"
wait_log 'reload: unix-mode changed from 0660 to 0600; it takes effect at the next restart' \
    "the restart-only warning"
expect_grep 'warn: reload: unix-mode' "$TMP/daemon.log" "logged at warn"
expect_eq 660 "$(stat -c %a "$TMP/sock")" "the socket's mode after the reload"
pass "a restart-only setting: warned about, not applied"

# Everything survived: the waiter is granted when the holder lets go.
session_send holder "UNLOCK kept"
session_expect holder 3 '^OK 1$' "UNLOCK"
session_expect waiter 2 '^OK [0-9]+$' "the waiter's grant"
[ "$(sed -n '2s/^OK //p' "$TMP/waiter.out")" -gt \
    "$(sed -n '2s/^OK //p' "$TMP/holder.out")" ] ||
    fail "the waiter's token is not above the holder's"
pass "after three reloads the waiter gets the lock, with a larger token"
daemon_stop
