/* src/graph/compile.c - ct_compile: snapshot the user's graph, then run the
 * ordered list of graph passes (k_passes: autocast, autodiff, recompute,
 * fusion, liveness, kernel selection, memory planning, allocation); the
 * autodiff and liveness passes themselves; ct_plan_free. The other passes
 * live in their own files (autocast.c, recompute.c, fusion.c,
 * kernel_select.c, planner.c, allocate.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autodiff.h"
#include "plan.h"

/* ---- pass: autodiff ------------------------------------------------------------ */

static ct_status ensure_exclusive(ct_plan *p, ct_node *gnode, const uint8_t *claimed) {
    ct_graph *g = &p->g;
    const ct_node_def *d = &g->nodes[*gnode];
    if (d->op != CT_OP_RESHAPE && (d->flags & CT_NODE_BACKWARD) && !claimed[*gnode]) return CT_OK;
    ct_node c;
    CT_TRY(ct_scale(g, *gnode, 1.0f, &c));
    g->nodes[c].flags |= CT_NODE_BACKWARD;
    *gnode = c;
    return CT_OK;
}

/* The seeds of backward: the loss's (p->seed, the loss scale) and each outgoing link's gradient (a pipeline
 * stage's, written by the caller): an input of the link's dtype and shape, kept in p->outputs. */
static ct_status make_seeds(ct_plan *p, ct_node *roots, ct_node *seeds, int *nr) {
    ct_graph *g = &p->g;
    *nr = 0;
    if (p->loss != CT_NONE) {
        const ct_node_def *L = &g->nodes[p->loss];
        if (L->ndim != 0 || L->dtype != CT_F32)
            return ct_set_error(p->ctx, CT_E_SHAPE, "compile: the loss '%s' must be an f32 scalar", L->name);
        CT_TRY(ct_input(g, "loss.grad", CT_F32, 0, NULL, &p->seed));
        g->nodes[p->seed].flags |= g->nodes[p->loss].flags & ~((1u << CT_NODE_PART_SHIFT) - 1u);
        roots[*nr] = p->loss, seeds[(*nr)++] = p->seed;
    }
    for (int i = 0; i < p->n_links; i++) {
        ct_stage_link *l = &p->links[i];
        const ct_node v = p->outputs[l->value];
        if (l->dir != 1 || !ct_dtype_is_float(g->nodes[v].dtype)) continue;
        char name[CT_NAME_LEN];
        snprintf(name, sizeof name, "%.*s.grad", CT_NAME_LEN - 8, g->nodes[v].name);
        ct_node sd;
        CT_TRY(ct_input(g, name, g->nodes[v].dtype, g->nodes[v].ndim, g->nodes[v].shape, &sd));
        g->nodes[sd].flags |= (uint32_t)(l->part + 1) << CT_NODE_PART_SHIFT;
        CT_TRY(ct_stage_keep(p, sd, &l->grad));
        roots[*nr] = v, seeds[(*nr)++] = sd;
    }
    return CT_OK;
}

static ct_status pass_autodiff(ct_plan *p) {
    ct_graph *g = &p->g;
    int n_out = 0;
    for (int i = 0; i < p->n_links; i++) n_out += p->links[i].dir == 1;
    if (!p->build_backward || (p->loss == CT_NONE && !n_out)) return CT_OK;
    ct_node *roots = malloc(sizeof(ct_node) * (size_t)(n_out + 1)), *seeds = malloc(sizeof(ct_node) * (size_t)(n_out + 1));
    int nr = 0;
    ct_status s = roots && seeds ? make_seeds(p, roots, seeds, &nr) : ct_set_error(p->ctx, CT_E_OOM, "compile: out of memory");
    int n_fwd = g->n;
    ct_node *grads = s == CT_OK ? malloc((size_t)n_fwd * sizeof *grads) : NULL;
    uint8_t *req = s == CT_OK ? calloc((size_t)n_fwd, 1) : NULL;
    if (s == CT_OK && (!grads || !req)) s = ct_set_error(p->ctx, CT_E_OOM, "compile: out of memory in autodiff");
    if (s == CT_OK) s = ct_autodiff_roots(g, nr, roots, seeds, grads, req);
    for (int i = 0; s == CT_OK && i < p->n_params; i++) p->param_grads[i] = grads[p->params[i]];
    for (int i = 0; s == CT_OK && i < p->n_links; i++) { /* incoming links: their gradients, kept */
        ct_stage_link *l = &p->links[i];
        ct_node in = p->outputs[l->value];
        if (l->dir == 0 && req[in] && grads[in] != CT_NONE) s = ct_stage_keep(p, grads[in], &l->grad);
    }
    free(roots);
    free(seeds);
    free(grads);
    free(req);
    CT_TRY(s);
    uint8_t *claimed = calloc((size_t)g->n + (size_t)p->n_params, 1);
    if (!claimed) return ct_set_error(p->ctx, CT_E_OOM, "compile: out of memory in autodiff");
    for (int i = 0; i < p->n_params && s == CT_OK; i++) {
        if (p->param_grads[i] == CT_NONE) continue;
        s = ensure_exclusive(p, &p->param_grads[i], claimed);
        if (s == CT_OK) claimed[p->param_grads[i]] = 1;
    }
    free(claimed);
    return s;
}

