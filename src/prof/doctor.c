/* src/prof/doctor.c - reads a Chrome trace written by the profiler (or any
 * trace with the same categories) and computes the KPIs: compute
 * utilization (MFU), memory use against the budget, communication share and
 * data stall (host transfer) share, each with a verdict and advice; and the
 * loss-scale story (overflows, backoffs, growths, final scale, the first
 * non-finite tensor) from the "amp" events. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/internal.h"
#include "ctrain/profile.h"

static double num(const cJSON *o, const char *key, double dflt) {
    const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
    return v && cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

static const char *str(const cJSON *o, const char *key) {
    const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
    return v && cJSON_IsString(v) ? v->valuestring : NULL;
}

/* A count read from the trace as an int64: negative (or NaN) is 0, and one
 * at or past 2^63 saturates (a cast of such a double is undefined). */
static int64_t count_of(double v) {
    if (!(v > 0)) return 0;
    return v < 9223372036854775808.0 ? (int64_t)v : INT64_MAX;
}

/* One "amp" event into the loss-scale summary (profile.h says how it is read). */
static void amp_event(ct_doctor_amp *a, const cJSON *e) {
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(e, "args");
    const char *name = str(e, "name"), *ev = str(args, "event"), *bad = str(args, "first_nonfinite");
    double scale = num(args, "scale", -1);
    int overflow = 0, backoff = 0, growth = 0;
    if (ev) {
        overflow = !strcmp(ev, "overflow");
        backoff = !strcmp(ev, "backoff");
        growth = !strcmp(ev, "growth");
    } else if (name) {
        overflow = !strncmp(name, "overflow", 8);
        backoff = strstr(name, "backoff") != NULL ||
                  (overflow && scale > 0 && a->final_scale > 0 && scale < a->final_scale);
        growth = !overflow && strstr(name, "grow") != NULL;
    }
    a->events++;
    a->overflows += overflow;
    a->backoffs += backoff;
    a->growths += growth;
    if (overflow && bad && bad[0] && !a->first_nonfinite[0])
        snprintf(a->first_nonfinite, sizeof a->first_nonfinite, "%s", bad);
    if (scale > 0) a->final_scale = scale;
}

/* ---- pipeline: the "pipeline schedule" events, the micro-batches' compute and the receives ---- */
typedef struct {
    double t0, t1, bubble, ideal;
} pp_span;
typedef struct {
    pp_span *v;
    int n, cap;
} pp_spans;
typedef struct {
    pp_spans sched, work, recv; /* schedules; forward / backward compute; blocking receives */
    int oom;
} pp_acc;

static void spans_add(pp_spans *a, int *oom, double t0, double t1, double bubble, double ideal) {
    if (a->n == a->cap) {
        if (a->cap >= (1 << 26)) return (void)(*oom = 1);
        const int cap = a->cap ? 2 * a->cap : 64; /* a->cap grows with a->v only: a failed realloc keeps both */
        pp_span *nv = realloc(a->v, (size_t)cap * sizeof *nv);
        if (!nv) return (void)(*oom = 1);
        a->v = nv;
        a->cap = cap;
    }
    a->v[a->n++] = (pp_span){t0, t1, bubble, ideal};
}

/* One "pipeline" or "pipeline_comm" event (profile.h names them). */
static void pp_event(pp_acc *a, const cJSON *e, const char *cat, double ts, double dur) {
    const char *name = str(e, "name");
    if (!name || !(dur >= 0)) return;
    if (!strcmp(cat, "pipeline_comm")) {
        if (!strncmp(name, "receive", 7)) spans_add(&a->recv, &a->oom, ts, ts + dur, 0, 0);
    } else if (!strcmp(name, "pipeline schedule")) {
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(e, "args");
        spans_add(&a->sched, &a->oom, ts, ts + dur, num(args, "bubble", -1), num(args, "ideal", -1));
    } else if (!strncmp(name, "forward", 7) || !strncmp(name, "backward", 8)) {
        spans_add(&a->work, &a->oom, ts, ts + dur, 0, 0);
    }
}

static int by_start(const void *x, const void *y) {
    const pp_span *a = x, *b = y;
    return a->t0 < b->t0 ? -1 : a->t0 > b->t0;
}

/* The time of the spans of a (sorted by start, one thread: none overlap) inside [t0, t1]. */
static double inside(const pp_spans *a, double t0, double t1) {
    int lo = 0, hi = a->n; /* the first span ending after t0 */
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (a->v[mid].t1 <= t0) lo = mid + 1;
        else hi = mid;
    }
    double sum = 0;
    for (int i = lo; i < a->n && a->v[i].t0 < t1; i++) {
        double b = a->v[i].t0 > t0 ? a->v[i].t0 : t0, e = a->v[i].t1 < t1 ? a->v[i].t1 : t1;
        if (e > b) sum += e - b;
    }
    return sum;
}

