/* src/kernels/simd/philox.h - dropout's keep decisions for 64 elements at a
 * time: Philox4x32-10 on 16 counters at once (one AVX-512 vector, or two
 * AVX2 ones), bit-identical to ct_philox / ct_dropout_keep (kernels.h).
 *
 * Element e of a dropout stream is kept when (r >> 8) * 2^-24 >= p, r the
 * (e & 3)-th word of Philox(seed, (stream << 32) ^ step, e >> 2). As reals
 * that is (r >> 8) >= p * 2^24 (the product and the compare are exact in
 * FP32 for r >> 8 < 2^24), so the vector code compares integers with
 * thr = ceil(p * 2^24). The 32x32 -> 64-bit products of a round are
 * vpmuludq on the even and the odd lanes, recombined into high and low
 * words. */
#ifndef CT_SIMD_PHILOX_H
#define CT_SIMD_PHILOX_H

#include <math.h>

#include "simd.h"

/* ceil(p * 2^24): keep iff (r >> 8) >= it (p in [0, 1]) */
static inline uint32_t ct_dropout_thr(float p) {
    double t = ceil((double)p * 16777216.0);
    return t <= 0 ? 0u : t >= 16777216.0 ? 16777216u : (uint32_t)t;
}

#define CT_PHILOX_M0 0xD2511F53u
#define CT_PHILOX_M1 0xCD9E8D57u
#define CT_PHILOX_W0 0x9E3779B9u
#define CT_PHILOX_W1 0xBB67AE85u

#if defined(CT_SIMD_AVX512)
static inline __m512i ct_mulhilo16(__m512i c, __m512i m, __m512i *lo) {
    __m512i pe = _mm512_mul_epu32(c, m), po = _mm512_mul_epu32(_mm512_srli_epi64(c, 32), m);
    *lo = _mm512_mask_blend_epi32(0xAAAA, pe, _mm512_slli_epi64(po, 32));
    return _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(pe, 32), po);
}
/* keep masks k[t] (bit L: element 4 (ctr + L) + t) of counters ctr .. ctr + 15 (no carry into bit 32) */
static inline void ct_philox_keep16(uint64_t seed, uint64_t key, uint64_t ctr, uint32_t thr, uint32_t k[4]) {
    __m512i c0 = _mm512_add_epi32(_mm512_set1_epi32((int)(uint32_t)ctr),
                                  _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    __m512i c1 = _mm512_set1_epi32((int)(uint32_t)(ctr >> 32)), c2 = _mm512_set1_epi32((int)(uint32_t)key);
    __m512i c3 = _mm512_set1_epi32((int)(uint32_t)(key >> 32));
    const __m512i m0 = _mm512_set1_epi32((int)CT_PHILOX_M0), m1 = _mm512_set1_epi32((int)CT_PHILOX_M1);
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        __m512i lo0, lo1, hi0 = ct_mulhilo16(c0, m0, &lo0), hi1 = ct_mulhilo16(c2, m1, &lo1);
        __m512i n0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c1), _mm512_set1_epi32((int)k0));
        __m512i n2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c3), _mm512_set1_epi32((int)k1));
        c0 = n0, c1 = lo1, c2 = n2, c3 = lo0;
        k0 += CT_PHILOX_W0, k1 += CT_PHILOX_W1;
    }
    const __m512i t = _mm512_set1_epi32((int)thr);
    k[0] = _mm512_cmpge_epu32_mask(_mm512_srli_epi32(c0, 8), t);
    k[1] = _mm512_cmpge_epu32_mask(_mm512_srli_epi32(c1, 8), t);
    k[2] = _mm512_cmpge_epu32_mask(_mm512_srli_epi32(c2, 8), t);
    k[3] = _mm512_cmpge_epu32_mask(_mm512_srli_epi32(c3, 8), t);
}
/* all-ones lanes where bit i of `bits` is set (VW = 16 bits) */
static inline vf ct_vmask_bits(unsigned bits) { return _mm512_castsi512_ps(_mm512_movm_epi32((__mmask16)bits)); }
#else
static inline __m256i ct_mulhilo8(__m256i c, __m256i m, __m256i *lo) {
    __m256i pe = _mm256_mul_epu32(c, m), po = _mm256_mul_epu32(_mm256_srli_epi64(c, 32), m);
    *lo = _mm256_blend_epi32(pe, _mm256_slli_epi64(po, 32), 0xAA);
    return _mm256_blend_epi32(_mm256_srli_epi64(pe, 32), po, 0xAA);
}
static inline void ct_philox_keep8(uint64_t seed, uint64_t key, uint64_t ctr, uint32_t thr, uint32_t k[4]) {
    __m256i c0 = _mm256_add_epi32(_mm256_set1_epi32((int)(uint32_t)ctr), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256i c1 = _mm256_set1_epi32((int)(uint32_t)(ctr >> 32)), c2 = _mm256_set1_epi32((int)(uint32_t)key);
    __m256i c3 = _mm256_set1_epi32((int)(uint32_t)(key >> 32));
    const __m256i m0 = _mm256_set1_epi32((int)CT_PHILOX_M0), m1 = _mm256_set1_epi32((int)CT_PHILOX_M1);
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        __m256i lo0, lo1, hi0 = ct_mulhilo8(c0, m0, &lo0), hi1 = ct_mulhilo8(c2, m1, &lo1);
        __m256i n0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), _mm256_set1_epi32((int)k0));
        __m256i n2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), _mm256_set1_epi32((int)k1));
        c0 = n0, c1 = lo1, c2 = n2, c3 = lo0;
        k0 += CT_PHILOX_W0, k1 += CT_PHILOX_W1;
    }
    /* r >> 8 < 2^24: a signed compare with thr - 1 (thr 0: -1, every lane kept) */
    const __m256i t = _mm256_set1_epi32((int)thr - 1);
    k[0] = (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_srli_epi32(c0, 8), t)));
    k[1] = (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_srli_epi32(c1, 8), t)));
    k[2] = (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_srli_epi32(c2, 8), t)));
    k[3] = (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_srli_epi32(c3, 8), t)));
}
static inline void ct_philox_keep16(uint64_t seed, uint64_t key, uint64_t ctr, uint32_t thr, uint32_t k[4]) {
    uint32_t a[4], b[4];
    ct_philox_keep8(seed, key, ctr, thr, a);
    ct_philox_keep8(seed, key, ctr + 8, thr, b);
    for (int t = 0; t < 4; t++) k[t] = a[t] | b[t] << 8;
}
static inline vf ct_vmask_bits(unsigned bits) {
    __m256i sel = _mm256_and_si256(_mm256_set1_epi32((int)bits), _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128));
    return _mm256_castsi256_ps(_mm256_cmpeq_epi32(sel, _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128)));
}
#endif

