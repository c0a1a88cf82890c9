/* tests/test_amp.c - mixed precision: the autocast pass, keep_fp32, the
 * executor's low-precision I/O, the pure modes and the FP16 loss scaler
 * end to end.
 *
 * Low-precision results are checked two ways: against an emulation written
 * here (round the inputs to BF16, accumulate in FP32, round the output),
 * which they must match to one BF16 ulp, and against the FP32 plan on the
 * same weights and batch, which they must approach (2e-2) without equalling
 * (a "BF16" run that is secretly FP32 fails). */
#include <math.h>
#include <unistd.h>

#include "test.h"
#include "ctrain/amp.h"
#include "ctrain/optim.h"
#include "ctrain/profile.h"

static const int64_t k_mlp_x[2] = {32, 64}, k_mlp_h[2] = {48, 40};
static const int64_t k_cnn_x[4] = {8, 3, 12, 12}, k_cnn_c[2] = {6, 8};

static ct_compile_opts prec_opts(ct_precision prec, const char *keep) {
    ct_compile_opts o;
    ct_compile_opts_default(&o);
    o.precision = prec;
    o.keep_fp32 = keep;
    return o;
}

static ct_status build(ct_context *ctx, int cnn, ct_precision prec, const char *keep, test_model *m) {
    ct_compile_opts o = prec_opts(prec, keep);
    return cnn ? test_model_build_opts(ctx, 4, k_cnn_x, 2, k_cnn_c, 5, 0.0f, 0.0f, &o, m)
               : test_model_build_opts(ctx, 2, k_mlp_x, 2, k_mlp_h, 10, 0.0f, 0.0f, &o, m);
}

static void step_fb(test_model *m) {
    ct_context *ctx = ct_plan_context(m->plan);
    CHECK_OK(ctx, ct_plan_forward(m->plan, 1));
    CHECK_OK(ctx, ct_plan_backward(m->plan));
}

/* Casts are inserted once per value: the MLP in BF16 has x, three weights,
 * three biases (to BF16) and the logits (to FP32 for the loss) = 8. */
static void autocast_inserts_each_cast_once(void) {
    ct_context *ctx = test_ctx(-1, 1);
    test_model m;
    CHECK_OK(ctx, build(ctx, 0, CT_PRECISION_BF16, NULL, &m));
    CHECK(ct_plan_num_casts(m.plan) == 8);
    CHECK(ct_plan_node_dtype(m.plan, m.logits) == CT_BF16);
    CHECK(ct_plan_node_dtype(m.plan, m.loss) == CT_F32);
    CHECK(ct_plan_node_dtype(m.plan, m.x) == CT_F32); /* the user writes FP32 inputs */
    step_fb(&m);
    ct_tensor gr;
    CHECK_OK(ctx, ct_plan_param_info(m.plan, 0, NULL, NULL, &gr));
    CHECK(gr.dtype == CT_F32); /* master-weight gradients */
    ct_plan_stats st;
    ct_plan_get_stats(m.plan, &st);
    /* FP32 copies for a node are planned only where it cannot read BF16:
     * oneDNN's linear without BF16 hardware; with it every node reads BF16 */
    int hw = 0;
    CHECK_OK(ctx, ct_context_lowp_native(ctx, CT_BF16, &hw, NULL, 0));
    if (hw && ct_context_isa(ctx) >= CT_ISA_AVX2) CHECK_MSG(st.cast_bytes == 0, "%zu bytes of FP32 copies", st.cast_bytes);
    else CHECK(st.cast_bytes > 0);
    ct_plan_free(m.plan);
    /* FP32 inserts nothing */
    CHECK_OK(ctx, build(ctx, 0, CT_PRECISION_FP32, NULL, &m));
    CHECK(ct_plan_num_casts(m.plan) == 0);
    ct_plan_free(m.plan);
    ct_context_free(ctx);
}

static float bf16r(float x) { return ct_bf16_to_f32(ct_f32_to_bf16(x)); }
static float f16r(float x) { return ct_f16_to_f32(ct_f32_to_f16(x)); }

/* One linear layer: y = round(round(x) @ round(W)^T + round(b)) in FP32
 * accumulation, to one ulp of the low dtype. */
