/* src/kernels/ref/norm.c - reference batch normalization (training and eval,
 * running statistics as PyTorch: unbiased variance, momentum 0.1) and layer
 * normalization over the last dim, with their gradients.
 * Saved state: batchnorm aux = mean[C], invstd[C]; layernorm aux = mean[R],
 * invstd[R]. */
#include <math.h>
#include <stdlib.h>

#include "ctrain/convert.h"
#include "kernels/kernels.h"

/* x viewed as (N, C, S) */
static void bn_dims(const ct_tensor *x, int64_t *N, int64_t *C, int64_t *S) {
    *N = x->shape[0];
    *C = x->shape[1];
    *S = ct_tensor_numel(x) / (*N * *C);
}

/* dy[o] as batchnorm_bwd_data reads it: through batchnorm+relu's mask bits
 * (mk, ia[5]: relu_mask_bwd folded in; dy * 1 or dy * 0 as that kernel) or
 * as stored (mk NULL) */
static float bn_dy(const float *dy, const uint8_t *mk, int64_t o) {
    return mk ? dy[o] * ((mk[o >> 3] >> (o & 7)) & 1u ? 1.0f : 0.0f) : dy[o];
}

static const uint8_t *bn_mask(const ct_kargs *k, int64_t C) {
    return k->node->ia[5] ? ct_bn_relu_bits(k->in_aux[3], C) : NULL;
}

/* ---- sync_batchnorm (ct_context_set_batch_sum): the statistics of the global batch ----------------
 * Per channel, the sums over this process's rows go through the context's batch_sum (every rank the
 * same calls in the same order), then the global mean / variance (forward) or the global sums of dy and
 * dy * xhat (backward) are used exactly as one process on the whole batch would. Channels' sums are
 * reduced together: two reductions per forward, one per backward. */
#define BN_SYNC_STACK 512

static double *bn_sync_buf(double *stack, int64_t C, int per) {
    return C <= BN_SYNC_STACK ? stack : malloc(((size_t)C * (size_t)per + 1) * sizeof(double));
}

static ct_status bn_sync_forward(ct_kargs *k, ct_batch_sum_fn sum, void *user) {
    int64_t N, C, S;
    bn_dims(&k->in[0], &N, &C, &S);
    const float *x = k->in[0].data, *gamma = k->in[1].data, *beta = k->in[2].data;
    float *rmean = k->in[3].data, *rvar = k->in[4].data, *y = k->out.data;
    float *mean = k->aux, *invstd = mean + C;
    float mom = k->node->fa[0], eps = k->node->fa[1];
    double stack[2 * BN_SYNC_STACK + 1];
    double *b = bn_sync_buf(stack, C, 2);
    if (!b) return ct_set_error(k->ctx, CT_E_OOM, "sync_batchnorm: out of memory for %lld channels' sums", (long long)C);
    for (int64_t c = 0; c < C; c++) {
        double s = 0;
        for (int64_t n = 0; n < N; n++)
            for (int64_t i = 0; i < S; i++) s += x[(n * C + c) * S + i];
        b[c] = s;
    }
    b[C] = (double)(N * S);
    ct_status st = sum(user, b, (size_t)C + 1);
    const double M = b[C];
    for (int64_t c = 0; st == CT_OK && c < C; c++) b[C + 1 + c] = b[c] / M; /* the global means */
    for (int64_t c = 0; st == CT_OK && c < C; c++) {
        double s2 = 0, mu = b[C + 1 + c];
        for (int64_t n = 0; n < N; n++)
            for (int64_t i = 0; i < S; i++) {
                double d = x[(n * C + c) * S + i] - mu;
                s2 += d * d;
            }
        b[c] = s2;
    }
    if (st == CT_OK) st = sum(user, b, (size_t)C);
    for (int64_t c = 0; st == CT_OK && c < C; c++) {
        double mu = b[C + 1 + c], var = b[c] / M, unbiased = M > 1 ? b[c] / (M - 1) : var;
        if (ct_bn_updates_running_stats(k)) {
            rmean[c] = (float)((1.0 - mom) * rmean[c] + mom * mu);
            rvar[c] = (float)((1.0 - mom) * rvar[c] + mom * unbiased);
        }
        mean[c] = (float)mu;
        invstd[c] = (float)(1.0 / sqrt(var + eps));
        for (int64_t n = 0; n < N; n++)
            for (int64_t i = 0; i < S; i++) {
                int64_t o = (n * C + c) * S + i;
                y[o] = (float)((x[o] - mu) * invstd[c]) * gamma[c] + beta[c];
            }
    }
    if (b != stack) free(b);
    return st;
}

