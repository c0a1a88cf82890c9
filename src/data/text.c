/* src/data/text.c - tokenizers (byte, char, GPT-2 BPE via bpe.c), the
 * tokenized corpus with its train / validation split, and LM / MLM
 * batches drawn from the counter-based Philox RNG. */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "core/internal.h"
#include "ctrain/text.h"
#include "data/text_internal.h"

/* Domain tags in the high bits of the Philox stream (the step goes in the
 * low bits) so these draws never coincide with other users of the seed. */
#define LM_STREAM_TAG 0x544C4D0000000000ull        /* "TLM"  window starts   */
#define MLM_START_TAG 0x544D530000000000ull        /* "TMS"  window starts   */
#define MLM_POS_TAG 0x544D500000000000ull          /* "TMP"  per position    */
#define TEXT_STEP_MASK 0x000000FFFFFFFFFFull       /* 40 bits of step        */

struct ct_tokenizer {
    ct_context *ctx;
    ct_tokenizer_kind kind;
    int64_t vocab;
    uint8_t chars[256];  /* char: id -> byte         */
    int16_t char_id[256]; /* char: byte -> id, or -1 */
    ct_bpe *bpe;         /* gpt2                     */
};

/* ---- tokenizers ---------------------------------------------------------------- */

static ct_status tok_new(ct_context *ctx, ct_tokenizer_kind kind, ct_tokenizer **out) {
    ct_tokenizer *t = NULL;
    CT_TRY(ct_alloc(ctx, sizeof *t, (void **)&t));
    memset(t, 0, sizeof *t);
    t->ctx = ctx;
    t->kind = kind;
    for (int i = 0; i < 256; i++) t->char_id[i] = -1;
    *out = t;
    return CT_OK;
}

ct_status ct_tokenizer_byte(ct_context *ctx, ct_tokenizer **out) {
    if (out) *out = NULL;
    if (!ctx || !out) return ct_set_error(ctx, CT_E_INVALID_ARG, "ct_tokenizer_byte: ctx and out must not be NULL");
    CT_TRY(tok_new(ctx, CT_TOK_BYTE, out));
    (*out)->vocab = 256;
    return CT_OK;
}

ct_status ct_tokenizer_char_from_vocab(ct_context *ctx, const void *vocab, size_t len, ct_tokenizer **out) {
    if (out) *out = NULL;
    if (!ctx || !out || (!vocab && len))
        return ct_set_error(ctx, CT_E_INVALID_ARG, "ct_tokenizer_char_from_vocab: ctx, vocab and out must not be NULL");
    if (len == 0 || len > 256)
        return ct_set_error(ctx, CT_E_INVALID_ARG,
                            "a char vocabulary has 1..256 distinct bytes, this one has %zu; build it with "
                            "ct_tokenizer_char_fit or export it with ct_tokenizer_char_vocab",
                            len);
    const uint8_t *v = vocab;
    for (size_t i = 1; i < len; i++)
        if (v[i] <= v[i - 1])
            return ct_set_error(ctx, CT_E_INVALID_ARG,
                                "char vocabulary: byte %zu (0x%02X) is %s byte %zu (0x%02X); the vocabulary must be "
                                "strictly increasing (sorted, no repeats) as ct_tokenizer_char_vocab exports it",
                                i, v[i], v[i] == v[i - 1] ? "a repeat of" : "smaller than", i - 1, v[i - 1]);
    CT_TRY(tok_new(ctx, CT_TOK_CHAR, out));
    ct_tokenizer *t = *out;
    t->vocab = (int64_t)len;
    for (size_t i = 0; i < len; i++) {
        t->chars[i] = v[i];
        t->char_id[v[i]] = (int16_t)i;
    }
    return CT_OK;
}

