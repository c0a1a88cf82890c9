/* tests/test_mlp.c - ct_model_mlp's activation option: every ct_activation
 * gives bit for bit the graph built by hand from the op it names (forward
 * output and every gradient), CT_ACT_RELU is the classic ReLU MLP, the names
 * parse and print, and a bad activation is a clear error. The ops themselves
 * are checked (finite differences, fast vs reference) in test_ops.c. */
#include "test.h"

#define B 6
#define IN 9
#define H1 7
#define NCLS 4

/* loss = cross_entropy(mlp(x)); by_hand: the same graph from ct_linear + the op */
static ct_status build(ct_context *ctx, ct_activation act, int by_hand, ct_plan **p, ct_node *logits_out) {
    ct_graph *g;
    ct_status s = ct_graph_create(ctx, &g);
    if (s != CT_OK) return s;
    ct_node x, y, logits = CT_NONE, loss, w1, b1, w2, b2, h;
    s = ct_input(g, "x", CT_F32, 2, (int64_t[]){B, IN}, &x);
    if (s == CT_OK) s = ct_input(g, "y", CT_I32, 1, (int64_t[]){B}, &y);
    if (s == CT_OK && !by_hand) s = ct_model_mlp(g, x, 1, (int64_t[]){H1}, NCLS, act, 0.0f, &logits);
    if (s == CT_OK && by_hand) {
        s = ct_param(g, "fc1.weight", 2, (int64_t[]){H1, IN}, CT_INIT_KAIMING_UNIFORM, IN, &w1);
        if (s == CT_OK) s = ct_param(g, "fc1.bias", 1, (int64_t[]){H1}, CT_INIT_KAIMING_UNIFORM, IN, &b1);
        if (s == CT_OK) s = ct_linear(g, x, w1, b1, &h);
        if (s == CT_OK) {
            switch (act) {
            case CT_ACT_RELU: s = ct_relu(g, h, &h); break;
            case CT_ACT_GELU: s = ct_gelu(g, h, 0, &h); break;
            case CT_ACT_GELU_TANH: s = ct_gelu(g, h, 1, &h); break;
            case CT_ACT_SILU: s = ct_silu(g, h, &h); break;
            default: s = ct_tanh(g, h, &h); break;
            }
        }
        if (s == CT_OK) s = ct_param(g, "fc2.weight", 2, (int64_t[]){NCLS, H1}, CT_INIT_KAIMING_UNIFORM, H1, &w2);
        if (s == CT_OK) s = ct_param(g, "fc2.bias", 1, (int64_t[]){NCLS}, CT_INIT_KAIMING_UNIFORM, H1, &b2);
        if (s == CT_OK) s = ct_linear(g, h, w2, b2, &logits);
    }
    if (s == CT_OK) s = ct_cross_entropy(g, logits, y, 0.0f, -100, &loss);
    if (s == CT_OK) s = ct_compile(g, loss, 1, &logits, NULL, p);
    ct_graph_free(g);
    if (s != CT_OK) return s;
    *logits_out = logits;
    ct_tensor tx, ty;
    ct_plan_tensor(*p, x, &tx);
    ct_plan_tensor(*p, y, &ty);
    test_fill_uniform(tx.data, B * IN, 5, -2, 2);
    for (int i = 0; i < B; i++) ((int32_t *)ty.data)[i] = i % NCLS;
    return CT_OK;
}

