/* src/core/tensor.c - dtype sizes, tensor descriptors, scalar conversions. */
#include <stdio.h>
#include <string.h>

#include "ctrain/tensor.h"

size_t ct_dtype_size(ct_dtype dt) {
    switch (dt) {
    case CT_F32: case CT_I32: return 4;
    case CT_BF16: case CT_F16: return 2;
    case CT_I64: return 8;
    case CT_U8: return 1;
    default: return 0;
    }
}

const char *ct_dtype_name(ct_dtype dt) {
    static const char *names[CT_DTYPE_COUNT] = {"f32", "bf16", "f16", "i32", "i64", "u8"};
    return (unsigned)dt < CT_DTYPE_COUNT ? names[dt] : "invalid";
}

ct_tensor ct_tensor_make(void *data, ct_dtype dt, int ndim, const int64_t *shape) {
    ct_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = dt;
    t.ndim = ndim;
    int64_t st = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        t.shape[i] = shape[i];
        t.strides[i] = st;
        st *= shape[i];
    }
    return t;
}

int64_t ct_tensor_numel(const ct_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

size_t ct_tensor_nbytes(const ct_tensor *t) { return (size_t)ct_tensor_numel(t) * ct_dtype_size(t->dtype); }

int ct_tensor_is_contiguous(const ct_tensor *t) {
    int64_t st = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->strides[i] != st) return 0;
        st *= t->shape[i];
    }
    return 1;
}

char *ct_shape_str(int ndim, const int64_t *shape, char *buf, size_t len) {
    size_t o = 0;
    if (len == 0) return buf;
    buf[0] = 0;
    o += (size_t)snprintf(buf + o, len - o, "[");
    for (int i = 0; i < ndim && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (o < len) snprintf(buf + o, len - o, "]");
    return buf;
}

static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

uint16_t ct_f32_to_bf16(float f) {
    uint32_t u = f2u(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);  /* round to nearest even */
    return (uint16_t)(u >> 16);
}

float ct_bf16_to_f32(uint16_t h) { return u2f((uint32_t)h << 16); }

uint16_t ct_f32_to_f16(float f) {
    uint32_t u = f2u(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu)); /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  /* overflow -> inf (incl. inf) */
    if (a < 0x38800000u) {                                     /* subnormal or zero in f16 */
        /* value * 2^24 rounded to nearest even gives the subnormal mantissa */
        float v = u2f(a) * 16777216.0f;  /* exact scaling */
        uint32_t m = (uint32_t)v;
        float rem = v - (float)m;
        if (rem > 0.5f || (rem == 0.5f && (m & 1u))) m++;
        return (uint16_t)(sign | m);
    }
    uint32_t e = ((a >> 23) - 127 + 15);
    uint32_t mant = a & 0x7fffffu;
    uint32_t h = (e << 10) | (mant >> 13);
    uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++; /* may carry into exponent: correct */
    return (uint16_t)(sign | h);
}

float ct_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
        float v = (float)m / 16777216.0f; /* m * 2^-24 */
        return sign ? -v : v;
    }
    if (e == 31) return u2f(sign | 0x7f800000u | (m << 13));
    return u2f(sign | ((e - 15 + 127) << 23) | (m << 13));
}
