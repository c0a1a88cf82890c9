/* src/models/vision_common.c - what the torchvision-style builders
 * (resnet.c, efficientnet.c, swin.c) share: their rows' ct_model_def
 * functions (by name, from a recipe), the argument checks, the
 * conv-batchnorm helper and parameter naming. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "vision_internal.h"

void ct_vis_config(const ct_model_row *m, ct_vision_config *out) {
    const ct_vis_arch *a = m->def->config;
    memset(out, 0, sizeof *out);
    snprintf(out->arch, sizeof out->arch, "%s", m->name);
    out->num_classes = 1000;
    out->width_div = 1;
    out->drop_path = a->drop_path;
    out->dropout = a->dropout;
}

ct_status ct_vis_build(ct_graph *g, ct_node x, const ct_vision_config *c, const ct_vis_arch *a, ct_node *logits) {
    ct_context *ctx = ct_graph_context(g);
    if (c->num_classes < 1 || c->width_div < 1 || c->max_blocks < 0)
        return ct_set_error(ctx, CT_E_INVALID_ARG,
                            "%s: num_classes %lld, width_div %d, max_blocks %d: need num_classes >= 1, width_div >= 1 "
                            "and max_blocks >= 0",
                            c->arch, (long long)c->num_classes, c->width_div, c->max_blocks);
    if (!(c->drop_path >= 0 && c->drop_path < 1) || !(c->dropout >= 0 && c->dropout < 1))
        return ct_set_error(ctx, CT_E_INVALID_ARG, "%s: drop_path %g and dropout %g must be in [0, 1)", c->arch,
                            (double)c->drop_path, (double)c->dropout);
    if (c->window < 0 || (c->window > 0 && !a->swin_embed))
        return ct_set_error(ctx, CT_E_INVALID_ARG, "%s: window %d: the window size is a Swin option (0: 7)", c->arch,
                            c->window);
    if (a->swin_embed && c->dropout > 0)
        return ct_set_error(ctx, CT_E_INVALID_ARG, "%s has no classifier dropout (torchvision's Swin): set dropout to 0",
                            c->arch);
    if (a->resnet_depth && (c->drop_path > 0 || c->dropout > 0))
        return ct_set_error(ctx, CT_E_INVALID_ARG, "%s has no stochastic depth or dropout (torchvision's ResNet): set "
                            "drop_path and dropout to 0", c->arch);
    if (!a->resnet_depth && c->cifar_stem)
        return ct_set_error(ctx, CT_E_INVALID_ARG, "%s: cifar_stem is a ResNet option", c->arch);
    if ((a->swin_embed && c->channels_last) || (c->channels_last != 0 && c->channels_last != 1))
        return ct_set_error(ctx, CT_E_INVALID_ARG, "%s: channels_last %d: 0 or 1, and 1 only for ResNets and EfficientNets",
                            c->arch, c->channels_last);
    if (a->resnet_depth && 64 % c->width_div)
        return ct_set_error(ctx, CT_E_INVALID_ARG, "%s: width_div %d must divide 64 (the stem's channels)", c->arch,
                            c->width_div);
    int nd;
    int64_t s[CT_MAX_DIMS];
    CT_TRY(ct_node_shape(g, x, &nd, s));
    if (nd != 4 || ct_node_dtype(g, x) != CT_F32) {
        char buf[96];
        return ct_set_error(ctx, CT_E_SHAPE, "%s: input %s must be FP32 images (N, C, H, W)", c->arch,
                            ct_shape_str(nd, s, buf, sizeof buf));
    }
    return a->build(g, x, c, a, logits);
}

ct_status ct_vis_build_default(ct_graph *g, const ct_model_row *m, const char *preset, int64_t batch,
                               int64_t n_classes, ct_node *logits) {
    (void)preset;
    ct_vision_config c;
    ct_vis_config(m, &c);
    if (n_classes > 0) c.num_classes = n_classes;
    ct_node x;
    CT_TRY(ct_input(g, "x", CT_F32, 4, (int64_t[]){batch, 3, 224, 224}, &x));
    return ct_vis_build(g, x, &c, m->def->config, logits);
}

ct_status ct_vis_build_recipe(ct_graph *g, const ct_model_row *m, ct_node x, const ct_recipe *r, int64_t n_classes,
                              ct_node *logits) {
    ct_vision_config vc;
    ct_vis_config(m, &vc);
    if (r->num_classes && r->num_classes < n_classes)
        return ct_set_error(ct_graph_context(g), CT_E_CONFIG, "recipe key 'num_classes': %lld is fewer than the "
                            "dataset's %lld classes; set 0 (the dataset's) or at least %lld",
                            (long long)r->num_classes, (long long)n_classes, (long long)n_classes);
    vc.num_classes = r->num_classes ? r->num_classes : n_classes;
    vc.cifar_stem = r->cifar_stem, vc.width_div = r->width_div, vc.max_blocks = r->max_blocks;
    vc.channels_last = ((const ct_vis_arch *)m->def->config)->swin_embed ? 0 : r->channels_last;
    vc.window = r->window;
    if (r->drop_path >= 0) vc.drop_path = r->drop_path; /* -1: the model's */
    vc.dropout = r->dropout;
    return ct_vis_build(g, x, &vc, m->def->config, logits);
}

