/* tests/test_fusion.c - the fusion pass (src/graph/fusion.c), fusion rules
 * from JSON, memory_opt and the model registry:
 *  1. the seeds' JSON rule loads and fuses conv2d + bias add, with the same
 *     loss and gradients as the unfused plan; a rule whose constraints fail
 *     stops the fusion it names;
 *  2. malformed rules: E40010 with line and column, unknown ops / patterns
 *     E50001 listing the supported patterns;
 *  3. the CNN and a small GPT give the same loss, gradients and running
 *     statistics at fusion levels 0, 1 and 2 (within 1e-6; the CNN bit for bit);
 *  4. activation memory of the Fashion CNN (batch 128) and gpt-char-small
 *     (batch 8) at level 2 is at least 25% below level 0 (plan statistics);
 *  5. memory_opt = 0 plans every value its own buffer;
 *  6. the summary and DOT name the fused groups; the model registry counts
 *     gpt-char-small's parameters as ct_gpt_num_params does.
 * FD checks and fast-vs-reference of the fused ops: tests/test_ops.c. */
#include "test.h"
#include "graph/plan.h" /* the ops of a compiled plan's nodes; CT_TRY */

static const char *k_seeds_json =
    "{\"fusion_patterns\": [{\"ops\": [\"Conv2D\", \"BiasAdd\"], \"constraints\": {\"strides\": [1,1], \"padding\": "
    "\"SAME\"}}]}";

typedef struct {
    ct_plan *p;
    ct_node x, y, loss;
} built;

/* conv3x3 (stride 1, pad 1, no bias) + add of a (C,1,1) bias, relu, mean loss */
static ct_status conv_bias_plan(ct_context *ctx, int level, const ct_fusion_rules *rules, built *b) {
    ct_graph *g;
    CT_TRY(ct_graph_create(ctx, &g));
    ct_node w, bias, c, a, r;
    ct_status s = ct_input(g, "x", CT_F32, 4, (int64_t[]){2, 3, 8, 8}, &b->x);
    if (s == CT_OK) s = ct_param(g, "w", 4, (int64_t[]){4, 3, 3, 3}, CT_INIT_KAIMING_UNIFORM, 27, &w);
    if (s == CT_OK) s = ct_param(g, "bias", 3, (int64_t[]){4, 1, 1}, CT_INIT_KAIMING_UNIFORM, 27, &bias);
    if (s == CT_OK) s = ct_conv2d(g, b->x, w, CT_NONE, 1, 1, 1, 1, &c);
    if (s == CT_OK) s = ct_add(g, c, bias, &a);
    if (s == CT_OK) s = ct_tanh(g, a, &r);
    if (s == CT_OK) s = ct_mean(g, r, 15u, 0, &b->loss);
    ct_compile_opts co;
    ct_compile_opts_default(&co);
    co.fusion_level = level;
    co.fusion_rules = rules;
    if (s == CT_OK) s = ct_compile(g, b->loss, 0, NULL, &co, &b->p);
    ct_graph_free(g);
    if (s != CT_OK) return s;
    ct_tensor t;
    CT_TRY(ct_plan_tensor(b->p, b->x, &t));
    test_fill_uniform(t.data, (size_t)ct_tensor_numel(&t), 3, -1, 1);
    CT_TRY(ct_plan_forward(b->p, 1));
    return ct_plan_backward(b->p);
}

/* max relative difference of loss and every gradient between two plans of the same graph */
static double plan_diff(ct_plan *a, ct_plan *b, int *bit_identical) {
    float la, lb;
    ct_plan_loss(a, &la);
    ct_plan_loss(b, &lb);
    double worst = fabs((double)la - lb) / fmax(fabs((double)lb), 1e-3);
    *bit_identical = la == lb;
    float *ga, *gb;
    size_t na, nb;
    ct_plan_param_arena(a, NULL, &ga, &na);
    ct_plan_param_arena(b, NULL, &gb, &nb);
    if (na != nb) return INFINITY;
    double d = test_max_rel(ga, gb, na, 1e-3);
    if (d > worst) worst = d;
    if (memcmp(ga, gb, na * sizeof(float))) *bit_identical = 0;
    float *ba, *bb;
    ct_plan_buffer_arena(a, &ba, &na);
    ct_plan_buffer_arena(b, &bb, &nb);
    if (na != nb) return INFINITY;
    if (na && memcmp(ba, bb, na * sizeof(float))) *bit_identical = 0;
    if (na) {
        d = test_max_rel(ba, bb, na, 1e-3);
        if (d > worst) worst = d;
    }
    return worst;
}

TEST(seeds_json_rule_fuses_conv_bias) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_fusion_rules *rules = NULL;
    CHECK_OK(ctx, ct_fusion_rules_parse(ctx, k_seeds_json, "seeds.json", &rules));
    CHECK(ct_fusion_rules_count(rules) == 1);
    printf("    rule 1: %s\n", ct_fusion_rule_desc(rules, 0));
    built f, u;
    CHECK_OK(ctx, conv_bias_plan(ctx, 0, rules, &f)); /* level 0: the rule alone enables it */
    CHECK_OK(ctx, conv_bias_plan(ctx, 0, NULL, &u));
    CHECK(ct_plan_fusion_count(f.p, "conv2d+bias_add") == 1);
    CHECK(ct_plan_fusion_rule_matches(f.p, 0) == 1);
    CHECK(ct_plan_fusion_count(u.p, NULL) == 0);
    int same;
    double d = plan_diff(f.p, u.p, &same);
    printf("    fused vs unfused: max rel diff %.2e%s\n", d, same ? " (bit-identical)" : "");
    /* oneDNN's AVX2 convolution adds a fused bias at another point of its accumulation than a
     * separate bias_add: 1.8e-6 on Zen 3 (a wrong fusion differs by O(1)) */
    CHECK(d <= 1e-5);
    ct_plan_free(f.p);
    ct_plan_free(u.p);
    ct_fusion_rules_free(rules);
    /* a rule whose constraint does not hold: the pattern it names stays off, even at level 1 */
    CHECK_OK(ctx, ct_fusion_rules_parse(ctx, "{\"fusion_patterns\": [{\"ops\": [\"conv2d\", \"bias_add\"], "
                                             "\"constraints\": {\"padding\": \"VALID\"}}]}",
                                        "valid.json", &rules));
    CHECK_OK(ctx, conv_bias_plan(ctx, 1, rules, &f));
    CHECK(ct_plan_fusion_count(f.p, "conv2d+bias_add") == 0);
    CHECK(ct_plan_fusion_rule_matches(f.p, 0) == 0);
    ct_plan_free(f.p);
    ct_fusion_rules_free(rules);
    /* the same rules from a file */
    const char *path = test_tmp_path("rules.json");
    test_write_file(path, k_seeds_json, strlen(k_seeds_json));
    CHECK_OK(ctx, ct_fusion_rules_load(ctx, path, &rules));
    CHECK(ct_fusion_rules_count(rules) == 1);
    ct_fusion_rules_free(rules);
    ct_context_free(ctx);
}

TEST(bad_rules_are_named) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_fusion_rules *r = NULL;
    ct_status s = ct_fusion_rules_parse(ctx, "{\"fusion_patterns\": [\n  {\"ops\": [\"Conv2D\" \"BiasAdd\"]}\n]}", "bad.json", &r);
    printf("    %s\n", ct_context_last_error(ctx));
    CHECK(s == CT_E_CONFIG && !r);
    CHECK(strstr(ct_context_last_error(ctx), "bad.json") && strstr(ct_context_last_error(ctx), "line 2, column 21"));
    s = ct_fusion_rules_parse(ctx, "{\"fusion_patterns\": [{\"ops\": [\"Conv2D\", \"Softplus\"]}]}", "op.json", &r);
    printf("    %s\n", ct_context_last_error(ctx));
    CHECK(s == CT_E_UNSUPPORTED && !r);
    CHECK(strstr(ct_context_last_error(ctx), "'Softplus'") &&
          strstr(ct_context_last_error(ctx), "supported patterns: conv2d+bias_add"));
    s = ct_fusion_rules_parse(ctx, "{\"fusion_patterns\": [{\"ops\": [\"Conv2D\", \"MatMul\"]}]}", "seq.json", &r);
    printf("    %s\n", ct_context_last_error(ctx));
    CHECK(s == CT_E_UNSUPPORTED && strstr(ct_context_last_error(ctx), "Conv2D, MatMul") &&
          strstr(ct_context_last_error(ctx), "batchnorm+relu"));
    s = ct_fusion_rules_parse(ctx, "{\"fusion_patterns\": [{\"ops\": [\"Relu\", \"BatchNorm\"]}]}", "order.json", &r);
    CHECK(s == CT_E_UNSUPPORTED);
    s = ct_fusion_rules_parse(ctx, "{\"fusion_patterns\": [{\"ops\": [\"BatchNorm\", \"Relu\"], \"constraints\": "
                                   "{\"strides\": 1}}]}", "c.json", &r);
    CHECK(s == CT_E_CONFIG && strstr(ct_context_last_error(ctx), "strides"));
    s = ct_fusion_rules_load(ctx, test_tmp_path("missing.json"), &r);
    CHECK(s == CT_E_IO);
    ct_context_free(ctx);
}

