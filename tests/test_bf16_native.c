/* tests/test_bf16_native.c - matmul, linear and conv2d reading and writing
 * BF16 through oneDNN's bf16 primitives (the "native" path of
 * ct_context_lowp_native) against the conversion path (FP32 copies of the
 * same BF16 values, FP32 math: the FP32 reference on BF16-rounded inputs).
 *
 * Every case builds one graph, compiles it twice in BF16 with
 * CT_BF16_NATIVE=1 and =0 (the variable is read by ct_compile), gives both
 * plans the same parameters and inputs and runs forward + backward. The
 * operands of the op under test are parameters, so autodiff runs the
 * backward-data and backward-weights kernels too; the loss is sum(y * r)
 * with a random r. Checked:
 *  - what ran: through the node hook, every matmul / linear / conv2d node,
 *    forward and backward, reports "onednn bf16" (or, where the context
 *    allows no native path, the plans are the same), and parameter
 *    gradients come out of their GEMM / convolution as FP32 (no backward
 *    cast to FP32: no BF16 round trip of master gradients);
 *  - the numbers: the BF16 output within one BF16 ulp per element (FP32
 *    accumulation in another order can round the other way), the loss and
 *    every gradient within 1e-2 of the largest (one BF16 ulp of the stored
 *    intermediates; from identical BF16 operands the weight gradients agree
 *    far closer);
 *  - later steps allocate nothing and repeat the first bit for bit;
 *  - whole models (an MLP, a tiny CNN) trained a few steps with native on
 *    and off give close losses; recompute and gradient accumulation leave a
 *    native plan bit-identical; the CNN's activation arena shrinks.
 *
 * Where CT_BF16_NATIVE=1 cannot apply (CT_ISA below avx512, CT_ONEDNN=0),
 * both plans must be identical, bit for bit. Where oneDNN has no BF16
 * primitive (ONEDNN_MAX_CPU_ISA below AVX512_CORE), every native node must
 * fall back to FP32 copies at its first run, again bit for bit. On this
 * project's machine (AVX-512 without AVX512-BF16) oneDNN emulates BF16, so
 * the native path runs (slowly): shapes are small. */
#include <dnnl.h>
#include <math.h>
#include <stdlib.h>

#include "test.h"
#include "core/internal.h"
#include "graph/ir.h"
#include "ctrain/optim.h"

#define TRY(expr)                              \
    do {                                       \
        ct_status try_s_ = (expr);             \
        if (try_s_ != CT_OK) return try_s_;    \
    } while (0)

/* What CT_BF16_NATIVE=1 gives in a default context here. */
typedef enum { MODE_COPIES = 0, MODE_NATIVE, MODE_FALLBACK } native_mode;
static const char *k_mode_name[] = {"no native path in this context: both plans must be identical",
                                    "oneDNN runs the BF16 primitives",
                                    "oneDNN has no BF16 primitive: native nodes fall back to FP32 copies"};

static native_mode g_mode_cache = (native_mode)-1;

static native_mode expected_mode(ct_context *ctx) {
    if ((int)g_mode_cache >= 0) return g_mode_cache;
    setenv("CT_BF16_NATIVE", "1", 1);
    int native = 0;
    char how[256];
    native_mode m = MODE_COPIES;
    if (ct_context_lowp_native(ctx, CT_BF16, &native, how, sizeof how) == CT_OK && native) {
        unsigned isa = (unsigned)dnnl_get_effective_cpu_isa(), core = (unsigned)dnnl_cpu_isa_avx512_core;
        m = (isa & core) == core ? MODE_NATIVE : MODE_FALLBACK;
    }
    unsetenv("CT_BF16_NATIVE");
    printf("  CT_BF16_NATIVE=1: %s\n    (%s)\n", k_mode_name[m], how);
    g_mode_cache = m;
    return m;
}

static int is_gemm_op(const char *op) {
    return !strcmp(op, "matmul") || !strcmp(op, "linear") || !strcmp(op, "conv2d") ||
           !strcmp(op, "conv2d_bwd_data") || !strcmp(op, "conv2d_bwd_weight") || !strcmp(op, "attention") ||
           !strcmp(op, "attention_bwd");
}

/* The node hook's record of one step: what every GEMM-like node ran as. */
typedef struct {
    int n_gemm, n_bad, n_f32_grads, n_bwd_cast_f32;
    char bad[160];
    const char *want; /* the kernel_desc every GEMM-like node must report */
} ran_log;

static int g_amx_nodes; /* GEMM nodes that ran ctrain's GEMM on AMX tiles (onednn/matmul.c), every compare() */

static void on_node(void *user, const ct_node_event *ev) {
    ran_log *l = user;
    if (ev->kind != CT_NODE_END) return;
    if (ev->impl && !strcmp(ev->impl, "ctrain:amx_tiles") && (!strcmp(ev->op, "matmul") || !strcmp(ev->op, "linear")))
        g_amx_nodes++;
    if (ev->backward && !strcmp(ev->op, "cast") && ev->dtype == CT_F32) l->n_bwd_cast_f32++;
    if (!is_gemm_op(ev->op)) return;
    l->n_gemm++;
    if (ev->backward && ev->dtype == CT_F32) l->n_f32_grads++;
    /* attention has SIMD kernels that read BF16: where oneDNN does not run
     * it in BF16 they do, not FP32 copies (e.g. "avx2 bf16"); so does the
     * direct weight gradient of a convolution with 1-2 input channels
     * (simd/conv.c), which runs before oneDNN wherever it applies */
    size_t nd = strlen(ev->kernel_desc);
    int simd_op = (!strncmp(ev->op, "attention", 9) && strcmp(l->want, "onednn bf16")) ||
                  !strcmp(ev->op, "conv2d_bwd_weight");
    int simd_bf16 = simd_op && nd > 5 && !strcmp(ev->kernel_desc + nd - 5, " bf16") && !strncmp(ev->kernel_desc, "avx", 3);
    if (!simd_bf16 && strcmp(ev->kernel_desc, l->want) && !l->n_bad++)
        snprintf(l->bad, sizeof l->bad, "%s '%s' ran as '%s', not '%s'", ev->op, ev->name, ev->kernel_desc, l->want);
}

