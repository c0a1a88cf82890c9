/* tests/test_simd_norm.c - the SIMD kernels of norm.c, pool.c, shape.c and
 * embedding.c against the reference kernels, called directly through the op
 * table on hand-built ct_kargs: outputs, saved state (aux), running
 * statistics, odd sizes, threading, every dtype size for the copies. The
 * AVX2 slot always runs (when the CPU has it); the AVX-512 slot runs where the
 * CPU has it, else it is reported as skipped. */
#include <stdint.h>

#include "graph/ir.h"
#include "kernels/kernels.h"
#include "kernels/pool_plane.h"
#include "test.h"

/* ---- harness ------------------------------------------------------------------------------ */

static ct_context *g_ctx;
static int g_slots[2], g_nslots;
static double g_worst[CT_OP_COUNT]; /* max error seen per op (for the report) */

static void teardown(void) {
    ct_context_free(g_ctx);
    g_ctx = NULL;
}

static void setup(void) {
    if (g_ctx) return;
    g_ctx = test_ctx(-1, 0);
    atexit(teardown);
    g_nslots = test_fast_slots(g_ctx, g_slots);
}

static void note(ct_op op, double e) {
    if (e > g_worst[op] || e != e) g_worst[op] = e;
}

typedef struct {
    ct_node_def nd;
    ct_kargs k;
} kcall;

/* A call of `op` with output (dtype, ndim, shape). Inputs are added with kin. */
static void kinit(kcall *c, ct_op op, ct_dtype dt, int ndim, const int64_t *shape, void *out) {
    memset(c, 0, sizeof *c);
    c->nd.op = op;
    c->nd.dtype = dt;
    c->nd.ndim = ndim;
    memcpy(c->nd.shape, shape, sizeof(int64_t) * (size_t)ndim);
    c->k.ctx = g_ctx;
    c->k.node = &c->nd;
    c->k.out = ct_tensor_make(out, dt, ndim, shape);
    c->k.nthreads = ct_context_num_threads(g_ctx);
    c->k.training = 1;
}

static void kin(kcall *c, void *data, ct_dtype dt, int ndim, const int64_t *shape) {
    int i = c->nd.n_in++;
    c->k.in[i] = ct_tensor_make(data, dt, ndim, shape);
}

static double g_bn_ytol = 2e-6; /* batchnorm's y against the reference */
static int g_bn_no_ws; /* 1: the batchnorm kernels get no workspace (planes below VW: the column path) */

/* runs the kernel; layernorm_bwd_gamma gets the workspace for its pieces' partials (ct_ws_colsum), the
 * batchnorm kernels the rows path's (ct_bn_rows_ws_bytes: planes of fewer than 16 elements) unless g_bn_no_ws */
static ct_status krun(kcall *c, int slot) {
    ct_context_clear_error(g_ctx);
    void *ws = NULL;
    if (c->nd.op == CT_OP_LAYERNORM_BWD_GAMMA) {
        const ct_tensor *x = &c->k.in[1];
        int64_t D = x->shape[x->ndim - 1], R = ct_tensor_numel(x) / D;
        c->k.ws_bytes = (size_t)(ct_colsum_pieces(R, D) * D) * sizeof(double);
        c->k.ws = ws = malloc(c->k.ws_bytes);
    }
    ct_op op = c->nd.op;
    if (!g_bn_no_ws && (op == CT_OP_BATCHNORM || op == CT_OP_BATCHNORM_BWD_DATA || op == CT_OP_BATCHNORM_BWD_GAMMA)) {
        const ct_tensor *x = &c->k.in[op == CT_OP_BATCHNORM ? 0 : 1];
        int64_t N = x->shape[0], C = x->shape[1];
        c->k.ws_bytes = ct_bn_rows_ws_bytes(N, C, ct_tensor_numel(x) / (N * C));
        if (c->k.ws_bytes) c->k.ws = ws = malloc(c->k.ws_bytes);
    }
    if (op == CT_OP_EMBEDDING_BWD && c->nd.n_in > 2) { /* embedding_bwd+add: the row marks */
        c->k.ws_bytes = ct_embedding_bwd_ws(ct_tensor_numel(&c->k.in[1]), c->k.out.shape[0], c->k.out.shape[1],
                                            c->nd.ia[3] != 0).total;
        c->k.ws = ws = malloc(c->k.ws_bytes);
    }
    ct_status s = ct_op_table(c->nd.op)->kernel[slot](&c->k);
    free(ws);
    c->k.ws = NULL;
    c->k.ws_bytes = 0;
    return s;
}

static float *fbuf(size_t n) { return calloc(n ? n : 1, sizeof(float)); }
static float *frand(size_t n, unsigned seed, float lo, float hi) {
    float *p = fbuf(n);
    test_fill_uniform(p, n, seed, lo, hi);
    for (size_t i = 0; i < n; i++) p[i] *= 0.987654321f; /* full mantissas, so sums round as in real data */
    return p;
}
/* test_max_rel, where equal values (also equal infinities, NaN vs NaN) count as 0 */
static double max_rel(const float *a, const float *b, size_t n, double floor) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        if (a[i] == b[i] || (isnan(a[i]) && isnan(b[i]))) continue;
        double d = fabs((double)a[i] - b[i]) / fmax(fabs((double)b[i]), floor);
        if (!(d <= m)) m = d != d ? INFINITY : d;
    }
    return m;
}
/* saved (mean, invstd) pairs: mean error in units of the std, invstd relative */
static double stats_err(const float *mean_s, const float *mean_r, const float *is_s, const float *is_r, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double e1 = fabs((double)mean_s[i] - mean_r[i]) * is_r[i], e2 = fabs((double)is_s[i] - is_r[i]) / is_r[i];
        if (!(e1 <= m)) m = e1;
        if (!(e2 <= m)) m = e2;
    }
    return m;
}
static size_t numel(int nd, const int64_t *s) {
    size_t n = 1;
    for (int i = 0; i < nd; i++) n *= (size_t)s[i];
    return n;
}
/* dgamma = sum over many terms dy * xhat, which cancel: the result can be ~1
 * while the terms' magnitudes add to thousands, so an error relative to the
 * result measures the data, not the kernel (a float-accumulating kernel is off
 * by ~1e-5 relative on such a channel while its error is 2e-9 of the terms).
 * This measures each output's error against the sum of its terms' magnitudes,
 * the condition of the sum: |dg_s - dg_r| / sum |dy * xhat|. Element (r, c) of
 * a (R, C) view contributes to output c; batchnorm views x as (N, C, S) with
 * statistics per c, layernorm as (R, D) with statistics per row r. The limit
 * used, 5e-7, is a few float roundings (2^-24 = 6e-8) of that magnitude. */
