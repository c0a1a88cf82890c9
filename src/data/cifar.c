/* src/data/cifar.c - the CIFAR-10/100 binary format into a ct_image_set.
 *
 * A record is 1 label byte (CIFAR-10) or a coarse and a fine label byte
 * (CIFAR-100; the fine one is the class) followed by 3072 pixel bytes: the
 * R, G and B planes of a 32x32 image, rows top to bottom. Files:
 * data_batch_1..5.bin + test_batch.bin (CIFAR-10), train.bin + test.bin
 * (CIFAR-100). A file whose size is not a whole number of records, or a
 * label >= the class count, is CT_E_CORRUPT naming the file and record. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/internal.h"
#include "data/image_internal.h"

static int record_bytes(int classes) { return (classes == 100 ? 2 : 1) + CT_CIFAR_PIXELS; }

/* Appends the records of buf (a whole file named `name`) to set, whose
 * arrays hold room for them from sample `at`. */
static ct_status add_records(ct_image_set *set, const uint8_t *buf, size_t len, int64_t at, const char *name) {
    const int rb = record_bytes(set->classes), lb = rb - CT_CIFAR_PIXELS;
    const int64_t n = (int64_t)(len / (size_t)rb);
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *r = buf + (size_t)i * (size_t)rb;
        int label = r[lb - 1];
        if (label >= set->classes)
            return ct_set_error(set->ctx, CT_E_CORRUPT,
                                "%s: record %lld has label %d, but CIFAR-%d has %d classes; the file is not "
                                "CIFAR-%d (set dataset to the other one) or it is damaged",
                                name, (long long)i, label, set->classes, set->classes, set->classes);
        set->labels[at + i] = label;
        memcpy(set->rec + (size_t)(at + i) * CT_CIFAR_PIXELS, r + lb, CT_CIFAR_PIXELS);
    }
    return CT_OK;
}

static ct_status check_size(ct_context *ctx, size_t len, int classes, const char *name) {
    const int rb = record_bytes(classes);
    if (len == 0 || len % (size_t)rb)
        return ct_set_error(ctx, CT_E_CORRUPT,
                            "%s has %zu bytes, not a whole number of %d-byte CIFAR-%d records (%s label byte%s + "
                            "3072 pixels); the file is truncated or not CIFAR-%d",
                            name, len, rb, classes, classes == 100 ? "2" : "1", classes == 100 ? "s" : "", classes);
    return CT_OK;
}

static ct_status new_cifar(ct_context *ctx, int classes, const ct_image_opts *o, int64_t n, ct_image_set **out) {
    if (classes != 10 && classes != 100)
        return ct_set_error(ctx, CT_E_INVALID_ARG, "CIFAR has 10 or 100 classes, not %d", classes);
    ct_image_set *set;
    CT_TRY(ct_image_set_new_(ctx, o, &set));
    set->classes = classes;
    void *p = NULL;
    ct_status s = ct_image_set_alloc_samples_(set, n);
    if (s == CT_OK) s = ct_alloc(ctx, (size_t)n * CT_CIFAR_PIXELS, &p);
    set->rec = p;
    if (s != CT_OK) {
        ct_image_set_free(set);
        return s;
    }
    *out = set;
    return CT_OK;
}

ct_status ct_image_set_cifar_from_memory(ct_context *ctx, const void *data, size_t len, int classes,
                                         const ct_image_opts *o, ct_image_set **out) {
    if (out) *out = NULL;
    if (!ctx || (!data && len) || !out)
        return ct_set_error(ctx, CT_E_INVALID_ARG, "ct_image_set_cifar_from_memory: ctx, data and out must not be NULL");
    if (classes != 10 && classes != 100)
        return ct_set_error(ctx, CT_E_INVALID_ARG, "CIFAR has 10 or 100 classes, not %d", classes);
    CT_TRY(check_size(ctx, len, classes, "the CIFAR data"));
    ct_image_set *set;
    CT_TRY(new_cifar(ctx, classes, o, (int64_t)(len / (size_t)record_bytes(classes)), &set));
    ct_status s = add_records(set, data, len, 0, "the CIFAR data");
    if (s != CT_OK) {
        ct_image_set_free(set);
        return s;
    }
    *out = set;
    return CT_OK;
}

ct_status ct_image_set_open_cifar(ct_context *ctx, const char *dir, const char *split, int classes,
                                  const ct_image_opts *o, ct_image_set **out) {
    if (out) *out = NULL;
    if (!ctx || !dir || !split || !out)
        return ct_set_error(ctx, CT_E_INVALID_ARG, "ct_image_set_open_cifar: ctx, dir, split and out must not be NULL");
    if (classes != 10 && classes != 100)
        return ct_set_error(ctx, CT_E_INVALID_ARG, "CIFAR has 10 or 100 classes, not %d", classes);
    int train = !strcmp(split, "train");
    if (!train && strcmp(split, "test"))
        return ct_set_error(ctx, CT_E_INVALID_ARG, "CIFAR split '%s' is neither train nor test", split);
    char names[5][64];
    int nf = 0;
    if (classes == 10 && train)
        for (nf = 0; nf < 5; nf++) snprintf(names[nf], sizeof names[nf], "data_batch_%d.bin", nf + 1);
    else snprintf(names[nf++], sizeof names[0], "%s", classes == 10 ? "test_batch.bin" : train ? "train.bin" : "test.bin");
    /* sizes first: one allocation for every record */
    char path[4096];
    size_t len[5];
    int64_t n = 0;
    for (int f = 0; f < nf; f++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[f]);
        FILE *fp = fopen(path, "rb");
        long sz = -1;
        if (fp && fseek(fp, 0, SEEK_END) == 0) sz = ftell(fp);
        if (fp) fclose(fp);
        if (sz < 0)
            return ct_set_error(ctx, CT_E_IO, "cannot read %s (%s); CIFAR-%d's binary version has %s there", path,
                                strerror(errno), classes,
                                classes == 10 ? "data_batch_1..5.bin and test_batch.bin" : "train.bin and test.bin");
        len[f] = (size_t)sz;
        CT_TRY(check_size(ctx, len[f], classes, path));
        n += (int64_t)(len[f] / (size_t)record_bytes(classes));
    }
    ct_image_set *set;
    CT_TRY(new_cifar(ctx, classes, o, n, &set));
    void *buf = NULL;
    ct_status s = CT_OK;
    int64_t at = 0;
    for (int f = 0; f < nf && s == CT_OK; f++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[f]);
        if ((s = ct_alloc(ctx, len[f], &buf)) != CT_OK) break;
        FILE *fp = fopen(path, "rb");
        if (!fp || fread(buf, 1, len[f], fp) != len[f])
            s = ct_set_error(ctx, CT_E_IO, "cannot read %s (%s); it changed while being read?", path, strerror(errno));
        if (fp) fclose(fp);
        if (s == CT_OK) s = add_records(set, buf, len[f], at, path);
        at += (int64_t)(len[f] / (size_t)record_bytes(classes));
        ct_free(ctx, buf);
        buf = NULL;
    }
    if (s != CT_OK) {
        ct_image_set_free(set);
        return s;
    }
    *out = set;
    return CT_OK;
}