/* ---- one op: native vs copies ------------------------------------------------------------------ */

typedef struct {
    ct_node loss, out, r;
    int expect_gemm;  /* GEMM-like nodes per step (forward and backward) */
    int expect_grads; /* of them, parameter gradients (FP32 outputs) */
    double out_rel;   /* native output vs copies as max|diff| / max|y| (0: per element, at most one
                         BF16 ulp: a GEMM's other summation order) */
} built;

typedef ct_status (*builder)(ct_graph *g, const void *cfg, built *b);

static ct_status compile_bf16(ct_graph *g, const built *b, int native, ct_plan **out) {
    setenv("CT_BF16_NATIVE", native ? "1" : "0", 1);
    ct_compile_opts o;
    ct_compile_opts_default(&o);
    o.precision = CT_PRECISION_BF16;
    return ct_compile(g, b->loss, 1, &b->out, &o, out);
}

static int step(ct_plan *p) {
    if (ct_plan_forward(p, 1) == CT_OK && ct_plan_backward(p) == CT_OK) return 0;
    fprintf(stderr, "    step failed: %s\n", ct_context_last_error(ct_plan_context(p)));
    return 1;
}

static float bf(uint16_t h) { return ct_bf16_to_f32(h); }

/* Largest distance in BF16 ulps (of the larger magnitude) between two BF16 tensors. */
static double worst_ulps(const uint16_t *a, const uint16_t *b, size_t n) {
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double x = bf(a[i]), y = bf(b[i]), m = fmax(fabs(x), fabs(y));
        if (x == y) continue;
        if (!isfinite(x) || !isfinite(y)) return INFINITY;
        double e = fabs(x - y) / ldexp(1.0, ilogb(m) - 7);
        worst = e > worst ? e : worst;
    }
    return worst;
}

/* Returns the number of failures; prints them under `label`. */
static int compare(builder fn, const void *cfg, const char *label) {
    int fails = 0;
    ct_context *ctx = test_ctx(-1, 1);
    native_mode mode = expected_mode(ctx);
    ct_graph *g = NULL;
    ct_plan *pn = NULL, *pc = NULL;
    built b;
    memset(&b, 0, sizeof b);
    ct_status s = ct_graph_create(ctx, &g);
    if (s == CT_OK) s = fn(g, cfg, &b);
    if (s == CT_OK) s = compile_bf16(g, &b, 1, &pn);
    if (s == CT_OK) s = compile_bf16(g, &b, 0, &pc);
    unsetenv("CT_BF16_NATIVE");
    if (s != CT_OK) {
        fprintf(stderr, "    %s: building/compiling failed: %s\n", label, ct_context_last_error(ctx));
        fails++;
        goto done;
    }
    /* the same parameters and inputs */
    float *w[2];
    size_t n[2];
    ct_plan_param_arena(pn, &w[0], NULL, &n[0]);
    ct_plan_param_arena(pc, &w[1], NULL, &n[1]);
    test_fill_uniform(w[0], n[0], 11, -1, 1);
    memcpy(w[1], w[0], n[0] * sizeof(float));
    ct_tensor r0, r1;
    ct_plan_tensor(pn, b.r, &r0);
    ct_plan_tensor(pc, b.r, &r1);
    test_fill_uniform(r0.data, (size_t)ct_tensor_numel(&r0), 5, -1, 1);
    memcpy(r1.data, r0.data, (size_t)ct_tensor_numel(&r0) * sizeof(float));
    ct_plan_stats st;
    ct_plan_get_stats(pn, &st);
    if ((mode == MODE_COPIES) != (st.n_lowp_native == 0)) {
        fprintf(stderr, "    %s: %d nodes planned native, expected %s\n", label, st.n_lowp_native,
                mode == MODE_COPIES ? "none" : "some");
        fails++;
    }
    /* step 1, watched */
    ran_log log = {0};
    log.want = mode == MODE_NATIVE ? "onednn bf16" : "convert+onednn f32";
    if (!ct_context_use_onednn(ctx)) log.want = "convert+ref f32";
    ct_plan_set_node_hook(pn, on_node, &log);
    if (step(pc) || step(pn)) {
        fails++;
        goto done;
    }
    ct_plan_set_node_hook(pn, NULL, NULL);
    if (log.n_bad) {
        fprintf(stderr, "    %s: %d nodes ran otherwise: %s\n", label, log.n_bad, log.bad);
        fails++;
    }
    if (log.n_gemm != b.expect_gemm) {
        fprintf(stderr, "    %s: %d matmul/linear/conv nodes ran, expected %d\n", label, log.n_gemm, b.expect_gemm);
        fails++;
    }
    if (log.n_f32_grads != b.expect_grads || log.n_bwd_cast_f32) {
        fprintf(stderr, "    %s: %d FP32 gradients from GEMMs/convolutions (want %d), %d backward casts to f32 "
                "(want 0: master gradients are written as FP32)\n", label, log.n_f32_grads, b.expect_grads,
                log.n_bwd_cast_f32);
        fails++;
    }
    int np = ct_plan_num_params(pn);
    ct_plan_get_stats(pn, &st);
    if ((mode == MODE_NATIVE) != (st.n_lowp_native > 0)) {
        fprintf(stderr, "    %s: %d native nodes after a step in mode '%s'\n", label, st.n_lowp_native,
                k_mode_name[mode]);
        fails++;
    }
    /* the numbers */
    ct_tensor y0, y1;
    ct_plan_tensor(pn, b.out, &y0);
    ct_plan_tensor(pc, b.out, &y1);
    size_t ny = (size_t)ct_tensor_numel(&y0);
    double exact_tol = mode == MODE_NATIVE ? 1.0 : 0.0; /* otherwise the same kernels on the same values */
    double e;
    if (mode == MODE_NATIVE && b.out_rel > 0) {
        float *f0 = malloc(ny * sizeof *f0), *f1 = malloc(ny * sizeof *f1);
        for (size_t i = 0; f0 && f1 && i < ny; i++) f0[i] = bf(((uint16_t *)y0.data)[i]), f1[i] = bf(((uint16_t *)y1.data)[i]);
        e = f0 && f1 ? test_rel_to_max(f0, f1, ny) : INFINITY;
        free(f0);
        free(f1);
        if (!(e <= b.out_rel)) {
            fprintf(stderr, "    %s: output %.3g of the largest from the conversion path\n", label, e);
            fails++;
        }
    } else if (!((e = worst_ulps(y0.data, y1.data, ny)) <= exact_tol)) {
        fprintf(stderr, "    %s: output %.3g BF16 ulps from the conversion path\n", label, e);
        fails++;
    }
    float l0, l1;
    ct_plan_loss(pn, &l0);
    ct_plan_loss(pc, &l1);
    double scale = 0; /* the loss is a sum of terms of both signs */
    for (size_t i = 0; i < ny; i++) scale += fabs(bf(((uint16_t *)y1.data)[i]) * ((float *)r1.data)[i]);
    e = fabs((double)l0 - l1) / fmax(scale, 1e-6);
    if (!(e <= (mode == MODE_NATIVE ? 1.0 / 128 : 0.0))) {
        fprintf(stderr, "    %s: loss %.9g vs %.9g (relative to sum |y r|: %.3g)\n", label, l0, l1, e);
        fails++;
    }
    for (int i = 0; i < np; i++) {
        const char *name;
        ct_tensor g0, g1;
        ct_plan_param_info(pn, i, &name, NULL, &g0);
        ct_plan_param_info(pc, i, NULL, NULL, &g1);
        e = test_rel_to_max(g0.data, g1.data, (size_t)ct_tensor_numel(&g0));
        if (!(e <= (mode == MODE_NATIVE ? 1e-2 : 0.0))) {
            fprintf(stderr, "    %s: gradient of '%s' off by %.3g of its largest\n", label, name, e);
            fails++;
        }
    }
    /* later steps: no allocation, the same results */
    uint16_t *first = malloc(ny * sizeof *first);
    ct_mem_stats m1, m2;
    if (!first) {
        fails++;
        goto done;
    }
    memcpy(first, y0.data, ny * sizeof *first);
    ct_context_mem_stats(ctx, &m1);
    if (step(pn) || step(pn)) fails++;
    ct_context_mem_stats(ctx, &m2);
    if (m2.n_allocs != m1.n_allocs) {
        fprintf(stderr, "    %s: a step after the first allocated (%llu -> %llu allocations)\n", label,
                (unsigned long long)m1.n_allocs, (unsigned long long)m2.n_allocs);
        fails++;
    }
    if (memcmp(first, y0.data, ny * sizeof *first)) {
        fprintf(stderr, "    %s: a later step's output differs from the first\n", label);
        fails++;
    }
    free(first);
done:
    ct_plan_free(pn);
    ct_plan_free(pc);
    ct_graph_free(g);
    ct_mem_stats m;
    ct_context_mem_stats(ctx, &m);
    if (m.bytes_in_use != 0) {
        fprintf(stderr, "    %s: %zu bytes not returned after freeing the plans\n", label, m.bytes_in_use);
        fails++;
    }
    ct_context_free(ctx);
    return fails;
}

