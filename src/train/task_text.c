/* src/train/task_text.c - the language-model tasks: a text corpus, its
 * tokenizer and train / validation split; GPT with next-token cross entropy
 * or BERT with the masked-LM loss; training batches keyed by (seed, step,
 * micro-batch) so a resumed run continues exactly; validation loss (and
 * perplexity) every eval_every steps. The char tokenizer's vocabulary goes
 * into every checkpoint (tokenizer.vocab) for `ctrain sample`. Data
 * parallel (shard): each rank cuts its rows out of the global batch and
 * evaluates its part of the validation windows. Deterministic mode (chunk):
 * each rank runs its chunks of the global batch and evaluates all of it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "train_internal.h"

/* The recipe's size overrides on a preset's (n_layer, n_head, d_model,
 * context; 0 keeps the preset's), checked as the keys that set them. BERT
 * keeps the preset's d_ff / d_model ratio (d_ff NULL for GPT). */
static ct_status apply_sizes(ct_context *ctx, const ct_recipe *r, const char *preset, int *n_layer, int *n_head,
                             int64_t *d_model, int64_t *context, int64_t *d_ff) {
    if (r->context > *context)
        return ct_set_error(ctx, CT_E_CONFIG,
                            "recipe key 'context': %lld positions is longer than the model's context (%lld, preset %s)",
                            (long long)r->context, (long long)*context, preset);
    if (r->n_layer) *n_layer = r->n_layer;
    if (r->n_head) *n_head = r->n_head;
    if (r->d_model) {
        if (d_ff) *d_ff = *d_ff / *d_model * r->d_model; /* keep the preset's ratio (4x) */
        *d_model = r->d_model;
    }
    if (r->context) *context = r->context;
    if (*d_model % *n_head)
        return ct_set_error(ctx, CT_E_CONFIG, "recipe keys 'd_model' / 'n_head': d_model %lld is not divisible by n_head %d",
                            (long long)*d_model, *n_head);
    return CT_OK;
}

ct_status ct_train_gpt_config(ct_context *ctx, const ct_recipe *r, int64_t tok_vocab, ct_gpt_config *c) {
    const char *preset = r->preset[0] ? r->preset : "gpt-char-small";
    CT_TRY(ct_gpt_preset(ctx, preset, c));
    CT_TRY(apply_sizes(ctx, r, preset, &c->n_layer, &c->n_head, &c->d_model, &c->context, NULL));
    c->vocab = tok_vocab;
    c->dropout = r->dropout;
    return CT_OK;
}

ct_status ct_train_bert_config(ct_context *ctx, const ct_recipe *r, int64_t tok_vocab, ct_bert_config *c) {
    const char *preset = r->preset[0] ? r->preset : "bert-base";
    CT_TRY(ct_bert_preset(ctx, preset, c));
    CT_TRY(apply_sizes(ctx, r, preset, &c->n_layer, &c->n_head, &c->d_model, &c->context, &c->d_ff));
    c->vocab = tok_vocab + 1; /* + the mask id */
    c->dropout = r->dropout;
    return CT_OK;
}

ct_status ct_train_tokenizer(ct_context *ctx, const ct_recipe *r, const char *text, size_t len, ct_tokenizer **out) {
    if (r->tokenizer == CT_TOKENIZER_BYTE) return ct_tokenizer_byte(ctx, out);
    if (r->tokenizer == CT_TOKENIZER_GPT2) {
        char enc[300], bpe[300];
        const char *dir = r->bpe_dir[0] ? r->bpe_dir : "data/text/gpt2";
        snprintf(enc, sizeof enc, "%s/encoder.json", dir);
        snprintf(bpe, sizeof bpe, "%s/vocab.bpe", dir);
        return ct_tokenizer_gpt2_load(ctx, enc, bpe, out);
    }
    return ct_tokenizer_char_fit(ctx, text, len, out);
}

