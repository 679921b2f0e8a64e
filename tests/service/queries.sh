#!/bin/sh
# contrib/'s Grafana dashboard and Prometheus alerts ask only for metrics
# that /metrics exports (issue 13). promnames lists the names their
# queries use (checked first on its own cases), and promtool parses the
# dashboard's queries; a daemon with a held key, a waiter and the hostile
# key a"b\c serves /metrics; a used name that is not among its samples
# (or up, which Prometheus adds per target) fails the test, with where it
# is used. A copy of each file with one name misspelt must fail the same
# way.
. "$(dirname "$0")/lib.sh"
need nc curl promtool
PROMNAMES=$TOP_BUILDDIR/tests/service/promnames
PROMCHECK=$TOP_BUILDDIR/tests/service/promcheck
[ -x "$PROMNAMES" ] || fail "no $PROMNAMES (make check builds it)"
[ -x "$PROMCHECK" ] || fail "no $PROMCHECK (make check builds it)"
DASH=$TOP_SRCDIR/contrib/keylockd-dashboard.json
RULES=$TOP_SRCDIR/contrib/keylockd-alerts.yml
CASES=$TOP_SRCDIR/tests/service/promnames-cases

# The extractor: each case's names, and an error for each bad line.
grep -v '^#' "$CASES" | sed 's/ =>.*//' | "$PROMNAMES" -e >"$TMP/got" \
    2>"$TMP/err" || fail "promnames -e on the cases: $(cat "$TMP/err")"
grep -v '^#' "$CASES" | sed 's/.*=> \{0,1\}//' >"$TMP/want"
diff -u "$TMP/want" "$TMP/got" >"$TMP/diff" ||
    fail "promnames on $(basename "$CASES"): $(cat "$TMP/diff")"
n=0
while IFS= read -r e; do
	case $e in
	'#'*) continue ;;
	esac
	! printf '%s\n' "$e" | "$PROMNAMES" -e >/dev/null 2>&1 ||
	    fail "promnames accepts the bad expression $e"
	n=$((n + 1))
done <"$TOP_SRCDIR/tests/service/promnames-bad"
pass "promnames: $(wc -l <"$TMP/want") cases, $n bad expressions refused"

# used DASHBOARD RULES: NAME<TAB>WHERE for each name a query uses.
used() {
	"$PROMNAMES" -d "$1" -r "$2" >"$TMP/used" 2>"$TMP/err" ||
	    fail "promnames on $1 and $2: $(cat "$TMP/err")"
}
used "$DASH" "$RULES"
nexpr=$(grep -c '"expr": ' "$DASH")
expect_eq "$nexpr" "$(grep '	panel ' "$TMP/used" | cut -f2 | sort -u |
    wc -l)" "dashboard queries read (one \"expr\" a line in the file)"
nrule=$(grep -c '^ *- alert: ' "$RULES")
expect_eq "$nrule" "$(grep "	$RULES:" "$TMP/used" | cut -f2 | sort -u |
    wc -l)" "rules read"
expect_grep '	variable instance$' "$TMP/used" "the instance variable"

# promtool parses the dashboard's queries, as recording rules.
"$PROMNAMES" -q "$DASH" >"$TMP/exprs" 2>"$TMP/err" ||
    fail "promnames -q: $(cat "$TMP/err")"
expect_eq "$nexpr" "$(wc -l <"$TMP/exprs")" "promnames -q"
{
	printf 'groups:\n  - name: dashboard\n    rules:\n'
	awk '{ printf "      - record: dashboard:q%d\n        expr: |\n" \
	    "          %s\n", NR, $0 }' "$TMP/exprs"
} >"$TMP/dashboard-rules.yml"
promtool check rules "$TMP/dashboard-rules.yml" >"$TMP/out" 2>&1 ||
    fail "promtool cannot parse the dashboard's queries: $(cat "$TMP/out")"
pass "promtool parses the $nexpr dashboard queries"

daemon_start --config /dev/null --metrics 127.0.0.1:0 --max-clients 123
wait_for "grep -q '^metrics [0-9][0-9]*$' '$TMP/port'" "$READY_S" ||
    fail "no metrics port in the port file: $(cat "$TMP/port")"
