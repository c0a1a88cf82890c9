/* tools/graph.c - `ctrain graph`: the compiled plan of a recipe's model as
 * text (nodes, kernels, fused groups, memory by category, peak) and as
 * Graphviz DOT (forward and backward, fused groups as clusters); or the
 * parameter count of a built-in model (--model NAME). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *f) {
    fprintf(f, "usage: ctrain graph --recipe FILE [--set KEY=VALUE ...] [--dot FILE] [--fusion-level N] [--no-memory-opt]\n"
               "                    [--quiet]\n"
               "       ctrain graph --model NAME\n"
               "\n"
               "Compiles the recipe's training plan without allocating it (the model's data is read for its\n"
               "shapes) and prints every live node with its op, shape, kernel and fused group, the fused\n"
               "groups, the fusion rules that matched, and memory by category with the peak and what is live\n"
               "there (by kind and dtype, the largest buffers).\n"
               "\n"
               "  --recipe FILE       the recipe (its fusion_level, fusion_rules and memory_opt apply)\n"
               "  --set KEY=VALUE     a recipe key as train's --set (e.g. precision=bf16, batch_size=64)\n"
               "  --dot FILE          also write Graphviz DOT of the forward and backward graphs\n"
               "  --fusion-level N    0, 1 or 2 instead of the recipe's (docs/fusion.md)\n"
               "  --no-memory-opt     every activation its own buffer (memory_opt false)\n"
               "  --quiet             the summary lines only, not every node\n"
               "  --model NAME        print the parameter count of a built-in model:");
    for (int i = 0; i < ct_model_num_builtin(); i++) fprintf(f, "%s %s", i ? "," : "", ct_model_builtin_name(i));
    fprintf(f, "\n");
}

static int model_params(const char *name) {
    ct_context *ctx = NULL;
    ct_graph *g = NULL;
    ct_node logits;
    ct_status s = ct_context_create(NULL, &ctx);
    if (s == CT_OK) s = ct_graph_create(ctx, &g);
    if (s == CT_OK) s = ct_model_by_name(g, name, 1, &logits);
    if (s != CT_OK) {
        int rc = cli_fail(ctx, s, "graph --model");
        ct_graph_free(g);
        ct_context_free(ctx);
        return rc;
    }
    int64_t n = 0;
    int tensors = 0;
    for (int i = 0; i < ct_graph_num_nodes(g); i++) {
        if (strcmp(ct_node_op_name(g, i), "param")) continue;
        int nd;
        int64_t sh[8], e = 1;
        if (ct_node_shape(g, i, &nd, sh) != CT_OK) continue;
        for (int k = 0; k < nd; k++) e *= sh[k];
        n += e;
        tensors++;
    }
    printf("%s: %lld parameters in %d tensors (%.2fM)\n", name, (long long)n, tensors, (double)n / 1e6);
    ct_graph_free(g);
    ct_context_free(ctx);
    return 0;
}

int ct_cli_graph(int argc, char **argv) {
    const char *recipe = NULL, *dot = NULL, *model = NULL, *sets[32];
    int level = -1, no_reuse = 0, quiet = 0, n_sets = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--no-memory-opt")) no_reuse = 1;
        else if (!strcmp(a, "--quiet")) quiet = 1;
        else if (i + 1 < argc && !strcmp(a, "--recipe")) recipe = argv[++i];
        else if (i + 1 < argc && !strcmp(a, "--dot")) dot = argv[++i];
        else if (i + 1 < argc && !strcmp(a, "--model")) model = argv[++i];
        else if (i + 1 < argc && !strcmp(a, "--set")) {
            if (n_sets == (int)(sizeof sets / sizeof sets[0]))
                return cli_error(CT_E_INVALID_ARG, "more than %d --set options\n", n_sets);
            sets[n_sets++] = argv[++i];
        }
        else if (i + 1 < argc && !strcmp(a, "--fusion-level")) {
            char *end;
            long v = strtol(argv[++i], &end, 10);
            if (*end || v < 0 || v > 2) return cli_error(CT_E_INVALID_ARG, "--fusion-level '%s' must be 0, 1 or 2\n", argv[i]);
            level = (int)v;
        } else {
            fprintf(stderr, "ctrain graph: unknown or incomplete option '%s'\n\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (model) return model_params(model);
    if (!recipe) {
        usage(stderr);
        return 2;
    }
    ct_recipe r;
    ct_recipe_default(&r);
    ct_context *ctx = NULL;
    ct_status s = ct_recipe_load_file(NULL, recipe, &r);
    if (s != CT_OK) { /* again with a context, for the message */
        ct_context_create(NULL, &ctx);
        ct_recipe_default(&r);
        s = ct_recipe_load_file(ctx, recipe, &r);
        int rc = cli_fail(ctx, s, recipe);
        ct_context_free(ctx);
        return rc;
    }
    if (n_sets) { /* KEY=VALUE, as train's --set; a context for the messages */
        ct_context_create(NULL, &ctx);
        for (int i = 0; i < n_sets && s == CT_OK; i++) {
            char key[512];
            const char *val;
            if (!cli_split_set(sets[i], key, sizeof key, &val)) {
                fprintf(stderr, "ctrain: error: --set needs KEY=VALUE, got '%s'\n", sets[i]);
                ct_context_free(ctx);
                return 2;
            }
            s = ct_recipe_set(ctx, &r, key, val);
            if (s != CT_OK) {
                int rc = cli_fail(ctx, s, sets[i]);
                ct_context_free(ctx);
                return rc;
            }
        }
        ct_context_free(ctx);
        ctx = NULL;
    }
    if (level >= 0) r.fusion_level = level;
    if (no_reuse) r.memory_opt = 0;
    s = ct_train_context_create(&r, &ctx);
    ct_task *t = NULL;
    ct_graph *g = NULL;
    ct_plan *p = NULL;
    ct_fusion_rules *rules = NULL;
    ct_node loss = CT_NONE, keep[8];
    int n_keep = 0;
    if (s == CT_OK) s = ct_task_create(ctx, &r, &t);
    if (s == CT_OK) s = ct_graph_create(ctx, &g);
    if (s == CT_OK) s = t->build(t, g, &r, &loss, &n_keep, keep);
    if (s == CT_OK && r.fusion_rules[0]) s = ct_fusion_rules_load(ctx, r.fusion_rules, &rules);
    if (s == CT_OK) {
        ct_compile_opts co;
        ct_compile_opts_default(&co);
        co.plan_only = 1;
        co.precision = r.precision;
        co.keep_fp32 = r.keep_fp32;
        co.accumulate_grads = r.accumulate_steps > 1;
        co.recompute_every = r.recompute_every;
        co.recompute_blocks = r.recompute_blocks;
        co.recompute_ops = r.recompute_ops == CT_RECOMPUTE_OPS_CHEAP ? CT_RECOMPUTE_CHEAP
                           : r.recompute_ops == CT_RECOMPUTE_OPS_ALL ? CT_RECOMPUTE_ALL
                                                                     : 0;
        co.fusion_level = r.fusion_level;
        co.fusion_rules = rules;
        co.memory_opt = r.memory_opt;
        s = ct_compile(g, loss, n_keep, keep, &co, &p);
    }
    int rc = 0;
    if (s == CT_OK) {
        printf("recipe %s: model %s, batch %lld\n", recipe, ct_recipe_enum_name("model", (int)r.model), (long long)r.batch_size);
        if (r.tensor_parallel > 1)
            printf("note: tensor_parallel %d: this is the whole model as one process builds it; under mpirun each rank "
                   "holds 1/%d of the split layers (the run header shows one rank's memory)\n",
                   r.tensor_parallel, r.tensor_parallel);
        if (quiet) {
            ct_plan_stats ps;
            ct_plan_get_stats(p, &ps);
            printf("fusion level %d: %d fused groups; activation arena %.2f MiB (no reuse %.2f MiB), workspace %.2f MiB\n",
                   r.fusion_level, ps.n_fused, ps.activation_bytes / 1048576.0, ps.activation_bytes_no_reuse / 1048576.0,
                   ps.workspace_bytes / 1048576.0);
            for (int i = 0; i < ct_fusion_rules_count(rules); i++)
                printf("rule %d %s: matched %d times\n", i + 1, ct_fusion_rule_desc(rules, i), ct_plan_fusion_rule_matches(p, i));
        } else {
            s = ct_plan_write_summary(p, stdout);
            for (int i = 0; s == CT_OK && i < ct_fusion_rules_count(rules); i++)
                printf("  rule %d: %s\n", i + 1, ct_fusion_rule_desc(rules, i));
        }
    }
    if (s == CT_OK && dot) {
        FILE *f = fopen(dot, "w");
        if (!f) {
            rc = cli_error(CT_E_IO, "cannot write '%s'\n", dot);
        } else {
            s = ct_plan_write_dot(p, f);
            if (fclose(f) && s == CT_OK) s = CT_E_IO;
            if (s == CT_OK) printf("wrote %s\n", dot);
        }
    }
    if (s != CT_OK) rc = cli_fail(ctx, s, "graph");
    ct_plan_free(p);
    ct_fusion_rules_free(rules);
    ct_graph_free(g);
    ct_task_free(t);
    ct_context_free(ctx);
    return rc;
}