static void linear_matches_emulation(void) {
    for (int f16 = 0; f16 < 2; f16++)
        for (int onednn = 0; onednn < 2; onednn++) {
            ct_context *ctx = test_ctx(onednn ? -1 : CT_ISA_REF, onednn);
            ct_graph *g;
            ct_node x, w, b, y, s;
            CHECK_OK(ctx, ct_graph_create(ctx, &g));
            CHECK_OK(ctx, ct_input(g, "x", CT_F32, 2, (int64_t[]){7, 33}, &x));
            CHECK_OK(ctx, ct_param(g, "w", 2, (int64_t[]){9, 33}, CT_INIT_KAIMING_UNIFORM, 33, &w));
            CHECK_OK(ctx, ct_param(g, "b", 1, (int64_t[]){9}, CT_INIT_KAIMING_UNIFORM, 33, &b));
            CHECK_OK(ctx, ct_linear(g, x, w, b, &y));
            CHECK_OK(ctx, ct_sum(g, y, 3, 0, &s));
            ct_compile_opts o = prec_opts(f16 ? CT_PRECISION_FP16 : CT_PRECISION_BF16, NULL);
            ct_plan *p;
            CHECK_OK(ctx, ct_compile(g, s, 1, &y, &o, &p));
            ct_graph_free(g);
            ct_tensor tx, tw, tb, ty;
            CHECK_OK(ctx, ct_plan_tensor(p, x, &tx));
            test_fill_uniform(tx.data, 7 * 33, 11, -3, 3);
            CHECK_OK(ctx, ct_plan_forward(p, 1));
            CHECK_OK(ctx, ct_plan_tensor(p, y, &ty));
            CHECK_OK(ctx, ct_plan_param_info(p, 0, NULL, &tw, NULL));
            CHECK_OK(ctx, ct_plan_param_info(p, 1, NULL, &tb, NULL));
            CHECK(ty.dtype == (f16 ? CT_F16 : CT_BF16));
            float (*rnd)(float) = f16 ? f16r : bf16r;
            const float *X = tx.data, *W = tw.data, *B = tb.data;
            const uint16_t *Y = ty.data;
            double worst = 0;
            for (int i = 0; i < 7; i++)
                for (int j = 0; j < 9; j++) {
                    float acc = 0;
                    for (int k = 0; k < 33; k++) acc += rnd(X[i * 33 + k]) * rnd(W[j * 33 + k]);
                    float want = rnd(acc + rnd(B[j]));
                    float got = f16 ? ct_f16_to_f32(Y[i * 9 + j]) : ct_bf16_to_f32(Y[i * 9 + j]);
                    double ulp = ldexp(1.0, ilogb(want != 0 ? want : 1e-3f) - (f16 ? 10 : 7));
                    double e = fabs((double)got - want) / ulp;
                    worst = e > worst ? e : worst;
                }
            CHECK_MSG(worst <= 1.0, "%s %s: worst %.2f ulp from the emulation", f16 ? "fp16" : "bf16",
                      onednn ? "onednn" : "ref", worst);
            /* backward of loss = sum(y): dy = 1 (FP32, cast to the low dtype),
             * dW[j,k] = sum_i round(x[i,k]) (FP16: rounded to FP16 before the FP32
             * master grad; BF16: stored as FP32 by the GEMM), db[j] = 7 */
            CHECK_OK(ctx, ct_plan_backward(p));
            ct_tensor gw, gb;
            CHECK_OK(ctx, ct_plan_param_info(p, 0, NULL, NULL, &gw));
            CHECK_OK(ctx, ct_plan_param_info(p, 1, NULL, NULL, &gb));
            CHECK(gw.dtype == CT_F32 && gb.dtype == CT_F32);
            worst = 0;
            for (int j = 0; j < 9; j++) {
                CHECK(((const float *)gb.data)[j] == 7.0f);
                for (int kk = 0; kk < 33; kk++) {
                    float acc = 0;
                    for (int i = 0; i < 7; i++) acc += rnd(X[i * 33 + kk]);
                    float want = rnd(acc), got = ((const float *)gw.data)[j * 33 + kk];
                    double ulp = ldexp(1.0, ilogb(want != 0 ? want : 1e-3f) - (f16 ? 10 : 7));
                    double e = fabs((double)got - want) / ulp;
                    worst = e > worst ? e : worst;
                }
            }
            CHECK_MSG(worst <= 1.0, "%s %s backward: worst %.2f ulp from the emulation", f16 ? "fp16" : "bf16",
                      onednn ? "onednn" : "ref", worst);
            ct_plan_free(p);
            ct_context_free(ctx);
        }
}

