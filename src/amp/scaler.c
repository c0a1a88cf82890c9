/* src/amp/scaler.c - dynamic/static loss scaler: fused unscale + inf/NaN
 * check over the flat gradient arena, skip-or-step, scale update with
 * growth, backoff, hysteresis and clamps, an event history naming the first
 * non-finite tensor (the last CT_SCALER_HISTORY events, kept oldest first
 * inside the state so checkpoints carry it, plus exact totals), and a
 * configurable outcome at min_scale. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "amp/scaler_history.h"
#include "ctrain/amp.h"

struct ct_scaler {
    ct_context *ctx;
    ct_scaler_opts o;
    ct_scaler_state st; /* st.history: the ring, kept linear (oldest first) */
    int stop;
    int last_n;         /* events recorded by the last update               */
};

void ct_scaler_opts_default(ct_scaler_opts *o) {
    memset(o, 0, sizeof *o);
    o->dynamic = 1;
    o->init_scale = 65536.0f;
    o->growth_factor = 2.0f;
    o->backoff_factor = 0.5f;
    o->growth_interval = 2000;
    o->hysteresis = 1;
    o->min_scale = 1.0f;
    o->max_scale = 16777216.0f;
    o->floor_patience = 10;
    o->floor_policy = CT_SCALER_FLOOR_ERROR;
}

static ct_status validate(ct_context *ctx, const ct_scaler_opts *o) {
    if (!(o->init_scale > 0.0f) || !isfinite(o->init_scale))
        return ct_set_error(ctx, CT_E_INVALID_ARG, "loss scaler: init_scale %g must be finite and > 0",
                            (double)o->init_scale);
    if (!(o->min_scale > 0.0f) || !(o->max_scale >= o->min_scale) || !isfinite(o->max_scale))
        return ct_set_error(ctx, CT_E_INVALID_ARG, "loss scaler: need 0 < min_scale (%g) <= max_scale (%g)",
                            (double)o->min_scale, (double)o->max_scale);
    if (o->init_scale < o->min_scale || o->init_scale > o->max_scale)
        return ct_set_error(ctx, CT_E_INVALID_ARG, "loss scaler: init_scale %g is outside [min_scale %g, max_scale %g]",
                            (double)o->init_scale, (double)o->min_scale, (double)o->max_scale);
    if (!(o->growth_factor > 1.0f) || !(o->backoff_factor > 0.0f && o->backoff_factor < 1.0f))
        return ct_set_error(ctx, CT_E_INVALID_ARG,
                            "loss scaler: growth_factor %g must be > 1 and backoff_factor %g in (0, 1)",
                            (double)o->growth_factor, (double)o->backoff_factor);
    if (o->growth_interval < 1 || o->hysteresis < 1 || o->floor_patience < 1)
        return ct_set_error(ctx, CT_E_INVALID_ARG,
                            "loss scaler: growth_interval (%d), hysteresis (%d) and floor_patience (%d) must be >= 1",
                            o->growth_interval, o->hysteresis, o->floor_patience);
    if (o->floor_policy != CT_SCALER_FLOOR_ERROR && o->floor_policy != CT_SCALER_FLOOR_STOP)
        return ct_set_error(ctx, CT_E_INVALID_ARG, "loss scaler: unknown floor_policy %d", (int)o->floor_policy);
    return CT_OK;
}

ct_status ct_scaler_create(ct_context *ctx, const ct_scaler_opts *opts, ct_scaler **out) {
    if (!ctx || !out) return CT_E_INVALID_ARG;
    *out = NULL;
    ct_scaler_opts d;
    if (!opts) {
        ct_scaler_opts_default(&d);
        opts = &d;
    }
    CT_TRY(validate(ctx, opts));
    ct_scaler *s = calloc(1, sizeof *s);
    if (!s) return ct_set_error(ctx, CT_E_OOM, "loss scaler: out of memory");
    s->ctx = ctx;
    s->o = *opts;
    s->st.scale = opts->init_scale;
    s->st.hysteresis_left = opts->hysteresis;
    *out = s;
    return CT_OK;
}

void ct_scaler_free(ct_scaler *s) { free(s); }
float ct_scaler_scale(const ct_scaler *s) { return s->st.scale; }
int ct_scaler_should_stop(const ct_scaler *s) { return s->stop; }

/* ---- fused unscale + check ----------------------------------------------------- */

