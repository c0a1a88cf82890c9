/* tests/test_sample_offset.c - dropout keyed by global sample
 * (ct_plan_set_sample_offset): plans compiled for 3 and 2 rows, run over
 * rows [0, 3), [3, 6), [6, 8) of an 8-row batch with those offsets, draw
 * bit for bit the masks one plan over all 8 rows draws there: dropout,
 * drop_path, dropout+add (fusion level 2) and a dropout step inside an
 * elementwise chain, with the best kernels and the reference ones, per
 * sample sizes of 35 (RNG counters not a multiple of 4: the scalar paths),
 * 256 and 2560 (more than one chain block). Offset 0 is the default; a
 * wrong offset gives other masks (the check is not void); a negative offset
 * is an error; outside training the offset changes nothing. */
#include "test.h"
#include "graph/plan.h" /* the compiled plan's ops: the fused nodes are there */

#define N_OUT 4

typedef struct {
    ct_plan *p;
    ct_node x, out[N_OUT];
} so_model;

/* x (b, T, D): dropout(x); drop_path(x); x + dropout(x); relu(dropout(2x)) */
static ct_status build(ct_context *ctx, int64_t b, int64_t T, int64_t D, int fusion, so_model *m) {
    ct_graph *g;
    CT_TRY(ct_graph_create(ctx, &g));
    ct_node t;
    ct_status s = ct_input(g, "x", CT_F32, 3, (int64_t[]){b, T, D}, &m->x);
    if (s == CT_OK) s = ct_dropout(g, m->x, 0.3f, &m->out[0]);
    if (s == CT_OK) s = ct_drop_path(g, m->x, 0.4f, &m->out[1]);
    if (s == CT_OK) s = ct_dropout(g, m->x, 0.2f, &t);
    if (s == CT_OK) s = ct_add(g, t, m->x, &m->out[2]);
    if (s == CT_OK) s = ct_scale(g, m->x, 2.0f, &t);
    if (s == CT_OK) s = ct_dropout(g, t, 0.5f, &t);
    if (s == CT_OK) s = ct_relu(g, t, &m->out[3]);
    ct_compile_opts o;
    ct_compile_opts_default(&o);
    o.fusion_level = fusion;
    if (s == CT_OK) s = ct_compile(g, CT_NONE, N_OUT, m->out, &o, &m->p);
    ct_graph_free(g);
    return s;
}

static int has_op(const ct_plan *p, ct_op op) {
    for (int i = 0; i < p->g.n; i++)
        if (p->pn[i].live && p->g.nodes[i].op == op) return 1;
    return 0;
}

/* x of rows [r0, r0 + b): 1 + (global element % 7) / 8 */
static void fill_rows(ct_plan *p, ct_node x, int64_t r0, int64_t per) {
    ct_tensor tx;
    ct_plan_tensor(p, x, &tx);
    float *v = tx.data;
    int64_t n = ct_tensor_numel(&tx);
    for (int64_t i = 0; i < n; i++) v[i] = 1.0f + (float)((r0 * per + i) % 7) * 0.125f;
}