static ct_status bn_sync_bwd_data(ct_kargs *k, ct_batch_sum_fn sum, void *user) {
    int64_t N, C, S;
    bn_dims(&k->in[1], &N, &C, &S);
    const float *dy = k->in[0].data, *x = k->in[1].data, *gamma = k->in[2].data;
    const float *mean = k->in_aux[3], *invstd = mean + C;
    const uint8_t *mk = bn_mask(k, C);
    float *dx = k->out.data;
    double stack[2 * BN_SYNC_STACK + 1];
    double *b = bn_sync_buf(stack, C, 2);
    if (!b) return ct_set_error(k->ctx, CT_E_OOM, "sync_batchnorm: out of memory for %lld channels' sums", (long long)C);
    for (int64_t c = 0; c < C; c++) {
        double sdy = 0, sdyx = 0;
        for (int64_t n = 0; n < N; n++)
            for (int64_t i = 0; i < S; i++) {
                int64_t o = (n * C + c) * S + i;
                const float d = bn_dy(dy, mk, o);
                sdy += d;
                sdyx += d * ((x[o] - mean[c]) * invstd[c]);
            }
        b[2 * c] = sdy, b[2 * c + 1] = sdyx;
    }
    b[2 * C] = (double)(N * S);
    ct_status st = sum(user, b, 2 * (size_t)C + 1);
    const double M = b[2 * C];
    for (int64_t c = 0; st == CT_OK && c < C; c++)
        for (int64_t n = 0; n < N; n++)
            for (int64_t i = 0; i < S; i++) {
                int64_t o = (n * C + c) * S + i;
                double xh = (x[o] - mean[c]) * invstd[c];
                dx[o] = (float)(gamma[c] * invstd[c] / M * (M * bn_dy(dy, mk, o) - b[2 * c] - xh * b[2 * c + 1]));
            }
    if (b != stack) free(b);
    return st;
}