/* loss = sum(y * r), r a random FP32 input of y's shape */
static ct_status weighted_sum(ct_graph *g, ct_node y, built *b) {
    TRY(test_weighted_sum(g, y, &b->r, &b->loss));
    b->out = y;
    return CT_OK;
}

/* ---- matmul ------------------------------------------------------------------------------------ */

typedef test_mm_cfg mm_cfg;

static ct_status build_mm(ct_graph *g, const void *vc, built *b) {
    ct_node y;
    TRY(test_mm_op(g, vc, &y));
    b->expect_gemm = 3; /* forward, and one matmul per gradient */
    b->expect_grads = 2;
    return weighted_sum(g, y, b);
}

static int mm_sweep(int nd_a, int nd_b, int64_t M, int64_t K, int64_t N) {
    int fails = 0;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            mm_cfg c = {nd_a, nd_b, {3, 2}, M, K, N, ta, tb};
            char label[160];
            snprintf(label, sizeof label, "matmul a%dd b%dd M=%lld K=%lld N=%lld ta=%d tb=%d", nd_a, nd_b,
                     (long long)M, (long long)K, (long long)N, ta, tb);
            fails += compare(build_mm, &c, label);
        }
    return fails;
}

TEST(matmul_2d_all_transposes) {
    CHECK(mm_sweep(2, 2, 13, 7, 9) == 0);
    CHECK(mm_sweep(2, 2, 1, 33, 5) == 0);
    CHECK(mm_sweep(2, 2, 40, 48, 24) == 0);
}

TEST(matmul_batched) {
    CHECK(mm_sweep(3, 2, 5, 7, 6) == 0); /* 2-D b broadcast over the batch */
    CHECK(mm_sweep(4, 2, 5, 11, 3) == 0);
    CHECK(mm_sweep(3, 3, 5, 7, 6) == 0); /* batched b */
    CHECK(mm_sweep(4, 4, 9, 3, 10) == 0);
}

/* ---- linear ------------------------------------------------------------------------------------ */

typedef test_lin_cfg lin_cfg;

static ct_status build_linear(ct_graph *g, const void *vc, built *b) {
    ct_node y;
    TRY(test_linear_op(g, vc, &y));
    b->expect_gemm = 3; /* linear, dx and dW matmuls */
    b->expect_grads = 2;
    return weighted_sum(g, y, b);
}