ct_status ct_tokenizer_char_fit(ct_context *ctx, const void *text, size_t len, ct_tokenizer **out) {
    if (out) *out = NULL;
    if (!ctx || !out || (!text && len))
        return ct_set_error(ctx, CT_E_INVALID_ARG, "ct_tokenizer_char_fit: ctx, text and out must not be NULL");
    if (len == 0)
        return ct_set_error(ctx, CT_E_INVALID_ARG,
                            "ct_tokenizer_char_fit: the text is empty; a char vocabulary needs at least one byte");
    uint8_t seen[256] = {0}, v[256];
    const uint8_t *s = text;
    for (size_t i = 0; i < len; i++) seen[s[i]] = 1;
    size_t n = 0;
    for (int b = 0; b < 256; b++)
        if (seen[b]) v[n++] = (uint8_t)b;
    return ct_tokenizer_char_from_vocab(ctx, v, n, out);
}

ct_status ct_tokenizer_gpt2_load(ct_context *ctx, const char *encoder_json, const char *vocab_bpe,
                                 ct_tokenizer **out) {
    if (out) *out = NULL;
    if (!ctx || !encoder_json || !vocab_bpe || !out)
        return ct_set_error(ctx, CT_E_INVALID_ARG,
                            "ct_tokenizer_gpt2_load: ctx, encoder_json, vocab_bpe and out must not be NULL");
    ct_bpe *b = NULL;
    CT_TRY(ct_bpe_load_(ctx, encoder_json, vocab_bpe, &b));
    ct_status s = tok_new(ctx, CT_TOK_GPT2, out);
    if (s != CT_OK) {
        ct_bpe_free_(ctx, b);
        return s;
    }
    (*out)->bpe = b;
    (*out)->vocab = ct_bpe_vocab_(b);
    return CT_OK;
}

void ct_tokenizer_free(ct_tokenizer *t) {
    if (!t) return;
    ct_context *ctx = t->ctx;
    if (t->bpe) ct_bpe_free_(ctx, t->bpe);
    ct_free(ctx, t);
}

ct_tokenizer_kind ct_tokenizer_kind_of(const ct_tokenizer *t) { return t ? t->kind : CT_TOK_BYTE; }
int64_t ct_tokenizer_vocab_size(const ct_tokenizer *t) { return t ? t->vocab : 0; }

const char *ct_tokenizer_kind_name(ct_tokenizer_kind k) {
    switch (k) {
        case CT_TOK_BYTE: return "byte";
        case CT_TOK_CHAR: return "char";
        case CT_TOK_GPT2: return "gpt2";
    }
    return "unknown";
}

ct_status ct_tokenizer_char_vocab(const ct_tokenizer *t, uint8_t *buf, size_t cap, size_t *len) {
    if (!t || !len) return CT_E_INVALID_ARG;
    *len = 0;
    if (t->kind != CT_TOK_CHAR)
        return ct_set_error(t->ctx, CT_E_INVALID_ARG,
                            "ct_tokenizer_char_vocab: the tokenizer is \"%s\"; only a char tokenizer has a "
                            "vocabulary string",
                            ct_tokenizer_kind_name(t->kind));
    *len = (size_t)t->vocab;
    if (!buf) return CT_OK;
    if (cap < *len)
        return ct_set_error(t->ctx, CT_E_INVALID_ARG,
                            "ct_tokenizer_char_vocab: the buffer holds %zu bytes, the vocabulary has %zu; pass a "
                            "buffer of 256 bytes",
                            cap, *len);
    memcpy(buf, t->chars, *len);
    return CT_OK;
}

/* "'a'" for a printable byte, else a C escape. */
static const char *byte_form(uint8_t c, char buf[8]) {
    if (c >= 0x20 && c < 0x7F) snprintf(buf, 8, "'%c'", (char)c);
    else if (c == '\n') snprintf(buf, 8, "'\\n'");
    else if (c == '\t') snprintf(buf, 8, "'\\t'");
    else if (c == '\r') snprintf(buf, 8, "'\\r'");
    else snprintf(buf, 8, "'\\x%02X'", c);
    return buf;
}

