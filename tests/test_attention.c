/* tests/test_attention.c - the fused multi-head attention op (ct_attention):
 *  1. its backward against 4-point finite differences (reference kernels,
 *     loss = sum(out * R)), causal and with padding;
 *  2. the SIMD kernels against the reference: random shapes (T not a multiple
 *     of 8, Dh 8..128), causal on/off, a padding mask where one batch element
 *     has every key padded (its output and gradients must be exactly 0);
 *  3. the same attention composed from existing ops (slice, reshape,
 *     transpose, matmul, scale, mask add, softmax, matmul);
 *  4. bad inputs give clear errors. */
#include "test.h"

#define TRY(expr)                         \
    do {                                  \
        if ((st = (expr)) != CT_OK)       \
            goto fail;                    \
    } while (0)

typedef struct {
    int B, T, H, Dh, causal, mask;
} acase;

typedef struct {
    ct_plan *plan;
    ct_node qkv, kv, cm, out, loss, r;
} att_h;

/* key_valid: batch 0 has its last third padded, batch 1 (if any) every key */
static int32_t kv_value(const acase *c, int b, int t) {
    if (b == 1) return 0;
    if (b == 0) return t < c->T - c->T / 3;
    return 1 + (t % 3);
}

/* (B, T, D) -> (B, H, T, Dh) */
static ct_status heads(ct_graph *g, ct_node x, const acase *c, ct_node *out) {
    ct_node r;
    ct_status s = ct_reshape(g, x, 4, (int64_t[]){c->B, c->T, c->H, c->Dh}, &r);
    return s != CT_OK ? s : ct_transpose(g, r, (int[]){0, 2, 1, 3}, out);
}

/* The attention of case c, fused (ct_attention) or composed from existing
 * ops (composed: the padding mask must leave every query a key). */
static ct_status att_build(ct_context *ctx, const acase *c, int composed, att_h *h) {
    ct_graph *g = NULL;
    ct_status st = CT_OK;
    int64_t D = (int64_t)c->H * c->Dh;
    memset(h, 0, sizeof *h);
    h->kv = h->cm = CT_NONE;
    ct_node m;
    TRY(ct_graph_create(ctx, &g));
    TRY(ct_param(g, "qkv", 3, (int64_t[]){c->B, c->T, 3 * D}, CT_INIT_KAIMING_UNIFORM, 1, &h->qkv));
    if (c->mask) TRY(ct_input(g, "key_valid", CT_I32, 2, (int64_t[]){c->B, c->T}, &h->kv));
    if (!composed) {
        TRY(ct_attention(g, h->qkv, c->H, c->causal, h->kv, &h->out));
    } else {
        ct_node q, k, v, qh, kh, vh, s, p, y, yt;
        TRY(ct_slice(g, h->qkv, 2, 0, D, &q));
        TRY(ct_slice(g, h->qkv, 2, D, 2 * D, &k));
        TRY(ct_slice(g, h->qkv, 2, 2 * D, 3 * D, &v));
        TRY(heads(g, q, c, &qh));
        TRY(heads(g, k, c, &kh));
        TRY(heads(g, v, c, &vh));
        TRY(ct_matmul(g, qh, kh, 0, 1, &s));
        TRY(ct_scale(g, s, 1.0f / sqrtf((float)c->Dh), &s));
        /* additive mask (B, 1, T, T): -1e9 where masked */
        TRY(ct_input(g, "mask", CT_F32, 4, (int64_t[]){c->B, 1, c->T, c->T}, &h->cm));
        TRY(ct_add(g, s, h->cm, &s));
        TRY(ct_softmax(g, s, &p));
        TRY(ct_matmul(g, p, vh, 0, 0, &y));
        TRY(ct_transpose(g, y, (int[]){0, 2, 1, 3}, &yt));
        TRY(ct_reshape(g, yt, 3, (int64_t[]){c->B, c->T, D}, &h->out));
    }
    TRY(ct_input(g, "R", CT_F32, 3, (int64_t[]){c->B, c->T, D}, &h->r));
    TRY(ct_mul(g, h->out, h->r, &m));
    TRY(ct_sum(g, m, 7u, 0, &h->loss));
    TRY(ct_compile(g, h->loss, 1, &h->out, NULL, &h->plan));
    ct_graph_free(g);
    g = NULL;
    ct_tensor t;
    TRY(ct_plan_tensor(h->plan, h->r, &t));
    test_fill_uniform(t.data, (size_t)ct_tensor_numel(&t), 9, -1, 1);
    TRY(ct_plan_param_info(h->plan, 0, NULL, &t, NULL));
    test_fill_uniform(t.data, (size_t)ct_tensor_numel(&t), 5, -1.5f, 1.5f);
    if (h->kv != CT_NONE) {
        TRY(ct_plan_tensor(h->plan, h->kv, &t));
        for (int b = 0; b < c->B; b++)
            for (int j = 0; j < c->T; j++) ((int32_t *)t.data)[b * c->T + j] = kv_value(c, b, j);
    }
    if (h->cm != CT_NONE) {
        TRY(ct_plan_tensor(h->plan, h->cm, &t));
        float *x = t.data;
        for (int b = 0; b < c->B; b++)
            for (int i = 0; i < c->T; i++)
                for (int j = 0; j < c->T; j++)
                    x[((int64_t)b * c->T + i) * c->T + j] =
                        (c->causal && j > i) || (c->mask && !kv_value(c, b, j)) ? -1e9f : 0.0f;
    }
    return CT_OK;
fail:
    ct_graph_free(g);
    ct_plan_free(h->plan);
    h->plan = NULL;
    return st;
}

