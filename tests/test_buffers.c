/* tests/test_buffers.c - non-trainable state (batchnorm running statistics):
 * looking parameters and buffers up by name (ct_plan_num_buffers,
 * ct_plan_buffer_info, ct_plan_find_param, ct_plan_find_buffer), and the
 * plan switch that keeps a training-mode forward from updating the running
 * statistics (ct_plan_set_update_running_stats), in every kernel slot. */
#include "test.h"

TEST(buffers_and_params_are_found_by_name) {
    ct_context *ctx = test_ctx(-1, 1);
    test_model m;
    /* CNN with 2 blocks: bn1/bn2 running_mean / running_var */
    CHECK_OK(ctx, test_model_build(ctx, 4, (int64_t[]){4, 1, 8, 8}, 2, (int64_t[]){3, 5}, 3, 0, 0, &m));
    CHECK(ct_plan_num_buffers(m.plan) == 4);
    const char *want[4] = {"bn1.running_mean", "bn1.running_var", "bn2.running_mean", "bn2.running_var"};
    float *arena;
    size_t nb;
    CHECK_OK(ctx, ct_plan_buffer_arena(m.plan, &arena, &nb));
    for (int i = 0; i < 4; i++) {
        const char *name;
        ct_tensor v;
        CHECK_OK(ctx, ct_plan_buffer_info(m.plan, i, &name, &v));
        CHECK_MSG(!strcmp(name, want[i]), "buffer %d is '%s'", i, name);
        CHECK(v.ndim == 1 && v.shape[0] == (i < 2 ? 3 : 5) && v.dtype == CT_F32);
        CHECK((float *)v.data >= arena && (float *)v.data + v.shape[0] <= arena + nb);
        /* init: running_mean 0, running_var 1 */
        CHECK(((float *)v.data)[0] == (i % 2 ? 1.0f : 0.0f));
        int idx = -1;
        CHECK_OK(ctx, ct_plan_find_buffer(m.plan, want[i], &idx));
        CHECK(idx == i);
    }
    CHECK_OK(ctx, ct_plan_buffer_info(m.plan, 0, NULL, NULL));
    CHECK(ct_plan_buffer_info(m.plan, 4, NULL, NULL) == CT_E_INVALID_ARG);
    CHECK(ct_plan_buffer_info(m.plan, -1, NULL, NULL) == CT_E_INVALID_ARG);
    int idx = 77;
    CHECK(ct_plan_find_buffer(m.plan, "bn3.running_mean", &idx) == CT_E_INVALID_ARG);
    CHECK(idx == 77 && strstr(ct_context_last_error(ctx), "bn3.running_mean"));
    CHECK(ct_plan_find_buffer(m.plan, "bn1.weight", &idx) == CT_E_INVALID_ARG); /* a param, not a buffer */
    CHECK(ct_plan_find_buffer(m.plan, NULL, &idx) == CT_E_INVALID_ARG);
    /* params: every name maps back to its index */
    for (int i = 0; i < ct_plan_num_params(m.plan); i++) {
        const char *name;
        CHECK_OK(ctx, ct_plan_param_info(m.plan, i, &name, NULL, NULL));
        CHECK_OK(ctx, ct_plan_find_param(m.plan, name, &idx));
        CHECK(idx == i);
    }
    CHECK_OK(ctx, ct_plan_find_param(m.plan, "fc.bias", NULL));
    CHECK(ct_plan_find_param(m.plan, "bn1.running_var", &idx) == CT_E_INVALID_ARG);
    CHECK(strstr(ct_context_last_error(ctx), "bn1.running_var"));
    /* a training forward moves the running stats seen through buffer_info */
    ct_tensor rm;
    CHECK_OK(ctx, ct_plan_find_buffer(m.plan, "bn2.running_mean", &idx));
    CHECK_OK(ctx, ct_plan_buffer_info(m.plan, idx, NULL, &rm));
    float before = ((float *)rm.data)[1];
    CHECK_OK(ctx, ct_plan_forward(m.plan, 1));
    CHECK(((float *)rm.data)[1] != before);
    ct_plan_free(m.plan);
    /* an MLP has no buffers */
    CHECK_OK(ctx, test_model_build(ctx, 2, (int64_t[]){4, 6}, 1, (int64_t[]){5}, 3, 0, 0, &m));
    CHECK(ct_plan_num_buffers(m.plan) == 0);
    CHECK(ct_plan_buffer_info(m.plan, 0, NULL, NULL) == CT_E_INVALID_ARG);
    ct_plan_free(m.plan);
    ct_context_free(ctx);
}

/* x4 (4, 3, 6, 6) and x2 (8, 5) through one batchnorm each (the plane path
 * and the small-spatial column path of the SIMD kernel), loss = sum(y^2). */
typedef struct {
    ct_plan *plan;
    ct_node y4, y2;
} bn_model;

