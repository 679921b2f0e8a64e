# keylock-bench(1), the load generator; bench/echo_server, the physical
# floor for a line protocol; bench/compare.sh, which runs both against
# keylockd and Redis and writes bench/RESULTS.md; and bench/smoke.sh, a
# one-second run in make check (no timing assertions: speed is judged by
# compare.sh, not by the test suite).
bin_PROGRAMS += tools/keylock-bench
tools_keylock_bench_SOURCES = \
	tools/keylock-bench.c tools/keylock-bench.h \
	tools/keylock-bench-conn.c \
	tools/keylock-bench-work.c \
	tools/keylock-bench-report.c \
	tools/keylock-bench-etcd.c \
	tools/keylock-bench-hist.c tools/keylock-bench-hist.h
tools_keylock_bench_CFLAGS = $(AM_CFLAGS) $(LIBEVENT_CFLAGS) \
	$(JANSSON_CFLAGS)
tools_keylock_bench_LDADD = $(LIBEVENT_LIBS) $(JANSSON_LIBS) -lm
dist_man_MANS += man/keylock-bench.1

noinst_PROGRAMS += bench/echo_server
bench_echo_server_SOURCES = bench/echo_server.c
bench_echo_server_CFLAGS = $(AM_CFLAGS) $(LIBEVENT_CFLAGS)
bench_echo_server_LDADD = $(LIBEVENT_LIBS)

noinst_PROGRAMS += bench/session_storm
bench_session_storm_SOURCES = bench/session_storm.c

TESTS += bench/smoke.sh
EXTRA_DIST += bench/smoke.sh bench/compare.sh bench/instructions.sh \
	bench/seed.sh bench/sessions.sh bench/channels.sh bench/refresh.sh \
	bench/etcd_lib.sh \
	bench/upgrade.sh bench/upgrade_pause.py \
	bench/RESULTS.md
