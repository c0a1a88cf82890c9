/* tests/test_clip.c - gradient clipping: ct_clip_grad_norm (2, inf, p) and
 * ct_clip_grad_value against torch.nn.utils.clip_grad_norm_ /
 * clip_grad_value_ (PyTorch 1.13 numbers hard-coded below), against a
 * double-precision formula, non-finite norms (reported, PyTorch's
 * error_if_nonfinite=False behaviour), thread-count independence, argument
 * checks and no allocation. */
#include <stdint.h>

#include "test.h"


/* The gradients the PyTorch script uses: tensor k, element j:
 * (((j * 37 + k * 11) % 101) - 50) / 17 in float32. */
static void fill_pattern(ct_plan *p) {
    float *ga;
    size_t n;
    ct_plan_param_arena(p, NULL, &ga, &n);
    memset(ga, 0, n * sizeof *ga);
    for (int k = 0; k < ct_plan_num_params(p); k++) {
        ct_tensor g;
        ct_plan_param_info(p, k, NULL, NULL, &g);
        float *d = g.data;
        for (int64_t j = 0; j < ct_tensor_numel(&g); j++) d[j] = (float)(((j * 37 + k * 11) % 101) - 50) / 17.0f;
    }
}

static float *grad_of(ct_plan *p, int k) {
    ct_tensor g;
    ct_plan_param_info(p, k, NULL, NULL, &g);
    return g.data;
}

static int close_rel(double a, double b, double tol) {
    if (isnan(b)) return isnan(a);
    if (isinf(b)) return a == b;
    return fabs(a - b) <= tol * fmax(fabs(b), 1e-30);
}

static const int ND3[3] = {2, 1, 3};
static const int64_t SH3[3][4] = {{7, 5}, {13}, {3, 4, 5}};

/* Generated once with PyTorch 1.13 (/usr/bin/python3), per case:
 *   ps = grads()  # the shapes above, p.grad from the fill_pattern formula
 *   t = torch.nn.utils.clip_grad_norm_(ps, max_norm, norm_type)
 *   print(repr(float(t)), ps[0].grad.flatten()[0], ps[1].grad.flatten()[5], ps[2].grad.flatten()[17])
 * and torch.nn.utils.clip_grad_value_(ps, 1.3) for the value case. */
TEST(clip_grad_norm_matches_pytorch) {
    static const struct {
        float max_norm, norm_type;
        double total, g0, g1, g2;
    } cases[] = {
        {1.0f, 2.0f, 17.844871520996094, -0.1648191213607788, 0.1483372002840042, -0.016481913626194},
        {2.0f, INFINITY, 2.941176414489746, -1.9999992847442627, 1.7999993562698364, -0.19999994337558746},
        {3.0f, 1.5f, 36.56421661376953, -0.24131597578525543, 0.217184379696846, -0.024131597951054573},
        {1000.0f, 2.0f, 17.844871520996094, -2.941176414489746, 2.6470587253570557, -0.29411765933036804},
    };
    ct_context *ctx = test_ctx(-1, 1);
    ct_plan *p;
    CHECK_OK(ctx, test_params_plan(ctx, 3, ND3, SH3, &p));
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        fill_pattern(p);
        float tn = -1;
        CHECK_OK(ctx, ct_clip_grad_norm(p, cases[c].max_norm, cases[c].norm_type, &tn));
        double got[3] = {grad_of(p, 0)[0], grad_of(p, 1)[5], grad_of(p, 2)[17]};
        double want[3] = {cases[c].g0, cases[c].g1, cases[c].g2};
        CHECK_MSG(close_rel(tn, cases[c].total, 1e-6), "case %zu: total norm %.9g, PyTorch %.9g", c, (double)tn,
                  cases[c].total);
        for (int i = 0; i < 3; i++)
            CHECK_MSG(close_rel(got[i], want[i], 1e-6), "case %zu value %d: %.9g, PyTorch %.9g", c, i, got[i], want[i]);
    }
    /* clip_grad_value_(ps, 1.3) */
    fill_pattern(p);
    CHECK_OK(ctx, ct_clip_grad_value(p, 1.3f));
    CHECK(grad_of(p, 0)[0] == -1.2999999523162842f && grad_of(p, 1)[5] == 1.2999999523162842f &&
          grad_of(p, 2)[17] == (float)-0.29411765933036804);
    ct_plan_free(p);
    ct_context_free(ctx);
}

