/* tests/test_api.c - the API's contract: clear errors for bad model
 * building (shape mismatch, dtype mismatch, unsupported dtype, bad ids),
 * memory budget (E60003), status names/codes, and that a training step
 * after the first allocates nothing (counting allocator). */
#include "test.h"
#include "core/internal.h" /* ct_release_pages (ZeRO's page release) */

static int contains(const char *s, const char *sub) { return strstr(s, sub) != NULL; }
static void *test_plain_alloc(void *user, size_t bytes, size_t align) {
    (void)user;
    void *p = NULL;
    return posix_memalign(&p, align, bytes) == 0 ? p : NULL;
}
static void test_plain_free(void *user, void *p) {
    (void)user;
    free(p);
}

TEST(status_codes_have_names_and_advice) {
    CHECK(!strcmp(ct_status_code(CT_E_DTYPE), "E40005"));
    CHECK(!strcmp(ct_status_code(CT_E_UNSUPPORTED), "E50001"));
    CHECK(!strcmp(ct_status_code(CT_E_OOM), "E60003"));
    for (int s = 0; s < CT_STATUS_COUNT; s++) {
        CHECK(ct_status_name((ct_status)s)[0]);
        CHECK(ct_status_advice((ct_status)s)[0]);
        /* advice names only options that exist (no fusion levels, no gradient buckets yet) */
        CHECK(!strstr(ct_status_advice((ct_status)s), "fusion") && !strstr(ct_status_advice((ct_status)s), "bucket"));
    }
    CHECK(strstr(ct_status_advice(CT_E_UNSUPPORTED), "keep_fp32") != NULL);
    CHECK(!strcmp(ct_status_name((ct_status)999), "CT_E_INTERNAL"));
}

TEST(shape_mismatch_is_a_clear_error) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_graph *g;
    CHECK_OK(ctx, ct_graph_create(ctx, &g));
    ct_node x, w, y;
    CHECK_OK(ctx, ct_input(g, "x", CT_F32, 2, (int64_t[]){8, 784}, &x));
    CHECK_OK(ctx, ct_param(g, "fc1.weight", 2, (int64_t[]){128, 700}, CT_INIT_ZEROS, 700, &w));
    ct_status s = ct_linear(g, x, w, CT_NONE, &y);
    CHECK(s == CT_E_SHAPE);
    const char *m = ct_context_last_error(ctx);
    CHECK_MSG(contains(m, "fc1.weight") && contains(m, "[8, 784]") && contains(m, "in_features"), "%s", m);
    /* matmul inner dims, conv channels, broadcast */
    ct_node a, b, c;
    CHECK_OK(ctx, ct_input(g, "a", CT_F32, 2, (int64_t[]){3, 4}, &a));
    CHECK_OK(ctx, ct_input(g, "b", CT_F32, 2, (int64_t[]){5, 6}, &b));
    CHECK(ct_matmul(g, a, b, 0, 0, &c) == CT_E_SHAPE);
    CHECK(contains(ct_context_last_error(ctx), "inner dimensions"));
    CHECK(ct_add(g, a, b, &c) == CT_E_SHAPE);
    CHECK(contains(ct_context_last_error(ctx), "broadcast"));
    ct_node img, k;
    CHECK_OK(ctx, ct_input(g, "img", CT_F32, 4, (int64_t[]){2, 3, 8, 8}, &img));
    CHECK_OK(ctx, ct_param(g, "conv.weight", 4, (int64_t[]){4, 2, 3, 3}, CT_INIT_ZEROS, 1, &k));
    CHECK(ct_conv2d(g, img, k, CT_NONE, 1, 1, 1, 1, &c) == CT_E_SHAPE);
    CHECK(ct_conv2d(g, img, k, CT_NONE, 0, 1, 1, 1, &c) == CT_E_INVALID_ARG);
    CHECK(ct_reshape(g, a, 2, (int64_t[]){5, -1}, &c) == CT_E_SHAPE);
    CHECK(ct_input(g, "bad", CT_F32, 2, (int64_t[]){0, 3}, &c) == CT_E_SHAPE);
    CHECK(ct_linear(g, 12345, w, CT_NONE, &y) == CT_E_INVALID_ARG);
    /* the model builders propagate the same errors */
    ct_node img1;
    CHECK_OK(ctx, ct_input(g, "img1", CT_F32, 2, (int64_t[]){2, 10}, &img1));
    CHECK(ct_model_cnn(g, img1, 1, (int64_t[]){4}, 10, &c) == CT_E_SHAPE);
    ct_graph_free(g);
    ct_context_free(ctx);
}

