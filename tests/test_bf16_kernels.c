/* tests/test_bf16_kernels.c - the AVX2 / AVX-512 kernels that read and write
 * BF16 and FP16 themselves (ct_op_info.simd_lowp, src/kernels/simd/simd_lowp.h),
 * called directly on hand-built ct_kargs, and whole BF16 / FP16 plans using
 * them.
 *
 * Kernel cases run once per 16-bit dtype (g_low: BF16, then FP16): every
 * input of the case is a value representable in it. Each SIMD slot the CPU
 * has (AVX2 always, AVX-512 where present) runs the kernel three ways:
 *   low   the 16-bit tensors themselves (the path under test),
 *   f32   the same SIMD kernel on FP32 copies of the same values, output
 *         rounded to the 16-bit dtype afterwards (what the executor's copies
 *         give),
 *   ref   the reference kernel on the FP32 values, output rounded.
 * Checked: low == f32 bit for bit (output and saved state: the kernels
 * convert in registers and do the FP32 math unchanged), and low within one
 * rounding of ref (2^-8 relative for BF16, 2^-11 for FP16: the SIMD kernels
 * differ from the reference by ~1e-7, which can move a value across a
 * rounding boundary). Shapes cover tails, several tiles and threading.
 * Configurations outside a kernel's 16-bit reach (a plane or row above
 * CT_BF16_TILE, batchnorm's column path: planes below VW without the rows
 * path's workspace) must decline with
 * CT_E_UNSUPPORTED.
 *
 * Plan cases: a BF16 CNN and a small GPT trained a few steps with the SIMD
 * kernels reading BF16 (default) and with CT_BF16_NATIVE=0 (FP32 copies for
 * every kernel): where oneDNN's BF16 is not native by default (this
 * project's machine), the two runs are the same computation and must agree
 * bit for bit; the activation arena of the BF16 CNN and of the bf16-pure
 * gpt-char-small is at most 55% of the FP32 one when matmul/conv run
 * natively too (CT_BF16_NATIVE=1). */
#include <stdint.h>

#include <dnnl.h>

#include "core/internal.h"
#include "graph/ir.h"
#include "kernels/kernels.h"
#include "kernels/pool_plane.h"
#include "test.h"

static ct_context *g_ctx;
static int g_slots[2], g_nslots;

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

/* ---- one kernel case ------------------------------------------------------------------------ */

enum { IN_LOW = 0, IN_F32, IN_STATE, IN_I32 }; /* IN_LOW: the 16-bit dtype g_low */

static ct_dtype g_low = CT_BF16; /* the kernel cases' 16-bit dtype (LOW_TEST runs each case for both) */

typedef struct {
    const char *label;
    ct_op op;
    int64_t ia[8];
    float fa[2];
    int n_in;
    int kind[CT_MAX_INPUTS];          /* IN_*: BF16 / FP32 data, a state input (aux), int32 ids */
    int nd[CT_MAX_INPUTS];
    int64_t shape[CT_MAX_INPUTS][4];
    float lo[CT_MAX_INPUTS], hi[CT_MAX_INPUTS];
    int out_nd;
    int64_t out_shape[4];
    int out_low;                     /* 1: BF16 output, 0: FP32 */
    size_t aux_bytes;                 /* saved state the kernel writes */
    const void *state_aux;            /* in_aux of every input (the backward's forward node) */
    double floor;                     /* relative error floor for the comparison with ref */
    const float *fixed[CT_MAX_INPUTS]; /* given values (BF16-representable) instead of random ones */
} kcase;

static size_t g_ws_cap; /* nonzero: krun hands kernels at most this many bytes of workspace */
static char g_impl[96]; /* the oneDNN kernel's implementation in krun's last call ("" for others) */

static int64_t nel(int nd, const int64_t *s) {
    int64_t n = 1;
    for (int i = 0; i < nd; i++) n *= s[i];
    return n;
}

static uint16_t lp_from(float x) { return g_low == CT_F16 ? ct_f32_to_f16(x) : ct_f32_to_bf16(x); }
static float lp_to(uint16_t h) { return g_low == CT_F16 ? ct_f16_to_f32(h) : ct_bf16_to_f32(h); }
static float bround(float x) { return lp_to(lp_from(x)); }

/* A kernel test run for BF16 and then for FP16 (g_low). */
#define LOW_TEST(name)                                                    \
    static void name##_low(void);                                         \
    TEST(name) {                                                          \
        setup();                                                          \
        for (int l_ = 0; l_ < 2; l_++) {                                  \
            g_low = l_ ? CT_F16 : CT_BF16;                                \
            printf("   %s\n", ct_dtype_name(g_low));                      \
            name##_low();                                                 \
        }                                                                 \
        g_low = CT_BF16;                                                  \
    }                                                                     \
    static void name##_low(void)

typedef struct {
    float *vals[CT_MAX_INPUTS];       /* data inputs' values (BF16-representable) */
    int32_t *ids[CT_MAX_INPUTS];
} kdata;

static void kdata_make(const kcase *c, unsigned seed, kdata *d) {
    memset(d, 0, sizeof *d);
    for (int i = 0; i < c->n_in; i++) {
        int64_t n = nel(c->nd[i], c->shape[i]);
        if (c->kind[i] == IN_STATE) continue;
        if (c->kind[i] == IN_I32) {
            d->ids[i] = malloc((size_t)n * sizeof(int32_t));
            for (int64_t j = 0; j < n; j++) d->ids[i][j] = (int32_t)((j * 7 + seed) % (unsigned)c->hi[i]);
            continue;
        }
        d->vals[i] = malloc((size_t)n * sizeof(float));
        if (c->fixed[i]) {
            memcpy(d->vals[i], c->fixed[i], (size_t)n * sizeof(float));
            continue;
        }
        test_fill_uniform(d->vals[i], (size_t)n, seed + 17u * (unsigned)i, c->lo[i], c->hi[i]);
        if (c->kind[i] == IN_LOW)
            for (int64_t j = 0; j < n; j++) d->vals[i][j] = bround(d->vals[i][j]);
    }
}

static void kdata_free(const kcase *c, kdata *d) {
    for (int i = 0; i < c->n_in; i++) {
        free(d->vals[i]);
        free(d->ids[i]);
    }
}

/* Runs c on `slot`; bf16: g_low tensors for IN_LOW inputs and a g_low output
 * (else FP32 ones). out: the output as floats (rounded to g_low when the
 * case's output is 16-bit), aux: the saved state. Returns the kernel's status. */
static ct_status krun(const kcase *c, const kdata *d, int slot, int bf16, float *out, void *aux) {
    ct_node_def nd;
    memset(&nd, 0, sizeof nd);
    nd.op = c->op;
    nd.n_in = c->n_in;
    memcpy(nd.ia, c->ia, sizeof c->ia);
    nd.fa[0] = c->fa[0];
    nd.fa[1] = c->fa[1];
    nd.ndim = c->out_nd;
    memcpy(nd.shape, c->out_shape, sizeof c->out_shape);
    int out_bf = bf16 && c->out_low;
    nd.dtype = out_bf ? g_low : CT_F32;
    ct_kargs k;
    memset(&k, 0, sizeof k);
    k.ctx = g_ctx;
    k.node = &nd;
    k.nthreads = ct_context_num_threads(g_ctx);
    k.training = 1;
    k.seed = 99;
    k.step = 3;
    int64_t no = nel(c->out_nd, c->out_shape);
    void *obuf = calloc((size_t)(no ? no : 1), sizeof(float));
    k.out = ct_tensor_make(obuf, nd.dtype, c->out_nd, c->out_shape);
    void *ibuf[CT_MAX_INPUTS] = {0};
    for (int i = 0; i < c->n_in; i++) {
        int64_t n = nel(c->nd[i], c->shape[i]);
        if (c->kind[i] == IN_STATE) {
            k.in[i] = ct_tensor_make(NULL, bf16 ? g_low : CT_F32, c->nd[i], c->shape[i]);
            k.in_aux[i] = (void *)c->state_aux;
            continue;
        }
        if (c->kind[i] == IN_I32) {
            ibuf[i] = malloc((size_t)n * sizeof(int32_t));
            memcpy(ibuf[i], d->ids[i], (size_t)n * sizeof(int32_t));
            k.in[i] = ct_tensor_make(ibuf[i], CT_I32, c->nd[i], c->shape[i]);
            continue;
        }
        int as_bf = bf16 && c->kind[i] == IN_LOW;
        ibuf[i] = malloc((size_t)n * (as_bf ? 2 : 4));
        for (int64_t j = 0; j < n; j++) {
            if (as_bf) ((uint16_t *)ibuf[i])[j] = lp_from(d->vals[i][j]);
            else ((float *)ibuf[i])[j] = d->vals[i][j];
        }
        k.in[i] = ct_tensor_make(ibuf[i], as_bf ? g_low : CT_F32, c->nd[i], c->shape[i]);
        k.in_aux[i] = (void *)c->state_aux;
    }
    k.aux = aux;
    /* scratch: the reference sum accumulates its outputs in doubles */
    size_t wsb = (size_t)(no + nel(c->nd[0], c->shape[0])) * sizeof(double);
    if (c->op == CT_OP_ATTENTION || c->op == CT_OP_ATTENTION_BWD) {
        int64_t T = c->out_shape[1], D = c->op == CT_OP_ATTENTION ? c->out_shape[2] : c->out_shape[2] / 3;
        wsb = (size_t)k.nthreads * ct_attention_ws_per_thread_bf16(T, D / c->ia[0]);
    }
    if (c->op == CT_OP_BATCHNORM || c->op == CT_OP_BN_RELU || c->op == CT_OP_BATCHNORM_BWD_DATA ||
        c->op == CT_OP_BATCHNORM_BWD_GAMMA) { /* the rows path's partials (ct_ws_batchnorm in a plan) */
        int xi = c->op == CT_OP_BATCHNORM || c->op == CT_OP_BN_RELU ? 0 : 1;
        int64_t N = c->shape[xi][0], C = c->shape[xi][1];
        size_t b = ct_bn_rows_ws_bytes(N, C, nel(c->nd[xi], c->shape[xi]) / (N * C));
        if (b > wsb) wsb = b;
    }
    if (g_ws_cap && wsb > g_ws_cap) wsb = g_ws_cap;
    k.ws = malloc(wsb);
    k.ws_bytes = wsb;
    void *cache = NULL; /* a oneDNN kernel's primitives, freed after the call */
    ct_scratch scratch = {0};
    k.cache = &cache;
    k.scratch = &scratch;
    ct_context_clear_error(g_ctx);
    ct_status s = ct_op_table(c->op)->kernel[slot](&k);
    const char *impl = cache ? ct_onednn_cache_impl(cache) : NULL;
    snprintf(g_impl, sizeof g_impl, "%s", impl ? impl : "");
    if (cache) ct_op_table(c->op)->cache_free(cache);
    ct_scratch_release(g_ctx, &scratch);
    free(k.ws);
    for (int64_t j = 0; j < no; j++) {
        if (out_bf) out[j] = lp_to(((uint16_t *)obuf)[j]);
        else out[j] = c->out_low ? bround(((float *)obuf)[j]) : ((float *)obuf)[j];
    }
    free(obuf);
    for (int i = 0; i < c->n_in; i++) free(ibuf[i]);
    return s;
}

