/* src/graph/tp_ops.c - tensor parallelism's collective ops (PLACEHOLDER: being written). */
#include "ir.h"

ct_status ct_tp_copy(ct_graph *g, ct_node x, ct_node *out) { (void)x; (void)out; return ct_set_error(g->ctx, CT_E_UNSUPPORTED, "tp_copy: not built yet"); }
ct_status ct_tp_reduce(ct_graph *g, ct_node x, ct_node *out) { (void)x; (void)out; return ct_set_error(g->ctx, CT_E_UNSUPPORTED, "tp_reduce: not built yet"); }
ct_status ct_embedding_rows(ct_graph *g, ct_node w, ct_node ids, int64_t row0, ct_node *out) { (void)w; (void)ids; (void)row0; (void)out; return ct_set_error(g->ctx, CT_E_UNSUPPORTED, "embedding_rows: not built yet"); }
ct_status ct_cross_entropy_vp(ct_graph *g, ct_node l, ct_node y, float ls, int ig, int64_t v, ct_node *out) { (void)l; (void)y; (void)ls; (void)ig; (void)v; (void)out; return ct_set_error(g->ctx, CT_E_UNSUPPORTED, "cross_entropy_vp: not built yet"); }
