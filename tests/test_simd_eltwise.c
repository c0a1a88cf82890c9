/* tests/test_simd_eltwise.c - the SIMD kernels of eltwise.c, reduce.c and
 * softmax.c against the reference kernels, called directly through the op
 * table on hand-built ct_kargs: odd lengths (1, 7, 9, 33, 1000), rows of 1,
 * tensors over 100k elements (threading), special values (0, -0, +-50, +-100,
 * NaN, inf), every broadcast / reduction fast path and patterns that must
 * decline, label checks, and results that must not depend on the thread
 * count. Then through graphs: a declining fast kernel leaves the reference
 * result in place, and a training step matches the reference context.
 *
 * The AVX2 slot runs where the CPU has it; the AVX-512 slot where the CPU has
 * it, else it is reported as skipped. Worst errors per op are printed. */
#include <stdint.h>

#include "graph/ir.h"
#include "kernels/kernels.h"
#include "test.h"

/* ---- harness ------------------------------------------------------------------------------ */

static ct_context *g_ctx;
static int g_slots[2], g_nslots;
static double g_worst[CT_OP_COUNT];
static double g_last; /* max error of the last check_fast over the slots */
static double g_sum_to_exact; /* sum_to: fast kernels against exact sums */

static void setup(void) {
    if (g_ctx) return;
    g_ctx = test_ctx(-1, 0);
    g_nslots = test_fast_slots(g_ctx, g_slots);
}

static void note(ct_op op, double e) {
    if (e > g_worst[op] || e != e) g_worst[op] = e;
}

static void report(const ct_op *ops, int n) {
    for (int i = 0; i < n; i++) printf("    %-18s max err %.3g\n", ct_op_table(ops[i])->name, g_worst[ops[i]]);
}

typedef struct {
    ct_node_def nd;
    ct_kargs k;
    double ws[1];
} kcall;

static void kinit(kcall *c, ct_op op, int ndim, const int64_t *shape) {
    memset(c, 0, sizeof *c);
    c->nd.op = op;
    c->nd.dtype = CT_F32;
    c->nd.ndim = ndim;
    if (ndim) memcpy(c->nd.shape, shape, sizeof(int64_t) * (size_t)ndim);
    c->k.ctx = g_ctx;
    c->k.node = &c->nd;
    c->k.out = ct_tensor_make(NULL, CT_F32, ndim, shape);
    c->k.nthreads = 2;
    c->k.training = 1;
    c->k.seed = 1234;
}

static void kin(kcall *c, const void *data, ct_dtype dt, int ndim, const int64_t *shape) {
    int i = c->nd.n_in++;
    c->k.in[i] = ct_tensor_make((void *)data, dt, ndim, shape);
}

static size_t numel(int nd, const int64_t *s) {
    size_t n = 1;
    for (int i = 0; i < nd; i++) n *= (size_t)s[i];
    return n;
}

/* runs the kernel in `slot` into out (a fresh workspace sized as the op table says) */
static ct_status krun(kcall *c, int slot, float *out, int nthreads) {
    /* sum / sum_to: the reference's accumulators and the column path's pieces' partials (ct_ws_sum) */
    size_t wsb = c->nd.op == CT_OP_SUM || c->nd.op == CT_OP_SUM_TO ? ct_ws_sum(NULL, &c->nd) : 0;
    void *ws = wsb ? malloc(wsb) : NULL;
    void *cache = NULL;
    c->k.out.data = out;
    c->k.ws = ws;
    c->k.ws_bytes = wsb;
    c->k.cache = &cache;
    c->k.nthreads = nthreads;
    ct_context_clear_error(g_ctx);
    ct_status s = ct_op_table(c->nd.op)->kernel[slot](&c->k);
    free(ws);
    return s;
}

static float *fbuf(size_t n) { return calloc(n ? n : 1, sizeof(float)); }
static float *frand(size_t n, unsigned seed, float lo, float hi) {
    float *p = fbuf(n);
    test_fill_uniform(p, n, seed, lo, hi);
    for (size_t i = 0; i < n; i++) p[i] *= 0.987654321f; /* full mantissas */
    return p;
}
static void fill(float *p, size_t n, float v) {
    for (size_t i = 0; i < n; i++) p[i] = v;
}

/* Error of a[i] against b[i]: |a-b| / max(|b|, floor), or |a-b| / sc[i] when a
 * per-element scale is given (the size of the terms whose difference b is);
 * equal values (and NaN vs NaN) count as 0. */
static const double *g_scale; /* per-element scale for the next check_fast, or NULL */
static double err_at(const float *a, const float *b, size_t i, double floor, const double *sc) {
    if (a[i] == b[i] || (isnan(a[i]) && isnan(b[i]))) return 0;
    double d = fabs((double)a[i] - b[i]) / (sc ? sc[i] : fmax(fabs((double)b[i]), floor));
    return d != d ? INFINITY : d;
}
static double max_err(const float *a, const float *b, size_t n, double floor, const double *sc) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = err_at(a, b, i, floor, sc);
        if (d > m) m = d;
    }
    return m;
}
static double max_rel(const float *a, const float *b, size_t n, double floor) { return max_err(a, b, n, floor, NULL); }
static size_t worst_at(const float *a, const float *b, size_t n, double floor, const double *sc) {
    double m = -1;
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        double d = err_at(a, b, i, floor, sc);
        if (d > m) m = d, w = i;
    }
    return w;
}
/* number of elements that differ (NaN == NaN) */
static size_t ndiff(const float *a, const float *b, size_t n) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        if (!(a[i] == b[i] || (isnan(a[i]) && isnan(b[i])))) bad++;
    return bad;
}
static size_t nbitdiff(const float *a, const float *b, size_t n) { /* exact reproducibility */
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return bad;
}

static const float k_special[] = {0.0f, -0.0f, 50.0f, -50.0f, 100.0f, -100.0f, INFINITY, -INFINITY, NAN,
                                  1e-30f, -1e-30f, 88.5f, -88.5f, 20.0f, -20.0f, 0.625f, -0.625f, 3.0f, -3.0f,
                                  1e-4f, -1e-4f, 9.5f, -9.5f, 14.0f, -14.0f};
#define N_SPECIAL ((int)(sizeof k_special / sizeof k_special[0]))

/* Runs every fast slot against the reference output `ref` (already computed);
 * requires max_rel <= tol (tol 0: identical values), and the same bits for
 * 1, 2 and 3 threads. Returns 0 on failure (after printing why). */
static int check_fast(kcall *c, const float *ref, size_t n, double floor, double tol, const char *what) {
    float *o1 = fbuf(n), *o2 = fbuf(n), *o3 = fbuf(n);
    int ok = 1;
    g_last = 0;
    for (int s = 0; s < g_nslots && ok; s++) {
        int slot = g_slots[s];
        fill(o1, n, 12345.0f);
        ct_status st = krun(c, slot, o1, 2);
        if (st != CT_OK) {
            fprintf(stderr, "  %s [%s]: %s slot returned %s (%s)\n", what, ct_op_table(c->nd.op)->name,
                    ct_kernel_slot_name(slot), ct_status_name(st), ct_context_last_error(g_ctx));
            ok = 0;
            break;
        }
        double e = tol == 0 ? (double)ndiff(o1, ref, n) : max_err(o1, ref, n, floor, g_scale);
        note(c->nd.op, tol == 0 ? 0.0 : e);
        if (tol != 0 && !(e <= g_last)) g_last = e;
        if (!(e <= tol)) {
            size_t w = worst_at(o1, ref, n, floor, g_scale);
            fprintf(stderr, "  %s [%s %s]: %s %.3g > %.3g (element %zu: %.9g, reference %.9g)\n", what,
                    ct_op_table(c->nd.op)->name, ct_kernel_slot_name(slot),
                    tol == 0 ? "differing elements" : "max err", e, tol, w, (double)o1[w], (double)ref[w]);
            ok = 0;
        }
        fill(o2, n, -1.0f);
        fill(o3, n, -2.0f);
        if (krun(c, slot, o2, 1) != CT_OK || krun(c, slot, o3, 3) != CT_OK || nbitdiff(o1, o2, n) ||
            nbitdiff(o1, o3, n)) {
            fprintf(stderr, "  %s [%s %s]: results depend on the thread count\n", what,
                    ct_op_table(c->nd.op)->name, ct_kernel_slot_name(slot));
            ok = 0;
        }
    }
    free(o1);
    free(o2);
    free(o3);
    g_scale = NULL;
    return ok;
}

