/* tests/test_tp_mpi.c - tensor parallelism's collective ops over the world
 * as the graph's tensor group:
 *
 *   mpirun -np N test_tp_mpi   N ranks (tests/dist_test.sh: 2 and 4), every
 *                              result checked on every rank
 *   test_tp_mpi                a world of one process: no tensor group, the
 *                              ops are the identity / the plain op
 *
 *  - cross_entropy_vp: the whole logits (N, V) of a fixed seed (the same on
 *    every rank), V = 10 not divisible by 4 (Vl = ceil(V / T), the padding
 *    columns 1e3 to prove they are masked); each rank's loss equals the one
 *    process ct_cross_entropy within 1e-6 and its logits gradient the
 *    matching columns of the one process gradient (padding: exactly 0);
 *  - tp_reduce sums over the ranks forward, its gradient is dy;
 *  - tp_copy is the identity forward, its gradient dy summed over the ranks;
 *  - tp_reduce on BF16 activations (bf16-pure: the executor hands its kernel
 *    FP32 copies). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

static ct_context *g_ctx;
static ct_comm *g_world;

enum { NR = 6, V = 10 };
static const int32_t k_labels[NR] = {9, 0, 4, 7, 3, 9};

/* one forward + backward of a (NR, cols) logits param through ce (vp: over the world as the tensor group) */
typedef test_ce_run run;
static ct_status ce_run(int vp, int64_t cols, float eps, int ignore, const float *logits, run *o) {
    return test_ce_plan(g_ctx, g_world, vp, NR, cols, V, eps, ignore, logits, k_labels, o);
}

static void ce_vp_case(float eps, int ignore) {
    const int T = ct_comm_size(g_world), rank = ct_comm_rank(g_world);
    const int64_t Vl = (V + T - 1) / T, c0 = rank * Vl;
    float whole[NR * V], mine[NR * V];
    test_fill_uniform(whole, NR * V, 23, -4, 4);
    for (int r = 0; r < NR; r++)
        for (int64_t j = 0; j < Vl; j++) mine[r * Vl + j] = c0 + j < V ? whole[r * V + c0 + j] : 1e3f;
    run a, b;
    CHECK_OK(g_ctx, ce_run(0, V, eps, ignore, whole, &a));
    CHECK_OK(g_ctx, ce_run(1, Vl, eps, ignore, mine, &b));
    CHECK_MSG(fabsf(a.l - b.l) <= 1e-6f, "rank %d of %d, eps %g ignore %d: loss %.9g, one process %.9g", rank, T,
              (double)eps, ignore, (double)b.l, (double)a.l);
    CHECK(a.l > 0.5f);
    ct_tensor ga, gb;
    CHECK_OK(g_ctx, ct_plan_grad(a.p, a.x, &ga));
    CHECK_OK(g_ctx, ct_plan_grad(b.p, b.x, &gb));
    const float *da = ga.data, *db = gb.data;
    double worst = 0;
    for (int r = 0; r < NR; r++)
        for (int64_t j = 0; j < Vl; j++) {
            if (c0 + j >= V) {
                CHECK_MSG(db[r * Vl + j] == 0.0f, "rank %d: padding column %lld row %d has gradient %g", rank,
                          (long long)(c0 + j), r, (double)db[r * Vl + j]);
                continue;
            }
            worst = fmax(worst, fabs((double)db[r * Vl + j] - da[r * V + c0 + j]));
        }
    CHECK_MSG(worst <= 1e-6, "rank %d of %d, eps %g ignore %d: gradient differs by %g", rank, T, (double)eps, ignore,
              worst);
    ct_plan_free(a.p);
    ct_plan_free(b.p);
}

TEST(cross_entropy_vp_equals_one_process) {
    ce_vp_case(0.0f, -100);
    ce_vp_case(0.1f, -100);
    ce_vp_case(0.1f, 9); /* rows 0 and 5 ignored; 9 is the last real class (a padded rank's) */
}

