/* src/kernels/pool_plane.h - max / average pooling of one (H, W) plane with
 * per-axis kernel, stride, padding and dilation: the reference loops, shared
 * by ref/pool.c (plane after plane) and simd/pool.c (planes in parallel,
 * beside its vectorized 2x2 path), so both give identical results.
 *
 * Node attributes (graph.c's pool builder): ia 0 kh 1 kw 2 sh 3 sw 4 ph 5 pw
 * 6 dh 7 dw; fa[0] = 1: average pooling counts padding (count_include_pad).
 * ceil_mode only changes the output size (the node's shape).
 *
 * Window (oh, ow) reads rows ih = oh*sh - ph + i*dh (i < kh) and columns
 * iw = ow*sw - pw + j*dw; taps outside the input are skipped. Max pooling
 * saves where the first maximum in window order is (the first NaN if any:
 * NaN propagates, as in PyTorch): its tap i*kw + j as one byte when the
 * window has at most 255 taps (every CNN's 2x2 and 3x3: a quarter of an
 * int32 index, and the largest saved state of a CNN's forward), 255 when no
 * tap is inside the input (output -inf); for bigger windows the flat index
 * ih*W+iw as int32, -1 for none (ct_maxpool_arg_size). Average pooling divides by the taps inside the
 * padded input [-ph, H+ph) x [-pw, W+pw) (count_include_pad; PyTorch's
 * divisor, which is smaller than kh*kw only for a ceil_mode window that runs
 * past the padding) or by the taps inside the input (count_include_pad = 0);
 * a window with divisor 0 outputs 0.
 *
 * Channels-last (fa[1] = 1, ct_pool2d_opts.channels_last): x (N, H, W, C),
 * y (N, OH, OW, C); the same windows per (n, c). The saved argmax holds one
 * entry per output element in y's (N, OH, OW, C) order, encoded as above
 * (the tap, or the flat index ih*W+iw within the (H, W) plane of that (n,
 * c)); ct_aux_maxpool2d's size is the same. The *_cl_image loops below do
 * one image (H, W, C) -> (OH, OW, C); per element they run the plane loops'
 * arithmetic in the same order, so both layouts give the same bits (the
 * backward accumulates each dx element over windows in (oh, ow) order). */
#ifndef CT_KERNELS_POOL_PLANE_H
#define CT_KERNELS_POOL_PLANE_H

#include <math.h>
#include <string.h>

#include "core/ir_types.h"

typedef struct {
    int64_t NC, H, W, OH, OW; /* NC = N*C, both layouts                                     */
    int64_t N, C;
    int cl; /* 1: channels-last, x (N, H, W, C), y (N, OH, OW, C)                          */
    int64_t KH, KW, SH, SW, PH, PW, DH, DW;
    int include_pad;
    int arg_wide; /* max pooling's saved argmax: 1 int32 flat indices, 0 one byte taps */
} ct_pool_dims;

#define CT_POOL_NO_TAP 255 /* one-byte argmax of a window with no tap inside the input */

/* Bytes per output element of max pooling's saved argmax for a kh x kw window. */
static inline size_t ct_maxpool_arg_size(int64_t kh, int64_t kw) { return kh * kw > 255 ? 4 : 1; }

/* x is the (N, C, H, W) or (N, H, W, C) side, y the pooled side. */
static inline ct_pool_dims ct_pool_get(const ct_node_def *n, const ct_tensor *x, const ct_tensor *y) {
    ct_pool_dims d;
    d.cl = n->fa[1] != 0.0f;
    const int hx = d.cl ? 1 : 2; /* the H axis */
    d.N = x->shape[0];
    d.C = x->shape[d.cl ? 3 : 1];
    d.NC = d.N * d.C;
    d.H = x->shape[hx];
    d.W = x->shape[hx + 1];
    d.OH = y->shape[hx];
    d.OW = y->shape[hx + 1];
    d.KH = n->ia[0];
    d.KW = n->ia[1];
    d.SH = n->ia[2];
    d.SW = n->ia[3];
    d.PH = n->ia[4];
    d.PW = n->ia[5];
    d.DH = n->ia[6];
    d.DW = n->ia[7];
    d.include_pad = n->fa[0] != 0.0f;
    d.arg_wide = ct_maxpool_arg_size(d.KH, d.KW) == 4;
    return d;
}

