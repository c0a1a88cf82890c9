/* src/models/efficientnet.c - torchvision's EfficientNet B0..B4 (v1) with its
 * state_dict names: features.0 (stem Conv2dNormActivation: .0 conv, .1 bn),
 * features.{1..7}.{j}.block.{k} MBConv layers (expand 1x1 when the ratio is
 * not 1, depthwise kxk, squeeze-excitation .fc1/.fc2 with bias, project
 * 1x1), features.8 (1x1 head conv), classifier.1 (linear). */
#include <math.h>
#include <stdio.h>

#include "vision_internal.h"

/* torchvision's _make_divisible(v, 8): nearest multiple of 8, at least 8,
 * never more than 10% below v. */
static int64_t make_divisible(double v) {
    int64_t nv = (int64_t)(v + 4.0) / 8 * 8;
    if (nv < 8) nv = 8;
    if ((double)nv < 0.9 * v) nv += 8;
    return nv;
}

/* A 1x1 convolution with bias named "<pre>.<fc>" (cin -> cout), on the squeezed (N, C, 1, 1) map
 * ((N, 1, 1, C) channels last). */
static ct_status se_fc(ct_graph *g, ct_node x, const char *pre, const char *fc, int64_t cin, int64_t cout, int cl,
                       ct_node *out) {
    char nm[128];
    ct_node w, b;
    snprintf(nm, sizeof nm, "%s.%s", pre, fc);
    CT_TRY(ct_vis_conv_weight(g, nm, cout, cin, 1, &w));
    CT_TRY(ct_vis_param(g, nm, "bias", 1, (int64_t[]){cout}, CT_INIT_ZEROS, 0, &b));
    ct_conv2d_opts co;
    ct_conv2d_opts_default(&co);
    co.channels_last = cl;
    CT_TRY(ct_conv2d_ex(g, x, w, b, &co, out));
    return ct_node_set_name(g, *out, nm);
}

/* squeeze-excitation named pre (fc1, fc2): x * sigmoid(fc2(silu(fc1(avgpool(x))))); channels last the
 * squeezed map is (N, 1, 1, C), broadcast over H and W */
static ct_status squeeze_excite(ct_graph *g, ct_node x, const char *pre, int64_t squeeze, int cl, ct_node *out) {
    int64_t c = ct_mdl_channels(g, x, cl), n;
    int nd;
    int64_t s[CT_MAX_DIMS];
    CT_TRY(ct_node_shape(g, x, &nd, s));
    n = s[0];
    ct_node p;
    CT_TRY(ct_mdl_global_avgpool(g, x, cl, &p));
    CT_TRY(ct_reshape(g, p, 4, cl ? (int64_t[]){n, 1, 1, c} : (int64_t[]){n, c, 1, 1}, &p));
    CT_TRY(se_fc(g, p, pre, "fc1", c, squeeze, cl, &p));
    CT_TRY(ct_silu(g, p, &p));
    CT_TRY(se_fc(g, p, pre, "fc2", squeeze, c, cl, &p));
    CT_TRY(ct_sigmoid(g, p, &p));
    CT_TRY(ct_mul(g, x, p, out));
    return ct_node_set_name(g, *out, pre);
}

/* MBConv named pre ("features.s.j"); sd: its stochastic depth probability */
static ct_status mbconv(ct_graph *g, ct_node x, const char *pre, int expand, int k, int stride, int64_t cout,
                        float sd, int cl, ct_node *out) {
    int64_t cin = ct_mdl_channels(g, x, cl), ce = make_divisible((double)cin * expand);
    char c[112], b[112];
    int li = 0;
    ct_node y = x;
    if (ce != cin) {
        snprintf(c, sizeof c, "%s.block.%d.0", pre, li), snprintf(b, sizeof b, "%s.block.%d.1", pre, li);
        CT_TRY(ct_vis_conv_bn_ex(g, y, c, b, ce, 1, 1, 1, CT_ACT_SILU, cl, &y));
        li++;
    }
    snprintf(c, sizeof c, "%s.block.%d.0", pre, li), snprintf(b, sizeof b, "%s.block.%d.1", pre, li);
    CT_TRY(ct_vis_conv_bn_ex(g, y, c, b, ce, k, stride, (int)ce, CT_ACT_SILU, cl, &y));
    li++;
    snprintf(c, sizeof c, "%s.block.%d", pre, li++);
    CT_TRY(squeeze_excite(g, y, c, cin / 4 > 1 ? cin / 4 : 1, cl, &y));
    snprintf(c, sizeof c, "%s.block.%d.0", pre, li), snprintf(b, sizeof b, "%s.block.%d.1", pre, li);
    CT_TRY(ct_vis_conv_bn_ex(g, y, c, b, cout, 1, 1, 1, CT_ACT_COUNT, cl, &y));
    if (stride == 1 && cin == cout) {
        if (sd > 0) {
            CT_TRY(ct_drop_path(g, y, sd, &y));
            snprintf(c, sizeof c, "%s.stochastic_depth", pre);
            CT_TRY(ct_node_set_name(g, y, c));
        }
        CT_TRY(ct_add(g, y, x, &y));
    }
    *out = y;
    return ct_node_set_name(g, y, pre);
}

