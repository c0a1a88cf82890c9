/* src/kernels/simd/optim.c - SIMD bodies of the optimizer updates (AdamW,
 * SGD with momentum/nesterov/weight decay), the same arithmetic in the same
 * order as the reference in src/optim/optim.c. */
#include <math.h>

#include "optim/optim_kernels.h"
#include "simd.h"

#if defined(CT_SIMD_AVX512)
#define OPT_FN(name) ct_##name##_avx512
#else
#define OPT_FN(name) ct_##name##_avx2
#endif

void OPT_FN(adamw)(float *p, const float *g, float *m, float *v, size_t n, const ct_adamw_hp *hp) {
    const float decay = 1.0f - hp->lr * hp->weight_decay, step = hp->lr / hp->bc1, rbc2 = 1.0f / sqrtf(hp->bc2);
    const vf vdecay = vset1(decay), vb1 = vset1(hp->beta1), vb1c = vset1(1.0f - hp->beta1);
    const vf vb2 = vset1(hp->beta2), vb2c = vset1(1.0f - hp->beta2), vstep = vset1(step);
    const vf vr = vset1(rbc2), veps = vset1(hp->eps);
    size_t i = 0;
    for (; i + VW <= n; i += VW) {
        vf gi = vload(g + i);
        vf mi = vfma(vb1, vload(m + i), vmul(vb1c, gi));
        vf vi_ = vfma(vb2, vload(v + i), vmul(vb2c, vmul(gi, gi)));
        vf denom = vadd(vmul(vsqrt(vi_), vr), veps);
        vf pi = vmul(vload(p + i), vdecay);
        pi = vsub(pi, vmul(vstep, vdiv(mi, denom)));
        vstore(m + i, mi);
        vstore(v + i, vi_);
        vstore(p + i, pi);
    }
    if (i < n) ct_adamw_ref(p + i, g + i, m + i, v + i, n - i, hp);
}

void OPT_FN(sgd)(float *p, const float *g, float *buf, size_t n, const ct_sgd_hp *hp) {
    const vf vwd = vset1(hp->weight_decay), vlr = vset1(hp->lr), vmom = vset1(hp->momentum);
    const vf vdamp = vset1(1.0f - hp->dampening);
    size_t i = 0;
    for (; i + VW <= n; i += VW) {
        vf gi = vfma(vwd, vload(p + i), vload(g + i));
        if (hp->momentum != 0.0f) {
            vf b = hp->first ? gi : vfma(vmom, vload(buf + i), vmul(vdamp, gi));
            vstore(buf + i, b);
            gi = hp->nesterov ? vfma(vmom, b, gi) : b;
        }
        vstore(p + i, vsub(vload(p + i), vmul(vlr, gi)));
    }
    if (i < n) ct_sgd_ref(p + i, g + i, buf ? buf + i : NULL, n - i, hp);
}
