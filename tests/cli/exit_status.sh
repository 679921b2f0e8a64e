#!/bin/sh
# The exit status is the command's; keylock's own failures have the codes
# keylock(1) documents.
. "$(dirname "$0")/lib.sh"
daemon_start

for code in 0 1 7 64 75 255; do
	"$KEYLOCK" k -- sh -c "exit $code"
	expect_status "$code" $? "command exiting $code"
	"$KEYLOCK" k -c "exit $code"
	expect_status "$code" $? "-c exiting $code"
done
pass "the command's exit status passes through (0 1 7 64 75 255)"

"$KEYLOCK" k -c 'kill -KILL $$'
expect_status 137 $? "command killed by SIGKILL"
"$KEYLOCK" k -- sh -c 'kill -TERM $$'
expect_status 143 $? "command killed by SIGTERM"
pass "a command killed by a signal: 128 + the signal"

"$KEYLOCK" k -- "$TMP/no-such-command" 2>"$TMP/err"
expect_status 127 $? "command not found"
expect_grep "no-such-command" "$TMP/err" "not found message"
printf 'echo x\n' >"$TMP/not-executable"
"$KEYLOCK" k -- "$TMP/not-executable" 2>/dev/null
expect_status 126 $? "command not executable"
pass "127 command not found, 126 not executable"

for args in "" "k" "-- k" "k --" "-c" "-x" "--bogus k -- true" \
    "-n -w 1 k -- true" "-s -N 2 k -- true" "-N 0 k -- true" \
    "-E 256 k -- true" "k -n -- true" "k -c" "k -c a b" "nosuch" \
    "stats extra" "info" "--name has=equals k -- true"; do
	# shellcheck disable=SC2086
	"$KEYLOCK" $args 2>/dev/null
	expect_status 64 $? "usage error: keylock $args"
done
pass "usage errors exit 64"

# The bounds of -w and --ttl, said as bounds; --timeout is -w.
"$KEYLOCK" -w 1000000001 k -- true 2>"$TMP/err"
expect_status 64 $? "-w past 1e9 s"
expect_grep "want 0 to 1000000000 seconds" "$TMP/err" "-w's bound"
"$KEYLOCK" --timeout 1000000001 k -- true 2>"$TMP/err"
expect_status 64 $? "--timeout past 1e9 s"
expect_grep "want 0 to 1000000000 seconds" "$TMP/err" "--timeout's bound"
"$KEYLOCK" --ttl 1000000001 k -- true 2>"$TMP/err"
expect_status 64 $? "--ttl past 1e9 s"
expect_grep "want 0.1 to 1000000000 seconds" "$TMP/err" "--ttl's bound"
"$KEYLOCK" --ttl 0.05 k -- true 2>"$TMP/err"
expect_status 64 $? "--ttl under 0.1 s"
expect_grep "want 0.1 to 1000000000 seconds" "$TMP/err" "--ttl's floor"
"$KEYLOCK" --timeout 1000000000 k -- true
expect_status 0 $? "--timeout 1000000000"
pass "-w, --timeout and --ttl name their bounds"

"$KEYLOCK" -S "$TMP/no-such-socket" k -- true 2>"$TMP/err"
expect_status 69 $? "no server"
expect_grep "connect $TMP/no-such-socket" "$TMP/err" "no server message"
"$KEYLOCK" -S 127.0.0.1:99999 k -- true 2>/dev/null
expect_status 64 $? "bad port"
"$KEYLOCK" --auth-file "$TMP/no-such-file" k -- true 2>/dev/null
expect_status 66 $? "unreadable auth file"
"$KEYLOCK" "$(printf 'bad\001key')" -- true 2>/dev/null
expect_status 65 $? "a key with a control byte (refused by libkeylock)"
"$KEYLOCK" "$(printf 'bad\377key')" -- true 2>"$TMP/err"
expect_status 65 $? "a key that is not UTF-8 (refused by the server)"
expect_grep "BADKEY" "$TMP/err" "the server's BADKEY"
pass "69 no server, 66 auth file unreadable, 65 refused key"

"$KEYLOCK" stats --json >"$TMP/out"
expect_grep '"keys":0' "$TMP/out" "no key left after the failures"

# A server's text reaches the terminal without its control bytes: a fake
# server whose every reply is an ERR with an escape sequence and a bell.
if command -v python3 >/dev/null 2>&1; then
	python3 - "$TMP/fake.sock" <<'EOPY' &
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
s.listen(4)
s.settimeout(30)
c, _ = s.accept()
f = c.makefile("rwb", buffering=0)
for line in f:
    f.write(b"ERR LIMIT \x1b[2J\x1b[31mred\x07 text\n")
EOPY
	fpid=$!
	BGPIDS="$BGPIDS $fpid"
	wait_ran "$TMP/fake.sock" 5 "the fake server did not listen"
	"$KEYLOCK" -S "$TMP/fake.sock" k -- touch "$TMP/ran" 2>"$TMP/err"
	expect_status 65 $? "ERR LIMIT from the fake server"
	expect_grep 'LIMIT ?\[2J?\[31mred? text' "$TMP/err" "the text, its control bytes as ?"
	! LC_ALL=C grep -q "$(printf '[\033\007]')" "$TMP/err" ||
	    fail "a control byte reached stderr: $(od -c "$TMP/err" | head -3)"
	[ ! -e "$TMP/ran" ] || fail "the command ran"
	kill "$fpid" 2>/dev/null
	pass "a server's text without its control bytes"
fi
