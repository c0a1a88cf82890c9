/* tools/report.h - the metrics-log reader and HTML writer behind `ctrain
 * report` (tools/report.c) on streams, so that a fuzz target
 * (tests/fuzz/fuzz_report.c) can drive them without files. Messages go to
 * the `err` stream, prefixed "ctrain report: ". */
#ifndef CT_TOOLS_REPORT_H
#define CT_TOOLS_REPORT_H
#include <stdio.h>

typedef struct ct_report_log ct_report_log;

/* Reads a metrics log (include/ctrain/metrics.h) from `in`; `name` names it
 * in messages. Malformed lines are reported and skipped. Returns 0 and
 * *out, or 1 with the error printed (empty log, no step lines, read error,
 * out of memory) and *out NULL. */
int ct_report_read(FILE *in, const char *name, FILE *err, ct_report_log **out);
/* Writes the HTML page of a log to `out` (which the caller closes).
 * Returns 0, or 1 when out of memory (printed) or when `out` has its error
 * flag set. */
int ct_report_write(const ct_report_log *L, const char *name, FILE *out, FILE *err);
void ct_report_log_free(ct_report_log *L); /* accepts NULL */
/* tools/report_csv.c: the log's step lines as CSV with a header row into
 * csv_path (NULL: stdout); 0, or 1 with the error printed */
int ct_report_csv(const char *metrics_path, const char *csv_path);
#endif
