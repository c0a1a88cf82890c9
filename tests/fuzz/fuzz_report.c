/* tests/fuzz/fuzz_report.c - the metrics-log reader and the HTML writer of
 * `ctrain report` (tools/report.c through tools/report.h) on arbitrary
 * bytes, the log read from memory and the page written to a counting sink.
 * Invariants: reading returns 0 with a log or 1 without one; the page of a
 * log that read is written without a stream error and is bounded by the
 * input (a tick loop that does not advance wrote forever: the sink aborts
 * past the bound). */
#include <stdio.h>

#include "common.h"
#include "report.h"

static FILE *g_null;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_null && !(g_null = fopen("/dev/null", "w"))) return 0;
    /* fmemopen refuses an empty buffer: an empty log is /dev/null */
    FILE *in = size ? fmemopen((void *)data, size, "r") : fopen("/dev/null", "r");
    if (!in) return 0;
    ct_report_log *L = NULL;
    int rc = ct_report_read(in, "fuzz.jsonl", g_null, &L);
    fclose(in);
    FUZZ_CHECK(rc == 0 || rc == 1, "0 or 1");
    FUZZ_CHECK((rc == 0) == (L != NULL), "a log exactly when reading succeeds");
    fuzz_note("report: %s", L ? "log read" : "no log");
    if (!L) return 0;
    /* the page: ~20 KB of styles and tables, at most 1500 points per
     * polyline, a marker per evaluation and the pretty-printed recipe, whose
     * indentation grows with its nesting (cJSON stops at 1000 levels) */
    FILE *out = fuzz_sink(((size_t)4 << 20) + 64 * size);
    int wrc = ct_report_write(L, "fuzz.jsonl", out, g_null);
    FUZZ_CHECK(wrc == 0, "the page is written");
    FUZZ_CHECK(fuzz_sink_count() > 1000, "a page has its styles at least");
    ct_report_log_free(L);
    return 0;
}