/* One configuration: the whole batch against the three slices. */
static void check_split(int fast, int fusion, int64_t T, int64_t D) {
    ct_context *ctx = fast ? test_ctx(-1, 1) : test_ctx(CT_ISA_REF, 0);
    const int64_t B = 8, per = T * D, lo[3] = {0, 3, 6}, rows[3] = {3, 3, 2};
    so_model w, sl[2];
    CHECK_OK(ctx, build(ctx, B, T, D, fusion, &w));
    CHECK_OK(ctx, build(ctx, 3, T, D, fusion, &sl[0]));
    CHECK_OK(ctx, build(ctx, 2, T, D, fusion, &sl[1]));
    if (fusion == 2) { /* the fused kernels are what is checked */
        CHECK_MSG(has_op(w.p, CT_OP_DROPOUT_ADD), "no dropout+add node at fusion level 2");
        CHECK_MSG(has_op(w.p, CT_OP_ELTWISE_CHAIN), "no elementwise chain at fusion level 2");
    }
    CHECK(ct_plan_sample_offset(w.p) == 0);
    ct_plan_set_step(w.p, 5);
    fill_rows(w.p, w.x, 0, per);
    CHECK_OK(ctx, ct_plan_forward(w.p, 1));
    int differs = 0, dropped = 0;
    for (int k = 0; k < 3; k++) {
        so_model *m = &sl[k == 2];
        ct_plan_set_step(m->p, 5);
        fill_rows(m->p, m->x, lo[k], per);
        for (int wrong = 0; wrong < 2; wrong++) {
            CHECK_OK(ctx, ct_plan_set_sample_offset(m->p, wrong ? 0 : lo[k]));
            CHECK_OK(ctx, ct_plan_forward(m->p, 1));
            for (int o = 0; o < N_OUT; o++) {
                ct_tensor a, b;
                CHECK_OK(ctx, ct_plan_tensor(w.p, w.out[o], &a));
                CHECK_OK(ctx, ct_plan_tensor(m->p, m->out[o], &b));
                const float *whole = (const float *)a.data + lo[k] * per, *part = b.data;
                int same = !memcmp(whole, part, (size_t)(rows[k] * per) * sizeof(float));
                if (wrong) {
                    differs += lo[k] > 0 && o != 1 && !same; /* drop_path: 3 rows may agree by chance */
                    continue;
                }
                CHECK_MSG(same, "%s kernels, fusion %d, %lld per sample: output %d of rows [%lld, %lld) differs from "
                          "the whole batch's", fast ? "best" : "reference", fusion, (long long)per, o,
                          (long long)lo[k], (long long)(lo[k] + rows[k]));
                for (int64_t i = 0; i < rows[k] * per && o == 0; i++) dropped += part[i] == 0.0f;
            }
        }
    }
    CHECK_MSG(dropped > 0, "nothing dropped: the check is void");
    CHECK_MSG(differs == 2 * (N_OUT - 1), "offset 0 on rows [3, 8): the whole batch's masks in %d of %d outputs",
              2 * (N_OUT - 1) - differs, 2 * (N_OUT - 1));
    CHECK(ct_plan_set_sample_offset(w.p, -1) == CT_E_INVALID_ARG);
    ct_plan_free(w.p);
    ct_plan_free(sl[0].p);
    ct_plan_free(sl[1].p);
    ct_context_free(ctx);
}

TEST(slices_draw_the_whole_batchs_masks) {
    static const int64_t td[3][2] = {{5, 7}, {4, 64}, {16, 160}};
    for (int fast = 0; fast < 2; fast++)
        for (int fusion = 0; fusion <= 2; fusion += 2)
            for (int c = 0; c < 3; c++) {
                int before = ct_test_failed_checks;
                check_split(fast, fusion, td[c][0], td[c][1]);
                if (ct_test_failed_checks != before) return;
            }
}

/* Outside training the offset changes nothing (dropout is the identity). */
TEST(eval_ignores_the_offset) {
    ct_context *ctx = test_ctx(-1, 1);
    so_model m;
    CHECK_OK(ctx, build(ctx, 3, 4, 8, 2, &m));
    fill_rows(m.p, m.x, 0, 32);
    CHECK_OK(ctx, ct_plan_set_sample_offset(m.p, 17));
    CHECK_OK(ctx, ct_plan_forward(m.p, 0));
    ct_tensor a;
    CHECK_OK(ctx, ct_plan_tensor(m.p, m.out[0], &a));
    const float *v = a.data;
    for (int i = 0; i < 96; i++) CHECK(v[i] == 1.0f + (float)(i % 7) * 0.125f);
    ct_plan_free(m.p);
    ct_context_free(ctx);
}

TEST_MAIN(T(slices_draw_the_whole_batchs_masks), T(eval_ignores_the_offset))
