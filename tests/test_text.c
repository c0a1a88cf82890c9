/* tests/test_text.c - tokenizers (byte, char, GPT-2 BPE against the JS
 * reference's ids in tests/golden/bpe_cases.txt), their errors, the
 * train / validation split, LM windows, evaluation windows and MLM masking.
 * Needs data/text from scripts/setup.sh (fails without it). Run from the
 * repository root. Bad files are written into a fresh folder under /tmp. */
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"

#define MOBY "data/text/moby-dick.txt"
#define GPT2_ENC "data/text/gpt2/encoder.json"
#define GPT2_BPE "data/text/gpt2/vocab.bpe"
#define GOLDEN "tests/golden/bpe_cases.txt"

/* ---- helpers -------------------------------------------------------------------- */






static size_t in_use(ct_context *ctx) {
    ct_mem_stats m;
    ct_context_mem_stats(ctx, &m);
    return m.bytes_in_use;
}

/* The corpus, read with the library (fails the test when missing). */
static char *moby(ct_context *ctx, size_t *len) {
    char *t = NULL;
    ct_status s = ct_text_read_file(ctx, MOBY, &t, len);
    if (s != CT_OK) fprintf(stderr, "  %s: %s (run scripts/setup.sh)\n", MOBY, ct_context_last_error(ctx));
    return t;
}

/* 1 when a[0..n) occurs in hay[0..m). */
static int occurs(const int32_t *hay, int64_t m, const int32_t *a, int64_t n) {
    for (int64_t i = 0; i + n <= m; i++)
        if (hay[i] == a[0] && !memcmp(hay + i, a, (size_t)n * sizeof *a)) return 1;
    return 0;
}

/* ---- byte and char -------------------------------------------------------------------- */

TEST(byte_roundtrip_moby) {
    ct_context *ctx = test_ctx(-1, 1);
    size_t len;
    char *text = moby(ctx, &len);
    CHECK(text);
    ct_tokenizer *t;
    CHECK_OK(ctx, ct_tokenizer_byte(ctx, &t));
    CHECK(ct_tokenizer_vocab_size(t) == 256 && ct_tokenizer_kind_of(t) == CT_TOK_BYTE);
    int32_t *ids;
    int64_t n;
    CHECK_OK(ctx, ct_tokenizer_encode_alloc(t, text, len, &ids, &n));
    CHECK((size_t)n == len);
    for (size_t i = 0; i < len; i++) CHECK(ids[i] == (uint8_t)text[i]);
    char *back;
    size_t blen;
    CHECK_OK(ctx, ct_tokenizer_decode_alloc(t, ids, n, &back, &blen));
    CHECK(blen == len && !memcmp(back, text, len) && back[len] == 0);
    printf("  note: %s: %zu bytes, %lld byte tokens (vocab 256)\n", MOBY, len, (long long)n);
    ct_free(ctx, back);
    ct_free(ctx, ids);
    ct_free(ctx, text);
    ct_tokenizer_free(t);
    CHECK(in_use(ctx) == 0);
    ct_context_free(ctx);
}

TEST(char_roundtrip_moby) {
    ct_context *ctx = test_ctx(-1, 1);
    size_t len;
    char *text = moby(ctx, &len);
    CHECK(text);
    ct_tokenizer *t, *t2;
    CHECK_OK(ctx, ct_tokenizer_char_fit(ctx, text, len, &t));
    uint8_t v[256];
    size_t vn;
    CHECK_OK(ctx, ct_tokenizer_char_vocab(t, v, sizeof v, &vn));
    CHECK((int64_t)vn == ct_tokenizer_vocab_size(t));
    for (size_t i = 1; i < vn; i++) CHECK(v[i] > v[i - 1]);
    /* every byte of the text is in the vocabulary and nothing else */
    int seen[256] = {0};
    for (size_t i = 0; i < len; i++) seen[(uint8_t)text[i]] = 1;
    size_t distinct = 0;
    for (int b = 0; b < 256; b++) distinct += seen[b];
    CHECK(distinct == vn);
    CHECK_OK(ctx, ct_tokenizer_char_from_vocab(ctx, v, vn, &t2));
    int32_t *ids, *ids2;
    int64_t n, n2;
    CHECK_OK(ctx, ct_tokenizer_encode_alloc(t, text, len, &ids, &n));
    CHECK_OK(ctx, ct_tokenizer_encode_alloc(t2, text, len, &ids2, &n2));
    CHECK((size_t)n == len && n2 == n && !memcmp(ids, ids2, (size_t)n * sizeof *ids));
    for (int64_t i = 0; i < n; i++) CHECK(ids[i] >= 0 && ids[i] < (int32_t)vn && v[ids[i]] == (uint8_t)text[i]);
    char *back;
    size_t blen;
    CHECK_OK(ctx, ct_tokenizer_decode_alloc(t2, ids, n, &back, &blen));
    CHECK(blen == len && !memcmp(back, text, len));
    printf("  note: char vocabulary of %s: %zu bytes, %lld tokens\n", MOBY, vn, (long long)n);
    ct_free(ctx, back);
    ct_free(ctx, ids);
    ct_free(ctx, ids2);
    ct_free(ctx, text);
    ct_tokenizer_free(t);
    ct_tokenizer_free(t2);
    CHECK(in_use(ctx) == 0);
    ct_context_free(ctx);
}

