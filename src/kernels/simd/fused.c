/* src/kernels/simd/fused.c - the fast kernels of batchnorm+relu (see
 * kernels/fused.c): the SIMD batchnorm and relu of this ISA, then the mask
 * bits; and the relu backward from those bits. Bit-identical to the unfused
 * SIMD kernels of the same ISA. */
#include "simd.h"

ct_status CT_FN(bn_relu)(ct_kargs *k) { return ct_fused_bn_relu(k, CT_FN(batchnorm), CT_FN(unary), ct_fused_relu_mask_pack); }

/* in: dy, fwd (BN_RELU): dy * (bit ? 1 : 0), as relu's UNARY_BWD */
ct_status CT_FN(relu_mask_bwd)(ct_kargs *k) {
    if (k->in[0].dtype != CT_F32 || k->out.dtype != CT_F32) return CT_E_UNSUPPORTED;
    const float *dy = k->in[0].data;
    float *dx = k->out.data;
    const uint8_t *bits = (const uint8_t *)k->in_aux[1] + 2 * (size_t)k->in[1].shape[1] * sizeof(float);
    int64_t n = ct_tensor_numel(&k->out), nb = n / 8;
    int nth = n >= 65536 ? k->nthreads : 1;
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
