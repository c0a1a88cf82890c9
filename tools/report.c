/* tools/report.c - `ctrain report METRICS.jsonl -o report.html`: draws a
 * metrics log (include/ctrain/metrics.h) as one self-contained HTML page
 * with inline SVG plots (no scripts, fonts or stylesheets from elsewhere):
 * train loss per step with a smoothed line and the test loss per epoch,
 * test accuracy, learning rate, throughput, and the gradient norm and loss
 * scale when the log has them. A malformed line is reported with its line
 * number and skipped; a log without steps is an error. docs/report.md. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "report.h"

/* Steps and epochs (the x axes) are integers that a double holds exactly:
 * a larger |value| is not a step number and its line is skipped. */
#define X_LIMIT 9007199254740992.0 /* 2^53 */
/* Plotted values are clamped to +-AXIS_LIMIT for the axes (a point further
 * out is drawn on the edge): differences and the widening of a flat range
 * then stay finite. */
#define AXIS_LIMIT 1e300
#define MAX_TICKS 64

#define HINT_LOG "give the metrics log of a run: ctrain train --report DIR writes DIR/metrics.jsonl (or --metrics FILE)"
/* An error with its code once and a hint that fits (cli_error's form, on err). Returns 1. */
static int report_err(FILE *err, ct_status s, const char *hint, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int report_err(FILE *err, ct_status s, const char *hint, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(err, "ctrain report: error: %s %s: ", ct_status_code(s), ct_status_name(s));
    vfprintf(err, fmt, ap);
    va_end(ap);
    fprintf(err, "\nctrain report: hint: %s\n", hint ? hint : ct_status_advice(s));
    return 1;
}

typedef struct {
    double *v;
    size_t n, cap;
} vec;

static int vec_push(vec *a, double x) {
    if (a->n == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 256;
        double *v = realloc(a->v, cap * sizeof *v);
        if (!v) return -1;
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = x;
    return 0;
}

enum { S_STEP, S_LOSS, S_LR, S_SPS, S_GNORM, S_GSTEP, S_SCALE, S_SSTEP, S_EEPOCH, S_ESTEP, S_ELOSS, S_EACC, NVEC };

struct ct_report_log {
    vec v[NVEC];
    char *recipe;           /* pretty-printed JSON, or NULL */
    double time_s, peak_mib, last_time;
    int has_done, max_epoch;
    long bad_lines;
};
typedef struct ct_report_log run_log;

void ct_report_log_free(ct_report_log *L) {
    if (!L) return;
    for (int i = 0; i < NVEC; i++) free(L->v[i].v);
    free(L->recipe);
    free(L);
}

static int num(const cJSON *o, const char *k, double *out) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(it)) return 0;
    *out = it->valuedouble;
    return 1;
}

/* 1 when x is usable as a step or epoch number (the x axes). */
static int x_ok(double x) { return fabs(x) <= X_LIMIT; }

/* Reads the log from f (named path in messages, printed to err). Returns 0,
 * or 1 with the error printed. */
