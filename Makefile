# ctrain build. `make` builds the library, the CLI and the tests (warnings
# are errors); `make test` runs the whole suite (also under ASan+UBSan and
# with forced lower ISAs). BUILD selects the output folder and SAN=1 turns on
# the sanitizers.
CC      ?= gcc
BUILD   ?= build
SAN     ?= 0
OPT     ?= -O2
CFLAGS_BASE := -std=c11 -g $(OPT) -Wall -Wextra -Werror -Wno-unused-parameter -Wshadow -Wvla \
               -fopenmp -pthread -Iinclude -Isrc -D_DEFAULT_SOURCE -fno-strict-aliasing
ifeq ($(SAN),1)
CFLAGS_BASE += -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
LDSAN := -fsanitize=address,undefined
endif
CFLAGS  := $(CFLAGS_BASE) $(EXTRA_CFLAGS)
LDLIBS  := -ldnnl -lcjson -lz -lm -fopenmp -pthread $(LDSAN)

AVX2_FLAGS   := -mavx2 -mfma -mf16c -DCT_SIMD_AVX2
AVX512_FLAGS := -mavx512f -mavx512bw -mavx512dq -mavx512vl -mfma -mf16c -DCT_SIMD_AVX512

LIB_SRC  := $(shell find src -name '*.c' -not -path 'src/kernels/simd/*' | sort)
SIMD_SRC := $(shell find src/kernels/simd -name '*.c' | sort)
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o) \
            $(SIMD_SRC:%.c=$(BUILD)/obj/%.avx2.o) $(SIMD_SRC:%.c=$(BUILD)/obj/%.avx512.o)
TEST_SRC := $(sort $(wildcard tests/test_*.c))
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
TEST_COMMON := $(filter-out tests/test_%.c,$(wildcard tests/*.c))
HDRS := $(shell find include src tests -name '*.h')

all: $(BUILD)/libctrain.a $(BUILD)/ctrain $(TEST_BIN)

$(BUILD)/obj/%.o: %.c $(HDRS)
	@mkdir -p $(dir $@)
	@echo "  CC $@"; $(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/obj/%.avx2.o: %.c $(HDRS)
	@mkdir -p $(dir $@)
	@echo "  CC $@"; $(CC) $(CFLAGS) $(AVX2_FLAGS) -c $< -o $@

$(BUILD)/obj/%.avx512.o: %.c $(HDRS)
	@mkdir -p $(dir $@)
	@echo "  CC $@"; $(CC) $(CFLAGS) $(AVX512_FLAGS) -c $< -o $@

$(BUILD)/libctrain.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/ctrain: $(shell find tools -name '*.c') $(BUILD)/libctrain.a $(HDRS)
	@echo "  CC $@"; $(CC) $(CFLAGS) -Itools $(filter %.c,$^) $(BUILD)/libctrain.a $(LDLIBS) -o $@

$(BUILD)/tests/%: tests/%.c $(TEST_COMMON) $(BUILD)/libctrain.a $(HDRS)
	@mkdir -p $(dir $@)
	@echo "  CC $@"; $(CC) $(CFLAGS) -Itests $< $(TEST_COMMON) $(BUILD)/libctrain.a $(LDLIBS) -o $@

test: all
	bash tests/run_all.sh

clean:
	rm -rf build build-asan

.PHONY: all test clean

include tests/fuzz/fuzz.mk
