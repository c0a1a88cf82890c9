/* tests/test_dynshape.c - dynamic shapes (ct_plan_add_shape /
 * ct_plan_set_shape, docs/dynamic-shapes.md): a plan compiled for the
 * maximum batch (and sequence) runs a smaller one in its own memory and gives
 * bit for bit the loss, the kept outputs, every parameter gradient and the
 * batchnorm running statistics of a plan compiled for exactly that size,
 * from the same weights, for an MLP with dropout (FP32 and BF16 autocast), a
 * CNN with batchnorm, GPT (smaller batch and sequence) and BERT (with a
 * padding mask). Each model alternates maximum and small steps, so the
 * per-shape kernel caches are exercised. Also: a variant that is larger than
 * compiled, or differs in structure, is CT_E_SHAPE; equal shapes give the
 * same id; an unknown id is CT_E_INVALID_ARG. */
#include <stdint.h>
#include <string.h>

#include "test.h"

#define TRY(expr)                     \
    do {                              \
        ct_status s_ = (expr);        \
        if (s_ != CT_OK) return s_;   \
    } while (0)

enum { M_MLP = 0, M_CNN, M_GPT, M_BERT, M_MEAN };

/* Node ids of one build (equal for every size: the same code builds them). */
typedef struct {
    ct_node x, y, kv, logits, loss;
} dyn_nodes;

/* Builds model `m` for batch B and sequence T (text) into g. */
static ct_status build(ct_graph *g, int m, int64_t B, int64_t T, int wide, dyn_nodes *n) {
    n->kv = CT_NONE;
    switch (m) {
    case M_MLP: {
        const int64_t hidden[2] = {24, wide ? 20 : 16};
        TRY(ct_input(g, "x", CT_F32, 2, (int64_t[]){B, 32}, &n->x));
        TRY(ct_input(g, "y", CT_I32, 1, (int64_t[]){B}, &n->y));
        TRY(ct_model_mlp(g, n->x, 2, hidden, 10, CT_ACT_RELU, 0.1f, &n->logits));
        return ct_cross_entropy(g, n->logits, n->y, 0.1f, -100, &n->loss);
    }
    case M_CNN: {
        const int64_t ch[2] = {4, 8};
        TRY(ct_input(g, "x", CT_F32, 4, (int64_t[]){B, 1, 12, 12}, &n->x));
        TRY(ct_input(g, "y", CT_I32, 1, (int64_t[]){B}, &n->y));
        TRY(ct_model_cnn(g, n->x, 2, ch, 10, &n->logits));
        return ct_cross_entropy(g, n->logits, n->y, 0.0f, -100, &n->loss);
    }
    case M_GPT: {
        ct_gpt_config c = {.vocab = 17, .context = 12, .n_layer = 2, .n_head = 2, .d_model = 16, .dropout = 0.1f,
                           .bias = 1, .gelu_tanh = 0};
        TRY(ct_input(g, "ids", CT_I32, 2, (int64_t[]){B, T}, &n->x));
        TRY(ct_input(g, "labels", CT_I32, 2, (int64_t[]){B, T}, &n->y));
        TRY(ct_model_gpt(g, n->x, &c, &n->logits));
        return ct_cross_entropy(g, n->logits, n->y, 0.0f, -100, &n->loss);
    }
    case M_MEAN: { /* loss = mean(tanh(linear(x))^2): the mean's 1/n and its backward's are shape attributes */
        ct_node w, bb, h;
        TRY(ct_input(g, "x", CT_F32, 3, (int64_t[]){B, T, 6}, &n->x));
        TRY(ct_input(g, "y", CT_I32, 1, (int64_t[]){B}, &n->y)); /* unused: fill() writes it */
        TRY(ct_param(g, "w", 2, (int64_t[]){5, 6}, CT_INIT_KAIMING_UNIFORM, 6, &w));
        TRY(ct_param(g, "b", 1, (int64_t[]){5}, CT_INIT_KAIMING_UNIFORM, 6, &bb));
        TRY(ct_linear(g, n->x, w, bb, &h));
        TRY(ct_tanh(g, h, &n->logits));
        TRY(ct_mul(g, n->logits, n->logits, &h));
        return ct_mean(g, h, 7u, 0, &n->loss);
    }
    default: {
        ct_bert_config c = {.vocab = 19, .context = 12, .n_layer = 2, .n_head = 2, .d_model = 16, .d_ff = 32,
                            .type_vocab = 2, .dropout = 0.1f, .ln_eps = 1e-12f};
        TRY(ct_input(g, "ids", CT_I32, 2, (int64_t[]){B, T}, &n->x));
        TRY(ct_input(g, "key_valid", CT_I32, 2, (int64_t[]){B, T}, &n->kv));
        TRY(ct_input(g, "labels", CT_I32, 2, (int64_t[]){B, T}, &n->y));
        TRY(ct_model_bert(g, n->x, n->kv, CT_NONE, CT_NONE, &c, &n->logits));
        return ct_cross_entropy(g, n->logits, n->y, 0.0f, -100, &n->loss);
    }
    }
}

/* Writes the inputs of a (B, T) batch (seeded by `seed`), through views of
 * the plan's selected shapes. */