static int read_log(FILE *f, const char *path, run_log *L, FILE *err) {
    size_t cap = 4096, len = 0;
    char *line = malloc(cap);
    long lineno = 0;
    int rc = 0, oom = !line;
    while (!oom) {
        len = 0;
        int c = 0;
        while ((c = fgetc(f)) != EOF && c != '\n') {
            if (len + 1 >= cap) {
                char *nl = realloc(line, cap * 2);
                if (!nl) { oom = 1; break; }
                line = nl;
                cap *= 2;
            }
            line[len++] = (char)c;
        }
        if (oom || (c == EOF && len == 0)) break;
        line[len] = 0;
        lineno++;
        size_t k = 0;
        while (k < len && (line[k] == ' ' || line[k] == '\t' || line[k] == '\r')) k++;
        if (k == len) continue; /* blank line */
        cJSON *o = cJSON_Parse(line);
        const cJSON *type = o ? cJSON_GetObjectItemCaseSensitive(o, "type") : NULL;
        const char *t = type && cJSON_IsString(type) ? type->valuestring : "";
        double step = 0, x = 0, y = 0, e = 0;
        int ok = 1;
        const char *range = NULL; /* a field out of range: why the line is skipped */
        if (!strcmp(t, "step")) {
            ok = num(o, "step", &step) && num(o, "loss", &x);
            if (ok && !x_ok(step)) ok = 0, range = "step", y = step;
            if (ok) {
                oom |= vec_push(&L->v[S_STEP], step) | vec_push(&L->v[S_LOSS], x);
                oom |= vec_push(&L->v[S_LR], num(o, "lr", &y) ? y : NAN);
                oom |= vec_push(&L->v[S_SPS], num(o, "samples_per_s", &y) ? y : NAN);
                if (num(o, "grad_norm", &y)) oom |= vec_push(&L->v[S_GSTEP], step) | vec_push(&L->v[S_GNORM], y);
                if (num(o, "loss_scale", &y)) oom |= vec_push(&L->v[S_SSTEP], step) | vec_push(&L->v[S_SCALE], y);
                if (num(o, "epoch", &e) && e > L->max_epoch && e < 1e9) L->max_epoch = (int)e;
                if (num(o, "time", &y)) L->last_time = y;
            }
        } else if (!strcmp(t, "eval")) {
            ok = num(o, "epoch", &e) && num(o, "test_loss", &x) && num(o, "test_acc", &y);
            if (!num(o, "step", &step)) step = NAN;
            if (ok && !x_ok(e)) ok = 0, range = "epoch", y = e;
            else if (ok && !isnan(step) && !x_ok(step)) ok = 0, range = "step", y = step;
            if (ok) {
                oom |= vec_push(&L->v[S_EEPOCH], e) | vec_push(&L->v[S_ESTEP], step);
                oom |= vec_push(&L->v[S_ELOSS], x) | vec_push(&L->v[S_EACC], y);
                if (e > L->max_epoch && e < 1e9) L->max_epoch = (int)e;
            }
        } else if (!strcmp(t, "run")) {
            const cJSON *r = cJSON_GetObjectItemCaseSensitive(o, "recipe");
            if (cJSON_IsObject(r)) {
                free(L->recipe);
                L->recipe = cJSON_Print(r);
            }
        } else if (!strcmp(t, "amp")) {
            /* a loss-scaler event: the loss-scale plot is drawn from the step lines */
        } else if (!strcmp(t, "done")) {
            L->has_done = 1;
            if (!num(o, "time", &L->time_s)) L->time_s = NAN;
            if (!num(o, "peak_mib", &L->peak_mib)) L->peak_mib = NAN;
        } else {
            ok = 0;
        }
        if (!ok) {
            L->bad_lines++;
            if (range)
                fprintf(err, "ctrain report: warning: %s:%ld: \"%s\" is %g, out of range (|%s| <= 2^53); line skipped\n",
                        path, lineno, range, y, range);
            else
                fprintf(err, "ctrain report: warning: %s:%ld: %s; line skipped\n", path, lineno,
                        !o ? "not valid JSON" : !*t ? "no \"type\" field" : "unknown type or missing fields");
        }
        cJSON_Delete(o);
    }
    int rerr = ferror(f);
    free(line);
    if (oom) {
        rc = report_err(err, CT_E_OOM, NULL, "out of memory reading '%s'", path);
    } else if (rerr) {
        rc = report_err(err, CT_E_IO, NULL, "cannot read '%s'", path);
    } else if (lineno == 0) {
        rc = report_err(err, CT_E_CORRUPT, HINT_LOG, "metrics log '%s' is empty (was the run started with --metrics?)",
                        path);
    } else if (L->v[S_STEP].n == 0) {
        rc = report_err(err, CT_E_CORRUPT, HINT_LOG, "metrics log '%s' holds no step lines (%ld lines, %ld malformed)",
                        path, lineno, L->bad_lines);
    }
    return rc;
}

int ct_report_read(FILE *in, const char *name, FILE *err, ct_report_log **out) {
    *out = NULL;
    run_log *L = calloc(1, sizeof *L);
    if (!L) { /* report_err returns 1; said here, as the analyzer does not follow variadic calls */
        report_err(err, CT_E_OOM, NULL, "out of memory reading '%s'", name);
        return 1;
    }
    if (read_log(in, name, L, err)) {
        ct_report_log_free(L);
        return 1;
    }
    *out = L;
    return 0;
}