/* every fast slot must decline, without touching anything but its output */
static int check_declines(kcall *c, size_t n, const char *what) {
    float *o = fbuf(n);
    int ok = 1;
    for (int s = 0; s < g_nslots; s++) {
        ct_status st = krun(c, g_slots[s], o, 2);
        if (st != CT_E_UNSUPPORTED) {
            fprintf(stderr, "  %s: %s slot returned %s, expected CT_E_UNSUPPORTED\n", what,
                    ct_kernel_slot_name(g_slots[s]), ct_status_name(st));
            ok = 0;
        }
    }
    free(o);
    return ok;
}

static const int64_t k_lens[] = {1, 7, 9, 16, 33, 1000, 150001};
#define N_LENS ((int)(sizeof k_lens / sizeof k_lens[0]))

/* ---- unary -------------------------------------------------------------------------------- */

static const char *k_unary_names[CT_UNARY_COUNT] = {"relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh"};

/* tolerance: relative, or absolute below |ref| < floor */
#define ACT_FLOOR 1e-3
#define ACT_TOL 2e-6
/* derivatives of gelu/silu cross zero (a difference of O(1) terms): absolute below 0.1 */
#define ACT_BWD_FLOOR 1e-1

TEST(unary_matches_ref) {
    setup();
    double worst[CT_UNARY_COUNT] = {0};
    for (int kind = 0; kind < CT_UNARY_COUNT; kind++) {
        for (int li = 0; li < N_LENS; li++) {
            int64_t n = k_lens[li];
            float *x = frand((size_t)n, 100 + (unsigned)li, -8, 8), *ref = fbuf((size_t)n);
            for (int i = 0; i < n && i < N_SPECIAL; i++) x[i] = k_special[i];
            kcall c;
            kinit(&c, CT_OP_UNARY, 1, &n);
            c.nd.ia[0] = kind;
            kin(&c, x, CT_F32, 1, &n);
            CHECK_OK(g_ctx, krun(&c, CT_KERNEL_REF, ref, 1));
            char what[64];
            snprintf(what, sizeof what, "%s n=%lld", k_unary_names[kind], (long long)n);
            int ok = check_fast(&c, ref, (size_t)n, ACT_FLOOR, kind == CT_UNARY_RELU ? 0 : ACT_TOL, what);
            if (g_last > worst[kind]) worst[kind] = g_last;
            free(x);
            free(ref);
            CHECK(ok);
        }
    }
    for (int kind = 0; kind < CT_UNARY_COUNT; kind++)
        printf("    unary %-10s max err %.3g (rel, abs below %g)\n", k_unary_names[kind], worst[kind], ACT_FLOOR);
}

/* the reference's special values, spelled out: relu propagates NaN (as PyTorch) */
TEST(unary_special_values) {
    setup();
    int64_t n = 8;
    float x[8] = {NAN, INFINITY, -INFINITY, -0.0f, 100.0f, -100.0f, 50.0f, -50.0f}, y[8];
    const float relu_y[8] = {NAN, INFINITY, 0, 0, 100, 0, 50, 0};
    const float sig_y[8] = {NAN, 1, 0, 0.5f, 1, 0, 1, 1.92874985e-22f};
    const float tanh_y[8] = {NAN, 1, -1, 0, 1, -1, 1, -1};
    for (int s = 0; s < g_nslots; s++) {
        kcall c;
        kinit(&c, CT_OP_UNARY, 1, &n);
        kin(&c, x, CT_F32, 1, &n);
        c.nd.ia[0] = CT_UNARY_RELU;
        CHECK_OK(g_ctx, krun(&c, g_slots[s], y, 1));
        CHECK(ndiff(y, relu_y, 8) == 0);
        c.nd.ia[0] = CT_UNARY_SIGMOID;
        CHECK_OK(g_ctx, krun(&c, g_slots[s], y, 1));
        CHECK(max_rel(y, sig_y, 7, 1e-30) == 0 && fabs(y[7] - sig_y[7]) < 1e-28);
        c.nd.ia[0] = CT_UNARY_TANH;
        CHECK_OK(g_ctx, krun(&c, g_slots[s], y, 1));
        CHECK(ndiff(y, tanh_y, 8) == 0);
        c.nd.ia[0] = CT_UNARY_GELU;
        CHECK_OK(g_ctx, krun(&c, g_slots[s], y, 1));
        CHECK(isnan(y[0]) && y[1] == INFINITY && isnan(y[2]) && y[3] == 0 && y[4] == 100 && y[5] == 0 && y[6] == 50);
    }
}

/* The table form of GELU (erf, tanh) and SiLU (simd/eltwise.c: tables below |x| < lim, the closed forms
 * elsewhere): a sweep over [-R, R] with every interval edge and lim +- 1 ulp, forward and backward against
 * the reference in relative error down to the far tail (absolute below 1e-25, near where the kernels flush to 0 or
 * to subnormals; the derivative crosses zero in (z0, z1): absolute below 1e-2 there); each lane's value must
 * not depend on its neighbours (the sweep shuffled between fast and slow lanes gives the same bits), and
 * AVX2 and AVX-512 agree bit for bit. Relative errors within 1e-6 on the tables; beyond,
 * tail_tol: the tanh GELU's closed form exponentiates 2u ~ 60 rounded to float (~6e-6 relative at 1e-27). */
static void act_tables_case(int kind, const char *name, float lim, float R, float z0, float z1, double tail_tol) {
    const int64_t ns = (int64_t)(2 * R * 512) + 64;
    float *x = fbuf((size_t)ns), *dy = fbuf((size_t)ns), *xs = fbuf((size_t)ns), *ref = fbuf((size_t)ns);
    float *refb = fbuf((size_t)ns);
    int64_t n = 0;
    for (int64_t i = 0; i < (int64_t)(2 * R * 512); i++) x[n++] = -R + (float)i / 512.0f * 0.999987f;
    for (int k = -8; k <= 8; k++) x[n++] = lim / 8.0f * (float)k; /* the interval edges */
    const float edge[] = {nextafterf(lim, 0.0f), nextafterf(lim, 2 * lim), nextafterf(lim * 0.875f, 0.0f)};
    for (int i = 0; i < 3; i++) x[n++] = edge[i], x[n++] = -edge[i];
    for (int64_t i = 0; i < n; i++) dy[i] = 1.0f;
    const int64_t m = n;
    /* xs: the same values with fast and slow lanes interleaved differently (a stride-7 walk) */
    for (int64_t i = 0; i < m; i++) xs[i] = x[(i * 7) % m];
    kcall f, b;
    kinit(&f, CT_OP_UNARY, 1, &m);
    f.nd.ia[0] = kind;
    kin(&f, x, CT_F32, 1, &m);
    kinit(&b, CT_OP_UNARY_BWD, 1, &m);
    b.nd.ia[0] = kind;
    kin(&b, dy, CT_F32, 1, &m);
    kin(&b, x, CT_F32, 1, &m);
    CHECK_OK(g_ctx, krun(&f, CT_KERNEL_REF, ref, 1));
    CHECK_OK(g_ctx, krun(&b, CT_KERNEL_REF, refb, 1));
    float *y[2] = {fbuf((size_t)ns), fbuf((size_t)ns)}, *d[2] = {fbuf((size_t)ns), fbuf((size_t)ns)};
    float *ys = fbuf((size_t)ns), *ds = fbuf((size_t)ns);
    double ef = 0, eb = 0;
    for (int s = 0; s < g_nslots; s++) {
        f.k.in[0].data = b.k.in[1].data = x;
        CHECK_OK(g_ctx, krun(&f, g_slots[s], y[s], 2));
        CHECK_OK(g_ctx, krun(&b, g_slots[s], d[s], 2));
        for (int64_t i = 0; i < m; i++) {
            double ex = fabs((double)y[s][i] - ref[i]) / fmax(fabs((double)ref[i]), 1e-25);
            double fl = x[i] > z0 && x[i] < z1 ? 1e-2 : 1e-25;
            double eg = fabs((double)d[s][i] - refb[i]) / fmax(fabs((double)refb[i]), fl);
            if (ex > ef) ef = ex;
            if (eg > eb) eb = eg;
            const double tol = fabsf(x[i]) < lim ? 1e-6 : tail_tol;
            if (!(ex <= tol) || !(eg <= tol)) {
                fprintf(stderr, "  %s [%s] x=%.9g: y %.9g (reference %.9g), dy %.9g (reference %.9g)\n", name,
                        ct_kernel_slot_name(g_slots[s]), (double)x[i], (double)y[s][i], (double)ref[i],
                        (double)d[s][i], (double)refb[i]);
                CHECK(0);
                break;
            }
        }
        f.k.in[0].data = b.k.in[1].data = xs;
        CHECK_OK(g_ctx, krun(&f, g_slots[s], ys, 2));
        CHECK_OK(g_ctx, krun(&b, g_slots[s], ds, 2));
        size_t moved = 0;
        for (int64_t i = 0; i < m; i++) {
            const int64_t j = (i * 7) % m;
            moved += memcmp(&ys[i], &y[s][j], sizeof(float)) != 0 || memcmp(&ds[i], &d[s][j], sizeof(float)) != 0;
        }
        CHECK_MSG(moved == 0, "%s: %zu values changed with their neighbours", name, moved);
    }
    if (g_nslots == 2) CHECK(nbitdiff(y[0], y[1], (size_t)m) == 0 && nbitdiff(d[0], d[1], (size_t)m) == 0);
    printf("    %-9s on [-%g, %g]: max rel err fwd %.3g, bwd %.3g; %d fast slots agree bit for bit\n", name,
           (double)R, (double)R, ef, eb, g_nslots);
    free(x); free(dy); free(xs); free(ref); free(refb); free(ys); free(ds);
    for (int s = 0; s < 2; s++) free(y[s]), free(d[s]);
}

