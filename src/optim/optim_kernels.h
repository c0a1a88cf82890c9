/* src/optim/optim_kernels.h - the fused update loops of the optimizers over
 * flat arenas: a reference (optim.c) and a SIMD body compiled per ISA
 * (src/kernels/simd/optim.c). All operate on [begin, end) so callers can
 * split the arena across threads. */
#ifndef CT_OPTIM_KERNELS_H
#define CT_OPTIM_KERNELS_H

#include <stddef.h>

typedef struct ct_adamw_hp {
    float lr, beta1, beta2, eps, weight_decay;
    float bc1, bc2; /* 1 - beta^t */
} ct_adamw_hp;

typedef struct ct_sgd_hp {
    float lr, momentum, dampening, weight_decay;
    int nesterov, first; /* first: the momentum buffer is initialized with g */
} ct_sgd_hp;

void ct_adamw_ref(float *p, const float *g, float *m, float *v, size_t n, const ct_adamw_hp *hp);
void ct_adamw_avx2(float *p, const float *g, float *m, float *v, size_t n, const ct_adamw_hp *hp);
void ct_adamw_avx512(float *p, const float *g, float *m, float *v, size_t n, const ct_adamw_hp *hp);
void ct_sgd_ref(float *p, const float *g, float *buf, size_t n, const ct_sgd_hp *hp);
void ct_sgd_avx2(float *p, const float *g, float *buf, size_t n, const ct_sgd_hp *hp);
void ct_sgd_avx512(float *p, const float *g, float *buf, size_t n, const ct_sgd_hp *hp);

#endif
