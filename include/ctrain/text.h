/* ctrain/text.h - text data for language models: tokenizers (byte, char,
 * GPT-2 BPE), a tokenized corpus split into train / validation, seeded
 * random LM windows, sequential evaluation windows and BERT-style MLM
 * masking. docs/text-data.md describes the formats and the RNG keys.
 *
 * Every fallible call returns ct_status; the context holds the message.
 * Memory comes from the context allocator. */
#ifndef CTRAIN_TEXT_H
#define CTRAIN_TEXT_H

#include <stddef.h>
#include <stdint.h>
#include "context.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- tokenizers ------------------------------------------------------------ */

typedef enum ct_tokenizer_kind {
    CT_TOK_BYTE = 0, /* id = byte value, vocabulary 256                          */
    CT_TOK_CHAR,     /* id = rank of the byte in a sorted set of distinct bytes  */
    CT_TOK_GPT2      /* GPT-2 byte-level BPE (encoder.json + vocab.bpe)          */
} ct_tokenizer_kind;

typedef struct ct_tokenizer ct_tokenizer;

/* The byte tokenizer (vocabulary 256, identity). */
ct_status ct_tokenizer_byte(ct_context *ctx, ct_tokenizer **out);
/* A char tokenizer whose vocabulary is the sorted set of distinct bytes of
 * `text` (as nanoGPT's shakespeare_char). len must be > 0. */
ct_status ct_tokenizer_char_fit(ct_context *ctx, const void *text, size_t len, ct_tokenizer **out);
/* A char tokenizer from its vocabulary string (as exported by
 * ct_tokenizer_char_vocab): 1..256 bytes, strictly increasing. Error
 * CT_E_INVALID_ARG names the first byte out of order or repeated. */
ct_status ct_tokenizer_char_from_vocab(ct_context *ctx, const void *vocab, size_t len, ct_tokenizer **out);
/* GPT-2 BPE from the two files of the GPT-2 release (scripts/setup.sh puts
 * them in data/text/gpt2/). Errors: CT_E_IO (missing / unreadable, naming
 * the path); CT_E_CORRUPT naming the file and line: encoder.json not JSON,
 * not an object of string -> integer id in [0, 2^31), a duplicate key or id,
 * a key with a character outside GPT-2's 256 byte characters, ids not
 * exactly 0..n-1; vocab.bpe: a merge line without exactly two symbols, a
 * symbol (or the merged symbol) not in encoder.json. */
ct_status ct_tokenizer_gpt2_load(ct_context *ctx, const char *encoder_json, const char *vocab_bpe,
                                 ct_tokenizer **out);
void ct_tokenizer_free(ct_tokenizer *t); /* accepts NULL */

ct_tokenizer_kind ct_tokenizer_kind_of(const ct_tokenizer *t);
const char *ct_tokenizer_kind_name(ct_tokenizer_kind k); /* "byte", "char", "gpt2" */
int64_t ct_tokenizer_vocab_size(const ct_tokenizer *t);
/* Char tokenizer: copies its vocabulary (the byte of id i at [i]) into
 * buf; *len = vocabulary size (<= 256). buf NULL: only *len. A buffer
 * smaller than the vocabulary or another kind: CT_E_INVALID_ARG. */
ct_status ct_tokenizer_char_vocab(const ct_tokenizer *t, uint8_t *buf, size_t cap, size_t *len);

/* Encodes len bytes of text. *n = number of ids of the text. ids NULL:
 * only counts. ids with cap < *n: CT_E_INVALID_ARG (nothing is truncated
 * silently). A text never has more ids than bytes. Char tokenizer: a byte
 * outside the vocabulary is CT_E_INVALID_ARG naming its value, a printable
 * form and its offset. Allocates nothing (GPT-2: a pre-token longer than
 * 256 bytes takes a scratch buffer from the context). */
ct_status ct_tokenizer_encode(const ct_tokenizer *t, const void *text, size_t len, int32_t *ids, int64_t cap,
                              int64_t *n);
/* As encode, into a new buffer of exactly *n ids (at least 1 element),
 * freed with ct_free(ctx, *ids). */
ct_status ct_tokenizer_encode_alloc(const ct_tokenizer *t, const void *text, size_t len, int32_t **ids,
                                    int64_t *n);
/* Decodes n ids into bytes. *len = bytes of the text; out NULL: only
 * counts; cap < *len: CT_E_INVALID_ARG. An id outside [0, vocab) is
 * CT_E_INVALID_ARG naming the id and its position. */