/* Scales g[0..n) by inv and returns the index of the first non-finite input
 * element, or n. Inf/NaN is tested on the bits (exponent all ones). */
static size_t unscale_chunk(float *g, size_t n, float inv) {
    uint32_t bad = 0;
    size_t i = 0;
    for (; i < n; i++) {
        uint32_t u;
        memcpy(&u, &g[i], 4);
        bad |= (uint32_t)((u & 0x7f800000u) == 0x7f800000u);
        g[i] *= inv;
    }
    if (!bad) return n;
    for (i = 0; i < n; i++)
        if (!isfinite(g[i])) return i;
    return n;
}

ct_status ct_scaler_unscale(ct_scaler *s, ct_plan *plan, int *found, int *param) {
    if (!plan) return CT_E_INVALID_ARG;
    size_t n;
    ct_plan_param_arena(plan, NULL, NULL, &n);
    return ct_scaler_unscale_range(s, plan, 0, n, found, param);
}

ct_status ct_scaler_unscale_range(ct_scaler *s, ct_plan *plan, size_t begin, size_t end, int *found, int *param) {
    if (!s || !plan || !found || !param) return CT_E_INVALID_ARG;
    float *grads;
    size_t n;
    ct_plan_param_arena(plan, NULL, &grads, &n);
    if (begin > end || end > n)
        return ct_set_error(s->ctx, CT_E_INVALID_ARG, "ct_scaler_unscale_range: [%zu, %zu) is not inside the %zu "
                            "gradients", begin, end, n);
    const size_t len = end - begin;
    float inv = 1.0f / s->st.scale;
    int nth = ct_context_num_threads(s->ctx);
    if (len < 65536) nth = 1;
    size_t chunk = ct_align_up((len + (size_t)nth - 1) / (size_t)nth, 64);
    size_t first = end;
#pragma omp parallel for num_threads(nth) schedule(static) reduction(min : first)
    for (int t = 0; t < nth; t++) {
        size_t b = begin + (size_t)t * chunk, e = CT_MIN(end, b + chunk);
        if (b < e) {
            size_t f = unscale_chunk(grads + b, e - b, inv);
            if (f < e - b && b + f < first) first = b + f;
        }
    }
    *found = first < end;
    *param = -1;
    for (int i = 0; *found && i < ct_plan_num_params(plan); i++) {
        ct_tensor gt;
        ct_plan_param_info(plan, i, NULL, NULL, &gt);
        size_t off = (size_t)((float *)gt.data - grads);
        if (first >= off && first < off + (size_t)ct_tensor_numel(&gt)) *param = i;
    }
    return CT_OK;
}

/* ---- scale update ------------------------------------------------------------------ */

/* Appends an event; a full ring drops its oldest (events are rare: at most
 * two per step, so moving 22 KiB then costs nothing next to the step). */
static void record(ct_scaler *s, ct_plan *plan, ct_scale_event ev, int param) {
    ct_scaler_state *st = &s->st;
    if (st->n_history == CT_SCALER_HISTORY) {
        memmove(st->history, st->history + 1, (CT_SCALER_HISTORY - 1) * sizeof st->history[0]);
        st->n_history--;
    }
    ct_scale_record *r = &st->history[st->n_history++];
    memset(r, 0, sizeof *r); /* no stale bytes: states compare with memcmp */
    r->step = st->step;
    r->scale = st->scale;
    r->event = ev;
    r->param = -1;
    const char *name = NULL;
    if (plan && param >= 0 && ct_plan_param_info(plan, param, &name, NULL, NULL) == CT_OK) {
        r->param = param;
        if (name) snprintf(r->tensor, sizeof r->tensor, "%s", name);
    }
    st->events++;
    if (ev == CT_SCALE_BACKOFF) st->backoffs++;
    if (ev == CT_SCALE_GROWTH) st->growths++;
    s->last_n++;
}

