/* src/optim/clip.c - gradient clipping over the plan's flat gradient arena,
 * as torch.nn.utils.clip_grad_norm_ / clip_grad_value_ (PyTorch 1.13).
 *
 * The arena is cut into at most CLIP_MAX_CHUNKS chunks whose size depends
 * only on the arena size (never on the thread count). Each chunk visits the
 * parameter tensors it overlaps (the alignment padding between tensors is
 * never read or written) and reduces them in double precision; the partial
 * results are added in chunk order, so the norm is the same bits for every
 * thread count. Nothing is allocated: the partials live on the stack. */
#include <math.h>
#include <string.h>

#include "core/internal.h"
#include "ctrain/optim.h"

#define CLIP_MAX_CHUNKS 1024
#define CLIP_MIN_CHUNK 16384

enum { OP_SUMSQ, OP_SUMPOW, OP_MAXABS, OP_SCALE, OP_CLAMP };

typedef struct {
    ct_plan *plan;
    float *g;
    size_t n, chunk;
    int n_params, n_chunks;
} arena_view;

static void view_init(ct_plan *plan, arena_view *v) {
    memset(v, 0, sizeof *v);
    v->plan = plan;
    ct_plan_param_arena(plan, NULL, &v->g, &v->n);
    v->n_params = ct_plan_num_params(plan);
    size_t c = ct_align_up((v->n + CLIP_MAX_CHUNKS - 1) / CLIP_MAX_CHUNKS, 64);
    v->chunk = c < CLIP_MIN_CHUNK ? CLIP_MIN_CHUNK : c;
    v->n_chunks = (int)((v->n + v->chunk - 1) / v->chunk);
}

/* Offset and length (floats) of parameter i's gradient in the arena. */
static void tensor_range(const arena_view *v, int i, size_t *off, size_t *len) {
    ct_tensor gt;
    ct_plan_param_info(v->plan, i, NULL, NULL, &gt);
    *off = (size_t)((float *)gt.data - v->g);
    *len = (size_t)ct_tensor_numel(&gt);
}

static double sumsq(const float *g, size_t n) {
    double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        a0 += (double)g[i] * g[i];
        a1 += (double)g[i + 1] * g[i + 1];
        a2 += (double)g[i + 2] * g[i + 2];
        a3 += (double)g[i + 3] * g[i + 3];
    }
    for (; i < n; i++) a0 += (double)g[i] * g[i];
    return (a0 + a1) + (a2 + a3);
}

static double sumpow(const float *g, size_t n, double p) {
    double a = 0;
    for (size_t i = 0; i < n; i++) a += pow(fabs((double)g[i]), p);
    return a;
}

/* max |g| with NaN propagating (as torch.max) */
static double maxabs(const float *g, size_t n) {
    float m = 0.0f;
    int nan = 0;
    for (size_t i = 0; i < n; i++) {
        float a = fabsf(g[i]);
        nan |= a != a;
        m = a > m ? a : m;
    }
    return nan ? (double)NAN : (double)m;
}

static void scale(float *g, size_t n, float c) {
    for (size_t i = 0; i < n; i++) g[i] *= c;
}

static void clamp(float *g, size_t n, float c) {
    for (size_t i = 0; i < n; i++) { /* NaN compares false and stays NaN */
        float x = g[i];
        g[i] = x < -c ? -c : x > c ? c : x;
    }
}

/* Runs op over the parameter ranges inside chunk k; returns the chunk's
 * partial (reductions) or 0. */
static double chunk_op(const arena_view *v, int k, int op, double arg) {
    size_t b = (size_t)k * v->chunk, e = CT_MIN(v->n, b + v->chunk);
    /* first tensor ending after b (tensors are in ascending offset order) */
    int lo = 0, hi = v->n_params;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        size_t off, len;
        tensor_range(v, mid, &off, &len);
        if (off + len <= b) lo = mid + 1;
        else hi = mid;
    }
    double acc = 0;
    int nan = 0;
    for (int i = lo; i < v->n_params; i++) {
        size_t off, len;
        tensor_range(v, i, &off, &len);
        if (off >= e) break;
        size_t s = CT_MAX(off, b), t = CT_MIN(off + len, e);
        if (s >= t) continue;
        float *g = v->g + s;
        size_t m = t - s;
        switch (op) {
        case OP_SUMSQ: acc += sumsq(g, m); break;
        case OP_SUMPOW: acc += sumpow(g, m, arg); break;
        case OP_MAXABS: {
            double x = maxabs(g, m);
            nan |= x != x;
            acc = x > acc ? x : acc;
            break;
        }
        case OP_SCALE: scale(g, m, (float)arg); break;
        case OP_CLAMP: clamp(g, m, (float)arg); break;
        }
    }
    return nan ? (double)NAN : acc;
}