static void fill(ct_plan *p, int m, const dyn_nodes *n, unsigned seed) {
    ct_tensor tx, ty, tk;
    CHECK(ct_plan_tensor(p, n->x, &tx) == CT_OK);
    CHECK(ct_plan_tensor(p, n->y, &ty) == CT_OK);
    int64_t nx = ct_tensor_numel(&tx), ny = ct_tensor_numel(&ty);
    int32_t *y = ty.data;
    if (m == M_MLP || m == M_CNN || m == M_MEAN) {
        test_fill_uniform(tx.data, (size_t)nx, seed, -1, 1);
        for (int64_t i = 0; i < ny; i++) y[i] = (int32_t)((i * 7 + seed) % 10);
        return;
    }
    int32_t *ids = tx.data;
    const int64_t V = m == M_GPT ? 17 : 19, T = tx.shape[1];
    for (int64_t i = 0; i < nx; i++) ids[i] = (int32_t)((i * 5 + seed * 3 + (uint64_t)(i / T)) % (uint64_t)V);
    for (int64_t i = 0; i < ny; i++) y[i] = (i % 4 == 3) ? -100 : (int32_t)((i * 3 + seed) % (uint64_t)V);
    if (n->kv != CT_NONE) { /* row b has T - b valid keys (padding at the end) */
        CHECK(ct_plan_tensor(p, n->kv, &tk) == CT_OK);
        int32_t *kv = tk.data;
        for (int64_t i = 0; i < ny; i++) kv[i] = (i % T) < T - (i / T) % 3;
    }
}

static ct_status compile(ct_context *ctx, int m, int64_t B, int64_t T, ct_precision prec, ct_plan **p, dyn_nodes *n) {
    ct_graph *g;
    TRY(ct_graph_create(ctx, &g));
    ct_status s = build(g, m, B, T, 0, n);
    ct_compile_opts o;
    ct_compile_opts_default(&o);
    o.precision = prec;
    if (s == CT_OK) s = ct_compile(g, n->loss, 1, &n->logits, &o, p);
    ct_graph_free(g);
    return s;
}

static ct_status add_shape(ct_plan *p, int m, int64_t B, int64_t T, int wide, int *v) {
    ct_graph *g;
    dyn_nodes n;
    TRY(ct_graph_create(ct_plan_context(p), &g));
    ct_status s = build(g, m, B, T, wide, &n);
    if (s == CT_OK) s = ct_plan_add_shape(p, g, n.loss, 1, &n.logits, v);
    ct_graph_free(g);
    return s;
}

/* Bit-for-bit comparison of n floats; prints the largest relative difference on failure. */
static int same_bits(const char *what, const float *a, const float *b, size_t n) {
    if (!memcmp(a, b, n * sizeof *a)) return 1;
    fprintf(stderr, "  %s: differs, max rel %.3g\n", what, test_max_rel(a, b, n, 1e-6));
    return 0;
}

/* One training step (forward + backward) and one eval forward of batch `seed`. */
static ct_status run_step(ct_plan *p, int m, const dyn_nodes *n, unsigned seed) {
    fill(p, m, n, seed);
    ct_plan_set_step(p, seed);
    TRY(ct_plan_forward(p, 1));
    return ct_plan_backward(p);
}

