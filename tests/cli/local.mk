# check_libkeylock (defined with the client in tools/local.mk) starts its
# daemons through the C tests' harness, tests/integration/libkltest.a, and
# has the Check programs' one main().
tests_cli_check_libkeylock_CPPFLAGS += -I$(top_srcdir)/tests/integration \
	$(CHECK_MAIN_CFLAGS)
tests_cli_check_libkeylock_LDADD += $(CHECK_MAIN_LDADD) \
	tests/integration/libkltest.a $(CHECK_LIBS) -lpthread

# Sessions (issue 20): the library's own tests join check_libkeylock.
tests_cli_check_libkeylock_SOURCES += tests/cli/libkeylock_session.c
