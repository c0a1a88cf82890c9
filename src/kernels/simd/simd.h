/* src/kernels/simd/simd.h - one SIMD vocabulary over AVX2 (8 floats) and
 * AVX-512 (16 floats). Every file in src/kernels/simd/ is compiled twice,
 * with -DCT_SIMD_AVX2 and with -DCT_SIMD_AVX512 (see the Makefile); CT_FN(x)
 * names the function for the ISA being compiled: ct_k_x_avx2 / _avx512.
 *
 *   vf          vector of VW floats
 *   vload/vstore, vset1, vzero, vadd/vsub/vmul/vdiv, vfma(a,b,c)=a*b+c,
 *   vmax/vmin, vhsum (horizontal sum), vhmax, vexp (|rel err| < 2e-7 on
 *   [-87, 88]), vtail_load/vtail_store for the last n < VW elements,
 *   vtab8/vperm8/vtrunc_i (8-entry table lookups per lane), vall_lt.
 */
#ifndef CT_SIMD_H
#define CT_SIMD_H

#include <immintrin.h>
#include <stdint.h>

#include "kernels/kernels.h"

#if defined(CT_SIMD_AVX512)
#define CT_FN(name) ct_k_##name##_avx512
#define VW 16
typedef __m512 vf;
typedef __m512i vi;
#define vload(p) _mm512_loadu_ps(p)
#define vstore(p, v) _mm512_storeu_ps((p), (v))
#define vset1(x) _mm512_set1_ps(x)
#define vzero() _mm512_setzero_ps()
#define vadd(a, b) _mm512_add_ps(a, b)
#define vsub(a, b) _mm512_sub_ps(a, b)
#define vmul(a, b) _mm512_mul_ps(a, b)
#define vdiv(a, b) _mm512_div_ps(a, b)
#define vfma(a, b, c) _mm512_fmadd_ps(a, b, c)
#define vmax(a, b) _mm512_max_ps(a, b)
#define vmin(a, b) _mm512_min_ps(a, b)
#define vsqrt(a) _mm512_sqrt_ps(a)
static inline float vhsum(vf v) { return _mm512_reduce_add_ps(v); }
static inline float vhmax(vf v) { return _mm512_reduce_max_ps(v); }
static inline vf vtail_load(const float *p, int n) { return _mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1), p); }
static inline void vtail_store(float *p, vf v, int n) { _mm512_mask_storeu_ps(p, (__mmask16)((1u << n) - 1), v); }
/* lanes where a > b get x, else y */
static inline vf vselect_gt(vf a, vf b, vf x, vf y) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_GT_OQ), y, x);
}
static inline vf vround(vf x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
static inline vf vpow2i(vf n) { /* 2^n for integral n in [-126, 127] */
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
}
/* table lookups: vtab8 loads a table of 8 floats, vperm8 gives each lane entry k of it for k in 0..7 (k:
 * integers, e.g. vtrunc_i of an index; AVX-512 reads lanes 8-15, zeros, for k & 15 >= 8, AVX2 entry k & 7) */
static inline vf vtab8(const float *t8) { return _mm512_zextps256_ps512(_mm256_loadu_ps(t8)); }
static inline vi vtrunc_i(vf x) { return _mm512_cvttps_epi32(x); }
static inline vf vperm8(vf tab, vi k) { return _mm512_permutexvar_ps(k, tab); }
/* 1 when every lane has a < b (none NaN) */
static inline int vall_lt(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ) == 0xffff; }
#elif defined(CT_SIMD_AVX2)
#define CT_FN(name) ct_k_##name##_avx2
#define VW 8
typedef __m256 vf;
typedef __m256i vi;
#define vload(p) _mm256_loadu_ps(p)
#define vstore(p, v) _mm256_storeu_ps((p), (v))
#define vset1(x) _mm256_set1_ps(x)
#define vzero() _mm256_setzero_ps()
#define vadd(a, b) _mm256_add_ps(a, b)
#define vsub(a, b) _mm256_sub_ps(a, b)
#define vmul(a, b) _mm256_mul_ps(a, b)
#define vdiv(a, b) _mm256_div_ps(a, b)
#define vfma(a, b, c) _mm256_fmadd_ps(a, b, c)
#define vmax(a, b) _mm256_max_ps(a, b)
#define vmin(a, b) _mm256_min_ps(a, b)
#define vsqrt(a) _mm256_sqrt_ps(a)
static inline float vhsum(vf v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
static inline float vhmax(vf v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
static inline __m256i ct_tail_mask(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
static inline vf vtail_load(const float *p, int n) { return _mm256_maskload_ps(p, ct_tail_mask(n)); }
static inline void vtail_store(float *p, vf v, int n) { _mm256_maskstore_ps(p, ct_tail_mask(n), v); }
static inline vf vselect_gt(vf a, vf b, vf x, vf y) { return _mm256_blendv_ps(y, x, _mm256_cmp_ps(a, b, _CMP_GT_OQ)); }
static inline vf vround(vf x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
static inline vf vpow2i(vf n) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
}
static inline vf vtab8(const float *t8) { return _mm256_loadu_ps(t8); }
static inline vi vtrunc_i(vf x) { return _mm256_cvttps_epi32(x); }
static inline vf vperm8(vf tab, vi k) { return _mm256_permutevar8x32_ps(tab, k); }
static inline int vall_lt(vf a, vf b) { return _mm256_movemask_ps(_mm256_cmp_ps(a, b, _CMP_LT_OQ)) == 0xff; }
#else
#error "compile src/kernels/simd/ files with -DCT_SIMD_AVX2 or -DCT_SIMD_AVX512"
#endif

/* e^x: range reduction x = n ln2 + r, |r| <= ln2/2, degree-6 polynomial.
 * Inputs are clamped to [-87.3, 88.7]; exp(-inf) gives ~0, NaN stays NaN. */
static inline vf vexp(vf x) {
    x = vmin(vset1(88.7f), vmax(vset1(-87.3f), x)); /* constant first: NaN passes through */
    vf n = vround(vmul(x, vset1(1.44269504088896341f)));
    vf r = vfma(n, vset1(-0.693359375f), x);
    r = vfma(n, vset1(2.12194440e-4f), r);
    vf p = vset1(1.9875691500e-4f);
    p = vfma(p, r, vset1(1.3981999507e-3f));
    p = vfma(p, r, vset1(8.3334519073e-3f));
    p = vfma(p, r, vset1(4.1665795894e-2f));
    p = vfma(p, r, vset1(1.6666665459e-1f));
    p = vfma(p, r, vset1(5.0000001201e-1f));
    p = vfma(p, vmul(r, r), vadd(r, vset1(1.0f)));
    return vmul(p, vpow2i(n));
}

/* Threads worth using for `work` elements of cheap elementwise work. */
static inline int ct_par_threads(const ct_kargs *k, int64_t work) { return work >= 32768 ? k->nthreads : 1; }

/* ---- more generic primitives (added with the eltwise/softmax kernels) -------------------
 *   vand/vor/vxor  bitwise ops on float vectors; vabs, vneg
 *   ct_vmask_bits  all-ones lanes where bit i of an integer is set (VW bits)
 *   vsigmoid       1/(1+e^-x), stable for both signs, |rel err| < 5e-7; 0 below -87.3
 *   vtanh          |rel err| < 5e-7; small |x| by an odd polynomial (no cancellation) */
#if defined(CT_SIMD_AVX512)
static inline vf vand(vf a, vf b) { return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(a), _mm512_castps_si512(b))); }
static inline vf vor(vf a, vf b) { return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(a), _mm512_castps_si512(b))); }
static inline vf vxor(vf a, vf b) { return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(a), _mm512_castps_si512(b))); }
static inline vf vabs(vf x) { return vand(x, _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff))); }
static inline vf ct_vmask_bits(unsigned bits) { return _mm512_castsi512_ps(_mm512_movm_epi32((__mmask16)bits)); }
#else
static inline vf vand(vf a, vf b) { return _mm256_and_ps(a, b); }
static inline vf vor(vf a, vf b) { return _mm256_or_ps(a, b); }
static inline vf vxor(vf a, vf b) { return _mm256_xor_ps(a, b); }
static inline vf vabs(vf x) { return vand(x, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff))); }
static inline vf ct_vmask_bits(unsigned bits) {
    const __m256i lane = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    return _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)bits), lane), lane));
}
#endif
static inline vf vneg(vf x) { return vxor(x, vset1(-0.0f)); }

