# The pure core: the parser, the lock table and the histogram, with the
# allocation seam and strict numbers. It is built without libevent,
# jansson or OpenSSL flags and its unit tests and fuzzers link it alone, so
# a clock read, a log line or an event call in it fails the build
# (HACKING.md, The pure core).
src_libklcore_a_SOURCES = \
	src/core/kl.h \
	src/core/util.c src/core/util.h \
	src/core/hist.c src/core/hist.h \
	src/core/proto.c src/core/proto.h \
	src/core/locktable.c src/core/locktable.h \
	src/core/lt_impl.h src/core/lt_acquire.c src/core/lt_check.c \
	src/core/lt_deadlock.c src/core/lt_hash.c src/core/lt_heap.c \
	src/core/lt_views.c src/core/lt_state.c \
	src/core/kstate.c src/core/kstate.h \
	src/core/ks_sessions.c src/core/ks_sessions.h
