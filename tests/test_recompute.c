/* tests/test_recompute.c - activation checkpointing (the recompute pass,
 * src/graph/recompute.c): with recompute_every = 1, 2, 3 and selective
 * recompute_ops, the loss, the logits, every gradient and the batchnorm
 * running statistics equal those of the plan without recomputation bit for
 * bit (same kernels on equal inputs; dropout regenerates its mask from the
 * same stream and step; a recomputed batchnorm uses batch statistics and does
 * not update the running statistics again), over two steps, with the best
 * kernels and with the reference ones; the activation arena is smaller; in
 * BF16 the recomputed layers read the kept weight copies; and a
 * deeper MLP reports the memory saved and the time it costs (information
 * only, never asserted). */
#include <stdint.h>
#include <time.h>

#include "test.h"
#include "graph/plan.h" /* the ops and flags of a compiled plan's nodes */

typedef struct {
    const char *name;
    int every;
    uint32_t ops;
} rc_cfg;

static const rc_cfg k_cfgs[] = {
    {"every=1", 1, 0},
    {"every=2", 2, 0},
    {"every=3", 3, 0},
    {"selective cheap", 0, CT_RECOMPUTE_CHEAP},
    {"selective cheap+reduce", 0, CT_RECOMPUTE_CHEAP | CT_RECOMPUTE_REDUCE},
    {"every=2 cheap only", 2, CT_RECOMPUTE_CHEAP},
};
#define N_CFGS ((int)(sizeof k_cfgs / sizeof k_cfgs[0]))

typedef struct {
    ct_plan *plan;
    ct_node x, y, logits, loss;
} rc_model;

/* model: 0 MLP with dropout, 1 CNN with batchnorm; x (batch, in) or (batch, 1, hw, hw); prec: the plan's precision */
static ct_status build(ct_context *ctx, ct_precision prec, int cnn, int64_t batch, int64_t in, int n_layers,
                       const int64_t *sizes, float dropout, int every, uint32_t ops, rc_model *m) {
    ct_graph *g;
    memset(m, 0, sizeof *m);
    ct_status s = ct_graph_create(ctx, &g);
    if (s != CT_OK) return s;
    int64_t xs[4] = {batch, 1, in, in};
    if (!cnn) xs[1] = in;
    s = ct_input(g, "x", CT_F32, cnn ? 4 : 2, xs, &m->x);
    if (s == CT_OK) s = ct_input(g, "y", CT_I32, 1, xs, &m->y);
    if (s == CT_OK)
        s = cnn ? ct_model_cnn(g, m->x, n_layers, sizes, 10, &m->logits)
                : ct_model_mlp(g, m->x, n_layers, sizes, 10, CT_ACT_RELU, dropout, &m->logits);
    if (s == CT_OK) s = ct_cross_entropy(g, m->logits, m->y, 0.1f, -100, &m->loss);
    ct_compile_opts o;
    ct_compile_opts_default(&o);
    o.recompute_every = every;
    o.recompute_ops = ops;
    o.precision = prec;
    if (s == CT_OK) s = ct_compile(g, m->loss, 1, &m->logits, &o, &m->plan);
    ct_graph_free(g);
    if (s != CT_OK) return s;
    ct_tensor tx, ty;
    ct_plan_tensor(m->plan, m->x, &tx);
    ct_plan_tensor(m->plan, m->y, &ty);
    test_fill_uniform(tx.data, (size_t)ct_tensor_numel(&tx), 3, -1, 1);
    for (int64_t i = 0; i < batch; i++) ((int32_t *)ty.data)[i] = (int32_t)((i * 7) % 10);
    return CT_OK;
}

/* One training step at `step`, then a plain SGD update (identical arithmetic
 * in every plan, so the next step starts from equal parameters). */
static ct_status step(rc_model *m, uint64_t stepno) {
    ct_plan_set_step(m->plan, stepno);
    ct_status s = ct_plan_forward(m->plan, 1);
    if (s == CT_OK) s = ct_plan_backward(m->plan);
    return s;
}

static void sgd(rc_model *m) {
    float *w, *gr;
    size_t n;
    ct_plan_param_arena(m->plan, &w, &gr, &n);
    for (size_t i = 0; i < n; i++) w[i] -= 0.05f * gr[i];
}

static int same_bits(const void *a, const void *b, size_t bytes) { return memcmp(a, b, bytes) == 0; }

