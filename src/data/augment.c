/* src/data/augment.c - the image transforms of ctrain/image.h: torchvision's
 * RandomResizedCrop parameters, RandomHorizontalFlip, Resize + CenterCrop,
 * RandomCrop with padding, bilinear resampling and Normalize, on 8-bit HWC pixels into FP32 CHW.
 *
 * Resampling follows torch.nn.functional.interpolate(mode="bilinear",
 * align_corners=False) on the crop, which is what torchvision's functional
 * resized_crop / resize do on tensors with antialias=False: source
 * coordinate (x + 0.5) * in / out - 0.5, clamped at 0, and the right / lower
 * neighbour clamped at the edge. tests/golden/augment.ctg (from
 * scripts/make_augment_golden.py, with torchvision) checks it. */
#include <math.h>
#include <string.h>

#include "core/internal.h"
#include "ctrain/image.h"

/* Domain tag of the transform's Philox stream ("RRCR"), xor the epoch. */
#define RRC_STREAM_TAG 0x5252435200000000ull
#define RRC_TRIES 10

void ct_image_opts_default(ct_image_opts *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->size = 32;
    o->channels = 3;
    o->scale[0] = 0.08f, o->scale[1] = 1.0f;
    o->ratio[0] = 3.0f / 4.0f, o->ratio[1] = 4.0f / 3.0f;
    o->flip = 1;
    for (int c = 0; c < 3; c++) o->mean[c] = 0.5f, o->std[c] = 0.5f;
    o->bad = CT_BAD_IMAGES_ERROR;
    o->max_pixels = (int64_t)1 << 26;
}

/* Python's round(): halves to even (the default rounding mode). */
static int py_round(double x) { return (int)nearbyint(x); }

void ct_rrc_params(int H, int W, const float scale[2], const float ratio[2], const double u[40], ct_crop *out) {
    const double area = (double)H * (double)W;
    const double lr0 = log((double)ratio[0]), lr1 = log((double)ratio[1]);
    out->flip = 0;
    for (int t = 0; t < RRC_TRIES; t++) {
        const double *v = u + 4 * t;
        double target = area * ((double)scale[0] + v[0] * ((double)scale[1] - (double)scale[0]));
        double ar = exp(lr0 + v[1] * (lr1 - lr0));
        int w = py_round(sqrt(target * ar)), h = py_round(sqrt(target / ar));
        if (w > 0 && w <= W && h > 0 && h <= H) {
            /* torch.randint(0, H - h + 1): uniform integer in [0, H - h] */
            int i = (int)(v[2] * (double)(H - h + 1)), j = (int)(v[3] * (double)(W - w + 1));
            out->top = CT_MIN(i, H - h), out->left = CT_MIN(j, W - w), out->h = h, out->w = w;
            return;
        }
    }
    double in_ratio = (double)W / (double)H;
    int w, h;
    if (in_ratio < (double)CT_MIN(ratio[0], ratio[1])) {
        w = W;
        h = py_round((double)w / (double)CT_MIN(ratio[0], ratio[1]));
    } else if (in_ratio > (double)CT_MAX(ratio[0], ratio[1])) {
        h = H;
        w = py_round((double)h * (double)CT_MAX(ratio[0], ratio[1]));
    } else {
        w = W;
        h = H;
    }
    out->top = (H - h) / 2, out->left = (W - w) / 2, out->h = h, out->w = w;
}

/* 32 random bits -> [0, 1) */
static double u01(uint32_t r) { return (double)r * (1.0 / 4294967296.0); }

void ct_image_transform_params(const ct_image_opts *o, int H, int W, uint64_t seed, uint64_t epoch, int64_t index,
                               ct_crop *crop) {
    if (!o->train) { /* the eval box is the whole image; ct_image_transform resizes and center-crops */
        crop->top = 0, crop->left = 0, crop->h = H, crop->w = W, crop->flip = 0;
        return;
    }
    /* 11 Philox blocks per sample: 10 tries of 4 numbers, then the flip */
    const uint64_t stream = RRC_STREAM_TAG ^ epoch, base = (uint64_t)index * 16u;
    double u[4 * RRC_TRIES];
    uint32_t r[4];
    for (int t = 0; t < RRC_TRIES; t++) {
        ct_philox(seed, stream, base + (uint64_t)t, r);
        for (int k = 0; k < 4; k++) u[4 * t + k] = u01(r[k]);
    }
    if (o->pad > 0) { /* RandomCrop(S, padding=pad): torch.randint(0, H + 2 pad - S + 1) on the padded image */
        const int S = o->size, rh = H + 2 * o->pad - S, rw = W + 2 * o->pad - S;
        crop->top = (rh >= 0 ? CT_MIN((int)(u[0] * (double)(rh + 1)), rh) : rh / 2) - o->pad;
        crop->left = (rw >= 0 ? CT_MIN((int)(u[1] * (double)(rw + 1)), rw) : rw / 2) - o->pad;
        crop->h = crop->w = S;
    } else {
        ct_rrc_params(H, W, o->scale, o->ratio, u, crop);
    }
    ct_philox(seed, stream, base + RRC_TRIES, r);
    crop->flip = o->flip && u01(r[0]) < 0.5;
}