typedef struct {
    ct_context *ctx;
    ct_recipe r;
    int bert;
    char path[300];
    ct_tokenizer *tok;
    ct_text_dataset ds;
    ct_gpt_config gc;
    ct_bert_config bc;
    int64_t T;
    int32_t mask_id;
    ct_plan *plan;
    ct_node ids, labels, kv;
    ct_tensor ti, tl, tk;
    int64_t B;
    uint8_t vocab[256]; /* char tokenizer: id -> byte, for checkpoints */
    size_t n_vocab;
    int rank, size;     /* data parallel: this rank's rows of every batch, its part of the evaluation */
    int chunks;         /* deterministic (txt_chunk): this rank's chunks of a global batch, each B rows; 0: off */
    int32_t *g;         /* data parallel / deterministic: one global batch (global_rows): ids | labels | key_valid */
    /* text_docs: variable-length documents, each batch at its own length on
     * a plan compiled for (B, context) (docs/dynamic-shapes.md) */
    ct_text_docs docs;
    int64_t *rowdocs;   /* the global batch's documents (size * B)                 */
    int64_t build_T;    /* the sequence length txt_build uses (0: the context)    */
    int64_t var_b[256], var_t[256];
    int64_t units;      /* the real tokens of the last training batch (batch_units) */
    int var_id[256], n_var;
    ct_task *self;
} text_task;

static ct_status txt_build(ct_task *t, ct_graph *g, const ct_recipe *r, ct_node *loss, int *n_keep, ct_node *keep) {
    text_task *tt = t->impl;
    (void)keep;
    int64_t B = r->batch_size, T = tt->build_T ? tt->build_T : tt->T;
    ct_node logits;
    tt->kv = CT_NONE;
    CT_TRY(ct_input(g, "ids", CT_I32, 2, (int64_t[]){B, T}, &tt->ids));
    CT_TRY(ct_input(g, "labels", CT_I32, 2, (int64_t[]){B, T}, &tt->labels));
    if (tt->bert) CT_TRY(ct_input(g, "key_valid", CT_I32, 2, (int64_t[]){B, T}, &tt->kv));
    if (tt->bert) CT_TRY(ct_model_bert(g, tt->ids, tt->kv, CT_NONE, CT_NONE, &tt->bc, &logits));
    else CT_TRY(ct_model_gpt(g, tt->ids, &tt->gc, &logits));
    /* tensor parallel: this rank's columns of the logits (the vocabulary padded to a multiple of the ranks) */
    int64_t V = tt->bert ? tt->bc.vocab : tt->gc.vocab, ls[CT_MAX_DIMS];
    int nd;
    CT_TRY(ct_node_shape(g, logits, &nd, ls));
    ct_node flat, lab1;
    CT_TRY(ct_reshape(g, logits, 2, (int64_t[]){B * T, ls[nd - 1]}, &flat));
    CT_TRY(ct_reshape(g, tt->labels, 1, (int64_t[]){B * T}, &lab1));
    if (ct_graph_tensor_size(g) > 1)
        CT_TRY(ct_cross_entropy_vp(g, flat, lab1, r->label_smoothing, CT_TEXT_IGNORE_LABEL, V, loss));
    else CT_TRY(ct_cross_entropy(g, flat, lab1, r->label_smoothing, CT_TEXT_IGNORE_LABEL, loss));
    *n_keep = 0;
    return CT_OK;
}

static ct_status txt_views(text_task *tt) {
    CT_TRY(ct_plan_tensor(tt->plan, tt->ids, &tt->ti));
    CT_TRY(ct_plan_tensor(tt->plan, tt->labels, &tt->tl));
    if (tt->bert) CT_TRY(ct_plan_tensor(tt->plan, tt->kv, &tt->tk));
    return CT_OK;
}

static ct_status txt_bind(ct_task *t, ct_plan *p) {
    text_task *tt = t->impl;
    if (tt->plan != p || ct_plan_num_shapes(p) == 1) tt->n_var = 0; /* a pipeline binds again per slot */
    tt->plan = p;
    CT_TRY(ct_plan_set_shape(p, 0));
    CT_TRY(txt_views(tt));
    tt->B = tt->ti.shape[0];
    return CT_OK;
}