/* Index of the first differing float, for messages. */
static size_t first_diff(const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof *a)) return i;
    return n;
}

static void check_model(int cnn, int fast) {
    ct_context *ctx = fast ? test_ctx(-1, 1) : test_ctx(CT_ISA_REF, 0);
    const int64_t mlp_sizes[] = {48, 32, 24, 16}, cnn_sizes[] = {4, 8, 8};
    const int64_t *sizes = cnn ? cnn_sizes : mlp_sizes;
    int nl = cnn ? 3 : 4;
    int64_t batch = 8, in = cnn ? 16 : 30;
    rc_model base;
    CHECK_OK(ctx, build(ctx, CT_PRECISION_FP32, cnn, batch, in, nl, sizes, 0.25f, 0, 0, &base));
    ct_plan_stats bs;
    ct_plan_get_stats(base.plan, &bs);
    size_t best = bs.activation_bytes;
    for (int c = 0; c < N_CFGS; c++) {
        rc_model m;
        CHECK_OK(ctx, build(ctx, CT_PRECISION_FP32, cnn, batch, in, nl, sizes, 0.25f, k_cfgs[c].every, k_cfgs[c].ops,
                            &m));
        /* start both from the same parameters and running statistics */
        float *w0, *w1, *g0, *g1, *b0, *b1;
        size_t np, nb;
        ct_plan_param_arena(base.plan, &w0, &g0, &np);
        ct_plan_param_arena(m.plan, &w1, &g1, &np);
        ct_plan_buffer_arena(base.plan, &b0, &nb);
        ct_plan_buffer_arena(m.plan, &b1, &nb);
        if (c == 0) CHECK(same_bits(w0, w1, np * sizeof *w0)); /* same initialization */
        if (c > 0) { /* base has trained: copy its state over */
            memcpy(w1, w0, np * sizeof *w0);
            memcpy(b1, b0, nb * sizeof *b0);
        }
        float *binit = malloc(nb * sizeof *binit + 1);
        memcpy(binit, b0, nb * sizeof *b0);
        for (uint64_t it = 0; it < 2; it++) {
            CHECK_OK(ctx, step(&base, 10 + it));
            CHECK_OK(ctx, step(&m, 10 + it));
            float l0, l1;
            ct_plan_loss(base.plan, &l0);
            ct_plan_loss(m.plan, &l1);
            CHECK_MSG(same_bits(&l0, &l1, sizeof l0), "%s %s %s step %d: loss %.9g vs %.9g", cnn ? "cnn" : "mlp",
                      fast ? "fast" : "ref", k_cfgs[c].name, (int)it, (double)l1, (double)l0);
            ct_tensor t0, t1;
            ct_plan_tensor(base.plan, base.logits, &t0);
            ct_plan_tensor(m.plan, m.logits, &t1);
            CHECK(same_bits(t0.data, t1.data, (size_t)ct_tensor_numel(&t0) * sizeof(float)));
            size_t d = first_diff(g1, g0, np);
            CHECK_MSG(d == np, "%s %s %s step %d: gradient float %zu differs: %.9g vs %.9g", cnn ? "cnn" : "mlp",
                      fast ? "fast" : "ref", k_cfgs[c].name, (int)it, d, (double)g1[d], (double)g0[d]);
            /* running statistics: updated (they moved), exactly once (equal to the plan without recompute) */
            CHECK_MSG(same_bits(b0, b1, nb * sizeof *b0), "%s %s: running statistics differ", cnn ? "cnn" : "mlp",
                      k_cfgs[c].name);
            if (cnn) CHECK(!same_bits(binit, b1, nb * sizeof *b1));
            memcpy(binit, b1, nb * sizeof *b1);
            sgd(&base);
            sgd(&m);
        }
        free(binit);
        ct_plan_stats ms;
        ct_plan_get_stats(m.plan, &ms);
        printf("    %s %-4s %-24s activation bytes %8zu -> %8zu (%+.0f%%), nodes %d -> %d\n", cnn ? "cnn" : "mlp",
               fast ? "fast" : "ref", k_cfgs[c].name, bs.activation_bytes, ms.activation_bytes,
               100.0 * ((double)ms.activation_bytes / (double)bs.activation_bytes - 1.0), bs.n_nodes, ms.n_nodes);
        CHECK_MSG(ms.n_nodes > bs.n_nodes, "%s: nothing was recomputed", k_cfgs[c].name);
        /* The MLP saves memory in every configuration. This 3-layer CNN's peak is its first layer:
           checkpointing every 2nd layer recomputes it next to the gradients (+5%) now that the
           planner frees a forward output read by the backward only for its saved state; the
           best configuration must still save memory (checked after the loop). */
        if (!cnn)
            CHECK_MSG(ms.activation_bytes < bs.activation_bytes, "%s: %zu activation bytes, not fewer than %zu",
                      k_cfgs[c].name, ms.activation_bytes, bs.activation_bytes);
        if (ms.activation_bytes < best) best = ms.activation_bytes;
        ct_plan_free(m.plan);
    }
    CHECK_MSG(best < bs.activation_bytes, "%s: no recompute configuration saves memory (%zu bytes)", cnn ? "cnn" : "mlp",
              bs.activation_bytes);
    ct_plan_free(base.plan);
    ct_mem_stats mst;
    ct_context_mem_stats(ctx, &mst);
    CHECK_MSG(mst.bytes_in_use == 0, "%zu bytes leaked", mst.bytes_in_use);
    ct_context_free(ctx);
}

