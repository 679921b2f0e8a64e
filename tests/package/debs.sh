#!/bin/sh
# The Debian packages, end to end on this machine (a CI step of
# scripts/test.sh; runs alone too, as root or through sudo):
#  1. builds them with `dpkg-buildpackage -us -uc -b` in a scratch copy of
#     the tree (the tree itself is left as it was: checked at the end), and
#     the source package beside them; lintian: no error and no warning;
#  2. installs them with `apt-get install ./*.deb` and uses them: the
#     daemon, the CLI, pkg-config, `systemd-analyze verify` of the installed
#     units, and a C program built against the installed header and library
#     (shared and static) that PINGs a daemon started here on a free port,
#     on its compiled-in state and runtime directories, and the Python
#     package taking a lock there; then, with a daemon running and a
#     client holding a key and another waiting, installs the same packages
#     at a higher version: the postinst upgrades the daemon live (a new
#     pid, the holder's connection and lock and the waiter all kept);
#  3. removes them (the conffile stays) and purges them: nothing of theirs
#     is left, in the file system, in dpkg's database or in ld.so's cache.
# Everything it needs is installed with apt-get. A previous install of
# keylockd (from source, or packages left by an aborted run) is found
# before anything is built: the first is reported and fails the test, the
# second is purged.
set -u

TEST=debs
PKGS="keylockd keylock libkeylock0 libkeylock-dev python3-keylock"
TOP=$(cd "$(dirname "$0")/../.." && pwd)
SUDO=
[ "$(id -u)" -eq 0 ] || SUDO=sudo
APT="$SUDO env DEBIAN_FRONTEND=noninteractive apt-get -y -q"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/keylockd-debs.XXXXXX") || exit 1
DPID=
NEWPID=
INSTALLED=
MADE_PRIVATE=
# Hermetic: no KEYLOCK_* setting of the caller reaches a client here.
for v in $(env | sed -n 's/^\(KEYLOCK_[A-Za-z0-9_]*\)=.*/\1/p'); do
	unset "$v"
done

fail() {
	echo "FAIL: $TEST: $*" >&2
	exit 1
}

pass() {
	echo "ok: $TEST: $*"
}

# Ends the daemon, purges what this run installed, removes the scratch
# directory: the machine is left as it was found, however the test ends.
cleanup() {
	status=$?
	trap - EXIT INT TERM HUP
	if [ -n "$DPID" ]; then
		kill -TERM "$DPID" 2>/dev/null
		wait "$DPID" 2>/dev/null
	fi
	# The daemon after a live upgrade: not this shell's child.
	[ -z "$NEWPID" ] || $SUDO kill -TERM "$NEWPID" 2>/dev/null
	if [ -n "$INSTALLED" ]; then
		purge_ours >/dev/null 2>&1
		$SUDO rm -rf /var/lib/private/keylockd /var/lib/keylockd \
		    /run/keylockd
	fi
	[ -z "$MADE_PRIVATE" ] || $SUDO rmdir /var/lib/private 2>/dev/null
	if [ "$status" -ne 0 ] && [ -f "$WORK/daemon.log" ]; then
		echo "--- $TEST: the daemon's log" >&2
		tail -n 20 "$WORK/daemon.log" >&2
	fi
	rm -rf "$WORK"
	exit "$status"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

# wait_for CONDITION SECONDS
wait_for() {
	_n=$(($2 * 50))
	while ! eval "$1"; do
		_n=$((_n - 1))
		[ "$_n" -gt 0 ] || return 1
		sleep 0.02
	done
}

# loads_packaged_lib BINARY: ld.so resolves its libkeylock.so.0 to the
# packaged file (the same file: /lib is /usr/lib on a merged /usr).
loads_packaged_lib() {
	_got=$(ldd "$1" | sed -n 's/^[[:space:]]*libkeylock\.so\.0 => \([^ ]*\) .*/\1/p')
	[ -n "$_got" ] && [ "$(readlink -f "$_got")" = \
	    "$(readlink -f "/usr/lib/$multiarch/libkeylock.so.0")" ] ||
	    fail "$1 does not load the packaged libkeylock.so.0: $(ldd "$1" | grep keylock)"
}

# deb PACKAGE: the package's .deb in the scratch directory.
deb() {
	case $1 in
	python3-*) echo "$WORK/${1}_${version}_all.deb" ;;
	*) echo "$WORK/${1}_${version}_$arch.deb" ;;
	esac
}

