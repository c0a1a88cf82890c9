/* tests/test_data.c - IDX reading (plain and gzipped), error reporting,
 * dataset normalization, and the seeded batch loader. Small IDX files are
 * written into a fresh directory under /tmp, removed afterwards. */
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "test.h"

#define CT_TEST_MIN(a, b) ((a) < (b) ? (a) : (b))

/* ---- helpers ---------------------------------------------------------------- */





/* Raw bytes to a file, gzip-compressed when gz. */
static void write_bytes(const char *path, const void *buf, size_t n, int gz) {
    if (gz) {
        gzFile f = gzopen(path, "wb9");
        if (!f || gzwrite(f, buf, (unsigned)n) != (int)n || gzclose(f) != Z_OK) {
            fprintf(stderr, "cannot write %s\n", path);
            exit(2);
        }
    } else {
        test_write_file(path, buf, n);
    }
}

static size_t read_bytes(const char *path, unsigned char **out) {
    FILE *f = fopen(path, "rb");
    if (!f) exit(2);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    *out = malloc((size_t)n);
    if (fread(*out, 1, (size_t)n, f) != (size_t)n) exit(2);
    fclose(f);
    return (size_t)n;
}

/* Serializes an IDX file (U8 unless type given) into a malloc'd buffer. */
static unsigned char *idx_bytes(int type, int ndim, const uint32_t *dims, const uint8_t *data, size_t *len) {
    size_t numel = 1;
    for (int d = 0; d < ndim; d++) numel *= dims[d];
    if (!data) numel = 0;
    size_t n = 4 + 4 * (size_t)ndim + numel;
    unsigned char *b = malloc(n);
    b[0] = 0;
    b[1] = 0;
    b[2] = (unsigned char)type;
    b[3] = (unsigned char)ndim;
    for (int d = 0; d < ndim; d++) {
        b[4 + 4 * d] = (unsigned char)(dims[d] >> 24);
        b[5 + 4 * d] = (unsigned char)(dims[d] >> 16);
        b[6 + 4 * d] = (unsigned char)(dims[d] >> 8);
        b[7 + 4 * d] = (unsigned char)dims[d];
    }
    if (data) memcpy(b + 4 + 4 * ndim, data, numel);
    *len = n;
    return b;
}

static void write_idx(const char *path, int ndim, const uint32_t *dims, const uint8_t *data, int gz) {
    size_t n;
    unsigned char *b = idx_bytes(0x08, ndim, dims, data, &n);
    write_bytes(path, b, n, gz);
    free(b);
}

static uint8_t *pattern(size_t n, unsigned seed) {
    uint8_t *d = malloc(n ? n : 1);
    for (size_t i = 0; i < n; i++) d[i] = (uint8_t)(ct_rand_uniform(seed, 5, i) * 256.0f);
    return d;
}

static size_t in_use(ct_context *ctx) {
    ct_mem_stats m;
    ct_context_mem_stats(ctx, &m);
    return m.bytes_in_use;
}

static int idx_is_empty(const ct_idx *x) { return x->data == NULL && x->ndim == 0 && x->numel == 0; }
static int ds_is_empty(const ct_dataset *d) { return d->images == NULL && d->labels == NULL && d->n == 0; }

/* Expects ct_idx_load(path) to fail with `want`, leave out empty and memory free. */
#define CHECK_IDX_FAILS(ctx, path, want)                                                     \
    do {                                                                                     \
        ct_idx x_;                                                                           \
        ct_status s_ = ct_idx_load(ctx, path, &x_);                                          \
        CHECK_MSG(s_ == (want), "%s: got %s (%s)", path, ct_status_name(s_),                 \
                  ct_context_last_error(ctx));                                               \
        CHECK(idx_is_empty(&x_));                                                            \
        CHECK(in_use(ctx) == 0);                                                             \
        CHECK_MSG(strstr(ct_context_last_error(ctx), path) != NULL, "message lacks path: %s", \
                  ct_context_last_error(ctx));                                               \
    } while (0)

/* ---- IDX reading -------------------------------------------------------------- */

