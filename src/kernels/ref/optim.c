/* src/kernels/ref/optim.c - reference loops of the optimizer updates (SGD,
 * Adam/AdamW with amsgrad, RMSprop, Adagrad, LAMB): ct_<opt>_ref, the ground
 * truth for the SIMD bodies in src/kernels/simd/optim.c (same arithmetic in the
 * same order). The optimizer logic that calls them is src/optim/optim.c. */
#include <math.h>

#include "kernels/optim_kernels.h"

void ct_adam_ref(float *p, const float *g, float *m, float *v, float *vmax, size_t n, const ct_adam_hp *hp) {
    for (size_t i = 0; i < n; i++) {
        float pi = p[i], gi = g[i];
        if (hp->decoupled) pi = pi * hp->decay;
        else if (hp->weight_decay != 0.0f) gi = gi + hp->weight_decay * pi;
        m[i] = hp->beta1 * m[i] + (1.0f - hp->beta1) * gi;
        v[i] = hp->beta2 * v[i] + (1.0f - hp->beta2) * (gi * gi);
        float vi = v[i];
        if (hp->amsgrad) {
            vi = vmax[i] > vi ? vmax[i] : vi;
            vmax[i] = vi;
        }
        float denom = sqrtf(vi) / hp->bc2_sqrt + hp->eps;
        p[i] = pi - hp->step * (m[i] / denom);
    }
}

void ct_sgd_ref(float *p, const float *g, float *buf, size_t n, const ct_sgd_hp *hp) {
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] + hp->weight_decay * p[i];
        if (hp->momentum != 0.0f) {
            float b = hp->first ? gi : hp->momentum * buf[i] + (1.0f - hp->dampening) * gi;
            buf[i] = b;
            gi = hp->nesterov ? gi + hp->momentum * b : b;
        }
        p[i] = p[i] - hp->lr * gi;
    }
}

void ct_rmsprop_ref(float *p, const float *g, float *sq, float *buf, float *gavg, size_t n,
                    const ct_rmsprop_hp *hp) {
    for (size_t i = 0; i < n; i++) {
        float pi = p[i];
        float gi = g[i] + hp->weight_decay * pi;
        float s = hp->alpha * sq[i] + (1.0f - hp->alpha) * (gi * gi);
        sq[i] = s;
        float avg;
        if (hp->centered) {
            float ga = hp->alpha * gavg[i] + (1.0f - hp->alpha) * gi;
            gavg[i] = ga;
            avg = sqrtf(s - ga * ga);
        } else {
            avg = sqrtf(s);
        }
        avg = avg + hp->eps;
        if (hp->momentum > 0.0f) {
            float b = hp->momentum * buf[i] + gi / avg;
            buf[i] = b;
            p[i] = pi - hp->lr * b;
        } else {
            p[i] = pi - hp->lr * (gi / avg);
        }
    }
}

void ct_adagrad_ref(float *p, const float *g, float *sum, size_t n, const ct_adagrad_hp *hp) {
    for (size_t i = 0; i < n; i++) {
        float pi = p[i];
        float gi = g[i] + hp->weight_decay * pi;
        float s = sum[i] + gi * gi;
        sum[i] = s;
        float std = sqrtf(s) + hp->eps;
        p[i] = pi - hp->clr * (gi / std);
    }
}

static inline float lamb_u_ref(float pi, float mi, float vi, const ct_lamb_hp *hp) {
    float denom = sqrtf(vi / hp->bc2) + hp->eps;
    return hp->weight_decay * pi + (mi / hp->bc1) / denom;
}

void ct_lamb1_ref(const float *p, const float *g, float *m, float *v, size_t n, const ct_lamb_hp *hp,
                  double sums[2]) {
    double pp = 0, uu = 0;
    for (size_t i = 0; i < n; i++) {
        float gi = g[i];
        m[i] = hp->beta1 * m[i] + (1.0f - hp->beta1) * gi;
        v[i] = hp->beta2 * v[i] + (1.0f - hp->beta2) * (gi * gi);
        float u = lamb_u_ref(p[i], m[i], v[i], hp);
        pp += (double)p[i] * p[i];
        uu += (double)u * u;
    }
    sums[0] += pp;
    sums[1] += uu;
}

void ct_lamb2_ref(float *p, const float *m, const float *v, size_t n, const ct_lamb_hp *hp, float scale) {
    for (size_t i = 0; i < n; i++) p[i] = p[i] - scale * lamb_u_ref(p[i], m[i], v[i], hp);
}