TEST(dtype_mismatch_is_e40005) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_graph *g;
    CHECK_OK(ctx, ct_graph_create(ctx, &g));
    ct_node x, w, y, h, lab, l;
    CHECK_OK(ctx, ct_input(g, "x_bf16", CT_BF16, 2, (int64_t[]){8, 16}, &x));
    CHECK_OK(ctx, ct_param(g, "w", 2, (int64_t[]){4, 16}, CT_INIT_ZEROS, 16, &w));
    CHECK(ct_linear(g, x, w, CT_NONE, &y) == CT_E_DTYPE);
    const char *m = ct_context_last_error(ctx);
    CHECK_MSG(contains(m, "E40005") && contains(m, "bf16") && contains(m, "f32") && contains(m, "conversion"), "%s", m);
    /* a single-input op on bf16: unsupported (E50001) */
    CHECK(ct_relu(g, x, &y) == CT_E_UNSUPPORTED);
    CHECK(contains(ct_context_last_error(ctx), "E50001"));
    /* labels must be integer */
    CHECK_OK(ctx, ct_input(g, "h", CT_F32, 2, (int64_t[]){8, 4}, &h));
    CHECK_OK(ctx, ct_input(g, "lab", CT_F32, 1, (int64_t[]){8}, &lab));
    CHECK(ct_cross_entropy(g, h, lab, 0, -100, &l) == CT_E_DTYPE);
    ct_graph_free(g);
    ct_context_free(ctx);
}

TEST(bad_labels_and_ids_fail_at_run_time_with_a_message) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_graph *g;
    CHECK_OK(ctx, ct_graph_create(ctx, &g));
    ct_node x, lab, w, logits, loss;
    CHECK_OK(ctx, ct_input(g, "x", CT_F32, 2, (int64_t[]){4, 6}, &x));
    CHECK_OK(ctx, ct_input(g, "lab", CT_I32, 1, (int64_t[]){4}, &lab));
    CHECK_OK(ctx, ct_param(g, "w", 2, (int64_t[]){3, 6}, CT_INIT_KAIMING_UNIFORM, 6, &w));
    CHECK_OK(ctx, ct_linear(g, x, w, CT_NONE, &logits));
    CHECK_OK(ctx, ct_cross_entropy(g, logits, lab, 0, -100, &loss));
    ct_plan *p;
    CHECK_OK(ctx, ct_compile(g, loss, 0, NULL, NULL, &p));
    ct_tensor t;
    CHECK_OK(ctx, ct_plan_tensor(p, lab, &t));
    ((int32_t *)t.data)[2] = 7; /* 3 classes */
    CHECK(ct_plan_forward(p, 1) == CT_E_INVALID_ARG);
    CHECK_MSG(contains(ct_context_last_error(ctx), "label 7"), "%s", ct_context_last_error(ctx));
    ct_plan_free(p);
    ct_graph_free(g);
    ct_context_free(ctx);
}

TEST(memory_budget_gives_e60003) {
    ct_context_opts o;
    ct_context_opts_default(&o);
    o.memory_budget = 1 << 20; /* 1 MiB */
    ct_context *ctx;
    CHECK(ct_context_create(&o, &ctx) == CT_OK);
    test_model tm;
    ct_status s = test_model_build(ctx, 2, (int64_t[]){256, 784}, 1, (int64_t[]){1024}, 10, 0, 0, &tm);
    CHECK(s == CT_E_OOM && tm.plan == NULL);
    const char *m = ct_context_last_error(ctx);
    CHECK_MSG(contains(m, "E60003") && contains(m, "budget") && contains(m, "checkpointing"), "%s", m);
    ct_mem_stats ms;
    ct_context_mem_stats(ctx, &ms);
    CHECK(ms.bytes_in_use == 0); /* the failed compile released everything */
    ct_context_free(ctx);
}

