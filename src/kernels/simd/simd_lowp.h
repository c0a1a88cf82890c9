/* src/kernels/simd/simd_lowp.h - BF16 and FP16 I/O for the SIMD kernels
 * (issue 12, items 3 and 4): the helpers with which an AVX2 / AVX-512
 * kernel reads BF16 / FP16 tensors and writes BF16 / FP16 outputs itself,
 * instead of getting FP32 copies of whole tensors from the executor
 * (graph/executor.c's lowp_to_f32).
 *
 * Every conversion here is in registers and bit-identical to the scalar
 * ones of tensor.h (ct_f32_to_bf16, ct_bf16_to_f32, ct_f32_to_f16,
 * ct_f16_to_f32), so a kernel's BF16 / FP16 path computes exactly what its
 * FP32 path computes on the FP32 copies the executor would make:
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
 * F16C (vcvtph2ps / vcvtps2ph) is part of both builds (-mf16c; every AVX2
 * CPU has it). The bulk conversions (simd/convert.c) are these same
 * vectors in a loop.
 *
 * Two ways for kernels:
 *  - vectors: vload_lp / vstore_lp (+ _tail) with the tensor's dtype, for
 *    kernels that stream (vload_bf16 / vload_f16 etc. when the dtype is
 *    fixed);
 *  - tiles: ct_tile_in gives a kernel the FP32 values of a run of at most
 *    CT_BF16_TILE elements of a tensor (the tensor itself when it is FP32,
 *    else a conversion into a caller's stack buffer, which stays in L1/L2),
 *    ct_tile_out / ct_tile_put the same for an output. Kernels whose work
 *    splits into rows / planes / chunks run their FP32 body on such tiles,
 *    so their math is exactly the FP32 kernel's on the 16-bit values.
 *
 * A kernel takes low-precision I/O when its op's row in op_table.c has
 * simd_lowp set; a configuration it does not cover (e.g. a row longer than
 * CT_BF16_TILE) returns CT_E_UNSUPPORTED before touching anything, and the
 * executor falls back to FP32 copies for that node (graph/executor.c). A kernel sees
 * one low-precision dtype at a time (ct_lowp_io): plans never mix BF16 and
 * FP16. */
#ifndef CT_SIMD_LOWP_H
#define CT_SIMD_LOWP_H

#include <string.h>

#include "simd.h"

#if defined(CT_SIMD_AVX512)
#define CT_CVT(name) ct_cvt_##name##_avx512
#else
#define CT_CVT(name) ct_cvt_##name##_avx2
#endif

/* CT_BF16_TILE (kernels.h): elements of one tile buffer (32 KiB of floats). */

