/* src/models/linear.c - logistic regression: the image flattened, one linear
 * layer to the class logits (with cross entropy: multinomial logistic
 * regression). PyTorch nn.Linear layout and initialization: fc.weight
 * (classes, C*H*W), fc.bias (classes). A baseline for any image dataset, and
 * the model table's smallest row. */
#include "model_def.h"

static ct_status linear_on(ct_graph *g, ct_node x, int64_t n_classes, ct_node *logits) {
    ct_context *ctx = ct_graph_context(g);
    if (n_classes < 1 || !logits) return ct_set_error(ctx, CT_E_INVALID_ARG, "linear: need n_classes >= 1");
    int nd;
    int64_t s[CT_MAX_DIMS];
    CT_TRY(ct_node_shape(g, x, &nd, s));
    if (nd != 2) CT_TRY(ct_flatten(g, x, &x));
    CT_TRY(ct_node_shape(g, x, &nd, s));
    int64_t in = s[1];
    ct_node w, b;
    CT_TRY(ct_param(g, "fc.weight", 2, (int64_t[]){n_classes, in}, CT_INIT_KAIMING_UNIFORM, in, &w));
    CT_TRY(ct_param(g, "fc.bias", 1, (int64_t[]){n_classes}, CT_INIT_KAIMING_UNIFORM, in, &b));
    CT_TRY(ct_linear(g, x, w, b, logits));
    return ct_node_set_name(g, *logits, "fc");
}

/* Default: 784 -> 10 on (batch, 1, 28, 28) (MNIST). */
static ct_status linear_default(ct_graph *g, const ct_model_row *m, const char *preset, int64_t batch,
                                int64_t n_classes, ct_node *out) {
    (void)m, (void)preset;
    ct_node x;
    CT_TRY(ct_input(g, "x", CT_F32, 4, (int64_t[]){batch, 1, 28, 28}, &x));
    return linear_on(g, x, n_classes ? n_classes : 10, out);
}

static ct_status linear_build(ct_graph *g, const ct_model_row *m, ct_node x, const ct_recipe *r, int64_t n_classes,
                              ct_node *out) {
    (void)m, (void)r;
    return linear_on(g, x, n_classes, out);
}

const ct_model_def ct_model_def_linear = {.build_default = linear_default, .build = linear_build};
