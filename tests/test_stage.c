/* tests/test_stage.c - pipeline stages in one process (include/ctrain/graph.h,
 * "pipeline stages"): a model cut into pieces, each compiled as its own plan
 * (or several pieces as the parts of one plan, as interleaved schedules
 * hold them), run piece by piece with the links copied between the plans by
 * hand, equals the whole plan:
 *  - MLP, CNN (batchnorm) and GPT (a tied embedding / LM head: the pieces
 *    holding it start with the same values; the sum of their gradients is
 *    the whole gradient) in FP32: loss and every gradient bit for bit
 *    (GPT's tied gradient within 1e-6: summed in another order);
 *  - interleaved parts (two plans holding pieces {0, 2} and {1, 3});
 *  - micro-batches in flight: every forward first, each keeping what its
 *    backward reads in a slot (ct_plan_save_activations), then the
 *    backwards (restored): the whole plan's accumulated gradient, the
 *    plans' arenas overwritten in between; a slot is smaller than the arena;
 *  - BF16 autocast stages within the BF16 tolerance of the whole plan;
 *  - balanced cuts (cost per piece), block names, and errors: a cut outside
 *    the blocks, an empty piece, held pieces out of order. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

ct_context *test_ctx(int isa, int use_onednn);

enum { MLP = 0, CNN, GPT };
enum { B = 4, TT = 8, V = 61 };

typedef struct {
    ct_graph *g;
    ct_node x, y, loss;
} model;

static ct_status build(ct_context *ctx, int kind, model *m) {
    ct_status s = ct_graph_create(ctx, &m->g);
    ct_node logits = CT_NONE, flat = CT_NONE, lab = CT_NONE;
    ct_graph *g = m->g;
    if (s != CT_OK) return s;
    if (kind == MLP) {
        s = ct_input(g, "x", CT_F32, 2, (int64_t[]){B, 12}, &m->x);
        if (s == CT_OK) s = ct_input(g, "y", CT_I32, 1, (int64_t[]){B}, &m->y);
        if (s == CT_OK) s = ct_model_mlp(g, m->x, 4, (int64_t[]){16, 16, 16, 16}, 5, CT_ACT_RELU, 0.0f, &logits);
        flat = logits, lab = m->y;
    } else if (kind == CNN) {
        s = ct_input(g, "x", CT_F32, 4, (int64_t[]){B, 3, 8, 8}, &m->x);
        if (s == CT_OK) s = ct_input(g, "y", CT_I32, 1, (int64_t[]){B}, &m->y);
        if (s == CT_OK) s = ct_model_cnn(g, m->x, 2, (int64_t[]){4, 8}, 5, &logits);
        flat = logits, lab = m->y;
    } else {
        s = ct_input(g, "ids", CT_I32, 2, (int64_t[]){B, TT}, &m->x);
        if (s == CT_OK) s = ct_input(g, "labels", CT_I32, 2, (int64_t[]){B, TT}, &m->y);
        ct_gpt_config c = {.vocab = V, .context = TT, .n_layer = 4, .n_head = 2, .d_model = 16, .dropout = 0.0f,
                           .bias = 1, .gelu_tanh = 1};
        if (s == CT_OK) s = ct_model_gpt(g, m->x, &c, &logits);
        if (s == CT_OK) s = ct_reshape(g, logits, 2, (int64_t[]){B * TT, V}, &flat);
        if (s == CT_OK) s = ct_reshape(g, m->y, 1, (int64_t[]){B * TT}, &lab);
    }
    if (s == CT_OK) s = ct_cross_entropy(g, flat, lab, 0.0f, -100, &m->loss);
    return s;
}

/* The batch of micro-batch mb into whichever plan has the inputs. */
static void fill(ct_plan *p, int kind, const model *m, int mb) {
    ct_tensor t;
    if (ct_plan_has_node(p, m->x) && ct_plan_tensor(p, m->x, &t) == CT_OK) {
        int64_t n = ct_tensor_numel(&t);
        for (int64_t i = 0; i < n; i++) {
            if (kind == GPT) ((int32_t *)t.data)[i] = (int32_t)((i * 37 + 11 + mb * 5) % V);
            else ((float *)t.data)[i] = (float)((i * 29 + mb * 7) % 17) / 8.0f - 1.0f;
        }
    }
    if (ct_plan_has_node(p, m->y) && ct_plan_tensor(p, m->y, &t) == CT_OK) {
        int64_t n = ct_tensor_numel(&t);
        for (int64_t i = 0; i < n; i++) ((int32_t *)t.data)[i] = (int32_t)((i * 53 + 5 + mb) % (kind == GPT ? V : 5));
    }
}