/* ---- registers: vhalf holds VW 16-bit values ------------------------------------------------ */
#if defined(CT_SIMD_AVX512)
typedef __m256i vhalf;
static inline vhalf vh_load(const uint16_t *p) { return _mm256_loadu_si256((const __m256i *)p); }
static inline void vh_store(uint16_t *p, vhalf h) { _mm256_storeu_si256((__m256i *)p, h); }
static inline vhalf vh_tail_load(const uint16_t *p, int n) { return _mm256_maskz_loadu_epi16((__mmask16)((1u << n) - 1), p); }
static inline void vh_tail_store(uint16_t *p, vhalf h, int n) { _mm256_mask_storeu_epi16(p, (__mmask16)((1u << n) - 1), h); }
static inline vf vh_bf16_to_f32(vhalf h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
/* round to nearest even; NaN -> (u >> 16) | 0x40 (ct_f32_to_bf16). Where the CPU has AVX512-BF16
 * (ct_simd_bf16_cvt, set by ct_cpu_probe), vcvtneps2bf16 does it in one instruction with the same bits,
 * except that it flushes a denormal input to zero: a vector holding one takes the integer path. Half the
 * element-wise kernels' instructions per BF16 store (gpt-char-small's BF16 GELU 10.9 -> 9.6 ms per step
 * backward, 5.0 -> 4.3 forward on an AMX Xeon, before their prefetch; docs/results.md); test_convert checks
 * both against the reference on every rounding boundary, NaN payload and denormal. */
static inline vhalf vh_f32_to_bf16(vf v) {
    __m512i u = _mm512_castps_si512(v);
    if (ct_simd_bf16_cvt && /* no denormal: |u| - 1 >= 0x7fffff unsigned (fpclass's test obeys MXCSR.DAZ) */
        !_mm512_cmplt_epu32_mask(_mm512_sub_epi32(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(1)),
                                 _mm512_set1_epi32(0x7fffff)))
        return (vhalf)_mm512_cvtneps_pbh(v);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
    __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    r = _mm512_mask_blend_epi32(nan, r, _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40)));
    return _mm512_cvtepi32_epi16(r); /* values < 2^16: truncation is exact */
}
static inline vf vh_f16_to_f32(vhalf h16) {
    __m512i f = _mm512_castps_si512(_mm512_cvtph_ps(h16));
    __m512i h = _mm512_cvtepu16_epi32(h16);
    /* signaling NaN: exponent all ones, mantissa != 0, quiet bit (0x200) clear */
    __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(h, _mm512_set1_epi32(0x7fff)), _mm512_set1_epi32(0x7c00));
    __mmask16 snan = _mm512_mask_testn_epi32_mask(nan, h, _mm512_set1_epi32(0x200));
    return _mm512_castsi512_ps(_mm512_mask_and_epi32(f, snan, f, _mm512_set1_epi32(~0x00400000)));
}
static inline vhalf vh_f32_to_f16(vf v) { return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
#else
typedef __m128i vhalf;
static inline vhalf vh_load(const uint16_t *p) { return _mm_loadu_si128((const __m128i *)p); }
static inline void vh_store(uint16_t *p, vhalf h) { _mm_storeu_si128((__m128i *)p, h); }
static inline vhalf vh_tail_load(const uint16_t *p, int n) {
    uint16_t t[VW] = {0};
    memcpy(t, p, (size_t)n * sizeof *p);
    return vh_load(t);
}
static inline void vh_tail_store(uint16_t *p, vhalf h, int n) {
    uint16_t t[VW];
    vh_store(t, h);
    memcpy(p, t, (size_t)n * sizeof *p);
}
static inline vf vh_bf16_to_f32(vhalf h) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)); }
static inline vhalf vh_f32_to_bf16(vf v) {
    __m256i u = _mm256_castps_si256(v);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
    /* a >= 0: the signed compare is fine */
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
    r = _mm256_blendv_epi8(r, _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40)), nan);
    /* values < 2^16: the unsigned saturation never triggers */
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}
static inline vf vh_f16_to_f32(vhalf h16) {
    __m256i f = _mm256_castps_si256(_mm256_cvtph_ps(h16));
    __m256i h = _mm256_cvtepu16_epi32(h16);
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(h, _mm256_set1_epi32(0x7fff)), _mm256_set1_epi32(0x7c00));
    /* (h << 13) has the f16 quiet bit at the f32 quiet bit (0x00400000) */
    __m256i qclear = _mm256_andnot_si256(_mm256_slli_epi32(h, 13), _mm256_set1_epi32(0x00400000));
    return _mm256_castsi256_ps(_mm256_andnot_si256(_mm256_and_si256(nan, qclear), f)); /* signaling NaN: quiet bit cleared again */
}
static inline vhalf vh_f32_to_f16(vf v) { return _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT); }
#endif

/* ---- vectors in memory -------------------------------------------------------------------- */
static inline vf vload_bf16(const uint16_t *p) { return vh_bf16_to_f32(vh_load(p)); }
static inline vf vtail_load_bf16(const uint16_t *p, int n) { return vh_bf16_to_f32(vh_tail_load(p, n)); }
static inline void vstore_bf16(uint16_t *p, vf v) { vh_store(p, vh_f32_to_bf16(v)); }
static inline void vtail_store_bf16(uint16_t *p, vf v, int n) { vh_tail_store(p, vh_f32_to_bf16(v), n); }
static inline vf vload_f16(const uint16_t *p) { return vh_f16_to_f32(vh_load(p)); }
static inline vf vtail_load_f16(const uint16_t *p, int n) { return vh_f16_to_f32(vh_tail_load(p, n)); }
static inline void vstore_f16(uint16_t *p, vf v) { vh_store(p, vh_f32_to_f16(v)); }
static inline void vtail_store_f16(uint16_t *p, vf v, int n) { vh_tail_store(p, vh_f32_to_f16(v), n); }

/* the same for a 16-bit dtype dt (CT_BF16 or CT_F16) known at run time */
static inline vf vload_lp(const uint16_t *p, ct_dtype dt) { return dt == CT_F16 ? vload_f16(p) : vload_bf16(p); }
static inline vf vtail_load_lp(const uint16_t *p, int n, ct_dtype dt) {
    return dt == CT_F16 ? vtail_load_f16(p, n) : vtail_load_bf16(p, n);
}
static inline void vstore_lp(uint16_t *p, vf v, ct_dtype dt) {
    if (dt == CT_F16) vstore_f16(p, v);
    else vstore_bf16(p, v);
}
static inline void vtail_store_lp(uint16_t *p, vf v, int n, ct_dtype dt) {
    if (dt == CT_F16) vtail_store_f16(p, v, n);
    else vtail_store_bf16(p, v, n);
}

