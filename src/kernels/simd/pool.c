/* src/kernels/simd/pool.c - SIMD max / average pooling and gradients.
 *
 * The 2x2 stride-2 unpadded window (the CNN's pooling) is vectorized along
 * the output row: VW outputs at a time from 2*VW input columns of two input
 * rows, split into even / odd columns. Other configurations (per-axis
 * kernel, stride, padding, dilation, ceil_mode, count_include_pad) run the
 * reference's scalar loops (kernels/pool_plane.h) in parallel over the N*C
 * planes, so their results are identical to the reference's.
 *
 * Max pooling saves the flat index ih*W+iw of each window's maximum as int32
 * (aux), as the reference: the first maximum in window order, and the first
 * NaN if there is one (NaN propagates, as in PyTorch). The 2x2 windows hold
 * no padding, so the average's divisor is 4 whatever count_include_pad says.
 *
 * BF16 I/O (simd_lowp.h): x / y / dy / dx may be BF16; each plane is then
 * read and written through FP32 planes converted in registers, so the result
 * is the FP32 kernel's on the BF16 values (the plane loops' windows overlap
 * and the backward scatter-adds: they need FP32 planes). Those planes are
 * stack tiles up to CT_BF16_TILE elements, above it the node's workspace
 * (ct_ws_pool, one input and one output plane per thread); without that
 * workspace a bigger plane declines and the node gets FP32 copies.
 *
 * Channels-last (fa[1], pool_plane.h): see the section below. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "simd_lowp.h"
#include "kernels/pool_plane.h"

/* ---- ISA-specific helpers: int32 vectors, lane masks, even/odd (de)interleave ------- */
#if defined(CT_SIMD_AVX512)
typedef __mmask16 pl_mask;
static inline vi pl_iload(const int32_t *p) { return _mm512_loadu_si512((const void *)p); }
static inline void pl_istore(int32_t *p, vi v) { _mm512_storeu_si512((void *)p, v); }
static inline vi pl_iset1(int32_t x) { return _mm512_set1_epi32(x); }
static inline vi pl_iadd(vi a, vi b) { return _mm512_add_epi32(a, b); }
static inline vi pl_lane2(void) { /* 2 * lane */
    return _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
}
/* lanes where candidate v replaces best: best is not NaN and (v > best or v is NaN) */
static inline pl_mask pl_take(vf v, vf best) {
    return _mm512_mask_cmp_ps_mask(_mm512_cmp_ps_mask(best, best, _CMP_ORD_Q), v, best, _CMP_NLE_UQ);
}
static inline vf pl_fsel(pl_mask m, vf a, vf b) { return _mm512_mask_blend_ps(m, a, b); } /* m ? b : a */
static inline vi pl_isel(pl_mask m, vi a, vi b) { return _mm512_mask_blend_epi32(m, a, b); }
/* v where a == b, else 0 */
static inline vf pl_keep_eq(vi a, vi b, vf v) { return _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(a, b), v); }
/* t <= VW one-byte taps from / to int32 lanes (lanes past t load CT_POOL_NO_TAP) */
static inline vi pl_tap_load(const uint8_t *p, int t) {
    __m128i b = _mm_mask_loadu_epi8(_mm_set1_epi8((char)CT_POOL_NO_TAP), (__mmask16)((1u << t) - 1), p);
    return _mm512_cvtepu8_epi32(b);
}
static inline void pl_tap_store(uint8_t *p, vi v, int t) { _mm_mask_storeu_epi8(p, (__mmask16)((1u << t) - 1), _mm512_cvtepi32_epi8(v)); }
/* (lo, hi) = 2*VW consecutive floats -> even-indexed and odd-indexed ones */
static inline void pl_deint(vf lo, vf hi, vf *ev, vf *od) {
    const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i io = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    *ev = _mm512_permutex2var_ps(lo, ie, hi);
    *od = _mm512_permutex2var_ps(lo, io, hi);
}
/* inverse of pl_deint: (a0 b0 a1 b1 ...) split into two vectors */
static inline void pl_inter(vf a, vf b, vf *lo, vf *hi) {
    const __m512i il = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i ih = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    *lo = _mm512_permutex2var_ps(a, il, b);
    *hi = _mm512_permutex2var_ps(a, ih, b);
}
#else
typedef __m256 pl_mask;
static inline vi pl_iload(const int32_t *p) { return _mm256_loadu_si256((const __m256i *)p); }
static inline void pl_istore(int32_t *p, vi v) { _mm256_storeu_si256((__m256i *)p, v); }
static inline vi pl_iset1(int32_t x) { return _mm256_set1_epi32(x); }
static inline vi pl_iadd(vi a, vi b) { return _mm256_add_epi32(a, b); }
static inline vi pl_lane2(void) { return _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14); }
static inline pl_mask pl_take(vf v, vf best) {
    return _mm256_and_ps(_mm256_cmp_ps(best, best, _CMP_ORD_Q), _mm256_cmp_ps(v, best, _CMP_NLE_UQ));
}
static inline vf pl_fsel(pl_mask m, vf a, vf b) { return _mm256_blendv_ps(a, b, m); }
static inline vi pl_isel(pl_mask m, vi a, vi b) {
    return _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(a), _mm256_castsi256_ps(b), m));
}
static inline vf pl_keep_eq(vi a, vi b, vf v) { return _mm256_and_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(a, b)), v); }
static inline vi pl_tap_load(const uint8_t *p, int t) {
    uint8_t b[16];
    memset(b, CT_POOL_NO_TAP, sizeof b);
    memcpy(b, p, (size_t)t);
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)b));
}
static inline void pl_tap_store(uint8_t *p, vi v, int t) {
    /* int32 lanes in 0..255: the saturating packs keep them */
    __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    uint8_t b[16];
    _mm_storeu_si128((__m128i *)b, _mm_packus_epi16(w, w));
    memcpy(p, b, (size_t)t);
}
static inline void pl_deint(vf lo, vf hi, vf *ev, vf *od) {
    /* per 128-bit lane: (lo0 lo2 hi0 hi2 | lo4 lo6 hi4 hi6), then reorder 64-bit pairs 0 2 1 3 */
    vf e = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0)), o = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1));
    *ev = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), _MM_SHUFFLE(3, 1, 2, 0)));
    *od = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(o), _MM_SHUFFLE(3, 1, 2, 0)));
}
static inline void pl_inter(vf a, vf b, vf *lo, vf *hi) {
    vf u0 = _mm256_unpacklo_ps(a, b), u1 = _mm256_unpackhi_ps(a, b); /* (a0 b0 a1 b1 | a4 b4 a5 b5), (a2 .. | a6 ..) */
    *lo = _mm256_permute2f128_ps(u0, u1, 0x20);
    *hi = _mm256_permute2f128_ps(u0, u1, 0x31);
}
#endif