static double gamma_err(const float *dg_s, const float *dg_r, const float *x, const float *dy, const float *aux,
                        int64_t N, int64_t C, int64_t S, int per_row) {
    double m = 0;
    for (int64_t c = 0; c < C; c++) {
        double mag = 0;
        for (int64_t b = 0; b < N; b++)
            for (int64_t i = 0; i < S; i++) {
                int64_t o = (b * C + c) * S + i, st = per_row ? b : c, R = per_row ? N : C;
                mag += fabs((double)dy[o] * ((double)x[o] - aux[st]) * aux[R + st]);
            }
        double e = fabs((double)dg_s[c] - dg_r[c]) / fmax(mag, 1e-30);
        if (!(e <= m)) m = e != e ? INFINITY : e;
    }
    return m;
}
/* 0 when a and b hold the same floats (NaN == NaN, -0 != +0 does not matter) */
static size_t fdiff_count(const float *a, const float *b, size_t n) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        if (!(a[i] == b[i] || (isnan(a[i]) && isnan(b[i])))) bad++;
    return bad;
}

/* ---- batchnorm ------------------------------------------------------------------------------ */

/* Forward (training or eval) then both backward kernels, each fast slot vs
 * the reference; backward kernels read the reference forward's aux, and the
 * fast forward's aux must match it (so slots can be mixed). */
static void bn_case(int ndim, const int64_t *shape, int training, float lo, float hi, int nthreads) {
    setup();
    int64_t C = shape[1];
    size_t n = numel(ndim, shape);
    float *x = frand(n, 11, lo, hi), *gamma = frand((size_t)C, 12, 0.5f, 1.5f), *beta = frand((size_t)C, 13, -1, 1);
    float *rm0 = frand((size_t)C, 14, -0.5f, 0.5f), *rv0 = frand((size_t)C, 15, 0.5f, 2.0f);
    float *dy = frand(n, 16, -1, 1);
    float *y_r = fbuf(n), *y_s = fbuf(n), *aux_r = fbuf(2 * (size_t)C), *aux_s = fbuf(2 * (size_t)C);
    float *rm_r = fbuf((size_t)C), *rv_r = fbuf((size_t)C), *rm_s = fbuf((size_t)C), *rv_s = fbuf((size_t)C);
    float *dx_r = fbuf(n), *dx_s = fbuf(n), *dg_r = fbuf((size_t)C), *dg_s = fbuf((size_t)C);
    int64_t cs[1] = {C};
    memcpy(rm_r, rm0, sizeof(float) * (size_t)C);
    memcpy(rv_r, rv0, sizeof(float) * (size_t)C);
    kcall f, bd, bg;
    kinit(&f, CT_OP_BATCHNORM, CT_F32, ndim, shape, y_r);
    kin(&f, x, CT_F32, ndim, shape);
    kin(&f, gamma, CT_F32, 1, cs);
    kin(&f, beta, CT_F32, 1, cs);
    kin(&f, rm_r, CT_F32, 1, cs);
    kin(&f, rv_r, CT_F32, 1, cs);
    f.nd.fa[0] = 0.1f;
    f.nd.fa[1] = 1e-5f;
    f.k.training = training;
    if (nthreads) f.k.nthreads = nthreads;
    f.k.aux = aux_r;
    CHECK_OK(g_ctx, krun(&f, CT_KERNEL_REF));
    /* backward: dy, x, gamma, fwd -> dx ; dy, x, fwd -> dgamma */
    kinit(&bd, CT_OP_BATCHNORM_BWD_DATA, CT_F32, ndim, shape, dx_r);
    kin(&bd, dy, CT_F32, ndim, shape);
    kin(&bd, x, CT_F32, ndim, shape);
    kin(&bd, gamma, CT_F32, 1, cs);
    kin(&bd, y_r, CT_F32, ndim, shape);
    bd.k.in_aux[3] = aux_r;
    kinit(&bg, CT_OP_BATCHNORM_BWD_GAMMA, CT_F32, 1, cs, dg_r);
    kin(&bg, dy, CT_F32, ndim, shape);
    kin(&bg, x, CT_F32, ndim, shape);
    kin(&bg, y_r, CT_F32, ndim, shape);
    bg.k.in_aux[2] = aux_r;
    if (nthreads) bd.k.nthreads = bg.k.nthreads = nthreads;
    CHECK_OK(g_ctx, krun(&bd, CT_KERNEL_REF));
    CHECK_OK(g_ctx, krun(&bg, CT_KERNEL_REF));
    for (int si = 0; si < g_nslots; si++) {
        int slot = g_slots[si];
        memcpy(rm_s, rm0, sizeof(float) * (size_t)C);
        memcpy(rv_s, rv0, sizeof(float) * (size_t)C);
        f.k.out.data = y_s;
        f.k.in[3].data = rm_s;
        f.k.in[4].data = rv_s;
        f.k.aux = aux_s;
        memset(aux_s, 0xff, sizeof(float) * 2 * (size_t)C);
        CHECK_OK(g_ctx, krun(&f, slot));
        double ey = max_rel(y_s, y_r, n, 1.0), ea = stats_err(aux_s, aux_r, aux_s + C, aux_r + C, (size_t)C);
        /* running mean: error in units of the batch std; running var: relative */
        double erm = stats_err(rm_s, rm_r, aux_r + C, aux_r + C, (size_t)C), erv = max_rel(rv_s, rv_r, (size_t)C, 1e-3);
        note(CT_OP_BATCHNORM, fmax(fmax(ey, ea), fmax(erm, erv)));
        CHECK_MSG(ey < g_bn_ytol && ea < 2e-6, "%s batchnorm (%lld, %lld, ...) y err %g aux err %g",
                  ct_kernel_slot_name(slot), (long long)shape[0], (long long)shape[1], ey, ea);
        CHECK_MSG(erm < 1e-6 && erv < 1e-6, "%s running stats err %g %g", ct_kernel_slot_name(slot), erm, erv);
        if (!training) CHECK(memcmp(rm_s, rm0, sizeof(float) * (size_t)C) == 0 && memcmp(rv_s, rv0, sizeof(float) * (size_t)C) == 0);
        bd.k.out.data = dx_s;
        bg.k.out.data = dg_s;
        CHECK_OK(g_ctx, krun(&bd, slot));
        CHECK_OK(g_ctx, krun(&bg, slot));
        double edx = max_rel(dx_s, dx_r, n, 1.0);
        double edg = gamma_err(dg_s, dg_r, x, dy, aux_r, shape[0], C, (int64_t)(n / (size_t)shape[0] / (size_t)C), 0);
        note(CT_OP_BATCHNORM_BWD_DATA, edx);
        note(CT_OP_BATCHNORM_BWD_GAMMA, edg);
        CHECK_MSG(edx < 1e-5 && edg < 5e-7, "%s batchnorm bwd err dx %g dgamma %g", ct_kernel_slot_name(slot), edx, edg);
    }
    free(x); free(gamma); free(beta); free(rm0); free(rv0); free(dy); free(y_r); free(y_s); free(aux_r); free(aux_s);
    free(rm_r); free(rv_r); free(rm_s); free(rv_s); free(dx_r); free(dx_s); free(dg_r); free(dg_s);
}

