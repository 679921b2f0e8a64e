#!/bin/sh
# The config file and the command line: etc/keylockd.conf is valid and
# lists every setting at its default; every bad line is reported as
# FILE:LINE with exit 78; usage errors exit 64; the command line wins over
# the file, which wins over the defaults.
. "$(dirname "$0")/lib.sh"
CONF=$TOP_SRCDIR/etc/keylockd.conf

run_keylockd --check-config --config "$CONF" >"$TMP/out" 2>&1
expect_status 0 $? "--check-config on etc/keylockd.conf"
expect_grep "configuration .*keylockd.conf is valid" "$TMP/out" "the verdict"
# Uncommented, every default line must be valid too (unix-group, the
# auth-file, a user's secret file and the TLS files name things that need
# not exist here, and --check-config checks that they do, as the start
# does).
sed -e 's/^#\([a-z][a-z-]* \)/\1/' -e '/^unix-group /d' \
    -e '/^auth-file /d' -e '/^admin-auth-file /d' -e '/^tls-cert /d' \
    -e '/^user /d' \
    -e '/^tls-key /d' \
    -e '/^tls-client-ca /d' -e '/^tls-crl /d' "$CONF" \
    >"$TMP/uncommented.conf"
run_keylockd --check-config --config "$TMP/uncommented.conf" >/dev/null 2>&1
expect_status 0 $? "--check-config on the uncommented defaults"
pass "etc/keylockd.conf is valid, commented and uncommented"

# Every setting --help lists is in the file, commented out, and in both
# man pages; and nothing else is in the file.
run_keylockd --help >"$TMP/help" || fail "--help"
sed -n 's/^  --\([a-z][a-z-]*\) .*/\1/p' "$TMP/help" |
    grep -v -e '^config$' -e '^check-config$' | sort >"$TMP/settings"
[ "$(wc -l <"$TMP/settings")" -ge 20 ] ||
    fail "--help lists only $(wc -l <"$TMP/settings") settings"
sed -n 's/^#\([a-z][a-z-]*\) .*/\1/p' "$CONF" | sort >"$TMP/in-conf"
diff "$TMP/settings" "$TMP/in-conf" >"$TMP/diff" ||
    fail "settings of --help and etc/keylockd.conf differ: $(cat "$TMP/diff")"
sed 's/\\-/-/g' "$TOP_SRCDIR/man/keylockd.conf.5" >"$TMP/conf.5"
sed 's/\\-/-/g' "$TOP_SRCDIR/man/keylockd.8" >"$TMP/keylockd.8"
for s in $(cat "$TMP/settings"); do
	grep -Eq "^\.B $s( |\$)" "$TMP/conf.5" ||
	    fail "keylockd.conf(5) does not describe $s"
	grep -Eq -- "^\.BI? --$s( |\$)" "$TMP/keylockd.8" ||
	    fail "keylockd(8) does not list --$s"
done
pass "$(wc -l <"$TMP/settings") settings, in --help, the file and both man pages"

# Three bad lines: three FILE:LINE messages, all of them, exit 78.
cat >"$TMP/bad.conf" <<'EOF'
# a comment
max-keys 0
port 7711
no-such-setting 1
log-level loud

unix-mode 0660
EOF
run_keylockd --check-config --config "$TMP/bad.conf" >"$TMP/out" 2>&1
expect_status 78 $? "a file with three bad lines"
expect_eq 3 "$(grep -c "^$TMP/bad.conf:[0-9]*: " "$TMP/out")" \
    "FILE:LINE messages"
expect_grep "^$TMP/bad.conf:2: max-keys: " "$TMP/out" "line 2"
expect_grep "^$TMP/bad.conf:4: no-such-setting: unknown setting" "$TMP/out" \
    "line 4"
expect_grep "^$TMP/bad.conf:5: log-level: " "$TMP/out" "line 5"
run_keylockd --config "$TMP/bad.conf" --state-dir "$TMP" --unix '' \
    --port 0 >"$TMP/out" 2>&1
expect_status 78 $? "starting with a bad file"
run_keylockd --check-config --config "$TMP/missing.conf" >"$TMP/out" 2>&1
expect_status 78 $? "a missing --config file"
expect_grep "missing.conf" "$TMP/out" "the message names the file"
pass "bad lines: every one as FILE:LINE, exit 78"

# metrics too: its syntax as FILE:LINE when the file is read (the
# unit test config_file has every case), and the address the start
# cannot listen on (192.0.2.1, TEST-NET-1, is on no host) with the line
# that set it.
printf 'port 0\nmetrics 127.0.0.1:99999\n' >"$TMP/metrics.conf"
run_keylockd --check-config --config "$TMP/metrics.conf" >"$TMP/out" 2>&1
expect_status 78 $? "a metrics port out of range"
expect_grep "^$TMP/metrics.conf:2: metrics: port \"99999\": expected a number from 0 to 65535" \
    "$TMP/out" "the metrics port's FILE:LINE"
