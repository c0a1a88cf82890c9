/* src/kernels/convert.c - bulk f32 <-> bf16 / f16 conversions
 * (include/ctrain/convert.h): the per-ISA dispatch between the reference
 * loops (src/kernels/ref/convert.c) and the SIMD bodies
 * (src/kernels/simd/convert.c), and ct_convert on tensors. */
#include <string.h>

#include "core/internal.h"
#include "ctrain/convert.h"
#include "kernels/kernels.h"

/* ---- ISA ------------------------------------------------------------------------------------ */

/* What the CPU (and OS) can run (core's probe); the SIMD bodies also need F16C. */
static ct_isa cpu_isa(void) {
    const ct_cpu_features *f = ct_cpu_probe();
    return f->f16c ? ct_cpu_best_isa(f) : CT_ISA_REF;
}

ct_isa ct_convert_isa(ct_isa isa) {
    ct_isa best = cpu_isa();
    if ((unsigned)isa >= CT_ISA_COUNT) return best; /* e.g. -1 or CT_ISA_COUNT: the best there is */
    return isa < best ? isa : best;
}

/* ---- the n-element loops -------------------------------------------------------------------- */

void ct_f32_to_bf16_n(const float *src, uint16_t *dst, size_t n, ct_isa isa) {
    switch (ct_convert_isa(isa)) {
    case CT_ISA_AVX512: ct_cvt_f32_to_bf16_avx512(src, dst, n); return;
    case CT_ISA_AVX2: ct_cvt_f32_to_bf16_avx2(src, dst, n); return;
    default: ct_cvt_f32_to_bf16_ref(src, dst, n);
    }
}

void ct_bf16_to_f32_n(const uint16_t *src, float *dst, size_t n, ct_isa isa) {
    switch (ct_convert_isa(isa)) {
    case CT_ISA_AVX512: ct_cvt_bf16_to_f32_avx512(src, dst, n); return;
    case CT_ISA_AVX2: ct_cvt_bf16_to_f32_avx2(src, dst, n); return;
    default: ct_cvt_bf16_to_f32_ref(src, dst, n);
    }
}

void ct_f32_to_f16_n(const float *src, uint16_t *dst, size_t n, ct_isa isa) {
    switch (ct_convert_isa(isa)) {
    case CT_ISA_AVX512: ct_cvt_f32_to_f16_avx512(src, dst, n); return;
    case CT_ISA_AVX2: ct_cvt_f32_to_f16_avx2(src, dst, n); return;
    default: ct_cvt_f32_to_f16_ref(src, dst, n);
    }
}

void ct_f16_to_f32_n(const uint16_t *src, float *dst, size_t n, ct_isa isa) {
    switch (ct_convert_isa(isa)) {
    case CT_ISA_AVX512: ct_cvt_f16_to_f32_avx512(src, dst, n); return;
    case CT_ISA_AVX2: ct_cvt_f16_to_f32_avx2(src, dst, n); return;
    default: ct_cvt_f16_to_f32_ref(src, dst, n);
    }
}

/* ---- ct_convert ------------------------------------------------------------------------------ */

/* Converts elements [0, n) of src (dtype sd) into dst (dtype dd), sd != dd. */
static void convert_range(const void *src, ct_dtype sd, void *dst, ct_dtype dd, size_t n, ct_isa isa) {
    if (sd == CT_F32) {
        if (dd == CT_BF16) ct_f32_to_bf16_n(src, dst, n, isa);
        else ct_f32_to_f16_n(src, dst, n, isa);
        return;
    }
    if (dd == CT_F32) {
        if (sd == CT_BF16) ct_bf16_to_f32_n(src, dst, n, isa);
        else ct_f16_to_f32_n(src, dst, n, isa);
        return;
    }
    /* bf16 <-> f16 through f32: the widening is exact, so this rounds once */
    enum { STAGE = 1024 };
    float buf[STAGE];
    const uint16_t *s = src;
    uint16_t *d = dst;
    for (size_t i = 0; i < n; i += STAGE) {
        size_t m = CT_MIN((size_t)STAGE, n - i);
        if (sd == CT_BF16) {
            ct_bf16_to_f32_n(s + i, buf, m, isa);
            ct_f32_to_f16_n(buf, d + i, m, isa);
        } else {
            ct_f16_to_f32_n(s + i, buf, m, isa);
            ct_f32_to_bf16_n(buf, d + i, m, isa);
        }
    }
}

static int is_float_dtype(ct_dtype dt) { return dt == CT_F32 || dt == CT_BF16 || dt == CT_F16; }

