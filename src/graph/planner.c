/* src/graph/planner.c - the memory planner (the "plan_memory" pass of
 * ct_compile): storage roots and last uses of every live node, parameter
 * and gradient offsets (shared layout, 64-byte aligned per tensor), buffer
 * offsets, and a first-fit lifetime placement of activations, saved state
 * (aux) and the FP32 copies of low-precision I/O in one activation arena;
 * the low-precision copies of parameters (weight casts) in their own arena
 * in the parameters' layout, kept between steps.
 * Inputs occupy their memory for the whole step; reshapes alias their input.
 * Reads the kernel choice (aux/ws/cvt sizes) of pass_select_kernels; the
 * allocation pass then points every node into the arenas. */
#include <stdlib.h>
#include <string.h>

#include "plan.h"

typedef struct {
    size_t off, size;
    int end;
} block;

/* First-fit placement of [size] bytes among live blocks; frees blocks whose
 * lifetime ended before `now`. */
static size_t place(block *blocks, int *nb, int now, size_t size, int end, size_t *high) {
    int w = 0;
    for (int i = 0; i < *nb; i++)
        if (blocks[i].end >= now) blocks[w++] = blocks[i];
    *nb = w;
    /* blocks sorted by offset: scan gaps */
    size_t cand = 0;
    for (int i = 0; i < *nb; i++) {
        if (blocks[i].off >= cand + size) break;
        if (blocks[i].off + blocks[i].size > cand) cand = blocks[i].off + blocks[i].size;
    }
    int pos = 0;
    while (pos < *nb && blocks[pos].off < cand) pos++;
    memmove(&blocks[pos + 1], &blocks[pos], (size_t)(*nb - pos) * sizeof *blocks);
    blocks[pos] = (block){cand, size, end};
    (*nb)++;
    if (cand + size > *high) *high = cand + size;
    return cand;
}

/* Node i may write over its in[0] (ct_op_info.inplace): in[0]'s own
 * activation buffer, the same size, whose lifetime ends at i and that no
 * other input of i shares. Returns its block (its lifetime is then
 * extended to i's), or -1. */
static int inplace_block(const ct_plan *p, const block *blocks, int nb, int i) {
    const ct_node_def *d = &p->g.nodes[i];
    if (!ct_op_table(d->op)->inplace || d->n_in < 1) return -1;
    const ct_plan_node *pn = p->pn;
    ct_node r = pn[d->in[0]].root;
    if (pn[r].arena != CT_ARENA_ACT || p->g.nodes[r].op == CT_OP_INPUT || pn[r].bytes != pn[i].bytes) return -1;
    for (int j = 1; j < d->n_in; j++)
        if (pn[d->in[j]].root == r) return -1;
    for (int b = 0; b < nb; b++)
        if (blocks[b].off == pn[r].offset && blocks[b].size == pn[r].bytes) return blocks[b].end == i ? b : -1;
    return -1;
}

/* The parameter whose low-precision copy node i is (a forward cast of a
 * PARAM node to BF16/FP16, outside recompute copies), or -1. */
static int weight_cast_param(const ct_plan *p, int i) {
    const ct_node_def *d = &p->g.nodes[i];
    if (d->op != CT_OP_CAST || (d->flags & (CT_NODE_BACKWARD | CT_NODE_RECOMPUTE)) || !ct_dtype_is_low(d->dtype)) return -1;
    if (p->g.nodes[d->in[0]].op != CT_OP_PARAM) return -1;
    for (int k = 0; k < p->n_params; k++)
        if (p->params[k] == d->in[0]) return k;
    return -1;
}

