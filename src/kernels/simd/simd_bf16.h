/* src/kernels/simd/simd_bf16.h - BF16 I/O for the SIMD kernels (issue 12,
 * item 3): the helpers with which an AVX2 / AVX-512 kernel reads BF16
 * tensors and writes BF16 outputs itself, instead of getting FP32 copies of
 * whole tensors from the executor (plan.c's lowp_to_f32).
 *
 * Two ways, both converting in registers (bit-identical to ct_f32_to_bf16 /
 * ct_bf16_to_f32 of tensor.h: BF16 -> FP32 is vpmovzxwd + a 16-bit shift,
 * FP32 -> BF16 rounds to nearest even in integer arithmetic, NaN stays a
 * quiet NaN):
 *  - vectors: vload_bf16 / vstore_bf16 (+ _tail) for kernels that stream;
 *  - tiles: ct_tile_in gives a kernel the FP32 values of a run of at most
 *    CT_BF16_TILE elements of a tensor (the tensor itself when it is FP32,
 *    else a conversion into a caller's stack buffer, which stays in L1/L2),
 *    ct_tile_out / ct_tile_put the same for an output. Kernels whose work
 *    splits into rows / planes / chunks run their FP32 body on such tiles,
 *    so their math is exactly the FP32 kernel's on the BF16 values.
 *
 * A kernel takes BF16 I/O when its op's row in op_table.c has simd_bf16 set;
 * a configuration it does not cover (e.g. a row longer than CT_BF16_TILE)
 * returns CT_E_UNSUPPORTED before touching anything, and the executor falls
 * back to FP32 copies for that node (plan.c). */
#ifndef CT_SIMD_BF16_H
#define CT_SIMD_BF16_H

#include <string.h>

#include "simd.h"

#if defined(CT_SIMD_AVX512)
#define CT_CVT(name) ct_cvt_##name##_avx512
#else
#define CT_CVT(name) ct_cvt_##name##_avx2
#endif

/* CT_BF16_TILE (kernels.h): elements of one tile buffer (32 KiB of floats). */

/* ---- vectors ------------------------------------------------------------------------------ */
#if defined(CT_SIMD_AVX512)
static inline vf vload_bf16(const uint16_t *p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}
static inline vf vtail_load_bf16(const uint16_t *p, int n) {
    __m256i h = _mm256_maskz_loadu_epi16((__mmask16)((1u << n) - 1), p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
/* round to nearest even; NaN -> (u >> 16) | 0x40 (ct_f32_to_bf16) */
static inline __m256i ct_bf16_round(vf v) {
    __m512i u = _mm512_castps_si512(v);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
    __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    r = _mm512_mask_blend_epi32(nan, r, _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40)));
    return _mm512_cvtepi32_epi16(r);
}
static inline void vstore_bf16(uint16_t *p, vf v) { _mm256_storeu_si256((__m256i *)p, ct_bf16_round(v)); }
static inline void vtail_store_bf16(uint16_t *p, vf v, int n) {
    _mm256_mask_storeu_epi16(p, (__mmask16)((1u << n) - 1), ct_bf16_round(v));
}
#else
static inline vf vload_bf16(const uint16_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}
static inline vf vtail_load_bf16(const uint16_t *p, int n) {
    uint16_t t[VW] = {0};
    memcpy(t, p, (size_t)n * sizeof *p);
    return vload_bf16(t);
}
static inline __m128i ct_bf16_round(vf v) {
    __m256i u = _mm256_castps_si256(v);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
    r = _mm256_blendv_epi8(r, _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40)), nan);
    /* values < 2^16: the unsigned saturation never triggers */
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}
static inline void vstore_bf16(uint16_t *p, vf v) { _mm_storeu_si128((__m128i *)p, ct_bf16_round(v)); }
static inline void vtail_store_bf16(uint16_t *p, vf v, int n) {
    uint16_t t[VW];
    _mm_storeu_si128((__m128i *)t, ct_bf16_round(v));
    memcpy(p, t, (size_t)n * sizeof *p);
}
#endif

/* n <= VW elements at element offset off of a tensor's data in its own dtype
 * (FP32 or BF16), as floats; and back. */
static inline vf ct_vld(const ct_tensor *t, int64_t off, int n) {
    if (t->dtype == CT_BF16) {
        const uint16_t *p = (const uint16_t *)t->data + off;
        return n == VW ? vload_bf16(p) : vtail_load_bf16(p, n);
    }
    const float *p = (const float *)t->data + off;
    return n == VW ? vload(p) : vtail_load(p, n);
}
static inline void ct_vst(const ct_tensor *t, int64_t off, vf v, int n) {
    if (t->dtype == CT_BF16) {
        uint16_t *p = (uint16_t *)t->data + off;
        if (n == VW) vstore_bf16(p, v);
        else vtail_store_bf16(p, v, n);
        return;
    }
    float *p = (float *)t->data + off;
    if (n == VW) vstore(p, v);
    else vtail_store(p, v, n);
}
/* one element as a float */
static inline float ct_sld(const ct_tensor *t, int64_t off) {
    if (t->dtype == CT_BF16) return ct_bf16_to_f32(((const uint16_t *)t->data)[off]);
    return ((const float *)t->data)[off];
}

/* ---- tiles -------------------------------------------------------------------------------- */

/* Elements [off, off + n) of t as floats: t's own data when FP32, else
 * converted into buf (n <= CT_BF16_TILE). */
static inline const float *ct_tile_in(const ct_tensor *t, int64_t off, int64_t n, float *buf) {
    if (t->dtype != CT_BF16) return (const float *)t->data + off;
    CT_CVT(bf16_to_f32)((const uint16_t *)t->data + off, buf, (size_t)n);
    return buf;
}
/* Where a kernel writes the floats of output elements [off, off + n): the
 * tensor itself when FP32, else buf, which ct_tile_put then stores as BF16. */
static inline float *ct_tile_out(const ct_tensor *t, int64_t off, float *buf) {
    return t->dtype == CT_BF16 ? buf : (float *)t->data + off;
}
static inline void ct_tile_put(const ct_tensor *t, int64_t off, int64_t n, const float *buf) {
    if (t->dtype == CT_BF16) CT_CVT(f32_to_bf16)(buf, (uint16_t *)t->data + off, (size_t)n);
}

/* 1 when out and in[0..n_in) are all FP32 or BF16 and at least one is BF16:
 * the kernel's BF16 path applies. */
static inline int ct_bf16_io(const ct_kargs *k, int n_in) {
    int any = k->out.dtype == CT_BF16;
    if (k->out.dtype != CT_F32 && k->out.dtype != CT_BF16) return 0;
    for (int i = 0; i < n_in; i++) {
        if (k->in[i].dtype != CT_F32 && k->in[i].dtype != CT_BF16) return 0;
        any |= k->in[i].dtype == CT_BF16;
    }
    return any;
}

#endif
