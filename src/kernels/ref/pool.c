/* src/kernels/ref/pool.c - reference max / average pooling and gradients.
 * Max pooling saves the flat input index of each window's maximum (aux);
 * average pooling counts padding (PyTorch's count_include_pad=True). */
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"

ct_status ct_k_maxpool2d_ref(ct_kargs *k) {
    const float *x = k->in[0].data;
    float *y = k->out.data;
    int32_t *arg = k->aux;
    int64_t NC = k->in[0].shape[0] * k->in[0].shape[1], H = k->in[0].shape[2], W = k->in[0].shape[3];
    int64_t OH = k->out.shape[2], OW = k->out.shape[3];
    int64_t K = k->node->ia[0], S = k->node->ia[1], P = k->node->ia[2];
    for (int64_t nc = 0; nc < NC; nc++)
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
                float best = -INFINITY;
                int64_t bi = -1;
                for (int64_t kh = 0; kh < K; kh++)
                    for (int64_t kw = 0; kw < K; kw++) {
                        int64_t ih = oh * S - P + kh, iw = ow * S - P + kw;
                        if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                        float v = x[(nc * H + ih) * W + iw];
                        if (bi >= 0 && isnan(best)) continue; /* NaN propagates, as in PyTorch */
                        if (bi < 0 || v > best || isnan(v)) {
                            best = v;
                            bi = ih * W + iw;
                        }
                    }
                int64_t o = (nc * OH + oh) * OW + ow;
                y[o] = best;
                arg[o] = (int32_t)bi;
            }
    return CT_OK;
}

/* in: dy, fwd -> dx */
ct_status ct_k_maxpool2d_bwd_ref(ct_kargs *k) {
    const float *dy = k->in[0].data;
    const int32_t *arg = k->in_aux[1];
    float *dx = k->out.data;
    int64_t NC = k->out.shape[0] * k->out.shape[1], HW = k->out.shape[2] * k->out.shape[3];
    int64_t OHW = k->in[0].shape[2] * k->in[0].shape[3];
    memset(dx, 0, ct_tensor_nbytes(&k->out));
    for (int64_t nc = 0; nc < NC; nc++)
        for (int64_t o = 0; o < OHW; o++) dx[nc * HW + arg[nc * OHW + o]] += dy[nc * OHW + o];
    return CT_OK;
}

ct_status ct_k_avgpool2d_ref(ct_kargs *k) {
    const float *x = k->in[0].data;
    float *y = k->out.data;
    int64_t NC = k->in[0].shape[0] * k->in[0].shape[1], H = k->in[0].shape[2], W = k->in[0].shape[3];
    int64_t OH = k->out.shape[2], OW = k->out.shape[3];
    int64_t K = k->node->ia[0], S = k->node->ia[1], P = k->node->ia[2];
    for (int64_t nc = 0; nc < NC; nc++)
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
                double s = 0;
                for (int64_t kh = 0; kh < K; kh++)
                    for (int64_t kw = 0; kw < K; kw++) {
                        int64_t ih = oh * S - P + kh, iw = ow * S - P + kw;
                        if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                        s += x[(nc * H + ih) * W + iw];
                    }
                y[(nc * OH + oh) * OW + ow] = (float)(s / (double)(K * K));
            }
    return CT_OK;
}

/* in: dy -> dx */
ct_status ct_k_avgpool2d_bwd_ref(ct_kargs *k) {
    const float *dy = k->in[0].data;
    float *dx = k->out.data;
    int64_t NC = k->out.shape[0] * k->out.shape[1], H = k->out.shape[2], W = k->out.shape[3];
    int64_t OH = k->in[0].shape[2], OW = k->in[0].shape[3];
    int64_t K = k->node->ia[0], S = k->node->ia[1], P = k->node->ia[2];
    float inv = 1.0f / (float)(K * K);
    memset(dx, 0, ct_tensor_nbytes(&k->out));
    for (int64_t nc = 0; nc < NC; nc++)
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
                float g = dy[(nc * OH + oh) * OW + ow] * inv;
                for (int64_t kh = 0; kh < K; kh++)
                    for (int64_t kw = 0; kw < K; kw++) {
                        int64_t ih = oh * S - P + kh, iw = ow * S - P + kw;
                        if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                        dx[(nc * H + ih) * W + iw] += g;
                    }
            }
    return CT_OK;
}