/* Plane nc's saved argmax within the node's aux. */
static inline void *ct_maxpool_arg_plane(void *arg, int64_t nc, const ct_pool_dims *d) {
    return (char *)arg + (size_t)(nc * d->OH * d->OW) * (d->arg_wide ? 4 : 1);
}

/* The plane loops take the element stride st between consecutive (h, w)
 * positions of x, y, dx, dy and the argmax: 1 for an (N, C, H, W) plane, C
 * for one channel of a channels-last image (x + c, st = C); each output is
 * computed, and each dx element summed, in the same order either way. */

/* dx's (H, W) elements at stride st set to zero */
static inline void ct_pool_zero_plane(float *dx, int64_t n, int64_t st) {
    if (st == 1) memset(dx, 0, (size_t)n * sizeof *dx);
    else
        for (int64_t i = 0; i < n; i++) dx[i * st] = 0.0f;
}

static inline void ct_maxpool_plane_st(const float *x, float *y, void *arg, const ct_pool_dims *d, int64_t st) {
    for (int64_t oh = 0; oh < d->OH; oh++)
        for (int64_t ow = 0; ow < d->OW; ow++) {
            float best = -INFINITY;
            int64_t bi = -1, bt = CT_POOL_NO_TAP;
            for (int64_t i = 0; i < d->KH; i++) {
                int64_t ih = oh * d->SH - d->PH + i * d->DH;
                if (ih < 0 || ih >= d->H) continue;
                for (int64_t j = 0; j < d->KW; j++) {
                    int64_t iw = ow * d->SW - d->PW + j * d->DW;
                    if (iw < 0 || iw >= d->W) continue;
                    float v = x[(ih * d->W + iw) * st];
                    if (bi >= 0 && isnan(best)) continue; /* NaN propagates, as in PyTorch */
                    if (bi < 0 || v > best || isnan(v)) {
                        best = v;
                        bi = ih * d->W + iw;
                        bt = i * d->KW + j;
                    }
                }
            }
            const int64_t o = (oh * d->OW + ow) * st;
            y[o] = best;
            if (d->arg_wide) ((int32_t *)arg)[o] = (int32_t)bi;
            else ((uint8_t *)arg)[o] = (uint8_t)bt;
        }
}
static inline void ct_maxpool_plane(const float *x, float *y, void *arg, const ct_pool_dims *d) {
    ct_maxpool_plane_st(x, y, arg, d, 1);
}

/* dx = scatter-add of dy at the saved argmax (zero elsewhere), in output order */
static inline void ct_maxpool_bwd_plane_st(const float *dy, const void *arg, float *dx, const ct_pool_dims *d,
                                           int64_t st) {
    ct_pool_zero_plane(dx, d->H * d->W, st);
    for (int64_t oh = 0; oh < d->OH; oh++)
        for (int64_t ow = 0; ow < d->OW; ow++) {
            const int64_t o = (oh * d->OW + ow) * st;
            int64_t at;
            if (d->arg_wide) {
                at = ((const int32_t *)arg)[o];
                if (at < 0) continue;
            } else {
                int64_t t = ((const uint8_t *)arg)[o];
                if (t == CT_POOL_NO_TAP) continue;
                at = (oh * d->SH - d->PH + t / d->KW * d->DH) * d->W + ow * d->SW - d->PW + t % d->KW * d->DW;
            }
            dx[at * st] += dy[o];
        }
}
static inline void ct_maxpool_bwd_plane(const float *dy, const void *arg, float *dx, const ct_pool_dims *d) {
    ct_maxpool_bwd_plane_st(dy, arg, dx, d, 1);
}

/* Taps of one axis inside [lo, hi) for the window starting at s. */
static inline int64_t ct_pool_taps(int64_t s, int64_t k, int64_t dil, int64_t lo, int64_t hi) {
    int64_t n = 0;
    for (int64_t i = 0; i < k; i++) n += s + i * dil >= lo && s + i * dil < hi;
    return n;
}