/* cross-entropy training plan of a built-in model at a fusion level */
static ct_status model_plan_prec(ct_context *ctx, const char *model, int64_t batch, int level, int memory_opt,
                                 int plan_only, ct_precision precision, ct_plan **out, ct_node *in, ct_node *labels) {
    ct_graph *g;
    CT_TRY(ct_graph_create(ctx, &g));
    ct_node logits, loss;
    ct_status s = ct_model_by_name(g, model, batch, &logits);
    int nd = 0;
    int64_t sh[8];
    if (s == CT_OK) s = ct_node_shape(g, logits, &nd, sh);
    if (s == CT_OK) s = ct_input(g, "labels", CT_I32, nd - 1, sh, labels);
    if (s == CT_OK) s = ct_cross_entropy(g, logits, *labels, 0.1f, -100, &loss);
    ct_compile_opts co;
    ct_compile_opts_default(&co);
    co.fusion_level = level;
    co.memory_opt = memory_opt;
    co.plan_only = plan_only;
    co.precision = precision;
    if (s == CT_OK) s = ct_compile(g, loss, 1, &logits, &co, out);
    *in = 0; /* the model's input is node 0 */
    ct_graph_free(g);
    return s;
}

static ct_status model_plan(ct_context *ctx, const char *model, int64_t batch, int level, int memory_opt, int plan_only,
                            ct_plan **out, ct_node *in, ct_node *labels) {
    return model_plan_prec(ctx, model, batch, level, memory_opt, plan_only, CT_PRECISION_FP32, out, in, labels);
}

static ct_status fill_and_step(ct_plan *p, ct_node in, ct_node labels, int classes) {
    ct_tensor t;
    CT_TRY(ct_plan_tensor(p, in, &t));
    int64_t n = ct_tensor_numel(&t);
    if (t.dtype == CT_F32) test_fill_uniform(t.data, (size_t)n, 5, -1, 1);
    else
        for (int64_t i = 0; i < n; i++) ((int32_t *)t.data)[i] = (int32_t)((i * 7 + 3) % classes);
    CT_TRY(ct_plan_tensor(p, labels, &t));
    for (int64_t i = 0; i < ct_tensor_numel(&t); i++) ((int32_t *)t.data)[i] = (int32_t)((i * 3 + 1) % classes);
    ct_plan_set_step(p, 3);
    CT_TRY(ct_plan_forward(p, 1));
    return ct_plan_backward(p);
}

/* compiles g (freed) for loss at a fusion level, then one training step */
static ct_status compile_and_step(ct_graph *g, ct_node loss, int level, ct_node x, ct_node labels, int classes,
                                  ct_plan **p) {
    ct_compile_opts co;
    ct_compile_opts_default(&co);
    co.fusion_level = level;
    ct_status s = ct_compile(g, loss, 0, NULL, &co, p);
    ct_graph_free(g);
    return s != CT_OK ? s : fill_and_step(*p, x, labels, classes);
}

TEST(levels_give_equal_results) {
    static const struct {
        const char *model;
        int64_t batch;
        int classes;
        int bit_exact;
    } k[] = {{"cnn", 16, 10, 1}, {"gpt-char-small", 2, 65, 0}, {"mlp", 8, 10, 1}};
    for (int m = 0; m < 3; m++) {
        ct_context *ctx = test_ctx(-1, 1);
        ct_plan *p[3] = {0};
        ct_node in, labels;
        for (int l = 0; l < 3; l++) {
            CHECK_OK(ctx, model_plan(ctx, k[m].model, k[m].batch, l, 1, 0, &p[l], &in, &labels));
            CHECK_OK(ctx, fill_and_step(p[l], in, labels, k[m].classes));
        }
        for (int l = 1; l < 3; l++) {
            int same;
            double d = plan_diff(p[l], p[0], &same);
            printf("    %-15s level %d vs 0: %d fused groups, max rel diff %.2e%s\n", k[m].model, l,
                   ct_plan_fusion_count(p[l], NULL), d, same ? " (bit-identical)" : "");
            CHECK(d <= 1e-6);
            if (k[m].bit_exact) CHECK(same);
        }
        CHECK(ct_plan_fusion_count(p[1], "batchnorm+relu") == (m == 0 ? 2 : 0));
        CHECK(ct_plan_fusion_count(p[2], "layernorm+linear") == (m == 1 ? 12 : 0));
        CHECK(ct_plan_fusion_count(p[2], "gelu+linear") == (m == 1 ? 6 : 0));
        CHECK(ct_plan_fusion_count(p[2], "dropout+add") == (m == 1 ? 12 : 0)); /* the dropout of every residual */
        CHECK(ct_plan_fusion_count(p[1], "linear+relu") == (m == 2 ? 2 : 0));
        /* every block's two layernorm backwards absorb the residual gradient's add (levels 1 and 2), the
           embeddings' one included: that add was the head of the one backward chain (add, dropout) */
        for (int l = 1; l < 3; l++) CHECK(ct_plan_fusion_count(p[l], "layernorm_bwd+add") == (m == 1 ? 12 : 0));
        /* level 1: every residual add read by a layernorm (ln_2, the next block's ln_1, ln_f); level 2 fuses
           those adds with their dropout (dropout+add) and the layernorms into the next linear instead */
        CHECK(ct_plan_fusion_count(p[1], "add+layernorm") == (m == 1 ? 12 : 0));
        CHECK(ct_plan_fusion_count(p[2], "add+layernorm") == 0);
        CHECK(ct_plan_fusion_count(p[2], "eltwise_chain") == 0);
        for (int l = 0; l < 3; l++) ct_plan_free(p[l]);
        ct_context_free(ctx);
    }
}

/* BF16 (autocast) plans: level 1 folds the casts around BF16 nodes
 * (cast_fold: widening casts read by BF16-reading kernels go, a narrowing
 * cast becomes its producer writing BF16), bit for bit as level 0, with
 * fewer cast nodes and an arena no larger; in the reference
 * context too (the executor's exact copies). */
TEST(bf16_cast_fold_equals_unfused) {
    static const struct {
        const char *model;
        int64_t batch;
        int classes;
    } k[] = {{"gpt-char-small", 2, 65}, {"cnn", 16, 10}};
    for (int isa = 0; isa < 2; isa++)
        for (int m = 0; m < 2; m++) {
            ct_context *ctx = test_ctx(isa ? -1 : CT_ISA_REF, isa);
            ct_plan *p[2] = {0};
            ct_node in, labels;
            int casts[2] = {0};
            for (int l = 0; l < 2; l++) {
                CHECK_OK(ctx, model_plan_prec(ctx, k[m].model, k[m].batch, l, 1, 0, CT_PRECISION_BF16, &p[l], &in,
                                              &labels));
                CHECK_OK(ctx, fill_and_step(p[l], in, labels, k[m].classes));
                for (int i = 0; i < p[l]->g.n; i++) casts[l] += p[l]->pn[i].live && p[l]->g.nodes[i].op == CT_OP_CAST;
            }
            int same;
            double d = plan_diff(p[1], p[0], &same);
            ct_plan_stats s0, s1;
            ct_plan_get_stats(p[0], &s0);
            ct_plan_get_stats(p[1], &s1);
            printf("    %s %-15s bf16 level 1 vs 0: %d cast folds, casts %d -> %d, activations %.2f -> %.2f MiB, max "
                   "rel diff %.2e%s (%zu -> %zu bytes)\n",
                   isa ? "fast" : "ref ", k[m].model, ct_plan_fusion_count(p[1], "cast_fold"), casts[0], casts[1],
                   s0.activation_bytes / 1048576.0, s1.activation_bytes / 1048576.0, d, same ? " (bit-identical)" : "",
                   (size_t)s0.activation_bytes, (size_t)s1.activation_bytes);
            CHECK(same);
            if (m == 0) { /* 26 around the BF16 nodes, and cross-entropy's two: it reads the BF16 logits and
                             its backward writes the BF16 gradient the LM head's backward reads */
                CHECK(ct_plan_fusion_count(p[1], "cast_fold") == 28 && casts[1] == casts[0] - 28);
                CHECK(ct_plan_fusion_count(p[1], "layernorm_bwd+add") == 12); /* FP32 residual gradients, BF16 dy */
                /* no larger: the planner packs both to about the bytes live at once, and the peak lies
                   where no folded cast's FP32 buffer is live (level 0 frees them early) */
                /* layernorm_bwd+add (level 1) moves the packing by a few KiB (its node's output is new while
                   the residual gradient lives); the column sums' partials (layernorm_bwd+colsum,
                   unary_bwd+colsum: P x D doubles per sum) are new, live from their producer to its COLSUM
                   nodes */
                size_t partials = 0;
                for (int i = 0; i < p[1]->g.n; i++)
                    if (p[1]->pn[i].live && p[1]->g.nodes[i].ia[7] &&
                        (p[1]->g.nodes[i].op == CT_OP_LAYERNORM_BWD_DATA || p[1]->g.nodes[i].op == CT_OP_UNARY_BWD))
                        partials += p[1]->pn[i].aux_bytes;
                CHECK(partials > 0 && s1.activation_bytes <= s0.activation_bytes + 65536 + partials);
            }
            for (int l = 0; l < 2; l++) ct_plan_free(p[l]);
            ct_context_free(ctx);
        }
}