TEST(batchnorm_train_small) {
    bn_case(4, (int64_t[]){4, 3, 7, 7}, 1, -1, 1, 0);
    bn_case(4, (int64_t[]){3, 5, 5, 9}, 1, 2, 4, 3); /* mean far from 0, 3 threads */
}
TEST(batchnorm_train_2d_and_small_spatial) {
    bn_case(2, (int64_t[]){37, 33}, 1, -1, 3, 0);   /* (N, C): column path */
    bn_case(3, (int64_t[]){9, 20, 3}, 1, -2, 2, 0); /* S = 3 */
    bn_case(4, (int64_t[]){6, 70, 2, 2}, 1, 0, 1, 0);
    bn_case(2, (int64_t[]){1, 5}, 1, -1, 1, 0);     /* M = 1 */
    bn_case(2, (int64_t[]){3000, 300}, 1, -1, 1, 0); /* several channel blocks, threads */
}
TEST(batchnorm_eval) {
    bn_case(4, (int64_t[]){4, 3, 7, 7}, 0, -1, 1, 0);
    bn_case(2, (int64_t[]){37, 33}, 0, -1, 1, 0);
}
/* the column path (planes below VW, no workspace: what a kernel called without one runs) */
TEST(batchnorm_column_path) {
    g_bn_no_ws = 1;
    bn_case(2, (int64_t[]){37, 33}, 1, -1, 3, 0);
    bn_case(3, (int64_t[]){9, 20, 3}, 1, -2, 2, 0);
    bn_case(2, (int64_t[]){3000, 300}, 1, -1, 1, 0);
    bn_case(2, (int64_t[]){37, 33}, 0, -1, 1, 0);
    g_bn_no_ws = 0;
}
/* the rows path on 2-D inputs (M, C) (channels-last activations as (N*H*W, C)): M in the thousands (many
 * row pieces, the last ragged), C below, at and above the vector widths and column blocks; training (also
 * with the mean far from 0: the pieces' statistics combined) and eval; 1 and 3 threads; S = 2, 5 too */
TEST(batchnorm_rows_path) {
    static const int64_t cs[] = {1, 3, 17, 32, 64, 100, 256, 1024};
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        int64_t M = cs[i] >= 256 ? 1100 : 3001;
        bn_case(2, (int64_t[]){M, cs[i]}, 1, -1, 3, i % 2 ? 3 : 0);
        bn_case(2, (int64_t[]){M, cs[i]}, 0, -1, 1, 0);
    }
    /* mean / std ~ 3500: the statistics to 2e-6 still; y (every SIMD path's (x - mean) in float, mean rounded
       to float: ~3e-5 absolute, times invstd ~3.5) to 2e-4 */
    g_bn_ytol = 2e-4;
    bn_case(2, (int64_t[]){4099, 17}, 1, 1000, 1001, 0);
    g_bn_ytol = 2e-6;
    bn_case(2, (int64_t[]){2500, 40}, 1, -30, -10, 2);
    bn_case(3, (int64_t[]){1500, 7, 2}, 1, -1, 1, 0);
    bn_case(4, (int64_t[]){700, 9, 1, 5}, 1, -1, 1, 3);
}

/* The rows path's results (output, statistics, running statistics, dx, dgamma) are the same bits on 1, 2
 * and 3 threads: the row pieces depend on the shape only. */
TEST(batchnorm_rows_threads_bit_identical) {
    setup();
    static const int64_t shapes[][2] = {{3001, 17}, {2000, 64}, {1100, 100}, {25088, 32}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int64_t N = shapes[si][0], C = shapes[si][1], sh[2] = {N, C}, csh[1] = {C};
        const size_t n = (size_t)(N * C);
        float *x = frand(n, 21, -1, 2), *dy = frand(n, 22, -1, 1), *ga = frand((size_t)C, 23, 0.5f, 1.5f);
        float *be = frand((size_t)C, 24, -1, 1);
        for (int si2 = 0; si2 < g_nslots; si2++) {
            int slot = g_slots[si2];
            float *res[3];
            size_t rn = 3 * n + 6 * (size_t)C;
            for (int t = 0; t < 3; t++) {
                float *r = res[t] = fbuf(rn), *y = r, *dx = r + n, *aux = r + 2 * n, *rm = aux + 2 * C, *rv = rm + C,
                      *dg = rv + C;
                for (int64_t c = 0; c < C; c++) rv[c] = 1;
                kcall f, bd, bg;
                kinit(&f, CT_OP_BATCHNORM, CT_F32, 2, sh, y);
                kin(&f, x, CT_F32, 2, sh);
                kin(&f, ga, CT_F32, 1, csh);
                kin(&f, be, CT_F32, 1, csh);
                kin(&f, rm, CT_F32, 1, csh);
                kin(&f, rv, CT_F32, 1, csh);
                f.nd.fa[0] = 0.1f;
                f.nd.fa[1] = 1e-5f;
                f.k.aux = aux;
                f.k.nthreads = t + 1;
                CHECK_OK(g_ctx, krun(&f, slot));
                kinit(&bd, CT_OP_BATCHNORM_BWD_DATA, CT_F32, 2, sh, dx);
                kin(&bd, dy, CT_F32, 2, sh);
                kin(&bd, x, CT_F32, 2, sh);
                kin(&bd, ga, CT_F32, 1, csh);
                kin(&bd, y, CT_F32, 2, sh);
                bd.k.in_aux[3] = aux;
                bd.k.nthreads = t + 1;
                CHECK_OK(g_ctx, krun(&bd, slot));
                kinit(&bg, CT_OP_BATCHNORM_BWD_GAMMA, CT_F32, 1, csh, dg);
                kin(&bg, dy, CT_F32, 2, sh);
                kin(&bg, x, CT_F32, 2, sh);
                kin(&bg, y, CT_F32, 2, sh);
                bg.k.in_aux[2] = aux;
                bg.k.nthreads = t + 1;
                CHECK_OK(g_ctx, krun(&bg, slot));
            }
            for (int t = 1; t < 3; t++)
                CHECK_MSG(!memcmp(res[0], res[t], rn * sizeof(float)), "%s (%lld, %lld): %d threads differ from 1",
                          ct_kernel_slot_name(slot), (long long)N, (long long)C, t + 1);
            printf("    %-7s (%lld, %lld): 1, 2, 3 threads bit-identical\n", ct_kernel_slot_name(slot), (long long)N,
                   (long long)C);
            for (int t = 0; t < 3; t++) free(res[t]);
        }
        free(x); free(dy); free(ga); free(be);
    }
}
TEST(batchnorm_large_threads) {
    bn_case(4, (int64_t[]){16, 32, 28, 28}, 1, -1, 1, 0);
    bn_case(4, (int64_t[]){32, 64, 14, 14}, 1, 0.5f, 1.5f, 3);
}

/* ---- layernorm ------------------------------------------------------------------------------ */