/* number of elements where a and b differ as bit patterns (NaN == NaN) */
static int64_t ndiff(const float *a, const float *b, int64_t n) {
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t ua, ub;
        memcpy(&ua, &a[i], 4);
        memcpy(&ub, &b[i], 4);
        m += ua != ub && !(isnan(a[i]) && isnan(b[i]));
    }
    return m;
}

/* Runs the three ways on every slot and checks them (see the file comment).
 * Returns the worst relative difference to ref; -1 after a failed check. */
static double kcheck(const kcase *c, unsigned seed) {
    kdata d;
    kdata_make(c, seed, &d);
    int64_t no = nel(c->out_nd, c->out_shape);
    size_t ab = c->aux_bytes ? c->aux_bytes : 4;
    float *ob = malloc((size_t)(no ? no : 1) * 4), *of = malloc((size_t)(no ? no : 1) * 4),
          *orf = malloc((size_t)(no ? no : 1) * 4);
    char *ab1 = calloc(1, ab), *ab2 = calloc(1, ab), *ab3 = calloc(1, ab);
    double worst = 0;
    int ok = krun(c, &d, CT_KERNEL_REF, 0, orf, ab3) == CT_OK;
    if (!ok) fprintf(stderr, "  %s: the reference failed: %s\n", c->label, ct_context_last_error(g_ctx));
    for (int si = 0; ok && si < g_nslots; si++) {
        int slot = g_slots[si];
        ct_status s1 = krun(c, &d, slot, 1, ob, ab1), s2 = krun(c, &d, slot, 0, of, ab2);
        if (s1 != CT_OK || s2 != CT_OK) {
            fprintf(stderr, "  %s [%s]: %s %s, f32 %s: %s\n", c->label, ct_kernel_slot_name(slot), ct_dtype_name(g_low),
                    ct_status_name(s1), ct_status_name(s2), ct_context_last_error(g_ctx));
            ok = 0;
            break;
        }
        int64_t nd = ndiff(ob, of, no);
        if (nd || memcmp(ab1, ab2, ab)) {
            fprintf(stderr, "  %s [%s]: %s I/O differs from FP32 copies: %lld outputs, saved state %s\n", c->label,
                    ct_kernel_slot_name(slot), ct_dtype_name(g_low), (long long)nd,
                    memcmp(ab1, ab2, ab) ? "differs" : "equal");
            ok = 0;
            break;
        }
        for (int64_t j = 0; j < no; j++) {
            double e = fabs((double)ob[j] - orf[j]) / fmax(fabs((double)orf[j]), c->floor);
            if (!(e <= worst)) worst = e != e ? INFINITY : e;
        }
    }
    /* one rounding (BF16: 2^-8 relative, FP16: 2^-11) on each side plus the SIMD/ref difference */
    if (ok && !(worst <= (g_low == CT_F16 ? 1.0 / 1024 : 1.0 / 128))) {
        fprintf(stderr, "  %s: %s output vs reference: worst relative difference %.3g\n", c->label, ct_dtype_name(g_low),
                worst);
        ok = 0;
    }
    free(ob);
    free(of);
    free(orf);
    free(ab1);
    free(ab2);
    free(ab3);
    kdata_free(c, &d);
    if (ok) printf("    %-34s max rel diff to ref %.2e\n", c->label, worst);
    return ok ? worst : -1;
}

/* Every slot declines the 16-bit configuration with CT_E_UNSUPPORTED. */
static int kdeclines(const kcase *c) {
    kdata d;
    kdata_make(c, 5, &d);
    int64_t no = nel(c->out_nd, c->out_shape);
    float *o = malloc((size_t)no * 4);
    void *aux = calloc(1, c->aux_bytes ? c->aux_bytes : 4);
    int ok = 1;
    for (int si = 0; si < g_nslots; si++)
        if (krun(c, &d, g_slots[si], 1, o, aux) != CT_E_UNSUPPORTED) {
            fprintf(stderr, "  %s [%s]: expected CT_E_UNSUPPORTED\n", c->label, ct_kernel_slot_name(g_slots[si]));
            ok = 0;
        }
    free(o);
    free(aux);
    kdata_free(c, &d);
    return ok;
}

#define SHAPE(...) {__VA_ARGS__}

/* ---- elementwise -------------------------------------------------------------------------- */

LOW_TEST(eltwise) {
    const int64_t n = 40000 + 13; /* several EW_TILEs and chunks, a tail */
    for (int kind = 0; kind < CT_UNARY_COUNT; kind++) {
        kcase c = {"unary", CT_OP_UNARY, {kind}, {0}, 1, {IN_LOW}, {1}, {{n}}, {-4}, {4}, 1, {n}, 1, 0, NULL, 1e-2, {0}};
        CHECK(kcheck(&c, 1) >= 0);
        int from_out = kind == CT_UNARY_RELU || kind == CT_UNARY_SIGMOID || kind == CT_UNARY_TANH;
        kcase b = {"unary_bwd", CT_OP_UNARY_BWD, {kind, from_out}, {0}, 2, {IN_LOW, IN_LOW}, {1, 1}, {{n}, {n}},
                   {-2, -4}, {2, 4}, 1, {n}, 1, 0, NULL, 1e-2, {0}};
        CHECK(kcheck(&b, 2) >= 0);
    }
    kcase sc = {"scale", CT_OP_SCALE, {0}, {0.37f}, 1, {IN_LOW}, {1}, {{n}}, {-3}, {3}, 1, {n}, 1, 0, NULL, 1e-3, {0}};
    CHECK(kcheck(&sc, 3) >= 0);
    /* same shape; bias row broadcast with an FP32 bias; column broadcast; BF16 in -> FP32 out */
    kcase b1 = {"binary add", CT_OP_BINARY, {CT_BIN_ADD}, {0}, 2, {IN_LOW, IN_LOW}, {2, 2}, {{97, 301}, {97, 301}},
                {-2, -2}, {2, 2}, 2, {97, 301}, 1, 0, NULL, 1e-2, {0}};
    CHECK(kcheck(&b1, 4) >= 0);
    kcase b2 = {"binary mul bias f32", CT_OP_BINARY, {CT_BIN_MUL}, {0}, 2, {IN_LOW, IN_F32}, {3, 1},
                {{5, 40, 301}, {301}}, {-2, -2}, {2, 2}, 3, {5, 40, 301}, 1, 0, NULL, 1e-2, {0}};
    CHECK(kcheck(&b2, 5) >= 0);
    kcase b3 = {"binary sub column", CT_OP_BINARY, {CT_BIN_SUB}, {0}, 2, {IN_LOW, IN_LOW}, {2, 2},
                {{300, 70}, {300, 1}}, {-2, -2}, {2, 2}, 2, {300, 70}, 1, 0, NULL, 1e-2, {0}};
    CHECK(kcheck(&b3, 6) >= 0);
    kcase b4 = {"binary div to f32", CT_OP_BINARY, {CT_BIN_DIV}, {0}, 2, {IN_LOW, IN_F32}, {2, 2},
                {{300, 70}, {300, 70}}, {-2, 1}, {2, 3}, 2, {300, 70}, 0, 0, NULL, 1e-6, {0}};
    CHECK(kcheck(&b4, 7) >= 0);
    kcase dr = {"dropout p=0.2", CT_OP_DROPOUT, {11}, {0.2f}, 1, {IN_LOW}, {1}, {{n}}, {-2}, {2}, 1, {n}, 1, 0, NULL,
                1e-2, {0}};
    CHECK(kcheck(&dr, 8) >= 0);
    /* drop path (ia[1]: row length): a whole row kept (scaled) or zeroed, rows of 97 (vectors and a tail) */
    kcase dp = {"drop path p=0.3", CT_OP_DROPOUT, {11, 97}, {0.3f}, 1, {IN_LOW}, {2}, {{40, 97}}, {-2}, {2}, 2,
                {40, 97}, 1, 0, NULL, 1e-2, {0}};
    CHECK(kcheck(&dp, 9) >= 0);
}

/* ---- normalization ------------------------------------------------------------------------- */

/* batchnorm's backward kernels (data with an FP32 and a BF16 gamma, gamma)
 * on forward case f's shape, from the reference forward's statistics */
static int bn_backward(const kcase *f, const char *tag) {
    const int64_t N = f->shape[0][0], C = f->shape[0][1], H = f->shape[0][2], W = f->shape[0][3];
    kdata d;
    kdata_make(f, 11, &d);
    float *y = malloc((size_t)(N * C * H * W) * 4), *aux = calloc(2 * (size_t)C, 4);
    int ok = krun(f, &d, CT_KERNEL_REF, 0, y, aux) == CT_OK;
    kdata_free(f, &d);
    char l1[64], l2[64], l3[64];
    snprintf(l1, sizeof l1, "batchnorm_bwd_data%s", tag);
    snprintf(l2, sizeof l2, "batchnorm_bwd_data bf16 gamma%s", tag);
    snprintf(l3, sizeof l3, "batchnorm_bwd_gamma%s", tag);
    kcase bd = {l1, CT_OP_BATCHNORM_BWD_DATA, {0}, {0}, 4, {IN_LOW, IN_LOW, IN_F32, IN_STATE},
                {4, 4, 1, 4}, {{N, C, H, W}, {N, C, H, W}, {C}, {N, C, H, W}}, {-1, -1, 0.5f, 0}, {1, 3, 1.5f, 0},
                4, {N, C, H, W}, 1, 0, aux, 1e-1, {0}};
    kcase bg = {l3, CT_OP_BATCHNORM_BWD_GAMMA, {0}, {0}, 3, {IN_LOW, IN_LOW, IN_STATE},
                {4, 4, 4}, {{N, C, H, W}, {N, C, H, W}, {N, C, H, W}}, {-1, -1, 0}, {1, 3, 0},
                1, {C}, 0, 0, aux, 1.0, {0}};
    /* the same values give the BF16 kernel and the reference far closer results than the BF16 output
       rounding; bwd_data's floor: its outputs cancel (sums over the batch), errors are relative to ~0.1 */
    ok = ok && kcheck(&bd, 12) >= 0;
    bd.label = l2;
    bd.kind[2] = IN_LOW;
    ok = ok && kcheck(&bd, 15) >= 0;
    ok = ok && kcheck(&bg, 13) >= 0;
    free(y);
    free(aux);
    return ok;
}