TEST(idx_roundtrip_plain_and_gzip) {
    ct_context *ctx = test_ctx(-1, 1);
    test_tmp_make("data");
    static const uint32_t dims[4][4] = {{37, 0, 0, 0}, {5, 7, 0, 0}, {3, 4, 5, 0}, {2, 3, 4, 5}};
    for (int gz = 0; gz < 2; gz++)
        for (int nd = 1; nd <= 4; nd++) {
            size_t numel = 1;
            for (int d = 0; d < nd; d++) numel *= dims[nd - 1][d];
            uint8_t *data = pattern(numel, (unsigned)(nd + 10 * gz));
            const char *p = test_tmp_path(gz ? "a.gz" : "a");
            write_idx(p, nd, dims[nd - 1], data, gz);
            ct_idx x;
            CHECK_OK(ctx, ct_idx_load(ctx, p, &x));
            CHECK(x.ndim == nd);
            CHECK(x.numel == (int64_t)numel);
            for (int d = 0; d < nd; d++) CHECK(x.shape[d] == dims[nd - 1][d]);
            CHECK(memcmp(x.data, data, numel) == 0);
            ct_idx_free(ctx, &x);
            CHECK(idx_is_empty(&x));
            CHECK(in_use(ctx) == 0);
            free(data);
        }
    /* trailing garbage after the data is ignored, plain and gzipped */
    for (int gz = 0; gz < 2; gz++) {
        uint32_t d[1] = {10};
        uint8_t *data = pattern(10, 3);
        size_t n;
        unsigned char *b = idx_bytes(0x08, 1, d, data, &n);
        unsigned char *b2 = malloc(n + 7);
        memcpy(b2, b, n);
        memcpy(b2 + n, "garbage", 7);
        const char *p = test_tmp_path("trail");
        write_bytes(p, b2, n + 7, gz);
        ct_idx x;
        CHECK_OK(ctx, ct_idx_load(ctx, p, &x));
        CHECK(x.numel == 10 && memcmp(x.data, data, 10) == 0);
        ct_idx_free(ctx, &x);
        free(b);
        free(b2);
        free(data);
    }
    /* non-gzip garbage appended after a complete gzip member is ignored */
    {
        uint32_t d[2] = {30, 40};
        uint8_t *data = pattern(1200, 4);
        const char *p = test_tmp_path("tail.gz");
        write_idx(p, 2, d, data, 1);
        FILE *f = fopen(p, "ab");
        CHECK(f != NULL);
        fputs("this is not gzip data\n", f);
        fclose(f);
        ct_idx x;
        CHECK_OK(ctx, ct_idx_load(ctx, p, &x));
        CHECK(x.numel == 1200 && memcmp(x.data, data, 1200) == 0);
        ct_idx_free(ctx, &x);
        free(data);
    }
    test_tmp_remove();
    ct_context_free(ctx);
}

TEST(idx_missing_file_is_io_error) {
    ct_context *ctx = test_ctx(-1, 1);
    test_tmp_make("data");
    const char *p = test_tmp_path("does-not-exist-idx1-ubyte");
    CHECK_IDX_FAILS(ctx, p, CT_E_IO);
    CHECK(strstr(ct_context_last_error(ctx), "No such file") != NULL);
    /* a directory is not readable as a file */
    CHECK_IDX_FAILS(ctx, test_tmp_dir(), CT_E_IO);
    test_tmp_remove();
    ct_context_free(ctx);
}

TEST(idx_truncated_is_corrupt) {
    ct_context *ctx = test_ctx(-1, 1);
    test_tmp_make("data");
    uint32_t dims[3] = {4, 5, 6};
    uint8_t *data = pattern(120, 9);
    size_t n;
    unsigned char *b = idx_bytes(0x08, 3, dims, data, &n);
    const char *p = test_tmp_path("trunc");
    /* cut in the data, in the dims, in the magic, and an empty file */
    size_t cuts[] = {n - 1, n - 60, 4 + 12, 4 + 5, 3, 0};
    for (int gz = 0; gz < 2; gz++)
        for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
            if (gz && cuts[c] == 0) continue; /* an empty .gz is just an empty file */
            write_bytes(p, b, cuts[c], gz);
            CHECK_IDX_FAILS(ctx, p, CT_E_CORRUPT);
            CHECK(strstr(ct_context_last_error(ctx), "truncated") != NULL);
        }
    /* a plain file whose header promises 1 GiB: truncated, found before the data is allocated (a 1 MiB
     * budget would turn an allocation into CT_E_OOM) */
    {
        ct_context_opts co;
        ct_context_opts_default(&co);
        co.memory_budget = (size_t)1 << 20;
        ct_context *small = NULL;
        CHECK(ct_context_create(&co, &small) == CT_OK);
        uint32_t big[3] = {1024, 1024, 1024};
        size_t bn;
        unsigned char *bb = idx_bytes(0x08, 3, big, NULL, &bn); /* the 16-byte header only */
        unsigned char file[28] = {0};                           /* and 12 data bytes: 28 bytes in all */
        memcpy(file, bb, bn);
        write_bytes(p, file, sizeof file, 0);
        CHECK_IDX_FAILS(small, p, CT_E_CORRUPT);
        CHECK_MSG(strstr(ct_context_last_error(small), "promises 1073741824 data bytes but only 12"), "%s",
                  ct_context_last_error(small));
        free(bb);
        ct_context_free(small);
    }
    /* a gzip file cut short in its compressed stream */
    write_bytes(p, b, n, 1);
    unsigned char *z;
    size_t zn = read_bytes(p, &z);
    size_t zcuts[] = {zn - 1, zn - 4, zn - 8, zn / 2, 12};
    for (size_t c = 0; c < sizeof zcuts / sizeof zcuts[0]; c++) {
        write_bytes(p, z, zcuts[c], 0);
        CHECK_IDX_FAILS(ctx, p, CT_E_CORRUPT);
    }
    free(z);
    free(b);
    free(data);
    test_tmp_remove();
    ct_context_free(ctx);
}