static inline int pl_threads(const ct_kargs *k, int64_t work) {
    return work >= 16384 && k->nthreads > 1 ? k->nthreads : 1;
}

typedef ct_pool_dims pl_dims;

static pl_dims pl_get(const ct_kargs *k, const ct_tensor *x, const ct_tensor *y) { return ct_pool_get(k->node, x, y); }

/* elements of one input / output plane (channels-last: one image) */
static int64_t pl_in_n(const pl_dims *d) { return d->H * d->W * (d->cl ? d->C : 1); }
static int64_t pl_out_n(const pl_dims *d) { return d->OH * d->OW * (d->cl ? d->C : 1); }

/* BF16 planes above a tile: nt threads' FP32 plane pairs from the workspace */
static size_t pl_ws_need(const pl_dims *d, int nt) { return ct_pool_bf16_ws_bytes(pl_in_n(d), pl_out_n(d), nt); }

/* I/O: in[0] and out FP32 or BF16; BF16 planes fit a tile or the workspace (nt threads). */
static int pl_io_ok(const ct_kargs *k, const pl_dims *d, int nt) {
    if (ct_lowp_io(k, 1) == CT_F32) return k->out.dtype == CT_F32 && k->in[0].dtype == CT_F32;
    size_t need = pl_ws_need(d, nt);
    return !need || (k->ws && k->ws_bytes >= need);
}

/* This thread's FP32 planes for BF16 I/O: the stack tiles (a, b: CT_BF16_TILE
 * floats each), or n_a + n_b floats of the workspace for big planes. */
static void pl_tiles(const ct_kargs *k, const pl_dims *d, float *a, float *b, int64_t n_a, float **ta, float **tb) {
    if (!pl_ws_need(d, 1) || ct_lowp_io(k, 1) == CT_F32) { /* FP32 I/O never touches them */
        *ta = a, *tb = b;
        return;
    }
    *ta = (float *)k->ws + (size_t)omp_get_thread_num() * (size_t)(pl_in_n(d) + pl_out_n(d));
    *tb = *ta + n_a;
}

static int pl_is_2x2(const pl_dims *d) {
    return d->KH == 2 && d->KW == 2 && d->SH == 2 && d->SW == 2 && d->PH == 0 && d->PW == 0 && d->DH == 1 &&
           d->DW == 1 && d->OH == d->H / 2 && d->OW == d->W / 2;
}

/* Loads the 2*t (t <= VW) input columns of one row that feed t outputs, split
 * into even / odd columns. */
static inline void pl_load_pairs(const float *p, int t, vf *ev, vf *od) {
    vf lo, hi;
    if (t == VW) {
        lo = vload(p);
        hi = vload(p + VW);
    } else {
        lo = vtail_load(p, CT_MIN(2 * t, VW));
        hi = vtail_load(p + VW, CT_MAX(2 * t - VW, 0));
    }
    pl_deint(lo, hi, ev, od);
}