LOW_TEST(batchnorm) {
    const int64_t N = 6, C = 5, H = 9, W = 11, S = H * W; /* planes of 99: vectors and a tail */
    kcase f = {"batchnorm", CT_OP_BATCHNORM, {0}, {0.1f, 1e-5f}, 5,
               {IN_LOW, IN_F32, IN_F32, IN_F32, IN_F32}, {4, 1, 1, 1, 1},
               {{N, C, H, W}, {C}, {C}, {C}, {C}}, {-1, 0.5f, -0.5f, -0.1f, 0.5f}, {3, 1.5f, 0.5f, 0.1f, 1.5f},
               4, {N, C, H, W}, 1, 2 * (size_t)C * sizeof(float), NULL, 1e-2, {0}};
    CHECK(kcheck(&f, 11) >= 0);
    kcase fp = f; /* bf16-pure / fp16-pure: gamma and beta 16-bit too */
    fp.label = "batchnorm 16-bit gamma/beta";
    fp.kind[1] = fp.kind[2] = IN_LOW;
    CHECK(kcheck(&fp, 14) >= 0);
    CHECK(bn_backward(&f, ""));
    /* planes below VW run the rows path (with its workspace: ct_bn_rows_ws_bytes), else the column path,
       which declines; planes above a tile run (in registers, no tiles) */
    kcase small = f, big = f;
    small.label = "batchnorm S=2 (rows path)";
    small.shape[0][2] = small.out_shape[2] = 1;
    small.shape[0][3] = small.out_shape[3] = 2;
    big.label = "batchnorm S>tile";
    big.shape[0][0] = big.out_shape[0] = 1;
    big.shape[0][1] = big.out_shape[1] = 1;
    big.shape[1][0] = big.shape[2][0] = big.shape[3][0] = big.shape[4][0] = 1;
    big.shape[0][2] = big.out_shape[2] = 100;
    big.shape[0][3] = big.out_shape[3] = CT_BF16_TILE / 100 + 1;
    big.aux_bytes = 8;
    CHECK(kcheck(&small, 19) >= 0);
    CHECK(bn_backward(&small, " S=2"));
    g_ws_cap = 64; /* no room for the rows path's partials: the column path, which declines 16-bit I/O */
    small.label = "batchnorm S=2 without the workspace (declines)";
    CHECK(kdeclines(&small));
    g_ws_cap = 0;
    CHECK(kcheck(&big, 18) >= 0);
    CHECK(bn_backward(&big, " S>tile"));
    /* batchnorm+relu (the fusion pass's BN_RELU): the same batchnorm, relu in
       place and one mask bit per element after the statistics; then relu's
       backward from those bits (RELU_MASK_BWD) */
    size_t fab = 2 * (size_t)C * sizeof(float) + (size_t)(N * C * S + 7) / 8;
    kcase fr = f;
    fr.label = "batchnorm+relu";
    fr.op = CT_OP_BN_RELU;
    fr.aux_bytes = fab;
    CHECK(kcheck(&fr, 16) >= 0);
    kdata d;
    kdata_make(&fr, 16, &d);
    float *yr = malloc((size_t)(N * C * S) * 4);
    char *raux = calloc(1, fab);
    CHECK(krun(&fr, &d, CT_KERNEL_REF, 0, yr, raux) == CT_OK);
    kdata_free(&fr, &d);
    int64_t on = 0;
    for (int64_t i = 0; i < N * C * S; i++) on += yr[i] > 0;
    CHECK(on > N * C * S / 4 && on < N * C * S * 3 / 4); /* the bits mix 0 and 1 */
    kcase mb = {"relu_mask_bwd", CT_OP_RELU_MASK_BWD, {0}, {0}, 2, {IN_LOW, IN_STATE}, {4, 4},
                {{N, C, H, W}, {N, C, H, W}}, {-3, 0}, {3, 0}, 4, {N, C, H, W}, 1, 0, raux, 1e-2, {0}};
    CHECK(kcheck(&mb, 17) >= 0);
    free(yr);
    free(raux);
}

/* batchnorm+relu's BF16 / FP16 relu and mask bits: the SIMD packers against
 * the scalar one on every 16-bit pattern (NaNs, -0, infinities, subnormals),
 * a length with a tail, single- and multi-threaded */
LOW_TEST(relu_pack_all_patterns) {
    const int64_t n = 65536 * 2 + 13;
    uint16_t *y0 = malloc((size_t)n * 2), *y1 = malloc((size_t)n * 2);
    uint8_t *b0 = malloc((size_t)(n + 7) / 8), *b1 = malloc((size_t)(n + 7) / 8);
    for (int isa = 0; isa < 2; isa++) {
        if (isa == 1 && ct_context_isa(g_ctx) < CT_ISA_AVX512) break;
        if (ct_context_isa(g_ctx) < CT_ISA_AVX2) break;
        for (int nth = 1; nth <= 2; nth++) {
            for (int64_t i = 0; i < n; i++) y0[i] = y1[i] = (uint16_t)(i * 40503u + (uint64_t)i / 65536);
            memset(b0, 0xa5, (size_t)(n + 7) / 8);
            memset(b1, 0x5a, (size_t)(n + 7) / 8);
            ct_fused_relu_pack_lp(y0, b0, n, 1, g_low);
            (isa ? ct_k_relu_pack_lp_avx512 : ct_k_relu_pack_lp_avx2)(y1, b1, n, nth, g_low);
            int64_t bad = -1, wrong = -1;
            uint16_t want = 0;
            for (int64_t i = 0; i < n && bad < 0; i++)
                if (y0[i] != y1[i] || ((b0[i / 8] >> (i % 8)) & 1) != ((b1[i / 8] >> (i % 8)) & 1)) bad = i;
            /* the scalar packer is the FP32 path: relu of the widened value, rounded back (a NaN quieted) */
            for (int64_t i = 0; i < n && wrong < 0; i++) {
                float x = lp_to((uint16_t)(i * 40503u + (uint64_t)i / 65536)), r = x > 0.0f || isnan(x) ? x : 0.0f;
                want = lp_from(r);
                if (y0[i] != want || ((b0[i / 8] >> (i % 8)) & 1) != (r > 0.0f)) wrong = i;
            }
            CHECK_MSG(wrong < 0, "scalar packer, element %lld: 0x%04x, the FP32 path gives 0x%04x", (long long)wrong,
                      wrong < 0 ? 0 : y0[wrong], want);
            CHECK_MSG(bad < 0, "%s, %d threads: element %lld: 0x%04x bit %d, scalar 0x%04x bit %d",
                      isa ? "avx512" : "avx2", nth, (long long)bad, bad < 0 ? 0 : y1[bad],
                      bad < 0 ? 0 : (b1[bad / 8] >> (bad % 8)) & 1, bad < 0 ? 0 : y0[bad],
                      bad < 0 ? 0 : (b0[bad / 8] >> (bad % 8)) & 1);
        }
    }
    free(y0);
    free(y1);
    free(b0);
    free(b1);
}

LOW_TEST(layernorm) {
    const int64_t R = 67, D = 200;
    kcase f = {"layernorm", CT_OP_LAYERNORM, {0}, {1e-5f}, 3, {IN_LOW, IN_F32, IN_F32}, {2, 1, 1},
               {{R, D}, {D}, {D}}, {-1, 0.5f, -0.5f}, {3, 1.5f, 0.5f}, 2, {R, D}, 1, 2 * (size_t)R * 4, NULL, 1e-2, {0}};
    CHECK(kcheck(&f, 21) >= 0);
    kcase fp = f; /* bf16-pure / fp16-pure: gamma and beta 16-bit too */
    fp.label = "layernorm 16-bit gamma/beta";
    fp.kind[1] = fp.kind[2] = IN_LOW;
    CHECK(kcheck(&fp, 24) >= 0);
    kdata d;
    kdata_make(&f, 21, &d);
    float *y = malloc((size_t)(R * D) * 4), *aux = calloc(2 * (size_t)R, 4);
    CHECK(krun(&f, &d, CT_KERNEL_REF, 0, y, aux) == CT_OK);
    kdata_free(&f, &d);
    kcase bd = {"layernorm_bwd_data", CT_OP_LAYERNORM_BWD_DATA, {0}, {0}, 4, {IN_LOW, IN_LOW, IN_F32, IN_STATE},
                {2, 2, 1, 2}, {{R, D}, {R, D}, {D}, {R, D}}, {-1, -1, 0.5f, 0}, {1, 3, 1.5f, 0}, 2, {R, D}, 1, 0, aux,
                1e-1, {0}};
    kcase bg = {"layernorm_bwd_gamma", CT_OP_LAYERNORM_BWD_GAMMA, {0}, {0}, 3, {IN_LOW, IN_LOW, IN_STATE},
                {2, 2, 2}, {{R, D}, {R, D}, {R, D}}, {-1, -1, 0}, {1, 3, 0}, 1, {D}, 0, 0, aux, 1.0, {0}};
    CHECK(kcheck(&bd, 22) >= 0);
    bd.label = "layernorm_bwd_data 16-bit gamma";
    bd.kind[2] = IN_LOW;
    CHECK(kcheck(&bd, 25) >= 0);
    CHECK(kcheck(&bg, 23) >= 0);
    free(y);
    free(aux);
    kcase big = f;
    big.label = "layernorm row > tile";
    big.shape[0][0] = big.out_shape[0] = 2;
    big.shape[0][1] = big.out_shape[1] = big.shape[1][0] = big.shape[2][0] = CT_BF16_TILE + 19;
    big.aux_bytes = 16;
    CHECK(kcheck(&big, 26) >= 0);
    {
        const int64_t R2 = big.shape[0][0], D2 = big.shape[0][1];
        kdata_make(&big, 26, &d);
        float *y2 = malloc((size_t)(R2 * D2) * 4), *aux2 = calloc(2 * (size_t)R2, 4);
        CHECK(krun(&big, &d, CT_KERNEL_REF, 0, y2, aux2) == CT_OK);
        kdata_free(&big, &d);
        kcase bdb = {"layernorm_bwd_data row > tile", CT_OP_LAYERNORM_BWD_DATA, {0}, {0}, 4,
                     {IN_LOW, IN_LOW, IN_F32, IN_STATE}, {2, 2, 1, 2}, {{R2, D2}, {R2, D2}, {D2}, {R2, D2}},
                     {-1, -1, 0.5f, 0}, {1, 3, 1.5f, 0}, 2, {R2, D2}, 1, 0, aux2, 1e-1, {0}};
        CHECK(kcheck(&bdb, 27) >= 0);
        free(y2);
        free(aux2);
    }
    /* a -pure gamma / beta longer than a tile declines (it is converted into one) */
    kcase bigp = big;
    bigp.label = "layernorm 16-bit gamma > tile (declines)";
    bigp.kind[1] = bigp.kind[2] = IN_LOW;
    CHECK(kdeclines(&bigp));
}

/* ---- pooling and reductions ----------------------------------------------------------------- */

static int g_pool_cl; /* 1: pool_case builds channels-last nodes, (N, H, W, C) */

static void pool_case(kcase *c, ct_op op, int K, int S, int P, int64_t N, int64_t C, int64_t H, int64_t W) {
    int64_t OH = (H + 2 * P - K) / S + 1, OW = (W + 2 * P - K) / S + 1;
    memset(c, 0, sizeof *c);
    c->op = op;
    c->ia[0] = c->ia[1] = K;
    c->ia[2] = c->ia[3] = S;
    c->ia[4] = c->ia[5] = P;
    c->ia[6] = c->ia[7] = 1;
    c->fa[0] = 1.0f;
    c->n_in = 1;
    c->kind[0] = IN_LOW;
    c->nd[0] = 4;
    c->lo[0] = -2;
    c->hi[0] = 2;
    c->out_nd = 4;
    c->out_low = 1;
    c->floor = 1e-2;
    int fwd = op == CT_OP_MAXPOOL2D || op == CT_OP_AVGPOOL2D;
    int64_t xs[4] = {N, C, H, W}, ys[4] = {N, C, OH, OW};
    if (g_pool_cl) {
        c->fa[1] = 1.0f;
        int64_t xc[4] = {N, H, W, C}, yc[4] = {N, OH, OW, C};
        memcpy(xs, xc, sizeof xs);
        memcpy(ys, yc, sizeof ys);
    }
    memcpy(c->shape[0], fwd ? xs : ys, sizeof xs);
    memcpy(c->out_shape, fwd ? ys : xs, sizeof xs);
    if (op == CT_OP_MAXPOOL2D) c->aux_bytes = (size_t)(N * C * OH * OW) * ct_maxpool_arg_size(K, K);
}

