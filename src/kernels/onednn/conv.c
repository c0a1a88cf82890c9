/* src/kernels/onednn/conv.c - 2-D convolution forward, backward data and
 * backward weights on oneDNN's convolution primitives.
 *
 * Activations are NCHW, or NHWC with channels_last (ia[4]: handed to oneDNN
 * as they are, no reorder), weights OIHW; with groups the weights are described
 * as (G, OC/G, C/G, KH, KW), the same memory. PyTorch's dilation d is
 * oneDNN's d - 1. The right/bottom padding is derived from the output size
 * (it is smaller than the left padding when the stride drops a remainder).
 *
 * Layout: "plain" hands oneDNN the NCHW/OIHW tensors as they are; "blocked"
 * lets oneDNN pick its layouts (format_tag_any, typically nChw8c / OIhw8i8o
 * on AVX2) and reorders the inputs in and the output back on every call,
 * through buffers owned by the node (allocated on the first call). See
 * conv_layout() for the choice.
 *
 * Dtypes are the tensors' own: f32, or bf16 (the plan's native BF16 path),
 * with an f32 weight gradient from bf16 dy and x (written straight into the
 * FP32 gradient arena). The forward descriptor that hints the backward ones
 * is described in the backward's compute dtype (its weights' or x's).
 *
 * Backward data as a forward convolution: with stride 1, dx is the forward
 * convolution of dy with the weights transposed (in and out channels) and
 * flipped in space, padded (KH - 1) * d - p. oneDNN 2.6 runs its forward on
 * brgemm kernels (brgconv) on AVX-512 but its backward data on the older jit
 * ones; see bwd_as_fwd() for when this form is taken. The flipped weights are
 * written by the node (flip_weights, before the primitives) into its scratch
 * region, then reordered like any weights. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/onednn/onednn.h"

typedef enum { CONV_FWD = 0, CONV_BWD_DATA, CONV_BWD_WEIGHT } conv_kind;

typedef struct {
    int64_t N, C, H, W, OC, KH, KW, OH, OW, s, p, d, G;
} conv_geo;

/* Measured on the 2-core AVX2 target (batch 128, 3x3, pad 1; best of
 * several runs, ms; 2 threads / 1 thread; plain NCHW vs blocked including
 * its reorders):
 *   1->32 ch 28x28   fwd 2.1 vs 2.1 / 3.1 vs 4.0     bwd data 2.3 vs 6.2 / 3.6 vs 9.7
 *                    bwd weight 3.7 vs 5.6 / 3.7 vs 9.4
 *   32->64 ch 14x14  fwd 8.9 vs 6.6 / 15.9 vs 13.0   bwd data 9.7 vs 6.5 / 18.2 vs 14.0
 *                    bwd weight 8.6 vs 8.4 / 16.4 vs 16.0
 * Blocked wins from 3 input channels on (3->16, 8->8, 16->32, 64->64 too;
 * depthwise 32 ch: 3x faster); with 1-2 input channels the blocked
 * activations are padded to 8 channels and plain (im2col + GEMM) wins. */
static ct_dnnl_layout conv_layout(conv_kind kind, const conv_geo *g) {
    (void)kind;
    return g->C >= 3 ? CT_DNNL_LAYOUT_BLOCKED : CT_DNNL_LAYOUT_PLAIN;
}

/* CT_ONEDNN_BWD_DATA=fwd|bwd: backward data always as a forward convolution
 * where the geometry allows, or never (tests, benchmarks); unset or auto:
 * bwd_as_fwd() decides (ct_context_create rejects other values). */
static int bwd_data_override(void) { /* 1 fwd, 0 bwd, -1 the rule */
    const char *e = getenv("CT_ONEDNN_BWD_DATA");
    if (!e) return -1;
    if (!strcmp(e, "fwd")) return 1;
    if (!strcmp(e, "bwd")) return 0;
    return -1;
}

/* The flipped weights of a backward data run as a forward convolution:
 * wf[g][c][o][kh][kw] = w[g][o][c][KH-1-kh][KW-1-kw], i.e. each o-c pair's
 * KH x KW block reversed into the c-o place; w is the node's (OC, C/G, KH, KW)
 * input 1, G its groups (ia[3]). */