/* ---- channels-last: x (N, H, W, C), y (N, OH, OW, C) -------------------------------------------
 * Vectorized across C (contiguous): each output pixel's C channels in
 * vectors of VW, the window's taps in row-major order. Max pooling and both
 * backward kernels run the reference's per-element arithmetic in its order
 * (pool_plane.h's *_cl_image), so their results are identical to it (and to
 * the (N, C, H, W) layout's); the average's forward sums in FP32 in window
 * order and divides (the reference sums in double). The forward runs in
 * parallel over the N*OH output rows, the backward over images (and
 * channel blocks when there are fewer images than threads): each dx element
 * accumulates its windows in (oh, ow) order whatever the thread count.
 * Windows that tile the input (kernel = stride, no padding or dilation)
 * store dx once instead; 2x2 stride-2 max pooling has its own loops. With
 * 16-bit I/O both go image by image through FP32 tiles (or the workspace). */

static inline vf pl_ld(const float *p, int t) { return t == VW ? vload(p) : vtail_load(p, t); }
static inline void pl_st(float *p, vf v, int t) {
    if (t == VW) vstore(p, v);
    else vtail_store(p, v, t);
}

/* The taps of window (oh, ow) inside the input, in window order: pixel
 * offsets ih*W+iw and argmax ids (the tap, or the flat index when wide);
 * -1 for windows of more than PL_TAPS taps (the loops then walk the window). */
#define PL_TAPS 64
static int pl_cl_taps(const pl_dims *d, int64_t oh, int64_t ow, int64_t *pix, int32_t *id) {
    if (d->KH * d->KW > PL_TAPS) return -1;
    int n = 0;
    for (int64_t i = 0; i < d->KH; i++) {
        const int64_t ih = oh * d->SH - d->PH + i * d->DH;
        if (ih < 0 || ih >= d->H) continue;
        for (int64_t j = 0; j < d->KW; j++) {
            const int64_t iw = ow * d->SW - d->PW + j * d->DW;
            if (iw < 0 || iw >= d->W) continue;
            pix[n] = ih * d->W + iw;
            id[n++] = (int32_t)(d->arg_wide ? ih * d->W + iw : i * d->KW + j);
        }
    }
    return n;
}

/* Relative tap offsets of a whole window (i*DH*W + j*DW) and their one-byte
 * ids, in window order; pl_taps_at fills a window's lists from them when all
 * its taps lie inside the input (most windows), else walks it (pl_cl_taps). */
typedef struct {
    int n; /* -1: more than PL_TAPS taps */
    int64_t rel[PL_TAPS];
    int32_t id[PL_TAPS];
} pl_win;
static void pl_win_init(const pl_dims *d, pl_win *w) {
    w->n = -1;
    if (d->KH * d->KW > PL_TAPS) return;
    w->n = 0;
    for (int64_t i = 0; i < d->KH; i++)
        for (int64_t j = 0; j < d->KW; j++) {
            w->rel[w->n] = i * d->DH * d->W + j * d->DW;
            w->id[w->n++] = (int32_t)(i * d->KW + j);
        }
}
static int pl_taps_at(const pl_dims *d, const pl_win *w, int64_t oh, int64_t ow, int64_t *pix, int32_t *id) {
    const int64_t ih0 = oh * d->SH - d->PH, iw0 = ow * d->SW - d->PW;
    if (w->n < 0 || ih0 < 0 || ih0 + (d->KH - 1) * d->DH >= d->H || iw0 < 0 || iw0 + (d->KW - 1) * d->DW >= d->W)
        return pl_cl_taps(d, oh, ow, pix, id);
    const int64_t base = ih0 * d->W + iw0;
    for (int q = 0; q < w->n; q++) {
        pix[q] = base + w->rel[q];
        id[q] = d->arg_wide ? (int32_t)pix[q] : w->id[q];
    }
    return w->n;
}

/* the next tap v (id) of a max window: the first tap inside the input (the
 * same for every channel) is taken, then pl_take's rule */
static inline void pl_max_step(vf v, int32_t id, vf *best, vi *bt, int *any) {
    if (!*any) {
        *best = v, *bt = pl_iset1(id), *any = 1;
        return;
    }
    pl_mask m = pl_take(v, *best);
    *best = pl_fsel(m, *best, v);
    *bt = pl_isel(m, *bt, pl_iset1(id));
}

/* The max of a 2x2 window's taps a b / c e (window order, as the reference: the first of
 * equal maxima, NaN propagating) and its one-byte tap in *bt. */
static inline vf pl_max4(vf a, vf b, vf c, vf e, vi *bt) {
    vf best = a;
    int any = 1;
    *bt = pl_iset1(0);
    pl_max_step(b, 1, &best, bt, &any);
    pl_max_step(c, 2, &best, bt, &any);
    pl_max_step(e, 3, &best, bt, &any);
    return best;
}

/* maxpool_cl_row for 2x2 stride-2 windows without padding (the CNN's):
 * the four taps' pointers directly, in window order (one-byte taps) */
static void maxpool_cl_row_2x2(const float *x, float *y, uint8_t *arg, const pl_dims *d, int64_t oh) {
    const int64_t C = d->C, W = d->W;
    const float *r0 = x + 2 * oh * W * C, *r1 = r0 + W * C;
    for (int64_t ow = 0; ow < d->OW; ow++) {
        const int64_t o = (oh * d->OW + ow) * C;
        const float *p0 = r0 + 2 * ow * C, *p1 = r1 + 2 * ow * C;
        for (int64_t c = 0; c < C; c += VW) {
            const int t = (int)CT_MIN(VW, C - c);
            vi bi;
            vf best = pl_max4(pl_ld(p0 + c, t), pl_ld(p0 + C + c, t), pl_ld(p1 + c, t), pl_ld(p1 + C + c, t), &bi);
            pl_st(y + o + c, best, t);
            pl_tap_store(arg + o + c, bi, t);
        }
    }
}