/* max / avg pooling and their backward on (N, C, H, W) with window config v
 * (0: the vectorized 2x2 path, 1: 3x3/2 pad 1, the plane loops); seeds from seed */
static int pool_round(int v, int64_t N, int64_t C, int64_t H, int64_t W, unsigned seed, const char *tag) {
    static const int cfg[2][3] = {{2, 2, 0}, {3, 2, 1}};
    static const char *win[2] = {"2x2", "3x3/2 pad 1"};
    const int K = cfg[v][0], S = cfg[v][1], P = cfg[v][2];
    char l[4][80];
    snprintf(l[0], sizeof l[0], "maxpool2d %s%s", win[v], tag);
    snprintf(l[1], sizeof l[1], "maxpool2d_bwd %s%s", win[v], tag);
    snprintf(l[2], sizeof l[2], "avgpool2d %s%s", win[v], tag);
    snprintf(l[3], sizeof l[3], "avgpool2d_bwd %s%s", win[v], tag);
    kcase f, b;
    pool_case(&f, CT_OP_MAXPOOL2D, K, S, P, N, C, H, W);
    f.label = l[0];
    int ok = kcheck(&f, seed) >= 0;
    /* argmax from the reference forward */
    kdata d;
    kdata_make(&f, seed, &d);
    int64_t ny = nel(4, f.out_shape);
    float *y = malloc((size_t)ny * 4);
    int32_t *arg = calloc((size_t)ny, 4);
    ok = ok && krun(&f, &d, CT_KERNEL_REF, 0, y, arg) == CT_OK;
    kdata_free(&f, &d);
    pool_case(&b, CT_OP_MAXPOOL2D_BWD, K, S, P, N, C, H, W);
    b.label = l[1];
    b.n_in = 2;
    b.kind[1] = IN_STATE;
    b.nd[1] = 4;
    memcpy(b.shape[1], f.out_shape, sizeof f.out_shape);
    b.state_aux = arg;
    ok = ok && kcheck(&b, seed + 1) >= 0;
    free(y);
    free(arg);
    pool_case(&f, CT_OP_AVGPOOL2D, K, S, P, N, C, H, W);
    f.label = l[2];
    ok = ok && kcheck(&f, seed + 2) >= 0;
    pool_case(&b, CT_OP_AVGPOOL2D_BWD, K, S, P, N, C, H, W);
    b.label = l[3];
    return ok && kcheck(&b, seed + 3) >= 0;
}

LOW_TEST(pooling) {
    for (int v = 0; v < 2; v++) CHECK(pool_round(v, 3, 5, 14, 15, 31, ""));
    /* planes above a tile: through the workspace (the harness gives one; ct_ws_pool sizes it in a plan),
       e.g. ResNet's stem pool (3x3/2 pad 1), and the 2x2 path */
    for (int v = 0; v < 2; v++) CHECK(pool_round(v, 1, 2, 96, 97, 35, " plane > tile"));
    /* without a workspace big enough, a big 16-bit plane declines (the node gets FP32 copies) */
    kcase big;
    pool_case(&big, CT_OP_MAXPOOL2D, 2, 2, 0, 1, 1, 128, 128);
    big.label = "maxpool2d plane > tile, no workspace (declines)";
    g_ws_cap = 64;
    CHECK(kdeclines(&big));
    g_ws_cap = 0;
}

/* channels-last (fa[1]): images within a tile (C 17: not a multiple of the
 * vector width) and one above it (through the workspace); without a
 * workspace big enough, an image above a tile declines */
LOW_TEST(pooling_channels_last) {
    g_pool_cl = 1;
    for (int v = 0; v < 2; v++) CHECK(pool_round(v, 3, 17, 10, 11, 51, " CL"));
    for (int v = 0; v < 2; v++) CHECK(pool_round(v, 1, 33, 20, 21, 55, " CL image > tile"));
    kcase big;
    pool_case(&big, CT_OP_MAXPOOL2D, 2, 2, 0, 1, 64, 32, 32);
    big.label = "maxpool2d CL image > tile, no workspace (declines)";
    g_ws_cap = 64;
    CHECK(kdeclines(&big));
    g_ws_cap = 0;
    g_pool_cl = 0;
}

LOW_TEST(reductions) {
    /* bias gradient: 16-bit (R, C) summed over rows into FP32; row sums; sum_to a (1, C) bias into 16-bit */
    kcase s0 = {"sum rows->f32 (bias grad)", CT_OP_SUM, {1}, {1.0f}, 1, {IN_LOW}, {2}, {{517, 77}}, {-1}, {1}, 1,
                {77}, 0, 0, NULL, 1.0, {0}};
    CHECK(kcheck(&s0, 41) >= 0);
    kcase s1 = {"sum (N,C,H,W) over {0,2,3}", CT_OP_SUM, {1 | 4 | 8}, {1.0f}, 1, {IN_LOW}, {4}, {{9, 7, 12, 13}},
                {-1}, {1}, 1, {7}, 0, 0, NULL, 1.0, {0}};
    CHECK(kcheck(&s1, 42) >= 0);
    kcase s2 = {"mean last dim -> 16-bit", CT_OP_SUM, {2}, {1.0f / 301}, 1, {IN_LOW}, {2}, {{45, 301}}, {0}, {2}, 1,
                {45}, 1, 0, NULL, 1e-2, {0}};
    CHECK(kcheck(&s2, 43) >= 0);
    kcase s3 = {"sum_to (1, C) -> 16-bit", CT_OP_SUM_TO, {0}, {0}, 1, {IN_LOW}, {3}, {{4, 50, 33}}, {0}, {1}, 2,
                {1, 33}, 1, 0, NULL, 1e-2, {0}};
    CHECK(kcheck(&s3, 44) >= 0);
}

/* ---- softmax -------------------------------------------------------------------------------- */

LOW_TEST(softmax) {
    const int64_t R = 53, C = 301;
    kcase f = {"softmax", CT_OP_SOFTMAX, {0}, {0}, 1, {IN_LOW}, {2}, {{R, C}}, {-6}, {6}, 2, {R, C}, 1, 0, NULL,
               1e-3, {0}};
    CHECK(kcheck(&f, 81) >= 0);
    kcase l = f;
    l.label = "log_softmax";
    l.op = CT_OP_LOG_SOFTMAX;
    CHECK(kcheck(&l, 82) >= 0);
    kcase b = {"softmax_bwd", CT_OP_SOFTMAX_BWD, {0}, {0}, 2, {IN_LOW, IN_LOW}, {2, 2}, {{R, C}, {R, C}}, {-1, 0},
               {1, 0.02f}, 2, {R, C}, 1, 0, NULL, 1e-3, {0}};
    CHECK(kcheck(&b, 83) >= 0);
    kcase lb = {"log_softmax_bwd", CT_OP_LOG_SOFTMAX_BWD, {0}, {0}, 2, {IN_LOW, IN_LOW}, {2, 2}, {{R, C}, {R, C}},
                {-1, -8}, {1, -4}, 2, {R, C}, 1, 0, NULL, 1e-2, {0}};
    CHECK(kcheck(&lb, 84) >= 0);
    kcase big = f;
    big.label = "softmax row > tile (declines)";
    big.shape[0][0] = big.out_shape[0] = 1;
    big.shape[0][1] = big.out_shape[1] = CT_BF16_TILE + 1;
    CHECK(kdeclines(&big));
}

/* ---- cross-entropy --------------------------------------------------------------------------- */

/* The loss and its gradient read 16-bit logits (and the gradient is written 16-bit) one row at a time
 * through FP32 rows in the plan's scratch: rows below and far above a tile (a vocabulary), label
 * smoothing, an ignore_index that some rows carry (ids (7 j + seed) % C hit it). The gradient's entries
 * are ~1 / (R C): below 1e-4 they are compared absolutely (FP16 holds them as subnormals). */
LOW_TEST(cross_entropy) {
    static const int64_t shapes[2][2] = {{37, 301}, {5, 2 * CT_BF16_TILE + 7}};
    for (int i = 0; i < 2; i++) {
        const int64_t R = shapes[i][0], C = shapes[i][1];
        char lf[64], lb[64];
        snprintf(lf, sizeof lf, "cross_entropy (%lld, %lld)", (long long)R, (long long)C);
        snprintf(lb, sizeof lb, "cross_entropy_bwd (%lld, %lld)", (long long)R, (long long)C);
        kcase f = {lf, CT_OP_CROSS_ENTROPY, {3}, {0.1f}, 2, {IN_LOW, IN_I32}, {2, 1}, {{R, C}, {R}}, {-8, 0},
                   {8, (float)C}, 0, {0}, 0, 0, NULL, 1e-3, {0}};
        CHECK(kcheck(&f, 91 + (unsigned)i) >= 0);
        kcase b = {lb, CT_OP_CROSS_ENTROPY_BWD, {3}, {0.1f}, 3, {IN_F32, IN_LOW, IN_I32}, {0, 2, 1},
                   {{0}, {R, C}, {R}}, {0.5f, -8, 0}, {2, 8, (float)C}, 2, {R, C}, 1, 0, NULL, 1e-4, {0}};
        CHECK(kcheck(&b, 93 + (unsigned)i) >= 0);
    }
}

/* ---- embedding ---------------------------------------------------------------------------- */

LOW_TEST(embedding) {
    const int64_t V = 29, D = 70, n = 301;
    kcase f = {"embedding 16-bit weight", CT_OP_EMBEDDING, {0}, {0}, 2, {IN_LOW, IN_I32}, {2, 1}, {{V, D}, {n}},
               {-1, 0}, {1, (float)V}, 2, {n, D}, 1, 0, NULL, 1e-3, {0}};
    CHECK(kcheck(&f, 71) >= 0);
    kcase f2 = f;
    f2.label = "embedding f32 weight -> 16-bit";
    f2.kind[0] = IN_F32;
    CHECK(kcheck(&f2, 72) >= 0);
    kcase b = {"embedding_bwd 16-bit dy", CT_OP_EMBEDDING_BWD, {0}, {0}, 2, {IN_LOW, IN_I32}, {2, 1}, {{n, D}, {n}},
               {-1, 0}, {1, (float)V}, 2, {V, D}, 0, 0, NULL, 1e-3, {0}};
    CHECK(kcheck(&b, 73) >= 0);
}

/* ---- attention ---------------------------------------------------------------------------- */