TEST(idx_bad_header_is_corrupt) {
    ct_context *ctx = test_ctx(-1, 1);
    test_tmp_make("data");
    const char *p = test_tmp_path("bad");
    uint8_t data[64] = {0};
    size_t n;
    /* bad magic (first two bytes nonzero) */
    uint32_t d1[1] = {8};
    unsigned char *b = idx_bytes(0x08, 1, d1, data, &n);
    b[0] = 0x12;
    b[1] = 0x34;
    for (int gz = 0; gz < 2; gz++) {
        write_bytes(p, b, n, gz);
        CHECK_IDX_FAILS(ctx, p, CT_E_CORRUPT);
        CHECK(strstr(ct_context_last_error(ctx), "magic") != NULL);
    }
    free(b);
    /* unsupported type code (float32) */
    b = idx_bytes(0x0D, 1, d1, data, &n);
    write_bytes(p, b, n, 0);
    CHECK_IDX_FAILS(ctx, p, CT_E_CORRUPT);
    CHECK(strstr(ct_context_last_error(ctx), "0x0D") != NULL);
    free(b);
    /* zero and too many dims */
    b = idx_bytes(0x08, 0, d1, data, &n);
    write_bytes(p, b, n, 0);
    CHECK_IDX_FAILS(ctx, p, CT_E_CORRUPT);
    free(b);
    uint32_t d5[5] = {1, 1, 1, 1, 8};
    b = idx_bytes(0x08, 5, d5, data, &n);
    write_bytes(p, b, n, 0);
    CHECK_IDX_FAILS(ctx, p, CT_E_CORRUPT);
    free(b);
    /* a zero-sized dimension */
    uint32_t dz[3] = {4, 0, 4};
    b = idx_bytes(0x08, 3, dz, NULL, &n);
    write_bytes(p, b, n, 0);
    CHECK_IDX_FAILS(ctx, p, CT_E_CORRUPT);
    free(b);
    /* absurd dims: more than 2^31 elements, including products that overflow 64 bits */
    uint32_t dbig[4][4] = {{65536, 65536, 1, 1},
                           {0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu},
                           {0x80000001u, 1, 1, 1},
                           {2, 2, 0x20000001u, 1}};
    for (int i = 0; i < 4; i++) {
        b = idx_bytes(0x08, 4, dbig[i], NULL, &n);
        write_bytes(p, b, n, 0);
        CHECK_IDX_FAILS(ctx, p, CT_E_CORRUPT);
        CHECK(strstr(ct_context_last_error(ctx), "2^31") != NULL);
        free(b);
    }
    test_tmp_remove();
    ct_context_free(ctx);
}

TEST(idx_corrupt_gzip_is_corrupt) {
    ct_context *ctx = test_ctx(-1, 1);
    test_tmp_make("data");
    uint32_t dims[3] = {20, 16, 16};
    size_t numel = 20 * 16 * 16;
    uint8_t *data = pattern(numel, 21);
    for (size_t i = 0; i < numel; i += 3) data[i] = (uint8_t)(i % 7); /* some structure to compress */
    const char *p = test_tmp_path("c.gz");
    write_idx(p, 3, dims, data, 1);
    unsigned char *z;
    size_t zn = read_bytes(p, &z);
    CHECK(zn > 64 && z[0] == 0x1f && z[1] == 0x8b);
    /* flip bytes across the deflate body and the CRC/length trailer */
    int checked = 0;
    for (size_t pos = 10; pos < zn; pos += zn / 23 + 1) {
        unsigned char *c = malloc(zn);
        memcpy(c, z, zn);
        c[pos] ^= 0x5A;
        write_bytes(p, c, zn, 0);
        CHECK_IDX_FAILS(ctx, p, CT_E_CORRUPT);
        free(c);
        checked++;
    }
    /* the last byte (length), the CRC, and an unknown compression method */
    size_t spots[] = {zn - 1, zn - 5, 2};
    for (size_t i = 0; i < 3; i++) {
        unsigned char *c = malloc(zn);
        memcpy(c, z, zn);
        c[spots[i]] ^= 0x01;
        write_bytes(p, c, zn, 0);
        CHECK_IDX_FAILS(ctx, p, CT_E_CORRUPT);
        free(c);
    }
    CHECK(checked >= 20);
    /* a gzip magic followed by garbage */
    unsigned char junk[300];
    for (size_t i = 0; i < sizeof junk; i++) junk[i] = (unsigned char)(i * 37 + 11);
    junk[0] = 0x1f;
    junk[1] = 0x8b;
    junk[2] = 8;
    junk[3] = 0;
    write_bytes(p, junk, sizeof junk, 0);
    CHECK_IDX_FAILS(ctx, p, CT_E_CORRUPT);
    free(z);
    free(data);
    test_tmp_remove();
    ct_context_free(ctx);
}