/* output row oh of one image: y and arg point at the image */
static void maxpool_cl_row(const float *x, float *y, void *arg, const pl_dims *d, int64_t oh) {
    const int64_t C = d->C, W = d->W;
    if (pl_is_2x2(d)) {
        maxpool_cl_row_2x2(x, y, arg, d, oh);
        return;
    }
    int64_t pix[PL_TAPS];
    int32_t ids[PL_TAPS];
    pl_win win;
    pl_win_init(d, &win);
    for (int64_t ow = 0; ow < d->OW; ow++) {
        const int64_t o = (oh * d->OW + ow) * C;
        const int nt = pl_taps_at(d, &win, oh, ow, pix, ids);
        for (int64_t c = 0; c < C; c += VW) {
            const int t = (int)CT_MIN(VW, C - c);
            vf best = vset1(-INFINITY);
            vi bt = pl_iset1(d->arg_wide ? -1 : CT_POOL_NO_TAP);
            int any = 0;
            if (nt >= 0) {
                for (int q = 0; q < nt; q++) pl_max_step(pl_ld(x + pix[q] * C + c, t), ids[q], &best, &bt, &any);
            } else {
                for (int64_t i = 0; i < d->KH; i++) {
                    const int64_t ih = oh * d->SH - d->PH + i * d->DH;
                    if (ih < 0 || ih >= d->H) continue;
                    for (int64_t j = 0; j < d->KW; j++) {
                        const int64_t iw = ow * d->SW - d->PW + j * d->DW;
                        if (iw < 0 || iw >= W) continue;
                        pl_max_step(pl_ld(x + (ih * W + iw) * C + c, t), (int32_t)(d->arg_wide ? ih * W + iw : i * d->KW + j),
                                    &best, &bt, &any);
                    }
                }
            }
            pl_st(y + o + c, best, t);
            if (!d->arg_wide) {
                pl_tap_store((uint8_t *)arg + o + c, bt, t);
            } else if (t == VW) {
                pl_istore((int32_t *)arg + o + c, bt);
            } else {
                int32_t b[VW];
                pl_istore(b, bt);
                memcpy((int32_t *)arg + o + c, b, (size_t)t * sizeof *b);
            }
        }
    }
}

static void avgpool_cl_row(const float *x, float *y, const pl_dims *d, int64_t oh) {
    const int64_t C = d->C, W = d->W;
    int64_t pix[PL_TAPS];
    int32_t ids[PL_TAPS];
    pl_win win;
    pl_win_init(d, &win);
    for (int64_t ow = 0; ow < d->OW; ow++) {
        const int64_t o = (oh * d->OW + ow) * C, div = ct_avgpool_div(d, oh, ow);
        const int nt = pl_taps_at(d, &win, oh, ow, pix, ids);
        const vf vd = vset1((float)div);
        for (int64_t c = 0; c < C; c += VW) {
            const int t = (int)CT_MIN(VW, C - c);
            vf s = vzero();
            if (nt >= 0) {
                for (int q = 0; q < nt; q++) s = vadd(s, pl_ld(x + pix[q] * C + c, t));
            } else {
                for (int64_t i = 0; i < d->KH; i++) {
                    const int64_t ih = oh * d->SH - d->PH + i * d->DH;
                    if (ih < 0 || ih >= d->H) continue;
                    for (int64_t j = 0; j < d->KW; j++) {
                        const int64_t iw = ow * d->SW - d->PW + j * d->DW;
                        if (iw < 0 || iw >= W) continue;
                        s = vadd(s, pl_ld(x + (ih * W + iw) * C + c, t));
                    }
                }
            }
            pl_st(y + o + c, div ? vdiv(s, vd) : vzero(), t);
        }
    }
}

/* windows that tile the input (kernel = stride, no dilation or padding):
 * every input lies in at most one window, the rows / columns past the last
 * window in none */
static int pl_tiled(const pl_dims *d) {
    return d->KH == d->SH && d->KW == d->SW && d->DH == 1 && d->DW == 1 && d->PH == 0 && d->PW == 0;
}

/* dx of channels [c0, c1) of one image: zeroed, then every window's share
 * added in (oh, ow) order. avg: arg NULL; max: the saved argmax, dy where a
 * lane's argmax is the tap, + 0 elsewhere (dx is never -0: it starts +0).
 * Tiled windows store 0 + share instead (the same values: one window per
 * input) and zero only the inputs no window covers. */