/* gpt-char-small without dropout (as bench_step's gptchar), 2 layers, (3, 100) tokens: 300 rows,
   4 pieces of 75 (ct_colsum_pieces), so the float runs of 8 and 32 rows end inside and at the pieces'
   ends. Level 1 at `threads` threads. */
static ct_status gpt_nodrop_plan_bt(ct_context *ctx, int level, ct_precision prec, int64_t B, int64_t T, ct_plan **out) {
    ct_graph *g;
    CT_TRY(ct_graph_create(ctx, &g));
    ct_gpt_config c;
    ct_node x, y, l3, logits, loss;
    ct_status s = ct_gpt_preset(ctx, "gpt-char-small", &c);
    c.dropout = 0.0f;
    c.n_layer = 2;
    if (s == CT_OK) s = ct_input(g, "x", CT_I32, 2, (int64_t[]){B, T}, &x);
    if (s == CT_OK) s = ct_input(g, "y", CT_I32, 1, (int64_t[]){B * T}, &y);
    if (s == CT_OK) s = ct_model_gpt(g, x, &c, &l3);
    if (s == CT_OK) s = ct_reshape(g, l3, 2, (int64_t[]){B * T, c.vocab}, &logits);
    if (s == CT_OK) s = ct_cross_entropy(g, logits, y, 0.1f, -100, &loss);
    ct_compile_opts co;
    ct_compile_opts_default(&co);
    co.fusion_level = level;
    co.precision = prec;
    if (s == CT_OK) s = ct_compile(g, loss, 0, NULL, &co, out);
    ct_graph_free(g);
    if (s != CT_OK) return s;
    ct_tensor t;
    CT_TRY(ct_plan_tensor(*out, x, &t));
    for (int64_t i = 0; i < B * T; i++) ((int32_t *)t.data)[i] = (int32_t)((i * 7 + 3) % c.vocab);
    CT_TRY(ct_plan_tensor(*out, y, &t));
    for (int64_t i = 0; i < B * T; i++) ((int32_t *)t.data)[i] = (int32_t)((i * 3 + 1) % c.vocab);
    ct_plan_set_step(*out, 3);
    CT_TRY(ct_plan_forward(*out, 1));
    return ct_plan_backward(*out);
}
static ct_status gpt_nodrop_plan(ct_context *ctx, int level, ct_precision prec, ct_plan **out) {
    return gpt_nodrop_plan_bt(ctx, level, prec, 3, 100, out);
}

/* the sweeps over kernels and precisions: the fast (isa 1) or reference context at nt threads, and
 * precision prec (0 FP32, 1 BF16, 2 FP16) */
static ct_context *sweep_ctx(int isa, int nt, uint64_t seed) {
    ct_context_opts o;
    ct_context_opts_default(&o);
    o.isa = isa ? -1 : CT_ISA_REF;
    o.seed = seed;
    o.num_threads = nt;
    ct_context *ctx = NULL;
    return ct_context_create(&o, &ctx) == CT_OK ? ctx : NULL;
}
static ct_precision sweep_prec(int prec) {
    return prec == 2 ? CT_PRECISION_FP16 : prec ? CT_PRECISION_BF16 : CT_PRECISION_FP32;
}

/* layernorm_bwd+colsum and unary_bwd+colsum (level 1): every layernorm's
 * dgamma and dbeta, the c_proj biases' gradients (the column sums of the
 * layernorm backwards' residual gradients, FP32; in BF16 of their casts)
 * and c_fc's (of the GELU backward's output) come from their producers' row
 * passes; loss and every gradient bit for bit as level 0, FP32, BF16 and
 * FP16, at 1 and 2 threads, in the fast and the reference context. */
TEST(column_sums_in_the_row_pass_equal_unfused) {
    for (int isa = 0; isa < 2; isa++)
        for (int prec = 0; prec < 3; prec++)
            for (int nt = 1; nt <= 2; nt++) {
                ct_context *ctx = sweep_ctx(isa, nt, 1234);
                CHECK(ctx != NULL);
                if (!ctx) return;
                ct_precision pr = sweep_prec(prec);
                ct_plan *p[2] = {0};
                for (int l = 0; l < 2; l++) CHECK_OK(ctx, gpt_nodrop_plan(ctx, l, pr, &p[l]));
                if (!p[0] || !p[1]) {
                    ct_plan_free(p[0]);
                    ct_plan_free(p[1]);
                    ct_context_free(ctx);
                    continue;
                }
                int colsum = 0, sets[3] = {0};
                for (int i = 0; i < p[1]->g.n; i++) {
                    const ct_node_def *d = &p[1]->g.nodes[i];
                    if (!p[1]->pn[i].live) continue;
                    colsum += d->op == CT_OP_COLSUM;
                    for (int b = 0; b < 3; b++) sets[b] += (d->op == CT_OP_LAYERNORM_BWD_DATA || d->op == CT_OP_UNARY_BWD) &&
                                                           (d->ia[7] >> b & 1);
                    CHECK(d->op != CT_OP_LAYERNORM_BWD_GAMMA);
                }
                int same;
                double d = plan_diff(p[1], p[0], &same);
                printf("    %s %s %d thread%s: %d + %d groups, %d colsum nodes (dgamma %d, dy %d, out %d), max rel diff "
                       "%.2e%s\n",
                       isa ? "fast" : "ref ", prec == 2 ? "fp16" : prec ? "bf16" : "fp32", nt, nt > 1 ? "s" : " ",
                       ct_plan_fusion_count(p[1], "layernorm_bwd+colsum"), ct_plan_fusion_count(p[1], "unary_bwd+colsum"),
                       colsum, sets[0], sets[1], sets[2], d, same ? " (bit-identical)" : "");
                CHECK(same);
                /* 5 layernorms (2 per block, ln_f): dgamma, dbeta; the 4 c_proj biases from 4 of them; the 2
                   c_fc biases from the GELU backwards (sets counts these producers' sets); the 2 qkv biases
                   from the attention backwards (attention_bias_gradient_in_the_backward_equals_unfused) */
                CHECK(ct_plan_fusion_count(p[1], "layernorm_bwd+colsum") == 5);
                CHECK(ct_plan_fusion_count(p[1], "unary_bwd+colsum") == 2);
                CHECK(colsum == 18 && sets[0] == 5 && sets[1] == 5 && sets[2] == 6);
                CHECK(ct_plan_fusion_count(p[0], NULL) == 0);
                for (int l = 0; l < 2; l++) ct_plan_free(p[l]);
                ct_context_free(ctx);
            }
}

/* attention_bwd+colsum (level 1): the qkv linears' bias gradients (the column sums of the attention
 * backwards' d_qkv) from the attention tasks, each summing its head's columns over the pieces of rows of
 * its batch, the pieces across two batches after the tasks. (2, 128) tokens: 256 rows, 4 pieces of 64,
 * two per batch; (3, 100): pieces of 75 rows, two of them across batches; (5, 20): one piece of 100 rows
 * across all five. Fused in both layers at every size (whether a node fuses must not depend on its sizes: a dynamic-shape plan's graphs must match),
 * loss and every gradient bit for bit as level 0, FP32, BF16 and FP16, 1 and 2 threads, fast and
 * reference. */
