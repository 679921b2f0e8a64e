#!/bin/sh
# Sets up and runs the whole test suite, as CI does:
#  1. unit, integration and fuzz-replay tests with ASan and UBSan;
#  2. `make distcheck` (a plain build from the release tarball);
#  3. the integration suite with the daemon under valgrind.
set -eu
cd "$(dirname "$0")/.."
top=$PWD
jobs=$(nproc)
scripts/deps.sh
autoreconf -fi

rm -rf build-asan && mkdir build-asan && cd build-asan
../configure --enable-sanitizers
make -j"$jobs"
make -j"$jobs" check || { cat test-suite.log; exit 1; }
cd "$top"

rm -rf build-plain && mkdir build-plain && cd build-plain
../configure
make -j"$jobs" distcheck || { find . -name test-suite.log -exec cat {} +; \
    exit 1; }
make -j"$jobs"
KEYLOCKD_WRAPPER="valgrind -q --error-exitcode=99 --leak-check=full \
--errors-for-leak-kinds=definite,indirect --show-leak-kinds=definite,indirect"
export KEYLOCKD_WRAPPER
make -j"$jobs" check TESTS="$(cd "$top" && echo tests/integration/*_test.c |
    sed 's/\.c//g')" || { cat test-suite.log; exit 1; }
# The Debian packages: built in a scratch copy, linted, installed, used,
# purged (tests/package/debs.sh says what it checks).
"$top/tests/package/debs.sh"
echo "all tests passed"
