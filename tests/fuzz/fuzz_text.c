/* tests/fuzz/fuzz_text.c - the text corpus and its tokenizers
 * (src/data/text.c; GPT-2 pre-tokenization and merges in src/data/bpe.c)
 * on arbitrary text. Input: byte 0 picks the tokenizer (bits 0-1: byte,
 * char fitted on the text, GPT-2 with a small vocabulary built here, char
 * from a vocabulary string taken from the text) and the validation fraction
 * (bits 2-4), byte 1 the context (1..32); the rest is the text.
 * Invariants: every text encodes (char: bytes of its vocabulary) into ids
 * inside the vocabulary that decode back to the text; a buffer one id too
 * small and an id past the vocabulary are CT_E_INVALID_ARG; a corpus split
 * into train / validation gives LM windows whose y is x shifted by one,
 * evaluation windows that tile each split, and MLM batches whose labels are
 * -100 or the token; failures are CT_E_INVALID_ARG with a message; nothing
 * is left allocated. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

/* ---- a small GPT-2 vocabulary: the 256 byte tokens and a few merges ------------ */

static const char *const k_merges[][2] = {
    {" ", "t"}, {" ", "a"}, {"h", "e"}, {"i", "n"}, {"r", "e"}, {"o", "n"}, {" t", "he"}, {"e", "r"},
    {" ", "s"}, {"a", "t"}, {" ", "w"}, {"n", "d"}, {"o", "u"}, {" ", "\n"}, {"\n", "\n"}, {"\xc3", "\xa9"},
};

/* GPT-2's character for byte b: printable bytes stand for themselves, the
 * others are 256, 257, ... in order */
static int is_printable(int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE; }
static int byte_cp(int b) {
    if (is_printable(b)) return b;
    int k = 0;
    for (int c = 0; c < b; c++) k += !is_printable(c);
    return 256 + k;
}

/* bytes as a JSON string of GPT-2 characters (UTF-8) */
static void put_token(FILE *f, const char *s, size_t n, int json) {
    if (json) fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        int cp = byte_cp((unsigned char)s[i]);
        if (json && (cp == '"' || cp == '\\')) fprintf(f, "\\%c", cp);
        else if (cp < 0x80) fputc(cp, f);
        else fprintf(f, "%c%c", 0xC0 | (cp >> 6), 0x80 | (cp & 0x3F)); /* cp < 0x800 */
    }
    if (json) fputc('"', f);
}

static ct_tokenizer *gpt2_small(void) {
    const char *ep = fuzz_write(0, "encoder.json", "", 0), *bp = fuzz_write(1, "vocab.bpe", "", 0);
    FILE *e = fopen(ep, "w"), *v = fopen(bp, "w");
    if (!e || !v) abort();
    fputc('{', e);
    int id = 0;
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        fprintf(e, "%s", id ? ", " : "");
        put_token(e, &c, 1, 1);
        fprintf(e, ": %d", id++);
    }
    fputs("#version: 0.2\n", v);
    for (size_t m = 0; m < sizeof k_merges / sizeof k_merges[0]; m++) {
        char both[16];
        snprintf(both, sizeof both, "%s%s", k_merges[m][0], k_merges[m][1]);
        fputs(", ", e);
        put_token(e, both, strlen(both), 1);
        fprintf(e, ": %d", id++);
        put_token(v, k_merges[m][0], strlen(k_merges[m][0]), 0);
        fputc(' ', v);
        put_token(v, k_merges[m][1], strlen(k_merges[m][1]), 0);
        fputc('\n', v);
    }
    fputs("}\n", e);
    if (fclose(e) || fclose(v)) abort();
    ct_tokenizer *t = NULL;
    ct_context *ctx = fuzz_ctx();
    if (ct_tokenizer_gpt2_load(ctx, ep, bp, &t) != CT_OK) {
        fprintf(stderr, "fuzz: the small GPT-2 vocabulary: %s\n", ct_context_last_error(ctx));
        abort();
    }
    return t;
}

/* ---- checks ---------------------------------------------------------------------- */

static void round_trip(const ct_tokenizer *t, const uint8_t *text, size_t len) {
    int64_t vocab = ct_tokenizer_vocab_size(t);
    int32_t *ids = NULL;
    int64_t n = 0;
    ct_status s = ct_tokenizer_encode_alloc(t, text, len, &ids, &n);
    FUZZ_CHECK(s == CT_OK, "a text encodes");
    FUZZ_CHECK(n >= 0 && (size_t)n <= len, "never more ids than bytes");
    for (int64_t i = 0; i < n; i++) FUZZ_CHECK(ids[i] >= 0 && ids[i] < vocab, "ids inside the vocabulary");
    char *back = NULL;
    size_t blen = 0;
    FUZZ_CHECK(ct_tokenizer_decode_alloc(t, ids, n, &back, &blen) == CT_OK, "the ids decode");
    FUZZ_CHECK(blen == len && !memcmp(back, text, len) && back[len] == 0, "decode(encode(text)) == text");
    ct_free(fuzz_ctx(), back);
    if (n > 0) {
        int64_t got = -1;
        fuzz_ctx();
        s = ct_tokenizer_encode(t, text, len, ids, n - 1, &got);
        FUZZ_CHECK(s == CT_E_INVALID_ARG && got == n, "a buffer one id short is an error that gives the count");
        fuzz_check_error(s);
        int32_t keep = ids[n - 1];
        ids[n - 1] = (int32_t)vocab;
        size_t l2;
        fuzz_ctx();
        s = ct_tokenizer_decode(t, ids, n, NULL, 0, &l2);
        FUZZ_CHECK(s == CT_E_INVALID_ARG, "an id past the vocabulary is an error");
        fuzz_check_error(s);
        ids[n - 1] = keep;
    }
    ct_free(fuzz_ctx(), ids);
}