ct_status ct_tokenizer_encode(const ct_tokenizer *t, const void *text, size_t len, int32_t *ids, int64_t cap,
                              int64_t *n) {
    if (n) *n = 0;
    if (!t) return CT_E_INVALID_ARG;
    if (!n || (!text && len) || cap < 0)
        return ct_set_error(t->ctx, CT_E_INVALID_ARG,
                            "ct_tokenizer_encode: text and n must not be NULL and cap must be >= 0");
    if (len > (size_t)INT32_MAX)
        return ct_set_error(t->ctx, CT_E_INVALID_ARG,
                            "ct_tokenizer_encode: the text has %zu bytes, more than 2^31 - 1; encode it in pieces",
                            len);
    const uint8_t *s = text;
    int64_t cnt;
    if (t->kind == CT_TOK_GPT2) {
        CT_TRY(ct_bpe_encode_(t->ctx, t->bpe, s, len, ids, cap, &cnt));
    } else {
        cnt = (int64_t)len;
        if (t->kind == CT_TOK_CHAR)
            for (size_t i = 0; i < len; i++)
                if (t->char_id[s[i]] < 0) {
                    char f[8];
                    return ct_set_error(t->ctx, CT_E_INVALID_ARG,
                                        "the byte %u (%s) at offset %zu is not in the char tokenizer's vocabulary "
                                        "of %lld bytes; fit the vocabulary on a text that contains it (e.g. the "
                                        "whole corpus) or use the byte tokenizer",
                                        s[i], byte_form(s[i], f), i, (long long)t->vocab);
                }
        if (ids && cap >= cnt) {
            if (t->kind == CT_TOK_BYTE)
                for (size_t i = 0; i < len; i++) ids[i] = s[i];
            else
                for (size_t i = 0; i < len; i++) ids[i] = t->char_id[s[i]];
        }
    }
    *n = cnt;
    if (ids && cap < cnt)
        return ct_set_error(t->ctx, CT_E_INVALID_ARG,
                            "ct_tokenizer_encode: the buffer holds %lld ids, the text needs %lld; size it with a "
                            "call with ids NULL or use ct_tokenizer_encode_alloc",
                            (long long)cap, (long long)cnt);
    return CT_OK;
}

ct_status ct_tokenizer_encode_alloc(const ct_tokenizer *t, const void *text, size_t len, int32_t **ids,
                                    int64_t *n) {
    if (ids) *ids = NULL;
    if (n) *n = 0;
    if (!t) return CT_E_INVALID_ARG;
    if (!ids || !n) return ct_set_error(t->ctx, CT_E_INVALID_ARG, "ct_tokenizer_encode_alloc: ids and n must not be NULL");
    int64_t cnt;
    /* GPT-2: count first (a second pass costs less than over-allocating 4 bytes per text byte). */
    if (t->kind == CT_TOK_GPT2) CT_TRY(ct_tokenizer_encode(t, text, len, NULL, 0, &cnt));
    else cnt = (int64_t)len;
    int32_t *buf = NULL;
    CT_TRY(ct_alloc(t->ctx, (size_t)(cnt > 0 ? cnt : 1) * sizeof(int32_t), (void **)&buf));
    ct_status s = ct_tokenizer_encode(t, text, len, buf, cnt, n);
    if (s != CT_OK) {
        ct_free(t->ctx, buf);
        *n = 0;
        return s;
    }
    *ids = buf;
    return CT_OK;
}

