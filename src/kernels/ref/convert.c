/* src/kernels/ref/convert.c - reference loops of the bulk conversions: the
 * scalar functions of tensor.h over n elements (ct_cvt_*_ref), the twins of
 * the SIMD bodies in src/kernels/simd/convert.c; dispatch in
 * src/kernels/convert.c. */
#include "kernels/kernels.h"

void ct_cvt_f32_to_bf16_ref(const float *src, uint16_t *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = ct_f32_to_bf16(src[i]);
}

void ct_cvt_bf16_to_f32_ref(const uint16_t *src, float *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = ct_bf16_to_f32(src[i]);
}

void ct_cvt_f32_to_f16_ref(const float *src, uint16_t *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = ct_f32_to_f16(src[i]);
}

void ct_cvt_f16_to_f32_ref(const uint16_t *src, float *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = ct_f16_to_f32(src[i]);
}