static void ln_case(int ndim, const int64_t *shape, float lo, float hi) {
    setup();
    int64_t D = shape[ndim - 1];
    size_t n = numel(ndim, shape), R = n / (size_t)D;
    int64_t ds[1] = {D};
    float *x = frand(n, 21, lo, hi), *gamma = frand((size_t)D, 22, 0.5f, 1.5f), *beta = frand((size_t)D, 23, -1, 1);
    float *dy = frand(n, 24, -1, 1);
    float *y_r = fbuf(n), *y_s = fbuf(n), *aux_r = fbuf(2 * R), *aux_s = fbuf(2 * R);
    float *dx_r = fbuf(n), *dx_s = fbuf(n), *dg_r = fbuf((size_t)D), *dg_s = fbuf((size_t)D);
    kcall f, bd, bg;
    kinit(&f, CT_OP_LAYERNORM, CT_F32, ndim, shape, y_r);
    kin(&f, x, CT_F32, ndim, shape);
    kin(&f, gamma, CT_F32, 1, ds);
    kin(&f, beta, CT_F32, 1, ds);
    f.nd.fa[0] = 1e-5f;
    f.k.aux = aux_r;
    CHECK_OK(g_ctx, krun(&f, CT_KERNEL_REF));
    kinit(&bd, CT_OP_LAYERNORM_BWD_DATA, CT_F32, ndim, shape, dx_r);
    kin(&bd, dy, CT_F32, ndim, shape);
    kin(&bd, x, CT_F32, ndim, shape);
    kin(&bd, gamma, CT_F32, 1, ds);
    kin(&bd, y_r, CT_F32, ndim, shape);
    bd.k.in_aux[3] = aux_r;
    kinit(&bg, CT_OP_LAYERNORM_BWD_GAMMA, CT_F32, 1, ds, dg_r);
    kin(&bg, dy, CT_F32, ndim, shape);
    kin(&bg, x, CT_F32, ndim, shape);
    kin(&bg, y_r, CT_F32, ndim, shape);
    bg.k.in_aux[2] = aux_r;
    CHECK_OK(g_ctx, krun(&bd, CT_KERNEL_REF));
    CHECK_OK(g_ctx, krun(&bg, CT_KERNEL_REF));
    for (int si = 0; si < g_nslots; si++) {
        int slot = g_slots[si];
        f.k.out.data = y_s;
        f.k.aux = aux_s;
        CHECK_OK(g_ctx, krun(&f, slot));
        double ey = max_rel(y_s, y_r, n, 1.0), ea = stats_err(aux_s, aux_r, aux_s + R, aux_r + R, R);
        note(CT_OP_LAYERNORM, fmax(ey, ea));
        CHECK_MSG(ey < 2e-6 && ea < 2e-6, "%s layernorm y err %g aux err %g", ct_kernel_slot_name(slot), ey, ea);
        bd.k.out.data = dx_s;
        bg.k.out.data = dg_s;
        CHECK_OK(g_ctx, krun(&bd, slot));
        CHECK_OK(g_ctx, krun(&bg, slot));
        double edx = max_rel(dx_s, dx_r, n, 1.0), edg = gamma_err(dg_s, dg_r, x, dy, aux_r, (int64_t)R, D, 1, 1);
        note(CT_OP_LAYERNORM_BWD_DATA, edx);
        note(CT_OP_LAYERNORM_BWD_GAMMA, edg);
        CHECK_MSG(edx < 1e-5 && edg < 5e-7, "%s layernorm bwd err dx %g dgamma %g", ct_kernel_slot_name(slot), edx, edg);
        /* the thread count does not change the result */
        float *dg_1 = fbuf((size_t)D);
        bg.k.out.data = dg_1;
        bg.k.nthreads = 1;
        CHECK_OK(g_ctx, krun(&bg, slot));
        bg.k.nthreads = ct_context_num_threads(g_ctx);
        CHECK(memcmp(dg_1, dg_s, sizeof(float) * (size_t)D) == 0);
        free(dg_1);
    }
    free(x); free(gamma); free(beta); free(dy); free(y_r); free(y_s); free(aux_r); free(aux_s);
    free(dx_r); free(dx_s); free(dg_r); free(dg_s);
}

TEST(layernorm_small) {
    ln_case(2, (int64_t[]){5, 33}, -1, 1);
    ln_case(3, (int64_t[]){3, 4, 7}, 3, 5);
    ln_case(2, (int64_t[]){6, 1}, -1, 1);
    ln_case(2, (int64_t[]){4, 1000}, -1, 1);
}
TEST(layernorm_large_threads) {
    ln_case(2, (int64_t[]){512, 768}, -1, 1);
    ln_case(3, (int64_t[]){64, 64, 33}, -2, 2); /* many rows, small D: row pieces */
    ln_case(2, (int64_t[]){2048, 384}, -1, 1);   /* gpt-char-small's: 32 pieces, partials in the workspace */
}

/* add+layernorm (ADD_LAYERNORM): s = a + b written into in[2], y = layernorm(s), against the unfused
 * binary add and layernorm kernels of the same slot, bit for bit (s, y and the statistics), for dtype
 * mixes of the plans (FP32; a BF16 plan's FP32 residual + BF16 branch -> FP32 sum, BF16 y; all BF16),
 * at 1 and the context's threads; the reference fused kernel equals the reference pair too. */