static void batches(const ct_text_dataset *ds, int64_t T) {
    enum { B = 2 };
    int32_t x[B * 32], y[B * 32], lab[B * 32], kv[B * 32];
    for (int sp = 0; sp < 2; sp++) {
        ct_text_split split = sp ? CT_SPLIT_VAL : CT_SPLIT_TRAIN;
        int64_t n;
        const int32_t *tok = ct_text_split_tokens(ds, split, &n);
        FUZZ_CHECK(tok && n >= T + 1, "each split holds a window");
        FUZZ_CHECK(ct_text_lm_batch(ds, split, B, T, 7, (uint64_t)n, x, y) == CT_OK, "an LM batch");
        for (int r = 0; r < B; r++)
            for (int64_t i = 0; i + 1 < T; i++) FUZZ_CHECK(y[r * T + i] == x[r * T + i + 1], "y is x shifted by one");
        int64_t w = ct_text_eval_windows(ds, split, T), got = 0;
        FUZZ_CHECK(w == (n - 1) / T, "(n - 1) / T evaluation windows");
        FUZZ_CHECK(ct_text_eval_batch(ds, split, T, w - 1, B, x, y, &got) == CT_OK && got == 1, "the last window");
        FUZZ_CHECK(!memcmp(x, tok + (w - 1) * T, (size_t)T * sizeof *x), "windows tile the split");
        FUZZ_CHECK(ct_text_eval_batch(ds, split, T, w, B, x, y, &got) == CT_OK && got == 0, "none past the end");
        int32_t mask = (int32_t)ds->vocab_size;
        FUZZ_CHECK(ct_text_mlm_batch(ds, split, B, T, mask, 7, 3, x, lab, kv) == CT_OK, "an MLM batch");
        for (int64_t i = 0; i < B * T; i++) {
            FUZZ_CHECK(x[i] >= 0 && x[i] <= mask && kv[i] == 1, "MLM inputs inside the vocabulary + mask");
            FUZZ_CHECK(lab[i] == CT_TEXT_IGNORE_LABEL || (lab[i] >= 0 && lab[i] < mask), "MLM labels");
        }
    }
}

static ct_tokenizer *g_gpt2;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    if (!g_gpt2) g_gpt2 = gpt2_small();
    const uint8_t *text = data + 2;
    size_t len = size - 2;
    int64_t T = 1 + data[1] % 32;
    double vf = 0.05 + 0.1 * ((data[0] >> 2) & 7);
    size_t mem = fuzz_bytes_in_use();
    ct_context *ctx = fuzz_ctx();
    ct_tokenizer *t = NULL;
    const ct_tokenizer *use = NULL;
    ct_status s = CT_OK;
    switch (data[0] & 3) {
        case 0: s = ct_tokenizer_byte(ctx, &t); break;
        case 1: s = ct_tokenizer_char_fit(ctx, text, len, &t); break;
        case 2: use = g_gpt2; break;
        case 3: s = ct_tokenizer_char_from_vocab(ctx, text, len < 300 ? len : 300, &t); break;
    }
    if (s != CT_OK) {
        fuzz_check_error(s);
        FUZZ_CHECK(s == CT_E_INVALID_ARG && t == NULL, "a bad vocabulary is CT_E_INVALID_ARG");
        fuzz_check_no_leak(mem);
        return 0;
    }
    if (!use) use = t;
    if ((data[0] & 3) == 3) { /* char from a vocabulary: the vocabulary itself is a text it encodes */
        uint8_t v[256];
        size_t vl = 0;
        FUZZ_CHECK(ct_tokenizer_char_vocab(use, v, sizeof v, &vl) == CT_OK && vl == (size_t)ct_tokenizer_vocab_size(use),
                   "the vocabulary string");
        round_trip(use, v, vl);
    } else {
        round_trip(use, text, len);
    }
    ct_text_dataset ds;
    ctx = fuzz_ctx();
    s = ct_text_dataset_from_text(ctx, use, text, len, vf, T, &ds);
    if (s == CT_OK) {
        fuzz_note("text: %s tokenizer, %lld tokens, context %lld", ct_tokenizer_kind_name(ct_tokenizer_kind_of(use)),
                  (long long)ds.n_tokens, (long long)T);
        FUZZ_CHECK(ds.n_train + ds.n_val == ds.n_tokens && ds.vocab_size == ct_tokenizer_vocab_size(use), "the split");
        batches(&ds, T);
        ct_text_dataset_free(&ds);
    } else {
        fuzz_check_error(s);
        FUZZ_CHECK(s == CT_E_INVALID_ARG, "a short or foreign text is CT_E_INVALID_ARG");
    }
    ct_tokenizer_free(t);
    fuzz_check_no_leak(mem);
    return 0;
}
