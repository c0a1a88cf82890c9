/* tests/test_accum.c - gradient accumulation (ct_compile_opts.accumulate_grads):
 * N micro-batches with loss scale 1/N give the gradients and the AdamW update
 * of one batch of N times the size (MLP, no batchnorm/dropout); a CNN with
 * batchnorm runs (its statistics are per micro-batch, the documented
 * caveat); nothing is allocated per step; the grad-ready callback fires once
 * per parameter and micro-batch; the default mode is unchanged. */
#include <stdint.h>

#include "test.h"

#define TRY(expr)                      \
    do {                               \
        ct_status s_ = (expr);         \
        if (s_ != CT_OK) return s_;    \
    } while (0)

#define IN 20
#define CLASSES 10

typedef struct {
    ct_plan *plan;
    ct_node x, y, logits, loss;
    int64_t batch;
} net;

/* MLP (nd 2) or CNN (nd 4) classifier with batch rows, compiled with or
 * without accumulation (-1: opts NULL, the defaults). */
static ct_status net_build(ct_context *ctx, int cnn, int64_t batch, int accumulate, net *m) {
    ct_graph *g;
    memset(m, 0, sizeof *m);
    m->batch = batch;
    ct_status s = ct_graph_create(ctx, &g);
    if (s != CT_OK) return s;
    int64_t xs2[2] = {batch, IN}, xs4[4] = {batch, 3, 8, 8};
    s = ct_input(g, "x", CT_F32, cnn ? 4 : 2, cnn ? xs4 : xs2, &m->x);
    if (s == CT_OK) s = ct_input(g, "y", CT_I32, 1, &batch, &m->y);
    if (s == CT_OK) {
        if (cnn) s = ct_model_cnn(g, m->x, 2, (int64_t[]){4, 8}, CLASSES, &m->logits);
        else s = ct_model_mlp(g, m->x, 2, (int64_t[]){32, 16}, CLASSES, CT_ACT_RELU, 0.0f, &m->logits);
    }
    if (s == CT_OK) s = ct_cross_entropy(g, m->logits, m->y, 0.0f, -100, &m->loss);
    ct_compile_opts o;
    ct_compile_opts_default(&o);
    o.accumulate_grads = accumulate > 0;
    if (s == CT_OK) s = ct_compile(g, m->loss, 1, &m->logits, accumulate < 0 ? NULL : &o, &m->plan);
    ct_graph_free(g);
    return s;
}

/* The full data set of `total` rows: x U(-1, 1), labels (i * 7) % CLASSES. */
static void make_data(float *x, int32_t *y, int64_t total, size_t row) {
    test_fill_uniform(x, (size_t)total * row, 11, -1, 1);
    for (int64_t i = 0; i < total; i++) y[i] = (int32_t)((i * 7) % CLASSES);
}

/* Writes rows [first, first + m->batch) into the plan's inputs. */
static void feed(net *m, const float *x, const int32_t *y, int64_t first, size_t row) {
    ct_tensor tx, ty;
    ct_plan_tensor(m->plan, m->x, &tx);
    ct_plan_tensor(m->plan, m->y, &ty);
    memcpy(tx.data, x + (size_t)first * row, (size_t)m->batch * row * sizeof(float));
    memcpy(ty.data, y + first, (size_t)m->batch * sizeof(int32_t));
}

/* One accumulated step: zero, then `micro` forward/backward with scale 1/micro.
 * *loss is the mean of the micro-batch losses. */
static ct_status accum_step(net *m, const float *x, const int32_t *y, int micro, size_t row, float *loss) {
    TRY(ct_plan_zero_grads(m->plan));
    TRY(ct_plan_set_loss_scale(m->plan, 1.0f / (float)micro));
    double sum = 0;
    for (int k = 0; k < micro; k++) {
        feed(m, x, y, (int64_t)k * m->batch, row);
        TRY(ct_plan_forward(m->plan, 1));
        TRY(ct_plan_backward(m->plan));
        float l;
        TRY(ct_plan_loss(m->plan, &l));
        sum += l;
    }
    *loss = (float)(sum / micro);
    return CT_OK;
}

