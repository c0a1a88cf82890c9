/* src/kernels/simd/convert.c - SIMD bodies of the bulk f32 <-> bf16 / f16
 * conversions (include/ctrain/convert.h), compiled once for AVX2(+F16C) and
 * once for AVX-512; the reference loops are in src/kernels/ref/convert.c,
 * the dispatch in src/kernels/convert.c. Each result equals the scalar
 * conversion of tensor.h bit for bit: the register conversions of
 * simd_lowp.h (which the kernels' BF16 / FP16 I/O uses too, and whose
 * comment says how each conversion matches), VW elements at a time, the
 * last n % VW as a tail. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "simd_lowp.h"

#define CVT_FN(name) CT_CVT(name)

/* Declared again in kernels/kernels.h (CT_DECL_CVT; dispatch in src/kernels/convert.c). */
void CVT_FN(f32_to_bf16)(const float *src, uint16_t *dst, size_t n);
void CVT_FN(bf16_to_f32)(const uint16_t *src, float *dst, size_t n);
void CVT_FN(f32_to_f16)(const float *src, uint16_t *dst, size_t n);
void CVT_FN(f16_to_f32)(const uint16_t *src, float *dst, size_t n);

/* ---- loops: full vectors, then the tail ---------------------------------------------------- */
#define CVT_LOOP(name, stype, dtype, LD, ST, TLD, TST)                                            \
    void CVT_FN(name)(const stype *src, dtype *dst, size_t n) {                                   \
        size_t i = 0;                                                                             \
        for (; i + VW <= n; i += VW) ST(dst + i, LD(src + i));                                    \
        if (i < n) TST(dst + i, TLD(src + i, (int)(n - i)), (int)(n - i));                        \
    }

CVT_LOOP(f32_to_bf16, float, uint16_t, vload, vstore_bf16, vtail_load, vtail_store_bf16)
CVT_LOOP(bf16_to_f32, uint16_t, float, vload_bf16, vstore, vtail_load_bf16, vtail_store)
CVT_LOOP(f32_to_f16, float, uint16_t, vload, vstore_f16, vtail_load, vtail_store_f16)
CVT_LOOP(f16_to_f32, uint16_t, float, vload_f16, vstore, vtail_load_f16, vtail_store)
