/* tests/fuzz/fuzz_bpe.c - GPT-2 BPE files (src/data/bpe.c through
 * ct_tokenizer_gpt2_load): the input is encoder.json, a NUL byte,
 * vocab.bpe, a NUL byte and a text (a missing part is empty), written to
 * scratch files. Invariants: a failure is CT_E_CORRUPT, CT_E_IO or
 * CT_E_OOM with a message; a tokenizer that loads encodes the text into
 * ids inside its vocabulary that decode back to the same bytes (byte-level
 * BPE is lossless), and never into more ids than bytes; nothing is left
 * allocated. */
#include <stdlib.h>
#include <string.h>

#include "common.h"

/* the next part of data[*pos..size) up to a NUL byte (or the end) */
static const uint8_t *part(const uint8_t *data, size_t size, size_t *pos, size_t *len) {
    const uint8_t *p = data + *pos;
    const uint8_t *z = *pos < size ? memchr(p, 0, size - *pos) : NULL;
    *len = z ? (size_t)(z - p) : size - *pos;
    *pos += *len + (z != NULL);
    return p;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t pos = 0, n_enc, n_bpe, n_text;
    const uint8_t *enc = part(data, size, &pos, &n_enc), *bpe = part(data, size, &pos, &n_bpe),
                  *text = part(data, size, &pos, &n_text);
    const char *ep = fuzz_write(0, "encoder.json", enc, n_enc), *bp = fuzz_write(1, "vocab.bpe", bpe, n_bpe);
    size_t mem = fuzz_bytes_in_use();
    ct_context *ctx = fuzz_ctx();
    ct_tokenizer *t = NULL;
    ct_status s = ct_tokenizer_gpt2_load(ctx, ep, bp, &t);
    if (s != CT_OK) {
        fuzz_check_error(s);
        FUZZ_CHECK(s == CT_E_CORRUPT || s == CT_E_IO || s == CT_E_OOM, "bad BPE files are corrupt");
        FUZZ_CHECK(t == NULL, "no tokenizer on failure");
        fuzz_check_no_leak(mem);
        return 0;
    }
    int64_t vocab = ct_tokenizer_vocab_size(t);
    fuzz_note("bpe: loaded, vocabulary %lld, text %zu bytes", (long long)vocab, n_text);
    FUZZ_CHECK(vocab >= 256 && ct_tokenizer_kind_of(t) == CT_TOK_GPT2, "a GPT-2 tokenizer has the 256 bytes");
    int32_t *ids = NULL;
    int64_t n = 0;
    s = ct_tokenizer_encode_alloc(t, text, n_text, &ids, &n);
    FUZZ_CHECK(s == CT_OK, "any text encodes");
    FUZZ_CHECK(n >= 0 && (size_t)n <= n_text, "never more ids than bytes");
    for (int64_t i = 0; i < n; i++) FUZZ_CHECK(ids[i] >= 0 && ids[i] < vocab, "ids inside the vocabulary");
    char *back = NULL;
    size_t len = 0;
    s = ct_tokenizer_decode_alloc(t, ids, n, &back, &len);
    FUZZ_CHECK(s == CT_OK, "the ids decode");
    FUZZ_CHECK(len == n_text && !memcmp(back, text, n_text), "decode(encode(text)) == text");
    ct_free(ctx, back);
    ct_free(ctx, ids);
    ct_tokenizer_free(t);
    fuzz_check_no_leak(mem);
    return 0;
}
