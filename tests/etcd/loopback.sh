#!/bin/sh
# examples/etcd-loopback.sh, README's two-minute version of "Run it on
# several hosts", works: three members and two front ends come up, a
# lock taken through one is ERR LOCKED through the other, and everything
# is gone afterwards.
. "$(dirname "$0")/lib.sh"

command -v nc >/dev/null || skip "no nc"
command -v "${ETCD:-etcd}" >/dev/null || skip "etcd is not installed"
EX=$top_srcdir/examples/etcd-loopback.sh

cat >"$TMP/check.sh" <<'EOS'
set -u
h1=${FRONTEND1%:*} p1=${FRONTEND1#*:}
h2=${FRONTEND2%:*} p2=${FRONTEND2#*:}
(printf 'LOCK job\n'; sleep 3) | timeout 5 nc "$h1" "$p1" >"$OUT.1" &
i=0
until grep -q '^OK ' "$OUT.1" 2>/dev/null; do
	i=$((i + 1)); [ "$i" -lt 100 ] || exit 10; sleep 0.05
done
(printf 'TRYLOCK job\n'; sleep 1) | timeout 3 nc "$h2" "$p2" >"$OUT.2"
grep -q '^ERR LOCKED ' "$OUT.2" || exit 11
wait
EOS
OUT=$TMP/out
export OUT
sh "$EX" -b "$top_builddir" -- sh "$TMP/check.sh" >"$TMP/log" 2>&1
rc=$?
[ "$rc" -eq 0 ] || fail "exit $rc: $(cat "$TMP/log"; cat "$OUT.1" "$OUT.2" 2>/dev/null)"
grep -q "keylockd front ends at" "$TMP/log" || fail "no front ends"
dir=$(sed -n 's/.*(logs in \(.*\))$/\1/p' "$TMP/log")
[ -n "$dir" ] && [ ! -d "$dir" ] || fail "left $dir behind"
pass "two front ends on three members: LOCK through one, LOCKED through the other"
