#!/bin/sh
# The status page (/ on the metrics listener) in a real browser: headless
# Chromium loads it from a daemon under load and the rendered DOM must show
# the held key, its holder's name, the waiters in queue order, the lists cut
# at 20 with the rest counted, histograms with bars, rates, and a hostile
# key and client name as text (no extra script element), under a policy
# that admits the page's own style and script files and nothing inline.
# /status.json, the three files and their headers are checked with curl.
# The screenshots stay in the build tree: tests/service/status_page.png
# and status_page-phone.png.
. "$(dirname "$0")/lib.sh"
need nc curl
unset KEYLOCK_SERVER KEYLOCK_AUTH_FILE
CHROMIUM=
for b in chromium chromium-browser; do
	if command -v "$b" >/dev/null 2>&1; then
		CHROMIUM=$b
		break
	fi
done
[ -n "$CHROMIUM" ] || skip "chromium is not installed"
[ -x "${KEYLOCK:-}" ] || fail "KEYLOCK must name the built CLI (make check sets it)"
SHOT=$TOP_BUILDDIR/tests/service/status_page
HOSTILE='<script>alert(1)</script>'
WAITERS=21		# one over the 20 the page lists (STATUS_LIST_MAX)

# browser ARGS... URL: one headless run with a profile of its own.
browser() {
	_profile=$(mktemp -d "$TMP/profile.XXXXXX")
	HOME=$TMP timeout 90 "$CHROMIUM" --headless --no-sandbox \
	    --disable-gpu --disable-quic --no-first-run \
	    --disable-background-networking --disable-component-update \
	    --disable-sync --hide-scrollbars --user-data-dir="$_profile" \
	    "$@" 2>>"$TMP/chromium.log"
}

daemon_start --config /dev/null --metrics 127.0.0.1:0 --status-names
wait_for "grep -q '^metrics [0-9][0-9]*$' '$TMP/port'" "$READY_S" ||
    fail "no metrics port in the port file: $(cat "$TMP/port")"
URL=http://127.0.0.1:$(sed -n 's/^metrics //p' "$TMP/port")

# waiters KEY N: INFO KEY lists N waiters.
waiters() {
	[ "$(ask_tcp "INFO $1" | grep -o '"waited_ms"' | wc -l)" -eq "$2" ]
}

# alice holds jobs:nightly, bob then carol wait for it; mallory holds the
# hostile key; cap:key has more waiters than the page lists.
session_open alice 3 127.0.0.1 "$PORT"
session_send alice "NAME alice"
session_send alice "LOCK jobs:nightly"
session_expect alice 2 '^OK [0-9]+$' "alice's LOCK"
session_open bob 4 127.0.0.1 "$PORT"
session_send bob "NAME bob"
session_send bob "LOCK jobs:nightly"
wait_for "waiters jobs:nightly 1" "$REPLY_S" || fail "bob is not queued"
session_open carol 5 127.0.0.1 "$PORT"
session_send carol "NAME carol"
session_send carol "LOCK jobs:nightly"
wait_for "waiters jobs:nightly 2" "$REPLY_S" || fail "carol is not queued"
session_open mallory 6 127.0.0.1 "$PORT"
session_send mallory "NAME <i>mallory</i>"
session_send mallory "LOCK $HOSTILE"
session_expect mallory 2 '^OK [0-9]+$' "the hostile key's LOCK"
# dave's session is detached: his hold stays, and the page says so.
session_open dave 8 127.0.0.1 "$PORT"
session_send dave "NAME dave"
session_send dave "SESSION grace=60000"
session_send dave "LOCK jobs:dave"
session_expect dave 3 '^OK [0-9]+$' "dave's LOCK"
exec 8>&-
wait_for "ask_tcp STATS | grep -q '\"sessions_detached\":1'" "$REPLY_S" ||
    fail "dave's session is not detached"
session_open capper 7 127.0.0.1 "$PORT"
session_send capper "LOCK cap:key"
session_expect capper 1 '^OK [0-9]+$' "cap:key's LOCK"
i=0
while [ "$i" -lt "$WAITERS" ]; do
	"$KEYLOCK" --server "127.0.0.1:$PORT" --name "w$i" cap:key -- true \
	    >/dev/null 2>&1 &
	BGPIDS="$BGPIDS $!"
	i=$((i + 1))
done
wait_for "waiters cap:key $WAITERS" 15 || fail "$WAITERS waiters on cap:key"
# Grants and releases for both histograms, one of them waited for.
i=0
while [ "$i" -lt 40 ]; do
	printf 'LOCK t:%d\nUNLOCK t:%d\n' "$i" "$i"
	i=$((i + 1))
