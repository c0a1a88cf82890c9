/* tests/fuzz/fuzz_idx.c - IDX files (src/data/idx.c), plain and gzipped,
 * through ct_idx_load on arbitrary bytes written to a scratch file. An
 * input that is not gzip is also loaded gzipped (compressed here), and
 * both loads must agree: same status, same shape and bytes. When the input
 * has the shape of an MNIST image file it is also loaded as a dataset
 * beside a label file cut from its own bytes (ct_dataset_load_idx).
 * Invariants: a failure is CT_E_CORRUPT, CT_E_IO or CT_E_OOM (the fuzz
 * context's memory budget: a header may promise 2^31 bytes) with a
 * message; a load has 1..4 dims whose product is numel; nothing is left
 * allocated. */
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "common.h"

/* data gzipped into a new buffer (free); NULL when zlib fails */
static unsigned char *gzip(const uint8_t *data, size_t size, size_t *out_size) {
    z_stream z;
    memset(&z, 0, sizeof z);
    /* a small window and memory level: the allocations stay small (ASan maps big ones afresh) */
    if (deflateInit2(&z, 1, Z_DEFLATED, 9 + 16, 1, Z_DEFAULT_STRATEGY) != Z_OK) return NULL;
    uLong cap = deflateBound(&z, (uLong)size) + 32;
    unsigned char *out = malloc(cap);
    if (out) {
        z.next_in = (Bytef *)data;
        z.avail_in = (uInt)size;
        z.next_out = out;
        z.avail_out = (uInt)cap;
        if (deflate(&z, Z_FINISH) != Z_STREAM_END) {
            free(out);
            out = NULL;
        }
    }
    *out_size = z.total_out;
    deflateEnd(&z);
    return out;
}

static ct_status load(const char *path, ct_idx *idx) {
    ct_context *ctx = fuzz_ctx();
    ct_status s = ct_idx_load(ctx, path, idx);
    if (s != CT_OK) {
        fuzz_check_error(s);
        FUZZ_CHECK(s == CT_E_CORRUPT || s == CT_E_IO || s == CT_E_OOM, "a bad IDX file is corrupt");
        FUZZ_CHECK(idx->data == NULL && idx->numel == 0, "nothing loaded on failure");
        return s;
    }
    fuzz_note("idx: %s: %d dims, %lld bytes", path, idx->ndim, (long long)idx->numel);
    FUZZ_CHECK(idx->ndim >= 1 && idx->ndim <= 4 && idx->data, "1..4 dims");
    int64_t numel = 1;
    for (int d = 0; d < idx->ndim; d++) {
        FUZZ_CHECK(idx->shape[d] > 0, "dims > 0");
        numel *= idx->shape[d];
    }
    FUZZ_CHECK(numel == idx->numel, "numel is the product of the dims");
    volatile uint8_t sum = 0; /* every byte is readable (ASan) */
    for (int64_t i = 0; i < idx->numel; i++) sum += idx->data[i];
    (void)sum;
    return s;
}

/* images: the input as train-images-idx3-ubyte; labels: the idx1 header for
 * n = the images' count and n bytes of the input's data as labels */
static void dataset(const uint8_t *data, size_t size) {
    if (size < 16 || data[2] != 0x08 || data[3] != 3) return;
    uint32_t n = (uint32_t)data[4] << 24 | (uint32_t)data[5] << 16 | (uint32_t)data[6] << 8 | data[7];
    if (n == 0 || n > size - 16) return;
    unsigned char *lab = malloc(8 + (size_t)n);
    if (!lab) return;
    memcpy(lab, "\0\0\x08\x01", 4);
    memcpy(lab + 4, data + 4, 4);
    for (uint32_t i = 0; i < n; i++) lab[8 + i] = data[16 + i] % 11; /* 10 is out of range */
    fuzz_write(1, "train-images-idx3-ubyte", data, size);
    fuzz_write(2, "train-labels-idx1-ubyte", lab, 8 + (size_t)n);
    free(lab);
    ct_dataset ds;
    ct_context *ctx = fuzz_ctx();
    ct_status s = ct_dataset_load_idx(ctx, fuzz_dir(), "train", 0.1307f, 0.3081f, &ds);
    if (s != CT_OK) {
        fuzz_check_error(s);
        FUZZ_CHECK(s == CT_E_CORRUPT || s == CT_E_IO || s == CT_E_OOM, "a bad dataset is corrupt");
        return;
    }
    fuzz_note("idx: a dataset of %lld images", (long long)ds.n);
    FUZZ_CHECK(ds.n == n && ds.c == 1 && ds.h > 0 && ds.w > 0, "the images' shape");
    FUZZ_CHECK(ds.n_classes >= 1 && ds.n_classes <= 10, "labels 0..9");
    for (int64_t i = 0; i < ds.n; i++) FUZZ_CHECK(ds.labels[i] >= 0 && ds.labels[i] < ds.n_classes, "a label");
    ct_dataset_free(ctx, &ds);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t mem = fuzz_bytes_in_use();
    const char *path = fuzz_write(0, "fuzz-idx", data, size);
    ct_idx a, b;
    ct_status sa = load(path, &a);
    if (!(size >= 2 && data[0] == 0x1f && data[1] == 0x8b)) {
        size_t gz_size = 0;
        unsigned char *gz = gzip(data, size, &gz_size);
        if (gz) {
            path = fuzz_write(0, "fuzz-idx.gz", gz, gz_size);
            free(gz);
            ct_status sb = load(path, &b);
            /* a plain file too short for its header is E70002 before any allocation; the gzipped one can
             * only find out by reading, so a header over the fuzz context's budget is E60003 there */
            FUZZ_CHECK(sa == sb || (sa == CT_E_CORRUPT && sb == CT_E_OOM), "plain and gzipped: the same status");
            if (sa == CT_OK && sb == CT_OK) {
                FUZZ_CHECK(a.ndim == b.ndim && !memcmp(a.shape, b.shape, sizeof a.shape) && a.numel == b.numel &&
                               !memcmp(a.data, b.data, (size_t)a.numel),
                           "plain and gzipped: the same array");
            }
            if (sb == CT_OK) ct_idx_free(fuzz_ctx(), &b);
        }
    }
    if (sa == CT_OK) ct_idx_free(fuzz_ctx(), &a);
    dataset(data, size);
    fuzz_check_no_leak(mem);
    return 0;
}
