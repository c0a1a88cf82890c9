/* src/kernels/simd/amx.c - BF16 products on AMX tiles, called directly
 * (no library between): the small products of the BF16 attention
 * (onednn/attention.c), where oneDNN's per-call cost was most of the time
 * (issue 32: ~16,000 calls a step on gpt-char-small, 2-6 us each, for
 * products of 64 x 64 x 256).
 *
 * The tile unit multiplies C (16 x 16 FP32) += A (16 x 32 BF16) B, with B
 * (32 x 16) given in "VNNI" pairs: row r of the B tile holds, for each of
 * its 16 columns, the two BF16 values of rows 2r and 2r + 1 of B as one
 * 32-bit word. ct_amx_gemm_bf16 takes B in that form (ldb words a row);
 * ct_amx_pairs and ct_amx_pairs_t build it from plain BF16 matrices.
 *
 * Only the AVX-512 build has these (the AVX2 object is empty); callers
 * check ct_context_cpu()->amx_bf16 and amx_permitted (the kernel's
 * permission, asked in ct_context_create) first, and call
 * ct_amx_tiles_config on the thread before the first product (it loads the
 * palette: 8 tiles of 16 rows x 64 bytes; oneDNN loads its own before each
 * of its kernels, so the two can take turns on a thread). */
#include "simd.h"

#if defined(CT_SIMD_AVX512)
#include <omp.h>
#include <string.h>

#include "simd_lowp.h"

#define CT_AMX __attribute__((target("amx-tile,amx-bf16")))
#define CT_AMX_BF16 __attribute__((target("avx512bf16")))
#define CT_AMX_BARRIER() __asm__ volatile("" ::: "memory")

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_config;

CT_AMX void ct_amx_tiles_config(void) {
    amx_config c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int i = 0; i < 8; i++) c.colsb[i] = 64, c.rows[i] = 16;
    /* GCC 12's _tile_loadconfig tells the compiler it reads 8 bytes only (and its tile loads and stores read and
     * write nothing): without the barrier the stores above are dropped. */
    CT_AMX_BARRIER();
    _tile_loadconfig(&c);
}

CT_AMX void ct_amx_tiles_release(void) { _tile_release(); }

/* The 32 x 32 block of A (32 rows from a, sa bytes apart) times B's pair columns [j0, j0 + 32) (Np words a
 * row) over K [k0, k1) into tiles 0-3: zeroed first, or loaded from acc (FP32 rows ldacc floats apart). From
 * kf on, A's tiles come from tail (32 x 32, a zero-padded K tail). C in tiles 0-3, A's two row tiles 4-5, B's
 * two column tiles 6-7. */