static void attention_case(int causal, int masked) {
    const int64_t B = 2, T = 37, D = 48, H = 3;
    int64_t nq = B * T * 3 * D;
    float *qkv = malloc((size_t)nq * 4), *dy = malloc((size_t)(B * T * D) * 4);
    test_fill_uniform(qkv, (size_t)nq, 51, -2, 2);
    test_fill_uniform(dy, (size_t)(B * T * D), 52, -1, 1);
    for (int64_t i = 0; i < nq; i++) qkv[i] = bround(qkv[i]);
    for (int64_t i = 0; i < B * T * D; i++) dy[i] = bround(dy[i]);
    kcase f = {causal ? "attention causal" : masked ? "attention key mask" : "attention", CT_OP_ATTENTION,
               {H, causal}, {0.25f}, masked ? 2 : 1, {IN_LOW, IN_I32}, {3, 2}, {{B, T, 3 * D}, {B, T}}, {0, 0},
               {0, 2}, 3, {B, T, D}, 1, (size_t)(B * H * T) * 4, NULL, 1e-2, {qkv}};
    CHECK(kcheck(&f, 61) >= 0);
    /* the backward reads the forward's output and log-sum-exp: the reference's */
    kdata d;
    kdata_make(&f, 61, &d);
    float *y = malloc((size_t)(B * T * D) * 4), *lse = malloc((size_t)(B * H * T) * 4);
    CHECK(krun(&f, &d, CT_KERNEL_REF, 0, y, lse) == CT_OK);
    kdata_free(&f, &d);
    kcase b = {causal ? "attention_bwd causal" : masked ? "attention_bwd key mask" : "attention_bwd",
               CT_OP_ATTENTION_BWD, {H, causal}, {0.25f}, masked ? 4 : 3, {IN_LOW, IN_LOW, IN_LOW, IN_I32},
               {3, 3, 3, 2}, {{B, T, D}, {B, T, 3 * D}, {B, T, D}, {B, T}}, {0, 0, 0, 0}, {0, 0, 0, 2}, 3,
               {B, T, 3 * D}, 1, 0, lse, 5e-2, {dy, qkv, y}};
    CHECK(kcheck(&b, 62) >= 0);
    free(qkv);
    free(dy);
    free(y);
    free(lse);
}

LOW_TEST(attention) {
    attention_case(0, 0);
    attention_case(1, 0);
    attention_case(0, 1);
}

/* The oneDNN attention (BF16 products: P and dS rounded to BF16 before
 * their GEMMs, FP32 accumulation in another order) against the reference on
 * the same BF16 values and against the SIMD kernels' BF16 path. Where oneDNN
 * has no BF16 matmul at all (below AVX-512), it must decline. */
/* ctrain's products on AMX tiles run here: the CPU has them, the context's ISA is AVX-512 (CT_ISA) and oneDNN's
 * (ONEDNN_MAX_CPU_ISA) reaches them */
static int amx_here(void) {
    const ct_cpu_features *cpu = ct_context_cpu(g_ctx);
    const unsigned isa = (unsigned)dnnl_get_effective_cpu_isa(), amx = (unsigned)dnnl_cpu_isa_avx512_core_amx;
    return cpu->amx_bf16 && cpu->amx_permitted && ct_context_isa(g_ctx) >= CT_ISA_AVX512 && (isa & amx) == amx;
}

/* out and the status of the oneDNN slot on case c with environment variable var = val (the caller's value
 * restored after) */
static ct_status krun_env(const kcase *c, const kdata *d, const char *var, const char *val, float *out, void *aux) {
    const char *was = getenv(var);
    char keep[8] = "";
    if (was) snprintf(keep, sizeof keep, "%s", was);
    setenv(var, val, 1);
    ct_status s = krun(c, d, CT_KERNEL_ONEDNN, 1, out, aux);
    if (was) setenv(var, keep, 1);
    else unsetenv(var);
    return s;
}

/* with CT_ATTENTION_AMX=0 (oneDNN's primitives) */
static ct_status krun_no_amx(const kcase *c, const kdata *d, float *out, void *aux) {
    return krun_env(c, d, "CT_ATTENTION_AMX", "0", out, aux);
}

/* largest |a - b| over n values, 0 when they are the same bits */
static double max_abs_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

static void attention_dnnl_case(int64_t T, int64_t D, int64_t H, int causal, int masked, float scale) {
    const int64_t B = 2;
    int64_t nq = B * T * 3 * D, ny = B * T * D, nl = B * H * T;
    float *qkv = malloc((size_t)nq * 4), *dy = malloc((size_t)ny * 4);
    test_fill_uniform(qkv, (size_t)nq, 81, -2, 2);
    test_fill_uniform(dy, (size_t)ny, 82, -1, 1);
    for (int64_t i = 0; i < nq; i++) qkv[i] = bround(qkv[i]);
    for (int64_t i = 0; i < ny; i++) dy[i] = bround(dy[i]);
    char label[64];
    const char *amx = getenv("CT_ATTENTION_AMX");
    snprintf(label, sizeof label, "T %lld Dh %lld%s%s%s%s", (long long)T, (long long)(D / H), causal ? " causal" : "",
             masked ? " key mask" : "", scale != 0.25f ? " scale 0.3" : "", amx && !strcmp(amx, "0") ? " (CT_ATTENTION_AMX=0)" : "");
    kcase f = {label, CT_OP_ATTENTION, {H, causal}, {scale}, masked ? 2 : 1, {IN_LOW, IN_I32}, {3, 2},
               {{B, T, 3 * D}, {B, T}}, {0, 0}, {0, 2}, 3, {B, T, D}, 1, (size_t)nl * 4, NULL, 1e-2, {qkv}};
    kdata d;
    kdata_make(&f, 63, &d);
    float *yr = malloc((size_t)ny * 4), *yd = malloc((size_t)ny * 4), *ys = malloc((size_t)ny * 4);
    float *lr = malloc((size_t)nl * 4), *ld = malloc((size_t)nl * 4), *ls = malloc((size_t)nl * 4);
    int simd = g_slots[g_nslots - 1];
    CHECK(krun(&f, &d, CT_KERNEL_REF, 0, yr, lr) == CT_OK);
    CHECK(krun(&f, &d, simd, 1, ys, ls) == CT_OK);
    ct_status s = krun(&f, &d, CT_KERNEL_ONEDNN, 1, yd, ld);
    unsigned isa = (unsigned)dnnl_get_effective_cpu_isa(), core = (unsigned)dnnl_cpu_isa_avx512_core;
    if ((isa & core) != core) { /* no BF16 matmul in oneDNN here: the kernel must decline */
        CHECK_MSG(s == CT_E_UNSUPPORTED, "%s: %s without a BF16 oneDNN", label, ct_status_name(s));
        printf("    %-34s declined (oneDNN has no BF16 matmul below AVX-512)\n", label);
    } else {
        CHECK_MSG(s == CT_OK, "%s: %s", label, ct_context_last_error(g_ctx));
        double e_ref = test_rel_to_max(yd, yr, (size_t)ny), e_simd = test_rel_to_max(yd, ys, (size_t)ny), e_lse = 0;
        for (int64_t i = 0; i < nl; i++) /* -inf where every key is masked, on both sides */
            if (ld[i] != lr[i]) e_lse = fmax(e_lse, isinf(lr[i]) ? INFINITY : fabs((double)ld[i] - lr[i]) / fmax(1.0, fabs((double)lr[i])));
        /* P rounded to BF16 (2^-9 relative per term) and the output's own rounding */
        CHECK_MSG(e_ref <= 1e-2 && e_simd <= 1e-2, "%s forward: %.3g of the largest from the reference, %.3g from SIMD",
                  label, e_ref, e_simd);
        CHECK_MSG(e_lse <= 1e-5, "%s: log-sum-exp %.3g from the reference", label, e_lse);
        /* the products on AMX tiles against oneDNN's primitives on the same values: the same tile instructions,
           the same order of the sums over K: the forward bit for bit (a power-of-two scale folded into q is
           exact) */
        int amx_ran = amx_here() && (D / H) % 32 == 0 && !(amx && !strcmp(amx, "0"));
        float *yp = NULL, *lp = NULL;
        if (amx_ran) {
            yp = malloc((size_t)ny * 4), lp = malloc((size_t)nl * 4);
            CHECK(krun_no_amx(&f, &d, yp, lp) == CT_OK);
            double dy_ = max_abs_diff(yd, yp, (size_t)ny), dl = max_abs_diff(ld, lp, (size_t)nl);
            CHECK_MSG(dy_ == 0 && dl == 0, "%s forward: AMX tiles vs oneDNN primitives differ by %.3g (lse %.3g)", label, dy_, dl);
        }
        /* backward, from the reference's forward output and log-sum-exp */
        kcase b = {label, CT_OP_ATTENTION_BWD, {H, causal}, {scale}, masked ? 4 : 3,
                   {IN_LOW, IN_LOW, IN_LOW, IN_I32}, {3, 3, 3, 2}, {{B, T, D}, {B, T, 3 * D}, {B, T, D}, {B, T}},
                   {0, 0, 0, 0}, {0, 0, 0, 2}, 3, {B, T, 3 * D}, 1, 0, lr, 5e-2, {dy, qkv, yr}};
        for (int64_t i = 0; i < ny; i++) yr[i] = bround(yr[i]);
        kdata db;
        kdata_make(&b, 64, &db);
        float *gr = malloc((size_t)nq * 4), *gd = malloc((size_t)nq * 4), *gs = malloc((size_t)nq * 4);
        CHECK(krun(&b, &db, CT_KERNEL_REF, 0, gr, NULL) == CT_OK);
        CHECK(krun(&b, &db, simd, 1, gs, NULL) == CT_OK);
        CHECK_MSG(krun(&b, &db, CT_KERNEL_ONEDNN, 1, gd, NULL) == CT_OK, "%s backward: %s", label,
                  ct_context_last_error(g_ctx));
        if (amx_ran) {
            float *gp = malloc((size_t)nq * 4);
            CHECK(krun_no_amx(&b, &db, gp, NULL) == CT_OK);
            /* dV and dK: the tiles add each block's products to the sums in place, oneDNN adds the block's
               finished product (a sum post-op): another order, differences of the sums' last bits */
            double dg = test_rel_to_max(gd, gp, (size_t)nq);
            CHECK_MSG(dg <= 1e-5, "%s backward: AMX tiles vs oneDNN primitives differ by %.3g of the largest", label, dg);
            free(gp);
        }
        free(yp);
        free(lp);
        /* per part (dq, dk, dv): each against its own largest */
        double worst = 0;
        for (int part = 0; part < 3; part++) {
            int64_t n = B * T * D;
            float *a = malloc((size_t)n * 4), *r = malloc((size_t)n * 4), *sm = malloc((size_t)n * 4);
            for (int64_t row = 0; row < B * T; row++)
                for (int64_t j = 0; j < D; j++) {
                    int64_t src = row * 3 * D + part * D + j;
                    a[row * D + j] = gd[src], r[row * D + j] = gr[src], sm[row * D + j] = gs[src];
                }
            double e1 = test_rel_to_max(a, r, (size_t)n), e2 = test_rel_to_max(a, sm, (size_t)n);
            worst = fmax(worst, fmax(e1, e2));
            CHECK_MSG(e1 <= 2e-2 && e2 <= 2e-2, "%s backward d%c: %.3g of the largest from the reference, %.3g from SIMD",
                      label, "qkv"[part], e1, e2);
            free(a);
            free(r);
            free(sm);
        }
        printf("    %-34s fwd %.2e, bwd %.2e of the largest from the reference\n", label, e_ref, worst);
        kdata_free(&b, &db);
        free(gr);
        free(gd);
        free(gs);
    }
    kdata_free(&f, &d);
    free(qkv);
    free(dy);
    free(yr);
    free(yd);
    free(ys);
    free(lr);
    free(ld);
    free(ls);
}

/* Head sizes of 32 and 64 take the products on AMX tiles where the CPU has them (T padded to 32: 37 and 150
 * have padded keys and a partial last block); CT_ATTENTION_AMX=0 runs oneDNN's primitives on the same cases. */