static void train_steps(ct_context *ctx, const char *model, int steps, uint64_t *allocs_after_first) {
    test_model tm;
    if (!strcmp(model, "cnn"))
        CHECK_OK(ctx, test_model_build(ctx, 4, (int64_t[]){8, 1, 12, 12}, 2, (int64_t[]){4, 8}, 10, 0, 0.1f, &tm));
    else
        CHECK_OK(ctx, test_model_build(ctx, 2, (int64_t[]){8, 30}, 2, (int64_t[]){32, 16}, 10, 0.1f, 0.1f, &tm));
    ct_plan *p = tm.plan;
    ct_optim_opts oo;
    ct_optim_opts_default(&oo, CT_OPTIM_ADAMW);
    ct_optimizer *opt;
    CHECK_OK(ctx, ct_optimizer_create(p, &oo, &opt));
    ct_mem_stats before, after;
    for (int it = 0; it < steps; it++) {
        if (it == 1) ct_context_mem_stats(ctx, &before);
        CHECK_OK(ctx, ct_plan_forward(p, 1));
        CHECK_OK(ctx, ct_plan_backward(p));
        CHECK_OK(ctx, ct_optimizer_set_lr(opt, 1e-3f));
        CHECK_OK(ctx, ct_optimizer_step(opt));
        CHECK_OK(ctx, ct_plan_forward(p, 0)); /* evaluation pass too */
    }
    ct_context_mem_stats(ctx, &after);
    *allocs_after_first = after.n_allocs - before.n_allocs;
    ct_optimizer_free(opt);
    ct_plan_free(p);
}

TEST(training_step_after_first_allocates_nothing) {
    const char *models[] = {"mlp", "cnn"};
    for (int m = 0; m < 2; m++)
        for (int fast = 0; fast < 2; fast++) {
            ct_context *ctx = fast ? test_ctx(-1, 1) : test_ctx(CT_ISA_REF, 0);
            uint64_t n = 99;
            train_steps(ctx, models[m], 4, &n);
            printf("    %s %s: %llu allocations in steps 2..4\n", models[m], fast ? "fast" : "ref",
                   (unsigned long long)n);
            CHECK_MSG(n == 0, "%s: %llu allocations after the first step", models[m], (unsigned long long)n);
            ct_mem_stats ms;
            ct_context_mem_stats(ctx, &ms);
            CHECK_MSG(ms.bytes_in_use == 0, "%zu bytes leaked after freeing the plan", ms.bytes_in_use);
            ct_context_free(ctx);
        }
}

TEST(optimizer_rejects_bad_values) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_graph *g;
    CHECK_OK(ctx, ct_graph_create(ctx, &g));
    ct_node x, w, y, l;
    CHECK_OK(ctx, ct_input(g, "x", CT_F32, 2, (int64_t[]){2, 3}, &x));
    CHECK_OK(ctx, ct_param(g, "w", 2, (int64_t[]){3, 3}, CT_INIT_ONES, 3, &w));
    CHECK_OK(ctx, ct_matmul(g, x, w, 0, 0, &y));
    CHECK_OK(ctx, ct_sum(g, y, 3u, 0, &l));
    ct_plan *p;
    CHECK_OK(ctx, ct_compile(g, l, 0, NULL, NULL, &p));
    ct_optim_opts o;
    ct_optimizer *opt = NULL;
    ct_optim_opts_default(&o, CT_OPTIM_ADAMW);
    o.beta1 = 1.0f;
    CHECK(ct_optimizer_create(p, &o, &opt) == CT_E_INVALID_ARG && !opt);
    CHECK(contains(ct_context_last_error(ctx), "betas"));
    ct_optim_opts_default(&o, CT_OPTIM_SGD);
    o.lr = -1.0f;
    CHECK(ct_optimizer_create(p, &o, &opt) == CT_E_INVALID_ARG);
    CHECK(contains(ct_context_last_error(ctx), "lr"));
    o.lr = 0.1f;
    o.nesterov = 1;
    CHECK(ct_optimizer_create(p, &o, &opt) == CT_E_INVALID_ARG);
    ct_plan_free(p);
    ct_graph_free(g);
    ct_context_free(ctx);
}