/* ---- SVG plots -------------------------------------------------------------------------------- */

#define PW 640
#define PH 300
#define ML 70
#define MR 20
#define MT 40
#define MB 48

typedef struct {
    const double *x, *y;
    size_t n;
    const char *color, *name;
    double width;
    int markers;  /* circles at the points */
    int opacity;  /* percent */
} series;

static double nice_step(double range, int target) {
    double raw = range / target, mag = pow(10, floor(log10(raw))), f = raw / mag;
    return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * mag;
}

static double clamp_axis(double v) { return v < -AXIS_LIMIT ? -AXIS_LIMIT : v > AXIS_LIMIT ? AXIS_LIMIT : v; }

/* The number of ticks k * step, k = k0, k0 + 1, ..., up to `last` (a
 * multiple of step, give or take rounding); 0 when that is not a small
 * finite number, so a tick loop always ends. */
static int tick_count(double k0, double last, double step) {
    double n = floor(last / step + 1e-6) - k0 + 1;
    return n >= 1 && n <= MAX_TICKS ? (int)n : 0;
}

static void fmt_tick(char *buf, size_t len, double v, double step) {
    if (v == 0) snprintf(buf, len, "0");
    else if (fabs(v) >= 1e5 || fabs(v) < 1e-3) {
        /* two significant digits, more where ticks would print alike (1.05e+06 beside 1.1e+06) */
        double d = ceil(log10(fabs(v) / step)) + 1;
        int sig = d > 2 && d <= 17 ? (int)d : d > 17 ? 17 : 2;
        snprintf(buf, len, "%.*g", sig, v);
    } else {
        double d = step >= 1 ? 0 : ceil(-log10(step) - 1e-9);
        int dec = d >= 0 && d <= 6 ? (int)d : 6;
        snprintf(buf, len, "%.*f", dec, v);
    }
}

static void html_escape(FILE *o, const char *s) {
    for (; *s; s++) {
        if (*s == '<') fputs("&lt;", o);
        else if (*s == '>') fputs("&gt;", o);
        else if (*s == '&') fputs("&amp;", o);
        else if (*s == '"') fputs("&quot;", o);
        else fputc(*s, o);
    }
}

/* One plot. y0_zero: the y axis starts at 0 when the data is positive;
 * ycap (finite): the y axis ends there at most, higher points are drawn
 * on the top edge (timer jitter on very short steps).
 * Polylines longer than 1500 points are thinned (every k-th point and the
 * last). */