TEST(char_and_decode_errors) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_tokenizer *t, *bad = (ct_tokenizer *)1;
    CHECK_OK(ctx, ct_tokenizer_char_fit(ctx, "hello world", 11, &t));
    CHECK(ct_tokenizer_vocab_size(t) == 8); /* " dehlorw" */
    int32_t ids[16];
    int64_t n;
    /* a byte outside the vocabulary: value, printable form and offset */
    CHECK(ct_tokenizer_encode(t, "hold!", 5, ids, 16, &n) == CT_E_INVALID_ARG);
    const char *m = ct_context_last_error(ctx);
    CHECK_MSG(strstr(m, "33") && strstr(m, "'!'") && strstr(m, "offset 4"), "%s", m);
    CHECK(ct_tokenizer_encode(t, "he\x01", 3, ids, 16, &n) == CT_E_INVALID_ARG);
    m = ct_context_last_error(ctx);
    CHECK_MSG(strstr(m, "byte 1 ") && strstr(m, "\\x01") && strstr(m, "offset 2"), "%s", m);
    /* buffer sizing */
    CHECK_OK(ctx, ct_tokenizer_encode(t, "hello", 5, NULL, 0, &n));
    CHECK(n == 5);
    CHECK(ct_tokenizer_encode(t, "hello", 5, ids, 3, &n) == CT_E_INVALID_ARG && n == 5);
    /* decode: an id outside the vocabulary */
    int32_t good[3] = {0, 1, 7}, badids[3] = {0, 8, 1}, neg[1] = {-1};
    char out[8];
    size_t l;
    CHECK_OK(ctx, ct_tokenizer_decode(t, good, 3, out, sizeof out, &l));
    CHECK(l == 3 && !memcmp(out, " dw", 3));
    CHECK(ct_tokenizer_decode(t, badids, 3, out, sizeof out, &l) == CT_E_INVALID_ARG);
    m = ct_context_last_error(ctx);
    CHECK_MSG(strstr(m, "id 8") && strstr(m, "position 1") && strstr(m, "[0, 8)"), "%s", m);
    CHECK(ct_tokenizer_decode(t, neg, 1, out, sizeof out, &l) == CT_E_INVALID_ARG);
    CHECK(ct_tokenizer_decode(t, good, 3, out, 2, &l) == CT_E_INVALID_ARG);
    ct_tokenizer *bt;
    CHECK_OK(ctx, ct_tokenizer_byte(ctx, &bt));
    int32_t b256[1] = {256};
    CHECK(ct_tokenizer_decode(bt, b256, 1, out, sizeof out, &l) == CT_E_INVALID_ARG);
    CHECK(strstr(ct_context_last_error(ctx), "256"));
    uint8_t vb[256];
    size_t vn;
    CHECK(ct_tokenizer_char_vocab(bt, vb, sizeof vb, &vn) == CT_E_INVALID_ARG);
    ct_tokenizer_free(bt);
    /* vocabulary strings: unsorted, repeated, empty */
    CHECK(ct_tokenizer_char_from_vocab(ctx, "abca", 4, &bad) == CT_E_INVALID_ARG && bad == NULL);
    m = ct_context_last_error(ctx);
    CHECK_MSG(strstr(m, "byte 3") && strstr(m, "0x61"), "%s", m);
    CHECK(ct_tokenizer_char_from_vocab(ctx, "abb", 3, &bad) == CT_E_INVALID_ARG);
    CHECK(strstr(ct_context_last_error(ctx), "repeat"));
    CHECK(ct_tokenizer_char_from_vocab(ctx, "", 0, &bad) == CT_E_INVALID_ARG);
    CHECK(ct_tokenizer_char_fit(ctx, "", 0, &bad) == CT_E_INVALID_ARG);
    CHECK(ct_tokenizer_char_vocab(t, vb, 4, &vn) == CT_E_INVALID_ARG);
    ct_tokenizer_free(t);
    CHECK(in_use(ctx) == 0);
    ct_context_free(ctx);
}

/* ---- GPT-2 BPE ------------------------------------------------------------------------ */

static int hexv(int c) { return c <= '9' ? c - '0' : (c | 32) - 'a' + 10; }