TEST(attention_bias_gradient_in_the_backward_equals_unfused) {
    static const int64_t bt[3][2] = {{2, 128}, {3, 100}, {5, 20}};
    for (int isa = 0; isa < 2; isa++)
        for (int prec = 0; prec < 3; prec++)
            for (int nt = 1; nt <= 2; nt++)
                for (int sz = 0; sz < 3; sz++) {
                    ct_context *ctx = sweep_ctx(isa, nt, 99);
                    CHECK(ctx != NULL);
                    if (!ctx) return;
                    ct_plan *p[2] = {0};
                    for (int l = 0; l < 2; l++)
                        CHECK_OK(ctx, gpt_nodrop_plan_bt(ctx, l, sweep_prec(prec), bt[sz][0], bt[sz][1], &p[l]));
                    if (p[0] && p[1]) {
                        int att = 0;
                        for (int i = 0; i < p[1]->g.n; i++)
                            att += p[1]->pn[i].live && p[1]->g.nodes[i].op == CT_OP_ATTENTION_BWD &&
                                   p[1]->g.nodes[i].ia[7] == CT_COLSUM_OUT;
                        int same;
                        double d = plan_diff(p[1], p[0], &same);
                        printf("    %s %s %d thread%s (%lld, %lld): %d attention_bwd+colsum, max rel diff %.2e%s\n",
                               isa ? "fast" : "ref ", prec == 2 ? "fp16" : prec ? "bf16" : "fp32", nt, nt > 1 ? "s" : " ",
                               (long long)bt[sz][0], (long long)bt[sz][1],
                               ct_plan_fusion_count(p[1], "attention_bwd+colsum"), d, same ? " (bit-identical)" : "");
                        CHECK(same);
                        CHECK(ct_plan_fusion_count(p[1], "attention_bwd+colsum") == 2 && att == 2);
                    }
                    for (int l = 0; l < 2; l++) ct_plan_free(p[l]);
                    ct_context_free(ctx);
                }
}

/* embedding_bwd+add (level 1): the GPT's tied wte gets two gradients, the LM head's weight gradient
 * (a matmul) and the token embedding's scatter; the embedding backward adds its scatter to the first
 * (no V x D zeroing, no buffer of its own, no add pass), in place: the LM head's weight gradient is
 * written into wte's gradient slot and only the touched rows change. Loss and every gradient bit for bit as level 0,
 * FP32 and BF16 (FP16: not fused, see below), 1 and 2 threads, fast and reference kernels (wpe's rows are a slice: no
 * embedding backward of its own). */
TEST(tied_table_gradient_in_the_embedding_backward_equals_unfused) {
    for (int isa = 0; isa < 2; isa++)
        for (int prec = 0; prec < 3; prec++)
            for (int nt = 1; nt <= 2; nt++) {
                ct_context *ctx = sweep_ctx(isa, nt, 7);
                CHECK(ctx != NULL);
                if (!ctx) return;
                ct_plan *p[2] = {0};
                for (int l = 0; l < 2; l++) CHECK_OK(ctx, gpt_nodrop_plan_bt(ctx, l, sweep_prec(prec), 3, 100, &p[l]));
                if (p[0] && p[1]) {
                    int fused = 0, plain = 0, inplace = 0;
                    for (int i = 0; i < p[1]->g.n; i++)
                        if (p[1]->pn[i].live && p[1]->g.nodes[i].op == CT_OP_EMBEDDING_BWD) {
                            const ct_node_def *E = &p[1]->g.nodes[i];
                            *(E->n_in == 3 ? &fused : &plain) += 1;
                            /* in place: the LM head's weight gradient planned in wte's gradient slot */
                            inplace += E->n_in == 3 && E->ia[3] && p[1]->pn[E->in[2]].arena == CT_ARENA_GRAD &&
                                       p[1]->pn[E->in[2]].offset == p[1]->pn[i].offset &&
                                       p[1]->pn[i].arena == CT_ARENA_GRAD;
                        }
                    /* level 0: wte's gradient is an add of the two, which writes over its first operand: planned
                       in the gradient's slot too (planner.c grad_inplace_input), no activation buffer for it */
                    int add_inplace = 0;
                    for (int k = 0; k < p[0]->n_params; k++) {
                        ct_node gq = p[0]->param_grads[k];
                        const ct_node_def *G = gq >= 0 ? &p[0]->g.nodes[gq] : NULL;
                        if (G && G->op == CT_OP_BINARY) {
                            ct_node r = p[0]->pn[G->in[0]].root;
                            add_inplace += p[0]->pn[r].arena == CT_ARENA_GRAD && p[0]->pn[r].offset == p[0]->pn[gq].offset;
                        }
                    }
                    int same;
                    double d = plan_diff(p[1], p[0], &same);
                    printf("    %s %s %d thread%s: %d embedding_bwd+add (%d unfused embedding_bwd), level 0's add in place %d, "
                           "max rel diff %.2e%s\n",
                           isa ? "fast" : "ref ", prec == 2 ? "fp16" : prec ? "bf16" : "fp32", nt, nt > 1 ? "s" : " ",
                           ct_plan_fusion_count(p[1], "embedding_bwd+add"), plain, add_inplace, d,
                           same ? " (bit-identical)" : "");
                    CHECK(same);
                    CHECK(add_inplace == 1);
                    if (prec == 2) /* FP16: the LM head's weight gradient is FP16 (its matmul on FP32 copies, the
                                      output narrowed) and cast_fold has the add read it as it is: not fused */
                        CHECK(ct_plan_fusion_count(p[1], "embedding_bwd+add") == 0 && fused == 0 && plain == 1);
                    else
                        CHECK(ct_plan_fusion_count(p[1], "embedding_bwd+add") == 1 && fused == 1 && plain == 0 &&
                              inplace == 1);
                    CHECK(ct_plan_fusion_count(p[0], "embedding_bwd+add") == 0);
                }
                for (int l = 0; l < 2; l++) ct_plan_free(p[l]);
                ct_context_free(ctx);
            }
}

/* gpt-char-small without dropout (bench_step's gptchar): no dropout+add, so at level 2 the residual adds
 * meet the layernorms that layernorm+linear takes into the next linear. Levels 1 and 2 give level 0's
 * loss and gradients (level 2 within 1e-6: its prologues may sum in another order), FP32, BF16 and
 * FP16. add+layernorm
 * used to fuse those taken layernorms too: the fused node was dead, the sum never written, and level
 * 2's loss wrong from the first step (4.174 vs 4.254). */
TEST(levels_give_equal_results_without_dropout) {
    for (int prec = 0; prec < 3; prec++) {
        ct_context *ctx = test_ctx(-1, 2);
        ct_plan *p[3] = {0};
        for (int l = 0; l < 3; l++) CHECK_OK(ctx, gpt_nodrop_plan_bt(ctx, l, sweep_prec(prec), 2, 128, &p[l]));
        if (p[0] && p[1] && p[2]) {
            for (int l = 1; l < 3; l++) {
                int same;
                float la, l0;
                ct_plan_loss(p[l], &la);
                ct_plan_loss(p[0], &l0);
                double d = plan_diff(p[l], p[0], &same);
                printf("    %s level %d vs 0: loss %.6f vs %.6f, %d fused groups, max rel diff %.2e%s\n",
                       prec == 2 ? "fp16" : prec ? "bf16" : "fp32", l, la, l0, ct_plan_fusion_count(p[l], NULL), d,
                       same ? " (bit-identical)" : "");
                CHECK(d <= 1e-6);
                if (l == 1) CHECK(same);
            }
            /* FP32 level 2: the 4 layernorms in front of a linear go into it; add+layernorm keeps ln_f (before
               the reshape to the logits) only. BF16 / FP16: level 2's prologue patterns are FP32's */
            CHECK(ct_plan_fusion_count(p[2], "layernorm+linear") == (prec ? 0 : 4));
            CHECK(ct_plan_fusion_count(p[2], "add+layernorm") == (prec ? 4 : 1));
            /* the c_fc bias gradients come from the GELU backward at level 2 too (FP32: its
               UNARY_BWD_KEEP, the partials after the kept activation) */
            int cs1 = ct_plan_fusion_count(p[1], "unary_bwd+colsum"), cs2 = ct_plan_fusion_count(p[2], "unary_bwd+colsum");
            CHECK(cs1 == 2 && cs2 == cs1);
        }
        for (int l = 0; l < 3; l++) ct_plan_free(p[l]);
        ct_context_free(ctx);
    }
}