TEST(attention_onednn_bf16) {
    setup();
    if (!g_nslots) return;
    printf("    products on AMX tiles for Dh 32 and 64: %s\n",
           amx_here() ? "yes (this CPU)" : "no (no AMX here, or oneDNN's ISA lowered: oneDNN's primitives)");
    for (int amx_off = 0; amx_off < 2; amx_off++) {
        if (amx_off) setenv("CT_ATTENTION_AMX", "0", 1);
        attention_dnnl_case(37, 48, 3, 0, 0, 0.25f);  /* one block, fewer rows than CT_ATT_ROWS */
        attention_dnnl_case(37, 48, 3, 1, 1, 0.25f);
        attention_dnnl_case(150, 48, 3, 1, 0, 0.25f); /* three blocks, the last partial: causal block skipping */
        attention_dnnl_case(150, 48, 3, 0, 1, 0.25f);
        attention_dnnl_case(128, 48, 3, 1, 1, 0.25f);
        attention_dnnl_case(37, 64, 2, 0, 1, 0.25f); /* Dh 32 */
        attention_dnnl_case(37, 128, 2, 1, 0, 0.25f); /* Dh 64 */
        attention_dnnl_case(150, 128, 2, 1, 1, 0.25f);
        attention_dnnl_case(150, 64, 2, 0, 0, 0.25f);
        attention_dnnl_case(256, 128, 2, 1, 0, 0.25f);
        attention_dnnl_case(96, 192, 2, 0, 1, 0.25f); /* Dh 96 */
        attention_dnnl_case(150, 128, 2, 1, 1, 0.3f); /* a scale that is not a power of two */
        attention_dnnl_case(37, 64, 2, 0, 0, 0.3f);
    }
    unsetenv("CT_ATTENTION_AMX");
}

/* ---- BF16 GEMMs on AMX tiles (simd/amx.c through onednn/matmul.c) ---------------------------------------- */

/* One linear (op LINEAR: x (M, K), W (N, K), bias of dtype bias_kind or none) or matmul (a (M, K), (ta) (K, M) or
 * (2, M / 2, K), b (K, N) or (tb) (N, K)), BF16 inputs, a BF16 or (out_low 0) FP32 output: on AMX tiles (CT_MATMUL_AMX=1, where
 * the CPU has them) against oneDNN's primitive (CT_MATMUL_AMX=0) on the same values, and both against the
 * reference. */
static void gemm_amx_case(ct_op op, int64_t M, int64_t N, int64_t K, int ta, int tb, int bias_kind, int out_low,
                          int batched) {
    char label[96];
    snprintf(label, sizeof label, "%s %lldx%lldx%lld%s%s%s%s%s", op == CT_OP_LINEAR ? "linear" : "matmul", (long long)M,
             (long long)N, (long long)K, ta ? " ta" : "", tb ? " tb" : "", bias_kind < 0 ? "" : bias_kind == IN_LOW ? " bias bf16" : " bias f32",
             out_low ? "" : " -> f32", batched ? " batched" : "");
    kcase c = {label, op, {ta, tb}, {0}, 2, {IN_LOW, IN_LOW, bias_kind < 0 ? IN_F32 : bias_kind}, {2, 2, 1},
               {{ta ? K : M, ta ? M : K}, {tb || op == CT_OP_LINEAR ? N : K, tb || op == CT_OP_LINEAR ? K : N}, {N}},
               {-1, -1, -1}, {1, 1, 1}, 2, {M, N}, out_low, 0, NULL, 1e-2, {0}};
    if (op == CT_OP_LINEAR) c.ia[1] = 0;
    if (bias_kind >= 0) c.n_in = 3;
    if (batched) { /* a (2, M / 2, K): the batch folded into the rows */
        c.nd[0] = 3, c.shape[0][0] = 2, c.shape[0][1] = M / 2, c.shape[0][2] = K;
        c.out_nd = 3, c.out_shape[0] = 2, c.out_shape[1] = M / 2, c.out_shape[2] = N;
    }
    kdata d;
    kdata_make(&c, 71, &d);
    const size_t n = (size_t)(M * N);
    float *yr = malloc(n * 4), *ya = malloc(n * 4), *yp = malloc(n * 4);
    char impl_a[96] = "", impl_p[96] = "";
    CHECK(krun(&c, &d, CT_KERNEL_REF, 0, yr, NULL) == CT_OK);
    ct_status sa = krun_env(&c, &d, "CT_MATMUL_AMX", "1", ya, NULL);
    snprintf(impl_a, sizeof impl_a, "%s", g_impl);
    ct_status sp = krun_env(&c, &d, "CT_MATMUL_AMX", "0", yp, NULL);
    snprintf(impl_p, sizeof impl_p, "%s", g_impl);
    CHECK_MSG(sa == CT_OK && sp == CT_OK, "%s: %s / %s: %s", label, ct_status_name(sa), ct_status_name(sp),
              ct_context_last_error(g_ctx));
    if (sa == CT_OK && sp == CT_OK) {
        const int amx = amx_here();
        CHECK_MSG(!strcmp(impl_a, amx ? "ctrain:amx_tiles" : impl_p) && strcmp(impl_p, "ctrain:amx_tiles"),
                  "%s: ran on '%s' with CT_MATMUL_AMX=1, '%s' with 0 (AMX here: %d)", label, impl_a, impl_p, amx);
        /* where oneDNN runs brgemm on AMX too: the tiles' sums in steps of 32 over K, the bias added to the FP32
           sum, one rounding: the same bits. Its other kernels (a small K or N: brgemm on AVX512-BF16) sum in
           another order: the last bits of the FP32 sums */
        const int64_t nd = ndiff(ya, yp, (int64_t)n);
        const double ep = test_rel_to_max(ya, yp, n);
        if (strstr(impl_p, "amx"))
            CHECK_MSG(nd == 0, "%s: %lld of %zu outputs differ between the AMX tiles and oneDNN's %s (%.3g of the largest)",
                      label, (long long)nd, n, impl_p, ep);
        else
            CHECK_MSG(ep <= (out_low ? 1.0 / 128 : 1e-6), "%s: %.3g of the largest from oneDNN's %s", label, ep, impl_p);
        const double e = test_rel_to_max(ya, yr, n);
        CHECK_MSG(e <= 1e-2, "%s: %.3g of the largest from the reference", label, e);
        printf("    %-44s %s, %.2e of the largest from the reference (oneDNN: %s, %lld differ)\n", label, impl_a, e, impl_p,
               (long long)nd);
    }
    kdata_free(&c, &d);
    free(yr);
    free(ya);
    free(yp);
}

/* Sizes that are multiples of 32 and every kind of tail: rows of a partial last block (M), columns (N, a masked
 * store), a K that is not a multiple of 32 (its last columns copied into a zero-padded tile), odd K (half a pair),
 * single rows and columns; B as it lies (K x N, interleaved into pairs) and transposed (N x K, gathered). */
TEST(gemm_amx_bf16) {
    setup();
    if (!g_nslots) return;
    unsigned isa = (unsigned)dnnl_get_effective_cpu_isa(), core = (unsigned)dnnl_cpu_isa_avx512_core;
    if ((isa & core) != core) {
        printf("    no BF16 matmul in oneDNN below AVX-512: nothing to compare\n");
        return;
    }
    printf("    GEMMs on AMX tiles: %s\n", amx_here() ? "yes (this CPU)" : "no (no AMX here, or oneDNN's ISA lowered)");
    gemm_amx_case(CT_OP_LINEAR, 64, 96, 64, 0, 1, IN_F32, 1, 0);
    gemm_amx_case(CT_OP_LINEAR, 64, 96, 64, 0, 1, IN_LOW, 1, 0);
    gemm_amx_case(CT_OP_LINEAR, 37, 45, 70, 0, 1, IN_F32, 1, 0);
    gemm_amx_case(CT_OP_LINEAR, 100, 17, 33, 0, 1, -1, 1, 0);
    gemm_amx_case(CT_OP_LINEAR, 1, 1, 1, 0, 1, IN_LOW, 1, 0);
    gemm_amx_case(CT_OP_LINEAR, 130, 200, 384, 0, 1, IN_F32, 1, 1);
    for (int tb = 0; tb < 2; tb++) {
        gemm_amx_case(CT_OP_MATMUL, 64, 64, 96, 0, tb, -1, 1, 0);
        gemm_amx_case(CT_OP_MATMUL, 33, 65, 31, 0, tb, -1, 1, 0);
        gemm_amx_case(CT_OP_MATMUL, 96, 48, 160, 0, tb, -1, 0, 0);
        gemm_amx_case(CT_OP_MATMUL, 70, 10, 7, 0, tb, -1, 0, 0);
        gemm_amx_case(CT_OP_MATMUL, 66, 100, 64, 0, tb, -1, 1, 1);
        /* A transposed (the weight gradients: K = the tokens): A transposed into the scratch, or C^T taken (B
           transposed, or B the smaller) and its blocks stored transposed */
        gemm_amx_case(CT_OP_MATMUL, 96, 64, 256, 1, tb, -1, 0, 0);
        gemm_amx_case(CT_OP_MATMUL, 64, 96, 256, 1, tb, -1, 0, 0);
        gemm_amx_case(CT_OP_MATMUL, 64, 96, 100, 1, tb, -1, 0, 0); /* a K tail after whole steps of 32 */
        gemm_amx_case(CT_OP_MATMUL, 96, 66, 600, 1, tb, -1, 0, 0); /* K in three chunks, the last partial */
        gemm_amx_case(CT_OP_MATMUL, 66, 96, 600, 1, tb, -1, 1, 0);
        gemm_amx_case(CT_OP_MATMUL, 96, 64, 100, 1, tb, -1, 0, 0);
        gemm_amx_case(CT_OP_MATMUL, 45, 37, 70, 1, tb, -1, 0, 0); /* odd rows: no 32-bit words to gather */
        gemm_amx_case(CT_OP_MATMUL, 37, 45, 70, 1, tb, -1, 1, 0);
        gemm_amx_case(CT_OP_MATMUL, 65, 33, 31, 1, tb, -1, 0, 0);
        gemm_amx_case(CT_OP_MATMUL, 10, 70, 7, 1, tb, -1, 0, 0);
    }
}

/* ---- whole plans ---------------------------------------------------------------------------- */

/* Builds and compiles the CNN (gpt = 0) or a 2-layer GPT (gpt = 1) in BF16
 * with CT_BF16_NATIVE as given (NULL: unset). */
