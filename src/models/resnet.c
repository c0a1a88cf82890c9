/* src/models/resnet.c - torchvision's ResNet (v1.5: the stride on the 3x3 of
 * the bottleneck) with its state_dict names: conv1, bn1, (maxpool),
 * layer{1..4}.{i}.conv{1,2[,3]} / bn{...} / downsample.{0,1}, fc. */
#include <math.h>
#include <stdio.h>

#include "vision_internal.h"

/* BasicBlock (expansion 1) or Bottleneck (expansion 4) named `pre`. */
static ct_status block(ct_graph *g, ct_node x, const char *pre, int bottleneck, int64_t planes, int stride, int cl,
                       ct_node *out) {
    char c[96], b[96];
    int64_t cin = ct_mdl_channels(g, x, cl), cout = bottleneck ? planes * 4 : planes;
    ct_node y, idn = x;
    if (bottleneck) {
        snprintf(c, sizeof c, "%s.conv1", pre), snprintf(b, sizeof b, "%s.bn1", pre);
        CT_TRY(ct_vis_conv_bn_ex(g, x, c, b, planes, 1, 1, 1, CT_ACT_RELU, cl, &y));
        snprintf(c, sizeof c, "%s.conv2", pre), snprintf(b, sizeof b, "%s.bn2", pre);
        CT_TRY(ct_vis_conv_bn_ex(g, y, c, b, planes, 3, stride, 1, CT_ACT_RELU, cl, &y));
        snprintf(c, sizeof c, "%s.conv3", pre), snprintf(b, sizeof b, "%s.bn3", pre);
        CT_TRY(ct_vis_conv_bn_ex(g, y, c, b, cout, 1, 1, 1, CT_ACT_COUNT, cl, &y));
    } else {
        snprintf(c, sizeof c, "%s.conv1", pre), snprintf(b, sizeof b, "%s.bn1", pre);
        CT_TRY(ct_vis_conv_bn_ex(g, x, c, b, planes, 3, stride, 1, CT_ACT_RELU, cl, &y));
        snprintf(c, sizeof c, "%s.conv2", pre), snprintf(b, sizeof b, "%s.bn2", pre);
        CT_TRY(ct_vis_conv_bn_ex(g, y, c, b, cout, 3, 1, 1, CT_ACT_COUNT, cl, &y));
    }
    if (stride != 1 || cin != cout) {
        snprintf(c, sizeof c, "%s.downsample.0", pre), snprintf(b, sizeof b, "%s.downsample.1", pre);
        CT_TRY(ct_vis_conv_bn_ex(g, x, c, b, cout, 1, stride, 1, CT_ACT_COUNT, cl, &idn));
    }
    CT_TRY(ct_add(g, y, idn, &y));
    CT_TRY(ct_relu(g, y, out));
    return ct_node_set_name(g, *out, pre);
}

static ct_status resnet(ct_graph *g, ct_node x, const ct_vision_config *c, const ct_vis_arch *a, ct_node *logits) {
    int depth = a->resnet_depth;
    static const int k_blocks[4][4] = {{2, 2, 2, 2}, {3, 4, 6, 3}, {3, 4, 6, 3}, {3, 4, 23, 3}};
    int v = depth == 18 ? 0 : depth == 34 ? 1 : depth == 50 ? 2 : 3, bottleneck = depth >= 50;
    int64_t div = c->width_div;
    const int cl = c->channels_last;
    ct_node y;
    if (cl) CT_TRY(ct_mdl_to_nhwc(g, x, &x));
    if (c->cifar_stem) CT_TRY(ct_vis_conv_bn_ex(g, x, "conv1", "bn1", 64 / div, 3, 1, 1, CT_ACT_RELU, cl, &y));
    else {
        CT_TRY(ct_vis_conv_bn_ex(g, x, "conv1", "bn1", 64 / div, 7, 2, 1, CT_ACT_RELU, cl, &y));
        ct_pool2d_opts po;
        ct_pool2d_opts_default(&po, 3);
        po.stride_h = po.stride_w = 2;
        po.pad_h = po.pad_w = 1;
        po.channels_last = cl;
        CT_TRY(ct_maxpool2d_ex(g, y, &po, &y));
        CT_TRY(ct_node_set_name(g, y, "maxpool"));
    }
    char pre[48];
    for (int s = 0; s < 4; s++) {
        int n = k_blocks[v][s];
        if (c->max_blocks > 0 && n > c->max_blocks) n = c->max_blocks;
        for (int i = 0; i < n; i++) {
            snprintf(pre, sizeof pre, "layer%d.%d", s + 1, i);
            CT_TRY(ct_graph_mark_block(g, y)); /* each residual block, and the head, a block: pipeline cuts */
            CT_TRY(block(g, y, pre, bottleneck, (64 << s) / div, i == 0 && s > 0 ? 2 : 1, cl, &y));
        }
    }
    CT_TRY(ct_graph_mark_block(g, y));
    CT_TRY(ct_mdl_global_avgpool(g, y, cl, &y));
    CT_TRY(ct_node_set_name(g, y, "avgpool"));
    int64_t f = ct_vis_channels(g, y);
    ct_node w, b;
    CT_TRY(ct_param(g, "fc.weight", 2, (int64_t[]){c->num_classes, f}, CT_INIT_KAIMING_UNIFORM, f, &w));
    CT_TRY(ct_param(g, "fc.bias", 1, (int64_t[]){c->num_classes}, CT_INIT_KAIMING_UNIFORM, f, &b));
    CT_TRY(ct_linear(g, y, w, b, logits));
    return ct_node_set_name(g, *logits, "fc");
}

/* ---- its rows of the model table ------------------------------------------------------------- */

#define RESNET_DEF_(depth)                                                                                         \
    const ct_model_def ct_model_def_resnet##depth = {.build_default = ct_vis_build_default,                      \
                                                     .build = ct_vis_build_recipe,                                \
                                                     .config = &(const ct_vis_arch){.build = resnet,              \
                                                                                    .resnet_depth = depth,        \
                                                                                    .width_mult = 1,              \
                                                                                    .depth_mult = 1},             \
                                                     .vision = 1};
RESNET_DEF_(18)
RESNET_DEF_(34)
RESNET_DEF_(50)
RESNET_DEF_(101)