# pkg_state PACKAGE: dpkg's status word ("installed", "config-files"), or
# nothing when dpkg does not know the package.
pkg_state() {
	dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null
}

# purge_ours: purges those of the packages that dpkg still knows (apt-get
# refuses to name a package it has no record of, as a removed package
# without conffiles is).
purge_ours() {
	_known=
	for _p in $PKGS; do
		case $(pkg_state "$_p") in
		""|not-installed) ;;
		*) _known="$_known $_p" ;;
		esac
	done
	[ -z "$_known" ] && return 0
	# shellcheck disable=SC2086
	$APT purge $_known
}

# --- 0. tools, and what an earlier install left -----------------------------

command -v git >/dev/null 2>&1 &&
    git -C "$TOP" rev-parse --is-inside-work-tree >/dev/null 2>&1 ||
    fail "needs git and a git checkout (the scratch copy is git's file list)"

need=
for p in build-essential devscripts debhelper lintian dpkg-dev systemd \
    man-db pkgconf; do
	[ "$(pkg_state "$p")" = installed ] || need="$need $p"
done
if [ -n "$need" ]; then
	$APT update >/dev/null || fail "apt-get update"
	# shellcheck disable=SC2086
	$APT install $need >"$WORK/apt.log" 2>&1 ||
	    fail "apt-get install$need: $(tail -5 "$WORK/apt.log")"
fi

for p in $PKGS; do
	case $(pkg_state "$p") in
	""|not-installed) ;;
	*) echo "$TEST: purging $p, left by an earlier run" ;;
	esac
done
purge_ours >"$WORK/apt.log" 2>&1 || fail "cannot purge: $(tail -5 "$WORK/apt.log")"
$SUDO rm -rf /var/lib/private/keylockd 2>/dev/null
# A from-source install (`make install`) would shadow the packages (PATH,
# pkg-config and ld.so look in /usr/local first) or mix its files with
# theirs: the test cannot judge the packages then, so it stops here.
stale=
for f in /usr/local/sbin/keylockd /usr/local/bin/keylock \
    /usr/local/bin/keylock-bench /usr/local/include/keylock.h \
    /usr/local/lib/libkeylock.so /usr/local/lib/libkeylock.so.0 \
    /usr/local/lib/libkeylock.a /usr/local/lib/pkgconfig/keylock.pc \
    /usr/local/lib/python3*/dist-packages/keylock \
    /usr/sbin/keylockd /usr/bin/keylock /usr/include/keylock.h \
    /etc/keylockd /var/lib/keylockd /run/keylockd \
    /etc/systemd/system/keylockd.service \
    /etc/systemd/system/multi-user.target.wants/keylockd.service; do
	if [ -e "$f" ] || [ -L "$f" ]; then
		stale="$stale $f"
	fi
done
[ -z "$stale" ] ||
    fail "a keylockd installed by other means is on this machine:$stale (run \`make uninstall\` in its build tree, or remove them)"
pass "no earlier install of keylockd on this machine"

# --- 1. build and lint ------------------------------------------------------

version=$(sed -n 's/^AC_INIT(\[keylockd\], \[\([^]]*\)\].*/\1/p' \
    "$TOP/configure.ac")
[ -n "$version" ] || fail "no version in configure.ac's AC_INIT"
debversion=$(dpkg-parsechangelog -l "$TOP/debian/changelog" -S Version)
[ "$debversion" = "$version" ] ||
    fail "debian/changelog is at $debversion, configure.ac at $version: add an entry (dch -v $version)"
arch=$(dpkg-architecture -qDEB_HOST_ARCH)
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)

# The scratch copy: what git tracks, and new files it does not ignore.
before=$(git -C "$TOP" status --porcelain --ignored)
mkdir "$WORK/keylockd"
(cd "$TOP" && git ls-files -z -c -o --exclude-standard |
    tar --null -T - --ignore-failed-read -cf - 2>/dev/null) |
    (cd "$WORK/keylockd" && tar -xf -) || fail "cannot copy the tree"

if ! (cd "$WORK/keylockd" && dpkg-checkbuilddeps) >/dev/null 2>&1; then
	$APT update >/dev/null || fail "apt-get update"
	$APT build-dep "$WORK/keylockd" >"$WORK/apt.log" 2>&1 ||
	    fail "apt-get build-dep: $(tail -5 "$WORK/apt.log")"
