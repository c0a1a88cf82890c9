/* src/graph/autodiff.h - reverse-mode autodiff over the graph IR. */
#ifndef CT_GRAPH_AUTODIFF_H
#define CT_GRAPH_AUTODIFF_H
#include "ir.h"

/* Appends backward nodes for d(loss)/d(params) to g, seeded by node `seed`
 * (the loss gradient, a scalar input). grads and req hold one entry per
 * forward node (g->n at the call).
 * On return grads[p] is the gradient node of each parameter p. */
ct_status ct_autodiff(ct_graph *g, ct_node loss, ct_node seed, ct_node *grads, uint8_t *req);
/* From several roots, each seeded by its node (a pipeline stage: the loss and
 * the outgoing links' gradients). Inputs flagged CT_NODE_GRAD_INPUT get
 * gradients too (grads[input]). Roots nothing trainable flows into are
 * skipped; none left is CT_E_INVALID_ARG. */
ct_status ct_autodiff_roots(ct_graph *g, int n_roots, const ct_node *roots, const ct_node *seeds, ct_node *grads,
                            uint8_t *req);
#endif