static int threads_for(const arena_view *v) {
    int nth = ct_context_num_threads(ct_plan_context(v->plan));
    return v->n_chunks < nth ? (v->n_chunks > 0 ? v->n_chunks : 1) : nth;
}

static void for_chunks(const arena_view *v, int op, double arg) {
    int nth = threads_for(v), nc = v->n_chunks;
#pragma omp parallel for num_threads(nth) schedule(static) if (nth > 1)
    for (int k = 0; k < nc; k++) chunk_op(v, k, op, arg);
}

static int valid_norm_type(float p) { return p == INFINITY || (p > 0.0f && isfinite(p)); }

static ct_status total_norm(ct_plan *plan, const arena_view *v, float norm_type, float *out) {
    ct_context *ctx = ct_plan_context(plan);
    if (!valid_norm_type(norm_type))
        return ct_set_error(ctx, CT_E_INVALID_ARG, "clip_grad_norm: norm_type %g must be a finite value > 0 or inf",
                            (double)norm_type);
    double part[CLIP_MAX_CHUNKS];
    int op = norm_type == INFINITY ? OP_MAXABS : norm_type == 2.0f ? OP_SUMSQ : OP_SUMPOW;
    int nth = threads_for(v), nc = v->n_chunks;
#pragma omp parallel for num_threads(nth) schedule(static) if (nth > 1)
    for (int k = 0; k < nc; k++) part[k] = chunk_op(v, k, op, (double)norm_type);
    double acc = 0;
    int nan = 0;
    for (int k = 0; k < nc; k++) { /* chunk order: independent of the threads */
        nan |= part[k] != part[k];
        if (op == OP_MAXABS) acc = part[k] > acc ? part[k] : acc;
        else acc += part[k];
    }
    double r = nan ? (double)NAN : op == OP_MAXABS ? acc : op == OP_SUMSQ ? sqrt(acc) : pow(acc, 1.0 / (double)norm_type);
    *out = (float)r;
    return CT_OK;
}

ct_status ct_grad_norm(ct_plan *plan, float norm_type, float *out) {
    if (!plan || !out) return CT_E_INVALID_ARG;
    arena_view v;
    view_init(plan, &v);
    return total_norm(plan, &v, norm_type, out);
}

ct_status ct_clip_grad_norm(ct_plan *plan, float max_norm, float norm_type, float *total_norm_out) {
    if (!plan) return CT_E_INVALID_ARG;
    ct_context *ctx = ct_plan_context(plan);
    if (!(max_norm >= 0.0f))
        return ct_set_error(ctx, CT_E_INVALID_ARG, "clip_grad_norm: max_norm %g must be >= 0", (double)max_norm);
    arena_view v;
    view_init(plan, &v);
    float tn;
    CT_TRY(total_norm(plan, &v, norm_type, &tn));
    if (total_norm_out) *total_norm_out = tn;
    /* PyTorch: clip_coef = max_norm / (total_norm + 1e-6), clamped to at most
     * 1 (NaN stays NaN), in float; multiplying by exactly 1 is skipped. */
    float coef = max_norm / (tn + 1e-6f);
    float c = coef > 1.0f ? 1.0f : coef;
    if (c != 1.0f) for_chunks(&v, OP_SCALE, (double)c);
    return CT_OK;
}

ct_status ct_clip_grad_value(ct_plan *plan, float clip_value) {
    if (!plan) return CT_E_INVALID_ARG;
    if (!(clip_value >= 0.0f))
        return ct_set_error(ct_plan_context(plan), CT_E_INVALID_ARG, "clip_grad_value: clip_value %g must be >= 0",
                            (double)clip_value);
    arena_view v;
    view_init(plan, &v);
    if (clip_value != INFINITY) for_chunks(&v, OP_CLAMP, (double)clip_value);
    return CT_OK;
}