TEST(activation_tables_and_tails) {
    setup();
    act_tables_case(CT_UNARY_GELU, "gelu", 4.0f, 14.0f, -1.0f, -0.5f, 1e-6);
    act_tables_case(CT_UNARY_GELU_TANH, "gelu_tanh", 4.0f, 14.0f, -1.0f, -0.5f, 1e-4);
    act_tables_case(CT_UNARY_SILU, "silu", 8.0f, 24.0f, -1.6f, -1.0f, 1e-6);
}

TEST(unary_bwd_matches_ref) {
    setup();
    double worst[CT_UNARY_COUNT] = {0};
    for (int kind = 0; kind < CT_UNARY_COUNT; kind++) {
        int from_out = kind == CT_UNARY_RELU || kind == CT_UNARY_SIGMOID || kind == CT_UNARY_TANH;
        for (int li = 0; li < N_LENS; li++) {
            int64_t n = k_lens[li];
            float *x = frand((size_t)n, 200 + (unsigned)li, -8, 8), *dy = frand((size_t)n, 300 + (unsigned)li, -2, 2);
            float *y = fbuf((size_t)n), *ref = fbuf((size_t)n);
            for (int i = 0; i < n && i < N_SPECIAL; i++) x[i] = k_special[i];
            if (n > 40) dy[30] = NAN, dy[31] = INFINITY, dy[32] = -INFINITY, x[31] = x[32] = -1.0f;
            kcall f;
            kinit(&f, CT_OP_UNARY, 1, &n);
            f.nd.ia[0] = kind;
            kin(&f, x, CT_F32, 1, &n);
            CHECK_OK(g_ctx, krun(&f, CT_KERNEL_REF, y, 1));
            kcall c;
            kinit(&c, CT_OP_UNARY_BWD, 1, &n);
            c.nd.ia[0] = kind;
            c.nd.ia[1] = from_out;
            kin(&c, dy, CT_F32, 1, &n);
            kin(&c, from_out ? y : x, CT_F32, 1, &n);
            CHECK_OK(g_ctx, krun(&c, CT_KERNEL_REF, ref, 1));
            char what[64];
            snprintf(what, sizeof what, "%s' n=%lld", k_unary_names[kind], (long long)n);
            int ok = check_fast(&c, ref, (size_t)n, ACT_BWD_FLOOR, kind == CT_UNARY_RELU ? 0 : ACT_TOL, what);
            if (g_last > worst[kind]) worst[kind] = g_last;
            free(x);
            free(dy);
            free(y);
            free(ref);
            CHECK(ok);
        }
    }
    for (int kind = 0; kind < CT_UNARY_COUNT; kind++)
        printf("    unary_bwd %-10s max err %.3g (rel, abs below %g)\n", k_unary_names[kind], worst[kind], ACT_BWD_FLOOR);
}

TEST(scale_exact) {
    setup();
    for (int li = 0; li < N_LENS; li++) {
        int64_t n = k_lens[li];
        float *x = frand((size_t)n, 400, -10, 10), *ref = fbuf((size_t)n);
        for (int i = 0; i < n && i < N_SPECIAL; i++) x[i] = k_special[i];
        kcall c;
        kinit(&c, CT_OP_SCALE, 1, &n);
        c.nd.fa[0] = -0.3f;
        kin(&c, x, CT_F32, 1, &n);
        CHECK_OK(g_ctx, krun(&c, CT_KERNEL_REF, ref, 1));
        int ok = check_fast(&c, ref, (size_t)n, 0, 0, "scale");
        free(x);
        free(ref);
        CHECK(ok);
    }
}

/* ---- binary ------------------------------------------------------------------------------- */

static int bin_case(int kind, int nda, const int64_t *sa, int ndb, const int64_t *sb, int expect_decline) {
    int64_t so[CT_MAX_DIMS];
    int nd = nda > ndb ? nda : ndb;
    for (int i = 0; i < nd; i++) {
        int ia = i - (nd - nda), ib = i - (nd - ndb);
        int64_t da = ia >= 0 ? sa[ia] : 1, db = ib >= 0 ? sb[ib] : 1;
        so[i] = da == 1 ? db : da;
    }
    size_t na = numel(nda, sa), nb = numel(ndb, sb), n = numel(nd, so);
    float *a = frand(na, 500 + (unsigned)na, -4, 4), *b = frand(nb, 600 + (unsigned)nb, -4, 4), *ref = fbuf(n);
    for (size_t i = 0; i < na && i < (size_t)N_SPECIAL; i++) a[i] = k_special[i];
    if (nb > 3) b[1] = 0.0f, b[2] = NAN, b[3] = -INFINITY;
    kcall c;
    kinit(&c, CT_OP_BINARY, nd, so);
    c.nd.ia[0] = kind;
    kin(&c, a, CT_F32, nda, sa);
    kin(&c, b, CT_F32, ndb, sb);
    int ok = krun(&c, CT_KERNEL_REF, ref, 1) == CT_OK;
    char what[128], s1[48], s2[48];
    snprintf(what, sizeof what, "binary %d %s op %s", kind, ct_shape_str(nda, sa, s1, sizeof s1),
             ct_shape_str(ndb, sb, s2, sizeof s2));
    if (ok) ok = expect_decline ? check_declines(&c, n, what) : check_fast(&c, ref, n, 0, 0, what);
    free(a);
    free(b);
    free(ref);
    return ok;
}

