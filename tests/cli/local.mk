# check_libkeylock (defined with the client in tools/local.mk) starts its
# daemons through the C tests' harness, tests/integration/libkltest.a.
tests_cli_check_libkeylock_CPPFLAGS += -I$(top_srcdir)/tests/integration
tests_cli_check_libkeylock_LDADD += tests/integration/libkltest.a \
	$(CHECK_LIBS) -lpthread