/* ---- datasets ------------------------------------------------------------------ */

static void write_split(const char *split, int64_t n_img, int64_t n_lab, uint32_t h, uint32_t w,
                        const uint8_t *img, const uint8_t *lab, int img_gz, int lab_gz) {
    char name[128];
    uint32_t di[3] = {(uint32_t)n_img, h, w}, dl[1] = {(uint32_t)n_lab};
    snprintf(name, sizeof name, "%s-images-idx3-ubyte%s", split, img_gz ? ".gz" : "");
    write_idx(test_tmp_path(name), 3, di, img, img_gz);
    snprintf(name, sizeof name, "%s-labels-idx1-ubyte%s", split, lab_gz ? ".gz" : "");
    write_idx(test_tmp_path(name), 1, dl, lab, lab_gz);
}

TEST(dataset_load_and_normalize) {
    ct_context *ctx = test_ctx(-1, 1);
    const int64_t N = 7, H = 3, W = 2;
    uint8_t *img = pattern((size_t)(N * H * W), 31);
    img[0] = 0;
    img[1] = 255;
    uint8_t lab[7] = {3, 0, 6, 1, 6, 2, 0};
    const float mean = 0.1307f, stdv = 0.3081f;
    for (int layout = 0; layout < 4; layout++) {
        test_tmp_make("data");
        const char *split = layout & 1 ? "t10k" : "train";
        write_split(split, N, N, (uint32_t)H, (uint32_t)W, img, lab, layout >> 1, layout & 1);
        ct_dataset ds;
        CHECK_OK(ctx, ct_dataset_load_idx(ctx, test_tmp_dir(), split, mean, stdv, &ds));
        CHECK(ds.n == N && ds.c == 1 && ds.h == H && ds.w == W);
        CHECK(ds.n_classes == 7);
        for (int64_t i = 0; i < N; i++) CHECK(ds.labels[i] == lab[i]);
        for (int64_t i = 0; i < N * H * W; i++) {
            double want = ((double)img[i] / 255.0 - mean) / stdv;
            CHECK_MSG(fabs(ds.images[i] - want) < 1e-5, "pixel %lld: %g vs %g", (long long)i,
                      (double)ds.images[i], want);
        }
        CHECK(fabsf(ds.images[0] - (-mean / stdv)) < 1e-6f);
        CHECK(fabsf(ds.images[1] - ((1.0f - mean) / stdv)) < 1e-6f);
        ct_dataset_free(ctx, &ds);
        CHECK(ds_is_empty(&ds));
        CHECK(in_use(ctx) == 0);
        test_tmp_remove();
    }
    /* mean 0, std 1: plain x/255 */
    test_tmp_make("data");
    write_split("train", N, N, (uint32_t)H, (uint32_t)W, img, lab, 0, 0);
    ct_dataset ds;
    CHECK_OK(ctx, ct_dataset_load_idx(ctx, test_tmp_dir(), "train", 0.0f, 1.0f, &ds));
    for (int64_t i = 0; i < N * H * W; i++) CHECK(fabsf(ds.images[i] - img[i] / 255.0f) < 1e-7f);
    ct_dataset_free(ctx, &ds);
    /* plain files are preferred over .gz when both exist */
    uint8_t lab2[7] = {1, 1, 1, 1, 1, 1, 1};
    write_split("train", N, N, (uint32_t)H, (uint32_t)W, img, lab2, 1, 1);
    CHECK_OK(ctx, ct_dataset_load_idx(ctx, test_tmp_dir(), "train", 0.0f, 1.0f, &ds));
    CHECK(ds.labels[0] == 3 && ds.n_classes == 7);
    ct_dataset_free(ctx, &ds);
    /* bad arguments */
    CHECK(ct_dataset_load_idx(ctx, test_tmp_dir(), "test", 0.0f, 1.0f, &ds) == CT_E_INVALID_ARG);
    CHECK(ct_dataset_load_idx(ctx, test_tmp_dir(), "train", 0.0f, 0.0f, &ds) == CT_E_INVALID_ARG);
    CHECK(ds_is_empty(&ds));
    test_tmp_remove();
    CHECK(in_use(ctx) == 0);
    free(img);
    ct_context_free(ctx);
}