static ct_status build_level(ct_context *ctx, int gpt, ct_precision prec, const char *native, int plan_only,
                             int fusion_level, ct_plan **out, ct_node *xo, ct_node *yo) {
    if (native) setenv("CT_BF16_NATIVE", native, 1);
    else unsetenv("CT_BF16_NATIVE");
    ct_graph *g;
    ct_node x, y, logits, loss;
    ct_status s = ct_graph_create(ctx, &g);
    if (s != CT_OK) return s;
    if (gpt) { /* plan_only: gpt-char-small itself at batch 8 x 256 (bench_step's gptchar), else a tiny one */
        ct_gpt_config c;
        memset(&c, 0, sizeof c);
        s = ct_gpt_preset(ctx, "gpt-char-small", &c);
        int64_t B = 8, T = 256;
        c.dropout = 0.0f;
        if (!plan_only) {
            c.n_layer = 2;
            c.n_head = 2;
            c.d_model = 32;
            c.context = T = 16;
            c.vocab = 23;
            c.dropout = 0.1f;
            B = 4;
        }
        if (s == CT_OK) s = ct_input(g, "y", CT_I32, 1, (int64_t[]){B * T}, &y);
        if (s == CT_OK) s = ct_input(g, "x", CT_I32, 2, (int64_t[]){B, T}, &x);
        ct_node l3;
        if (s == CT_OK) s = ct_model_gpt(g, x, &c, &l3);
        if (s == CT_OK) s = ct_reshape(g, l3, 2, (int64_t[]){B * T, c.vocab}, &logits);
    } else {
        int64_t b = plan_only ? 128 : 16;
        s = ct_input(g, "y", CT_I32, 1, (int64_t[]){b}, &y);
        if (s == CT_OK) s = ct_input(g, "x", CT_F32, 4, (int64_t[]){b, 1, 28, 28}, &x);
        if (s == CT_OK) s = ct_model_cnn(g, x, 2, (int64_t[]){32, 64}, 10, &logits);
    }
    if (s == CT_OK) s = ct_cross_entropy(g, logits, y, 0.0f, -100, &loss);
    ct_compile_opts o;
    ct_compile_opts_default(&o);
    o.precision = prec;
    o.plan_only = plan_only;
    o.fusion_level = fusion_level;
    if (s == CT_OK) s = ct_compile(g, loss, 1, &logits, &o, out); /* logits kept, as bench_step */
    ct_graph_free(g);
    unsetenv("CT_BF16_NATIVE");
    if (xo) *xo = x;
    if (yo) *yo = y;
    return s;
}

static ct_status build(ct_context *ctx, int gpt, ct_precision prec, const char *native, int plan_only, ct_plan **out,
                       ct_node *xo, ct_node *yo) {
    ct_compile_opts d;
    ct_compile_opts_default(&d);
    return build_level(ctx, gpt, prec, native, plan_only, d.fusion_level, out, xo, yo);
}

/* Trains `steps` SGD steps on fixed random data; losses into loss[]. */
static ct_status train(ct_context *ctx, ct_plan *p, int gpt, ct_node x, ct_node y, int steps, float *loss) {
    ct_tensor tx, ty;
    CT_TRY(ct_plan_tensor(p, x, &tx));
    CT_TRY(ct_plan_tensor(p, y, &ty));
    int64_t nx = ct_tensor_numel(&tx), ny = ct_tensor_numel(&ty);
    for (int64_t i = 0; i < nx; i++) {
        if (gpt) ((int32_t *)tx.data)[i] = (int32_t)((i * 5 + 3) % 23);
        else ((float *)tx.data)[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
    }
    for (int64_t i = 0; i < ny; i++) ((int32_t *)ty.data)[i] = (int32_t)((i * 3 + 1) % (gpt ? 23 : 10));
    ct_optim_opts oo;
    ct_optim_opts_default(&oo, CT_OPTIM_ADAMW);
    oo.lr = 1e-3f;
    ct_optimizer *opt;
    CT_TRY(ct_optimizer_create(p, &oo, &opt));
    ct_status s = CT_OK;
    for (int t = 0; t < steps && s == CT_OK; t++) {
        s = ct_plan_zero_grads(p);
        if (s == CT_OK) s = ct_plan_forward(p, 1);
        if (s == CT_OK) s = ct_plan_backward(p);
        if (s == CT_OK) s = ct_plan_loss(p, &loss[t]);
        if (s == CT_OK) s = ct_optimizer_step(opt);
    }
    ct_optimizer_free(opt);
    (void)ctx;
    return s;
}

/* on the best ISA and with CT_ISA avx2's kernels */
static void plans_match_copies_on(int isa) {
    ct_context *ctx = test_ctx(isa, 1);
    int hw = 0;
    CHECK_OK(ctx, ct_context_lowp_native(ctx, CT_BF16, &hw, NULL, 0));
    printf("    isa %s\n", ct_isa_name(ct_context_isa(ctx)));
    static const ct_precision precs[4] = {CT_PRECISION_BF16, CT_PRECISION_BF16_PURE, CT_PRECISION_FP16,
                                          CT_PRECISION_FP16_PURE};
    for (int m = 0; m < 8; m++) { /* cnn, gpt; bf16, bf16-pure (16-bit parameters too), fp16, fp16-pure */
        int gpt = m & 1;
        ct_precision prec = precs[m >> 1];
        int bf16 = prec == CT_PRECISION_BF16 || prec == CT_PRECISION_BF16_PURE;
        ct_plan *a, *b;
        ct_node xa, ya, xb, yb;
        CHECK_OK(ctx, build(ctx, gpt, prec, NULL, 0, &a, &xa, &ya));
        CHECK_OK(ctx, build(ctx, gpt, prec, "0", 0, &b, &xb, &yb));
        ct_plan_stats sa, sb;
        ct_plan_get_stats(a, &sa);
        ct_plan_get_stats(b, &sb);
        /* copies everywhere with CT_BF16_NATIVE=0; SIMD nodes read BF16 / FP16 by default */
        CHECK(sb.n_lowp_native == 0 && sb.n_lowp_simd == 0 && sb.n_lowp_copied > 0);
        if (ct_context_isa(ctx) >= CT_ISA_AVX2) CHECK(sa.n_lowp_simd > 0 && sa.n_lowp_copied < sb.n_lowp_copied);
        float la[4], lb[4];
        CHECK_OK(ctx, train(ctx, a, gpt, xa, ya, 4, la));
        CHECK_OK(ctx, train(ctx, b, gpt, xb, yb, 4, lb));
        float *wa, *wb;
        size_t n;
        ct_plan_param_arena(a, &wa, NULL, &n);
        ct_plan_param_arena(b, &wb, NULL, NULL);
        printf("    %s %s, 4 steps: loss %.6f -> %.6f (%d nodes read %s, %d copied), copies %.6f -> %.6f (%d copied)\n",
               gpt ? "gpt" : "cnn", ct_precision_name(prec), (double)la[0], (double)la[3], sa.n_lowp_simd,
               bf16 ? "BF16" : "FP16", sa.n_lowp_copied, (double)lb[0], (double)lb[3], sb.n_lowp_copied);
        /* no node declined its 16-bit I/O at run time (a fallback counts as copied) */
        ct_plan_stats after;
        ct_plan_get_stats(a, &after);
        CHECK_MSG(after.n_lowp_copied == sa.n_lowp_copied, "%d nodes fell back to FP32 copies at run time",
                  after.n_lowp_copied - sa.n_lowp_copied);
        if (!hw || !bf16) { /* the same computation: bit for bit */
            CHECK_MSG(!memcmp(la, lb, sizeof la) && !memcmp(wa, wb, n * sizeof(float)),
                      "%s %s: losses or weights differ between 16-bit I/O and FP32 copies", gpt ? "gpt" : "cnn",
                      ct_precision_name(prec));
        } else { /* oneDNN's native BF16 also differs in summation order */
            for (int t = 0; t < 4; t++) CHECK(fabsf(la[t] - lb[t]) <= 2e-2f * fabsf(lb[t]));
        }
        ct_plan_free(a);
        ct_plan_free(b);
    }
    ct_context_free(ctx);
}

TEST(plans_match_copies) {
    plans_match_copies_on(-1);
    plans_match_copies_on(CT_ISA_AVX2);
}

/* What ran, as the node hook and ct_plan_kernel_impl say: oneDNN nodes name
 * oneDNN's implementation after their first run, SIMD nodes their slot, and
 * the SIMD nodes of a BF16 plan read BF16 ("avx512 bf16"), those of an FP16
 * plan FP16 ("avx512 f16"). */
typedef struct {
    const char *want; /* " bf16" or " f16" */
    int onednn, onednn_named, simd, simd_bf16, bad;
    char example[64];
} impl_seen;

static void impl_hook(void *user, const ct_node_event *ev) {
    impl_seen *s = user;
    if (ev->kind != CT_NODE_END) return;
    if (!strcmp(ev->kernel, "onednn")) {
        s->onednn++;
        s->onednn_named += strcmp(ev->impl, "onednn") != 0 && ev->impl[0] != 0;
        if (!s->example[0]) snprintf(s->example, sizeof s->example, "%s %s", ev->op, ev->impl);
    } else if (!strcmp(ev->kernel, "avx512") || !strcmp(ev->kernel, "avx2")) {
        s->simd++;
        s->bad += strcmp(ev->impl, ev->kernel) != 0;
        s->simd_bf16 += strstr(ev->kernel_desc, s->want) != NULL;
    }
}

static void impl_names(ct_precision prec) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_plan *p;
    ct_node x, y;
    CHECK_OK(ctx, build(ctx, 0, prec, NULL, 0, &p, &x, &y));
    impl_seen seen = {prec == CT_PRECISION_FP16 ? " f16" : " bf16", 0, 0, 0, 0, 0, ""};
    ct_plan_set_node_hook(p, impl_hook, &seen);
    float loss[1];
    CHECK_OK(ctx, train(ctx, p, 0, x, y, 1, loss));
    printf("    cnn %s step: %d oneDNN nodes (%d named by oneDNN, e.g. %s), %d SIMD nodes (%d reading%s)\n",
           ct_precision_name(prec), seen.onednn, seen.onednn_named, seen.example, seen.simd, seen.simd_bf16, seen.want);
    /* what runs follows the context: CT_ISA=ref (or CT_ONEDNN=0) leaves no oneDNN / SIMD node */
    if (ct_context_use_onednn(ctx)) CHECK(seen.onednn > 0 && seen.onednn_named == seen.onednn);
    else CHECK(seen.onednn == 0);
    if (ct_context_isa(ctx) >= CT_ISA_AVX2) CHECK(seen.simd > 0 && seen.simd_bf16 > 0 && seen.bad == 0);
    else CHECK(seen.simd == 0);
    ct_plan_free(p);
    ct_context_free(ctx);
}

TEST(kernel_impl_names) {
    impl_names(CT_PRECISION_BF16);
    impl_names(CT_PRECISION_FP16);
}

/* A BF16 plan whose max pool sees planes above a tile (ResNet's stem pool:
 * 3x3 / 2 pad 1; here 100x100 -> 50x50): conv2d (BF16) -> relu -> max pool
 * -> linear -> cross-entropy. The pool and its backward run their SIMD BF16
 * kernels on the workspace the plan sized (ct_ws_pool), and three training
 * steps give the losses of the plan with FP32 copies everywhere, bit for bit. */
