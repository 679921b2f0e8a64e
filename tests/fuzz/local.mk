# The harnesses are replayed over their seed corpora in every `make check`
# (so they cannot rot); with --enable-fuzzing (CC=clang) they are also
# built as libFuzzer binaries: `make fuzz FUZZ_SECONDS=N` runs each.
FUZZ_CFLAGS = $(AM_CFLAGS) $(LIBEVENT_CFLAGS) $(JANSSON_CFLAGS)
FUZZ_LDADD = $(KEYLOCKD_LIBS)
# The parser's and the table's harnesses link the pure core alone.
FUZZ_CORE_CFLAGS = $(AM_CFLAGS)
FUZZ_CORE_LDADD = $(KLCORE_LIBS)
FUZZ_HARNESSES = proto locktable session ltstate etcd_json etcd_entry \
	commands

check_PROGRAMS += tests/fuzz/replay_proto tests/fuzz/replay_locktable \
	tests/fuzz/replay_session tests/fuzz/replay_ltstate
tests_fuzz_replay_ltstate_SOURCES = tests/fuzz/fuzz_ltstate.c \
	tests/fuzz/replay.c
tests_fuzz_replay_ltstate_CFLAGS = $(FUZZ_CORE_CFLAGS)
tests_fuzz_replay_ltstate_LDADD = $(FUZZ_CORE_LDADD)
tests_fuzz_replay_proto_SOURCES = tests/fuzz/fuzz_proto.c tests/fuzz/replay.c
tests_fuzz_replay_proto_CFLAGS = $(FUZZ_CORE_CFLAGS)
tests_fuzz_replay_proto_LDADD = $(FUZZ_CORE_LDADD)
tests_fuzz_replay_locktable_SOURCES = tests/fuzz/fuzz_locktable.c \
	tests/fuzz/replay.c
tests_fuzz_replay_locktable_CFLAGS = $(FUZZ_CORE_CFLAGS)
tests_fuzz_replay_locktable_LDADD = $(FUZZ_CORE_LDADD)
tests_fuzz_replay_session_SOURCES = tests/fuzz/fuzz_session.c \
	tests/fuzz/replay.c
tests_fuzz_replay_session_CFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_replay_session_LDADD = $(FUZZ_LDADD)

# backend etcd's decoders of what etcd sends (issue 24, review L13).
check_PROGRAMS += tests/fuzz/replay_etcd_json tests/fuzz/replay_etcd_entry
tests_fuzz_replay_etcd_json_SOURCES = tests/fuzz/fuzz_etcd_json.c \
	tests/fuzz/replay.c
tests_fuzz_replay_etcd_json_CFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_replay_etcd_json_LDADD = $(FUZZ_LDADD)
tests_fuzz_replay_etcd_entry_SOURCES = tests/fuzz/fuzz_etcd_entry.c \
	tests/fuzz/replay.c
tests_fuzz_replay_etcd_entry_CFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_replay_etcd_entry_LDADD = $(FUZZ_LDADD)

# The whole command layer over a real server, its clock driven by the
# harness (fuzz_commands.c).
check_PROGRAMS += tests/fuzz/replay_commands
tests_fuzz_replay_commands_SOURCES = tests/fuzz/fuzz_commands.c \
	tests/fuzz/replay.c
tests_fuzz_replay_commands_CFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_replay_commands_LDADD = $(FUZZ_LDADD)

TESTS += tests/fuzz/replay.test
EXTRA_DIST += tests/fuzz/replay.test tests/fuzz/corpus

if FUZZING
noinst_PROGRAMS += tests/fuzz/fuzz_proto tests/fuzz/fuzz_locktable \
	tests/fuzz/fuzz_session tests/fuzz/fuzz_ltstate \
	tests/fuzz/fuzz_etcd_json tests/fuzz/fuzz_etcd_entry \
	tests/fuzz/fuzz_commands
tests_fuzz_fuzz_commands_SOURCES = tests/fuzz/fuzz_commands.c
tests_fuzz_fuzz_commands_CFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_fuzz_commands_LDADD = $(FUZZ_LDADD)
tests_fuzz_fuzz_commands_LDFLAGS = $(AM_LDFLAGS) -fsanitize=fuzzer
tests_fuzz_fuzz_etcd_json_SOURCES = tests/fuzz/fuzz_etcd_json.c
tests_fuzz_fuzz_etcd_json_CFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_fuzz_etcd_json_LDADD = $(FUZZ_LDADD)
tests_fuzz_fuzz_etcd_json_LDFLAGS = $(AM_LDFLAGS) -fsanitize=fuzzer
tests_fuzz_fuzz_etcd_entry_SOURCES = tests/fuzz/fuzz_etcd_entry.c
tests_fuzz_fuzz_etcd_entry_CFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_fuzz_etcd_entry_LDADD = $(FUZZ_LDADD)
tests_fuzz_fuzz_etcd_entry_LDFLAGS = $(AM_LDFLAGS) -fsanitize=fuzzer
tests_fuzz_fuzz_ltstate_SOURCES = tests/fuzz/fuzz_ltstate.c
tests_fuzz_fuzz_ltstate_CFLAGS = $(FUZZ_CORE_CFLAGS)
tests_fuzz_fuzz_ltstate_LDADD = $(FUZZ_CORE_LDADD)
tests_fuzz_fuzz_ltstate_LDFLAGS = $(AM_LDFLAGS) -fsanitize=fuzzer
tests_fuzz_fuzz_proto_SOURCES = tests/fuzz/fuzz_proto.c
tests_fuzz_fuzz_proto_CFLAGS = $(FUZZ_CORE_CFLAGS)
tests_fuzz_fuzz_proto_LDADD = $(FUZZ_CORE_LDADD)
tests_fuzz_fuzz_proto_LDFLAGS = $(AM_LDFLAGS) -fsanitize=fuzzer
tests_fuzz_fuzz_locktable_SOURCES = tests/fuzz/fuzz_locktable.c
tests_fuzz_fuzz_locktable_CFLAGS = $(FUZZ_CORE_CFLAGS)
tests_fuzz_fuzz_locktable_LDADD = $(FUZZ_CORE_LDADD)
tests_fuzz_fuzz_locktable_LDFLAGS = $(AM_LDFLAGS) -fsanitize=fuzzer
tests_fuzz_fuzz_session_SOURCES = tests/fuzz/fuzz_session.c
tests_fuzz_fuzz_session_CFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_fuzz_session_LDADD = $(FUZZ_LDADD)
tests_fuzz_fuzz_session_LDFLAGS = $(AM_LDFLAGS) -fsanitize=fuzzer

FUZZ_SECONDS ?= 60
# New inputs go to fuzz-work/NAME; crashes to fuzz-work/crash-NAME-*.
fuzz: $(FUZZ_HARNESSES:%=tests/fuzz/fuzz_%)
	for h in $(FUZZ_HARNESSES); do \
	    mkdir -p fuzz-work/$$h || exit 1; \
	    tests/fuzz/fuzz_$$h -max_total_time=$(FUZZ_SECONDS) \
	        -artifact_prefix=fuzz-work/crash-$$h- \
	        fuzz-work/$$h $(srcdir)/tests/fuzz/corpus/$$h || exit 1; \
	done
.PHONY: fuzz
endif
