# tests/fuzz/fuzz.mk - the fuzz targets tests/fuzz/fuzz_<name>.c, built two
# ways (docs/fuzzing.md). Included at the end of the top Makefile.
#
#   replay build (any compiler, part of `make all`): $(BUILD)/fuzz/replay_<name>
#     tests/fuzz/replay_main.c feeds corpus files to the target; in the
#     sanitizer build (BUILD=build-asan SAN=1) the replays run under ASan+UBSan.
#     tests/fuzz/replay.sh BUILD replays every corpus.
#   libFuzzer build (clang): `make fuzz` -> $(FUZZ_BUILD)/fuzz/fuzz_<name>
#     the library again with clang, -fsanitize=fuzzer-no-link plus ASan+UBSan
#     in its own folder; tests/fuzz/run.sh runs the targets.

FUZZ_SRC    := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZ_NAMES  := $(FUZZ_SRC:tests/fuzz/fuzz_%.c=%)
FUZZ_COMMON := tests/fuzz/common.c
FUZZ_REPLAY := $(FUZZ_NAMES:%=$(BUILD)/fuzz/replay_%)
FUZZ_CC     ?= clang
FUZZ_BUILD  ?= build-fuzz
# clang warns where gcc does not: about positional initializers that leave
# trailing fields zero, and a static function one ISA variant does not use
FUZZ_EXTRA_CFLAGS := -fsanitize=fuzzer-no-link -Wno-missing-field-initializers -Wno-unused-function

all: $(FUZZ_REPLAY)

# the report target drives the CLI's report code (tools/report.h)
$(BUILD)/fuzz/replay_report $(BUILD)/fuzz/fuzz_report: FUZZ_EXTRA_SRC := tools/report.c tools/report_csv.c

$(BUILD)/fuzz/replay_%: tests/fuzz/fuzz_%.c tests/fuzz/replay_main.c $(FUZZ_COMMON) tools/report.c tools/report_csv.c tools/report.h \
                        $(BUILD)/libctrain.a $(HDRS)
	@mkdir -p $(dir $@)
	@echo "  CC $@"; $(CC) $(CFLAGS) -Itests/fuzz -Itools $< tests/fuzz/replay_main.c $(FUZZ_COMMON) \
	  $(FUZZ_EXTRA_SRC) $(BUILD)/libctrain.a $(LDLIBS) -o $@

$(BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_COMMON) tools/report.c tools/report_csv.c tools/report.h $(BUILD)/libctrain.a $(HDRS)
	@mkdir -p $(dir $@)
	@echo "  CC $@"; $(CC) $(CFLAGS) -fsanitize=fuzzer -Itests/fuzz -Itools $< $(FUZZ_COMMON) \
	  $(FUZZ_EXTRA_SRC) $(BUILD)/libctrain.a $(LDLIBS) -o $@

fuzz-targets: $(FUZZ_NAMES:%=$(BUILD)/fuzz/fuzz_%)

# the libFuzzer build: this Makefile again with clang in $(FUZZ_BUILD). The SIMD kernels at -O0: the
# targets parse files and run no kernel, and clang with ASan took minutes per kernel file at -O1 (the
# always-inlined row loops of simd/norm.c: ~5.7 min each ISA) against seconds at -O0 (still instrumented).
fuzz:
	@$(MAKE) --no-print-directory BUILD=$(FUZZ_BUILD) CC=$(FUZZ_CC) SAN=1 OPT=-O1 SIMD_OPT=-O0 \
	  EXTRA_CFLAGS="$(FUZZ_EXTRA_CFLAGS)" fuzz-targets

.PHONY: fuzz fuzz-targets

clean: fuzz-clean
fuzz-clean:
	rm -rf $(FUZZ_BUILD)
.PHONY: fuzz-clean
