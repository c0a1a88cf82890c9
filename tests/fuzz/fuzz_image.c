/* tests/fuzz/fuzz_image.c - the image readers (src/data/image_decode.c,
 * cifar.c, augment.c): arbitrary bytes decoded as a JPEG/PNG into 3 and 1
 * channels, every decoded image transformed (train: RandomResizedCrop +
 * flip, eval: Resize + CenterCrop) to 8x8, and the same bytes read as
 * CIFAR-10 and CIFAR-100 records, whose samples are fetched. Invariants:
 * a decode succeeds with 1 <= h, w and h * w <= the pixel limit, the
 * requested channels, and the same size for 3 and 1 channels; a failure is
 * CT_E_CORRUPT (or CT_E_OOM) with a message naming the input; transformed
 * values are finite and inside the normalized range of [0, 255]; CIFAR
 * loads exactly when the size is a whole number of records and the labels
 * are in range; nothing is left allocated. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

#define MAX_PIXELS ((int64_t)1 << 18)

static void transform(const ct_image *im, int channels) {
    ct_image_opts o;
    ct_image_opts_default(&o);
    o.size = 8;
    o.channels = channels;
    float out[3 * 8 * 8];
    for (int train = 0; train <= 1; train++) {
        o.train = train;
        o.resize = train ? 0 : 11;
        ct_crop c;
        ct_image_transform_params(&o, im->h, im->w, (uint64_t)im->h * 31u + (uint64_t)im->w, 0, 0, &c);
        FUZZ_CHECK(c.top >= 0 && c.left >= 0 && c.h >= 1 && c.w >= 1 && c.top + c.h <= im->h && c.left + c.w <= im->w,
                   "the crop box lies inside the image");
        ct_image_transform(&o, im, &c, out);
        for (int i = 0; i < channels * 64; i++)
            FUZZ_CHECK(isfinite(out[i]) && out[i] >= -1.0001f && out[i] <= 1.0001f, "a value of (x/255 - .5)/.5");
    }
}

static void decode(const uint8_t *data, size_t size) {
    ct_image a = {0}, b = {0};
    char err[512];
    ct_status sa = ct_image_decode(data, size, 3, MAX_PIXELS, "fuzz-input", &a, err, sizeof err);
    if (sa != CT_OK) {
        FUZZ_CHECK(sa == CT_E_CORRUPT || sa == CT_E_OOM, "a bad image is corrupt");
        FUZZ_CHECK(strstr(err, "fuzz-input") != NULL, "the message names the file");
    } else {
        fuzz_note("image: %dx%d", a.h, a.w);
        FUZZ_CHECK(a.h >= 1 && a.w >= 1 && a.c == 3 && (int64_t)a.h * a.w <= MAX_PIXELS, "a decoded RGB image");
        transform(&a, 3);
    }
    ct_status sb = ct_image_decode(data, size, 1, MAX_PIXELS, "fuzz-input", &b, err, sizeof err);
    FUZZ_CHECK(sa == sb, "RGB and gray decode alike");
    if (sb == CT_OK) {
        FUZZ_CHECK(b.h == a.h && b.w == a.w && b.c == 1, "the gray image has the RGB one's size");
        transform(&b, 1);
    }
    ct_image_free(&a);
    ct_image_free(&b);
}

static void cifar(const uint8_t *data, size_t size, int classes) {
    ct_context *ctx = fuzz_ctx();
    ct_image_set *set = NULL;
    ct_image_opts o;
    ct_image_opts_default(&o);
    o.size = 8;
    o.train = 1;
    ct_status s = ct_image_set_cifar_from_memory(ctx, data, size, classes, &o, &set);
    const size_t rb = (classes == 100 ? 2 : 1) + 3072;
    if (s != CT_OK) {
        fuzz_check_error(s);
        FUZZ_CHECK(s == CT_E_CORRUPT || s == CT_E_OOM, "bad CIFAR data is corrupt");
        int bad_label = 0;
        for (size_t i = 0; size % rb == 0 && i < size / rb; i++) bad_label |= data[i * rb + rb - 3073] >= classes;
        FUZZ_CHECK(s == CT_E_OOM || size == 0 || size % rb != 0 || bad_label, "CIFAR fails only on a reason");
        return;
    }
    FUZZ_CHECK(size > 0 && size % rb == 0 && ct_image_set_count(set) == (int64_t)(size / rb), "whole records");
    ct_image sc = {0};
    float out[3 * 64];
    int32_t label;
    char err[256];
    for (int64_t i = 0; i < ct_image_set_count(set) && i < 4; i++) {
        FUZZ_CHECK(ct_image_set_get(set, i, 1, 0, &sc, out, &label, err, sizeof err) == CT_OK, "a record decodes");
        FUZZ_CHECK(label >= 0 && label < classes && label == data[i * (int64_t)rb + (int64_t)rb - 3073],
                   "the record's (fine) label");
    }
    ct_image_free(&sc);
    ct_image_set_free(set);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t mem = fuzz_bytes_in_use();
    decode(data, size);
    cifar(data, size, 10);
    cifar(data, size, 100);
    fuzz_check_no_leak(mem);
    return 0;
}
