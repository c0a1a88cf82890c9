/* tools/graph.c - `ctrain graph`: the compiled plan of a recipe's model as
 * text (nodes, kernels, fused groups, memory by category, peak) and as
 * Graphviz DOT (forward and backward, fused groups as clusters), and with
 * pipeline_stages > 1 each stage's blocks, FLOPs, parameters and activations;
 * or the parameter count of a built-in model (--model NAME). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *f) {
    fprintf(f, "usage: ctrain graph --recipe FILE [--set KEY=VALUE ...] [--dot FILE] [--fusion-level N] [--no-memory-opt]\n"
               "                    [--quiet] [--fit [--world N]]\n"
               "       ctrain graph --model NAME\n"
               "\n"
               "Compiles the recipe's training plan without allocating it (the model's data is read for its\n"
               "shapes) and prints every live node with its op, shape, kernel and fused group, the fused\n"
               "groups, the fusion rules that matched, and memory by category with the peak and what is live\n"
               "there (by kind and dtype, the largest buffers). With pipeline_stages > 1, also each stage: its\n"
               "blocks (pipeline_split, else balanced), forward FLOPs, parameters, and activations times the\n"
               "micro-batches its schedule keeps in flight (each stage plan compiled here, no MPI).\n"
               "\n"
               "  --recipe FILE       the recipe (its fusion_level, fusion_rules and memory_opt apply)\n"
               "  --set KEY=VALUE     a recipe key as train's --set (e.g. precision=bf16, batch_size=64)\n"
               "  --dot FILE          also write Graphviz DOT of the forward and backward graphs\n"
               "  --fusion-level N    0, 1 or 2 instead of the recipe's (docs/fusion.md)\n"
               "  --no-memory-opt     every activation its own buffer (memory_opt false)\n"
               "  --quiet             the summary lines only, not every node\n"
               "  --fit               the candidates of recipe key fit (auto unless the recipe says max_batch; needs\n"
               "                      memory_budget): memory, estimated step time, fits / too big, the one chosen\n"
               "  --world N           --fit, and zero_stage's memory per rank: for N data parallel ranks (default 1)\n"
               "  --model NAME        print the parameter count of a built-in model:");
    for (int i = 0; i < ct_model_num_builtin(); i++) fprintf(f, "%s %s", i ? "," : "", ct_model_builtin_name(i));
    fprintf(f, "\n");
}

static void human_flops(double v, char *buf, size_t len) {
    const char *pre[] = {"", "K", "M", "G", "T", "P"};
    int i = 0;
    while (v >= 1000 && i < 5) v /= 1000, i++;
    snprintf(buf, len, "%.3g %sFLOP", v, pre[i]);
}

static int64_t graph_params(const ct_graph *g, int *tensors) {
    int64_t n = 0;
    *tensors = 0;
    for (int i = 0; i < ct_graph_num_nodes(g); i++) {
        if (strcmp(ct_node_op_name(g, i), "param")) continue;
        int nd;
        int64_t sh[8], e = 1;
        if (ct_node_shape(g, i, &nd, sh) != CT_OK) continue;
        for (int k = 0; k < nd; k++) e *= sh[k];
        n += e;
        (*tensors)++;
    }
    return n;
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
    int tensors = 0;
    const int64_t n = graph_params(g, &tensors);
    printf("%s: %lld parameters in %d tensors (%.2fM)\n", name, (long long)n, tensors, (double)n / 1e6);
    ct_graph_free(g);
    ct_context_free(ctx);
    return 0;
}

static void compile_opts_of(const ct_recipe *r, ct_fusion_rules *rules, ct_compile_opts *co) {
    ct_recipe_compile_opts(r, co); /* the trainer's */
    co->plan_only = 1;
    co->fusion_rules = rules;
}

/* ---- pipeline stages (recipe key pipeline_stages > 1; src/train/pipeline.c runs them) ---- */
enum { PP_1F1B = 0, PP_GPIPE = 1, PP_INTERLEAVED = 2, PP_MAX_PIECES = 256 };
typedef struct {
    ct_graph *g;
    ct_node loss;
    int n_keep;
    const ct_node *keep;
    const ct_compile_opts *co;
} pp_build;

/* The micro-batches whose activations stage r holds at once (the schedule's warm-up plus one): gpipe all M,
 * 1f1b min(P - r, M), interleaved (Megatron's warm-up of (P - r - 1) x 2 + (v - 1) x P virtual micro-batches)
 * that plus one, at most M x v. */
static int pp_in_flight(int kind, int P, int v, int M, int r) {
    if (kind == PP_GPIPE) return M;
    if (kind == PP_1F1B || v == 1) return P - r < M ? P - r : M;
    const int N = M * v, w = (P - r - 1) * 2 + (v - 1) * P, nw = M == P ? N : w < N ? w : N;
    return nw + 1 < N ? nw + 1 : N;
}


