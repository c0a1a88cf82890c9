/* tests/test_tp_ops.c - tensor parallelism's ops in one process (no tensor
 * group; tests/test_tp_mpi.c runs them over 2 and 4 ranks):
 *  - tp_copy / tp_reduce are the identity: no node, x itself;
 *  - embedding_rows on rows [row0, row0 + R) of a table equals ct_embedding
 *    on the whole table for the ids in range (values and the gradient of the
 *    slice), zero rows for the others; ct_embedding still refuses such ids;
 *  - cross_entropy_vp with padding columns (vocab < Vl, the padding filled
 *    with 1e3) equals ct_cross_entropy on the first vocab columns: loss and
 *    gradients within 1e-6, padding gradients exactly 0, with and without
 *    label smoothing and ignore_index, reference and best contexts;
 *  - its backward against finite differences; a bad label fails at run time. */
#include "test.h"

#define N_ROWS 7

/* logits (N_ROWS, cols): the (N_ROWS, vocab) values of a fixed seed, columns >= vocab `pad` */
static void fill_logits(float *x, int64_t cols, int64_t vocab, float pad) {
    float v[N_ROWS * 16];
    test_fill_uniform(v, (size_t)(N_ROWS * vocab), 17, -3, 3);
    for (int64_t r = 0; r < N_ROWS; r++)
        for (int64_t c = 0; c < cols; c++) x[r * cols + c] = c < vocab ? v[r * vocab + c] : pad;
}

static const int32_t k_labels[N_ROWS] = {2, 0, 4, 1, 4, 3, 1};

typedef test_ce_run ce_run;

/* one forward + backward of (vp ? cross_entropy_vp over cols columns : cross_entropy over vocab) */
static ct_status ce_build_run(ct_context *ctx, int vp, int64_t cols, int64_t vocab, float eps, int ignore, ce_run *o) {
    float x[N_ROWS * 16];
    fill_logits(x, cols, vocab, 1e3f);
    return test_ce_plan(ctx, NULL, vp, N_ROWS, cols, vocab, eps, ignore, x, k_labels, o);
}

TEST(tp_copy_and_reduce_are_identities_without_a_group) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_graph *g;
    CHECK_OK(ctx, ct_graph_create(ctx, &g));
    CHECK(ct_graph_tensor_group(g) == NULL && ct_graph_tensor_size(g) == 1 && ct_graph_tensor_rank(g) == 0);
    ct_node x, a = CT_NONE, b = CT_NONE;
    CHECK_OK(ctx, ct_input(g, "x", CT_F32, 2, (int64_t[]){3, 4}, &x));
    int n0 = ct_graph_num_nodes(g);
    CHECK_OK(ctx, ct_tp_copy(g, x, &a));
    CHECK_OK(ctx, ct_tp_reduce(g, x, &b));
    CHECK(a == x && b == x && ct_graph_num_nodes(g) == n0);
    ct_node ids;
    CHECK_OK(ctx, ct_input(g, "ids", CT_I32, 1, (int64_t[]){3}, &ids));
    CHECK(ct_tp_reduce(g, ids, &a) == CT_E_DTYPE); /* integers are never summed */
    ct_graph_free(g);
    ct_context_free(ctx);
}