static void pool_bwd_cl_image(const float *dy, const void *arg, float *dx, const pl_dims *d, int64_t c0, int64_t c1) {
    const int64_t C = d->C, W = d->W, HW = d->H * d->W;
    const int tiled = pl_tiled(d), two = arg && pl_is_2x2(d); /* (2x2: one-byte taps, every window inside) */
    if (tiled) {
        const int64_t h1 = CT_MIN(d->H, d->OH * d->SH), w1 = CT_MIN(W, d->OW * d->SW);
        for (int64_t ih = 0; ih < d->H; ih++)
            for (int64_t iw = ih < h1 ? w1 : 0; iw < W; iw++) memset(dx + (ih * W + iw) * C + c0, 0, (size_t)(c1 - c0) * sizeof *dx);
    } else if (c0 == 0 && c1 == C) {
        memset(dx, 0, (size_t)(HW * C) * sizeof *dx);
    } else {
        for (int64_t p = 0; p < HW; p++) memset(dx + p * C + c0, 0, (size_t)(c1 - c0) * sizeof *dx);
    }
    int64_t pix[PL_TAPS];
    int32_t ids[PL_TAPS];
    pl_win win;
    pl_win_init(d, &win);
    for (int64_t oh = 0; oh < d->OH; oh++)
        for (int64_t ow = 0; ow < d->OW; ow++) {
            const int64_t o = (oh * d->OW + ow) * C;
            vf q = vzero();
            if (!arg) {
                const int64_t div = ct_avgpool_div(d, oh, ow);
                if (!div) continue; /* (never for tiled windows: each holds a tap) */
                q = vset1(1.0f / (float)div); /* as the reference: dy * (1.0f / div) */
            }
            const int nt = pl_taps_at(d, &win, oh, ow, pix, ids);
            for (int64_t c = c0; c < c1; c += VW) {
                const int t = (int)CT_MIN(VW, c1 - c);
                vf g = pl_ld(dy + o + c, t);
                vi a = pl_iset1(0);
                if (!arg) {
                    g = vmul(g, q);
                } else if (!d->arg_wide) {
                    a = pl_tap_load((const uint8_t *)arg + o + c, t);
                } else if (t == VW) {
                    a = pl_iload((const int32_t *)arg + o + c);
                } else {
                    int32_t b[VW];
                    for (int l = 0; l < VW; l++) b[l] = l < t ? ((const int32_t *)arg)[o + c + l] : -1;
                    a = pl_iload(b);
                }
                if (two) { /* 2x2 stride 2: dx = 0 + dy at the saved tap, 0 + 0 elsewhere */
                    float *p0 = dx + pix[0] * C + c, *p1 = dx + pix[2] * C + c;
                    pl_st(p0, vadd(vzero(), pl_keep_eq(a, pl_iset1(0), g)), t);
                    pl_st(p0 + C, vadd(vzero(), pl_keep_eq(a, pl_iset1(1), g)), t);
                    pl_st(p1, vadd(vzero(), pl_keep_eq(a, pl_iset1(2), g)), t);
                    pl_st(p1 + C, vadd(vzero(), pl_keep_eq(a, pl_iset1(3), g)), t);
                    continue;
                }
                if (nt >= 0) {
                    for (int r = 0; r < nt; r++) {
                        float *p = dx + pix[r] * C + c;
                        vf add = arg ? pl_keep_eq(a, pl_iset1(ids[r]), g) : g;
                        pl_st(p, vadd(tiled ? vzero() : pl_ld(p, t), add), t);
                    }
                    continue;
                }
                for (int64_t i = 0; i < d->KH; i++) {
                    const int64_t ih = oh * d->SH - d->PH + i * d->DH;
                    if (ih < 0 || ih >= d->H) continue;
                    for (int64_t j = 0; j < d->KW; j++) {
                        const int64_t iw = ow * d->SW - d->PW + j * d->DW;
                        if (iw < 0 || iw >= W) continue;
                        float *p = dx + (ih * W + iw) * C + c;
                        vf add = g;
                        if (arg) add = pl_keep_eq(a, pl_iset1((int32_t)(d->arg_wide ? ih * W + iw : i * d->KW + j)), g);
                        pl_st(p, vadd(tiled ? vzero() : pl_ld(p, t), add), t);
                    }
                }
            }
        }
}

/* forward: max (with the aux) or avg */
static ct_status pool_cl_fwd(ct_kargs *k, const pl_dims *d, int max) {
    const int nt = pl_threads(k, d->N * d->H * d->W * d->C);
    if (!pl_io_ok(k, d, nt)) return CT_E_UNSUPPORTED;
    const ct_tensor *X = &k->in[0], *Y = &k->out;
    const int64_t IN = pl_in_n(d), ON = pl_out_n(d);
    if (ct_lowp_io(k, 1) == CT_F32) {
        const float *x = X->data;
        float *y = Y->data;
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int64_t r = 0; r < d->N * d->OH; r++) {
            const int64_t n = r / d->OH;
            if (max) maxpool_cl_row(x + n * IN, y + n * ON, ct_maxpool_arg_image(k->aux, n, d), d, r % d->OH);
            else avgpool_cl_row(x + n * IN, y + n * ON, d, r % d->OH);
        }
        return CT_OK;
    }
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t n = 0; n < d->N; n++) {
        float sx[CT_BF16_TILE], sy[CT_BF16_TILE], *xb, *yb;
        pl_tiles(k, d, sx, sy, IN, &xb, &yb);
        const float *x = ct_tile_in(X, n * IN, IN, xb);
        float *y = ct_tile_out(Y, n * ON, yb);
        for (int64_t oh = 0; oh < d->OH; oh++) {
            if (max) maxpool_cl_row(x, y, ct_maxpool_arg_image(k->aux, n, d), d, oh);
            else avgpool_cl_row(x, y, d, oh);
        }
        ct_tile_put(Y, n * ON, ON, yb);
    }
    return CT_OK;
}

