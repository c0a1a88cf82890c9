/* tools/sample.c - `ctrain sample`: loads a GPT and its tokenizer from a
 * checkpoint written by `ctrain train` (model gpt) and generates text
 * autoregressively. One forward-only plan of shape (1, context): the window
 * (the last `context` tokens) is written from position 0, the rest padded
 * with id 0, and only the logits at the last real position are read (the
 * model is causal: padding after it does not change them). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void sample_usage(FILE *f) {
    fprintf(f, "usage: ctrain sample --checkpoint DIR [--prompt TEXT] [--tokens N] [--temperature T] [--top-k K]\n"
               "                     [--seed S] [--threads N]\n"
               "\n"
               "Generates text with a GPT checkpoint written by `ctrain train` (a save dir or a step dir).\n"
               "  --prompt TEXT      text to continue (default: \"\\n\")\n"
               "  --tokens N         tokens to generate (default 200)\n"
               "  --temperature T    > 0 (default 1.0)\n"
               "  --top-k K          sample among the K most likely tokens (0: all; default 0)\n"
               "  --seed S           sampling seed (default 0)\n");
}

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

typedef struct {
    float p;
    int32_t id;
} cand;

static int cand_desc(const void *a, const void *b) {
    float x = ((const cand *)a)->p, y = ((const cand *)b)->p;
    return x < y ? 1 : x > y ? -1 : ((const cand *)a)->id - ((const cand *)b)->id;
}

/* Samples an id from logits[V] with temperature and top-k (0: all). */
static int32_t sample_id(const float *logits, int64_t V, double temp, int64_t top_k, cand *c, uint64_t *rng) {
    for (int64_t i = 0; i < V; i++) c[i] = (cand){logits[i], (int32_t)i};
    qsort(c, (size_t)V, sizeof *c, cand_desc);
    int64_t k = top_k > 0 && top_k < V ? top_k : V;
    double mx = c[0].p, sum = 0;
    for (int64_t i = 0; i < k; i++) sum += exp(((double)c[i].p - mx) / temp);
    double u = (double)(splitmix64(rng) >> 11) * 0x1.0p-53 * sum, acc = 0;
    for (int64_t i = 0; i < k; i++) {
        acc += exp(((double)c[i].p - mx) / temp);
        if (u < acc) return c[i].id;
    }
    return c[k - 1].id;
}

static int parse_num(const char *flag, const char *v, double *out) {
    char *end;
    *out = strtod(v, &end);
    if (end == v || *end || !isfinite(*out)) {
        fprintf(stderr, "ctrain: error: %s: '%s' is not a number\n", flag, v);
        return 0;
    }
    return 1;
}

