/* src/graph/plan_accessors.c - what a compiled plan hands out: tensors,
 * gradients, the loss, parameters and buffers (by index, by name, as
 * arenas), the low-precision weight copies, statistics, node dtypes and the
 * context. Nothing here runs a node. */
#include <string.h>

#include "plan.h"

void ct_plan_params_changed(ct_plan *p) {
    if (p) p->wcast_fresh = 0;
}

/* Internal (optim.c): the weight-copy arena (NULL: none) and its dtype; the
 * caller writes the casts of the whole parameter arena, then marks them
 * fresh with ct_plan_weight_copies_written. */
uint16_t *ct_plan_weight_copies(ct_plan *p, ct_dtype *dtype) {
    if (dtype) *dtype = p->wcast_dtype;
    return p->wcast_bytes ? p->wcast_arena : NULL;
}

void ct_plan_weight_copies_written(ct_plan *p) {
    p->wcast_fresh = p->wcast_bytes != 0;
    p->wcast_gen++; /* new contents: what kernels derived from the old ones is stale */
}
int ct_plan_weight_copies_fresh(const ct_plan *p) { return p && p->wcast_fresh; }

ct_status ct_plan_tensor(ct_plan *p, ct_node n, ct_tensor *out) {
    if (!p || !out) return CT_E_INVALID_ARG;
    ct_node u = n;
    n = ct_plan_map(p, n);
    if (n < 0)
        return ct_set_error(p->ctx, CT_E_INVALID_ARG, "plan_tensor: node %d is not in the compiled graph", (int)u);
    if (!p->pn[n].live || !p->pn[n].data)
        return ct_set_error(p->ctx, CT_E_STATE,
                            "plan_tensor: node '%s' is not kept by this plan; pass it in `outputs` to ct_compile",
                            p->g.nodes[n].name);
    *out = ct_plan_node_tensor(p, n);
    if (p->g.nodes[n].op == CT_OP_PARAM) p->wcast_fresh = 0; /* writable: the weight copies may go stale */
    return CT_OK;
}

static int param_index(const ct_plan *p, ct_node n) {
    for (int i = 0; i < p->n_params; i++)
        if (p->params[i] == n) return i;
    return -1;
}

ct_status ct_plan_grad(ct_plan *p, ct_node param, ct_tensor *out) {
    int i = param_index(p, ct_plan_map(p, param));
    if (i < 0) return ct_set_error(p->ctx, CT_E_INVALID_ARG, "plan_grad: node %d is not a parameter", (int)param);
    const ct_node_def *d = &p->g.nodes[param];
    *out = ct_tensor_make(p->grad_arena + p->param_off[i], CT_F32, d->ndim, d->shape);
    return CT_OK;
}

ct_status ct_plan_loss(ct_plan *p, float *out) {
    if (p->loss == CT_NONE) return ct_set_error(p->ctx, CT_E_STATE, "plan_loss: plan has no loss");
    *out = *(const float *)p->pn[p->loss].data;
    return CT_OK;
}

int ct_plan_num_params(const ct_plan *p) { return p->n_params; }

ct_status ct_plan_param_info(const ct_plan *p, int i, const char **name, ct_tensor *value, ct_tensor *grad) {
    if (i < 0 || i >= p->n_params) return CT_E_INVALID_ARG;
    const ct_node_def *d = &p->g.nodes[p->params[i]];
    if (name) *name = d->name;
    if (value) {
        *value = ct_tensor_make(p->param_arena + p->param_off[i], CT_F32, d->ndim, d->shape);
        ((ct_plan *)p)->wcast_fresh = 0; /* a writable view (the plan itself is never const): copies may go stale */
    }
    if (grad) *grad = ct_tensor_make(p->grad_arena + p->param_off[i], CT_F32, d->ndim, d->shape);
    return CT_OK;
}

/* Buffers are the CT_OP_BUFFER nodes in node order, which is their arena
 * order (the memory pass places them so). */
static ct_node buffer_node(const ct_plan *p, int i) {
    for (int n = 0, k = 0; n < p->g.n; n++)
        if (p->g.nodes[n].op == CT_OP_BUFFER && k++ == i) return n;
    return CT_NONE;
}

int ct_plan_num_buffers(const ct_plan *p) {
    int k = 0;
    for (int n = 0; n < p->g.n; n++) k += p->g.nodes[n].op == CT_OP_BUFFER;
    return k;
}

