/* tests/test_dyntrain.c - dynamic shapes in the trainers
 * (docs/dynamic-shapes.md): variable-length documents (ct_text_docs:
 * splitting, pieces, the split, length order, buckets, keyed picks, LM / MLM
 * rows and their padding), the image task's last partial batch (trained at
 * its size; the evaluation covers every test image once and equals one
 * batch of all of them), and the text task on Moby-Dick's paragraphs (each
 * batch at its own length, a multiple of pad_to_multiple; every validation
 * document evaluated once; ct_train runs GPT and BERT). The data-dependent
 * cases need data/mnist and data/text/moby-dick.txt (scripts/setup.sh) and
 * say so when they skip. */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

#include "test.h"

static int have(const char *path) {
    struct stat st;
    if (stat(path, &st) == 0) return 1;
    printf("  note: %s not found (scripts/setup.sh), skipping\n", path);
    return 0;
}

static const char k_text[] = "One two.\n\nThree four five\nsix seven.\n\n\n  Eight!  Nine ten?\n"
                             "Eleven twelve thirteen fourteen fifteen sixteen.\n";

static ct_text_docs docs_of(ct_context *ctx, ct_tokenizer *tok, ct_text_doc_kind kind, int64_t min_len, int64_t max_len,
                            int buckets) {
    ct_text_docs d;
    ct_status s = ct_text_docs_from_text(ctx, tok, k_text, strlen(k_text), kind, min_len, max_len, 0.4, buckets, &d);
    if (s != CT_OK) fprintf(stderr, "  ct_text_docs_from_text: %s\n", ct_context_last_error(ctx));
    return d; /* zeroed on failure: the callers' counts fail */
}

/* The text of document i (byte tokenizer: ids are bytes). */
static void doc_text(const ct_text_docs *d, int64_t i, char *buf) {
    for (int64_t k = 0; k < d->len[i]; k++) buf[k] = (char)d->tokens[d->off[i] + k];
    buf[d->len[i]] = 0;
}

TEST(docs_split_kinds) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_tokenizer *tok;
    CHECK_OK(ctx, ct_tokenizer_byte(ctx, &tok));
    char buf[256];
    ct_text_docs p = docs_of(ctx, tok, CT_TEXT_DOC_PARAGRAPHS, 1, 1000, 1);
    CHECK(p.n_docs == 3);
    doc_text(&p, 0, buf);
    CHECK_MSG(!strcmp(buf, "One two."), "%s", buf);
    doc_text(&p, 1, buf);
    CHECK_MSG(!strcmp(buf, "Three four five\nsix seven."), "%s", buf);
    doc_text(&p, 2, buf);
    CHECK_MSG(!strncmp(buf, "Eight!  Nine ten?\nEleven", 24), "%s", buf);
    CHECK(p.n_train == 2); /* floor(3 x 0.4) = 1 validation document: the last */
    ct_text_docs_free(&p);
    ct_text_docs l = docs_of(ctx, tok, CT_TEXT_DOC_LINES, 1, 1000, 1);
    CHECK(l.n_docs == 5);
    doc_text(&l, 2, buf);
    CHECK_MSG(!strcmp(buf, "six seven."), "%s", buf);
    ct_text_docs_free(&l);
    ct_text_docs s = docs_of(ctx, tok, CT_TEXT_DOC_SENTENCES, 1, 1000, 1);
    CHECK(s.n_docs == 5);
    const char *want[5] = {"One two.", "Three four five\nsix seven.", "Eight!", "Nine ten?",
                           "Eleven twelve thirteen fourteen fifteen sixteen."};
    for (int i = 0; i < 5 && i < s.n_docs; i++) {
        doc_text(&s, i, buf);
        CHECK_MSG(!strcmp(buf, want[i]), "sentence %d: '%s'", i, buf);
    }
    CHECK(s.n_train == 3); /* floor(5 x 0.4) = 2 validation documents: the last two */
    ct_text_docs_free(&s);
    ct_tokenizer_free(tok);
    ct_context_free(ctx);
}

