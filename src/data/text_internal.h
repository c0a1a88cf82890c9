/* src/data/text_internal.h - the GPT-2 BPE tables (src/data/bpe.c) as the
 * tokenizer (src/data/text.c) uses them. */
#ifndef CT_DATA_TEXT_INTERNAL_H
#define CT_DATA_TEXT_INTERNAL_H
#include <stddef.h>
#include <stdint.h>
#include "ctrain/text.h"

typedef struct ct_bpe ct_bpe;
/* Loads encoder.json and vocab.bpe (errors as ct_tokenizer_gpt2_load). */
ct_status ct_bpe_load_(ct_context *ctx, const char *encoder_json, const char *vocab_bpe, ct_bpe **out);
void ct_bpe_free_(ct_context *ctx, ct_bpe *b);
int64_t ct_bpe_vocab_(const ct_bpe *b);
/* Encodes text: writes ids while fewer than cap were written (ids may be
 * NULL) and sets *n to the total count. Fails only for memory. */
ct_status ct_bpe_encode_(ct_context *ctx, const ct_bpe *b, const uint8_t *text, size_t len, int32_t *ids,
                         int64_t cap, int64_t *n);
/* Bytes of token `id` (0 <= id < vocab). */
const uint8_t *ct_bpe_token_(const ct_bpe *b, int32_t id, size_t *len);
#endif