static void add_ln_case(int64_t R, int64_t D, ct_dtype ta, ct_dtype tb, ct_dtype ts, ct_dtype ty) {
    setup();
    int64_t shape[2] = {R, D}, ds[1] = {D};
    size_t n = (size_t)(R * D);
    float *fa = frand(n, 31, -2, 2), *fb = frand(n, 32, -1, 1), *gamma = frand((size_t)D, 33, 0.5f, 1.5f);
    float *beta = frand((size_t)D, 34, -1, 1);
    void *a = calloc(n, 4), *b = calloc(n, 4), *su = calloc(n, 4), *sf = calloc(n, 4), *yu = calloc(n, 4), *yf = calloc(n, 4);
    float *au = fbuf(2 * (size_t)R), *af = fbuf(2 * (size_t)R);
    for (size_t i = 0; i < n; i++) { /* the operands in their dtypes */
        if (ta == CT_BF16) ((uint16_t *)a)[i] = ct_f32_to_bf16(fa[i]);
        else ((float *)a)[i] = fa[i];
        if (tb == CT_BF16) ((uint16_t *)b)[i] = ct_f32_to_bf16(fb[i]);
        else ((float *)b)[i] = fb[i];
    }
    const size_t ss = n * ct_dtype_size(ts), ys = n * ct_dtype_size(ty);
    for (int si = -1; si < g_nslots; si++) {
        int slot = si < 0 ? CT_KERNEL_REF : g_slots[si];
        if (slot == CT_KERNEL_REF && (ta != CT_F32 || tb != CT_F32 || ts != CT_F32 || ty != CT_F32)) continue; /* FP32 copies */
        for (int nt = 1; nt <= 2; nt++) {
            kcall add, ln, fu;
            kinit(&add, CT_OP_BINARY, ts, 2, shape, su);
            add.nd.ia[0] = CT_BIN_ADD;
            kin(&add, a, ta, 2, shape);
            kin(&add, b, tb, 2, shape);
            kinit(&ln, CT_OP_LAYERNORM, ty, 2, shape, yu);
            kin(&ln, su, ts, 2, shape);
            kin(&ln, gamma, CT_F32, 1, ds);
            kin(&ln, beta, CT_F32, 1, ds);
            ln.nd.fa[0] = 1e-5f;
            ln.k.aux = au;
            kinit(&fu, CT_OP_ADD_LAYERNORM, ty, 2, shape, yf);
            kin(&fu, a, ta, 2, shape);
            kin(&fu, b, tb, 2, shape);
            kin(&fu, sf, ts, 2, shape);
            kin(&fu, gamma, CT_F32, 1, ds);
            kin(&fu, beta, CT_F32, 1, ds);
            fu.nd.fa[0] = 1e-5f;
            fu.nd.ia[0] = ts;
            fu.k.aux = af;
            add.k.nthreads = ln.k.nthreads = fu.k.nthreads = nt == 1 ? 1 : ct_context_num_threads(g_ctx);
            memset(sf, 0xff, ss); /* NaNs: every element must be written */
            CHECK_OK(g_ctx, krun(&add, slot));
            CHECK_OK(g_ctx, krun(&ln, slot));
            CHECK_OK(g_ctx, krun(&fu, slot));
            int same = !memcmp(su, sf, ss) && !memcmp(yu, yf, ys) && !memcmp(au, af, 2 * sizeof(float) * (size_t)R);
            CHECK_MSG(same, "%s add+layernorm (%lld x %lld, %s + %s -> %s, y %s, %d threads) differs from add, layernorm",
                      ct_kernel_slot_name(slot), (long long)R, (long long)D, ct_dtype_name(ta), ct_dtype_name(tb),
                      ct_dtype_name(ts), ct_dtype_name(ty), nt);
        }
    }
    free(fa); free(fb); free(gamma); free(beta); free(a); free(b); free(su); free(sf); free(yu); free(yf); free(au); free(af);
}

TEST(add_layernorm_equals_add_then_layernorm) {
    static const int64_t sizes[][2] = {{5, 33}, {3, 7}, {4, 1000}, {512, 384}};
    for (int z = 0; z < 4; z++) {
        add_ln_case(sizes[z][0], sizes[z][1], CT_F32, CT_F32, CT_F32, CT_F32);
        if (sizes[z][1] < 16) continue; /* 16-bit rows of fewer than a vector decline (FP32 copies) */
        add_ln_case(sizes[z][0], sizes[z][1], CT_F32, CT_BF16, CT_F32, CT_BF16);
        add_ln_case(sizes[z][0], sizes[z][1], CT_BF16, CT_BF16, CT_BF16, CT_BF16);
    }
}

/* ---- pooling ---------------------------------------------------------------------------------- */

static int64_t pool_out(int64_t n, int k, int s, int p) { return (n + 2 * p - k) / s + 1; }

/* square window attributes in the pool nodes' layout (src/graph/ir.h):
 * ia kh kw sh sw ph pw dh dw, fa[0] count_include_pad */
static void pool_attrs(ct_node_def *nd, int K, int S, int P) {
    nd->ia[0] = nd->ia[1] = K;
    nd->ia[2] = nd->ia[3] = S;
    nd->ia[4] = nd->ia[5] = P;
    nd->ia[6] = nd->ia[7] = 1;
    nd->fa[0] = 1.0f;
}

/* maxpool and avgpool forward + backward for one configuration. Inputs are
 * quantized (ties) and, with `special`, hold NaN and -inf. */
static void pool_case(int64_t N, int64_t C, int64_t H, int64_t W, int K, int S, int P, int special) {
    setup();
    int64_t OH = pool_out(H, K, S, P), OW = pool_out(W, K, S, P);
    int64_t xs[4] = {N, C, H, W}, ys[4] = {N, C, OH, OW};
    size_t nx = numel(4, xs), ny = numel(4, ys);
    /* xq: quantized (ties) for max pooling; xa: not, for average pooling */
    float *xq = frand(nx, 31, -1, 1), *xa = frand(nx, 33, -1, 1), *dy = frand(ny, 32, -1, 1);
    for (size_t i = 0; i < nx; i++) {
        xq[i] = roundf(xq[i] * 4) / 4;
        xa[i] *= 1.2345679f; /* full mantissas: sums round */
    }
    if (special)
        for (size_t i = 0; i < nx; i += 13) {
            float v = (i / 13) % 3 == 0 ? NAN : (i / 13) % 3 == 1 ? -INFINITY : xq[i];
            xq[i] = v;
            xa[i] = isnan(v) ? v : xa[i];
        }
    float *y_r = fbuf(ny), *y_s = fbuf(ny), *dx_r = fbuf(nx), *dx_s = fbuf(nx);
    int32_t *a_r = calloc(ny, 4), *a_s = calloc(ny, 4);
    for (int avg = 0; avg < 2; avg++) {
        kcall f, b;
        kinit(&f, avg ? CT_OP_AVGPOOL2D : CT_OP_MAXPOOL2D, CT_F32, 4, ys, y_r);
        kin(&f, avg ? xa : xq, CT_F32, 4, xs);
        pool_attrs(&f.nd, K, S, P);
        f.k.aux = avg ? NULL : a_r;
        kinit(&b, avg ? CT_OP_AVGPOOL2D_BWD : CT_OP_MAXPOOL2D_BWD, CT_F32, 4, xs, dx_r);
        kin(&b, dy, CT_F32, 4, ys);
        if (!avg) {
            kin(&b, y_r, CT_F32, 4, ys);
            b.k.in_aux[1] = a_r;
        }
        pool_attrs(&b.nd, K, S, P);
        CHECK_OK(g_ctx, krun(&f, CT_KERNEL_REF));
        CHECK_OK(g_ctx, krun(&b, CT_KERNEL_REF));
        for (int si = 0; si < g_nslots; si++) {
            int slot = g_slots[si];
            const char *sn = ct_kernel_slot_name(slot);
            f.k.out.data = y_s;
            f.k.aux = avg ? NULL : a_s;
            memset(a_s, 0x7f, ny * 4);
            CHECK_OK(g_ctx, krun(&f, slot));
            if (avg) {
                double e = max_rel(y_s, y_r, ny, 1.0);
                note(CT_OP_AVGPOOL2D, e);
                CHECK_MSG(e < 1e-6, "%s avgpool k%d s%d p%d err %g", sn, K, S, P, e);
            } else {
                note(CT_OP_MAXPOOL2D, (double)fdiff_count(y_s, y_r, ny));
                CHECK_MSG(fdiff_count(y_s, y_r, ny) == 0, "%s maxpool k%d s%d p%d: %zu values differ", sn, K, S, P,
                          fdiff_count(y_s, y_r, ny));
                /* one byte (a window tap) per output for windows of <= 255 taps, else an int32 index */
                CHECK_MSG(memcmp(a_s, a_r, ny * ct_maxpool_arg_size(K, K)) == 0, "%s maxpool k%d s%d p%d: argmax differs",
                          sn, K, S, P);
            }
            b.k.out.data = dx_s;
            memset(dx_s, 0x7f, nx * 4); /* every element must be written */
            CHECK_OK(g_ctx, krun(&b, slot));
            size_t bad = fdiff_count(dx_s, dx_r, nx);
            note(avg ? CT_OP_AVGPOOL2D_BWD : CT_OP_MAXPOOL2D_BWD, (double)bad);
            CHECK_MSG(bad == 0, "%s %s bwd k%d s%d p%d: %zu values differ", sn, avg ? "avgpool" : "maxpool", K, S, P,
                      bad);
            f.k.out.data = y_r;
            b.k.out.data = dx_r;
            if (!avg) f.k.aux = a_r;
        }
    }
    free(xq); free(xa); free(dy); free(y_r); free(y_s); free(dx_r); free(dx_s); free(a_r); free(a_s);
}