/* loss = sum(op(x) * r): x (3, 4) and r given per rank; fills y (forward value) and dx */
static ct_status op_run(int reduce, ct_precision prec, const float *x, const float *r, float *y, float *dx) {
    ct_graph *g;
    ct_status s = ct_graph_create(g_ctx, &g);
    if (s != CT_OK) return s;
    ct_plan *p = NULL;
    ct_node xn, rn, yn, m, loss;
    s = ct_graph_set_tensor_group(g, g_world);
    if (s == CT_OK) s = ct_param(g, "x", 2, (int64_t[]){3, 4}, CT_INIT_ZEROS, 1, &xn);
    if (s == CT_OK) s = ct_input(g, "r", CT_F32, 2, (int64_t[]){3, 4}, &rn);
    if (s == CT_OK) s = reduce ? ct_tp_reduce(g, xn, &yn) : ct_tp_copy(g, xn, &yn);
    if (s == CT_OK) s = ct_mul(g, yn, rn, &m);
    if (s == CT_OK) s = ct_sum(g, m, 3, 0, &loss);
    ct_compile_opts co;
    ct_compile_opts_default(&co);
    co.precision = prec;
    if (s == CT_OK) s = ct_compile(g, loss, 1, &yn, &co, &p);
    ct_graph_free(g);
    ct_tensor t;
    if (s == CT_OK) s = ct_plan_tensor(p, xn, &t);
    if (s == CT_OK) memcpy(t.data, x, 12 * sizeof(float));
    if (s == CT_OK) s = ct_plan_tensor(p, rn, &t);
    if (s == CT_OK) memcpy(t.data, r, 12 * sizeof(float));
    if (s == CT_OK) s = ct_plan_forward(p, 1);
    if (s == CT_OK) s = ct_plan_backward(p);
    if (s == CT_OK) s = ct_plan_tensor(p, yn, &t);
    if (s == CT_OK && t.dtype == CT_F32) memcpy(y, t.data, 12 * sizeof(float));
    if (s == CT_OK && t.dtype == CT_BF16)
        for (int i = 0; i < 12; i++) {
            uint32_t u = (uint32_t)((const uint16_t *)t.data)[i] << 16;
            memcpy(&y[i], &u, 4);
        }
    if (s == CT_OK) s = ct_plan_grad(p, xn, &t);
    if (s == CT_OK) memcpy(dx, t.data, 12 * sizeof(float));
    ct_plan_free(p);
    return s;
}

/* x on rank q: (q + 1) * (1 + i / 4): sums exact in FP32 and BF16 */
static float xval(int q, int i) { return (float)(q + 1) * (1.0f + (float)i / 4.0f); }

static void reduce_case(ct_precision prec) {
    const int T = ct_comm_size(g_world), rank = ct_comm_rank(g_world);
    float x[12], r[12], y[12], dx[12];
    for (int i = 0; i < 12; i++) x[i] = xval(rank, i), r[i] = (float)(i % 5) - 2.0f + 0.5f * (float)rank;
    CHECK_OK(g_ctx, op_run(1, prec, x, r, y, dx));
    for (int i = 0; i < 12; i++) {
        float want = 0;
        for (int q = 0; q < T; q++) want += xval(q, i);
        CHECK_MSG(y[i] == want, "rank %d: tp_reduce element %d is %g, the sum over %d ranks %g", rank, i, (double)y[i],
                  T, (double)want);
        CHECK_MSG(dx[i] == r[i], "rank %d: tp_reduce's gradient element %d is %g, dy %g", rank, i, (double)dx[i],
                  (double)r[i]);
    }
}

TEST(tp_reduce_sums_forward_identity_backward) { reduce_case(CT_PRECISION_FP32); }
TEST(tp_reduce_bf16_autocast) { reduce_case(CT_PRECISION_BF16_PURE); } /* x cast to BF16: BF16 I/O */

