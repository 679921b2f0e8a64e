# The daemon, one folder per subsystem, each with its fragment (HACKING.md,
# The map): core/ (the pure core, libklcore.a), daemon/ (server,
# connections, commands, config, log), http/ (status page, metrics),
# backend/ (the seam and its two backends) and etcd/ (the etcd v3 client).
# Every folder is on the include path (Makefile.am), so an #include names
# a header alone.
noinst_LIBRARIES += src/libklcore.a src/libkeylockd.a
src_libkeylockd_a_SOURCES =
nodist_src_libkeylockd_a_SOURCES =
src_libkeylockd_a_CFLAGS = $(AM_CFLAGS) $(LIBEVENT_CFLAGS) $(JANSSON_CFLAGS) \
	$(OPENSSL_CFLAGS)

include src/core/local.mk
include src/daemon/local.mk
include src/http/local.mk
include src/backend/local.mk
include src/etcd/local.mk

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
