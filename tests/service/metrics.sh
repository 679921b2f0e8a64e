#!/bin/sh
# --metrics: /metrics passes a strict exposition-format checker (which must
# itself reject a set of broken inputs), agrees with STATS, and has the
# families the issue names; /stats is the STATS JSON, /healthz says ok,
# an unknown path is 404.
. "$(dirname "$0")/lib.sh"
need nc curl
PROMCHECK=$TOP_BUILDDIR/tests/service/promcheck
[ -x "$PROMCHECK" ] || fail "no $PROMCHECK (make check builds it)"

# First the checker: valid examples pass, every broken one fails with its
# own message (the "# expect:" comment on its first line).
for f in "$TOP_SRCDIR"/tests/service/prom-good/*.prom; do
	"$PROMCHECK" -s "$f" >"$TMP/out" 2>&1 ||
	    fail "promcheck rejects the valid $f: $(cat "$TMP/out")"
done
n=0
for f in "$TOP_SRCDIR"/tests/service/prom-bad/*.prom; do
	want=$(sed -n '1s/^# expect: //p' "$f")
	[ -n "$want" ] || fail "$f has no # expect: line"
	"$PROMCHECK" -s -p keylockd_ "$f" >"$TMP/out" 2>&1
	rc=$?
	case $f in
	*/wrong-prefix.prom) ;;
	*)	# without the prefix rule, the one problem must still be found
		"$PROMCHECK" -s "$f" >"$TMP/out" 2>&1
		rc=$? ;;
	esac
	expect_status 1 "$rc" "promcheck on $f"
	expect_grep "$want" "$TMP/out" "promcheck's message for $f"
	n=$((n + 1))
done
[ "$n" -ge 20 ] || fail "only $n bad fixtures"
pass "promcheck accepts the good fixtures, rejects $n bad ones"

daemon_start --metrics 127.0.0.1:0
wait_for "grep -q '^metrics [0-9][0-9]*$' '$TMP/port'" "$READY_S" ||
    fail "no metrics port in the port file: $(cat "$TMP/port")"
MPORT=$(sed -n 's/^metrics //p' "$TMP/port")
URL=http://127.0.0.1:$MPORT
expect_grep "metrics on http 127.0.0.1 port $MPORT" "$TMP/daemon.log" \
    "the log names the metrics port"

# Some traffic: grants, a wait that is granted, a timeout, a release, an
# AUTH failure, an error.
session_open a 3 127.0.0.1 "$PORT"
session_send a "LOCK m1"
session_expect a 1 '^OK [0-9]+$' "LOCK m1"
session_open c 5 127.0.0.1 "$PORT"
session_send c "LOCK m1 timeout=20"
session_expect c 1 '^ERR TIMEOUT ' "a timeout"
for line in "LOCK m2" "UNLOCK m2" "BOGUS" "AUTH x"; do
	session_send c "$line"
done
session_expect c 5 '^ERR AUTH ' "AUTH without a secret"
session_open b 4 127.0.0.1 "$PORT"
session_send b "LOCK m1"
wait_for "ask_tcp 'INFO m1' | grep -q '\"waiters\":\[{'" "$REPLY_S" ||
    fail "the waiter is not queued"
session_send a "UNLOCK m1"
session_expect a 2 '^OK 1$' "UNLOCK m1"
session_expect b 1 '^OK [0-9]+$' "the waiter's grant"

curl -sS -D "$TMP/headers" -o "$TMP/metrics" "$URL/metrics" ||
    fail "GET /metrics"
stats=$(ask_tcp STATS | sed -n 's/^OK //p')
expect_grep '^HTTP/1\.[01] 200' "$TMP/headers" "/metrics status"
expect_grep '^Content-Type: text/plain; version=0\.0\.4' "$TMP/headers" \
    "/metrics content type"
"$PROMCHECK" -s -p keylockd_ "$TMP/metrics" >"$TMP/out" 2>&1 ||
    fail "/metrics is not valid: $(cat "$TMP/out")"
pass "/metrics passes promcheck -s -p keylockd_"

for fam in "keylockd_clients gauge" "keylockd_keys gauge" \
    "keylockd_held gauge" "keylockd_waiting gauge" \
    "keylockd_grants_total counter" "keylockd_timeouts_total counter" \
    "keylockd_releases_total counter" "keylockd_auth_failures_total counter" \
    "keylockd_wait_seconds histogram" "keylockd_hold_seconds histogram"; do
	expect_grep "^# TYPE $fam\$" "$TMP/metrics" "the family $fam"
done

# metric NAME: its value in the scrape.
metric() {
	sed -n "s/^$1 //p" "$TMP/metrics"
}
for m in grants timeouts releases auth_failures; do
	expect_eq "$(json_int "$stats" $m)" "$(metric keylockd_${m}_total)" \
	    "keylockd_${m}_total against STATS $m"
done
for m in keys held waiting; do
	expect_eq "$(json_int "$stats" $m)" "$(metric keylockd_$m)" \
	    "keylockd_$m against STATS $m"
done
expect_eq 3 "$(metric keylockd_grants_total)" "grants"
expect_eq 1 "$(metric keylockd_timeouts_total)" "timeouts"
expect_eq 1 "$(metric keylockd_auth_failures_total)" "auth failures"
wait_count=$(printf '%s\n' "$stats" |
    sed -n 's/.*"wait_ms":{[^}]*"count":\([0-9]*\).*/\1/p')
expect_eq "$wait_count" "$(metric keylockd_wait_seconds_count)" \
    "keylockd_wait_seconds_count against STATS wait_ms.count"
expect_eq "$wait_count" \
    "$(metric 'keylockd_wait_seconds_bucket{le="+Inf"}')" "the +Inf bucket"
# Prometheus' base unit: no metric in milliseconds; STATS' upgrade_pause_ms
# is keylockd_upgrade_pause_seconds (0 before any upgrade).
if grep -E '^keylockd_[a-z_]*_ms(_[a-z]+)?[ {]' "$TMP/metrics" >"$TMP/out"; then
	fail "metrics in milliseconds: $(cat "$TMP/out")"
fi
expect_grep '^# TYPE keylockd_upgrade_pause_seconds gauge$' "$TMP/metrics" \
    "the family keylockd_upgrade_pause_seconds"
expect_eq "$(json_int "$stats" upgrade_pause_ms)" \
    "$(metric keylockd_upgrade_pause_seconds |
    awk '{ printf "%d", $1 * 1000 + 0.5 }')" \
    "keylockd_upgrade_pause_seconds against STATS upgrade_pause_ms"
pass "/metrics agrees with STATS"

curl -sS -o "$TMP/stats" -D "$TMP/headers" "$URL/stats" || fail "GET /stats"
expect_grep '^Content-Type: application/json' "$TMP/headers" "/stats type"
expect_grep '^\{"version":"[^"]+","uptime_ms":[0-9]+,"clients":[0-9]+' \
    "$TMP/stats" "/stats is the STATS object"
expect_eq "$(json_int "$stats" grants)" \
    "$(json_int "$(cat "$TMP/stats")" grants)" "/stats grants"
expect_eq "ok" "$(curl -sS "$URL/healthz")" "/healthz"
expect_eq 404 "$(curl -s -o /dev/null -w '%{http_code}' "$URL/nope")" \
    "an unknown path"
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$URL/metrics")
expect_eq 405 "$code" "POST /metrics"
expect_eq 200 "$(curl -s -o /dev/null -w '%{http_code}' -I "$URL/metrics")" \
    "HEAD /metrics"
pass "/stats is JSON, /healthz ok, unknown path 404, POST $code"
daemon_stop
