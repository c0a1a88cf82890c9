/* src/kernels/simd/shape.c - data-movement ops: transpose, concat, slice and
 * its gradient. Work on any dtype by element size; all results are exact
 * copies, so they equal the reference's bit for bit.
 *
 * transpose: dims of size 1 are dropped and input dims that stay adjacent and
 * in order are merged; then either the innermost dim is unchanged (runs of
 * memcpy) or it moves (2-D tiled copies between the input's and the output's
 * contiguous dims, e.g. swapping the last two dims). Parallel over the outer
 * dims and tile rows. concat / slice / slice_bwd are row memcpys, parallel
 * over the outer dim (or over byte ranges when there are few rows). */
#include <string.h>

#include "simd.h"

#define SH_PAR_BYTES (256 * 1024) /* copies smaller than this run on one thread */
#define SH_TILE 32

static inline int sh_threads(const ct_kargs *k, int64_t bytes) {
    return bytes >= SH_PAR_BYTES && k->nthreads > 1 ? k->nthreads : 1;
}

static void sh_copy_rows(const ct_kargs *k, char *dst, int64_t dstride, const char *src, int64_t sstride,
                         int64_t rows, int64_t len);

/* ---- transpose -------------------------------------------------------------------------- */

/* Canonical form: nd dims of the output, shape[i], and the input stride (in
 * elements) that output dim i walks. */
typedef struct {
    int nd;
    int64_t shape[CT_MAX_DIMS];
    int64_t ist[CT_MAX_DIMS];
} sh_perm;

static void sh_canon(const ct_kargs *k, sh_perm *p) {
    const ct_tensor *X = &k->in[0];
    int nd = X->ndim;
    int64_t xs[CT_MAX_DIMS] = {0};
    ct_contig_strides(nd, X->shape, xs);
    p->nd = 0;
    for (int i = 0; i < nd; i++) {
        int src = (int)k->node->ia[i];
        int64_t n = X->shape[src], s = xs[src];
        if (n == 1) continue;
        /* merge with the previous output dim when that one is the input dim just
         * before `src` (adjacent in both): then prev stride = n * s */
        if (p->nd > 0 && p->ist[p->nd - 1] == n * s) {
            p->shape[p->nd - 1] *= n;
            p->ist[p->nd - 1] = s;
            continue;
        }
        p->shape[p->nd] = n;
        p->ist[p->nd] = s;
        p->nd++;
    }
}

/* Copies one element of es bytes. */
static inline void sh_cp1(char *d, const char *s, size_t es) {
    switch (es) {
    case 1: *d = *s; break;
    case 2: memcpy(d, s, 2); break;
    case 4: memcpy(d, s, 4); break;
    case 8: memcpy(d, s, 8); break;
    default: memcpy(d, s, es); break;
    }
}

/* Tile: out[i*os + j] = in[i + j*is] for i < ni, j < nj (elements of es bytes):
 * rows i of the output are read down the input's column. */
#define SH_TILE_T(T)                                                                         \
    static void sh_tile_##T(T *o, const T *in, int64_t ni, int64_t nj, int64_t os, int64_t is) { \
        for (int64_t i = 0; i < ni; i++)                                                     \
            for (int64_t j = 0; j < nj; j++) o[i * os + j] = in[i + j * is];                  \
    }
SH_TILE_T(uint8_t)
SH_TILE_T(uint16_t)
SH_TILE_T(uint64_t)

/* 4-byte elements: 8x8 blocks through registers (AVX2 instructions, present
 * in both builds), scalar edges. */
static inline void sh_t8x8(float *o, const float *in, int64_t os, int64_t is) {
    __m256 r0 = _mm256_loadu_ps(in + 0 * is), r1 = _mm256_loadu_ps(in + 1 * is), r2 = _mm256_loadu_ps(in + 2 * is),
           r3 = _mm256_loadu_ps(in + 3 * is), r4 = _mm256_loadu_ps(in + 4 * is), r5 = _mm256_loadu_ps(in + 5 * is),
           r6 = _mm256_loadu_ps(in + 6 * is), r7 = _mm256_loadu_ps(in + 7 * is);
    __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1), t2 = _mm256_unpacklo_ps(r2, r3),
           t3 = _mm256_unpackhi_ps(r2, r3), t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5),
           t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    __m256 s0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0)), s1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2)),
           s2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0)), s3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2)),
           s4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0)), s5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2)),
           s6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0)), s7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
    _mm256_storeu_ps(o + 0 * os, _mm256_permute2f128_ps(s0, s4, 0x20));
    _mm256_storeu_ps(o + 1 * os, _mm256_permute2f128_ps(s1, s5, 0x20));
    _mm256_storeu_ps(o + 2 * os, _mm256_permute2f128_ps(s2, s6, 0x20));
    _mm256_storeu_ps(o + 3 * os, _mm256_permute2f128_ps(s3, s7, 0x20));
    _mm256_storeu_ps(o + 4 * os, _mm256_permute2f128_ps(s0, s4, 0x31));
    _mm256_storeu_ps(o + 5 * os, _mm256_permute2f128_ps(s1, s5, 0x31));
    _mm256_storeu_ps(o + 6 * os, _mm256_permute2f128_ps(s2, s6, 0x31));
    _mm256_storeu_ps(o + 7 * os, _mm256_permute2f128_ps(s3, s7, 0x31));
}