CT_AMX static void block_sums(const uint16_t *a, long sa, int64_t kf, const uint16_t *tail, const uint32_t *yp, int64_t Np,
                              int64_t j0, int64_t k0, int64_t k1, const float *acc, int64_t ldacc) {
    const long sb = (long)Np * 4, sc = (long)ldacc * 4;
    CT_AMX_BARRIER(); /* the operands' stores before the tile loads (see ct_amx_tiles_config) */
    if (acc) {
        _tile_loadd(0, acc, sc);
        _tile_loadd(1, acc + 16, sc);
        _tile_loadd(2, acc + 16 * ldacc, sc);
        _tile_loadd(3, acc + 16 * ldacc + 16, sc);
    } else {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
    }
    for (int64_t k = k0; k < k1; k += 32) {
        const uint32_t *bk = yp + (k / 2) * Np + j0;
        const uint16_t *a0 = k < kf ? a + k : tail, *a1 = k < kf ? a0 + 16 * (sa / 2) : tail + 16 * 32;
        const long s = k < kf ? sa : 64;
        _tile_loadd(4, a0, s);
        _tile_loadd(6, bk, sb);
        _tile_dpbf16ps(0, 4, 6);
        _tile_loadd(7, bk + 16, sb);
        _tile_dpbf16ps(1, 4, 7);
        _tile_loadd(5, a1, s);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
}

/* tiles 0-3 into the 32 x 32 FP32 block t (rows ldt floats apart) */
CT_AMX static void tiles_out(float *t, int64_t ldt) {
    const long st = (long)ldt * 4;
    _tile_stored(0, t, st);
    _tile_stored(1, t + 16, st);
    _tile_stored(2, t + 16 * ldt, st);
    _tile_stored(3, t + 16 * ldt + 16, st);
    CT_AMX_BARRIER(); /* the tile stores before the reads that follow */
}

/* C (M x N FP32, ldc) = or += A (M x K BF16, lda) B (K x N, as K / 2 rows of N pair words, ldb);
 * M, N and K multiples of 32. Blocks of 32 x 32 (block_sums). */
CT_AMX void ct_amx_gemm_bf16(int64_t M, int64_t N, int64_t K, const uint16_t *a, int64_t lda, const uint32_t *b,
                             int64_t ldb, float *c, int64_t ldc, int accumulate) {
    for (int64_t i = 0; i < M; i += 32)
        for (int64_t j = 0; j < N; j += 32) {
            float *c0 = c + i * ldc + j;
            block_sums(a + i * lda, (long)lda * 2, K, NULL, b, ldb, j, 0, K, accumulate ? c0 : NULL, ldc);
            tiles_out(c0, ldc);
        }
}

/* out[r][j] = x[2r][j] | x[2r + 1][j] << 16 for r < rows / 2, j < cols: a K x N BF16 matrix as B pairs (rows
 * even; cols a multiple of 32) */
void ct_amx_pairs(const uint16_t *x, int64_t ldx, int64_t rows, int64_t cols, uint32_t *out, int64_t ldo) {
    const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6,
                                        37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
    const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
    for (int64_t r = 0; r < rows / 2; r++) {
        const uint16_t *x0 = x + 2 * r * ldx, *x1 = x0 + ldx;
        uint32_t *o = out + r * ldo;
        for (int64_t j = 0; j < cols; j += 32) {
            __m512i a = _mm512_loadu_si512(x0 + j), b = _mm512_loadu_si512(x1 + j);
            _mm512_storeu_si512(o + j, _mm512_permutex2var_epi16(a, lo, b));
            _mm512_storeu_si512(o + j + 16, _mm512_permutex2var_epi16(a, hi, b));
        }
    }
}

/* lane i holds i * stride: the offsets of 16 rows stride elements apart, for gathers */
static inline __m512i lane_offsets(int stride) {
    return _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                              _mm512_set1_epi32(stride));
}

/* v[c] = column c of the 16 x 16 block of 32-bit words at src (rows ld bytes apart): loads, then unpacks and
 * lane shuffles in registers. Used for FP32 (ct_amx_transpose32: 64 x 256 in 3.2-3.4 us against 4.4-4.9 by
 * gathers, one thread, L1); the 16-bit transposes and pairs stay on gathers, which were faster there (pairs of a
 * 1536 x 384 weight 98-110 us against 155, q^T of 256 x 64 1.2-1.3 us against 1.7). Measured by a throwaway
 * program calling both versions in turn (not in the repo), on the AMX Xeon of docs/results.md, 2026-12-06. */
static inline void tr16(const char *src, int64_t ld, __m512i v[16]) {
    __m512i t[16];
    for (int i = 0; i < 16; i++) v[i] = _mm512_loadu_si512(src + i * ld);
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(v[i], v[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(v[i], v[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        v[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        v[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        v[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        v[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int i = 0; i < 4; i++) {
        t[i] = _mm512_shuffle_i32x4(v[i], v[i + 4], 0x88);
        t[i + 4] = _mm512_shuffle_i32x4(v[i], v[i + 4], 0xdd);
        t[i + 8] = _mm512_shuffle_i32x4(v[i + 8], v[i + 12], 0x88);
        t[i + 12] = _mm512_shuffle_i32x4(v[i + 8], v[i + 12], 0xdd);
    }
    for (int i = 0; i < 4; i++) {
        v[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
        v[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xdd);
        v[i + 4] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0x88);
        v[i + 12] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0xdd);
    }
}

/* out[r][j] = word r of row j of x (x read as rows of 32-bit words) for r < cols / 2, j < rows: the transpose
 * of an N x K BF16 matrix as B pairs (x^T, K = cols); word r of 16 rows at a time by one gather (rows a multiple
 * of 16) */
void ct_amx_pairs_t(const uint16_t *x, int64_t ldx, int64_t rows, int64_t cols, uint32_t *out, int64_t ldo) {
    const __m512i step = lane_offsets((int)(ldx / 2));
    for (int64_t j = 0; j < rows; j += 16)
        for (int64_t r = 0; r < cols / 2; r++) {
            const int *base = (const int *)(const void *)(x + j * ldx) + r;
            _mm512_storeu_si512(out + r * ldo + j, _mm512_i32gather_epi32(step, base, 4));
        }
}

/* x[i][j] *= s for i < rows, j < cols (a multiple of 16) */
void ct_amx_scale(float *x, int64_t ldx, int64_t rows, int64_t cols, float s) {
    const __m512 v = _mm512_set1_ps(s);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j += 16) _mm512_storeu_ps(x + i * ldx + j, _mm512_mul_ps(v, _mm512_loadu_ps(x + i * ldx + j)));
}

/* x[i] *= s for n BF16 values, s a power of two (exact: the product needs no rounding unless it leaves the
 * normal range, so it is cut back to 16 bits as it is) */
void ct_amx_scale_bf16_pow2(uint16_t *x, int64_t n, float s) {
    const __m512 v = _mm512_set1_ps(s);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512i w = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, x + i)), 16);
        __m512 f = _mm512_mul_ps(v, _mm512_castsi512_ps(w));
        _mm256_mask_storeu_epi16(x + i, m, _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(f), 16)));
    }
}