/* The divisor of window (oh, ow) (see the file's header). */
static inline int64_t ct_avgpool_div(const ct_pool_dims *d, int64_t oh, int64_t ow) {
    int64_t h0 = oh * d->SH - d->PH, w0 = ow * d->SW - d->PW;
    if (d->include_pad)
        return ct_pool_taps(h0, d->KH, d->DH, -d->PH, d->H + d->PH) * ct_pool_taps(w0, d->KW, d->DW, -d->PW, d->W + d->PW);
    return ct_pool_taps(h0, d->KH, d->DH, 0, d->H) * ct_pool_taps(w0, d->KW, d->DW, 0, d->W);
}

static inline void ct_avgpool_plane_st(const float *x, float *y, const ct_pool_dims *d, int64_t st) {
    for (int64_t oh = 0; oh < d->OH; oh++)
        for (int64_t ow = 0; ow < d->OW; ow++) {
            double s = 0;
            for (int64_t i = 0; i < d->KH; i++) {
                int64_t ih = oh * d->SH - d->PH + i * d->DH;
                if (ih < 0 || ih >= d->H) continue;
                for (int64_t j = 0; j < d->KW; j++) {
                    int64_t iw = ow * d->SW - d->PW + j * d->DW;
                    if (iw < 0 || iw >= d->W) continue;
                    s += x[(ih * d->W + iw) * st];
                }
            }
            int64_t div = ct_avgpool_div(d, oh, ow);
            y[(oh * d->OW + ow) * st] = div ? (float)(s / (double)div) : 0.0f;
        }
}
static inline void ct_avgpool_plane(const float *x, float *y, const ct_pool_dims *d) { ct_avgpool_plane_st(x, y, d, 1); }

static inline void ct_avgpool_bwd_plane_st(const float *dy, float *dx, const ct_pool_dims *d, int64_t st) {
    ct_pool_zero_plane(dx, d->H * d->W, st);
    for (int64_t oh = 0; oh < d->OH; oh++)
        for (int64_t ow = 0; ow < d->OW; ow++) {
            int64_t div = ct_avgpool_div(d, oh, ow);
            if (!div) continue;
            float g = dy[(oh * d->OW + ow) * st] * (1.0f / (float)div);
            for (int64_t i = 0; i < d->KH; i++) {
                int64_t ih = oh * d->SH - d->PH + i * d->DH;
                if (ih < 0 || ih >= d->H) continue;
                for (int64_t j = 0; j < d->KW; j++) {
                    int64_t iw = ow * d->SW - d->PW + j * d->DW;
                    if (iw < 0 || iw >= d->W) continue;
                    dx[(ih * d->W + iw) * st] += g;
                }
            }
        }
}
static inline void ct_avgpool_bwd_plane(const float *dy, float *dx, const ct_pool_dims *d) {
    ct_avgpool_bwd_plane_st(dy, dx, d, 1);
}

/* ---- channels-last: one image (H, W, C) -> (OH, OW, C), channel by channel ------------------ */

/* Image n's saved argmax within the node's aux (channels-last). */
static inline void *ct_maxpool_arg_image(void *arg, int64_t n, const ct_pool_dims *d) {
    return (char *)arg + (size_t)(n * d->OH * d->OW * d->C) * (d->arg_wide ? 4 : 1);
}

static inline void ct_maxpool_cl_image(const float *x, float *y, void *arg, const ct_pool_dims *d) {
    const size_t esz = d->arg_wide ? 4 : 1;
    for (int64_t c = 0; c < d->C; c++) ct_maxpool_plane_st(x + c, y + c, (char *)arg + (size_t)c * esz, d, d->C);
}

/* dx (H, W, C) = scatter-add of dy at the saved argmax, windows in (oh, ow) order */
static inline void ct_maxpool_bwd_cl_image(const float *dy, const void *arg, float *dx, const ct_pool_dims *d) {
    const size_t esz = d->arg_wide ? 4 : 1;
    for (int64_t c = 0; c < d->C; c++)
        ct_maxpool_bwd_plane_st(dy + c, (const char *)arg + (size_t)c * esz, dx + c, d, d->C);
}

static inline void ct_avgpool_cl_image(const float *x, float *y, const ct_pool_dims *d) {
    for (int64_t c = 0; c < d->C; c++) ct_avgpool_plane_st(x + c, y + c, d, d->C);
}

static inline void ct_avgpool_bwd_cl_image(const float *dy, float *dx, const ct_pool_dims *d) {
    for (int64_t c = 0; c < d->C; c++) ct_avgpool_bwd_plane_st(dy + c, dx + c, d, d->C);
}

#endif
