/* tests/fuzz/fuzz_safetensors.c - the safetensors reader (src/io/
 * safetensors.c: ct_st_read, ct_st_match, ct_st_meta_str) on arbitrary
 * bytes written to a scratch file. The expected tensors are those of
 * `ctrain train --hidden 1` (an MLP 784-1-10, the seed corpus's
 * model.safetensors). Invariants: a failure is CT_E_CORRUPT, CT_E_IO or
 * CT_E_UNSUPPORTED with a message; a file that reads has its data inside
 * the buffer (every matched tensor is copied out, under ASan), reads again
 * when its checksum is required exactly when it carries a good one, and a
 * match failure is CT_E_CONFIG or CT_E_CORRUPT. */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "io/safetensors.h"

static const struct {
    const char *name;
    int ndim;
    int64_t shape[2];
} k_want[] = {
    {"fc1.weight", 2, {1, 784}},
    {"fc1.bias", 1, {1}},
    {"fc2.weight", 2, {10, 1}},
    {"fc2.bias", 1, {10}},
};
#define N_WANT ((int)(sizeof k_want / sizeof k_want[0]))

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_write(0, "model.safetensors", data, size);
    ct_context *ctx = fuzz_ctx();
    ct_st_file f;
    ct_status s = ct_st_read(ctx, path, 0, &f);
    if (s != CT_OK) {
        fuzz_check_error(s);
        FUZZ_CHECK(s == CT_E_CORRUPT || s == CT_E_IO || s == CT_E_UNSUPPORTED, "a bad file is corrupt or unsupported");
        return 0;
    }
    fuzz_note("safetensors: read, %d tensors, checksum %s", f.n_tensors, f.has_crc ? "good" : "absent");
    FUZZ_CHECK(f.size == size && f.data_off <= size && f.data_off + f.data_size == size, "the data inside the file");
    FUZZ_CHECK(f.header != NULL && f.n_tensors >= 0, "a header");
    const char *keys[] = {"format", "ctrain_format", "ctrain_version", "step", "ctrain_crc32"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const char *v = ct_st_meta_str(&f, keys[i]);
        if (v) FUZZ_CHECK(strlen(v) < size, "metadata from the file");
    }

    ct_st_tensor want[N_WANT];
    const unsigned char *src[N_WANT];
    memset(want, 0, sizeof want);
    for (int i = 0; i < N_WANT; i++) {
        snprintf(want[i].name, sizeof want[i].name, "%s", k_want[i].name);
        want[i].ndim = k_want[i].ndim;
        want[i].numel = 1;
        for (int d = 0; d < want[i].ndim; d++) {
            want[i].shape[d] = k_want[i].shape[d];
            want[i].numel *= (size_t)k_want[i].shape[d];
        }
    }
    ctx = fuzz_ctx();
    s = ct_st_match(ctx, path, &f, want, N_WANT, src);
    if (s != CT_OK) {
        fuzz_check_error(s);
        FUZZ_CHECK(s == CT_E_CONFIG || s == CT_E_CORRUPT, "another model's file is CT_E_CONFIG");
    } else {
        fuzz_note("safetensors: the tensors match");
        float buf[784];
        for (int i = 0; i < N_WANT; i++) {
            FUZZ_CHECK(src[i] >= f.buf + f.data_off && src[i] + want[i].numel * 4 <= f.buf + f.size,
                       "a tensor inside the file");
            memcpy(buf, src[i], want[i].numel * sizeof(float));
        }
    }
    int had_crc = f.has_crc;
    ct_st_close(&f);

    /* requiring the checksum: the same file reads exactly when it had a good one */
    ctx = fuzz_ctx();
    s = ct_st_read(ctx, path, 1, &f);
    FUZZ_CHECK((s == CT_OK) == (had_crc != 0), "a required checksum is checked");
    if (s == CT_OK) ct_st_close(&f);
    else FUZZ_CHECK(s == CT_E_CORRUPT, "a missing checksum is corruption");
    return 0;
}
