# ctrain build. `make` builds the library, the CLI and the tests (warnings
# are errors); `make test` runs the whole suite (also under ASan+UBSan and
# with forced lower ISAs). BUILD selects the output folder and SAN=1 turns on
# the sanitizers.
CC      ?= gcc
BUILD   ?= build
SAN     ?= 0
OPT     ?= -O2
# the SIMD kernels' optimization, when it must differ from OPT (the fuzz build: tests/fuzz/fuzz.mk)
SIMD_OPT ?=
CFLAGS_BASE := -std=c11 -g $(OPT) -Wall -Wextra -Werror -Wno-unused-parameter -Wshadow -Wvla \
               -fopenmp -pthread -Iinclude -Isrc -I$(BUILD)/gen -D_DEFAULT_SOURCE -fno-strict-aliasing \
               -fPIC -fno-semantic-interposition
ifeq ($(SAN),1)
# float-cast-overflow is not part of "undefined" in gcc: a double outside an integer's range cast to it
CFLAGS_BASE += -fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=undefined,float-cast-overflow \
               -fno-omit-frame-pointer
LDSAN := -fsanitize=address,undefined,float-cast-overflow
endif
# Open MPI (src/comm/): the library and the CLI still run as one process without mpirun
MPI_CFLAGS := $(shell pkg-config --cflags ompi-c)
MPI_LIBS   := $(shell pkg-config --libs ompi-c)
# libjpeg-turbo and libpng (src/data/image_decode.c); pkg-config where it knows them
IMG_CFLAGS := $(shell pkg-config --cflags libjpeg libpng 2>/dev/null)
IMG_LIBS   := $(shell pkg-config --libs libjpeg libpng 2>/dev/null || echo -ljpeg -lpng)
CFLAGS  := $(CFLAGS_BASE) $(MPI_CFLAGS) $(IMG_CFLAGS) $(EXTRA_CFLAGS)
LDLIBS  := -ldnnl -lcjson -lprotobuf-c -lz -lm $(IMG_LIBS) $(MPI_LIBS) -fopenmp -pthread $(LDSAN)

AVX2_FLAGS   := -mavx2 -mfma -mf16c -DCT_SIMD_AVX2
AVX512_FLAGS := -mavx512f -mavx512bf16 -mavx512bw -mavx512dq -mavx512vl -mfma -mf16c -mbmi2 -DCT_SIMD_AVX512

LIB_SRC  := $(shell find src -name '*.c' -not -path 'src/kernels/simd/*' | sort)
SIMD_SRC := $(shell find src/kernels/simd -name '*.c' | sort)
# TensorBoard's Event and Summary messages (proto/, a subset of TensorFlow's): protoc-c writes their C into
# $(BUILD)/gen at build time; src/io/tensorboard.c includes them as <tensorflow/core/...pb-c.h>
PROTO    := $(sort $(shell find proto -name '*.proto'))
PROTO_H  := $(PROTO:proto/%.proto=$(BUILD)/gen/%.pb-c.h)
PROTO_OBJ := $(PROTO:proto/%.proto=$(BUILD)/obj/gen/%.pb-c.o)
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o) $(PROTO_OBJ) \
            $(SIMD_SRC:%.c=$(BUILD)/obj/%.avx2.o) $(SIMD_SRC:%.c=$(BUILD)/obj/%.avx512.o)
