/* tests/test_smoke.c - end-to-end smoke test of the core: build an MLP,
 * compile, run forward/backward, check loss decreases under plain SGD. */
#include "test.h"

TEST(mlp_loss_decreases) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_graph *g;
    CHECK_OK(ctx, ct_graph_create(ctx, &g));
    ct_node x, y, logits, loss;
    CHECK_OK(ctx, ct_input(g, "x", CT_F32, 2, (int64_t[]){16, 20}, &x));
    CHECK_OK(ctx, ct_input(g, "y", CT_I32, 1, (int64_t[]){16}, &y));
    CHECK_OK(ctx, ct_model_mlp(g, x, 1, (int64_t[]){32}, 5, 0.0f, &logits));
    CHECK_OK(ctx, ct_cross_entropy(g, logits, y, 0.0f, -100, &loss));
    ct_plan *p;
    CHECK_OK(ctx, ct_compile(g, loss, 1, &logits, NULL, &p));
    ct_tensor tx, ty;
    CHECK_OK(ctx, ct_plan_tensor(p, x, &tx));
    CHECK_OK(ctx, ct_plan_tensor(p, y, &ty));
    test_fill_uniform(tx.data, 16 * 20, 1, -1, 1);
    for (int i = 0; i < 16; i++) ((int32_t *)ty.data)[i] = i % 5;
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
    ct_graph_free(g);
    ct_context_free(ctx);
}

TEST_MAIN(T(mlp_loss_decreases))
