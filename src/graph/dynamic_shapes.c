/* src/graph/dynamic_shapes.c - dynamic shapes (docs/dynamic-shapes.md):
 * ct_plan_add_shape compiles the same graph built for smaller sizes as a
 * plan_only variant, checks that it runs in the plan's memory, and
 * registers it; ct_plan_set_shape selects the variant the executor runs. */
#include <stdlib.h>
#include <string.h>

#include "plan.h"

/* Variant v (a plan_only compile) may run in p's memory: the same nodes
 * (op, inputs, dtype, rank, liveness, storage root), static
 * parameters and buffers, and no node's output, saved state, scratch or
 * FP32 copies larger than p planned. Else CT_E_SHAPE naming the first
 * difference. */
static ct_status check_variant(ct_plan *p, const ct_plan *v) {
    const char *fix = "; build the graph with the same code, changing only batch / sequence sizes, at most the compiled ones";
    if (v->g.n != p->g.n || v->n_fwd != p->n_fwd || v->n_params != p->n_params || v->n_user != p->n_user ||
        v->seed != p->seed || v->loss != p->loss || v->n_outputs != p->n_outputs)
        return ct_set_error(p->ctx, CT_E_SHAPE,
                            "add_shape: the graph compiles to %d nodes (%d forward), the plan has %d (%d forward)%s",
                            v->g.n, v->n_fwd, p->g.n, p->n_fwd, fix);
    for (int i = 0; i < p->n_user; i++)
        if (ct_plan_map(v, i) != ct_plan_map(p, i))
            return ct_set_error(p->ctx, CT_E_SHAPE, "add_shape: node %d maps to plan node %d, not %d%s", i,
                                (int)ct_plan_map(v, i), (int)ct_plan_map(p, i), fix);
    for (int i = 0; i < p->n_params; i++)
        if (v->params[i] != p->params[i] || v->param_grads[i] != p->param_grads[i])
            return ct_set_error(p->ctx, CT_E_SHAPE, "add_shape: parameter %d differs%s", i, fix);
    for (int i = 0; i < p->n_outputs; i++)
        if (v->outputs[i] != p->outputs[i])
            return ct_set_error(p->ctx, CT_E_SHAPE, "add_shape: output %d differs%s", i, fix);
    for (int i = 0; i < p->g.n; i++) {
        const ct_node_def *a = &p->g.nodes[i], *b = &v->g.nodes[i];
        const ct_plan_node *pa = &p->pn[i], *pb = &v->pn[i];
        const char *what = NULL;
        if (a->op != b->op || a->n_in != b->n_in || a->dtype != b->dtype || a->ndim != b->ndim) what = "op, inputs, dtype or rank";
        for (int j = 0; !what && j < a->n_in; j++)
            if (a->in[j] != b->in[j]) what = "inputs";
        /* (not the kernel slot: a fallback may have moved the plan's since; its kernel runs every shape) */
        if (!what && (pa->live != pb->live || pa->root != pb->root || pa->arena != pb->arena))
            what = "liveness or storage";
        if (!what && (a->op == CT_OP_PARAM || a->op == CT_OP_BUFFER) && memcmp(a->shape, b->shape, sizeof a->shape))
            what = "parameter / buffer shape (only activations may change)";
        if (!what && ct_node_numel(b) > ct_node_numel(a)) what = "size (larger than compiled)";
        if (!what && (pb->aux_bytes > pa->aux_bytes || pb->ws_bytes > p->ws_bytes || pb->cvt_bytes > pa->cvt_bytes))
            what = "saved state, scratch or conversion bytes (larger than compiled)";
        if (what) {
            char sa[96], sb[96];
            return ct_set_error(p->ctx, CT_E_SHAPE, "add_shape: node %d '%s' (%s) differs in %s: compiled %s, new %s%s", i,
                                a->name, ct_op_table(a->op)->name, what, ct_shape_str(a->ndim, a->shape, sa, sizeof sa),
                                ct_shape_str(b->ndim, b->shape, sb, sizeof sb), fix);
        }
    }
    return CT_OK;
}

/* Variants equal in every node's shape and attributes. */
static int same_shapes(const ct_plan *a, const ct_plan *b) {
    for (int i = 0; i < a->g.n; i++) {
        const ct_node_def *x = &a->g.nodes[i], *y = &b->g.nodes[i];
        if (memcmp(x->shape, y->shape, sizeof x->shape) || memcmp(x->ia, y->ia, sizeof x->ia) ||
            memcmp(x->fa, y->fa, sizeof x->fa))
            return 0;
    }
    return 1;
}

ct_status ct_plan_add_shape(ct_plan *p, ct_graph *g, ct_node loss, int n_outputs, const ct_node *outputs, int *variant) {
    if (!p || !g || !variant) return CT_E_INVALID_ARG;
    if (p->plan_only) return ct_set_error(p->ctx, CT_E_STATE, "add_shape: this plan was compiled with plan_only");
    ct_compile_opts o;
    ct_compile_opts_default(&o);
    o.precision = p->precision;
    o.keep_fp32 = p->keep_fp32;
    o.build_backward = p->build_backward && (p->loss != CT_NONE || p->n_links);
    o.stage = p->stage_arrays ? &p->stage_keep : NULL; /* a pipeline stage: the same pieces */
    o.accumulate_grads = p->accumulate_grads;
    o.recompute_every = p->recompute_every;
    o.recompute_ops = p->recompute_ops;
    o.recompute_blocks = p->recompute_blocks;
    o.fusion_level = p->fusion_level; /* the same fusions, so the same nodes */
    o.fusion_rules = p->rules_copy;
    o.memory_opt = p->memory_opt;
    o.plan_only = 1;
    ct_plan *v = NULL;
    CT_TRY(ct_compile(g, loss, n_outputs, outputs, &o, &v));
    ct_status s = check_variant(p, v);
    for (int k = 0; s == CT_OK && k < p->n_variants; k++)
        if (same_shapes(p->variants[k], v)) { /* registered before: that id */
            ct_plan_free(v);
            *variant = k + 1;
            return CT_OK;
        }
    if (s == CT_OK && same_shapes(p, v)) { /* the compiled shapes */
        ct_plan_free(v);
        *variant = 0;
        return CT_OK;
    }
    ct_plan **nv = s == CT_OK ? realloc(p->variants, sizeof *nv * (size_t)(p->n_variants + 1)) : NULL;
    if (s == CT_OK && !nv) s = ct_set_error(p->ctx, CT_E_OOM, "add_shape: out of memory");
    if (s != CT_OK) {
        ct_plan_free(v);
        return s;
    }
    p->variants = nv;
    p->variants[p->n_variants++] = v;
    *variant = p->n_variants;
    return CT_OK;
}

ct_status ct_plan_set_shape(ct_plan *p, int variant) {
    if (!p) return CT_E_INVALID_ARG;
    if (variant < 0 || variant > p->n_variants)
        return ct_set_error(p->ctx, CT_E_INVALID_ARG, "set_shape: variant %d is not in [0, %d] (ct_plan_add_shape returns them)",
                            variant, p->n_variants);
    p->variant = variant;
    return CT_OK;
}

int ct_plan_shape(const ct_plan *p) { return p ? p->variant : 0; }


int ct_plan_num_shapes(const ct_plan *p) { return p ? 1 + p->n_variants : 0; }