/* out[j][i] = x[i][j]: a rows x cols BF16 matrix transposed (cols x rows; rows a multiple of 32, cols even):
 * row pairs (2r, 2r + 1) of the output from gathers of x's 32-bit words r, split into their low and high halves */
void ct_amx_transpose16(const uint16_t *x, int64_t ldx, int64_t rows, int64_t cols, uint16_t *out, int64_t ldo) {
    const __m512i step = lane_offsets((int)(ldx / 2));
    __m512i even, odd;
    {
        int16_t e[32], o[32];
        for (int t = 0; t < 32; t++) e[t] = (int16_t)(2 * t), o[t] = (int16_t)(2 * t + 1);
        even = _mm512_loadu_si512(e);
        odd = _mm512_loadu_si512(o);
    }
    for (int64_t i = 0; i < rows; i += 32)
        for (int64_t r = 0; r < cols / 2; r++) {
            const int *base = (const int *)(const void *)(x + i * ldx) + r;
            __m512i a = _mm512_i32gather_epi32(step, base, 4), b = _mm512_i32gather_epi32(step, base + 8 * ldx, 4);
            _mm512_storeu_si512(out + 2 * r * ldo + i, _mm512_permutex2var_epi16(a, even, b));
            _mm512_storeu_si512(out + (2 * r + 1) * ldo + i, _mm512_permutex2var_epi16(a, odd, b));
        }
}

/* out[j][i] = s x[i][j] for i < rows (a multiple of 16), j < cols: FP32 transposed and scaled, 16 x 16 at a time
 * in registers, the last columns by gathers of 16 rows */
void ct_amx_transpose32(const float *x, int64_t ldx, int64_t rows, int64_t cols, float s, float *out, int64_t ldo) {
    const __m512i step = lane_offsets((int)ldx);
    const __m512 v = _mm512_set1_ps(s);
    const int64_t cf = cols / 16 * 16;
    for (int64_t i = 0; i < rows; i += 16) {
        for (int64_t j = 0; j < cf; j += 16) {
            __m512i t[16];
            tr16((const char *)(x + i * ldx + j), ldx * 4, t);
            for (int c = 0; c < 16; c++) _mm512_storeu_ps(out + (j + c) * ldo + i, _mm512_mul_ps(v, _mm512_castsi512_ps(t[c])));
        }
        for (int64_t j = cf; j < cols; j++)
            _mm512_storeu_ps(out + j * ldo + i, _mm512_mul_ps(v, _mm512_i32gather_ps(step, x + i * ldx + j, 4)));
    }
}

