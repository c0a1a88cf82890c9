/* ctrain/convert.h - bulk conversions between f32, bf16 and f16.
 *
 * Every routine gives, bit for bit, the result of the scalar conversions of
 * tensor.h (ct_f32_to_bf16, ct_bf16_to_f32, ct_f32_to_f16, ct_f16_to_f32)
 * applied element by element, whatever the ISA, thread count or MXCSR
 * (DAZ/FTZ) setting:
 *   f32 -> bf16/f16  round to nearest even; NaN -> quiet NaN with the sign
 *                    and the top mantissa bits kept; +-inf and -0 kept;
 *                    f16: overflow (|x| >= 65520) -> inf, subnormals rounded
 *                    correctly.
 *   bf16/f16 -> f32  exact (f16 subnormals become normal f32 values); NaNs
 *                    keep sign and payload exactly as the scalar functions do
 *                    (an f16 signaling NaN stays signaling in f32).
 *   bf16 <-> f16     through f32 (exact widening, then one rounding).
 */
#ifndef CTRAIN_CONVERT_H
#define CTRAIN_CONVERT_H

#include <stddef.h>
#include <stdint.h>
#include "context.h"
#include "status.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dst = src converted to dst->dtype. src and dst: dtype f32, bf16 or f16
 * (else CT_E_DTYPE), the same shape (else CT_E_SHAPE), contiguous and not
 * overlapping (else CT_E_INVALID_ARG; dst == src with the same dtype is
 * allowed and does nothing). The same dtype is a copy. Runs on
 * ct_context_isa(ctx) with the context's threads for large tensors; the
 * result does not depend on either. */
ct_status ct_convert(ct_context *ctx, const ct_tensor *src, ct_tensor *dst);

/* The n-element loops, with the implementation chosen by `isa`:
 * CT_ISA_REF runs the scalar functions of tensor.h in a loop; CT_ISA_AVX2
 * (needs AVX2 and F16C) and CT_ISA_AVX512 (AVX-512 F/BW/DQ/VL) the SIMD
 * bodies. `isa` is an upper bound: a level the CPU lacks runs the best one
 * it has, and a value outside the enum (-1, CT_ISA_COUNT) the best one
 * (ct_convert_isa tells which). Single-threaded; src and dst must
 * not overlap. */
void ct_f32_to_bf16_n(const float *src, uint16_t *dst, size_t n, ct_isa isa);
void ct_bf16_to_f32_n(const uint16_t *src, float *dst, size_t n, ct_isa isa);
void ct_f32_to_f16_n(const float *src, uint16_t *dst, size_t n, ct_isa isa);
void ct_f16_to_f32_n(const uint16_t *src, float *dst, size_t n, ct_isa isa);

/* The implementation the *_n functions run when asked for `isa` on this CPU. */
ct_isa ct_convert_isa(ct_isa isa);

#ifdef __cplusplus
}
#endif
#endif