/* Non-finite gradients: the norm is returned, nothing fails, and the
 * gradients are what PyTorch leaves (error_if_nonfinite=False):
 *   inf in w1[3], norm 2 or inf: total inf; finite grads -> (-)0, w1[3] -> nan
 *   nan in w1[3], norm 2 or inf: total nan; every grad -> nan
 * The arena's padding between tensors stays 0. */
TEST(clip_grad_norm_nonfinite_is_reported) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_plan *p;
    CHECK_OK(ctx, test_params_plan(ctx, 3, ND3, SH3, &p));
    float *ga;
    size_t n;
    ct_plan_param_arena(p, NULL, &ga, &n);
    for (int bad = 0; bad < 2; bad++)
        for (int inf_norm = 0; inf_norm < 2; inf_norm++) {
            fill_pattern(p);
            grad_of(p, 1)[3] = bad ? NAN : INFINITY;
            float tn = 0;
            CHECK_OK(ctx, ct_clip_grad_norm(p, 1.0f, inf_norm ? INFINITY : 2.0f, &tn));
            if (bad) {
                CHECK(isnan(tn));
                CHECK(isnan(grad_of(p, 0)[0]) && isnan(grad_of(p, 1)[4]) && isnan(grad_of(p, 2)[17]));
            } else {
                CHECK(isinf(tn) && tn > 0);
                CHECK(grad_of(p, 0)[0] == 0.0f && signbit(grad_of(p, 0)[0]) && grad_of(p, 1)[5] == 0.0f);
                CHECK(isnan(grad_of(p, 1)[3]) && grad_of(p, 1)[4] == 0.0f);
            }
            /* padding untouched */
            size_t covered = 0;
            for (int k = 0; k < 3; k++) {
                ct_tensor g;
                ct_plan_param_info(p, k, NULL, NULL, &g);
                size_t off = (size_t)((float *)g.data - ga), len = (size_t)ct_tensor_numel(&g);
                for (size_t i = covered; i < off; i++) CHECK(ga[i] == 0.0f);
                covered = off + len;
            }
            for (size_t i = covered; i < n; i++) CHECK(ga[i] == 0.0f);
        }
    ct_plan_free(p);
    ct_context_free(ctx);
}

/* Against the formula in double: sqrt(sum g^2), max|g|, (sum |g|^p)^(1/p);
 * clipped grads = g * (float)min(max_norm / (norm + 1e-6), 1). And the same
 * bits for 1, 2, 3, 5 and 8 threads over an arena of many chunks. */
TEST(clip_grad_norm_formula_and_thread_independence) {
    int nd[4] = {2, 1, 2, 1};
    int64_t sh[4][4] = {{300, 257}, {37}, {513, 129}, {100000}};
    const float types[3] = {2.0f, INFINITY, 1.5f};
    float ref_norm[3] = {0};
    float *ref_grads = NULL;
    size_t n = 0;
    const int threads[5] = {1, 2, 3, 5, 8};
    for (int ti = 0; ti < 5; ti++) {
        ct_context_opts co;
        ct_context_opts_default(&co);
        co.num_threads = threads[ti];
        co.seed = 1234;
        ct_context *ctx;
        CHECK(ct_context_create(&co, &ctx) == CT_OK);
        ct_plan *p;
        CHECK_OK(ctx, test_params_plan(ctx, 4, nd, (const int64_t(*)[4])sh, &p));
        float *ga;
        ct_plan_param_arena(p, NULL, &ga, &n);
        for (int t = 0; t < 3; t++) {
            for (int k = 0; k < 4; k++) {
                ct_tensor g;
                ct_plan_param_info(p, k, NULL, NULL, &g);
                test_fill_uniform(g.data, (size_t)ct_tensor_numel(&g), 50 + (unsigned)k, -2, 2);
            }
            /* the formula in double */
            double acc = 0;
            for (int k = 0; k < 4; k++) {
                ct_tensor g;
                ct_plan_param_info(p, k, NULL, NULL, &g);
                const float *d = g.data;
                for (int64_t j = 0; j < ct_tensor_numel(&g); j++) {
                    double a = fabs((double)d[j]);
                    if (t == 0) acc += a * a;
                    else if (t == 1) acc = fmax(acc, a);
                    else acc += pow(a, 1.5);
                }
            }
            double want = t == 0 ? sqrt(acc) : t == 1 ? acc : pow(acc, 1.0 / 1.5);
            float *before = malloc(n * sizeof *before);
            memcpy(before, ga, n * sizeof *ga);
            float tn, max_norm = (float)(want / 3);
            CHECK_OK(ctx, ct_clip_grad_norm(p, max_norm, types[t], &tn));
            CHECK_MSG(close_rel(tn, want, 2e-7), "norm_type %g: %.9g vs formula %.9g", (double)types[t], (double)tn,
                      want);
            float coef = max_norm / (tn + 1e-6f);
            for (size_t i = 0; i < n; i++) CHECK(ga[i] == before[i] * coef);
            free(before);
            if (ti == 0) {
                ref_norm[t] = tn;
            } else {
                CHECK_MSG(memcmp(&tn, &ref_norm[t], sizeof tn) == 0, "%d threads: norm %.9g vs %.9g (1 thread)",
                          threads[ti], (double)tn, (double)ref_norm[t]);
            }
        }
        if (ti == 0) {
            ref_grads = malloc(n * sizeof *ref_grads);
            memcpy(ref_grads, ga, n * sizeof *ga);
        } else {
            CHECK(!memcmp(ref_grads, ga, n * sizeof *ga));
        }
        /* clip_grad_value: clamp */
        for (size_t i = 0; i < n; i++) ga[i] = (float)i * 1e-5f - 1.0f;
        CHECK_OK(ctx, ct_clip_grad_value(p, 0.25f));
        for (int k = 0; k < 4; k++) {
            ct_tensor g;
            ct_plan_param_info(p, k, NULL, NULL, &g);
            const float *d = g.data;
            size_t off = (size_t)(d - ga);
            for (int64_t j = 0; j < ct_tensor_numel(&g); j++) {
                float x = (float)(off + (size_t)j) * 1e-5f - 1.0f;
                CHECK(d[j] == (x < -0.25f ? -0.25f : x > 0.25f ? 0.25f : x));
            }
        }
        ct_plan_free(p);
        ct_context_free(ctx);
    }
    printf("    norms over %zu floats (2, inf, 1.5): %.9g %.9g %.9g, equal for 1, 2, 3, 5, 8 threads\n", n,
           (double)ref_norm[0], (double)ref_norm[1], (double)ref_norm[2]);
    free(ref_grads);
}

