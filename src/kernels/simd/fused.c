/* src/kernels/simd/fused.c - the fast kernels of batchnorm+relu (see
 * kernels/fused.c): the SIMD batchnorm and relu of this ISA, then the mask
 * bits; and the relu backward from those bits. Bit-identical to the unfused
 * SIMD kernels of the same ISA, in FP32 and with BF16 / FP16 I/O. */
#include "philox.h"
#include "simd_lowp.h"

/* relu in place (as the SIMD relu: max(0, x) + 0) and the mask bits, one pass */
static void relu_pack(float *y, uint8_t *bits, int64_t n, int nth) {
    int64_t nb = n / 16;
    nth = n >= 65536 ? nth : 1;
#pragma omp parallel for num_threads(nth) schedule(static) if (nth > 1)
    for (int64_t b = 0; b < nb; b++) {
        float *p = y + 16 * b;
        unsigned m = 0;
        for (int h = 0; h < 16; h += 8) {
            __m256 v = _mm256_add_ps(_mm256_max_ps(_mm256_setzero_ps(), _mm256_loadu_ps(p + h)), _mm256_setzero_ps());
            _mm256_storeu_ps(p + h, v);
            m |= (unsigned)_mm256_movemask_ps(_mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_GT_OQ)) << h;
        }
        bits[2 * b] = (uint8_t)m;
        bits[2 * b + 1] = (uint8_t)(m >> 8);
    }
    if (nb * 16 < n) ct_fused_relu_pack_ref(y + nb * 16, bits + 2 * nb, n - nb * 16, 1);
}

/* The same on BF16 / FP16 values (dt), 16 per step in 16-bit integer lanes,
 * exactly ct_fused_relu_pack_lp (which does the tail): a NaN stays
 * (quieted), negatives and -0 become +0; bit = output > 0 (+inf included,
 * NaN not). */
void CT_FN(relu_pack_lp)(uint16_t *y, uint8_t *bits, int64_t n, int nth, ct_dtype dt) {
    int64_t nb = n / 16;
    nth = n >= 65536 ? nth : 1;
    const __m256i abs_mask = _mm256_set1_epi16(0x7fff), inf = _mm256_set1_epi16(dt == CT_F16 ? 0x7c00 : 0x7f80);
    const __m256i quiet = _mm256_set1_epi16(dt == CT_F16 ? 0x200 : 0x40), zero = _mm256_setzero_si256();
#pragma omp parallel for num_threads(nth) schedule(static) if (nth > 1)
    for (int64_t b = 0; b < nb; b++) {
        __m256i u = _mm256_loadu_si256((const __m256i *)(y + 16 * b));
        __m256i nan = _mm256_cmpgt_epi16(_mm256_and_si256(u, abs_mask), inf); /* signed: both in [0, 0x7fff] */
        __m256i neg = _mm256_cmpgt_epi16(zero, u);
        __m256i r = _mm256_andnot_si256(_mm256_andnot_si256(nan, neg), u); /* negatives -> +0 */
        r = _mm256_or_si256(r, _mm256_and_si256(nan, quiet));
        _mm256_storeu_si256((__m256i *)(y + 16 * b), r);
        __m256i pos = _mm256_andnot_si256(nan, _mm256_cmpgt_epi16(r, zero));
        __m128i p8 = _mm_packs_epi16(_mm256_castsi256_si128(pos), _mm256_extracti128_si256(pos, 1));
        unsigned m = (unsigned)_mm_movemask_epi8(p8);
        bits[2 * b] = (uint8_t)m;
        bits[2 * b + 1] = (uint8_t)(m >> 8);
    }
    if (nb * 16 < n) ct_fused_relu_pack_lp(y + nb * 16, bits + 2 * nb, n - nb * 16, 1, dt);
}

ct_status CT_FN(bn_relu)(ct_kargs *k) {
    return ct_fused_bn_relu(k, CT_FN(batchnorm), relu_pack, CT_FN(relu_pack_lp));
}

/* in: a, r: r + dropout(a), exactly the dropout kernels' mask (ct_dropout_keep4) */
ct_status CT_FN(dropout_add)(ct_kargs *k) {
    if (k->in[0].dtype != CT_F32 || k->in[1].dtype != CT_F32 || k->out.dtype != CT_F32) return CT_E_UNSUPPORTED;
    const float *a = k->in[0].data, *r = k->in[1].data;
    float *y = k->out.data, p = k->node->fa[0];
    int64_t n = ct_tensor_numel(&k->out);
    int nth = n >= 4096 ? k->nthreads : 1;
    if (!k->training || p == 0.0f) {
#pragma omp parallel for num_threads(nth) schedule(static) if (nth > 1)
        for (int64_t i = 0; i < n; i++) y[i] = r[i] + a[i];
        return CT_OK;
    }
    float scale = 1.0f / (1.0f - p);
    uint64_t stream = (uint64_t)k->node->ia[0];
    const uint64_t key = (stream << 32) ^ k->step;
    const uint32_t thr = ct_dropout_thr(p);
    const vf vs = vset1(scale);
    /* element i's RNG counter is e0 + i (the plan's first sample, ct_kargs.sample_elem0); the 64-wide path
     * needs e0 a multiple of 4: else every block the scalar way */
    const uint64_t e0 = (uint64_t)k->sample_elem0;
    int64_t n64 = n / 64;
#pragma omp parallel for num_threads(nth) schedule(static) if (nth > 1)
    for (int64_t b = 0; b < n64; b++) {
        uint64_t bits;
        int64_t i0 = 64 * b;
        if (!(e0 & 3) && ct_dropout_bits64(k->seed, key, e0 + (uint64_t)i0, thr, &bits)) { /* 64 decisions at once */
            for (int q = 0; q < 64; q += VW) {
                vf d = vand(vmul(vload(a + i0 + q), vs), ct_vmask_bits((unsigned)(bits >> q) & ((1u << VW) - 1)));
                vstore(y + i0 + q, vadd(vload(r + i0 + q), d));
            }
        } else {
            for (int64_t i = i0; i < i0 + 64; i++)
                y[i] = r[i] + (ct_dropout_keep(k->seed, stream, k->step, e0 + (uint64_t)i, p) ? a[i] * scale : 0.0f);
        }
    }
    for (int64_t i = 64 * n64; i < n; i++)
        y[i] = r[i] + (ct_dropout_keep(k->seed, stream, k->step, e0 + (uint64_t)i, p) ? a[i] * scale : 0.0f);
    return CT_OK;
}

