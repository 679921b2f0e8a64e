# The pure core: the parser, the lock table and the histogram, with the
# allocation seam and strict numbers. It is built without libevent,
# jansson or OpenSSL flags and its unit tests and fuzzers link it alone, so
# a clock read, a log line or an event call in it fails the build
# (HACKING.md, The pure core).
noinst_LIBRARIES += src/libklcore.a
src_libklcore_a_SOURCES = \
	src/kl.h \
	src/util.c src/util.h \
	src/hist.c src/hist.h \
	src/proto.c src/proto.h \
	src/locktable.c src/locktable.h \
	src/lt_impl.h src/lt_acquire.c src/lt_check.c src/lt_deadlock.c \
	src/lt_hash.c src/lt_heap.c src/lt_views.c

# The rest of the daemon, on top of the core.
noinst_LIBRARIES += src/libkeylockd.a
src_libkeylockd_a_SOURCES = \
	src/clock.c src/clock.h \
	src/log.c src/log.h \
	src/stats.c src/stats.h \
	src/config.c src/config.h \
	src/token.c src/token.h \
	src/backend.h src/backend_local.c \
	src/commands.c src/commands.h \
	src/conn.c src/conn.h \
	src/server.c src/server.h \
	src/notify.c src/notify.h \
	src/metrics.c src/metrics.h \
	src/tls.c src/tls.h \
	src/sha256.c src/sha256.h \
	src/status.c src/status.h
nodist_src_libkeylockd_a_SOURCES = src/status_html.c
src_libkeylockd_a_CFLAGS = $(AM_CFLAGS) $(LIBEVENT_CFLAGS) $(JANSSON_CFLAGS) \
	$(OPENSSL_CFLAGS)

sbin_PROGRAMS += src/keylockd
src_keylockd_SOURCES = src/keylockd.c
src_keylockd_CFLAGS = $(AM_CFLAGS) $(LIBEVENT_CFLAGS) $(JANSSON_CFLAGS)
src_keylockd_LDADD = $(KEYLOCKD_LIBS)

# What links the pure core alone: its unit tests and fuzzers.
KLCORE_LIBS = src/libklcore.a
# What links the daemon's library: the daemon, the other unit tests, the
# session fuzzer. Not OpenSSL: tls.c opens it when TLS is configured.
KEYLOCKD_LIBS = src/libkeylockd.a src/libklcore.a $(LIBEVENT_LIBS) \
	$(JANSSON_LIBS)

# The status page's HTML as a C array, made with od(1) and awk(1) alone so
# it builds out of tree and in distcheck; a NUL ends it (status.h).
EXTRA_DIST += src/status.html
CLEANFILES += src/status_html.c
src/status_html.c: src/status.html
	$(AM_V_GEN)$(MKDIR_P) src && { \
	echo '/* Generated from status.html by src/local.mk. */'; \
	echo '#include "status.h"'; \
	echo 'const unsigned char status_html[] = {'; \
	od -An -v -tu1 $(srcdir)/src/status.html | \
	    awk '{ for (i = 1; i <= NF; i++) printf "%s,", $$i; print "" }'; \
	echo '0 };'; \
	echo 'const size_t status_html_len = sizeof(status_html) - 1;'; \
	} >$@-t && mv $@-t $@

# backend etcd: the etcd v3 client (JSON gateway over evhttp).
src_libkeylockd_a_SOURCES += \
	src/etcd.c src/etcd.h src/etcd_impl.h src/etcd_json.c src/etcd_watch.c \
	src/backend_etcd.c src/backend_etcd.h src/etcd_backend.h \
	src/etcd_replica.c src/etcd_commit.c