static void sh_tile_uint32_t(uint32_t *o, const uint32_t *in, int64_t ni, int64_t nj, int64_t os, int64_t is) {
    float *of = (float *)o;
    const float *inf = (const float *)in;
    int64_t i8 = ni / 8 * 8, j8 = nj / 8 * 8;
    for (int64_t i = 0; i < i8; i += 8)
        for (int64_t j = 0; j < j8; j += 8) sh_t8x8(of + i * os + j, inf + i + j * is, os, is);
    for (int64_t i = 0; i < ni; i++)
        for (int64_t j = i < i8 ? j8 : 0; j < nj; j++) o[i * os + j] = in[i + j * is];
}

static void sh_tile(char *o, const char *in, int64_t ni, int64_t nj, int64_t os, int64_t is, size_t es) {
    switch (es) {
    case 1: sh_tile_uint8_t((uint8_t *)o, (const uint8_t *)in, ni, nj, os, is); break;
    case 2: sh_tile_uint16_t((uint16_t *)o, (const uint16_t *)in, ni, nj, os, is); break;
    case 4: sh_tile_uint32_t((uint32_t *)o, (const uint32_t *)in, ni, nj, os, is); break;
    case 8: sh_tile_uint64_t((uint64_t *)o, (const uint64_t *)in, ni, nj, os, is); break;
    default:
        for (int64_t i = 0; i < ni; i++)
            for (int64_t j = 0; j < nj; j++) memcpy(o + (i * os + j) * es, in + (i + j * is) * es, es);
    }
}

ct_status CT_FN(transpose)(ct_kargs *k) {
    const ct_tensor *X = &k->in[0];
    size_t es = ct_dtype_size(X->dtype);
    int64_t n = ct_tensor_numel(X);
    const char *x = X->data;
    char *y = k->out.data;
    if (n == 0) return CT_OK;
    if (es == 0) return CT_E_UNSUPPORTED;
    sh_perm p;
    sh_canon(k, &p);
    int nt = sh_threads(k, n * (int64_t)es);
    if (p.nd <= 1) { /* the identity once size-1 dims are dropped */
        sh_copy_rows(k, y, 0, x, 0, 1, n * (int64_t)es);
        return CT_OK;
    }
    int64_t ost[CT_MAX_DIMS];
    ct_contig_strides(p.nd, p.shape, ost);
    int L = p.nd - 1;
    if (p.ist[L] == 1) {
        /* innermost dim unchanged: rows of shape[L] elements copied whole */
        size_t row = (size_t)p.shape[L] * es;
        int64_t rows = n / p.shape[L];
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            int64_t q = r, off = 0;
            for (int d = L - 1; d >= 0; d--) {
                off += (q % p.shape[d]) * p.ist[d];
                q /= p.shape[d];
            }
            memcpy(y + (size_t)r * row, x + (size_t)off * es, row);
        }
        return CT_OK;
    }
    /* A = the output dim reading the input's contiguous dim, L = the output's
     * contiguous dim (input stride p.ist[L]). Tiles of (A, L). */
    int A = 0;
    while (A < L && p.ist[A] != 1) A++; /* some dim reads the input's contiguous one; L's does not */
    int64_t nA = p.shape[A], nL = p.shape[L], sA = ost[A], sL = p.ist[L];
    int64_t outer = n / (nA * nL), tilesA = (nA + SH_TILE - 1) / SH_TILE;
    int od[CT_MAX_DIMS], no = 0; /* the other dims */
    for (int d = 0; d < p.nd; d++)
        if (d != A && d != L) od[no++] = d;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t t = 0; t < outer * tilesA; t++) {
        int64_t q = t / tilesA, a0 = (t % tilesA) * SH_TILE, a1 = CT_MIN(nA, a0 + SH_TILE);
        int64_t io = 0, oo = 0;
        for (int j = no - 1; j >= 0; j--) {
            int d = od[j];
            int64_t c = q % p.shape[d];
            q /= p.shape[d];
            io += c * p.ist[d];
            oo += c * ost[d];
        }
        for (int64_t l0 = 0; l0 < nL; l0 += SH_TILE) {
            int64_t l1 = CT_MIN(nL, l0 + SH_TILE);
            sh_tile(y + (size_t)(oo + a0 * sA + l0) * es, x + (size_t)(io + a0 + l0 * sL) * es, a1 - a0, l1 - l0, sA,
                    sL, es);
        }
    }
    return CT_OK;
}

/* ---- concat / slice -------------------------------------------------------------------- */

/* outer = prod(dims before axis), inner = prod(dims after axis) * elem size */
static void sh_split(const ct_tensor *t, int axis, int64_t *outer, int64_t *inner) {
    *outer = 1;
    *inner = (int64_t)ct_dtype_size(t->dtype);
    for (int i = 0; i < axis; i++) *outer *= t->shape[i];
    for (int i = axis + 1; i < t->ndim; i++) *inner *= t->shape[i];
}