/* backward: in[0] dy; arg the forward's saved argmax (max) or NULL (avg) */
static ct_status pool_cl_bwd(ct_kargs *k, const pl_dims *d, const void *arg) {
    const int nt = pl_threads(k, d->N * d->H * d->W * d->C);
    if (!pl_io_ok(k, d, nt)) return CT_E_UNSUPPORTED;
    const ct_tensor *DY = &k->in[0], *DX = &k->out;
    const int64_t IN = pl_in_n(d), ON = pl_out_n(d);
    const size_t arg_img = (size_t)ON * (d->arg_wide ? 4 : 1);
    if (ct_lowp_io(k, 1) == CT_F32) {
        /* channel blocks (multiples of VW) when there are fewer images than threads */
        int64_t nb = d->N >= nt ? 1 : (nt + d->N - 1) / d->N, cv = (d->C + VW - 1) / VW;
        nb = CT_MAX(1, CT_MIN(nb, cv));
        const int64_t bs = (cv + nb - 1) / nb * VW;
        nb = (d->C + bs - 1) / bs;
        const float *dy = DY->data;
        float *dx = DX->data;
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int64_t task = 0; task < d->N * nb; task++) {
            const int64_t n = task / nb, c0 = task % nb * bs;
            pool_bwd_cl_image(dy + n * ON, arg ? (const char *)arg + (size_t)n * arg_img : NULL, dx + n * IN, d, c0,
                              CT_MIN(d->C, c0 + bs));
        }
        return CT_OK;
    }
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t n = 0; n < d->N; n++) {
        float sd[CT_BF16_TILE], sx[CT_BF16_TILE], *db, *xb;
        pl_tiles(k, d, sd, sx, ON, &db, &xb);
        const float *dy = ct_tile_in(DY, n * ON, ON, db);
        float *dx = ct_tile_out(DX, n * IN, xb);
        pool_bwd_cl_image(dy, arg ? (const char *)arg + (size_t)n * arg_img : NULL, dx, d, 0, d->C);
        ct_tile_put(DX, n * IN, IN, xb);
    }
    return CT_OK;
}

/* ---- max pooling ------------------------------------------------------------------------ */

/* In the 2x2 kernels below, a chunk whose vectors would run past the end of
 * its row loads / stores full vectors anyway when they stay inside the plane
 * and the extra lanes land where this thread writes later (rows go in order;
 * the first dx row of a pair spills only when a row is one chunk, since the
 * second row's earlier chunks are already written otherwise). This avoids
 * masked stores (slow on some CPUs) for narrow rows such as 14 -> 7; chunks at
 * the very end of a plane use masked accesses. */
static inline void pl_pairs(const float *row, int64_t off, int64_t plane, int t, vf *ev, vf *od) {
    if (off + 2 * VW <= plane) pl_deint(vload(row), vload(row + VW), ev, od);
    else pl_load_pairs(row, t, ev, od);
}

/* the argmax as one-byte taps (pool_plane.h): 0 1 / 2 3 in window order */
static void maxpool_2x2_plane(const float *x, float *y, uint8_t *arg, const pl_dims *d) {
    const int64_t W = d->W, HW = d->H * d->W, OHW = d->OH * d->OW;
    for (int64_t oh = 0; oh < d->OH; oh++) {
        int64_t i0 = 2 * oh * W;
        for (int64_t ow = 0; ow < d->OW; ow += VW) {
            int t = (int)CT_MIN(VW, d->OW - ow);
            vf a, b, c, e;
            pl_pairs(x + i0 + 2 * ow, i0 + 2 * ow, HW, t, &a, &b);
            pl_pairs(x + i0 + W + 2 * ow, i0 + W + 2 * ow, HW, t, &c, &e);
            vi bi; /* window order: (0,0) (0,1) (1,0) (1,1), as the reference */
            vf best = pl_max4(a, b, c, e, &bi);
            int64_t o = oh * d->OW + ow;
            if (o + VW <= OHW) vstore(y + o, best);
            else vtail_store(y + o, best, t);
            pl_tap_store(arg + o, bi, t);
        }
    }
}