/* Runs the plan at (b, T) from now on: the compiled (B, context) or a
 * variant built on first use (the same graph for (b, T)). */
static ct_status txt_use_shape(text_task *tt, int64_t b, int64_t T) {
    int v = 0;
    if (b != tt->B || T != tt->T) {
        int k = 0;
        while (k < tt->n_var && (tt->var_b[k] != b || tt->var_t[k] != T)) k++;
        if (k < tt->n_var) v = tt->var_id[k];
        else {
            ct_graph *g;
            CT_TRY(ct_graph_create(tt->ctx, &g));
            ct_recipe r = tt->r;
            r.batch_size = b;
            tt->build_T = T;
            ct_node loss = CT_NONE, keep[8];
            int n_keep = 0;
            ct_status s = txt_build(tt->self, g, &r, &loss, &n_keep, keep);
            tt->build_T = 0;
            if (s == CT_OK) s = ct_plan_add_shape(tt->plan, g, loss, n_keep, keep, &v);
            ct_graph_free(g);
            CT_TRY(s);
            if (tt->n_var < 256) {
                tt->var_b[tt->n_var] = b;
                tt->var_t[tt->n_var] = T;
                tt->var_id[tt->n_var++] = v;
            }
        }
    }
    if (v == ct_plan_shape(tt->plan)) return CT_OK;
    CT_TRY(ct_plan_set_shape(tt->plan, v));
    return txt_views(tt);
}

/* The rows of a global batch: B x size, deterministic x chunks too (= the recipe's batch_size). */
static int64_t global_rows(const text_task *tt) { return tt->B * tt->size * (tt->chunks ? tt->chunks : 1); }

/* The step's global batches: accumulate_steps (deterministic micro-batch m reads batch m % A: ct_task.chunk). */
static int accum(const text_task *tt) { return tt->r.accumulate_steps > 0 ? tt->r.accumulate_steps : 1; }

/* The first row of micro-batch `micro` in its global batch: this rank's rows, deterministic its chunk
 * rank x chunks + micro / A. */
static int64_t row_offset(const text_task *tt, int micro) {
    return tt->chunks ? (tt->rank * tt->chunks + micro / accum(tt)) * tt->B : tt->rank * tt->B;
}

/* The ranks that split the evaluation: every rank evaluates all of it in the deterministic mode. */
static int eval_ranks(const text_task *tt) { return tt->chunks ? 1 : tt->size; }

/* text_docs: the documents docs[0, n) as rows of the plan's inputs at length
 * T (MLM draws keyed by (seed, key)); the plan runs (n, T) (dynamic_shapes)
 * or (B, context) with the rows past n and the positions past T padding. */
static ct_status docs_rows(text_task *tt, const int64_t *docs, int64_t n, int64_t T, uint64_t seed, uint64_t key) {
    int dyn = tt->r.dynamic_shapes;
    CT_TRY(txt_use_shape(tt, dyn ? n : tt->B, dyn ? T : tt->T));
    const int64_t Tp = tt->ti.shape[1], rows = tt->ti.shape[0];
    int32_t *ids = tt->ti.data, *lab = tt->tl.data, *kv = tt->bert ? tt->tk.data : NULL;
    if (tt->bert) ct_text_docs_mlm(&tt->docs, docs, n, Tp, tt->mask_id, seed, key, ids, lab, kv);
    else ct_text_docs_lm(&tt->docs, docs, n, Tp, ids, lab);
    for (int64_t i = n * Tp; i < rows * Tp; i++) { /* padding rows (dynamic_shapes off) */
        ids[i] = 0;
        lab[i] = CT_TEXT_IGNORE_LABEL;
        if (kv) kv[i] = 0;
    }
    return CT_OK;
}

/* text_docs training batch `key`: the global batch's documents (one length
 * bucket), its length from all of them (every rank runs the same shape),
 * this rank's rows. */
