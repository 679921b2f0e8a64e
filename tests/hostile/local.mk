# Hostile and broken clients (issue 6): each test starts its own keylockd
# through the integration harness and measures that a normal client was
# unaffected. token_crash_test kills the daemon during a grant storm and
# checks that fencing tokens survive the crash. KEYLOCKD_WRAPPER (valgrind)
# shrinks the floods so the run stays bounded. hostile_test is one program
# with its tests in hostile_*.c by theme, so they still run one at a time;
# its TLS probe (hostile_tls.c) is a libkeylock client.

HOSTILE_CFLAGS = $(KLTEST_CFLAGS)
HOSTILE_LDADD = $(KLTEST_LDADD)

check_PROGRAMS += tests/hostile/hostile_test tests/hostile/token_crash_test

tests_hostile_hostile_test_SOURCES = \
	tests/hostile/hostile_test.c \
	tests/hostile/hostile_test.h \
	tests/hostile/hostile_clients.c \
	tests/hostile/hostile_output.c \
	tests/hostile/hostile_input.c \
	tests/hostile/hostile_flood.c \
	tests/hostile/hostile_resources.c \
	tests/hostile/hostile_budgets.c \
	tests/hostile/hostile_memory.c \
	tests/hostile/hostile_tls.c \
	tests/hostile/hostile_util.c \
	tests/hostile/hostile_util.h
tests_hostile_hostile_test_CFLAGS = $(HOSTILE_CFLAGS) -I$(top_srcdir)/lib
tests_hostile_hostile_test_LDADD = $(HOSTILE_LDADD) lib/libkeylock.la

tests_hostile_token_crash_test_SOURCES = \
	tests/hostile/token_crash_test.c \
	tests/hostile/hostile_util.c \
	tests/hostile/hostile_util.h
tests_hostile_token_crash_test_CFLAGS = $(HOSTILE_CFLAGS)
tests_hostile_token_crash_test_LDADD = $(HOSTILE_LDADD)

TESTS += tests/hostile/hostile_test tests/hostile/token_crash_test