/* ---- pass: liveness (dead-node elimination) ----------------------------------- */

static ct_status pass_liveness(ct_plan *p) {
    ct_graph *g = &p->g;
    ct_plan_node *pn = p->pn;
    if (p->loss != CT_NONE) pn[p->loss].live = 1;
    for (int i = 0; i < p->n_outputs; i++) pn[p->outputs[i]].live = 1;
    for (int i = 0; i < p->n_params; i++) {
        pn[p->params[i]].live = 1;
        if (p->param_grads[i] != CT_NONE) pn[p->param_grads[i]].live = 1;
    }
    for (int i = g->n - 1; i >= 0; i--) {
        const ct_node_def *d = &g->nodes[i];
        if (d->op == CT_OP_INPUT || d->op == CT_OP_BUFFER) pn[i].live = 1; /* always addressable */
        if (!pn[i].live) continue;
        for (int j = 0; j < d->n_in; j++) pn[d->in[j]].live = 1;
    }
    return CT_OK;
}

/* The ordered list of graph passes. */
static const struct {
    const char *name;
    ct_pass_fn fn;
} k_passes[] = {
    {"stage", ct_pass_stage},
    {"autocast", ct_pass_autocast},
    {"autodiff", pass_autodiff},
    {"recompute", ct_pass_recompute},
    {"fusion", ct_pass_fusion},
    {"liveness", pass_liveness},
    {"select_kernels", ct_pass_select_kernels},
    {"plan_memory", ct_pass_plan_memory},
    {"allocate", ct_pass_allocate},
};

void ct_compile_opts_default(ct_compile_opts *o) {
    o->precision = CT_PRECISION_FP32;
    o->keep_fp32 = NULL;
    o->build_backward = 1;
    o->init_params = 1;
    o->accumulate_grads = 0;
    o->recompute_every = 0;
    o->recompute_ops = 0;
    o->recompute_blocks = 0;
    o->plan_only = 0;
    o->fusion_level = 0; /* the library's plans stay as they were; recipes default to 1 */
    o->fusion_rules = NULL;
    o->memory_opt = 1;
    o->stage = NULL;
}