/* One stage's pieces as "blocks 0..2 (wte .. h.1)", or for several "pieces 0 (blocks 0..1), 2 (...)". */
static void pp_blocks(const ct_graph *g, int n_pieces, const int *cuts, int P, int v, int r, char *out, size_t len) {
    const int nb = ct_graph_num_blocks(g);
    size_t o = 0;
    out[0] = 0;
    for (int c = 0; c < v && o < len; c++) {
        const int k = c * P + r, b0 = k ? cuts[k - 1] : 0, b1 = k + 1 < n_pieces ? cuts[k] - 1 : nb - 1;
        const char *n0 = b0 >= 0 && b0 < nb ? ct_graph_block_name(g, b0) : "?";
        const char *n1 = b1 >= 0 && b1 < nb ? ct_graph_block_name(g, b1) : "?";
        if (v > 1) o += (size_t)snprintf(out + o, len - o, "%spiece %d (", c ? ", " : "", k);
        if (o < len && b1 > b0)
            o += (size_t)snprintf(out + o, len - o, "blocks %d..%d (%s .. %s)", b0, b1, n0 ? n0 : "?", n1 ? n1 : "?");
        else if (o < len)
            o += (size_t)snprintf(out + o, len - o, "block %d (%s)", b0, n0 ? n0 : "?");
        if (v > 1 && o < len) o += (size_t)snprintf(out + o, len - o, ")");
    }
}

/* Per stage: its blocks, forward FLOPs and parameters (ct_graph_piece_costs), and its activations (a
 * plan_only compile of the stage plan) plus what backward reads (ct_plan_saved_bytes) per micro-batch in flight. */
static ct_status print_pipeline(const ct_recipe *r, const pp_build *b, int *said) {
    const int P = r->pipeline_stages, kind = r->pipeline_schedule, M = r->accumulate_steps > 0 ? r->accumulate_steps : 1;
    const int v = kind == PP_INTERLEAVED ? (r->virtual_stages > 0 ? r->virtual_stages : 2) : 1, n = P * v;
    if (kind != PP_INTERLEAVED && r->virtual_stages > 1)
        *said = cli_error(CT_E_CONFIG, "virtual_stages %d needs pipeline_schedule interleaved", r->virtual_stages);
    else if (kind == PP_INTERLEAVED && (v < 2 || M % P))
        *said = cli_error(CT_E_CONFIG, "pipeline_schedule interleaved needs virtual_stages >= 2 (it is %d) and "
                          "micro_batches a multiple of pipeline_stages %d (it is %d)", v, P, M);
    else if (n > PP_MAX_PIECES)
        *said = cli_error(CT_E_CONFIG, "pipeline: %d x %d pieces is more than %d", P, v, PP_MAX_PIECES);
    if (*said) return CT_E_CONFIG;
    int cuts[PP_MAX_PIECES], held[PP_MAX_PIECES], tensors;
    double flops[PP_MAX_PIECES], params[PP_MAX_PIECES], held_params = 0;
    ct_status s = ct_graph_parse_cuts(b->g, r->pipeline_split, n, cuts); /* the trainer's cut */
    if (s == CT_OK) s = ct_graph_piece_costs(b->g, n, cuts, flops, params);
    if (s != CT_OK) return s;
    for (int k = 0; k < n; k++) held_params += params[k];
    const int64_t model = graph_params(b->g, &tensors);
    printf("pipeline stages: %d stages x %d piece%s each (%d blocks), schedule %s, %d micro-batches", P, v,
           v > 1 ? "s" : "", ct_graph_num_blocks(b->g), ct_recipe_enum_name("pipeline_schedule", kind), M);
    if (kind != PP_INTERLEAVED) printf(" (ideal bubble (P-1)/(M+P-1) = %.1f%%)", 100.0 * (P - 1) / (M + P - 1));
    printf("; model %lld parameters, the stages hold %.0f (a parameter read by two stages, like a tied "
           "embedding, is in both)\n", (long long)model, held_params);
    for (int q = 0; q < P; q++) {
        double fl = 0, pa = 0;
        for (int c = 0; c < v; c++) {
            held[c] = c * P + q;
            fl += flops[held[c]];
            pa += params[held[c]];
        }
        const ct_stage_opts so = {.n_pieces = n, .cuts = cuts, .n_held = v, .held = held};
        ct_compile_opts co = *b->co;
        co.stage = &so;
        ct_plan *sp = NULL;
        s = ct_compile(b->g, b->loss, b->n_keep, b->keep, &co, &sp);
        if (s != CT_OK) return s;
        ct_plan_stats ps;
        ct_plan_get_stats(sp, &ps);
        const double act = (double)ps.activation_bytes / 1048576.0, kept = (double)ct_plan_saved_bytes(sp, -1) / 1048576.0;
        ct_plan_free(sp);
        const int fly = pp_in_flight(kind, P, v, M, q);
        char blocks[512], fs[32];
        pp_blocks(b->g, n, cuts, P, v, q, blocks, sizeof blocks);
        human_flops(fl, fs, sizeof fs);
        printf("  stage %d: %s, forward %s, %.0f parameters (%.2f MiB), activations %.2f MiB + %.2f MiB kept for "
               "backward x %d micro-batch%s in flight = %.2f MiB\n", q, blocks, fs, pa, pa * 4 / 1048576.0, act, kept,
               fly, fly == 1 ? "" : "es", act + kept * fly);
    }
    return CT_OK;
}

