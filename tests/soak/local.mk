# The chaos soak (issue 6): hundreds of clients in forked worker processes
# doing random lock traffic while workers are SIGKILLed and connections are
# closed, reset, half-closed, stalled and flooded; every grant is checked
# from the outside. soak.test runs it for SOAK_SECONDS (15 in make check;
# the program's own default is 60). Other knobs: SOAK_CLIENTS, SOAK_WORKERS,
# SOAK_SEED; KEYLOCKD_WRAPPER (valgrind) shrinks it to 48 clients.

check_PROGRAMS += tests/soak/soak

tests_soak_soak_SOURCES = \
	tests/soak/soak.c \
	tests/soak/soak.h \
	tests/soak/soak_check.c \
	tests/soak/soak_worker.c \
	tests/hostile/hostile_util.c \
	tests/hostile/hostile_util.h
tests_soak_soak_CFLAGS = $(KLTEST_CFLAGS) -I$(top_srcdir)/tests/hostile
tests_soak_soak_LDADD = $(KLTEST_LDADD)

TESTS += tests/soak/soak.test
EXTRA_DIST += tests/soak/soak.test
