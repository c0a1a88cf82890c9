/* ctrain/models.h - model builders on top of the graph API. */
#ifndef CTRAIN_MODELS_H
#define CTRAIN_MODELS_H

#include "graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* MLP: x (B, in) -> hidden layers with ReLU -> logits (B, n_classes).
 * Params named fc{i}.weight / fc{i}.bias in PyTorch layout. */
ct_status ct_model_mlp(ct_graph *g, ct_node x, int n_hidden, const int64_t *hidden,
                       int64_t n_classes, float dropout, ct_node *logits);

/* Small CNN: blocks of conv3x3(pad 1)-batchnorm-relu-maxpool2, then
 * flatten and linear. x (B, C, H, W). Params conv{i}.weight, bn{i}.weight,
 * bn{i}.bias (+ buffers bn{i}.running_mean / running_var), fc.weight,
 * fc.bias. Convolutions have no bias (batchnorm follows). */
ct_status ct_model_cnn(ct_graph *g, ct_node x, int n_blocks, const int64_t *channels,
                       int64_t n_classes, ct_node *logits);

#ifdef __cplusplus
}
#endif
#endif