ct_status ct_tokenizer_decode(const ct_tokenizer *t, const int32_t *ids, int64_t n, void *out, size_t cap,
                              size_t *len) {
    if (len) *len = 0;
    if (!t) return CT_E_INVALID_ARG;
    if (!len || (!ids && n) || n < 0)
        return ct_set_error(t->ctx, CT_E_INVALID_ARG, "ct_tokenizer_decode: ids and len must not be NULL, n >= 0");
    size_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= t->vocab)
            return ct_set_error(t->ctx, CT_E_INVALID_ARG,
                                "token id %d at position %lld is outside the %s tokenizer's vocabulary [0, %lld); "
                                "ids past the vocabulary (e.g. a reserved mask id) cannot be decoded",
                                id, (long long)i, ct_tokenizer_kind_name(t->kind), (long long)t->vocab);
        if (t->kind == CT_TOK_GPT2) {
            size_t l;
            ct_bpe_token_(t->bpe, id, &l);
            total += l;
        } else {
            total++;
        }
    }
    *len = total;
    if (!out) return CT_OK;
    if (cap < total)
        return ct_set_error(t->ctx, CT_E_INVALID_ARG,
                            "ct_tokenizer_decode: the buffer holds %zu bytes, the text needs %zu; size it with a "
                            "call with out NULL or use ct_tokenizer_decode_alloc",
                            cap, total);
    uint8_t *o = out;
    for (int64_t i = 0; i < n; i++) {
        if (t->kind == CT_TOK_GPT2) {
            size_t l;
            const uint8_t *p = ct_bpe_token_(t->bpe, ids[i], &l);
            memcpy(o, p, l);
            o += l;
        } else {
            *o++ = t->kind == CT_TOK_BYTE ? (uint8_t)ids[i] : t->chars[ids[i]];
        }
    }
    return CT_OK;
}

ct_status ct_tokenizer_decode_alloc(const ct_tokenizer *t, const int32_t *ids, int64_t n, char **out,
                                    size_t *len) {
    if (out) *out = NULL;
    if (!t) return CT_E_INVALID_ARG;
    if (!out || !len) return ct_set_error(t->ctx, CT_E_INVALID_ARG, "ct_tokenizer_decode_alloc: out and len must not be NULL");
    size_t total;
    CT_TRY(ct_tokenizer_decode(t, ids, n, NULL, 0, &total));
    char *buf = NULL;
    CT_TRY(ct_alloc(t->ctx, total + 1, (void **)&buf));
    ct_status s = ct_tokenizer_decode(t, ids, n, buf, total, len);
    if (s != CT_OK) {
        ct_free(t->ctx, buf);
        *len = 0;
        return s;
    }
    buf[total] = 0;
    *out = buf;
    return CT_OK;
}

/* ---- the corpus --------------------------------------------------------------------- */

ct_status ct_text_dataset_from_text(ct_context *ctx, const ct_tokenizer *tok, const void *text, size_t len,
                                    double val_fraction, int64_t context, ct_text_dataset *out) {
    if (out) memset(out, 0, sizeof *out);
    if (!ctx || !tok || !out || (!text && len))
        return ct_set_error(ctx, CT_E_INVALID_ARG, "ct_text_dataset_from_text: ctx, tok, text and out must not be NULL");
    if (!(val_fraction > 0 && val_fraction < 1))
        return ct_set_error(ctx, CT_E_INVALID_ARG,
                            "val_fraction %g must be in (0, 1): the last val_fraction of the tokens is the "
                            "validation split (default %g)",
                            val_fraction, CT_TEXT_VAL_FRACTION_DEFAULT);
    if (context <= 0)
        return ct_set_error(ctx, CT_E_INVALID_ARG, "context %lld must be positive", (long long)context);
    int32_t *ids = NULL;
    int64_t n = 0;
    CT_TRY(ct_tokenizer_encode_alloc(tok, text, len, &ids, &n));
    int64_t n_val = (int64_t)((double)n * val_fraction);
    int64_t n_train = n - n_val;
    if (n_train < context + 1 || n_val < context + 1) {
        ct_free(ctx, ids);
        return ct_set_error(ctx, CT_E_INVALID_ARG,
                            "corpus shorter than the context: %lld tokens split into %lld train and %lld validation "
                            "tokens (val_fraction %g), but a window needs context + 1 = %lld tokens in each split; "
                            "use a longer text, a shorter context or another val_fraction",
                            (long long)n, (long long)n_train, (long long)n_val, val_fraction,
                            (long long)(context + 1));
    }
    out->ctx = ctx;
    out->tokens = ids;
    out->n_tokens = n;
    out->n_train = n_train;
    out->n_val = n_val;
    out->vocab_size = ct_tokenizer_vocab_size(tok);
    return CT_OK;
}