TEST(dataset_errors) {
    ct_context *ctx = test_ctx(-1, 1);
    uint8_t img[5 * 4] = {0}, lab[6] = {1, 2, 3, 4, 5, 6};
    ct_dataset ds;
    ct_status s;
    /* count mismatch: names both files */
    test_tmp_make("data");
    write_split("train", 5, 6, 2, 2, img, lab, 0, 1);
    s = ct_dataset_load_idx(ctx, test_tmp_dir(), "train", 0.0f, 1.0f, &ds);
    CHECK_MSG(s == CT_E_CORRUPT, "%s", ct_status_name(s));
    const char *msg = ct_context_last_error(ctx);
    CHECK_MSG(strstr(msg, "train-images-idx3-ubyte") && strstr(msg, "train-labels-idx1-ubyte.gz"), "%s", msg);
    CHECK(ds_is_empty(&ds));
    CHECK(in_use(ctx) == 0);
    test_tmp_remove();
    /* label out of range */
    test_tmp_make("data");
    lab[3] = 10;
    write_split("train", 5, 5, 2, 2, img, lab, 0, 0);
    s = ct_dataset_load_idx(ctx, test_tmp_dir(), "train", 0.0f, 1.0f, &ds);
    CHECK_MSG(s == CT_E_CORRUPT, "%s", ct_status_name(s));
    CHECK(strstr(ct_context_last_error(ctx), "label 10") != NULL);
    CHECK(ds_is_empty(&ds));
    CHECK(in_use(ctx) == 0);
    test_tmp_remove();
    /* missing files */
    test_tmp_make("data");
    s = ct_dataset_load_idx(ctx, test_tmp_dir(), "t10k", 0.0f, 1.0f, &ds);
    CHECK_MSG(s == CT_E_IO, "%s", ct_status_name(s));
    msg = ct_context_last_error(ctx);
    CHECK_MSG(strstr(msg, test_tmp_dir()) && strstr(msg, "t10k-images-idx3-ubyte"), "%s", msg);
    CHECK(ds_is_empty(&ds));
    /* labels missing, images present: images freed again */
    lab[3] = 4;
    write_split("t10k", 5, 5, 2, 2, img, lab, 1, 0);
    unlink(test_tmp_path("t10k-labels-idx1-ubyte"));
    s = ct_dataset_load_idx(ctx, test_tmp_dir(), "t10k", 0.0f, 1.0f, &ds);
    CHECK_MSG(s == CT_E_IO, "%s", ct_status_name(s));
    CHECK(strstr(ct_context_last_error(ctx), "t10k-labels-idx1-ubyte") != NULL);
    CHECK(ds_is_empty(&ds));
    CHECK(in_use(ctx) == 0);
    /* swapped roles: labels file where images are expected */
    unlink(test_tmp_path("t10k-images-idx3-ubyte.gz"));
    uint32_t d1[1] = {5};
    write_idx(test_tmp_path("t10k-images-idx3-ubyte"), 1, d1, lab, 0);
    write_idx(test_tmp_path("t10k-labels-idx1-ubyte"), 1, d1, lab, 0);
    s = ct_dataset_load_idx(ctx, test_tmp_dir(), "t10k", 0.0f, 1.0f, &ds);
    CHECK_MSG(s == CT_E_CORRUPT, "%s", ct_status_name(s));
    CHECK(ds_is_empty(&ds));
    CHECK(in_use(ctx) == 0);
    /* a truncated image file inside a dataset */
    write_bytes(test_tmp_path("t10k-images-idx3-ubyte"), "\0\0\x08\x03\0\0\0\x05", 8, 0);
    s = ct_dataset_load_idx(ctx, test_tmp_dir(), "t10k", 0.0f, 1.0f, &ds);
    CHECK_MSG(s == CT_E_CORRUPT, "%s", ct_status_name(s));
    CHECK(ds_is_empty(&ds));
    CHECK(in_use(ctx) == 0);
    test_tmp_remove();
    ct_context_free(ctx);
}

/* Files bigger than the reader's chunks and zlib's buffer: multi-chunk
 * streaming, and gzip trailer (CRC / length) checks on large direct reads. */