static void plot(FILE *o, const char *title, const char *xlabel, const char *ylabel, const series *ss, int ns,
                 int y0_zero, int integer_x, double ycap) {
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    for (int i = 0; i < ns; i++)
        for (size_t j = 0; j < ss[i].n; j++) {
            double x = ss[i].x[j], y = ss[i].y[j];
            if (!isfinite(x) || !isfinite(y)) continue;
            x0 = fmin(x0, x), x1 = fmax(x1, x), y0 = fmin(y0, y), y1 = fmax(y1, y);
        }
    if (!(x0 <= x1)) return; /* nothing to draw */
    if (y0_zero && y0 > 0) y0 = 0;
    if (isfinite(ycap) && ycap > y0 && y1 > ycap) y1 = ycap;
    x0 = clamp_axis(x0), x1 = clamp_axis(x1), y0 = clamp_axis(y0), y1 = clamp_axis(y1);
    /* a flat range is widened, relative to the values' size: a tick step
     * below the spacing of doubles there would not advance */
    double xm = fmax(fabs(x0), fabs(x1));
    if (x1 - x0 < fmax(1e-12, 1e-12 * xm)) {
        double d = fmax(1, 1e-9 * xm);
        x0 -= d, x1 += d;
    }
    if (y1 - y0 < 1e-12 * fmax(1, fabs(y1))) {
        double d = fabs(y1) > 0 ? fabs(y1) * 0.1 : 1;
        y0 -= d, y1 += d;
    }
    double ys = nice_step(y1 - y0, 5);
    double yk0 = floor(y0 / ys + 1e-9);
    y0 = yk0 * ys, y1 = ceil(y1 / ys - 1e-9) * ys;
    int ny = tick_count(yk0, y1, ys);
    double xs = nice_step(x1 - x0, 6);
    if (integer_x && xs < 1) xs = 1;
    double xk0 = ceil(x0 / xs - 1e-9);
    int nx = tick_count(xk0, x1, xs);
    const double W = PW - ML - MR, H = PH - MT - MB;
#define SX(v) (ML + (clamp_axis(v) - x0) / (x1 - x0) * W)
#define SY(v) (MT + (1 - (fmax(fmin(v, y1), y0) - y0) / (y1 - y0)) * H)
    fprintf(o, "<figure><svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 %d %d\" width=\"%d\" height=\"%d\" "
               "role=\"img\" aria-label=\"",
            PW, PH, PW, PH);
    html_escape(o, title);
    fprintf(o, "\">\n<text x=\"%d\" y=\"24\" class=\"t\">", ML);
    html_escape(o, title);
    fputs("</text>\n", o);
    fprintf(o, "<rect x=\"%d\" y=\"%d\" width=\"%.0f\" height=\"%.0f\" class=\"bg\"/>\n", ML, MT, W, H);
    char buf[48];
    for (int i = 0; i < ny; i++) {
        double v = (yk0 + i) * ys, yy = SY(v);
        fmt_tick(buf, sizeof buf, fabs(v) < ys * 1e-9 ? 0 : v, ys);
        fprintf(o, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" class=\"g\"/>"
                   "<text x=\"%d\" y=\"%.1f\" class=\"yl\">%s</text>\n",
                ML, yy, ML + W, yy, ML - 6, yy + 4, buf);
    }
    for (int i = 0; i < nx; i++) {
        double v = (xk0 + i) * xs, xx = SX(v);
        fmt_tick(buf, sizeof buf, v, xs);
        fprintf(o, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%.0f\" class=\"g\"/>"
                   "<line x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\" class=\"ax\"/>"
                   "<text x=\"%.1f\" y=\"%.0f\" class=\"xl\">%s</text>\n",
                xx, MT, xx, MT + H, xx, MT + H, xx, MT + H + 5, xx, MT + H + 18, buf);
    }
    fprintf(o, "<line x1=\"%d\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" class=\"ax\"/>"
               "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%.0f\" class=\"ax\"/>\n",
            ML, MT + H, ML + W, MT + H, ML, MT, ML, MT + H);
    fprintf(o, "<text x=\"%.0f\" y=\"%d\" class=\"al\">", ML + W / 2, PH - 8);
    html_escape(o, xlabel);
    fprintf(o, "</text><text transform=\"translate(16 %.0f) rotate(-90)\" class=\"al\">", MT + H / 2);
    html_escape(o, ylabel);
    fputs("</text>\n", o);
    for (int i = 0; i < ns; i++) {
        const series *s = &ss[i];
        size_t k = s->n > 1500 ? (s->n + 1499) / 1500 : 1;
        if (s->n > 1) {
            fprintf(o, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%.1f\" stroke-opacity=\"%.2f\" "
                       "stroke-linejoin=\"round\" points=\"",
                    s->color, s->width, s->opacity / 100.0);
            for (size_t j = 0; j < s->n; j++) {
                if (j % k && j != s->n - 1) continue;
                if (!isfinite(s->x[j]) || !isfinite(s->y[j])) continue;
                fprintf(o, "%.1f,%.1f ", SX(s->x[j]), SY(s->y[j]));
            }
            fputs("\"/>\n", o);
        }
        if (s->markers || s->n == 1)
            for (size_t j = 0; j < s->n; j++)
                if (isfinite(s->x[j]) && isfinite(s->y[j]))
                    fprintf(o, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"/>\n", SX(s->x[j]),
                            SY(s->y[j]), s->color);
    }
    /* legend, top right */
    double lx = ML + W - 8;
    for (int i = ns - 1; i >= 0; i--) {
        if (!ss[i].name || !ss[i].n) continue;
        double tw = 7.0 * (double)strlen(ss[i].name);
        fprintf(o, "<text x=\"%.0f\" y=\"24\" class=\"lg\">", lx);
        html_escape(o, ss[i].name);
        fprintf(o, "</text><rect x=\"%.0f\" y=\"17\" width=\"14\" height=\"4\" rx=\"2\" fill=\"%s\"/>\n",
                lx - tw - 20, ss[i].color);
        lx -= tw + 36;
    }
    fputs("</svg></figure>\n", o);
#undef SX
#undef SY
}