/* max over params of max|a-b| / max|b| (per tensor) */
static double grads_rel(ct_plan *a, ct_plan *b, int values) {
    double worst = 0;
    for (int i = 0; i < ct_plan_num_params(a); i++) {
        ct_tensor ta, tb;
        if (values) {
            ct_plan_param_info(a, i, NULL, &ta, NULL);
            ct_plan_param_info(b, i, NULL, &tb, NULL);
        } else {
            ct_plan_param_info(a, i, NULL, NULL, &ta);
            ct_plan_param_info(b, i, NULL, NULL, &tb);
        }
        const float *pa = ta.data, *pb = tb.data;
        double md = 0, mx = 0;
        for (int64_t k = 0; k < ct_tensor_numel(&ta); k++) {
            double d = fabs((double)pa[k] - pb[k]);
            md = d != d ? INFINITY : fmax(md, d);
            mx = fmax(mx, fabs((double)pb[k]));
        }
        double e = mx > 0 ? md / mx : md;
        if (e > worst || e != e) worst = e;
    }
    return worst;
}

TEST(mlp_4x8_accumulated_equals_batch_32) {
    for (int use_onednn = 1; use_onednn >= 0; use_onednn--) {
        ct_context *ctx = test_ctx(-1, use_onednn);
        net big, acc;
        CHECK_OK(ctx, net_build(ctx, 0, 32, 0, &big));
        CHECK_OK(ctx, net_build(ctx, 0, 8, 1, &acc));
        float x[32 * IN];
        int32_t y[32];
        make_data(x, y, 32, IN);
        CHECK(grads_rel(acc.plan, big.plan, 1) == 0); /* same initialization */
        ct_optim_opts oo;
        ct_optim_opts_default(&oo, CT_OPTIM_ADAMW);
        oo.weight_decay = 0.05f;
        ct_optimizer *ob, *oa;
        CHECK_OK(ctx, ct_optimizer_create(big.plan, &oo, &ob));
        CHECK_OK(ctx, ct_optimizer_create(acc.plan, &oo, &oa));
        double worst_g = 0, worst_p = 0;
        for (int step = 0; step < 3; step++) {
            float lb, la;
            CHECK_OK(ctx, accum_step(&big, x, y, 1, IN, &lb));
            CHECK_OK(ctx, accum_step(&acc, x, y, 4, IN, &la));
            double eg = grads_rel(acc.plan, big.plan, 0);
            CHECK_MSG(fabs((double)la - lb) <= 1e-6 * fabs((double)lb), "loss %.9g vs %.9g", (double)la, (double)lb);
            CHECK_OK(ctx, ct_optimizer_set_lr(ob, 1e-2f));
            CHECK_OK(ctx, ct_optimizer_step(ob));
            CHECK_OK(ctx, ct_optimizer_set_lr(oa, 1e-2f));
            CHECK_OK(ctx, ct_optimizer_step(oa));
            double ep = grads_rel(acc.plan, big.plan, 1);
            worst_g = fmax(worst_g, eg);
            worst_p = fmax(worst_p, ep);
        }
        printf("    onednn %d: 4x8 accumulated vs 32: grads %.3g, params after AdamW %.3g (3 steps)\n", use_onednn,
               worst_g, worst_p);
        CHECK_MSG(worst_g <= 1e-6, "gradients differ by %g", worst_g);
        CHECK_MSG(worst_p <= 1e-6, "parameters differ by %g", worst_p);
        ct_optimizer_free(ob);
        ct_optimizer_free(oa);
        ct_plan_free(big.plan);
        ct_plan_free(acc.plan);
        ct_context_free(ctx);
    }
}

/* One micro-batch with accumulation is the default mode bit for bit. */
TEST(single_microbatch_is_bitwise_default) {
    ct_context *ctx = test_ctx(-1, 1);
    net a, d;
    CHECK_OK(ctx, net_build(ctx, 0, 8, 1, &a));
    CHECK_OK(ctx, net_build(ctx, 0, 8, 0, &d));
    float x[8 * IN];
    int32_t y[8];
    make_data(x, y, 8, IN);
    float la, ld;
    CHECK_OK(ctx, accum_step(&a, x, y, 1, IN, &la));
    CHECK_OK(ctx, accum_step(&d, x, y, 1, IN, &ld));
    CHECK(la == ld);
    CHECK_MSG(grads_rel(a.plan, d.plan, 0) == 0, "differ by %g", grads_rel(a.plan, d.plan, 0));
    ct_plan_free(a.plan);
    ct_plan_free(d.plan);
    ct_context_free(ctx);
}