TEST(large_files_stream_and_verify) {
    ct_context *ctx = test_ctx(-1, 1);
    test_tmp_make("data");
    const uint32_t N = 3001, H = 21, W = 20; /* 1.26 MB of pixels */
    size_t numel = (size_t)N * H * W;
    uint8_t *img = pattern(numel, 77);
    for (size_t i = 0; i < numel; i += 2) img[i] = (uint8_t)(i / 5000); /* compressible */
    uint8_t *lab = malloc(N);
    for (uint32_t i = 0; i < N; i++) lab[i] = (uint8_t)(i % 10);
    uint32_t di[3] = {N, H, W}, dl[1] = {N};
    for (int gz = 0; gz < 2; gz++) {
        const char *ip = test_tmp_path(gz ? "train-images-idx3-ubyte.gz" : "train-images-idx3-ubyte");
        const char *lp = test_tmp_path("train-labels-idx1-ubyte");
        write_idx(ip, 3, di, img, gz);
        write_idx(lp, 1, dl, lab, 0);
        ct_idx x;
        CHECK_OK(ctx, ct_idx_load(ctx, ip, &x));
        CHECK(x.numel == (int64_t)numel && memcmp(x.data, img, numel) == 0);
        ct_idx_free(ctx, &x);
        ct_dataset ds;
        CHECK_OK(ctx, ct_dataset_load_idx(ctx, test_tmp_dir(), "train", 0.5f, 0.5f, &ds));
        CHECK(ds.n == N && ds.h == H && ds.w == W && ds.n_classes == 10);
        for (size_t i = 0; i < numel; i++) CHECK(fabsf(ds.images[i] - (img[i] / 255.0f - 0.5f) / 0.5f) < 1e-6f);
        ct_dataset_free(ctx, &ds);
        /* damage the end of the file: flipped CRC or length, or the last byte(s) cut off */
        unsigned char *raw;
        size_t rn = read_bytes(ip, &raw);
        for (int k = 0; k < (gz ? 4 : 1); k++) {
            size_t len = rn;
            unsigned char *c = malloc(rn);
            memcpy(c, raw, rn);
            if (k == 0) len = rn - 1;
            if (k == 1) len = rn - 6;
            if (k == 2) c[rn - 6] ^= 0x10; /* CRC-32 */
            if (k == 3) c[rn - 3] ^= 0x01; /* length */
            write_bytes(ip, c, len, 0);
            free(c);
            CHECK_IDX_FAILS(ctx, ip, CT_E_CORRUPT);
            ct_status s = ct_dataset_load_idx(ctx, test_tmp_dir(), "train", 0.5f, 0.5f, &ds);
            CHECK_MSG(s == CT_E_CORRUPT, "gz %d case %d: %s", gz, k, ct_status_name(s));
            CHECK(strstr(ct_context_last_error(ctx), ip) != NULL);
            CHECK(ds_is_empty(&ds));
            CHECK(in_use(ctx) == 0);
        }
        free(raw);
        unlink(ip);
    }
    free(img);
    free(lab);
    test_tmp_remove();
    ct_context_free(ctx);
}

/* ---- loader ------------------------------------------------------------------ */

/* A synthetic dataset whose sample i has label i and pixels i*1000 + k. */
static void fake_ds(ct_dataset *ds, int64_t n) {
    memset(ds, 0, sizeof *ds);
    ds->n = n;
    ds->c = 1;
    ds->h = 2;
    ds->w = 3;
    ds->n_classes = 10;
    ds->images = malloc((size_t)n * 6 * sizeof(float));
    ds->labels = malloc((size_t)n * sizeof(int32_t));
    for (int64_t i = 0; i < n; i++) {
        ds->labels[i] = (int32_t)i;
        for (int k = 0; k < 6; k++) ds->images[i * 6 + k] = (float)(i * 1000 + k);
    }
}

/* Runs one epoch; writes the sample order into order[] and checks batch
 * sizes, contents and coverage. Returns the number of samples seen, or -1. */
static int64_t run_epoch(ct_loader *l, int64_t n, int64_t batch, int drop_last, int64_t *order) {
    float *img = malloc((size_t)batch * 6 * sizeof(float));
    int32_t *lab = malloc((size_t)batch * sizeof(int32_t));
    char *seen = calloc((size_t)n, 1);
    int64_t total = 0, nb = 0, got = 0;
    for (;;) {
        if (ct_loader_next(l, img, lab, &got) != CT_OK) goto fail;
        if (got == 0) break;
        nb++;
        int64_t want = CT_TEST_MIN(batch, n - total);
        if (got != want) goto fail;
        for (int64_t i = 0; i < got; i++) {
            int32_t s = lab[i];
            if (s < 0 || s >= n || seen[s]) goto fail;
            seen[s] = 1;
            for (int k = 0; k < 6; k++)
                if (img[i * 6 + k] != (float)(s * 1000 + k)) goto fail;
            order[total + i] = s;
        }
        total += got;
    }
    /* stays at the end */
    if (ct_loader_next(l, img, lab, &got) != CT_OK || got != 0) goto fail;
    if (nb != ct_loader_num_batches(l)) goto fail;
    if (drop_last ? total != n / batch * batch : total != n) goto fail;
    free(img);
    free(lab);
    free(seen);
    return total;
fail:
    free(img);
    free(lab);
    free(seen);
    return -1;
}

