# The harnesses are replayed over their seed corpora in every `make check`
# (so they cannot rot); with --enable-fuzzing they are also built as
# libFuzzer binaries: `make fuzz FUZZ_SECONDS=N`.
FUZZ_CFLAGS = $(AM_CFLAGS) $(LIBEVENT_CFLAGS) $(JANSSON_CFLAGS)
FUZZ_LDADD = src/libkeylockd.a $(LIBEVENT_LIBS) $(JANSSON_LIBS)

check_PROGRAMS += tests/fuzz/replay_proto
tests_fuzz_replay_proto_SOURCES = tests/fuzz/fuzz_proto.c tests/fuzz/replay.c
tests_fuzz_replay_proto_CFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_replay_proto_LDADD = $(FUZZ_LDADD)

TESTS += tests/fuzz/replay.test
EXTRA_DIST += tests/fuzz/replay.test tests/fuzz/corpus

if FUZZING
noinst_PROGRAMS += tests/fuzz/fuzz_proto
tests_fuzz_fuzz_proto_SOURCES = tests/fuzz/fuzz_proto.c
tests_fuzz_fuzz_proto_CFLAGS = $(FUZZ_CFLAGS)
tests_fuzz_fuzz_proto_LDADD = $(FUZZ_LDADD)
tests_fuzz_fuzz_proto_LDFLAGS = $(AM_LDFLAGS) -fsanitize=fuzzer

FUZZ_SECONDS ?= 60
fuzz: tests/fuzz/fuzz_proto
	mkdir -p fuzz-work/proto
	tests/fuzz/fuzz_proto -max_total_time=$(FUZZ_SECONDS) fuzz-work/proto \
	    $(srcdir)/tests/fuzz/corpus/proto $(srcdir)/tests/unit/proto-cases
.PHONY: fuzz
endif