static inline vf vsigmoid(vf x) {
    vf a = vabs(x);
    vf e = vexp(vneg(a)); /* e^-|x| in (0, 1] */
    e = vselect_gt(a, vset1(87.3f), vzero(), e); /* underflow to 0, not vexp's clamp value */
    vf r = vdiv(vset1(1.0f), vadd(vset1(1.0f), e)); /* sigmoid(|x|) */
    return vselect_gt(vzero(), x, vmul(e, r), r);   /* x < 0: e/(1+e) */
}

static inline vf vtanh(vf x) {
    vf a = vabs(x), z = vmul(x, x);
    vf p = vset1(-5.70498872745e-3f); /* Cephes tanhf, |x| < 0.625 */
    p = vfma(p, z, vset1(2.06390887954e-2f));
    p = vfma(p, z, vset1(-5.37397155531e-2f));
    p = vfma(p, z, vset1(1.33314422036e-1f));
    p = vfma(p, z, vset1(-3.33332819422e-1f));
    vf small = vfma(vmul(p, z), x, x);
    vf e = vexp(vmul(a, vset1(-2.0f))); /* |x| >= 0.625: (1 - e^-2|x|) / (1 + e^-2|x|) */
    vf big = vdiv(vsub(vset1(1.0f), e), vadd(vset1(1.0f), e));
    big = vor(big, vand(x, vset1(-0.0f)));
    return vselect_gt(a, vset1(0.625f), big, small); /* NaN takes the polynomial: stays NaN */
}

#endif