ct_status ct_scaler_update(ct_scaler *s, ct_plan *plan, int found, int param) {
    ct_scaler_state *st = &s->st;
    ct_status ret = CT_OK;
    s->last_n = 0;
    if (found) {
        st->skipped++;
        st->growth_tracker = 0;
        record(s, plan, CT_SCALE_OVERFLOW, param);
        if (!s->o.dynamic) {
            /* static scaling: the scale never moves */
        } else if (st->hysteresis_left > 1) {
            st->hysteresis_left--;
        } else if (st->scale <= s->o.min_scale) {
            st->min_hits++;
            if (st->min_hits >= s->o.floor_patience) {
                const char *name = "";
                if (plan && param >= 0) ct_plan_param_info(plan, param, &name, NULL, NULL);
                if (s->o.floor_policy == CT_SCALER_FLOOR_STOP) {
                    s->stop = 1;
                } else {
                    ret = ct_set_error(s->ctx, CT_E_NONFINITE,
                                       "loss scaler: gradients overflowed %d steps in a row at min_scale %g (step "
                                       "%llu, first non-finite tensor '%s'): the run is not recoverable by scaling. "
                                       "Lower the learning rate, check the data for NaN/inf, keep the layer in FP32 "
                                       "(keep_fp32), or use bf16 instead of fp16",
                                       st->min_hits, (double)s->o.min_scale, (unsigned long long)st->step, name);
                }
            }
        } else {
            st->scale = CT_MAX(st->scale * s->o.backoff_factor, s->o.min_scale);
            st->hysteresis_left = s->o.hysteresis;
            record(s, plan, CT_SCALE_BACKOFF, param);
        }
    } else {
        st->hysteresis_left = s->o.hysteresis;
        st->min_hits = 0;
        if (s->o.dynamic && ++st->growth_tracker >= s->o.growth_interval) {
            st->growth_tracker = 0;
            float next = CT_MIN(st->scale * s->o.growth_factor, s->o.max_scale);
            if (next != st->scale) {
                st->scale = next;
                record(s, plan, CT_SCALE_GROWTH, -1);
            }
        }
    }
    st->step++;
    return ret;
}

ct_status ct_scaler_step(ct_scaler *s, ct_plan *plan, ct_optimizer *opt, int *skipped) {
    if (!s || !plan || !opt) return CT_E_INVALID_ARG;
    int found, param;
    CT_TRY(ct_scaler_unscale(s, plan, &found, &param));
    if (!found) CT_TRY(ct_optimizer_step(opt));
    if (skipped) *skipped = found;
    CT_TRY(ct_scaler_update(s, plan, found, param));
    return ct_plan_set_loss_scale(plan, s->st.scale);
}

const char *ct_scale_event_name(ct_scale_event e) {
    return e == CT_SCALE_OVERFLOW ? "overflow" : e == CT_SCALE_BACKOFF ? "backoff" : e == CT_SCALE_GROWTH ? "growth" : "?";
}

void ct_scaler_history(const ct_scaler *s, const ct_scale_record **events, int *n) {
    *events = s->st.history;
    *n = s->st.n_history;
}

void ct_scaler_last_events(const ct_scaler *s, const ct_scale_record **events, int *n) {
    *n = CT_MIN(s->last_n, s->st.n_history);
    *events = s->st.history + s->st.n_history - *n;
}

void ct_scaler_get_totals(const ct_scaler *s, ct_scaler_totals *out) {
    out->overflows = s->st.skipped;
    out->backoffs = s->st.backoffs;
    out->growths = s->st.growths;
    out->events = s->st.events;
}

void ct_scaler_get_state(const ct_scaler *s, ct_scaler_state *out) { *out = s->st; }

/* Why a state cannot be one this scaler wrote, or NULL. */
static const char *state_problem(const ct_scaler_state *in) {
    if (!(in->scale > 0.0f) || !isfinite(in->scale)) return "scale is not finite and > 0";
    if (in->hysteresis_left < 1 || in->growth_tracker < 0 || in->min_hits < 0) return "negative counters";
    if (in->n_history < 0 || in->n_history > CT_SCALER_HISTORY) return "history length out of range";
    if ((uint64_t)in->n_history > in->events || in->backoffs > in->skipped || in->skipped > in->step ||
        in->growths > in->step || in->events != in->skipped + in->backoffs + in->growths)
        return "totals do not add up";
    for (int i = 0; i < in->n_history; i++) {
        const ct_scale_record *r = &in->history[i];
        if (r->event < CT_SCALE_OVERFLOW || r->event > CT_SCALE_GROWTH || !(r->scale > 0.0f) || !isfinite(r->scale) ||
            r->param < -1 || r->step >= in->step || (i && r->step < in->history[i - 1].step) ||
            !memchr(r->tensor, 0, sizeof r->tensor))
            return "a history event is malformed";
    }
    return NULL;
}

