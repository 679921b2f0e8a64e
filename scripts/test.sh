#!/bin/sh
# Sets up and runs the whole test suite, as CI does: the steps at the end
# of this file, in order (adding one is one line there). They build out of
# the source tree, afresh, in directories of their own (build-asan/,
# build-plain/), so that nothing trips over scripts/start.sh's build/ or
# over an earlier run. The first step that fails ends the run with its
# log. `scripts/test.sh NAME...` runs only the steps named.
#
# make check must not see the operator's world, and here it is hostile: a
# client that took the caller's KEYLOCK_* variables, or a daemon that read
# the keylockd.conf of the asan build's sysconfdir, fails its test.
set -eu
cd "$(dirname "$0")/.."
. scripts/lib.sh

# as_operator COMMAND...: COMMAND with KEYLOCK_* variables that would aim
# a client at nothing.
as_operator() {
	KEYLOCK_SERVER=/nonexistent/operator.sock \
	KEYLOCK_AUTH_FILE=/nonexistent/operator-secret \
	KEYLOCK_TLS_CA=/nonexistent/operator-ca.pem \
	KEYLOCK_TLS_CERT=/nonexistent/operator-cert.pem \
	KEYLOCK_TLS_KEY=/nonexistent/operator-key.pem \
	    "$@"
}

# check DIR [make arguments...]: make check in DIR as_operator; the failed
# tests' logs on failure.
check() {
	_dir=$1
	shift
	as_operator make -C "$_dir" -j"$JOBS" check "$@" || {
		cat "$_dir/test-suite.log"
		return 1
	}
}

# asan: every test of make check, with AddressSanitizer and
# UndefinedBehaviorSanitizer, and an operator's keylockd.conf where this
# build's daemon would read it by default.
test_asan() {
	etc=$PWD/build-asan/operator-etc
	rm -rf build-asan
	configure_in build-asan --enable-sanitizers --sysconfdir="$etc"
	mkdir -p "$etc/keylockd"
	cat >"$etc/keylockd/keylockd.conf" <<-EOT
	# Planted by scripts/test.sh: a test daemon that reads this file (it
	# should read --config /dev/null) fails at once.
	a-test-daemon-read-the-operators-config yes
	EOT
	make -C build-asan -j"$JOBS"
	rc=0
	build-asan/src/keylockd --check-config >/dev/null 2>&1 || rc=$?
	[ "$rc" -eq 78 ] || {
		echo "the planted $etc/keylockd/keylockd.conf is not what" \
		    "keylockd reads by default (--check-config: $rc)" >&2
		return 1
	}
	check build-asan
}

# distcheck: the release tarball, and a plain build from it (read-only
# source tree, out of tree) that builds every test program and runs a
# representative subset of make check: what only a tarball or a plain
# build can break. The asan step runs every test in full just before, and
# the valgrind step runs tests/integration in a plain build just after, so
# distcheck leaves out (DISTCHECK_LEAVES) the soaks, the suites of faults
# and load that take tens of seconds each, and backend etcd's suites
# through front ends; a cheaper sibling of each stays: tests/cli/session.sh
# (session_chaos.sh), tests/cli/upgrade.sh (tests/service/upgrade*.sh),
# tests/hostile/hostile_test (token_crash_test), the quick protocol suites
# (concurrency_test), tests/etcd/cluster_test.sh, etcd_client_test,
# loopback.sh and upgrade.sh (the rest of tests/etcd). The Python suite
# runs as far as pytest's collection (every test module imports from the
# tarball's tree) and mypy --strict over the package.
DISTCHECK_LEAVES="
tests/cli/session_chaos.sh
tests/soak/soak.test
tests/hostile/token_crash_test
tests/service/upgrade.sh
tests/service/upgrade_sessions.sh
tests/service/upgrade_load.sh
tests/integration/concurrency_test
tests/etcd/secure.sh
tests/etcd/integration.sh
tests/etcd/frontend_test
tests/etcd/soak_test
tests/etcd/leader_test
tests/etcd/sessions_test
"

# tests_of DIR: make check's TESTS in the build in DIR, one a line.
tests_of() {
	printf '%s\n' 'test-sh-tests:' '	@printf "%s\n" $(TESTS)' |
	    make -s -C "$1" -f Makefile -f - test-sh-tests
}

test_distcheck() {
	rm -rf build-plain
	configure_in build-plain
	_all=$(tests_of build-plain)
	_run=$(printf '%s\n' "$_all" | grep -vxF "$DISTCHECK_LEAVES" |
	    tr '\n' ' ')
	echo "distcheck runs $(echo $_run | wc -w) of the" \
	    "$(echo $_all | wc -w) tests of make check"
	as_operator env PYTEST_ADDOPTS=--collect-only \
	    make -C build-plain -j"$JOBS" distcheck TESTS="$_run" || {
		find build-plain -name test-suite.log -exec cat {} +
		return 1
	}
}

# valgrind: the integration suite with the daemon under valgrind, in the
# plain build (distcheck's, or a new one). Only the programs it runs are
# built (check_PROGRAMS), not every test program of the tree: distcheck
# built them all.
test_valgrind() {
	configure_in build-plain
	make -C build-plain -j"$JOBS"
	KEYLOCKD_WRAPPER="valgrind -q --error-exitcode=99 --leak-check=full \
--errors-for-leak-kinds=definite,indirect --show-leak-kinds=definite,indirect"
	export KEYLOCKD_WRAPPER
	_progs=$(echo tests/integration/*_test.c | sed 's/\.c//g')
	check build-plain TESTS="$_progs" check_PROGRAMS="$_progs"
}

# step NAME COMMAND...: runs COMMAND (in the source tree, under set -e)
# unless steps were named and NAME is not one; times it; a failure ends
# the run.
ONLY=" $* "
RAN=
T0=$(date +%s)
step() {
	_name=$1
	shift
	[ "$ONLY" = "  " ] || case $ONLY in *" $_name "*) ;; *) return 0 ;; esac
	echo "==> $_name: $*"
	_t=$(date +%s)
	set +e
	(set -e; "$@")
	_rc=$?
	set -e
	if [ "$_rc" -ne 0 ]; then
		echo "==> $_name: FAILED (status $_rc) after" \
		    "$(($(date +%s) - _t)) s" >&2
		exit 1
	fi
	echo "==> $_name: passed in $(($(date +%s) - _t)) s"
	RAN="$RAN $_name"
}

prepare fresh

step asan	test_asan
step distcheck	test_distcheck
step valgrind	test_valgrind
# the Debian packages, built in a scratch copy, linted, installed, used,
# purged (tests/package/debs.sh says what it checks)
step package	tests/package/debs.sh

for _n in $ONLY; do
	case " $RAN " in
	*" $_n "*) ;;
	*) echo "no step $_n" >&2; exit 64 ;;
	esac
done
echo "all tests passed:$RAN, in $(($(date +%s) - T0)) s"