TEST(every_activation_equals_the_hand_built_graph) {
    for (int a = 0; a < CT_ACT_COUNT; a++) {
        ct_context *ctx = test_ctx(-1, 1);
        ct_plan *pm, *ph;
        ct_node lm, lh;
        CHECK_OK(ctx, build(ctx, (ct_activation)a, 0, &pm, &lm));
        CHECK_OK(ctx, build(ctx, (ct_activation)a, 1, &ph, &lh));
        CHECK(ct_plan_num_params(pm) == 4 && ct_plan_num_params(ph) == 4);
        /* same parameter values (the init stream depends on node ids) */
        float *wm, *wh;
        size_t nm, nh;
        CHECK_OK(ctx, ct_plan_param_arena(pm, &wm, NULL, &nm));
        CHECK_OK(ctx, ct_plan_param_arena(ph, &wh, NULL, &nh));
        CHECK(nm == nh);
        memcpy(wh, wm, nm * sizeof(float));
        CHECK_OK(ctx, ct_plan_forward(pm, 1));
        CHECK_OK(ctx, ct_plan_backward(pm));
        CHECK_OK(ctx, ct_plan_forward(ph, 1));
        CHECK_OK(ctx, ct_plan_backward(ph));
        ct_tensor om, oh;
        CHECK_OK(ctx, ct_plan_tensor(pm, lm, &om));
        CHECK_OK(ctx, ct_plan_tensor(ph, lh, &oh));
        CHECK_MSG(!memcmp(om.data, oh.data, B * NCLS * sizeof(float)), "%s: logits differ", ct_activation_name(a));
        for (int i = 0; i < 4; i++) {
            ct_tensor gm, gh;
            const char *n1, *n2;
            CHECK_OK(ctx, ct_plan_param_info(pm, i, &n1, NULL, &gm));
            CHECK_OK(ctx, ct_plan_param_info(ph, i, &n2, NULL, &gh));
            CHECK(!strcmp(n1, n2));
            CHECK_MSG(!memcmp(gm.data, gh.data, (size_t)ct_tensor_numel(&gm) * sizeof(float)), "%s: grad of %s differs",
                      ct_activation_name(a), n1);
        }
        ct_plan_free(pm);
        ct_plan_free(ph);
        ct_context_free(ctx);
    }
}

TEST(activations_differ_from_each_other) {
    /* the option really reaches the graph: relu and tanh give other logits */
    ct_context *ctx = test_ctx(-1, 1);
    ct_plan *p0, *p1;
    ct_node l0, l1;
    CHECK_OK(ctx, build(ctx, CT_ACT_RELU, 0, &p0, &l0));
    CHECK_OK(ctx, build(ctx, CT_ACT_TANH, 0, &p1, &l1));
    float *w0, *w1;
    size_t n;
    CHECK_OK(ctx, ct_plan_param_arena(p0, &w0, NULL, &n));
    CHECK_OK(ctx, ct_plan_param_arena(p1, &w1, NULL, &n));
    memcpy(w1, w0, n * sizeof(float));
    CHECK_OK(ctx, ct_plan_forward(p0, 0));
    CHECK_OK(ctx, ct_plan_forward(p1, 0));
    ct_tensor a, b;
    CHECK_OK(ctx, ct_plan_tensor(p0, l0, &a));
    CHECK_OK(ctx, ct_plan_tensor(p1, l1, &b));
    CHECK(memcmp(a.data, b.data, B * NCLS * sizeof(float)) != 0);
    ct_plan_free(p0);
    ct_plan_free(p1);
    ct_context_free(ctx);
}

TEST(activation_names_parse_and_bad_values_are_errors) {
    ct_context *ctx = test_ctx(-1, 1);
    for (int a = 0; a < CT_ACT_COUNT; a++) {
        ct_activation back = CT_ACT_COUNT;
        CHECK_OK(ctx, ct_activation_parse(ctx, ct_activation_name((ct_activation)a), &back));
        CHECK(back == (ct_activation)a);
    }
    CHECK(!strcmp(ct_activation_name(CT_ACT_GELU_TANH), "gelu-tanh"));
    CHECK(!strcmp(ct_activation_name(CT_ACT_COUNT), "invalid"));
    ct_activation out;
    CHECK(ct_activation_parse(ctx, "swish", &out) == CT_E_INVALID_ARG);
    CHECK(strstr(ct_context_last_error(ctx), "swish") && strstr(ct_context_last_error(ctx), "gelu-tanh"));
    CHECK(ct_activation_parse(NULL, NULL, &out) == CT_E_INVALID_ARG);
    ct_graph *g;
    CHECK_OK(ctx, ct_graph_create(ctx, &g));
    ct_node x, lg;
    CHECK_OK(ctx, ct_input(g, "x", CT_F32, 2, (int64_t[]){2, 3}, &x));
    CHECK(ct_model_mlp(g, x, 1, (int64_t[]){4}, 2, CT_ACT_COUNT, 0.0f, &lg) == CT_E_INVALID_ARG);
    CHECK(strstr(ct_context_last_error(ctx), "activation"));
    CHECK(ct_activation_apply(g, x, (ct_activation)-1, &lg) == CT_E_INVALID_ARG);
    ct_graph_free(g);
    ct_context_free(ctx);
}

TEST_MAIN(T(every_activation_equals_the_hand_built_graph), T(activations_differ_from_each_other),
          T(activation_names_parse_and_bad_values_are_errors))
