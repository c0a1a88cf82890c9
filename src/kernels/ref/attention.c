/* src/kernels/ref/attention.c - reference fused multi-head attention and its
 * gradient: one (batch, head, query) at a time, dot products and sums in
 * double. Layout (nanoGPT): qkv (B, T, 3D) holds q | k | v, head h uses
 * columns h*Dh..(h+1)*Dh of each; out (B, T, D). The forward saves only the
 * log-sum-exp of every query row (-inf when every key is masked: that row's
 * output and gradients are 0); the backward recomputes the probabilities. */
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"

typedef struct {
    int64_t B, T, D, H, Dh;
    double scale;
    int causal;
    const int32_t *kv; /* key_valid (B, T) or NULL */
    const float *qkv;
} att;

static void att_init(att *a, const ct_kargs *k, const ct_tensor *qkv, int kv_input) {
    a->B = qkv->shape[0];
    a->T = qkv->shape[1];
    a->D = qkv->shape[2] / 3;
    a->H = k->node->ia[0];
    a->Dh = a->D / a->H;
    a->scale = k->node->fa[0];
    a->causal = (int)k->node->ia[1];
    a->kv = k->node->n_in > kv_input ? k->in[kv_input].data : NULL;
    a->qkv = qkv->data;
}

static int allowed(const att *a, int64_t b, int64_t i, int64_t j) {
    return !(a->causal && j > i) && !(a->kv && !a->kv[b * a->T + j]);
}

/* row t of part (0 q, 1 k, 2 v) of head h in batch b */
static const float *row(const att *a, int part, int64_t b, int64_t h, int64_t t) {
    return a->qkv + (b * a->T + t) * 3 * a->D + part * a->D + h * a->Dh;
}

static double dot(const float *x, const float *y, int64_t n) {
    double s = 0;
    for (int64_t d = 0; d < n; d++) s += (double)x[d] * y[d];
    return s;
}

/* in: qkv[, key_valid] -> out (B, T, D); aux: lse (B, H, T) */
ct_status ct_k_attention_ref(ct_kargs *k) {
    att a;
    att_init(&a, k, &k->in[0], 1);
    int64_t T = a.T, Dh = a.Dh;
    float *out = k->out.data, *lse = k->aux;
    double *p = k->ws, *acc = p + T; /* T + Dh doubles of the first thread's slice */
    for (int64_t b = 0; b < a.B; b++)
        for (int64_t h = 0; h < a.H; h++)
            for (int64_t i = 0; i < T; i++) {
                const float *q = row(&a, 0, b, h, i);
                float *o = out + (b * T + i) * a.D + h * Dh;
                double m = -INFINITY, s = 0;
                for (int64_t j = 0; j < T; j++) {
                    p[j] = allowed(&a, b, i, j) ? a.scale * dot(q, row(&a, 1, b, h, j), Dh) : -INFINITY;
                    if (p[j] > m) m = p[j];
                }
                lse[(b * a.H + h) * T + i] = -INFINITY;
                if (m == -INFINITY) { /* every key masked */
                    for (int64_t d = 0; d < Dh; d++) o[d] = 0.0f;
                    continue;
                }
                for (int64_t j = 0; j < T; j++) {
                    p[j] = p[j] == -INFINITY ? 0.0 : exp(p[j] - m);
                    s += p[j];
                }
                for (int64_t d = 0; d < Dh; d++) acc[d] = 0;
                for (int64_t j = 0; j < T; j++) {
                    if (p[j] == 0.0) continue;
                    const float *v = row(&a, 2, b, h, j);
                    for (int64_t d = 0; d < Dh; d++) acc[d] += p[j] * v[d];
                }
                for (int64_t d = 0; d < Dh; d++) o[d] = (float)(acc[d] / s);
                lse[(b * a.H + h) * T + i] = (float)(m + log(s));
            }
    return CT_OK;
}

/* in: dy (B, T, D), qkv, fwd (out and lse)[, key_valid] -> d_qkv (B, T, 3D):
 * P = exp(S - lse), dV = P^T dO, dP = dO V^T, Di = rowsum(dO * O),
 * dS = P * (dP - Di), dQ = scale dS K, dK = scale dS^T Q */
ct_status ct_k_attention_bwd_ref(ct_kargs *k) {
    att a;
    att_init(&a, k, &k->in[1], 3);
    int64_t T = a.T, Dh = a.Dh, D3 = 3 * a.D;
    const float *dy = k->in[0].data, *y = k->in[2].data, *lse = k->in_aux[2];
    float *dx = k->out.data;
    double *dk = k->ws, *dv = dk + T * Dh, *dq = dv + T * Dh;
    memset(dx, 0, (size_t)(a.B * T * D3) * sizeof *dx);
    for (int64_t b = 0; b < a.B; b++)
        for (int64_t h = 0; h < a.H; h++) {
            for (int64_t t = 0; t < 2 * T * Dh; t++) dk[t] = 0;
            for (int64_t i = 0; i < T; i++) {
                double l = lse[(b * a.H + h) * T + i];
                if (l == -INFINITY) continue;
                const float *q = row(&a, 0, b, h, i), *g = dy + (b * T + i) * a.D + h * Dh;
                double di = dot(g, y + (b * T + i) * a.D + h * Dh, Dh);
                for (int64_t d = 0; d < Dh; d++) dq[d] = 0;
                for (int64_t j = 0; j < T; j++) {
                    if (!allowed(&a, b, i, j)) continue;
                    const float *kj = row(&a, 1, b, h, j), *vj = row(&a, 2, b, h, j);
                    double p = exp(a.scale * dot(q, kj, Dh) - l);
                    double ds = p * (dot(g, vj, Dh) - di);
                    for (int64_t d = 0; d < Dh; d++) {
                        dq[d] += ds * kj[d];
                        dk[j * Dh + d] += ds * q[d];
                        dv[j * Dh + d] += p * g[d];
                    }
                }
                float *dqr = dx + (b * T + i) * D3 + h * Dh;
                for (int64_t d = 0; d < Dh; d++) dqr[d] = (float)(a.scale * dq[d]);
            }
            for (int64_t j = 0; j < T; j++) {
                float *r = dx + (b * T + j) * D3 + h * Dh;
                for (int64_t d = 0; d < Dh; d++) {
                    r[a.D + d] = (float)(a.scale * dk[j * Dh + d]);
                    r[2 * a.D + d] = (float)dv[j * Dh + d];
                }
            }
        }
    if (k->node->ia[7] & CT_COLSUM_OUT) { /* attention_bwd+colsum: d_qkv's column sums, as sum would */
        if (!k->aux) return ct_set_error(k->ctx, CT_E_INTERNAL, "attention_bwd: no aux for its column sums");
        ct_colsum_ref_rows(k, CT_COLSUM_OUT, dx, (ct_dtype)k->node->ia[6]);
    }
    return CT_OK;
}