fi

# The source package first, from the clean copy.
(cd "$WORK" && dpkg-source -b keylockd) >"$WORK/source.log" 2>&1 ||
    fail "dpkg-source -b: $(tail -5 "$WORK/source.log")"
# A library symbol the symbols file lacks fails the build (check level 2):
# the packages' dependencies would be too weak. Debian's own PATH: a
# package is built with the distribution's tools (not, say, a pyenv
# python3 that comes first in the caller's PATH).
(cd "$WORK/keylockd" && env PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    DPKG_GENSYMBOLS_CHECK_LEVEL=2 dpkg-buildpackage -us -uc -b) \
    >"$WORK/build.log" 2>&1 || {
	grep -A40 '^dpkg-gensymbols: warning: some new symbols' \
	    "$WORK/build.log" >&2 &&
	    echo "(add them to debian/libkeylock0.symbols)" >&2
	tail -40 "$WORK/build.log" >&2
	fail "dpkg-buildpackage -us -uc -b"
}
for p in $PKGS; do
	[ -f "$(deb "$p")" ] || fail "no $(basename "$(deb "$p")")"
done
pass "dpkg-buildpackage -us -uc -b: $PKGS (and their dbgsym)"

lintian --fail-on error,warning --display-info --show-overrides \
    "$WORK/keylockd_$version.dsc" \
    "$WORK/keylockd_${version}_$arch.changes" >"$WORK/lintian.log" 2>&1
rc=$?
grep -v '^X: .*very-long-line-length-in-source-file .*tests/fuzz/corpus/' \
    "$WORK/lintian.log" | sed 's/^/  lintian: /'
[ "$rc" -eq 0 ] || fail "lintian (exit $rc): errors or warnings"
pass "lintian: no errors, no warnings"

# --- 2. install and use -----------------------------------------------------

# Every path the packages ship, and whether it was there before.
for p in $PKGS; do
	dpkg-deb --fsys-tarfile "$(deb "$p")" | tar -t
done | sed -e 's|^\./|/|' -e 's|/$||' | grep -v '^/*$' | sort -u \
    >"$WORK/paths"
while read -r f; do
	if [ -e "$f" ] || [ -L "$f" ]; then
		echo "$f"
	fi
done <"$WORK/paths" >"$WORK/paths.before"

debs=
for p in $PKGS; do
	debs="$debs $(deb "$p")"
done
INSTALLED=yes
# shellcheck disable=SC2086
$APT install $debs >"$WORK/install.log" 2>&1 ||
    fail "apt-get install: $(tail -10 "$WORK/install.log")"
for p in $PKGS; do
	[ "$(pkg_state "$p")" = installed ] || fail "$p is not installed"
done
pass "apt-get install ./*.deb"

out=$(/usr/sbin/keylockd --version) || fail "keylockd --version"
[ "$out" = "keylockd $version" ] || fail "keylockd --version: $out"
out=$(/usr/bin/keylock --version) || fail "keylock --version"
[ "$out" = "keylock $version" ] || fail "keylock --version: $out"
/usr/bin/keylock-bench --help >/dev/null 2>&1 || fail "keylock-bench --help"
[ "$(command -v keylockd)" = /usr/sbin/keylockd ] ||
    fail "keylockd in PATH is $(command -v keylockd)"
[ "$(dpkg -S /usr/sbin/keylockd | cut -d: -f1)" = keylockd ] ||
    fail "/usr/sbin/keylockd is not keylockd's"
loads_packaged_lib /usr/bin/keylock
pass "keylockd --version, keylock --version: $version"

dpkg-query -W -f='${Conffiles}\n' keylockd | grep -q '^ /etc/keylockd/keylockd.conf ' ||
    fail "/etc/keylockd/keylockd.conf is not a conffile"
cmp -s "$TOP/etc/keylockd.conf" /etc/keylockd/keylockd.conf ||
    fail "the installed keylockd.conf is not etc/keylockd.conf"
/usr/sbin/keylockd --check-config --config /etc/keylockd/keylockd.conf \
    >"$WORK/check.log" 2>&1 || fail "keylockd --check-config: $(cat "$WORK/check.log")"