TEST(mlp_dropout_recompute_is_bit_exact) {
    check_model(0, 1);
    check_model(0, 0);
}

TEST(cnn_batchnorm_recompute_is_bit_exact_and_updates_running_stats_once) {
    check_model(1, 1);
    check_model(1, 0);
}

/* BF16 autocast: the recomputed layers read the parameters' BF16 copies,
 * which live between steps anyway (the weight-copy arena), instead of
 * casting them again into the activation arena; results stay bit-exact and
 * every configuration saves memory. (Recomputing the casts made
 * checkpointing every 4th layer of an 8x512 BF16 MLP cost 24% more memory
 * than no checkpointing.) */
TEST(bf16_recompute_reads_the_kept_weight_copies) {
    ct_context *ctx = test_ctx(-1, 1);
    const int64_t sizes[] = {64, 64, 64, 64, 64, 64};
    rc_model base;
    CHECK_OK(ctx, build(ctx, CT_PRECISION_BF16, 0, 16, 40, 6, sizes, 0.1f, 0, 0, &base));
    ct_plan_stats bs;
    ct_plan_get_stats(base.plan, &bs);
    for (int every = 1; every <= 3; every++) {
        rc_model m;
        CHECK_OK(ctx, build(ctx, CT_PRECISION_BF16, 0, 16, 40, 6, sizes, 0.1f, every, 0, &m));
        float *w0, *w1, *g0, *g1;
        size_t np;
        ct_plan_param_arena(base.plan, &w0, &g0, &np);
        ct_plan_param_arena(m.plan, &w1, &g1, &np);
        memcpy(w1, w0, np * sizeof *w0);
        int recomputed = 0, recast = 0;
        const ct_graph *g = &m.plan->g;
        for (int i = 0; i < g->n; i++) {
            if (!m.plan->pn[i].live || !(g->nodes[i].flags & CT_NODE_RECOMPUTE)) continue;
            recomputed++;
            if (g->nodes[i].op == CT_OP_CAST && g->nodes[g->nodes[i].in[0]].op == CT_OP_PARAM) recast++;
        }
        CHECK_MSG(recomputed > 0 && recast == 0, "every=%d: %d recomputed nodes, %d of them weight casts", every,
                  recomputed, recast);
        for (uint64_t it = 0; it < 2; it++) {
            CHECK_OK(ctx, step(&base, 20 + it));
            CHECK_OK(ctx, step(&m, 20 + it));
            float l0, l1;
            ct_plan_loss(base.plan, &l0);
            ct_plan_loss(m.plan, &l1);
            CHECK_MSG(same_bits(&l0, &l1, sizeof l0), "bf16 every=%d step %d: loss %.9g vs %.9g", every, (int)it,
                      (double)l1, (double)l0);
            size_t d = first_diff(g1, g0, np);
            CHECK_MSG(d == np, "bf16 every=%d step %d: gradient float %zu differs", every, (int)it, d);
            sgd(&base);
            sgd(&m);
        }
        ct_plan_stats ms;
        ct_plan_get_stats(m.plan, &ms);
        printf("    bf16 mlp 6x64 every=%d: activation bytes %zu -> %zu (%+.0f%%)\n", every, bs.activation_bytes,
               ms.activation_bytes, 100.0 * ((double)ms.activation_bytes / (double)bs.activation_bytes - 1.0));
        CHECK_MSG(ms.activation_bytes < bs.activation_bytes, "bf16 every=%d: %zu activation bytes, not fewer than %zu",
                  every, ms.activation_bytes, bs.activation_bytes);
        ct_plan_free(m.plan);
    }
    ct_plan_free(base.plan);
    ct_context_free(ctx);
}

