# Integration tests: the real keylockd on real sockets (STYLE.md, section 11).
# Each program starts its own daemons from the build tree; KEYLOCKD tells it
# where the binary is. KEYLOCKD_WRAPPER (e.g. valgrind) and
# KEYLOCKD_TEST_ADDR (a running daemon) pass through from the environment.

check_PROGRAMS += tests/integration/protocol_test \
	tests/integration/concurrency_test

tests_integration_protocol_test_SOURCES = \
	tests/integration/protocol_test.c \
	tests/integration/kltest.c \
	tests/integration/kltest.h
tests_integration_protocol_test_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) \
	$(JANSSON_CFLAGS)
tests_integration_protocol_test_LDADD = $(CHECK_LIBS) $(JANSSON_LIBS) \
	-lpthread

tests_integration_concurrency_test_SOURCES = \
	tests/integration/concurrency_test.c \
	tests/integration/kltest.c \
	tests/integration/kltest.h
tests_integration_concurrency_test_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) \
	$(JANSSON_CFLAGS)
tests_integration_concurrency_test_LDADD = $(CHECK_LIBS) $(JANSSON_LIBS) \
	-lpthread

TESTS += tests/integration/protocol_test \
	tests/integration/concurrency_test