TEST(linear_bias_and_3d) {
    const lin_cfg cs[] = {
        {2, {10}, 13, 11, 0}, {2, {10}, 13, 11, 1}, {3, {2, 5}, 13, 7, 0}, {3, {3, 5}, 9, 17, 1}, {2, {1}, 4, 3, 1},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        char label[128];
        snprintf(label, sizeof label, "linear x%dd I=%lld O=%lld bias=%d", cs[i].nd, (long long)cs[i].I,
                 (long long)cs[i].O, cs[i].bias);
        CHECK_MSG(compare(build_linear, &cs[i], label) == 0, "%s", label);
    }
}

/* The same with the BF16 weight copies packed once per update (CT_ONEDNN_PACK_WEIGHTS=1,
 * onednn/matmul.c's pack_weight: the primitive takes B in the blocked layout it asks for, kept by the
 * node and reordered from the weight copy only when the copies change): forward and data gradients of
 * matmul and linear against the FP32 copies as above (whose later steps repeat the first bit for bit:
 * the kept copy is reused). The staleness rules are checked on a model in
 * trained_with_weights_packed_once_like_plain. */
TEST(matmul_and_linear_with_weights_packed_once) {
    setenv("CT_ONEDNN_PACK_WEIGHTS", "1", 1);
    CHECK(mm_sweep(2, 2, 40, 48, 24) == 0);
    CHECK(mm_sweep(3, 2, 5, 7, 6) == 0);
    CHECK(mm_sweep(3, 3, 5, 7, 6) == 0);
    const lin_cfg cs[] = {{2, {10}, 13, 11, 1}, {3, {3, 5}, 33, 17, 0}};
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++)
        CHECK_MSG(compare(build_linear, &cs[i], "linear, weights packed once") == 0, "linear case %zu", i);
    unsetenv("CT_ONEDNN_PACK_WEIGHTS");
}

/* The same through plans with every BF16 linear and matmul on ctrain's GEMM on AMX tiles (CT_MATMUL_AMX=1; auto
 * takes only shapes of >= 1024 tokens): forward, data and weight gradients (A transposed: K the rows, in chunks
 * of 256 past 256) against the FP32 copies, and the tiles ran where the CPU has them. */
TEST(matmul_and_linear_on_amx_tiles) {
    ct_context *ctx = test_ctx(-1, 1);
    const ct_cpu_features *cpu = ct_context_cpu(ctx);
    const unsigned isa = (unsigned)dnnl_get_effective_cpu_isa(), amx = (unsigned)dnnl_cpu_isa_avx512_core_amx;
    const int here = expected_mode(ctx) == MODE_NATIVE && cpu->amx_bf16 && cpu->amx_permitted &&
                     ct_context_isa(ctx) >= CT_ISA_AVX512 && (isa & amx) == amx;
    ct_context_free(ctx);
    setenv("CT_MATMUL_AMX", "1", 1);
    g_amx_nodes = 0;
    CHECK(mm_sweep(2, 2, 40, 48, 24) == 0);
    CHECK(mm_sweep(2, 2, 70, 300, 33) == 0); /* K in two chunks for the weight gradients (A^T: K = 70 rows) */
    CHECK(mm_sweep(3, 2, 5, 7, 6) == 0);
    const lin_cfg cs[] = {{2, {10}, 13, 11, 1}, {3, {3, 5}, 33, 17, 0}, {2, {600}, 64, 96, 1}};
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++)
        CHECK_MSG(compare(build_linear, &cs[i], "linear on AMX tiles") == 0, "linear case %zu", i);
    unsetenv("CT_MATMUL_AMX");
    printf("    %d GEMM nodes ran on AMX tiles (%s)\n", g_amx_nodes, here ? "this CPU has them" : "none here");
    CHECK_MSG(here ? g_amx_nodes >= 30 : g_amx_nodes == 0, "%d GEMM nodes on AMX tiles", g_amx_nodes);
}

/* ---- attention (after a linear: the qkv projection) -------------------------------------------- */

typedef struct {
    int64_t B, T, D, H;
    int causal;
} att_cfg;

static ct_status build_attention(ct_graph *g, const void *vc, built *b) {
    const att_cfg *c = vc;
    ct_node x, w, qkv, y;
    TRY(ct_param(g, "x", 3, (int64_t[]){c->B, c->T, c->D}, CT_INIT_ZEROS, 1, &x));
    TRY(ct_param(g, "w", 2, (int64_t[]){3 * c->D, c->D}, CT_INIT_ZEROS, 1, &w));
    TRY(ct_linear(g, x, w, CT_NONE, &qkv));
    TRY(ct_attention(g, qkv, (int)c->H, c->causal, CT_NONE, &y));
    b->expect_gemm = 5; /* linear, its dx and dW matmuls, attention and its backward */
    b->expect_grads = 2;
    /* P and dS are rounded to BF16 before their products on the native
     * path (a matrix unit's inputs), the copies keep them FP32: outputs
     * near zero differ by many of their own ulps */
    b->out_rel = 1e-2;
    return weighted_sum(g, y, b);
}

TEST(attention_after_linear) {
    /* the last two: head sizes 32 and 64, the products on AMX tiles where the CPU has them */
    const att_cfg cs[] = {{2, 37, 24, 3, 0}, {2, 100, 32, 2, 1}, {1, 64, 16, 1, 1}, {2, 45, 64, 2, 0}, {1, 70, 128, 2, 1}};
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        char label[128];
        snprintf(label, sizeof label, "attention B=%lld T=%lld D=%lld H=%lld causal=%d", (long long)cs[i].B,
                 (long long)cs[i].T, (long long)cs[i].D, (long long)cs[i].H, cs[i].causal);
        CHECK_MSG(compare(build_attention, &cs[i], label) == 0, "%s", label);
    }
}

/* ---- conv2d ------------------------------------------------------------------------------------ */

typedef test_conv_cfg conv_cfg;