ct_status CT_FN(maxpool2d)(ct_kargs *k) {
    pl_dims d = pl_get(k, &k->in[0], &k->out);
    if (d.cl) return pool_cl_fwd(k, &d, 1);
    const int nt = pl_threads(k, d.NC * d.H * d.W);
    if (!pl_io_ok(k, &d, nt)) return CT_E_UNSUPPORTED;
    const ct_tensor *X = &k->in[0], *Y = &k->out;
    int fast = pl_is_2x2(&d);
    int64_t HW = d.H * d.W, OHW = d.OH * d.OW;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t nc = 0; nc < d.NC; nc++) {
        float sx[CT_BF16_TILE], sy[CT_BF16_TILE], *xb, *yb; /* BF16 tiles (unused for FP32) */
        pl_tiles(k, &d, sx, sy, HW, &xb, &yb);
        const float *x = ct_tile_in(X, nc * HW, HW, xb);
        float *y = ct_tile_out(Y, nc * OHW, yb);
        if (fast) maxpool_2x2_plane(x, y, ct_maxpool_arg_plane(k->aux, nc, &d), &d);
        else ct_maxpool_plane(x, y, ct_maxpool_arg_plane(k->aux, nc, &d), &d);
        ct_tile_put(Y, nc * OHW, OHW, yb);
    }
    return CT_OK;
}

/* Writes dx of one plane for 2x2 stride-2 windows: each input belongs to at
 * most one window, so dx is dy at the saved argmax and 0 elsewhere (also in
 * the last row / column when H / W is odd). */
/* Stores the 2*t floats (lo, hi) of one dx row chunk at offset off of a plane
 * of HW floats: full vectors when they stay inside the plane and `spill` says
 * that what lies past the row is written later. */
static inline void pl_store_row(float *p, int64_t off, int64_t HW, int t, int spill, vf lo, vf hi) {
    if ((t == VW || spill) && off + 2 * VW <= HW) {
        vstore(p, lo);
        vstore(p + VW, hi);
        return;
    }
    int n0 = CT_MIN(2 * t, VW), n1 = CT_MAX(2 * t - VW, 0);
    vtail_store(p, lo, n0);
    if (n1) vtail_store(p + VW, hi, n1);
}

static void maxpool_bwd_2x2_plane(const float *dy, const uint8_t *arg, float *dx, const pl_dims *d) {
    const int64_t W = d->W, HW = d->H * d->W, OHW = d->OH * d->OW;
    const vi t0 = pl_iset1(0), t1 = pl_iset1(1), t2 = pl_iset1(2), t3 = pl_iset1(3);
    for (int64_t oh = 0; oh < d->OH; oh++) {
        int64_t i0 = 2 * oh * W;
        for (int64_t ow = 0; ow < d->OW; ow += VW) {
            int t = (int)CT_MIN(VW, d->OW - ow);
            int64_t o = oh * d->OW + ow;
            vf gv = o + VW <= OHW ? vload(dy + o) : vtail_load(dy + o, t);
            vi av = pl_tap_load(arg + o, t);
            /* + 0 turns -0 into +0 as the reference's 0 + dy does */
            vf a = vadd(pl_keep_eq(av, t0, gv), vzero()), b = vadd(pl_keep_eq(av, t1, gv), vzero());
            vf c = vadd(pl_keep_eq(av, t2, gv), vzero()), e = vadd(pl_keep_eq(av, t3, gv), vzero());
            vf lo0, hi0, lo1, hi1;
            pl_inter(a, b, &lo0, &hi0);
            pl_inter(c, e, &lo1, &hi1);
            pl_store_row(dx + i0 + 2 * ow, i0 + 2 * ow, HW, t, d->OW <= VW, lo0, hi0);
            pl_store_row(dx + i0 + W + 2 * ow, i0 + W + 2 * ow, HW, t, 1, lo1, hi1);
        }
        if (W & 1) dx[i0 + W - 1] = dx[i0 + 2 * W - 1] = 0;
    }
    if (d->H & 1) memset(dx + (d->H - 1) * W, 0, (size_t)W * sizeof *dx);
}

/* in: dy, fwd -> dx */
ct_status CT_FN(maxpool2d_bwd)(ct_kargs *k) {
    pl_dims d = pl_get(k, &k->out, &k->in[0]);
    if (d.cl) return pool_cl_bwd(k, &d, k->in_aux[1]);
    const int nt = pl_threads(k, d.NC * d.H * d.W);
    if (!pl_io_ok(k, &d, nt)) return CT_E_UNSUPPORTED;
    const ct_tensor *DY = &k->in[0], *DX = &k->out;
    int fast = pl_is_2x2(&d);
    int64_t HW = d.H * d.W, OHW = d.OH * d.OW;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t nc = 0; nc < d.NC; nc++) {
        float sd[CT_BF16_TILE], sx[CT_BF16_TILE], *db, *xb; /* BF16 tiles (unused for FP32) */
        pl_tiles(k, &d, sd, sx, OHW, &db, &xb);
        const float *dy = ct_tile_in(DY, nc * OHW, OHW, db);
        float *dx = ct_tile_out(DX, nc * HW, xb);
        if (fast) {
            maxpool_bwd_2x2_plane(dy, ct_maxpool_arg_plane(k->in_aux[1], nc, &d), dx, &d);
        } else {
            ct_maxpool_bwd_plane(dy, ct_maxpool_arg_plane(k->in_aux[1], nc, &d), dx, &d); /* the reference's scatter-add */
        }
        ct_tile_put(DX, nc * HW, HW, xb);
    }
    return CT_OK;
}