static ct_status docs_next(text_task *tt, uint64_t key, int64_t off) {
    const int64_t B = tt->B, Bg = global_rows(tt);
    ct_text_docs_pick(&tt->docs, Bg, tt->r.seed, key, tt->rowdocs);
    int64_t T = ct_text_docs_seq_len(&tt->docs, tt->rowdocs, Bg, !tt->bert, tt->r.pad_to_multiple, tt->T);
    const int64_t *mine = tt->rowdocs + off;
    tt->units = 0; /* the rows' real tokens (a document longer than the row is cut) */
    for (int64_t i = 0; i < B; i++) tt->units += CT_MIN(tt->docs.len[mine[i]], T);
    return docs_rows(tt, mine, B, T, tt->r.seed, key);
}

/* text_docs validation: every validation document once, shortest first, in
 * runs of B (run j on rank j % size); the mean over predicted tokens. */
static ct_status docs_evaluate(text_task *tt, double *tot, double *w, int64_t *rows) {
    const int64_t B = tt->B;
    for (int64_t first = 0, j = 0;; first += B, j++) {
        int64_t n = ct_text_docs_val(&tt->docs, first, B, tt->rowdocs);
        if (n == 0) break;
        if (j % eval_ranks(tt) != tt->rank % eval_ranks(tt)) continue;
        int64_t T = ct_text_docs_seq_len(&tt->docs, tt->rowdocs, n, !tt->bert, tt->r.pad_to_multiple, tt->T);
        CT_TRY(docs_rows(tt, tt->rowdocs, n, T, tt->r.seed ^ 0x5eed5eedULL, (uint64_t)j));
        const int32_t *lab = tt->tl.data;
        int64_t cnt = 0, all = ct_tensor_numel(&tt->tl);
        for (int64_t i = 0; i < all; i++) cnt += lab[i] != CT_TEXT_IGNORE_LABEL;
        if (!cnt) continue;
        CT_TRY(ct_plan_forward(tt->plan, 0));
        float l = 0.0f; /* a pipeline stage without the loss reads none */
        ct_plan_loss(tt->plan, &l);
        *tot += (double)l * (double)cnt;
        *w += (double)cnt;
        *rows += n;
    }
    return txt_use_shape(tt, tt->B, tt->T);
}

static ct_status txt_start_epoch(ct_task *t, int64_t epoch, int64_t skip) {
    (void)t, (void)epoch, (void)skip; /* batches are keyed by the step */
    return CT_OK;
}

/* The batch of (seed, key) from a split: of B rows, or (data parallel, deterministic) rows [row, row + B)
 * of the global batch of global_rows (made whole, then cut). */
static ct_status fill(text_task *tt, ct_text_split split, uint64_t seed, uint64_t key, int64_t row) {
    const int64_t B = tt->B, T = tt->T, Bg = global_rows(tt);
    int32_t *ids = tt->ti.data, *lab = tt->tl.data, *kv = tt->bert ? tt->tk.data : NULL;
    if (Bg != B) ids = tt->g, lab = tt->g + Bg * T, kv = tt->bert ? tt->g + 2 * Bg * T : NULL;
    if (!tt->bert) CT_TRY(ct_text_lm_batch(&tt->ds, split, Bg, T, seed, key, ids, lab));
    else CT_TRY(ct_text_mlm_batch(&tt->ds, split, Bg, T, tt->mask_id, seed, key, ids, lab, kv));
    if (Bg == B) return CT_OK;
    const size_t off = (size_t)(row * T), n = (size_t)(B * T) * sizeof(int32_t);
    memcpy(tt->ti.data, ids + off, n);
    memcpy(tt->tl.data, lab + off, n);
    if (tt->bert) memcpy(tt->tk.data, kv + off, n);
    return CT_OK;
}

static int64_t txt_units(ct_task *t) { return ((text_task *)t->impl)->units; }

static ct_status txt_next(ct_task *t, int64_t step, int micro, int64_t *rows) {
    text_task *tt = t->impl;
    *rows = tt->B;
    tt->units = tt->B * tt->T;
    /* the step's global batch micro (deterministic: micro % A, its chunk by row_offset): keyed by (step, batch) */
    const uint64_t key = (uint64_t)(step * accum(tt) + (tt->chunks ? micro % accum(tt) : micro));
    if (tt->docs.n_docs) return docs_next(tt, key, row_offset(tt, micro));
    CT_TRY(fill(tt, CT_SPLIT_TRAIN, tt->r.seed, key, row_offset(tt, micro)));
    *rows = tt->B;
    return CT_OK;
}

