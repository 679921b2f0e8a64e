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

# distcheck: a plain build from the release tarball, and its make check.
# The asan step ran every test in full; here the etcd soak runs its
# shortest and the etcd integration pass is left out (minutes of CI).
test_distcheck() {
	rm -rf build-plain
	configure_in build-plain
	as_operator env SOAK_SECONDS=20 KEYLOCKD_SKIP_ETCD_INTEGRATION=1 \
	    make -C build-plain -j"$JOBS" distcheck || {
		find build-plain -name test-suite.log -exec cat {} +
		return 1
	}
}

# valgrind: the integration suite with the daemon under valgrind, in the
# plain build (distcheck's, or a new one).
test_valgrind() {
	configure_in build-plain
	make -C build-plain -j"$JOBS"
	KEYLOCKD_WRAPPER="valgrind -q --error-exitcode=99 --leak-check=full \
--errors-for-leak-kinds=definite,indirect --show-leak-kinds=definite,indirect"
	export KEYLOCKD_WRAPPER
	check build-plain TESTS="$(echo tests/integration/*_test.c |
	    sed 's/\.c//g')"
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