static uint64_t fnv_ids(const int32_t *ids, int64_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int64_t i = 0; i < n; i++)
        for (int k = 0; k < 4; k++) h = (h ^ (((uint32_t)ids[i] >> (8 * k)) & 0xFF)) * 0x100000001b3ull;
    return h;
}

TEST(gpt2_golden) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_tokenizer *t;
    CHECK_OK(ctx, ct_tokenizer_gpt2_load(ctx, GPT2_ENC, GPT2_BPE, &t));
    CHECK(ct_tokenizer_vocab_size(t) == 50257 && ct_tokenizer_kind_of(t) == CT_TOK_GPT2);
    char *g;
    size_t glen;
    CHECK_OK(ctx, ct_text_read_file(ctx, GOLDEN, &g, &glen));
    int cases = 0, full = 0;
    char name[128] = "";
    uint8_t *text = malloc(glen + 1);
    size_t tlen = 0;
    int32_t *want = malloc(glen * sizeof(int32_t)), *got = malloc((glen + 1) * sizeof(int32_t));
    for (char *line = strtok(g, "\n"); line; line = strtok(NULL, "\n")) {
        if (!strncmp(line, "case ", 5)) {
            snprintf(name, sizeof name, "%s", line + 5);
        } else if (!strncmp(line, "text", 4)) {
            const char *h = line + 4 + (line[4] == ' ');
            tlen = strlen(h) / 2;
            for (size_t i = 0; i < tlen; i++) text[i] = (uint8_t)(hexv(h[2 * i]) * 16 + hexv(h[2 * i + 1]));
        } else if (!strncmp(line, "ids", 3)) {
            int64_t nw = 0, n;
            for (char *p = line + 3; *p;) {
                char *e;
                long v = strtol(p, &e, 10);
                if (e == p) break;
                want[nw++] = (int32_t)v;
                p = e;
            }
            CHECK_OK(ctx, ct_tokenizer_encode(t, text, tlen, got, (int64_t)glen + 1, &n));
            int64_t first = -1;
            for (int64_t i = 0; i < (n < nw ? n : nw); i++)
                if (got[i] != want[i]) {
                    first = i;
                    break;
                }
            CHECK_MSG(n == nw && first < 0, "case %s: %lld ids, JS has %lld; first difference at %lld", name,
                      (long long)n, (long long)nw, (long long)first);
            size_t bl;
            char *back;
            CHECK_OK(ctx, ct_tokenizer_decode_alloc(t, got, n, &back, &bl));
            CHECK_MSG(bl == tlen && !memcmp(back, text, tlen), "case %s: decode(encode(s)) != s", name);
            ct_free(ctx, back);
            cases++;
        } else if (!strncmp(line, "full ", 5)) {
            char path[256];
            long long bytes, nids;
            unsigned long long h;
            CHECK(sscanf(line + 5, "%255s %lld %lld %llx", path, &bytes, &nids, &h) == 4);
            size_t len;
            char *corpus = NULL;
            CHECK_OK(ctx, ct_text_read_file(ctx, path, &corpus, &len));
            CHECK((long long)len == bytes);
            int32_t *ids;
            int64_t n;
            CHECK_OK(ctx, ct_tokenizer_encode_alloc(t, corpus, len, &ids, &n));
            CHECK_MSG(n == nids && fnv_ids(ids, n) == h, "%s: %lld ids (JS %lld), hash %016llx (JS %016llx)", path,
                      (long long)n, nids, (unsigned long long)fnv_ids(ids, n), h);
            char *back;
            size_t bl;
            CHECK_OK(ctx, ct_tokenizer_decode_alloc(t, ids, n, &back, &bl));
            CHECK(bl == len && !memcmp(back, corpus, len));
            printf("  note: %s: %zu bytes, %lld GPT-2 tokens (vocab 50257), equal to the JS reference\n", path, len,
                   (long long)n);
            ct_free(ctx, back);
            ct_free(ctx, ids);
            ct_free(ctx, corpus);
            full++;
        }
    }
    printf("  note: %d BPE golden cases equal to the JS reference\n", cases);
    CHECK(cases >= 20 && full == 1);
    /* bytes that are not UTF-8 (which JS strings cannot hold) still round trip */
    const char raw[] = "ab\xff\xfe \x80\xc3 caf\xc3\xa9\xed\xa0\x80!";
    int64_t n;
    CHECK_OK(ctx, ct_tokenizer_encode(t, raw, sizeof raw - 1, got, (int64_t)glen, &n));
    char *back;
    size_t bl;
    CHECK_OK(ctx, ct_tokenizer_decode_alloc(t, got, n, &back, &bl));
    CHECK(bl == sizeof raw - 1 && !memcmp(back, raw, bl));
    ct_free(ctx, back);
    /* a long run of one letter (a pre-token longer than the stack buffer) */
    memset(text, 'a', 5000);
    CHECK_OK(ctx, ct_tokenizer_encode(t, text, 5000, got, (int64_t)glen, &n));
    CHECK_OK(ctx, ct_tokenizer_decode_alloc(t, got, n, &back, &bl));
    CHECK(bl == 5000 && !memcmp(back, text, bl));
    ct_free(ctx, back);
    free(text);
    free(want);
    free(got);
    ct_free(ctx, g);
    ct_tokenizer_free(t);
    CHECK(in_use(ctx) == 0);
    ct_context_free(ctx);
}