/* One evaluation forward of the plan's batch: its loss x n into *tot, n into *w (n: the predicted tokens). */
static ct_status eval_forward(text_task *tt, int64_t n, double *tot, double *w) {
    CT_TRY(ct_plan_forward(tt->plan, 0));
    float l = 0.0f; /* a pipeline stage without the loss reads none */
    ct_plan_loss(tt->plan, &l);
    *tot += (double)l * (double)n;
    *w += (double)n;
    return CT_OK;
}

/* BERT: eval_batches (0: 20) masked global batches of a fixed seed; this rank's rows of each (deterministic:
 * all of its chunks). */
static ct_status bert_evaluate(text_task *tt, double *tot, double *w, int64_t *windows) {
    const ct_recipe *r = &tt->r;
    const int64_t B = tt->B, T = tt->T, nb = r->eval_batches > 0 ? r->eval_batches : 20;
    const int64_t parts = tt->chunks ? global_rows(tt) / B : 1;
    for (int64_t b = 0; b < nb; b++) {
        for (int64_t c = 0; c < parts; c++) {
            CT_TRY(fill(tt, CT_SPLIT_VAL, r->seed ^ 0x5eed5eedULL, (uint64_t)b, tt->chunks ? c * B : tt->rank * B));
            const int32_t *lab = tt->tl.data;
            int64_t n = 0;
            for (int64_t i = 0; i < B * T; i++) n += lab[i] != CT_TEXT_IGNORE_LABEL;
            if (!n) continue;
            CT_TRY(eval_forward(tt, n, tot, w));
            *windows += B;
        }
    }
    return CT_OK;
}

/* GPT: the sequential windows of the validation split, the first eval_batches x the global batch of them
 * (0: all), in runs of B, run j on rank j % size (deterministic: every run on every rank). */
static ct_status gpt_evaluate(text_task *tt, double *tot, double *w, int64_t *windows) {
    const int64_t B = tt->B, T = tt->T, ranks = eval_ranks(tt);
    int64_t nw = ct_text_eval_windows(&tt->ds, CT_SPLIT_VAL, T);
    if (tt->r.eval_batches > 0 && tt->r.eval_batches * global_rows(tt) < nw) nw = tt->r.eval_batches * global_rows(tt);
    for (int64_t first = 0; first < nw; first += B) {
        if (first / B % ranks != tt->rank % ranks) continue;
        int64_t got = 0, want = nw - first < B ? nw - first : B;
        CT_TRY(ct_text_eval_batch(&tt->ds, CT_SPLIT_VAL, T, first, want, tt->ti.data, tt->tl.data, &got));
        if (got <= 0) break;
        int32_t *lab = tt->tl.data, *ids = tt->ti.data;
        for (int64_t i = got * T; i < B * T; i++) lab[i] = CT_TEXT_IGNORE_LABEL, ids[i] = 0;
        CT_TRY(eval_forward(tt, got * T, tot, w));
        *windows += got;
    }
    return CT_OK;
}

/* Validation loss (mean over predicted tokens): text_docs' documents, BERT's masked batches or GPT's
 * windows. Data parallel: this rank's part (the trainer combines them); deterministic: all of it. */
static ct_status txt_evaluate(ct_task *t, ct_task_eval *out) {
    text_task *tt = t->impl;
    double tot = 0, w = 0;
    int64_t windows = 0;
    if (tt->docs.n_docs) CT_TRY(docs_evaluate(tt, &tot, &w, &windows));
    else if (tt->bert) CT_TRY(bert_evaluate(tt, &tot, &w, &windows));
    else CT_TRY(gpt_evaluate(tt, &tot, &w, &windows));
    out->loss = w > 0 ? tot / w : 0;
    out->accuracy = 0;
    out->count = w;
    out->rows = (double)windows;
    t->eval_detail(t, out);
    return CT_OK;
}