/* zero_stage > 0: what one of `world` data parallel ranks holds (ct_train_zero_estimate; the plan here is the
 * whole batch's, so the activations are one process's). */
static void print_zero(const ct_recipe *r, ct_plan *p, int world) {
    ct_plan_stats ps;
    ct_plan_get_stats(p, &ps);
    double largest = 0;
    for (int i = 0; i < ct_plan_num_params(p); i++) {
        ct_tensor v;
        if (ct_plan_param_info(p, i, NULL, &v, NULL) == CT_OK && (double)ct_tensor_numel(&v) * 4 > largest)
            largest = (double)ct_tensor_numel(&v) * 4;
    }
    ct_zero_estimate z;
    ct_train_zero_estimate(r, &ps, largest, world, &z);
    const double M = 1048576.0;
    if (world < 2) {
        printf("zero_stage %d: shards over data parallel ranks; --world N shows one rank's share\n", r->zero_stage);
        return;
    }
    char cp[64] = "";
    if (z.copies > 0) snprintf(cp, sizeof cp, ", %.2f MiB of 16-bit weight copies", z.copies / M);
    printf("zero_stage %d on %d ranks, per rank: parameters %.2f MiB (peak %.2f), gradients %.2f MiB between steps "
           "(peak in backward %.2f), optimizer state %.2f MiB%s; %.2f MiB at the peaks\n", r->zero_stage, world,
           z.params / M, z.params_peak / M, z.grads_between / M, z.grads_peak / M, z.state / M, cp,
           (z.params_peak + z.grads_peak + z.state + z.copies) / M);
}

int ct_cli_graph(int argc, char **argv) {
    const char *recipe = NULL, *dot = NULL, *model = NULL, *sets[32];
    int level = -1, no_reuse = 0, quiet = 0, n_sets = 0, fit = 0, world = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--no-memory-opt")) no_reuse = 1;
        else if (!strcmp(a, "--quiet")) quiet = 1;
        else if (!strcmp(a, "--fit")) fit = 1;
        else if (i + 1 < argc && !strcmp(a, "--world")) {
            char *end;
            long v = strtol(argv[++i], &end, 10);
            if (*end || v < 1 || v > 65536) return cli_error(CT_E_INVALID_ARG, "--world '%s' must be 1 or more\n", argv[i]);
            world = (int)v;
        }
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
    if (fit && r.fit == CT_FIT_OFF) r.fit = CT_FIT_AUTO;
    s = ct_train_context_create(&r, &ctx);
    ct_task *t = NULL;
    ct_graph *g = NULL;
    ct_plan *p = NULL;
    ct_fusion_rules *rules = NULL;
    ct_node loss = CT_NONE, keep[8];
    int n_keep = 0;
    if (s == CT_OK) s = ct_task_create(ctx, &r, &t);
    if (s == CT_OK && fit) { /* the table alone */
        s = ct_train_fit_report(ctx, &r, t, world, stdout);
        int rc = s == CT_OK ? 0 : cli_fail(ctx, s, "graph --fit");
        ct_task_free(t);
        ct_context_free(ctx);
        return rc;
    }
    if (s == CT_OK) s = ct_graph_create(ctx, &g);
    if (s == CT_OK) s = t->build(t, g, &r, &loss, &n_keep, keep);
    if (s == CT_OK && r.fusion_rules[0]) s = ct_fusion_rules_load(ctx, r.fusion_rules, &rules);
    ct_compile_opts co;
    compile_opts_of(&r, rules, &co);
    if (s == CT_OK) s = ct_compile(g, loss, n_keep, keep, &co, &p);
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
        if (s == CT_OK && r.zero_stage > 0) print_zero(&r, p, world);
        if (s == CT_OK && r.pipeline_stages > 1) {
            const pp_build b = {g, loss, n_keep, keep, &co};
            int said = 0;
            s = print_pipeline(&r, &b, &said);
            if (said) rc = 1, s = CT_OK, dot = NULL;
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