ct_status ct_text_dataset_load(ct_context *ctx, const ct_tokenizer *tok, const char *path, double val_fraction,
                               int64_t context, ct_text_dataset *out) {
    if (out) memset(out, 0, sizeof *out);
    char *text = NULL;
    size_t len = 0;
    CT_TRY(ct_text_read_file(ctx, path, &text, &len));
    ct_status s = ct_text_dataset_from_text(ctx, tok, text, len, val_fraction, context, out);
    ct_free(ctx, text);
    return s;
}

void ct_text_dataset_free(ct_text_dataset *ds) {
    if (!ds || !ds->ctx) return;
    ct_free(ds->ctx, ds->tokens);
    memset(ds, 0, sizeof *ds);
}

const int32_t *ct_text_split_tokens(const ct_text_dataset *ds, ct_text_split split, int64_t *n) {
    if (n) *n = 0;
    if (!ds || !ds->tokens) return NULL;
    if (split == CT_SPLIT_VAL) {
        if (n) *n = ds->n_val;
        return ds->tokens + ds->n_train;
    }
    if (n) *n = ds->n_train;
    return ds->tokens;
}

/* ---- batches ------------------------------------------------------------------------- */

/* Checks the arguments of a batch call; *toks, *nt: the split. `window` is
 * the tokens a window needs. */
static ct_status batch_check(const ct_text_dataset *ds, ct_text_split split, int64_t batch, int64_t context,
                             int64_t window, const char *fn, const int32_t **toks, int64_t *nt) {
    if (!ds) return CT_E_INVALID_ARG;
    if (!ds->tokens)
        return ct_set_error(ds->ctx, CT_E_INVALID_ARG, "%s: the dataset is not loaded; call ct_text_dataset_load", fn);
    if (split != CT_SPLIT_TRAIN && split != CT_SPLIT_VAL)
        return ct_set_error(ds->ctx, CT_E_INVALID_ARG, "%s: split %d is neither CT_SPLIT_TRAIN nor CT_SPLIT_VAL", fn,
                            (int)split);
    if (batch <= 0 || context <= 0)
        return ct_set_error(ds->ctx, CT_E_INVALID_ARG, "%s: batch %lld and context %lld must be positive", fn,
                            (long long)batch, (long long)context);
    *toks = ct_text_split_tokens(ds, split, nt);
    if (*nt < window)
        return ct_set_error(ds->ctx, CT_E_INVALID_ARG,
                            "%s: corpus shorter than the context: the %s split has %lld tokens, a window needs %lld "
                            "(context %lld); use a shorter context",
                            fn, split == CT_SPLIT_VAL ? "validation" : "train", (long long)*nt, (long long)window,
                            (long long)context);
    return CT_OK;
}

/* Start of row `row`: uniform in [0, count) from (seed, tag ^ step, row). */
static int64_t window_start(uint64_t seed, uint64_t tag, uint64_t step, int64_t row, int64_t count) {
    uint32_t r[4];
    ct_philox(seed, tag ^ (step & TEXT_STEP_MASK), (uint64_t)row, r);
    uint64_t x = (uint64_t)r[0] << 32 | r[1];
    /* 64-bit multiply-high without __int128: (x * count) >> 64, count < 2^31 */
    uint64_t hi = (x >> 32) * (uint64_t)count, lo = (x & 0xFFFFFFFFu) * (uint64_t)count;
    return (int64_t)((hi + (lo >> 32)) >> 32);
}

ct_status ct_text_lm_batch(const ct_text_dataset *ds, ct_text_split split, int64_t batch, int64_t context,
                           uint64_t seed, uint64_t step, int32_t *x, int32_t *y) {
    const int32_t *t;
    int64_t n;
    CT_TRY(batch_check(ds, split, batch, context, context + 1, "ct_text_lm_batch", &t, &n));
    if (!x || !y) return ct_set_error(ds->ctx, CT_E_INVALID_ARG, "ct_text_lm_batch: x and y must not be NULL");
    for (int64_t r = 0; r < batch; r++) {
        int64_t s0 = window_start(seed, LM_STREAM_TAG, step, r, n - context);
        memcpy(x + r * context, t + s0, (size_t)context * sizeof(int32_t));
        memcpy(y + r * context, t + s0 + 1, (size_t)context * sizeof(int32_t));
    }
    return CT_OK;
}