static ct_status build_conv(ct_graph *g, const void *vc, built *b) {
    ct_node y;
    TRY(test_conv_op(g, vc, &y));
    b->expect_gemm = 3; /* forward, backward data, backward weights */
    b->expect_grads = 2;
    return weighted_sum(g, y, b);
}

static int conv_sweep(void) {
    const conv_cfg cs[] = {
        {2, 3, 9, 9, 4, 3, 3, 1, 1, 1, 1, 1},   /* 3 channels: blocked layouts              */
        {2, 1, 11, 13, 5, 3, 3, 1, 1, 1, 1, 0}, /* one input channel: plain layouts         */
        {2, 4, 9, 7, 8, 3, 3, 2, 1, 1, 2, 1},   /* stride 2, groups 2                        */
        {2, 8, 8, 8, 8, 3, 3, 1, 1, 1, 8, 1},   /* depthwise                                 */
        {2, 4, 9, 9, 6, 3, 3, 1, 2, 2, 2, 0},   /* dilation 2, padding 2, groups             */
        {2, 6, 7, 7, 4, 1, 1, 1, 0, 1, 1, 1},   /* 1x1                                       */
        {2, 3, 9, 9, 5, 3, 3, 3, 1, 1, 1, 1},   /* stride 3 drops a remainder                */
        {1, 16, 8, 8, 16, 3, 3, 1, 1, 1, 1, 1}, /* channels a multiple of 16 (BF16 blocking) */
    };
    int fails = 0;
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        const conv_cfg *c = &cs[i];
        char label[200];
        test_conv_label(c, label, sizeof label);
        fails += compare(build_conv, c, label);
    }
    return fails;
}

TEST(conv2d_stride_padding_groups) {
    int fails = conv_sweep();
    CHECK_MSG(fails == 0, "%d failures", fails);
}

/* The same with every stride-1 backward data run as a forward convolution of the flipped BF16 weights
   (onednn/conv.c; test_onednn checks that the form is taken) */
TEST(conv2d_bwd_data_forward_form) {
    setenv("CT_ONEDNN_BWD_DATA", "fwd", 1);
    int fails = conv_sweep();
    unsetenv("CT_ONEDNN_BWD_DATA");
    CHECK_MSG(fails == 0, "%d failures", fails);
}

/* ---- whole models ------------------------------------------------------------------------------ */

typedef struct {
    int cnn;
    int recompute_every, accumulate_grads;
} model_cfg;

static ct_status build_model(ct_context *ctx, const model_cfg *mc, int native, int64_t batch, test_model *m) {
    setenv("CT_BF16_NATIVE", native ? "1" : "0", 1);
    ct_compile_opts o;
    ct_compile_opts_default(&o);
    o.precision = CT_PRECISION_BF16;
    o.recompute_every = mc->recompute_every;
    o.accumulate_grads = mc->accumulate_grads;
    ct_status s = mc->cnn ? test_model_build_opts(ctx, 4, (int64_t[]){batch, 1, 12, 12}, 2, (int64_t[]){8, 16}, 10,
                                                  0.0f, 0.0f, &o, m)
                          : test_model_build_opts(ctx, 2, (int64_t[]){batch, 50}, 2, (int64_t[]){40, 24}, 10, 0.0f,
                                                  0.0f, &o, m);
    unsetenv("CT_BF16_NATIVE");
    return s;
}

/* Trains n steps (SGD with momentum) from the same weights; losses[i] per step. */
static int train(ct_plan *p, int n, float *losses) {
    ct_context *ctx = ct_plan_context(p);
    ct_optim_opts oo;
    ct_optim_opts_default(&oo, CT_OPTIM_SGD);
    oo.lr = 0.05f;
    oo.momentum = 0.9f;
    ct_optimizer *opt;
    if (ct_optimizer_create(p, &oo, &opt) != CT_OK) return 1;
    int bad = 0;
    for (int i = 0; i < n && !bad; i++) {
        bad = step(p) || ct_plan_loss(p, &losses[i]) != CT_OK || ct_optimizer_step(opt) != CT_OK;
    }
    if (bad) fprintf(stderr, "    training failed: %s\n", ct_context_last_error(ctx));
    ct_optimizer_free(opt);
    return bad;
}

/* Two models of mc at batch 16 (native or with FP32 copies each) with the same weights (b's). */
static ct_status build_pair(ct_context *ctx, const model_cfg *mc, int native_a, int native_b, test_model *a,
                            test_model *b) {
    TRY(build_model(ctx, mc, native_a, 16, a));
    TRY(build_model(ctx, mc, native_b, 16, b));
    float *wa, *wb;
    size_t n;
    ct_plan_param_arena(a->plan, &wa, NULL, &n);
    ct_plan_param_arena(b->plan, &wb, NULL, NULL);
    memcpy(wa, wb, n * sizeof(float));
    return CT_OK;
}