/* Loss and every gradient of a low-precision plan against the FP32 plan on
 * the same weights and batch: close, but not equal. Gradients are compared
 * by ||low - fp32|| / ||fp32|| per tensor: at initialization they are sums
 * with heavy cancellation, and BF16's 8-bit mantissa moves them a lot —
 * PyTorch's own torch.autocast(bfloat16) on this MLP (64-48-40-10, batch
 * 32, uniform inputs) is 0.09..0.14 away from its FP32 gradients, which is
 * where the BF16 tolerance comes from. The exact semantics are checked
 * against the emulation above. */
static void compare_to_fp32(int cnn, ct_precision prec, double tol) {
    ct_context *ctx = test_ctx(-1, 1);
    test_model a, b;
    CHECK_OK(ctx, build(ctx, cnn, CT_PRECISION_FP32, NULL, &a));
    CHECK_OK(ctx, build(ctx, cnn, prec, NULL, &b));
    step_fb(&a);
    step_fb(&b);
    float la, lb;
    CHECK_OK(ctx, ct_plan_loss(a.plan, &la));
    CHECK_OK(ctx, ct_plan_loss(b.plan, &lb));
    double worst = fabs((double)la - lb) / fabs((double)la), any_diff = worst;
    for (int i = 0; i < ct_plan_num_params(a.plan); i++) {
        ct_tensor ga, gb;
        const char *name;
        CHECK_OK(ctx, ct_plan_param_info(a.plan, i, &name, NULL, &ga));
        CHECK_OK(ctx, ct_plan_param_info(b.plan, i, NULL, NULL, &gb));
        /* relative to the tensor's largest gradient */
        size_t n = (size_t)ct_tensor_numel(&ga);
        double mx = 0;
        for (size_t j = 0; j < n; j++) mx = fmax(mx, fabs(((float *)ga.data)[j]));
        double e = test_max_rel(gb.data, ga.data, n, mx > 0 ? mx : 1), num = 0, den = 0;
        for (size_t j = 0; j < n; j++) { double d = ((float *)gb.data)[j] - ((float *)ga.data)[j]; num += d * d; den += (double)((float *)ga.data)[j] * ((float *)ga.data)[j]; }
        e = sqrt(num / (den > 0 ? den : 1));
        CHECK_MSG(e <= tol, "%s %s: gradient of %s off by %.3g (tol %.3g)", cnn ? "cnn" : "mlp",
                  ct_precision_name(prec), name, e, tol);
        worst = e > worst ? e : worst;
        any_diff = e > any_diff ? e : any_diff;
    }
    printf("    %s %s vs fp32: loss %.6f vs %.6f, worst relative %.3g\n", cnn ? "cnn" : "mlp", ct_precision_name(prec),
           (double)lb, (double)la, worst);
    CHECK_MSG(fabs((double)la - lb) <= tol * fabs((double)la), "loss %g vs fp32 %g", (double)lb, (double)la);
    CHECK_MSG(any_diff > 1e-5, "%s looks like fp32 (worst %.3g)", ct_precision_name(prec), any_diff);
    ct_plan_free(a.plan);
    ct_plan_free(b.plan);
    ct_context_free(ctx);
}

static void mlp_bf16_fp16_close_to_fp32(void) {
    compare_to_fp32(0, CT_PRECISION_BF16, 0.2);
    compare_to_fp32(0, CT_PRECISION_FP16, 0.01);
    compare_to_fp32(0, CT_PRECISION_BF16_PURE, 0.25);
    compare_to_fp32(0, CT_PRECISION_FP16_PURE, 0.01);
}