/* "val ppl" of the (combined) evaluation. */
static void txt_eval_detail(ct_task *t, ct_task_eval *ev) {
    text_task *tt = t->impl;
    snprintf(ev->detail, sizeof ev->detail, "val ppl %.2f  (%lld %s", exp(ev->loss), (long long)ev->rows,
             tt->docs.n_docs ? "documents" : "windows");
}

/* The buffer of one global batch (fill, data parallel and deterministic). */
static ct_status global_batch(text_task *tt) {
    const int64_t Bg = tt->r.batch_size;
    free(tt->g);
    tt->g = malloc((size_t)(3 * Bg * tt->T) * sizeof(int32_t));
    if (!tt->g)
        return ct_set_error(tt->ctx, CT_E_OOM, "out of memory for a global batch of %lld x %lld tokens",
                            (long long)Bg, (long long)tt->T);
    return CT_OK;
}

static ct_status txt_shard(ct_task *t, int rank, int size) {
    text_task *tt = t->impl;
    const int64_t Bg = tt->r.batch_size; /* divides by size: the trainer checked */
    tt->rank = rank;
    tt->size = size;
    if (tt->docs.n_docs) {
        free(tt->rowdocs);
        if (!(tt->rowdocs = malloc((size_t)(Bg > 1 ? Bg : 1) * sizeof *tt->rowdocs)))
            return ct_set_error(tt->ctx, CT_E_OOM, "out of memory for a batch of %lld documents", (long long)Bg);
    }
    return size > 1 ? global_batch(tt) : CT_OK;
}

/* The deterministic mode: this rank's rows of a global batch in n chunks (train.h, ct_task.chunk). */
static ct_status txt_chunk(ct_task *t, int n) {
    text_task *tt = t->impl;
    const int64_t rows = tt->r.batch_size / tt->size; /* this rank's rows of a global batch */
    if (n < 1 || rows % n)
        return ct_set_error(tt->ctx, CT_E_CONFIG, "deterministic: %lld rows per rank do not cut into %d chunks",
                            (long long)rows, n);
    tt->chunks = n;
    return global_batch(tt);
}

static void txt_describe(ct_task *t, const ct_plan_stats *ps, char *buf, size_t len) {
    text_task *tt = t->impl;
    int64_t nparams = tt->bert ? ct_bert_num_params(&tt->bc) : ct_gpt_num_params(&tt->gc);
    snprintf(buf, len,
             "%s (%d layers, %d heads, d_model %lld, context %lld, vocab %lld) on %s: %lld train / %lld val tokens (%s "
             "tokenizer), %.2fM params, %.1f MiB activations",
             tt->bert ? "bert" : "gpt", tt->bert ? tt->bc.n_layer : tt->gc.n_layer,
             tt->bert ? tt->bc.n_head : tt->gc.n_head, (long long)(tt->bert ? tt->bc.d_model : tt->gc.d_model),
             (long long)tt->T, (long long)(tt->bert ? tt->bc.vocab : tt->gc.vocab), tt->path, (long long)tt->ds.n_train,
             (long long)tt->ds.n_val, ct_recipe_enum_name("tokenizer", (int)tt->r.tokenizer), (double)nparams / 1e6,
             (double)ps->activation_bytes / 1048576.0);
}

static ct_status txt_files(ct_task *t, ct_checkpoint_file *files, int *n, int max) {
    text_task *tt = t->impl;
    *n = 0;
    if (ct_tokenizer_kind_of(tt->tok) != CT_TOK_CHAR || max < 1) return CT_OK;
    files[0].name = CT_TRAIN_VOCAB_FILE;
    files[0].data = tt->vocab;
    files[0].size = tt->n_vocab;
    *n = 1;
    return CT_OK;
}

