UNIT_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(LIBEVENT_CFLAGS) $(JANSSON_CFLAGS) \
	$(CHECK_MAIN_CFLAGS)
UNIT_LDADD = $(CHECK_MAIN_LDADD) $(KEYLOCKD_LIBS) $(CHECK_LIBS)
# The pure core's suites see no libevent, jansson or OpenSSL, and link the
# core alone (src/core/local.mk) and the shared Check main.
CORE_UNIT_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(CHECK_MAIN_CFLAGS)
CORE_UNIT_LDADD = $(CHECK_MAIN_LDADD) $(KLCORE_LIBS) $(CHECK_LIBS)

UNIT_TESTS = \
	tests/unit/check_proto \
	tests/unit/check_locktable \
	tests/unit/check_locktable_model \
	tests/unit/check_ltstate \
	tests/unit/check_conn \
	tests/unit/check_token \
	tests/unit/check_config \
	tests/unit/check_stats \
	tests/unit/check_util \
	tests/unit/check_replica
check_PROGRAMS += $(UNIT_TESTS)
TESTS += $(UNIT_TESTS)

tests_unit_check_proto_SOURCES = \
	tests/unit/check_proto.c \
	tests/unit/check_proto.h \
	tests/unit/proto_commands.c \
	tests/unit/proto_keys.c \
	tests/unit/proto_options.c \
	tests/unit/proto_cases.c
tests_unit_check_proto_CFLAGS = $(CORE_UNIT_CFLAGS)
tests_unit_check_proto_LDADD = $(CORE_UNIT_LDADD)
tests_unit_check_locktable_SOURCES = \
	tests/unit/check_locktable.c \
	tests/unit/check_locktable.h \
	tests/unit/locktable_queue.c \
	tests/unit/locktable_errors.c \
	tests/unit/locktable_lifetime.c \
	tests/unit/locktable_views.c \
	tests/unit/locktable_hash.c \
	tests/unit/locktable_short.c \
	tests/fuzz/fuzz_locktable.c
tests_unit_check_locktable_CFLAGS = $(CORE_UNIT_CFLAGS)
tests_unit_check_locktable_LDADD = $(CORE_UNIT_LDADD)
tests_unit_check_ltstate_SOURCES = tests/unit/check_ltstate.c
tests_unit_check_ltstate_CFLAGS = $(CORE_UNIT_CFLAGS)
tests_unit_check_ltstate_LDADD = $(CORE_UNIT_LDADD)
tests_unit_check_locktable_model_SOURCES = \
	tests/unit/check_locktable_model.c \
	tests/unit/check_locktable_model.h \
	tests/unit/locktable_model_ref.c \
	tests/unit/locktable_model_compare.c \
	tests/unit/locktable_model_ops.c
tests_unit_check_locktable_model_CFLAGS = $(CORE_UNIT_CFLAGS)
tests_unit_check_locktable_model_LDADD = $(CORE_UNIT_LDADD)
tests_unit_check_conn_SOURCES = \
	tests/unit/check_conn.c \
	tests/unit/check_conn.h \
	tests/unit/conn_framing.c \
	tests/unit/conn_waiting.c \
	tests/unit/conn_commands.c \
	tests/unit/conn_cancel.c
tests_unit_check_conn_CFLAGS = $(UNIT_CFLAGS)
tests_unit_check_conn_LDADD = $(UNIT_LDADD)
tests_unit_check_token_SOURCES = tests/unit/check_token.c
tests_unit_check_token_CFLAGS = $(UNIT_CFLAGS)
tests_unit_check_token_LDADD = $(UNIT_LDADD)
tests_unit_check_config_SOURCES = \
	tests/unit/check_config.c \
	tests/unit/check_config.h \
	tests/unit/config_cmdline.c \
	tests/unit/config_file.c \
	tests/unit/config_etcd.c
tests_unit_check_config_CFLAGS = $(UNIT_CFLAGS)
tests_unit_check_config_LDADD = $(UNIT_LDADD)
tests_unit_check_stats_SOURCES = \
	tests/unit/check_stats.c \
	tests/unit/check_stats.h \
	tests/unit/stats_json.c \
	tests/unit/stats_info.c
tests_unit_check_stats_CFLAGS = $(UNIT_CFLAGS)
tests_unit_check_stats_LDADD = $(UNIT_LDADD)
# backend etcd's replica fed generated watch events, without etcd
tests_unit_check_replica_SOURCES = tests/unit/check_replica.c
tests_unit_check_replica_CFLAGS = $(UNIT_CFLAGS)
tests_unit_check_replica_LDADD = $(UNIT_LDADD)
tests_unit_check_util_SOURCES = tests/unit/check_util.c
tests_unit_check_util_CFLAGS = $(UNIT_CFLAGS)
tests_unit_check_util_LDADD = $(UNIT_LDADD)

EXTRA_DIST += tests/unit/proto-cases