int ct_cli_sample(int argc, char **argv) {
    const char *ckpt = NULL, *prompt = "\n";
    double tokens = 200, temp = 1.0, top_k = 0, seed = 0, threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            sample_usage(stdout);
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "ctrain: error: %s needs a value (see ctrain sample --help)\n", a);
            return 2;
        }
        const char *v = argv[++i];
        int ok = 1;
        if (!strcmp(a, "--checkpoint")) ckpt = v;
        else if (!strcmp(a, "--prompt")) prompt = v;
        else if (!strcmp(a, "--tokens")) ok = parse_num(a, v, &tokens);
        else if (!strcmp(a, "--temperature")) ok = parse_num(a, v, &temp);
        else if (!strcmp(a, "--top-k")) ok = parse_num(a, v, &top_k);
        else if (!strcmp(a, "--seed")) ok = parse_num(a, v, &seed);
        else if (!strcmp(a, "--threads")) ok = parse_num(a, v, &threads);
        else {
            fprintf(stderr, "ctrain: error: unknown option '%s' (see ctrain sample --help)\n", a);
            return 2;
        }
        if (!ok) return 2;
    }
    if (!ckpt) {
        fprintf(stderr, "ctrain: error: --checkpoint DIR is required (a save dir of `ctrain train` with model gpt)\n");
        return 2;
    }
    if (!(temp > 0)) return cli_error(CT_E_INVALID_ARG, "--temperature must be > 0, got %g", temp);
    if (top_k < 0 || top_k != floor(top_k))
        return cli_error(CT_E_INVALID_ARG, "--top-k must be an integer >= 0 (0: all tokens), got %g", top_k);
    if (tokens < 0 || tokens != floor(tokens) || tokens > 1e9)
        return cli_error(CT_E_INVALID_ARG, "--tokens must be an integer >= 0, got %g", tokens);
    if (seed < 0 || seed != floor(seed)) return cli_error(CT_E_INVALID_ARG, "--seed must be an integer >= 0");

    ct_context_opts co;
    ct_context_opts_default(&co);
    co.num_threads = (int)threads;
    ct_context *ctx = NULL;
    ct_status s = ct_context_create(&co, &ctx);
    if (s != CT_OK) {
        fprintf(stderr, "ctrain: error: cannot create a context (%s)\n", ct_status_name(s));
        return 1;
    }
    int rc = 1;
    ct_train_state *st = calloc(1, sizeof *st);
    ct_tokenizer *tok = NULL;
    ct_graph *g = NULL;
    ct_plan *plan = NULL;
    int32_t *ids = NULL, *seq = NULL;
    cand *c = NULL;
    char *vocab = NULL, *out = NULL;
    ct_recipe r;
    ct_recipe_default(&r);
    if (!st) {
        rc = cli_error(CT_E_OOM, "out of memory");
        goto out;
    }
    ct_train_state_init(st);
    if ((s = ct_checkpoint_load(ctx, ckpt, NULL, NULL, st)) != CT_OK) goto out_err;
    if (!st->recipe_json[0]) {
        rc = cli_error(CT_E_CONFIG, "checkpoint '%s' holds no recipe (not written by ctrain train)", st->path);
        goto out;
    }
    if ((s = ct_recipe_parse_json(ctx, st->recipe_json, &r)) != CT_OK) goto out_err;
    if (r.model != CT_MODEL_GPT) {
        rc = cli_error(CT_E_CONFIG, "checkpoint '%s' is a '%s' model; ctrain sample needs a GPT (model gpt)", st->path,
                       ct_recipe_enum_name("model", (int)r.model));
        goto out;
    }
    if (r.tokenizer == CT_TOKENIZER_CHAR) {
        char vpath[4200];
        size_t vlen = 0;
        snprintf(vpath, sizeof vpath, "%s/%s", st->path, CT_TRAIN_VOCAB_FILE);
        if ((s = ct_text_read_file(ctx, vpath, &vocab, &vlen)) != CT_OK) goto out_err;
        if ((s = ct_tokenizer_char_from_vocab(ctx, vocab, vlen, &tok)) != CT_OK) goto out_err;
    } else if ((s = ct_train_tokenizer(ctx, &r, NULL, 0, &tok)) != CT_OK) {
        goto out_err;
    }
    ct_gpt_config gc;
    if ((s = ct_train_gpt_config(ctx, &r, ct_tokenizer_vocab_size(tok), &gc)) != CT_OK) goto out_err;
    gc.dropout = 0.0f;
    const int64_t C = gc.context, V = gc.vocab;
    /* prompt -> ids (a byte outside the char vocabulary is reported here) */
    size_t plen = strlen(prompt);
    int64_t n = 0, cap = (int64_t)plen + (int64_t)tokens + 1;
    if (!(seq = malloc(sizeof *seq * (size_t)cap)) || !(ids = calloc((size_t)C, sizeof *ids)) ||
        !(c = malloc(sizeof *c * (size_t)V))) {
        rc = cli_error(CT_E_OOM, "out of memory");
        goto out;
    }
    if (plen && (s = ct_tokenizer_encode(tok, prompt, plen, seq, cap, &n)) != CT_OK) {
        rc = cli_error(s, "--prompt: %s", cli_msg(ct_context_last_error(ctx)));
        goto out;
    }
    if (n == 0) {
        rc = cli_error(CT_E_INVALID_ARG, "--prompt is empty; give at least one character of the vocabulary");
        goto out;
    }
    ct_node in, logits;
    if ((s = ct_graph_create(ctx, &g)) != CT_OK) goto out_err;
    if ((s = ct_input(g, "ids", CT_I32, 2, (int64_t[]){1, C}, &in)) != CT_OK) goto out_err;
    if ((s = ct_model_gpt(g, in, &gc, &logits)) != CT_OK) goto out_err;
    ct_compile_opts cop;
    ct_compile_opts_default(&cop);
    cop.build_backward = 0;
    if ((s = ct_compile(g, CT_NONE, 1, &logits, &cop, &plan)) != CT_OK) goto out_err;
    if ((s = ct_checkpoint_load(ctx, ckpt, plan, NULL, NULL)) != CT_OK) goto out_err;
    ct_tensor ti, tl;
    ct_plan_tensor(plan, in, &ti);
    ct_plan_tensor(plan, logits, &tl);
    if (tl.dtype != CT_F32) {
        rc = cli_error(CT_E_INTERNAL, "the sampling plan's logits are not FP32");
        goto out;
    }
    uint64_t rng = (uint64_t)seed;
    int64_t n_prompt = n;
    fwrite(prompt, 1, plen, stdout);
    fflush(stdout);
    for (int64_t t = 0; t < (int64_t)tokens; t++) {
        int64_t w = n < C ? n : C, first = n - w;
        int32_t *x = ti.data;
        memcpy(x, seq + first, sizeof *x * (size_t)w);
        memset(x + w, 0, sizeof *x * (size_t)(C - w));
        if ((s = ct_plan_forward(plan, 0)) != CT_OK) goto out_err;
        const float *lg = (const float *)tl.data + (w - 1) * V;
        int32_t id = sample_id(lg, V, temp, (int64_t)top_k, c, &rng);
        seq[n++] = id;
        size_t ol = 0;
        if ((s = ct_tokenizer_decode_alloc(tok, &seq[n - 1], 1, &out, &ol)) != CT_OK) goto out_err;
        fwrite(out, 1, ol, stdout);
        fflush(stdout);
        ct_free(ctx, out);
        out = NULL;
    }
    (void)n_prompt;
    printf("\n");
    rc = 0;
    goto out;
out_err:
    rc = cli_fail(ctx, s, "sampling failed");
out:
    if (out) ct_free(ctx, out);
    if (vocab) ct_free(ctx, vocab);
    free(c);
    free(ids);
    free(seq);
    ct_plan_free(plan);
    ct_graph_free(g);
    ct_tokenizer_free(tok);
    free(st);
    ct_context_free(ctx);
    return rc;
}