/* The fused SIMD update equals the reference loop (SGD momentum+nesterov+wd, AdamW). */
TEST(optimizer_fast_matches_reference) {
    for (int kind = 0; kind < 2; kind++) {
        ct_context *ctx = test_ctx(-1, 1);
        ct_graph *g;
        CHECK_OK(ctx, ct_graph_create(ctx, &g));
        ct_node x, w, y, l;
        CHECK_OK(ctx, ct_input(g, "x", CT_F32, 2, (int64_t[]){4, 37}, &x));
        CHECK_OK(ctx, ct_param(g, "w", 2, (int64_t[]){37, 29}, CT_INIT_KAIMING_UNIFORM, 37, &w));
        CHECK_OK(ctx, ct_matmul(g, x, w, 0, 0, &y));
        CHECK_OK(ctx, ct_sum(g, y, 3u, 0, &l));
        ct_plan *p1, *p2;
        CHECK_OK(ctx, ct_compile(g, l, 0, NULL, NULL, &p1));
        CHECK_OK(ctx, ct_compile(g, l, 0, NULL, NULL, &p2));
        ct_optim_opts o;
        ct_optim_opts_default(&o, kind ? CT_OPTIM_ADAMW : CT_OPTIM_SGD);
        o.momentum = kind ? 0 : 0.9f;
        o.nesterov = !kind;
        o.weight_decay = 0.05f;
        ct_optimizer *a, *b;
        CHECK_OK(ctx, ct_optimizer_create(p1, &o, &a));
        CHECK_OK(ctx, ct_optimizer_create(p2, &o, &b));
        float *w1, *g1, *w2, *g2;
        size_t n;
        ct_plan_param_arena(p1, &w1, &g1, &n);
        ct_plan_param_arena(p2, &w2, &g2, &n);
        for (int it = 0; it < 5; it++) {
            test_fill_uniform(g1, n, 100 + (unsigned)it, -1, 1);
            memcpy(g2, g1, n * sizeof *g1);
            CHECK_OK(ctx, ct_optimizer_set_lr(a, 0.01f));
            CHECK_OK(ctx, ct_optimizer_step(a));
            CHECK_OK(ctx, ct_optimizer_set_lr(b, 0.01f));
            CHECK_OK(ctx, ct_optimizer_step_ref(b));
        }
        double e = test_max_rel(w1, w2, n, 1e-3);
        CHECK_MSG(e < 1e-5, "%s fast vs reference: %g", kind ? "adamw" : "sgd", e);
        ct_optimizer_free(a);
        ct_optimizer_free(b);
        ct_plan_free(p1);
        ct_plan_free(p2);
        ct_graph_free(g);
        ct_context_free(ctx);
    }
}

TEST(conversions_round_trip) {
    /* bf16: round to nearest even, NaN preserved */
    CHECK(ct_f32_to_bf16(1.0f) == 0x3f80);
    CHECK(ct_bf16_to_f32(ct_f32_to_bf16(3.140625f)) == 3.140625f);
    float tie;
    uint32_t u = 0x3f808000u; /* exactly between 0x3f80 and 0x3f81: even is 0x3f80 */
    memcpy(&tie, &u, 4);
    CHECK(ct_f32_to_bf16(tie) == 0x3f80);
    u = 0x3f818000u;
    memcpy(&tie, &u, 4);
    CHECK(ct_f32_to_bf16(tie) == 0x3f82);
    CHECK(isnan(ct_bf16_to_f32(ct_f32_to_bf16(NAN))));
    CHECK(isinf(ct_bf16_to_f32(ct_f32_to_bf16(INFINITY))));
    /* fp16 */
    CHECK(ct_f32_to_f16(1.0f) == 0x3c00);
    CHECK(ct_f32_to_f16(65504.0f) == 0x7bff);
    CHECK(ct_f32_to_f16(70000.0f) == 0x7c00);
    CHECK(ct_f16_to_f32(0x0001) == 5.9604644775390625e-08f); /* smallest subnormal */
    CHECK(ct_f32_to_f16(5.9604644775390625e-08f) == 0x0001);
    CHECK(ct_f32_to_f16(2.98e-08f) == 0x0000);                 /* below half of the smallest: rounds to 0 */
    CHECK(isnan(ct_f16_to_f32(ct_f32_to_f16(NAN))));
    for (uint32_t h = 0; h < 0x7c00; h++) /* every finite positive half round-trips */
        CHECK_MSG(ct_f32_to_f16(ct_f16_to_f32((uint16_t)h)) == h, "half 0x%04x", h);
}

typedef struct {
    int calls[16];
    float snapshot[16];
    int order[16], n;
} ready_log;

static void on_ready(void *user, int idx, const ct_tensor *grad) {
    ready_log *l = user;
    if (idx < 0 || idx >= 16) return;
    l->calls[idx]++;
    l->snapshot[idx] = ((const float *)grad->data)[0];
    l->order[l->n++] = idx;
}

/* The executor reports each parameter's gradient as soon as it is final,
 * in backward order (last layer first), and the value it shows is final. */