TEST(pool_2x2_stride2) {
    pool_case(2, 3, 7, 7, 2, 2, 0, 0);
    pool_case(2, 3, 28, 28, 2, 2, 0, 1);
    pool_case(1, 2, 9, 40, 2, 2, 0, 1);  /* OW = 20: full vectors + tails, odd H */
    pool_case(1, 1, 2, 2, 2, 2, 0, 0);
    pool_case(3, 2, 5, 35, 2, 2, 0, 1); /* odd W, OW = 17 (AVX-512 tail) */
}
TEST(pool_generic_configs) {
    pool_case(2, 3, 7, 7, 3, 2, 1, 1);  /* stride != kernel, padding */
    pool_case(2, 2, 9, 8, 3, 1, 1, 1);
    pool_case(2, 2, 8, 8, 2, 1, 0, 0);
    pool_case(1, 3, 10, 11, 3, 3, 0, 1);
    pool_case(1, 2, 40, 37, 16, 8, 0, 1); /* 256 taps: the argmax as int32 flat indices */
    pool_case(1, 2, 6, 6, 2, 2, 1, 1);  /* 2x2 s2 with padding: generic */
    pool_case(1, 1, 5, 5, 5, 1, 2, 0);
}
TEST(pool_large_threads) {
    pool_case(16, 32, 28, 28, 2, 2, 0, 0);
    pool_case(16, 64, 14, 14, 2, 2, 0, 1);
    pool_case(8, 16, 15, 15, 3, 2, 1, 1);
}

/* ---- shape ops ---------------------------------------------------------------------------------- */

static void *bytes_rand(size_t n, unsigned seed) {
    unsigned char *p = malloc(n ? n : 1);
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(ct_rand_uniform(seed, 5, i) * 256);
    return p;
}

static void transpose_case(ct_dtype dt, int nd, const int64_t *shape, const int *perm) {
    setup();
    size_t es = ct_dtype_size(dt), n = numel(nd, shape);
    int64_t ys[CT_MAX_DIMS];
    for (int i = 0; i < nd; i++) ys[i] = shape[perm[i]];
    void *x = bytes_rand(n * es, 41), *y_r = calloc(n + 1, es), *y_s = calloc(n + 1, es);
    kcall c;
    kinit(&c, CT_OP_TRANSPOSE, dt, nd, ys, y_r);
    kin(&c, x, dt, nd, shape);
    for (int i = 0; i < nd; i++) c.nd.ia[i] = perm[i];
    CHECK_OK(g_ctx, krun(&c, CT_KERNEL_REF));
    for (int si = 0; si < g_nslots; si++) {
        c.k.out.data = y_s;
        memset(y_s, 0xab, (n + 1) * es);
        CHECK_OK(g_ctx, krun(&c, g_slots[si]));
        CHECK_MSG(memcmp(y_s, y_r, n * es) == 0, "%s transpose %s nd %d perm %d%d%d%d differs",
                  ct_kernel_slot_name(g_slots[si]), ct_dtype_name(dt), nd, perm[0], perm[1], nd > 2 ? perm[2] : 0,
                  nd > 3 ? perm[3] : 0);
        CHECK(((unsigned char *)y_s)[n * es] == 0xab); /* nothing written past the end */
    }
    free(x); free(y_r); free(y_s);
}

static int next_perm(int *p, int n) {
    int i = n - 2;
    while (i >= 0 && p[i] > p[i + 1]) i--;
    if (i < 0) return 0;
    int j = n - 1;
    while (p[j] < p[i]) j--;
    int t = p[i]; p[i] = p[j]; p[j] = t;
    for (int a = i + 1, b = n - 1; a < b; a++, b--) { t = p[a]; p[a] = p[b]; p[b] = t; }
    return 1;
}

TEST(transpose_all_perms) {
    int before = ct_test_failed_checks;
    transpose_case(CT_F32, 2, (int64_t[]){33, 17}, (int[]){1, 0});
    transpose_case(CT_F32, 2, (int64_t[]){1, 17}, (int[]){1, 0});
    static const ct_dtype dts[] = {CT_F32, CT_I32, CT_BF16, CT_U8, CT_I64};
    for (int di = 0; di < 5; di++) {
        int p3[3] = {0, 1, 2};
        do transpose_case(dts[di], 3, (int64_t[]){5, 7, 9}, p3);
        while (next_perm(p3, 3) && ct_test_failed_checks == before);
        int p4[4] = {0, 1, 2, 3};
        do transpose_case(dts[di], 4, (int64_t[]){3, 4, 5, 6}, p4);
        while (next_perm(p4, 4) && ct_test_failed_checks == before);
        int q4[4] = {0, 1, 2, 3}; /* size-1 dims and 8x8 blocks */
        do transpose_case(dts[di], 4, (int64_t[]){1, 17, 1, 24}, q4);
        while (next_perm(q4, 4) && ct_test_failed_checks == before);
    }
    transpose_case(CT_F32, 5, (int64_t[]){2, 3, 4, 5, 6}, (int[]){4, 0, 3, 1, 2});
    transpose_case(CT_F32, 6, (int64_t[]){2, 3, 2, 3, 2, 5}, (int[]){5, 3, 1, 0, 2, 4});
}
TEST(transpose_large_threads) {
    transpose_case(CT_F32, 3, (int64_t[]){64, 257, 129}, (int[]){0, 2, 1});
    transpose_case(CT_F32, 4, (int64_t[]){32, 64, 14, 14}, (int[]){0, 2, 3, 1});
    transpose_case(CT_F32, 4, (int64_t[]){8, 64, 16, 32}, (int[]){0, 2, 1, 3}); /* inner unchanged */
    transpose_case(CT_BF16, 2, (int64_t[]){1000, 999}, (int[]){1, 0});
    transpose_case(CT_I64, 3, (int64_t[]){130, 70, 33}, (int[]){2, 1, 0});
}

