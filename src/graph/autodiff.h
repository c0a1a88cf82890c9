/* src/graph/autodiff.h - reverse-mode autodiff over the graph IR. */
#ifndef CT_GRAPH_AUTODIFF_H
#define CT_GRAPH_AUTODIFF_H
#include "ir.h"

/* Appends backward nodes for d(loss)/d(params) to g, seeded by node `seed`
 * (the loss gradient, a scalar input). grads and req hold one entry per
 * forward node (g->n at the call).
 * On return grads[p] is the gradient node of each parameter p. */
ct_status ct_autodiff(ct_graph *g, ct_node loss, ct_node seed, ct_node *grads, uint8_t *req);
#endif