for m in man1/keylock.1 man1/keylock-bench.1 man3/libkeylock.3 \
    man5/keylockd.conf.5 man7/keylockd-protocol.7 man8/keylockd.8; do
	[ -f "/usr/share/man/$m.gz" ] || fail "no /usr/share/man/$m.gz"
done
pass "the conffile, the man pages"

out=$(pkg-config --modversion keylock) || fail "pkg-config --modversion keylock"
[ "$out" = "$version" ] || fail "pkg-config --modversion keylock: $out"
out=$(pkg-config --variable=pcfiledir keylock)
[ "$out" = "/usr/lib/$multiarch/pkgconfig" ] ||
    fail "pkg-config reads keylock.pc from $out"
pass "pkg-config --modversion keylock: $version"

# -I: no PYTHONPATH, no user site, not the current directory.
out=$(/usr/bin/python3 -I -c 'import keylock; print(keylock.__version__, keylock.__file__)') ||
    fail "python3 -c 'import keylock'"
[ "$out" = "$version /usr/lib/python3/dist-packages/keylock/__init__.py" ] ||
    fail "python3 imports keylock as: $out"
pass "python3 imports the packaged keylock $version"

unitdir=$(dirname "$(grep '/systemd/system/keylockd.service$' "$WORK/paths")")
[ -f "$unitdir/keylockd.service" ] && [ -f "$unitdir/keylockd.socket" ] ||
    fail "no units in $unitdir"
[ "$unitdir" = "$(pkg-config --variable=systemdsystemunitdir systemd)" ] ||
    fail "the units are in $unitdir, not where systemd looks"
SYSTEMD_LOG_COLOR=0 systemd-analyze verify "$unitdir/keylockd.service" \
    "$unitdir/keylockd.socket" >"$WORK/verify" 2>&1 ||
    fail "systemd-analyze verify: $(cat "$WORK/verify")"
[ ! -s "$WORK/verify" ] || fail "systemd-analyze verify said: $(cat "$WORK/verify")"
grep -q '^DynamicUser=yes$' "$unitdir/keylockd.service" ||
    fail "keylockd.service has no DynamicUser=yes"
# Enabled by the postinst (deb-systemd-helper, with or without a running
# systemd): the service, not the socket.
[ -L /etc/systemd/system/multi-user.target.wants/keylockd.service ] ||
    fail "keylockd.service is not enabled"
[ ! -e /etc/systemd/system/sockets.target.wants/keylockd.socket ] ||
    fail "keylockd.socket is enabled"
pass "systemd-analyze verify $unitdir/keylockd.{service,socket}; the service is enabled"

# A C program against the installed library: shared, then static.
cp "$TOP/tests/package/ping.c" "$WORK/"
# shellcheck disable=SC2046
cc -Wall -Werror -o "$WORK/ping" "$WORK/ping.c" -Wl,--trace \
    $(pkg-config --cflags --libs keylock) >"$WORK/cc.log" 2>&1 ||
    fail "cc ping.c \$(pkg-config --cflags --libs keylock): $(cat "$WORK/cc.log")"
# ld's --trace names the files it linked, as it found them.
linked=$(grep '/libkeylock\.so$' "$WORK/cc.log")
[ -n "$linked" ] && [ "$(readlink -f "$linked")" = \
    "$(readlink -f "/usr/lib/$multiarch/libkeylock.so")" ] ||
    fail "ping was not linked with the packaged libkeylock.so: $(grep keylock "$WORK/cc.log")"
cc -M "$WORK/ping.c" | grep -q ' /usr/include/keylock\.h' ||
    fail "ping.c does not include /usr/include/keylock.h"
loads_packaged_lib "$WORK/ping"
# shellcheck disable=SC2046
cc -Wall -Werror -o "$WORK/ping-static" "$WORK/ping.c" \
    $(pkg-config --cflags keylock) -Wl,-Bstatic -lkeylock -Wl,-Bdynamic \
    $(pkg-config --static --libs keylock | sed 's/-lkeylock//') \
    >"$WORK/cc.log" 2>&1 ||
    fail "cc ping.c with libkeylock.a: $(cat "$WORK/cc.log")"
! ldd "$WORK/ping-static" | grep -q libkeylock ||
    fail "ping-static loads libkeylock.so"
pass "a C program builds against the installed libkeylock (shared and static)"

