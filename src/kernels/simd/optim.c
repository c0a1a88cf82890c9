/* src/kernels/simd/optim.c - SIMD bodies of the optimizer updates (SGD,
 * Adam/AdamW with amsgrad, RMSprop, Adagrad, LAMB), the same arithmetic in
 * the same order as the reference loops in src/kernels/ref/optim.c (fused
 * multiply-adds aside); the tails (< VW elements) run the reference. */
#include <math.h>

#include "kernels/optim_kernels.h"
#include "simd.h"

#if defined(CT_SIMD_AVX512)
#define OPT_FN(name) ct_##name##_avx512
#else
#define OPT_FN(name) ct_##name##_avx2
#endif

void OPT_FN(adam)(float *p, const float *g, float *m, float *v, float *vmax, size_t n, const ct_adam_hp *hp) {
    const vf vb1 = vset1(hp->beta1), vb1c = vset1(1.0f - hp->beta1), vwd = vset1(hp->weight_decay);
    const vf vb2 = vset1(hp->beta2), vb2c = vset1(1.0f - hp->beta2), vstep = vset1(hp->step);
    const vf vbc2 = vset1(hp->bc2_sqrt), veps = vset1(hp->eps), vdecay = vset1(hp->decay);
    size_t i = 0;
    for (; i + VW <= n; i += VW) {
        vf pi = vload(p + i), gi = vload(g + i);
        if (hp->decoupled) pi = vmul(pi, vdecay);
        else if (hp->weight_decay != 0.0f) gi = vfma(vwd, pi, gi);
        vf mi = vfma(vb1, vload(m + i), vmul(vb1c, gi));
        vf vi_ = vfma(vb2, vload(v + i), vmul(vb2c, vmul(gi, gi)));
        vstore(m + i, mi);
        vstore(v + i, vi_);
        if (hp->amsgrad) {
            vi_ = vmax(vload(vmax + i), vi_);
            vstore(vmax + i, vi_);
        }
        vf denom = vadd(vdiv(vsqrt(vi_), vbc2), veps);
        vstore(p + i, vsub(pi, vmul(vstep, vdiv(mi, denom))));
    }
    if (i < n) ct_adam_ref(p + i, g + i, m + i, v + i, vmax ? vmax + i : NULL, n - i, hp);
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

void OPT_FN(rmsprop)(float *p, const float *g, float *sq, float *buf, float *gavg, size_t n,
                     const ct_rmsprop_hp *hp) {
    const vf vwd = vset1(hp->weight_decay), vlr = vset1(hp->lr), vmom = vset1(hp->momentum);
    const vf va = vset1(hp->alpha), vac = vset1(1.0f - hp->alpha), veps = vset1(hp->eps);
    size_t i = 0;
    for (; i + VW <= n; i += VW) {
        vf pi = vload(p + i);
        vf gi = vfma(vwd, pi, vload(g + i));
        vf s = vfma(va, vload(sq + i), vmul(vac, vmul(gi, gi)));
        vstore(sq + i, s);
        vf avg;
        if (hp->centered) {
            vf ga = vfma(va, vload(gavg + i), vmul(vac, gi));
            vstore(gavg + i, ga);
            avg = vsqrt(vsub(s, vmul(ga, ga)));
        } else {
            avg = vsqrt(s);
        }
        avg = vadd(avg, veps);
        if (hp->momentum > 0.0f) {
            vf b = vfma(vmom, vload(buf + i), vdiv(gi, avg));
            vstore(buf + i, b);
            vstore(p + i, vsub(pi, vmul(vlr, b)));
        } else {
            vstore(p + i, vsub(pi, vmul(vlr, vdiv(gi, avg))));
        }
    }
    if (i < n)
        ct_rmsprop_ref(p + i, g + i, sq + i, buf ? buf + i : NULL, gavg ? gavg + i : NULL, n - i, hp);
}

void OPT_FN(adagrad)(float *p, const float *g, float *sum, size_t n, const ct_adagrad_hp *hp) {
    const vf vwd = vset1(hp->weight_decay), vclr = vset1(hp->clr), veps = vset1(hp->eps);
    size_t i = 0;
    for (; i + VW <= n; i += VW) {
        vf pi = vload(p + i);
        vf gi = vfma(vwd, pi, vload(g + i));
        vf s = vfma(gi, gi, vload(sum + i));
        vstore(sum + i, s);
        vf std = vadd(vsqrt(s), veps);
        vstore(p + i, vsub(pi, vmul(vclr, vdiv(gi, std))));
    }
    if (i < n) ct_adagrad_ref(p + i, g + i, sum + i, n - i, hp);
}

static inline vf lamb_u(vf pi, vf mi, vf vi_, const ct_lamb_hp *hp) {
    vf denom = vadd(vsqrt(vdiv(vi_, vset1(hp->bc2))), vset1(hp->eps));
    return vfma(vset1(hp->weight_decay), pi, vdiv(vdiv(mi, vset1(hp->bc1)), denom));
}

void OPT_FN(lamb1)(const float *p, const float *g, float *m, float *v, size_t n, const ct_lamb_hp *hp,
                   double sums[2]) {
    const vf vb1 = vset1(hp->beta1), vb1c = vset1(1.0f - hp->beta1);
    const vf vb2 = vset1(hp->beta2), vb2c = vset1(1.0f - hp->beta2);
    vf spp = vzero(), suu = vzero();
    size_t i = 0;
    for (; i + VW <= n; i += VW) {
        vf pi = vload(p + i), gi = vload(g + i);
        vf mi = vfma(vb1, vload(m + i), vmul(vb1c, gi));
        vf vi_ = vfma(vb2, vload(v + i), vmul(vb2c, vmul(gi, gi)));
        vstore(m + i, mi);
        vstore(v + i, vi_);
        vf u = lamb_u(pi, mi, vi_, hp);
        spp = vfma(pi, pi, spp);
        suu = vfma(u, u, suu);
    }
    sums[0] += (double)vhsum(spp);
    sums[1] += (double)vhsum(suu);
    if (i < n) ct_lamb1_ref(p + i, g + i, m + i, v + i, n - i, hp, sums);
}

void OPT_FN(lamb2)(float *p, const float *m, const float *v, size_t n, const ct_lamb_hp *hp, float scale) {
    const vf vs = vset1(scale);
    size_t i = 0;
    for (; i + VW <= n; i += VW) {
        vf pi = vload(p + i);
        vf u = lamb_u(pi, vload(m + i), vload(v + i), hp);
        vstore(p + i, vsub(pi, vmul(vs, u)));
    }
    if (i < n) ct_lamb2_ref(p + i, m + i, v + i, n - i, hp, scale);
}
