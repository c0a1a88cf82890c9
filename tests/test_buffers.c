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

TEST_MAIN(T(buffers_and_params_are_found_by_name))