static void concat_case(ct_dtype dt, int nd, const int64_t *base, int axis, int n_in, const int64_t *sizes) {
    setup();
    size_t es = ct_dtype_size(dt);
    int64_t os[CT_MAX_DIMS];
    memcpy(os, base, sizeof(int64_t) * (size_t)nd);
    os[axis] = 0;
    void *xs[CT_MAX_INPUTS];
    int64_t shp[CT_MAX_INPUTS][CT_MAX_DIMS];
    for (int j = 0; j < n_in; j++) {
        memcpy(shp[j], base, sizeof(int64_t) * (size_t)nd);
        shp[j][axis] = sizes[j];
        os[axis] += sizes[j];
        xs[j] = bytes_rand(numel(nd, shp[j]) * es, 50 + (unsigned)j);
    }
    size_t n = numel(nd, os);
    void *y_r = calloc(n, es), *y_s = calloc(n, es);
    kcall c;
    kinit(&c, CT_OP_CONCAT, dt, nd, os, y_r);
    for (int j = 0; j < n_in; j++) kin(&c, xs[j], dt, nd, shp[j]);
    c.nd.ia[0] = axis;
    CHECK_OK(g_ctx, krun(&c, CT_KERNEL_REF));
    for (int si = 0; si < g_nslots; si++) {
        c.k.out.data = y_s;
        memset(y_s, 0, n * es);
        CHECK_OK(g_ctx, krun(&c, g_slots[si]));
        CHECK_MSG(memcmp(y_s, y_r, n * es) == 0, "%s concat axis %d differs", ct_kernel_slot_name(g_slots[si]), axis);
    }
    /* slice each piece back out (slice and slice_bwd) */
    void *full = y_r;
    int64_t off = 0;
    for (int j = 0; j < n_in; j++) {
        size_t m = numel(nd, shp[j]);
        void *s_r = calloc(m, es), *s_s = calloc(m, es), *g_r = calloc(n, es), *g_s = calloc(n, es);
        kcall sl, sb;
        kinit(&sl, CT_OP_SLICE, dt, nd, shp[j], s_r);
        kin(&sl, full, dt, nd, os);
        sl.nd.ia[0] = axis; sl.nd.ia[1] = off; sl.nd.ia[2] = off + sizes[j];
        kinit(&sb, CT_OP_SLICE_BWD, dt, nd, os, g_r);
        kin(&sb, xs[j], dt, nd, shp[j]);
        sb.nd.ia[0] = axis; sb.nd.ia[1] = off; sb.nd.ia[2] = off + sizes[j];
        CHECK_OK(g_ctx, krun(&sl, CT_KERNEL_REF));
        CHECK_OK(g_ctx, krun(&sb, CT_KERNEL_REF));
        CHECK(memcmp(s_r, xs[j], m * es) == 0);
        for (int si = 0; si < g_nslots; si++) {
            sl.k.out.data = s_s;
            sb.k.out.data = g_s;
            memset(s_s, 0x5a, m * es);
            memset(g_s, 0x5a, n * es);
            CHECK_OK(g_ctx, krun(&sl, g_slots[si]));
            CHECK_OK(g_ctx, krun(&sb, g_slots[si]));
            CHECK_MSG(memcmp(s_s, s_r, m * es) == 0, "%s slice differs", ct_kernel_slot_name(g_slots[si]));
            CHECK_MSG(memcmp(g_s, g_r, n * es) == 0, "%s slice_bwd differs", ct_kernel_slot_name(g_slots[si]));
        }
        off += sizes[j];
        free(s_r); free(s_s); free(g_r); free(g_s);
    }
    for (int j = 0; j < n_in; j++) free(xs[j]);
    free(y_r); free(y_s);
}

TEST(concat_slice_small) {
    concat_case(CT_F32, 3, (int64_t[]){2, 0, 7}, 1, 3, (int64_t[]){3, 5, 4});
    concat_case(CT_I32, 3, (int64_t[]){2, 0, 7}, 1, 3, (int64_t[]){3, 5, 4});
    concat_case(CT_I32, 2, (int64_t[]){0, 5}, 0, 2, (int64_t[]){3, 1});
    concat_case(CT_F32, 4, (int64_t[]){2, 3, 4, 0}, 3, 3, (int64_t[]){1, 6, 2});
    concat_case(CT_U8, 3, (int64_t[]){3, 0, 5}, 1, 2, (int64_t[]){7, 1});
    concat_case(CT_I64, 1, (int64_t[]){0}, 0, 3, (int64_t[]){2, 3, 4});
}
TEST(concat_slice_large_threads) {
    concat_case(CT_F32, 3, (int64_t[]){512, 0, 64}, 1, 3, (int64_t[]){3, 5, 4});    /* many rows */
    concat_case(CT_I32, 2, (int64_t[]){0, 4096}, 0, 3, (int64_t[]){20, 30, 17});   /* one row: byte chunks */
    concat_case(CT_F32, 3, (int64_t[]){3, 0, 30000}, 1, 2, (int64_t[]){2, 3});     /* few rows */
}

/* ---- embedding ---------------------------------------------------------------------------------- */