static void cnn_bf16_fp16_close_to_fp32(void) {
    compare_to_fp32(1, CT_PRECISION_BF16, 0.2);
    compare_to_fp32(1, CT_PRECISION_FP16, 0.1);
    compare_to_fp32(1, CT_PRECISION_BF16_PURE, 0.25);
}

/* keep_fp32 = "fc2": fc2 reads FP32 and stores FP32, the others stay BF16;
 * what ran is checked in the plan and in the profiler's trace (the dtype of
 * every executed op). */
static void keep_fp32_runs_layer_in_fp32(void) {
    ct_context *ctx = test_ctx(-1, 1);
    test_model m;
    CHECK_OK(ctx, build(ctx, 0, CT_PRECISION_BF16, "fc2", &m));
    /* fc2's output and its input (fc1's relu) are FP32 now; fc1 and fc3 stay BF16 */
    int nn = 0;
    ct_profiler *prof;
    ct_profiler_opts po;
    ct_profiler_opts_default(&po);
    po.skip_steps = po.warmup_steps = 0;
    CHECK_OK(ctx, ct_profiler_create(ctx, &po, &prof));
    CHECK_OK(ctx, ct_plan_set_profiler(m.plan, prof));
    step_fb(&m);
    ct_profiler_step(prof);
    char path[256];
    snprintf(path, sizeof path, "/tmp/ct_test_amp_%d.json", (int)getpid());
    CHECK_OK(ctx, ct_profiler_write(prof, path));
    FILE *fp = fopen(path, "rb");
    CHECK(fp != NULL);
    static char buf[1 << 20];
    size_t got = fp ? fread(buf, 1, sizeof buf - 1, fp) : 0;
    if (fp) fclose(fp);
    buf[got] = 0;
    remove(path);
    /* the trace's forward linear events name their node and dtype */
    const char *e1 = strstr(buf, "\"node\": \"fc1\""), *e2 = strstr(buf, "\"node\": \"fc2\"");
    CHECK_MSG(e1 && e2, "trace has no fc1/fc2 op events");
    if (e1 && e2) {
        CHECK_MSG(!strncmp(strstr(e1, "\"dtype\":"), "\"dtype\": \"bf16\"", 15), "fc1 did not run in bf16");
        CHECK_MSG(!strncmp(strstr(e2, "\"dtype\":"), "\"dtype\": \"f32\"", 14), "fc2 did not run in f32");
        nn = 2;
    }
    CHECK(nn == 2);
    ct_plan_set_profiler(m.plan, NULL);
    ct_profiler_free(prof);
    ct_plan_free(m.plan);
    /* an op kind keeps every layer of that kind */
    CHECK_OK(ctx, build(ctx, 0, CT_PRECISION_BF16, "linear", &m));
    CHECK(ct_plan_node_dtype(m.plan, m.logits) == CT_F32);
    CHECK(ct_plan_num_casts(m.plan) == 0);
    ct_plan_free(m.plan);
    /* a token that matches nothing is an error naming it */
    ct_status s = build(ctx, 0, CT_PRECISION_BF16, "fc2,RoIPool", &m);
    CHECK(s == CT_E_INVALID_ARG);
    CHECK(strstr(ct_context_last_error(ctx), "'RoIPool' matches no layer") != NULL);
    ct_context_free(ctx);
}

/* FP16 with an absurd loss scale overflows in the FP16 activation
 * gradients: the scaler sees inf in the FP32 master gradients, skips the
 * step (weights and optimizer state bit-identical), backs off and names the
 * tensor; with a sane scale the step is taken. */