static ct_status flip_weights(ct_dnnl *c, const ct_kargs *k, char *region) {
    const int64_t *ws = k->in[1].shape, G = k->node->ia[3] > 1 ? k->node->ia[3] : 1;
    const int64_t O = ws[0] / G, I = ws[1], S = ws[2] * ws[3];
    const size_t es = ct_dtype_size(k->in[1].dtype);
    const char *w = k->in[1].data;
    char *wf = region + c->pre_off;
#pragma omp parallel for schedule(static) num_threads(c->nthreads)
    for (int64_t gi = 0; gi < G * I; gi++) {
        const int64_t g = gi / I, i = gi % I;
        for (int64_t o = 0; o < O; o++) {
            const char *src = w + (size_t)(((g * O + o) * I + i) * S) * es;
            char *dst = wf + (size_t)(((g * I + i) * O + o) * S) * es;
            if (es == 4)
                for (int64_t t = 0; t < S; t++) memcpy(dst + (size_t)t * 4, src + (size_t)(S - 1 - t) * 4, 4);
            else
                for (int64_t t = 0; t < S; t++) memcpy(dst + (size_t)t * 2, src + (size_t)(S - 1 - t) * 2, 2);
        }
    }
    return CT_OK;
}

/* Whether a backward data convolution runs as the forward one (fpd, already
 * created) rather than as oneDNN's backward data (bpd): where the forward is
 * a brgemm kernel and the backward is not, for kernels larger than 1x1 and
 * at least 8x8 outputs. Measured on an Ice Lake Xeon (AVX-512, 2 threads,
 * nhwc, ms per call, oneDNN's backward data vs the forward form, flip and
 * weight reorder not included):
 *   ResNet-18 at batch 128, 3x3: 64 ch 32x32 57.5 vs 33.1, 128 ch 16x16
 *     51.6 vs 32.5, 256 ch 8x8 55.1 vs 36.2, but 512 ch 4x4 40.0 vs 51.3
 *     (the same shape's forward);
 *   ResNet-50 at batch 32: 3x3 64 ch 56x56 45.7 vs 28.4, 128 ch 28x28 43.0
 *     vs 27.0, 256 ch 14x14 44.1 vs 35.1; 1x1 no better (256 -> 1024 ch
 *     14x14 13.4 vs 16.3, 1024 -> 256 13.2 vs 18.8, 64 -> 256 56x56 17.4 vs
 *     16.8): oneDNN's 1x1 backward data is a good kernel already.
 * Without AVX-512 oneDNN 2.6 has no brgemm convolution, so nothing changes
 * there; where its backward data is a brgemm kernel too (AMX), neither. */
static int bwd_as_fwd(const conv_geo *g, const_dnnl_primitive_desc_t fpd, const_dnnl_primitive_desc_t bpd) {
    if (g->KH * g->KW < 2 || g->H * g->W < 64) return 0;
    return ct_dnnl_impl_brgemm(fpd) == 1 && ct_dnnl_impl_brgemm(bpd) == 0;
}

/* The forward convolution that computes dx = conv(dy, flipped weights) for a
 * stride-1 backward data (ay, ax: dy's and dx's descriptors as the backward
 * has them; wf: the flipped weights' dims), into *out when it is taken
 * (CT_ONEDNN_BWD_DATA, else bwd_as_fwd()); else *out stays NULL. */
static ct_status bwd_data_fwd_pd(ct_dnnl *c, const conv_geo *g, const dnnl_memory_desc_t *ay,
                                 const dnnl_memory_desc_t *ax, int wn, const int64_t *wf, ct_dtype wdt,
                                 const dnnl_dims_t dil, const dnnl_dims_t pr, const_dnnl_primitive_desc_t bpd,
                                 dnnl_primitive_desc_t *out) {
    *out = NULL;
    const int force = bwd_data_override();
    const int64_t eh = (g->KH - 1) * g->d, ew = (g->KW - 1) * g->d; /* the kernel's extent - 1 */
    if (force == 0 || g->s != 1 || eh < g->p || ew < g->p || eh < pr[0] || ew < pr[1]) return CT_OK;
    dnnl_memory_desc_t w;
    CT_TRY(ct_dnnl_md_tag(c, &w, wn, wf, dnnl_format_tag_any, wdt));
    dnnl_dims_t one = {1, 1}, pl = {eh - g->p, ew - g->p}, fpr = {eh - pr[0], ew - pr[1]};
    dnnl_convolution_desc_t d;
    if (dnnl_dilated_convolution_forward_desc_init(&d, dnnl_forward_training, dnnl_convolution_direct, ay, &w, NULL, ax,
                                                   one, dil, pl, fpr) != dnnl_success)
        return CT_OK;
    dnnl_primitive_desc_t pd;
    if (dnnl_primitive_desc_create(&pd, &d, c->attr, c->engine, NULL) != dnnl_success) return CT_OK;
    if (force < 0 && !bwd_as_fwd(g, pd, bpd)) {
        dnnl_primitive_desc_destroy(pd);
        return CT_OK;
    }
    *out = pd;
    return CT_OK;
}