ct_status ct_plan_buffer_info(const ct_plan *p, int i, const char **name, ct_tensor *value) {
    ct_node n = i >= 0 ? buffer_node(p, i) : CT_NONE;
    if (n == CT_NONE)
        return ct_set_error(p->ctx, CT_E_INVALID_ARG, "plan_buffer_info: index %d is not in [0, %d)", i,
                            ct_plan_num_buffers(p));
    const ct_node_def *d = &p->g.nodes[n];
    if (name) *name = d->name;
    if (value) *value = ct_tensor_make(p->pn[n].data, CT_F32, d->ndim, d->shape);
    return CT_OK;
}

ct_status ct_plan_find_param(const ct_plan *p, const char *name, int *index) {
    for (int i = 0; name && i < p->n_params; i++)
        if (!strcmp(p->g.nodes[p->params[i]].name, name)) {
            if (index) *index = i;
            return CT_OK;
        }
    return ct_set_error(p->ctx, CT_E_INVALID_ARG, "plan_find_param: no parameter named '%s' in this plan",
                        name ? name : "(null)");
}

ct_status ct_plan_find_buffer(const ct_plan *p, const char *name, int *index) {
    for (int n = 0, k = 0; name && n < p->g.n; n++) {
        if (p->g.nodes[n].op != CT_OP_BUFFER) continue;
        if (!strcmp(p->g.nodes[n].name, name)) {
            if (index) *index = k;
            return CT_OK;
        }
        k++;
    }
    return ct_set_error(p->ctx, CT_E_INVALID_ARG, "plan_find_buffer: no buffer named '%s' in this plan",
                        name ? name : "(null)");
}

ct_status ct_plan_param_arena(ct_plan *p, float **params, float **grads, size_t *n) {
    if (params) {
        *params = p->param_arena;
        p->wcast_fresh = 0; /* a writable view: the weight copies may go stale */
    }
    if (grads) *grads = p->grad_arena;
    if (n) *n = p->n_param_floats;
    return CT_OK;
}

ct_status ct_plan_buffer_arena(ct_plan *p, float **buffers, size_t *n) {
    if (buffers) *buffers = p->buffer_arena;
    if (n) *n = p->n_buffer_floats;
    return CT_OK;
}

void ct_plan_get_stats(const ct_plan *p, ct_plan_stats *o) {
    _Static_assert(sizeof o->n_backward_by_kernel / sizeof o->n_backward_by_kernel[0] == CT_KERNEL_SLOTS,
                   "one count per kernel slot");
    memset(o, 0, sizeof *o);
    o->param_bytes = o->grad_bytes = p->n_param_floats * sizeof(float);
    o->buffer_bytes = p->n_buffer_floats * sizeof(float);
    o->activation_bytes = p->act_bytes;
    o->workspace_bytes = p->ws_bytes;
    o->cast_bytes = p->cvt_bytes;
    o->n_nodes = p->g.n;
    o->n_params = p->n_params;
    o->activation_bytes_no_reuse = p->act_bytes_no_reuse;
    o->n_fused = p->n_groups;
    o->weight_copy_bytes = p->wcast_bytes;
    for (int i = 0; p->pn && i < p->g.n; i++) {
        /* native: oneDNN runs the node in BF16; attention's SIMD kernels read BF16 too (simd) */
        if (ct_op_table(p->g.nodes[i].op)->onednn_bf16 && p->pn[i].slot == CT_KERNEL_ONEDNN)
            o->n_lowp_native += p->pn[i].lowp_native;
        else o->n_lowp_simd += p->pn[i].lowp_native;
        o->n_lowp_copied += p->pn[i].lowp_io;
        if (i >= p->n_fwd && p->pn[i].slot >= 0 && p->pn[i].slot < CT_KERNEL_SLOTS) o->n_backward_by_kernel[p->pn[i].slot]++;
    }
    for (int i = 0; p->pn && i < p->g.n; i++) { /* leaves (inputs, parameters) compute nothing */
        const ct_node_def *d = &p->g.nodes[i];
        if (!p->pn[i].live || d->n_in == 0) continue;
        *(i < p->n_fwd ? &o->flops_forward : &o->flops_backward) += ct_node_flops(&p->g, d);
        o->bytes_moved += ct_node_bytes(&p->g, d);
    }
}

ct_dtype ct_plan_node_dtype(const ct_plan *p, ct_node n) {
    n = ct_plan_map(p, n);
    return n < 0 ? CT_DTYPE_COUNT : p->g.nodes[n].dtype;
}

int ct_plan_num_casts(const ct_plan *p) { return p->n_casts; }

ct_context *ct_plan_context(const ct_plan *p) { return p->ctx; }