/* The bubble over the recorded schedules: their idle share (1 - compute / time), the trainer's own
 * measure and the ideal (the last schedule's args), the receives' share of step time and the verdict. */
static void pp_finish(pp_acc *a, ct_doctor_report *r, double step_t) {
    r->pipeline_bubble = r->pipeline_bubble_args = r->pipeline_ideal = -1;
    r->pipeline_steps = a->sched.n;
    r->v_pipeline = CT_VERDICT_UNKNOWN;
    if (a->sched.n) {
        if (a->work.n) qsort(a->work.v, (size_t)a->work.n, sizeof *a->work.v, by_start); /* (NULL when none) */
        if (a->recv.n) qsort(a->recv.v, (size_t)a->recv.n, sizeof *a->recv.v, by_start);
        double wall = 0, busy = 0, recv = 0;
        for (int i = 0; i < a->sched.n; i++) {
            const pp_span *s = &a->sched.v[i];
            wall += s->t1 - s->t0;
            busy += inside(&a->work, s->t0, s->t1);
            recv += inside(&a->recv, s->t0, s->t1);
            if (s->bubble >= 0) r->pipeline_bubble_args = s->bubble;
            if (s->ideal >= 0) r->pipeline_ideal = s->ideal;
        }
        r->pipeline_time_us = wall;
        r->pipeline_busy_us = busy;
        r->pipeline_recv_us = recv;
        if (wall > 0) {
            r->pipeline_bubble = 1.0 - busy / wall;
            r->pipeline_comm_share = step_t > 0 ? recv / step_t : recv / wall;
            double ideal = r->pipeline_ideal > 0 ? r->pipeline_ideal : 0;
            r->v_pipeline = r->pipeline_bubble <= ideal + 0.10 ? CT_VERDICT_OK : CT_VERDICT_WARN;
        }
    }
    free(a->sched.v), free(a->work.v), free(a->recv.v);
}

