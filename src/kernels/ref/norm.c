/* src/kernels/ref/norm.c - reference batch normalization (training and eval,
 * running statistics as PyTorch: unbiased variance, momentum 0.1) and layer
 * normalization over the last dim, with their gradients.
 * Saved state: batchnorm aux = mean[C], invstd[C]; layernorm aux = mean[R],
 * invstd[R]. */
#include <math.h>

#include "kernels/kernels.h"

/* x viewed as (N, C, S) */
static void bn_dims(const ct_tensor *x, int64_t *N, int64_t *C, int64_t *S) {
    *N = x->shape[0];
    *C = x->shape[1];
    *S = ct_tensor_numel(x) / (*N * *C);
}

ct_status ct_k_batchnorm_ref(ct_kargs *k) {
    int64_t N, C, S;
    bn_dims(&k->in[0], &N, &C, &S);
    const float *x = k->in[0].data, *gamma = k->in[1].data, *beta = k->in[2].data;
    float *rmean = k->in[3].data, *rvar = k->in[4].data, *y = k->out.data;
    float *mean = k->aux, *invstd = mean + C;
    float mom = k->node->fa[0], eps = k->node->fa[1];
    int64_t M = N * S;
    for (int64_t c = 0; c < C; c++) {
        double mu, var;
        if (k->training) {
            double s = 0, s2 = 0;
            for (int64_t n = 0; n < N; n++)
                for (int64_t i = 0; i < S; i++) s += x[(n * C + c) * S + i];
            mu = s / (double)M;
            for (int64_t n = 0; n < N; n++)
                for (int64_t i = 0; i < S; i++) {
                    double d = x[(n * C + c) * S + i] - mu;
                    s2 += d * d;
                }
            var = s2 / (double)M;
            double unbiased = M > 1 ? s2 / (double)(M - 1) : var;
            if (ct_bn_updates_running_stats(k)) { /* not a recompute copy (updated once already) nor kept */
                rmean[c] = (float)((1.0 - mom) * rmean[c] + mom * mu);
                rvar[c] = (float)((1.0 - mom) * rvar[c] + mom * unbiased);
            }
        } else {
            mu = rmean[c];
            var = rvar[c];
        }
        mean[c] = (float)mu;
        invstd[c] = (float)(1.0 / sqrt(var + eps));
        for (int64_t n = 0; n < N; n++)
            for (int64_t i = 0; i < S; i++) {
                int64_t o = (n * C + c) * S + i;
                y[o] = (float)((x[o] - mu) * invstd[c]) * gamma[c] + beta[c];
            }
    }
    return CT_OK;
}

/* in: dy, x, gamma, fwd -> dx (training-mode statistics) */
ct_status ct_k_batchnorm_bwd_data_ref(ct_kargs *k) {
    int64_t N, C, S;
    bn_dims(&k->in[1], &N, &C, &S);
    const float *dy = k->in[0].data, *x = k->in[1].data, *gamma = k->in[2].data;
    const float *mean = k->in_aux[3], *invstd = mean + C;
    float *dx = k->out.data;
    double M = (double)(N * S);
    for (int64_t c = 0; c < C; c++) {
        double sdy = 0, sdyx = 0;
        for (int64_t n = 0; n < N; n++)
            for (int64_t i = 0; i < S; i++) {
                int64_t o = (n * C + c) * S + i;
                double xh = (x[o] - mean[c]) * invstd[c];
                sdy += dy[o];
                sdyx += dy[o] * xh;
            }
        for (int64_t n = 0; n < N; n++)
            for (int64_t i = 0; i < S; i++) {
                int64_t o = (n * C + c) * S + i;
                double xh = (x[o] - mean[c]) * invstd[c];
                dx[o] = (float)(gamma[c] * invstd[c] / M * (M * dy[o] - sdy - xh * sdyx));
            }
    }
    return CT_OK;
}

/* in: dy, x, fwd -> dgamma (C) */
ct_status ct_k_batchnorm_bwd_gamma_ref(ct_kargs *k) {
    int64_t N, C, S;
    bn_dims(&k->in[1], &N, &C, &S);
    const float *dy = k->in[0].data, *x = k->in[1].data;
    const float *mean = k->in_aux[2], *invstd = mean + C;
    float *dg = k->out.data;
    for (int64_t c = 0; c < C; c++) {
        double s = 0;
        for (int64_t n = 0; n < N; n++)
            for (int64_t i = 0; i < S; i++) {
                int64_t o = (n * C + c) * S + i;
                s += dy[o] * ((x[o] - mean[c]) * invstd[c]);
            }
        dg[c] = (float)s;
    }
    return CT_OK;
}

ct_status ct_k_layernorm_ref(ct_kargs *k) {
    const ct_tensor *X = &k->in[0];
    int64_t D = X->shape[X->ndim - 1], R = ct_tensor_numel(X) / D;
    const float *x = X->data, *gamma = k->in[1].data, *beta = k->node->n_in > 2 ? k->in[2].data : NULL;
    float *y = k->out.data, *mean = k->aux, *invstd = mean + R;
    double eps = k->node->fa[0];
    for (int64_t r = 0; r < R; r++) {
        const float *xr = x + r * D;
        double s = 0, s2 = 0;
        for (int64_t i = 0; i < D; i++) s += xr[i];
        double mu = s / (double)D;
        for (int64_t i = 0; i < D; i++) s2 += (xr[i] - mu) * (xr[i] - mu);
        double is = 1.0 / sqrt(s2 / (double)D + eps);
        mean[r] = (float)mu;
        invstd[r] = (float)is;
        for (int64_t i = 0; i < D; i++) y[r * D + i] = (float)((xr[i] - mu) * is) * gamma[i] + (beta ? beta[i] : 0.0f);
    }
    return CT_OK;
}

/* in: dy, x, gamma, fwd -> dx */
ct_status ct_k_layernorm_bwd_data_ref(ct_kargs *k) {
    const ct_tensor *X = &k->in[1];
    int64_t D = X->shape[X->ndim - 1], R = ct_tensor_numel(X) / D;
    const float *dy = k->in[0].data, *x = X->data, *gamma = k->in[2].data;
    const float *mean = k->in_aux[3], *invstd = mean + R;
    float *dx = k->out.data;
    for (int64_t r = 0; r < R; r++) {
        double sg = 0, sgx = 0;
        for (int64_t i = 0; i < D; i++) {
            double g = (double)dy[r * D + i] * gamma[i];
            double xh = (x[r * D + i] - mean[r]) * invstd[r];
            sg += g;
            sgx += g * xh;
        }
        for (int64_t i = 0; i < D; i++) {
            double g = (double)dy[r * D + i] * gamma[i];
            double xh = (x[r * D + i] - mean[r]) * invstd[r];
            dx[r * D + i] = (float)(invstd[r] / (double)D * ((double)D * g - sg - xh * sgx));
        }
    }
    return CT_OK;
}

/* in: dy, x, fwd -> dgamma (D) */
ct_status ct_k_layernorm_bwd_gamma_ref(ct_kargs *k) {
    const ct_tensor *X = &k->in[1];
    int64_t D = X->shape[X->ndim - 1], R = ct_tensor_numel(X) / D;
    const float *dy = k->in[0].data, *x = X->data;
    const float *mean = k->in_aux[2], *invstd = mean + R;
    float *dg = k->out.data;
    for (int64_t i = 0; i < D; i++) {
        double s = 0;
        for (int64_t r = 0; r < R; r++) s += dy[r * D + i] * ((x[r * D + i] - mean[r]) * invstd[r]);
        dg[i] = (float)s;
    }
    return CT_OK;
}
