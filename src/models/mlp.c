/* src/models/mlp.c - multi-layer perceptron: linear + activation (ReLU,
 * GELU, GELU-tanh, SiLU or tanh) (+ dropout) hidden layers, then a linear
 * classifier. PyTorch nn.Linear layout/init. Also the ct_activation helpers
 * (name, parse, apply). */
#include <stdio.h>
#include <string.h>

#include "model_def.h"

static const char *const k_act_names[CT_ACT_COUNT] = {"relu", "gelu", "gelu-tanh", "silu", "tanh"};

const char *ct_activation_name(ct_activation a) {
    return (unsigned)a < CT_ACT_COUNT ? k_act_names[a] : "invalid";
}

ct_status ct_activation_parse(ct_context *ctx, const char *name, ct_activation *out) {
    for (int i = 0; name && i < CT_ACT_COUNT; i++)
        if (!strcmp(name, k_act_names[i])) {
            if (out) *out = (ct_activation)i;
            return CT_OK;
        }
    return ct_set_error(ctx, CT_E_INVALID_ARG, "unknown activation '%s' (valid: relu, gelu, gelu-tanh, silu, tanh)",
                        name ? name : "(null)");
}

ct_status ct_activation_apply(ct_graph *g, ct_node x, ct_activation act, ct_node *out) {
    switch (act) {
    case CT_ACT_RELU: return ct_relu(g, x, out);
    case CT_ACT_GELU: return ct_gelu(g, x, 0, out);
    case CT_ACT_GELU_TANH: return ct_gelu(g, x, 1, out);
    case CT_ACT_SILU: return ct_silu(g, x, out);
    case CT_ACT_TANH: return ct_tanh(g, x, out);
    default: break;
    }
    return ct_set_error(ct_graph_context(g), CT_E_INVALID_ARG,
                        "activation %d is not a ct_activation (CT_ACT_RELU .. CT_ACT_TANH)", (int)act);
}

ct_status ct_model_mlp(ct_graph *g, ct_node x, int n_hidden, const int64_t *hidden, int64_t n_classes,
                       ct_activation act, float dropout, ct_node *logits) {
    ct_context *ctx = ct_graph_context(g);
    if (n_hidden < 0 || (n_hidden && !hidden) || n_classes < 1 || !logits)
        return ct_set_error(ctx, CT_E_INVALID_ARG, "mlp: need n_hidden >= 0 layer sizes and n_classes >= 1");
    if ((unsigned)act >= CT_ACT_COUNT)
        return ct_set_error(ctx, CT_E_INVALID_ARG, "mlp: activation %d is not a ct_activation (CT_ACT_RELU .. CT_ACT_TANH)",
                            (int)act);
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
        CT_TRY(ct_graph_mark_block(g, x)); /* each layer a block: pipeline stages cut between them */
        snprintf(name, sizeof name, "fc%d.weight", i + 1);
        CT_TRY(ct_param(g, name, 2, (int64_t[]){out, in}, CT_INIT_KAIMING_UNIFORM, in, &w));
        snprintf(name, sizeof name, "fc%d.bias", i + 1);
        CT_TRY(ct_param(g, name, 1, (int64_t[]){out}, CT_INIT_KAIMING_UNIFORM, in, &b));
        CT_TRY(ct_linear(g, x, w, b, &y));
        snprintf(name, sizeof name, "fc%d", i + 1);
        CT_TRY(ct_node_set_name(g, y, name));
        if (i < n_hidden) {
            CT_TRY(ct_activation_apply(g, y, act, &y));
            if (dropout > 0.0f) CT_TRY(ct_dropout(g, y, dropout, &y));
        }
        x = y;
        in = out;
    }
    *logits = x;
    return CT_OK;
}

/* ---- its row of the model table ------------------------------------------------------------ */

/* Default: 784-1024-1024-10 on (batch, 784), ReLU, no dropout (MNIST). */
static ct_status mlp_default(ct_graph *g, const ct_model_row *m, const char *preset, int64_t batch, int64_t n_classes,
                             ct_node *out) {
    (void)m, (void)preset;
    ct_node x;
    CT_TRY(ct_input(g, "x", CT_F32, 2, (int64_t[]){batch, 784}, &x));
    return ct_model_mlp(g, x, 2, (int64_t[]){1024, 1024}, n_classes ? n_classes : 10, CT_ACT_RELU, 0.0f, out);
}

static ct_status mlp_build(ct_graph *g, const ct_model_row *m, ct_node x, const ct_recipe *r, int64_t n_classes,
                           ct_node *out) {
    (void)m;
    return ct_model_mlp(g, x, r->n_hidden, r->hidden, n_classes, r->activation, r->dropout, out);
}

const ct_model_def ct_model_def_mlp = {.build_default = mlp_default, .build = mlp_build};