static ct_status analyze(ct_context *ctx, const char *what, const char *json, size_t len, ct_doctor_report *r) {
    memset(r, 0, sizeof *r);
    r->utilization = r->memory_share = -1;
    r->amp.final_scale = -1;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, 0);
    if (!root) {
        size_t at = end && end >= json ? (size_t)(end - json) : 0;
        size_t last = len;
        while (last > 0 && (json[last - 1] == ' ' || json[last - 1] == '\n' || json[last - 1] == '\r' ||
                            json[last - 1] == '\t' || json[last - 1] == 0))
            last--;
        size_t i = 0;
        while (i < last && (json[i] == ' ' || json[i] == '\n' || json[i] == '\r' || json[i] == '\t')) i++;
        if (last == 0)
            return ct_set_error(ctx, CT_E_CORRUPT, "doctor: '%s' is empty, not a trace; write one with ctrain train "
                                "--profile DIR", what);
        /* cut short: the parser stopped at the end, or inside the last token (cJSON
         * reports a cut string, number or literal at its start): nothing but that
         * token follows the error, no closing bracket */
        int cut = at + 1 >= last;
        if (!cut && at < last && last - at <= 4096) {
            cut = 1;
            /* a string cut short (cJSON points at or just after its opening quote): no closing quote */
            if (json[at] == '"' || (at > 0 && json[at - 1] == '"')) {
                for (size_t k = json[at] == '"' ? at + 1 : at; cut && k < last; k++) cut = !(json[k] == '"' && json[k - 1] != '\\');
            } else { /* a number or literal cut short */
                for (size_t k = at; cut && k < last; k++) cut = !strchr("}],\"", json[k]);
            }
        }
        if ((json[i] == '{' || json[i] == '[') && cut)
            return ct_set_error(ctx, CT_E_CORRUPT, "doctor: '%s' is truncated: the JSON ends at byte %zu before the "
                                "trace is complete (was the run interrupted while writing?)", what, last);
        return ct_set_error(ctx, CT_E_CORRUPT, "doctor: '%s' is not valid JSON (error near byte %zu); give a Chrome "
                            "trace written by ctrain train --profile DIR", what, at);
    }
    const cJSON *evs = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "traceEvents") : NULL;
    if (!cJSON_IsArray(evs)) {
        cJSON_Delete(root);
        return ct_set_error(ctx, CT_E_CONFIG, "doctor: '%s' is JSON but has no \"traceEvents\" array: not a Chrome "
                            "trace (write one with ctrain train --profile DIR)", what);
    }
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(root, "metadata");
    double t_min = 1e300, t_max = -1e300, data = 0, comm = 0, flops = 0, step_t = 0;
    const cJSON *e;
    /* the steps the trace times: op events of other steps (none from ctrain) do not count */
    int n_steps = 0, cap = 0;
    double *step_ids = NULL;
    pp_acc pa = {0};
    cJSON_ArrayForEach(e, evs) {
        const cJSON *cat = cJSON_GetObjectItemCaseSensitive(e, "cat");
        if (!cJSON_IsString(cat) || strcmp(cat->valuestring, "step")) continue;
        if (n_steps == cap) {
            double *ns = realloc(step_ids, (size_t)(cap = cap ? 2 * cap : 64) * sizeof *ns);
            if (!ns) break;
            step_ids = ns;
        }
        step_ids[n_steps++] = num(cJSON_GetObjectItemCaseSensitive(e, "args"), "step", -1);
    }
    cJSON_ArrayForEach(e, evs) {
        const cJSON *ph = cJSON_GetObjectItemCaseSensitive(e, "ph");
        if (!cJSON_IsString(ph) || strcmp(ph->valuestring, "X")) continue;
        r->events++;
        double ts = num(e, "ts", 0), dur = num(e, "dur", 0);
        if (ts < t_min) t_min = ts;
        if (ts + dur > t_max) t_max = ts + dur;
        const cJSON *cat = cJSON_GetObjectItemCaseSensitive(e, "cat");
        const char *c = cJSON_IsString(cat) ? cat->valuestring : "";
        if (!strcmp(c, "step")) {
            r->steps++;
            step_t += dur;
        } else if (!strcmp(c, "data")) {
            data += dur;
        } else if (!strcmp(c, "comm")) {
            comm += dur;
        } else if (!strcmp(c, "amp")) {
            amp_event(&r->amp, e);
        } else if (!strncmp(c, "pipeline", 8)) {
            pp_event(&pa, e, c, ts, dur);
        } else if (!strcmp(c, "op")) {
            const cJSON *args = cJSON_GetObjectItemCaseSensitive(e, "args");
            double st = num(args, "step", -1);
            int in_step = n_steps == 0 || st < 0;
            for (int k = 0; !in_step && k < n_steps; k++) in_step = step_ids[k] == st || step_ids[k] < 0;
            if (in_step) flops += num(args, "flops", 0);
        }
    }
    free(step_ids);
    if (step_t <= 0 && t_max > t_min) step_t = t_max - t_min; /* no step events: the span of the trace */
    r->step_time_us = step_t;
    r->flops = flops;
    const int pp_oom = pa.oom;
    pp_finish(&pa, r, step_t);
    if (pp_oom) {
        cJSON_Delete(root);
        return ct_set_error(ctx, CT_E_OOM, "doctor: out of memory reading the pipeline events of '%s'", what);
    }
    r->dropped = count_of(num(md, "dropped_events", 0));
    r->achieved_flops = step_t > 0 ? flops / (step_t * 1e-6) : 0;
    /* the peak of the units that ran the work (profiler.c: BF16 units' time at their peak), else FP32's */
    r->peak_flops = num(md, "effective_peak_flops", 0);
    if (r->peak_flops <= 0) r->peak_flops = num(md, "peak_flops", 0);
    if (r->peak_flops > 0 && step_t > 0 && flops > 0) r->utilization = r->achieved_flops / r->peak_flops;
    const cJSON *mem = md ? cJSON_GetObjectItemCaseSensitive(md, "memory") : NULL;
    r->memory_bytes = num(mem, "total_bytes", 0);
    r->budget_bytes = num(mem, "budget_bytes", 0);
    if (r->budget_bytes > 0) r->memory_share = r->memory_bytes / r->budget_bytes;
    r->data_share = step_t > 0 ? data / step_t : 0;
    r->comm_share = step_t > 0 ? comm / step_t : 0;
    r->v_compute = r->utilization < 0 ? CT_VERDICT_UNKNOWN : r->utilization >= 0.75 ? CT_VERDICT_OK : CT_VERDICT_WARN;
    r->v_memory = r->memory_share < 0                                      ? CT_VERDICT_UNKNOWN
                  : r->memory_share >= 0.70 && r->memory_share <= 0.90 ? CT_VERDICT_OK
                                                                           : CT_VERDICT_WARN;
    r->v_comm = step_t <= 0 ? CT_VERDICT_UNKNOWN : r->comm_share <= 0.20 ? CT_VERDICT_OK : CT_VERDICT_WARN;
    r->v_data = step_t <= 0 ? CT_VERDICT_UNKNOWN : r->data_share < 0.05 ? CT_VERDICT_OK : CT_VERDICT_WARN;
    const ct_doctor_amp *a = &r->amp;
    int amp_bad = (double)a->overflows > 0.05 * r->steps || (a->final_scale >= 0 && a->final_scale <= 1);
    r->v_amp = !a->events ? CT_VERDICT_UNKNOWN : a->overflows > 0 && amp_bad ? CT_VERDICT_WARN : CT_VERDICT_OK;
    cJSON_Delete(root);
    return CT_OK;
}

