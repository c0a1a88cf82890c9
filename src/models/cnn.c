/* src/models/cnn.c - small CNN: n blocks of conv3x3(pad 1, no bias) ->
 * batchnorm -> ReLU -> maxpool 2x2, then flatten and a linear classifier. */
#include <stdio.h>

#include "model_def.h"

ct_status ct_model_cnn(ct_graph *g, ct_node x, int n_blocks, const int64_t *channels, int64_t n_classes,
                       ct_node *logits) {
    return ct_model_cnn_ex(g, x, n_blocks, channels, n_classes, 0, logits);
}

ct_status ct_model_cnn_ex(ct_graph *g, ct_node x, int n_blocks, const int64_t *channels, int64_t n_classes,
                          int channels_last, ct_node *logits) {
    ct_context *ctx = ct_graph_context(g);
    if (n_blocks < 1 || !channels || n_classes < 1 || !logits || (channels_last != 0 && channels_last != 1))
        return ct_set_error(ctx, CT_E_INVALID_ARG,
                            "cnn: need n_blocks >= 1 channel counts, n_classes >= 1 and channels_last 0 or 1");
    int nd;
    int64_t s[CT_MAX_DIMS];
    CT_TRY(ct_node_shape(g, x, &nd, s));
    if (nd != 4) {
        char buf[96];
        return ct_set_error(ctx, CT_E_SHAPE, "cnn: input %s must be (N, C, H, W)", ct_shape_str(nd, s, buf, sizeof buf));
    }
    const int cl = channels_last;
    int64_t cin = s[1];
    char name[64];
    if (cl) CT_TRY(ct_mdl_to_nhwc(g, x, &x));
    ct_conv2d_opts co;
    ct_conv2d_opts_default(&co);
    co.pad = 1;
    co.channels_last = cl;
    ct_pool2d_opts po;
    ct_pool2d_opts_default(&po, 2);
    po.channels_last = cl;
    for (int i = 0; i < n_blocks; i++) {
        int64_t c = channels[i];
        if (c < 1) return ct_set_error(ctx, CT_E_INVALID_ARG, "cnn: block %d has %lld channels", i, (long long)c);
        ct_node w, gam, bet, rm, rv, y;
        CT_TRY(ct_graph_mark_block(g, x)); /* each conv block, and the head, a block: pipeline cuts */
        snprintf(name, sizeof name, "conv%d.weight", i + 1);
        CT_TRY(ct_param(g, name, 4, (int64_t[]){c, cin, 3, 3}, CT_INIT_KAIMING_UNIFORM, cin * 9, &w));
        CT_TRY(ct_conv2d_ex(g, x, w, CT_NONE, &co, &y));
        snprintf(name, sizeof name, "conv%d", i + 1);
        CT_TRY(ct_node_set_name(g, y, name));
        snprintf(name, sizeof name, "bn%d.weight", i + 1);
        CT_TRY(ct_param(g, name, 1, (int64_t[]){c}, CT_INIT_ONES, 0, &gam));
        snprintf(name, sizeof name, "bn%d.bias", i + 1);
        CT_TRY(ct_param(g, name, 1, (int64_t[]){c}, CT_INIT_ZEROS, 0, &bet));
        snprintf(name, sizeof name, "bn%d.running_mean", i + 1);
        CT_TRY(ct_buffer(g, name, 1, (int64_t[]){c}, CT_INIT_ZEROS, &rm));
        snprintf(name, sizeof name, "bn%d.running_var", i + 1);
        CT_TRY(ct_buffer(g, name, 1, (int64_t[]){c}, CT_INIT_ONES, &rv));
        snprintf(name, sizeof name, "bn%d", i + 1);
        CT_TRY(ct_mdl_bn_act(g, y, cl, gam, bet, rm, rv, name, CT_ACT_RELU, &y));
        CT_TRY(ct_maxpool2d_ex(g, y, &po, &y));
        x = y;
        cin = c;
    }
    CT_TRY(ct_graph_mark_block(g, x));
    if (cl) CT_TRY(ct_transpose(g, x, (int[]){0, 3, 1, 2}, &x)); /* PyTorch's flatten order: (C, H, W) */
    CT_TRY(ct_flatten(g, x, &x));
    CT_TRY(ct_node_shape(g, x, &nd, s));
    ct_node w, b;
    CT_TRY(ct_param(g, "fc.weight", 2, (int64_t[]){n_classes, s[1]}, CT_INIT_KAIMING_UNIFORM, s[1], &w));
    CT_TRY(ct_param(g, "fc.bias", 1, (int64_t[]){n_classes}, CT_INIT_KAIMING_UNIFORM, s[1], &b));
    CT_TRY(ct_linear(g, x, w, b, logits));
    return ct_node_set_name(g, *logits, "fc");
}

/* ---- its row of the model table ------------------------------------------------------------ */

/* Default: conv32-conv64 + linear on (batch, 1, 28, 28), 10 classes (Fashion-MNIST). */
static ct_status cnn_default(ct_graph *g, const ct_model_row *m, const char *preset, int64_t batch, int64_t n_classes,
                             ct_node *out) {
    (void)m, (void)preset;
    ct_node x;
    CT_TRY(ct_input(g, "x", CT_F32, 4, (int64_t[]){batch, 1, 28, 28}, &x));
    return ct_model_cnn(g, x, 2, (int64_t[]){32, 64}, n_classes ? n_classes : 10, out);
}

static ct_status cnn_build(ct_graph *g, const ct_model_row *m, ct_node x, const ct_recipe *r, int64_t n_classes,
                           ct_node *out) {
    (void)m;
    return ct_model_cnn_ex(g, x, r->n_channels, r->channels, n_classes, r->channels_last, out);
}

const ct_model_def ct_model_def_cnn = {.build_default = cnn_default, .build = cnn_build};