done | timeout "$REPLY_S" nc -N 127.0.0.1 "$PORT" >/dev/null
session_send capper "LOCK short:hold"
session_expect capper 2 '^OK [0-9]+$' "short:hold"
session_open slow 8 127.0.0.1 "$PORT"
session_send slow "LOCK short:hold"
sleep 0.05
session_send capper "UNLOCK short:hold"
session_expect slow 1 '^OK [0-9]+$' "the waited-for grant"
session_send slow "UNLOCK short:hold"
session_expect slow 2 '^OK 1$' "the waited-for grant's release"
pass "the load: 2 waiters behind alice, $WAITERS on cap:key, 40 grants"

# The page as served: its three files as they are, a strict policy,
# nothing inline, nothing external.
curl -sS -D "$TMP/headers" -o "$TMP/page.html" "$URL/" || fail "GET /"
expect_grep '^HTTP/1\.[01] 200' "$TMP/headers" "/ status"
expect_grep '^Content-Type: text/html; charset=utf-8' "$TMP/headers" \
    "/ content type"
cmp -s "$TMP/page.html" "$TOP_SRCDIR/src/http/status.html" ||
    fail "/ is not src/http/status.html as it is"
expect_grep "^Content-Security-Policy: default-src 'none'; style-src 'self'; script-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'" \
    "$TMP/headers" "the page's CSP"
expect_nogrep "unsafe|sha256-|nonce-|data:|blob:|\*" "$TMP/headers" \
    "the page's CSP"
for f in css:text/css js:text/javascript; do
	ext=${f%%:*}
	curl -sS -D "$TMP/headers.$ext" -o "$TMP/page.$ext" \
	    "$URL/status.$ext" || fail "GET /status.$ext"
	expect_grep '^HTTP/1\.[01] 200' "$TMP/headers.$ext" \
	    "/status.$ext status"
	expect_grep "^Content-Type: ${f#*:}; charset=utf-8" \
	    "$TMP/headers.$ext" "/status.$ext content type"
	expect_grep '^X-Content-Type-Options: nosniff' "$TMP/headers.$ext" \
	    "/status.$ext nosniff"
	cmp -s "$TMP/page.$ext" "$TOP_SRCDIR/src/http/status.$ext" ||
	    fail "/status.$ext is not src/http/status.$ext as it is"
done
# The page's only references are its two files; nothing inline: no
# <style>, no script text, no style= or on...= attribute.
expect_eq 'href="status.css" src="status.js"' \
    "$(grep -Eo '(src|href|action)=[^ >]*' "$TMP/page.html" | tr '\n' ' ' |
    sed 's/ $//')" "the page's references"
expect_nogrep '<style|<script>|<script [^>]*>[^<]|style=| on[a-z]+=' \
    "$TMP/page.html" "inline style or script"
expect_nogrep 'url\(|@import' "$TMP/page.css" "a reference in the style"
cat "$TMP/page.html" "$TMP/page.css" "$TMP/page.js" |
    sed 's|http://www.w3.org/2000/svg||' >"$TMP/page-nons.html"
expect_nogrep 'https?:|//[a-z]' "$TMP/page-nons.html" "an external address"
expect_nogrep 'innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(|Function\(' \
    "$TMP/page.js" "HTML or code built from strings"
# HEAD: the headers alone (libevent 2.1 by itself would add the body).
printf 'HEAD / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n' |
    timeout "$REPLY_S" nc 127.0.0.1 "${URL##*:}" >"$TMP/head" ||
    fail "HEAD /"
expect_grep '^HTTP/1\.1 200' "$TMP/head" "HEAD / status"
expect_eq 0d0a0d0a "$(tail -c 4 "$TMP/head" | od -An -tx1 | tr -d ' \n')" \
    "HEAD / ends with its headers"
size=$(cat "$TMP/page.html" "$TMP/page.css" "$TMP/page.js" | wc -c)
[ "$size" -lt 16384 ] || fail "the page is $size bytes"
pass "/ is the $size-byte page: its file, script and style alone"

curl -sS -D "$TMP/headers" -o "$TMP/status.json" "$URL/status.json" ||
    fail "GET /status.json"
expect_grep '^Content-Type: application/json' "$TMP/headers" \
    "/status.json content type"
expect_grep '^\{"stats":\{"version":"[^"]+","uptime_ms":[0-9]+' \
    "$TMP/status.json" "/status.json begins with STATS"
expect_grep '"list_max":20\}$' "$TMP/status.json" "/status.json list_max"
expect_grep '\{"key":"jobs:nightly","limit":1,"holders":\[\{"client":[0-9]+,"name":"alice"' \
    "$TMP/status.json" "INFO of jobs:nightly"
expect_grep '"name":"bob","mode":"exclusive","waited_ms":[0-9]+\},\{"client":[0-9]+,"name":"carol"' \
    "$TMP/status.json" "bob before carol"
expect_grep "\"waiters_total\":$WAITERS" "$TMP/status.json" \
    "cap:key's waiters"