ct_status ct_doctor_analyze_json(ct_context *ctx, const char *json, size_t len, ct_doctor_report *out) {
    if (!ctx || !json || !out) return CT_E_INVALID_ARG;
    return analyze(ctx, "<trace>", json, len, out);
}

ct_status ct_doctor_analyze_file(ct_context *ctx, const char *path, ct_doctor_report *out) {
    if (!ctx || !path || !out) return CT_E_INVALID_ARG;
    FILE *f = fopen(path, "rb");
    if (!f) return ct_set_error(ctx, CT_E_IO, "doctor: cannot open the trace '%s'; check the path", path);
    size_t cap = 1 << 16, n = 0, got;
    char *buf = malloc(cap);
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            char *nb = cap > ((size_t)1 << 31) ? NULL : realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    int err = ferror(f);
    fclose(f);
    if (!buf) return ct_set_error(ctx, CT_E_OOM, "doctor: out of memory reading '%s'", path);
    if (err) {
        free(buf);
        return ct_set_error(ctx, CT_E_IO, "doctor: reading the trace '%s' failed", path);
    }
    ct_status s = analyze(ctx, path, buf, n, out);
    free(buf);
    return s;
}

static const char *tag(ct_verdict v) { return v == CT_VERDICT_OK ? "[ok]  " : v == CT_VERDICT_WARN ? "[warn]" : "[n/a] "; }

static void human(double v, const char *unit, char *buf, size_t len) {
    const char *pre[] = {"", "K", "M", "G", "T", "P"};
    int i = 0;
    while (v >= 1000 && i < 5) v /= 1000, i++;
    snprintf(buf, len, "%.3g %s%s", v, pre[i], unit);
}

/* The bubble against the schedule's ideal, and the receives' share (a trace with "pipeline schedule" events). */
static void print_pipeline(const ct_doctor_report *r, FILE *f) {
    char ideal[48] = "unknown", trainer[80] = "";
    if (r->pipeline_ideal >= 0) snprintf(ideal, sizeof ideal, "%.1f%%", 100 * r->pipeline_ideal);
    if (r->pipeline_bubble_args >= 0)
        snprintf(trainer, sizeof trainer, "; the trainer measured %.1f%% over all its steps",
                 100 * r->pipeline_bubble_args);
    if (r->v_pipeline == CT_VERDICT_UNKNOWN) {
        fprintf(f, "  %s pipeline bubble: unknown (%d schedule events of no duration)\n", tag(r->v_pipeline),
                r->pipeline_steps);
        return;
    }
    fprintf(f, "  %s pipeline bubble %.1f%% of the schedule (ideal %s for this schedule; target <= ideal + 10 "
               "points) in %d recorded step%s%s%s\n",
            tag(r->v_pipeline), 100 * r->pipeline_bubble, ideal, r->pipeline_steps, r->pipeline_steps == 1 ? "" : "s",
            trainer,
            r->v_pipeline == CT_VERDICT_OK ? ""
            : ": the stages wait more than the schedule needs: raise micro_batches (the ideal is (P-1)/(M+P-1)), "
              "use pipeline_schedule interleaved (virtual_stages 2), use fewer pipeline_stages, or balance the "
              "stages (the slowest stage sets the pace: compare them with ctrain graph and move cuts with "
              "pipeline_split)");
    double idle = r->pipeline_time_us - r->pipeline_busy_us;
    fprintf(f, "         pipeline communication %.1f%% of step time (blocking receives of activations and gradients "
               "from the neighbouring stages: %.0f%% of the bubble)\n",
            100 * r->pipeline_comm_share, idle > 0 ? 100 * r->pipeline_recv_us / idle : 0.0);
}

