/* tests/fuzz/common.h - helpers shared by the fuzz targets (common.c):
 * one context per process, a per-process scratch folder for parsers that
 * read files, and the check that turns a broken invariant into a crash the
 * fuzzer reports. docs/fuzzing.md. */
#ifndef CT_FUZZ_COMMON_H
#define CT_FUZZ_COMMON_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "ctrain/ctrain.h"

/* Every target defines this (libFuzzer's entry point; replay_main.c calls
 * it for each corpus file). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Memory budget of the fuzz context: a header that promises gigabytes must
 * fail with CT_E_OOM, not allocate them. Small, because under ASan an
 * allocation costs time in proportion to its size (shadow memory), and the
 * loaders allocate what a header promises before reading the data: with
 * 256 MiB the IDX target ran 8x slower on headers promising ~200 MB. */
#define FUZZ_MEMORY_BUDGET ((size_t)16 << 20)

/* The process's context (1 thread, FUZZ_MEMORY_BUDGET), created on first
 * use. Its last error is cleared on every call: call it before each library
 * call whose failure fuzz_check_error checks. */
ct_context *fuzz_ctx(void);

/* Writes data to `name` inside the process's scratch folder (under
 * /dev/shm when it is writable, else $TMPDIR or /tmp; removed at exit) and
 * returns its path in a buffer that the next call with the same slot
 * (0..3) reuses. */
const char *fuzz_write(int slot, const char *name, const void *data, size_t size);
/* The scratch folder itself. */
const char *fuzz_dir(void);

/* Aborts with `what` when cond is false: a broken invariant is a finding. */
#define FUZZ_CHECK(cond, what) fuzz_check_((cond) != 0, what, #cond, __FILE__, __LINE__)
void fuzz_check_(int ok, const char *what, const char *cond, const char *file, int line);

/* With CT_FUZZ_VERBOSE set, prints a note on how far the input got (to see
 * which paths a seed reaches); otherwise nothing. */
void fuzz_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A write-only stream that discards what is written and counts it (one
 * per process: each call resets the count). Writing more than `limit`
 * bytes in total aborts: an output that does not end is a finding. */
FILE *fuzz_sink(size_t limit);
size_t fuzz_sink_count(void); /* bytes written since fuzz_sink (flushes) */

/* After a call that failed: the status must be a known error other than
 * CT_E_INTERNAL, and the context (cleared by fuzz_ctx before the call) must
 * hold a message for it. */
void fuzz_check_error(ct_status s);

/* The context allocator must be back where it was before the input. */
void fuzz_check_no_leak(size_t bytes_before);
size_t fuzz_bytes_in_use(void);

#endif
