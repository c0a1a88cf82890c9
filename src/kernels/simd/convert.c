/* src/kernels/simd/convert.c - SIMD bodies of the bulk f32 <-> bf16 / f16
 * conversions (include/ctrain/convert.h), compiled once for AVX2(+F16C) and
 * once for AVX-512; the reference loops are in src/kernels/ref/convert.c,
 * the dispatch in src/kernels/convert.c. Each result equals the scalar conversion of tensor.h
 * bit for bit:
 *   f32 -> bf16: integer rounding u + 0x7fff + lsb, >> 16; NaN lanes take
 *                (u >> 16) | 0x40 (quiet, sign and top payload kept).
 *   bf16 -> f32: u16 << 16.
 *   f32 -> f16:  vcvtps2ph with round-to-nearest-even from the immediate (not
 *                MXCSR). Its NaN result (sign | 0x7e00 | payload >> 13),
 *                overflow, subnormal and tie behaviour is the scalar one; f32
 *                denormal inputs round to +-0 either way, so DAZ cannot matter.
 *   f16 -> f32:  vcvtph2ps, exact and unaffected by DAZ, except that it quiets
 *                signaling NaNs while ct_f16_to_f32 keeps the payload as is:
 *                those lanes get the quiet bit cleared again.
 * Blocks of 16 elements; the last n % 16 go through a zero-padded stack
 * buffer, so every element takes the vector path. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "simd.h"

#if defined(CT_SIMD_AVX512)
#define CVT_FN(name) ct_cvt_##name##_avx512
#else
#define CVT_FN(name) ct_cvt_##name##_avx2
#endif

/* Declared again in kernels/kernels.h (CT_DECL_CVT; dispatch in src/kernels/convert.c). */
void CVT_FN(f32_to_bf16)(const float *src, uint16_t *dst, size_t n);
void CVT_FN(bf16_to_f32)(const uint16_t *src, float *dst, size_t n);
void CVT_FN(f32_to_f16)(const float *src, uint16_t *dst, size_t n);
void CVT_FN(f16_to_f32)(const uint16_t *src, float *dst, size_t n);

#define BLK 16

/* ---- one block of 16 elements per ISA ---------------------------------------------------- */
#if defined(CT_SIMD_AVX512)

static inline void blk_f32_to_bf16(const float *s, uint16_t *d) {
    __m512i u = _mm512_loadu_si512((const void *)s);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
    __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
    __mmask16 nan = _mm512_cmpgt_epi32_mask(a, _mm512_set1_epi32(0x7f800000));
    __m512i q = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    r = _mm512_mask_blend_epi32(nan, r, q);
    _mm256_storeu_si256((__m256i *)d, _mm512_cvtepi32_epi16(r)); /* values < 2^16: truncation is exact */
}

static inline void blk_bf16_to_f32(const uint16_t *s, float *d) {
    __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)s));
    _mm512_storeu_si512((void *)d, _mm512_slli_epi32(h, 16));
}

static inline void blk_f32_to_f16(const float *s, uint16_t *d) {
    __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(s), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_si256((__m256i *)d, h);
}

static inline void blk_f16_to_f32(const uint16_t *s, float *d) {
    __m256i h16 = _mm256_loadu_si256((const __m256i *)s);
    __m512i f = _mm512_castps_si512(_mm512_cvtph_ps(h16));
    __m512i h = _mm512_cvtepu16_epi32(h16);
    /* signaling NaN: exponent all ones, mantissa != 0, quiet bit (0x200) clear */
    __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(h, _mm512_set1_epi32(0x7fff)), _mm512_set1_epi32(0x7c00));
    __mmask16 snan = _mm512_mask_testn_epi32_mask(nan, h, _mm512_set1_epi32(0x200));
    f = _mm512_mask_and_epi32(f, snan, f, _mm512_set1_epi32(~0x00400000));
    _mm512_storeu_si512((void *)d, f);
}

#else /* AVX2 + F16C: two vectors of 8 per block */