/* ---- whole GEMMs: C = op(A) op(B) (+ bias) ------------------------------------------------------------------
 *
 * For the BF16 linears and matmuls (onednn/matmul.c). The tiles take C' = X Y: X's rows (K contiguous) as tiles,
 * Y as pairs. Without a transposed A, C' = C, X = A read in place and Y = op(B), packed as pairs into the scratch
 * by every thread of the call (K rounded up to 32, N to 32, zeros beyond). A transposed A (the weight gradients,
 * K = the tokens) has its K along columns: it is transposed chunk by chunk of K (kouter below), or, with B
 * transposed too, the product is taken as C^T = B A^T (no operand transposed), whose blocks are stored
 * transposed. (Taking C^T to transpose the smaller operand instead was slower: 1.74 against 1.30 ms for
 * gpt-char-small's 1536 x 384 x 2048 weight gradient; why is not measured.) Then each thread takes a run of the
 * 32 x 32 blocks of C' in row order (a row of blocks reuses its X
 * rows from L1 while Y's pairs stream from L2). X read in place: a block of fewer than 32 rows is copied into a
 * zero-padded block first, and a K that is not a multiple of 32 has its last columns copied into a zero-padded
 * 32 x 32 tail (tile loads read whole rows of 64 bytes). Each block's sums leave the tiles as FP32, get the bias
 * added in FP32 and are rounded once to the output's dtype: the order of oneDNN's brgemm on AMX (K in steps of 32
 * in the tiles, the bias after). */

typedef struct {
    const ct_amx_mm *p;
    int64_t R, Cn, K, Kp, Np, Rp;            /* C' is R x Cn; K, Cn and R rounded up to 32 */
    const uint16_t *x, *y;                   /* X[r][k] = x[r * ldx + k], or x[k * ldx + r] (x_t) */
    int64_t ldx, ldy;                        /* Y[k][c] = y[k * ldy + c], or y[c * ldy + k] (y_t) */
    int x_t, y_t, swap;                      /* swap: C' = C^T */
} amx_prod;

static int64_t up32(int64_t n) { return (n + 31) / 32 * 32; }

/* K in chunks of CT_AMX_KC (when longer): a row of blocks takes each chunk of its 32 X rows (24 KB, from L1) over
 * all its blocks before the next chunk, the blocks' sums kept in FP32 between chunks (tile loads and stores of
 * the thread's row of partial sums, from L2). The sums' order is the same. */
#define CT_AMX_KC 384

static amx_prod prod_of(const ct_amx_mm *p) {
    amx_prod q = {p, p->M, p->N, p->K, up32(p->K), 0, 0, p->a, p->b, p->lda, p->ldb, p->ta, p->tb, 0};
    if (p->ta && p->tb) { /* C^T = op(B)^T op(A)^T: X = B, Y from A, neither transposed */
        q.swap = 1;
        q.R = p->N, q.Cn = p->M;
        q.x = p->b, q.ldx = p->ldb, q.x_t = !p->tb;
        q.y = p->a, q.ldy = p->lda, q.y_t = !p->ta;
    }
    q.Np = up32(q.Cn), q.Rp = up32(q.R);
    return q;
}

/* a thread's padded block of X (32 x Kp), tail (32 x 32), tile sums (32 x 32 FP32) and a row of partial sums
 * (Np / 32 blocks of 32 x 32 FP32; K longer than one chunk) */
static size_t amx_thread_bytes(int64_t Kp, int64_t Np) {
    return (size_t)(32 * Kp * 2 + 32 * 32 * 2 + 32 * 32 * 4) + (Kp > CT_AMX_KC ? (size_t)(Np * 32 * 4) : 0);
}
static size_t pairs_bytes(const amx_prod *q) { return (size_t)(q->Kp / 2 * q->Np * 4); }

/* A transposed A (X stored K x R): K is the outer loop, in chunks of CT_AMX_KT, each chunk's X rows transposed
 * and Y rows paired into buffers that stay in L2 (two Y buffers: one chunk is packed while the other thread may
 * still read the last), the blocks' FP32 sums kept in the scratch between chunks */
#define CT_AMX_KT 256
static size_t kouter_bytes(const amx_prod *q, int nt) {
    const int64_t kt = CT_MIN(q->Kp, CT_AMX_KT);
    const size_t acc = q->Kp > kt ? (size_t)(q->Rp * q->Np * 4) : 0;
    return 2 * (size_t)(kt / 2 * q->Np * 4) + (size_t)(q->Rp * kt * 2) + acc + (size_t)nt * 32 * 32 * 4;
}

