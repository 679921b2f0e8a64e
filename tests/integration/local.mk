# Integration tests: the real keylockd on real sockets (HACKING.md, Tests).
# Each program starts its own daemons from the build tree; KEYLOCKD tells it
# where the binary is. KEYLOCKD_WRAPPER (e.g. valgrind) and
# KEYLOCKD_TEST_ADDR (a running daemon) pass through from the environment.
# The protocol_*_test programs take the wire protocol one theme at a time
# and share protocol_util.c. concurrency_test is one program with its
# tests in concurrency_*.c by theme; only programs' main files end in
# _test.c (scripts/test.sh runs tests/integration/*_test under valgrind).

# The harness (kltest.h): the one daemon launcher of the C tests, also
# linked by tests/hostile, tests/soak and tests/cli (check_libkeylock).
check_LIBRARIES += tests/integration/libkltest.a
tests_integration_libkltest_a_SOURCES = \
	tests/integration/kltest.c \
	tests/integration/kltest.h \
	tests/integration/kltest_impl.h \
	tests/integration/kltest_daemon.c \
	tests/integration/kltest_conn.c \
	tests/integration/kltest_expect.c
tests_integration_libkltest_a_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) \
	$(JANSSON_CFLAGS)

KLTEST_CFLAGS = $(AM_CFLAGS) -I$(top_srcdir)/tests/integration \
	$(CHECK_MAIN_CFLAGS) $(CHECK_CFLAGS) $(JANSSON_CFLAGS)
KLTEST_LDADD = $(CHECK_MAIN_LDADD) tests/integration/libkltest.a \
	$(CHECK_LIBS) $(JANSSON_LIBS) -lpthread

PROTOCOL_TESTS = \
	tests/integration/protocol_commands_test \
	tests/integration/protocol_framing_test \
	tests/integration/protocol_errors_test \
	tests/integration/protocol_waits_test \
	tests/integration/protocol_server_test \
	tests/integration/protocol_sessions_test \
	tests/integration/protocol_access_test \
	tests/integration/protocol_channels_test
PROTOCOL_UTIL = \
	tests/integration/protocol_util.c \
	tests/integration/protocol_util.h

check_PROGRAMS += $(PROTOCOL_TESTS) tests/integration/concurrency_test \
	tests/integration/harness_test

tests_integration_protocol_commands_test_SOURCES = \
	tests/integration/protocol_commands_test.c $(PROTOCOL_UTIL)
tests_integration_protocol_commands_test_CFLAGS = $(KLTEST_CFLAGS)
tests_integration_protocol_commands_test_LDADD = $(KLTEST_LDADD)

tests_integration_protocol_channels_test_SOURCES = \
	tests/integration/protocol_channels_test.c $(PROTOCOL_UTIL)
tests_integration_protocol_channels_test_CFLAGS = $(KLTEST_CFLAGS)
tests_integration_protocol_channels_test_LDADD = $(KLTEST_LDADD)
tests_integration_protocol_sessions_test_SOURCES = \
	tests/integration/protocol_sessions_test.c $(PROTOCOL_UTIL)
tests_integration_protocol_sessions_test_CFLAGS = $(KLTEST_CFLAGS)
tests_integration_protocol_sessions_test_LDADD = $(KLTEST_LDADD)

tests_integration_protocol_access_test_SOURCES = \
	tests/integration/protocol_access_test.c $(PROTOCOL_UTIL)
tests_integration_protocol_access_test_CFLAGS = $(KLTEST_CFLAGS)
tests_integration_protocol_access_test_LDADD = $(KLTEST_LDADD)

tests_integration_protocol_framing_test_SOURCES = \
	tests/integration/protocol_framing_test.c $(PROTOCOL_UTIL)
tests_integration_protocol_framing_test_CFLAGS = $(KLTEST_CFLAGS)
tests_integration_protocol_framing_test_LDADD = $(KLTEST_LDADD)

tests_integration_protocol_errors_test_SOURCES = \
	tests/integration/protocol_errors_test.c $(PROTOCOL_UTIL)
tests_integration_protocol_errors_test_CFLAGS = $(KLTEST_CFLAGS)
tests_integration_protocol_errors_test_LDADD = $(KLTEST_LDADD)

tests_integration_protocol_waits_test_SOURCES = \
	tests/integration/protocol_waits_test.c $(PROTOCOL_UTIL)
tests_integration_protocol_waits_test_CFLAGS = $(KLTEST_CFLAGS)
tests_integration_protocol_waits_test_LDADD = $(KLTEST_LDADD)

tests_integration_protocol_server_test_SOURCES = \
	tests/integration/protocol_server_test.c $(PROTOCOL_UTIL)
tests_integration_protocol_server_test_CFLAGS = $(KLTEST_CFLAGS)
tests_integration_protocol_server_test_LDADD = $(KLTEST_LDADD)

tests_integration_concurrency_test_SOURCES = \
	tests/integration/concurrency_test.c \
	tests/integration/concurrency_exclusion.c \
	tests/integration/concurrency_waiting.c \
	tests/integration/concurrency_order.c \
	tests/integration/concurrency_util.c \
	tests/integration/concurrency_util.h
tests_integration_concurrency_test_CFLAGS = $(KLTEST_CFLAGS)
tests_integration_concurrency_test_LDADD = $(KLTEST_LDADD)

# The harness itself: hermetic daemons and clients.
tests_integration_harness_test_SOURCES = tests/integration/harness_test.c
tests_integration_harness_test_CFLAGS = $(KLTEST_CFLAGS)
tests_integration_harness_test_LDADD = $(KLTEST_LDADD)

TESTS += $(PROTOCOL_TESTS) tests/integration/concurrency_test \
	tests/integration/harness_test