int64_t ct_text_eval_windows(const ct_text_dataset *ds, ct_text_split split, int64_t context) {
    int64_t n;
    if (!ds || context <= 0 || !ct_text_split_tokens(ds, split, &n) || n < 1) return 0;
    return (n - 1) / context;
}

ct_status ct_text_eval_batch(const ct_text_dataset *ds, ct_text_split split, int64_t context, int64_t first,
                             int64_t batch, int32_t *x, int32_t *y, int64_t *got) {
    if (got) *got = 0;
    const int32_t *t;
    int64_t n;
    CT_TRY(batch_check(ds, split, batch, context, context + 1, "ct_text_eval_batch", &t, &n));
    if (!x || !y || !got || first < 0)
        return ct_set_error(ds->ctx, CT_E_INVALID_ARG,
                            "ct_text_eval_batch: x, y and got must not be NULL and first (%lld) must be >= 0",
                            (long long)first);
    int64_t w = ct_text_eval_windows(ds, split, context);
    int64_t k = first >= w ? 0 : CT_MIN(batch, w - first);
    for (int64_t r = 0; r < k; r++) {
        const int32_t *src = t + (first + r) * context;
        memcpy(x + r * context, src, (size_t)context * sizeof(int32_t));
        memcpy(y + r * context, src + 1, (size_t)context * sizeof(int32_t));
    }
    *got = k;
    return CT_OK;
}

ct_status ct_text_mlm_batch(const ct_text_dataset *ds, ct_text_split split, int64_t batch, int64_t context,
                            int32_t mask_id, uint64_t seed, uint64_t step, int32_t *input, int32_t *labels,
                            int32_t *key_valid) {
    const int32_t *t;
    int64_t n;
    CT_TRY(batch_check(ds, split, batch, context, context, "ct_text_mlm_batch", &t, &n));
    if (!input || !labels)
        return ct_set_error(ds->ctx, CT_E_INVALID_ARG, "ct_text_mlm_batch: input and labels must not be NULL");
    if (mask_id < 0)
        return ct_set_error(ds->ctx, CT_E_INVALID_ARG,
                            "ct_text_mlm_batch: mask_id %d must be >= 0 (for byte / char tokenizers reserve "
                            "mask_id = vocab_size = %lld and give the model vocab_size + 1 ids)",
                            mask_id, (long long)ds->vocab_size);
    const uint32_t sel = (uint32_t)(CT_TEXT_MLM_SELECT_P * 4294967296.0);
    const uint32_t msk = (uint32_t)(CT_TEXT_MLM_MASK_P * 4294967296.0);
    const uint32_t rnd = (uint32_t)((CT_TEXT_MLM_MASK_P + CT_TEXT_MLM_RANDOM_P) * 4294967296.0);
    const uint64_t stream = MLM_POS_TAG ^ (step & TEXT_STEP_MASK);
    for (int64_t r = 0; r < batch; r++) {
        int64_t s0 = window_start(seed, MLM_START_TAG, step, r, n - context + 1);
        for (int64_t i = 0; i < context; i++) {
            int64_t o = r * context + i;
            int32_t tok = t[s0 + i];
            uint32_t u[4];
            ct_philox(seed, stream, (uint64_t)o, u);
            if (key_valid) key_valid[o] = 1;
            if (u[0] >= sel) {
                input[o] = tok;
                labels[o] = CT_TEXT_IGNORE_LABEL;
                continue;
            }
            labels[o] = tok;
            if (u[1] < msk) input[o] = mask_id;
            else if (u[1] < rnd) input[o] = (int32_t)(((uint64_t)u[2] * (uint64_t)ds->vocab_size) >> 32);
            else input[o] = tok;
        }
    }
    return CT_OK;
}