/* Off by default; forward-only plans and bad options. */
TEST(recompute_options) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_compile_opts o;
    ct_compile_opts_default(&o);
    CHECK(o.recompute_every == 0 && o.recompute_ops == 0);
    ct_graph *g;
    CHECK_OK(ctx, ct_graph_create(ctx, &g));
    ct_node x, y, logits, loss;
    CHECK_OK(ctx, ct_input(g, "x", CT_F32, 2, (int64_t[]){4, 6}, &x));
    CHECK_OK(ctx, ct_input(g, "y", CT_I32, 1, (int64_t[]){4}, &y));
    CHECK_OK(ctx, ct_model_mlp(g, x, 2, (int64_t[]){8, 8}, 3, CT_ACT_RELU, 0.1f, &logits));
    CHECK_OK(ctx, ct_cross_entropy(g, logits, y, 0, -100, &loss));
    ct_plan *p = NULL;
    o.recompute_every = -1;
    CHECK(ct_compile(g, loss, 0, NULL, &o, &p) == CT_E_INVALID_ARG && !p);
    CHECK(strstr(ct_context_last_error(ctx), "recompute_every"));
    o.recompute_every = 0;
    o.recompute_ops = 1u << 20;
    CHECK(ct_compile(g, loss, 0, NULL, &o, &p) == CT_E_INVALID_ARG && !p);
    /* forward only: the pass does nothing */
    o.recompute_every = 1;
    o.recompute_ops = 0;
    o.build_backward = 0;
    CHECK_OK(ctx, ct_compile(g, loss, 1, &logits, &o, &p));
    CHECK_OK(ctx, ct_plan_forward(p, 0));
    ct_plan_free(p);
    ct_graph_free(g);
    ct_context_free(ctx);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Deep MLP: 8 hidden layers of 512, batch 256, without and with dropout.
 * Memory must drop wherever the pass recomputed something; step times are
 * printed for information only: all plans are built first and timed round
 * robin (median), so load on a shared machine hits them alike.
 * CT_RECOMPUTE_BENCH_STEPS sets the timed rounds (default 9). */
