# check_libkeylock (defined with the client in tools/local.mk) starts its
# daemons through the C tests' harness, tests/integration/libkltest.a, and
# has the Check programs' one main().
tests_cli_check_libkeylock_CPPFLAGS += -I$(top_srcdir)/tests/integration \
	$(CHECK_MAIN_CFLAGS)
tests_cli_check_libkeylock_LDADD += $(CHECK_MAIN_LDADD) \
	tests/integration/libkltest.a $(CHECK_LIBS) -lpthread

# Sessions (issue 20): the library's own tests join check_libkeylock; the
# shell tests run keylock(1) and tests/cli/sess_worker (a libkeylock
# client that writes a grant history) through tests/lib/faultproxy.py, and
# tests/lib/histcheck.py judges the history. session_chaos.sh runs for a
# minute; SESSION_SOAK_SECONDS=N runs it for N seconds (make
# soak-sessions: 600).
tests_cli_check_libkeylock_SOURCES += tests/cli/libkeylock_session.c
check_PROGRAMS += tests/cli/sess_worker
tests_cli_sess_worker_SOURCES = tests/cli/sess_worker.c
tests_cli_sess_worker_CPPFLAGS = -I$(top_srcdir)/lib
tests_cli_sess_worker_LDADD = lib/libkeylock.la
TESTS += tests/cli/session.sh tests/cli/session_chaos.sh
EXTRA_DIST += tests/cli/session.sh tests/cli/session_chaos.sh \
	tests/lib/faultproxy.py tests/lib/histcheck.py

soak-sessions: tests/cli/sess_worker tools/keylock src/keylockd
	SESSION_SOAK_SECONDS=$${SESSION_SOAK_SECONDS:-600} \
	    $(MAKE) $(AM_MAKEFLAGS) check TESTS=tests/cli/session_chaos.sh