/* rows [3, 7) of a 10 x 5 table against the whole table */
static void embedding_rows_case(int isa, int onednn) {
    ct_context *ctx = test_ctx(isa, onednn);
    enum { V = 10, D = 5, R = 4, ROW0 = 3, NI = 12 };
    int32_t ids[NI];
    for (int i = 0; i < NI; i++) ids[i] = (int32_t)((i * 7 + 1) % V);
    ct_plan *p[2] = {NULL, NULL};
    ct_node w[2], id[2], y[2], loss[2], rr[2];
    float whole[V * D], rnd[NI * D];
    test_fill_uniform(whole, V * D, 5, -1, 1);
    test_fill_uniform(rnd, NI * D, 6, -1, 1);
    for (int k = 0; k < 2; k++) { /* 0: ct_embedding on the whole table, 1: embedding_rows on the slice */
        ct_graph *g;
        ct_node m;
        CHECK_OK(ctx, ct_graph_create(ctx, &g));
        CHECK_OK(ctx, ct_param(g, "w", 2, (int64_t[]){k ? R : V, D}, CT_INIT_ZEROS, 1, &w[k]));
        CHECK_OK(ctx, ct_input(g, "ids", CT_I32, 1, (int64_t[]){NI}, &id[k]));
        CHECK_OK(ctx, ct_input(g, "r", CT_F32, 2, (int64_t[]){NI, D}, &rr[k]));
        if (k) CHECK_OK(ctx, ct_embedding_rows(g, w[k], id[k], ROW0, &y[k]));
        else CHECK_OK(ctx, ct_embedding(g, w[k], id[k], &y[k]));
        CHECK_OK(ctx, ct_mul(g, y[k], rr[k], &m));
        CHECK_OK(ctx, ct_sum(g, m, 3, 0, &loss[k]));
        CHECK_OK(ctx, ct_compile(g, loss[k], 1, &y[k], NULL, &p[k]));
        ct_graph_free(g);
        ct_tensor t;
        CHECK_OK(ctx, ct_plan_tensor(p[k], w[k], &t));
        memcpy(t.data, whole + (k ? ROW0 * D : 0), (size_t)(k ? R : V) * D * sizeof(float));
        CHECK_OK(ctx, ct_plan_tensor(p[k], id[k], &t));
        memcpy(t.data, ids, sizeof ids);
        CHECK_OK(ctx, ct_plan_tensor(p[k], rr[k], &t));
        memcpy(t.data, rnd, sizeof rnd);
        CHECK_OK(ctx, ct_plan_forward(p[k], 1));
        CHECK_OK(ctx, ct_plan_backward(p[k]));
    }
    ct_tensor y0, y1, g0, g1;
    CHECK_OK(ctx, ct_plan_tensor(p[0], y[0], &y0));
    CHECK_OK(ctx, ct_plan_tensor(p[1], y[1], &y1));
    CHECK_OK(ctx, ct_plan_grad(p[0], w[0], &g0));
    CHECK_OK(ctx, ct_plan_grad(p[1], w[1], &g1));
    int in_range = 0, out_range = 0;
    for (int i = 0; i < NI; i++) {
        int in = ids[i] >= ROW0 && ids[i] < ROW0 + R;
        in_range += in, out_range += !in;
        for (int d = 0; d < D; d++) {
            float a = ((float *)y1.data)[i * D + d], b = in ? ((float *)y0.data)[i * D + d] : 0.0f;
            CHECK_MSG(a == b, "position %d (id %d) dim %d: rows %g, expected %g", i, ids[i], d, (double)a, (double)b);
        }
    }
    CHECK(in_range > 0 && out_range > 0); /* the case covers both */
    for (int r = 0; r < R * D; r++)
        CHECK_MSG(((float *)g1.data)[r] == ((float *)g0.data)[ROW0 * D + r], "gradient %d: %g vs %g", r,
                  (double)((float *)g1.data)[r], (double)((float *)g0.data)[ROW0 * D + r]);
    /* ct_embedding keeps refusing an id outside its table */
    ct_tensor t;
    CHECK_OK(ctx, ct_plan_tensor(p[0], id[0], &t));
    ((int32_t *)t.data)[3] = V;
    CHECK(ct_plan_forward(p[0], 1) == CT_E_INVALID_ARG);
    CHECK(strstr(ct_context_last_error(ctx), "outside the vocabulary") != NULL);
    /* rows mode: any id, even negative, is a zero row */
    CHECK_OK(ctx, ct_plan_tensor(p[1], id[1], &t));
    ((int32_t *)t.data)[3] = -5;
    CHECK_OK(ctx, ct_plan_forward(p[1], 1));
    for (int d = 0; d < D; d++) CHECK(((float *)y1.data)[3 * D + d] == 0.0f);
    ct_plan_free(p[0]);
    ct_plan_free(p[1]);
    ct_context_free(ctx);
}

