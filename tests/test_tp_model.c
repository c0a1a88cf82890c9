/* tests/test_tp_model.c - GPT and BERT split by tensor parallelism equal the
 * one-process model (tests/tp_test.sh runs it under mpirun at 2 and 4
 * ranks; alone it is a world of one, where the split model is the whole one).
 *
 * Each rank builds the model twice on the same seed and batch: split over
 * the world as the tensor group, and whole (no group). In FP32:
 *  - every shard starts with the whole tensor's values at its positions
 *    (bit for bit: the same counter-based draws);
 *  - the losses agree within 1e-5;
 *  - every parameter's gradient agrees with the matching slice of the whole
 *    gradient within 1e-5 of its largest value;
 *  - no node output of the split plan (forward or backward) with B x T rows
 *    has V columns: the vocabulary-parallel cross entropy never forms the
 *    whole logits (the whole plan's do have them: the check sees them);
 *  - recompute_blocks 1 gives the same loss and gradients bit for bit, with
 *    a smaller activation arena, also when split (the collectives of a block
 *    are replayed in the same order on every rank);
 *  - BF16 (autocast) split is within the BF16 goldens' tolerance of FP32 whole;
 *  - ct_weights_save of the split plan writes the one-process file (the whole plan loads one process's
 *    weights from it, the split plan its shards);
 *  - a tensor_parallel that does not divide the heads is a clear error. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"

#define TRY(e)                          \
    do {                                \
        ct_status t_ = (e);             \
        if (t_ != CT_OK) return t_;     \
    } while (0)

static ct_context *g_ctx;
static ct_comm *g_world;

enum { B = 2, TT = 8, V = 203 }; /* V: padded to a multiple of 2 and 4 */

typedef struct {
    ct_plan *p;
    ct_node ids, labels, kv, loss;
    float l;
    int64_t max_cols; /* the longest last axis of a node output with at least B x T rows */
} model_run;

static void on_node(void *user, const ct_node_event *ev) {
    model_run *m = user;
    if (ev->kind != CT_NODE_END) return;
    if (ev->ndim < 2) return;
    int64_t rows = 1;
    for (int i = 0; i < ev->ndim - 1; i++) rows *= ev->shape[i];
    if (rows >= B * TT && ev->shape[ev->ndim - 1] > m->max_cols) m->max_cols = ev->shape[ev->ndim - 1];
}

/* bert 0: GPT (4 heads, d 32, 2 layers); 1: BERT (d_ff 64). group: the tensor group or NULL. */
static ct_status build_p(int bert, ct_comm *group, int recompute_blocks, ct_precision prec, model_run *m) {
    memset(m, 0, sizeof *m);
    ct_graph *g;
    TRY(ct_graph_create(g_ctx, &g));
    ct_status s = ct_graph_set_tensor_group(g, group);
    ct_node logits, flat, lab;
    if (s == CT_OK) s = ct_input(g, "ids", CT_I32, 2, (int64_t[]){B, TT}, &m->ids);
    if (s == CT_OK) s = ct_input(g, "labels", CT_I32, 2, (int64_t[]){B, TT}, &m->labels);
    m->kv = CT_NONE;
    if (s == CT_OK && bert) s = ct_input(g, "key_valid", CT_I32, 2, (int64_t[]){B, TT}, &m->kv);
    if (s == CT_OK && !bert) {
        ct_gpt_config c = {.vocab = V, .context = TT, .n_layer = 2, .n_head = 4, .d_model = 32, .dropout = 0.0f,
                           .bias = 1, .gelu_tanh = 1};
        s = ct_model_gpt(g, m->ids, &c, &logits);
    } else if (s == CT_OK) {
        ct_bert_config c = {.vocab = V, .context = TT, .n_layer = 2, .n_head = 4, .d_model = 32, .d_ff = 64,
                            .type_vocab = 2, .dropout = 0.0f, .ln_eps = 1e-12f};
        s = ct_model_bert(g, m->ids, m->kv, CT_NONE, CT_NONE, &c, &logits);
    }
    int nd;
    int64_t ls[CT_MAX_DIMS];
    if (s == CT_OK) s = ct_node_shape(g, logits, &nd, ls);
    if (s == CT_OK) s = ct_reshape(g, logits, 2, (int64_t[]){B * TT, ls[nd - 1]}, &flat);
    if (s == CT_OK) s = ct_reshape(g, m->labels, 1, (int64_t[]){B * TT}, &lab);
    if (s == CT_OK && group) s = ct_cross_entropy_vp(g, flat, lab, 0.1f, -100, V, &m->loss);
    if (s == CT_OK && !group) s = ct_cross_entropy(g, flat, lab, 0.1f, -100, &m->loss);
    ct_compile_opts co;
    ct_compile_opts_default(&co);
    co.recompute_blocks = recompute_blocks;
    co.precision = prec;
    if (s == CT_OK) s = ct_compile(g, m->loss, 0, NULL, &co, &m->p);
    ct_graph_free(g);
    TRY(s);
    ct_tensor ti, tl, tk;
    TRY(ct_plan_tensor(m->p, m->ids, &ti));
    TRY(ct_plan_tensor(m->p, m->labels, &tl));
    for (int i = 0; i < B * TT; i++) {
        ((int32_t *)ti.data)[i] = (i * 37 + 11) % V;
        ((int32_t *)tl.data)[i] = i % 7 == 3 ? -100 : (i * 53 + 5) % V; /* some ignored positions */
    }
    if (bert) {
        TRY(ct_plan_tensor(m->p, m->kv, &tk));
        for (int i = 0; i < B * TT; i++) ((int32_t *)tk.data)[i] = !(i / TT == 1 && i % TT >= TT - 2); /* padding */
    }
    ct_plan_set_node_hook(m->p, on_node, m);
    TRY(ct_plan_forward(m->p, 1));
    TRY(ct_plan_backward(m->p));
    ct_plan_set_node_hook(m->p, NULL, NULL);
    return ct_plan_loss(m->p, &m->l);
}