TEST(docs_pieces_order_and_batches) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_tokenizer *tok;
    CHECK_OK(ctx, ct_tokenizer_byte(ctx, &tok));
    /* lines cut into pieces of <= 7 tokens; pieces under 3 dropped */
    ct_text_docs d = docs_of(ctx, tok, CT_TEXT_DOC_LINES, 3, 7, 2);
    int64_t total = 0;
    for (int64_t i = 0; i < d.n_docs; i++) {
        CHECK(d.len[i] >= 3 && d.len[i] <= 7);
        total += d.len[i];
    }
    /* "One two." 8 -> 7 + (1 dropped); "Three four five" 15 -> 7+7+(1); "six seven." 10 -> 7+3;
       "Eight!  Nine ten?" 17 -> 7+7+3; the last line 48 -> 6x7 + 6 */
    CHECK_MSG(d.n_docs == 1 + 2 + 2 + 3 + 7, "%lld pieces", (long long)d.n_docs);
    CHECK(total == 7 + 14 + 10 + 17 + 48);
    CHECK(d.n_buckets == 2);
    for (int64_t i = 1; i < d.n_train; i++) CHECK(d.len[d.order[i - 1]] <= d.len[d.order[i]]);
    for (int64_t i = d.n_train + 1; i < d.n_docs; i++) CHECK(d.len[d.order[i - 1]] <= d.len[d.order[i]]);
    for (int64_t i = 0; i < d.n_train; i++) CHECK(d.order[i] < d.n_train);
    /* picks: keyed, from one bucket (the shortest half or the longest half of the train documents) */
    int64_t a[6], b[6], seen_short = 0, seen_long = 0, rank[64];
    CHECK(d.n_docs <= 64);
    for (int64_t i = 0; i < d.n_train; i++) rank[d.order[i]] = i; /* position in length order */
    const int64_t half = d.n_train / 2;                            /* bucket 0: ranks [0, half) */
    for (uint64_t key = 0; key < 40; key++) {
        ct_text_docs_pick(&d, 6, 7, key, a);
        ct_text_docs_pick(&d, 6, 7, key, b);
        CHECK(!memcmp(a, b, sizeof a));
        int in_lo = 1, in_hi = 1;
        for (int r = 0; r < 6; r++) {
            CHECK(a[r] >= 0 && a[r] < d.n_train);
            in_lo &= rank[a[r]] < half;
            in_hi &= rank[a[r]] >= half;
        }
        CHECK(in_lo || in_hi);
        seen_short += in_lo;
        seen_long += in_hi;
    }
    CHECK(seen_short > 0 && seen_long > 0);
    /* lengths and rows */
    int64_t two[2] = {d.order[0], d.order[d.n_train - 1]}; /* shortest and longest */
    int64_t T = ct_text_docs_seq_len(&d, two, 2, 1, 4, 100);
    CHECK(T == 8); /* longest 7 -> 6 predictions -> rounded to 8 */
    CHECK(ct_text_docs_seq_len(&d, two, 2, 0, 4, 6) == 6); /* capped */
    int32_t x[16], y[16], kv[16];
    ct_text_docs_lm(&d, two, 2, 8, x, y);
    const int32_t *t0 = d.tokens + d.off[two[0]];
    for (int64_t i = 0; i < 8; i++) {
        if (i < d.len[two[0]] - 1) CHECK(x[i] == t0[i] && y[i] == t0[i + 1]);
        else CHECK(x[i] == 0 && y[i] == CT_TEXT_IGNORE_LABEL);
    }
    ct_text_docs_mlm(&d, two, 2, 8, 300, 5, 1, x, y, kv);
    for (int64_t r = 0; r < 2; r++)
        for (int64_t i = 0; i < 8; i++) {
            int64_t o = r * 8 + i;
            int in = i < d.len[two[r]];
            CHECK(kv[o] == in);
            if (!in) CHECK(y[o] == CT_TEXT_IGNORE_LABEL && x[o] == 0);
            else CHECK(y[o] == CT_TEXT_IGNORE_LABEL ? x[o] == d.tokens[d.off[two[r]] + i] : y[o] == d.tokens[d.off[two[r]] + i]);
        }
    /* validation: every validation document once, shortest first */
    int64_t v[64], n = ct_text_docs_val(&d, 0, 64, v);
    CHECK(n == d.n_docs - d.n_train);
    CHECK(ct_text_docs_val(&d, n, 64, v) == 0);
    ct_text_docs_free(&d);
    /* too few documents for a validation split */
    ct_text_docs e;
    CHECK(ct_text_docs_from_text(ctx, tok, "a b c", 5, CT_TEXT_DOC_LINES, 1, 10, 0.1, 1, &e) == CT_E_INVALID_ARG);
    CHECK_MSG(strstr(ct_context_last_error(ctx), "too few"), "%s", ct_context_last_error(ctx));
    ct_tokenizer_free(tok);
    ct_context_free(ctx);
}