static ct_status build_conv(ct_kargs *k, ct_dnnl *c, conv_kind kind) {
    const ct_node_def *nd = k->node;
    /* x, w, y shapes: forward (x, w) -> y; bwd data (dy, w) -> dx; bwd weight (dy, x) -> dw */
    const ct_tensor *xt, *wt, *yt;
    switch (kind) {
    case CONV_FWD: xt = &k->in[0]; wt = &k->in[1]; yt = &k->out; break;
    case CONV_BWD_DATA: xt = &k->out; wt = &k->in[1]; yt = &k->in[0]; break;
    default: xt = &k->in[1]; wt = &k->out; yt = &k->in[0]; break;
    }
    const int64_t *xs = xt->shape, *ws = wt->shape, *ys = yt->shape;
    /* the tensors' dtypes, and the dtype the (hint) forward computes in */
    const ct_dtype xdt = xt->dtype, wdt = wt->dtype, ydt = yt->dtype, cdt = k->in[kind == CONV_FWD ? 0 : 1].dtype;
    const int cl = nd->ia[4] != 0; /* channels last: x (N, H, W, C), y (N, OH, OW, OC) */
    conv_geo g = {xs[0], cl ? xs[3] : xs[1], cl ? xs[1] : xs[2], cl ? xs[2] : xs[3], ws[0], ws[2], ws[3],
                  cl ? ys[1] : ys[2], cl ? ys[2] : ys[3], nd->ia[0], nd->ia[1], nd->ia[2], nd->ia[3]};
    int has_bias = kind == CONV_FWD && nd->n_in > 2;
    const ct_dtype bdt = has_bias ? k->in[2].dtype : CT_F32;
    char s1[96], s2[96], s3[96], s4[64];
    ct_dnnl_describe(c, ": x %s, weight %s, y %s (stride %lld, padding %lld, dilation %lld, groups %lld%s)%s",
                     ct_shape_str(4, xs, s1, sizeof s1), ct_shape_str(4, ws, s2, sizeof s2),
                     ct_shape_str(4, ys, s3, sizeof s3), (long long)g.s, (long long)g.p, (long long)g.d,
                     (long long)g.G, has_bias ? ", bias" : "",
                     ct_dnnl_dtypes_str(2, (ct_dtype[]){k->in[0].dtype, k->in[1].dtype}, k->out.dtype, s4, sizeof s4));
    if (!g.N || !g.C || !g.OC || !g.H || !g.W || !g.OH || !g.OW || g.G < 1 || g.C % g.G || g.OC % g.G)
        return ct_set_error(c->ctx, CT_E_UNSUPPORTED, "oneDNN %s: empty or inconsistent shapes", c->what);

    ct_dnnl_layout layout = ct_dnnl_layout_override();
    if (layout == CT_DNNL_LAYOUT_AUTO) layout = cl ? CT_DNNL_LAYOUT_PLAIN : conv_layout(kind, &g);
    int blocked = layout == CT_DNNL_LAYOUT_BLOCKED;

    int64_t xd[4] = {g.N, g.C, g.H, g.W}, yd[4] = {g.N, g.OC, g.OH, g.OW}, bd[1] = {g.OC};
    int64_t wd[5] = {g.G, g.OC / g.G, g.C / g.G, g.KH, g.KW};
    int wn = g.G > 1 ? 5 : 4;
    const int64_t *wdims = g.G > 1 ? wd : wd + 1;
    dnnl_format_tag_t wtag = g.G > 1 ? dnnl_goihw : dnnl_oihw;
    /* channels last: the activations as they are (nhwc, no reorder), the weights as oneDNN wants them (a
       small reorder per call) */
    const dnnl_format_tag_t utag = cl ? dnnl_nhwc : dnnl_nchw;
    dnnl_format_tag_t atag = blocked ? dnnl_format_tag_any : utag;
    dnnl_format_tag_t awtag = blocked || cl ? dnnl_format_tag_any : wtag;
    dnnl_memory_desc_t ux, uw, uy, ub, ax, aw, ay, hx, hw, hy;
    CT_TRY(ct_dnnl_md_tag(c, &ux, 4, xd, utag, xdt));
    CT_TRY(ct_dnnl_md_tag(c, &uw, wn, wdims, wtag, wdt));
    CT_TRY(ct_dnnl_md_tag(c, &uy, 4, yd, utag, ydt));
    CT_TRY(ct_dnnl_md_tag(c, &ub, 1, bd, dnnl_x, bdt));
    CT_TRY(ct_dnnl_md_tag(c, &ax, 4, xd, atag, xdt));
    CT_TRY(ct_dnnl_md_tag(c, &aw, wn, wdims, awtag, wdt));
    CT_TRY(ct_dnnl_md_tag(c, &ay, 4, yd, atag, ydt));
    /* the forward: the node itself, or the hint of a backward one in its compute dtype */
    CT_TRY(ct_dnnl_md_tag(c, &hx, 4, xd, atag, kind == CONV_FWD ? xdt : cdt));
    CT_TRY(ct_dnnl_md_tag(c, &hw, wn, wdims, awtag, kind == CONV_FWD ? wdt : cdt));
    CT_TRY(ct_dnnl_md_tag(c, &hy, 4, yd, atag, kind == CONV_FWD ? ydt : cdt));

    /* spatial parameters (dnnl_dims_t: oneDNN's array type) */
    dnnl_dims_t strides = {g.s, g.s}, dil = {g.d - 1, g.d - 1}, pl = {g.p, g.p};
    dnnl_dims_t pr = {(g.OH - 1) * g.s + (g.KH - 1) * g.d + 1 - g.H - g.p,
                     (g.OW - 1) * g.s + (g.KW - 1) * g.d + 1 - g.W - g.p};

    /* The forward primitive descriptor (also the hint for the backward ones). */
    dnnl_convolution_desc_t fd, bdesc;
    CT_DNNL_TRY(c,
                dnnl_dilated_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct, &hx,
                                                           &hw, has_bias ? &ub : NULL, &hy, strides, dil, pl, pr),
                "describing the convolution");
    dnnl_primitive_desc_t fpd, pd = NULL;
    CT_TRY(ct_dnnl_pd(c, &fpd, &fd, NULL, "creating the forward convolution"));
    ct_status s = CT_OK;
    dnnl_status_t st = dnnl_success;
    if (kind == CONV_BWD_DATA) {
        st = dnnl_dilated_convolution_backward_data_desc_init(&bdesc, dnnl_convolution_direct, &ax, &aw, &ay, strides,
                                                              dil, pl, pr);
        if (st == dnnl_success) s = ct_dnnl_pd(c, &pd, &bdesc, fpd, "creating the backward-data convolution");
    } else if (kind == CONV_BWD_WEIGHT) {
        st = dnnl_dilated_convolution_backward_weights_desc_init(&bdesc, dnnl_convolution_direct, &ax, &aw, NULL, &ay,
                                                                 strides, dil, pl, pr);
        if (st == dnnl_success) s = ct_dnnl_pd(c, &pd, &bdesc, fpd, "creating the backward-weights convolution");
    }
    if (st != dnnl_success) s = ct_dnnl_fail(c, st, "describing the backward convolution");
    dnnl_primitive_desc_t ffpd = NULL; /* backward data as a forward convolution, where taken */
    int64_t wfd[5] = {g.G, g.C / g.G, g.OC / g.G, g.KH, g.KW}; /* its weights: in <-> out channels */
    const int64_t *wfdims = g.G > 1 ? wfd : wfd + 1;
    if (s == CT_OK && kind == CONV_BWD_DATA) s = bwd_data_fwd_pd(c, &g, &ay, &ax, wn, wfdims, wdt, dil, pr, pd, &ffpd);
    if (ffpd) {
        dnnl_memory_desc_t wf;
        dnnl_memory_t m0, m1, m2, mwf;
        s = ct_dnnl_md_tag(c, &wf, wn, wfdims, wtag, wdt);
        if (s == CT_OK) s = ct_dnnl_input(c, &uy, 0, dnnl_primitive_desc_query_md(ffpd, dnnl_query_src_md, 0), &m0);
        if (s == CT_OK) s = ct_dnnl_buffer(c, &wf, &mwf, &c->pre_off);
        if (s == CT_OK) s = ct_dnnl_convert(c, mwf, dnnl_primitive_desc_query_md(ffpd, dnnl_query_weights_md, 0), &m1);
        if (s == CT_OK) s = ct_dnnl_output(c, &ux, dnnl_primitive_desc_query_md(ffpd, dnnl_query_dst_md, 0), &m2);
        if (s == CT_OK) {
            c->pre = flip_weights;
            dnnl_exec_arg_t fargs[3] = {{DNNL_ARG_SRC, m0}, {DNNL_ARG_WEIGHTS, m1}, {DNNL_ARG_DST, m2}};
            s = ct_dnnl_add(c, ffpd, 3, fargs);
        }
        if (s == CT_OK) /* for the profiler and ct_plan_kernel_impl */
            snprintf(c->impl + strlen(c->impl), sizeof c->impl - strlen(c->impl), " as a forward convolution");
        dnnl_primitive_desc_destroy(ffpd);
        if (pd) dnnl_primitive_desc_destroy(pd);
        dnnl_primitive_desc_destroy(fpd);
        return s;
    }
    const_dnnl_primitive_desc_t use = kind == CONV_FWD ? fpd : pd;
    dnnl_memory_t m0 = NULL, m1 = NULL, m2 = NULL, mb = NULL;
    dnnl_exec_arg_t args[4];
    int nargs = 3;
    if (s == CT_OK) {
        switch (kind) {
        case CONV_FWD:
            s = ct_dnnl_input(c, &ux, 0, dnnl_primitive_desc_query_md(use, dnnl_query_src_md, 0), &m0);
            if (s == CT_OK) s = ct_dnnl_input(c, &uw, 1, dnnl_primitive_desc_query_md(use, dnnl_query_weights_md, 0), &m1);
            if (s == CT_OK && has_bias) s = ct_dnnl_user(c, &ub, 2, &mb);
            if (s == CT_OK) s = ct_dnnl_output(c, &uy, dnnl_primitive_desc_query_md(use, dnnl_query_dst_md, 0), &m2);
            args[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, m0};
            args[1] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, m1};
            args[2] = (dnnl_exec_arg_t){DNNL_ARG_DST, m2};
            if (has_bias) args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, mb};
            break;
        case CONV_BWD_DATA:
            s = ct_dnnl_input(c, &uy, 0, dnnl_primitive_desc_query_md(use, dnnl_query_diff_dst_md, 0), &m0);
            if (s == CT_OK) s = ct_dnnl_input(c, &uw, 1, dnnl_primitive_desc_query_md(use, dnnl_query_weights_md, 0), &m1);
            if (s == CT_OK) s = ct_dnnl_output(c, &ux, dnnl_primitive_desc_query_md(use, dnnl_query_diff_src_md, 0), &m2);
            args[0] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, m0};
            args[1] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, m1};
            args[2] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_SRC, m2};
            break;
        default:
            s = ct_dnnl_input(c, &uy, 0, dnnl_primitive_desc_query_md(use, dnnl_query_diff_dst_md, 0), &m0);
            if (s == CT_OK) s = ct_dnnl_input(c, &ux, 1, dnnl_primitive_desc_query_md(use, dnnl_query_src_md, 0), &m1);
            if (s == CT_OK)
                s = ct_dnnl_output(c, &uw, dnnl_primitive_desc_query_md(use, dnnl_query_diff_weights_md, 0), &m2);
            args[0] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, m0};
            args[1] = (dnnl_exec_arg_t){DNNL_ARG_SRC, m1};
            args[2] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_WEIGHTS, m2};
            break;
        }
    }
    if (s == CT_OK) s = ct_dnnl_add(c, use, nargs, args);
    if (pd) dnnl_primitive_desc_destroy(pd);
    dnnl_primitive_desc_destroy(fpd);
    return s;
}

static ct_status build_fwd(ct_kargs *k, ct_dnnl *c) { return build_conv(k, c, CONV_FWD); }
static ct_status build_bwd_data(ct_kargs *k, ct_dnnl *c) { return build_conv(k, c, CONV_BWD_DATA); }
static ct_status build_bwd_weight(ct_kargs *k, ct_dnnl *c) { return build_conv(k, c, CONV_BWD_WEIGHT); }

ct_status ct_k_conv2d_onednn(ct_kargs *k) { return ct_dnnl_run(k, build_fwd); }
ct_status ct_k_conv2d_bwd_data_onednn(ct_kargs *k) { return ct_dnnl_run(k, build_bwd_data); }
ct_status ct_k_conv2d_bwd_weight_onednn(ct_kargs *k) { return ct_dnnl_run(k, build_bwd_weight); }
