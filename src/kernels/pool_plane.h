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
 * saves the flat index ih*W+iw of the first maximum in window order (the
 * first NaN if any: NaN propagates, as in PyTorch), -1 when no tap is inside
 * the input (output -inf). Average pooling divides by the taps inside the
 * padded input [-ph, H+ph) x [-pw, W+pw) (count_include_pad; PyTorch's
 * divisor, which is smaller than kh*kw only for a ceil_mode window that runs
 * past the padding) or by the taps inside the input (count_include_pad = 0);
 * a window with divisor 0 outputs 0. */
#ifndef CT_KERNELS_POOL_PLANE_H
#define CT_KERNELS_POOL_PLANE_H

#include <math.h>
#include <string.h>

#include "core/ir_types.h"

typedef struct {
    int64_t NC, H, W, OH, OW;
    int64_t KH, KW, SH, SW, PH, PW, DH, DW;
    int include_pad;
} ct_pool_dims;

/* x is the (N, C, H, W) side, y the pooled side. */
static inline ct_pool_dims ct_pool_get(const ct_node_def *n, const ct_tensor *x, const ct_tensor *y) {
    ct_pool_dims d;
    d.NC = x->shape[0] * x->shape[1];
    d.H = x->shape[2];
    d.W = x->shape[3];
    d.OH = y->shape[2];
    d.OW = y->shape[3];
    d.KH = n->ia[0];
    d.KW = n->ia[1];
    d.SH = n->ia[2];
    d.SW = n->ia[3];
    d.PH = n->ia[4];
    d.PW = n->ia[5];
    d.DH = n->ia[6];
    d.DW = n->ia[7];
    d.include_pad = n->fa[0] != 0.0f;
    return d;
}

static inline void ct_maxpool_plane(const float *x, float *y, int32_t *arg, const ct_pool_dims *d) {
    for (int64_t oh = 0; oh < d->OH; oh++)
        for (int64_t ow = 0; ow < d->OW; ow++) {
            float best = -INFINITY;
            int64_t bi = -1;
            for (int64_t i = 0; i < d->KH; i++) {
                int64_t ih = oh * d->SH - d->PH + i * d->DH;
                if (ih < 0 || ih >= d->H) continue;
                for (int64_t j = 0; j < d->KW; j++) {
                    int64_t iw = ow * d->SW - d->PW + j * d->DW;
                    if (iw < 0 || iw >= d->W) continue;
                    float v = x[ih * d->W + iw];
                    if (bi >= 0 && isnan(best)) continue; /* NaN propagates, as in PyTorch */
                    if (bi < 0 || v > best || isnan(v)) {
                        best = v;
                        bi = ih * d->W + iw;
                    }
                }
            }
            y[oh * d->OW + ow] = best;
            arg[oh * d->OW + ow] = (int32_t)bi;
        }
}

/* dx = scatter-add of dy at the saved argmax (zero elsewhere) */
static inline void ct_maxpool_bwd_plane(const float *dy, const int32_t *arg, float *dx, const ct_pool_dims *d) {
    const int64_t OHW = d->OH * d->OW;
    memset(dx, 0, (size_t)(d->H * d->W) * sizeof *dx);
    for (int64_t o = 0; o < OHW; o++)
        if (arg[o] >= 0) dx[arg[o]] += dy[o];
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

static inline void ct_avgpool_plane(const float *x, float *y, const ct_pool_dims *d) {
    for (int64_t oh = 0; oh < d->OH; oh++)
        for (int64_t ow = 0; ow < d->OW; ow++) {
            double s = 0;
            for (int64_t i = 0; i < d->KH; i++) {
                int64_t ih = oh * d->SH - d->PH + i * d->DH;
                if (ih < 0 || ih >= d->H) continue;
                for (int64_t j = 0; j < d->KW; j++) {
                    int64_t iw = ow * d->SW - d->PW + j * d->DW;
                    if (iw < 0 || iw >= d->W) continue;
                    s += x[ih * d->W + iw];
                }
            }
            int64_t div = ct_avgpool_div(d, oh, ow);
            y[oh * d->OW + ow] = div ? (float)(s / (double)div) : 0.0f;
        }
}

static inline void ct_avgpool_bwd_plane(const float *dy, float *dx, const ct_pool_dims *d) {
    memset(dx, 0, (size_t)(d->H * d->W) * sizeof *dx);
    for (int64_t oh = 0; oh < d->OH; oh++)
        for (int64_t ow = 0; ow < d->OW; ow++) {
            int64_t div = ct_avgpool_div(d, oh, ow);
            if (!div) continue;
            float g = dy[oh * d->OW + ow] * (1.0f / (float)div);
            for (int64_t i = 0; i < d->KH; i++) {
                int64_t ih = oh * d->SH - d->PH + i * d->DH;
                if (ih < 0 || ih >= d->H) continue;
                for (int64_t j = 0; j < d->KW; j++) {
                    int64_t iw = ow * d->SW - d->PW + j * d->DW;
                    if (iw < 0 || iw >= d->W) continue;
                    dx[ih * d->W + iw] += g;
                }
            }
        }
}

#endif
