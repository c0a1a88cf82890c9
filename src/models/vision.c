/* src/models/vision.c - the torchvision image classifiers by name: default
 * configurations, argument checks, the shared conv-batchnorm helper and
 * parameter counts by name (builds the graph only). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "vision_internal.h"

typedef struct {
    const char *name;
    int resnet_depth;            /* 0: efficientnet or swin          */
    double width_mult, depth_mult;
    float dropout;
    int64_t swin_embed;          /* > 0: swin                        */
    int depths[4], heads[4];
    float drop_path;             /* the default                      */
} arch_info;

static const arch_info k_archs[] = {
    {"resnet18", 18, 1, 1, 0, 0, {0}, {0}, 0},
    {"resnet34", 34, 1, 1, 0, 0, {0}, {0}, 0},
    {"resnet50", 50, 1, 1, 0, 0, {0}, {0}, 0},
    {"resnet101", 101, 1, 1, 0, 0, {0}, {0}, 0},
    {"efficientnet_b0", 0, 1.0, 1.0, 0.2f, 0, {0}, {0}, 0.2f},
    {"efficientnet_b1", 0, 1.0, 1.1, 0.2f, 0, {0}, {0}, 0.2f},
    {"efficientnet_b2", 0, 1.1, 1.2, 0.3f, 0, {0}, {0}, 0.2f},
    {"efficientnet_b3", 0, 1.2, 1.4, 0.3f, 0, {0}, {0}, 0.2f},
    {"efficientnet_b4", 0, 1.4, 1.8, 0.4f, 0, {0}, {0}, 0.2f},
    {"swin_t", 0, 1, 1, 0, 96, {2, 2, 6, 2}, {3, 6, 12, 24}, 0.2f},
    {"swin_s", 0, 1, 1, 0, 96, {2, 2, 18, 2}, {3, 6, 12, 24}, 0.3f},
    {"swin_b", 0, 1, 1, 0, 128, {2, 2, 18, 2}, {4, 8, 16, 32}, 0.5f},
};
#define N_ARCHS (int)(sizeof k_archs / sizeof k_archs[0])

int ct_vision_num_archs(void) { return N_ARCHS; }
const char *ct_vision_arch_name(int i) { return i >= 0 && i < N_ARCHS ? k_archs[i].name : NULL; }

static const arch_info *find_arch(const char *name) {
    for (int i = 0; name && i < N_ARCHS; i++)
        if (!strcmp(k_archs[i].name, name)) return &k_archs[i];
    return NULL;
}

static ct_status unknown_arch(ct_context *ctx, const char *name) {
    char list[256];
    size_t o = 0;
    list[0] = 0;
    for (int i = 0; i < N_ARCHS && o < sizeof list; i++)
        o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", i ? ", " : "", k_archs[i].name);
    return ct_set_error(ctx, CT_E_INVALID_ARG, "unknown image model '%s'; known: %s", name ? name : "(null)", list);
}

ct_status ct_vision_config_default(ct_context *ctx, const char *arch, ct_vision_config *out) {
    const arch_info *a = find_arch(arch);
    if (!a || !out) return unknown_arch(ctx, arch);
    memset(out, 0, sizeof *out);
    snprintf(out->arch, sizeof out->arch, "%s", a->name);
    out->num_classes = 1000;
    out->width_div = 1;
    out->drop_path = a->drop_path;
    out->dropout = a->dropout;
    return CT_OK;
}