static ct_status bn_build(ct_context *ctx, int accumulate, bn_model *m) {
    ct_graph *g;
    ct_status s = ct_graph_create(ctx, &g);
    if (s != CT_OK) return s;
    ct_node x4, x2, g4, b4, rm4, rv4, g2, b2, rm2, rv2, q4, q2, s4, s2, loss;
    s = ct_input(g, "x4", CT_F32, 4, (int64_t[]){4, 3, 6, 6}, &x4);
    if (s == CT_OK) s = ct_input(g, "x2", CT_F32, 2, (int64_t[]){8, 5}, &x2);
    if (s == CT_OK) s = ct_param(g, "bn4.weight", 1, (int64_t[]){3}, CT_INIT_ONES, 1, &g4);
    if (s == CT_OK) s = ct_param(g, "bn4.bias", 1, (int64_t[]){3}, CT_INIT_ZEROS, 1, &b4);
    if (s == CT_OK) s = ct_buffer(g, "bn4.running_mean", 1, (int64_t[]){3}, CT_INIT_ZEROS, &rm4);
    if (s == CT_OK) s = ct_buffer(g, "bn4.running_var", 1, (int64_t[]){3}, CT_INIT_ONES, &rv4);
    if (s == CT_OK) s = ct_param(g, "bn2.weight", 1, (int64_t[]){5}, CT_INIT_ONES, 1, &g2);
    if (s == CT_OK) s = ct_param(g, "bn2.bias", 1, (int64_t[]){5}, CT_INIT_ZEROS, 1, &b2);
    if (s == CT_OK) s = ct_buffer(g, "bn2.running_mean", 1, (int64_t[]){5}, CT_INIT_ZEROS, &rm2);
    if (s == CT_OK) s = ct_buffer(g, "bn2.running_var", 1, (int64_t[]){5}, CT_INIT_ONES, &rv2);
    if (s == CT_OK) s = ct_batchnorm(g, x4, g4, b4, rm4, rv4, 0.1f, 1e-5f, &m->y4);
    if (s == CT_OK) s = ct_batchnorm(g, x2, g2, b2, rm2, rv2, 0.1f, 1e-5f, &m->y2);
    if (s == CT_OK) s = ct_mul(g, m->y4, x4, &q4);
    if (s == CT_OK) s = ct_mul(g, m->y2, x2, &q2);
    if (s == CT_OK) s = ct_sum(g, q4, 0xf, 0, &s4);
    if (s == CT_OK) s = ct_sum(g, q2, 0x3, 0, &s2);
    if (s == CT_OK) s = ct_add(g, s4, s2, &loss);
    ct_compile_opts o;
    ct_compile_opts_default(&o);
    o.accumulate_grads = accumulate;
    if (s == CT_OK) s = ct_compile(g, loss, 2, (ct_node[]){m->y4, m->y2}, &o, &m->plan);
    if (s == CT_OK) {
        ct_tensor t;
        ct_plan_tensor(m->plan, x4, &t);
        test_fill_uniform(t.data, (size_t)ct_tensor_numel(&t), 11, -1, 3);
        ct_plan_tensor(m->plan, x2, &t);
        test_fill_uniform(t.data, (size_t)ct_tensor_numel(&t), 12, -2, 1);
    }
    ct_graph_free(g);
    return s;
}

static int same_bytes(const void *a, const void *b, size_t n) { return !memcmp(a, b, n); }

/* one slot: a kept-stats training step equals an updating one except that
 * the buffers do not move; turning the switch back on moves them again */