ct_status ct_scaler_set_state(ct_scaler *s, const ct_scaler_state *in) {
    const char *why = state_problem(in);
    if (why)
        return ct_set_error(s->ctx, CT_E_CORRUPT,
                            "loss scaler state is invalid (%s; scale %g, hysteresis_left %d): the checkpoint is corrupt",
                            why, (double)in->scale, in->hysteresis_left);
    s->st = *in;
    s->stop = 0;
    s->last_n = 0;
    return CT_OK;
}

/* ---- the history as text (checkpoints) ----------------------------------------------------- */

char *ct_scaler_history_to_json(const ct_scaler_state *st) {
    cJSON *arr = cJSON_CreateArray();
    int ok = arr != NULL;
    for (int i = 0; ok && i < st->n_history && i < CT_SCALER_HISTORY; i++) {
        const ct_scale_record *r = &st->history[i];
        char scale[32];
        snprintf(scale, sizeof scale, "%a", (double)r->scale);
        cJSON *e = cJSON_CreateArray();
        ok = e && cJSON_AddItemToArray(arr, e);
        if (!ok) {
            cJSON_Delete(e);
            break;
        }
        ok = cJSON_AddItemToArray(e, cJSON_CreateNumber((double)r->step)) &&
             cJSON_AddItemToArray(e, cJSON_CreateString(ct_scale_event_name(r->event))) &&
             cJSON_AddItemToArray(e, cJSON_CreateString(scale)) &&
             cJSON_AddItemToArray(e, cJSON_CreateNumber((double)r->param)) &&
             cJSON_AddItemToArray(e, cJSON_CreateString(r->tensor));
    }
    char *out = ok ? cJSON_PrintUnformatted(arr) : NULL;
    cJSON_Delete(arr);
    if (!out) return NULL;
    char *copy = strdup(out); /* the caller frees with free(), cJSON may use another allocator */
    cJSON_free(out);
    return copy;
}

ct_status ct_scaler_history_from_json(ct_context *ctx, const char *what, const char *json, ct_scaler_state *st) {
    cJSON *arr = cJSON_Parse(json);
    int n = cJSON_IsArray(arr) ? cJSON_GetArraySize(arr) : -1;
    int bad = n < 0 || n > CT_SCALER_HISTORY;
    const cJSON *e;
    int i = 0;
    cJSON_ArrayForEach(e, arr) {
        if (bad) break;
        const cJSON *f[5];
        for (int k = 0; k < 5; k++) f[k] = cJSON_GetArrayItem(e, k);
        bad = !cJSON_IsArray(e) || cJSON_GetArraySize(e) != 5 || !cJSON_IsNumber(f[0]) || !cJSON_IsString(f[1]) ||
              !cJSON_IsString(f[2]) || !cJSON_IsNumber(f[3]) || !cJSON_IsString(f[4]);
        if (bad) break;
        ct_scale_record *r = &st->history[i];
        memset(r, 0, sizeof *r);
        double step = f[0]->valuedouble, param = f[3]->valuedouble;
        char *end;
        double scale = strtod(f[2]->valuestring, &end);
        r->event = !strcmp(f[1]->valuestring, "overflow") ? CT_SCALE_OVERFLOW
                   : !strcmp(f[1]->valuestring, "backoff") ? CT_SCALE_BACKOFF
                   : !strcmp(f[1]->valuestring, "growth")  ? CT_SCALE_GROWTH
                                                           : (ct_scale_event)0;
        bad = !(step >= 0 && step < 9007199254740992.0 && step == floor(step)) || !(param >= -1 && param < 1e9) ||
              param != floor(param) || !f[2]->valuestring[0] || *end || !r->event ||
              strlen(f[4]->valuestring) >= sizeof r->tensor;
        if (bad) break;
        r->step = (uint64_t)step;
        r->scale = (float)scale;
        r->param = (int32_t)param;
        snprintf(r->tensor, sizeof r->tensor, "%s", f[4]->valuestring);
        i++;
    }
    cJSON_Delete(arr);
    if (bad)
        return ct_set_error(ctx, CT_E_CORRUPT,
                            "'%s': the loss-scale history (metadata 'scaler.history') is malformed: the file is corrupt",
                            what);
    st->n_history = i;
    return CT_OK;
}