int64_t ct_vis_channels(ct_graph *g, ct_node x) {
    int nd;
    int64_t s[CT_MAX_DIMS];
    if (ct_node_shape(g, x, &nd, s) != CT_OK || nd < 2) return 0;
    return s[1];
}

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
    int64_t cin = ct_vis_channels(g, x);
    ct_node w, gam, bet, rm, rv, y;
    CT_TRY(ct_vis_conv_weight(g, conv, cout, cin / groups, k, &w));
    CT_TRY(ct_conv2d(g, x, w, CT_NONE, stride, (k - 1) / 2, 1, groups, &y));
    CT_TRY(ct_node_set_name(g, y, conv));
    CT_TRY(ct_vis_param(g, bn, "weight", 1, &cout, CT_INIT_ONES, 0, &gam));
    CT_TRY(ct_vis_param(g, bn, "bias", 1, &cout, CT_INIT_ZEROS, 0, &bet));
    char nm[CT_NAME_LEN];
    snprintf(nm, sizeof nm, "%s.running_mean", bn);
    CT_TRY(ct_buffer(g, nm, 1, &cout, CT_INIT_ZEROS, &rm));
    snprintf(nm, sizeof nm, "%s.running_var", bn);
    CT_TRY(ct_buffer(g, nm, 1, &cout, CT_INIT_ONES, &rv));
    CT_TRY(ct_batchnorm(g, y, gam, bet, rm, rv, 0.1f, 1e-5f, &y));
    CT_TRY(ct_node_set_name(g, y, bn));
    if (act != CT_ACT_COUNT) CT_TRY(ct_activation_apply(g, y, act, &y));
    *out = y;
    return CT_OK;
}

ct_status ct_model_vision(ct_graph *g, ct_node x, const ct_vision_config *c, ct_node *logits) {
    ct_context *ctx = ct_graph_context(g);
    if (!c || !logits) return ct_set_error(ctx, CT_E_INVALID_ARG, "vision model: config and logits must not be NULL");
    const arch_info *a = find_arch(c->arch);
    if (!a) return unknown_arch(ctx, c->arch);
    if (c->num_classes < 1 || c->width_div < 1 || c->max_blocks < 0)
        return ct_set_error(ctx, CT_E_INVALID_ARG,
                            "%s: num_classes %lld, width_div %d, max_blocks %d: need num_classes >= 1, width_div >= 1 "
                            "and max_blocks >= 0",
                            a->name, (long long)c->num_classes, c->width_div, c->max_blocks);
    if (!(c->drop_path >= 0 && c->drop_path < 1) || !(c->dropout >= 0 && c->dropout < 1))
        return ct_set_error(ctx, CT_E_INVALID_ARG, "%s: drop_path %g and dropout %g must be in [0, 1)", a->name,
                            (double)c->drop_path, (double)c->dropout);
    if (c->window < 0 || (c->window > 0 && !a->swin_embed))
        return ct_set_error(ctx, CT_E_INVALID_ARG, "%s: window %d: the window size is a Swin option (0: 7)", a->name,
                            c->window);
    if (a->swin_embed && c->dropout > 0)
        return ct_set_error(ctx, CT_E_INVALID_ARG, "%s has no classifier dropout (torchvision's Swin): set dropout to 0",
                            a->name);
    if (a->resnet_depth && (c->drop_path > 0 || c->dropout > 0))
        return ct_set_error(ctx, CT_E_INVALID_ARG, "%s has no stochastic depth or dropout (torchvision's ResNet): set "
                            "drop_path and dropout to 0", a->name);
    if (!a->resnet_depth && c->cifar_stem)
        return ct_set_error(ctx, CT_E_INVALID_ARG, "%s: cifar_stem is a ResNet option", a->name);
    if (a->resnet_depth && 64 % c->width_div)
        return ct_set_error(ctx, CT_E_INVALID_ARG, "%s: width_div %d must divide 64 (the stem's channels)", a->name,
                            c->width_div);
    int nd;
    int64_t s[CT_MAX_DIMS];
    CT_TRY(ct_node_shape(g, x, &nd, s));
    if (nd != 4 || ct_node_dtype(g, x) != CT_F32) {
        char buf[96];
        return ct_set_error(ctx, CT_E_SHAPE, "%s: input %s must be FP32 images (N, C, H, W)", a->name,
                            ct_shape_str(nd, s, buf, sizeof buf));
    }
    if (a->resnet_depth) return ct_model_resnet(g, x, c, a->resnet_depth, logits);
    if (a->swin_embed) return ct_model_swin(g, x, c, a->swin_embed, a->depths, a->heads, logits);
    return ct_model_efficientnet(g, x, c, a->width_mult, a->depth_mult, logits);
}

