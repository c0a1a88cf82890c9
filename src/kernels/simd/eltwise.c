/* src/kernels/simd/eltwise.c - SIMD elementwise kernels: activations and their
 * gradients, scale, broadcasting binary ops (same shape, scalar, and any
 * pattern that coalesces to at most 3 dims: row vector / bias / column /
 * outer broadcasts; others decline), dropout (mask from ct_dropout_keep).
 *
 * Work is split into fixed chunks of EW_CHUNK elements (or rows), so the
 * results never depend on the thread count. Accuracy vs the reference (which
 * computes in double): relu, scale, binary and dropout are bit-exact; the
 * transcendental activations are within ~5e-7 relative (see simd.h).
 *
 * BF16 / FP16 I/O (simd_lowp.h): any input or the output may be BF16 or FP16; each chunk is
 * then processed in tiles of EW_TILE elements converted in registers into
 * stack buffers, so the math is the FP32 kernel's on the 16-bit values (the
 * result is the one of FP32 copies, bit for bit). */
#include <string.h>

#include "philox.h"
#include "colsum.h"
#include "gelu_tables.h"
#include "simd_lowp.h"

#define EW_CHUNK 16384 /* elements per parallel work item (a multiple of 16) */
#define EW_TILE 2048   /* BF16 / FP16 I/O: elements per FP32 tile (a multiple of 16 and a divisor of EW_CHUNK) */

#define K_2_SQRT_2_OVER_PI 1.5957691216057308f /* 2 sqrt(2/pi) */
#define K_GELU_C 0.044715f
#define K_INV_SQRT_2PI 0.3989422804014327f
#define K_SQRT1_2 0.70710678118654752f

/* ---- activations ------------------------------------------------------------------------ */

/* sigmoid(x) and 1 - sigmoid(x), both without cancellation */
static inline void sigmoid2(vf x, vf *s, vf *sc) {
    vf a = vabs(x);
    vf e = vexp(vneg(a));
    e = vselect_gt(a, vset1(87.3f), vzero(), e);
    vf r = vdiv(vset1(1.0f), vadd(vset1(1.0f), e)), q = vmul(e, r);
    *s = vselect_gt(vzero(), x, q, r);
    *sc = vselect_gt(vzero(), x, r, q);
}

/* x^2 / 2 as an exact pair hh + ll */
static inline void half_sq(vf x, vf *hh, vf *ll) {
    vf h = vmul(x, x);
    *ll = vmul(vfma(x, x, vneg(h)), vset1(0.5f));
    *hh = vmul(h, vset1(0.5f));
}

/* e^(-x^2/2) from the exact pair hh + ll = x^2/2: e^-hh (1 - ll); 0 where it underflows */
static inline vf gauss_e(vf hh, vf ll) {
    vf e = vexp(vneg(hh));
    e = vfma(e, vneg(ll), e);
    return vselect_gt(vset1(87.3f), hh, e, vzero());
}

/* Phi(x) = P(N(0,1) <= x), given e = e^(-x^2/2). Its lower tail Phi(-|x|) =
 * erfc(z)/2, z = |x|/sqrt2, is t Q(t) e with t = 1/(1 + z/2) and Q a
 * degree-8 polynomial: a relative-error fit of erfc(z) e^(z^2) / (2t) for z
 * in [0, 9.6] (4e-8; 1.6e-7 evaluated in float). e is the Gaussian's own
 * factor (gelu's derivative reuses it for the pdf), so the tail stays
 * relatively accurate with one exp and no error-carrying exponent sum
 * (2x faster than erfc's exp(-z^2 + P(t)) here). Relative error < 5e-7. */
static inline vf normcdf(vf x, vf e) {
    vf t = vdiv(vset1(1.0f), vfma(vabs(x), vset1(K_SQRT1_2 * 0.5f), vset1(1.0f)));
    vf p = vset1(-2.946603127e-02f);
    p = vfma(p, t, vset1(1.419522045e-01f));
    p = vfma(p, t, vset1(-2.429026250e-01f));
    p = vfma(p, t, vset1(1.382317624e-01f));
    p = vfma(p, t, vset1(-1.275726595e-02f));
    p = vfma(p, t, vset1(1.011067970e-01f));
    p = vfma(p, t, vset1(1.216121512e-01f));
    p = vfma(p, t, vset1(1.411792954e-01f));
    p = vfma(p, t, vset1(1.410436905e-01f));
    vf h = vmul(vmul(t, p), e);
    return vselect_gt(vzero(), x, h, vsub(vset1(1.0f), h));
}

/* max(+0, x) keeps a NaN x (the second operand wins when unordered); + 0 turns -0 into +0, as the reference */
static inline vf f_relu(vf x) { return vadd(vmax(vzero(), x), vzero()); }
/* GELU (erf and tanh) and SiLU are x F(x) with F(-a) = 1 - F(a). Below a limit of |x| (K_*_LIM: 4 for the
 * GELUs, 8 for SiLU) they and their derivatives come from the tables of gelu_tables.h: P = F(-|x|) and D = the
 * derivative at -|x| as a polynomial of degree 7 per interval (8 equal ones), picked per lane by a permute;
 * no exp, no division (the erf GELU ~1.7x fewer cycles); 1 - P and 1 - D at positive x. Lanes at or above the
 * limit (and NaN) take the closed forms below (their table entries, past the 8th, are thrown away). Each
 * lane's value depends on its x alone, so AVX2 (8 lanes) and AVX-512 (16) agree to the bit; a vector whose
 * lanes are all below the limit skips the closed form. */