TEST(loader_covers_each_sample_once) {
    ct_context *ctx = test_ctx(-1, 1);
    const int64_t N = 103;
    ct_dataset ds;
    fake_ds(&ds, N);
    int64_t order[103], first[103];
    int64_t batches[] = {1, 7, 10, 103};
    for (size_t bi = 0; bi < sizeof batches / sizeof batches[0]; bi++)
        for (int shuffle = 0; shuffle < 2; shuffle++)
            for (int drop = 0; drop < 2; drop++) {
                int64_t B = batches[bi];
                ct_loader *l;
                CHECK_OK(ctx, ct_loader_create(ctx, &ds, B, shuffle, drop, 42, &l));
                int64_t want_nb = drop ? N / B : (N + B - 1) / B;
                CHECK(ct_loader_num_batches(l) == want_nb);
                for (uint64_t e = 0; e < 3; e++) {
                    ct_loader_start_epoch(l, e);
                    int64_t got = run_epoch(l, N, B, drop, order);
                    CHECK_MSG(got == (drop ? N / B * B : N), "B %lld shuffle %d drop %d epoch %llu: %lld",
                              (long long)B, shuffle, drop, (unsigned long long)e, (long long)got);
                    if (!shuffle)
                        for (int64_t i = 0; i < got; i++) CHECK(order[i] == i);
                    if (e == 0) memcpy(first, order, sizeof order);
                    else if (shuffle && got > 1) CHECK(memcmp(first, order, (size_t)got * sizeof *order) != 0);
                }
                ct_loader_free(l);
            }
    /* drop_last: 103 = 10*10 + 3, the 3 left over are dropped */
    ct_loader *l;
    CHECK_OK(ctx, ct_loader_create(ctx, &ds, 10, 1, 1, 7, &l));
    CHECK(ct_loader_num_batches(l) == 10);
    CHECK(run_epoch(l, N, 10, 1, order) == 100);
    ct_loader_free(l);
    CHECK_OK(ctx, ct_loader_create(ctx, &ds, 10, 1, 0, 7, &l));
    CHECK(ct_loader_num_batches(l) == 11);
    CHECK(run_epoch(l, N, 10, 0, order) == 103);
    ct_loader_free(l);
    /* bad arguments */
    CHECK(ct_loader_create(ctx, &ds, 0, 1, 0, 7, &l) == CT_E_INVALID_ARG && l == NULL);
    CHECK(ct_loader_create(ctx, &ds, 104, 1, 1, 7, &l) == CT_E_INVALID_ARG && l == NULL);
    CHECK_OK(ctx, ct_loader_create(ctx, &ds, 104, 1, 0, 7, &l)); /* one partial batch */
    CHECK(ct_loader_num_batches(l) == 1);
    CHECK(run_epoch(l, N, 104, 0, order) == 103);
    ct_loader_free(l);
    CHECK(in_use(ctx) == 0);
    free(ds.images);
    free(ds.labels);
    ct_context_free(ctx);
}

TEST(loader_order_depends_on_seed_and_epoch_only) {
    ct_context *ctx = test_ctx(-1, 1);
    const int64_t N = 500, B = 32;
    ct_dataset ds;
    fake_ds(&ds, N);
    static int64_t a[500], b[500], c[500];
    ct_loader *l1, *l2, *l3;
    CHECK_OK(ctx, ct_loader_create(ctx, &ds, B, 1, 0, 1234, &l1));
    CHECK_OK(ctx, ct_loader_create(ctx, &ds, B, 1, 0, 1234, &l2));
    CHECK_OK(ctx, ct_loader_create(ctx, &ds, B, 1, 0, 1235, &l3));
    /* same seed and epoch, reached through different histories */
    ct_loader_start_epoch(l1, 5);
    CHECK(run_epoch(l1, N, B, 0, a) == N);
    for (uint64_t e = 0; e < 5; e++) {
        ct_loader_start_epoch(l2, 9 - e);
        CHECK(run_epoch(l2, N, B, 0, b) == N);
    }
    ct_loader_start_epoch(l2, 5);
    int64_t got;
    /* a half-consumed epoch restarted gives the same order too */
    float img[32 * 6];
    int32_t lab[32];
    CHECK_OK(ctx, ct_loader_next(l2, img, lab, &got));
    ct_loader_start_epoch(l2, 5);
    CHECK(run_epoch(l2, N, B, 0, b) == N);
    CHECK(memcmp(a, b, sizeof a) == 0);
    /* a different epoch gives a different order */
    ct_loader_start_epoch(l2, 6);
    CHECK(run_epoch(l2, N, B, 0, b) == N);
    CHECK(memcmp(a, b, sizeof a) != 0);
    /* a different seed gives a different order */
    ct_loader_start_epoch(l3, 5);
    CHECK(run_epoch(l3, N, B, 0, c) == N);
    CHECK(memcmp(a, c, sizeof a) != 0);
    /* the shuffle actually moves samples: few fixed points */
    int fixed = 0;
    for (int64_t i = 0; i < N; i++) fixed += a[i] == i;
    CHECK_MSG(fixed < 10, "%d fixed points", fixed);
    /* the order does not depend on the batch size */
    ct_loader *l4;
    CHECK_OK(ctx, ct_loader_create(ctx, &ds, 7, 1, 0, 1234, &l4));
    ct_loader_start_epoch(l4, 5);
    CHECK(run_epoch(l4, N, 7, 0, c) == N);
    CHECK(memcmp(a, c, sizeof a) == 0);
    ct_loader_free(l4);
    ct_loader_free(l1);
    ct_loader_free(l2);
    ct_loader_free(l3);
    CHECK(in_use(ctx) == 0);
    free(ds.images);
    free(ds.labels);
    ct_context_free(ctx);
}