ct_status ct_compile(ct_graph *src, ct_node loss, int n_outputs, const ct_node *outputs, const ct_compile_opts *opts,
                     ct_plan **out) {
    if (!src || !out || n_outputs < 0 || (n_outputs && !outputs)) return CT_E_INVALID_ARG;
    *out = NULL;
    ct_context *ctx = src->ctx;
    ct_compile_opts dflt;
    if (!opts) {
        ct_compile_opts_default(&dflt);
        opts = &dflt;
    }
    CT_TRY(ct_op_table_check(ctx)); /* a row without its facts: a bug, caught by every test */
    if (loss != CT_NONE) CT_TRY(ct_graph_check_node(src, loss, "compile"));
    for (int i = 0; i < n_outputs; i++) CT_TRY(ct_graph_check_node(src, outputs[i], "compile"));
    ct_plan *p = calloc(1, sizeof *p);
    if (!p) return ct_set_error(ctx, CT_E_OOM, "compile: out of memory");
    p->ctx = ctx;
    p->g.ctx = ctx;
    p->g.tp = src->tp;
    p->g.tp_rank = src->tp_rank;
    p->g.tp_size = src->tp_size ? src->tp_size : 1;
    p->loss = opts->build_backward ? loss : CT_NONE;
    p->build_backward = opts->build_backward;
    p->stage_opts = opts->stage;
    p->run_part = -1;
    p->seed = CT_NONE;
    p->loss_scale = 1.0f;
    p->accumulate_grads = opts->accumulate_grads != 0;
    p->recompute_every = opts->recompute_every;
    p->recompute_ops = opts->recompute_ops;
    p->recompute_blocks = opts->recompute_blocks;
    p->plan_only = opts->plan_only;
    p->precision = opts->precision;
    p->fusion_level = opts->fusion_level;
    p->fusion_rules = opts->fusion_rules;
    p->memory_opt = opts->memory_opt;
    p->n_user = src->n;
    ct_status s = CT_OK;
    if ((unsigned)opts->precision >= CT_PRECISION_COUNT)
        s = ct_set_error(ctx, CT_E_INVALID_ARG, "compile: precision %d is not a ct_precision", (int)opts->precision);
    if (s == CT_OK && (opts->fusion_level < 0 || opts->fusion_level > 2))
        s = ct_set_error(ctx, CT_E_INVALID_ARG, "compile: fusion_level %d must be 0, 1 or 2", opts->fusion_level);
    if (s == CT_OK && opts->keep_fp32 && opts->keep_fp32[0]) {
        p->keep_fp32 = malloc(strlen(opts->keep_fp32) + 1);
        if (!p->keep_fp32) s = ct_set_error(ctx, CT_E_OOM, "compile: out of memory");
        else strcpy(p->keep_fp32, opts->keep_fp32);
    }
    /* snapshot the graph */
    if (s == CT_OK) {
        p->g.nodes = malloc(sizeof(ct_node_def) * (size_t)(src->n ? src->n : 1));
        p->outputs = malloc(sizeof(ct_node) * (size_t)(n_outputs + 1));
        if (!p->g.nodes || !p->outputs) s = ct_set_error(ctx, CT_E_OOM, "compile: out of memory");
    }
    if (s == CT_OK) {
        memcpy(p->g.nodes, src->nodes, sizeof(ct_node_def) * (size_t)src->n);
        p->g.n = p->g.cap = src->n;
        p->n_fwd = src->n;
        p->n_outputs = n_outputs;
        if (n_outputs) memcpy(p->outputs, outputs, sizeof(ct_node) * (size_t)n_outputs);
        if (loss != CT_NONE) p->outputs[p->n_outputs++] = loss;
        for (int i = 0; i < src->n; i++) p->n_params += src->nodes[i].op == CT_OP_PARAM;
        p->params = malloc(sizeof(ct_node) * (size_t)(p->n_params + 1));
        p->param_grads = malloc(sizeof(ct_node) * (size_t)(p->n_params + 1));
        p->param_off = malloc(sizeof(size_t) * (size_t)(p->n_params + 1));
        if (!p->params || !p->param_grads || !p->param_off) s = ct_set_error(ctx, CT_E_OOM, "compile: out of memory");
    }
    if (s == CT_OK) {
        int k = 0;
        for (int i = 0; i < src->n; i++)
            if (src->nodes[i].op == CT_OP_PARAM) {
                p->params[k] = i;
                p->param_grads[k++] = CT_NONE;
            }
    }
    for (size_t i = 0; s == CT_OK && i < sizeof k_passes / sizeof k_passes[0]; i++) {
        if (k_passes[i].fn == pass_liveness) { /* node count is final after autodiff */
            p->pn = calloc((size_t)(p->g.n ? p->g.n : 1), sizeof *p->pn); /* calloc(0) may be NULL */
            if (!p->pn) s = ct_set_error(ctx, CT_E_OOM, "compile: out of memory");
        }
        if (p->plan_only && k_passes[i].fn == ct_pass_allocate) break;
        if (s == CT_OK) s = k_passes[i].fn(p);
    }
    if (s == CT_OK) s = ct_stage_parts(p);
    p->stage_opts = NULL;
    p->fusion_rules = NULL; /* the caller's: read during compile only; the copy serves ct_plan_add_shape */
    if (s == CT_OK && opts->fusion_rules && !(p->rules_copy = ct_fusion_rules_clone(opts->fusion_rules)))
        s = ct_set_error(p->ctx, CT_E_OOM, "out of memory copying the fusion rules");
    if (s == CT_OK && !opts->init_params && p->n_param_floats) /* no params: no arena */
        memset(p->param_arena, 0, p->n_param_floats * sizeof(float));
    if (s != CT_OK) {
        ct_plan_free(p);
        return s;
    }
    *out = p;
    return CT_OK;
}

void ct_plan_free(ct_plan *p) {
    if (!p) return;
    for (int v = 0; v < p->n_variants; v++) ct_plan_free(p->variants[v]);
    free(p->variants);
    ct_fusion_rules_free(p->rules_copy);
    if (p->pn) {
        for (int i = 0; i < p->g.n; i++) {
            const ct_op_info *info = ct_op_table(p->g.nodes[i].op);
            if (p->pn[i].cache && info->cache_free) info->cache_free(p->pn[i].cache);
        }
    }
    ct_free(p->ctx, p->param_arena);
    ct_free(p->ctx, p->grad_arena);
    ct_free(p->ctx, p->buffer_arena);
    for (int k = 0; k < p->n_act_slots; k++) ct_free(p->ctx, p->act_slots[k]);
    free(p->act_slots);
    free(p->slot_part);
    ct_saved_sets_free(p);
    ct_free(p->ctx, p->act_arena);
    free(p->part);
    free(p->param_seq);
    free(p->buffer_seq);
    free(p->stand_ins);
    free(p->stage_arrays);
    free(p->links);
    ct_free(p->ctx, p->wcast_arena);
    ct_free(p->ctx, p->ws);
    ct_free(p->ctx, p->cvt_spill);
    ct_scratch_release(p->ctx, &p->scratch);
    free(p->keep_fp32);
    free(p->user_map);
    free(p->pn);
    free(p->g.nodes);
    free(p->outputs);
    free(p->params);
    free(p->param_grads);
    free(p->param_off);
    free(p->fused_group);
    free(p->groups);
    free(p->rule_hits);
    free(p);
}