static ct_status run(att_h *h) {
    ct_status s = ct_plan_forward(h->plan, 1);
    return s != CT_OK ? s : ct_plan_backward(h->plan);
}

static double loss_at(att_h *h) {
    float l;
    ct_plan_forward(h->plan, 1);
    ct_plan_loss(h->plan, &l);
    return l;
}

/* ---- 1. finite differences ---------------------------------------------------------------------- */

TEST(backward_matches_finite_differences) {
    static const acase cases[] = {{2, 5, 2, 4, 1, 0}, {3, 6, 2, 3, 0, 1}, {2, 7, 1, 5, 1, 1}};
    double worst_all = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const acase *c = &cases[ci];
        ct_context *ctx = test_ctx(CT_ISA_REF, 0);
        att_h h;
        CHECK_OK(ctx, att_build(ctx, c, 0, &h));
        CHECK_OK(ctx, run(&h));
        ct_tensor val, grad;
        ct_plan_param_info(h.plan, 0, NULL, &val, &grad);
        int64_t n = ct_tensor_numel(&val);
        float *g = malloc((size_t)n * sizeof *g);
        memcpy(g, grad.data, (size_t)n * sizeof *g);
        double worst = 0;
        for (int64_t i = 0; i < n; i += 1 + n / 60) {
            float *x = (float *)val.data + i, x0 = *x;
            const float hs = 1e-2f, offs[4] = {2, 1, -1, -2};
            double f[4];
            for (int k = 0; k < 4; k++) {
                *x = x0 + offs[k] * hs;
                f[k] = loss_at(&h);
            }
            *x = x0;
            double fd = (-f[0] + 8 * f[1] - 8 * f[2] + f[3]) / (12.0 * hs);
            double err = fabs(fd - g[i]) / fmax(fabs(fd), 0.05);
            if (err > worst) worst = err;
            if (err > 2e-2) fprintf(stderr, "  case %zu: d/d qkv[%lld]: analytic %.6g, fd %.6g\n", ci, (long long)i, (double)g[i], fd);
        }
        printf("    fd case %zu (B %d T %d H %d Dh %d causal %d mask %d): worst rel err %.2e\n", ci, c->B, c->T, c->H,
               c->Dh, c->causal, c->mask, worst);
        if (worst > worst_all) worst_all = worst;
        free(g);
        ct_plan_free(h.plan);
        ct_context_free(ctx);
        CHECK_MSG(worst <= 2e-2, "finite differences off by %.3g", worst);
    }
    printf("    finite differences: worst %.2e\n", worst_all);
}

