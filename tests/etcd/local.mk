# backend etcd (issue 11): tests against a real, private etcd cluster
# (Debian's etcd-server, installed by scripts/deps.sh), never a mock.
# tests/etcd/cluster.sh starts and breaks the cluster for the shell tests
# (through lib.sh) and the C tests (through ec.c); each test program
# starts one cluster of its own. Without etcd the tests skip (77).
check_LIBRARIES += tests/etcd/libec.a
tests_etcd_libec_a_SOURCES = tests/etcd/ec.c tests/etcd/ec.h

check_PROGRAMS += tests/etcd/etcd_client_test
tests_etcd_etcd_client_test_SOURCES = \
	tests/etcd/etcd_client_test.c \
	tests/etcd/etcd_client_kv.c \
	tests/etcd/etcd_client_watch.c \
	tests/etcd/etcd_client_faults.c \
	tests/etcd/etcd_client_hostile.c \
	tests/etcd/etcd_test.h
tests_etcd_etcd_client_test_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) \
	$(CHECK_MAIN_CFLAGS) $(LIBEVENT_CFLAGS) $(JANSSON_CFLAGS)
tests_etcd_etcd_client_test_LDADD = $(CHECK_MAIN_LDADD) tests/etcd/libec.a \
	$(KEYLOCKD_LIBS) $(CHECK_LIBS)

ETCD_TESTS = \
	tests/etcd/cluster_test.sh \
	tests/etcd/etcd_client_test \
	tests/etcd/bench_etcd.sh \
	tests/etcd/loopback.sh \
	tests/etcd/secure.sh \
	tests/etcd/upgrade.sh \
	tests/etcd/integration.sh
# The soak first: the longest (SOAK_SECONDS), it then runs beside the
# others under make -j2 instead of alone at the end.
TESTS += tests/etcd/soak_test $(ETCD_TESTS)
EXTRA_DIST += tests/etcd/cluster.sh tests/etcd/lib.sh \
	tests/etcd/cluster_test.sh tests/etcd/bench_etcd.sh \
	tests/etcd/integration.sh tests/etcd/frontend.sh \
	tests/etcd/loopback.sh tests/etcd/secure.sh tests/etcd/upgrade.sh \
	examples/etcd-loopback.sh \
	bench/etcd_compare.sh bench/etcd_perf.py bench/etcd_wire.py \
	bench/etcd_wire.sh bench/section.pl \
	bench/ETCD_RESULTS.md

# What the front end tests share (etest.h): the program's cluster, front
# ends, members, cycling clients and the history checker.
check_LIBRARIES += tests/etcd/libetest.a
tests_etcd_libetest_a_SOURCES = tests/etcd/etest.c tests/etcd/etest.h
tests_etcd_libetest_a_CFLAGS = $(KLTEST_CFLAGS)
ETEST_LDADD = $(CHECK_MAIN_LDADD) tests/etcd/libetest.a \
	tests/integration/libkltest.a tests/etcd/libec.a

# The front ends (backend etcd) through the protocol, with faults.
check_PROGRAMS += tests/etcd/frontend_test
tests_etcd_frontend_test_SOURCES = tests/etcd/frontend_test.c
tests_etcd_frontend_test_CFLAGS = $(KLTEST_CFLAGS) $(CHECK_MAIN_CFLAGS) \
	$(LIBEVENT_CFLAGS)
tests_etcd_frontend_test_LDADD = $(ETEST_LDADD) $(KEYLOCKD_LIBS) \
	$(CHECK_LIBS) $(JANSSON_LIBS) -lpthread
TESTS += tests/etcd/frontend_test


# The history checker under faults (SOAK_SECONDS, default 120).
check_PROGRAMS += tests/etcd/soak_test
tests_etcd_soak_test_SOURCES = tests/etcd/soak_test.c
tests_etcd_soak_test_CFLAGS = $(KLTEST_CFLAGS) $(CHECK_MAIN_CFLAGS)
tests_etcd_soak_test_LDADD = $(ETEST_LDADD) $(CHECK_LIBS) \
	$(JANSSON_LIBS) -lpthread

# The etcd leader SIGKILLed under load, with the default etcd settings:
# no error, no overlap (issue 23).
check_PROGRAMS += tests/etcd/leader_test
tests_etcd_leader_test_SOURCES = tests/etcd/leader_test.c
tests_etcd_leader_test_CFLAGS = $(KLTEST_CFLAGS) $(CHECK_MAIN_CFLAGS)
tests_etcd_leader_test_LDADD = $(ETEST_LDADD) $(CHECK_LIBS) \
	$(JANSSON_LIBS) -lpthread
TESTS += tests/etcd/leader_test

# Sessions across front ends (issue 23): resumed through another front
# end after a SIGKILL, left alone to expire, two RESUMEs at once.
check_PROGRAMS += tests/etcd/sessions_test
tests_etcd_sessions_test_SOURCES = tests/etcd/sessions_test.c
tests_etcd_sessions_test_CFLAGS = $(KLTEST_CFLAGS) $(CHECK_MAIN_CFLAGS) \
	$(LIBEVENT_CFLAGS)
tests_etcd_sessions_test_LDADD = $(ETEST_LDADD) $(KEYLOCKD_LIBS) \
	$(CHECK_LIBS) $(JANSSON_LIBS) -lpthread
TESTS += tests/etcd/sessions_test
