/* src/graph/allocate.c - the allocation pass (the last of ct_compile's):
 * the plan's arenas (parameters, gradients, buffers, activations, weight
 * copies, scratch), every node's data pointer in them, and the parameters'
 * and buffers' initial values. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"

/* Counter-based: element i's value depends only on (seed, stream, i), so the
 * loops run threaded with the same result (GPT-2's 124M values: seconds
 * single-threaded). */
static void init_values(float *x, int64_t numel, ct_init init, int64_t fan_in, float std, uint64_t seed,
                        uint64_t stream, int nth) {
    nth = numel >= (1 << 16) ? nth : 1;
    switch (init) {
    case CT_INIT_ZEROS: memset(x, 0, (size_t)numel * sizeof *x); break;
    case CT_INIT_ONES: for (int64_t i = 0; i < numel; i++) x[i] = 1.0f; break;
    case CT_INIT_KAIMING_UNIFORM: {
        float b = 1.0f / sqrtf((float)(fan_in > 0 ? fan_in : 1));
#pragma omp parallel for num_threads(nth) schedule(static) if (nth > 1)
        for (int64_t i = 0; i < numel; i++) x[i] = (2.0f * ct_rand_uniform(seed, stream, (uint64_t)i) - 1.0f) * b;
        break;
    }
    case CT_INIT_NORMAL:
#pragma omp parallel for num_threads(nth) schedule(static) if (nth > 1)
        for (int64_t i = 0; i < numel; i++) {
            float u1 = ct_rand_uniform(seed, stream, 2 * (uint64_t)i), u2 = ct_rand_uniform(seed, stream, 2 * (uint64_t)i + 1);
            x[i] = std * sqrtf(-2.0f * logf(1.0f - u1)) * cosf(6.2831853f * u2);
        }
        break;
    }
}

ct_status ct_pass_allocate(ct_plan *p) {
    ct_graph *g = &p->g;
    ct_plan_node *pn = p->pn;
    size_t pb = p->n_param_floats * sizeof(float), bb = p->n_buffer_floats * sizeof(float);
    CT_TRY(ct_alloc(p->ctx, pb, (void **)&p->param_arena));
    CT_TRY(ct_alloc(p->ctx, pb, (void **)&p->grad_arena));
    CT_TRY(ct_alloc(p->ctx, bb, (void **)&p->buffer_arena));
    CT_TRY(ct_alloc(p->ctx, p->act_bytes, (void **)&p->act_arena));
    if (p->wcast_bytes) {
        CT_TRY(ct_alloc(p->ctx, p->wcast_bytes, (void **)&p->wcast_arena));
        memset(p->wcast_arena, 0, p->wcast_bytes);
    }
    CT_TRY(ct_alloc(p->ctx, p->ws_bytes, &p->ws));
    memset(p->param_arena, 0, pb);
    memset(p->grad_arena, 0, pb);
    memset(p->buffer_arena, 0, bb);
    memset(p->act_arena, 0, p->act_bytes);
    for (int i = 0; i < g->n; i++) {
        switch (pn[i].arena) {
        case CT_ARENA_PARAM: pn[i].data = (char *)p->param_arena + pn[i].offset; break;
        case CT_ARENA_GRAD: pn[i].data = (char *)p->grad_arena + pn[i].offset; break;
        case CT_ARENA_BUFFER: pn[i].data = (char *)p->buffer_arena + pn[i].offset; break;
        case CT_ARENA_ACT: pn[i].data = p->act_arena + pn[i].offset; break;
        case CT_ARENA_WCAST: pn[i].data = (char *)p->wcast_arena + pn[i].offset; break;
        default: break;
        }
        if (pn[i].aux_bytes) pn[i].aux = p->act_arena + pn[i].aux_offset;
    }
    for (int i = 0; i < g->n; i++)
        if (pn[i].arena == CT_ARENA_ALIAS) pn[i].data = pn[pn[i].root].data;
    uint64_t seed = ct_context_seed(p->ctx);
    const int nth = ct_context_num_threads(p->ctx);
    for (int i = 0; i < p->n_params; i++) {
        const ct_node_def *d = &g->nodes[p->params[i]];
        ct_shard sh;
        ct_node_shard(g, d, &sh);
        float *x = pn[p->params[i]].data, *whole = x;
        int64_t numel = ct_node_numel(d), full[CT_MAX_DIMS];
        if (sh.dim >= 0) { /* a shard: the whole tensor's values (one process's) at the shard's positions */
            ct_shard_full_shape(&sh, d->ndim, d->shape, full);
            numel = 1;
            for (int k = 0; k < d->ndim; k++) numel *= full[k];
            if (!(whole = malloc((size_t)numel * sizeof(float))))
                return ct_set_error(p->ctx, CT_E_OOM, "out of memory initializing '%s' (%lld floats)", d->name,
                                    (long long)numel);
        }
        int64_t fan_in = d->fan_in;
        init_values(whole, numel, d->init, fan_in, d->fa[0] > 0 ? d->fa[0] : 0.02f, seed,
                    0x5EED000000ull + (uint64_t)(p->param_seq ? p->param_seq[i] : i), /* the whole graph's */
                    nth);
        if (whole != x) {
            ct_shard_copy(&sh, d->ndim, d->shape, whole, x, 1);
            free(whole);
        }
    }
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i].op == CT_OP_BUFFER)
            init_values(pn[i].data, ct_node_numel(&g->nodes[i]), g->nodes[i].init, 0, 0.02f, seed, 0, nth);
    return CT_OK;
}