TEST(binary_fast_paths_exact) {
    setup();
    for (int kind = 0; kind < CT_BIN_COUNT; kind++) {
        for (int li = 0; li < N_LENS; li++) { /* same shape, scalar either side */
            int64_t n = k_lens[li], one = 1;
            CHECK(bin_case(kind, 1, &n, 1, &n, 0));
            CHECK(bin_case(kind, 1, &n, 0, &one, 0));
            CHECK(bin_case(kind, 0, &one, 1, &n, 0));
            CHECK(bin_case(kind, 1, &one, 1, &n, 0));
        }
        static const int64_t cols[] = {1, 7, 9, 33, 1000};
        for (int ci = 0; ci < 5; ci++) {
            int64_t C = cols[ci];
            int64_t rc[2] = {5, C}, r1c[2] = {1, C}, one_row[2] = {1, C}, rc1[2] = {5, 1};
            CHECK(bin_case(kind, 2, rc, 1, &C, 0));      /* row vector: bias */
            CHECK(bin_case(kind, 1, &C, 2, rc, 0));      /* row vector on the left */
            CHECK(bin_case(kind, 2, rc, 2, r1c, 0));     /* (1, C) */
            CHECK(bin_case(kind, 2, one_row, 1, &C, 0)); /* a row of 1 */
            CHECK(bin_case(kind, 2, rc, 2, rc1, 0));     /* column: (R, 1) */
            CHECK(bin_case(kind, 2, rc1, 2, r1c, 0));    /* outer: (R, 1) op (1, C) */
        }
        int64_t nchw[4] = {2, 3, 5, 7}, c11[3] = {3, 1, 1}, oc11[4] = {1, 3, 1, 1}, hw[2] = {5, 7};
        CHECK(bin_case(kind, 4, nchw, 3, c11, 0));  /* per-channel bias (C, 1, 1) */
        CHECK(bin_case(kind, 4, nchw, 4, oc11, 0)); /* (1, C, 1, 1) */
        CHECK(bin_case(kind, 4, nchw, 2, hw, 0));   /* trailing dims */
        int64_t big[2] = {300, 1000}, bigc = 1000, bigr[2] = {300, 1};
        CHECK(bin_case(kind, 2, big, 1, &bigc, 0)); /* > 100k elements: threads */
        CHECK(bin_case(kind, 2, big, 2, bigr, 0));
        int64_t bnchw[4] = {16, 8, 33, 31}, bc11[3] = {8, 1, 1};
        CHECK(bin_case(kind, 4, bnchw, 3, bc11, 0));
    }
}

TEST(binary_declines_other_broadcasts) {
    setup();
    int64_t a[4] = {2, 1, 3, 1}, b[4] = {1, 4, 1, 5}, c[3] = {4, 1, 5}, d[4] = {3, 1, 2, 1};
    CHECK(bin_case(CT_BIN_ADD, 4, a, 4, b, 1));
    CHECK(bin_case(CT_BIN_MUL, 4, a, 3, c, 1));
    CHECK(bin_case(CT_BIN_DIV, 4, d, 4, b, 1));
}

/* ---- dropout ------------------------------------------------------------------------------ */

TEST(dropout_same_mask) {
    setup();
    /* thresholds ceil(p * 2^24) exact and rounded, the smallest p, p just below 1 */
    static const float ps[] = {0.1f, 0.5f, 0.9f, 1.0f, 0.3f, 1e-7f, 0.99999994f};
    for (int li = 0; li < N_LENS; li++) {
        int64_t n = k_lens[li];
        float *x = frand((size_t)n, 700, -3, 3), *ref = fbuf((size_t)n);
        for (int i = 0; i < n && i < N_SPECIAL; i++) x[i] = k_special[i];
        for (int pi = 0; pi < 7; pi++) {
            for (int training = 0; training < 2; training++) {
                kcall c;
                kinit(&c, CT_OP_DROPOUT, 1, &n);
                c.nd.fa[0] = ps[pi];
                c.nd.ia[0] = 17;
                c.k.training = training;
                c.k.step = 5 + (uint64_t)pi;
                kin(&c, x, CT_F32, 1, &n);
                CHECK_OK(g_ctx, krun(&c, CT_KERNEL_REF, ref, 1));
                CHECK(check_fast(&c, ref, (size_t)n, 0, 0, "dropout"));
            }
        }
        free(x);
        free(ref);
    }
}

/* UNARY_BWD_KEEP (gelu, gelu_tanh, silu) on every slot = that slot's unary
 * and unary_bwd kernels, bit for bit, both outputs; dx written over dy too
 * (the planner runs it in place); other kinds and BF16 decline on the SIMD slots. */
TEST(unary_bwd_keep_equals_unary_and_unary_bwd) {
    setup();
    static const int kinds[] = {CT_UNARY_GELU, CT_UNARY_GELU_TANH, CT_UNARY_SILU};
    for (int li = 0; li < N_LENS; li++) {
        int64_t n = k_lens[li];
        float *x = frand((size_t)n, 710, -6, 6), *dy = frand((size_t)n, 711, -2, 2);
        for (int i = 0; i < n && i < N_SPECIAL; i++) x[i] = k_special[i];
        float *y1 = fbuf((size_t)n), *dx1 = fbuf((size_t)n), *y2 = fbuf((size_t)n), *dx2 = fbuf((size_t)n);
        for (int ki = 0; ki < 3; ki++)
            for (int s = -1; s < g_nslots; s++) {
                int slot = s < 0 ? CT_KERNEL_REF : g_slots[s];
                kcall u, b, kk;
                kinit(&u, CT_OP_UNARY, 1, &n);
                u.nd.ia[0] = kinds[ki];
                kin(&u, x, CT_F32, 1, &n);
                CHECK_OK(g_ctx, krun(&u, slot, y1, 2));
                kinit(&b, CT_OP_UNARY_BWD, 1, &n);
                b.nd.ia[0] = kinds[ki];
                kin(&b, dy, CT_F32, 1, &n);
                kin(&b, x, CT_F32, 1, &n);
                CHECK_OK(g_ctx, krun(&b, slot, dx1, 2));
                for (int inplace = 0; inplace < 2; inplace++) {
                    memcpy(dx2, dy, (size_t)n * sizeof(float));
                    kinit(&kk, CT_OP_UNARY_BWD_KEEP, 1, &n);
                    kk.nd.ia[0] = kinds[ki];
                    kin(&kk, inplace ? dx2 : dy, CT_F32, 1, &n);
                    kin(&kk, x, CT_F32, 1, &n);
                    kk.k.aux = y2;
                    fill(y2, (size_t)n, 12345.0f);
                    CHECK_OK(g_ctx, krun(&kk, slot, dx2, 2));
                    CHECK(ndiff(y2, y1, (size_t)n) == 0 && ndiff(dx2, dx1, (size_t)n) == 0);
                }
            }
        kcall r;
        kinit(&r, CT_OP_UNARY_BWD_KEEP, 1, &n);
        r.nd.ia[0] = CT_UNARY_RELU;
        kin(&r, dy, CT_F32, 1, &n);
        kin(&r, x, CT_F32, 1, &n);
        r.k.aux = y2;
        for (int s = 0; s < g_nslots; s++) CHECK(krun(&r, g_slots[s], dx2, 2) == CT_E_UNSUPPORTED);
        free(x);
        free(dy);
        free(y1);
        free(dx1);
        free(y2);
        free(dx2);
    }
}

/* A dropout run on a block [lo, lo + len) of a tensor with ct_kargs.elem0 = lo
 * (as the eltwise chain runs it) draws exactly the whole tensor's mask there:
 * every slot, blocks at and off multiples of 64, drop path rows too. */
TEST(dropout_block_offset) {
    setup();
    const int64_t n = 5000;
    float *x = frand((size_t)n, 701, -3, 3), *whole = fbuf((size_t)n), *blk = fbuf((size_t)n);
    static const int64_t cuts[][2] = {{0, 2048}, {2048, 2048}, {4096, 904}, {7, 100}, {130, 61}, {999, 4001}};
    for (int row = 0; row <= 50; row += 50) {
        kcall c;
        kinit(&c, CT_OP_DROPOUT, 1, &n);
        c.nd.fa[0] = 0.3f;
        c.nd.ia[0] = 23;
        c.nd.ia[1] = row;
        c.k.step = 9;
        kin(&c, x, CT_F32, 1, &n);
        CHECK_OK(g_ctx, krun(&c, CT_KERNEL_REF, whole, 1));
        for (int s = -1; s < g_nslots; s++) { /* the reference, then the fast slots this CPU runs */
            int slot = s < 0 ? CT_KERNEL_REF : g_slots[s];
            for (size_t q = 0; q < sizeof cuts / sizeof cuts[0]; q++) {
                int64_t lo = cuts[q][0], len = cuts[q][1];
                if (row && (lo % row || len % row)) continue; /* drop path: whole rows */
                kcall b = c;
                b.k.node = &b.nd;
                b.nd.shape[0] = len;
                b.k.out = ct_tensor_make(NULL, CT_F32, 1, &len);
                b.k.in[0] = ct_tensor_make(x + lo, CT_F32, 1, &len);
                b.k.elem0 = lo;
                CHECK_OK(g_ctx, krun(&b, slot, blk + lo, 2));
                CHECK(ndiff(blk + lo, whole + lo, (size_t)len) == 0);
            }
        }
    }
    free(x);
    free(whole);
    free(blk);
}