static void model_native_vs_copies(int cnn) {
    ct_context *ctx = test_ctx(-1, 1);
    native_mode mode = expected_mode(ctx);
    model_cfg mc = {cnn, 0, 0};
    test_model a, c;
    CHECK_OK(ctx, build_pair(ctx, &mc, 1, 0, &a, &c));
    enum { STEPS = 6 };
    float la[STEPS], lc[STEPS];
    CHECK(train(a.plan, STEPS, la) == 0);
    CHECK(train(c.plan, STEPS, lc) == 0);
    double worst = 0;
    for (int i = 0; i < STEPS; i++) worst = fmax(worst, fabs((double)la[i] - lc[i]) / fabs((double)lc[i]));
    ct_plan_stats sa, sc;
    ct_plan_get_stats(a.plan, &sa);
    ct_plan_get_stats(c.plan, &sc);
    printf("    %s bf16, %d steps: loss %.6f -> %.6f native (%d nodes native, %d copied), %.6f -> %.6f copies "
           "(%d copied); worst relative difference %.3g\n",
           cnn ? "cnn" : "mlp", STEPS, (double)la[0], (double)la[STEPS - 1], sa.n_lowp_native, sa.n_lowp_copied,
           (double)lc[0], (double)lc[STEPS - 1], sc.n_lowp_copied, worst);
    CHECK(sc.n_lowp_native == 0);
    /* another summation order rounds some BF16 values the other way; training
     * amplifies that a little (7.5e-4 here for the CNN after 6 steps) */
    CHECK_MSG(worst <= (mode == MODE_NATIVE ? 5e-3 : 0.0), "losses differ by %.3g", worst);
    CHECK_MSG(lc[STEPS - 1] < lc[0], "the model did not train (%g -> %g)", (double)lc[0], (double)lc[STEPS - 1]);
    if (mode == MODE_NATIVE) {
        /* every matmul/linear/conv node, forward and backward, is native; the
         * CNN's first weight gradient (one input channel) reads BF16 in the
         * direct SIMD kernel (n_lowp_simd) */
        CHECK(sa.n_lowp_native >= (cnn ? 3 + 2 + 3 - 1 : 3 + 3 + 2));
        CHECK(sa.n_lowp_copied < sc.n_lowp_copied);
    } else {
        CHECK(sa.n_lowp_native == 0);
    }
    ct_plan_free(a.plan);
    ct_plan_free(c.plan);
    ct_context_free(ctx);
}

TEST(mlp_trains_close_to_copies) { model_native_vs_copies(0); }
TEST(cnn_trains_close_to_copies) { model_native_vs_copies(1); }

/* Forward loss of p at its current parameters (evaluation mode). */
static int eval_loss(ct_plan *p, float *loss) {
    return ct_plan_forward(p, 0) != CT_OK || ct_plan_loss(p, loss) != CT_OK;
}

/* The MLP trained with its BF16 weight copies packed once per update (CT_ONEDNN_PACK_WEIGHTS=1) and
 * without, from the same weights: the packed copies follow every change of the weights: the optimizer's
 * update (one packing per packed node and step), a write through the parameter arena; forwards without a
 * change pack nothing. A packed copy left stale would hold the first step's weights, and the losses
 * would part by what training moved them (checked to be far more than the tolerance). */
TEST(trained_with_weights_packed_once_like_plain) {
    ct_context *ctx = test_ctx(-1, 1);
    native_mode mode = expected_mode(ctx);
    model_cfg mc = {0, 0, 0};
    test_model a, b;
    CHECK_OK(ctx, build_pair(ctx, &mc, 1, 1, &a, &b));
    size_t n;
    enum { STEPS = 6 };
    float la[STEPS], lb[STEPS];
    setenv("CT_ONEDNN_PACK_WEIGHTS", "1", 1); /* read when a node creates its primitives: its first run */
    CHECK(train(a.plan, STEPS, la) == 0);
    setenv("CT_ONEDNN_PACK_WEIGHTS", "0", 1);
    CHECK(train(b.plan, STEPS, lb) == 0);
    unsetenv("CT_ONEDNN_PACK_WEIGHTS");
    int nodes, nodes_b;
    size_t bytes, bytes_b;
    uint64_t fills, fills_b;
    ct_plan_packed_weights(a.plan, &nodes, &bytes, &fills);
    ct_plan_packed_weights(b.plan, &nodes_b, &bytes_b, &fills_b);
    double worst = 0;
    for (int i = 0; i < STEPS; i++) worst = fmax(worst, fabs((double)la[i] - lb[i]) / fabs((double)lb[i]));
    double moved = fabs((double)lb[STEPS - 1] - lb[0]) / fabs((double)lb[0]);
    printf("    mlp bf16, %d steps: loss %.6f -> %.6f packed, %.6f -> %.6f plain; worst relative difference %.3g; "
           "%d nodes keep %zu bytes packed, %llu packings\n",
           STEPS, (double)la[0], (double)la[STEPS - 1], (double)lb[0], (double)lb[STEPS - 1], worst, nodes, bytes,
           (unsigned long long)fills);
    CHECK(nodes_b == 0 && bytes_b == 0 && fills_b == 0);
    CHECK_MSG(moved > 5e-3, "training moved the loss by %.3g only: the check below would not see stale weights",
              moved);
    /* oneDNN may run the blocked B on another kernel (another summation order): BF16 outputs one ulp apart */
    CHECK_MSG(worst <= 1e-3, "losses differ by %.3g", worst);
    if (mode == MODE_NATIVE) {
        /* the forward linears (W^T) and the data gradients (W) read weight copies: fc2 and fc3 (fc1's input
           gradient is not needed) */
        CHECK_MSG(nodes >= 4 && bytes > 0, "%d nodes packed", nodes);
        CHECK_MSG(fills == (uint64_t)nodes * STEPS, "%llu packings in %d steps of %d nodes: once per update expected",
                  (unsigned long long)fills, STEPS, nodes);
        /* the first forward after the last update packs the forward's weights; more forwards pack nothing */
        float e1, e2;
        int nodes2;
        uint64_t fills1, fills2;
        CHECK(eval_loss(a.plan, &e1) == 0);
        ct_plan_packed_weights(a.plan, &nodes2, &bytes, &fills1);
        CHECK(eval_loss(a.plan, &e2) == 0 && eval_loss(a.plan, &e2) == 0);
        ct_plan_packed_weights(a.plan, &nodes2, &bytes, &fills2);
        CHECK_MSG(fills1 > fills && fills2 == fills1 && e1 == e2,
                  "packings: %llu after training, %llu after an evaluation, %llu after two more; losses %.9g %.9g",
                  (unsigned long long)fills, (unsigned long long)fills1, (unsigned long long)fills2, (double)e1,
                  (double)e2);
        fills = fills2;
        /* a write through the parameter arena (a writable hand-out: the copies go stale) is seen */
        float *pa, *pb;
        ct_plan_param_arena(a.plan, &pa, NULL, &n);
        ct_plan_param_arena(b.plan, &pb, NULL, NULL);
        for (size_t i = 0; i < n; i++) pa[i] = pb[i] = pb[i] * -0.5f;
        float fa, fb;
        CHECK(eval_loss(a.plan, &fa) == 0 && eval_loss(b.plan, &fb) == 0);
        ct_plan_packed_weights(a.plan, &nodes2, &bytes, &fills2);
        CHECK_MSG(fabs((double)fa - fb) <= 1e-3 * fabs((double)fb) && fa != e1,
                  "after the write: %.9g packed vs %.9g plain (%.9g before)", (double)fa, (double)fb, (double)e1);
        CHECK_MSG(fills2 > fills, "the write packed nothing again (%llu packings)", (unsigned long long)fills2);
    } else {
        CHECK_MSG(nodes == 0 && worst == 0.0, "no native BF16 GEMM here, yet %d nodes packed (difference %.3g)", nodes,
                  worst);
    }
    ct_plan_free(a.plan);
    ct_plan_free(b.plan);
    ct_context_free(ctx);
}