# 20 listed for cap:key, 2 for jobs:nightly.
expect_eq 22 "$(grep -o '"waited_ms"' "$TMP/status.json" | wc -l)" \
    "waiters listed"
pass "/status.json: STATS, INFO of the hot keys, lists cut at 20"

# Traffic while the browser samples, for the rates.
(
	while :; do
		printf 'PING\nLOCK r\nUNLOCK r\n' |
		    timeout "$REPLY_S" nc -N 127.0.0.1 "$PORT" >/dev/null
		sleep 0.05
	done
) &
LOAD=$!
BGPIDS="$BGPIDS $LOAD"
browser --virtual-time-budget=4000 --dump-dom "$URL/" >"$TMP/dom.html" ||
    fail "chromium --dump-dom: $(tail -n 5 "$TMP/chromium.log")"
tr -d '\n' <"$TMP/dom.html" >"$TMP/dom1"
expect_grep 'id="state" class="dim">updated ' "$TMP/dom1" "the page's state"
expect_grep '<title>keylockd: 4 held, 23 waiting</title>' "$TMP/dom1" \
    "the page's title"
expect_grep '<p class="key">jobs:nightly</p>' "$TMP/dom1" "the held key"
expect_grep '<p class="key">jobs:nightly</p><div class="dim">1 holding, 2 waiting[^<]*</div><ul class="holders"><li class="holder"><span>#[0-9]+ <span class="name">alice</span></span> exclusive, held [0-9.]+ m?s' \
    "$TMP/dom1" "alice holding jobs:nightly"
expect_grep '<ol class="waiters"><li class="waiter"><span>#[0-9]+ <span class="name">bob</span></span> exclusive, waiting [^<]*</li><li class="waiter"><span>#[0-9]+ <span class="name">carol</span>' \
    "$TMP/dom1" "bob, then carol, waiting"
expect_grep '<p class="key">cap:key</p>' "$TMP/dom1" "cap:key"
expect_eq 20 "$(sed 's/.*<p class="key">cap:key<\/p>//; s/<\/article>.*//' \
    "$TMP/dom1" | grep -o '<li class="waiter">' | wc -l)" \
    "cap:key's waiters shown"
expect_grep '<li class="more dim">and 1 more waiter</li>' "$TMP/dom1" \
    "cap:key's other waiters counted"
# The hostile key and name are text: escaped in the DOM, and the page's
# own script is the only script element.
expect_grep '<p class="key">&lt;script&gt;alert\(1\)&lt;/script&gt;</p>' \
    "$TMP/dom1" "the hostile key as text"
expect_grep '<span class="name">&lt;i&gt;mallory&lt;/i&gt;</span>' \
    "$TMP/dom1" "the hostile name as text"
expect_eq 1 "$(grep -o '<script' "$TMP/dom1" | wc -l)" "script elements"
expect_nogrep '<i>' "$TMP/dom1" "an element from a name"
for h in wait hold; do
	sed "s/.*id=\"$h\"//; s/<\/svg>.*//" "$TMP/dom1" >"$TMP/$h.svg"
	bars=$(grep -o '<rect class="bar"[^>]*' "$TMP/$h.svg" | wc -l)
	expect_eq 16 "$bars" "bars in the $h chart"
	grep -Eq '<rect class="bar"[^>]* height="[1-9][0-9.]*" data-count="[1-9]' \
	    "$TMP/$h.svg" || fail "no bar with a height in the $h chart"
done
expect_grep 'data-name="requests/s"><b>[0-9]' "$TMP/dom1" "requests/s"
expect_grep 'data-name="held"><b>[0-9]+</b>' "$TMP/dom1" "held"
expect_grep 'data-name="detached"><b>1</b>' "$TMP/dom1" "detached sessions"
expect_grep '<span class="name">dave</span> <span class="detached">\(session detached [0-9.]+ m?s\)</span>' \
    "$TMP/dom1" "dave's detached hold"
pass "the rendered page: holder, waiters in order, charts, hostile text"

browser --virtual-time-budget=2500 --window-size=1280,1100 \
    --screenshot="$SHOT.png" "$URL/" >/dev/null ||
    fail "chromium --screenshot: $(tail -n 5 "$TMP/chromium.log")"
browser --virtual-time-budget=2500 --window-size=390,2400 \
    --screenshot="$SHOT-phone.png" "$URL/" >/dev/null ||
    fail "chromium --screenshot (phone): $(tail -n 5 "$TMP/chromium.log")"
for f in "$SHOT.png" "$SHOT-phone.png"; do
	[ "$(od -An -tx1 -N8 "$f" | tr -d ' ')" = 89504e470d0a1a0a ] ||
	    fail "$f is not a PNG"
	[ "$(wc -c <"$f")" -gt 20000 ] || fail "$f is nearly blank"
done
pass "screenshots: $SHOT.png, $SHOT-phone.png"
kill -KILL "$LOAD"
wait "$LOAD" 2>/dev/null
daemon_stop