static void txt_free(ct_task *t) {
    text_task *tt = t->impl;
    free(tt->g);
    free(tt->rowdocs);
    ct_text_docs_free(&tt->docs);
    ct_text_dataset_free(&tt->ds);
    ct_tokenizer_free(tt->tok);
    free(tt);
    free(t);
}

ct_status ct_task_text_create(ct_context *ctx, const ct_recipe *r, ct_task **out) {
    *out = NULL;
    ct_task *t = calloc(1, sizeof *t);
    text_task *tt = calloc(1, sizeof *tt);
    if (!t || !tt) {
        free(t);
        free(tt);
        return ct_set_error(ctx, CT_E_OOM, "out of memory creating the text task");
    }
    tt->ctx = ctx;
    tt->r = *r;
    tt->bert = r->model == CT_MODEL_BERT;
    t->impl = tt;
    t->name = tt->bert ? "bert" : "gpt";
    t->epochs_from_data = 0;
    t->has_accuracy = 0;
    t->eval_split = "val";
    t->unit = "tok";
    t->build = txt_build;
    t->bind = txt_bind;
    t->start_epoch = txt_start_epoch;
    t->next_batch = txt_next;
    t->batch_units = txt_units;
    t->evaluate = txt_evaluate;
    t->describe = txt_describe;
    t->checkpoint_files = txt_files;
    t->shard = txt_shard;
    t->chunk = txt_chunk;
    t->eval_detail = txt_eval_detail;
    t->free = txt_free;
    tt->rank = 0;
    tt->size = 1;
    tt->self = t;
    if (r->text_file[0]) snprintf(tt->path, sizeof tt->path, "%s", r->text_file);
    else snprintf(tt->path, sizeof tt->path, "data/text/%s.txt", ct_recipe_enum_name("dataset", (int)r->dataset));
    char *text = NULL;
    size_t len = 0;
    ct_status s = ct_text_read_file(ctx, tt->path, &text, &len);
    if (s == CT_OK && len == 0) s = ct_set_error(ctx, CT_E_INVALID_ARG, "corpus '%s' is empty", tt->path);
    if (s == CT_OK) s = ct_train_tokenizer(ctx, r, text, len, &tt->tok);
    int64_t tv = s == CT_OK ? ct_tokenizer_vocab_size(tt->tok) : 0;
    if (s == CT_OK) s = tt->bert ? ct_train_bert_config(ctx, r, tv, &tt->bc) : ct_train_gpt_config(ctx, r, tv, &tt->gc);
    if (s == CT_OK) {
        tt->T = tt->bert ? tt->bc.context : tt->gc.context;
        tt->mask_id = (int32_t)tv;
        t->unit_per_row = tt->T;
        s = ct_text_dataset_from_text(ctx, tt->tok, text, len, r->val_fraction, tt->T, &tt->ds);
        if (s != CT_OK) { /* name the corpus */
            char prefix[320];
            snprintf(prefix, sizeof prefix, "%s: ", tt->path);
            ct_wrap_error(ctx, s, prefix, NULL);
        }
    }
    if (s == CT_OK && r->text_docs != CT_TEXT_DOCS_OFF) {
        /* GPT: documents of 2..context + 1 tokens (inputs and next tokens); BERT: 2..context */
        s = ct_text_docs_from_text(ctx, tt->tok, text, len, (ct_text_doc_kind)(r->text_docs - 1), 2,
                                   tt->bert ? tt->T : tt->T + 1, r->val_fraction, r->length_buckets, &tt->docs);
        if (s == CT_OK && !(tt->rowdocs = malloc((size_t)r->batch_size * sizeof *tt->rowdocs)))
            s = ct_set_error(ctx, CT_E_OOM, "out of memory for a batch of %lld documents", (long long)r->batch_size);
    }
    if (s == CT_OK && ct_tokenizer_kind_of(tt->tok) == CT_TOK_CHAR)
        s = ct_tokenizer_char_vocab(tt->tok, tt->vocab, sizeof tt->vocab, &tt->n_vocab);
    if (text) ct_free(ctx, text);
    if (s != CT_OK) {
        txt_free(t);
        return s;
    }
    *out = t;
    return CT_OK;
}