/* ---- reductions --------------------------------------------------------------------------- */

/* sum of x over mask (keepdim 0), fast vs reference; data in [lo, hi] */
static int sum_case(int nd, const int64_t *shape, uint32_t mask, int mean, float lo, float hi, double floor,
                    double tol, int expect_decline) {
    int64_t so[CT_MAX_DIMS];
    int no = 0;
    int64_t cnt = 1;
    for (int i = 0; i < nd; i++) {
        if (mask & (1u << i)) cnt *= shape[i];
        else so[no++] = shape[i];
    }
    size_t n = numel(nd, shape), m = numel(no, so);
    float *x = frand(n, 800 + (unsigned)n, lo, hi), *ref = fbuf(m);
    kcall c;
    kinit(&c, CT_OP_SUM, no, so);
    c.nd.ia[0] = mask;
    c.nd.fa[0] = mean ? 1.0f / (float)cnt : 1.0f;
    kin(&c, x, CT_F32, nd, shape);
    int ok = krun(&c, CT_KERNEL_REF, ref, 1) == CT_OK;
    char what[96], s1[48];
    snprintf(what, sizeof what, "sum %s mask 0x%x", ct_shape_str(nd, shape, s1, sizeof s1), mask);
    if (ok) ok = expect_decline ? check_declines(&c, m, what) : check_fast(&c, ref, m, floor, tol, what);
    free(x);
    free(ref);
    return ok;
}

TEST(sum_patterns) {
    setup();
    static const int64_t cols[] = {1, 7, 9, 33, 1000};
    for (int ci = 0; ci < 5; ci++) {
        int64_t C = cols[ci];
        int64_t rc[2] = {13, C}, r1[2] = {1, C}, big[2] = {400, C};
        for (int mean = 0; mean < 2; mean++) {
            CHECK(sum_case(2, rc, 1, mean, 0.5f, 1.5f, 1e-30, 1e-6, 0));  /* leading: bias gradient */
            CHECK(sum_case(2, rc, 2, mean, 0.5f, 1.5f, 1e-30, 1e-6, 0));  /* trailing: row sums */
            CHECK(sum_case(2, rc, 3, mean, 0.5f, 1.5f, 1e-30, 1e-6, 0));  /* everything */
            CHECK(sum_case(2, r1, 1, mean, 0.5f, 1.5f, 1e-30, 1e-6, 0));  /* a row of 1 */
            CHECK(sum_case(2, big, 1, mean, 0.5f, 1.5f, 1e-30, 1e-6, 0)); /* threads / pieces */
            CHECK(sum_case(2, big, 2, mean, 0.5f, 1.5f, 1e-30, 1e-6, 0));
            CHECK(sum_case(2, big, 3, mean, 0.5f, 1.5f, 1e-30, 1e-6, 0));
        }
    }
    int64_t nchw[4] = {4, 3, 5, 7}, bn[4] = {16, 8, 30, 31}, bn3[4] = {64, 3, 32, 32}, abc[3] = {6, 50, 9};
    int64_t tall[2] = {200000, 3}, wide[2] = {3, 200000}, flat = 1000003, n1c11[4] = {5, 1, 7, 1};
    CHECK(sum_case(4, nchw, 0xd, 0, 0.5f, 1.5f, 1e-30, 1e-6, 0)); /* (N, C, H, W) over {0, 2, 3} */
    CHECK(sum_case(4, bn, 0xd, 1, 0.5f, 1.5f, 1e-30, 1e-6, 0));
    CHECK(sum_case(4, bn3, 0xd, 0, 0.5f, 1.5f, 1e-30, 1e-6, 0));
    CHECK(sum_case(3, abc, 0x2, 0, 0.5f, 1.5f, 1e-30, 1e-6, 0));  /* middle dim */
    CHECK(sum_case(3, abc, 0x6, 1, 0.5f, 1.5f, 1e-30, 1e-6, 0));  /* last two */
    CHECK(sum_case(2, tall, 0x1, 0, 0.5f, 1.5f, 1e-30, 1e-6, 0)); /* few columns, many rows */
    CHECK(sum_case(2, wide, 0x2, 0, 0.5f, 1.5f, 1e-30, 1e-6, 0)); /* few long rows */
    CHECK(sum_case(1, &flat, 0x1, 1, 0.5f, 1.5f, 1e-30, 1e-6, 0));
    CHECK(sum_case(4, n1c11, 0xa, 0, 0.5f, 1.5f, 1e-30, 1e-6, 0)); /* only size-1 dims reduced */
    CHECK(sum_case(4, n1c11, 0x5, 0, 0.5f, 1.5f, 1e-30, 1e-6, 0));
    /* mixed signs: errors relative to the scale of the terms (cancellation) */
    CHECK(sum_case(4, bn, 0xd, 0, -1, 1, 100, 1e-6, 0));
    CHECK(sum_case(1, &flat, 0x1, 0, -1, 1, 1000, 1e-6, 0));
}

TEST(sum_declines_other_patterns) {
    setup();
    int64_t s[4] = {2, 3, 4, 5};
    CHECK(sum_case(4, s, 0x5, 0, 0.5f, 1.5f, 1e-30, 1e-6, 1)); /* R K R K */
    CHECK(sum_case(4, s, 0xa, 0, 0.5f, 1.5f, 1e-30, 1e-6, 1)); /* K R K R */
}

/* broadcast_to: x (keepdim shape) -> out shape, times fa[0] */
static int bcast_case(int nd, const int64_t *xs, const int64_t *os, int expect_decline) {
    size_t nx = numel(nd, xs), n = numel(nd, os);
    float *x = frand(nx, 900 + (unsigned)nx, -3, 3), *ref = fbuf(n);
    for (size_t i = 0; i < nx && i < (size_t)N_SPECIAL; i++) x[i] = k_special[i];
    kcall c;
    kinit(&c, CT_OP_BROADCAST_TO, nd, os);
    c.nd.fa[0] = 0.25f;
    kin(&c, x, CT_F32, nd, xs);
    int ok = krun(&c, CT_KERNEL_REF, ref, 1) == CT_OK;
    char what[96], s1[48], s2[48];
    snprintf(what, sizeof what, "broadcast_to %s -> %s", ct_shape_str(nd, xs, s1, sizeof s1),
             ct_shape_str(nd, os, s2, sizeof s2));
    if (ok) ok = expect_decline ? check_declines(&c, n, what) : check_fast(&c, ref, n, 0, 0, what);
    free(x);
    free(ref);
    return ok;
}

TEST(broadcast_to_patterns) {
    setup();
    static const int64_t cols[] = {1, 7, 9, 33, 1000};
    for (int ci = 0; ci < 5; ci++) {
        int64_t C = cols[ci];
        int64_t o[2] = {11, C}, r1[2] = {11, 1}, c1[2] = {1, C}, s11[2] = {1, 1}, big[2] = {300, C}, bigr[2] = {300, 1};
        CHECK(bcast_case(2, r1, o, 0));   /* mean over the last dim */
        CHECK(bcast_case(2, c1, o, 0));   /* mean over rows */
        CHECK(bcast_case(2, s11, o, 0));  /* total */
        CHECK(bcast_case(2, o, o, 0));    /* nothing */
        CHECK(bcast_case(2, c1, big, 0)); /* threads */
        CHECK(bcast_case(2, bigr, big, 0));
    }
    int64_t nchw[4] = {16, 8, 30, 31}, c111[4] = {1, 8, 1, 1};
    CHECK(bcast_case(4, c111, nchw, 0));
    int64_t x4[4] = {2, 1, 3, 1}, o4[4] = {2, 4, 3, 5};
    CHECK(bcast_case(4, x4, o4, 1));
}

/* sum_to: x (broadcast shape) -> out (the shape it was broadcast from); the
 * reference accumulates in float, the fast kernels in double */