size_t ct_amx_matmul_scratch(const ct_amx_mm *p) {
    const amx_prod q = prod_of(p);
    const int nt = p->nthreads > 0 ? p->nthreads : 1;
    return q.x_t ? kouter_bytes(&q, nt) : pairs_bytes(&q) + (size_t)nt * amx_thread_bytes(q.Kp, q.Np);
}

/* word (r, c) of Y's pairs: Y[2r][c] | Y[2r + 1][c] << 16, zero outside K x Cn */
static uint32_t y_word(const amx_prod *q, int64_t r, int64_t c) {
    uint32_t w = 0;
    for (int h = 0; h < 2; h++) {
        int64_t k = 2 * r + h;
        if (k < q->K && c < q->Cn) w |= (uint32_t)q->y[q->y_t ? c * q->ldy + k : k * q->ldy + c] << (16 * h);
    }
    return w;
}

/* rows [r0, r1) of Y's pairs (Np words a row) into out, row r at out + (r - rb) * Np */
static void pack_y(const amx_prod *q, uint32_t *out, int64_t rb, int64_t r0, int64_t r1) {
    const int64_t rf = CT_MAX(r0, CT_MIN(r1, q->K / 2)), Np = q->Np; /* [r0, rf): both rows of the pair inside K */
    uint32_t *o = out + (r0 - rb) * Np;
    int64_t nf = 0; /* [0, nf) of those rows by vectors */
    if (!q->y_t && rf > r0) {
        nf = q->Cn / 32 * 32;
        ct_amx_pairs(q->y + 2 * r0 * q->ldy, q->ldy, 2 * (rf - r0), nf, o, Np);
    } else if (q->y_t && rf > r0 && q->ldy % 2 == 0) {
        nf = q->Cn / 16 * 16;
        ct_amx_pairs_t(q->y + 2 * r0, q->ldy, nf, 2 * (rf - r0), o, Np);
    }
    for (int64_t r = r0; r < r1; r++)
        for (int64_t c = r < rf ? nf : 0; c < Np; c++) out[(r - rb) * Np + c] = y_word(q, r, c);
}

/* X's rows [j0, j1) (j0 even) over K [k0, k1) (k0 a multiple of 32) from x (stored K x R), transposed into out
 * (row j at out + j * ldo, column k - k0), zeros beyond R x K */
static void transpose_x(const amx_prod *q, uint16_t *out, int64_t ldo, int64_t j0, int64_t j1, int64_t k0, int64_t k1) {
    const int64_t jf = CT_MAX(j0, CT_MIN(j1, q->R) / 2 * 2);
    int64_t kf = k0 + (CT_MIN(k1, q->K) - k0) / 32 * 32; /* [k0, kf) x [j0, jf) by gathers (32-bit words: ldx even) */
    if (kf > k0 && jf > j0 && q->ldx % 2 == 0)
        ct_amx_transpose16(q->x + k0 * q->ldx + j0, q->ldx, kf - k0, jf - j0, out + j0 * ldo, ldo);
    else
        kf = k0;
    for (int64_t j = j0; j < j1; j++)
        for (int64_t k = j < jf ? kf : k0; k < k1; k++)
            out[j * ldo + k - k0] = j < q->R && k < q->K ? q->x[k * q->ldx + j] : 0;
}

/* rows x cols of 16-bit values into a dst of 32 rows x ldd, zeros around them */
static void copy_padded(const uint16_t *src, int64_t lds, int64_t rows, int64_t cols, uint16_t *dst, int64_t ldd) {
    memset(dst, 0, (size_t)(32 * ldd * 2));
    for (int64_t i = 0; i < rows; i++) memcpy(dst + i * ldd, src + i * lds, (size_t)cols * 2);
}

/* the first n of 16 lanes (none for n <= 0, all for n >= 16) */
static inline __mmask16 lanes16(int64_t n) { return n >= 16 ? (__mmask16)0xffff : n > 0 ? (__mmask16)((1u << n) - 1) : 0; }

/* block (i0, j0) of C' from its tiles' FP32 sums t (32 x 32): + bias, rounded to C's dtype, rows x cols of it
 * (C^T's blocks transposed into C: 16 rows of t at a time by gathers). The rounding to BF16 is the CPU's
 * (vcvtneps2bf16, the instruction oneDNN uses: nearest even, a NaN kept quiet; it flushes subnormals, which the
 * tiles' sums never are: TDPBF16PS flushes its own) */