/* CT_ONEDNN_PACK_WEIGHTS other than 0 or 1: the step fails with CT_E_CONFIG naming the variable (read where a
 * oneDNN matmul / linear creates its primitives), nothing crashes; unset, the same plan runs. */
TEST(pack_weights_bad_value_is_a_config_error) {
    ct_context *ctx = test_ctx(-1, 1);
    expected_mode(ctx);
    model_cfg mc = {0, 0, 0};
    test_model a;
    CHECK_OK(ctx, build_model(ctx, &mc, 1, 16, &a));
    setenv("CT_ONEDNN_PACK_WEIGHTS", "yes", 1);
    ct_status s = ct_plan_forward(a.plan, 1);
    const char *msg = ct_context_last_error(ctx);
    unsetenv("CT_ONEDNN_PACK_WEIGHTS");
    if (ct_context_use_onednn(ctx)) {
        CHECK_MSG(s == CT_E_CONFIG && strstr(msg, "CT_ONEDNN_PACK_WEIGHTS='yes' is not 0 or 1"), "%s: %s",
                  ct_status_name(s), msg);
        printf("    %s\n", msg);
        ct_context_clear_error(ctx);
    } else {
        CHECK(s == CT_OK); /* no oneDNN node reads it */
    }
    CHECK(step(a.plan) == 0);
    ct_plan_free(a.plan);
    ct_context_free(ctx);
}

/* A native plan with recompute, or with gradient accumulation (one
 * micro-batch), gives the plain native plan's loss and gradients bit for
 * bit: the same kernels on the same values. */
TEST(native_with_recompute_and_accumulation_bit_identical) {
    ct_context *ctx = test_ctx(-1, 1);
    expected_mode(ctx);
    for (int cnn = 0; cnn < 2; cnn++) {
        const model_cfg base = {cnn, 0, 0}, rc = {cnn, 1, 0}, acc = {cnn, 0, 1};
        const model_cfg *other[2] = {&rc, &acc};
        test_model a;
        CHECK_OK(ctx, build_model(ctx, &base, 1, 8, &a));
        CHECK(step(a.plan) == 0);
        for (int k = 0; k < 2; k++) {
            test_model b;
            CHECK_OK(ctx, build_model(ctx, other[k], 1, 8, &b));
            float *wa, *wb, *ga, *gb;
            size_t n;
            ct_plan_param_arena(a.plan, &wa, &ga, &n);
            ct_plan_param_arena(b.plan, &wb, &gb, NULL);
            memcpy(wb, wa, n * sizeof(float));
            CHECK_OK(ctx, ct_plan_zero_grads(b.plan));
            CHECK(step(b.plan) == 0);
            float la, lb;
            CHECK_OK(ctx, ct_plan_loss(a.plan, &la));
            CHECK_OK(ctx, ct_plan_loss(b.plan, &lb));
            CHECK_MSG(la == lb && !memcmp(ga, gb, n * sizeof(float)), "%s with %s: loss %.9g vs %.9g or gradients differ",
                      cnn ? "cnn" : "mlp", k ? "accumulate_grads" : "recompute_every 1", (double)lb, (double)la);
            ct_plan_free(b.plan);
        }
        ct_plan_free(a.plan);
    }
    ct_context_free(ctx);
}

/* The activation arena of the Fashion-MNIST recipe's CNN (batch 128,
 * 1x28x28, channels 32, 64), compiled only: FP32, BF16 with FP32 copies,
 * BF16 native. The native plan keeps no FP32 copies of GEMM/conv I/O. */
TEST(cnn_activation_arena) {
    ct_context *ctx = test_ctx(-1, 1);
    native_mode mode = expected_mode(ctx);
    static const int64_t xs[4] = {128, 1, 28, 28}, ch[2] = {32, 64};
    size_t act[3], cast[3];
    int nat[3];
    for (int v = 0; v < 3; v++) {
        ct_compile_opts o;
        ct_compile_opts_default(&o);
        o.plan_only = 1;
        o.precision = v ? CT_PRECISION_BF16 : CT_PRECISION_FP32;
        setenv("CT_BF16_NATIVE", v == 2 ? "1" : "0", 1);
        ct_plan *p;
        ct_graph *g;
        ct_node x, y, logits, loss;
        CHECK_OK(ctx, ct_graph_create(ctx, &g));
        CHECK_OK(ctx, ct_input(g, "x", CT_F32, 4, xs, &x));
        CHECK_OK(ctx, ct_input(g, "y", CT_I32, 1, xs, &y));
        CHECK_OK(ctx, ct_model_cnn(g, x, 2, ch, 10, &logits));
        CHECK_OK(ctx, ct_cross_entropy(g, logits, y, 0.0f, -100, &loss));
        CHECK_OK(ctx, ct_compile(g, loss, 1, &logits, &o, &p));
        ct_graph_free(g);
        ct_plan_stats st;
        ct_plan_get_stats(p, &st);
        act[v] = st.activation_bytes;
        cast[v] = st.cast_bytes;
        nat[v] = st.n_lowp_native;
        ct_plan_free(p);
    }
    unsetenv("CT_BF16_NATIVE");
    printf("    cnn b128 activation arena: fp32 %.2f MB, bf16 with FP32 copies %.2f MB (largest copy %.2f MB), "
           "bf16 native %.2f MB (largest copy %.2f MB, %d native nodes)\n",
           act[0] / 1e6, act[1] / 1e6, cast[1] / 1e6, act[2] / 1e6, cast[2] / 1e6, nat[2]);
    /* FP32 copies of conv/GEMM I/O can make BF16 cost more than FP32 (the
     * planner frees FP32's saved outputs early too), but never more than
     * the copies themselves */
    CHECK(act[1] <= act[0] + cast[1]);
    if (mode == MODE_COPIES) { /* no oneDNN BF16 node; the SIMD kernels may still read BF16 (n_lowp_simd) */
        CHECK(nat[2] == 0 && act[2] <= act[1]);
    } else {
        CHECK(nat[2] > 0);
        CHECK(act[2] <= act[1]);
        CHECK(cast[2] == 0);
        CHECK_MSG(act[2] <= 0.55 * act[0], "native BF16 arena %.1f%% of FP32's (issue 12: <= 55%%)",
                  100.0 * act[2] / act[0]);
    }
    ct_context_free(ctx);
}