static int sum_to_case(int ndx, const int64_t *xs, int ndo, const int64_t *os, int expect_decline) {
    size_t nx = numel(ndx, xs), n = numel(ndo, os);
    float *x = frand(nx, 1000 + (unsigned)nx, 0.5f, 1.5f), *ref = fbuf(n);
    kcall c;
    kinit(&c, CT_OP_SUM_TO, ndo, os);
    kin(&c, x, CT_F32, ndx, xs);
    int ok = krun(&c, CT_KERNEL_REF, ref, 1) == CT_OK;
    char what[96], s1[48], s2[48];
    snprintf(what, sizeof what, "sum_to %s -> %s", ct_shape_str(ndx, xs, s1, sizeof s1),
             ct_shape_str(ndo, os, s2, sizeof s2));
    /* the reference accumulates m terms in float: allow for its rounding */
    double tol = 4e-7 * sqrt((double)(nx / (n ? n : 1))) + 1e-6;
    if (ok) ok = expect_decline ? check_declines(&c, n, what) : check_fast(&c, ref, n, 1e-30, tol, what);
    if (ok && !expect_decline) { /* the fast kernels against exact (double) sums */
        int64_t st[CT_MAX_DIMS];
        ct_bcast_strides(&c.k.out, &c.k.in[0], st);
        double *ex = calloc(n, sizeof *ex);
        float *exf = fbuf(n), *o = fbuf(n);
        for (size_t i = 0; i < nx; i++) ex[ct_bcast_offset((int64_t)i, &c.k.in[0], st)] += x[i];
        for (size_t i = 0; i < n; i++) exf[i] = (float)ex[i];
        for (int s = 0; s < g_nslots && ok; s++) {
            krun(&c, g_slots[s], o, 2);
            double e = max_rel(o, exf, n, 1e-30);
            if (e > g_sum_to_exact) g_sum_to_exact = e;
            if (!(e <= 1e-6)) {
                fprintf(stderr, "  %s: %s vs exact sums %.3g\n", what, ct_kernel_slot_name(g_slots[s]), e);
                ok = 0;
            }
        }
        free(ex);
        free(exf);
        free(o);
    }
    free(x);
    free(ref);
    return ok;
}

TEST(sum_to_patterns) {
    setup();
    static const int64_t cols[] = {1, 7, 9, 33, 1000};
    for (int ci = 0; ci < 5; ci++) {
        int64_t C = cols[ci];
        int64_t rc[2] = {17, C}, r1c[2] = {1, C}, r1[2] = {17, 1}, big[2] = {500, C};
        CHECK(sum_to_case(2, rc, 1, &C, 0));   /* (R, C) -> (C) */
        CHECK(sum_to_case(2, rc, 2, r1c, 0));  /* (R, C) -> (1, C) */
        CHECK(sum_to_case(2, rc, 2, r1, 0));   /* (R, C) -> (R, 1) */
        CHECK(sum_to_case(2, big, 1, &C, 0));  /* threads */
        CHECK(sum_to_case(2, big, 2, r1c, 0));
    }
    int64_t nchw[4] = {16, 8, 30, 31}, c11[3] = {8, 1, 1}, oc11[4] = {1, 8, 1, 1}, abc[3] = {5, 6, 7}, bc[2] = {6, 7};
    int64_t one = 1;
    CHECK(sum_to_case(4, nchw, 3, c11, 0));
    CHECK(sum_to_case(4, nchw, 4, oc11, 0));
    CHECK(sum_to_case(3, abc, 2, bc, 0));
    CHECK(sum_to_case(3, abc, 1, &one, 0));
    int64_t x4[4] = {2, 3, 4, 5}, o3[3] = {3, 1, 5};
    CHECK(sum_to_case(4, x4, 3, o3, 1)); /* R K R K */
    printf("    sum_to against exact sums: max err %.3g (the reference's float sums: %.3g)\n", g_sum_to_exact,
           g_worst[CT_OP_SUM_TO]);
}

/* ---- softmax family ----------------------------------------------------------------------- */

static const int64_t k_sm_shapes[][2] = {{1, 1}, {1, 7}, {3, 9}, {5, 33}, {4, 1000}, {200, 1000}, {2, 70001}, {3000, 40}};
#define N_SM ((int)(sizeof k_sm_shapes / sizeof k_sm_shapes[0]))

static void sm_data(float *x, int64_t R, int64_t C, unsigned variant) {
    test_fill_uniform(x, (size_t)(R * C), 1100 + variant, -10, 10);
    if (variant == 1) /* large logits */
        for (int64_t i = 0; i < R * C; i++) x[i] = x[i] * 10.0f + ((i / C) % 2 ? 1000.0f : -100.0f);
    if (variant == 2 && C > 3) /* a few extremes per row */
        for (int64_t r = 0; r < R; r++) x[r * C] = 50, x[r * C + 1] = -50, x[r * C + 2] = 100, x[r * C + 3] = -100;
    if (variant == 4 && C > 2) /* masked entries */
        for (int64_t r = 0; r < R; r++) x[r * C + (r + 1) % C] = -INFINITY, x[r * C + C - 1] = -INFINITY;
}

TEST(softmax_matches_ref) {
    setup();
    for (int si = 0; si < N_SM; si++) {
        int64_t R = k_sm_shapes[si][0], C = k_sm_shapes[si][1], sh[2] = {R, C};
        size_t n = (size_t)(R * C);
        float *x = fbuf(n), *y = fbuf(n), *ref = fbuf(n), *dy = frand(n, 1200, -1, 1);
        double *sc = calloc(n, sizeof *sc);
        static const unsigned variants[] = {0, 1, 2, 4};
        for (int vi = 0; vi < 4; vi++) {
            sm_data(x, R, C, variants[vi]);
            for (int logsm = 0; logsm < 2; logsm++) {
                kcall c;
                kinit(&c, logsm ? CT_OP_LOG_SOFTMAX : CT_OP_SOFTMAX, 2, sh);
                kin(&c, x, CT_F32, 2, sh);
                CHECK_OK(g_ctx, krun(&c, CT_KERNEL_REF, y, 1));
                /* probabilities: relative above 1e-20 (far below matter nothing) */
                /* relative (log-probabilities: absolute below 1e-6, as the reference's x - lse in
                 * double has only ~1e-13 absolute resolution for logits ~1000) */
                CHECK(check_fast(&c, y, n, logsm ? 1e-6 : 1e-20, 1e-6, logsm ? "log_softmax" : "softmax"));
                kcall b;
                kinit(&b, logsm ? CT_OP_LOG_SOFTMAX_BWD : CT_OP_SOFTMAX_BWD, 2, sh);
                kin(&b, dy, CT_F32, 2, sh);
                kin(&b, y, CT_F32, 2, sh);
                CHECK_OK(g_ctx, krun(&b, CT_KERNEL_REF, ref, 1));
                /* dx is a difference: errors relative to the size of its terms,
                 * y (|dy| + |sum dy y|) and |dy| + e^y |sum dy| */
                for (int64_t r = 0; r < R; r++) {
                    double sum = 0;
                    for (int64_t i = r * C; i < (r + 1) * C; i++) sum += logsm ? (double)dy[i] : (double)dy[i] * y[i];
                    for (int64_t i = r * C; i < (r + 1) * C; i++)
                        sc[i] = fmax(logsm ? fabs(dy[i]) + exp(y[i]) * fabs(sum) : y[i] * (fabs(dy[i]) + fabs(sum)), 1e-30);
                }
                g_scale = sc;
                int ok = check_fast(&b, ref, n, 0, 1e-6, logsm ? "log_softmax_bwd" : "softmax_bwd");
                CHECK(ok);
            }
        }
        free(x);
        free(y);
        free(ref);
        free(dy);
        free(sc);
    }
    report((const ct_op[]){CT_OP_SOFTMAX, CT_OP_LOG_SOFTMAX, CT_OP_SOFTMAX_BWD, CT_OP_LOG_SOFTMAX_BWD}, 4);
}