ct_status ct_k_batchnorm_ref(ct_kargs *k) {
    void *su = NULL;
    ct_batch_sum_fn sum = k->training ? ct_context_batch_sum(k->ctx, &su) : NULL;
    if (sum) return bn_sync_forward(k, sum, su);
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

/* Fusion batchnorm_bwd+colsum (ia[7], x (M, C)): this process's column
 * sums of dy * (x - mean) and of dy (through the mask), in order, in piece 0
 * of the COLSUM sets, as batchnorm_bwd_gamma and sum would */
static ct_status bn_bwd_sets(ct_kargs *k, const float *dy, const uint8_t *mk) {
    const int64_t cs = k->node->ia[7], C = k->in[1].shape[1], M = k->in[1].shape[0];
    if (!cs) return CT_OK;
    if (!k->aux || k->in[1].ndim != 2)
        return ct_set_error(k->ctx, CT_E_INTERNAL, "batchnorm_bwd_data: column sums need a 2-D input and its aux");
    const float *x = k->in[1].data, *mean = k->in_aux[3];
    double *ag = cs & CT_COLSUM_DGAMMA ? ct_colsum_ref_set(k, CT_COLSUM_DGAMMA) : NULL;
    double *ad = cs & CT_COLSUM_DY ? ct_colsum_ref_set(k, CT_COLSUM_DY) : NULL;
    for (int64_t c = 0; c < C; c++) {
        double sg = 0, sd = 0;
        for (int64_t r = 0; r < M; r++) {
            const float d = bn_dy(dy, mk, r * C + c);
            sg += (double)d * ((double)x[r * C + c] - mean[c]);
            sd += d;
        }
        if (ag) ag[c] = sg;
        if (ad) ad[c] = sd;
    }
    return CT_OK;
}

/* in: dy, x, gamma, fwd -> dx (training-mode statistics); ia[5]: dy through
 * batchnorm+relu's mask bits; ia[7]: the column sums too (bn_bwd_sets) */
ct_status ct_k_batchnorm_bwd_data_ref(ct_kargs *k) {
    void *su = NULL;
    ct_batch_sum_fn sum = ct_context_batch_sum(k->ctx, &su);
    int64_t N, C, S;
    bn_dims(&k->in[1], &N, &C, &S);
    const float *dy = k->in[0].data, *x = k->in[1].data, *gamma = k->in[2].data;
    const float *mean = k->in_aux[3], *invstd = mean + C;
    const uint8_t *mk = bn_mask(k, C);
    if (sum) {
        CT_TRY(bn_sync_bwd_data(k, sum, su));
        return bn_bwd_sets(k, dy, mk);
    }
    float *dx = k->out.data;
    double M = (double)(N * S);
    for (int64_t c = 0; c < C; c++) {
        double sdy = 0, sdyx = 0;
        for (int64_t n = 0; n < N; n++)
            for (int64_t i = 0; i < S; i++) {
                int64_t o = (n * C + c) * S + i;
                double xh = (x[o] - mean[c]) * invstd[c];
                const float d = bn_dy(dy, mk, o);
                sdy += d;
                sdyx += d * xh;
            }
        for (int64_t n = 0; n < N; n++)
            for (int64_t i = 0; i < S; i++) {
                int64_t o = (n * C + c) * S + i;
                double xh = (x[o] - mean[c]) * invstd[c];
                dx[o] = (float)(gamma[c] * invstd[c] / M * (M * bn_dy(dy, mk, o) - sdy - xh * sdyx));
            }
    }
    return bn_bwd_sets(k, dy, mk);
}

/* in: dy, x, fwd -> dgamma (C) = invstd * sum dy * (x - mean) (the SIMD
 * kernels' form; in double) */
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
                s += (double)dy[o] * ((double)x[o] - mean[c]);
            }
        dg[c] = (float)(s * invstd[c]);
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
/* layernorm_bwd+add (fusion): dx += r (in[4]), dx first rounded to the node's
 * dtype as the unfused layernorm backward's output is (a BF16 / FP16 plan's
 * reference runs on FP32 copies), so the sum is the unfused add's bit for bit */
static void ln_bwd_add_residual(const ct_kargs *k, float *dx, int64_t n) {
    const float *res = k->in[4].data;
    ct_dtype dt = k->node->dtype;
    for (int64_t i = 0; i < n; i++) {
        float v = dx[i];
        if (dt == CT_BF16) v = ct_bf16_to_f32(ct_f32_to_bf16(v));
        else if (dt == CT_F16) v = ct_f16_to_f32(ct_f32_to_f16(v));
        dx[i] = v + res[i];
    }
}

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
    if (k->node->n_in > 4) ln_bwd_add_residual(k, dx, R * D);
    if (k->out2.data) CT_TRY(ct_convert(k->ctx, &k->out, &k->out2)); /* layernorm_bwd+cast: as the cast would */
    int64_t cs = k->node->ia[7]; /* layernorm_bwd+colsum: as layernorm_bwd_gamma and sum would */
    if (cs && !k->aux) return ct_set_error(k->ctx, CT_E_INTERNAL, "layernorm_bwd_data: no aux for its column sums");
    if (cs & CT_COLSUM_DGAMMA) {
        double *a = ct_colsum_ref_set(k, CT_COLSUM_DGAMMA);
        for (int64_t i = 0; i < D; i++) {
            double s = 0;
            for (int64_t r = 0; r < R; r++) s += dy[r * D + i] * ((x[r * D + i] - mean[r]) * invstd[r]);
            a[i] = s;
        }
    }
    if (cs & CT_COLSUM_DY) ct_colsum_ref_rows(k, CT_COLSUM_DY, dy, CT_F32);
    if (cs & CT_COLSUM_OUT) ct_colsum_ref_rows(k, CT_COLSUM_OUT, dx, (ct_dtype)k->node->ia[6]);
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