#define EW_INLINE static inline __attribute__((always_inline))
EW_INLINE vf act_poly(const float (*c)[8], vi k, vf u) {
    vf p = vperm8(vtab8(c[7]), k);
    p = vfma(p, u, vperm8(vtab8(c[6]), k));
    p = vfma(p, u, vperm8(vtab8(c[5]), k));
    p = vfma(p, u, vperm8(vtab8(c[4]), k));
    p = vfma(p, u, vperm8(vtab8(c[3]), k));
    p = vfma(p, u, vperm8(vtab8(c[2]), k));
    p = vfma(p, u, vperm8(vtab8(c[1]), k));
    return vfma(p, u, vperm8(vtab8(c[0]), k));
}
/* v(-|x|) from table c with midpoints mid, interval k = trunc(|x| * 8 / lim); 1 - v(-|x|) at |x| */
EW_INLINE vf act_tab(const float (*c)[8], const float *mid, float lim, vf x) {
    vf a = vabs(x);
    vi k = vtrunc_i(vmul(a, vset1(8.0f / lim)));
    vf v = act_poly(c, k, vsub(a, vperm8(vtab8(mid), k)));
    return vselect_gt(vzero(), x, v, vsub(vset1(1.0f), v));
}
/* t (the tables' value) where |x| < lim in every lane, else per lane t or closed(x) (out of line: the loops
 * keep their tables in registers and call it for a rare vector) */
#define ACT_TAB(t, lim, closed, x) (vall_lt(vabs(x), vset1(lim)) ? (t) : vselect_gt(vset1(lim), vabs(x), (t), closed(x)))

static __attribute__((noinline)) vf f_gelu_erfc(vf x) {
    vf hh, ll;
    half_sq(x, &hh, &ll);
    return vmul(x, normcdf(x, gauss_e(hh, ll)));
}
EW_INLINE vf f_gelu(vf x) {
    vf y = vmul(x, act_tab(k_gelu_p, k_gelu_mid, K_GELU_LIM, x));
    return ACT_TAB(y, K_GELU_LIM, f_gelu_erfc, x);
}
/* 0.5 x (1 + tanh(u)) == x sigmoid(2u), u = sqrt(2/pi) (x + c x^3) */
static inline vf gelu_tanh_arg(vf x) {
    return vmul(x, vfma(vmul(x, x), vset1(K_2_SQRT_2_OVER_PI * K_GELU_C), vset1(K_2_SQRT_2_OVER_PI)));
}
static __attribute__((noinline)) vf f_gelu_tanh_closed(vf x) { return vmul(x, vsigmoid(gelu_tanh_arg(x))); }
EW_INLINE vf f_gelu_tanh(vf x) {
    vf y = vmul(x, act_tab(k_gelu_tanh_p, k_gelu_tanh_mid, K_GELU_TANH_LIM, x));
    return ACT_TAB(y, K_GELU_TANH_LIM, f_gelu_tanh_closed, x);
}
static __attribute__((noinline)) vf f_silu_closed(vf x) { return vmul(x, vsigmoid(x)); }
EW_INLINE vf f_silu(vf x) {
    vf y = vmul(x, act_tab(k_silu_p, k_silu_mid, K_SILU_LIM, x));
    return ACT_TAB(y, K_SILU_LIM, f_silu_closed, x);
}
static inline vf f_sigmoid(vf x) { return vsigmoid(x); }
static inline vf f_tanh(vf x) { return vtanh(x); }

/* derivatives; v is y for relu/sigmoid/tanh and x for gelu/silu */
static inline vf d_relu(vf v) { return vselect_gt(v, vzero(), vset1(1.0f), vzero()); }
static __attribute__((noinline)) vf d_gelu_erfc(vf x) {
    vf hh, ll;
    half_sq(x, &hh, &ll);
    vf e = gauss_e(hh, ll);
    return vfma(x, vmul(e, vset1(K_INV_SQRT_2PI)), normcdf(x, e));
}
EW_INLINE vf d_gelu(vf x) {
    return ACT_TAB(act_tab(k_gelu_d, k_gelu_mid, K_GELU_LIM, x), K_GELU_LIM, d_gelu_erfc, x);
}
/* 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2) with 0.5 (1 + t) = s, 1 - t^2 = 4 s (1 - s) */
static __attribute__((noinline)) vf d_gelu_tanh_closed(vf x) {
    vf s, sc, x2 = vmul(x, x);
    sigmoid2(gelu_tanh_arg(x), &s, &sc);
    vf g = vfma(x2, vset1(K_2_SQRT_2_OVER_PI * 3.0f * K_GELU_C), vset1(K_2_SQRT_2_OVER_PI));
    return vfma(vmul(vmul(x, s), sc), g, s);
}
EW_INLINE vf d_gelu_tanh(vf x) {
    return ACT_TAB(act_tab(k_gelu_tanh_d, k_gelu_tanh_mid, K_GELU_TANH_LIM, x), K_GELU_TANH_LIM, d_gelu_tanh_closed, x);
}
static __attribute__((noinline)) vf d_silu_closed(vf x) {
    vf s, sc;
    sigmoid2(x, &s, &sc);
    return vmul(s, vfma(x, sc, vset1(1.0f)));
}
EW_INLINE vf d_silu(vf x) {
    return ACT_TAB(act_tab(k_silu_d, k_silu_mid, K_SILU_LIM, x), K_SILU_LIM, d_silu_closed, x);
}
static inline vf d_sigmoid(vf v) { return vmul(v, vsub(vset1(1.0f), v)); }
static inline vf d_tanh(vf v) { return vfma(vneg(v), v, vset1(1.0f)); }