/* ---- 2. SIMD against the reference ------------------------------------------------------------------ */

static double rel(const float *a, const float *b, int64_t n) {
    double md = 0, mb = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > md || d != d) md = d != d ? INFINITY : d;
        if (fabs(b[i]) > mb) mb = fabs(b[i]);
    }
    return md / fmax(mb, 1e-6);
}

/* compares plan a (tested) with plan b (trusted): output and d_qkv */
static double compare_plans(att_h *a, att_h *b) {
    ct_tensor oa, ob, ga, gb;
    ct_plan_tensor(a->plan, a->out, &oa);
    ct_plan_tensor(b->plan, b->out, &ob);
    ct_plan_param_info(a->plan, 0, NULL, NULL, &ga);
    ct_plan_param_info(b->plan, 0, NULL, NULL, &gb);
    return fmax(rel(oa.data, ob.data, ct_tensor_numel(&ob)), rel(ga.data, gb.data, ct_tensor_numel(&gb)));
}

static const acase k_rand[] = {
    {2, 13, 3, 8, 1, 0},  {3, 20, 2, 64, 0, 1}, {1, 8, 1, 16, 1, 0},  {2, 37, 4, 24, 0, 0},
    {3, 37, 4, 24, 1, 1}, {2, 1, 2, 8, 1, 1},   {4, 70, 2, 40, 1, 0}, {2, 17, 3, 12, 0, 1},
    {2, 33, 2, 9, 1, 1},  {1, 64, 1, 32, 0, 0},
    /* heads wider than the AVX-512 micro-kernel's 64 columns (two column blocks, the second ragged), T past
     * several row blocks and key panels */
    {2, 77, 2, 80, 1, 1}, {1, 131, 1, 128, 0, 0}, {2, 50, 1, 72, 0, 1},
};

static void fast_vs_ref(int isa, int use_onednn, const char *label) {
    ct_context *probe = test_ctx(isa, use_onednn);
    int ok = ct_context_isa(probe) >= (ct_isa)isa;
    ct_context_free(probe);
    if (!ok) {
        printf("    skipped %s: the CPU or CT_ISA does not allow it\n", label);
        return;
    }
    double worst_all = 0;
    for (size_t ci = 0; ci < sizeof k_rand / sizeof k_rand[0]; ci++) {
        const acase *c = &k_rand[ci];
        ct_context *cr = test_ctx(CT_ISA_REF, 0), *cf = test_ctx(isa, use_onednn);
        att_h hr, hf;
        CHECK_OK(cr, att_build(cr, c, 0, &hr));
        CHECK_OK(cf, att_build(cf, c, 0, &hf));
        CHECK_OK(cr, run(&hr));
        CHECK_OK(cf, run(&hf));
        double e = compare_plans(&hf, &hr);
        const char *kn = ct_plan_kernel_name(hf.plan, hf.out);
        printf("    %s B %d T %2d H %d Dh %2d causal %d mask %d: kernel %s, rel err %.2e\n", label, c->B, c->T, c->H,
               c->Dh, c->causal, c->mask, kn, e);
        if (e > worst_all) worst_all = e;
        CHECK_MSG(e <= 1e-5, "%s differs from the reference by %.3g", label, e);
        CHECK_MSG(strcmp(kn, "ref") != 0, "%s: the attention ran the reference kernel", label);
        if (c->mask && c->B > 1) { /* batch 1: every key padded -> output and d_qkv exactly 0 */
            ct_tensor o, g;
            ct_plan_tensor(hf.plan, hf.out, &o);
            ct_plan_param_info(hf.plan, 0, NULL, NULL, &g);
            int64_t D = (int64_t)c->H * c->Dh, T = c->T;
            for (int64_t i = 0; i < T * D; i++) CHECK(((float *)o.data)[T * D + i] == 0.0f);
            for (int64_t i = 0; i < T * 3 * D; i++) CHECK(((float *)g.data)[T * 3 * D + i] == 0.0f);
        }
        ct_plan_free(hr.plan);
        ct_plan_free(hf.plan);
        ct_context_free(cr);
        ct_context_free(cf);
    }
    printf("    %s vs reference: worst %.2e\n", label, worst_all);
}