CT_AMX_BF16 static void store_block(const amx_prod *q, const float *t, int64_t i0, int64_t j0, int64_t rows, int64_t cols) {
    const ct_amx_mm *p = q->p;
    const int bf = p->c_dt == CT_BF16;
    if (q->swap) { /* no bias (a matmul): C[j0 + c][i0 + r] = t[r][c] */
        const __m512i col = lane_offsets(32);
        const __mmask16 m0 = lanes16(rows), m1 = lanes16(rows - 16);
        for (int64_t c = 0; c < cols; c++) {
            const __m512 v0 = _mm512_i32gather_ps(col, t + c, 4), v1 = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m1, col, t + 16 * 32 + c, 4);
            if (bf) {
                _mm512_mask_storeu_epi16((uint16_t *)p->c + (j0 + c) * p->ldc + i0, (__mmask32)m0 | (__mmask32)m1 << 16,
                                         (__m512i)_mm512_cvtne2ps_pbh(v1, v0));
            } else {
                float *o = (float *)p->c + (j0 + c) * p->ldc + i0;
                _mm512_mask_storeu_ps(o, m0, v0);
                _mm512_mask_storeu_ps(o + 16, m1, v1);
            }
        }
        return;
    }
    const uint16_t *b16 = p->bias && p->bias_dt == CT_BF16 ? (const uint16_t *)p->bias + j0 : NULL;
    const float *b32 = p->bias && p->bias_dt != CT_BF16 ? (const float *)p->bias + j0 : NULL;
    const __mmask16 m0 = lanes16(cols), m1 = lanes16(cols - 16);
    __m512 bias0 = _mm512_setzero_ps(), bias1 = _mm512_setzero_ps();
    if (b16) {
        bias0 = vh_bf16_to_f32(_mm256_maskz_loadu_epi16(m0, b16));
        bias1 = vh_bf16_to_f32(_mm256_maskz_loadu_epi16(m1, b16 + 16));
    } else if (b32) {
        bias0 = _mm512_maskz_loadu_ps(m0, b32);
        bias1 = _mm512_maskz_loadu_ps(m1, b32 + 16);
    }
    for (int64_t r = 0; r < rows; r++) {
        const __m512 v0 = _mm512_add_ps(_mm512_loadu_ps(t + r * 32), bias0);
        const __m512 v1 = _mm512_add_ps(_mm512_loadu_ps(t + r * 32 + 16), bias1);
        if (bf) {
            uint16_t *c = (uint16_t *)p->c + (i0 + r) * p->ldc + j0;
            if (cols == 32) _mm512_storeu_si512(c, (__m512i)_mm512_cvtne2ps_pbh(v1, v0));
            else _mm512_mask_storeu_epi16(c, (__mmask32)m0 | (__mmask32)m1 << 16, (__m512i)_mm512_cvtne2ps_pbh(v1, v0));
        } else {
            float *c = (float *)p->c + (i0 + r) * p->ldc + j0;
            _mm512_mask_storeu_ps(c, m0, v0);
            _mm512_mask_storeu_ps(c + 16, m1, v1);
        }
    }
}

/* blocks [b0, b1) of C' (row order, Np / 32 to a row) on this thread's tiles, X read in place */
static void blocks(const amx_prod *q, const uint32_t *yp, char *ws, int64_t b0, int64_t b1) {
    const int64_t Kp = q->Kp, Np = q->Np, nb = Np / 32;
    uint16_t *ablk = (uint16_t *)(void *)ws, *tail = ablk + 32 * Kp;
    float *t = (float *)(void *)(tail + 32 * 32), *acc = t + 32 * 32;
    for (int64_t blk = b0; blk < b1;) {
        const int64_t i0 = blk / nb * 32, jb0 = blk % nb, jb1 = CT_MIN(nb, jb0 + (b1 - blk)), rows = CT_MIN(32, q->R - i0);
        /* this row of blocks' X */
        const uint16_t *a;
        int64_t ld, kf;
        if (rows < 32) {
            copy_padded(q->x + i0 * q->ldx, q->ldx, rows, q->K, ablk, Kp);
            a = ablk, ld = Kp, kf = Kp;
        } else {
            a = q->x + i0 * q->ldx, ld = q->ldx, kf = q->K / 32 * 32;
            if (kf < q->K) copy_padded(q->x + i0 * q->ldx + kf, q->ldx, 32, q->K - kf, tail, 32);
        }
        for (int64_t k0 = 0; k0 < Kp; k0 += CT_AMX_KC) {
            const int64_t k1 = CT_MIN(Kp, k0 + CT_AMX_KC);
            for (int64_t jb = jb0; jb < jb1; jb++) {
                float *ab = acc + (jb - jb0) * 32 * 32;
                block_sums(a, (long)ld * 2, kf, tail, yp, Np, jb * 32, k0, k1, k0 ? ab : NULL, 32);
                if (k1 < Kp) {
                    tiles_out(ab, 32);
                } else {
                    tiles_out(t, 32);
                    store_block(q, t, i0, jb * 32, rows, CT_MIN(32, q->Cn - jb * 32));
                }
            }
        }
        blk += jb1 - jb0;
    }
}