printf 'port 0\n\nmetrics 192.0.2.1:9771\n' >"$TMP/metrics.conf"
timeout 10 "$KEYLOCKD" --config "$TMP/metrics.conf" --state-dir "$TMP" \
    --unix '' --bind 127.0.0.1 >"$TMP/out" 2>&1
[ $? -ne 0 ] || fail "started with metrics on 192.0.2.1: $(cat "$TMP/out")"
expect_grep "error: $TMP/metrics.conf:3: metrics 192.0.2.1:9771: cannot listen: " \
    "$TMP/out" "the metrics address's FILE:LINE at the start"
pass "a bad metrics setting: FILE:LINE, read and at the start"

run_keylockd --no-such-option >"$TMP/out" 2>&1
expect_status 64 $? "an unknown option"
run_keylockd --max-keys 0 --check-config >"$TMP/out" 2>&1
expect_status 64 $? "an option out of range"
run_keylockd --check-config extra-argument >"$TMP/out" 2>&1
expect_status 64 $? "an operand"
run_keylockd --version >"$TMP/out" 2>&1
expect_status 0 $? "--version"
expect_grep "^keylockd [0-9]" "$TMP/out" "--version"
pass "usage errors exit 64"

# Precedence: default (64) < file (2) < command line (3).
printf 'max-keys 2\nunix\n' >"$TMP/prec.conf"
daemon_start --config "$TMP/prec.conf"
ask_tcp "LOCK a b" "LOCK c d e" "QUIT" >"$TMP/out"
expect_grep "^OK [0-9]+$" "$TMP/out" "two keys under max-keys 2 from the file"
expect_grep "^ERR LIMIT .*max-keys is 2" "$TMP/out" "three keys"
expect_grep "config $TMP/prec.conf" "$TMP/daemon.log" "the log names the file"
daemon_stop
daemon_start --config "$TMP/prec.conf" --max-keys 3
ask_tcp "LOCK a b c" "LOCK c d e f" "QUIT" >"$TMP/out"
expect_grep "^OK [0-9]+$" "$TMP/out" "three keys with --max-keys 3"
expect_grep "^ERR LIMIT .*max-keys is 3" "$TMP/out" "four keys"
daemon_stop
pass "precedence: default < file < command line"

# More listeners than the server has room for is a startup error, and
# never a listener quietly dropped or a plain one turned into TLS: nine
# bind addresses with TLS are eighteen listeners.
if command -v openssl >/dev/null 2>&1 &&
    openssl req -x509 -newkey rsa:2048 -nodes -subj /CN=localhost \
    -days 1 -keyout "$TMP/many.key" -out "$TMP/many.crt" >/dev/null 2>&1
then
	binds=
	for i in 1 2 3 4 5 6 7 8 9; do
		binds="$binds --bind 127.0.0.1"
	done
	# shellcheck disable=SC2086
	"$KEYLOCKD" --config /dev/null --unix '' --port 0 --tls-port 0 \
	    --state-dir "$TMP" --tls-cert "$TMP/many.crt" \
	    --tls-key "$TMP/many.key" $binds >"$TMP/out" 2>&1 &
	pid=$!
	deadline=$(($(date +%s) + 10))
	while kill -0 "$pid" 2>/dev/null; do
		[ "$(date +%s)" -lt "$deadline" ] || {
			kill "$pid"; fail "the daemon started with 18 listeners"; }
		sleep 0.05
	done
	wait "$pid"
	expect_status 1 $? "eighteen listeners"
	expect_grep "more than 17 listeners" "$TMP/out" "the message says why"
	pass "too many listeners: a startup error"
fi

# What is not a text file is refused, at start and at a reload: NUL bytes
# (fgets() stopped at one and dropped the rest of the line: a zeroed file
# read as empty, a line after a NUL lost), a FIFO (the start or the SIGHUP
# waited for a writer), a device. Each within 10 s (timeout(1): 124 is a
# hang) with exit 78 and FILE:LINE or the file's name.
head -c 2000 /dev/zero >"$TMP/zero.conf"
timeout 10 "$KEYLOCKD" --check-config --config "$TMP/zero.conf" \
    >"$TMP/out" 2>&1
expect_status 78 $? "a file of 2000 NUL bytes"
expect_grep "^$TMP/zero.conf:1: a NUL byte" "$TMP/out" "the NUL's line"
printf 'auth-file %s/nul.secret\n' "$TMP" >"$TMP/nul.conf"
printf 'max-keys 3\0junk' >>"$TMP/nul.conf"
timeout 10 "$KEYLOCKD" --check-config --config "$TMP/nul.conf" \
    >"$TMP/out" 2>&1
expect_status 78 $? "a last line with a NUL and no LF"
expect_grep "^$TMP/nul.conf:2: a NUL byte" "$TMP/out" "line 2"
printf 'max-keys 3\0\n' >"$TMP/nul2.conf"
timeout 10 "$KEYLOCKD" --check-config --config "$TMP/nul2.conf" \
    >"$TMP/out" 2>&1