int64_t ct_vis_channels(ct_graph *g, ct_node x) { return ct_mdl_channels(g, x, 0); }

ct_status ct_vis_param(ct_graph *g, const char *prefix, const char *leaf, int nd, const int64_t *shape, ct_init init,
                       int64_t fan_in, ct_node *out) {
    char nm[CT_NAME_LEN];
    int n = snprintf(nm, sizeof nm, "%s.%s", prefix, leaf);
    if (n < 0 || n >= (int)sizeof nm)
        return ct_set_error(ct_graph_context(g), CT_E_INVALID_ARG, "parameter name '%s.%s' is too long", prefix, leaf);
    return ct_param(g, nm, nd, shape, init, fan_in, out);
}

ct_status ct_vis_conv_weight(ct_graph *g, const char *conv, int64_t cout, int64_t cin_g, int k, ct_node *out) {
    char nm[CT_NAME_LEN];
    int n = snprintf(nm, sizeof nm, "%s.weight", conv);
    if (n < 0 || n >= (int)sizeof nm)
        return ct_set_error(ct_graph_context(g), CT_E_INVALID_ARG, "parameter name '%s.weight' is too long", conv);
    float std = (float)sqrt(2.0 / (double)(cout * k * k));
    return ct_param_normal(g, nm, 4, (int64_t[]){cout, cin_g, k, k}, std, out);
}

ct_status ct_vis_conv_bn(ct_graph *g, ct_node x, const char *conv, const char *bn, int64_t cout, int k, int stride,
                         int groups, ct_activation act, ct_node *out) {
    return ct_vis_conv_bn_ex(g, x, conv, bn, cout, k, stride, groups, act, 0, out);
}

ct_status ct_vis_conv_bn_ex(ct_graph *g, ct_node x, const char *conv, const char *bn, int64_t cout, int k, int stride,
                            int groups, ct_activation act, int cl, ct_node *out) {
    int64_t cin = ct_mdl_channels(g, x, cl);
    ct_node w, gam, bet, rm, rv, y;
    CT_TRY(ct_vis_conv_weight(g, conv, cout, cin / groups, k, &w));
    ct_conv2d_opts co = {.stride = stride, .pad = (k - 1) / 2, .dilation = 1, .groups = groups, .channels_last = cl};
    CT_TRY(ct_conv2d_ex(g, x, w, CT_NONE, &co, &y));
    CT_TRY(ct_node_set_name(g, y, conv));
    CT_TRY(ct_vis_param(g, bn, "weight", 1, &cout, CT_INIT_ONES, 0, &gam));
    CT_TRY(ct_vis_param(g, bn, "bias", 1, &cout, CT_INIT_ZEROS, 0, &bet));
    char nm[CT_NAME_LEN];
    snprintf(nm, sizeof nm, "%s.running_mean", bn);
    CT_TRY(ct_buffer(g, nm, 1, &cout, CT_INIT_ZEROS, &rm));
    snprintf(nm, sizeof nm, "%s.running_var", bn);
    CT_TRY(ct_buffer(g, nm, 1, &cout, CT_INIT_ONES, &rv));
    return ct_mdl_bn_act(g, y, cl, gam, bet, rm, rv, bn, act, out);
}