static void check_keep_stats(int isa, const char *label) {
    ct_context *ctx = test_ctx(isa, 0);
    bn_model a, b;
    CHECK_OK(ctx, bn_build(ctx, 0, &a));
    CHECK_OK(ctx, bn_build(ctx, 0, &b));
    CHECK(ct_plan_update_running_stats(a.plan) == 1);
    ct_plan_set_update_running_stats(b.plan, 0);
    CHECK(ct_plan_update_running_stats(b.plan) == 0);
    float *ba, *bb;
    size_t nb;
    CHECK_OK(ctx, ct_plan_buffer_arena(a.plan, &ba, &nb));
    CHECK_OK(ctx, ct_plan_buffer_arena(b.plan, &bb, NULL));
    float *before = malloc(nb * sizeof(float));
    memcpy(before, bb, nb * sizeof(float));
    for (int step = 0; step < 2; step++) {
        CHECK_OK(ctx, ct_plan_forward(a.plan, 1));
        CHECK_OK(ctx, ct_plan_backward(a.plan));
        CHECK_OK(ctx, ct_plan_forward(b.plan, 1));
        CHECK_OK(ctx, ct_plan_backward(b.plan));
    }
    CHECK_MSG(same_bytes(bb, before, nb * sizeof(float)), "%s: running stats moved with the update off", label);
    CHECK_MSG(!same_bytes(ba, before, nb * sizeof(float)), "%s: running stats did not move with the update on", label);
    ct_node outs[2] = {a.y4, a.y2};
    for (int i = 0; i < 2; i++) {
        ct_tensor ta, tb;
        CHECK_OK(ctx, ct_plan_tensor(a.plan, outs[i], &ta));
        CHECK_OK(ctx, ct_plan_tensor(b.plan, outs[i], &tb));
        CHECK_MSG(same_bytes(ta.data, tb.data, ct_tensor_nbytes(&ta)), "%s: output %d differs", label, i);
    }
    float *ga, *gb;
    size_t np;
    CHECK_OK(ctx, ct_plan_param_arena(a.plan, NULL, &ga, &np));
    CHECK_OK(ctx, ct_plan_param_arena(b.plan, NULL, &gb, NULL));
    CHECK_MSG(same_bytes(ga, gb, np * sizeof(float)), "%s: gradients differ", label);
    /* on again: b's stats now move like a's first step did */
    ct_plan_set_update_running_stats(b.plan, 1);
    CHECK_OK(ctx, ct_plan_forward(b.plan, 1));
    CHECK_MSG(!same_bytes(bb, before, nb * sizeof(float)), "%s: running stats did not move after switching on", label);
    free(before);
    printf("    %-7s kernel %s: running stats kept bit for bit, outputs and gradients identical\n", label,
           ct_plan_kernel_name(a.plan, a.y4));
    ct_plan_free(a.plan);
    ct_plan_free(b.plan);
    ct_context_free(ctx);
}

TEST(keep_running_stats_in_every_kernel) {
    check_keep_stats(CT_ISA_REF, "ref");
    ct_context *probe = test_ctx(-1, 0);
    int isa = ct_context_isa(probe);
    ct_context_free(probe);
    if (isa >= CT_ISA_AVX2) check_keep_stats(CT_ISA_AVX2, "avx2");
    else printf("    skipped avx2: not available\n");
    if (isa >= CT_ISA_AVX512) check_keep_stats(CT_ISA_AVX512, "avx512");
    else printf("    skipped avx512: not available\n");
}

/* accumulation over 2 micro-batches, stats updated on the first only: the
 * running stats equal those of one plain training forward of that batch */
TEST(accumulated_step_updates_running_stats_once) {
    ct_context *ctx = test_ctx(-1, 1);
    bn_model acc, one;
    CHECK_OK(ctx, bn_build(ctx, 1, &acc));
    CHECK_OK(ctx, bn_build(ctx, 0, &one));
    CHECK_OK(ctx, ct_plan_zero_grads(acc.plan));
    for (int micro = 0; micro < 2; micro++) {
        ct_plan_set_update_running_stats(acc.plan, micro == 0);
        CHECK_OK(ctx, ct_plan_forward(acc.plan, 1));
        CHECK_OK(ctx, ct_plan_backward(acc.plan));
    }
    CHECK_OK(ctx, ct_plan_forward(one.plan, 1));
    float *b1, *b2;
    size_t nb;
    CHECK_OK(ctx, ct_plan_buffer_arena(acc.plan, &b1, &nb));
    CHECK_OK(ctx, ct_plan_buffer_arena(one.plan, &b2, NULL));
    CHECK(same_bytes(b1, b2, nb * sizeof(float)));
    ct_plan_free(acc.plan);
    ct_plan_free(one.plan);
    ct_context_free(ctx);
}

/* recompute copies never update; with the switch off neither does the original */
TEST(keep_running_stats_with_recompute) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_compile_opts o;
    ct_compile_opts_default(&o);
    o.recompute_ops = CT_RECOMPUTE_CHEAP;
    test_model m;
    CHECK_OK(ctx, test_model_build_opts(ctx, 4, (int64_t[]){4, 1, 8, 8}, 2, (int64_t[]){3, 5}, 3, 0, 0, &o, &m));
    ct_plan_set_update_running_stats(m.plan, 0);
    float *bb;
    size_t nb;
    CHECK_OK(ctx, ct_plan_buffer_arena(m.plan, &bb, &nb));
    float *before = malloc(nb * sizeof(float));
    memcpy(before, bb, nb * sizeof(float));
    CHECK_OK(ctx, ct_plan_forward(m.plan, 1));
    CHECK_OK(ctx, ct_plan_backward(m.plan));
    int same = same_bytes(before, bb, nb * sizeof(float));
    free(before);
    CHECK(same);
    ct_plan_free(m.plan);
    ct_context_free(ctx);
}

TEST_MAIN(T(buffers_and_params_are_found_by_name), T(keep_running_stats_in_every_kernel),
          T(accumulated_step_updates_running_stats_once), T(keep_running_stats_with_recompute))