#define RC_DEEP_CFGS 6
TEST(deep_mlp_memory_and_time) {
    ct_context *ctx = test_ctx(-1, 1);
    int64_t sizes[8];
    for (int i = 0; i < 8; i++) sizes[i] = 512;
    static const rc_cfg cfgs[RC_DEEP_CFGS] = {{"none", 0, 0},
                                              {"every=1", 1, 0},
                                              {"every=2", 2, 0},
                                              {"every=3", 3, 0},
                                              {"selective cheap", 0, CT_RECOMPUTE_CHEAP},
                                              {"every=2 cheap only", 2, CT_RECOMPUTE_CHEAP}};
    const char *steps_env = getenv("CT_RECOMPUTE_BENCH_STEPS");
    int ns = steps_env ? atoi(steps_env) : 9;
    if (ns < 1) ns = 1;
    if (ns > 64) ns = 64;
    for (int drop = 0; drop < 2; drop++) {
        rc_model m[RC_DEEP_CFGS];
        double t[RC_DEEP_CFGS][64];
        memset(m, 0, sizeof m);
        for (int c = 0; c < RC_DEEP_CFGS; c++) {
            CHECK_OK(ctx, build(ctx, CT_PRECISION_FP32, 0, 256, 784, 8, sizes, drop ? 0.1f : 0.0f, cfgs[c].every,
                                cfgs[c].ops, &m[c]));
            for (int w = 0; w < 2; w++) CHECK_OK(ctx, step(&m[c], 1)); /* warm up (oneDNN primitives) */
        }
        for (int s = 0; s < ns; s++)
            for (int c = 0; c < RC_DEEP_CFGS; c++) {
                double t0 = now_s();
                CHECK_OK(ctx, step(&m[c], 1));
                t[c][s] = now_s() - t0;
            }
        ct_plan_stats bs;
        ct_plan_get_stats(m[0].plan, &bs);
        float *g0, *gc;
        size_t np;
        ct_plan_param_arena(m[0].plan, NULL, &g0, &np);
        double base_t = 0;
        for (int c = 0; c < RC_DEEP_CFGS; c++) {
            qsort(t[c], (size_t)ns, sizeof(double), cmp_double);
            double med = t[c][ns / 2];
            if (c == 0) base_t = med;
            ct_plan_stats st;
            ct_plan_get_stats(m[c].plan, &st);
            ct_plan_param_arena(m[c].plan, NULL, &gc, &np);
            printf("    deep mlp 8x512 b256 dropout %.1f %-20s activations %6.2f MiB (%+4.0f%%)  step %7.2f ms "
                   "(%+4.0f%%)\n",
                   drop ? 0.1 : 0.0, cfgs[c].name, (double)st.activation_bytes / 1048576.0,
                   100.0 * ((double)st.activation_bytes / (double)bs.activation_bytes - 1.0), med * 1e3,
                   100.0 * (med / base_t - 1.0));
            CHECK_MSG(same_bits(g0, gc, np * sizeof *gc), "deep mlp %s: gradients differ", cfgs[c].name);
            /* the pass recomputes only what pays off: no copies, or less memory */
            if (st.n_nodes > bs.n_nodes)
                CHECK_MSG(st.activation_bytes < bs.activation_bytes, "%s: %zu activation bytes, not fewer than %zu",
                          cfgs[c].name, st.activation_bytes, bs.activation_bytes);
            else
                CHECK(st.activation_bytes == bs.activation_bytes);
            /* with dropout, checkpointing every 3 layers keeps about half (49% less when written) */
            if (drop && cfgs[c].every == 3 && !cfgs[c].ops)
                CHECK_MSG((double)st.activation_bytes < 0.6 * (double)bs.activation_bytes,
                          "every=3: %zu vs %zu bytes", st.activation_bytes, bs.activation_bytes);
        }
        for (int c = 0; c < RC_DEEP_CFGS; c++) ct_plan_free(m[c].plan);
    }
    ct_context_free(ctx);
}


/* ---- recompute_blocks: checkpointing by transformer blocks ---------------------------------------- */

/* A 4-block GPT (bert: BERT) with dropout 0.1 on ids (2, 32), its loss
 * compiled with recompute_blocks = blocks (every = recompute_every). */
static ct_status lm_plan(ct_context *ctx, int bert, int blocks, int every, ct_plan **p, ct_node *ids, ct_node *lab) {
    ct_graph *g;
    ct_node logits, flat, loss;
    const int64_t V = 65, B = 2, T = 32;
    ct_gpt_config gc = {V, T, 4, 2, 32, 0.1f, 1, 0};
    ct_bert_config bc = {V, T, 4, 2, 32, 64, 2, 0.1f, 1e-12f};
    *p = NULL;
    ct_status s = ct_graph_create(ctx, &g);
    if (s != CT_OK) return s;
    s = ct_input(g, "ids", CT_I32, 2, (int64_t[]){B, T}, ids);
    if (s == CT_OK) s = ct_input(g, "labels", CT_I32, 1, (int64_t[]){B * T}, lab);
    if (s == CT_OK)
        s = bert ? ct_model_bert(g, *ids, CT_NONE, CT_NONE, CT_NONE, &bc, &logits) : ct_model_gpt(g, *ids, &gc, &logits);
    if (s == CT_OK) s = ct_reshape(g, logits, 2, (int64_t[]){B * T, V}, &flat);
    if (s == CT_OK) s = ct_cross_entropy(g, flat, *lab, 0.0f, -100, &loss);
    ct_compile_opts o;
    ct_compile_opts_default(&o);
    o.recompute_blocks = blocks;
    o.recompute_every = every;
    if (s == CT_OK) s = ct_compile(g, loss, 0, NULL, &o, p);
    ct_graph_free(g);
    if (s != CT_OK) return s;
    ct_tensor t;
    ct_plan_tensor(*p, *ids, &t);
    for (int i = 0; i < B * T; i++) ((int32_t *)t.data)[i] = (i * 7 + 3) % (int)V;
    ct_plan_tensor(*p, *lab, &t);
    for (int i = 0; i < B * T; i++) ((int32_t *)t.data)[i] = (i * 11 + 5) % (int)V;
    return CT_OK;
}

