/* src/kernels/simd/conv.c - direct weight gradient of a convolution with one
 * or two input channels (a network's first layer on gray or two-channel
 * images: the CNN's 1 -> 32 conv on 28x28 digits).
 *
 * Why not oneDNN: with 1-2 input channels its weight gradient is a GEMM of
 * M = OC, N = KH*KW (9), K = batch x pixels (100,352 for the CNN): plain
 * NCHW runs im2col + a thin GEMM (9-10 ms on an AVX-512 Xeon, 2 threads),
 * and the blocked layout pads the channels to 8 or 16 and reorders dy
 * (12.8 MB) on every call. The weight gradient is tiny in flops (58 MFLOP);
 * what costs is reading dy once. Here every tap is a dot product of a dy
 * plane with the input plane shifted by the tap, both in L1:
 *
 *   dw[oc][c][kh][kw] = sum_n sum_oh,ow dy[n][oc][oh][ow] * xp[n][c][oh + kh*d][ow + kw*d]
 *
 * where xp is the input plane zero-padded (built once per image and channel).
 * The KW taps of a kernel row share each dy vector. Stride 1 and one group
 * only (ct_conv_direct_bwd_weight_ok: the op table picks this kernel before
 * oneDNN exactly then, and it declines anything else).
 *
 * Determinism: threads split the output channels; each (oc, c, tap) sums its
 * planes' float dot products in double over n in order, so the result does
 * not depend on the thread count. BF16 / FP16 dy and x (simd_lowp.h) are
 * converted plane by plane into FP32 tiles: the FP32 math on the 16-bit
 * values; the weight gradient is written in its node's dtype (FP32, or
 * rounded once from the FP32 sum to BF16 / FP16). */
#include <omp.h>

#include "simd_lowp.h"

/* One row's dot products: a[t] += dy[0..OW) * x[t*d .. t*d + OW), t < KW. */
static inline __attribute__((always_inline)) void row_taps(vf *a, const float *dr, const float *xr, int64_t OW, int KW,
                                                           int64_t d) {
    int64_t ow = 0;
    for (; ow + VW <= OW; ow += VW) {
        vf g = vload(dr + ow);
#pragma GCC unroll 8
        for (int t = 0; t < KW; t++) a[t] = vfma(g, vload(xr + ow + t * d), a[t]);
    }
    if (ow < OW) {
        int r = (int)(OW - ow);
        vf g = vtail_load(dr + ow, r);
#pragma GCC unroll 8
        for (int t = 0; t < KW; t++) a[t] = vfma(g, vtail_load(xr + ow + t * d, r), a[t]);
    }
}

/* out[kw] += sum over rows oh and columns ow of dy[oh][ow] * x[oh][ow + kw*d],
 * kw < KW (at most 8); even and odd rows in their own accumulators (twice
 * the FMA chains in flight). Inlined with a constant KW, so that the
 * accumulators stay in registers. */
static inline __attribute__((always_inline)) void tap_row(const float *dy, int64_t ldy, const float *x, int64_t ldx,
                                                          int64_t OH, int64_t OW, int KW, int64_t d, double *out) {
    vf a0[8], a1[8];
#pragma GCC unroll 8
    for (int t = 0; t < 8; t++) a0[t] = a1[t] = vzero();
    int64_t oh = 0;
    for (; oh + 2 <= OH; oh += 2) {
        row_taps(a0, dy + oh * ldy, x + oh * ldx, OW, KW, d);
        row_taps(a1, dy + (oh + 1) * ldy, x + (oh + 1) * ldx, OW, KW, d);
    }
    if (oh < OH) row_taps(a0, dy + oh * ldy, x + oh * ldx, OW, KW, d);
#pragma GCC unroll 8
    for (int t = 0; t < KW; t++) out[t] += (double)vhsum(vadd(a0[t], a1[t]));
}

static void taps(const float *dy, int64_t ldy, const float *x, int64_t ldx, int64_t OH, int64_t OW, int KW,
                 int64_t d, double *out) {
    switch (KW) { /* the common widths with a constant count: the accumulators stay in registers */
    case 1: tap_row(dy, ldy, x, ldx, OH, OW, 1, d, out); return;
    case 2: tap_row(dy, ldy, x, ldx, OH, OW, 2, d, out); return;
    case 3: tap_row(dy, ldy, x, ldx, OH, OW, 3, d, out); return;
    case 4: tap_row(dy, ldy, x, ldx, OH, OW, 4, d, out); return;
    case 5: tap_row(dy, ldy, x, ldx, OH, OW, 5, d, out); return;
    case 7: tap_row(dy, ldy, x, ldx, OH, OW, 7, d, out); return;
    default:
        for (int kw = 0; kw < KW; kw++) tap_row(dy, ldy, x + kw * d, ldx, OH, OW, 1, d, out + kw);
    }
}