TEST(embedding_rows_matches_embedding_on_a_slice_ref) { embedding_rows_case(CT_ISA_REF, 0); }
TEST(embedding_rows_matches_embedding_on_a_slice_best) { embedding_rows_case(-1, 1); }

/* cross_entropy_vp over 9 columns, vocab 6 (3 padding columns of 1e3) ==
 * cross_entropy over the first 6 */
static void ce_vp_case(int isa, float eps, int ignore) {
    ct_context *ctx = test_ctx(isa, isa != CT_ISA_REF);
    enum { VOCAB = 6, COLS = 9 };
    ce_run a, b;
    CHECK_OK(ctx, ce_build_run(ctx, 0, VOCAB, VOCAB, eps, ignore, &a));
    CHECK_OK(ctx, ce_build_run(ctx, 1, COLS, VOCAB, eps, ignore, &b));
    CHECK_MSG(fabsf(a.l - b.l) <= 1e-6f, "eps %g ignore %d: loss %.9g vs cross_entropy %.9g", (double)eps, ignore,
              (double)b.l, (double)a.l);
    CHECK(a.l > 0.5f); /* a real loss, not a degenerate 0 */
    ct_tensor ga, gb;
    CHECK_OK(ctx, ct_plan_grad(a.p, a.x, &ga));
    CHECK_OK(ctx, ct_plan_grad(b.p, b.x, &gb));
    const float *da = ga.data, *db = gb.data;
    double worst = 0, biggest = 0;
    for (int r = 0; r < N_ROWS; r++)
        for (int c = 0; c < COLS; c++) {
            float v = db[r * COLS + c];
            if (c >= VOCAB) {
                CHECK_MSG(v == 0.0f, "padding column %d of row %d has gradient %g", c, r, (double)v);
                continue;
            }
            worst = fmax(worst, fabs((double)v - da[r * VOCAB + c]));
            biggest = fmax(biggest, fabs(v));
            if (k_labels[r] == ignore) CHECK(v == 0.0f);
        }
    CHECK_MSG(worst <= 1e-6, "eps %g ignore %d: gradient differs by %g", (double)eps, ignore, worst);
    CHECK(biggest > 1e-3);
    ct_plan_free(a.p);
    ct_plan_free(b.p);
    ct_context_free(ctx);
}

TEST(cross_entropy_vp_equals_cross_entropy_on_the_real_columns) {
    const float eps[2] = {0.0f, 0.1f};
    const int ignore[2] = {-100, 4}; /* 4: two rows ignored */
    for (int isa = 0; isa < 2; isa++)
        for (int e = 0; e < 2; e++)
            for (int i = 0; i < 2; i++) ce_vp_case(isa ? -1 : CT_ISA_REF, eps[e], ignore[i]);
}

TEST(cross_entropy_vp_all_rows_ignored_is_zero) {
    ct_context *ctx = test_ctx(CT_ISA_REF, 0);
    ce_run b;
    CHECK_OK(ctx, ce_build_run(ctx, 1, 5, 5, 0.1f, -100, &b));
    ct_tensor ty;
    CHECK_OK(ctx, ct_plan_tensor(b.p, b.y, &ty));
    for (int r = 0; r < N_ROWS; r++) ((int32_t *)ty.data)[r] = -100;
    CHECK_OK(ctx, ct_plan_forward(b.p, 1));
    CHECK_OK(ctx, ct_plan_backward(b.p));
    CHECK_OK(ctx, ct_plan_loss(b.p, &b.l));
    CHECK(b.l == 0.0f);
    ct_tensor gb;
    CHECK_OK(ctx, ct_plan_grad(b.p, b.x, &gb));
    for (int i = 0; i < N_ROWS * 5; i++) CHECK(((float *)gb.data)[i] == 0.0f);
    ct_plan_free(b.p);
    ct_context_free(ctx);
}