TEST(avx2_matches_reference) { fast_vs_ref(CT_ISA_AVX2, 0, "avx2"); }
TEST(avx512_matches_reference) { fast_vs_ref(CT_ISA_AVX512, 0, "avx512"); }

/* the same result for 1 and several threads (one (b, h) per task) */
TEST(thread_count_invariant) {
    const acase c = {3, 29, 4, 16, 1, 1};
    ct_context_opts o;
    ct_context_opts_default(&o);
    o.seed = 1234;
    o.num_threads = 1;
    ct_context *c1;
    CHECK(ct_context_create(&o, &c1) == CT_OK);
    ct_context *cn = test_ctx(-1, 0);
    att_h h1, hn;
    CHECK_OK(c1, att_build(c1, &c, 0, &h1));
    CHECK_OK(cn, att_build(cn, &c, 0, &hn));
    CHECK_OK(c1, run(&h1));
    CHECK_OK(cn, run(&hn));
    double e = compare_plans(&hn, &h1);
    printf("    threads %d vs 1: max rel diff %.2e\n", ct_context_num_threads(cn), e);
    CHECK(e == 0.0);
    ct_plan_free(h1.plan);
    ct_plan_free(hn.plan);
    ct_context_free(c1);
    ct_context_free(cn);
}

/* not a check: forward + backward time of the reference and the SIMD kernels, one thread */
TEST(timing) {
    const acase c = {1, 256, 6, 64, 1, 0};
    const int isas[2] = {CT_ISA_REF, CT_ISA_AVX2};
    for (int k = 0; k < 2; k++) {
        ct_context_opts o;
        ct_context_opts_default(&o);
        o.isa = isas[k];
        o.use_onednn = 0;
        o.num_threads = 1;
        ct_context *ctx;
        CHECK(ct_context_create(&o, &ctx) == CT_OK);
        if (ct_context_isa(ctx) != (ct_isa)isas[k]) {
            ct_context_free(ctx);
            continue;
        }
        att_h h;
        CHECK_OK(ctx, att_build(ctx, &c, 0, &h));
        CHECK_OK(ctx, run(&h)); /* warm-up */
        double t0 = ct_profiler_now_us() * 1e-3;
        int reps = k ? 10 : 2;
        for (int r = 0; r < reps; r++) CHECK_OK(ctx, run(&h));
        double ms = (ct_profiler_now_us() * 1e-3 - t0) / reps;
        /* causal: (4 + 10) / 2 * B T^2 D flops */
        printf("    B 1 T 256 H 6 Dh 64 causal, %s, 1 thread: %.1f ms per forward + backward (%.1f GFLOP/s)\n",
               ct_plan_kernel_name(h.plan, h.out), ms, 7.0 * 256 * 256 * 384 / (ms * 1e6));
        ct_plan_free(h.plan);
        ct_context_free(ctx);
    }
}

/* ---- 3. against the composed ops ---------------------------------------------------------------- */

TEST(matches_composed_ops) {
    static const acase cases[] = {{2, 11, 3, 8, 1, 0}, {2, 16, 2, 12, 1, 0}, {3, 9, 2, 8, 0, 1}};
    const int isas[2] = {CT_ISA_REF, -1};
    double worst = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        acase c = cases[ci];
        for (int k = 0; k < 2; k++) {
            ct_context *ctx = test_ctx(isas[k], isas[k] < 0);
            att_h hf, hc;
            CHECK_OK(ctx, att_build(ctx, &c, 0, &hf));
            CHECK_OK(ctx, att_build(ctx, &c, 1, &hc));
            if (c.mask) { /* the composed softmax cannot express "no key at all": batch 1 gets its keys back */
                ct_tensor t1, t2;
                ct_plan_tensor(hf.plan, hf.kv, &t1);
                ct_plan_tensor(hc.plan, hc.cm, &t2);
                for (int j = 0; j < c.T; j++) ((int32_t *)t1.data)[c.T + j] = 1;
                for (int i = 0; i < c.T; i++)
                    for (int j = 0; j < c.T; j++) ((float *)t2.data)[((int64_t)c.T + i) * c.T + j] = 0.0f;
            }
            CHECK_OK(ctx, run(&hf));
            CHECK_OK(ctx, run(&hc));
            double e = compare_plans(&hf, &hc);
            printf("    composed B %d T %2d H %d Dh %2d causal %d mask %d (%s): rel err %.2e\n", c.B, c.T, c.H, c.Dh,
                   c.causal, c.mask, isas[k] < 0 ? "best" : "ref", e);
            if (e > worst) worst = e;
            CHECK_MSG(e <= 1e-5, "fused attention differs from the composed ops by %.3g", e);
            ct_plan_free(hf.plan);
            ct_plan_free(hc.plan);
            ct_context_free(ctx);
        }
    }
    printf("    fused vs composed: worst %.2e\n", worst);
}