/* ---- the image task ---------------------------------------------------------------------- */

static ct_status img_plan(ct_context *ctx, ct_task *t, const ct_recipe *r, ct_plan **p) {
    ct_graph *g;
    ct_status s = ct_graph_create(ctx, &g);
    if (s != CT_OK) return s;
    ct_node loss = CT_NONE, keep[8];
    int n_keep = 0;
    s = t->build(t, g, r, &loss, &n_keep, keep);
    if (s == CT_OK) s = ct_compile(g, loss, n_keep, keep, NULL, p);
    ct_graph_free(g);
    if (s == CT_OK) s = t->bind(t, *p);
    return s;
}

/* The test evaluation of a plan for batch B (last batch partial) equals one
 * batch of all 10000 images, with dynamic shapes and with padding. */
TEST(image_last_batch_and_evaluation) {
    if (!have("data/mnist")) return;
    ct_context *ctx = test_ctx(-1, 1);
    ct_recipe r;
    ct_recipe_default(&r);
    r.n_hidden = 1;
    r.hidden[0] = 16;
    r.batch_size = 7000; /* 60000 = 8 x 7000 + 4000; 10000 = 7000 + 3000 */
    r.prefetch = 0;
    ct_task *t;
    CHECK_OK(ctx, ct_task_create(ctx, &r, &t));
    CHECK(t->batches_per_epoch(t) == 9);
    ct_plan *p = NULL, *all = NULL;
    CHECK_OK(ctx, img_plan(ctx, t, &r, &p));
    /* training: the 9th batch has 4000 rows, at its size */
    CHECK_OK(ctx, t->start_epoch(t, 0, 8));
    int64_t rows = 0;
    CHECK_OK(ctx, t->next_batch(t, 8, 0, &rows));
    CHECK(rows == 4000);
    ct_tensor tx;
    CHECK_OK(ctx, ct_plan_tensor(p, 0, &tx)); /* node 0: the images input */
    CHECK(tx.shape[0] == 4000);
    CHECK_OK(ctx, ct_plan_forward(p, 1));
    CHECK_OK(ctx, ct_plan_backward(p));
    CHECK_OK(ctx, t->next_batch(t, 9, 0, &rows));
    CHECK(rows == 0);
    ct_task_eval ev, ev_all, ev_pad;
    CHECK_OK(ctx, t->evaluate(t, &ev));
    CHECK(ev.rows == 10000 && ev.count == 10000);
    CHECK_OK(ctx, ct_plan_tensor(p, 0, &tx));
    CHECK(tx.shape[0] == 7000); /* back at the compiled size */
    /* one batch of all 10000 with the same weights */
    float *w, *w2;
    size_t n, n2;
    ct_plan_param_arena(p, &w, NULL, &n);
    ct_recipe r2 = r;
    r2.batch_size = 10000;
    CHECK_OK(ctx, img_plan(ctx, t, &r2, &all));
    ct_plan_param_arena(all, &w2, NULL, &n2);
    CHECK(n == n2);
    memcpy(w2, w, n * sizeof *w);
    CHECK_OK(ctx, t->evaluate(t, &ev_all));
    CHECK(ev_all.rows == 10000);
    CHECK_MSG(fabs(ev.loss - ev_all.loss) <= 1e-5 * fabs(ev_all.loss), "loss %.9g vs one batch %.9g", ev.loss, ev_all.loss);
    CHECK(fabs(ev.accuracy - ev_all.accuracy) <= 2e-4); /* GEMM blocking may flip a near tie */
    ct_task_free(t);
    /* dynamic_shapes off: the same numbers through padding; the partial training batch is dropped */
    r.dynamic_shapes = 0;
    CHECK_OK(ctx, ct_task_create(ctx, &r, &t));
    CHECK(t->batches_per_epoch(t) == 8);
    ct_plan *p2 = NULL;
    CHECK_OK(ctx, img_plan(ctx, t, &r, &p2));
    ct_plan_param_arena(p2, &w2, NULL, &n2);
    memcpy(w2, w, n * sizeof *w);
    CHECK_OK(ctx, t->evaluate(t, &ev_pad));
    CHECK(ev_pad.rows == 10000);
    CHECK_MSG(fabs(ev_pad.loss - ev.loss) <= 1e-5 * fabs(ev.loss), "padded %.9g vs dynamic %.9g", ev_pad.loss, ev.loss);
    CHECK(fabs(ev_pad.accuracy - ev.accuracy) <= 2e-4);
    ct_task_free(t);
    ct_plan_free(p);
    ct_plan_free(p2);
    ct_plan_free(all);
    ct_context_free(ctx);
}