static ct_status compile(ct_context *ctx, const model *m, ct_precision prec, const ct_stage_opts *so, ct_plan **out) {
    ct_compile_opts co;
    ct_compile_opts_default(&co);
    co.precision = prec;
    co.accumulate_grads = 1;
    co.stage = so;
    return ct_compile(m->g, m->loss, 0, NULL, &co, out);
}

/* Copies link i of (a, part pa, dir da) into (b, part pb, dir db): values forward (outgoing -> incoming),
 * gradients backward (incoming grad -> outgoing seed). */
static ct_status pass_links(ct_context *ctx, ct_plan *from, int pf, ct_plan *to, int pt, int grads) {
    int n = ct_plan_num_links(from, pf, grads ? 0 : 1);
    if (n != ct_plan_num_links(to, pt, grads ? 1 : 0)) return CT_E_INTERNAL;
    for (int i = 0; i < n; i++) {
        ct_tensor fv, fg, tv, tg;
        ct_status s = ct_plan_link(from, pf, grads ? 0 : 1, i, &fv, &fg);
        if (s == CT_OK) s = ct_plan_link(to, pt, grads ? 1 : 0, i, &tv, &tg);
        if (s != CT_OK) return s;
        ct_tensor *src = grads ? &fg : &fv, *dst = grads ? &tg : &tv;
        if (!dst->data) continue;  /* the receiver wants no gradient of it */
        if (!src->data) {          /* none computed: zeros */
            memset(dst->data, 0, (size_t)ct_tensor_numel(dst) * ct_dtype_size(dst->dtype));
            continue;
        }
        if (ct_tensor_numel(src) != ct_tensor_numel(dst)) return CT_E_SHAPE;
        s = ct_convert(ctx, src, dst);
        if (s != CT_OK) return s;
    }
    return CT_OK;
}

/* Pieces held round-robin by n_plans plans (plan r: pieces r, r + n_plans, ...); one micro-batch per slot
 * (n_mb of them, each forward then all backwards in micro-batch order). *loss: the sum of their losses. */
typedef struct {
    int n_plans, n_pieces;
    ct_plan *p[4];
} staged;

static ct_status run_staged(ct_context *ctx, staged *S, int kind, const model *m, int n_mb, float *loss) {
    *loss = 0;
    for (int r = 0; r < S->n_plans; r++) {
        ct_status s = ct_plan_set_act_slots(S->p[r], n_mb * ct_plan_num_parts(S->p[r]));
        if (s == CT_OK) s = ct_plan_zero_grads(S->p[r]);
        if (s == CT_OK) s = ct_plan_set_loss_scale(S->p[r], 1.0f / (float)n_mb);
        if (s != CT_OK) return s;
    }
    /* every forward first (slot mb x parts + part keeps what its backward reads), then the backwards: the plans'
     * arenas are overwritten in between */
    for (int mb = 0; mb < n_mb; mb++)
        for (int k = 0; k < S->n_pieces; k++) {
            ct_plan *p = S->p[k % S->n_plans];
            const int part = k / S->n_plans, slot = mb * ct_plan_num_parts(p) + part;
            ct_status s = ct_plan_set_part(p, part);
            if (s == CT_OK && part == 0) fill(p, kind, m, mb);
            if (s == CT_OK && part > 0) s = ct_plan_restore_inputs(p, mb * ct_plan_num_parts(p)); /* part 0's */
            if (s == CT_OK && k) s = pass_links(ctx, S->p[(k - 1) % S->n_plans], (k - 1) / S->n_plans, p, part, 0);
            if (s == CT_OK) s = ct_plan_forward(p, 1);
            if (s == CT_OK) s = ct_plan_save_activations(p, slot);
            if (s != CT_OK) return s;
        }
    for (int mb = 0; mb < n_mb; mb++)
        for (int k = S->n_pieces - 1; k >= 0; k--) {
            ct_plan *p = S->p[k % S->n_plans];
            const int part = k / S->n_plans;
            ct_status s = ct_plan_set_part(p, part);
            if (s == CT_OK) s = ct_plan_restore_activations(p, mb * ct_plan_num_parts(p) + part);
            if (s == CT_OK && k + 1 < S->n_pieces)
                s = pass_links(ctx, S->p[(k + 1) % S->n_plans], (k + 1) / S->n_plans, p, k / S->n_plans, 1);
            if (s == CT_OK) s = ct_plan_backward(p);
            if (s != CT_OK) return s;
            if (k == S->n_pieces - 1) {
                float l;
                if ((s = ct_plan_loss(p, &l)) != CT_OK) return s;
                *loss += l / (float)n_mb;
            }
        }
    return CT_OK;
}