/* The maximum plan P running (b, t) equals the exact plan E of (b, t). */
static void check_model(int m, ct_precision prec, int64_t Bmax, int64_t Tmax, int64_t b, int64_t t) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_plan *P = NULL, *E = NULL;
    dyn_nodes n, ne;
    CHECK_OK(ctx, compile(ctx, m, Bmax, Tmax, prec, &P, &n));
    CHECK_OK(ctx, compile(ctx, m, b, t, prec, &E, &ne));
    CHECK(n.x == ne.x && n.y == ne.y && n.loss == ne.loss && n.logits == ne.logits);
    int v = -1, v2 = -1, v0 = -1;
    CHECK_OK(ctx, add_shape(P, m, b, t, 0, &v));
    CHECK(v == 1);
    CHECK_OK(ctx, add_shape(P, m, b, t, 0, &v2)); /* equal shapes: the same id */
    CHECK(v2 == v);
    CHECK_OK(ctx, add_shape(P, m, Bmax, Tmax, 0, &v0)); /* the compiled shapes */
    CHECK(v0 == 0);
    float *pw, *pg, *ew, *eg, *pb, *eb;
    size_t np, ne_, nb, neb;
    ct_plan_param_arena(P, &pw, &pg, &np);
    ct_plan_param_arena(E, &ew, &eg, &ne_);
    ct_plan_buffer_arena(P, &pb, &nb);
    ct_plan_buffer_arena(E, &eb, &neb);
    CHECK(np == ne_ && nb == neb);
    for (int round = 0; round < 2; round++) {
        /* the maximum first (its caches), then the small batch on both plans */
        CHECK_OK(ctx, ct_plan_set_shape(P, 0));
        CHECK_OK(ctx, run_step(P, m, &n, 11 + (unsigned)round));
        memcpy(ew, pw, np * sizeof *pw);
        if (nb) memcpy(eb, pb, nb * sizeof *pb);
        CHECK_OK(ctx, ct_plan_set_shape(P, v));
        CHECK(ct_plan_shape(P) == v);
        CHECK_OK(ctx, run_step(P, m, &n, 3 + (unsigned)round));
        CHECK_OK(ctx, run_step(E, m, &ne, 3 + (unsigned)round));
        float lp, le;
        CHECK_OK(ctx, ct_plan_loss(P, &lp));
        CHECK_OK(ctx, ct_plan_loss(E, &le));
        CHECK_MSG(!memcmp(&lp, &le, sizeof lp), "loss %.9g vs exact %.9g", (double)lp, (double)le);
        ct_tensor tp, te;
        CHECK_OK(ctx, ct_plan_tensor(P, n.logits, &tp));
        CHECK_OK(ctx, ct_plan_tensor(E, ne.logits, &te));
        CHECK(tp.ndim == te.ndim && !memcmp(tp.shape, te.shape, sizeof(int64_t) * (size_t)te.ndim));
        CHECK(tp.dtype == te.dtype);
        if (te.dtype == CT_F32) CHECK(same_bits("logits", tp.data, te.data, (size_t)ct_tensor_numel(&te)));
        else CHECK(!memcmp(tp.data, te.data, (size_t)ct_tensor_numel(&te) * 2)); /* BF16 logits */
        CHECK(same_bits("gradients", pg, eg, np));
        if (nb) CHECK(same_bits("running stats", pb, eb, nb));
        /* eval mode too */
        CHECK_OK(ctx, ct_plan_forward(P, 0));
        CHECK_OK(ctx, ct_plan_forward(E, 0));
        CHECK_OK(ctx, ct_plan_loss(P, &lp));
        CHECK_OK(ctx, ct_plan_loss(E, &le));
        CHECK_MSG(!memcmp(&lp, &le, sizeof lp), "eval loss %.9g vs exact %.9g", (double)lp, (double)le);
    }
    ct_plan_free(P);
    ct_plan_free(E);
    ct_context_free(ctx);
}

TEST(mlp_smaller_batch) { check_model(M_MLP, CT_PRECISION_FP32, 16, 0, 5, 0); }
TEST(mlp_bf16_smaller_batch) { check_model(M_MLP, CT_PRECISION_BF16, 16, 0, 7, 0); }
TEST(cnn_batchnorm_smaller_batch) { check_model(M_CNN, CT_PRECISION_FP32, 8, 0, 3, 0); }
TEST(gpt_smaller_batch_and_sequence) { check_model(M_GPT, CT_PRECISION_FP32, 4, 12, 3, 7); }
TEST(gpt_smaller_sequence) { check_model(M_GPT, CT_PRECISION_FP32, 4, 12, 4, 5); }
TEST(bert_smaller_batch_and_sequence) { check_model(M_BERT, CT_PRECISION_FP32, 4, 12, 2, 9); }

TEST(mean_divides_by_actual_count) { check_model(M_MEAN, CT_PRECISION_FP32, 6, 5, 4, 3); }

TEST(rejects_larger_or_different) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_plan *P = NULL;
    dyn_nodes n;
    CHECK_OK(ctx, compile(ctx, M_MLP, 8, 0, CT_PRECISION_FP32, &P, &n));
    int v = -1;
    CHECK(add_shape(P, M_MLP, 9, 0, 0, &v) == CT_E_SHAPE); /* larger than compiled */
    CHECK_MSG(strstr(ct_context_last_error(ctx), "larger than compiled"), "%s", ct_context_last_error(ctx));
    CHECK(add_shape(P, M_MLP, 4, 0, 1, &v) == CT_E_SHAPE); /* another hidden size: a parameter differs */
    CHECK_MSG(strstr(ct_context_last_error(ctx), "parameter"), "%s", ct_context_last_error(ctx));
    CHECK(v == -1);
    CHECK(ct_plan_set_shape(P, 1) == CT_E_INVALID_ARG); /* none registered */
    CHECK(ct_plan_set_shape(P, -1) == CT_E_INVALID_ARG);
    CHECK_OK(ctx, add_shape(P, M_MLP, 4, 0, 0, &v));
    CHECK(v == 1);
    CHECK_OK(ctx, ct_plan_set_shape(P, 1));
    ct_tensor tx;
    CHECK_OK(ctx, ct_plan_tensor(P, n.x, &tx));
    CHECK(tx.shape[0] == 4 && tx.shape[1] == 32);
    CHECK_OK(ctx, ct_plan_set_shape(P, 0));
    CHECK_OK(ctx, ct_plan_tensor(P, n.x, &tx));
    CHECK(tx.shape[0] == 8);
    ct_plan_free(P);
    ct_context_free(ctx);
}

TEST_MAIN(T(mlp_smaller_batch), T(mlp_bf16_smaller_batch), T(cnn_batchnorm_smaller_batch),
          T(gpt_smaller_batch_and_sequence), T(gpt_smaller_sequence), T(bert_smaller_batch_and_sequence),
          T(mean_divides_by_actual_count), T(rejects_larger_or_different))