/* Exponential moving average with bias correction (like TensorBoard's). */
static void smooth(const double *y, double *out, size_t n, double beta) {
    double m = 0, w = 0;
    for (size_t i = 0; i < n; i++) {
        if (isfinite(y[i])) {
            m = beta * m + (1 - beta) * y[i];
            w = beta * w + (1 - beta);
        }
        out[i] = w > 0 ? m / w : NAN;
    }
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(const double *v, size_t n, double *tmp) {
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(v[i])) tmp[m++] = v[i];
    if (!m) return NAN;
    qsort(tmp, m, sizeof *tmp, cmp_d);
    return m % 2 ? tmp[m / 2] : 0.5 * (tmp[m / 2 - 1] + tmp[m / 2]);
}

static void row(FILE *o, const char *k, const char *fmt, double v) {
    fprintf(o, "<tr><th>%s</th><td>", k);
    if (isfinite(v)) fprintf(o, fmt, v);
    else fputs("&ndash;", o);
    fputs("</td></tr>\n", o);
}

static const char k_css[] =
    "body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;color:#1f2328;"
    "background:#f6f8fa;margin:0;padding:24px}\n"
    "main{max-width:1340px;margin:0 auto}\n"
    "h1{font-size:22px;margin:0 0 4px}.sub{color:#656d76;margin:0 0 18px}\n"
    ".top{display:flex;flex-wrap:wrap;gap:16px;margin-bottom:16px}\n"
    ".card{background:#fff;border:1px solid #d0d7de;border-radius:8px;padding:12px 16px}\n"
    "table{border-collapse:collapse}th{text-align:left;font-weight:500;color:#656d76;padding:3px 18px 3px 0}"
    "td{font-variant-numeric:tabular-nums;font-weight:600;padding:3px 0}\n"
    "pre{margin:0;font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;max-height:300px;"
    "overflow:auto}\n"
    ".plots{display:flex;flex-wrap:wrap;gap:16px}\n"
    "figure{margin:0;background:#fff;border:1px solid #d0d7de;border-radius:8px;padding:6px}\n"
    "svg{display:block;max-width:100%;height:auto;font-family:system-ui,Helvetica,Arial,sans-serif}\n"
    "svg .t{font-size:15px;font-weight:600;fill:#1f2328}svg .bg{fill:#fbfcfd}\n"
    "svg .g{stroke:#e6e9ed;stroke-width:1}svg .ax{stroke:#57606a;stroke-width:1}\n"
    "svg .yl{font-size:11px;fill:#57606a;text-anchor:end}svg .xl{font-size:11px;fill:#57606a;text-anchor:middle}\n"
    "svg .al{font-size:12px;fill:#1f2328;text-anchor:middle}svg .lg{font-size:12px;fill:#1f2328;text-anchor:end}\n"
    ".warn{color:#9a6700}\n";