/* ---- the text task ------------------------------------------------------------------------ */

static void lm_recipe(ct_recipe *r, ct_model_kind m) {
    ct_recipe_default(r);
    r->model = m;
    r->dataset = CT_DATASET_MOBY_DICK;
    r->n_layer = 1;
    r->n_head = 2;
    r->d_model = 32;
    r->context = 64;
    r->batch_size = 4;
    r->dropout = 0;
    r->text_docs = m == CT_MODEL_BERT ? CT_TEXT_DOCS_SENTENCES : CT_TEXT_DOCS_PARAGRAPHS;
    r->pad_to_multiple = 8;
    r->length_buckets = 8;
    r->eval_batches = 0;
}

TEST(text_docs_batches_at_their_length) {
    if (!have("data/text/moby-dick.txt")) return;
    ct_context *ctx = test_ctx(-1, 1);
    ct_recipe r;
    lm_recipe(&r, CT_MODEL_GPT);
    ct_task *t;
    CHECK_OK(ctx, ct_task_create(ctx, &r, &t));
    ct_plan *p = NULL;
    CHECK_OK(ctx, img_plan(ctx, t, &r, &p));
    int shorter = 0;
    for (int64_t step = 0; step < 12; step++) {
        int64_t rows = 0;
        CHECK_OK(ctx, t->next_batch(t, step, 0, &rows));
        CHECK(rows == 4);
        ct_tensor ids, lab;
        CHECK_OK(ctx, ct_plan_tensor(p, 0, &ids));
        CHECK_OK(ctx, ct_plan_tensor(p, 1, &lab));
        CHECK(ids.shape[0] == 4 && ids.shape[1] % 8 == 0 && ids.shape[1] <= 64);
        shorter += ids.shape[1] < 64;
        /* the longest row reaches into the last block of 8 (no needless padding) */
        const int32_t *y = lab.data;
        int64_t T = ids.shape[1], longest = 0;
        for (int64_t b = 0; b < 4; b++)
            for (int64_t i = 0; i < T; i++)
                if (y[b * T + i] != CT_TEXT_IGNORE_LABEL && i + 1 > longest) longest = i + 1;
        CHECK_MSG(longest > T - 8, "T %lld, longest %lld", (long long)T, (long long)longest);
        CHECK_OK(ctx, ct_plan_forward(p, 1));
        CHECK_OK(ctx, ct_plan_backward(p));
        float l;
        CHECK_OK(ctx, ct_plan_loss(p, &l));
        CHECK(isfinite(l) && l > 0);
    }
    CHECK_MSG(shorter > 0, "every batch ran at the full context");
    ct_task_eval ev;
    CHECK_OK(ctx, t->evaluate(t, &ev));
    CHECK(ev.rows > 0 && isfinite(ev.loss));
    CHECK_MSG(strstr(ev.detail, "documents"), "%s", ev.detail);
    ct_task_free(t);
    ct_plan_free(p);
    ct_context_free(ctx);
}

/* ct_train end to end: GPT on paragraphs, BERT on sentences, a few steps. */
TEST(train_gpt_and_bert_on_documents) {
    if (!have("data/text/moby-dick.txt")) return;
    ct_context *ctx = test_ctx(-1, 1);
    for (int m = 0; m < 2; m++) {
        ct_recipe r;
        lm_recipe(&r, m ? CT_MODEL_BERT : CT_MODEL_GPT);
        r.max_steps = 4;
        r.eval_every = 4;
        r.eval_batches = 0;
        CHECK_OK(ctx, ct_recipe_validate(ctx, &r));
        ct_train_opts o;
        ct_train_opts_default(&o);
        o.out = NULL;
        ct_train_result res;
        CHECK_OK(ctx, ct_train(ctx, &r, &o, &res));
        CHECK(res.steps == 4);
        CHECK(isfinite(res.eval_loss) && res.eval_loss > 0);
    }
    ct_context_free(ctx);
}

TEST_MAIN(T(docs_split_kinds), T(docs_pieces_order_and_batches), T(image_last_batch_and_evaluation),
          T(text_docs_batches_at_their_length), T(train_gpt_and_bert_on_documents))