static int ce_case(int64_t R, int64_t C, float eps, int ignore, unsigned variant, float dloss) {
    int64_t sh[2] = {R, C}, one = 1;
    size_t n = (size_t)(R * C);
    float *x = fbuf(n), *ref = fbuf(n), loss_r = 0;
    int32_t *t = calloc((size_t)R, sizeof *t);
    sm_data(x, R, C, variant);
    for (int64_t r = 0; r < R; r++) t[r] = (int32_t)((r * 7 + 3) % C);
    if (R > 3) t[1] = ignore, t[R - 1] = ignore;
    if (variant == 3)
        for (int64_t r = 0; r < R; r++) t[r] = ignore; /* every row ignored */
    kcall f;
    kinit(&f, CT_OP_CROSS_ENTROPY, 0, NULL);
    f.nd.fa[0] = eps;
    f.nd.ia[0] = ignore;
    kin(&f, x, CT_F32, 2, sh);
    kin(&f, t, CT_I32, 1, &R);
    int ok = krun(&f, CT_KERNEL_REF, &loss_r, 1) == CT_OK;
    char what[96];
    snprintf(what, sizeof what, "cross_entropy (%lld, %lld) eps %g variant %u", (long long)R, (long long)C,
             (double)eps, variant);
    if (ok) ok = check_fast(&f, &loss_r, 1, 1e-6, 1e-6, what);
    kcall b;
    kinit(&b, CT_OP_CROSS_ENTROPY_BWD, 2, sh);
    b.nd.fa[0] = eps;
    b.nd.ia[0] = ignore;
    kin(&b, &dloss, CT_F32, 0, &one);
    kin(&b, x, CT_F32, 2, sh);
    kin(&b, t, CT_I32, 1, &R);
    if (ok) ok = krun(&b, CT_KERNEL_REF, ref, 1) == CT_OK;
    /* dx = (p - target) g / count: errors relative to (p + target) g / count */
    int64_t cnt = 0;
    for (int64_t r = 0; r < R; r++) cnt += t[r] != ignore;
    double g = cnt ? dloss / (double)cnt : 0;
    double *sc = calloc(n, sizeof *sc);
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++) {
            double tg = (c == t[r] ? 1.0 - eps : 0.0) + eps / (double)C, pr = g ? ref[r * C + c] / g + tg : 0;
            sc[r * C + c] = fmax(fabs(g) * (fabs(pr) + tg), 1e-30);
        }
    if (ok) {
        g_scale = sc;
        ok = check_fast(&b, ref, n, 0, 1e-6, what);
    }
    free(sc);
    free(x);
    free(ref);
    free(t);
    return ok;
}

TEST(cross_entropy_matches_ref) {
    setup();
    static const int64_t shapes[][2] = {{1, 1}, {1, 7}, {7, 9}, {64, 10}, {33, 33}, {1000, 1000}, {5000, 7}};
    for (int si = 0; si < 7; si++)
        for (unsigned v = 0; v < 5; v++) {
            CHECK(ce_case(shapes[si][0], shapes[si][1], 0.0f, -100, v, 1.0f));
            CHECK(ce_case(shapes[si][0], shapes[si][1], 0.1f, -100, v, 0.37f));
            CHECK(ce_case(shapes[si][0], shapes[si][1], 0.1f, 0, v, 1.0f)); /* a real class ignored */
        }
    report((const ct_op[]){CT_OP_CROSS_ENTROPY, CT_OP_CROSS_ENTROPY_BWD}, 2);
}

/* an invalid label: the same status and message as the reference (first bad row) */
TEST(cross_entropy_invalid_label) {
    setup();
    int64_t R = 40, C = 10, sh[2] = {R, C}, one = 1;
    float *x = frand((size_t)(R * C), 1300, -2, 2), *dx = fbuf((size_t)(R * C)), loss, dloss = 1.0f;
    int32_t t[40];
    static const int32_t bad[] = {-1, 10, 1000, -7};
    for (int bi = 0; bi < 4; bi++) {
        for (int r = 0; r < R; r++) t[r] = r % 10;
        t[3] = -100;     /* ignored: fine */
        t[17] = bad[bi]; /* the first invalid row */
        t[30] = 11;
        kcall f, b;
        kinit(&f, CT_OP_CROSS_ENTROPY, 0, NULL);
        f.nd.ia[0] = -100;
        kin(&f, x, CT_F32, 2, sh);
        kin(&f, t, CT_I32, 1, &R);
        kinit(&b, CT_OP_CROSS_ENTROPY_BWD, 2, sh);
        b.nd.ia[0] = -100;
        kin(&b, &dloss, CT_F32, 0, &one);
        kin(&b, x, CT_F32, 2, sh);
        kin(&b, t, CT_I32, 1, &R);
        for (int which = 0; which < 2; which++) {
            kcall *c = which ? &b : &f;
            float *out = which ? dx : &loss;
            ct_status sr = krun(c, CT_KERNEL_REF, out, 1);
            char msg[512];
            snprintf(msg, sizeof msg, "%s", ct_context_last_error(g_ctx));
            CHECK(sr == CT_E_INVALID_ARG && strstr(msg, "row 17"));
            for (int s = 0; s < g_nslots; s++) {
                ct_status sf = krun(c, g_slots[s], out, 2);
                CHECK_MSG(sf == sr && strcmp(msg, ct_context_last_error(g_ctx)) == 0, "%s: '%s' vs ref '%s'",
                          ct_kernel_slot_name(g_slots[s]), ct_context_last_error(g_ctx), msg);
            }
        }
    }
    free(x);
    free(dx);
}

/* ---- through graphs ----------------------------------------------------------------------- */

/* A fast kernel that declines falls back to the reference for good, and the
 * reference result is what the plan holds. */
TEST(graph_decline_falls_back) {
    ct_context *ctx = test_ctx(CT_ISA_AVX2, 0);
    if (ct_context_isa(ctx) < CT_ISA_AVX2) {
        printf("  (skipped: AVX2 not available or lowered by CT_ISA)\n");
        ct_context_free(ctx);
        return;
    }
    ct_graph *g;
    CHECK_OK(ctx, ct_graph_create(ctx, &g));
    ct_node a, b, y, z, s;
    CHECK_OK(ctx, ct_input(g, "a", CT_F32, 4, (int64_t[]){2, 1, 3, 1}, &a));
    CHECK_OK(ctx, ct_input(g, "b", CT_F32, 4, (int64_t[]){1, 4, 1, 5}, &b));
    CHECK_OK(ctx, ct_add(g, a, b, &y));      /* declines: falls back */
    CHECK_OK(ctx, ct_relu(g, y, &z));        /* runs on avx2 */
    CHECK_OK(ctx, ct_sum(g, z, 0x5, 0, &s)); /* R K R K: declines */
    ct_plan *p;
    CHECK_OK(ctx, ct_compile(g, CT_NONE, 3, (ct_node[]){y, z, s}, NULL, &p));
    ct_tensor ta, tb, ty, tz, ts;
    CHECK_OK(ctx, ct_plan_tensor(p, a, &ta));
    CHECK_OK(ctx, ct_plan_tensor(p, b, &tb));
    float *av = ta.data, *bv = tb.data;
    for (int i = 0; i < 6; i++) av[i] = (float)i - 2.5f;
    for (int i = 0; i < 20; i++) bv[i] = 0.25f * (float)i - 2.0f;
    for (int rep = 0; rep < 2; rep++) {
        CHECK_OK(ctx, ct_plan_forward(p, 1));
        CHECK_OK(ctx, ct_plan_tensor(p, y, &ty));
        CHECK_OK(ctx, ct_plan_tensor(p, z, &tz));
        CHECK_OK(ctx, ct_plan_tensor(p, s, &ts));
        const float *yv = ty.data, *zv = tz.data, *sv = ts.data;
        for (int i0 = 0; i0 < 2; i0++)
            for (int i1 = 0; i1 < 4; i1++)
                for (int i2 = 0; i2 < 3; i2++)
                    for (int i3 = 0; i3 < 5; i3++) {
                        int o = ((i0 * 4 + i1) * 3 + i2) * 5 + i3;
                        float want = av[i0 * 3 + i2] + bv[i1 * 5 + i3];
                        CHECK(yv[o] == want);
                        CHECK(zv[o] == (want > 0 ? want : 0));
                    }
        /* s = sum over dims 0 and 2 -> (4, 5) */
        for (int i1 = 0; i1 < 4; i1++)
            for (int i3 = 0; i3 < 5; i3++) {
                double acc = 0;
                for (int i0 = 0; i0 < 2; i0++)
                    for (int i2 = 0; i2 < 3; i2++) acc += zv[((i0 * 4 + i1) * 3 + i2) * 5 + i3];
                CHECK(fabs(sv[i1 * 5 + i3] - acc) <= 1e-6 * fmax(1.0, fabs(acc)));
            }
        CHECK(strcmp(ct_plan_kernel_name(p, y), "ref") == 0);
        CHECK(strcmp(ct_plan_kernel_name(p, s), "ref") == 0);
        CHECK(strcmp(ct_plan_kernel_name(p, z), "avx2") == 0);
    }
    ct_plan_free(p);
    ct_graph_free(g);
    ct_context_free(ctx);
}

