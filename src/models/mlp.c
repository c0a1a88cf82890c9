/* src/models/mlp.c - multi-layer perceptron: linear + ReLU (+ dropout)
 * hidden layers, then a linear classifier. PyTorch nn.Linear layout/init. */
#include <stdio.h>

#include "core/internal.h"
#include "ctrain/models.h"

ct_status ct_model_mlp(ct_graph *g, ct_node x, int n_hidden, const int64_t *hidden, int64_t n_classes,
                       float dropout, ct_node *logits) {
    ct_context *ctx = ct_graph_context(g);
    if (n_hidden < 0 || (n_hidden && !hidden) || n_classes < 1 || !logits)
        return ct_set_error(ctx, CT_E_INVALID_ARG, "mlp: need n_hidden >= 0 layer sizes and n_classes >= 1");
    int nd;
    int64_t shape[CT_MAX_DIMS];
    CT_TRY(ct_node_shape(g, x, &nd, shape));
    if (nd != 2) CT_TRY(ct_flatten(g, x, &x));
    CT_TRY(ct_node_shape(g, x, &nd, shape));
    int64_t in = shape[1];
    char name[64];
    for (int i = 0; i <= n_hidden; i++) {
        int64_t out = i < n_hidden ? hidden[i] : n_classes;
        if (out < 1) return ct_set_error(ctx, CT_E_INVALID_ARG, "mlp: hidden layer %d has size %lld", i, (long long)out);
        ct_node w, b, y;
        snprintf(name, sizeof name, "fc%d.weight", i + 1);
        CT_TRY(ct_param(g, name, 2, (int64_t[]){out, in}, CT_INIT_KAIMING_UNIFORM, in, &w));
        snprintf(name, sizeof name, "fc%d.bias", i + 1);
        CT_TRY(ct_param(g, name, 1, (int64_t[]){out}, CT_INIT_KAIMING_UNIFORM, in, &b));
        CT_TRY(ct_linear(g, x, w, b, &y));
        snprintf(name, sizeof name, "fc%d", i + 1);
        CT_TRY(ct_node_set_name(g, y, name));
        if (i < n_hidden) {
            CT_TRY(ct_relu(g, y, &y));
            if (dropout > 0.0f) CT_TRY(ct_dropout(g, y, dropout, &y));
        }
        x = y;
        in = out;
    }
    *logits = x;
    return CT_OK;
}