static ct_status run_whole(ct_plan *w, int kind, const model *m, int n_mb, float *loss) {
    *loss = 0;
    ct_status s = ct_plan_zero_grads(w);
    if (s == CT_OK) s = ct_plan_set_loss_scale(w, 1.0f / (float)n_mb);
    for (int mb = 0; s == CT_OK && mb < n_mb; mb++) {
        float l = 0;
        fill(w, kind, m, mb);
        s = ct_plan_forward(w, 1);
        if (s == CT_OK) s = ct_plan_backward(w);
        if (s == CT_OK) s = ct_plan_loss(w, &l);
        *loss += l / (float)n_mb;
    }
    return s;
}

/* Every parameter of the stage plans against the whole plan's: the same initial values; the gradient (summed
 * over the plans holding it) within tol of the whole's largest value (0: bit for bit for the untied). */
static int compare(ct_plan *w, const staged *S, double tol, double *worst, char *what, size_t len) {
    *worst = 0;
    for (int i = 0; i < ct_plan_num_params(w); i++) {
        const char *name;
        ct_tensor wv, wg;
        ct_plan_param_info(w, i, &name, &wv, &wg);
        int64_t n = ct_tensor_numel(&wv);
        float *sum = calloc((size_t)n, sizeof(float));
        int holders = 0;
        for (int r = 0; r < S->n_plans && sum; r++) {
            int j;
            ct_tensor v, g;
            if (ct_plan_find_param(S->p[r], name, &j) != CT_OK) continue;
            ct_plan_param_info(S->p[r], j, NULL, &v, &g);
            if (memcmp(v.data, wv.data, (size_t)n * sizeof(float))) {
                snprintf(what, len, "'%s' starts with other values", name);
                free(sum);
                return 0;
            }
            for (int64_t e = 0; e < n; e++) sum[e] += ((float *)g.data)[e];
            holders++;
        }
        if (!holders || !sum) {
            snprintf(what, len, "no stage holds '%s'", name);
            free(sum);
            return 0;
        }
        double mx = 0, d = 0;
        for (int64_t e = 0; e < n; e++) {
            mx = fmax(mx, fabs(((float *)wg.data)[e]));
            d = fmax(d, fabs((double)sum[e] - ((float *)wg.data)[e]));
        }
        free(sum);
        double rel = d / (mx > 0 ? mx : 1);
        if (rel > *worst) *worst = rel;
        if ((holders == 1 && tol == 0 && d != 0) || rel > (tol > 0 ? tol : 1e-6)) {
            snprintf(what, len, "'%s' (%d holders): gradient differs by %.3g of its largest", name, holders, rel);
            return 0;
        }
    }
    return 1;
}