/* The override is read by ct_compile and by ct_context_lowp_native: a bad
 * value is an error naming it; FP16 and FP32 are never native. */
TEST(override_and_queries) {
    ct_context *ctx = test_ctx(-1, 1);
    native_mode mode = expected_mode(ctx);
    int native = -1;
    char how[256];
    setenv("CT_BF16_NATIVE", "yes", 1);
    CHECK(ct_context_lowp_native(ctx, CT_BF16, &native, how, sizeof how) == CT_E_CONFIG);
    CHECK(strstr(ct_context_last_error(ctx), "CT_BF16_NATIVE='yes'") != NULL);
    test_model m;
    ct_compile_opts o;
    ct_compile_opts_default(&o);
    o.precision = CT_PRECISION_BF16;
    CHECK(test_model_build_opts(ctx, 2, (int64_t[]){4, 6}, 1, (int64_t[]){5}, 3, 0.0f, 0.0f, &o, &m) == CT_E_CONFIG);
    CHECK(m.plan == NULL);
    o.precision = CT_PRECISION_FP32; /* FP32 plans do not ask */
    CHECK_OK(ctx, test_model_build_opts(ctx, 2, (int64_t[]){4, 6}, 1, (int64_t[]){5}, 3, 0.0f, 0.0f, &o, &m));
    ct_plan_free(m.plan);
    /* FP16: FP32 copies whatever the override says */
    setenv("CT_BF16_NATIVE", "1", 1);
    CHECK_OK(ctx, ct_context_lowp_native(ctx, CT_F16, &native, how, sizeof how));
    CHECK(native == 0 && strstr(how, "FP16") != NULL);
    o.precision = CT_PRECISION_FP16;
    CHECK_OK(ctx, test_model_build_opts(ctx, 2, (int64_t[]){4, 6}, 1, (int64_t[]){5}, 3, 0.0f, 0.0f, &o, &m));
    ct_plan_stats st;
    ct_plan_get_stats(m.plan, &st);
    CHECK(st.n_lowp_native == 0 && st.n_lowp_copied > 0);
    ct_plan_free(m.plan);
    /* BF16 with the override: the line names oneDNN's ISA */
    CHECK_OK(ctx, ct_context_lowp_native(ctx, CT_BF16, &native, how, sizeof how));
    CHECK(native == (mode != MODE_COPIES) && strstr(how, "oneDNN ISA") != NULL);
    setenv("CT_BF16_NATIVE", "0", 1);
    CHECK_OK(ctx, ct_context_lowp_native(ctx, CT_BF16, &native, how, sizeof how));
    CHECK(native == 0);
    unsetenv("CT_BF16_NATIVE");
    CHECK(ct_context_lowp_native(ctx, CT_F32, &native, NULL, 0) == CT_E_INVALID_ARG);
    /* without the override: native where oneDNN has AMX, or AVX512-BF16 whose dot products beat the FP32 FMAs */
    CHECK_OK(ctx, ct_context_lowp_native(ctx, CT_BF16, &native, how, sizeof how));
    unsigned isa = (unsigned)dnnl_get_effective_cpu_isa(), want = (unsigned)dnnl_cpu_isa_avx512_core_bf16,
             amx = (unsigned)dnnl_cpu_isa_avx512_core_amx;
    double dot = ct_cpu_bf16_dot_ratio();
    int fast = (isa & amx) == amx || ((isa & want) == want && dot > 1.0);
    CHECK_MSG(native == (fast && mode != MODE_COPIES), "native %d; oneDNN ISA 0x%x, dot / FMA %.2f", native, isa, dot);
    CHECK(!ct_context_cpu(ctx)->avx512_bf16 || (dot > 0.1 && dot < 8)); /* measured: a plausible rate */
    if ((isa & want) == want && (isa & amx) != amx && mode != MODE_COPIES) /* the line gives the measured rate */
        CHECK_MSG(strstr(how, "dot products give") != NULL, "%s", how);
    printf("    default here: %s\n", how);
    ct_context_free(ctx);
}

TEST_MAIN(T(matmul_2d_all_transposes), T(matmul_batched), T(linear_bias_and_3d), T(matmul_and_linear_with_weights_packed_once), T(matmul_and_linear_on_amx_tiles), T(attention_after_linear), T(conv2d_stride_padding_groups), T(conv2d_bwd_data_forward_form),
          T(mlp_trains_close_to_copies), T(cnn_trains_close_to_copies), T(trained_with_weights_packed_once_like_plain), T(pack_weights_bad_value_is_a_config_error),
          T(native_with_recompute_and_accumulation_bit_identical), T(cnn_activation_arena), T(override_and_queries))