int ct_report_write(const ct_report_log *L, const char *in_path, FILE *o, FILE *err) {
    size_t n = L->v[S_STEP].n;
    if (n == 0) { /* the reader refuses such a log; a caller that did not ask it gets the same answer */
        return report_err(err, CT_E_CORRUPT, HINT_LOG, "%s has no step lines: nothing to plot", in_path);
    }
    double *sm = malloc((n ? n : 1) * sizeof *sm), *sps_sm = malloc((n ? n : 1) * sizeof *sps_sm);
    double *tmp = malloc((n ? n : 1) * sizeof *tmp), *acc_pct = NULL;
    size_t ne = L->v[S_EEPOCH].n;
    if (ne) acc_pct = malloc(ne * sizeof *acc_pct);
    if (!sm || !sps_sm || !tmp || (ne && !acc_pct)) {
        free(sm), free(sps_sm), free(tmp), free(acc_pct);
        return report_err(err, CT_E_OOM, NULL, "out of memory");
    }
    const double *step = L->v[S_STEP].v;
    smooth(L->v[S_LOSS].v, sm, n, n > 200 ? 0.98 : 0.9);
    smooth(L->v[S_SPS].v, sps_sm, n, n > 200 ? 0.98 : 0.9);
    for (size_t i = 0; i < ne; i++) acc_pct[i] = 100.0 * L->v[S_EACC].v[i];
    /* the test loss at the step of its evaluation (older logs without "step": the epoch's last step) */
    double *estep = L->v[S_ESTEP].v;

    fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
          "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>ctrain report: ",
          o);
    html_escape(o, in_path);
    fprintf(o, "</title>\n<style>\n%s</style></head><body><main>\n<h1>ctrain training report</h1>\n<p class=\"sub\">",
            k_css);
    html_escape(o, in_path);
    fprintf(o, " &middot; %zu steps logged &middot; %zu evaluations%s</p>\n", n, ne,
            L->has_done ? "" : " &middot; <span class=\"warn\">the run did not finish (no \"done\" line)</span>");
    if (L->bad_lines)
        fprintf(o, "<p class=\"warn\">%ld malformed line%s skipped</p>\n", L->bad_lines, L->bad_lines > 1 ? "s" : "");

    fputs("<div class=\"top\"><div class=\"card\"><table>\n", o);
    double best = -1, best_ep = NAN;
    for (size_t i = 0; i < ne; i++)
        if (acc_pct[i] > best) best = acc_pct[i], best_ep = L->v[S_EEPOCH].v[i];
    row(o, "steps", "%.0f", step[n - 1]);
    row(o, "epochs", "%.0f", L->max_epoch > 0 ? (double)L->max_epoch : NAN);
    row(o, "final train loss (smoothed)", "%.4f", sm[n - 1]);
    row(o, "final test loss", "%.4f", ne ? L->v[S_ELOSS].v[ne - 1] : NAN);
    row(o, "final test accuracy", "%.2f%%", ne ? acc_pct[ne - 1] : NAN);
    if (ne) {
        fprintf(o, "<tr><th>best test accuracy</th><td>%.2f%% (epoch %.0f)</td></tr>\n", best, best_ep);
    }
    double med_sps = median(L->v[S_SPS].v, n, tmp);
    row(o, "median throughput", "%.0f samples/s", med_sps);
    row(o, "final learning rate", "%.3g", L->v[S_LR].v[n - 1]);
    row(o, "training time", "%.1f s", L->has_done ? L->time_s : L->last_time);
    if (L->has_done) row(o, "peak memory", "%.1f MiB", L->peak_mib);
    fputs("</table></div>\n", o);
    if (L->recipe) {
        fputs("<div class=\"card\"><b>recipe</b><pre>", o);
        html_escape(o, L->recipe);
        fputs("</pre></div>\n", o);
    }
    fputs("</div>\n<div class=\"plots\">\n", o);

    series loss[3] = {
        {step, L->v[S_LOSS].v, n, "#54aeff", "train loss", 1.0, 0, 45},
        {step, sm, n, "#0969da", "smoothed", 2.2, 0, 100},
        {estep, L->v[S_ELOSS].v, ne, "#cf222e", "test loss (per epoch)", 2.0, 1, 100},
    };
    plot(o, "Loss", "step", "cross-entropy", loss, 3, 1, 1, NAN);
    if (ne) {
        series acc = {L->v[S_EEPOCH].v, acc_pct, ne, "#1a7f37", "test accuracy", 2.2, 1, 100};
        plot(o, "Test accuracy", "epoch", "accuracy (%)", &acc, 1, 0, 1, NAN);
    }
    series lr = {step, L->v[S_LR].v, n, "#8250df", "learning rate", 2.0, 0, 100};
    plot(o, "Learning rate", "step", "lr", &lr, 1, 1, 1, NAN);
    series sps[2] = {
        {step, L->v[S_SPS].v, n, "#fb8f44", "per step", 1.0, 0, 45},
        {step, sps_sm, n, "#bc4c00", "smoothed", 2.2, 0, 100},
    };
    plot(o, "Throughput", "step", "samples/s", sps, 2, 1, 1, 3 * med_sps);
    if (L->v[S_GNORM].n) {
        series g = {L->v[S_GSTEP].v, L->v[S_GNORM].v, L->v[S_GNORM].n, "#6e7781", "grad norm (before clipping)",
                    1.5, 0, 100};
        plot(o, "Gradient norm", "step", "L2 norm", &g, 1, 1, 1, NAN);
    }
    if (L->v[S_SCALE].n) {
        series s = {L->v[S_SSTEP].v, L->v[S_SCALE].v, L->v[S_SCALE].n, "#bf3989", "loss scale", 2.0, 0, 100};
        plot(o, "Loss scale", "step", "scale", &s, 1, 1, 1, NAN);
    }
    fputs("</div>\n<p class=\"sub\">Generated by <code>ctrain report</code>.</p>\n</main></body></html>\n", o);
    free(sm), free(sps_sm), free(tmp), free(acc_pct);
    return ferror(o) ? 1 : 0;
}