static void embedding_case(int64_t V, int64_t D, int nd, const int64_t *ishape) {
    setup();
    size_t n = numel(nd, ishape);
    int64_t ws[2] = {V, D}, ys[CT_MAX_DIMS];
    memcpy(ys, ishape, sizeof(int64_t) * (size_t)nd);
    ys[nd] = D;
    float *w = frand((size_t)(V * D), 61, -1, 1), *dy = frand(n * (size_t)D, 62, -1, 1);
    int32_t *ids = malloc(n * 4);
    for (size_t i = 0; i < n; i++) {
        int64_t m = i % 3 ? V : CT_MIN(V, 4), id = (int64_t)(ct_rand_uniform(63, 1, i) * (float)m);
        ids[i] = (int32_t)CT_MIN(id, m - 1);
    }
    float *y_r = fbuf(n * (size_t)D), *y_s = fbuf(n * (size_t)D), *g_r = fbuf((size_t)(V * D)), *g_s = fbuf((size_t)(V * D));
    kcall f, b;
    kinit(&f, CT_OP_EMBEDDING, CT_F32, nd + 1, ys, y_r);
    kin(&f, w, CT_F32, 2, ws);
    kin(&f, ids, CT_I32, nd, ishape);
    kinit(&b, CT_OP_EMBEDDING_BWD, CT_F32, 2, ws, g_r);
    kin(&b, dy, CT_F32, nd + 1, ys);
    kin(&b, ids, CT_I32, nd, ishape);
    CHECK_OK(g_ctx, krun(&f, CT_KERNEL_REF));
    CHECK_OK(g_ctx, krun(&b, CT_KERNEL_REF));
    for (int si = 0; si < g_nslots; si++) {
        int slot = g_slots[si];
        f.k.out.data = y_s;
        b.k.out.data = g_s;
        memset(g_s, 0x7f, sizeof(float) * (size_t)(V * D));
        CHECK_OK(g_ctx, krun(&f, slot));
        CHECK_OK(g_ctx, krun(&b, slot));
        CHECK_MSG(memcmp(y_s, y_r, sizeof(float) * n * (size_t)D) == 0, "%s embedding differs", ct_kernel_slot_name(slot));
        size_t bad = fdiff_count(g_s, g_r, (size_t)(V * D));
        note(CT_OP_EMBEDDING_BWD, (double)bad);
        CHECK_MSG(bad == 0, "%s embedding_bwd: %zu values differ", ct_kernel_slot_name(slot), bad);
        /* out-of-range ids: same status and message as the reference */
        int32_t keep = ids[n / 2];
        for (int bad_id = 0; bad_id < 2; bad_id++) {
            ids[n / 2] = bad_id ? (int32_t)V : -3;
            char msg_r[512];
            ct_status sr = krun(&f, CT_KERNEL_REF);
            snprintf(msg_r, sizeof msg_r, "%s", ct_context_last_error(g_ctx));
            ct_status ss = krun(&f, slot);
            CHECK(sr == CT_E_INVALID_ARG && ss == sr);
            CHECK_MSG(strcmp(msg_r, ct_context_last_error(g_ctx)) == 0, "'%s' vs '%s'", msg_r, ct_context_last_error(g_ctx));
            sr = krun(&b, CT_KERNEL_REF);
            snprintf(msg_r, sizeof msg_r, "%s", ct_context_last_error(g_ctx));
            ss = krun(&b, slot);
            CHECK(sr == CT_E_INVALID_ARG && ss == sr);
            CHECK(strcmp(msg_r, ct_context_last_error(g_ctx)) == 0);
        }
        ids[n / 2] = keep;
        f.k.out.data = y_r;
        b.k.out.data = g_r;
    }
    /* embedding_bwd+add (a tied table: a + the scatter, in either operand order, as the unfused add computes
       it): the reference and every fast slot against embedding_bwd then binary add, bit for bit */
    float *a = frand((size_t)(V * D), 64, -1, 1), *s_u = fbuf((size_t)(V * D)), *s_f = fbuf((size_t)(V * D));
    for (int order = 0; order < 4; order++) { /* bit 0: the add's operand order; bit 1: in place */
        int inplace = order >> 1;
        kcall add, fu;
        kinit(&add, CT_OP_BINARY, CT_F32, 2, ws, s_u);
        add.nd.ia[0] = CT_BIN_ADD;
        kin(&add, order & 1 ? g_r : a, CT_F32, 2, ws);
        kin(&add, order & 1 ? a : g_r, CT_F32, 2, ws);
        CHECK_OK(g_ctx, krun(&add, CT_KERNEL_REF));
        kinit(&fu, CT_OP_EMBEDDING_BWD, CT_F32, 2, ws, s_f);
        fu.nd.ia[2] = order & 1;
        fu.nd.ia[3] = inplace;
        kin(&fu, dy, CT_F32, nd + 1, ys);
        kin(&fu, ids, CT_I32, nd, ishape);
        kin(&fu, inplace ? s_f : a, CT_F32, 2, ws); /* in place: the output's buffer holds a */
        for (int si = -1; si < g_nslots; si++) {
            int slot = si < 0 ? CT_KERNEL_REF : g_slots[si];
            if (inplace) memcpy(s_f, a, sizeof(float) * (size_t)(V * D));
            else memset(s_f, 0x7f, sizeof(float) * (size_t)(V * D));
            CHECK_OK(g_ctx, krun(&fu, slot));
            size_t bad = fdiff_count(s_f, s_u, (size_t)(V * D));
            note(CT_OP_EMBEDDING_BWD, (double)bad);
            CHECK_MSG(bad == 0, "%s embedding_bwd+add (order %d): %zu values differ from embedding_bwd then add",
                      ct_kernel_slot_name(slot), order, bad);
        }
        /* an id out of range: the unfused kernel's error */
        int32_t keep = ids[0];
        ids[0] = (int32_t)V;
        for (int si = -1; si < g_nslots; si++) {
            if (inplace) memcpy(s_f, a, sizeof(float) * (size_t)(V * D));
            CHECK(krun(&fu, si < 0 ? CT_KERNEL_REF : g_slots[si]) == CT_E_INVALID_ARG &&
                  strstr(ct_context_last_error(g_ctx), "outside the vocabulary"));
        }
        ids[0] = keep;
    }
    free(a); free(s_u); free(s_f);
    free(w); free(dy); free(ids); free(y_r); free(y_s); free(g_r); free(g_s);
}

TEST(embedding_small) {
    embedding_case(50, 33, 2, (int64_t[]){4, 9});
    embedding_case(7, 1, 1, (int64_t[]){20});
    embedding_case(3, 16, 1, (int64_t[]){64});
}
TEST(embedding_large_threads) {
    embedding_case(1000, 64, 2, (int64_t[]){32, 128});
    embedding_case(30000, 33, 1, (int64_t[]){2048});
}

TEST(report_max_errors) {
    setup();
    printf("  max rel err vs ref: batchnorm %.2g bn_bwd_data %.2g bn_bwd_gamma %.2g layernorm %.2g ln_bwd_data %.2g "
           "ln_bwd_gamma %.2g (the gamma errors relative to sum |dy*xhat|) avgpool %.2g; values differing: maxpool %g maxpool_bwd %g avgpool_bwd %g "
           "embedding_bwd %g\n",
           g_worst[CT_OP_BATCHNORM], g_worst[CT_OP_BATCHNORM_BWD_DATA], g_worst[CT_OP_BATCHNORM_BWD_GAMMA],
           g_worst[CT_OP_LAYERNORM], g_worst[CT_OP_LAYERNORM_BWD_DATA], g_worst[CT_OP_LAYERNORM_BWD_GAMMA],
           g_worst[CT_OP_AVGPOOL2D], g_worst[CT_OP_MAXPOOL2D], g_worst[CT_OP_MAXPOOL2D_BWD],
           g_worst[CT_OP_AVGPOOL2D_BWD], g_worst[CT_OP_EMBEDDING_BWD]);
}

TEST_MAIN(T(batchnorm_train_small), T(batchnorm_train_2d_and_small_spatial), T(batchnorm_eval), T(batchnorm_column_path), T(batchnorm_rows_path), T(batchnorm_rows_threads_bit_identical),
          T(batchnorm_large_threads), T(layernorm_small), T(layernorm_large_threads), T(pool_2x2_stride2),
          T(pool_generic_configs), T(pool_large_threads), T(transpose_all_perms), T(transpose_large_threads),
          T(concat_slice_small), T(concat_slice_large_threads), T(embedding_small), T(embedding_large_threads),
          T(add_layernorm_equals_add_then_layernorm), T(report_max_errors))