typedef struct {
    int calls;
    int per_param[64];
    int bad;
    float *grads;
    size_t n;
} ready_log;

static void on_ready(void *user, int pi, const ct_tensor *g) {
    ready_log *r = user;
    r->calls++;
    if (pi < 0 || pi >= 64) {
        r->bad++;
        return;
    }
    r->per_param[pi]++;
    /* the view is the parameter's slice of the grad arena */
    const float *d = g->data;
    if (d < r->grads || d >= r->grads + r->n) r->bad++;
}

TEST(grad_ready_fires_per_param_and_microbatch) {
    for (int accumulate = 0; accumulate < 2; accumulate++) {
        ct_context *ctx = test_ctx(-1, 1);
        net m;
        CHECK_OK(ctx, net_build(ctx, 0, 8, accumulate, &m));
        ready_log r;
        memset(&r, 0, sizeof r);
        ct_plan_param_arena(m.plan, NULL, &r.grads, &r.n);
        ct_plan_set_grad_ready(m.plan, on_ready, &r);
        float x[32 * IN];
        int32_t y[32];
        make_data(x, y, 32, IN);
        int micro = accumulate ? 4 : 1;
        float l;
        CHECK_OK(ctx, accum_step(&m, x, y, micro, IN, &l));
        int np = ct_plan_num_params(m.plan);
        CHECK(np == 6);
        CHECK_MSG(r.calls == micro * np && !r.bad, "accumulate %d: %d calls, %d bad", accumulate, r.calls, r.bad);
        for (int i = 0; i < np; i++) CHECK(r.per_param[i] == micro);
        ct_plan_free(m.plan);
        ct_context_free(ctx);
    }
}

/* In the callback (accumulate mode) the grad view already holds this
 * micro-batch's contribution: after the last one it equals the final sum. */
typedef struct {
    ct_plan *plan;
    int micro, seen;
    double worst;
    float snap[64][512];
} snap_log;

static void on_ready_snap(void *user, int pi, const ct_tensor *g) {
    snap_log *s = user;
    int64_t n = ct_tensor_numel(g);
    if (pi < 64 && n <= 512) memcpy(s->snap[pi], g->data, (size_t)n * sizeof(float));
    s->seen++;
}

TEST(grad_ready_sees_the_running_sum) {
    ct_context *ctx = test_ctx(-1, 1);
    net m;
    CHECK_OK(ctx, net_build(ctx, 0, 8, 1, &m));
    static snap_log s;
    memset(&s, 0, sizeof s);
    ct_plan_set_grad_ready(m.plan, on_ready_snap, &s);
    float x[32 * IN];
    int32_t y[32];
    make_data(x, y, 32, IN);
    float l;
    CHECK_OK(ctx, accum_step(&m, x, y, 4, IN, &l));
    for (int i = 0; i < ct_plan_num_params(m.plan); i++) {
        ct_tensor g;
        ct_plan_param_info(m.plan, i, NULL, NULL, &g);
        if (ct_tensor_numel(&g) > 512) continue;
        CHECK_MSG(!memcmp(s.snap[i], g.data, (size_t)ct_tensor_numel(&g) * sizeof(float)),
                  "param %d: the last callback did not see the final sum", i);
    }
    ct_plan_free(m.plan);
    ct_context_free(ctx);
}

TEST(accumulated_step_allocates_nothing) {
    for (int cnn = 0; cnn < 2; cnn++) {
        ct_context *ctx = test_ctx(-1, 1);
        net m;
        CHECK_OK(ctx, net_build(ctx, cnn, 8, 1, &m));
        size_t row = cnn ? 3 * 8 * 8 : IN;
        float *x = malloc(32 * row * sizeof(float));
        int32_t y[32];
        make_data(x, y, 32, row);
        ct_optim_opts oo;
        ct_optim_opts_default(&oo, CT_OPTIM_ADAMW);
        oo.no_decay_bias_norm = 1;
        ct_optimizer *opt;
        CHECK_OK(ctx, ct_optimizer_create(m.plan, &oo, &opt));
        float l, norm;
        CHECK_OK(ctx, accum_step(&m, x, y, 4, row, &l)); /* warm-up (oneDNN primitives are cached) */
        ct_mem_stats before, after;
        ct_context_mem_stats(ctx, &before);
        for (int step = 0; step < 3; step++) {
            CHECK_OK(ctx, accum_step(&m, x, y, 4, row, &l));
            CHECK_OK(ctx, ct_clip_grad_norm(m.plan, 1.0f, 2.0f, &norm));
            CHECK_OK(ctx, ct_optimizer_set_lr(opt, 1e-3f));
            CHECK_OK(ctx, ct_optimizer_step(opt));
        }
        ct_context_mem_stats(ctx, &after);
        CHECK_MSG(after.n_allocs == before.n_allocs, "%s: %llu allocations in 3 steps", cnn ? "cnn" : "mlp",
                  (unsigned long long)(after.n_allocs - before.n_allocs));
        free(x);
        ct_optimizer_free(opt);
        ct_plan_free(m.plan);
        ct_context_free(ctx);
    }
}