/* layernorm_bwd+cast: in a BF16 / FP16 autocast GPT the residual gradient a layernorm_bwd+add node writes
 * (FP32) is cast for the linear's backward; the node's row pass stores the cast too and the cast runs no
 * pass (its buffer planned from the node's place on). 2 blocks: 3 of the 4 layernorm backwards with a
 * residual (ln_f's has none), bit for bit as level 0 with reference and fast kernels (the reference
 * converts its output as the cast does; the SIMD rows store it as they add the residual). */
TEST(layernorm_backward_writes_the_residual_gradients_cast) {
    for (int isa = 0; isa < 2; isa++)
        for (int prec = 1; prec < 3; prec++) {
            ct_context *ctx = test_ctx(isa ? -1 : CT_ISA_REF, isa);
            ct_plan *p[2] = {0};
            for (int l = 0; l < 2; l++) CHECK_OK(ctx, gpt_nodrop_plan_bt(ctx, l, sweep_prec(prec), 2, 64, &p[l]));
            if (p[0] && p[1]) {
                int same, written = 0;
                double d = plan_diff(p[1], p[0], &same);
                for (int i = 0; i < p[1]->g.n; i++) {
                    const ct_node_def *c = &p[1]->g.nodes[i];
                    if (!p[1]->pn[i].live || c->op != CT_OP_CAST || !c->ia[1]) continue;
                    const ct_node_def *n = &p[1]->g.nodes[c->in[0]];
                    written += n->op == CT_OP_LAYERNORM_BWD_DATA && n->ia[5] == i + 1;
                }
                printf("    %s %s: %d layernorm_bwd+cast, level 1 vs 0: max rel diff %.2e%s\n", isa ? "fast" : "ref ",
                       prec == 2 ? "fp16" : "bf16", ct_plan_fusion_count(p[1], "layernorm_bwd+cast"), d,
                       same ? " (bit-identical)" : "");
                CHECK(ct_plan_fusion_count(p[1], "layernorm_bwd+cast") == 3 && written == 3);
                CHECK(ct_plan_fusion_count(p[0], "layernorm_bwd+cast") == 0);
                CHECK(same);
            }
            for (int l = 0; l < 2; l++) ct_plan_free(p[l]);
            ct_context_free(ctx);
        }
}

/* a residual block y = relu(x + relu(linear(x))): add+relu (level 2) and
 * linear+relu (level 1) against level 0, bit for bit */
TEST(residual_add_relu_equals_unfused) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_plan *p[3] = {0};
    ct_node x = 0, labels = 0;
    for (int l = 0; l < 3; l++) {
        ct_graph *g;
        CHECK_OK(ctx, ct_graph_create(ctx, &g));
        ct_node w, b, h, s, y, w2, logits, loss;
        CHECK_OK(ctx, ct_input(g, "x", CT_F32, 2, (int64_t[]){16, 24}, &x));
        CHECK_OK(ctx, ct_input(g, "labels", CT_I32, 1, (int64_t[]){16}, &labels));
        CHECK_OK(ctx, ct_param(g, "w", 2, (int64_t[]){24, 24}, CT_INIT_KAIMING_UNIFORM, 24, &w));
        CHECK_OK(ctx, ct_param(g, "b", 1, (int64_t[]){24}, CT_INIT_KAIMING_UNIFORM, 24, &b));
        CHECK_OK(ctx, ct_param(g, "w2", 2, (int64_t[]){5, 24}, CT_INIT_KAIMING_UNIFORM, 24, &w2));
        CHECK_OK(ctx, ct_linear(g, x, w, b, &h));
        CHECK_OK(ctx, ct_relu(g, h, &h));
        CHECK_OK(ctx, ct_add(g, x, h, &s));
        CHECK_OK(ctx, ct_relu(g, s, &y));
        CHECK_OK(ctx, ct_linear(g, y, w2, CT_NONE, &logits));
        CHECK_OK(ctx, ct_cross_entropy(g, logits, labels, 0.0f, -100, &loss));
        CHECK_OK(ctx, compile_and_step(g, loss, l, x, labels, 5, &p[l]));
    }
    CHECK(ct_plan_fusion_count(p[1], "linear+relu") == 1 && ct_plan_fusion_count(p[1], "add+relu") == 0);
    CHECK(ct_plan_fusion_count(p[2], "add+relu") == 1);
    for (int l = 1; l < 3; l++) {
        int same;
        double d = plan_diff(p[l], p[0], &same);
        printf("    residual level %d vs 0: max rel diff %.2e%s\n", l, d, same ? " (bit-identical)" : "");
        CHECK(same);
    }
    for (int l = 0; l < 3; l++) ct_plan_free(p[l]);
    ct_context_free(ctx);
}

/* batchnorm(+relu) on 2-D activations (M, C): the channels-last CNNs' batchnorm on (N*H*W, C) reshapes, the
 * SIMD rows path (simd/norm.c: fixed row pieces, several here, the last ragged). Level 1: batchnorm+relu (the
 * fused node runs the same batchnorm kernel) and batchnorm_bwd+colsum (batchnorm_bwd_data leaves the column
 * sums of dgamma and dbeta for COLSUM nodes, and reads dy through the relu's mask bits: no relu_mask_bwd, no
 * batchnorm_bwd_gamma, no sum left). Level 1 equals level 0 bit for bit: loss, every gradient and the running
 * statistics (plan_diff compares the buffers), for C below, at and above the vector width, with and without
 * the relu, FP32 and BF16, 1 and 2 threads, on every kernel slot. */
static void bn_2d_plans(ct_context *ctx, int64_t M, int64_t C, int relu, ct_precision prec, ct_plan *p[2]) {
    for (int l = 0; l < 2; l++) {
        ct_graph *g;
        CHECK_OK(ctx, ct_graph_create(ctx, &g));
        ct_node x, labels, w, ga, be, rm, rv, h, y, loss;
        CHECK_OK(ctx, ct_input(g, "x", CT_F32, 2, (int64_t[]){M, 9}, &x));
        CHECK_OK(ctx, ct_input(g, "labels", CT_I32, 1, (int64_t[]){M}, &labels));
        CHECK_OK(ctx, ct_param(g, "w", 2, (int64_t[]){C, 9}, CT_INIT_KAIMING_UNIFORM, 9, &w));
        CHECK_OK(ctx, ct_param(g, "g", 1, (int64_t[]){C}, CT_INIT_KAIMING_UNIFORM, 1, &ga)); /* signs differ */
        CHECK_OK(ctx, ct_param(g, "b", 1, (int64_t[]){C}, CT_INIT_KAIMING_UNIFORM, 1, &be));
        CHECK_OK(ctx, ct_buffer(g, "rm", 1, (int64_t[]){C}, CT_INIT_ZEROS, &rm));
        CHECK_OK(ctx, ct_buffer(g, "rv", 1, (int64_t[]){C}, CT_INIT_ONES, &rv));
        CHECK_OK(ctx, ct_linear(g, x, w, CT_NONE, &h));
        CHECK_OK(ctx, ct_batchnorm(g, h, ga, be, rm, rv, 0.1f, 1e-5f, &h));
        if (relu) CHECK_OK(ctx, ct_relu(g, h, &y));
        else y = h;
        CHECK_OK(ctx, ct_cross_entropy(g, y, labels, 0.0f, -100, &loss));
        ct_compile_opts co;
        ct_compile_opts_default(&co);
        co.fusion_level = l;
        co.precision = prec;
        ct_status s = ct_compile(g, loss, 0, NULL, &co, &p[l]);
        ct_graph_free(g);
        CHECK_OK(ctx, s);
        if (s == CT_OK) CHECK_OK(ctx, fill_and_step(p[l], x, labels, (int)C));
    }
}

static int live_ops(const ct_plan *p, ct_op op, int ia5) {
    int n = 0;
    for (int i = 0; i < p->g.n; i++)
        n += p->pn[i].live && p->g.nodes[i].op == op && (ia5 < 0 || p->g.nodes[i].ia[5] == ia5);
    return n;
}