/* GPT-2's byte -> code point table. */
static int byte_cp(int b) {
    static int cp[256], init = 0;
    if (!init) {
        int extra = 0;
        for (int c = 0; c < 256; c++) {
            int pr = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE;
            cp[c] = pr ? c : 256 + extra++;
        }
        init = 1;
    }
    return cp[b];
}

/* A small encoder.json: the 256 byte tokens (ids 0..255, written as \u
 * escapes, one per line) then `extra` (JSON text of more entries, may be
 * empty), closed with '}' unless `open`. */
static void write_encoder(const char *path, const char *extra, int open) {
    static char buf[16384];
    size_t o = 0;
    o += (size_t)snprintf(buf + o, sizeof buf - o, "{\n");
    for (int b = 0; b < 256; b++)
        o += (size_t)snprintf(buf + o, sizeof buf - o, "%s\"\\u%04x\": %d", b ? ",\n" : "", byte_cp(b), b);
    o += (size_t)snprintf(buf + o, sizeof buf - o, "%s%s\n", extra, open ? "" : "}");
    test_write_file(path, buf, strlen(buf));
}

static int has(const char *m, const char *s) { return !s || strstr(m, s) != NULL; }

/* Expects loading (enc, bpe) to fail with `want` and a message holding all
 * the non-NULL strings. */
#define CHECK_GPT2_FAILS(ctx, enc, bpe, want, s1, s2)                                                 \
    do {                                                                                            \
        ct_tokenizer *t_ = (ct_tokenizer *)1;                                                       \
        ct_status s_ = ct_tokenizer_gpt2_load(ctx, enc, bpe, &t_);                                  \
        const char *m_ = ct_context_last_error(ctx);                                                \
        CHECK_MSG(s_ == (want), "got %s: %s", ct_status_name(s_), m_);                              \
        CHECK(t_ == NULL);                                                                          \
        CHECK_MSG(has(m_, s1) && has(m_, s2), "message: %s", m_);                                \
        CHECK(in_use(ctx) == 0);                                                                    \
    } while (0)

