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

/* The flags of `ctrain sample`. */
typedef struct {
    const char *ckpt, *prompt;
    double tokens, temp, top_k, seed, threads;
} sample_args;

/* Reads and checks the flags: -1 to go on, else the exit code (0 after
 * --help; 2 or 1 after printing the error). */
static int sample_parse(int argc, char **argv, sample_args *sa) {
    *sa = (sample_args){.prompt = "\n", .tokens = 200, .temp = 1.0};
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
        if (!strcmp(a, "--checkpoint")) sa->ckpt = v;
        else if (!strcmp(a, "--prompt")) sa->prompt = v;
        else if (!strcmp(a, "--tokens")) ok = parse_num(a, v, &sa->tokens);
        else if (!strcmp(a, "--temperature")) ok = parse_num(a, v, &sa->temp);
        else if (!strcmp(a, "--top-k")) ok = parse_num(a, v, &sa->top_k);
        else if (!strcmp(a, "--seed")) ok = parse_num(a, v, &sa->seed);
        else if (!strcmp(a, "--threads")) ok = parse_num(a, v, &sa->threads);
        else {
            fprintf(stderr, "ctrain: error: unknown option '%s' (see ctrain sample --help)\n", a);
            return 2;
        }
        if (!ok) return 2;
    }
    if (!sa->ckpt) {
        fprintf(stderr, "ctrain: error: --checkpoint DIR is required (a save dir of `ctrain train` with model gpt)\n");
        return 2;
    }
    if (!(sa->temp > 0)) return cli_error(CT_E_INVALID_ARG, "--temperature must be > 0, got %g", sa->temp);
    if (sa->top_k < 0 || sa->top_k != floor(sa->top_k))
        return cli_error(CT_E_INVALID_ARG, "--top-k must be an integer >= 0 (0: all tokens), got %g", sa->top_k);
    if (sa->tokens < 0 || sa->tokens != floor(sa->tokens) || sa->tokens > 1e9)
        return cli_error(CT_E_INVALID_ARG, "--tokens must be an integer >= 0, got %g", sa->tokens);
    if (sa->seed < 0 || sa->seed != floor(sa->seed))
        return cli_error(CT_E_INVALID_ARG, "--seed must be an integer >= 0");
    return -1;
}

/* What sampling holds. The steps below return 0, a library error (-1, the
 * status in s) or an exit code after printing the error (1). */
typedef struct {
    ct_context *ctx;
    ct_status s;
    ct_train_state *st;
    ct_recipe r;
    ct_tokenizer *tok;
    ct_gpt_config gc;
    ct_graph *g;
    ct_plan *plan;
    ct_tensor ti, tl; /* the plan's input ids and logits */
    int32_t *seq;     /* the prompt's ids, then the generated ones */
    int64_t n;        /* ids in seq */
    cand *c;
    char *vocab;
} sampler;

#define SAMPLE_TRY(expr)                                                                                      \
    do {                                                                                                      \
        if ((sm->s = (expr)) != CT_OK) return -1;                                                             \
    } while (0)

/* The checkpoint's recipe (a GPT), its tokenizer and the model's config. */
static int load_model(sampler *sm, const char *ckpt) {
    ct_recipe_default(&sm->r);
    if (!(sm->st = calloc(1, sizeof *sm->st))) return cli_error(CT_E_OOM, "out of memory");
    ct_train_state_init(sm->st);
    SAMPLE_TRY(ct_checkpoint_load(sm->ctx, ckpt, NULL, NULL, sm->st));
    if (!sm->st->recipe_json[0])
        return cli_error_hint(CT_E_CONFIG, "give --checkpoint a save dir that ctrain train wrote for a gpt recipe",
                              "checkpoint '%s' holds no recipe (not written by ctrain train)", sm->st->path);
    SAMPLE_TRY(ct_recipe_parse_json(sm->ctx, sm->st->recipe_json, &sm->r));
    if (sm->r.model != CT_MODEL_GPT)
        return cli_error_hint(CT_E_CONFIG, "sample generates text: give it the checkpoint of a run with model gpt "
                              "(e.g. ctrain train --recipe recipes/gpt_char_small.json --save-dir DIR)",
                              "checkpoint '%s' is a '%s' model; ctrain sample needs a GPT (model gpt)", sm->st->path,
                              ct_recipe_enum_name("model", (int)sm->r.model));
    if (sm->r.tokenizer == CT_TOKENIZER_CHAR) {
        char vpath[4200];
        size_t vlen = 0;
        snprintf(vpath, sizeof vpath, "%s/%s", sm->st->path, CT_TRAIN_VOCAB_FILE);
        SAMPLE_TRY(ct_text_read_file(sm->ctx, vpath, &sm->vocab, &vlen));
        SAMPLE_TRY(ct_tokenizer_char_from_vocab(sm->ctx, sm->vocab, vlen, &sm->tok));
    } else {
        SAMPLE_TRY(ct_train_tokenizer(sm->ctx, &sm->r, NULL, 0, &sm->tok));
    }
    SAMPLE_TRY(ct_train_gpt_config(sm->ctx, &sm->r, ct_tokenizer_vocab_size(sm->tok), &sm->gc));
    sm->gc.dropout = 0.0f;
    return 0;
}

