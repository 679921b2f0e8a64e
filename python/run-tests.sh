#!/bin/sh
# keylock, the Python client of keylockd. SPDX-License-Identifier: MIT
#
# make check's entry for python/: the pytest suite against the daemon of
# this build ($KEYLOCKD, from AM_TESTS_ENVIRONMENT), then mypy --strict
# over the package. Exit 77 (skipped) only when no python3 with pytest
# (Debian: python3-pytest) is here. Nothing is written to the source tree:
# no bytecode, no pytest or mypy cache.
set -u
src=${top_srcdir:-$(cd "$(dirname "$0")/.." && pwd)}/python

# The first python3 that has pytest: $PYTHON, the one on PATH, then
# Debian's own (a PATH may put another Python first).
py=
for cand in ${PYTHON:-} python3 /usr/bin/python3; do
	if "$cand" -c 'import pytest' >/dev/null 2>&1; then
		py=$cand
		break
	fi
done
if [ -z "$py" ]; then
	echo "python/run-tests.sh: SKIP: no python3 with pytest" \
	    "(apt-get install python3-pytest)" >&2
	exit 77
fi
PYTHONDONTWRITEBYTECODE=1
export PYTHONDONTWRITEBYTECODE
"$py" -m pytest -p no:cacheprovider -q -rs --rootdir "$src" "$src/tests" ||
    exit 1
if "$py" -c 'import mypy' >/dev/null 2>&1; then
	mypy="$py -m mypy"
else
	mypy=mypy
fi
$mypy --strict --cache-dir=/dev/null "$src/keylock" || exit 1
