/* src/kernels/ref/pool.c - reference max / average pooling and gradients
 * with per-axis kernel, stride, padding and dilation: plane after plane
 * through the loops of kernels/pool_plane.h (which documents the windows,
 * the saved argmax and the average's divisor); channels-last (fa[1]) image
 * after image through its *_cl_image loops. */
#include "kernels/kernels.h"
#include "kernels/pool_plane.h"

ct_status ct_k_maxpool2d_ref(ct_kargs *k) {
    ct_pool_dims d = ct_pool_get(k->node, &k->in[0], &k->out);
    const float *x = k->in[0].data;
    float *y = k->out.data;
    const int64_t HW = d.H * d.W, OHW = d.OH * d.OW;
    if (d.cl) {
        for (int64_t n = 0; n < d.N; n++)
            ct_maxpool_cl_image(x + n * HW * d.C, y + n * OHW * d.C, ct_maxpool_arg_image(k->aux, n, &d), &d);
        return CT_OK;
    }
    for (int64_t nc = 0; nc < d.NC; nc++) ct_maxpool_plane(x + nc * HW, y + nc * OHW, ct_maxpool_arg_plane(k->aux, nc, &d), &d);
    return CT_OK;
}

/* in: dy, fwd -> dx */
ct_status ct_k_maxpool2d_bwd_ref(ct_kargs *k) {
    ct_pool_dims d = ct_pool_get(k->node, &k->out, &k->in[0]);
    const float *dy = k->in[0].data;
    float *dx = k->out.data;
    const int64_t HW = d.H * d.W, OHW = d.OH * d.OW;
    if (d.cl) {
        for (int64_t n = 0; n < d.N; n++)
            ct_maxpool_bwd_cl_image(dy + n * OHW * d.C, ct_maxpool_arg_image(k->in_aux[1], n, &d), dx + n * HW * d.C, &d);
        return CT_OK;
    }
    for (int64_t nc = 0; nc < d.NC; nc++)
        ct_maxpool_bwd_plane(dy + nc * OHW, ct_maxpool_arg_plane(k->in_aux[1], nc, &d), dx + nc * HW, &d);
    return CT_OK;
}

ct_status ct_k_avgpool2d_ref(ct_kargs *k) {
    ct_pool_dims d = ct_pool_get(k->node, &k->in[0], &k->out);
    const float *x = k->in[0].data;
    float *y = k->out.data;
    const int64_t HW = d.H * d.W, OHW = d.OH * d.OW;
    if (d.cl) {
        for (int64_t n = 0; n < d.N; n++) ct_avgpool_cl_image(x + n * HW * d.C, y + n * OHW * d.C, &d);
        return CT_OK;
    }
    for (int64_t nc = 0; nc < d.NC; nc++) ct_avgpool_plane(x + nc * HW, y + nc * OHW, &d);
    return CT_OK;
}

/* in: dy -> dx */
ct_status ct_k_avgpool2d_bwd_ref(ct_kargs *k) {
    ct_pool_dims d = ct_pool_get(k->node, &k->out, &k->in[0]);
    const float *dy = k->in[0].data;
    float *dx = k->out.data;
    const int64_t HW = d.H * d.W, OHW = d.OH * d.OW;
    if (d.cl) {
        for (int64_t n = 0; n < d.N; n++) ct_avgpool_bwd_cl_image(dy + n * OHW * d.C, dx + n * HW * d.C, &d);
        return CT_OK;
    }
    for (int64_t nc = 0; nc < d.NC; nc++) ct_avgpool_bwd_plane(dy + nc * OHW, dx + nc * HW, &d);
    return CT_OK;
}