void ct_doctor_print(const ct_doctor_report *r, FILE *f) {
    char a[32], b[32];
    fprintf(f, "doctor: %d recorded steps, %lld events%s, %.3f ms per step\n", r->steps, (long long)r->events,
            r->dropped ? " (some dropped: the buffer was full)" : "",
            r->steps ? r->step_time_us / r->steps / 1000.0 : r->step_time_us / 1000.0);
    human(r->achieved_flops, "FLOP/s", a, sizeof a);
    human(r->peak_flops, "FLOP/s", b, sizeof b);
    if (r->v_compute == CT_VERDICT_UNKNOWN)
        fprintf(f, "  %s compute utilization: unknown (no peak FLOP/s or no op events in the trace)\n", tag(r->v_compute));
    else
        fprintf(f, "  %s compute utilization %.1f%% (%s of %s peak; target >= 75%%)%s\n", tag(r->v_compute),
                100 * r->utilization, a, b,
                r->v_compute == CT_VERDICT_OK ? ""
                : ": raise the batch size (more work per kernel call), use every core (threads), or load "
                  "batches ahead (prefetch)");
    if (r->v_memory == CT_VERDICT_UNKNOWN)
        fprintf(f, "  %s memory %.1f MiB: no memory budget was set, so its use cannot be judged; set one "
                   "(recipe key memory_budget, e.g. --memory-budget 8G) to check the 70-90%% target\n",
                tag(r->v_memory), r->memory_bytes / 1048576.0);
    else
        fprintf(f, "  %s memory %.1f MiB = %.1f%% of the %.1f MiB budget (target 70-90%%)%s\n", tag(r->v_memory),
                r->memory_bytes / 1048576.0, 100 * r->memory_share, r->budget_bytes / 1048576.0,
                r->v_memory == CT_VERDICT_OK ? ""
                : r->memory_share > 0.90 ? ": too close to the budget: look for leaks (bytes in use growing per "
                                           "step), fuse more (recipe key fusion_level 2: activations and "
                                           "layernorms computed inside the next linear, never stored), enable "
                                           "activation checkpointing (recompute_every), train in "
                                           "bf16 (precision bf16) or use a smaller batch_size"
                                         : ": the budget is under-used: raise the batch size, or recompute less "
                                           "(recompute_every 0) to trade memory for speed");
    fprintf(f, "  %s communication %.1f%% of step time (target <= 20%%)%s\n", tag(r->v_comm), 100 * r->comm_share,
            r->v_comm == CT_VERDICT_WARN ? ": the step waits for its gradients' allreduce: overlap it with backward "
                                           "(overlap_communication true, smaller bucket_size_mb so the first "
                                           "buckets start earlier), or send less (grad_compression bf16)"
            : r->comm_share == 0 ? (r->pipeline_steps ? " (no gradient reduction waits)"
                                                      : " (no communication events: single process)")
                                 : "");
    fprintf(f, "  %s data stall (host transfer) %.1f%% of step time (target < 5%%)%s\n", tag(r->v_data),
            100 * r->data_share,
            r->v_data == CT_VERDICT_WARN ? ": the loader stalls the step: load batches ahead on background "
                                           "threads (raise prefetch and prefetch_threads)"
                                         : "");
    if (r->pipeline_steps) print_pipeline(r, f);
    const ct_doctor_amp *m = &r->amp;
    if (r->v_amp == CT_VERDICT_UNKNOWN) {
        fprintf(f, "  %s loss scale: no amp events in the trace (no loss scaling, or no overflow or growth in the "
                   "recorded steps)\n",
                tag(r->v_amp));
        return;
    }
    char scale[32] = "unknown", bad[96] = "";
    if (m->final_scale >= 0) snprintf(scale, sizeof scale, "%g", m->final_scale);
    if (m->first_nonfinite[0]) snprintf(bad, sizeof bad, "; first non-finite tensor '%s'", m->first_nonfinite);
    fprintf(f, "  %s loss scale: %lld overflow%s (update%s skipped), %lld backoff%s, %lld growth%s in %d recorded steps "
               "(target: overflows in <= 5%%); final scale %s%s%s\n",
            tag(r->v_amp), (long long)m->overflows, m->overflows == 1 ? "" : "s", m->overflows == 1 ? "" : "s",
            (long long)m->backoffs, m->backoffs == 1 ? "" : "s", (long long)m->growths, m->growths == 1 ? "" : "s",
            r->steps, scale, bad,
            r->v_amp == CT_VERDICT_OK ? ""
            : ": gradients keep overflowing: keep the layer of the first non-finite tensor in FP32 (keep_fp32), "
              "lower the learning rate, check the data for NaN/inf, or train in bf16");
}