static ct_status build(int bert, ct_comm *group, int recompute_blocks, model_run *m) {
    return build_p(bert, group, recompute_blocks, CT_PRECISION_FP32, m);
}

/* The split plan's shards against the whole plan's tensors: values (bit for bit) and gradients. */
static int compare(const model_run *sp, const model_run *wh, double *worst) {
    *worst = 0;
    const int np = ct_plan_num_params(sp->p);
    if (np != ct_plan_num_params(wh->p)) return -1;
    for (int i = 0; i < np; i++) {
        const char *name, *wname;
        ct_tensor v, g, wv, wg;
        ct_shard sh;
        if (ct_plan_param_info(sp->p, i, &name, &v, &g) != CT_OK || ct_plan_param_shard(sp->p, i, &sh) != CT_OK ||
            ct_plan_param_info(wh->p, i, &wname, &wv, &wg) != CT_OK || strcmp(name, wname))
            return -1;
        size_t n = (size_t)ct_tensor_numel(&v);
        float *ev = malloc(n * sizeof(float)), *eg = malloc(n * sizeof(float));
        if (!ev || !eg) return -1;
        if (sh.dim >= 0) {
            ct_shard_copy(&sh, v.ndim, v.shape, wv.data, ev, 1);
            ct_shard_copy(&sh, v.ndim, v.shape, wg.data, eg, 1);
        } else {
            memcpy(ev, wv.data, n * sizeof(float));
            memcpy(eg, wg.data, n * sizeof(float));
        }
        int same = !memcmp(ev, v.data, n * sizeof(float));
        double gm = 0, d = 0;
        for (size_t k = 0; k < n; k++) {
            gm = fmax(gm, fabs(eg[k]));
            d = fmax(d, fabs(eg[k] - ((float *)g.data)[k]));
        }
        free(ev);
        free(eg);
        if (!same) {
            fprintf(stderr, "  '%s': the shard's initial values differ from the whole tensor's\n", name);
            return i + 1;
        }
        double rel = gm > 0 ? d / gm : d;
        if (rel > *worst) *worst = rel;
        if (rel > 1e-5) {
            fprintf(stderr, "  '%s': gradient differs by %.3g of its largest value %.3g\n", name, rel, gm);
            return i + 1;
        }
    }
    return 0;
}