/* The model cut at `cuts` (n_pieces), held by n_plans plans, n_mb micro-batches, against the whole plan. */
static void check_cut(int kind, ct_precision prec, int n_pieces, const int *cuts, int n_plans, int n_mb, double ltol,
                      double gtol) {
    ct_context *ctx = test_ctx(-1, 1);
    model m;
    ct_plan *w = NULL;
    staged S = {.n_plans = n_plans, .n_pieces = n_pieces};
    CHECK_OK(ctx, build(ctx, kind, &m));
    CHECK_OK(ctx, compile(ctx, &m, prec, NULL, &w));
    for (int r = 0; r < n_plans; r++) {
        int held[8], nh = 0;
        for (int k = r; k < n_pieces; k += n_plans) held[nh++] = k;
        ct_stage_opts so = {.n_pieces = n_pieces, .cuts = cuts, .n_held = nh, .held = held};
        CHECK_OK(ctx, compile(ctx, &m, prec, &so, &S.p[r]));
        CHECK(ct_plan_num_parts(S.p[r]) == nh);
    }
    ct_graph_free(m.g);
    ct_plan_stats ps;
    ct_plan_get_stats(S.p[0], &ps);
    const size_t kept = ct_plan_saved_bytes(S.p[0], -1);
    /* disjoint ranges of the arena (at most all of it) */
    CHECK_MSG(kept > 0 && kept <= ps.activation_bytes,
              "a slot keeps %zu of the arena's %zu bytes", kept, (size_t)ps.activation_bytes);
    float lw, ls;
    CHECK_OK(ctx, run_whole(w, kind, &m, n_mb, &lw));
    CHECK_OK(ctx, run_staged(ctx, &S, kind, &m, n_mb, &ls));
    double worst;
    char what[256] = "";
    CHECK_MSG(ltol == 0 ? ls == lw : fabs(ls - lw) <= ltol * fabs(lw), "loss %.9g staged, %.9g whole", ls, lw);
    CHECK_MSG(compare(w, &S, gtol, &worst, what, sizeof what), "%s", what);
    printf("    %s %s, %d pieces on %d plans, %d micro-batches: loss %.7g (whole %.7g), gradients within %.2g; a slot "
           "keeps %zu of the arena's %zu bytes\n", kind == MLP ? "mlp" : kind == CNN ? "cnn" : "gpt",
           prec == CT_PRECISION_FP32 ? "fp32" : "bf16", n_pieces, n_plans, n_mb, ls, lw, worst, kept,
           (size_t)ps.activation_bytes);
    for (int r = 0; r < n_plans; r++) ct_plan_free(S.p[r]);
    ct_plan_free(w);
    ct_context_free(ctx);
}

TEST(mlp_two_stages_equal_whole) { check_cut(MLP, CT_PRECISION_FP32, 2, (int[]){2}, 2, 1, 0, 0); }
TEST(mlp_four_stages_equal_whole) { check_cut(MLP, CT_PRECISION_FP32, 4, (int[]){1, 2, 3}, 4, 1, 0, 0); }
TEST(mlp_interleaved_parts_equal_whole) { check_cut(MLP, CT_PRECISION_FP32, 4, (int[]){1, 2, 3}, 2, 1, 0, 0); }
TEST(mlp_slots_accumulate_micro_batches) { check_cut(MLP, CT_PRECISION_FP32, 2, (int[]){3}, 2, 3, 0, 0); }
TEST(cnn_stages_equal_whole) { check_cut(CNN, CT_PRECISION_FP32, 3, (int[]){1, 2}, 3, 2, 0, 0); }
TEST(gpt_tied_stages_equal_whole) { check_cut(GPT, CT_PRECISION_FP32, 2, (int[]){2}, 2, 2, 0, 1e-6); }
TEST(gpt_interleaved_equal_whole) { check_cut(GPT, CT_PRECISION_FP32, 4, (int[]){1, 2, 3}, 2, 2, 0, 1e-6); }
TEST(gpt_bf16_stages_near_whole) { check_cut(GPT, CT_PRECISION_BF16, 2, (int[]){2}, 2, 2, 2e-2, 5e-2); }