TEST(bn_relu_2d_equals_unfused) {
    static const int64_t shapes[][2] = {{1500, 1}, {2000, 17}, {1300, 64}, {700, 100}};
    for (int isa = 0; isa < 3; isa++)
        for (int nt = 1; nt <= 2; nt++) {
            ct_context_opts o;
            ct_context_opts_default(&o);
            o.isa = isa == 0 ? CT_ISA_REF : isa == 1 ? CT_ISA_AVX2 : -1;
            o.seed = 1234;
            o.num_threads = nt;
            ct_context *ctx = NULL;
            CHECK(ct_context_create(&o, &ctx) == CT_OK);
            if (!ctx) return;
            if (isa && ct_context_isa(ctx) < (isa == 1 ? CT_ISA_AVX2 : CT_ISA_AVX512)) {
                ct_context_free(ctx);
                continue;
            }
            for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
                for (int relu = 0; relu < 2; relu++)
                    for (int bf = 0; bf < 2; bf++) {
                        const int64_t M = shapes[si][0], C = shapes[si][1];
                        ct_plan *p[2] = {0};
                        bn_2d_plans(ctx, M, C, relu, bf ? CT_PRECISION_BF16 : CT_PRECISION_FP32, p);
                        if (!p[0] || !p[1]) {
                            ct_plan_free(p[0]);
                            ct_plan_free(p[1]);
                            continue;
                        }
                        CHECK(ct_plan_fusion_count(p[1], "batchnorm+relu") == relu);
                        /* dgamma always; dbeta from 2 columns (a COLSUM's rule, col_sum_of) */
                        CHECK(ct_plan_fusion_count(p[1], "batchnorm_bwd+colsum") == 1);
                        CHECK(live_ops(p[1], CT_OP_BATCHNORM_BWD_GAMMA, -1) == 0);
                        CHECK(live_ops(p[1], CT_OP_COLSUM, -1) == (C > 1 ? 2 : 1));
                        CHECK(live_ops(p[1], CT_OP_RELU_MASK_BWD, -1) == (relu && C == 1));
                        CHECK(live_ops(p[1], CT_OP_BATCHNORM_BWD_DATA, 1) == (relu && C > 1));
                        CHECK(live_ops(p[0], CT_OP_BATCHNORM_BWD_GAMMA, -1) == 1);
                        int same;
                        double d = plan_diff(p[1], p[0], &same);
                        printf("    %-4s %d thread%s %s (%lld, %lld)%s level 1 vs 0: max rel diff %.2e%s\n",
                               isa == 0 ? "ref" : isa == 1 ? "avx2" : "best", nt, nt > 1 ? "s" : " ", bf ? "bf16" : "fp32",
                               (long long)M, (long long)C, relu ? " relu" : "     ", d, same ? " (bit-identical)" : "");
                        CHECK(same);
                        for (int l = 0; l < 2; l++) ct_plan_free(p[l]);
                    }
            ct_context_free(ctx);
        }
}

/* gelu+linear in an MLP whose gelu input is a parameter (so the gelu's
 * backward output is a parameter's gradient): at level 2 the activation is
 * not stored, its backward keeps it (unary_bwd_keep, dx over dy in place)
 * and the weight gradient reads that (matmul_aux) instead of recomputing;
 * b's gradient is summed in the keep node's pass (unary_bwd+colsum, its
 * partials after the kept activation in its aux);
 * loss and every gradient bit for bit as level 0, with reference kernels,
 * fast ones, and SIMD ones without oneDNN. (What it saves in a real model: the gpt-char-small
 * case of level2_cuts_activation_memory.) */
TEST(gelu_backward_keeps_the_activation_for_the_weight_gradient) {
    static const char *const k_ctx[3] = {"reference", "fast", "SIMD without oneDNN"};
    for (int isa = 0; isa < 3; isa++) {
        /* without oneDNN the fused GEMMs' SIMD slots run the unfused plan's SIMD activation and reference GEMM */
        ct_context *ctx = test_ctx(isa ? -1 : CT_ISA_REF, isa == 1);
        ct_plan *p[3] = {0};
        ct_node x = 0, labels = 0;
        for (int l = 0; l < 3; l += 2) {
            ct_graph *g;
            CHECK_OK(ctx, ct_graph_create(ctx, &g));
            ct_node w, b, h, a, w2, h0, logits, loss;
            CHECK_OK(ctx, ct_input(g, "x", CT_F32, 3, (int64_t[]){4, 8, 24}, &x));
            CHECK_OK(ctx, ct_input(g, "labels", CT_I32, 2, (int64_t[]){4, 8}, &labels));
            CHECK_OK(ctx, ct_param(g, "w", 2, (int64_t[]){40, 24}, CT_INIT_KAIMING_UNIFORM, 24, &w));
            CHECK_OK(ctx, ct_param(g, "b", 1, (int64_t[]){40}, CT_INIT_KAIMING_UNIFORM, 24, &b));
            CHECK_OK(ctx, ct_param(g, "h0", 3, (int64_t[]){4, 8, 40}, CT_INIT_KAIMING_UNIFORM, 40, &h0));
            CHECK_OK(ctx, ct_param(g, "w2", 2, (int64_t[]){7, 40}, CT_INIT_KAIMING_UNIFORM, 40, &w2));
            CHECK_OK(ctx, ct_linear(g, x, w, b, &h));
            CHECK_OK(ctx, ct_add(g, h, h0, &h));
            CHECK_OK(ctx, ct_gelu(g, h, 0, &a));
            CHECK_OK(ctx, ct_linear(g, a, w2, CT_NONE, &logits));
            CHECK_OK(ctx, ct_cross_entropy(g, logits, labels, 0.0f, -100, &loss));
            CHECK_OK(ctx, compile_and_step(g, loss, l, x, labels, 7, &p[l]));
        }
        int keep = 0, aux = 0, pro = 0;
        for (int i = 0; i < p[2]->g.n; i++) {
            if (!p[2]->pn[i].live) continue;
            keep += p[2]->g.nodes[i].op == CT_OP_UNARY_BWD_KEEP;
            aux += p[2]->g.nodes[i].op == CT_OP_MATMUL_AUX;
            pro += p[2]->g.nodes[i].op == CT_OP_MATMUL_PRO;
        }
        CHECK(ct_plan_fusion_count(p[2], "gelu+linear") == 1 && keep == 1 && aux == 1 && pro == 0);
        /* b's gradient (the column sum of the keep node's dx) in the keep node's pass: bit-identical below */
        CHECK(ct_plan_fusion_count(p[2], "unary_bwd+colsum") == 1);
        double gemm[3] = {0}; /* the cost model counts a fused GEMM as its GEMM (profiler MFU) */
        for (int l = 0; l < 3; l += 2)
            for (int i = 0; i < p[l]->g.n; i++) {
                ct_op op = p[l]->g.nodes[i].op;
                if (p[l]->pn[i].live && (op == CT_OP_MATMUL || op == CT_OP_LINEAR || op == CT_OP_LINEAR_PRO ||
                                         op == CT_OP_MATMUL_PRO || op == CT_OP_MATMUL_AUX))
                    gemm[l] += ct_node_flops(&p[l]->g, &p[l]->g.nodes[i]);
            }
        CHECK(gemm[0] > 0 && gemm[2] == gemm[0]);
        int same;
        double d = plan_diff(p[2], p[0], &same);
        ct_plan_stats s0, s2;
        ct_plan_get_stats(p[0], &s0);
        ct_plan_get_stats(p[2], &s2);
        printf("    %s: level 2 vs 0: max rel diff %.2e%s; activations %zu -> %zu bytes\n", k_ctx[isa],
               d, same ? " (bit-identical)" : "", (size_t)s0.activation_bytes, (size_t)s2.activation_bytes);
        CHECK(same);
        ct_plan_free(p[0]);
        ct_plan_free(p[2]);
        ct_context_free(ctx);
    }
}

/* gpt-char-small: the GELU / layernorm prologues and the kept GELU derivative
 * drop whole activations (-31%). The CNN: batchnorm+relu keeps mask bits
 * instead of the relu output (-9%); its batchnorm outputs, read by the
 * backward only for their statistics, are freed in forward at every level
 * (the planner), which is where most of its level-2 saving came from before. */