static void equals_one_process(int bert) {
    model_run sp, wh;
    CHECK_OK(g_ctx, build(bert, g_world, 0, &sp));
    CHECK_OK(g_ctx, build(bert, NULL, 0, &wh));
    double worst;
    int bad = compare(&sp, &wh, &worst);
    const int T = ct_comm_size(g_world);
    printf("  %s, tensor_parallel %d: loss %.7f vs %.7f, worst gradient %.2e of its largest value, widest activation %lld "
           "columns (vocabulary %d)\n",
           bert ? "bert" : "gpt", T, (double)sp.l, (double)wh.l, worst, (long long)sp.max_cols, V);
    CHECK_MSG(fabsf(sp.l - wh.l) <= 1e-5f * fmaxf(1.0f, fabsf(wh.l)), "loss %.8f vs %.8f", (double)sp.l, (double)wh.l);
    CHECK_MSG(bad == 0, "parameter %d differs", bad);
    if (T > 1) CHECK_MSG(sp.max_cols < V, "a node of %lld columns: the whole logits were formed", (long long)sp.max_cols);
    CHECK(wh.max_cols >= V); /* the check sees the whole logits where they are */
    ct_plan_free(sp.p);
    ct_plan_free(wh.p);
}

TEST(gpt_equals_one_process) { equals_one_process(0); }
TEST(bert_equals_one_process) { equals_one_process(1); }

/* recompute_blocks replays each block (its collectives included) in backward: the same bits, less memory */
static void recompute_blocks_same_bits(int bert) {
    model_run a, b;
    CHECK_OK(g_ctx, build(bert, g_world, 0, &a));
    CHECK_OK(g_ctx, build(bert, g_world, 1, &b));
    float *ga, *gb;
    size_t na, nb;
    CHECK_OK(g_ctx, ct_plan_param_arena(a.p, NULL, &ga, &na));
    CHECK_OK(g_ctx, ct_plan_param_arena(b.p, NULL, &gb, &nb));
    ct_plan_stats sa, sb;
    ct_plan_get_stats(a.p, &sa);
    ct_plan_get_stats(b.p, &sb);
    printf("  %s, tensor_parallel %d: activations %zu bytes, with recompute_blocks 1 %zu\n", bert ? "bert" : "gpt",
           ct_comm_size(g_world), sa.activation_bytes, sb.activation_bytes);
    CHECK(na == nb);
    CHECK(memcmp(&a.l, &b.l, sizeof a.l) == 0);
    CHECK_MSG(memcmp(ga, gb, na * sizeof(float)) == 0, "gradients differ with recompute_blocks");
    CHECK(sb.activation_bytes < sa.activation_bytes);
    ct_plan_free(a.p);
    ct_plan_free(b.p);
}

TEST(gpt_recompute_blocks_same_bits) { recompute_blocks_same_bits(0); }
TEST(bert_recompute_blocks_same_bits) { recompute_blocks_same_bits(1); }

/* BF16 (autocast) split against FP32 whole: within the BF16 goldens' tolerance (tests/golden.h GOLDEN_BF16_TOL:
 * the loss relative, each gradient as |g - ref| / |ref| over the tensor) */
static void bf16_within_golden_tolerance(int bert) {
    model_run sp, wh;
    CHECK_OK(g_ctx, build_p(bert, g_world, 0, CT_PRECISION_BF16, &sp));
    CHECK_OK(g_ctx, build(bert, NULL, 0, &wh));
    double worst = 0;
    const char *worst_name = "";
    for (int i = 0; i < ct_plan_num_params(sp.p); i++) {
        const char *name;
        ct_tensor v, g, wg;
        ct_shard sh;
        CHECK_OK(g_ctx, ct_plan_param_info(sp.p, i, &name, &v, &g));
        CHECK_OK(g_ctx, ct_plan_param_shard(sp.p, i, &sh));
        CHECK_OK(g_ctx, ct_plan_param_info(wh.p, i, NULL, NULL, &wg));
        size_t n = (size_t)ct_tensor_numel(&g);
        float *eg = malloc(n * sizeof(float));
        CHECK(eg != NULL);
        if (sh.dim >= 0) ct_shard_copy(&sh, g.ndim, g.shape, wg.data, eg, 1);
        else memcpy(eg, wg.data, n * sizeof(float));
        double num = 0, den = 0;
        for (size_t k = 0; k < n; k++) {
            double d = (double)((float *)g.data)[k] - eg[k];
            num += d * d;
            den += (double)eg[k] * eg[k];
        }
        free(eg);
        double e = den > 0 ? sqrt(num / den) : sqrt(num);
        if (e > worst) worst = e, worst_name = name;
    }
    double lrel = fabs((double)sp.l - wh.l) / fabs((double)wh.l);
    printf("  %s bf16, tensor_parallel %d: loss %.5f vs fp32 %.5f (rel %.2e), worst gradient %.2e (%s)\n",
           bert ? "bert" : "gpt", ct_comm_size(g_world), (double)sp.l, (double)wh.l, lrel, worst, worst_name);
    CHECK(lrel <= 2e-2);
    CHECK_MSG(worst <= 2e-2, "%s off by %.3g", worst_name, worst);
    ct_plan_free(sp.p);
    ct_plan_free(wh.p);
}

