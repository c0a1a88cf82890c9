/* src/models/vision_internal.h - helpers shared by the torchvision-style
 * builders (vision.c, resnet.c, efficientnet.c). Internal. */
#ifndef CT_MODELS_VISION_INTERNAL_H
#define CT_MODELS_VISION_INTERNAL_H

#include "core/internal.h"
#include "core/ir_types.h" /* CT_NAME_LEN: the longest node name */
#include "ctrain/models.h"

/* conv (no bias, N(0, sqrt(2/fan_out)) weight "<conv>.weight") -> batchnorm
 * ("<bn>.weight/.bias/.running_mean/.running_var", momentum 0.1, eps 1e-5)
 * -> act (CT_ACT_COUNT: none). */
ct_status ct_vis_conv_bn(ct_graph *g, ct_node x, const char *conv, const char *bn, int64_t cout, int k, int stride,
                         int groups, ct_activation act, ct_node *out);
/* "<conv>.weight" (cout, cin_per_group, k, k) ~ N(0, sqrt(2 / (cout k k))):
 * torchvision's kaiming_normal_(mode="fan_out"). */
ct_status ct_vis_conv_weight(ct_graph *g, const char *conv, int64_t cout, int64_t cin_g, int k, ct_node *out);
/* A parameter named "<prefix>.<leaf>" (n dims). */
ct_status ct_vis_param(ct_graph *g, const char *prefix, const char *leaf, int nd, const int64_t *shape, ct_init init,
                       int64_t fan_in, ct_node *out);
/* Channels of node x (dim 1). */
int64_t ct_vis_channels(ct_graph *g, ct_node x);

ct_status ct_model_resnet(ct_graph *g, ct_node x, const ct_vision_config *c, int depth, ct_node *logits);
ct_status ct_model_efficientnet(ct_graph *g, ct_node x, const ct_vision_config *c, double width_mult,
                                double depth_mult, ct_node *logits);

ct_status ct_model_swin(ct_graph *g, ct_node x, const ct_vision_config *c, int64_t embed, const int *depths,
                        const int *heads, ct_node *logits);

#endif