static void fp16_overflow_skips_step(void) {
    ct_context *ctx = test_ctx(-1, 1);
    test_model m;
    CHECK_OK(ctx, build(ctx, 0, CT_PRECISION_FP16, NULL, &m));
    ct_optim_opts oo;
    ct_optim_opts_default(&oo, CT_OPTIM_ADAMW);
    ct_optimizer *opt;
    CHECK_OK(ctx, ct_optimizer_create(m.plan, &oo, &opt));
    ct_scaler_opts so;
    ct_scaler_opts_default(&so);
    so.init_scale = 1e30f; /* fp16 tops out at 65504: the scaled gradients overflow */
    so.max_scale = 1e30f;
    ct_scaler *sc;
    CHECK_OK(ctx, ct_scaler_create(ctx, &so, &sc));
    float *w;
    size_t n;
    CHECK_OK(ctx, ct_plan_param_arena(m.plan, &w, NULL, &n));
    float *before = malloc(n * sizeof *before);
    memcpy(before, w, n * sizeof *before);
    int skipped = -1;
    CHECK_OK(ctx, ct_plan_set_loss_scale(m.plan, ct_scaler_scale(sc)));
    step_fb(&m);
    CHECK_OK(ctx, ct_scaler_step(sc, m.plan, opt, &skipped));
    CHECK(skipped == 1);
    CHECK(memcmp(before, w, n * sizeof *before) == 0);
    CHECK(ct_scaler_scale(sc) == 0.5e30f);
    const ct_scale_record *r1;
    int n1;
    ct_scaler_history(sc, &r1, &n1);
    CHECK(n1 == 2 && r1[0].event == CT_SCALE_OVERFLOW && r1[0].tensor[0] && r1[1].event == CT_SCALE_BACKOFF &&
          !strcmp(r1[0].tensor, r1[1].tensor) && r1[1].scale == 0.5e30f);
    /* a sane scale: finite gradients, the step is taken */
    ct_scaler_state *st = malloc(sizeof *st);
    ct_scaler_get_state(sc, st);
    st->scale = 1024.0f;
    CHECK_OK(ctx, ct_scaler_set_state(sc, st));
    free(st);
    CHECK_OK(ctx, ct_plan_set_loss_scale(m.plan, ct_scaler_scale(sc)));
    step_fb(&m);
    CHECK_OK(ctx, ct_scaler_step(sc, m.plan, opt, &skipped));
    CHECK(skipped == 0);
    CHECK(memcmp(before, w, n * sizeof *before) != 0);
    free(before);
    ct_scaler_free(sc);
    ct_optimizer_free(opt);
    ct_plan_free(m.plan);
    ct_context_free(ctx);
}

/* Mixed precision composes with recomputation and gradient accumulation:
 * gradients bit-identical to the same precision without recomputation. */
static void bf16_with_recompute_bit_identical(void) {
    ct_context *ctx = test_ctx(-1, 1);
    test_model a, b;
    ct_compile_opts o = prec_opts(CT_PRECISION_BF16, NULL);
    CHECK_OK(ctx, test_model_build_opts(ctx, 4, k_cnn_x, 2, k_cnn_c, 5, 0.0f, 0.0f, &o, &a));
    o.recompute_every = 1;
    CHECK_OK(ctx, test_model_build_opts(ctx, 4, k_cnn_x, 2, k_cnn_c, 5, 0.0f, 0.0f, &o, &b));
    step_fb(&a);
    step_fb(&b);
    float *ga, *gb;
    size_t n;
    CHECK_OK(ctx, ct_plan_param_arena(a.plan, NULL, &ga, &n));
    CHECK_OK(ctx, ct_plan_param_arena(b.plan, NULL, &gb, NULL));
    CHECK(memcmp(ga, gb, n * sizeof(float)) == 0);
    ct_plan_free(a.plan);
    ct_plan_free(b.plan);
    ct_context_free(ctx);
}

/* Counts forward runs of weight casts (a cast of a parameter). */
static void count_weight_casts(void *user, const ct_node_event *ev) {
    if (ev->kind == CT_NODE_END && !ev->backward && !strcmp(ev->op, "cast") && strstr(ev->name, ".weight"))
        ++*(int *)user;
}

/* The BF16 weight copies are kept between steps: the optimizer writes them
 * in its update pass and forward skips the weight casts. Training equals a
 * plan that casts in every forward (ct_plan_params_changed before each)
 * bit for bit, for SGD with momentum and for AdamW with two param groups;
 * with accumulation (two forwards per step) the casts run once; a write
 * through a view of the parameters is seen by the next forward. */