expect_status 78 $? "a NUL in a line that ends in LF"
expect_nogrep "longer than" "$TMP/out" "a NUL said to be a long line"
mkfifo "$TMP/fifo"
for what in --config --auth-file --tls-cert; do
	timeout 10 "$KEYLOCKD" --config /dev/null --check-config \
	    "$what" "$TMP/fifo" >"$TMP/out" 2>&1
	rc=$?
	expect_status 78 "$rc" "$what naming a FIFO"
	expect_grep "fifo: not a regular file" "$TMP/out" "$what's message"
done
timeout 10 "$KEYLOCKD" --check-config --config /dev/zero >"$TMP/out" 2>&1
expect_status 78 $? "--config /dev/zero"
expect_grep "^/dev/zero: not a regular file" "$TMP/out" "/dev/zero"
pass "NUL bytes, a FIFO, a device: exit 78 within 10 s, saying so"

# A reload: the running daemon needs AUTH; its file is overwritten with
# NUL bytes and SIGHUP'd: the running configuration stays (AUTH still
# asked for), the log says why, and PING is answered all along.
printf 's3cret\n' >"$TMP/a.secret"
chmod 600 "$TMP/a.secret"
printf 'auth-file %s/a.secret\n' "$TMP" >"$TMP/live.conf"
daemon_start --config "$TMP/live.conf"
ask_tcp "INFO k" >"$TMP/out"
expect_grep "^ERR AUTH" "$TMP/out" "INFO before AUTH"
head -c 300 /dev/zero >>"$TMP/live.conf"
kill -HUP "$DPID"
wait_log "reload: the configuration has errors" "the refused reload"
expect_grep "live.conf:2: a NUL byte" "$TMP/daemon.log" "the reload's reason"
ask_tcp "INFO k" >"$TMP/out"
expect_grep "^ERR AUTH" "$TMP/out" "INFO after the refused reload"
rm -f "$TMP/live.conf"
mkfifo "$TMP/live.conf"
kill -HUP "$DPID"
wait_log "live.conf: not a regular file" "the FIFO reload's reason"
[ "$(ask_tcp PING)" = "OK PONG" ] || fail "PING after a FIFO reload"
# a reload that does drop the secret is said as a warning, not an info
rm -f "$TMP/live.conf"
printf 'max-keys 5\n' >"$TMP/live.conf"
kill -HUP "$DPID"
wait_log "warn: reload: AUTH off: no secret is asked for now" \
    "the reload that drops AUTH"
daemon_stop
pass "a reload of NUL bytes or a FIFO keeps the running configuration;" \
    "one that drops AUTH warns"

# Settings that cannot work together: max-output-total under max-output
# (one reply a client reads would close it); max-input-total under
# max-line plus a read (one client's input would not fit); no-tcp with no unix socket
# and no TLS (nothing to listen on, found at --check-config, not at the
# start).
run_keylockd --check-config --max-output-total 65536 >"$TMP/out" 2>&1
expect_status 78 $? "max-output-total under max-output"
expect_grep "max-output-total 65536 is under max-output" "$TMP/out" \
    "the message"
run_keylockd --check-config --max-output-total 65536 --max-output 65536 \
    >"$TMP/out" 2>&1
expect_status 0 $? "max-output-total equal to max-output"
# max-input-total under one client's input bound (max-line plus a read).
run_keylockd --check-config --max-input-total 131071 --max-line 65536 \
    >"$TMP/out" 2>&1
expect_status 78 $? "max-input-total under max-line plus 65536"
expect_grep "max-input-total 131071 is under max-line plus one read \(65536 \+ 65536\)" \
    "$TMP/out" "the message"
run_keylockd --check-config --max-input-total 131072 --max-line 65536 \
    >"$TMP/out" 2>&1
expect_status 0 $? "max-input-total equal to max-line plus 65536"
run_keylockd --check-config --max-input-total none --max-line 1048576 \
    >"$TMP/out" 2>&1
expect_status 0 $? "max-input-total none"
run_keylockd --check-config --no-tcp --unix '' >"$TMP/out" 2>&1
expect_status 78 $? "no-tcp with no unix socket"
expect_grep "nothing to listen on" "$TMP/out" "the message"
pass "max-output-total under max-output, max-input-total under max-line" \
    "plus a read, and nothing to listen on: exit 78"

# A descriptor limit under max-clients + reserved-slots + 64 is said at
# the start (the listener would pause before max-clients, the operator's
# reserved unix slots included).
(ulimit -n 256 && exec "$KEYLOCKD" --config /dev/null --bind 127.0.0.1 \
    --port 0 --unix '' --state-dir "$TMP" --max-clients 1000 \
    >"$TMP/nofile.log" 2>&1) &
npid=$!
wait_for "grep -q 'descriptor limit' '$TMP/nofile.log'" "$READY_S" ||
    { kill "$npid"; fail "no warning of the descriptor limit:" \
    "$(head -c 600 "$TMP/nofile.log")"; }
kill -TERM "$npid"
wait "$npid"
expect_grep "descriptor limit .* is 256, under max-clients 1000" \
    "$TMP/nofile.log" "the warning"
pass "a descriptor limit under max-clients: a warning at the start"