int ct_report_html(const char *metrics_path, const char *html_path) {
    FILE *f = fopen(metrics_path, "r");
    if (!f) {
        return report_err(stderr, CT_E_IO, HINT_LOG, "cannot open metrics log '%s': %s", metrics_path, strerror(errno));
    }
    ct_report_log *L = NULL;
    int rc = ct_report_read(f, metrics_path, stderr, &L);
    fclose(f);
    if (rc) return rc;
    FILE *o = fopen(html_path, "w");
    if (!o) {
        report_err(stderr, CT_E_IO, "check that the output's folder exists and is writable, or choose another with -o",
                   "cannot write '%s': %s", html_path, strerror(errno));
        ct_report_log_free(L);
        return 1;
    }
    rc = ct_report_write(L, metrics_path, o, stderr);
    int werr = ferror(o);
    if (fclose(o) != 0 || werr) {
        rc = report_err(stderr, CT_E_IO, "check the free space of the output's disk, or choose another with -o",
                        "writing '%s' failed: %s", html_path, strerror(errno));
    }
    ct_report_log_free(L);
    return rc;
}

static void report_usage(FILE *f) {
    fprintf(f, "usage: ctrain report METRICS.jsonl [-o report.html]\n"
               "       ctrain report METRICS.jsonl --csv [-o metrics.csv]\n"
               "\n"
               "Draws a metrics log (ctrain train --metrics FILE, or --report DIR) as one self-contained\n"
               "HTML page with SVG plots: loss, test accuracy, learning rate, throughput (docs/report.md).\n"
               "The output defaults to report.html next to the log.\n"
               "--csv: the per-step metrics as CSV with a header row instead (stdout unless -o).\n");
}

int ct_cli_report(int argc, char **argv) {
    const char *in = NULL, *out = NULL;
    int csv = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            report_usage(stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--csv")) {
            csv = 1;
        } else if (!strcmp(argv[i], "-o") || !strcmp(argv[i], "--output")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "ctrain report: error: %s needs a file name\n", argv[i]);
                return 2;
            }
            out = argv[++i];
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "ctrain report: error: unknown option '%s'\n", argv[i]);
            report_usage(stderr);
            return 2;
        } else if (!in) {
            in = argv[i];
        } else {
            fprintf(stderr, "ctrain report: error: one metrics log at a time (got '%s' and '%s')\n", in, argv[i]);
            return 2;
        }
    }
    if (!in) {
        report_usage(stderr);
        return 2;
    }
    if (csv) return ct_report_csv(in, out);
    char def[4096];
    if (!out) {
        const char *slash = strrchr(in, '/');
        int dl = slash ? (int)(slash - in + 1) : 0;
        snprintf(def, sizeof def, "%.*sreport.html", dl, in);
        out = def;
    }
    int rc = ct_report_html(in, out);
    if (!rc) printf("report: %s\n", out);
    return rc;
}