TEST(clip_checks_arguments_and_allocates_nothing) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_plan *p;
    CHECK_OK(ctx, test_params_plan(ctx, 3, ND3, SH3, &p));
    fill_pattern(p);
    float tn;
    CHECK(ct_clip_grad_norm(p, 1.0f, 0.0f, &tn) == CT_E_INVALID_ARG);
    CHECK(strstr(ct_context_last_error(ctx), "norm_type"));
    CHECK(ct_clip_grad_norm(p, 1.0f, -2.0f, &tn) == CT_E_INVALID_ARG);
    CHECK(ct_clip_grad_norm(p, 1.0f, NAN, &tn) == CT_E_INVALID_ARG);
    CHECK(ct_clip_grad_norm(p, NAN, 2.0f, &tn) == CT_E_INVALID_ARG);
    CHECK(strstr(ct_context_last_error(ctx), "max_norm"));
    CHECK(ct_clip_grad_value(p, -1.0f) == CT_E_INVALID_ARG);
    CHECK(ct_clip_grad_norm(NULL, 1.0f, 2.0f, &tn) == CT_E_INVALID_ARG);
    CHECK(ct_grad_norm(p, 2.0f, NULL) == CT_E_INVALID_ARG);
    /* grad_norm leaves the gradients alone; clip with NULL total_norm works */
    float before = grad_of(p, 0)[0], gn;
    CHECK_OK(ctx, ct_grad_norm(p, 2.0f, &gn));
    CHECK(grad_of(p, 0)[0] == before && close_rel(gn, 17.844871520996094, 1e-6));
    ct_mem_stats a, b;
    ct_context_mem_stats(ctx, &a);
    CHECK_OK(ctx, ct_clip_grad_norm(p, 1.0f, 2.0f, NULL));
    CHECK_OK(ctx, ct_clip_grad_norm(p, 1.0f, INFINITY, &tn));
    CHECK_OK(ctx, ct_clip_grad_norm(p, 1.0f, 3.0f, &tn));
    CHECK_OK(ctx, ct_clip_grad_value(p, 0.1f));
    CHECK_OK(ctx, ct_clip_grad_value(p, INFINITY));
    ct_context_mem_stats(ctx, &b);
    CHECK(a.n_allocs == b.n_allocs);
    ct_plan_free(p);
    ct_context_free(ctx);
}

TEST_MAIN(T(clip_grad_norm_matches_pytorch), T(clip_grad_norm_nonfinite_is_reported),
          T(clip_grad_norm_formula_and_thread_independence), T(clip_checks_arguments_and_allocates_nothing))
