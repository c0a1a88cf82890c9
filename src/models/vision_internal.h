/* src/models/vision_internal.h - what the torchvision-style builders share
 * (vision_common.c): the architecture record their table rows carry, the
 * argument checks and the conv-batchnorm helpers. resnet.c, efficientnet.c
 * and swin.c each define their rows' ct_model_def; vision.c is the public
 * API by name (ct_vision_config_default, ct_model_vision). Internal. */
#ifndef CT_MODELS_VISION_INTERNAL_H
#define CT_MODELS_VISION_INTERNAL_H

#include "core/ir_types.h" /* CT_NAME_LEN: the longest node name */
#include "model_def.h"

/* A torchvision architecture: a model table row's default configuration. */
typedef struct ct_vis_arch ct_vis_arch;
struct ct_vis_arch {
    /* builds it on x (N, C, H, W) FP32 with c checked (ct_vis_build) */
    ct_status (*build)(ct_graph *g, ct_node x, const ct_vision_config *c, const ct_vis_arch *a, ct_node *logits);
    int resnet_depth;          /* resnet: 18, 34, 50, 101; else 0       */
    double width_mult, depth_mult; /* efficientnet                      */
    float dropout;             /* the classifier dropout (efficientnet) */
    int64_t swin_embed;        /* > 0: swin                             */
    int depths[4], heads[4];   /* swin                                  */
    float drop_path;           /* the default                           */
};

/* The defaults of the vision row m (full size, 1000 classes). */
void ct_vis_config(const ct_model_row *m, ct_vision_config *out);
/* Checks c against the architecture and the input x, then builds. */
ct_status ct_vis_build(ct_graph *g, ct_node x, const ct_vision_config *c, const ct_vis_arch *a, ct_node *logits);
/* The ct_model_def functions of every vision row: by name on (batch, 3, 224,
 * 224); and with the recipe's keys (cifar_stem, num_classes, width_div, ...). */
ct_status ct_vis_build_default(ct_graph *g, const ct_model_row *m, const char *preset, int64_t batch,
                               int64_t n_classes, ct_node *logits);
ct_status ct_vis_build_recipe(ct_graph *g, const ct_model_row *m, ct_node x, const ct_recipe *r, int64_t n_classes,
                              ct_node *logits);

/* conv (no bias, N(0, sqrt(2/fan_out)) weight "<conv>.weight") -> batchnorm
 * ("<bn>.weight/.bias/.running_mean/.running_var", momentum 0.1, eps 1e-5)
 * -> act (CT_ACT_COUNT: none). */
ct_status ct_vis_conv_bn(ct_graph *g, ct_node x, const char *conv, const char *bn, int64_t cout, int k, int stride,
                         int groups, ct_activation act, ct_node *out);
/* The same with cl = 1 on (N, H, W, C) x (channels last, model_def.h). */
ct_status ct_vis_conv_bn_ex(ct_graph *g, ct_node x, const char *conv, const char *bn, int64_t cout, int k, int stride,
                            int groups, ct_activation act, int cl, ct_node *out);
/* "<conv>.weight" (cout, cin_per_group, k, k) ~ N(0, sqrt(2 / (cout k k))):
 * torchvision's kaiming_normal_(mode="fan_out"). */
ct_status ct_vis_conv_weight(ct_graph *g, const char *conv, int64_t cout, int64_t cin_g, int k, ct_node *out);
/* A parameter named "<prefix>.<leaf>" (n dims). */
ct_status ct_vis_param(ct_graph *g, const char *prefix, const char *leaf, int nd, const int64_t *shape, ct_init init,
                       int64_t fan_in, ct_node *out);
/* Channels of node x (dim 1). */
int64_t ct_vis_channels(ct_graph *g, ct_node x);

#endif