TEST(gpt2_small_and_bad_files) {
    ct_context *ctx = test_ctx(-1, 1);
    test_tmp_make("text");
    const char *enc = test_tmp_path("encoder.json"), *bpe = test_tmp_path("vocab.bpe");
    /* a tiny valid pair: "ab" = 256, "abc" = 257; " a" merges are absent */
    write_encoder(enc, ",\n\"ab\": 256,\n\"abc\": 257", 0);
    test_write_file(bpe, "#version: 0.2\na b\nab c\n", strlen("#version: 0.2\na b\nab c\n"));
    ct_tokenizer *t;
    CHECK_OK(ctx, ct_tokenizer_gpt2_load(ctx, enc, bpe, &t));
    CHECK(ct_tokenizer_vocab_size(t) == 258);
    int32_t ids[16];
    int64_t n;
    CHECK_OK(ctx, ct_tokenizer_encode(t, "abcab xabc", 10, ids, 16, &n));
    /* pre-tokens "abcab", " xabc": abc|ab ; ' ' x abc */
    CHECK_MSG(n == 5 && ids[0] == 257 && ids[1] == 256 && ids[2] == ' ' && ids[3] == 'x' && ids[4] == 257,
              "n %lld: %d %d %d %d %d", (long long)n, ids[0], ids[1], ids[2], ids[3], ids[4]);
    ct_tokenizer_free(t);

    /* missing files: CT_E_IO naming the path and scripts/setup.sh */
    CHECK_GPT2_FAILS(ctx, "data/text/gpt2/nope.json", bpe, CT_E_IO, "data/text/gpt2/nope.json", "scripts/setup.sh");
    CHECK_GPT2_FAILS(ctx, enc, test_tmp_path("missing.bpe"), CT_E_IO, "missing.bpe", NULL);
    /* encoder.json: not JSON, not an object, non-integer values, duplicates */
    test_write_file(enc, "this is not json", strlen("this is not json"));
    CHECK_GPT2_FAILS(ctx, enc, bpe, CT_E_CORRUPT, "encoder.json line 1", "not a JSON object");
    test_write_file(enc, "[1, 2, 3]", strlen("[1, 2, 3]"));
    CHECK_GPT2_FAILS(ctx, enc, bpe, CT_E_CORRUPT, "line 1", "not a JSON object");
    write_encoder(enc, ",\n\"ab\": \"x\"", 0);
    CHECK_GPT2_FAILS(ctx, enc, bpe, CT_E_CORRUPT, "entry 257", "\"ab\" is not an integer");
    write_encoder(enc, ",\n\"ab\": 1.5", 0);
    CHECK_GPT2_FAILS(ctx, enc, bpe, CT_E_CORRUPT, "entry 257", "not an integer");
    write_encoder(enc, ",\n\"ab\": -3", 0);
    CHECK_GPT2_FAILS(ctx, enc, bpe, CT_E_CORRUPT, "entry 257", "not an integer");
    write_encoder(enc, ",\n\"ab\": 256,\n\"abc\": 256", 0);
    CHECK_GPT2_FAILS(ctx, enc, bpe, CT_E_CORRUPT, "entry 258: duplicate id 256", "(entry 257)");
    write_encoder(enc, ",\n\"ab\": 256,\n\"ab\": 257", 0);
    CHECK_GPT2_FAILS(ctx, enc, bpe, CT_E_CORRUPT, "entry 258: duplicate key \"ab\"", "(also entry 257)");
    write_encoder(enc, ",\n\"ab\": 300", 0);
    CHECK_GPT2_FAILS(ctx, enc, bpe, CT_E_CORRUPT, "id 300", "0..256");
    write_encoder(enc, ",\n\"a b\": 256", 0);
    CHECK_GPT2_FAILS(ctx, enc, bpe, CT_E_CORRUPT, "entry 257", "U+0020");
    write_encoder(enc, ",\n\"ab\": 256", 1);
    CHECK_GPT2_FAILS(ctx, enc, bpe, CT_E_CORRUPT, "line 259", "ends before the object is closed");
    write_encoder(enc, ",\n\"ab\": 256}\n{", 1);
    CHECK_GPT2_FAILS(ctx, enc, bpe, CT_E_CORRUPT, "line 259", "after the end");
    write_encoder(enc, ",\n\"ab\" 256", 0);
    CHECK_GPT2_FAILS(ctx, enc, bpe, CT_E_CORRUPT, "line 258", "not valid JSON (near \"256");
    write_encoder(enc, ",\n\"a\\u0000b\": 256", 0);
    CHECK_GPT2_FAILS(ctx, enc, bpe, CT_E_CORRUPT, "line 258", "U+0000");
    write_encoder(enc, ",\n\"ab\": -0", 0);
    CHECK_GPT2_FAILS(ctx, enc, bpe, CT_E_CORRUPT, "entry 257", "not an integer");
    write_encoder(enc, ",\n\"ab\": 1e40", 0);
    CHECK_GPT2_FAILS(ctx, enc, bpe, CT_E_CORRUPT, "entry 257", "not an integer");
    write_encoder(enc, ",\n\"ab\": [256]", 0);
    CHECK_GPT2_FAILS(ctx, enc, bpe, CT_E_CORRUPT, "entry 257", "not an integer");
    test_write_file(enc, "{\"a\": 0}", strlen("{\"a\": 0}"));
    CHECK_GPT2_FAILS(ctx, enc, bpe, CT_E_CORRUPT, "no token for the byte 0x00", NULL);
    /* vocab.bpe: wrong field counts, unknown symbols, merged symbol unknown */
    write_encoder(enc, ",\n\"ab\": 256,\n\"abc\": 257", 0);
    test_write_file(bpe, "#version: 0.2\na b\nab c d\n", strlen("#version: 0.2\na b\nab c d\n"));
    CHECK_GPT2_FAILS(ctx, enc, bpe, CT_E_CORRUPT, "vocab.bpe line 3", "exactly two symbols");
    test_write_file(bpe, "#version: 0.2\na b\nabc\n", strlen("#version: 0.2\na b\nabc\n"));
    CHECK_GPT2_FAILS(ctx, enc, bpe, CT_E_CORRUPT, "vocab.bpe line 3", "has 1");
    test_write_file(bpe, "#version: 0.2\na b\n\nab c\n", strlen("#version: 0.2\na b\n\nab c\n"));
    CHECK_GPT2_FAILS(ctx, enc, bpe, CT_E_CORRUPT, "vocab.bpe line 3", "has 0");
    test_write_file(bpe, "#version: 0.2\na b\nabcd c\n", strlen("#version: 0.2\na b\nabcd c\n"));
    CHECK_GPT2_FAILS(ctx, enc, bpe, CT_E_CORRUPT, "vocab.bpe line 3", "\"abcd\" is not a token");
    test_write_file(bpe, "#version: 0.2\nb c\n", strlen("#version: 0.2\nb c\n"));
    CHECK_GPT2_FAILS(ctx, enc, bpe, CT_E_CORRUPT, "vocab.bpe line 2", "merged symbol \"bc\"");
    ct_context_free(ctx);
}

