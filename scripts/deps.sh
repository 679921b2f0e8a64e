#!/bin/sh
# Installs the Debian packages keylockd needs to build, test and benchmark.
# Uses sudo when not run as root. Safe to run again.
set -eu
PKGS="build-essential autoconf automake libtool pkg-config libevent-dev
libjansson-dev libssl-dev openssl check valgrind netcat-openbsd procps
systemd curl man-db"
# promtool, for tests/service/alerts.sh: Debian ships it with the server.
PKGS="$PKGS prometheus"
# chromium, for tests/service/status_page.sh: a real browser.
PKGS="$PKGS chromium"
# python/ (its tests, mypy --strict, pip install) and
# bench/python_compare.py (redis-py's Lock on redis-server).
PKGS="$PKGS python3 python3-pytest python3-pip mypy python3-redis redis-server"
# etcd and etcdctl, for tests/etcd (backend etcd's private clusters).
PKGS="$PKGS etcd-server etcd-client"
# The Debian packages (tests/package/debs.sh): dpkg-buildpackage, lintian.
PKGS="$PKGS debhelper devscripts dpkg-dev lintian"
SUDO=
if [ "$(id -u)" -ne 0 ]; then
	SUDO=sudo
fi
missing=
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null |
	    grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
	$SUDO apt-get update
	# shellcheck disable=SC2086
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y $missing
fi