ct_status ct_tokenizer_decode(const ct_tokenizer *t, const int32_t *ids, int64_t n, void *out, size_t cap,
                              size_t *len);
/* As decode, into a new NUL-terminated buffer (*len excludes the NUL),
 * freed with ct_free(ctx, *out). */
ct_status ct_tokenizer_decode_alloc(const ct_tokenizer *t, const int32_t *ids, int64_t n, char **out,
                                    size_t *len);

/* Reads a whole file into a new NUL-terminated buffer (ct_free). CT_E_IO
 * names the path; for files under data/text the advice is to run
 * scripts/setup.sh. */
ct_status ct_text_read_file(ct_context *ctx, const char *path, char **data, size_t *len);

/* ---- a tokenized corpus ------------------------------------------------------ */

#define CT_TEXT_VAL_FRACTION_DEFAULT 0.1

typedef enum ct_text_split { CT_SPLIT_TRAIN = 0, CT_SPLIT_VAL = 1 } ct_text_split;

/* All tokens of a corpus: train = tokens[0, n_train), validation =
 * tokens[n_train, n_tokens) (the last val_fraction of the tokens). */
typedef struct ct_text_dataset {
    ct_context *ctx;
    int32_t *tokens; /* owned, freed by ct_text_dataset_free */
    int64_t n_tokens, n_train, n_val;
    int64_t vocab_size; /* of the tokenizer that made the tokens */
} ct_text_dataset;

/* Tokenizes text with tok and splits it: n_val = floor(n_tokens *
 * val_fraction), val_fraction in (0, 1) (CT_TEXT_VAL_FRACTION_DEFAULT).
 * Either split shorter than context + 1 tokens is CT_E_INVALID_ARG
 * ("corpus shorter than the context", naming both numbers). */
ct_status ct_text_dataset_from_text(ct_context *ctx, const ct_tokenizer *tok, const void *text, size_t len,
                                    double val_fraction, int64_t context, ct_text_dataset *out);
/* Reads `path` (ct_text_read_file) and calls ct_text_dataset_from_text. */
ct_status ct_text_dataset_load(ct_context *ctx, const ct_tokenizer *tok, const char *path, double val_fraction,
                               int64_t context, ct_text_dataset *out);
void ct_text_dataset_free(ct_text_dataset *ds); /* accepts NULL / zeroed */
/* Tokens of a split (pointer into ds->tokens) and their count. */
const int32_t *ct_text_split_tokens(const ct_text_dataset *ds, ct_text_split split, int64_t *n);

/* ---- batches -------------------------------------------------------------------
 * Random windows: row r of the batch of step s starts at an offset drawn
 * from the Philox RNG keyed by (seed, step, r) only, uniform over
 * [0, n_split - context - 1] for LM (windows of context + 1 tokens) and
 * [0, n_split - context] for MLM (windows of context tokens). The same
 * (seed, step) gives the same batch whatever happened before. x, y,
 * input, labels, key_valid are batch * context int32 (row-major). */

/* Language modelling: x = window[0:T], y = window[1:T+1]. */
ct_status ct_text_lm_batch(const ct_text_dataset *ds, ct_text_split split, int64_t batch, int64_t context,
                           uint64_t seed, uint64_t step, int32_t *x, int32_t *y);

/* Sequential evaluation (no randomness): window k of a split starts at
 * token k * context and has context + 1 tokens, so the predicted tokens
 * y of consecutive windows tile the split without overlap.
 * ct_text_eval_windows = (n_split - 1) / context (the tail that does not
 * fill a window is left out). ct_text_eval_batch copies windows
 * first, first + 1, ... (at most batch of them) into x and y; *got is the
 * number copied (0 past the end). */
int64_t ct_text_eval_windows(const ct_text_dataset *ds, ct_text_split split, int64_t context);
ct_status ct_text_eval_batch(const ct_text_dataset *ds, ct_text_split split, int64_t context, int64_t first,
                             int64_t batch, int32_t *x, int32_t *y, int64_t *got);

/* BERT masked language modelling over random windows of T = context
 * tokens. Each position is selected with p = 0.15; a selected position has
 * label = its token and input = mask_id with p = 0.8, a random id in
 * [0, ds->vocab_size) with p = 0.1, its token with p = 0.1; an unselected
 * position has label = -100 (CT_TEXT_IGNORE_LABEL) and input = its token.
 * All draws come from the Philox RNG keyed by (seed, step, row, position).
 * key_valid (may be NULL) is all ones (no padding: windows never cross the
 * split's end). mask_id >= 0; for byte / char tokenizers the caller
 * reserves mask_id = vocab_size, i.e. the model's vocabulary is the
 * tokenizer's + 1; any id >= 0 is accepted (e.g. a reserved GPT-2 id). */
