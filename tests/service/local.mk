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
