/* src/io/metrics.c - the JSON-lines metrics log (ctrain/metrics.h). Numbers
 * are printed with %.7g (non-finite ones as null: JSON has no NaN). The
 * stream is flushed at most every FLUSH_S seconds by step lines and always
 * by eval/done lines. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/internal.h"
#include "ctrain/metrics.h"

#define FLUSH_S 2.0

struct ct_metrics {
    ct_context *ctx;
    FILE *f;
    double last_flush, prev_time;
    int failed;
    char path[512];
};

static void put_num(FILE *f, const char *key, double v) {
    if (isfinite(v)) fprintf(f, ",\"%s\":%.7g", key, v);
    else fprintf(f, ",\"%s\":null", key);
}

static ct_status check(ct_metrics *m) {
    if (!m->failed && ferror(m->f)) m->failed = errno ? errno : EIO;
    if (m->failed)
        return ct_set_error(m->ctx, CT_E_IO, "cannot write metrics log '%s': %s", m->path, strerror(m->failed));
    return CT_OK;
}

static ct_status flush(ct_metrics *m) {
    if (fflush(m->f) != 0 && !m->failed) m->failed = errno ? errno : EIO;
    m->last_flush = ct_now_s();
    return check(m);
}

ct_status ct_metrics_open(ct_context *ctx, const char *path, int append, const char *recipe_json,
                          ct_metrics **out) {
    if (!ctx || !path || !*path || !out) return CT_E_INVALID_ARG;
    *out = NULL;
    ct_metrics *m = calloc(1, sizeof *m);
    if (!m) return ct_set_error(ctx, CT_E_OOM, "out of memory opening metrics log '%s'", path);
    m->ctx = ctx;
    snprintf(m->path, sizeof m->path, "%s", path);
    m->f = fopen(path, append ? "a" : "w");
    if (!m->f) {
        int e = errno;
        free(m);
        return ct_set_error(ctx, CT_E_IO, "cannot open metrics log '%s' for writing: %s", path, strerror(e));
    }
    fprintf(m->f, "{\"type\":\"run\",\"version\":1,\"recipe\":%s}\n",
            recipe_json && recipe_json[0] == '{' ? recipe_json : "null");
    ct_status s = flush(m);
    if (s != CT_OK) {
        fclose(m->f);
        free(m);
        return s;
    }
    *out = m;
    return CT_OK;
}

ct_status ct_metrics_log_step(ct_metrics *m, const ct_metrics_step *s) {
    if (!m || !s) return CT_E_INVALID_ARG;
    double dt = s->time_s - m->prev_time;
    double sps = dt > 0 ? s->samples / dt : NAN;
    m->prev_time = s->time_s;
    fprintf(m->f, "{\"type\":\"step\",\"step\":%lld,\"epoch\":%d", (long long)s->step, s->epoch);
    put_num(m->f, "loss", s->loss);
    put_num(m->f, "acc", s->acc);
    put_num(m->f, "lr", s->lr);
    put_num(m->f, "samples_per_s", sps);
    if (s->grad_norm >= 0) put_num(m->f, "grad_norm", s->grad_norm);
    if (s->loss_scale >= 0) put_num(m->f, "loss_scale", s->loss_scale);
    if (s->mfu >= 0) put_num(m->f, "mfu", s->mfu);
    if (s->peak_mib >= 0) put_num(m->f, "peak_mib", s->peak_mib);
    if (s->comm_share >= 0) put_num(m->f, "comm_share", s->comm_share);
    put_num(m->f, "time", s->time_s);
    fputs("}\n", m->f);
    if (ct_now_s() - m->last_flush >= FLUSH_S) return flush(m);
    return check(m);
}

ct_status ct_metrics_log_eval(ct_metrics *m, int epoch, int64_t step, double test_loss, double test_acc,
                              double time_s) {
    if (!m) return CT_E_INVALID_ARG;
    fprintf(m->f, "{\"type\":\"eval\",\"epoch\":%d,\"step\":%lld", epoch, (long long)step);
    put_num(m->f, "test_loss", test_loss);
    put_num(m->f, "test_acc", test_acc);
    put_num(m->f, "time", time_s);
    fputs("}\n", m->f);
    m->prev_time = time_s; /* the next step's samples/s leaves the evaluation out */
    return flush(m);
}

/* s as a JSON string: quotes, backslashes and control characters escaped */
static void put_str(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\') fprintf(f, "\\%c", *c);
        else if (*c < 0x20) fprintf(f, "\\u%04x", *c);
        else fputc(*c, f);
    }
    fputc('"', f);
}

ct_status ct_metrics_log_scaler_event(ct_metrics *m, const ct_scale_record *e) {
    if (!m || !e) return CT_E_INVALID_ARG;
    fprintf(m->f, "{\"type\":\"amp\",\"step\":%llu,\"event\":\"%s\"", (unsigned long long)e->step + 1,
            ct_scale_event_name(e->event));
    put_num(m->f, "scale", e->scale);
    if (e->tensor[0] && memchr(e->tensor, 0, sizeof e->tensor)) {
        fputs(",\"first_nonfinite\":", m->f);
        put_str(m->f, e->tensor);
    }
    fputs("}\n", m->f);
    if (ct_now_s() - m->last_flush >= FLUSH_S) return flush(m);
    return check(m);
}

ct_status ct_metrics_log_done(ct_metrics *m, int64_t steps, double time_s, double test_loss, double test_acc,
                              double peak_mib) {
    if (!m) return CT_E_INVALID_ARG;
    fprintf(m->f, "{\"type\":\"done\",\"steps\":%lld", (long long)steps);
    put_num(m->f, "time", time_s);
    put_num(m->f, "test_loss", test_loss);
    put_num(m->f, "test_acc", test_acc);
    put_num(m->f, "peak_mib", peak_mib);
    fputs("}\n", m->f);
    return flush(m);
}

ct_status ct_metrics_close(ct_metrics *m) {
    if (!m) return CT_OK;
    ct_status s = flush(m);
    if (fclose(m->f) != 0 && s == CT_OK)
        s = ct_set_error(m->ctx, CT_E_IO, "cannot write metrics log '%s': %s", m->path, strerror(errno));
    free(m);
    return s;
}