/* n <= VW elements at element offset off of a tensor's data in its own dtype
 * (FP32, BF16 or FP16), as floats; and back. */
static inline vf ct_vld(const ct_tensor *t, int64_t off, int n) {
    if (ct_dtype_is_low(t->dtype)) {
        const uint16_t *p = (const uint16_t *)t->data + off;
        return n == VW ? vload_lp(p, t->dtype) : vtail_load_lp(p, n, t->dtype);
    }
    const float *p = (const float *)t->data + off;
    return n == VW ? vload(p) : vtail_load(p, n);
}
static inline void ct_vst(const ct_tensor *t, int64_t off, vf v, int n) {
    if (ct_dtype_is_low(t->dtype)) {
        uint16_t *p = (uint16_t *)t->data + off;
        if (n == VW) vstore_lp(p, v, t->dtype);
        else vtail_store_lp(p, v, n, t->dtype);
        return;
    }
    float *p = (float *)t->data + off;
    if (n == VW) vstore(p, v);
    else vtail_store(p, v, n);
}
/* one 16-bit value of dtype dt as a float, and back (tensor.h's scalar conversions) */
static inline float ct_lp1_to_f32(uint16_t h, ct_dtype dt) { return dt == CT_F16 ? ct_f16_to_f32(h) : ct_bf16_to_f32(h); }
static inline uint16_t ct_f32_to_lp1(float x, ct_dtype dt) { return dt == CT_F16 ? ct_f32_to_f16(x) : ct_f32_to_bf16(x); }
/* one element as a float */
static inline float ct_sld(const ct_tensor *t, int64_t off) {
    if (ct_dtype_is_low(t->dtype)) return ct_lp1_to_f32(((const uint16_t *)t->data)[off], t->dtype);
    return ((const float *)t->data)[off];
}

/* ---- runs: n elements between 16-bit values and floats ------------------------------------ */
static inline void ct_lp_to_f32(const uint16_t *src, float *dst, size_t n, ct_dtype dt) {
    if (dt == CT_F16) CT_CVT(f16_to_f32)(src, dst, n);
    else CT_CVT(bf16_to_f32)(src, dst, n);
}
static inline void ct_f32_to_lp(const float *src, uint16_t *dst, size_t n, ct_dtype dt) {
    if (dt == CT_F16) CT_CVT(f32_to_f16)(src, dst, n);
    else CT_CVT(f32_to_bf16)(src, dst, n);
}

/* ---- tiles -------------------------------------------------------------------------------- */

/* Elements [off, off + n) of t as floats: t's own data when FP32, else
 * converted into buf (n <= CT_BF16_TILE). */
static inline const float *ct_tile_in(const ct_tensor *t, int64_t off, int64_t n, float *buf) {
    if (!ct_dtype_is_low(t->dtype)) return (const float *)t->data + off;
    ct_lp_to_f32((const uint16_t *)t->data + off, buf, (size_t)n, t->dtype);
    return buf;
}
/* Where a kernel writes the floats of output elements [off, off + n): the
 * tensor itself when FP32, else buf, which ct_tile_put then stores as the
 * tensor's 16-bit dtype. */
static inline float *ct_tile_out(const ct_tensor *t, int64_t off, float *buf) {
    return ct_dtype_is_low(t->dtype) ? buf : (float *)t->data + off;
}
static inline void ct_tile_put(const ct_tensor *t, int64_t off, int64_t n, const float *buf) {
    if (ct_dtype_is_low(t->dtype)) ct_f32_to_lp(buf, (uint16_t *)t->data + off, (size_t)n, t->dtype);
}

/* The low-precision dtype of out and in[0..n_in) when they are all FP32 or
 * that one 16-bit dtype (BF16 or FP16) and at least one is 16-bit: the
 * kernel's low-precision path applies. CT_F32 otherwise (all FP32, another
 * dtype, or BF16 mixed with FP16). */
static inline ct_dtype ct_lowp_io(const ct_kargs *k, int n_in) {
    ct_dtype low = CT_F32;
    for (int i = -1; i < n_in; i++) {
        ct_dtype dt = i < 0 ? k->out.dtype : k->in[i].dtype;
        if (dt == CT_F32) continue;
        if (!ct_dtype_is_low(dt) || (low != CT_F32 && dt != low)) return CT_F32;
        low = dt;
    }
    return low;
}
/* the tensor's dtype is FP32 or the 16-bit `low` */
static inline int ct_f32_or(const ct_tensor *t, ct_dtype low) { return t->dtype == CT_F32 || t->dtype == low; }

#endif