/* Batchnorm normalizes each micro-batch with its own statistics (and updates
 * the running stats once per micro-batch), as PyTorch does: accumulated
 * gradients are NOT those of the big batch. This only checks that it runs
 * and stays finite, and prints the difference. */
TEST(cnn_batchnorm_accumulation_runs) {
    ct_context *ctx = test_ctx(-1, 1);
    net big, acc;
    CHECK_OK(ctx, net_build(ctx, 1, 32, 0, &big));
    CHECK_OK(ctx, net_build(ctx, 1, 8, 1, &acc));
    size_t row = 3 * 8 * 8;
    float *x = malloc(32 * row * sizeof(float));
    int32_t y[32];
    make_data(x, y, 32, row);
    float lb, la;
    CHECK_OK(ctx, accum_step(&big, x, y, 1, row, &lb));
    CHECK_OK(ctx, accum_step(&acc, x, y, 4, row, &la));
    float na, nb;
    CHECK_OK(ctx, ct_grad_norm(acc.plan, 2.0f, &na));
    CHECK_OK(ctx, ct_grad_norm(big.plan, 2.0f, &nb));
    CHECK(isfinite(la) && isfinite(na) && na > 0);
    printf("    cnn+bn: loss %.6g (4x8) vs %.6g (32); grad norm %.6g vs %.6g; rel grad diff %.3g (expected: "
           "per-micro-batch statistics)\n",
           (double)la, (double)lb, (double)na, (double)nb, grads_rel(acc.plan, big.plan, 0));
    free(x);
    ct_plan_free(big.plan);
    ct_plan_free(acc.plan);
    ct_context_free(ctx);
}

/* The default mode keeps final gradients in the grad arena (no activation
 * memory for them); accumulation plans them as activations. */
TEST(default_mode_memory_is_unchanged) {
    ct_context *ctx = test_ctx(-1, 1);
    for (int cnn = 0; cnn < 2; cnn++) {
        net d, n0, a;
        CHECK_OK(ctx, net_build(ctx, cnn, 8, 0, &d));
        CHECK_OK(ctx, net_build(ctx, cnn, 8, -1, &n0));
        CHECK_OK(ctx, net_build(ctx, cnn, 8, 1, &a));
        ct_plan_stats sd, s0, sa;
        ct_plan_get_stats(d.plan, &sd);
        ct_plan_get_stats(n0.plan, &s0);
        ct_plan_get_stats(a.plan, &sa);
        printf("    %s: activation bytes %zu (default), %zu (accumulate); grad bytes %zu\n", cnn ? "cnn" : "mlp",
               sd.activation_bytes, sa.activation_bytes, sd.grad_bytes);
        CHECK(sd.activation_bytes == s0.activation_bytes && sd.grad_bytes == sa.grad_bytes);
        CHECK(sa.activation_bytes >= sd.activation_bytes);
        ct_plan_free(d.plan);
        ct_plan_free(n0.plan);
        ct_plan_free(a.plan);
    }
    ct_compile_opts o;
    memset(&o, 0xff, sizeof o);
    ct_compile_opts_default(&o);
    CHECK(o.accumulate_grads == 0);
    ct_context_free(ctx);
}

TEST_MAIN(T(mlp_4x8_accumulated_equals_batch_32), T(single_microbatch_is_bitwise_default),
          T(grad_ready_fires_per_param_and_microbatch), T(grad_ready_sees_the_running_sum),
          T(accumulated_step_allocates_nothing), T(cnn_batchnorm_accumulation_runs),
          T(default_mode_memory_is_unchanged))
