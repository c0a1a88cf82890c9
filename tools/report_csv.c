/* tools/report_csv.c - `ctrain report METRICS.jsonl --csv [-o FILE]`: the
 * metrics log's step lines (include/ctrain/metrics.h) as CSV, one row per
 * step under a header row, for spreadsheets and pandas. Columns: step,
 * epoch, loss, acc, lr, samples_per_s, grad_norm, loss_scale, mfu, peak_mib,
 * comm_share, time, and test_loss, test_acc on the row of the step an
 * evaluation followed. A value the line leaves out is an empty cell, a JSON
 * null (not finite) is "nan"; numbers are printed as %.7g, as the log
 * holds them. Malformed lines are reported with their number and skipped;
 * a log without step lines is an error. docs/report.md. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report.h"

static const char *const STEP_COLS[] = {"step", "epoch", "loss", "acc", "lr", "samples_per_s", "grad_norm",
                                        "loss_scale", "mfu", "peak_mib", "comm_share", "time"};
#define N_STEP ((int)(sizeof STEP_COLS / sizeof STEP_COLS[0]))
#define N_COLS (N_STEP + 2) /* + test_loss, test_acc */

/* one row: the cells as text ("" absent) */
typedef struct {
    char cell[N_COLS][32];
    int have;
} row;

static void put_cell(char *dst, const cJSON *v) {
    if (!v) dst[0] = 0;
    else if (cJSON_IsNumber(v)) snprintf(dst, 32, "%.7g", v->valuedouble);
    else snprintf(dst, 32, "nan"); /* null: a value that was not finite */
}

static void flush_row(FILE *o, row *r) {
    if (!r->have) return;
    for (int c = 0; c < N_COLS; c++) fprintf(o, "%s%s", c ? "," : "", r->cell[c]);
    fputc('\n', o);
    r->have = 0;
}

/* reads `in`, writes the CSV to `o`; 0, or 1 with the error printed */
static int to_csv(FILE *in, const char *name, FILE *o) {
    for (int c = 0; c < N_STEP; c++) fprintf(o, "%s,", STEP_COLS[c]);
    fputs("test_loss,test_acc\n", o);
    row r = {0};
    long lineno = 0, steps = 0, bad = 0;
    size_t cap = 1 << 16;
    char *line = malloc(cap);
    if (!line) return fprintf(stderr, "ctrain report: error: out of memory\n"), 1;
    while (fgets(line, (int)cap, in)) {
        size_t len = strlen(line);
        while (len == cap - 1 && line[len - 1] != '\n') { /* a long line (the run line's recipe) */
            char *g = realloc(line, cap * 2);
            if (!g) return free(line), fprintf(stderr, "ctrain report: error: out of memory\n"), 1;
            line = g, cap *= 2;
            if (!fgets(line + len, (int)(cap - len), in)) break;
            len += strlen(line + len);
        }
        lineno++;
        if (strspn(line, " \t\r\n") == len) continue;
        cJSON *j = cJSON_Parse(line);
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "type");
        if (!cJSON_IsObject(j) || !cJSON_IsString(t)) {
            if (bad++ < 5) fprintf(stderr, "ctrain report: warning: %s:%ld: not a metrics line; skipped\n", name, lineno);
        } else if (!strcmp(t->valuestring, "step")) {
            flush_row(o, &r);
            for (int c = 0; c < N_STEP; c++) put_cell(r.cell[c], cJSON_GetObjectItemCaseSensitive(j, STEP_COLS[c]));
            r.cell[N_STEP][0] = r.cell[N_STEP + 1][0] = 0;
            r.have = 1;
            steps++;
        } else if (!strcmp(t->valuestring, "eval") && r.have) {
            const cJSON *s = cJSON_GetObjectItemCaseSensitive(j, "step");
            char st[32];
            put_cell(st, s);
            if (!strcmp(st, r.cell[0])) { /* the evaluation after this step */
                put_cell(r.cell[N_STEP], cJSON_GetObjectItemCaseSensitive(j, "test_loss"));
                put_cell(r.cell[N_STEP + 1], cJSON_GetObjectItemCaseSensitive(j, "test_acc"));
            }
        }
        cJSON_Delete(j);
    }
    flush_row(o, &r);
    int rerr = ferror(in);
    free(line);
    if (rerr) return fprintf(stderr, "ctrain report: error: reading '%s' failed\n", name), 1;
    if (!steps) {
        fprintf(stderr, "ctrain report: error: metrics log '%s' holds no step lines (%ld lines, %ld malformed)\n",
                name, lineno, bad);
        return 1;
    }
    return 0;
}

int ct_report_csv(const char *metrics_path, const char *csv_path) {
    FILE *f = fopen(metrics_path, "r");
    if (!f) {
        fprintf(stderr, "ctrain report: error: cannot open metrics log '%s': %s\n", metrics_path, strerror(errno));
        return 1;
    }
    FILE *o = csv_path ? fopen(csv_path, "w") : stdout;
    if (!o) {
        fprintf(stderr, "ctrain report: error: cannot write '%s': %s\n", csv_path, strerror(errno));
        fclose(f);
        return 1;
    }
    int rc = to_csv(f, metrics_path, o);
    fclose(f);
    int werr = ferror(o) || fflush(o) != 0;
    if (csv_path && fclose(o) != 0) werr = 1;
    if (werr) {
        fprintf(stderr, "ctrain report: error: writing '%s' failed: %s\n", csv_path ? csv_path : "(stdout)",
                strerror(errno));
        rc = 1;
    }
    return rc;
}