/* Balanced cuts: valid, each piece's cost reported, their FLOPs summing to the whole's. */
TEST(balance_and_names) {
    ct_context *ctx = test_ctx(-1, 1);
    model m;
    CHECK_OK(ctx, build(ctx, GPT, &m));
    CHECK(ct_graph_num_blocks(m.g) == 4);
    int cuts[3], b = -1;
    CHECK_OK(ctx, ct_graph_balance_cuts(m.g, 2, cuts));
    CHECK_MSG(cuts[0] >= 1 && cuts[0] <= 3, "cut %d", cuts[0]);
    double f2[2], p2[2], f1, p1;
    CHECK_OK(ctx, ct_graph_piece_costs(m.g, 2, cuts, f2, p2));
    CHECK_OK(ctx, ct_graph_piece_costs(m.g, 1, NULL, &f1, &p1));
    CHECK_MSG(fabs(f2[0] + f2[1] - f1) <= 1e-9 * f1, "flops %g + %g vs %g", f2[0], f2[1], f1);
    CHECK_MSG(p2[0] + p2[1] > p1, "the tied embedding counts in both pieces: %g + %g vs %g", p2[0], p2[1], p1);
    printf("    gpt 4 blocks in 2: cut at block %d, GFLOP %.4f | %.4f, params %.0f | %.0f\n", cuts[0], f2[0] * 1e-9,
           f2[1] * 1e-9, p2[0], p2[1]);
    CHECK_OK(ctx, ct_graph_balance_cuts(m.g, 4, cuts));
    CHECK(cuts[0] == 1 && cuts[1] == 2 && cuts[2] == 3);
    CHECK(ct_graph_balance_cuts(m.g, 6, cuts) == CT_E_CONFIG);
    CHECK(strstr(ct_context_last_error(ctx), "at least 6 blocks"));
    CHECK_OK(ctx, ct_graph_find_block(m.g, "transformer.h.2", &b));
    CHECK_MSG(b == 2, "transformer.h.2 is block %d (%s)", b, ct_graph_block_name(m.g, 2));
    CHECK(ct_graph_find_block(m.g, "nope", &b) == CT_E_INVALID_ARG);
    CHECK(strstr(ct_context_last_error(ctx), "names no block"));
    ct_plan *p = NULL;
    ct_stage_opts bad = {.n_pieces = 2, .cuts = (int[]){4}, .n_held = 1, .held = (int[]){0}};
    CHECK(compile(ctx, &m, CT_PRECISION_FP32, &bad, &p) == CT_E_CONFIG);
    CHECK(strstr(ct_context_last_error(ctx), "ascending block indices in 1 .. 3"));
    ct_stage_opts cons = {.n_pieces = 3, .cuts = (int[]){1, 2}, .n_held = 2, .held = (int[]){0, 1}};
    CHECK(compile(ctx, &m, CT_PRECISION_FP32, &cons, &p) == CT_E_INVALID_ARG);
    CHECK(strstr(ct_context_last_error(ctx), "no two consecutive"));
    ct_stage_opts one = {.n_pieces = 2, .cuts = (int[]){2}, .n_held = 1, .held = (int[]){1}};
    CHECK_OK(ctx, compile(ctx, &m, CT_PRECISION_FP32, &one, &p));
    ct_tensor t;
    /* every data input is on every stage (a task fills the same tensors everywhere) */
    CHECK(ct_plan_has_node(p, m.x) && ct_plan_has_node(p, m.y));
    CHECK_OK(ctx, ct_plan_tensor(p, m.x, &t));
    CHECK(ct_plan_num_links(p, 0, 0) == 1 && ct_plan_num_links(p, 0, 1) == 0);
    ct_plan_free(p);
    /* the first stage: the loss is not there; an output it does not compute is a stand-in */
    ct_stage_opts first = {.n_pieces = 2, .cuts = (int[]){2}, .n_held = 1, .held = (int[]){0}};
    ct_compile_opts co;
    ct_compile_opts_default(&co);
    co.stage = &first;
    ct_node lnf = CT_NONE;
    for (int i = 0; i < ct_graph_num_nodes(m.g); i++)
        if (!strcmp(ct_node_name(m.g, i), "transformer.ln_f")) lnf = i;
    CHECK(lnf != CT_NONE);
    CHECK_OK(ctx, ct_compile(m.g, m.loss, 1, &lnf, &co, &p));
    float l;
    CHECK(!ct_plan_has_node(p, lnf) && !ct_plan_has_node(p, m.loss));
    CHECK_OK(ctx, ct_plan_tensor(p, lnf, &t));
    CHECK(ct_plan_loss(p, &l) == CT_E_STATE);
    CHECK(ct_plan_num_links(p, 0, 0) == 0 && ct_plan_num_links(p, 0, 1) == 1);
    ct_plan_free(p);
    ct_graph_free(m.g);
    ct_context_free(ctx);
}

TEST_MAIN(T(mlp_two_stages_equal_whole), T(mlp_four_stages_equal_whole), T(mlp_interleaved_parts_equal_whole),
          T(mlp_slots_accumulate_micro_batches), T(cnn_stages_equal_whole), T(gpt_tied_stages_equal_whole),
          T(gpt_interleaved_equal_whole), T(gpt_bf16_stages_near_whole), T(balance_and_names))