/* Bits 4L + t <- bit t of nibble L: the 4 keep masks of 4 counters in element order. */
static inline uint16_t ct_spread4(unsigned v) {
    return (uint16_t)((v & 1u) | (v & 2u) << 3 | (v & 4u) << 6 | (v & 8u) << 9);
}

/* Keep bits of elements e0 .. e0 + 63 (e0 a multiple of 4) of the stream
 * key = (stream << 32) ^ step: bit j = ct_dropout_keep(..., e0 + j, p).
 * Returns 0 (bits untouched) when the 16 counters cross a multiple of 2^32
 * (the caller then takes the scalar path). */
static inline int ct_dropout_bits64(uint64_t seed, uint64_t key, uint64_t e0, uint32_t thr, uint64_t *bits) {
    uint64_t ctr = e0 >> 2;
    if ((ctr & 0xffffffffu) > 0xffffffffu - 15u) return 0;
    uint32_t k[4];
    ct_philox_keep16(seed, key, ctr, thr, k);
    uint64_t b = 0;
    for (int c = 0; c < 4; c++) { /* counters 4c .. 4c + 3: elements 16c .. 16c + 15 */
        unsigned sh = 4u * (unsigned)c;
        uint64_t m = (uint64_t)ct_spread4((k[0] >> sh) & 15u) | (uint64_t)ct_spread4((k[1] >> sh) & 15u) << 1 |
                     (uint64_t)ct_spread4((k[2] >> sh) & 15u) << 2 | (uint64_t)ct_spread4((k[3] >> sh) & 15u) << 3;
        b |= m << (16 * c);
    }
    *bits = b;
    return 1;
}

#endif
