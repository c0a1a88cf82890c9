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

/* Per ISA: pv (PV_N 32-bit lanes), set1, xor, the lane iota, the 32x32 ->
 * 64-bit products of every lane as high and low words, and the keep mask
 * (lane L: (r >> 8) >= thr) as an integer. */
#if defined(CT_SIMD_AVX512)
typedef __m512i pv;
#define PV_N 16
static inline pv pv_set1(uint32_t x) { return _mm512_set1_epi32((int)x); }
static inline pv pv_xor(pv a, pv b) { return _mm512_xor_si512(a, b); }
static inline pv pv_iota(void) { return _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15); }
static inline pv pv_add(pv a, pv b) { return _mm512_add_epi32(a, b); }
/* the products' words put in place by merge-masked shuffles: the odd lanes of lo take the odd lanes' low
   words (po's even words), the even lanes of hi the even lanes' high words (pe's odd words) */
static inline pv pv_mulhilo(pv c, pv m, pv *lo) {
    pv pe = _mm512_mul_epu32(c, m), po = _mm512_mul_epu32(_mm512_srli_epi64(c, 32), m);
    *lo = _mm512_mask_shuffle_epi32(pe, 0xAAAA, po, _MM_PERM_CCAA);
    return _mm512_mask_shuffle_epi32(po, 0x5555, pe, _MM_PERM_DDBB);
}
static inline pv pv_xor3(pv a, pv b, pv c) { return _mm512_ternarylogic_epi32(a, b, c, 0x96); }
static inline uint32_t pv_keep(pv r, uint32_t thr) {
    return _mm512_cmpge_epu32_mask(_mm512_srli_epi32(r, 8), pv_set1(thr));
}
#else
typedef __m256i pv;
#define PV_N 8
static inline pv pv_set1(uint32_t x) { return _mm256_set1_epi32((int)x); }
static inline pv pv_xor(pv a, pv b) { return _mm256_xor_si256(a, b); }
static inline pv pv_iota(void) { return _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7); }
static inline pv pv_add(pv a, pv b) { return _mm256_add_epi32(a, b); }
static inline pv pv_xor3(pv a, pv b, pv c) { return pv_xor(pv_xor(a, b), c); }
static inline pv pv_mulhilo(pv c, pv m, pv *lo) {
    pv pe = _mm256_mul_epu32(c, m), po = _mm256_mul_epu32(_mm256_srli_epi64(c, 32), m);
    *lo = _mm256_blend_epi32(pe, _mm256_slli_epi64(po, 32), 0xAA);
    return _mm256_blend_epi32(_mm256_srli_epi64(pe, 32), po, 0xAA);
}
static inline uint32_t pv_keep(pv r, uint32_t thr) { /* r >> 8 < 2^24: signed compare with thr - 1 */
    return (uint32_t)_mm256_movemask_ps(
        _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_srli_epi32(r, 8), pv_set1(thr - 1u))));
}
#endif

/* keep masks k[t] (bit L: element 4 (ctr + L) + t) of counters ctr ..
 * ctr + PV_N - 1 (no carry into bit 32): PV_N Philox4x32-10 at once */
static inline void ct_philox_keep_pv(uint64_t seed, uint64_t key, uint64_t ctr, uint32_t thr, uint32_t k[4]) {
    pv c0 = pv_add(pv_set1((uint32_t)ctr), pv_iota()), c1 = pv_set1((uint32_t)(ctr >> 32));
    pv c2 = pv_set1((uint32_t)key), c3 = pv_set1((uint32_t)(key >> 32));
    const pv m0 = pv_set1(CT_PHILOX_M0), m1 = pv_set1(CT_PHILOX_M1);
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        pv lo0, lo1, hi0 = pv_mulhilo(c0, m0, &lo0), hi1 = pv_mulhilo(c2, m1, &lo1);
        pv n0 = pv_xor3(hi1, c1, pv_set1(k0)), n2 = pv_xor3(hi0, c3, pv_set1(k1));
        c0 = n0, c1 = lo1, c2 = n2, c3 = lo0;
        k0 += CT_PHILOX_W0, k1 += CT_PHILOX_W1;
    }
    k[0] = pv_keep(c0, thr), k[1] = pv_keep(c1, thr), k[2] = pv_keep(c2, thr), k[3] = pv_keep(c3, thr);
}

/* the same for 16 counters */
static inline void ct_philox_keep16(uint64_t seed, uint64_t key, uint64_t ctr, uint32_t thr, uint32_t k[4]) {
    ct_philox_keep_pv(seed, key, ctr, thr, k);
#if PV_N == 8
    uint32_t b[4];
    ct_philox_keep_pv(seed, key, ctr + 8, thr, b);
    for (int t = 0; t < 4; t++) k[t] |= b[t] << 8;
#endif
}

/* bit L of x (L < 16) to bit 4L: four shift-or-mask steps, each doubling the gaps */
static inline uint64_t ct_spread16(uint64_t x) {
    x = (x | x << 24) & 0x000000FF000000FFull;
    x = (x | x << 12) & 0x000F000F000F000Full;
    x = (x | x << 6) & 0x0303030303030303ull;
    return (x | x << 3) & 0x1111111111111111ull;
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
#if defined(CT_SIMD_AVX512)
    /* bit L of k[t] to bit 4L + t: one bit deposit per word (BMI2, which every AVX-512 CPU has; the AVX2 build
       also runs on CPUs where pdep is microcoded and slow, Zen 1 / 2). 1M decisions took 0.54 ms against 0.95 by
       the 16 nibble spreads of before, 0.43 with the rounds' shuffles and three-way xors above (one thread, AMX
       Xeon, a throwaway program calling the versions in turn, the same bits; docs/results.md). */
    *bits = _pdep_u64(k[0], 0x1111111111111111ull) | _pdep_u64(k[1], 0x2222222222222222ull) |
            _pdep_u64(k[2], 0x4444444444444444ull) | _pdep_u64(k[3], 0x8888888888888888ull);
#else
    /* the same by shifts and masks (AVX2 build: 1M decisions 1.45 -> 1.10 ms against the 16 nibble spreads of
       before, same machine and program, CT_SIMD_AVX2) */
    *bits = ct_spread16(k[0]) | ct_spread16(k[1]) << 1 | ct_spread16(k[2]) << 2 | ct_spread16(k[3]) << 3;
#endif
    return 1;
}

#endif