/* thread t of n: its rows of blocks of C' over K in chunks (X stored K x R) */
static void kouter(const amx_prod *q, char *scratch, int t, int n) {
    const int64_t kt = CT_MIN(q->Kp, CT_AMX_KT), Np = q->Np, nb = Np / 32, nbr = q->Rp / 32;
    uint32_t *ybuf[2];
    ybuf[0] = (uint32_t *)(void *)scratch, ybuf[1] = ybuf[0] + kt / 2 * Np;
    uint16_t *xc = (uint16_t *)(void *)(ybuf[1] + kt / 2 * Np);
    float *acc = (float *)(void *)(xc + q->Rp * kt), *tb = acc + (q->Kp > kt ? q->Rp * Np : 0) + (int64_t)t * 32 * 32;
    const int64_t br0 = nbr * t / n, br1 = nbr * (t + 1) / n; /* this thread's rows of blocks */
    int c = 0;
    for (int64_t k0 = 0; k0 < q->Kp; k0 += kt, c++) {
        const int64_t k1 = CT_MIN(q->Kp, k0 + kt), hk = (k1 - k0) / 2;
        uint32_t *yb = ybuf[c & 1];
        pack_y(q, yb, k0 / 2, k0 / 2 + hk * t / n, k0 / 2 + hk * (t + 1) / n);
        if (br1 > br0) transpose_x(q, xc, kt, br0 * 32, br1 * 32, k0, k1);
#pragma omp barrier
        for (int64_t br = br0; br < br1; br++) {
            const int64_t i0 = br * 32, rows = CT_MIN(32, q->R - i0);
            for (int64_t jb = 0; jb < nb; jb++) {
                float *ab = acc + (br * nb + jb) * 32 * 32;
                block_sums(xc + i0 * kt, (long)kt * 2, k1 - k0, NULL, yb, Np, jb * 32, 0, k1 - k0, k0 ? ab : NULL, 32);
                if (k1 < q->Kp) {
                    tiles_out(ab, 32);
                } else {
                    tiles_out(tb, 32);
                    store_block(q, tb, i0, jb * 32, rows, CT_MIN(32, q->Cn - jb * 32));
                }
            }
        }
    }
}

void ct_amx_matmul_bf16(const ct_amx_mm *p, void *scratch) {
    const amx_prod q = prod_of(p);
    const int64_t Kp = q.Kp, nblk = q.Rp / 32 * (q.Np / 32);
    const int nt = p->nthreads > 0 ? p->nthreads : 1;
    uint32_t *yp = scratch;
    char *ws = (char *)scratch + pairs_bytes(&q);
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        const int t = omp_get_thread_num(), n = omp_get_num_threads();
        if (q.x_t) {
            ct_amx_tiles_config();
            kouter(&q, scratch, t, n);
        } else {
            pack_y(&q, yp, 0, Kp / 2 * t / n, Kp / 2 * (t + 1) / n);
#pragma omp barrier
            ct_amx_tiles_config();
            blocks(&q, yp, ws + (size_t)t * amx_thread_bytes(Kp, q.Np), nblk * t / n, nblk * (t + 1) / n);
        }
        ct_amx_tiles_release();
    }
}

#else
typedef int ct_amx_only_in_the_avx512_build;
#endif