/* The maps read their inputs EW_PF bytes ahead (a prefetch per vector): at the activations' ~1 cycle per element
 * the hardware prefetchers ran too little ahead of them in the step, where the inputs come from memory (the GELU
 * backward's x was written a forward ago): gpt-char-small's BF16 GELU backward took 9.5 ms per step without, 4.5
 * with 2 KiB ahead (AMX Xeon, 2 threads; 512: 5.1, 4096: 4.5; docs/results.md). A prefetch never faults, so
 * running past the end is harmless. */
#define EW_PF 2048
#define EW_PREFETCH(p) _mm_prefetch((const char *)(p) + EW_PF, _MM_HINT_T0)

/* y = F(x) and dx = dy * D(v) over n elements of type T (float, or BF16 / FP16 as
 * uint16_t) with the loads / stores LD, ST (full vectors) and TLD, TST (tail) */
#define DEF_MAP1_IO(name, F, T, LD, ST, TLD, TST)                                          \
    static void name(const T *x, T *y, int64_t n) {                                         \
        int64_t i = 0;                                                                      \
        for (; i + VW <= n; i += VW) {                                                      \
            EW_PREFETCH(x + i);                                                             \
            ST(y + i, F(LD(x + i)));                                                        \
        }                                                                                   \
        if (i < n) TST(y + i, F(TLD(x + i, (int)(n - i))), (int)(n - i));                   \
    }
#define DEF_MAP2_IO(name, D, T, LD, ST, TLD, TST)                                          \
    static void name(const T *dy, const T *v, T *dx, int64_t n) {                           \
        int64_t i = 0;                                                                      \
        for (; i + VW <= n; i += VW) {                                                      \
            EW_PREFETCH(dy + i);                                                            \
            EW_PREFETCH(v + i);                                                             \
            ST(dx + i, vmul(LD(dy + i), D(LD(v + i))));                                     \
        }                                                                                   \
        if (i < n) {                                                                        \
            int r = (int)(n - i);                                                           \
            TST(dx + i, vmul(TLD(dy + i, r), D(TLD(v + i, r))), r);                         \
        }                                                                                   \
    }
#define DEF_MAP1(name, F) DEF_MAP1_IO(name, F, float, vload, vstore, vtail_load, vtail_store)
#define DEF_MAP2(name, D) DEF_MAP2_IO(name, D, float, vload, vstore, vtail_load, vtail_store)
DEF_MAP1(map_relu, f_relu)
DEF_MAP1(map_gelu, f_gelu)
DEF_MAP1(map_gelu_tanh, f_gelu_tanh)
DEF_MAP1(map_silu, f_silu)
DEF_MAP1(map_sigmoid, f_sigmoid)
DEF_MAP1(map_tanh, f_tanh)
DEF_MAP2(map_relu_bwd, d_relu)
DEF_MAP2(map_gelu_bwd, d_gelu)
DEF_MAP2(map_gelu_tanh_bwd, d_gelu_tanh)
DEF_MAP2(map_silu_bwd, d_silu)
DEF_MAP2(map_sigmoid_bwd, d_sigmoid)
DEF_MAP2(map_tanh_bwd, d_tanh)

/* UNARY_BWD_KEEP: dx = dy * D(x) and y = F(x) in one pass, each exactly the
 * separate maps' value (the same expressions; the compiler shares the erf /
 * sigmoid they have in common) */
#define DEF_MAP_KEEP(name, F, D)                                                            \
    static void name(const float *dy, const float *x, float *dx, float *y, int64_t n) {     \
        int64_t i = 0;                                                                      \
        for (; i + VW <= n; i += VW) {                                                      \
            EW_PREFETCH(dy + i);                                                            \
            EW_PREFETCH(x + i);                                                             \
            vf v = vload(x + i);                                                            \
            vstore(y + i, F(v));                                                            \
            vstore(dx + i, vmul(vload(dy + i), D(v)));                                      \
        }                                                                                   \
        if (i < n) {                                                                        \
            int r = (int)(n - i);                                                           \
            vf v = vtail_load(x + i, r);                                                    \
            vtail_store(y + i, F(v), r);                                                    \
            vtail_store(dx + i, vmul(vtail_load(dy + i, r), D(v)), r);                      \
        }                                                                                   \
    }
DEF_MAP_KEEP(map_gelu_keep, f_gelu, d_gelu)
DEF_MAP_KEEP(map_gelu_tanh_keep, f_gelu_tanh, d_gelu_tanh)
DEF_MAP_KEEP(map_silu_keep, f_silu, d_silu)

/* The same maps on BF16 / FP16 I/O converted in registers (all of x, dy, y
 * of the one 16-bit dtype): bit-identical to the tiles (the same F, the
 * same rounding), without their stack round trips. */