ct_status ct_pass_plan_memory(ct_plan *p) {
    ct_graph *g = &p->g;
    ct_plan_node *pn = p->pn;
    int n = g->n;
    /* storage roots and last uses */
    for (int i = 0; i < n; i++) {
        pn[i].root = g->nodes[i].op == CT_OP_RESHAPE ? pn[g->nodes[i].in[0]].root : i;
        pn[i].last_use = i;
        pn[i].grad_of_param = -1;
    }
    for (int i = 0; i < n; i++) {
        if (!pn[i].live) continue;
        const ct_node_def *d = &g->nodes[i];
        for (int j = 0; j < d->n_in; j++) {
            ct_node r = pn[d->in[j]].root;
            if (pn[r].last_use < i) pn[r].last_use = i;
            if (pn[d->in[j]].last_use < i) pn[d->in[j]].last_use = i;
        }
    }
    for (int i = 0; i < n; i++) { /* an alias keeps its root alive */
        ct_node r = pn[i].root;
        if (pn[i].live && pn[r].last_use < pn[i].last_use) pn[r].last_use = pn[i].last_use;
    }
    /* A node's output lives to its last reader of the data; readers of the
     * saved state only (ct_op_info.state_inputs: a backward naming its
     * forward node) keep just the aux or nothing, so e.g. batchnorm+relu's
     * output is freed in forward while its mask bits wait for backward, and
     * an autocast plan's FP32 layernorm output dies once its BF16 cast is
     * made, not when layernorm_bwd reads the statistics. */
    int *data_end = NULL;
    if (p->memory_opt) {
        data_end = malloc(sizeof(int) * (size_t)n);
        if (!data_end) return ct_set_error(p->ctx, CT_E_OOM, "compile: out of memory planning activations");
        for (int i = 0; i < n; i++) data_end[i] = i;
        for (int i = 0; i < n; i++) {
            if (!pn[i].live) continue;
            const ct_node_def *d = &g->nodes[i];
            uint8_t st = ct_op_table(d->op)->state_inputs;
            for (int j = 0; j < d->n_in; j++) {
                if (st & (1u << j)) continue;
                ct_node r = pn[d->in[j]].root;
                if (data_end[r] < i) data_end[r] = i;
            }
        }
        for (int i = 0; i < n; i++) { /* aliases: their readers read the root's data */
            ct_node r = pn[i].root;
            if (pn[i].live && r != i && data_end[r] < pn[i].last_use) data_end[r] = pn[i].last_use;
        }
        if (p->loss != CT_NONE) data_end[pn[p->loss].root] = n;
        for (int i = 0; i < p->n_outputs; i++) data_end[pn[p->outputs[i]].root] = n;
    }
    if (p->loss != CT_NONE) pn[pn[p->loss].root].last_use = n;
    for (int i = 0; i < p->n_outputs; i++) pn[pn[p->outputs[i]].root].last_use = n;
    /* parameters and their gradients */
    size_t off = 0;
    for (int i = 0; i < p->n_params; i++) {
        ct_node q = p->params[i];
        p->param_off[i] = off;
        pn[q].arena = CT_ARENA_PARAM;
        pn[q].offset = off * sizeof(float);
        off += ct_align_up((size_t)ct_node_numel(&g->nodes[q]), CT_ALIGN / sizeof(float));
        if (p->param_grads[i] != CT_NONE) {
            ct_node gq = p->param_grads[i];
            if (!p->accumulate_grads) { /* accumulate: planned as an activation below */
                pn[gq].arena = CT_ARENA_GRAD;
                pn[gq].offset = pn[q].offset;
            }
            pn[gq].grad_of_param = i;
        }
    }
    p->n_param_floats = off;
    off = 0;
    for (int i = 0; i < n; i++) {
        if (g->nodes[i].op != CT_OP_BUFFER) continue;
        pn[i].arena = CT_ARENA_BUFFER;
        pn[i].offset = off * sizeof(float);
        off += ct_align_up((size_t)ct_node_numel(&g->nodes[i]), CT_ALIGN / sizeof(float));
    }
    p->n_buffer_floats = off;
    /* low-precision weight copies: at their parameter's element offset in an
     * arena of the parameters' layout, kept between steps (one dtype per plan) */
    p->wcast_bytes = 0;
    for (int i = 0; i < n; i++) {
        int k = pn[i].live ? weight_cast_param(p, i) : -1;
        if (k < 0 || (p->wcast_bytes && g->nodes[i].dtype != p->wcast_dtype)) continue;
        p->wcast_dtype = g->nodes[i].dtype;
        p->wcast_bytes = p->n_param_floats * ct_dtype_size(p->wcast_dtype);
        pn[i].arena = CT_ARENA_WCAST;
        pn[i].offset = p->param_off[k] * ct_dtype_size(p->wcast_dtype);
        pn[i].bytes = (size_t)ct_node_numel(&g->nodes[i]) * ct_dtype_size(p->wcast_dtype);
    }
    /* activations: inputs live for the whole step, the rest by lifetime */
    block *blocks = malloc(sizeof(block) * (size_t)(3 * n + 2));
    if (!blocks) {
        free(data_end);
        return ct_set_error(p->ctx, CT_E_OOM, "compile: out of memory planning activations");
    }
    int nb = 0;
    size_t high = 0, sum = 0; /* sum: the arena without reuse */
    const int keep_all = !p->memory_opt; /* memory_opt off: nothing is ever freed */
    /* inputs are written before the step starts, wherever they were declared:
     * they occupy their memory for the whole step (time 0 to n) */
    for (int i = 0; i < n; i++) {
        const ct_node_def *d = &g->nodes[i];
        if (!pn[i].live || d->op != CT_OP_INPUT) continue;
        pn[i].bytes = ct_align_up((size_t)ct_node_numel(d) * ct_dtype_size(d->dtype), CT_ALIGN);
        pn[i].arena = CT_ARENA_ACT;
        pn[i].offset = place(blocks, &nb, 0, pn[i].bytes, n, &high);
        sum += pn[i].bytes;
    }
    for (int i = 0; i < n; i++) {
        const ct_node_def *d = &g->nodes[i];
        if (!pn[i].live || d->op == CT_OP_INPUT) continue;
        if (pn[i].arena != CT_ARENA_WCAST) pn[i].bytes = ct_align_up((size_t)ct_node_numel(d) * ct_dtype_size(d->dtype), CT_ALIGN);
        if (d->op == CT_OP_RESHAPE) {
            pn[i].arena = CT_ARENA_ALIAS;
            continue;
        }
        int end = keep_all ? n : pn[i].last_use;
        if (pn[i].arena == CT_ARENA_NONE) {
            int dend = !keep_all && data_end ? data_end[i] : end;
            pn[i].arena = CT_ARENA_ACT;
            int ib = keep_all ? -1 : inplace_block(p, blocks, nb, i);
            if (ib >= 0) { /* in place: in[0]'s buffer lives on as i's output */
                pn[i].offset = blocks[ib].off;
                blocks[ib].end = dend;
            } else {
                pn[i].offset = place(blocks, &nb, i, pn[i].bytes, dend, &high);
            }
            sum += pn[i].bytes;
        }
        if (pn[i].aux_bytes) {
            pn[i].aux_offset = place(blocks, &nb, i, ct_align_up(pn[i].aux_bytes, CT_ALIGN), end, &high);
            sum += ct_align_up(pn[i].aux_bytes, CT_ALIGN);
        }
        /* FP32 copies of low-precision I/O live only while the node runs */
        if (pn[i].cvt_bytes) {
            pn[i].cvt_offset = place(blocks, &nb, i, pn[i].cvt_bytes, keep_all ? n : i, &high);
            sum += pn[i].cvt_bytes;
        }
    }
    free(blocks);
    free(data_end);
    p->act_bytes = high;
    p->act_bytes_no_reuse = sum;
    return CT_OK;
}

