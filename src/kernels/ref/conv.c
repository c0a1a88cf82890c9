/* src/kernels/ref/conv.c - reference 2-D convolution (stride, padding,
 * dilation, groups) and its data and weight gradients. Activations NCHW, or
 * NHWC with channels_last (ia[4]); weights OIHW. */
#include <string.h>

#include "kernels/kernels.h"

typedef struct {
    int64_t N, C, H, W, OC, KH, KW, OH, OW, s, p, d, G, Cg, OCg;
    int cl; /* channels last: activations (N, H, W, C) */
} conv_geo;

/* x: the data tensor's shape, y: the output's, w: (OC,C/G,KH,KW); x and y
 * (N,C,H,W) / (N,OC,OH,OW), or channels last (N,H,W,C) / (N,OH,OW,OC) */
static conv_geo geo(const ct_node_def *nd, const int64_t *xs, const int64_t *ws, const int64_t *ys) {
    conv_geo g;
    g.cl = nd->ia[4] != 0;
    g.N = xs[0];
    g.C = g.cl ? xs[3] : xs[1]; g.H = g.cl ? xs[1] : xs[2]; g.W = g.cl ? xs[2] : xs[3];
    g.OC = ws[0]; g.KH = ws[2]; g.KW = ws[3];
    g.OH = g.cl ? ys[1] : ys[2]; g.OW = g.cl ? ys[2] : ys[3];
    g.s = nd->ia[0]; g.p = nd->ia[1]; g.d = nd->ia[2]; g.G = nd->ia[3];
    g.Cg = g.C / g.G; g.OCg = g.OC / g.G;
    return g;
}

/* offsets of element (n, c, h, w) of x and (n, oc, oh, ow) of y */
static int64_t xat(const conv_geo *g, int64_t n, int64_t c, int64_t h, int64_t w) {
    return g->cl ? ((n * g->H + h) * g->W + w) * g->C + c : ((n * g->C + c) * g->H + h) * g->W + w;
}
static int64_t yat(const conv_geo *g, int64_t n, int64_t oc, int64_t oh, int64_t ow) {
    return g->cl ? ((n * g->OH + oh) * g->OW + ow) * g->OC + oc : ((n * g->OC + oc) * g->OH + oh) * g->OW + ow;
}

ct_status ct_k_conv2d_ref(ct_kargs *k) {
    conv_geo g = geo(k->node, k->in[0].shape, k->in[1].shape, k->out.shape);
    const float *x = k->in[0].data, *w = k->in[1].data;
    const float *b = k->node->n_in > 2 ? k->in[2].data : NULL;
    float *y = k->out.data;
    for (int64_t n = 0; n < g.N; n++)
        for (int64_t oc = 0; oc < g.OC; oc++) {
            int64_t grp = oc / g.OCg;
            for (int64_t oh = 0; oh < g.OH; oh++)
                for (int64_t ow = 0; ow < g.OW; ow++) {
                    double s = b ? b[oc] : 0.0;
                    for (int64_t c = 0; c < g.Cg; c++)
                        for (int64_t kh = 0; kh < g.KH; kh++) {
                            int64_t ih = oh * g.s - g.p + kh * g.d;
                            if (ih < 0 || ih >= g.H) continue;
                            for (int64_t kw = 0; kw < g.KW; kw++) {
                                int64_t iw = ow * g.s - g.p + kw * g.d;
                                if (iw < 0 || iw >= g.W) continue;
                                s += (double)x[xat(&g, n, grp * g.Cg + c, ih, iw)] *
                                     w[((oc * g.Cg + c) * g.KH + kh) * g.KW + kw];
                            }
                        }
                    y[yat(&g, n, oc, oh, ow)] = (float)s;
                }
        }
    return CT_OK;
}

/* in: dy, w -> dx (shape of x = out) */
ct_status ct_k_conv2d_bwd_data_ref(ct_kargs *k) {
    conv_geo g = geo(k->node, k->out.shape, k->in[1].shape, k->in[0].shape);
    const float *dy = k->in[0].data, *w = k->in[1].data;
    float *dx = k->out.data;
    memset(dx, 0, ct_tensor_nbytes(&k->out));
    for (int64_t n = 0; n < g.N; n++)
        for (int64_t oc = 0; oc < g.OC; oc++) {
            int64_t grp = oc / g.OCg;
            for (int64_t oh = 0; oh < g.OH; oh++)
                for (int64_t ow = 0; ow < g.OW; ow++) {
                    float gy = dy[yat(&g, n, oc, oh, ow)];
                    for (int64_t c = 0; c < g.Cg; c++)
                        for (int64_t kh = 0; kh < g.KH; kh++) {
                            int64_t ih = oh * g.s - g.p + kh * g.d;
                            if (ih < 0 || ih >= g.H) continue;
                            for (int64_t kw = 0; kw < g.KW; kw++) {
                                int64_t iw = ow * g.s - g.p + kw * g.d;
                                if (iw < 0 || iw >= g.W) continue;
                                dx[xat(&g, n, grp * g.Cg + c, ih, iw)] +=
                                    gy * w[((oc * g.Cg + c) * g.KH + kh) * g.KW + kw];
                            }
                        }
                }
        }
    return CT_OK;
}

/* in: dy, x -> dw (shape of w = out) */
ct_status ct_k_conv2d_bwd_weight_ref(ct_kargs *k) {
    conv_geo g = geo(k->node, k->in[1].shape, k->out.shape, k->in[0].shape);
    const float *dy = k->in[0].data, *x = k->in[1].data;
    float *dw = k->out.data;
    for (int64_t oc = 0; oc < g.OC; oc++) {
        int64_t grp = oc / g.OCg;
        for (int64_t c = 0; c < g.Cg; c++)
            for (int64_t kh = 0; kh < g.KH; kh++)
                for (int64_t kw = 0; kw < g.KW; kw++) {
                    double s = 0;
                    for (int64_t n = 0; n < g.N; n++)
                        for (int64_t oh = 0; oh < g.OH; oh++) {
                            int64_t ih = oh * g.s - g.p + kh * g.d;
                            if (ih < 0 || ih >= g.H) continue;
                            for (int64_t ow = 0; ow < g.OW; ow++) {
                                int64_t iw = ow * g.s - g.p + kw * g.d;
                                if (iw < 0 || iw >= g.W) continue;
                                s += (double)dy[yat(&g, n, oc, oh, ow)] * x[xat(&g, n, grp * g.Cg + c, ih, iw)];
                            }
                        }
                    dw[((oc * g.Cg + c) * g.KH + kh) * g.KW + kw] = (float)s;
                }
    }
    return CT_OK;
}