static int g_big_cl; /* 1: the pool runs channels-last on the transposed activations, (2, 100, 100, 3) */
static ct_status big_pool_plan(ct_context *ctx, const char *native, ct_plan **out, ct_node *xo, ct_node *yo) {
    if (native) setenv("CT_BF16_NATIVE", native, 1);
    else unsetenv("CT_BF16_NATIVE");
    ct_graph *g;
    ct_node x, y, w, h, r, pool, flat, fw, logits, loss;
    ct_status s = ct_graph_create(ctx, &g);
    if (s != CT_OK) return s;
    s = ct_input(g, "y", CT_I32, 1, (int64_t[]){2}, &y);
    if (s == CT_OK) s = ct_input(g, "x", CT_F32, 4, (int64_t[]){2, 1, 100, 100}, &x);
    if (s == CT_OK) s = ct_param(g, "conv.w", 4, (int64_t[]){3, 1, 3, 3}, CT_INIT_KAIMING_UNIFORM, 9, &w);
    if (s == CT_OK) s = ct_conv2d(g, x, w, CT_NONE, 1, 1, 1, 1, &h);
    if (s == CT_OK) s = ct_relu(g, h, &r);
    if (s == CT_OK && !g_big_cl) s = ct_maxpool2d(g, r, 3, 2, 1, &pool);
    if (s == CT_OK && g_big_cl) {
        ct_pool2d_opts po;
        ct_pool2d_opts_default(&po, 3);
        po.stride_h = po.stride_w = 2;
        po.pad_h = po.pad_w = 1;
        po.channels_last = 1;
        s = ct_transpose(g, r, (int[]){0, 2, 3, 1}, &r);
        if (s == CT_OK) s = ct_maxpool2d_ex(g, r, &po, &pool);
    }
    if (s == CT_OK) s = ct_reshape(g, pool, 2, (int64_t[]){2, 3 * 50 * 50}, &flat);
    if (s == CT_OK) s = ct_param(g, "fc.w", 2, (int64_t[]){10, 3 * 50 * 50}, CT_INIT_KAIMING_UNIFORM, 7500, &fw);
    if (s == CT_OK) s = ct_linear(g, flat, fw, CT_NONE, &logits);
    if (s == CT_OK) s = ct_cross_entropy(g, logits, y, 0.0f, -100, &loss);
    ct_compile_opts o;
    ct_compile_opts_default(&o);
    o.precision = CT_PRECISION_BF16;
    if (s == CT_OK) s = ct_compile(g, loss, 0, NULL, &o, out);
    ct_graph_free(g);
    unsetenv("CT_BF16_NATIVE");
    *xo = x;
    *yo = y;
    return s;
}

typedef struct {
    int pools, pools_bf16;
} pool_seen;

static void pool_hook(void *user, const ct_node_event *ev) {
    pool_seen *s = user;
    if (ev->kind != CT_NODE_END || strncmp(ev->op, "maxpool2d", 9)) return;
    s->pools++;
    s->pools_bf16 += strstr(ev->kernel_desc, " bf16") != NULL;
}

/* the same with the pool channels-last: images of 100x100x3 above a tile */
static void big_pool_round(int cl) {
    g_big_cl = cl;
    ct_context *ctx = test_ctx(-1, 1);
    ct_plan *p, *c;
    ct_node x, y;
    float la[3], lc[3];
    CHECK_OK(ctx, big_pool_plan(ctx, NULL, &p, &x, &y));
    CHECK_OK(ctx, big_pool_plan(ctx, "0", &c, &x, &y));
    ct_plan_stats st;
    ct_plan_get_stats(p, &st);
    /* one input and one output plane per thread */
    size_t need = (size_t)ct_context_num_threads(ctx) * (100 * 100 + 50 * 50) * (cl ? 3 : 1) * sizeof(float);
    CHECK_MSG(st.workspace_bytes >= need, "workspace %zu < %zu", st.workspace_bytes, need);
    pool_seen seen = {0, 0};
    ct_plan_set_node_hook(p, pool_hook, &seen);
    CHECK_OK(ctx, train(ctx, p, 0, x, y, 3, la));
    CHECK_OK(ctx, train(ctx, c, 0, x, y, 3, lc));
    printf("    100x100 max pool%s in a bf16 plan: %d of %d pool nodes read BF16; losses %.6f %.6f %.6f "
           "(copies everywhere: %.6f %.6f %.6f)\n",
           cl ? " (channels-last)" : "", seen.pools_bf16, seen.pools, la[0], la[1], la[2], lc[0], lc[1], lc[2]);
    CHECK(seen.pools == 6); /* forward and backward, three steps */
    if (ct_context_isa(ctx) >= CT_ISA_AVX2) CHECK(seen.pools_bf16 == seen.pools);
    CHECK(memcmp(la, lc, sizeof la) == 0);
    ct_plan_free(p);
    ct_plan_free(c);
    ct_context_free(ctx);
}

TEST(pool_big_planes_in_plan) {
    big_pool_round(0);
    big_pool_round(1);
    g_big_cl = 0;
}

/* The activation arenas of the Fashion CNN (batch 128) and gpt-char-small
 * (8 x 256), compiled only: FP32, and BF16 with copies everywhere
 * (CT_BF16_NATIVE=0), the default, native matmul/conv too (=1); for the
 * GPT also bf16-pure. The CNN's BF16 arena is at most 55% of FP32's where
 * matmul/conv can run natively (AVX-512 + oneDNN); the SIMD kernels reading
 * BF16 shrink both models' arenas. */
static ct_status arena_of(ct_context *ctx, int gpt, ct_precision prec, const char *native, size_t *act, size_t *cast) {
    ct_plan *p;
    CT_TRY(build(ctx, gpt, prec, native, 1, &p, NULL, NULL));
    ct_plan_stats st;
    ct_plan_get_stats(p, &st);
    *act = st.activation_bytes;
    *cast = st.cast_bytes;
    ct_plan_free(p);
    return CT_OK;
}

/* A model's plan at a fusion level (default native setting). */
static ct_status arena_of_level(ct_context *ctx, int gpt, ct_precision prec, int level, size_t *act, size_t *cast) {
    ct_plan *p;
    CT_TRY(build_level(ctx, gpt, prec, NULL, 1, level, &p, NULL, NULL));
    ct_plan_stats st;
    ct_plan_get_stats(p, &st);
    *act = st.activation_bytes;
    *cast = st.cast_bytes;
    ct_plan_free(p);
    return CT_OK;
}

TEST(arena_targets) {
    ct_context *ctx = test_ctx(-1, 1);
    static const char *modes[3] = {"0", NULL, "1"};
    int avx512 = ct_context_isa(ctx) >= CT_ISA_AVX512 && ct_context_use_onednn(ctx);
    int native = 0; /* the default: oneDNN runs BF16 in hardware (not under ONEDNN_MAX_CPU_ISA=AVX2) */
    CHECK_OK(ctx, ct_context_lowp_native(ctx, CT_BF16, &native, NULL, 0));
    for (int m = 0; m < 3; m++) {
        int gpt = m > 0, pure = m == 2;
        size_t act[4], cast[4];
        CHECK_OK(ctx, arena_of(ctx, gpt, CT_PRECISION_FP32, NULL, &act[0], &cast[0]));
        for (int v = 0; v < 3; v++)
            CHECK_OK(ctx, arena_of(ctx, gpt, pure ? CT_PRECISION_BF16_PURE : CT_PRECISION_BF16, modes[v], &act[v + 1],
                                   &cast[v + 1]));
        printf("    %s activation arena: fp32 %.2f MiB; %s: copies everywhere %.2f MiB (%.0f%%, largest copy %.2f MiB),"
               " default %.2f MiB (%.0f%%, %.2f), native matmul/conv %.2f MiB (%.0f%%, %.2f)\n",
               gpt ? "gpt-char-small 8x256" : "cnn b128", act[0] / 1048576.0, pure ? "bf16-pure" : "bf16",
               act[1] / 1048576.0, 100.0 * act[1] / act[0], cast[1] / 1048576.0, act[2] / 1048576.0,
               100.0 * act[2] / act[0], cast[2] / 1048576.0, act[3] / 1048576.0, 100.0 * act[3] / act[0],
               cast[3] / 1048576.0);
        if (ct_context_isa(ctx) >= CT_ISA_AVX2) CHECK(act[2] < act[1] && cast[2] < cast[1]);
        /* FP16: the SIMD kernels read FP16 as they read BF16, matmul / conv take FP32 copies (no FP16
           matmul with FP32 accumulation on any CPU here); where BF16's matmuls take copies too, the
           two plans are the same but for FP16's gradient round trips of its weight copies (autodiff's
           grad_dtype: a few small buffers), so within 1% of each other */
        size_t h[2], hc[2];
        ct_precision p16 = pure ? CT_PRECISION_FP16_PURE : CT_PRECISION_FP16;
        CHECK_OK(ctx, arena_of(ctx, gpt, p16, "0", &h[0], &hc[0]));
        CHECK_OK(ctx, arena_of(ctx, gpt, p16, NULL, &h[1], &hc[1]));
        printf("    %s activation arena: %s: copies everywhere %.2f MiB (%.0f%%), default %.2f MiB (%.0f%%, largest copy "
               "%.2f MiB)\n",
               gpt ? "gpt-char-small 8x256" : "cnn b128", ct_precision_name(p16), h[0] / 1048576.0,
               100.0 * h[0] / act[0], h[1] / 1048576.0, 100.0 * h[1] / act[0], hc[1] / 1048576.0);
        CHECK_MSG(h[0] <= act[1] + act[1] / 100 && act[1] <= h[0] + h[0] / 100, "copies: fp16 %zu bytes, bf16 %zu",
                  h[0], act[1]);
        if (ct_context_isa(ctx) >= CT_ISA_AVX2) CHECK(h[1] < h[0] && hc[1] < hc[0]);
        if (!native)
            CHECK_MSG(h[1] <= act[2] + act[2] / 100 && act[2] <= h[1] + h[1] / 100, "default: fp16 %zu bytes, bf16 %zu",
                      h[1], act[2]);
        if (avx512) {
            CHECK(cast[3] == 0 && act[3] <= act[2]);
            /* the CNN in bf16; gpt-char-small in bf16-pure (autocast keeps its layernorms and residual
               stream in FP32, as PyTorch's autocast does: 69%). The BF16 weight copies are model state
               kept between steps (ct_plan_stats.weight_copy_bytes), not activations. */
            if (!gpt || pure) CHECK((double)act[3] <= 0.55 * (double)act[0]);
        }
        if (!pure) { /* at fusion level 1 (the recipes' default) too: batchnorm+relu fuses in BF16 as in
                        FP32; the GPT's casts fold into the kernels around them (cast_fold) */
            size_t a1, b1, c1;
            CHECK_OK(ctx, arena_of_level(ctx, gpt, CT_PRECISION_FP32, 1, &a1, &c1));
            CHECK_OK(ctx, arena_of_level(ctx, gpt, CT_PRECISION_BF16, 1, &b1, &c1));
            printf("    %s at fusion level 1: fp32 %.2f MiB, bf16 %.2f MiB (%.0f%%)\n",
                   gpt ? "gpt-char-small 8x256" : "cnn b128", a1 / 1048576.0, b1 / 1048576.0, 100.0 * b1 / a1);
            if (native && !gpt) CHECK((double)b1 <= 0.55 * (double)a1);
            /* level 0 frees the FP32 layernorm outputs once their BF16 casts exist (a backward
               reading only a node's saved state does not keep its output), level 1 never makes
               them (cast_fold): the same live values, placed within 2% of each other */
            if (ct_context_isa(ctx) >= CT_ISA_AVX2 && gpt) CHECK(b1 <= act[2] + act[2] / 50);
        }
    }
    ct_context_free(ctx);
}

TEST_MAIN(T(eltwise), T(batchnorm), T(relu_pack_all_patterns), T(layernorm), T(pooling), T(pooling_channels_last), T(reductions), T(softmax), T(cross_entropy), T(embedding), T(attention), T(attention_onednn_bf16), T(gemm_amx_bf16), T(plans_match_copies), T(pool_big_planes_in_plan), T(kernel_impl_names),
          T(arena_targets))