#define CT_TEXT_IGNORE_LABEL (-100)
#define CT_TEXT_MLM_SELECT_P 0.15
#define CT_TEXT_MLM_MASK_P 0.8   /* of the selected */
#define CT_TEXT_MLM_RANDOM_P 0.1 /* of the selected; the rest stay unchanged */
ct_status ct_text_mlm_batch(const ct_text_dataset *ds, ct_text_split split, int64_t batch, int64_t context,
                            int32_t mask_id, uint64_t seed, uint64_t step, int32_t *input, int32_t *labels,
                            int32_t *key_valid);

/* ---- variable-length documents (src/data/text_docs.c) -----------------------
 * A corpus cut into documents, each tokenized on its own: paragraphs
 * (separated by blank lines), lines, or sentences (ending at '.', '!' or
 * '?' before whitespace, or at a paragraph break); whitespace around each is
 * trimmed. A document longer than max_len tokens is cut into pieces of
 * max_len (and a last shorter one); pieces shorter than min_len are dropped.
 * The last floor(n_docs * val_fraction) documents are the validation split.
 * Each split is ordered by (length, index); training batches draw a length
 * bucket (n_buckets equal parts of the sorted train documents, uniform) and
 * then every row uniformly from it, all from the Philox RNG keyed by (seed,
 * key, row), so the rows of a batch have similar lengths. */
typedef enum ct_text_doc_kind { CT_TEXT_DOC_PARAGRAPHS = 0, CT_TEXT_DOC_LINES, CT_TEXT_DOC_SENTENCES } ct_text_doc_kind;
typedef struct ct_text_docs {
    ct_context *ctx;
    int32_t *tokens;          /* every piece's tokens back to back (owned)            */
    int64_t *off, *len;       /* piece i is tokens[off[i], off[i] + len[i])           */
    int64_t n_tokens, n_docs; /* pieces ("documents" from here on)                    */
    int64_t n_train;          /* [0, n_train) train, [n_train, n_docs) validation      */
    int64_t *order;           /* train then validation documents, each by (length, index) */
    int n_buckets;            /* min(n_buckets, n_train)                              */
    int64_t max_len, vocab_size;
} ct_text_docs;
/* Fewer than one document in either split is CT_E_INVALID_ARG. */
ct_status ct_text_docs_from_text(ct_context *ctx, const ct_tokenizer *tok, const void *text, size_t len,
                                 ct_text_doc_kind kind, int64_t min_len, int64_t max_len, double val_fraction,
                                 int n_buckets, ct_text_docs *out);
void ct_text_docs_free(ct_text_docs *d); /* accepts NULL / zeroed */
/* The `batch` training documents of (seed, key) into docs (one bucket). */
void ct_text_docs_pick(const ct_text_docs *d, int64_t batch, uint64_t seed, uint64_t key, int64_t *docs);
/* Validation documents first, first + 1, ... (shortest first), at most
 * batch of them, into docs; returns how many (0 past the end). */
int64_t ct_text_docs_val(const ct_text_docs *d, int64_t first, int64_t batch, int64_t *docs);
/* The sequence length of a batch of these documents: the longest (minus 1
 * for LM, lm = 1: inputs predict the next token), rounded up to a multiple
 * of `multiple`, at most cap. */
int64_t ct_text_docs_seq_len(const ct_text_docs *d, const int64_t *docs, int64_t n, int lm, int64_t multiple,
                             int64_t cap);
/* LM rows (n, T): x = doc[0:L], y = doc[1:L+1], L = min(len - 1, T); the
 * padding after L has x = 0 and y = CT_TEXT_IGNORE_LABEL. */
void ct_text_docs_lm(const ct_text_docs *d, const int64_t *docs, int64_t n, int64_t T, int32_t *x, int32_t *y);
/* MLM rows (n, T) of L = min(len, T) tokens, masked as ct_text_mlm_batch
 * with draws keyed by (seed, key, row, position); padding: input 0, label
 * CT_TEXT_IGNORE_LABEL, key_valid 0 (1 inside the document). */
void ct_text_docs_mlm(const ct_text_docs *d, const int64_t *docs, int64_t n, int64_t T, int32_t mask_id,
                      uint64_t seed, uint64_t key, int32_t *input, int32_t *labels, int32_t *key_valid);

#ifdef __cplusplus
}
#endif
#endif