/* Builds a small model using every op of these files, runs forward (training)
 * and backward, and returns loss, the logits and all parameter gradients. */
typedef struct {
    float loss, logits[240], grads[8192];
    size_t n_grads, off[8], len[8];
    int n_params, n_kernels;
    char kernels[256][16];
} step_out;

static ct_status train_step(ct_context *ctx, step_out *o) {
    enum { B = 24, D = 37, H = 45, K = 10 };
    ct_graph *g;
    CT_TRY(ct_graph_create(ctx, &g));
    ct_node x, lab, w1, b1, w2, b2, gb, h, u, v, t1, t2, z, mu, zc, zd, zs, lg, l, sm, sc, ls;
    ct_plan *p = NULL;
    ct_status s = CT_OK;
#define G(expr)                          \
    do {                                 \
        if ((s = (expr)) != CT_OK) goto done; \
    } while (0)
    G(ct_input(g, "x", CT_F32, 2, (int64_t[]){B, D}, &x));
    G(ct_input(g, "labels", CT_I32, 1, (int64_t[]){B}, &lab));
    G(ct_param(g, "w1", 2, (int64_t[]){H, D}, CT_INIT_KAIMING_UNIFORM, D, &w1));
    G(ct_param(g, "b1", 1, (int64_t[]){H}, CT_INIT_KAIMING_UNIFORM, D, &b1));
    G(ct_param(g, "w2", 2, (int64_t[]){K, H}, CT_INIT_KAIMING_UNIFORM, H, &w2));
    G(ct_param(g, "b2", 1, (int64_t[]){K}, CT_INIT_KAIMING_UNIFORM, H, &b2));
    G(ct_param(g, "gb", 2, (int64_t[]){B, 1}, CT_INIT_ONES, 1, &gb));
    G(ct_linear(g, x, w1, CT_NONE, &h));
    G(ct_add(g, h, b1, &h));          /* row-vector bias: sum_to in backward */
    G(ct_gelu(g, h, 0, &u));
    G(ct_silu(g, h, &t1));
    G(ct_sigmoid(g, h, &t2));
    G(ct_mul(g, t1, t2, &v));
    G(ct_add(g, u, v, &z));
    G(ct_tanh(g, z, &t1));
    G(ct_gelu(g, t1, 1, &t2));
    G(ct_relu(g, t2, &t1));
    G(ct_add(g, z, t1, &z));
    G(ct_mean(g, z, 0x2, 1, &mu));    /* (B, 1): broadcast_to in backward */
    G(ct_sub(g, z, mu, &zc));         /* column broadcast */
    G(ct_div(g, zc, gb, &zd));        /* column broadcast of a parameter */
    G(ct_scale(g, zd, 0.5f, &zs));
    G(ct_dropout(g, zs, 0.2f, &zs));
    G(ct_linear(g, zs, w2, CT_NONE, &lg));
    G(ct_add(g, lg, b2, &lg));
    G(ct_softmax(g, lg, &sm));
    G(ct_log_softmax(g, lg, &ls));
    G(ct_mul(g, sm, ls, &sc));        /* negative entropy, through both softmax backward ops */
    G(ct_sum(g, sc, 0x3, 0, &sc));
    G(ct_cross_entropy(g, lg, lab, 0.1f, -100, &l));
    G(ct_add(g, l, sc, &l));
    G(ct_compile(g, l, 1, &lg, NULL, &p));
    ct_tensor tx, tl, tlg;
    ct_plan_tensor(p, x, &tx);
    ct_plan_tensor(p, lab, &tl);
    test_fill_uniform(tx.data, B * D, 5, -2, 2);
    for (int i = 0; i < B; i++) ((int32_t *)tl.data)[i] = i == 5 ? -100 : (i * 3) % K;
    ct_plan_set_step(p, 3);
    if ((s = ct_plan_forward(p, 1)) == CT_OK) s = ct_plan_backward(p);
    if (s == CT_OK) {
        ct_plan_loss(p, &o->loss);
        ct_plan_tensor(p, lg, &tlg);
        memcpy(o->logits, tlg.data, sizeof(float) * B * K);
        float *pw, *pg;
        ct_plan_param_arena(p, &pw, &pg, &o->n_grads);
        if (o->n_grads > 8192 || ct_plan_num_params(p) > 8) {
            s = CT_E_INTERNAL;
            goto done;
        }
        memcpy(o->grads, pg, o->n_grads * sizeof(float));
        o->n_params = ct_plan_num_params(p);
        for (int i = 0; i < o->n_params; i++) {
            ct_tensor gt;
            ct_plan_param_info(p, i, NULL, NULL, &gt);
            o->off[i] = (size_t)((float *)gt.data - pg);
            o->len[i] = (size_t)ct_tensor_numel(&gt);
        }
        o->n_kernels = 0;
        for (ct_node i = 0; i < ct_graph_num_nodes(g) && i < 256; i++)
            snprintf(o->kernels[o->n_kernels++], 16, "%s", ct_plan_kernel_name(p, i));
    }
done:
#undef G
    ct_plan_free(p);
    ct_graph_free(g);
    return s;
}

/* max |a - b| / max |b| (the golden tests' criterion) */
static double norm_err(const float *a, const float *b, size_t n) {
    double d = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]);
        if (!(e <= d)) d = e;
        if (fabs(b[i]) > m) m = fabs(b[i]);
    }
    return m > 0 ? d / m : d;
}

TEST(graph_train_step_matches_ref) {
    ct_context *cr = test_ctx(CT_ISA_REF, 0), *cf = test_ctx(CT_ISA_AVX2, 0);
    static step_out r, f;
    CHECK_OK(cr, train_step(cr, &r));
    CHECK_OK(cf, train_step(cf, &f));
    CHECK(r.n_grads == f.n_grads && r.n_params == f.n_params);
    double el = fabs(f.loss - r.loss) / fabs(r.loss), elg = norm_err(f.logits, r.logits, 240), eg = 0;
    for (int i = 0; i < r.n_params; i++) {
        double e = norm_err(f.grads + r.off[i], r.grads + r.off[i], r.len[i]);
        if (e > eg) eg = e;
    }
    printf("    train step: loss %.7g vs ref %.7g (rel %.2g), logits %.2g, worst param grad %.2g (max|d|/max|ref|)\n",
           (double)f.loss, (double)r.loss, el, elg, eg);
    CHECK(el < 1e-5 && elg < 1e-5 && eg < 1e-5);
    if (ct_context_isa(cf) >= CT_ISA_AVX2) {
        int fast = 0;
        for (int i = 0; i < f.n_kernels; i++) fast += strcmp(f.kernels[i], "avx2") == 0 || strcmp(f.kernels[i], "avx512") == 0;
        printf("    %d nodes ran a SIMD kernel\n", fast);
        CHECK(fast >= 20);
    }
    ct_context_free(cr);
    ct_context_free(cf);
}

TEST(report_worst) {
    report((const ct_op[]){CT_OP_SCALE, CT_OP_BINARY, CT_OP_DROPOUT, CT_OP_SUM, CT_OP_BROADCAST_TO, CT_OP_SUM_TO}, 6);
}

TEST_MAIN(T(unary_matches_ref), T(unary_special_values), T(activation_tables_and_tails), T(unary_bwd_matches_ref), T(scale_exact),
          T(binary_fast_paths_exact), T(binary_declines_other_broadcasts), T(dropout_same_mask), T(dropout_block_offset), T(unary_bwd_keep_equals_unary_and_unary_bwd), T(sum_patterns),
          T(sum_declines_other_patterns), T(broadcast_to_patterns), T(sum_to_patterns), T(softmax_matches_ref),
          T(cross_entropy_matches_ref), T(cross_entropy_invalid_label), T(graph_decline_falls_back),
          T(graph_train_step_matches_ref), T(report_worst))