static void weight_copies_kept_between_steps(void) {
    ct_context *ctx = test_ctx(-1, 1);
    for (int opt_kind = 0; opt_kind < 2; opt_kind++) {
        test_model a, b;
        ct_compile_opts o = prec_opts(CT_PRECISION_BF16, NULL);
        CHECK_OK(ctx, test_model_build_opts(ctx, 4, k_cnn_x, 2, k_cnn_c, 5, 0.0f, 0.0f, &o, &a));
        CHECK_OK(ctx, test_model_build_opts(ctx, 4, k_cnn_x, 2, k_cnn_c, 5, 0.0f, 0.0f, &o, &b));
        ct_plan_stats st;
        ct_plan_get_stats(a.plan, &st);
        CHECK(st.weight_copy_bytes == st.param_bytes / 2); /* BF16: 2 bytes per parameter element */
        ct_optim_opts oo;
        ct_optim_opts_default(&oo, opt_kind ? CT_OPTIM_ADAMW : CT_OPTIM_SGD);
        oo.lr = opt_kind ? 1e-2f : 0.1f;
        oo.momentum = opt_kind ? 0.0f : 0.9f;
        ct_optimizer *oa, *ob;
        CHECK_OK(ctx, ct_optimizer_create(a.plan, &oo, &oa));
        CHECK_OK(ctx, ct_optimizer_create(b.plan, &oo, &ob));
        if (opt_kind) { /* two groups: runs that together cover the arena */
            CHECK_OK(ctx, ct_optimizer_set_group(oa, "fc", 0.5f, 0.0f));
            CHECK_OK(ctx, ct_optimizer_set_group(ob, "fc", 0.5f, 0.0f));
        }
        ct_plan_params_changed(a.plan); /* whatever ran before (the test model's build writes parameters) */
        int casts_a = 0, casts_b = 0;
        ct_plan_set_node_hook(a.plan, count_weight_casts, &casts_a);
        ct_plan_set_node_hook(b.plan, count_weight_casts, &casts_b);
        float la[6], lb[6];
        for (int t = 0; t < 6; t++) {
            ct_plan_params_changed(b.plan); /* b casts in every forward */
            CHECK_OK(ctx, ct_plan_zero_grads(a.plan));
            CHECK_OK(ctx, ct_plan_zero_grads(b.plan));
            step_fb(&a);
            step_fb(&b);
            CHECK_OK(ctx, ct_plan_loss(a.plan, &la[t]));
            CHECK_OK(ctx, ct_plan_loss(b.plan, &lb[t]));
            CHECK_OK(ctx, ct_optimizer_step(oa));
            CHECK_OK(ctx, ct_optimizer_step(ob));
        }
        /* a: the casts ran in the first forward only (3 weights: two convs and the fc); b: every forward */
        CHECK_MSG(casts_a == 3 && casts_b == 18, "weight casts run: %d (kept) and %d (every forward)", casts_a, casts_b);
        /* accumulation: two forwards before the next step, no cast */
        casts_a = 0;
        step_fb(&a);
        step_fb(&a);
        CHECK(casts_a == 0);
        float *wa, *wb;
        size_t n;
        CHECK_OK(ctx, ct_plan_param_arena(a.plan, &wa, NULL, &n)); /* a writable view: stale from here */
        CHECK_OK(ctx, ct_plan_param_arena(b.plan, &wb, NULL, NULL));
        CHECK_MSG(!memcmp(la, lb, sizeof la) && !memcmp(wa, wb, n * sizeof(float)),
                  "%s: kept weight copies train differently from casting in forward (loss %.7f vs %.7f)",
                  opt_kind ? "adamw" : "sgd", (double)la[5], (double)lb[5]);
        CHECK(la[5] < la[0]); /* it trains */
        /* a write through a view: ct_plan_param_info's value marks the copies stale; the next forward casts */
        CHECK_OK(ctx, ct_optimizer_step(oa));
        casts_a = 0;
        ct_tensor w0;
        CHECK_OK(ctx, ct_plan_param_info(a.plan, 0, NULL, &w0, NULL));
        float loss_before, loss_after;
        CHECK_OK(ctx, ct_plan_loss(a.plan, &loss_before));
        for (int64_t i = 0; i < ct_tensor_numel(&w0); i++) ((float *)w0.data)[i] *= 3.0f;
        step_fb(&a);
        CHECK_OK(ctx, ct_plan_loss(a.plan, &loss_after));
        CHECK(casts_a == 3 && loss_after != loss_before);
        /* a write through the pointer taken before: ct_plan_params_changed */
        CHECK_OK(ctx, ct_optimizer_step(oa)); /* copies current again */
        casts_a = 0;
        step_fb(&a);
        CHECK(casts_a == 0);
        CHECK_OK(ctx, ct_plan_loss(a.plan, &loss_before));
        for (size_t i = 0; i < n; i++) wa[i] = 0.0f;
        ct_plan_params_changed(a.plan);
        step_fb(&a);
        CHECK_OK(ctx, ct_plan_loss(a.plan, &loss_after));
        CHECK(casts_a == 3 && fabsf(loss_after - logf(5.0f)) < 1e-3f); /* zero weights: uniform over 5 classes */
        ct_optimizer_free(oa);
        ct_optimizer_free(ob);
        ct_plan_free(a.plan);
        ct_plan_free(b.plan);
    }
    /* FP32 plans have none */
    test_model f;
    CHECK_OK(ctx, build(ctx, 1, CT_PRECISION_FP32, NULL, &f));
    ct_plan_stats sf;
    ct_plan_get_stats(f.plan, &sf);
    CHECK(sf.weight_copy_bytes == 0);
    ct_plan_free(f.plan);
    ct_context_free(ctx);
}

