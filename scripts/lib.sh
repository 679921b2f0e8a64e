# Sourced by scripts/start.sh and scripts/test.sh from the top of the
# source tree: the Debian packages, the generated build system, and builds
# out of the source tree, each in a directory of its own beside it
# (start.sh's build/, test.sh's build-*/), so that neither trips over the
# other and both can run again.
# shellcheck shell=sh

JOBS=$(nproc)

# prepare [fresh]: the packages; configure, made again if fresh is given;
# and no build in the source tree itself (./configure there stops every
# build out of it).
prepare() {
	scripts/deps.sh
	if [ "${1:-}" = fresh ] || [ ! -x configure ]; then
		autoreconf -fi
	fi
	if [ -f config.status ]; then
		echo "$0: this source tree holds a build of its own" \
		    "(config.status): run 'make distclean' here first;" \
		    "scripts/start.sh and scripts/test.sh build out of tree" >&2
		exit 1
	fi
}

# configure_in DIR [ARGS...]: DIR, beside the source tree, configured with
# ARGS. It is made afresh (and the build in it with it) when it has no
# Makefile or ARGS differ from the line it was configured with, which
# DIR/configure.line keeps; otherwise it is left as it is.
configure_in() {
	_dir=$1
	shift
	case $_dir in
	'' | /* | *..* | */*)
		echo "$0: configure_in: $_dir is not a directory name" >&2
		return 1
		;;
	esac
	if [ -f "$_dir/Makefile" ] && [ -f "$_dir/configure.line" ] &&
	    [ "$(cat "$_dir/configure.line")" = "$*" ]; then
		return 0
	fi
	echo "$0: configuring $_dir afresh: ../configure $*"
	rm -rf "$_dir"
	mkdir "$_dir"
	(cd "$_dir" && ../configure "$@" >/dev/null)
	printf '%s\n' "$*" >"$_dir/configure.line"
}