TEST(grad_ready_callback_fires_once_per_param_in_backward_order) {
    ct_context *ctx = test_ctx(-1, 1);
    test_model tm;
    CHECK_OK(ctx, test_model_build(ctx, 2, (int64_t[]){8, 12}, 2, (int64_t[]){16, 16}, 4, 0, 0, &tm));
    ct_plan *p = tm.plan;
    ready_log log;
    memset(&log, 0, sizeof log);
    ct_plan_set_grad_ready(p, on_ready, &log);
    CHECK_OK(ctx, ct_plan_forward(p, 1));
    CHECK_OK(ctx, ct_plan_backward(p));
    int np = ct_plan_num_params(p);
    CHECK(np == 6 && log.n == np);
    for (int i = 0; i < np; i++) {
        ct_tensor gt;
        ct_plan_param_info(p, i, NULL, NULL, &gt);
        CHECK(log.calls[i] == 1);
        CHECK(log.snapshot[i] == ((float *)gt.data)[0]);
    }
    /* fc3 (params 4, 5) is final before fc1 (params 0, 1) */
    int pos[16];
    for (int i = 0; i < log.n; i++) pos[log.order[i]] = i;
    CHECK(pos[4] < pos[0] && pos[5] < pos[1]);
    ct_plan_free(p);
    ct_context_free(ctx);
}

/* An input declared after the model must not share memory with activations
 * (regression: the planner once placed inputs at their declaration time). */
TEST(inputs_declared_late_keep_their_values) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_graph *g;
    CHECK_OK(ctx, ct_graph_create(ctx, &g));
    ct_node x, y, logits, loss;
    CHECK_OK(ctx, ct_input(g, "x", CT_F32, 2, (int64_t[]){8, 16}, &x));
    CHECK_OK(ctx, ct_model_mlp(g, x, 1, (int64_t[]){32}, 4, CT_ACT_RELU, 0, &logits));
    CHECK_OK(ctx, ct_input(g, "y", CT_I32, 1, (int64_t[]){8}, &y));
    CHECK_OK(ctx, ct_cross_entropy(g, logits, y, 0, -100, &loss));
    ct_plan *p;
    CHECK_OK(ctx, ct_compile(g, loss, 0, NULL, NULL, &p));
    ct_tensor tx, ty;
    ct_plan_tensor(p, x, &tx);
    ct_plan_tensor(p, y, &ty);
    test_fill_uniform(tx.data, 8 * 16, 4, -1, 1);
    for (int i = 0; i < 8; i++) ((int32_t *)ty.data)[i] = i % 4;
    CHECK_OK(ctx, ct_plan_forward(p, 1));
    CHECK_OK(ctx, ct_plan_backward(p));
    for (int i = 0; i < 8; i++) CHECK(((int32_t *)ty.data)[i] == i % 4);
    ct_plan_free(p);
    ct_graph_free(g);
    ct_context_free(ctx);
}

/* Anomaly mode names the first op that produces NaN/inf, with its inputs'
 * statistics; without it the NaN silently flows on. */
TEST(anomaly_mode_names_the_op_that_made_a_nan) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_graph *g;
    CHECK_OK(ctx, ct_graph_create(ctx, &g));
    ct_node a, b, c, d, e;
    CHECK_OK(ctx, ct_input(g, "a", CT_F32, 2, (int64_t[]){3, 7}, &a));
    CHECK_OK(ctx, ct_input(g, "b", CT_F32, 2, (int64_t[]){3, 7}, &b));
    CHECK_OK(ctx, ct_scale(g, a, 2.0f, &c));
    CHECK_OK(ctx, ct_div(g, c, b, &d));
    CHECK_OK(ctx, ct_node_set_name(g, d, "ratio"));
    CHECK_OK(ctx, ct_relu(g, d, &e));
    CHECK_OK(ctx, ct_sum(g, e, 3u, 0, &e));
    ct_plan *p;
    CHECK_OK(ctx, ct_compile(g, CT_NONE, 1, &e, NULL, &p));
    ct_tensor ta, tb, te;
    ct_plan_tensor(p, a, &ta);
    ct_plan_tensor(p, b, &tb);
    ct_plan_tensor(p, e, &te);
    test_fill_uniform(ta.data, 21, 1, 1, 2);
    test_fill_uniform(tb.data, 21, 2, 1, 2);
    ((float *)ta.data)[9] = 0.0f;
    ((float *)tb.data)[9] = 0.0f; /* 0 / 0 */
    CHECK_OK(ctx, ct_plan_forward(p, 1));
    CHECK(isnan(*(float *)te.data)); /* without anomaly mode the NaN reaches the result */
    ct_plan_set_anomaly(p, 1);
    CHECK(ct_plan_forward(p, 1) == CT_E_NONFINITE);
    const char *m = ct_context_last_error(ctx);
    CHECK_MSG(strstr(m, "'ratio'") && strstr(m, "NaN at element 9") && strstr(m, "forward") &&
                  strstr(m, "'b' [3, 7]") && strstr(m, "1 zeros"),
              "%s", m);
    ct_plan_set_anomaly(p, 0);
    CHECK_OK(ctx, ct_plan_forward(p, 1));
    ct_plan_free(p);
    ct_graph_free(g);
    ct_context_free(ctx);
}