/* ---- the corpus and batches ------------------------------------------------------------------ */

TEST(split_sizes) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_tokenizer *t;
    CHECK_OK(ctx, ct_tokenizer_byte(ctx, &t));
    ct_text_dataset ds;
    CHECK_OK(ctx, ct_text_dataset_load(ctx, t, MOBY, CT_TEXT_VAL_FRACTION_DEFAULT, 256, &ds));
    CHECK(ds.n_tokens == 1204997 && ds.n_val == 120499 && ds.n_train == ds.n_tokens - ds.n_val);
    CHECK(ds.vocab_size == 256);
    int64_t nt, nv;
    const int32_t *tr = ct_text_split_tokens(&ds, CT_SPLIT_TRAIN, &nt), *va = ct_text_split_tokens(&ds, CT_SPLIT_VAL, &nv);
    CHECK(tr == ds.tokens && nt == ds.n_train && va == ds.tokens + ds.n_train && nv == ds.n_val);
    ct_text_dataset_free(&ds);
    /* too short: names both numbers */
    const char *txt = "0123456789abcdefghij0123456789abcdefghij"; /* 40 bytes: 36 train, 4 val */
    CHECK(ct_text_dataset_from_text(ctx, t, txt, 40, 0.1, 8, &ds) == CT_E_INVALID_ARG);
    const char *m = ct_context_last_error(ctx);
    CHECK_MSG(strstr(m, "corpus shorter than the context") && strstr(m, "4 validation") && strstr(m, "= 9 tokens"),
              "%s", m);
    CHECK(ds.tokens == NULL);
    CHECK_OK(ctx, ct_text_dataset_from_text(ctx, t, txt, 40, 0.25, 8, &ds)); /* 30 / 10 */
    CHECK(ds.n_train == 30 && ds.n_val == 10);
    int32_t x[2 * 16], y[2 * 16];
    CHECK(ct_text_lm_batch(&ds, CT_SPLIT_VAL, 2, 10, 1, 0, x, y) == CT_E_INVALID_ARG);
    CHECK(strstr(ct_context_last_error(ctx), "corpus shorter than the context"));
    CHECK_OK(ctx, ct_text_lm_batch(&ds, CT_SPLIT_VAL, 2, 9, 1, 0, x, y)); /* exactly one window */
    for (int i = 0; i < 9; i++) CHECK(x[i] == txt[30 + i] && y[i] == txt[31 + i] && x[9 + i] == x[i]);
    ct_text_dataset_free(&ds);
    CHECK(ct_text_dataset_from_text(ctx, t, txt, 40, 0, 8, &ds) == CT_E_INVALID_ARG);
    CHECK(ct_text_dataset_from_text(ctx, t, txt, 40, 1, 8, &ds) == CT_E_INVALID_ARG);
    CHECK(ct_text_dataset_load(ctx, t, "data/text/none.txt", 0.1, 8, &ds) == CT_E_IO);
    CHECK(strstr(ct_context_last_error(ctx), "scripts/setup.sh") && strstr(ct_context_last_error(ctx), "none.txt"));
    ct_tokenizer_free(t);
    CHECK(in_use(ctx) == 0);
    ct_context_free(ctx);
}