/* Recompute copies (CT_NODE_RECOMPUTE) whose name starts with prefix. */
static int copies_named(const ct_plan *p, const char *prefix) {
    int n = 0;
    for (int i = 0; i < p->g.n; i++)
        n += (p->g.nodes[i].flags & CT_NODE_RECOMPUTE) && !strncmp(p->g.nodes[i].name, prefix, strlen(prefix));
    return n;
}

/* recompute_blocks 1, 2, 4 against 0: the loss and every gradient bit for
 * bit over two steps (dropout active: its masks are regenerated), fewer
 * activation bytes with 1 and 2; the last block is recomputed, the tail
 * (final norm, head, loss) never. */
static void check_blocks(int bert) {
    ct_context *ctx = test_ctx(-1, 1);
    const char *last = bert ? "bert.encoder.layer.3." : "transformer.h.3.";
    const char *tail = bert ? "cls." : "transformer.ln_f";
    static const int k_blocks[] = {0, 1, 2, 4};
    ct_plan *p[4] = {0};
    ct_node ids, lab;
    for (int c = 0; c < 4; c++) CHECK_OK(ctx, lm_plan(ctx, bert, k_blocks[c], 0, &p[c], &ids, &lab));
    ct_plan_stats st[4];
    for (int c = 0; c < 4 && p[c]; c++) ct_plan_get_stats(p[c], &st[c]);
    for (uint64_t stepno = 1; stepno <= 2 && p[0] && p[1] && p[2] && p[3]; stepno++) {
        float loss[4], *w[4], *gr[4];
        size_t np[4];
        for (int c = 0; c < 4; c++) {
            ct_plan_set_step(p[c], stepno);
            CHECK_OK(ctx, ct_plan_forward(p[c], 1));
            CHECK_OK(ctx, ct_plan_backward(p[c]));
            CHECK_OK(ctx, ct_plan_loss(p[c], &loss[c]));
            CHECK_OK(ctx, ct_plan_param_arena(p[c], &w[c], &gr[c], &np[c]));
        }
        for (int c = 1; c < 4; c++) {
            CHECK_MSG(!memcmp(&loss[0], &loss[c], sizeof loss[0]), "%s blocks=%d step %d: loss %.9g vs %.9g",
                      bert ? "bert" : "gpt", k_blocks[c], (int)stepno, (double)loss[c], (double)loss[0]);
            CHECK_MSG(np[c] == np[0] && same_bits(gr[0], gr[c], np[0] * sizeof(float)),
                      "%s blocks=%d step %d: gradient %zu of %zu differs", bert ? "bert" : "gpt", k_blocks[c],
                      (int)stepno, first_diff(gr[0], gr[c], np[0]), np[0]);
        }
        for (int c = 0; c < 4; c++)
            for (size_t i = 0; i < np[c]; i++) w[c][i] -= 0.05f * gr[c][i];
    }
    for (int c = 1; c < 4 && p[c]; c++) {
        int n_last = copies_named(p[c], last), n_tail = copies_named(p[c], tail);
        printf("    %s recompute_blocks=%d: activations %zu -> %zu bytes (%+.0f%%), %d nodes -> %d, last block copies "
               "%d, tail copies %d; loss and gradients identical\n",
               bert ? "bert" : "gpt", k_blocks[c], st[0].activation_bytes, st[c].activation_bytes,
               100.0 * ((double)st[c].activation_bytes / (double)st[0].activation_bytes - 1.0), (int)st[0].n_nodes,
               (int)st[c].n_nodes, n_last, n_tail);
        CHECK_MSG(n_tail == 0, "recompute_blocks=%d: %d copies of the tail (%s...)", k_blocks[c], n_tail, tail);
        /* the cost model's totals (fit.c's step time): the same forward, backward with the recomputed nodes */
        CHECK(st[0].flops_forward > 0 && st[0].flops_backward > st[0].flops_forward && st[0].bytes_moved > 0);
        CHECK_MSG(fabs(st[c].flops_forward - st[0].flops_forward) <= 1e-9 * st[0].flops_forward,
                  "recompute_blocks=%d: forward FLOPs %g, not %g", k_blocks[c], st[c].flops_forward, st[0].flops_forward);
        CHECK_MSG(st[c].flops_backward > st[0].flops_backward || n_last == 0,
                  "recompute_blocks=%d: backward FLOPs %g, not more than %g with nodes recomputed", k_blocks[c],
                  st[c].flops_backward, st[0].flops_backward);
        if (k_blocks[c] <= 2) {
            CHECK_MSG(st[c].activation_bytes < st[0].activation_bytes, "recompute_blocks=%d: %zu bytes, not fewer than %zu",
                      k_blocks[c], st[c].activation_bytes, st[0].activation_bytes);
            CHECK_MSG(n_last > 0, "recompute_blocks=%d: the last block (%s...) is not recomputed", k_blocks[c], last);
        }
    }
    CHECK(copies_named(p[0], "") == 0);
    for (int c = 0; c < 4; c++) ct_plan_free(p[c]);
    ct_context_free(ctx);
}

