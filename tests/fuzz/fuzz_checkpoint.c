/* tests/fuzz/fuzz_checkpoint.c - the training-state file of a checkpoint
 * (src/io/checkpoint.c: train_state.safetensors read by ct_checkpoint_load
 * without a plan, as `ctrain train --resume` first reads it; the metadata
 * parser, the loss-scale history, the stored recipe) on arbitrary bytes.
 * The file's ctrain_crc32 is recomputed before the file is written (as
 * fuzzers of PNG fix chunk CRCs), so mutations reach the parsers behind
 * the checksum. Invariants: a failure is CT_E_CORRUPT, CT_E_UNSUPPORTED or
 * CT_E_IO with a message; a state that loads has step, epoch and batch >= 0,
 * at most CT_SCALER_HISTORY loss-scale events and a terminated recipe,
 * which parses as a recipe or fails with CT_E_CONFIG. */
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "common.h"

#define CRC_KEY "\"ctrain_crc32\":\""

/* Writes the CRC32 of the whole file (with its own 8 hex digits read as
 * "00000000") into the header's ctrain_crc32, when the header has one. */
static void fix_crc(unsigned char *b, size_t n) {
    if (n < 8) return;
    uint64_t hl;
    memcpy(&hl, b, 8);
    size_t end = hl > n - 8 ? n : 8 + (size_t)hl, kl = strlen(CRC_KEY);
    for (size_t i = 8; i + kl + 8 <= end; i++) {
        if (memcmp(b + i, CRC_KEY, kl)) continue;
        unsigned char *hex = b + i + kl;
        memset(hex, '0', 8);
        uLong crc = crc32(0L, b, (uInt)n);
        char tmp[9];
        snprintf(tmp, sizeof tmp, "%08lx", (unsigned long)crc);
        memcpy(hex, tmp, 8);
        return;
    }
}

static ct_train_state g_st; /* ~30 KB */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > ((size_t)1 << 30)) return 0;
    unsigned char *b = malloc(size ? size : 1);
    if (!b) return 0;
    memcpy(b, data, size);
    fix_crc(b, size);
    fuzz_write(0, "train_state.safetensors", b, size);
    free(b);
    size_t mem = fuzz_bytes_in_use();
    ct_context *ctx = fuzz_ctx();
    ct_status s = ct_checkpoint_load(ctx, fuzz_dir(), NULL, NULL, &g_st);
    fuzz_check_no_leak(mem);
    if (s != CT_OK) {
        fuzz_check_error(s);
        FUZZ_CHECK(s == CT_E_CORRUPT || s == CT_E_UNSUPPORTED || s == CT_E_IO, "a bad state file is corrupt");
        return 0;
    }
    fuzz_note("checkpoint: step %lld, schedule %d, early stop %d, scaler %d (%d events), recipe %zu bytes",
              (long long)g_st.step, g_st.has_schedule, g_st.has_early_stop, g_st.has_scaler,
              g_st.has_scaler ? g_st.scaler.n_history : 0, strlen(g_st.recipe_json));
    FUZZ_CHECK(g_st.step >= 0 && g_st.epoch >= 0 && g_st.batch_in_epoch >= 0, "step, epoch, batch >= 0");
    FUZZ_CHECK(!g_st.has_scaler || (g_st.scaler.n_history >= 0 && g_st.scaler.n_history <= CT_SCALER_HISTORY),
               "the loss-scale history fits its ring");
    FUZZ_CHECK(memchr(g_st.recipe_json, 0, sizeof g_st.recipe_json) != NULL, "a terminated recipe");
    if (g_st.recipe_json[0]) { /* as --resume does */
        ct_recipe r;
        ct_recipe_default(&r);
        ctx = fuzz_ctx();
        s = ct_recipe_parse_json(ctx, g_st.recipe_json, &r);
        if (s != CT_OK) {
            fuzz_check_error(s);
            FUZZ_CHECK(s == CT_E_CONFIG, "a bad stored recipe is CT_E_CONFIG");
        }
    }
    return 0;
}