/* add+layernorm (fusion level 1): the sum's node runs no kernel (ADD_LN_SUM), the fused layernorm writes its
 * buffer. Anomaly mode checks the sum once written (an inf in it is named by the sum's node, before the
 * layernorm's NaN), and not when its own node runs: a stale inf of the step before is no anomaly. */
TEST(anomaly_mode_checks_a_sum_written_by_add_layernorm) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_graph *g;
    CHECK_OK(ctx, ct_graph_create(ctx, &g));
    ct_node a, b, gm, bt, s, h, t;
    CHECK_OK(ctx, ct_input(g, "a", CT_F32, 2, (int64_t[]){3, 16}, &a));
    CHECK_OK(ctx, ct_input(g, "b", CT_F32, 2, (int64_t[]){3, 16}, &b));
    CHECK_OK(ctx, ct_input(g, "gamma", CT_F32, 1, (int64_t[]){16}, &gm));
    CHECK_OK(ctx, ct_input(g, "beta", CT_F32, 1, (int64_t[]){16}, &bt));
    CHECK_OK(ctx, ct_add(g, a, b, &s));
    CHECK_OK(ctx, ct_node_set_name(g, s, "resid"));
    CHECK_OK(ctx, ct_layernorm(g, s, gm, bt, 1e-5f, &h));
    CHECK_OK(ctx, ct_add(g, s, h, &t)); /* the sum read again after the layernorm */
    ct_compile_opts co;
    ct_compile_opts_default(&co);
    co.fusion_level = 1;
    ct_plan *p;
    CHECK_OK(ctx, ct_compile(g, CT_NONE, 1, &t, &co, &p));
    CHECK(ct_plan_fusion_count(p, "add+layernorm") == 1);
    ct_tensor ta, tb, tg, tt;
    ct_plan_tensor(p, a, &ta);
    ct_plan_tensor(p, b, &tb);
    ct_plan_tensor(p, gm, &tg);
    ct_plan_tensor(p, bt, &tt);
    test_fill_uniform(ta.data, 48, 1, -1, 1);
    test_fill_uniform(tb.data, 48, 2, -1, 1);
    test_fill_uniform(tg.data, 16, 3, 0.5f, 1.5f);
    test_fill_uniform(tt.data, 16, 4, -1, 1);
    ((float *)ta.data)[21] = INFINITY;
    CHECK_OK(ctx, ct_plan_forward(p, 1)); /* the sum's buffer now holds the inf */
    ct_plan_set_anomaly(p, 1);
    CHECK(ct_plan_forward(p, 1) == CT_E_NONFINITE);
    const char *m = ct_context_last_error(ctx);
    CHECK_MSG(strstr(m, "'resid'") && strstr(m, "inf at element 21") && strstr(m, "'a' [3, 16]"), "%s", m);
    ((float *)ta.data)[21] = 0.5f;
    CHECK_OK(ctx, ct_plan_forward(p, 1)); /* finite now: the stale inf seen before the fused node runs is none */
    ct_plan_free(p);
    ct_graph_free(g);
    ct_context_free(ctx);
}

/* "THPeligible" of the mapping that holds p in /proc/self/smaps: 1, 0, or -1 when not found */
static int thp_eligible(const void *p) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return -1;
    char line[512];
    int in = 0, r = -1;
    while (r < 0 && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' '))
            in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
        else if (in && !strncmp(line, "THPeligible:", 12)) r = atoi(line + 12);
    }
    fclose(f);
    return r;
}