TEST(cross_entropy_vp_backward_matches_finite_differences) {
    ct_context *ctx = test_ctx(CT_ISA_REF, 0);
    enum { VOCAB = 5, COLS = 7 };
    ce_run b;
    CHECK_OK(ctx, ce_build_run(ctx, 1, COLS, VOCAB, 0.2f, 1, &b));
    ct_tensor tx, gb;
    CHECK_OK(ctx, ct_plan_tensor(b.p, b.x, &tx));
    CHECK_OK(ctx, ct_plan_grad(b.p, b.x, &gb));
    float *x = tx.data, g[N_ROWS * COLS];
    memcpy(g, gb.data, sizeof g);
    double worst = 0;
    for (int i = 0; i < N_ROWS * COLS; i++) {
        const float h = 1e-2f, off[4] = {2, 1, -1, -2};
        float x0 = x[i];
        double f[4];
        for (int k = 0; k < 4; k++) {
            x[i] = x0 + off[k] * h;
            CHECK_OK(ctx, ct_plan_forward(b.p, 1));
            float l;
            CHECK_OK(ctx, ct_plan_loss(b.p, &l));
            f[k] = l;
        }
        x[i] = x0;
        double fd = (-f[0] + 8 * f[1] - 8 * f[2] + f[3]) / (12.0 * h);
        double err = fabs(fd - g[i]) / fmax(fabs(fd), 0.05);
        worst = fmax(worst, err);
        CHECK_MSG(err <= 2e-2, "element %d: analytic %g, finite difference %g", i, (double)g[i], fd);
    }
    printf("    fd cross_entropy_vp worst rel err %.2e\n", worst);
    ct_plan_free(b.p);
    ct_context_free(ctx);
}

TEST(cross_entropy_vp_bad_label_and_arguments) {
    ct_context *ctx = test_ctx(CT_ISA_REF, 0);
    ce_run b;
    CHECK_OK(ctx, ce_build_run(ctx, 1, 8, 6, 0.0f, -100, &b));
    ct_tensor ty;
    CHECK_OK(ctx, ct_plan_tensor(b.p, b.y, &ty));
    ((int32_t *)ty.data)[2] = 6; /* a padding column is no class */
    CHECK(ct_plan_forward(b.p, 1) == CT_E_INVALID_ARG);
    CHECK(strstr(ct_context_last_error(ctx), "outside [0, 6)") != NULL);
    ct_plan_free(b.p);
    ct_graph *g;
    ct_node x, y, l;
    CHECK_OK(ctx, ct_graph_create(ctx, &g));
    CHECK_OK(ctx, ct_input(g, "x", CT_F32, 2, (int64_t[]){4, 8}, &x));
    CHECK_OK(ctx, ct_input(g, "y", CT_I32, 1, (int64_t[]){4}, &y));
    CHECK(ct_cross_entropy_vp(g, x, y, 0.0f, -100, 9, &l) == CT_E_INVALID_ARG); /* vocab > Vl x ranks */
    CHECK(ct_cross_entropy_vp(g, x, y, 0.0f, -100, 0, &l) == CT_E_INVALID_ARG);
    CHECK(ct_cross_entropy_vp(g, x, y, 1.0f, -100, 8, &l) == CT_E_INVALID_ARG);
    CHECK(ct_cross_entropy_vp(g, y, y, 0.0f, -100, 8, &l) != CT_OK);
    CHECK(ct_embedding_rows(g, x, y, -1, &l) == CT_E_INVALID_ARG);
    ct_graph_free(g);
    ct_context_free(ctx);
}

TEST_MAIN(T(tp_copy_and_reduce_are_identities_without_a_group), T(embedding_rows_matches_embedding_on_a_slice_ref),
          T(embedding_rows_matches_embedding_on_a_slice_best), T(cross_entropy_vp_equals_cross_entropy_on_the_real_columns),
          T(cross_entropy_vp_all_rows_ignored_is_zero), T(cross_entropy_vp_backward_matches_finite_differences),
          T(cross_entropy_vp_bad_label_and_arguments))