TEST(tp_copy_identity_forward_sums_backward) {
    const int T = ct_comm_size(g_world), rank = ct_comm_rank(g_world);
    float x[12], r[12], y[12], dx[12];
    for (int i = 0; i < 12; i++) x[i] = 0.25f * (float)i - 1.0f, r[i] = xval(rank, i);
    CHECK_OK(g_ctx, op_run(0, CT_PRECISION_FP32, x, r, y, dx));
    for (int i = 0; i < 12; i++) {
        float want = 0;
        for (int q = 0; q < T; q++) want += xval(q, i);
        CHECK_MSG(y[i] == x[i], "rank %d: tp_copy element %d is %g, x %g", rank, i, (double)y[i], (double)x[i]);
        CHECK_MSG(dx[i] == want, "rank %d: tp_copy's gradient element %d is %g, dy summed over %d ranks %g", rank, i,
                  (double)dx[i], T, (double)want);
    }
}

/* embedding_rows + tp_reduce: Megatron's vocabulary-parallel embedding; each
 * rank holds rows [rank * Rl, (rank + 1) * Rl) of the 10-row table */
TEST(vocab_parallel_embedding_equals_the_whole_table) {
    const int T = ct_comm_size(g_world), rank = ct_comm_rank(g_world);
    enum { D = 3, NI = 8 };
    const int64_t Rl = (V + T - 1) / T, row0 = rank * Rl;
    float whole[V * D];
    test_fill_uniform(whole, V * D, 31, -1, 1);
    const int32_t ids[NI] = {0, 9, 3, 4, 9, 7, 1, 5};
    ct_graph *g;
    ct_node w, id, e, y;
    ct_plan *p;
    CHECK_OK(g_ctx, ct_graph_create(g_ctx, &g));
    CHECK_OK(g_ctx, ct_graph_set_tensor_group(g, g_world));
    CHECK_OK(g_ctx, ct_param(g, "w", 2, (int64_t[]){Rl, D}, CT_INIT_ZEROS, 1, &w));
    CHECK_OK(g_ctx, ct_input(g, "ids", CT_I32, 1, (int64_t[]){NI}, &id));
    CHECK_OK(g_ctx, ct_embedding_rows(g, w, id, row0, &e));
    CHECK_OK(g_ctx, ct_tp_reduce(g, e, &y));
    CHECK_OK(g_ctx, ct_compile(g, CT_NONE, 1, &y, NULL, &p));
    ct_graph_free(g);
    ct_tensor t;
    CHECK_OK(g_ctx, ct_plan_tensor(p, w, &t));
    for (int64_t j = 0; j < Rl * D; j++) ((float *)t.data)[j] = row0 * D + j < V * D ? whole[row0 * D + j] : 0.0f;
    CHECK_OK(g_ctx, ct_plan_tensor(p, id, &t));
    memcpy(t.data, ids, sizeof ids);
    CHECK_OK(g_ctx, ct_plan_forward(p, 0));
    CHECK_OK(g_ctx, ct_plan_tensor(p, y, &t));
    for (int i = 0; i < NI; i++)
        for (int d = 0; d < D; d++)
            CHECK_MSG(((float *)t.data)[i * D + d] == whole[ids[i] * D + d], "rank %d: id %d dim %d: %g vs %g", rank,
                      ids[i], d, (double)((float *)t.data)[i * D + d], (double)whole[ids[i] * D + d]);
    ct_plan_free(p);
}

int main(int argc, char **argv) {
    static const ct_test_case cases[] = {T(cross_entropy_vp_equals_one_process), T(tp_reduce_sums_forward_identity_backward),
                                         T(tp_reduce_bf16_autocast), T(tp_copy_identity_forward_sums_backward),
                                         T(vocab_parallel_embedding_equals_the_whole_table)};
    if (test_mpi_start("test_tp_mpi", &g_ctx, &g_world)) return 1;
    int rc = ct_test_main(__FILE__, cases, (int)(sizeof cases / sizeof cases[0]), argc, argv);
    return test_mpi_finish(g_ctx, g_world, rc);
}