/* ---- 4. bad inputs ------------------------------------------------------------------------------- */

static void expect_error(ct_context *ctx, ct_status s, ct_status want, const char *needle) {
    const char *msg = ct_context_last_error(ctx);
    printf("    %s: %s\n", ct_status_name(s), msg);
    if (s != want || !strstr(msg, needle)) {
        fprintf(stderr, "  expected %s with '%s', got %s: %s\n", ct_status_name(want), needle, ct_status_name(s), msg);
        ct_test_failed_checks++;
    }
}

TEST(bad_inputs) {
    ct_context *ctx = test_ctx(CT_ISA_REF, 0);
    ct_graph *g;
    CHECK_OK(ctx, ct_graph_create(ctx, &g));
    ct_node x, y, kv_f, kv_s, kv_ok, out;
    CHECK_OK(ctx, ct_input(g, "qkv", CT_F32, 3, (int64_t[]){2, 5, 24}, &x));
    CHECK_OK(ctx, ct_input(g, "qkv_bad", CT_F32, 3, (int64_t[]){2, 5, 25}, &y));
    CHECK_OK(ctx, ct_input(g, "kv_f32", CT_F32, 2, (int64_t[]){2, 5}, &kv_f));
    CHECK_OK(ctx, ct_input(g, "kv_shape", CT_I32, 2, (int64_t[]){2, 4}, &kv_s));
    CHECK_OK(ctx, ct_input(g, "kv", CT_I32, 2, (int64_t[]){2, 5}, &kv_ok));
    expect_error(ctx, ct_attention(g, y, 1, 1, CT_NONE, &out), CT_E_SHAPE, "divisible by 3");
    expect_error(ctx, ct_attention(g, x, 3, 1, CT_NONE, &out), CT_E_SHAPE, "not divisible by n_head 3");
    expect_error(ctx, ct_attention(g, x, 0, 1, CT_NONE, &out), CT_E_INVALID_ARG, "n_head 0 must be >= 1");
    expect_error(ctx, ct_attention(g, x, 2, 0, kv_f, &out), CT_E_DTYPE, "must be i32 (B, T)");
    expect_error(ctx, ct_attention(g, x, 2, 0, kv_s, &out), CT_E_SHAPE, "must be i32 (B, T) = (2, 5)");
    expect_error(ctx, ct_attention(g, kv_ok, 2, 0, CT_NONE, &out), CT_E_DTYPE, "needs f32");
    expect_error(ctx, ct_attention(g, x, 2, 0, 999, &out), CT_E_INVALID_ARG, "does not exist");
    CHECK_OK(ctx, ct_attention(g, x, 2, 1, kv_ok, &out));
    int nd;
    int64_t s[CT_MAX_DIMS];
    CHECK_OK(ctx, ct_node_shape(g, out, &nd, s));
    CHECK(nd == 3 && s[0] == 2 && s[1] == 5 && s[2] == 8);
    ct_graph_free(g);
    ct_context_free(ctx);
}

TEST_MAIN(T(backward_matches_finite_differences), T(avx2_matches_reference), T(avx512_matches_reference),
          T(thread_count_invariant), T(timing), T(matches_composed_ops), T(bad_inputs))
