/* bench/bench_dynshape.c - what dynamic shapes cost and save
 * (docs/dynamic-shapes.md). GPT (gpt-char-small unless overridden) trains on
 * Moby-Dick's paragraphs (ct_text_docs: char tokenizer, length buckets,
 * pad_to_multiple) with the batch lengths of N consecutive training batches,
 * three ways, interleaved batch by batch so a noisy machine hits all alike:
 *   static   one plan compiled exactly for each distinct (B, T) (no dynamic
 *            mechanism: the ideal the overhead is measured against);
 *   dynamic  one plan compiled for (B, context), each batch run at its own
 *            (B, T) (ct_plan_add_shape / ct_plan_set_shape);
 *   padded   one plan for (B, context), every batch padded to the context
 *            (dynamic_shapes: false).
 * Each step is forward + backward + AdamW update. Prints per round the
 * seconds of each mode, then one line per mode with the median round:
 *   RESULT mode=dynamic ms_per_step=.. tok_per_s=.. (real tokens: the
 *   predicted, unpadded ones)
 * and the overhead = dynamic / static - 1 and the speedup = padded /
 * dynamic, from the median rounds and as the median over every (round,
 * batch) of the ratio of the two steps of that batch (run back to back, so
 * robust to load bursts on a shared machine). --lengths FILE writes each batch's T and its rows' real lengths
 * (one batch per line) for
 * bench/torch_dynshape.py, which times PyTorch on the same lengths.
 *
 *   bench_dynshape [--batches N] [--rounds R] [--batch B] [--context T] [--layers L]
 *                  [--d D] [--heads H] [--threads N] [--lengths FILE] [--corpus PATH]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctrain/ctrain.h"
#define BENCH_NAME "bench_dynshape"
#include "bench_util.h"


static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    ct_plan *plan;
    ct_optimizer *opt;
    ct_node ids, labels, loss;
} model;

static void build(ct_context *ctx, const ct_gpt_config *c, int64_t B, int64_t T, ct_graph **out, model *m) {
    ct_graph *g;
    ct_node logits;
    DIE_IF(ctx, ct_graph_create(ctx, &g));
    DIE_IF(ctx, ct_input(g, "ids", CT_I32, 2, (int64_t[]){B, T}, &m->ids));
    DIE_IF(ctx, ct_input(g, "labels", CT_I32, 2, (int64_t[]){B, T}, &m->labels));
    DIE_IF(ctx, ct_model_gpt(g, m->ids, c, &logits));
    DIE_IF(ctx, ct_cross_entropy(g, logits, m->labels, 0.0f, -100, &m->loss));
    *out = g;
}

static void compile(ct_context *ctx, const ct_gpt_config *c, int64_t B, int64_t T, model *m) {
    ct_graph *g;
    build(ctx, c, B, T, &g, m);
    DIE_IF(ctx, ct_compile(g, m->loss, 0, NULL, NULL, &m->plan));
    ct_graph_free(g);
    ct_optim_opts o;
    ct_optim_opts_default(&o, CT_OPTIM_ADAMW);
    o.lr = 1e-3f;
    o.weight_decay = 0.1f;
    o.no_decay_bias_norm = 1;
    DIE_IF(ctx, ct_optimizer_create(m->plan, &o, &m->opt));
}

/* One step of batch k on m at its (B, T) view (the inputs written first). */
static double step(ct_context *ctx, model *m, const ct_text_docs *d, const int64_t *docs, int64_t B) {
    ct_tensor ti, tl;
    DIE_IF(ctx, ct_plan_tensor(m->plan, m->ids, &ti));
    DIE_IF(ctx, ct_plan_tensor(m->plan, m->labels, &tl));
    double t0 = now_s();
    ct_text_docs_lm(d, docs, B, ti.shape[1], ti.data, tl.data);
    DIE_IF(ctx, ct_plan_forward(m->plan, 1));
    DIE_IF(ctx, ct_plan_backward(m->plan));
    DIE_IF(ctx, ct_optimizer_step(m->opt));
    return now_s() - t0;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    int64_t N = 24, R = 3, B = 8, ctxlen = 0, d_model = 0;
    int layers = 0, heads = 0, threads = 2;
    const char *lengths = NULL, *corpus = "data/text/moby-dick.txt";
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--batches")) N = atoll(v);
        else if (!strcmp(k, "--rounds")) R = atoll(v);
        else if (!strcmp(k, "--batch")) B = atoll(v);
        else if (!strcmp(k, "--context")) ctxlen = atoll(v);
        else if (!strcmp(k, "--layers")) layers = atoi(v);
        else if (!strcmp(k, "--d")) d_model = atoll(v);
        else if (!strcmp(k, "--heads")) heads = atoi(v);
        else if (!strcmp(k, "--threads")) threads = atoi(v);
        else if (!strcmp(k, "--lengths")) lengths = v;
        else if (!strcmp(k, "--corpus")) corpus = v;
        else {
            fprintf(stderr, "bench_dynshape: unknown option %s (see the file header)\n", k);
            return 2;
        }
    }
    if (N < 1 || R < 1 || B < 1) return 2;
    ct_context_opts co;
    ct_context_opts_default(&co);
    co.num_threads = threads;
    ct_context *ctx;
    if (ct_context_create(&co, &ctx) != CT_OK) return 1;
    ct_gpt_config c;
    DIE_IF(ctx, ct_gpt_preset(ctx, "gpt-char-small", &c));
    c.dropout = 0;
    if (ctxlen) c.context = ctxlen;
    if (layers) c.n_layer = layers;
    if (d_model) c.d_model = d_model;
    if (heads) c.n_head = heads;
    char *text;
    size_t len;
    ct_tokenizer *tok;
    ct_text_docs docs;
    DIE_IF(ctx, ct_text_read_file(ctx, corpus, &text, &len));
    DIE_IF(ctx, ct_tokenizer_char_fit(ctx, text, len, &tok));
    DIE_IF(ctx, ct_text_docs_from_text(ctx, tok, text, len, CT_TEXT_DOC_PARAGRAPHS, 2, c.context + 1, 0.1, 8, &docs));
    ct_free(ctx, text);
    c.vocab = ct_tokenizer_vocab_size(tok);

    /* the batches: documents and lengths (pad_to_multiple 8) */
    int64_t *bd = malloc(sizeof *bd * (size_t)(N * B)), *bt = malloc(sizeof *bt * (size_t)N);
    double real_tokens = 0;
    for (int64_t k = 0; k < N; k++) {
        ct_text_docs_pick(&docs, B, 1234, (uint64_t)k, bd + k * B);
        bt[k] = ct_text_docs_seq_len(&docs, bd + k * B, B, 1, 8, c.context);
        for (int64_t r = 0; r < B; r++) {
            int64_t l = docs.len[bd[k * B + r]] - 1;
            real_tokens += (double)(l < c.context ? l : c.context);
        }
    }
    if (lengths) {
        FILE *f = fopen(lengths, "w");
        if (!f) return 1;
        for (int64_t k = 0; k < N; k++) { /* T, then each row's real length */
            fprintf(f, "%lld", (long long)bt[k]);
            for (int64_t r = 0; r < B; r++) {
                int64_t l = docs.len[bd[k * B + r]] - 1;
                fprintf(f, " %lld", (long long)(l < c.context ? l : c.context));
            }
            fprintf(f, "\n");
        }
        fclose(f);
    }

    /* the three modes' plans */
    model dyn, pad, *stat = calloc((size_t)N, sizeof *stat);
    int *var = malloc(sizeof *var * (size_t)N), *owner = malloc(sizeof *owner * (size_t)N);
    compile(ctx, &c, B, c.context, &dyn);
    compile(ctx, &c, B, c.context, &pad);
    for (int64_t k = 0; k < N; k++) {
        owner[k] = (int)k; /* static: share the plan of an earlier batch of the same T */
        for (int64_t j = 0; j < k; j++)
            if (bt[j] == bt[k]) {
                owner[k] = (int)j;
                break;
            }
        if (owner[k] == k) compile(ctx, &c, B, bt[k], &stat[k]);
        ct_graph *g;
        model tmp;
        build(ctx, &c, B, bt[k], &g, &tmp);
        DIE_IF(ctx, ct_plan_add_shape(dyn.plan, g, tmp.loss, 0, NULL, &var[k]));
        ct_graph_free(g);
    }
    printf("bench_dynshape: gpt %d layers d %lld heads %d context %lld vocab %lld, batch %lld, %lld batches of "
           "Moby-Dick paragraphs (T:",
           c.n_layer, (long long)c.d_model, c.n_head, (long long)c.context, (long long)c.vocab, (long long)B, (long long)N);
    for (int64_t k = 0; k < N; k++) printf(" %lld", (long long)bt[k]);
    printf("), %.0f real tokens per round, %d threads\n", real_tokens, threads);

    /* warmup: every shape once (oneDNN primitives are created on first use) */
    for (int64_t k = 0; k < N; k++) {
        DIE_IF(ctx, ct_plan_set_shape(dyn.plan, var[k]));
        step(ctx, &dyn, &docs, bd + k * B, B);
        if (owner[k] == k) step(ctx, &stat[k], &docs, bd + k * B, B);
    }
    step(ctx, &pad, &docs, bd, B);

    double *ts = calloc((size_t)(3 * R), sizeof *ts); /* [mode * R + round] */
    /* per (round, batch): dynamic / static and padded / dynamic of the same
     * batch, run back to back: a load burst on a shared machine hits one
     * pair, not a whole round */
    double *rd = calloc((size_t)(R * N), sizeof *rd), *rp = calloc((size_t)(R * N), sizeof *rp);
    const char *names[3] = {"static", "dynamic", "padded"};
    for (int64_t r = 0; r < R; r++) {
        for (int64_t k = 0; k < N; k++) {
            double t3[3];
            for (int j = 0; j < 3; j++) {
                int mode = (int)((j + k + r) % 3); /* rotate the order */
                const int64_t *dk = bd + k * B;
                if (mode == 0) t3[0] = step(ctx, &stat[owner[k]], &docs, dk, B);
                else if (mode == 1) {
                    DIE_IF(ctx, ct_plan_set_shape(dyn.plan, var[k]));
                    t3[1] = step(ctx, &dyn, &docs, dk, B);
                } else
                    t3[2] = step(ctx, &pad, &docs, dk, B);
            }
            for (int m = 0; m < 3; m++) ts[m * R + r] += t3[m];
            rd[r * N + k] = t3[1] / t3[0];
            rp[r * N + k] = t3[2] / t3[1];
        }
        printf("round %lld: static %.3f s  dynamic %.3f s  padded %.3f s\n", (long long)r + 1, ts[r], ts[R + r],
               ts[2 * R + r]);
        fflush(stdout);
    }
    double med[3];
    for (int m = 0; m < 3; m++) {
        qsort(ts + m * R, (size_t)R, sizeof *ts, cmp_d);
        med[m] = ts[m * R + R / 2];
        printf("RESULT mode=%s ms_per_step=%.2f tok_per_s=%.0f\n", names[m], 1e3 * med[m] / (double)N,
               real_tokens / med[m]);
    }
    qsort(rd, (size_t)(R * N), sizeof *rd, cmp_d);
    qsort(rp, (size_t)(R * N), sizeof *rp, cmp_d);
    printf("dynamic-shape overhead (dynamic / static - 1): median rounds %+.2f%%, median of %lld paired steps %+.2f%% "
           "(quartiles %+.2f%% %+.2f%%)\n",
           100.0 * (med[1] / med[0] - 1.0), (long long)(R * N), 100.0 * (rd[R * N / 2] - 1.0),
           100.0 * (rd[R * N / 4] - 1.0), 100.0 * (rd[3 * R * N / 4] - 1.0));
    printf("variable lengths vs padding to the context (padded / dynamic): median rounds %.2fx, median of paired steps "
           "%.2fx\n",
           med[2] / med[1], rp[R * N / 2]);

    for (int64_t k = 0; k < N; k++)
        if (owner[k] == k) {
            ct_optimizer_free(stat[k].opt);
            ct_plan_free(stat[k].plan);
        }
    ct_optimizer_free(dyn.opt);
    ct_plan_free(dyn.plan);
    ct_optimizer_free(pad.opt);
    ct_plan_free(pad.plan);
    free(stat), free(var), free(owner), free(bd), free(bt), free(ts), free(rd), free(rp);
    ct_text_docs_free(&docs);
    ct_tokenizer_free(tok);
    ct_context_free(ctx);
    return 0;
}
