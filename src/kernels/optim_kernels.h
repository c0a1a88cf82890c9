/* src/kernels/optim_kernels.h - the fused update loops of the optimizers over
 * flat arenas: a reference (src/kernels/ref/optim.c) and a SIMD body compiled
 * per ISA (src/kernels/simd/optim.c), with the same arithmetic in the same
 * order; the optimizers (src/optim/optim.c) pick one per step.
 * All operate on n elements from the given pointers so callers can split the
 * arena across threads. */
#ifndef CT_OPTIM_KERNELS_H
#define CT_OPTIM_KERNELS_H

#include <stddef.h>

/* Adam and AdamW (decoupled != 0); vmax (max_exp_avg_sq) used when amsgrad. */
typedef struct ct_adam_hp {
    float lr, beta1, beta2, eps, weight_decay;
    float step, bc2_sqrt; /* lr / (1 - beta1^t), sqrt(1 - beta2^t) */
    float decay;          /* AdamW: 1 - lr * weight_decay */
    int amsgrad, decoupled;
} ct_adam_hp;

typedef struct ct_sgd_hp {
    float lr, momentum, dampening, weight_decay;
    int nesterov, first; /* first: the momentum buffer is initialized with g */
} ct_sgd_hp;

/* RMSprop: buf used when momentum > 0, gavg when centered. */
typedef struct ct_rmsprop_hp {
    float lr, alpha, eps, weight_decay, momentum;
    int centered;
} ct_rmsprop_hp;

typedef struct ct_adagrad_hp {
    float clr, eps, weight_decay; /* clr = lr / (1 + (t-1) * lr_decay) */
} ct_adagrad_hp;

/* LAMB: stage 1 updates m, v and adds sum(p^2), sum(u^2) to sums[0..1];
 * stage 2 recomputes u and applies p -= scale * u (scale = lr * trust). */
typedef struct ct_lamb_hp {
    float beta1, beta2, eps, weight_decay, bc1, bc2;
} ct_lamb_hp;

#define CT_OPTIM_DECL(isa)                                                                                    \
    void ct_adam_##isa(float *p, const float *g, float *m, float *v, float *vmax, size_t n,                  \
                       const ct_adam_hp *hp);                                                                 \
    void ct_sgd_##isa(float *p, const float *g, float *buf, size_t n, const ct_sgd_hp *hp);                   \
    void ct_rmsprop_##isa(float *p, const float *g, float *sq, float *buf, float *gavg, size_t n,             \
                          const ct_rmsprop_hp *hp);                                                           \
    void ct_adagrad_##isa(float *p, const float *g, float *sum, size_t n, const ct_adagrad_hp *hp);           \
    void ct_lamb1_##isa(const float *p, const float *g, float *m, float *v, size_t n, const ct_lamb_hp *hp,   \
                        double sums[2]);                                                                      \
    void ct_lamb2_##isa(float *p, const float *m, const float *v, size_t n, const ct_lamb_hp *hp, float scale);
CT_OPTIM_DECL(ref)
CT_OPTIM_DECL(avx2)
CT_OPTIM_DECL(avx512)

#endif