TEST_SRC := $(sort $(wildcard tests/test_*.c))
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
TEST_COMMON := $(filter-out tests/test_%.c,$(wildcard tests/*.c))
HDRS := $(shell find include src tests tools -name '*.h')

all: $(BUILD)/libctrain.a $(BUILD)/ctrain $(TEST_BIN)

$(BUILD)/obj/%.o: %.c $(HDRS) | $(PROTO_H)
	@mkdir -p $(dir $@)
	@echo "  CC $@"; $(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/gen/%.pb-c.c $(BUILD)/gen/%.pb-c.h: proto/%.proto $(PROTO)
	@mkdir -p $(BUILD)/gen
	@echo "  PROTOC-C $<"; protoc-c --proto_path=proto --c_out=$(BUILD)/gen $<

# the files that include the generated headers are rebuilt when a .proto changes
$(BUILD)/obj/src/io/tensorboard.o $(BUILD)/tests/test_tensorboard: $(PROTO_H)
# kept: make would delete them as intermediates
.SECONDARY: $(PROTO_H) $(PROTO:proto/%.proto=$(BUILD)/gen/%.pb-c.c)
$(BUILD)/obj/gen/%.pb-c.o: $(BUILD)/gen/%.pb-c.c $(PROTO_H)
	@mkdir -p $(dir $@)
	@echo "  CC $@"; $(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/obj/%.avx2.o: %.c $(HDRS)
	@mkdir -p $(dir $@)
	@echo "  CC $@"; $(CC) $(CFLAGS) $(AVX2_FLAGS) $(SIMD_OPT) -c $< -o $@

$(BUILD)/obj/%.avx512.o: %.c $(HDRS)
	@mkdir -p $(dir $@)
	@echo "  CC $@"; $(CC) $(CFLAGS) $(AVX512_FLAGS) $(SIMD_OPT) -c $< -o $@

$(BUILD)/libctrain.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

# the CLI's objects live beside the library's (build/obj/tools/) so that tests/check_layers.sh's
# symbol checks (no upward calls, no file circles) see them too
CLI_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(sort $(wildcard tools/*.c)))
$(BUILD)/ctrain: $(CLI_OBJ) $(BUILD)/libctrain.a
	@echo "  LD $@"; $(CC) $(CFLAGS) $(CLI_OBJ) $(BUILD)/libctrain.a $(LDLIBS) -o $@

$(BUILD)/tests/%: tests/%.c $(TEST_COMMON) $(BUILD)/libctrain.a $(HDRS)
	@mkdir -p $(dir $@)
	@echo "  CC $@"; $(CC) $(CFLAGS) -Itests $< $(TEST_COMMON) $(BUILD)/libctrain.a $(LDLIBS) -o $@

test: all
	bash tests/run_all.sh

# ---- packaging (docs/abi.md): shared library, pkg-config file, man page --------
# `make install PREFIX=/usr/local DESTDIR=` and `make uninstall` (same variables).
# The shared library exports exactly the functions declared in include/ctrain/
# (a version script generated from the headers); the installed `ctrain` is the
# tested build/ctrain, linked against libctrain.a (docs/abi.md says why).
# the library's version: include/ctrain/version.h's three numbers
VERSION      := $(shell sed -n 's/^\#define CT_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)$$/\2/p' include/ctrain/version.h | paste -sd.)
SOVERSION    := 2
PREFIX       ?= /usr/local
BINDIR       ?= $(PREFIX)/bin
LIBDIR       ?= $(PREFIX)/lib
INCLUDEDIR   ?= $(PREFIX)/include
MANDIR       ?= $(PREFIX)/share/man
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
SONAME       := libctrain.so.$(SOVERSION)
SHLIB        := $(BUILD)/libctrain.so.$(VERSION)
PUBLIC_HDRS  := $(sort $(wildcard include/ctrain/*.h))
INSTALLED    := $(BINDIR)/ctrain $(LIBDIR)/libctrain.a $(LIBDIR)/libctrain.so.$(VERSION) \
                $(LIBDIR)/$(SONAME) $(LIBDIR)/libctrain.so $(PKGCONFIGDIR)/ctrain.pc \
                $(MANDIR)/man1/ctrain.1 $(PUBLIC_HDRS:include/%=$(INCLUDEDIR)/%)

all: $(SHLIB) $(BUILD)/ctrain.1

$(BUILD)/ctrain.map: $(PUBLIC_HDRS) scripts/make_symbols.sh
	@mkdir -p $(dir $@)
	@echo "  GEN $@"; scripts/make_symbols.sh "$(CC)" > $@.tmp && mv $@.tmp $@

$(SHLIB): $(LIB_OBJ) $(BUILD)/ctrain.map
	@echo "  LD $@"; $(CC) -shared -Wl,-soname,$(SONAME) -Wl,--version-script=$(BUILD)/ctrain.map \
	  -Wl,--no-undefined-version -Wl,--no-undefined -o $@ $(LIB_OBJ) $(LDLIBS)
	@ln -sf libctrain.so.$(VERSION) $(BUILD)/$(SONAME) && ln -sf $(SONAME) $(BUILD)/libctrain.so

$(BUILD)/ctrain.1: $(BUILD)/ctrain scripts/make_man.sh
	@echo "  GEN $@"; scripts/make_man.sh $(BUILD)/ctrain $(VERSION) > $@.tmp && mv $@.tmp $@

# ${prefix}-relative paths in the .pc file when the directory is under PREFIX
pcdir = $(patsubst $(PREFIX)/%,$${prefix}/%,$(1))

install: $(BUILD)/libctrain.a $(SHLIB) $(BUILD)/ctrain $(BUILD)/ctrain.1
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(PKGCONFIGDIR) \
	  $(DESTDIR)$(INCLUDEDIR)/ctrain $(DESTDIR)$(MANDIR)/man1
	install -m 755 $(BUILD)/ctrain $(DESTDIR)$(BINDIR)/ctrain
	install -m 644 $(BUILD)/libctrain.a $(DESTDIR)$(LIBDIR)/libctrain.a
	install -m 755 $(SHLIB) $(DESTDIR)$(LIBDIR)/libctrain.so.$(VERSION)
	ln -sf libctrain.so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libctrain.so
	install -m 644 $(PUBLIC_HDRS) $(DESTDIR)$(INCLUDEDIR)/ctrain/
	install -m 644 $(BUILD)/ctrain.1 $(DESTDIR)$(MANDIR)/man1/ctrain.1
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(call pcdir,$(LIBDIR))|' \
	  -e 's|@INCLUDEDIR@|$(call pcdir,$(INCLUDEDIR))|' -e 's|@VERSION@|$(VERSION)|' \
	  scripts/ctrain.pc.in > $(DESTDIR)$(PKGCONFIGDIR)/ctrain.pc
	@echo "installed into $(DESTDIR)$(PREFIX); run ldconfig if $(LIBDIR) is a system library folder"

# removes exactly the files install wrote (INSTALLED), and include/ctrain/ when empty
uninstall:
	rm -f $(addprefix $(DESTDIR),$(INSTALLED))
	rmdir $(DESTDIR)$(INCLUDEDIR)/ctrain 2>/dev/null || true

.PHONY: install uninstall

# `make install-python`: the Python package (python/ctrain/, docs/python.md) into PYTHON's site-packages
# (Debian: /usr/local/lib/python3.X/dist-packages), with a copy of the shared library inside it, so
# `import ctrain` works from any folder; DESTDIR as above. `make uninstall-python` removes it.
PYTHON    ?= python3
PYTHONDIR ?= $(shell $(PYTHON) -c 'import sysconfig; print(sysconfig.get_path("purelib"))' 2>/dev/null)
install-python: $(SHLIB)
	@test -n "$(PYTHONDIR)" || { echo "install-python: $(PYTHON) not found (set PYTHON or PYTHONDIR)"; exit 1; }
	install -d $(DESTDIR)$(PYTHONDIR)/ctrain
	install -m 644 python/ctrain/*.py python/ctrain/_cdef.h $(DESTDIR)$(PYTHONDIR)/ctrain/
	install -m 755 $(SHLIB) $(DESTDIR)$(PYTHONDIR)/ctrain/$(SONAME)
	@echo "installed the Python package into $(DESTDIR)$(PYTHONDIR)/ctrain"
uninstall-python:
	rm -rf $(DESTDIR)$(PYTHONDIR)/ctrain
.PHONY: install-python uninstall-python

# `make lint`: gcc's static analyzer (-fanalyzer, `make lint-gcc`) and
# clang-tidy's (.clang-tidy, `make lint-tidy`) over src/ and tools/, the SIMD
# files once per ISA. Any finding is an error. A stamp per file in $(LINT_DIR)
# keeps a clean file from being analyzed again until it or a header changes.
# docs/lint.md: what runs, the suppressions and why. tests/run_all.sh runs
# lint-gcc (tests/lint_test.sh, under a minute on 2 cores); lint-tidy takes
# about 4 minutes on 2 cores, so it is run by hand (docs/lint.md).
LINT_DIR   ?= build-lint
CLANG_TIDY ?= clang-tidy
TOOL_SRC   := $(shell find tools -name '*.c' | sort)
LINT_GCC   := $(LIB_SRC:%.c=$(LINT_DIR)/%.gcc) $(TOOL_SRC:%.c=$(LINT_DIR)/%.gcc) \
              $(SIMD_SRC:%.c=$(LINT_DIR)/%.avx2.gcc) $(SIMD_SRC:%.c=$(LINT_DIR)/%.avx512.gcc)
LINT_TIDY  := $(LIB_SRC:%.c=$(LINT_DIR)/%.tidy) $(TOOL_SRC:%.c=$(LINT_DIR)/%.tidy) \
              $(SIMD_SRC:%.c=$(LINT_DIR)/%.avx2.tidy) $(SIMD_SRC:%.c=$(LINT_DIR)/%.avx512.tidy)
ANALYZE     = $(CC) $(filter-out -O%,$(CFLAGS_BASE)) $(MPI_CFLAGS) $(IMG_CFLAGS) -O0 -Itools -fanalyzer -DCT_ANALYZER -c $< -o /dev/null
TIDY        = $(CLANG_TIDY) --quiet $< -- -std=c11 -Iinclude -Isrc -I$(BUILD)/gen -Itools -D_DEFAULT_SOURCE -fopenmp -pthread $(MPI_CFLAGS)

lint: lint-gcc lint-tidy
lint-gcc: $(LINT_GCC)
lint-tidy: $(LINT_TIDY)
lint-gcc-stamps: # the stamps lint-gcc makes (tests/lint_test.sh counts them)
	@printf '%s\n' $(LINT_GCC)

$(LINT_DIR)/%.gcc: %.c $(HDRS) | $(PROTO_H)
	@mkdir -p $(dir $@)
	@rm -f $@; echo "  ANALYZE $<"; $(ANALYZE) && touch $@
$(LINT_DIR)/%.avx2.gcc: %.c $(HDRS)
	@mkdir -p $(dir $@)
	@rm -f $@; echo "  ANALYZE $< (avx2)"; $(ANALYZE) $(AVX2_FLAGS) && touch $@
$(LINT_DIR)/%.avx512.gcc: %.c $(HDRS)
	@mkdir -p $(dir $@)
	@rm -f $@; echo "  ANALYZE $< (avx512)"; $(ANALYZE) $(AVX512_FLAGS) && touch $@
$(LINT_DIR)/%.tidy: %.c $(HDRS) .clang-tidy | $(PROTO_H)
	@mkdir -p $(dir $@)
	@rm -f $@; echo "  TIDY $<"; $(TIDY) && touch $@
$(LINT_DIR)/%.avx2.tidy: %.c $(HDRS) .clang-tidy
	@mkdir -p $(dir $@)
	@rm -f $@; echo "  TIDY $< (avx2)"; $(TIDY) $(AVX2_FLAGS) && touch $@
$(LINT_DIR)/%.avx512.tidy: %.c $(HDRS) .clang-tidy
	@mkdir -p $(dir $@)
	@rm -f $@; echo "  TIDY $< (avx512)"; $(TIDY) $(AVX512_FLAGS) && touch $@

clean:
	rm -rf build build-asan $(LINT_DIR)

.PHONY: all test clean lint lint-gcc lint-tidy lint-gcc-stamps

include tests/fuzz/fuzz.mk