#define DEF_MAPS_LP(sfx)                                                                                  \
    DEF_MAP1_IO(map_relu_##sfx, f_relu, uint16_t, vload_##sfx, vstore_##sfx, vtail_load_##sfx, vtail_store_##sfx) \
    DEF_MAP1_IO(map_gelu_##sfx, f_gelu, uint16_t, vload_##sfx, vstore_##sfx, vtail_load_##sfx, vtail_store_##sfx) \
    DEF_MAP1_IO(map_gelu_tanh_##sfx, f_gelu_tanh, uint16_t, vload_##sfx, vstore_##sfx, vtail_load_##sfx,        \
                vtail_store_##sfx)                                                                        \
    DEF_MAP1_IO(map_silu_##sfx, f_silu, uint16_t, vload_##sfx, vstore_##sfx, vtail_load_##sfx, vtail_store_##sfx) \
    DEF_MAP1_IO(map_sigmoid_##sfx, f_sigmoid, uint16_t, vload_##sfx, vstore_##sfx, vtail_load_##sfx,            \
                vtail_store_##sfx)                                                                        \
    DEF_MAP1_IO(map_tanh_##sfx, f_tanh, uint16_t, vload_##sfx, vstore_##sfx, vtail_load_##sfx, vtail_store_##sfx) \
    DEF_MAP2_IO(map_relu_bwd_##sfx, d_relu, uint16_t, vload_##sfx, vstore_##sfx, vtail_load_##sfx,              \
                vtail_store_##sfx)                                                                        \
    DEF_MAP2_IO(map_gelu_bwd_##sfx, d_gelu, uint16_t, vload_##sfx, vstore_##sfx, vtail_load_##sfx,              \
                vtail_store_##sfx)                                                                        \
    DEF_MAP2_IO(map_gelu_tanh_bwd_##sfx, d_gelu_tanh, uint16_t, vload_##sfx, vstore_##sfx, vtail_load_##sfx,    \
                vtail_store_##sfx)                                                                        \
    DEF_MAP2_IO(map_silu_bwd_##sfx, d_silu, uint16_t, vload_##sfx, vstore_##sfx, vtail_load_##sfx,              \
                vtail_store_##sfx)                                                                        \
    DEF_MAP2_IO(map_sigmoid_bwd_##sfx, d_sigmoid, uint16_t, vload_##sfx, vstore_##sfx, vtail_load_##sfx,        \
                vtail_store_##sfx)                                                                        \
    DEF_MAP2_IO(map_tanh_bwd_##sfx, d_tanh, uint16_t, vload_##sfx, vstore_##sfx, vtail_load_##sfx,              \
                vtail_store_##sfx)
DEF_MAPS_LP(bf16)
DEF_MAPS_LP(f16)

typedef void (*map1_fn)(const float *, float *, int64_t);
typedef void (*map2_fn)(const float *, const float *, float *, int64_t);
typedef void (*map3_fn)(const float *, const float *, float *, float *, int64_t);
/* indexed by ct_unary_kind */
static const map1_fn k_fwd[] = {map_relu, map_gelu, map_gelu_tanh, map_silu, map_sigmoid, map_tanh};
static const map2_fn k_bwd[] = {map_relu_bwd, map_gelu_bwd, map_gelu_tanh_bwd,
                                map_silu_bwd, map_sigmoid_bwd, map_tanh_bwd};
typedef void (*map1h_fn)(const uint16_t *, uint16_t *, int64_t);
typedef void (*map2h_fn)(const uint16_t *, const uint16_t *, uint16_t *, int64_t);
/* [0]: BF16, [1]: FP16 */
static const map1h_fn k_fwd_h[2][CT_UNARY_COUNT] = {
    {map_relu_bf16, map_gelu_bf16, map_gelu_tanh_bf16, map_silu_bf16, map_sigmoid_bf16, map_tanh_bf16},
    {map_relu_f16, map_gelu_f16, map_gelu_tanh_f16, map_silu_f16, map_sigmoid_f16, map_tanh_f16}};
static const map2h_fn k_bwd_h[2][CT_UNARY_COUNT] = {
    {map_relu_bwd_bf16, map_gelu_bwd_bf16, map_gelu_tanh_bwd_bf16, map_silu_bwd_bf16, map_sigmoid_bwd_bf16,
     map_tanh_bwd_bf16},
    {map_relu_bwd_f16, map_gelu_bwd_f16, map_gelu_tanh_bwd_f16, map_silu_bwd_f16, map_sigmoid_bwd_f16,
     map_tanh_bwd_f16}};
_Static_assert(sizeof k_fwd / sizeof k_fwd[0] == CT_UNARY_COUNT, "k_fwd needs one map per ct_unary_kind");
_Static_assert(sizeof k_bwd / sizeof k_bwd[0] == CT_UNARY_COUNT, "k_bwd needs one map per ct_unary_kind");

/* ---- fixed-chunk parallel driver -------------------------------------------------------- */

typedef struct ew_job ew_job;
typedef void (*chunk_fn)(const ew_job *j, int64_t lo, int64_t hi);

struct ew_job {
    const float *a, *b;
    float *y;
    map1_fn f1;
    map2_fn f2;
    map3_fn f3;
    map1h_fn h1; /* all-BF16 / all-FP16 unary / unary_bwd: the register-converting maps on the raw tensors */
    map2h_fn h2;
    float *y2; /* UNARY_BWD_KEEP: the activation */
    float s;
    const ct_kargs *k; /* dropout */
    int64_t base;      /* dropout: RNG counter of a[0] (ct_kargs.sample_elem0 + elem0, plus the tile's
                          offset for BF16 tiles) */
    /* BF16 / FP16 I/O: the tensors, and the FP32 chunk function run on each tile */
    const ct_tensor *ta, *tb, *ty;
    chunk_fn inner;
};

/* BF16 / FP16 I/O: chunk [lo, hi) in tiles of FP32 values (see the file comment). */
static void chunk_lowp(const ew_job *j, int64_t lo, int64_t hi) {
    float ba[EW_TILE], bb[EW_TILE], by[EW_TILE];
    for (int64_t t = lo; t < hi; t += EW_TILE) {
        int64_t n = CT_MIN((int64_t)EW_TILE, hi - t);
        ew_job s = *j;
        s.a = ct_tile_in(j->ta, t, n, ba);
        if (j->tb) s.b = ct_tile_in(j->tb, t, n, bb);
        s.y = ct_tile_out(j->ty, t, by);
        s.base = j->base + t;
        j->inner(&s, 0, n);
        ct_tile_put(j->ty, t, n, by);
    }
}

static void ew_run(const ct_kargs *k, int64_t n, chunk_fn fn, const ew_job *j) {
    int64_t nch = (n + EW_CHUNK - 1) / EW_CHUNK;
    int nt = ct_par_threads(k, n);
    if (nt > nch) nt = (int)nch;
    if (nt <= 1) {
        if (n > 0) fn(j, 0, n);
        return;
    }
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t c = 0; c < nch; c++) fn(j, c * EW_CHUNK, CT_MIN(n, (c + 1) * EW_CHUNK));
}

static void chunk_map1(const ew_job *j, int64_t lo, int64_t hi) { j->f1(j->a + lo, j->y + lo, hi - lo); }
static void chunk_map1h(const ew_job *j, int64_t lo, int64_t hi) {
    j->h1((const uint16_t *)j->ta->data + lo, (uint16_t *)j->ty->data + lo, hi - lo);
}
static void chunk_map2h(const ew_job *j, int64_t lo, int64_t hi) {
    j->h2((const uint16_t *)j->ta->data + lo, (const uint16_t *)j->tb->data + lo, (uint16_t *)j->ty->data + lo, hi - lo);
}
static void chunk_map2(const ew_job *j, int64_t lo, int64_t hi) { j->f2(j->a + lo, j->b + lo, j->y + lo, hi - lo); }
static void chunk_map3(const ew_job *j, int64_t lo, int64_t hi) {
    j->f3(j->a + lo, j->b + lo, j->y + lo, j->y2 + lo, hi - lo);
}

static void chunk_scale(const ew_job *j, int64_t lo, int64_t hi) {
    const float *x = j->a;
    float *y = j->y;
    vf s = vset1(j->s);
    int64_t i = lo;
    for (; i + VW <= hi; i += VW) vstore(y + i, vmul(vload(x + i), s));
    if (i < hi) vtail_store(y + i, vmul(vtail_load(x + i, (int)(hi - i)), s), (int)(hi - i));
}

static void chunk_copy(const ew_job *j, int64_t lo, int64_t hi) {
    memcpy(j->y + lo, j->a + lo, (size_t)(hi - lo) * sizeof(float));
}

static int f32_all(const ct_kargs *k, int n_in) {
    if (k->out.dtype != CT_F32) return 0;
    for (int i = 0; i < n_in; i++)
        if (k->in[i].dtype != CT_F32) return 0;
    return 1;
}

/* FP32 or BF16 / FP16 I/O (1: some 16-bit): j and *fn then go through chunk_lowp. */
static int ew_io(const ct_kargs *k, int n_in, ew_job *j, chunk_fn *fn) {
    if (f32_all(k, n_in)) return 0;
    if (ct_lowp_io(k, n_in) == CT_F32) return -1;
    j->ta = &k->in[0];
    j->tb = n_in > 1 ? &k->in[1] : NULL;
    j->ty = &k->out;
    j->inner = *fn;
    *fn = chunk_lowp;
    return 1;
}

/* ---- unary, unary_bwd, scale -------------------------------------------------------------- */

ct_status CT_FN(unary)(ct_kargs *k) {
    int kind = (int)k->node->ia[0];
    ew_job j = {.a = k->in[0].data, .y = k->out.data};
    chunk_fn fn = chunk_map1;
    if (kind < 0 || kind >= CT_UNARY_COUNT || ew_io(k, 1, &j, &fn) < 0) return CT_E_UNSUPPORTED;
    j.f1 = k_fwd[kind];
    if (ct_dtype_is_low(k->out.dtype) && k->in[0].dtype == k->out.dtype) {
        j.h1 = k_fwd_h[k->out.dtype == CT_F16][kind];
        fn = chunk_map1h;
    }
    ew_run(k, ct_tensor_numel(&k->out), fn, &j);
    return CT_OK;
}

/* unary_bwd+colsum: the map fn row by row over the pieces of rows
 * (colsum.h), each row's stored output (rounded to ia[6]) added to the
 * piece's float run sums; the elementwise values are the chunked run's */
static ct_status ew_colsum(const ct_kargs *k, chunk_fn fn, const ew_job *j, void *sets) {
    const ct_tensor *Y = &k->out;
    int64_t D = Y->shape[Y->ndim - 1], n = ct_tensor_numel(Y), R = D ? n / D : 0, mask = k->node->ia[7];
    if (!sets || D < 1 || D > CT_COLSUM_MAX_D) return CT_E_UNSUPPORTED;
    const ct_dtype rdt = (ct_dtype)k->node->ia[6];
    const int64_t P = ct_colsum_pieces(R, D);
    int nt = ct_par_threads(k, n);
    if (nt > P) nt = (int)P;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        float fo[CT_COLSUM_MAX_D];
#pragma omp for schedule(static)
        for (int64_t p = 0; p < P; p++) {
            int64_t r0 = R * p / P, r1 = R * (p + 1) / P;
            double *ao = cs_set(sets, mask, CT_COLSUM_OUT, P, p, D);
            for (int64_t c = 0; c < D; c++) ao[c] = 0;
            for (int64_t r = r0; r < r1; r++) {
                int64_t q = r - r0;
                fn(j, r * D, (r + 1) * D);
                if (q % CS_RB == 0) memset(fo, 0, (size_t)D * sizeof(float));
                cs_add_row(fo, Y, r * D, D, rdt);
                if (q % CS_RB == CS_RB - 1 || r == r1 - 1) cs_flush(ao, fo, D);
            }
        }
    }
    return CT_OK;
}

/* in: dy, v (y for relu/sigmoid/tanh, x for gelu/silu: ia[1] = 1 when v is y) */
ct_status CT_FN(unary_bwd)(ct_kargs *k) {
    int kind = (int)k->node->ia[0];
    ew_job j = {.a = k->in[0].data, .b = k->in[1].data, .y = k->out.data};
    chunk_fn fn = chunk_map2;
    if (kind < 0 || kind >= CT_UNARY_COUNT || ew_io(k, 2, &j, &fn) < 0) return CT_E_UNSUPPORTED;
    int from_out = kind == CT_UNARY_RELU || kind == CT_UNARY_SIGMOID || kind == CT_UNARY_TANH;
    if ((k->node->ia[1] != 0) != from_out) return CT_E_UNSUPPORTED; /* not the autodiff convention */
    j.f2 = k_bwd[kind];
    if (ct_dtype_is_low(k->out.dtype) && k->in[0].dtype == k->out.dtype && k->in[1].dtype == k->out.dtype) {
        j.h2 = k_bwd_h[k->out.dtype == CT_F16][kind];
        fn = chunk_map2h;
    }
    if (k->node->ia[7] & CT_COLSUM_OUT) return ew_colsum(k, fn, &j, k->aux);
    ew_run(k, ct_tensor_numel(&k->out), fn, &j);
    return CT_OK;
}

/* in: dy, x (FP32); ia[0] = gelu, gelu_tanh or silu: dx as unary_bwd, aux = unary(x) */
ct_status CT_FN(unary_bwd_keep)(ct_kargs *k) {
    int kind = (int)k->node->ia[0];
    map3_fn f = kind == CT_UNARY_GELU ? map_gelu_keep : kind == CT_UNARY_GELU_TANH ? map_gelu_tanh_keep
              : kind == CT_UNARY_SILU ? map_silu_keep : NULL;
    if (!f || !f32_all(k, 2) || !k->aux) return CT_E_UNSUPPORTED;
    ew_job j = {.a = k->in[0].data, .b = k->in[1].data, .y = k->out.data, .y2 = k->aux, .f3 = f};
    if (k->node->ia[7] & CT_COLSUM_OUT) /* unary_bwd+colsum: the partials after the activation */
        return ew_colsum(k, chunk_map3, &j, (char *)k->aux + ct_keep_colsum_offset(ct_tensor_numel(&k->in[1])));
    ew_run(k, ct_tensor_numel(&k->out), chunk_map3, &j);
    return CT_OK;
}

ct_status CT_FN(scale)(ct_kargs *k) {
    ew_job j = {.a = k->in[0].data, .y = k->out.data, .s = k->node->fa[0]};
    chunk_fn fn = chunk_scale;
    if (ew_io(k, 1, &j, &fn) < 0) return CT_E_UNSUPPORTED;
    ew_run(k, ct_tensor_numel(&k->out), fn, &j);
    return CT_OK;
}

/* ---- binary ------------------------------------------------------------------------------- */

/* y[i] = a[i*as] op b[i*bs] for i < n; as, bs in {0, 1}, not both 0 unless n == 1 */
#define BIN_INNER(VOP, SOP)                                                                 \
    do {                                                                                    \
        int64_t i = 0;                                                                      \
        if (as && bs) {                                                                     \
            for (; i + 2 * VW <= n; i += 2 * VW) {                                          \
                vstore(y + i, VOP(vload(a + i), vload(b + i)));                             \
                vstore(y + i + VW, VOP(vload(a + i + VW), vload(b + i + VW)));              \
            }                                                                               \
            for (; i + VW <= n; i += VW) vstore(y + i, VOP(vload(a + i), vload(b + i)));    \
        } else if (as) {                                                                    \
            vf vb = vset1(b[0]);                                                            \
            for (; i + VW <= n; i += VW) vstore(y + i, VOP(vload(a + i), vb));              \
        } else if (bs) {                                                                    \
            vf va = vset1(a[0]);                                                            \
            for (; i + VW <= n; i += VW) vstore(y + i, VOP(va, vload(b + i)));              \
        }                                                                                   \
        for (; i < n; i++) y[i] = a[i * as] SOP b[i * bs];                                  \
    } while (0)

static void bin_inner(int kind, const float *a, int64_t as, const float *b, int64_t bs, float *y, int64_t n) {
    switch (kind) {
    case CT_BIN_ADD: BIN_INNER(vadd, +); break;
    case CT_BIN_SUB: BIN_INNER(vsub, -); break;
    case CT_BIN_MUL: BIN_INNER(vmul, *); break;
    default: BIN_INNER(vdiv, /); break;
    }
}

/* Output viewed as (D0, D1, L) after dropping size-1 dims and merging
 * neighbours that are contiguous (or broadcast) in both inputs. */
typedef struct bin_view {
    int64_t d0, d1, len, a0, a1, al, b0, b1, bl;
    int kind;
    const float *a, *b;
    float *y;
    const ct_tensor *ta, *tb, *ty; /* BF16 / FP16 I/O: the tensors (else NULL) */
} bin_view;

/* BF16 / FP16 I/O: one row segment in tiles of FP32 values; a broadcast operand
 * (stride 0) is one converted scalar. */
static void bin_seg_lowp(const bin_view *v, int64_t oa, int64_t ob, int64_t oy, int64_t n) {
    float ba[EW_TILE], bb[EW_TILE], by[EW_TILE];
    for (int64_t t = 0; t < n; t += EW_TILE) {
        int64_t m = CT_MIN((int64_t)EW_TILE, n - t);
        const float *a = v->al ? ct_tile_in(v->ta, oa + t, m, ba) : (ba[0] = ct_sld(v->ta, oa), ba);
        const float *b = v->bl ? ct_tile_in(v->tb, ob + t, m, bb) : (bb[0] = ct_sld(v->tb, ob), bb);
        float *y = ct_tile_out(v->ty, oy + t, by);
        bin_inner(v->kind, a, v->al, b, v->bl, y, m);
        ct_tile_put(v->ty, oy + t, m, by);
    }
}

static void bin_rows(const bin_view *v, int64_t item0, int64_t item1, int64_t cpr) {
    for (int64_t it = item0; it < item1; it++) {
        int64_t r = it / cpr, c = it % cpr;
        int64_t i0 = r / v->d1, i1 = r % v->d1;
        int64_t lo = c * EW_CHUNK, hi = CT_MIN(v->len, lo + EW_CHUNK);
        int64_t oa = i0 * v->a0 + i1 * v->a1 + lo * v->al, ob = i0 * v->b0 + i1 * v->b1 + lo * v->bl;
        if (v->ty) bin_seg_lowp(v, oa, ob, r * v->len + lo, hi - lo);
        else bin_inner(v->kind, v->a + oa, v->al, v->b + ob, v->bl, v->y + r * v->len + lo, hi - lo);
    }
}

ct_status CT_FN(binary)(ct_kargs *k) {
    int kind = (int)k->node->ia[0];
    int bf = f32_all(k, 2) ? 0 : ct_lowp_io(k, 2) != CT_F32 ? 1 : -1;
    if (kind < 0 || kind >= CT_BIN_COUNT || bf < 0) return CT_E_UNSUPPORTED;
    const ct_tensor *O = &k->out;
    int64_t n = ct_tensor_numel(O);
    if (n == 0) return CT_OK;
    int64_t sa[CT_MAX_DIMS], sb[CT_MAX_DIMS], d[CT_MAX_DIMS], ca[CT_MAX_DIMS], cb[CT_MAX_DIMS];
    ct_bcast_strides(&k->in[0], O, sa);
    ct_bcast_strides(&k->in[1], O, sb);
    int m = 0;
    for (int i = 0; i < O->ndim; i++) {
        int64_t s = O->shape[i];
        if (s == 1) continue;
        if (m > 0 && ca[m - 1] == sa[i] * s && cb[m - 1] == sb[i] * s) {
            d[m - 1] *= s;
            ca[m - 1] = sa[i];
            cb[m - 1] = sb[i];
        } else {
            d[m] = s;
            ca[m] = sa[i];
            cb[m] = sb[i];
            m++;
        }
    }
    if (m > 3) return CT_E_UNSUPPORTED; /* e.g. (A,1,B,1) op (1,C,1,D): the reference does it */
    int64_t D[3] = {1, 1, 1}, A[3] = {0, 0, 0}, B[3] = {0, 0, 0};
    for (int i = 0; i < m; i++) {
        D[3 - m + i] = d[i];
        A[3 - m + i] = ca[i];
        B[3 - m + i] = cb[i];
    }
    if (A[2] > 1 || B[2] > 1) return CT_E_UNSUPPORTED; /* cannot happen for contiguous inputs */
    bin_view v = {D[0], D[1], D[2], A[0], A[1], A[2], B[0], B[1], B[2], kind, k->in[0].data, k->in[1].data, O->data,
                  NULL, NULL, NULL};
    if (bf) {
        v.ta = &k->in[0];
        v.tb = &k->in[1];
        v.ty = O;
    }
    int64_t cpr = (v.len + EW_CHUNK - 1) / EW_CHUNK, items = v.d0 * v.d1 * cpr;
    int nt = ct_par_threads(k, n);
    if (nt > items) nt = (int)items;
    if (nt <= 1) {
        bin_rows(&v, 0, items, cpr);
        return CT_OK;
    }
    /* items of about EW_CHUNK elements each (many short rows are grouped) */
    int64_t per = CT_MAX(1, EW_CHUNK / CT_MIN(v.len, EW_CHUNK)), groups = (items + per - 1) / per;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t g = 0; g < groups; g++) bin_rows(&v, g * per, CT_MIN(items, (g + 1) * per), cpr);
    return CT_OK;
}

/* ---- dropout ------------------------------------------------------------------------------ */

static void chunk_dropout(const ew_job *j, int64_t lo, int64_t hi) {
    const ct_kargs *k = j->k;
    const float *x = j->a;
    float *y = j->y;
    float p = k->node->fa[0];
    uint64_t stream = (uint64_t)k->node->ia[0];
    const uint64_t key = (stream << 32) ^ k->step;
    const uint32_t thr = ct_dropout_thr(p);
    vf s = vset1(j->s);
    union {
        uint32_t u[VW];
        float f[VW];
    } m;
    for (int64_t i = lo; i < hi;) {
        uint64_t e0 = (uint64_t)(j->base + i), bits;
        /* 64 elements from one vectorized Philox call on 16 counters */
        if ((e0 & 63) == 0 && hi - i >= 64 && ct_dropout_bits64(k->seed, key, e0, thr, &bits)) {
            for (int q = 0; q < 64; q += VW)
                vstore(y + i + q, vand(vmul(vload(x + i + q), s), ct_vmask_bits((unsigned)(bits >> q) & ((1u << VW) - 1))));
            i += 64;
            continue;
        }
        /* up to VW elements (stopping at the next multiple of 64) the scalar way */
        int64_t to64 = (int64_t)((64 - (e0 & 63)) & 63);
        int r = (int)CT_MIN((int64_t)VW, CT_MIN(hi - i, to64 ? to64 : (int64_t)VW));
        for (int t = 0; t < r;) {
            uint64_t e = e0 + (uint64_t)t;
            if ((e & 3) == 0 && t + 4 <= r) { /* one Philox call gives 4 decisions */
                int kp[4];
                ct_dropout_keep4(k->seed, stream, k->step, e, p, kp);
                for (int q = 0; q < 4; q++) m.u[t + q] = kp[q] ? 0xffffffffu : 0u;
                t += 4;
            } else {
                m.u[t++] = ct_dropout_keep(k->seed, stream, k->step, e, p) ? 0xffffffffu : 0u;
            }
        }
        if (r == VW) {
            vstore(y + i, vand(vmul(vload(x + i), s), vload(m.f)));
        } else {
            for (int t = r; t < VW; t++) m.u[t] = 0;
            vtail_store(y + i, vand(vmul(vtail_load(x + i, r), s), vload(m.f)), r);
        }
        i += r;
    }
}

/* Drop path (ia[1] = row length): rows lo..hi-1, one decision per row, each
 * kept row scaled (the same product as the reference), each dropped row 0.
 * x and y in their own dtypes (FP32, BF16 or FP16: converted in registers). */
static void rows_drop_path(const ct_kargs *k, float s, int64_t lo, int64_t hi) {
    int64_t row = k->node->ia[1];
    float p = k->node->fa[0];
    vf vs = vset1(s), z = vset1(0.0f);
    const ct_tensor *x = &k->in[0], *y = &k->out;
    for (int64_t r = lo; r < hi; r++) {
        const uint64_t ri = (uint64_t)((k->sample_elem0 + k->elem0) / row + r); /* the row's RNG counter */
        int keep = ct_dropout_keep(k->seed, (uint64_t)k->node->ia[0], k->step, ri, p);
        const int64_t o = r * row;
        for (int64_t i = 0; i < row; i += VW) {
            int t = (int)CT_MIN((int64_t)VW, row - i);
            ct_vst(y, o + i, keep ? vmul(ct_vld(x, o + i, t), vs) : z, t);
        }
    }
}

/* Forward (training) and backward both apply the mask for (seed, stream, step);
 * y = keep ? x * scale : 0 exactly as the reference (dropped NaN/inf give 0). */
ct_status CT_FN(dropout)(ct_kargs *k) {
    float p = k->node->fa[0];
    int64_t n = ct_tensor_numel(&k->out);
    ew_job j = {.a = k->in[0].data, .y = k->out.data, .k = k, .base = k->sample_elem0 + k->elem0};
    chunk_fn fn = chunk_dropout;
    if (!k->training || p == 0.0f) {
        fn = chunk_copy;
        if (ew_io(k, 1, &j, &fn) < 0) return CT_E_UNSUPPORTED;
        if (fn != chunk_copy || j.y != j.a) ew_run(k, n, fn, &j);
        return CT_OK;
    }
    j.s = 1.0f / (1.0f - p);
    if (k->node->ia[1] > 0) { /* drop path: rows of ia[1] elements, FP32 or one 16-bit dtype in and out */
        if (!f32_all(k, 1) && ct_lowp_io(k, 1) == CT_F32) return CT_E_UNSUPPORTED;
        int64_t rows = n / k->node->ia[1];
        int nt = ct_par_threads(k, n);
        if (nt > rows) nt = (int)rows;
        if (nt <= 1) rows_drop_path(k, j.s, 0, rows);
        else {
#pragma omp parallel for num_threads(nt) schedule(static)
            for (int64_t r = 0; r < rows; r++) rows_drop_path(k, j.s, r, r + 1);
        }
        return CT_OK;
    }
    if (ew_io(k, 1, &j, &fn) < 0) return CT_E_UNSUPPORTED;
    /* the RNG dominates: worth threads much earlier than cheap arithmetic */
    const int64_t ch = EW_CHUNK / 4;
    int64_t nch = (n + ch - 1) / ch;
    int nt = n >= 4096 ? k->nthreads : 1;
    if (nt > nch) nt = (int)nch;
    if (nt <= 1) {
        if (n > 0) fn(&j, 0, n);
        return CT_OK;
    }
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t c = 0; c < nch; c++) fn(&j, c * ch, CT_MIN(n, (c + 1) * ch));
    return CT_OK;
}