URL=http://127.0.0.1:$(sed -n 's/^metrics //p' "$TMP/port")

# Traffic: a grant and a release (the histograms), a timeout, an error;
# then a"b\c and k held by a, waited for by b and c.
session_open a 3 127.0.0.1 "$PORT"
session_open b 4 127.0.0.1 "$PORT"
session_open c 5 127.0.0.1 "$PORT"
for line in "LOCK m" "UNLOCK m" 'LOCK a"b\c k'; do
	session_send a "$line"
done
session_expect a 3 '^OK [0-9]+$' 'LOCK a"b\c k'
session_send b "LOCK k timeout=10"
session_expect b 1 '^ERR TIMEOUT ' "a timeout"
session_send b "BOGUS"
session_expect b 2 '^ERR ' "an error"
session_send b 'LOCK a"b\c'
session_send c 'LOCK k'
for k in 'a"b\c' k; do
	wait_for "ask_tcp 'INFO $k' | grep -q '\"waiters\":\[{'" "$REPLY_S" ||
	    fail "nobody waits for $k"
done
curl -sS -o "$TMP/metrics" "$URL/metrics" || fail "GET /metrics"
"$PROMCHECK" -s -p keylockd_ "$TMP/metrics" >"$TMP/out" 2>&1 ||
    fail "/metrics is not valid: $(cat "$TMP/out")"
expect_grep '^keylockd_max_clients 123$' "$TMP/metrics" "max-clients"
for fam in waiters holders; do
	for key in 'a\"b\\c' k; do
		grep -qxF 'keylockd_hot_key_'"$fam"'{key="'"$key"'"} 1' \
		    "$TMP/metrics" || fail "no $fam of the hot key $key in:" \
		    "$(grep hot_key "$TMP/metrics")"
	done
done
pass "/metrics is valid, with max-clients and the hot keys"

# The samples' names, and up.
sed -n 's/^\([a-zA-Z_:][a-zA-Z0-9_:]*\).*/\1/p' "$TMP/metrics" |
    sort -u >"$TMP/exported"
echo up >>"$TMP/exported"

# unknown: the used names that are not exported, with where.
unknown() {
	awk -F '\t' 'NR == FNR { have[$1] = 1; next }
	    !($1 in have) { print $1 " (" $2 ")" }' "$TMP/exported" \
	    "$TMP/used" >"$TMP/unknown"
}
unknown
[ ! -s "$TMP/unknown" ] ||
    fail "not exported by /metrics: $(cat "$TMP/unknown")"
pass "the $nexpr dashboard and $nrule rule queries name only exported" \
    "metrics ($(cut -f1 "$TMP/used" | sort -u | wc -l) names)"
unused=$(cut -f1 "$TMP/used" | sort -u | comm -13 - "$TMP/exported" |
    tr '\n' ' ')
[ -z "$unused" ] || echo "$TEST: note: exported but not queried: $unused"

# The comparison must be able to fail: misspell a name in each file, and
# use a histogram by its family name, which has no samples.
sed 's/keylockd_hot_key_holders/keylockd_hot_key_holder/' "$DASH" \
    >"$TMP/dash.json"
sed -e 's/keylockd_max_clients/keylockd_max_client/' \
    -e 's/keylockd_wait_seconds_bucket/keylockd_wait_seconds/' "$RULES" \
    >"$TMP/rules.yml"
used "$TMP/dash.json" "$TMP/rules.yml"
unknown
for want in "keylockd_hot_key_holder (panel \"Hot keys now\", query B)" \
    "keylockd_max_client ($TMP/rules.yml:" \
    "keylockd_wait_seconds ($TMP/rules.yml:"; do
	grep -qF "$want" "$TMP/unknown" ||
	    fail "a misspelt name is not reported: $want; got: $(cat \
	    "$TMP/unknown")"
done
expect_eq 3 "$(wc -l <"$TMP/unknown")" "names reported for the misspelt copies"
pass "misspelt names are reported with where they are used"
daemon_stop
