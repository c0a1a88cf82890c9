/* src/data/text_docs.c - variable-length documents for language models
 * (ctrain/text.h, docs/text-data.md): a corpus cut into paragraphs, lines
 * or sentences, each tokenized on its own and cut into pieces of at most
 * max_len tokens; a train / validation split by document; length buckets
 * (training batches draw every row from one bucket, so a batch's rows have
 * similar lengths and little padding); LM and MLM rows padded to the
 * batch's sequence length. Every draw comes from the Philox RNG keyed by
 * (seed, key, row), so a batch depends only on its key. */
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "ctrain/text.h"

#define DOC_PICK_TAG 0x5444500000000000ull /* "TDP" bucket and rows      */
#define DOC_MLM_TAG 0x54444D0000000000ull  /* "TDM" per position         */
#define DOC_KEY_MASK 0x000000FFFFFFFFFFull /* 40 bits of key             */

/* ---- cutting the text into documents ------------------------------------------------ */

static int is_blank_line(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r') return 0;
    return 1;
}

/* Calls fn for each document of text (byte ranges; leading and trailing
 * whitespace trimmed; empty ones skipped). */
typedef ct_status (*doc_fn)(void *user, const char *s, size_t n);

static ct_status emit(doc_fn fn, void *user, const char *s, size_t n) {
    while (n && (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\n')) s++, n--;
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\n')) n--;
    return n ? fn(user, s, n) : CT_OK;
}

static ct_status split_docs(const char *t, size_t len, ct_text_doc_kind kind, doc_fn fn, void *user) {
    size_t start = 0;
    for (size_t i = 0; i < len;) {
        size_t eol = i;
        while (eol < len && t[eol] != '\n') eol++;
        /* line [i, eol) */
        if (kind == CT_TEXT_DOC_LINES) {
            CT_TRY(emit(fn, user, t + i, eol - i));
            start = eol + 1;
        } else if (kind == CT_TEXT_DOC_PARAGRAPHS && is_blank_line(t + i, eol - i)) {
            CT_TRY(emit(fn, user, t + start, i - start));
            start = eol + 1;
        } else if (kind == CT_TEXT_DOC_SENTENCES) {
            for (size_t j = i; j < eol; j++) /* '.', '!' or '?' before whitespace ends a sentence */
                if ((t[j] == '.' || t[j] == '!' || t[j] == '?') && (j + 1 == len || t[j + 1] == ' ' || t[j + 1] == '\n' ||
                                                                   t[j + 1] == '\r' || t[j + 1] == '\t')) {
                    CT_TRY(emit(fn, user, t + start, j + 1 - start));
                    start = j + 1;
                }
            if (is_blank_line(t + i, eol - i)) { /* a paragraph break ends one too */
                CT_TRY(emit(fn, user, t + start, i - start));
                start = eol + 1;
            }
        }
        i = eol + 1;
    }
    return start < len ? emit(fn, user, t + start, len - start) : CT_OK;
}

/* ---- the document set ---------------------------------------------------------------- */

typedef struct {
    ct_text_docs *d;
    const ct_tokenizer *tok;
    int64_t cap_tokens, cap_docs, min_len;
    int32_t *scratch;
    int64_t scratch_cap;
} builder;

static ct_status grow(ct_context *ctx, void **p, int64_t *cap, int64_t need, size_t elem) {
    if (need <= *cap) return CT_OK;
    int64_t nc = *cap ? *cap : 1024;
    while (nc < need) nc *= 2;
    void *q = realloc(*p, (size_t)nc * elem);
    if (!q) return ct_set_error(ctx, CT_E_OOM, "out of memory for %lld document entries", (long long)nc);
    *p = q;
    *cap = nc;
    return CT_OK;
}

/* One document: its tokens, cut into pieces of at most max_len (pieces
 * shorter than min_len are dropped). */
static ct_status add_doc(void *user, const char *s, size_t n) {
    builder *b = user;
    ct_text_docs *d = b->d;
    int64_t nt = 0;
    CT_TRY(ct_tokenizer_encode(b->tok, s, n, NULL, 0, &nt));
    CT_TRY(grow(d->ctx, (void **)&b->scratch, &b->scratch_cap, nt, sizeof(int32_t)));
    CT_TRY(ct_tokenizer_encode(b->tok, s, n, b->scratch, b->scratch_cap, &nt));
    for (int64_t o = 0; o < nt; o += d->max_len) {
        int64_t l = CT_MIN(d->max_len, nt - o);
        if (l < b->min_len) continue;
        CT_TRY(grow(d->ctx, (void **)&d->tokens, &b->cap_tokens, d->n_tokens + l, sizeof(int32_t)));
        int64_t cd = b->cap_docs;
        CT_TRY(grow(d->ctx, (void **)&d->off, &cd, d->n_docs + 1, sizeof(int64_t)));
        cd = b->cap_docs;
        CT_TRY(grow(d->ctx, (void **)&d->len, &cd, d->n_docs + 1, sizeof(int64_t)));
        b->cap_docs = cd;
        memcpy(d->tokens + d->n_tokens, b->scratch + o, (size_t)l * sizeof(int32_t));
        d->off[d->n_docs] = d->n_tokens;
        d->len[d->n_docs] = l;
        d->n_tokens += l;
        d->n_docs++;
    }
    return CT_OK;
}

/* order[0, n) = documents first .. first + n - 1 sorted by (length, index),
 * a bottom-up merge sort (qsort's comparator would need the lengths in a
 * global). */
static void sort_split(const ct_text_docs *d, int64_t *order, int64_t first, int64_t n, int64_t *tmp) {
    for (int64_t i = 0; i < n; i++) order[i] = first + i;
    for (int64_t w = 1; w < n; w *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * w) {
            int64_t mid = CT_MIN(lo + w, n), hi = CT_MIN(lo + 2 * w, n), a = lo, b = mid, k = lo;
            while (a < mid || b < hi) {
                int take_a = b >= hi || (a < mid && (d->len[order[a]] < d->len[order[b]] ||
                                                     (d->len[order[a]] == d->len[order[b]] && order[a] < order[b])));
                tmp[k++] = take_a ? order[a++] : order[b++];
            }
        }
        memcpy(order, tmp, (size_t)n * sizeof *order);
    }
}

ct_status ct_text_docs_from_text(ct_context *ctx, const ct_tokenizer *tok, const void *text, size_t len,
                                 ct_text_doc_kind kind, int64_t min_len, int64_t max_len, double val_fraction,
                                 int n_buckets, ct_text_docs *out) {
    if (!ctx || !out) return CT_E_INVALID_ARG;
    memset(out, 0, sizeof *out);
    if (!tok || (!text && len))
        return ct_set_error(ctx, CT_E_INVALID_ARG, "ct_text_docs_from_text: tokenizer and text must not be NULL");
    if ((unsigned)kind > CT_TEXT_DOC_SENTENCES || min_len < 1 || max_len < min_len || n_buckets < 1 ||
        !(val_fraction > 0 && val_fraction < 1))
        return ct_set_error(ctx, CT_E_INVALID_ARG,
                            "ct_text_docs_from_text: kind %d, min_len %lld, max_len %lld, buckets %d, val_fraction %g: "
                            "need a ct_text_doc_kind, 1 <= min_len <= max_len, buckets >= 1, val_fraction in (0, 1)",
                            (int)kind, (long long)min_len, (long long)max_len, n_buckets, val_fraction);
    out->ctx = ctx;
    out->max_len = max_len;
    out->vocab_size = ct_tokenizer_vocab_size(tok);
    builder b = {out, tok, 0, 0, min_len, NULL, 0};
    ct_status s = split_docs(text, len, kind, add_doc, &b);
    free(b.scratch);
    int64_t n_val = (int64_t)((double)out->n_docs * val_fraction);
    out->n_train = out->n_docs - n_val;
    if (s == CT_OK && (n_val < 1 || out->n_train < 1))
        s = ct_set_error(ctx, CT_E_INVALID_ARG,
                         "the corpus has %lld documents of at least %lld tokens: too few for a train and a validation "
                         "split of %g; use a larger corpus or another document kind",
                         (long long)out->n_docs, (long long)min_len, val_fraction);
    int64_t *tmp = NULL;
    if (s == CT_OK) {
        out->order = malloc((size_t)out->n_docs * sizeof *out->order);
        tmp = malloc((size_t)out->n_docs * sizeof *tmp);
        if (!out->order || !tmp) s = ct_set_error(ctx, CT_E_OOM, "out of memory sorting %lld documents", (long long)out->n_docs);
    }
    if (s == CT_OK) {
        sort_split(out, out->order, 0, out->n_train, tmp);
        sort_split(out, out->order + out->n_train, out->n_train, n_val, tmp);
        out->n_buckets = (int)CT_MIN((int64_t)n_buckets, out->n_train);
    }
    free(tmp);
    if (s != CT_OK) ct_text_docs_free(out);
    return s;
}

void ct_text_docs_free(ct_text_docs *d) {
    if (!d) return;
    free(d->tokens);
    free(d->off);
    free(d->len);
    free(d->order);
    memset(d, 0, sizeof *d);
}

/* ---- batches ----------------------------------------------------------------------------- */

/* uniform in [0, n) from a 32-bit draw */
static int64_t below(uint32_t u, int64_t n) { return (int64_t)(((uint64_t)u * (uint64_t)n) >> 32); }

void ct_text_docs_pick(const ct_text_docs *d, int64_t batch, uint64_t seed, uint64_t key, int64_t *docs) {
    uint32_t u[4];
    const uint64_t stream = DOC_PICK_TAG ^ (key & DOC_KEY_MASK);
    ct_philox(seed, stream, 0, u);
    int64_t k = below(u[0], d->n_buckets);
    int64_t lo = k * d->n_train / d->n_buckets, hi = (k + 1) * d->n_train / d->n_buckets;
    for (int64_t r = 0; r < batch; r++) {
        ct_philox(seed, stream, 1 + (uint64_t)r, u);
        docs[r] = d->order[lo + below(u[0], hi - lo)];
    }
}

int64_t ct_text_docs_val(const ct_text_docs *d, int64_t first, int64_t batch, int64_t *docs) {
    int64_t n_val = d->n_docs - d->n_train, k = first < n_val ? CT_MIN(batch, n_val - first) : 0;
    for (int64_t r = 0; r < k; r++) docs[r] = d->order[d->n_train + first + r];
    return k;
}

int64_t ct_text_docs_seq_len(const ct_text_docs *d, const int64_t *docs, int64_t n, int lm, int64_t multiple,
                             int64_t cap) {
    int64_t t = 1;
    for (int64_t r = 0; r < n; r++) t = CT_MAX(t, d->len[docs[r]] - (lm ? 1 : 0));
    if (multiple > 1) t = (t + multiple - 1) / multiple * multiple;
    return CT_MIN(t, cap);
}

void ct_text_docs_lm(const ct_text_docs *d, const int64_t *docs, int64_t n, int64_t T, int32_t *x, int32_t *y) {
    for (int64_t r = 0; r < n; r++) {
        const int32_t *t = d->tokens + d->off[docs[r]];
        int64_t l = CT_MIN(d->len[docs[r]] - 1, T);
        for (int64_t i = 0; i < T; i++) {
            x[r * T + i] = i < l ? t[i] : 0;
            y[r * T + i] = i < l ? t[i + 1] : CT_TEXT_IGNORE_LABEL;
        }
    }
}

void ct_text_docs_mlm(const ct_text_docs *d, const int64_t *docs, int64_t n, int64_t T, int32_t mask_id,
                      uint64_t seed, uint64_t key, int32_t *input, int32_t *labels, int32_t *key_valid) {
    const uint32_t sel = (uint32_t)(CT_TEXT_MLM_SELECT_P * 4294967296.0);
    const uint32_t msk = (uint32_t)(CT_TEXT_MLM_MASK_P * 4294967296.0);
    const uint32_t rnd = (uint32_t)((CT_TEXT_MLM_MASK_P + CT_TEXT_MLM_RANDOM_P) * 4294967296.0);
    const uint64_t stream = DOC_MLM_TAG ^ (key & DOC_KEY_MASK);
    for (int64_t r = 0; r < n; r++) {
        const int32_t *t = d->tokens + d->off[docs[r]];
        int64_t l = CT_MIN(d->len[docs[r]], T);
        for (int64_t i = 0; i < T; i++) {
            int64_t o = r * T + i;
            key_valid[o] = i < l;
            if (i >= l) {
                input[o] = 0;
                labels[o] = CT_TEXT_IGNORE_LABEL;
                continue;
            }
            uint32_t u[4]; /* keyed by (row, position): independent of T */
            ct_philox(seed, stream, (uint64_t)r << 32 | (uint64_t)i, u);
            if (u[0] >= sel) {
                input[o] = t[i];
                labels[o] = CT_TEXT_IGNORE_LABEL;
                continue;
            }
            labels[o] = t[i];
            if (u[1] < msk) input[o] = mask_id;
            else if (u[1] < rnd) input[o] = (int32_t)(((uint64_t)u[2] * (uint64_t)d->vocab_size) >> 32);
            else input[o] = t[i];
        }
    }
}