/* ct_context_opts.huge_pages: a block of >= 4 MiB from the default allocator is asked onto transparent huge pages
 * (MADV_HUGEPAGE), one with the option off is not; what the kernel grants depends on its THP mode. */
TEST(large_blocks_ask_for_huge_pages) {
    char mode[128] = "";
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (f) {
        if (!fgets(mode, sizeof mode, f)) mode[0] = 0;
        fclose(f);
    }
    for (int on = 0; on < 2; on++) {
        ct_context_opts o;
        ct_context_opts_default(&o);
        CHECK(o.huge_pages == 1);
        o.huge_pages = on;
        ct_context *ctx;
        if (getenv("CT_HUGE_PAGES")) unsetenv("CT_HUGE_PAGES");
        CHECK(ct_context_create(&o, &ctx) == CT_OK);
        CHECK(ct_context_huge_pages(ctx) == on);
        void *big = NULL, *small = NULL;
        CHECK_OK(ctx, ct_alloc(ctx, (size_t)8 << 20, &big));
        CHECK_OK(ctx, ct_alloc(ctx, (size_t)64 << 10, &small));
        CHECK(((uintptr_t)big & 63) == 0 && ((uintptr_t)small & 63) == 0);
        memset(big, 1, (size_t)8 << 20);
        const int e = thp_eligible((char *)big + ((size_t)4 << 20));
        if (strstr(mode, "[madvise]")) CHECK_MSG(e == on, "THPeligible %d with huge_pages %d (THP mode: %s)", e, on, mode);
        else if (strstr(mode, "[never]")) CHECK(e <= 0);
        if (on) {
            /* the block's pages start on a 2 MiB boundary (after the allocator's header) */
            CHECK(((uintptr_t)big & (((uintptr_t)2 << 20) - 1)) <= 4096);
            /* pages ZeRO gives back are not huge pages any more (khugepaged would fold them back in), the rest are */
            char *a, *d;
            float *fl = big;
            const size_t nf = ((size_t)8 << 20) / sizeof(float);
            CHECK(ct_release_pages(fl, nf / 4, 3 * nf / 4, &a, &d) == 1);
            CHECK(fl[nf / 2] == 0.0f && fl[nf / 4 - 1] != 0.0f);
            if (strstr(mode, "[madvise]")) {
                CHECK_MSG(thp_eligible(fl + nf / 2) == 0, "released pages still THP-eligible");
                CHECK(thp_eligible((char *)big + 64) == 1);
            }
        }
        ct_free(ctx, big);
        ct_free(ctx, small);
        ct_context_free(ctx);
    }
    /* the environment overrides the option; a bad value is refused */
    setenv("CT_HUGE_PAGES", "0", 1);
    ct_context *ctx;
    CHECK(ct_context_create(NULL, &ctx) == CT_OK);
    CHECK(ct_context_huge_pages(ctx) == 0);
    ct_context_free(ctx);
    setenv("CT_HUGE_PAGES", "yes", 1);
    CHECK(ct_context_create(NULL, &ctx) == CT_E_CONFIG);
    char msg[256];
    CHECK(ct_context_env_check(msg, sizeof msg) == CT_E_CONFIG && strstr(msg, "CT_HUGE_PAGES"));
    unsetenv("CT_HUGE_PAGES");
    /* a caller's allocator is used as it is */
    ct_context_opts o;
    ct_context_opts_default(&o);
    const ct_allocator mine = {test_plain_alloc, test_plain_free, NULL};
    o.allocator = &mine;
    CHECK(ct_context_create(&o, &ctx) == CT_OK);
    CHECK(ct_context_huge_pages(ctx) == 0);
    ct_context_free(ctx);
}

TEST_MAIN(T(large_blocks_ask_for_huge_pages), T(anomaly_mode_names_the_op_that_made_a_nan), T(anomaly_mode_checks_a_sum_written_by_add_layernorm), T(inputs_declared_late_keep_their_values), T(grad_ready_callback_fires_once_per_param_in_backward_order), T(status_codes_have_names_and_advice), T(shape_mismatch_is_a_clear_error), T(dtype_mismatch_is_e40005),
          T(bad_labels_and_ids_fail_at_run_time_with_a_message), T(memory_budget_gives_e60003),
          T(training_step_after_first_allocates_nothing), T(optimizer_rejects_bad_values),
          T(optimizer_fast_matches_reference), T(conversions_round_trip))
