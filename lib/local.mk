# libkeylock, the C client of keylockd (libkeylock(3)): a shared library,
# its header and keylock.pc. It links libc, jansson and OpenSSL (TLS), not
# libevent.
# Only keylock_* symbols are exported.
lib_LTLIBRARIES += lib/libkeylock.la
lib_libkeylock_la_SOURCES = \
	lib/keylock.c lib/keylock.h \
	lib/keylock_io.c lib/keylock_int.h \
	lib/keylock_tls.c \
	lib/keylock_session.c
lib_libkeylock_la_CPPFLAGS = -I$(top_srcdir)/lib
lib_libkeylock_la_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS) $(OPENSSL_CFLAGS)
lib_libkeylock_la_LIBADD = $(JANSSON_LIBS) $(OPENSSL_LIBS)
# current:revision:age, libtool's rules: bump on every interface change.
lib_libkeylock_la_LDFLAGS = $(AM_LDFLAGS) -version-info 2:0:2 \
	-no-undefined -export-symbols-regex '^keylock_'
include_HEADERS += lib/keylock.h

# keylock.pc: made by make with sed (configure.ac has no AC_CONFIG_FILES
# for it), which also expands ${prefix} in the directories fully.
pkgconfig_DATA += lib/keylock.pc
CLEANFILES += lib/keylock.pc
EXTRA_DIST += lib/keylock.pc.in
lib/keylock.pc: $(srcdir)/lib/keylock.pc.in Makefile
	$(AM_V_GEN)$(MKDIR_P) lib && sed \
	    -e 's|@prefix[@]|$(prefix)|g' \
	    -e 's|@exec_prefix[@]|$(exec_prefix)|g' \
	    -e 's|@libdir[@]|$(libdir)|g' \
	    -e 's|@includedir[@]|$(includedir)|g' \
	    -e 's|@VERSION[@]|$(VERSION)|g' \
	    $(srcdir)/lib/keylock.pc.in >$@.tmp && mv $@.tmp $@

dist_man_MANS += man/libkeylock.3