static int valid_shape(const ct_tensor *t) {
    if (t->ndim < 0 || t->ndim > CT_MAX_DIMS) return 0;
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] < 0) return 0;
    return 1;
}

/* Below this many elements a conversion runs on the calling thread. */
#define CT_CONVERT_PAR_MIN 65536

ct_status ct_convert(ct_context *ctx, const ct_tensor *src, ct_tensor *dst) {
    if (!ctx) return CT_E_INVALID_ARG;
    if (!src || !dst)
        return ct_set_error(ctx, CT_E_INVALID_ARG, "ct_convert: %s tensor is NULL; pass both src and dst",
                            !src ? "src" : "dst");
    if (!is_float_dtype(src->dtype) || !is_float_dtype(dst->dtype)) {
        int bad_src = !is_float_dtype(src->dtype);
        return ct_set_error(ctx, CT_E_DTYPE,
                            "ct_convert: %s dtype %s is not supported (src %s, dst %s); ct_convert converts "
                            "between f32, bf16 and f16 only",
                            bad_src ? "src" : "dst", ct_dtype_name(bad_src ? src->dtype : dst->dtype),
                            ct_dtype_name(src->dtype), ct_dtype_name(dst->dtype));
    }
    char b1[128], b2[128];
    if (!valid_shape(src) || !valid_shape(dst))
        return ct_set_error(ctx, CT_E_SHAPE, "ct_convert: invalid %s shape (ndim %d, need 0..%d and sizes >= 0)",
                            !valid_shape(src) ? "src" : "dst", !valid_shape(src) ? src->ndim : dst->ndim,
                            CT_MAX_DIMS);
    int same = src->ndim == dst->ndim;
    for (int i = 0; same && i < src->ndim; i++) same = src->shape[i] == dst->shape[i];
    if (!same)
        return ct_set_error(ctx, CT_E_SHAPE,
                            "ct_convert: shape mismatch: src %s %s vs dst %s %s; dst must have the shape of src",
                            ct_dtype_name(src->dtype), ct_shape_str(src->ndim, src->shape, b1, sizeof b1),
                            ct_dtype_name(dst->dtype), ct_shape_str(dst->ndim, dst->shape, b2, sizeof b2));
    if (!ct_tensor_is_contiguous(src) || !ct_tensor_is_contiguous(dst))
        return ct_set_error(ctx, CT_E_INVALID_ARG,
                            "ct_convert: %s tensor of shape %s is not contiguous; make a contiguous copy first",
                            !ct_tensor_is_contiguous(src) ? "src" : "dst",
                            ct_shape_str(src->ndim, src->shape, b1, sizeof b1));
    size_t n = (size_t)ct_tensor_numel(src);
    if (n == 0) return CT_OK;
    if (!src->data || !dst->data)
        return ct_set_error(ctx, CT_E_INVALID_ARG, "ct_convert: %s data pointer is NULL for %zu elements",
                            !src->data ? "src" : "dst", n);
    size_t sb = n * ct_dtype_size(src->dtype), db = n * ct_dtype_size(dst->dtype);
    const char *s0 = src->data;
    char *d0 = dst->data;
    if (src->dtype == dst->dtype && s0 == d0) return CT_OK;
    uintptr_t sa = (uintptr_t)s0, da = (uintptr_t)d0;
    if (sa < da + db && da < sa + sb)
        return ct_set_error(ctx, CT_E_INVALID_ARG,
                            "ct_convert: src and dst memory overlap; convert into a separate buffer");
    if (src->dtype == dst->dtype) {
        memcpy(d0, s0, sb);
        return CT_OK;
    }
    ct_isa isa = ct_context_isa(ctx);
    int nth = n >= CT_CONVERT_PAR_MIN ? ct_context_num_threads(ctx) : 1;
    if (nth < 1) nth = 1;
    /* fixed chunking, multiples of 64 elements (128-byte aligned 16-bit slices) */
    size_t chunk = ct_align_up((n + (size_t)nth - 1) / (size_t)nth, 64);
    size_t ss = ct_dtype_size(src->dtype), ds = ct_dtype_size(dst->dtype);
    if (nth == 1) {
        convert_range(s0, src->dtype, d0, dst->dtype, n, isa);
        return CT_OK;
    }
#pragma omp parallel for num_threads(nth) schedule(static)
    for (int t = 0; t < nth; t++) {
        size_t b = (size_t)t * chunk, e = CT_MIN(n, b + chunk);
        if (b < e) convert_range(s0 + b * ss, src->dtype, d0 + b * ds, dst->dtype, e - b, isa);
    }
    return CT_OK;
}
