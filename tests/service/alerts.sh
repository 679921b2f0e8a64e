#!/bin/sh
# contrib/keylockd-alerts.yml (issue 13): promtool check rules accepts it,
# and the unit tests of tests/service/alerts-test.yml pass: each alert
# fires on a bad instance after its "for" and stays quiet on a healthy
# one. Every alert must have a firing and a quiet case there, and the
# tests must notice a rule made too eager or too lax.
. "$(dirname "$0")/lib.sh"
need promtool
RULES=$TOP_SRCDIR/contrib/keylockd-alerts.yml
UNIT=$TOP_SRCDIR/tests/service/alerts-test.yml

promtool check rules "$RULES" >"$TMP/out" 2>&1 ||
    fail "promtool check rules: $(cat "$TMP/out")"
nrules=$(sed -n 's/.*SUCCESS: \([0-9][0-9]*\) rules found.*/\1/p' "$TMP/out")
nalerts=$(grep -c '^ *- alert: ' "$RULES")
expect_eq "$nalerts" "$nrules" "promtool's count against the - alert: lines"
pass "promtool check rules: $nrules rules"

# promtool resolves rule_files from the test file's directory.
promtool test rules "$UNIT" >"$TMP/out" 2>&1 ||
    fail "promtool test rules: $(cat "$TMP/out")"
pass "promtool test rules $(basename "$UNIT")"

# Per alertname of the unit tests: was an evaluation firing, one quiet?
awk '$1 == "alertname:" { a = $2 }
    $1 == "exp_alerts:" { if ($2 == "[]") quiet[a] = 1; else fire[a] = 1 }
    END { for (a in fire) if (a in quiet) print a }' "$UNIT" |
    sort >"$TMP/tested"
# shellcheck disable=SC2013 # alert names are single words
for a in $(sed -n 's/^ *- alert: //p' "$RULES"); do
	grep -qx "$a" "$TMP/tested" ||
	    fail "$a has no firing and quiet cases in $(basename "$UNIT")"
done
pass "all $nalerts alerts have a firing and a quiet case"

# The tests must be able to fail: each change below makes a rule wrong
# and some case must notice.
mkdir -p "$TMP/contrib" "$TMP/tests/service"
cp "$UNIT" "$TMP/tests/service/"
n=0
for edit in 's/^\( *for:\) 2m$/\1 30s/' \
    's/^\( *\)> 1$/\1> 5/' \
    's/<= 1\.1 \* rate/<= 100 * rate/' \
    's/and on (job, instance) keylockd_held == 0/or keylockd_held == 0/' \
    's/max_clients > 0\.9/max_clients > 0.99/'; do
	sed "$edit" "$RULES" >"$TMP/contrib/keylockd-alerts.yml"
	! cmp -s "$RULES" "$TMP/contrib/keylockd-alerts.yml" ||
	    fail "the edit $edit changes nothing"
	promtool check rules "$TMP/contrib/keylockd-alerts.yml" \
	    >"$TMP/out" 2>&1 || fail "the edit $edit breaks the file"
	! promtool test rules "$TMP/tests/service/alerts-test.yml" \
	    >"$TMP/out" 2>&1 || fail "the unit tests pass with $edit"
	expect_grep 'FAILED' "$TMP/out" "promtool test rules with $edit"
	n=$((n + 1))
done
pass "the unit tests fail on $n wrong rules"
