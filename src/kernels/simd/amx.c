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
#include <string.h>

#define CT_AMX __attribute__((target("amx-tile,amx-bf16")))
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

/* C (M x N FP32, ldc) = or += A (M x K BF16, lda) B (K x N, as K / 2 rows of N pair words, ldb);
 * M, N and K multiples of 32. Blocks of 32 x 32: C in tiles 0-3, A's two row tiles 4-5, B's two column tiles 6-7. */
CT_AMX void ct_amx_gemm_bf16(int64_t M, int64_t N, int64_t K, const uint16_t *a, int64_t lda, const uint32_t *b,
                             int64_t ldb, float *c, int64_t ldc, int accumulate) {
    const long sa = (long)lda * 2, sb = (long)ldb * 4, sc = (long)ldc * 4;
    CT_AMX_BARRIER(); /* the operands' stores before the tile loads (see ct_amx_tiles_config) */
    for (int64_t i = 0; i < M; i += 32)
        for (int64_t j = 0; j < N; j += 32) {
            float *c0 = c + i * ldc + j, *c1 = c0 + 16 * ldc;
            if (accumulate) {
                _tile_loadd(0, c0, sc);
                _tile_loadd(1, c0 + 16, sc);
                _tile_loadd(2, c1, sc);
                _tile_loadd(3, c1 + 16, sc);
            } else {
                _tile_zero(0);
                _tile_zero(1);
                _tile_zero(2);
                _tile_zero(3);
            }
            const uint16_t *a0 = a + i * lda, *a1 = a0 + 16 * lda;
            for (int64_t k = 0; k < K; k += 32) {
                const uint32_t *bk = b + (k / 2) * ldb + j;
                _tile_loadd(4, a0 + k, sa);
                _tile_loadd(6, bk, sb);
                _tile_dpbf16ps(0, 4, 6);
                _tile_loadd(7, bk + 16, sb);
                _tile_dpbf16ps(1, 4, 7);
                _tile_loadd(5, a1 + k, sa);
                _tile_dpbf16ps(2, 5, 6);
                _tile_dpbf16ps(3, 5, 7);
            }
            _tile_stored(0, c0, sc);
            _tile_stored(1, c0 + 16, sc);
            _tile_stored(2, c1, sc);
            _tile_stored(3, c1 + 16, sc);
        }
    CT_AMX_BARRIER(); /* the tile stores before the caller's reads */
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

/* out[r][j] = word r of row j of x (x read as rows of 32-bit words) for r < cols / 2, j < rows: the transpose
 * of an N x K BF16 matrix as B pairs (x^T, K = cols); word r of 16 rows at a time by one gather (rows a multiple
 * of 16) */
void ct_amx_pairs_t(const uint16_t *x, int64_t ldx, int64_t rows, int64_t cols, uint32_t *out, int64_t ldo) {
    const __m512i step = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                            _mm512_set1_epi32((int)(ldx / 2)));
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
    const __m512i step = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                            _mm512_set1_epi32((int)(ldx / 2)));
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

/* out[j][i] = s x[i][j] for i < rows (a multiple of 16), j < cols: FP32 transposed and scaled, 16 rows a gather */
void ct_amx_transpose32(const float *x, int64_t ldx, int64_t rows, int64_t cols, float s, float *out, int64_t ldo) {
    const __m512i step = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                            _mm512_set1_epi32((int)ldx));
    const __m512 v = _mm512_set1_ps(s);
    for (int64_t j = 0; j < cols; j++)
        for (int64_t i = 0; i < rows; i += 16)
            _mm512_storeu_ps(out + j * ldo + i, _mm512_mul_ps(v, _mm512_i32gather_ps(step, x + i * ldx + j, 4)));
}

#else
typedef int ct_amx_only_in_the_avx512_build;
#endif