# The daemon on its compiled-in directories, as systemd lays them out for
# the service (StateDirectory= under DynamicUser=: the state in
# /var/lib/private/keylockd, /var/lib/keylockd a symlink to it), so that
# the purge below has the service's state to remove.
if [ ! -d /var/lib/private ]; then
	$SUDO mkdir -m 0700 /var/lib/private || fail "mkdir /var/lib/private"
	MADE_PRIVATE=yes
fi
$SUDO mkdir -m 0700 /var/lib/private/keylockd &&
    $SUDO ln -s private/keylockd /var/lib/keylockd ||
    fail "cannot lay out the state directory"
$SUDO /usr/sbin/keylockd --config /dev/null --bind 127.0.0.1 --port 0 \
    --port-file "$WORK/port" >"$WORK/daemon.log" 2>&1 &
DPID=$!
wait_for "grep -q '^[0-9][0-9]*\$' '$WORK/port' 2>/dev/null" 10 ||
    fail "keylockd not ready within 10 s"
port=$(head -n 1 "$WORK/port")
out=$("$WORK/ping" "127.0.0.1:$port") || fail "ping over TCP: $out"
case $out in
"PONG token "[1-9]*) ;;
*) fail "ping over TCP printed: $out" ;;
esac
$SUDO "$WORK/ping-static" /run/keylockd/keylockd.sock >"$WORK/out" 2>&1 ||
    fail "ping-static over /run/keylockd/keylockd.sock: $(cat "$WORK/out")"
/usr/bin/keylock -S "127.0.0.1:$port" debs:cli -- true ||
    fail "keylock debs:cli -- true"
out=$(/usr/bin/python3 -I -c '
import sys, keylock
with keylock.KeyedLock(sys.argv[1]) as locks:
    with locks.hold("debs:python", timeout=2) as h:
        print(h.token)
' "127.0.0.1:$port" 2>&1) || fail "keylock.KeyedLock().hold(): $out"
case $out in
[1-9]*) ;;
*) fail "keylock.KeyedLock().hold() gave token: $out" ;;
esac
$SUDO kill -TERM "$DPID"
wait "$DPID"
rc=$?
DPID=
[ "$rc" -eq 0 ] || fail "keylockd exited $rc after SIGTERM"
$SUDO sh -c 'ls -A /var/lib/keylockd/' | grep -q . ||
    fail "the daemon wrote nothing in /var/lib/keylockd"
pass "PING from ping (TCP) and ping-static (/run/keylockd/keylockd.sock); keylock and python3-keylock take a key"

# --- 2b. an upgrade of the packages upgrades the running daemon live -------

# stat_of NAME: a number from the daemon's STATS.
stat_of() {
	/usr/bin/keylock -S "127.0.0.1:$port" stats --json |
	    sed -n "s/.*\"$1\":\([0-9][0-9]*\).*/\1/p"
}

# The same packages at a higher version (rebuilt with dpkg-deb from the
# ones built above, their contents unchanged): dpkg replaces every file,
# so /usr/sbin/keylockd is a new file under the running daemon, as on a
# real upgrade.
newversion="$version+live1"
mkdir "$WORK/new"
for p in $PKGS; do
	rm -rf "$WORK/re"
	dpkg-deb -R "$(deb "$p")" "$WORK/re" || fail "dpkg-deb -R $p"
	sed -i -e "s/^Version: $version\$/Version: $newversion/" \
	    -e "s/(= $version)/(= $newversion)/g" "$WORK/re/DEBIAN/control"
	dpkg-deb --root-owner-group -b "$WORK/re" "$WORK/new/" >/dev/null ||
	    fail "dpkg-deb -b $p at $newversion"
done
rm -rf "$WORK/re"

$SUDO /usr/sbin/keylockd --config /dev/null --bind 127.0.0.1 --port 0 \
    --port-file "$WORK/port2" >"$WORK/daemon.log" 2>&1 &
DPID=$!
wait_for "grep -q '^[0-9][0-9]*\$' '$WORK/port2' 2>/dev/null" 10 ||
    fail "keylockd (for the upgrade) not ready within 10 s"
port=$(head -n 1 "$WORK/port2")
oldpid=$(stat_of pid)
[ -n "$oldpid" ] || fail "STATS has no pid"
# A holder (its command runs until told to stop) and a waiter behind it,
# both over TCP, both from before the upgrade.
/usr/bin/keylock -S "127.0.0.1:$port" debs:live -- sh -c \
    'echo "$KEYLOCK_TOKEN" >"$1/held"; while [ ! -e "$1/release" ]; do sleep 0.05; done' \
    sh "$WORK" >"$WORK/holder.log" 2>&1 &