TEST(gpt_recompute_blocks_bit_exact_and_smaller) { check_blocks(0); }
TEST(bert_recompute_blocks_bit_exact_and_smaller) { check_blocks(1); }

/* recompute_blocks with recompute_every, negative, or on a graph without
 * block marks: CT_E_INVALID_ARG naming the fix; ct_graph_mark_block checks x. */
TEST(recompute_blocks_errors) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_plan *p = NULL;
    ct_node ids, lab;
    CHECK(lm_plan(ctx, 0, 2, 1, &p, &ids, &lab) == CT_E_INVALID_ARG && !p);
    CHECK(strstr(ct_context_last_error(ctx), "use one"));
    CHECK(lm_plan(ctx, 1, -1, 0, &p, &ids, &lab) == CT_E_INVALID_ARG && !p);
    CHECK(strstr(ct_context_last_error(ctx), "recompute_blocks -1"));
    ct_graph *g;
    CHECK_OK(ctx, ct_graph_create(ctx, &g));
    ct_node x, y, logits, loss;
    CHECK_OK(ctx, ct_input(g, "x", CT_F32, 2, (int64_t[]){4, 6}, &x));
    CHECK_OK(ctx, ct_input(g, "y", CT_I32, 1, (int64_t[]){4}, &y));
    ct_node w, h; /* layers without block marks (the model builders mark theirs) */
    CHECK_OK(ctx, ct_param(g, "w", 2, (int64_t[]){8, 6}, CT_INIT_KAIMING_UNIFORM, 6, &w));
    CHECK_OK(ctx, ct_linear(g, x, w, CT_NONE, &h));
    CHECK_OK(ctx, ct_relu(g, h, &h));
    CHECK_OK(ctx, ct_param(g, "w2", 2, (int64_t[]){3, 8}, CT_INIT_KAIMING_UNIFORM, 8, &w));
    CHECK_OK(ctx, ct_linear(g, h, w, CT_NONE, &logits));
    CHECK_OK(ctx, ct_cross_entropy(g, logits, y, 0, -100, &loss));
    ct_compile_opts o;
    ct_compile_opts_default(&o);
    CHECK(o.recompute_blocks == 0);
    o.recompute_blocks = 1;
    CHECK(ct_compile(g, loss, 0, NULL, &o, &p) == CT_E_INVALID_ARG && !p);
    printf("    %s\n", ct_context_last_error(ctx));
    CHECK(strstr(ct_context_last_error(ctx), "has none: use recompute_every"));
    CHECK(ct_graph_mark_block(g, 12345) != CT_OK);
    /* one marked block (no previous block to repeat): it joins the tail, nothing is recomputed */
    CHECK_OK(ctx, ct_graph_mark_block(g, logits));
    ct_node l2;
    CHECK_OK(ctx, ct_scale(g, loss, 0.5f, &l2));
    CHECK_OK(ctx, ct_compile(g, l2, 0, NULL, &o, &p));
    CHECK(copies_named(p, "") == 0);
    ct_plan_free(p);
    ct_graph_free(g);
    ct_context_free(ctx);
}

TEST_MAIN(T(mlp_dropout_recompute_is_bit_exact), T(cnn_batchnorm_recompute_is_bit_exact_and_updates_running_stats_once),
          T(bf16_recompute_reads_the_kept_weight_copies), T(recompute_options), T(deep_mlp_memory_and_time),
          T(gpt_recompute_blocks_bit_exact_and_smaller), T(bert_recompute_blocks_bit_exact_and_smaller),
          T(recompute_blocks_errors))