/* in: dy (N, OC, OH, OW), x (N, C, H, W) -> dw (OC, C, KH, KW) in the node's dtype (NCHW only) */
ct_status CT_FN(conv2d_bwd_weight)(ct_kargs *k) {
    const ct_tensor *ty = &k->in[0], *tx = &k->in[1];
    const int64_t N = tx->shape[0], C = tx->shape[1], H = tx->shape[2], W = tx->shape[3];
    const int64_t OC = k->out.shape[0], KH = k->out.shape[2], KW = k->out.shape[3];
    const int64_t OH = ty->shape[2], OW = ty->shape[3];
    const int64_t s = k->node->ia[0], p = k->node->ia[1], d = k->node->ia[2], G = k->node->ia[3];
    const ct_dtype low = ct_lowp_io(k, 2);
    if (k->node->ia[4] || !ct_conv_direct_bwd_weight_ok(C, G, s, KH, KW) || !ct_f32_or(&k->out, low) || !ct_f32_or(ty, low) ||
        !ct_f32_or(tx, low) || (low != CT_F32 && (OH * OW > CT_BF16_TILE || H * W > CT_BF16_TILE)))
        return CT_E_UNSUPPORTED;
    const int64_t Hp = OH + (KH - 1) * d, Wp = OW + (KW - 1) * d, plane = Hp * Wp;
    const int64_t q0 = p, q1 = CT_MIN(Wp, W + p); /* the columns of a padded row that hold x */
    const size_t acc_bytes = ct_conv_direct_acc_bytes(OC, C, KH, KW), per = ct_conv_direct_image_bytes(C, KH, KW, OH, OW, d);
    /* as many threads as output channels and workspace images allow */
    const size_t want = (size_t)CT_MIN((int64_t)k->nthreads, OC);
    const int nt = k->ws_bytes > acc_bytes ? (int)CT_MIN(want, (k->ws_bytes - acc_bytes) / per) : 0;
    if (nt < 1) return CT_E_UNSUPPORTED; /* no workspace: the reference needs none */
    double *acc = k->ws;
    memset(acc, 0, (size_t)(OC * C * KH * KW) * sizeof(double));
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        const int t = omp_get_thread_num(), n_t = omp_get_num_threads();
        const int64_t o0 = OC * t / n_t, o1 = OC * (t + 1) / n_t;
        float *xp = (float *)((char *)k->ws + acc_bytes + (size_t)t * per);
        float ybuf[CT_BF16_TILE], xbuf[CT_BF16_TILE];
        memset(xp, 0, (size_t)(C * plane) * sizeof(float)); /* the border stays zero */
        for (int64_t n = 0; n < N && o0 < o1; n++) {
            for (int64_t c = 0; c < C; c++) { /* the zero-padded plane: xp[r][q] = x[r - p][q - p] */
                const float *xs = ct_tile_in(tx, (n * C + c) * H * W, H * W, xbuf);
                float *xc = xp + c * plane;
                for (int64_t r = 0; r < Hp; r++) {
                    int64_t ih = r - p;
                    if (ih < 0 || ih >= H) continue;
                    if (q0 < q1) memcpy(xc + r * Wp + q0, xs + ih * W + (q0 - p), (size_t)(q1 - q0) * sizeof(float));
                }
            }
            for (int64_t oc = o0; oc < o1; oc++) {
                if (ty->dtype == CT_F32 && oc + 1 < o1) { /* the next dy plane, read from memory once: ask early */
                    const char *nx = (const char *)ty->data + (size_t)((n * OC + oc + 1) * OH * OW) * sizeof(float);
                    for (int64_t b = 0; b < OH * OW * (int64_t)sizeof(float); b += 64) _mm_prefetch(nx + b, _MM_HINT_T0);
                }
                const float *g = ct_tile_in(ty, (n * OC + oc) * OH * OW, OH * OW, ybuf);
                for (int64_t c = 0; c < C; c++)
                    for (int64_t kh = 0; kh < KH; kh++)
                        taps(g, OW, xp + c * plane + kh * d * Wp, Wp, OH, OW, (int)KW, d,
                             acc + ((oc * C + c) * KH + kh) * KW);
            }
        }
        for (int64_t i = o0 * C * KH * KW; i < o1 * C * KH * KW; i++) {
            float v = (float)acc[i];
            if (k->out.dtype == CT_F32) ((float *)k->out.data)[i] = v;
            else ((uint16_t *)k->out.data)[i] = k->out.dtype == CT_BF16 ? ct_f32_to_bf16(v) : ct_f32_to_f16(v);
        }
    }
    return CT_OK;
}