TEST(level2_cuts_activation_memory) {
    static const struct {
        const char *model;
        int64_t batch;
        double most; /* level 2 / level 0 at most */
    } k[] = {{"cnn", 128, 0.92}, {"gpt-char-small", 8, 0.75}};
    for (int m = 0; m < 2; m++) {
        ct_context *ctx = test_ctx(-1, 1);
        ct_plan_stats st[3];
        for (int l = 0; l < 3; l++) {
            ct_plan *p;
            ct_node in, labels;
            CHECK_OK(ctx, model_plan(ctx, k[m].model, k[m].batch, l, 1, 1, &p, &in, &labels));
            ct_plan_get_stats(p, &st[l]);
            ct_plan_free(p);
        }
        double a0 = (double)st[0].activation_bytes, a2 = (double)st[2].activation_bytes;
        double t0 = a0 + (double)st[0].workspace_bytes, t2 = a2 + (double)st[2].workspace_bytes;
        printf("    %-15s batch %3lld activations: level 0 %.2f MiB, 1 %.2f MiB, 2 %.2f MiB (%.1f%%; with "
               "workspace %.1f%%)\n",
               k[m].model, (long long)k[m].batch, a0 / 1048576.0, st[1].activation_bytes / 1048576.0, a2 / 1048576.0,
               100.0 * (a2 - a0) / a0, 100.0 * (t2 - t0) / t0);
        CHECK(a2 <= k[m].most * a0);
        CHECK(t2 <= k[m].most * t0);
        ct_context_free(ctx);
    }
}

TEST(memory_opt_off_gives_every_value_its_buffer) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_plan_stats on, off;
    ct_plan *p;
    ct_node in, labels;
    CHECK_OK(ctx, model_plan(ctx, "cnn", 32, 1, 1, 1, &p, &in, &labels));
    ct_plan_get_stats(p, &on);
    ct_plan_free(p);
    CHECK_OK(ctx, model_plan(ctx, "cnn", 32, 1, 0, 0, &p, &in, &labels));
    ct_plan_get_stats(p, &off);
    printf("    cnn batch 32: reuse %.2f MiB, no reuse %.2f MiB\n", on.activation_bytes / 1048576.0,
           off.activation_bytes / 1048576.0);
    CHECK(off.activation_bytes == off.activation_bytes_no_reuse);
    CHECK(on.activation_bytes_no_reuse == off.activation_bytes_no_reuse);
    CHECK(on.activation_bytes < off.activation_bytes);
    CHECK_OK(ctx, fill_and_step(p, in, labels, 10)); /* and it runs */
    ct_plan_free(p);
    ct_context_free(ctx);
}

/* Element-wise nodes whose first input dies at them (ct_op_info.inplace:
 * unary_bwd, binary, scale, dropout) write over it: the plan with reuse has
 * such nodes and trains bit for bit as the plan that gives every value its
 * own buffer, in FP32 and BF16, with the fast kernels (and the reference
 * ones for the MLP). */
TEST(in_place_nodes_match_separate_buffers) {
    static const struct {
        const char *model;
        int64_t batch;
        int classes;
    } k[] = {{"mlp", 8, 10}, {"gpt-char-small", 2, 65}};
    for (int isa = 0; isa < 2; isa++)
        for (int m = 0; m < 2; m++)
            for (int bf = 0; bf < 2; bf++) {
                if (!isa && m) continue; /* the reference kernels: the MLP (a GPT step takes seconds there) */
                ct_context *ctx = test_ctx(isa ? -1 : CT_ISA_REF, isa);
                ct_precision prec = bf ? CT_PRECISION_BF16 : CT_PRECISION_FP32;
                ct_plan *p[2] = {0};
                ct_node in, labels;
                for (int opt = 0; opt < 2; opt++) {
                    CHECK_OK(ctx, model_plan_prec(ctx, k[m].model, k[m].batch, 1, opt, 0, prec, &p[opt], &in, &labels));
                    CHECK_OK(ctx, fill_and_step(p[opt], in, labels, k[m].classes));
                }
                int inplace = 0;
                const ct_plan *q = p[1];
                for (int i = 0; i < q->g.n; i++) {
                    const ct_node_def *d = &q->g.nodes[i];
                    if (!q->pn[i].live || q->pn[i].arena != CT_ARENA_ACT || !ct_op_table(d->op)->inplace) continue;
                    ct_node r = q->pn[d->in[0]].root;
                    inplace += q->pn[r].arena == CT_ARENA_ACT && q->pn[r].offset == q->pn[i].offset;
                }
                int same;
                double diff = plan_diff(p[1], p[0], &same);
                printf("    %s %-15s %s: %d nodes in place, max rel diff vs separate buffers %.2e%s\n",
                       isa ? "fast" : "ref ", k[m].model, bf ? "bf16" : "fp32", inplace, diff,
                       same ? " (bit-identical)" : "");
                CHECK(inplace > 0);
                CHECK(same);
                for (int i = 0; i < 2; i++) ct_plan_free(p[i]);
                ct_context_free(ctx);
            }
}

/* The plan's summary (dot 0) or DOT (dot 1), written to the test file `name`
 * and read back into buf (NUL-terminated, cut at size - 1). */
static ct_status plan_text(const ct_plan *p, int dot, const char *name, char *buf, size_t size) {
    const char *path = test_tmp_path(name);
    FILE *f = fopen(path, "w");
    if (!f) return CT_E_IO;
    ct_status s = dot ? ct_plan_write_dot(p, f) : ct_plan_write_summary(p, f);
    if (fclose(f) != 0 && s == CT_OK) s = CT_E_IO;
    if (s != CT_OK) return s;
    if (!(f = fopen(path, "r"))) return CT_E_IO;
    size_t n = fread(buf, 1, size - 1, f);
    buf[n] = 0;
    fclose(f);
    return CT_OK;
}

/* A GPT (pre-LN: x + a -> ln_2, x + m -> the next ln_1 / ln_f) or BERT
 * (post-LN: a + x -> LayerNorm) of n_layer 2, D 128, on (4, 64) tokens (the
 * layernorms' rows are enough work for 2 threads), with its loss. */
static ct_status small_lm_plan(ct_context *ctx, int bert, ct_precision prec, int recompute, const ct_fusion_rules *rules,
                               ct_plan **p) {
    ct_graph *g;
    ct_node ids, lab, logits, flat, loss;
    const int64_t V = 65, B = 4, T = 64;
    ct_gpt_config gc = {V, T, 2, 2, 128, 0.1f, 1, 0};
    ct_bert_config bc = {V, T, 2, 2, 128, 256, 2, 0.1f, 1e-12f};
    *p = NULL;
    CT_TRY(ct_graph_create(ctx, &g));
    ct_status s = ct_input(g, "ids", CT_I32, 2, (int64_t[]){B, T}, &ids);
    if (s == CT_OK) s = ct_input(g, "labels", CT_I32, 1, (int64_t[]){B * T}, &lab);
    if (s == CT_OK)
        s = bert ? ct_model_bert(g, ids, CT_NONE, CT_NONE, CT_NONE, &bc, &logits) : ct_model_gpt(g, ids, &gc, &logits);
    if (s == CT_OK) s = ct_reshape(g, logits, 2, (int64_t[]){B * T, V}, &flat);
    if (s == CT_OK) s = ct_cross_entropy(g, flat, lab, 0.0f, -100, &loss);
    ct_compile_opts o;
    ct_compile_opts_default(&o); /* level 0: the rules alone fuse */
    o.fusion_rules = rules;
    o.precision = prec;
    o.recompute_blocks = recompute;
    if (s == CT_OK) s = ct_compile(g, loss, 0, NULL, &o, p);
    ct_graph_free(g);
    if (s != CT_OK) return s;
    ct_tensor t;
    CT_TRY(ct_plan_tensor(*p, ids, &t));
    for (int i = 0; i < B * T; i++) ((int32_t *)t.data)[i] = (i * 7 + 3) % (int)V;
    CT_TRY(ct_plan_tensor(*p, lab, &t));
    for (int i = 0; i < B * T; i++) ((int32_t *)t.data)[i] = (i * 11 + 5) % (int)V;
    for (int step = 1; step <= 2; step++) { /* dropout masks differ per step; the second step reads the first's writes */
        ct_plan_set_step(*p, step);
        CT_TRY(ct_plan_forward(*p, 1));
        CT_TRY(ct_plan_backward(*p));
    }
    return CT_OK;
}

/* add+layernorm (named by a rule at level 0, so it is the only fusion)
 * against the unfused plan: loss and every gradient bit for bit, on GPT
 * and BERT, FP32 and BF16, reference and fast kernels, 1 and 2 threads,
 * with and without recompute_blocks (its copies stay unfused); the sum
 * (written by the fused node into the add's buffer) is what the
 * layernorm's backward and the next residual add read, so a wrong or late
 * write shows in the gradients. */