/* Source index and weight of output coordinate x for in -> out bilinear
 * (align_corners=False); i1 is the clamped neighbour. */
static void lin_index(int x, float scale, int in, int *i0, int *i1, float *l1) {
    float src = scale * ((float)x + 0.5f) - 0.5f;
    if (src < 0) src = 0;
    int i = (int)src;
    if (i > in - 1) i = in - 1;
    float l = src - (float)i;
    if (l > 1) l = 1;
    *i0 = i;
    *i1 = i + (i < in - 1 ? 1 : 0);
    *l1 = l;
}

/* torchvision's Resize(int) output size: the shorter side becomes `size`,
 * the longer one int(size * long / short), clamped at 2^30 (an aspect ratio
 * beyond 2^30 / size : 1 would overflow an int). */
static void resize_dims(int H, int W, int size, int *nh, int *nw) {
    const int64_t cap = (int64_t)1 << 30;
    if (W <= H) {
        *nw = size;
        *nh = (int)CT_MIN((int64_t)size * H / W, cap);
    } else {
        *nh = size;
        *nw = (int)CT_MIN((int64_t)size * W / H, cap);
    }
}

/* (v/255 - mean) / std = v * scale + shift */
static void norm_coeffs(const ct_image_opts *o, float scale[3], float shift[3]) {
    for (int c = 0; c < o->channels; c++) {
        scale[c] = 1.0f / (255.0f * o->std[c]);
        shift[c] = -o->mean[c] / o->std[c];
    }
}

/* RandomCrop with padding: the S x S window at (crop->top, crop->left),
 * which may reach outside the image, where the pixels are 0 (black). */
static void padded_crop(const ct_image_opts *o, const ct_image *im, const ct_crop *crop, float *dst) {
    const int S = o->size, C = o->channels;
    float scale[3], shift[3];
    norm_coeffs(o, scale, shift);
    for (int y = 0; y < S; y++) {
        const int sy = crop->top + y;
        for (int x = 0; x < S; x++) {
            const int sx = crop->left + x, xo = crop->flip ? S - 1 - x : x;
            const int in = sy >= 0 && sy < im->h && sx >= 0 && sx < im->w;
            const uint8_t *p = in ? im->px + ((size_t)sy * (size_t)im->w + (size_t)sx) * (size_t)C : NULL;
            for (int c = 0; c < C; c++)
                dst[((size_t)c * S + y) * S + xo] = (in ? (float)p[c] : 0.0f) * scale[c] + shift[c];
        }
    }
}

void ct_image_transform(const ct_image_opts *o, const ct_image *im, const ct_crop *crop, float *dst) {
    const int S = o->size, C = o->channels;
    if (o->train && o->pad > 0) {
        padded_crop(o, im, crop, dst);
        return;
    }
    /* the virtual resized image (vh, vw) of the box and the window (oy, ox) taken from it */
    int vh = S, vw = S, oy = 0, ox = 0;
    if (!o->train) {
        resize_dims(crop->h, crop->w, o->resize > 0 ? o->resize : S, &vh, &vw);
        oy = py_round((double)(vh - S) / 2.0);
        ox = py_round((double)(vw - S) / 2.0);
    }
    const float sy = (float)crop->h / (float)vh, sx = (float)crop->w / (float)vw;
    const size_t row = (size_t)im->w * (size_t)C;
    const uint8_t *base = im->px + (size_t)crop->top * row + (size_t)crop->left * (size_t)C;
    float scale[3], shift[3];
    norm_coeffs(o, scale, shift);
    for (int y = 0; y < S; y++) {
        int y0, y1;
        float ly;
        lin_index(y + oy, sy, crop->h, &y0, &y1, &ly);
        const uint8_t *r0 = base + (size_t)y0 * row, *r1 = base + (size_t)y1 * row;
        for (int x = 0; x < S; x++) {
            int x0, x1;
            float lx;
            lin_index(x + ox, sx, crop->w, &x0, &x1, &lx);
            const int xo = crop->flip ? S - 1 - x : x;
            for (int c = 0; c < C; c++) {
                float a = (float)r0[(size_t)x0 * C + c], b = (float)r0[(size_t)x1 * C + c];
                float d = (float)r1[(size_t)x0 * C + c], e = (float)r1[(size_t)x1 * C + c];
                float top = a + lx * (b - a), bot = d + lx * (e - d);
                float v = top + ly * (bot - top);
                dst[((size_t)c * S + y) * S + xo] = v * scale[c] + shift[c];
            }
        }
    }
}
