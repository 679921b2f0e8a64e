# What the test suites share: the one main() of the Check programs
# (check_main.h; a program defines check_program and links this library
# first); for the shell suites, the daemon launcher daemon.sh, with
# hermetic.sh, its test; and the certificates of every TLS test
# (tests/certs, made by its make.sh).
check_LIBRARIES += tests/lib/libcheck_main.a
tests_lib_libcheck_main_a_SOURCES = tests/lib/check_main.c \
	tests/lib/check_main.h
tests_lib_libcheck_main_a_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
CHECK_MAIN_CFLAGS = -I$(top_srcdir)/tests/lib
CHECK_MAIN_LDADD = tests/lib/libcheck_main.a

TESTS += tests/lib/hermetic.sh
EXTRA_DIST += tests/lib/hermetic.sh tests/certs
