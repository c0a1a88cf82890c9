/* src/kernels/simd/colsum.h - column sums in a producer's row pass
 * (fusions layernorm_bwd+colsum and unary_bwd+colsum, graph/fusion.c).
 *
 * The rows split into ct_colsum_pieces(R, D) pieces (kernels.h); a thread
 * runs whole pieces, and for each keeps float column sums of the current run
 * of rows (NM_ROWS = 8 rows for a layernorm's dgamma, as
 * layernorm_bwd_gamma; CS_RB = 32 for the plain sums, as sum's column path,
 * simd/reduce.c RD_RB) that it flushes into the piece's double partials in
 * its aux: the same operations in the same order as those kernels, so the
 * COLSUM nodes' results (the pieces added in order) are theirs bit for bit. */
#ifndef CT_SIMD_COLSUM_H
#define CT_SIMD_COLSUM_H

#include "simd_lowp.h"

#define CS_RB 32

/* ct_vld / ct_vst on a tensor's data pointer and dtype held in locals,
 * always inlined: in the fused row loops the compiler otherwise keeps them
 * out of line or reloads the dtype after every store (-fno-strict-aliasing),
 * a branch per vector */
static inline __attribute__((always_inline)) vf cs_ld(const void *d, ct_dtype dt, int64_t off, int n) {
    if (dt != CT_F32) {
        const uint16_t *p = (const uint16_t *)d + off;
        return n == VW ? vload_lp(p, dt) : vtail_load_lp(p, n, dt);
    }
    const float *p = (const float *)d + off;
    return n == VW ? vload(p) : vtail_load(p, n);
}
static inline __attribute__((always_inline)) void cs_st(void *d, ct_dtype dt, int64_t off, vf v, int n) {
    if (dt != CT_F32) {
        uint16_t *p = (uint16_t *)d + off;
        if (n == VW) vstore_lp(p, v, dt);
        else vtail_store_lp(p, v, n, dt);
        return;
    }
    float *p = (float *)d + off;
    if (n == VW) vstore(p, v);
    else vtail_store(p, v, n);
}
/* cs_st, returning v as stored (rounded to a 16-bit dt, as cs_round would), without reading it back */
static inline __attribute__((always_inline)) vf cs_st_v(void *d, ct_dtype dt, int64_t off, vf v, int n) {
    if (dt == CT_F32) {
        cs_st(d, dt, off, v, n);
        return v;
    }
    vhalf h = dt == CT_BF16 ? vh_f32_to_bf16(v) : vh_f32_to_f16(v);
    uint16_t *p = (uint16_t *)d + off;
    if (n == VW) vh_store(p, h);
    else vh_tail_store(p, h, n);
    return dt == CT_BF16 ? vh_bf16_to_f32(h) : vh_f16_to_f32(h);
}
static inline __attribute__((always_inline)) vf cs_vld(const ct_tensor *t, int64_t off, int n) {
    return cs_ld(t->data, t->dtype, off, n);
}

/* v rounded to dtype dt (BF16 / FP16; FP32: v), as a store and a load would */
static inline vf cs_round(vf v, ct_dtype dt) {
    return dt == CT_BF16 ? vh_bf16_to_f32(vh_f32_to_bf16(v)) : dt == CT_F16 ? vh_f16_to_f32(vh_f32_to_f16(v)) : v;
}

/* f[j] += row j of T at o (rounded to rdt first, unless T is stored in rdt), j < D */
static inline __attribute__((always_inline)) void cs_add_row_t(float *f, const ct_tensor *T, int64_t o, int64_t D,
                                                                ct_dtype rdt) {
    int64_t i = 0;
    for (; i + VW <= D; i += VW) vstore(f + i, vadd(vload(f + i), cs_round(cs_vld(T, o + i, VW), rdt)));
    if (i < D) {
        int t = (int)(D - i);
        vtail_store(f + i, vadd(vtail_load(f + i, t), cs_round(cs_vld(T, o + i, t), rdt)), t);
    }
}
static inline void cs_add_row(float *f, const ct_tensor *T, int64_t o, int64_t D, ct_dtype rdt) {
    if (rdt == T->dtype || rdt == CT_F32) cs_add_row_t(f, T, o, D, CT_F32); /* stored so: no rounding */
    else if (rdt == CT_BF16) cs_add_row_t(f, T, o, D, CT_BF16);
    else cs_add_row_t(f, T, o, D, CT_F16);
}

static inline void cs_flush(double *acc, const float *f, int64_t D) {
    for (int64_t j = 0; j < D; j++) acc[j] += f[j];
}

/* The sets of a producer's aux: set s (a CT_COLSUM_* bit) of mask at
 * aux + (slot * P + p) * D, slot = the sets of lower bits in mask. */
static inline double *cs_set(void *aux, int64_t mask, int bit, int64_t P, int64_t p, int64_t D) {
    int slot = ((mask & 1) && bit > 1) + ((mask & 2) && bit > 2);
    return (double *)aux + ((int64_t)slot * P + p) * D;
}

#endif
