# keylockd as a system service (issue 3): config file, systemd units and
# socket activation, sd_notify, SIGHUP, AUTH, TLS, metrics, man pages,
# install.
# Shell scripts in tmux's regress manner (lib.sh); each starts its own
# daemon from KEYLOCKD (AM_TESTS_ENVIRONMENT) and finds the helpers below
# and the generated units beside it in the build tree.
check_PROGRAMS += tests/service/promcheck tests/service/notify_recv
tests_service_promcheck_SOURCES = tests/service/promcheck.c
tests_service_promcheck_LDADD = -lm
tests_service_notify_recv_SOURCES = tests/service/notify_recv.c
# upgrade.sh's new binaries of another state version: the daemon itself,
# with the state's reader and writer built for the version after this
# one's and the one before (kstate.h, KS_VERSION), handed this one's state.
check_PROGRAMS += tests/service/keylockd_ks_next tests/service/keylockd_ks_prev
KS_VERSION_NOW = `sed -n 's/^\#define KS_VERSION[[:space:]]*\([0-9]*\).*/\1/p' $(top_srcdir)/src/core/kstate.h`
tests_service_keylockd_ks_next_SOURCES = src/keylockd.c src/core/kstate.c
tests_service_keylockd_ks_next_CFLAGS = $(AM_CFLAGS) $(LIBEVENT_CFLAGS) \
	$(JANSSON_CFLAGS) -DKS_VERSION=$$(($(KS_VERSION_NOW) + 1))
tests_service_keylockd_ks_next_LDADD = $(KEYLOCKD_LIBS)
tests_service_keylockd_ks_prev_SOURCES = src/keylockd.c src/core/kstate.c
tests_service_keylockd_ks_prev_CFLAGS = $(AM_CFLAGS) $(LIBEVENT_CFLAGS) \
	$(JANSSON_CFLAGS) -DKS_VERSION=$$(($(KS_VERSION_NOW) - 1))
tests_service_keylockd_ks_prev_LDADD = $(KEYLOCKD_LIBS)
# upgrade_load.sh's libkeylock clients
check_PROGRAMS += tests/service/upgrade_load_client
tests_service_upgrade_load_client_SOURCES = tests/service/upgrade_load_client.c
tests_service_upgrade_load_client_CPPFLAGS = -I$(top_srcdir)/lib
tests_service_upgrade_load_client_LDADD = lib/libkeylock.la

SERVICE_TESTS = \
	tests/service/config.sh \
	tests/service/units.sh \
	tests/service/socket_activation.sh \
	tests/service/notify.sh \
	tests/service/reload.sh \
	tests/service/upgrade.sh \
	tests/service/upgrade_sessions.sh \
	tests/service/upgrade_load.sh \
	tests/service/auth.sh \
	tests/service/users.sh \
	tests/service/tls.sh \
	tests/service/metrics.sh \
	tests/service/status_page.sh \
	tests/service/http_limits.sh \
	tests/service/manpages.sh \
	tests/service/install.sh
TESTS += $(SERVICE_TESTS)
EXTRA_DIST += $(SERVICE_TESTS) tests/service/lib.sh \
	tests/service/prom-good tests/service/prom-bad \
	tests/service/upgrade_load.py

# contrib/: the Grafana dashboard and the Prometheus alerts (issue 13).
# alerts.sh runs promtool on the rules and their unit tests; queries.sh
# compares the metric names their queries use (promnames) with /metrics.
check_PROGRAMS += tests/service/promnames
tests_service_promnames_SOURCES = tests/service/promnames.c
tests_service_promnames_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)
tests_service_promnames_LDADD = $(JANSSON_LIBS)
CONTRIB_TESTS = tests/service/alerts.sh tests/service/queries.sh
TESTS += $(CONTRIB_TESTS)
EXTRA_DIST += $(CONTRIB_TESTS) tests/service/alerts-test.yml \
	tests/service/promnames-cases tests/service/promnames-bad \
	contrib/keylockd-dashboard.json contrib/keylockd-alerts.yml

# status_page.sh's screenshots, kept for a look after make check.
CLEANFILES += tests/service/status_page.png tests/service/status_page-phone.png
