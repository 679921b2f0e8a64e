# keylock, the command-line client (keylock(1)), built on libkeylock; the
# examples, and the tests of both: shell scripts in tmux's regress manner
# (tests/cli/*.sh, a private daemon each) and a Check suite for the library,
# check_libkeylock, with its tests in tests/cli/libkeylock_*.c by theme.
bin_PROGRAMS += tools/keylock
tools_keylock_SOURCES = \
	tools/keylock.c tools/keylock_cli.h \
	tools/keylock_run.c \
	tools/keylock_show.c \
	tools/keylock_admin.c
tools_keylock_CPPFLAGS = -I$(top_srcdir)/lib
tools_keylock_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)
tools_keylock_LDADD = lib/libkeylock.la $(JANSSON_LIBS)
dist_man_MANS += man/keylock.1

check_PROGRAMS += examples/fenced_writer
examples_fenced_writer_SOURCES = examples/fenced_writer.c
examples_fenced_writer_CPPFLAGS = -I$(top_srcdir)/lib
examples_fenced_writer_LDADD = lib/libkeylock.la

check_PROGRAMS += tests/cli/check_libkeylock
tests_cli_check_libkeylock_SOURCES = tests/cli/check_libkeylock.c \
	tests/cli/libkeylock_connect.c \
	tests/cli/libkeylock_lock.c \
	tests/cli/libkeylock_replies.c \
	tests/cli/libkeylock_util.c \
	tests/cli/libkeylock_util.h
tests_cli_check_libkeylock_CPPFLAGS = -I$(top_srcdir)/lib
tests_cli_check_libkeylock_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) \
	$(JANSSON_CFLAGS)
tests_cli_check_libkeylock_LDADD = lib/libkeylock.la $(CHECK_LIBS) \
	$(JANSSON_LIBS)

CLI_TESTS = \
	tests/cli/run_under_lock.sh \
	tests/cli/conflict.sh \
	tests/cli/wait_timing.sh \
	tests/cli/exit_status.sh \
	tests/cli/connection_loss.sh \
	tests/cli/signals.sh \
	tests/cli/serialised.sh \
	tests/cli/lease.sh \
	tests/cli/subcommands.sh \
	tests/cli/operator.sh \
	tests/cli/upgrade.sh \
	tests/cli/auth.sh \
	tests/cli/tls.sh \
	tests/cli/failover.sh \
	tests/cli/failover_etcd.sh \
	tests/cli/examples.sh
TESTS += tests/cli/check_libkeylock $(CLI_TESTS)
EXTRA_DIST += $(CLI_TESTS) tests/cli/lib.sh \
	examples/nc.sh examples/bash-coproc.sh examples/python_client.py