TEST(gpt_bf16_within_golden_tolerance) { bf16_within_golden_tolerance(0); }
TEST(bert_bf16_within_golden_tolerance) { bf16_within_golden_tolerance(1); }

/* ct_weights_save on a split plan (every rank calls it) writes the one-process file: the whole plan loads it and
 * holds one process's initial weights; the split plan loads it back into its shards */
TEST(weights_file_is_the_one_process_file) {
    model_run sp, wh;
    CHECK_OK(g_ctx, build(0, g_world, 0, &sp));
    CHECK_OK(g_ctx, build(0, NULL, 0, &wh));
    long pid = (long)getpid();
    CHECK_OK(g_ctx, ct_comm_broadcast(g_world, &pid, sizeof pid, 0));
    char path[128];
    snprintf(path, sizeof path, "/tmp/test_tp_model.%ld.safetensors", pid);
    CHECK_OK(g_ctx, ct_weights_save(g_ctx, path, sp.p)); /* sp's values are still the initial ones */
    float *wp, *sp_par;
    size_t wn, sn;
    CHECK_OK(g_ctx, ct_plan_param_arena(wh.p, &wp, NULL, &wn));
    CHECK_OK(g_ctx, ct_plan_param_arena(sp.p, &sp_par, NULL, &sn));
    float *wcopy = malloc(wn * sizeof(float)), *scopy = malloc(sn * sizeof(float));
    CHECK(wcopy && scopy);
    memcpy(wcopy, wp, wn * sizeof(float));
    memcpy(scopy, sp_par, sn * sizeof(float));
    memset(wp, 0, wn * sizeof(float));
    memset(sp_par, 0, sn * sizeof(float));
    ct_status lw = ct_weights_load(g_ctx, path, wh.p), ls = ct_weights_load(g_ctx, path, sp.p);
    CHECK_OK(g_ctx, ct_comm_barrier(g_world));
    if (ct_comm_rank(g_world) == 0) remove(path);
    CHECK_OK(g_ctx, lw);
    CHECK_OK(g_ctx, ls);
    CHECK_MSG(!memcmp(wcopy, wp, wn * sizeof(float)), "the file is not one process's initial weights");
    CHECK_MSG(!memcmp(scopy, sp_par, sn * sizeof(float)), "the shards loaded from the file differ");
    free(wcopy);
    free(scopy);
    ct_plan_free(sp.p);
    ct_plan_free(wh.p);
}

TEST(heads_must_divide) {
    if (ct_comm_size(g_world) < 2) return; /* every size divides with one rank */
    ct_graph *g;
    CHECK_OK(g_ctx, ct_graph_create(g_ctx, &g));
    CHECK_OK(g_ctx, ct_graph_set_tensor_group(g, g_world));
    ct_node ids, logits;
    CHECK_OK(g_ctx, ct_input(g, "ids", CT_I32, 2, (int64_t[]){B, TT}, &ids));
    ct_gpt_config c = {.vocab = V, .context = TT, .n_layer = 1, .n_head = 3, .d_model = 24, .bias = 1};
    ct_status s = ct_model_gpt(g, ids, &c, &logits);
    ct_graph_free(g);
    CHECK(s == CT_E_CONFIG);
    CHECK(strstr(ct_context_last_error(g_ctx), "tensor_parallel") && strstr(ct_context_last_error(g_ctx), "n_head 3"));
}

int main(int argc, char **argv) {
    static const ct_test_case cases[] = {T(gpt_equals_one_process), T(bert_equals_one_process),
                                         T(gpt_recompute_blocks_same_bits), T(bert_recompute_blocks_same_bits),
                                         T(gpt_bf16_within_golden_tolerance), T(bert_bf16_within_golden_tolerance),
                                         T(weights_file_is_the_one_process_file), T(heads_must_divide)};
    if (test_mpi_start("test_tp_model", &g_ctx, &g_world)) return 1;
    int rc = ct_test_main(__FILE__, cases, (int)(sizeof cases / sizeof cases[0]), argc, argv);
    return test_mpi_finish(g_ctx, g_world, rc);
}