static inline __m256i bf16_round8(__m256i u) {
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
    __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
    __m256i nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7f800000)); /* a >= 0: signed compare is fine */
    __m256i q = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    return _mm256_blendv_epi8(r, q, nan);
}

static inline void blk_f32_to_bf16(const float *s, uint16_t *d) {
    __m256i r0 = bf16_round8(_mm256_loadu_si256((const __m256i *)s));
    __m256i r1 = bf16_round8(_mm256_loadu_si256((const __m256i *)(s + 8)));
    /* values < 2^16, so the unsigned saturation never triggers; packus works per
     * 128-bit lane: [r0 0-3, r1 0-3, r0 4-7, r1 4-7] -> reorder the quadwords */
    __m256i p = _mm256_packus_epi32(r0, r1);
    _mm256_storeu_si256((__m256i *)d, _mm256_permute4x64_epi64(p, 0xd8));
}

static inline void blk_bf16_to_f32(const uint16_t *s, float *d) {
    __m256i h = _mm256_loadu_si256((const __m256i *)s);
    __m256i lo = _mm256_cvtepu16_epi32(_mm256_castsi256_si128(h));
    __m256i hi = _mm256_cvtepu16_epi32(_mm256_extracti128_si256(h, 1));
    _mm256_storeu_si256((__m256i *)d, _mm256_slli_epi32(lo, 16));
    _mm256_storeu_si256((__m256i *)(d + 8), _mm256_slli_epi32(hi, 16));
}

static inline void blk_f32_to_f16(const float *s, uint16_t *d) {
    __m128i h0 = _mm256_cvtps_ph(_mm256_loadu_ps(s), _MM_FROUND_TO_NEAREST_INT);
    __m128i h1 = _mm256_cvtps_ph(_mm256_loadu_ps(s + 8), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128((__m128i *)d, h0);
    _mm_storeu_si128((__m128i *)(d + 8), h1);
}

static inline __m256 f16_to_f32_8(__m128i h16) {
    __m256i f = _mm256_castps_si256(_mm256_cvtph_ps(h16));
    __m256i h = _mm256_cvtepu16_epi32(h16);
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(h, _mm256_set1_epi32(0x7fff)), _mm256_set1_epi32(0x7c00));
    /* (h << 13) has the f16 quiet bit at the f32 quiet bit (0x00400000) */
    __m256i qclear = _mm256_andnot_si256(_mm256_slli_epi32(h, 13), _mm256_set1_epi32(0x00400000));
    f = _mm256_andnot_si256(_mm256_and_si256(nan, qclear), f); /* signaling NaN: clear the quiet bit again */
    return _mm256_castsi256_ps(f);
}

static inline void blk_f16_to_f32(const uint16_t *s, float *d) {
    _mm256_storeu_ps(d, f16_to_f32_8(_mm_loadu_si128((const __m128i *)s)));
    _mm256_storeu_ps(d + 8, f16_to_f32_8(_mm_loadu_si128((const __m128i *)(s + 8))));
}

#endif

/* ---- loops: full blocks, then the tail through a padded buffer ------------------------------ */
#define CVT_LOOP(name, stype, dtype)                                                              \
    void CVT_FN(name)(const stype *src, dtype *dst, size_t n) {                                   \
        size_t i = 0;                                                                             \
        for (; i + BLK <= n; i += BLK) blk_##name(src + i, dst + i);                              \
        if (i < n) {                                                                              \
            stype sb[BLK];                                                                        \
            dtype db[BLK];                                                                        \
            memset(sb, 0, sizeof sb);                                                             \
            memcpy(sb, src + i, (n - i) * sizeof(stype));                                         \
            blk_##name(sb, db);                                                                   \
            memcpy(dst + i, db, (n - i) * sizeof(dtype));                                         \
        }                                                                                         \
    }

CVT_LOOP(f32_to_bf16, float, uint16_t)
CVT_LOOP(bf16_to_f32, uint16_t, float)
CVT_LOOP(f32_to_f16, float, uint16_t)
CVT_LOOP(f16_to_f32, uint16_t, float)