/* ---- average pooling ------------------------------------------------------------------------ */

static void avgpool_2x2_plane(const float *x, float *y, const pl_dims *d) {
    const int64_t W = d->W, HW = d->H * d->W, OHW = d->OH * d->OW;
    const vf q = vset1(0.25f);
    for (int64_t oh = 0; oh < d->OH; oh++) {
        int64_t i0 = 2 * oh * W;
        for (int64_t ow = 0; ow < d->OW; ow += VW) {
            int t = (int)CT_MIN(VW, d->OW - ow);
            vf a, b, c, e;
            pl_pairs(x + i0 + 2 * ow, i0 + 2 * ow, HW, t, &a, &b);
            pl_pairs(x + i0 + W + 2 * ow, i0 + W + 2 * ow, HW, t, &c, &e);
            vf s = vmul(vadd(vadd(a, b), vadd(c, e)), q);
            int64_t o = oh * d->OW + ow;
            if (o + VW <= OHW) vstore(y + o, s);
            else vtail_store(y + o, s, t);
        }
    }
}

ct_status CT_FN(avgpool2d)(ct_kargs *k) {
    pl_dims d = pl_get(k, &k->in[0], &k->out);
    if (d.cl) return pool_cl_fwd(k, &d, 0);
    const int nt = pl_threads(k, d.NC * d.H * d.W);
    if (!pl_io_ok(k, &d, nt)) return CT_E_UNSUPPORTED;
    const ct_tensor *X = &k->in[0], *Y = &k->out;
    int fast = pl_is_2x2(&d);
    int64_t HW = d.H * d.W, OHW = d.OH * d.OW;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t nc = 0; nc < d.NC; nc++) {
        float sx[CT_BF16_TILE], sy[CT_BF16_TILE], *xb, *yb; /* BF16 tiles (unused for FP32) */
        pl_tiles(k, &d, sx, sy, HW, &xb, &yb);
        const float *x = ct_tile_in(X, nc * HW, HW, xb);
        float *y = ct_tile_out(Y, nc * OHW, yb);
        if (fast) avgpool_2x2_plane(x, y, &d);
        else ct_avgpool_plane(x, y, &d);
        ct_tile_put(Y, nc * OHW, OHW, yb);
    }
    return CT_OK;
}

static void avgpool_bwd_2x2_plane(const float *dy, float *dx, const pl_dims *d) {
    const int64_t W = d->W, HW = d->H * d->W, OHW = d->OH * d->OW;
    const vf q = vset1(0.25f); /* 1.0f / 4, exactly as the reference */
    for (int64_t oh = 0; oh < d->OH; oh++) {
        int64_t i0 = 2 * oh * W;
        for (int64_t ow = 0; ow < d->OW; ow += VW) {
            int t = (int)CT_MIN(VW, d->OW - ow);
            int64_t o = oh * d->OW + ow;
            vf g = vmul(o + VW <= OHW ? vload(dy + o) : vtail_load(dy + o, t), q), lo, hi;
            g = vadd(g, vzero()); /* 0 + g, as the reference (turns -0 into +0) */
            pl_inter(g, g, &lo, &hi);
            pl_store_row(dx + i0 + 2 * ow, i0 + 2 * ow, HW, t, d->OW <= VW, lo, hi);
            pl_store_row(dx + i0 + W + 2 * ow, i0 + W + 2 * ow, HW, t, 1, lo, hi);
        }
        if (W & 1) dx[i0 + W - 1] = dx[i0 + 2 * W - 1] = 0;
    }
    if (d->H & 1) memset(dx + (d->H - 1) * W, 0, (size_t)W * sizeof *dx);
}

/* in: dy -> dx */
ct_status CT_FN(avgpool2d_bwd)(ct_kargs *k) {
    pl_dims d = pl_get(k, &k->out, &k->in[0]);
    if (d.cl) return pool_cl_bwd(k, &d, NULL);
    const int nt = pl_threads(k, d.NC * d.H * d.W);
    if (!pl_io_ok(k, &d, nt)) return CT_E_UNSUPPORTED;
    const ct_tensor *DY = &k->in[0], *DX = &k->out;
    int fast = pl_is_2x2(&d);
    int64_t HW = d.H * d.W, OHW = d.OH * d.OW;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t nc = 0; nc < d.NC; nc++) {
        float sd[CT_BF16_TILE], sx[CT_BF16_TILE], *db, *xb; /* BF16 tiles (unused for FP32) */
        pl_tiles(k, &d, sd, sx, OHW, &db, &xb);
        const float *dy = ct_tile_in(DY, nc * OHW, OHW, db);
        float *dx = ct_tile_out(DX, nc * HW, xb);
        if (fast) avgpool_bwd_2x2_plane(dy, dx, &d);
        else ct_avgpool_bwd_plane(dy, dx, &d);
        ct_tile_put(DX, nc * HW, HW, xb);
    }
    return CT_OK;
}