static ct_status efficientnet(ct_graph *g, ct_node x, const ct_vision_config *c, const ct_vis_arch *a,
                              ct_node *logits) {
    double width_mult = a->width_mult, depth_mult = a->depth_mult;
    /* expand ratio, kernel, stride, in, out, layers (torchvision's bneck_conf) */
    static const int k_conf[7][6] = {{1, 3, 1, 32, 16, 1},   {6, 3, 2, 16, 24, 2},   {6, 5, 2, 24, 40, 2},
                                     {6, 3, 2, 40, 80, 3},   {6, 5, 1, 80, 112, 3},  {6, 5, 2, 112, 192, 4},
                                     {6, 3, 1, 192, 320, 1}};
    double wm = width_mult / c->width_div;
    int layers[7], total = 0;
    for (int s = 0; s < 7; s++) {
        layers[s] = (int)ceil(k_conf[s][5] * depth_mult);
        if (c->max_blocks > 0 && layers[s] > c->max_blocks) layers[s] = c->max_blocks;
        total += layers[s];
    }
    const int cl = c->channels_last;
    ct_node y;
    if (cl) CT_TRY(ct_mdl_to_nhwc(g, x, &x));
    CT_TRY(ct_vis_conv_bn_ex(g, x, "features.0.0", "features.0.1", make_divisible(k_conf[0][3] * wm), 3, 2, 1,
                             CT_ACT_SILU, cl, &y));
    char pre[48];
    int id = 0;
    for (int s = 0; s < 7; s++)
        for (int j = 0; j < layers[s]; j++, id++) {
            snprintf(pre, sizeof pre, "features.%d.%d", s + 1, j);
            float sd = (float)((double)c->drop_path * id / total);
            CT_TRY(mbconv(g, y, pre, k_conf[s][0], k_conf[s][1], j ? 1 : k_conf[s][2], make_divisible(k_conf[s][4] * wm),
                          sd, cl, &y));
        }
    int64_t last = 4 * make_divisible(k_conf[6][4] * wm);
    CT_TRY(ct_vis_conv_bn_ex(g, y, "features.8.0", "features.8.1", last, 1, 1, 1, CT_ACT_SILU, cl, &y));
    CT_TRY(ct_mdl_global_avgpool(g, y, cl, &y));
    CT_TRY(ct_node_set_name(g, y, "avgpool"));
    if (c->dropout > 0) {
        CT_TRY(ct_dropout(g, y, c->dropout, &y));
        CT_TRY(ct_node_set_name(g, y, "classifier.0"));
    }
    ct_node w, b;
    /* U(+-1/sqrt(num_classes)) weight, zero bias (torchvision's EfficientNet init) */
    CT_TRY(ct_param(g, "classifier.1.weight", 2, (int64_t[]){c->num_classes, last}, CT_INIT_KAIMING_UNIFORM,
                    c->num_classes, &w));
    CT_TRY(ct_param(g, "classifier.1.bias", 1, (int64_t[]){c->num_classes}, CT_INIT_ZEROS, 0, &b));
    CT_TRY(ct_linear(g, y, w, b, logits));
    return ct_node_set_name(g, *logits, "classifier.1");
}

/* ---- its rows of the model table: width and depth multipliers, classifier dropout ------------ */

#define EFFICIENTNET_DEF_(b, wm, dm, drop)                                                                           \
    const ct_model_def ct_model_def_efficientnet_##b = {                                                          \
        .build_default = ct_vis_build_default,                                                                    \
        .build = ct_vis_build_recipe,                                                                             \
        .config = &(const ct_vis_arch){                                                                           \
            .build = efficientnet, .width_mult = wm, .depth_mult = dm, .dropout = drop, .drop_path = 0.2f},       \
        .vision = 1};
EFFICIENTNET_DEF_(b0, 1.0, 1.0, 0.2f)
EFFICIENTNET_DEF_(b1, 1.0, 1.1, 0.2f)
EFFICIENTNET_DEF_(b2, 1.1, 1.2, 0.3f)
EFFICIENTNET_DEF_(b3, 1.2, 1.4, 0.3f)
EFFICIENTNET_DEF_(b4, 1.4, 1.8, 0.4f)