TEST(add_layernorm_equals_unfused) {
    ct_fusion_rules *rules = NULL;
    ct_context *c0 = test_ctx(-1, 1);
    CHECK_OK(c0, ct_fusion_rules_parse(c0, "{\"fusion_patterns\": [{\"ops\": [\"Add\", \"LayerNorm\"]}]}", "add_ln.json",
                                       &rules));
    ct_context_free(c0);
    for (int fast = 0; fast < 2; fast++)
        for (int th = 1; th <= 2; th++) {
            ct_context_opts co;
            ct_context_opts_default(&co);
            co.isa = fast ? -1 : CT_ISA_REF;
            co.use_onednn = fast;
            co.seed = 1234;
            co.num_threads = th;
            ct_context *ctx;
            CHECK(ct_context_create(&co, &ctx) == CT_OK);
            for (int bert = 0; bert < 2; bert++)
                for (int bf = 0; bf < 3; bf++) /* FP32, BF16, BF16 pure (16-bit sums: rounded, converted back) */
                    for (int rc = 0; rc < 2; rc++) {
                        if (rc && (bf || th > 1)) continue; /* recompute: FP32, 1 thread */
                        ct_precision prec = bf == 2 ? CT_PRECISION_BF16_PURE : bf ? CT_PRECISION_BF16 : CT_PRECISION_FP32;
                        ct_plan *u = NULL, *f = NULL;
                        CHECK_OK(ctx, small_lm_plan(ctx, bert, prec, rc, NULL, &u));
                        CHECK_OK(ctx, small_lm_plan(ctx, bert, prec, rc, rules, &f));
                        if (!u || !f) {
                            ct_plan_free(u);
                            ct_plan_free(f);
                            continue;
                        }
                        int same, nf = ct_plan_fusion_count(f, "add+layernorm"), sums = 0, sum_live = 0, sum16 = 0;
                        for (int i = 0; i < f->g.n; i++)
                            if (f->g.nodes[i].op == CT_OP_ADD_LN_SUM) {
                                sums++;
                                sum_live += f->pn[i].live;
                                sum16 += f->g.nodes[i].dtype == CT_BF16;
                            }
                        double d = plan_diff(f, u, &same);
                        ct_plan_stats s0, s1;
                        ct_plan_get_stats(u, &s0);
                        ct_plan_get_stats(f, &s1);
                        printf("    %s %d thr %-4s %s%s: %d add+layernorm (%d BF16 sums), max rel diff %.2e%s, "
                               "activations %.2f -> %.2f MiB\n",
                               fast ? "fast" : "ref ", th, bert ? "bert" : "gpt", bf == 2 ? "bf16-pure" : bf ? "bf16" : "fp32",
                               rc ? " recompute_blocks 1" : "", nf, sum16, d, same ? " (bit-identical)" : "",
                               s0.activation_bytes / 1048576.0, s1.activation_bytes / 1048576.0);
                        CHECK(same);
                        /* every block's two layernorms (GPT: ln_2, the next ln_1 and ln_f; BERT: both post-LNs;
                           not BERT's embeddings LayerNorm: its add is a broadcast of the type embedding) */
                        CHECK(rc ? nf >= 1 : nf == 4);
                        CHECK(sums == nf && sum_live == nf);
                        CHECK(sum16 == (bf == 2 ? nf : 0)); /* pure: the residual stream is BF16 */
                        CHECK(ct_plan_fusion_count(u, NULL) == 0);
                        ct_plan_free(u);
                        ct_plan_free(f);
                    }
            ct_context_free(ctx);
        }
    ct_fusion_rules_free(rules);
}

/* The plan describes its activation peak (ctrain graph prints it): the
 * bytes by kind add up to the lower bound, those by dtype to the values,
 * the largest buffers are sorted and live there; gpt-char-small's autocast
 * peak is in backward, where the saved forward values dominate and the
 * FP32 residual stream is what FP32 remains. */
TEST(activation_peak_is_described) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_plan *p;
    ct_node in, labels;
    CHECK_OK(ctx, model_plan_prec(ctx, "gpt-char-small", 8, 1, 1, 1, CT_PRECISION_BF16, &p, &in, &labels));
    const ct_act_peak *pk = &p->act_peak;
    CHECK(pk->at >= p->n_fwd && pk->at < p->g.n);
    CHECK(pk->inputs + pk->fwd + pk->bwd + pk->aux + pk->cvt == p->act_bytes_min);
    size_t by = 0;
    for (int d = 0; d < CT_DTYPE_COUNT; d++) by += pk->by_dtype[d];
    CHECK(by == pk->inputs + pk->fwd + pk->bwd);
    CHECK(pk->fwd > pk->bwd && pk->by_dtype[CT_BF16] > pk->by_dtype[CT_F32] && pk->by_dtype[CT_F32] > 0);
    CHECK(pk->n_top == CT_PEAK_TOP);
    for (int k = 0; k < pk->n_top; k++) {
        CHECK(k == 0 || pk->top[k].bytes <= pk->top[k - 1].bytes);
        CHECK(pk->top[k].node <= pk->at && pk->top[k].bytes <= p->act_bytes_min);
    }
    static char buf[1 << 17];
    CHECK_OK(ctx, plan_text(p, 0, "summary.txt", buf, sizeof buf));
    CHECK(strstr(buf, "at that peak, node ") && strstr(buf, "values by dtype: f32 ") && strstr(buf, "largest: "));
    ct_plan_free(p);
    ct_context_free(ctx);
}

TEST(summary_dot_and_registry) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_plan *p;
    ct_node in, labels;
    CHECK_OK(ctx, model_plan(ctx, "cnn", 4, 1, 1, 1, &p, &in, &labels));
    static char buf[1 << 16];
    CHECK_OK(ctx, plan_text(p, 1, "plan.dot", buf, sizeof buf));
    CHECK(!strncmp(buf, "digraph plan {", 14) && strstr(buf, "subgraph cluster_fused_1") &&
          strstr(buf, "batchnorm+relu") && strstr(buf, "relu_mask_bwd"));
    ct_plan_free(p);
    /* add+layernorm's group names the add it took over, a forward node ("with:", not "backward:") */
    static char sb[1 << 17];
    CHECK_OK(ctx, model_plan(ctx, "gpt-char-small", 1, 1, 1, 1, &p, &in, &labels));
    CHECK_OK(ctx, plan_text(p, 0, "gpt_summary.txt", sb, sizeof sb));
    CHECK(strstr(sb, "add+layernorm      transformer.h.0.ln_2 (absorbed binary_") && strstr(sb, "; with: ") &&
          strstr(sb, ":add_ln_sum") && strstr(sb, "add+layernorm      x 12"));
    ct_plan_free(p);
    ct_graph *g;
    CHECK_OK(ctx, ct_graph_create(ctx, &g));
    ct_node logits;
    CHECK_OK(ctx, ct_model_by_name(g, "gpt-char-small", 1, &logits));
    int64_t np = 0;
    for (int i = 0; i < ct_graph_num_nodes(g); i++) {
        if (strcmp(ct_node_op_name(g, i), "param")) continue;
        int nd;
        int64_t sh[8], e = 1;
        CHECK_OK(ctx, ct_node_shape(g, i, &nd, sh));
        for (int k = 0; k < nd; k++) e *= sh[k];
        np += e;
    }
    ct_gpt_config c;
    CHECK_OK(ctx, ct_gpt_preset(ctx, "gpt-char-small", &c));
    CHECK(np == ct_gpt_num_params(&c));
    CHECK(ct_model_by_name(g, "resnet-1000", 1, &logits) == CT_E_INVALID_ARG &&
          strstr(ct_context_last_error(ctx), "gpt-char-small"));
    ct_graph_free(g);
    ct_context_free(ctx);
}

TEST_MAIN(T(seeds_json_rule_fuses_conv_bias), T(bad_rules_are_named), T(levels_give_equal_results),
          T(column_sums_in_the_row_pass_equal_unfused),
          T(attention_bias_gradient_in_the_backward_equals_unfused), T(tied_table_gradient_in_the_embedding_backward_equals_unfused), T(levels_give_equal_results_without_dropout), T(layernorm_backward_writes_the_residual_gradients_cast),
          T(residual_add_relu_equals_unfused), T(bn_relu_2d_equals_unfused), T(bf16_cast_fold_equals_unfused), T(gelu_backward_keeps_the_activation_for_the_weight_gradient),
          T(level2_cuts_activation_memory), T(memory_opt_off_gives_every_value_its_buffer), T(in_place_nodes_match_separate_buffers), T(activation_peak_is_described),
          T(summary_dot_and_registry), T(add_layernorm_equals_unfused))