TEST(loader_next_does_not_allocate) {
    ct_context *ctx = test_ctx(-1, 1);
    const int64_t N = 200, B = 16;
    ct_dataset ds;
    fake_ds(&ds, N);
    ct_loader *l;
    CHECK_OK(ctx, ct_loader_create(ctx, &ds, B, 1, 0, 99, &l));
    float img[16 * 6];
    int32_t lab[16];
    int64_t got, total = 0;
    ct_mem_stats before, after;
    ct_context_mem_stats(ctx, &before);
    for (uint64_t e = 0; e < 3; e++) {
        ct_loader_start_epoch(l, e);
        do {
            CHECK_OK(ctx, ct_loader_next(l, img, lab, &got));
            total += got;
        } while (got > 0);
    }
    ct_context_mem_stats(ctx, &after);
    CHECK(total == 3 * N);
    CHECK(after.n_allocs == before.n_allocs);
    CHECK(after.n_frees == before.n_frees);
    CHECK(after.bytes_in_use == before.bytes_in_use);
    CHECK(ct_loader_next(l, NULL, lab, &got) == CT_E_INVALID_ARG);
    ct_loader_free(l);
    CHECK(in_use(ctx) == 0);
    free(ds.images);
    free(ds.labels);
    ct_context_free(ctx);
}

/* ---- real data, when present -------------------------------------------------------- */

static const char *find_dir(const char *rel, const char *abs) {
    struct stat st;
    if (stat(rel, &st) == 0 && S_ISDIR(st.st_mode)) return rel;
    if (stat(abs, &st) == 0 && S_ISDIR(st.st_mode)) return abs;
    return NULL;
}

static void check_real_t10k(const char *dir) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_dataset ds;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK_OK(ctx, ct_dataset_load_idx(ctx, dir, "t10k", 0.1307f, 0.3081f, &ds));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("  note: %s t10k loaded in %.1f ms\n", dir,
           (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) * 1e-6);
    CHECK(ds.n == 10000 && ds.c == 1 && ds.h == 28 && ds.w == 28);
    CHECK(ds.n_classes == 10);
    int count[10] = {0};
    for (int64_t i = 0; i < ds.n; i++) {
        CHECK(ds.labels[i] >= 0 && ds.labels[i] < 10);
        count[ds.labels[i]]++;
    }
    for (int k = 0; k < 10; k++) CHECK(count[k] > 500); /* every class present */
    float lo = -0.1307f / 0.3081f, hi = (1.0f - 0.1307f) / 0.3081f;
    for (int64_t i = 0; i < ds.n * 28 * 28; i++) CHECK(ds.images[i] >= lo - 1e-5f && ds.images[i] <= hi + 1e-5f);
    ct_dataset_free(ctx, &ds);
    CHECK(in_use(ctx) == 0);
    ct_context_free(ctx);
}

TEST(real_mnist_t10k) {
    const char *dir = find_dir("data/mnist", "/work/main/data/mnist");
    if (!dir) {
        printf("  note: data/mnist not found, skipping the real MNIST check\n");
        return;
    }
    check_real_t10k(dir);
}

TEST(real_fashion_mnist_t10k_gz) {
    const char *dir = find_dir("data/fashion-mnist", "/work/main/data/fashion-mnist");
    if (!dir) {
        printf("  note: data/fashion-mnist not found, skipping the real Fashion-MNIST check\n");
        return;
    }
    check_real_t10k(dir);
}

TEST_MAIN(T(idx_roundtrip_plain_and_gzip), T(idx_missing_file_is_io_error), T(idx_truncated_is_corrupt),
          T(idx_bad_header_is_corrupt), T(idx_corrupt_gzip_is_corrupt), T(dataset_load_and_normalize),
          T(dataset_errors), T(large_files_stream_and_verify),
          T(loader_covers_each_sample_once), T(loader_order_depends_on_seed_and_epoch_only),
          T(loader_next_does_not_allocate), T(real_mnist_t10k), T(real_fashion_mnist_t10k_gz))