/* in: dy, fwd (BN_RELU): dy * (bit ? 1 : 0), as relu's UNARY_BWD; dy and dx
 * FP32, or both BF16 or both FP16 (converted in registers: the same
 * product, rounded) */
ct_status CT_FN(relu_mask_bwd)(ct_kargs *k) {
    const ct_dtype dt = k->out.dtype;
    int lp = ct_dtype_is_low(dt) && k->in[0].dtype == dt;
    if (!lp && (k->in[0].dtype != CT_F32 || dt != CT_F32)) return CT_E_UNSUPPORTED;
    const uint8_t *bits = ct_bn_relu_bits(k->in_aux[1], k->in[1].shape[1]);
    int64_t n = ct_tensor_numel(&k->out), nb = n / 8;
    int nth = n >= 65536 ? k->nthreads : 1;
    if (lp) {
        const uint16_t *dy = k->in[0].data;
        uint16_t *dx = k->out.data;
        int64_t nv = n / 16;
#pragma omp parallel for num_threads(nth) schedule(static) if (nth > 1)
        for (int64_t q = 0; q < nv; q++) {
            const unsigned m16 = bits[2 * q] | (unsigned)bits[2 * q + 1] << 8;
            for (int h = 0; h < 16; h += VW) { /* 1 where the bit is set, else 0 */
                vf one = vand(vset1(1.0f), ct_vmask_bits((m16 >> h) & ((1u << VW) - 1)));
                vstore_lp(dx + 16 * q + h, vmul(vload_lp(dy + 16 * q + h, dt), one), dt);
            }
        }
        for (int64_t i = nv * 16; i < n; i++) {
            float v = ct_lp1_to_f32(dy[i], dt) * ((bits[i >> 3] >> (i & 7)) & 1u ? 1.0f : 0.0f);
            dx[i] = ct_f32_to_lp1(v, dt);
        }
        return CT_OK;
    }
    const float *dy = k->in[0].data;
    float *dx = k->out.data;
#pragma omp parallel for num_threads(nth) schedule(static) if (nth > 1)
    for (int64_t b = 0; b < nb; b++) {
        __m256i sel = _mm256_and_si256(_mm256_set1_epi32(bits[b]), _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128));
        __m256 m = _mm256_castsi256_ps(_mm256_cmpeq_epi32(sel, _mm256_setzero_si256()));
        __m256 one = _mm256_andnot_ps(m, _mm256_set1_ps(1.0f)); /* 1 where the bit is set, else 0 */
        _mm256_storeu_ps(dx + 8 * b, _mm256_mul_ps(_mm256_loadu_ps(dy + 8 * b), one));
    }
    for (int64_t i = nb * 8; i < n; i++) dx[i] = dy[i] * ((bits[i >> 3] >> (i & 7)) & 1u ? 1.0f : 0.0f);
    return CT_OK;
}

/* relu(a + b) in one pass: vadd, then the SIMD relu (max(0, v) + 0) */
ct_status CT_FN(add_relu)(ct_kargs *k) {
    if (k->in[0].dtype != CT_F32 || k->in[1].dtype != CT_F32 || k->out.dtype != CT_F32) return CT_E_UNSUPPORTED;
    const float *a = k->in[0].data, *b = k->in[1].data;
    float *y = k->out.data;
    int64_t n = ct_tensor_numel(&k->out), nv = n / VW;
    int nth = n >= 65536 ? k->nthreads : 1;
#pragma omp parallel for num_threads(nth) schedule(static) if (nth > 1)
    for (int64_t q = 0; q < nv; q++) {
        vf v = vadd(vload(a + q * VW), vload(b + q * VW));
        vstore(y + q * VW, vadd(vmax(vzero(), v), vzero()));
    }
    if (nv * VW < n) {
        int t = (int)(n - nv * VW);
        vf v = vadd(vtail_load(a + nv * VW, t), vtail_load(b + nv * VW, t));
        vtail_store(y + nv * VW, vadd(vmax(vzero(), v), vzero()), t);
    }
    return CT_OK;
}