TEST(lm_windows) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_tokenizer *t;
    CHECK_OK(ctx, ct_tokenizer_byte(ctx, &t));
    ct_text_dataset ds;
    const int64_t B = 8, T = 64;
    CHECK_OK(ctx, ct_text_dataset_load(ctx, t, MOBY, 0.1, T, &ds));
    int32_t *x = malloc(4 * B * T * sizeof(int32_t)), *y = x + B * T, *x2 = y + B * T, *y2 = x2 + B * T;
    for (int split = 0; split < 2; split++) {
        int64_t n;
        const int32_t *s = ct_text_split_tokens(&ds, (ct_text_split)split, &n);
        CHECK_OK(ctx, ct_text_lm_batch(&ds, (ct_text_split)split, B, T, 42, 7, x, y));
        int32_t w[65];
        for (int64_t r = 0; r < B; r++) {
            for (int64_t i = 0; i + 1 < T; i++) CHECK(y[r * T + i] == x[r * T + i + 1]);
            memcpy(w, x + r * T, T * sizeof(int32_t));
            w[T] = y[r * T + T - 1];
            CHECK_MSG(occurs(s, n, w, T + 1), "split %d row %lld: the window is not in the split", split, (long long)r);
        }
        /* same (seed, step): same batch, even after other calls */
        CHECK_OK(ctx, ct_text_lm_batch(&ds, (ct_text_split)split, B, T, 42, 8, x2, y2));
        CHECK(memcmp(x, x2, B * T * sizeof(int32_t)) != 0);
        CHECK_OK(ctx, ct_text_lm_batch(&ds, (ct_text_split)split, B, T, 43, 7, x2, y2));
        CHECK(memcmp(x, x2, B * T * sizeof(int32_t)) != 0);
        CHECK_OK(ctx, ct_text_lm_batch(&ds, (ct_text_split)split, B, T, 42, 7, x2, y2));
        CHECK(!memcmp(x, x2, B * T * sizeof(int32_t)) && !memcmp(y, y2, B * T * sizeof(int32_t)));
        /* a smaller batch is the prefix of a larger one (keys per row) */
        CHECK_OK(ctx, ct_text_lm_batch(&ds, (ct_text_split)split, 3, T, 42, 7, x2, y2));
        CHECK(!memcmp(x, x2, 3 * T * sizeof(int32_t)));
    }
    /* window starts cover the split: over many rows of a short split, the
     * first and the last possible window both show up */
    const char *txt = "abcdefghijklmnopqrstuvwxyz0123456789ABCD"; /* 40 bytes -> 30 / 10 */
    ct_text_dataset small;
    CHECK_OK(ctx, ct_text_dataset_from_text(ctx, t, txt, 40, 0.25, 4, &small));
    int32_t sx[256 * 4], sy[256 * 4];
    CHECK_OK(ctx, ct_text_lm_batch(&small, CT_SPLIT_TRAIN, 256, 4, 5, 0, sx, sy));
    int hit[26] = {0};
    for (int r = 0; r < 256; r++) {
        int s0 = (int)(strchr(txt, sx[r * 4]) - txt);
        CHECK(s0 >= 0 && s0 <= 25); /* 30 train tokens, windows of 5 */
        hit[s0] = 1;
    }
    for (int i = 0; i < 26; i++) CHECK_MSG(hit[i], "start %d never drawn in 256 rows", i);
    ct_text_dataset_free(&small);
    free(x);
    ct_text_dataset_free(&ds);
    ct_tokenizer_free(t);
    CHECK(in_use(ctx) == 0);
    ct_context_free(ctx);
}

TEST(eval_windows) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_tokenizer *t;
    CHECK_OK(ctx, ct_tokenizer_byte(ctx, &t));
    ct_text_dataset ds;
    const int64_t T = 100;
    CHECK_OK(ctx, ct_text_dataset_load(ctx, t, MOBY, 0.1, T, &ds));
    int64_t n;
    const int32_t *v = ct_text_split_tokens(&ds, CT_SPLIT_VAL, &n);
    int64_t w = ct_text_eval_windows(&ds, CT_SPLIT_VAL, T);
    CHECK(w == (n - 1) / T && w > 0);
    int32_t *x = malloc(2 * 64 * T * sizeof(int32_t)), *y = x + 64 * T;
    int64_t seen = 0, got;
    for (int64_t first = 0;; first += got) {
        CHECK_OK(ctx, ct_text_eval_batch(&ds, CT_SPLIT_VAL, T, first, 64, x, y, &got));
        if (!got) break;
        for (int64_t r = 0; r < got; r++)
            for (int64_t i = 0; i < T; i++) {
                int64_t k = (first + r) * T + i;
                CHECK(x[r * T + i] == v[k] && y[r * T + i] == v[k + 1]);
            }
        seen += got;
    }
    CHECK(seen == w);
    CHECK_OK(ctx, ct_text_eval_batch(&ds, CT_SPLIT_VAL, T, w + 5, 64, x, y, &got));
    CHECK(got == 0);
    free(x);
    ct_text_dataset_free(&ds);
    ct_tokenizer_free(t);
    CHECK(in_use(ctx) == 0);
    ct_context_free(ctx);
}

