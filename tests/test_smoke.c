/* tests/test_smoke.c - end-to-end smoke test of the core: build an MLP,
 * compile, run forward/backward, check loss decreases under plain SGD. */
#include "test.h"

TEST(mlp_loss_decreases) {
    ct_context *ctx = test_ctx(-1, 1);
    test_model tm;
    CHECK_OK(ctx, test_model_build(ctx, 2, (int64_t[]){16, 20}, 1, (int64_t[]){32}, 5, 0, 0, &tm));
    ct_plan *p = tm.plan;
    float first = 0, last = 0;
    for (int it = 0; it < 300; it++) {
        CHECK_OK(ctx, ct_plan_forward(p, 1));
        CHECK_OK(ctx, ct_plan_backward(p));
        float l;
        CHECK_OK(ctx, ct_plan_loss(p, &l));
        if (it == 0) first = l;
        last = l;
        float *w, *gr;
        size_t n;
        ct_plan_param_arena(p, &w, &gr, &n);
        for (size_t i = 0; i < n; i++) w[i] -= 0.1f * gr[i];
    }
    CHECK_MSG(last < 0.5f * first, "loss %g -> %g", first, last);
    ct_plan_free(p);
    ct_context_free(ctx);
}

TEST_MAIN(T(mlp_loss_decreases))
