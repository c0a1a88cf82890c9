/* src/models/layout.c - the channels-last helpers of the CNN, ResNet and
 * EfficientNet builders (model_def.h). */
#include "model_def.h"

/* x's shape into s, or CT_E_SHAPE naming `what` unless x is 4-D in `layout` */
static ct_status shape4(ct_graph *g, ct_node x, const char *what, const char *layout, int64_t s[CT_MAX_DIMS]) {
    int nd;
    CT_TRY(ct_node_shape(g, x, &nd, s));
    if (nd == 4) return CT_OK;
    char buf[96];
    return ct_set_error(ct_graph_context(g), CT_E_SHAPE, "%s: input %s must be %s", what,
                        ct_shape_str(nd, s, buf, sizeof buf), layout);
}

ct_status ct_mdl_to_nhwc(ct_graph *g, ct_node x, ct_node *out) {
    int64_t s[CT_MAX_DIMS];
    CT_TRY(shape4(g, x, "channels last", "(N, C, H, W)", s));
    if (s[1] == 1) return ct_reshape(g, x, 4, (int64_t[]){s[0], s[2], s[3], 1}, out); /* the same memory */
    return ct_transpose(g, x, (int[]){0, 2, 3, 1}, out);
}

ct_status ct_mdl_bn_act(ct_graph *g, ct_node y, int cl, ct_node gamma, ct_node beta, ct_node rmean, ct_node rvar,
                        const char *name, ct_activation act, ct_node *out) {
    int nd;
    int64_t s[CT_MAX_DIMS];
    ct_node t = y;
    CT_TRY(ct_node_shape(g, y, &nd, s));
    if (cl) {
        int64_t rows = 1;
        for (int i = 0; i < nd - 1; i++) rows *= s[i];
        CT_TRY(ct_reshape(g, y, 2, (int64_t[]){rows, s[nd - 1]}, &t));
    }
    CT_TRY(ct_batchnorm(g, t, gamma, beta, rmean, rvar, 0.1f, 1e-5f, &t));
    CT_TRY(ct_node_set_name(g, t, name));
    if (act != CT_ACT_COUNT) CT_TRY(ct_activation_apply(g, t, act, &t));
    if (cl) CT_TRY(ct_reshape(g, t, nd, s, &t));
    *out = t;
    return CT_OK;
}

int64_t ct_mdl_channels(ct_graph *g, ct_node x, int cl) {
    int nd;
    int64_t s[CT_MAX_DIMS];
    if (ct_node_shape(g, x, &nd, s) != CT_OK || nd < 2) return 0;
    return cl ? s[nd - 1] : s[1];
}

ct_status ct_mdl_global_avgpool(ct_graph *g, ct_node x, int cl, ct_node *out) {
    if (!cl) return ct_global_avgpool(g, x, out);
    int64_t s[CT_MAX_DIMS];
    CT_TRY(shape4(g, x, "global_avgpool", "(N, H, W, C)", s));
    CT_TRY(ct_reshape(g, x, 3, (int64_t[]){s[0], s[1] * s[2], s[3]}, &x));
    return ct_mean(g, x, 1u << 1, 0, out);
}