/* Activation memory of the planned arena, FP32 vs BF16, CNN (reported). */
static void bf16_shrinks_planned_activations(void) {
    ct_context *ctx = test_ctx(-1, 1);
    test_model a, b;
    /* the Fashion-MNIST recipe's CNN: batch 128, 1x28x28, channels 32, 64 (compiled, not run) */
    static const int64_t xs[4] = {128, 1, 28, 28}, ch[2] = {32, 64};
    ct_compile_opts o = prec_opts(CT_PRECISION_FP32, NULL);
    CHECK_OK(ctx, test_model_build_opts(ctx, 4, xs, 2, ch, 10, 0.0f, 0.0f, &o, &a));
    o.precision = CT_PRECISION_BF16;
    CHECK_OK(ctx, test_model_build_opts(ctx, 4, xs, 2, ch, 10, 0.0f, 0.0f, &o, &b));
    ct_plan_stats sa, sb;
    ct_plan_get_stats(a.plan, &sa);
    ct_plan_get_stats(b.plan, &sb);
    printf("    cnn b128 activation arena: fp32 %zu B, bf16 %zu B (incl. FP32 conversion copies of up to %zu B)\n",
           sa.activation_bytes, sb.activation_bytes, sb.cast_bytes);
    /* stored values are 2 bytes; the FP32 copies for kernels without BF16 I/O
     * (all but cast on this CPU) are planned in the arena for one node's run */
    CHECK(sb.activation_bytes < sa.activation_bytes);
    ct_plan_free(a.plan);
    ct_plan_free(b.plan);
    ct_context_free(ctx);
}

static void precision_names(void) {
    ct_context *ctx = test_ctx(-1, 1);
    for (int i = 0; i < CT_PRECISION_COUNT; i++) {
        ct_precision p;
        CHECK_OK(ctx, ct_precision_parse(ctx, ct_precision_name((ct_precision)i), &p));
        CHECK(p == (ct_precision)i);
    }
    ct_precision p;
    CHECK(ct_precision_parse(ctx, "half", &p) == CT_E_INVALID_ARG);
    CHECK(strstr(ct_context_last_error(ctx), "bf16-pure") != NULL);
    ct_context_free(ctx);
}

TEST_MAIN(T(autocast_inserts_each_cast_once), T(linear_matches_emulation), T(mlp_bf16_fp16_close_to_fp32),
          T(cnn_bf16_fp16_close_to_fp32), T(keep_fp32_runs_layer_in_fp32), T(fp16_overflow_skips_step),
          T(bf16_with_recompute_bit_identical), T(weight_copies_kept_between_steps), T(bf16_shrinks_planned_activations), T(precision_names))