/* prompt -> sm->seq (a byte outside the char vocabulary is reported here),
 * with room for the generated tokens. */
static int encode_prompt(sampler *sm, const sample_args *sa) {
    size_t plen = strlen(sa->prompt);
    int64_t cap = (int64_t)plen + (int64_t)sa->tokens + 1;
    if (!(sm->seq = malloc(sizeof *sm->seq * (size_t)cap)) || !(sm->c = malloc(sizeof *sm->c * (size_t)sm->gc.vocab)))
        return cli_error(CT_E_OOM, "out of memory");
    if (plen && (sm->s = ct_tokenizer_encode(sm->tok, sa->prompt, plen, sm->seq, cap, &sm->n)) != CT_OK)
        return cli_error(sm->s, "--prompt: %s", cli_msg(ct_context_last_error(sm->ctx)));
    if (sm->n == 0)
        return cli_error(CT_E_INVALID_ARG, "--prompt is empty; give at least one character of the vocabulary");
    return 0;
}

/* The forward-only plan of shape (1, context) with the checkpoint's weights. */
static int build_plan(sampler *sm, const char *ckpt) {
    ct_node in, logits;
    SAMPLE_TRY(ct_graph_create(sm->ctx, &sm->g));
    SAMPLE_TRY(ct_input(sm->g, "ids", CT_I32, 2, (int64_t[]){1, sm->gc.context}, &in));
    SAMPLE_TRY(ct_model_gpt(sm->g, in, &sm->gc, &logits));
    ct_compile_opts cop;
    ct_compile_opts_default(&cop);
    cop.build_backward = 0;
    SAMPLE_TRY(ct_compile(sm->g, CT_NONE, 1, &logits, &cop, &sm->plan));
    SAMPLE_TRY(ct_checkpoint_load(sm->ctx, ckpt, sm->plan, NULL, NULL));
    ct_plan_tensor(sm->plan, in, &sm->ti);
    ct_plan_tensor(sm->plan, logits, &sm->tl);
    if (sm->tl.dtype != CT_F32) return cli_error(CT_E_INTERNAL, "the sampling plan's logits are not FP32");
    return 0;
}

/* Prints the prompt, then each generated token as it is drawn. */
static int generate(sampler *sm, const sample_args *sa) {
    const int64_t C = sm->gc.context, V = sm->gc.vocab;
    uint64_t rng = (uint64_t)sa->seed;
    fwrite(sa->prompt, 1, strlen(sa->prompt), stdout);
    fflush(stdout);
    for (int64_t t = 0; t < (int64_t)sa->tokens; t++) {
        int64_t w = sm->n < C ? sm->n : C, first = sm->n - w;
        int32_t *x = sm->ti.data;
        memcpy(x, sm->seq + first, sizeof *x * (size_t)w);
        memset(x + w, 0, sizeof *x * (size_t)(C - w));
        SAMPLE_TRY(ct_plan_forward(sm->plan, 0));
        const float *lg = (const float *)sm->tl.data + (w - 1) * V;
        int32_t id = sample_id(lg, V, sa->temp, (int64_t)sa->top_k, sm->c, &rng);
        sm->seq[sm->n++] = id;
        char *out = NULL;
        size_t ol = 0;
        SAMPLE_TRY(ct_tokenizer_decode_alloc(sm->tok, &sm->seq[sm->n - 1], 1, &out, &ol));
        fwrite(out, 1, ol, stdout);
        fflush(stdout);
        ct_free(sm->ctx, out);
    }
    printf("\n");
    return 0;
}

int ct_cli_sample(int argc, char **argv) {
    sample_args sa;
    int rc = sample_parse(argc, argv, &sa);
    if (rc >= 0) return rc;
    ct_context_opts co;
    ct_context_opts_default(&co);
    co.num_threads = (int)sa.threads;
    sampler sm = {0};
    ct_status s = ct_context_create(&co, &sm.ctx);
    if (s != CT_OK) {
        cli_context_fail(s);
        return 1;
    }
    rc = load_model(&sm, sa.ckpt);
    if (rc == 0) rc = encode_prompt(&sm, &sa);
    if (rc == 0) rc = build_plan(&sm, sa.ckpt);
    if (rc == 0) rc = generate(&sm, &sa);
    if (rc < 0) rc = cli_fail(sm.ctx, sm.s, "sampling failed");
    if (sm.vocab) ct_free(sm.ctx, sm.vocab);
    free(sm.c);
    free(sm.seq);
    ct_plan_free(sm.plan);
    ct_graph_free(sm.g);
    ct_tokenizer_free(sm.tok);
    free(sm.st);
    ct_context_free(sm.ctx);
    return rc;
}