/* dst + o*dstride <- src + o*sstride, len bytes, for o < rows; in parallel
 * over rows, or over byte ranges of each row when rows are few. */
static void sh_copy_rows(const ct_kargs *k, char *dst, int64_t dstride, const char *src, int64_t sstride,
                         int64_t rows, int64_t len) {
    if (rows <= 0 || len <= 0) return;
    int nt = sh_threads(k, rows * len);
    if (nt == 1) {
        for (int64_t o = 0; o < rows; o++) memcpy(dst + o * dstride, src + o * sstride, (size_t)len);
        return;
    }
    if (rows >= 4 * nt) {
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int64_t o = 0; o < rows; o++) memcpy(dst + o * dstride, src + o * sstride, (size_t)len);
        return;
    }
    int64_t chunk = (len + 4 * nt - 1) / (4 * nt);
    chunk = (chunk + 63) / 64 * 64;
    int64_t nch = (len + chunk - 1) / chunk;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t t = 0; t < rows * nch; t++) {
        int64_t o = t / nch, b0 = (t % nch) * chunk, b1 = CT_MIN(len, b0 + chunk);
        memcpy(dst + o * dstride + b0, src + o * sstride + b0, (size_t)(b1 - b0));
    }
}

/* concat, slice and slice_bwd copy bytes: any dtype (BF16 I/O included: op_table's simd_lowp) as long as the
 * inputs and the output share it; a mix is the executor's FP32 copies */
static int sh_same_dtype(const ct_kargs *k) {
    for (int j = 0; j < k->node->n_in; j++)
        if (k->in[j].dtype != k->out.dtype) return 0;
    return 1;
}

ct_status CT_FN(concat)(ct_kargs *k) {
    if (!sh_same_dtype(k)) return CT_E_UNSUPPORTED;
    int axis = (int)k->node->ia[0];
    int64_t outer, inner;
    sh_split(&k->out, axis, &outer, &inner);
    char *y = k->out.data;
    int64_t row = k->out.shape[axis] * inner, off = 0;
    int n_in = k->node->n_in;
    int64_t lens[CT_MAX_INPUTS], offs[CT_MAX_INPUTS];
    for (int j = 0; j < n_in; j++) {
        lens[j] = k->in[j].shape[axis] * inner;
        offs[j] = off;
        off += lens[j];
    }
    if (outer >= 4 * k->nthreads && k->nthreads > 1 && outer * row >= SH_PAR_BYTES) {
        /* one output row (all inputs' pieces) per iteration */
#pragma omp parallel for num_threads(k->nthreads) schedule(static)
        for (int64_t o = 0; o < outer; o++)
            for (int j = 0; j < n_in; j++)
                memcpy(y + o * row + offs[j], (const char *)k->in[j].data + o * lens[j], (size_t)lens[j]);
        return CT_OK;
    }
    for (int j = 0; j < n_in; j++) sh_copy_rows(k, y + offs[j], row, k->in[j].data, lens[j], outer, lens[j]);
    return CT_OK;
}

ct_status CT_FN(slice)(ct_kargs *k) {
    if (!sh_same_dtype(k)) return CT_E_UNSUPPORTED;
    int axis = (int)k->node->ia[0];
    int64_t outer, inner;
    sh_split(&k->in[0], axis, &outer, &inner);
    const char *x = k->in[0].data;
    int64_t row = k->in[0].shape[axis] * inner, len = k->out.shape[axis] * inner, start = k->node->ia[1] * inner;
    sh_copy_rows(k, k->out.data, len, x + start, row, outer, len);
    return CT_OK;
}

/* in: dy (slice shape) -> dx (full shape), zeros outside the slice */
ct_status CT_FN(slice_bwd)(ct_kargs *k) {
    if (!sh_same_dtype(k)) return CT_E_UNSUPPORTED;
    int axis = (int)k->node->ia[0];
    int64_t outer, inner;
    sh_split(&k->out, axis, &outer, &inner);
    const char *dy = k->in[0].data;
    char *dx = k->out.data;
    int64_t row = k->out.shape[axis] * inner, len = k->in[0].shape[axis] * inner, start = k->node->ia[1] * inner;
    int64_t tail = row - start - len;
    int nt = sh_threads(k, outer * row);
    if (nt > 1 && outer >= 4 * nt) {
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int64_t o = 0; o < outer; o++) {
            char *r = dx + o * row;
            memset(r, 0, (size_t)start);
            memcpy(r + start, dy + o * len, (size_t)len);
            memset(r + start + len, 0, (size_t)tail);
        }
        return CT_OK;
    }
    for (int64_t o = 0; o < outer; o++) {
        memset(dx + o * row, 0, (size_t)start);
        memset(dx + o * row + start + len, 0, (size_t)tail);
    }
    sh_copy_rows(k, dx + start, row, dy, len, outer, len);
    return CT_OK;
}
