noinst_LIBRARIES += src/libkeylockd.a
src_libkeylockd_a_SOURCES = \
	src/kl.h \
	src/util.c src/util.h \
	src/log.c src/log.h \
	src/hist.c src/hist.h \
	src/proto.c src/proto.h \
	src/locktable.c src/locktable.h \
	src/lt_impl.h src/lt_acquire.c src/lt_check.c src/lt_deadlock.c \
	src/lt_hash.c src/lt_heap.c src/lt_views.c \
	src/stats.c src/stats.h \
	src/config.c src/config.h \
	src/token.c src/token.h \
	src/commands.c src/commands.h \
	src/conn.c src/conn.h \
	src/server.c src/server.h \
	src/notify.c src/notify.h \
	src/metrics.c src/metrics.h \
	src/tls.c src/tls.h
src_libkeylockd_a_CFLAGS = $(AM_CFLAGS) $(LIBEVENT_CFLAGS) $(JANSSON_CFLAGS) \
	$(OPENSSL_CFLAGS)

sbin_PROGRAMS += src/keylockd
src_keylockd_SOURCES = src/keylockd.c
src_keylockd_CFLAGS = $(AM_CFLAGS) $(LIBEVENT_CFLAGS) $(JANSSON_CFLAGS)
src_keylockd_LDADD = $(KEYLOCKD_LIBS)

# What links the daemon's library: the daemon, unit tests, fuzzers.
KEYLOCKD_LIBS = src/libkeylockd.a $(LIBEVENT_LIBS) $(JANSSON_LIBS) \
	$(OPENSSL_LIBS)