HOLDER=$!
wait_for "[ -s '$WORK/held' ]" 10 || fail "the holder did not get debs:live"
/usr/bin/keylock -S "127.0.0.1:$port" -w 60 debs:live -- sh -c \
    'echo "$KEYLOCK_TOKEN" >"$1/waited"' sh "$WORK" \
    >"$WORK/waiter.log" 2>&1 &
WAITER=$!
wait_for "/usr/bin/keylock -S 127.0.0.1:$port info debs:live | grep -q '^waiters: 1'" 10 ||
    fail "the waiter is not queued on debs:live"

# shellcheck disable=SC2086
$APT install "$WORK"/new/*.deb >"$WORK/upgrade.log" 2>&1 ||
    fail "apt-get install (the packages at $newversion): $(tail -10 "$WORK/upgrade.log")"
for p in $PKGS; do
	[ "$(dpkg-query -W -f='${Version}' "$p")" = "$newversion" ] ||
	    fail "$p is not at $newversion after the upgrade"
done
grep -q '^keylockd: the running daemon was upgraded live' "$WORK/upgrade.log" ||
    fail "the postinst did not upgrade the daemon live: $(grep keylockd: "$WORK/upgrade.log")"
wait "$DPID" || fail "the old process exited $? after handing over"
newpid=$(stat_of pid)
DPID=
NEWPID=$newpid
[ -n "$newpid" ] && [ "$newpid" != "$oldpid" ] ||
    fail "STATS pid is $newpid after the upgrade, was $oldpid"
[ "$(readlink "/proc/$newpid/exe")" = /usr/sbin/keylockd ] ||
    fail "the new process runs $(readlink "/proc/$newpid/exe")"
[ "$(stat_of upgrades)" = 1 ] || fail "STATS upgrades is $(stat_of upgrades), want 1"
kill -0 "$HOLDER" 2>/dev/null || fail "the holder's keylock ended: $(cat "$WORK/holder.log")"
held=$(cat "$WORK/held")
/usr/bin/keylock -S "127.0.0.1:$port" info debs:live >"$WORK/info" ||
    fail "keylock info debs:live after the upgrade"
grep -q "token $held," "$WORK/info" && grep -q '^waiters: 1' "$WORK/info" ||
    fail "debs:live after the upgrade: $(cat "$WORK/info")"
touch "$WORK/release"
wait "$HOLDER" || fail "the holder's keylock exited $?: $(cat "$WORK/holder.log")"
wait "$WAITER" || fail "the waiter's keylock exited $?: $(cat "$WORK/waiter.log")"
[ "$(cat "$WORK/waited")" -gt "$held" ] ||
    fail "the waiter got token $(cat "$WORK/waited"), the holder had $held"
pass "apt-get install at $newversion upgraded the running daemon live (pid $oldpid -> $newpid): the holder kept debs:live (token $held), its waiter got it after ($(cat "$WORK/waited"))"
$SUDO kill -TERM "$newpid"
wait_for "! kill -0 $newpid 2>/dev/null" 10 ||
    fail "the upgraded keylockd did not exit after SIGTERM"
NEWPID=

# The postinst's other ways out (keylockd.README.Debian), run from the
# tree (its #DEBHELPER# line is a comment there) with the installed
# keylock: a socket file that nobody listens on is no daemon (nothing to
# say), and a daemon that drops the UPGRADE (keylock's exit 69, as for no
# reply in time) is reported, the install going on.
SOCK=/run/keylockd/keylockd.sock
if [ -d /run/systemd/system ]; then
	echo "skip: $TEST: the postinst's ways out (under systemd it asks systemctl, not the socket)"
else
$SUDO mkdir -p /run/keylockd
$SUDO rm -f "$SOCK"
$SUDO python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$SOCK" ||
    fail "cannot leave a socket file at $SOCK"
$SUDO sh "$TOP/debian/keylockd.postinst" configure "$version" >"$WORK/pi.out" 2>&1 ||
    fail "the postinst exited $? for a socket nobody listens on: $(cat "$WORK/pi.out")"
[ ! -s "$WORK/pi.out" ] ||
    fail "the postinst spoke of a socket nobody listens on: $(cat "$WORK/pi.out")"
$SUDO rm -f "$SOCK"
# A server that answers every line but UPGRADE, which it drops.
$SUDO python3 - "$SOCK" <<'EOPY_FAKE' >"$WORK/fake.log" 2>&1 &
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
s.listen(8)
s.settimeout(30)
while True:
    c, _ = s.accept()
    f = c.makefile("rwb", buffering=0)
    for line in f:
        word = line.split()[0].upper() if line.split() else b""
        if word == b"UPGRADE":
            break
        f.write(b"OK PONG\n" if word == b"PING" else b"OK\n")
    f.close()
    c.close()
EOPY_FAKE
FAKE=$!
wait_for "[ -S '$SOCK' ]" 10 || fail "the fake daemon did not listen on $SOCK"
$SUDO sh "$TOP/debian/keylockd.postinst" configure "$version" >"$WORK/pi.out" 2>&1 ||
    fail "the postinst exited $? for a failed live upgrade: $(cat "$WORK/pi.out")"
$SUDO kill "$FAKE" 2>/dev/null
wait "$FAKE" 2>/dev/null
$SUDO rm -f "$SOCK"
grep -q '^keylockd: the running daemon was not upgraded live: ' "$WORK/pi.out" ||
    fail "the postinst did not report a dropped UPGRADE: $(cat "$WORK/pi.out")"
pass "the postinst: silent for a socket nobody listens on, reports a daemon that drops the UPGRADE"
fi

# --- 3. remove, purge, and nothing left -------------------------------------

echo "max-keys 7" | $SUDO tee -a /etc/keylockd/keylockd.conf >/dev/null
# shellcheck disable=SC2086
$APT remove $PKGS >"$WORK/remove.log" 2>&1 ||
    fail "apt-get remove: $(tail -10 "$WORK/remove.log")"
[ ! -e /usr/sbin/keylockd ] || fail "remove left /usr/sbin/keylockd"
[ "$(pkg_state keylockd)" = config-files ] ||
    fail "keylockd after remove: $(pkg_state keylockd), want config-files"
grep -q '^max-keys 7$' /etc/keylockd/keylockd.conf ||
    fail "remove did not keep the edited keylockd.conf"
pass "apt-get remove: the edited conffile stays"

purge_ours >"$WORK/purge.log" 2>&1 ||
    fail "apt-get purge: $(tail -10 "$WORK/purge.log")"
INSTALLED=
for p in $PKGS; do
	st=$(pkg_state "$p")
	[ -z "$st" ] || [ "$st" = not-installed ] || fail "$p is $st after purge"
done
left=
while read -r f; do
	if { [ -e "$f" ] || [ -L "$f" ]; } && ! grep -qxF "$f" "$WORK/paths.before"; then
		left="$left $f"
	fi
done <"$WORK/paths"
for f in /etc/keylockd /var/lib/keylockd /var/lib/private/keylockd \
    /run/keylockd; do
	if [ -e "$f" ] || [ -L "$f" ]; then
		left="$left $f"
	fi
done
left="$left $(find /etc/systemd /var/lib/systemd -name '*keylockd*' \
    2>/dev/null | tr '\n' ' ')"
[ -z "$(echo "$left" | tr -d ' ')" ] || fail "purge left:$left"
# dpkg -S: no package owns the packages' files (those that were not there
# before), nor anything named after keylockd or libkeylock.
grep -vxF -f "$WORK/paths.before" "$WORK/paths" |
    tr '\n' '\0' | xargs -0 dpkg -S '*keylockd*' '*libkeylock*' \
    >"$WORK/dpkg-S" 2>/dev/null
[ ! -s "$WORK/dpkg-S" ] || fail "dpkg -S still finds: $(cat "$WORK/dpkg-S")"
! ldconfig -p | grep -q libkeylock || fail "ld.so's cache still has libkeylock"
! pkg-config --exists keylock || fail "pkg-config still finds keylock"
pass "apt-get purge: no file, unit link, state, library or .pc left; dpkg -S finds nothing"

after=$(git -C "$TOP" status --porcelain --ignored)
[ "$before" = "$after" ] ||
    fail "the source tree changed: $(echo "$after" | head -5)"
pass "the source tree is as it was"