TEST(mlm_masking) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_tokenizer *t;
    CHECK_OK(ctx, ct_tokenizer_byte(ctx, &t));
    ct_text_dataset ds;
    const int64_t B = 64, T = 128, steps = 40, V = 256;
    const int32_t mask = (int32_t)V;
    CHECK_OK(ctx, ct_text_dataset_load(ctx, t, MOBY, 0.1, T, &ds));
    size_t bt = (size_t)(B * T);
    int32_t *in = malloc(5 * bt * sizeof(int32_t)), *lab = in + bt, *kv = lab + bt, *in2 = kv + bt, *lab2 = in2 + bt;
    int64_t total = 0, sel = 0, nmask = 0, nkeep = 0, nrand = 0;
    int64_t nt;
    const int32_t *tr = ct_text_split_tokens(&ds, CT_SPLIT_TRAIN, &nt);
    int32_t *orig = malloc(T * sizeof(int32_t));
    for (int64_t st = 0; st < steps; st++) {
        memset(kv, 0, bt * sizeof(int32_t));
        CHECK_OK(ctx, ct_text_mlm_batch(&ds, CT_SPLIT_TRAIN, B, T, mask, 9, (uint64_t)st, in, lab, kv));
        for (size_t i = 0; i < bt; i++) {
            CHECK(kv[i] == 1);
            CHECK(in[i] >= 0 && (in[i] < V || in[i] == mask));
            total++;
            if (lab[i] == CT_TEXT_IGNORE_LABEL) continue; /* unselected: input is the token (checked below) */
            CHECK(lab[i] >= 0 && lab[i] < V);
            sel++;
            if (in[i] == mask) nmask++;
            else if (in[i] == lab[i]) nkeep++;
            else nrand++;
        }
        /* the original window (label where selected, input elsewhere) is in the split */
        if (st < 4)
            for (int64_t r = 0; r < 4; r++) {
                for (int64_t i = 0; i < T; i++) {
                    int64_t o = r * T + i;
                    orig[i] = lab[o] == CT_TEXT_IGNORE_LABEL ? in[o] : lab[o];
                    CHECK(lab[o] != CT_TEXT_IGNORE_LABEL || in[o] != mask);
                }
                CHECK_MSG(occurs(tr, nt, orig, T), "step %lld row %lld: the window is not in the split",
                          (long long)st, (long long)r);
            }
    }
    /* Binomial tolerances of 5 standard deviations (a false failure has
     * probability < 1e-6 per check): N = 327680 positions give sd 0.0006 for
     * the selected fraction; ~49000 selected give sd 0.0018 for the mask
     * share and 0.0014 for random / unchanged. A random id equals the token
     * with p = 1/V, so "unchanged" expects 0.1 + 0.1/V. */
    double ps = (double)sel / (double)total, pm = (double)nmask / (double)sel, pk = (double)nkeep / (double)sel,
           pr = (double)nrand / (double)sel;
    double sd_s = sqrt(0.15 * 0.85 / (double)total), sd_m = sqrt(0.8 * 0.2 / (double)sel),
           sd_r = sqrt(0.1 * 0.9 / (double)sel);
    double ek = 0.1 + 0.1 / (double)V, er = 0.1 - 0.1 / (double)V;
    printf("  note: MLM over %lld positions: selected %.4f (0.15 +- %.4f), of them mask %.4f, random %.4f, "
           "unchanged %.4f\n",
           (long long)total, ps, 5 * sd_s, pm, pr, pk);
    CHECK(fabs(ps - 0.15) < 5 * sd_s);
    CHECK(fabs(pm - 0.8) < 5 * sd_m);
    CHECK(fabs(pr - er) < 5 * sd_r);
    CHECK(fabs(pk - ek) < 5 * sd_r);
    /* determinism and key_valid NULL */
    CHECK_OK(ctx, ct_text_mlm_batch(&ds, CT_SPLIT_TRAIN, B, T, mask, 9, 3, in, lab, kv));
    CHECK_OK(ctx, ct_text_mlm_batch(&ds, CT_SPLIT_TRAIN, B, T, mask, 9, 3, in2, lab2, NULL));
    CHECK(!memcmp(in, in2, bt * sizeof(int32_t)) && !memcmp(lab, lab2, bt * sizeof(int32_t)));
    CHECK_OK(ctx, ct_text_mlm_batch(&ds, CT_SPLIT_TRAIN, B, T, mask, 9, 4, in2, lab2, NULL));
    CHECK(memcmp(lab, lab2, bt * sizeof(int32_t)) != 0);
    CHECK(ct_text_mlm_batch(&ds, CT_SPLIT_TRAIN, B, T, -1, 9, 3, in, lab, kv) == CT_E_INVALID_ARG);
    CHECK(strstr(ct_context_last_error(ctx), "vocab_size"));
    /* a window may end at the split's last token (MLM windows have T tokens) */
    ct_text_dataset small;
    CHECK_OK(ctx, ct_text_dataset_from_text(ctx, t, "abcdefghijklmnopqrst", 20, 0.5, 9, &small));
    CHECK_OK(ctx, ct_text_mlm_batch(&small, CT_SPLIT_VAL, 4, 10, mask, 1, 0, in, lab, kv));
    CHECK(ct_text_mlm_batch(&small, CT_SPLIT_VAL, 4, 11, mask, 1, 0, in, lab, kv) == CT_E_INVALID_ARG);
    ct_text_dataset_free(&small);
    free(orig);
    free(in);
    ct_text_dataset_free(&ds);
    ct_tokenizer_free(t);
    CHECK(in_use(ctx) == 0);
    ct_context_free(ctx);
}

TEST_MAIN(T(byte_roundtrip_moby), T(char_roundtrip_moby), T(char_and_decode_errors), T(gpt2_golden),
          T(gpt2_small_and_bad_files), T(split_sizes), T(lm_windows), T(eval_windows), T(mlm_masking))
