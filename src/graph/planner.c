/* src/graph/planner.c - the memory planner (the "plan_memory" pass of
 * ct_compile): storage roots and last uses of every live node, parameter
 * and gradient offsets (shared layout, 64-byte aligned per tensor), buffer
 * offsets, and the placement of activations, saved state (aux) and the FP32
 * copies of low-precision I/O in one activation arena by their lifetimes;
 * the low-precision copies of parameters (weight casts) in their own arena
 * in the parameters' layout, kept between steps.
 *
 * Placement knows every lifetime in advance (a static graph): each buffer
 * is a request [start, end] x size, placed in several orders, the smallest
 * result kept: first-fit in program order (what an allocator running the
 * step would do), then largest, largest-area (bytes x lifetime) and
 * longest-lived first, each request at the lowest offset free of the
 * requests already placed that overlap it in time (the "greedy by size"
 * heuristic of inference engines' planners). None is optimal (the problem
 * is NP-hard); the ordered ones pack CNNs' many differently sized maps much
 * tighter (the Fashion CNN b128's FP32 arena at fusion level 1: 55.9 -> 37.7
 * MiB, its lower bound), first-fit is within ~2% of the lower bound (the
 * most bytes live at once) for the transformers. The search stops once a
 * placement reaches the lower bound.
 * Inputs occupy their memory for the whole step; reshapes alias their input.
 * Reads the kernel choice (aux/ws/cvt sizes) of pass_select_kernels; the
 * allocation pass then points every node into the arenas. */
#include <stdlib.h>
#include <string.h>

#include "plan.h"

/* One buffer of the activation arena: live from `start` to `end` (node
 * indices, both included), `size` bytes (a multiple of CT_ALIGN); `off` is
 * the placement's result. */
typedef struct {
    size_t size, off;
    int start, end;
} request;

static int overlaps(const request *a, const request *b) { return a->start <= b->end && b->start <= a->end; }

/* The lowest offset at which r fits beside the placed requests ord[0..np)
 * (sorted by offset) that overlap it in time; r goes into ord there. */
static size_t fit(const request *rq, int *ord, int *np, int r) {
    size_t cand = 0;
    int pos = 0;
    for (int k = 0; k < *np; k++) {
        const request *q = &rq[ord[k]];
        if (!overlaps(q, &rq[r])) continue;
        if (q->off >= cand + rq[r].size) break;
        if (q->off + q->size > cand) cand = q->off + q->size;
    }
    while (pos < *np && rq[ord[pos]].off <= cand) pos++;
    memmove(&ord[pos + 1], &ord[pos], (size_t)(*np - pos) * sizeof *ord);
    ord[pos] = r;
    (*np)++;
    return cand;
}

/* Places the n requests in the order `order` (each at the lowest offset
 * free of the placed ones it overlaps); returns the arena's size. ord: n
 * ints of scratch. */
static size_t place_all(request *rq, int n, const int *order, int *ord) {
    size_t high = 0;
    int np = 0;
    for (int k = 0; k < n; k++) {
        request *r = &rq[order[k]];
        r->off = fit(rq, ord, &np, order[k]);
        if (r->off + r->size > high) high = r->off + r->size;
    }
    return high;
}

static const request *g_sort_rq; /* qsort has no context argument */
static int tie(const request *x, const request *y, const void *a, const void *b) {
    if (x->start != y->start) return x->start < y->start ? -1 : 1;
    return *(const int *)a - *(const int *)b;
}
static int by_size_desc(const void *a, const void *b) {
    const request *x = &g_sort_rq[*(const int *)a], *y = &g_sort_rq[*(const int *)b];
    if (x->size != y->size) return x->size < y->size ? 1 : -1;
    return tie(x, y, a, b);
}
static int by_length_desc(const void *a, const void *b) { /* longest-lived first, then larger */
    const request *x = &g_sort_rq[*(const int *)a], *y = &g_sort_rq[*(const int *)b];
    int lx = x->end - x->start, ly = y->end - y->start;
    if (lx != ly) return lx < ly ? 1 : -1;
    if (x->size != y->size) return x->size < y->size ? 1 : -1;
    return tie(x, y, a, b);
}
static int by_area_desc(const void *a, const void *b) { /* bytes x lifetime */
    const request *x = &g_sort_rq[*(const int *)a], *y = &g_sort_rq[*(const int *)b];
    double ax = (double)x->size * (x->end - x->start + 1), ay = (double)y->size * (y->end - y->start + 1);
    if (ax != ay) return ax < ay ? 1 : -1;
    return tie(x, y, a, b);
}

/* The placement's invariant: requests that overlap in time do not overlap
 * in memory, and all lie below `high`. Returns the first offending pair
 * (*a, *b; b = -1: a past high), or 0. */
static int placement_broken(const request *rq, int nr, size_t high, int *a, int *b) {
    for (int x = 0; x < nr; x++) {
        if (rq[x].off + rq[x].size > high) return *a = x, *b = -1, 1;
        for (int y = x + 1; y < nr; y++)
            if (overlaps(&rq[x], &rq[y]) && rq[x].off < rq[y].off + rq[y].size && rq[y].off < rq[x].off + rq[x].size)
                return *a = x, *b = y, 1;
    }
    return 0;
}

/* The most bytes live at once: no placement can be smaller. *at: the first
 * node index where that many are live (-1: none). */
static size_t live_peak(const request *rq, int nr, int n, int64_t *delta, int *at) {
    memset(delta, 0, sizeof *delta * (size_t)(n + 2));
    for (int k = 0; k < nr; k++) {
        delta[rq[k].start] += (int64_t)rq[k].size;
        delta[rq[k].end + 1] -= (int64_t)rq[k].size;
    }
    int64_t live = 0, peak = 0;
    *at = -1;
    for (int t = 0; t <= n; t++) {
        live += delta[t];
        if (live > peak) peak = live, *at = t;
    }
    return (size_t)peak;
}

/* What is live at the peak t. A request's owner is the last node at or
 * before t that it serves (in place, one buffer serves several nodes);
 * own: nr ints of scratch. */
static void describe_peak(ct_plan *p, const request *rq, int nr, const int *rq_of, const int *aux_rq,
                          const int *cvt_rq, int t, int *own) {
    ct_act_peak *pk = &p->act_peak;
    memset(pk, 0, sizeof *pk);
    pk->at = t;
    if (t < 0) return;
    const ct_graph *g = &p->g;
    const int *const of[3] = {rq_of, aux_rq, cvt_rq}; /* kind 0 value, 1 saved state, 2 FP32 copies */
    for (int k = 0; k < nr; k++) own[k] = -1;
    for (int i = 0; i <= t && i < g->n; i++)
        for (int kind = 0; kind < 3; kind++)
            if (of[kind][i] >= 0 && of[kind][i] < nr) own[of[kind][i]] = 3 * i + kind;
    for (int k = 0; k < nr; k++) {
        if (own[k] < 0 || rq[k].start > t || rq[k].end < t) continue;
        const int i = own[k] / 3, kind = own[k] % 3;
        const size_t b = rq[k].size;
        const ct_node_def *d = &g->nodes[i];
        if (kind == 1) pk->aux += b;
        else if (kind == 2) pk->cvt += b;
        else {
            if (d->op == CT_OP_INPUT) pk->inputs += b;
            else if (d->flags & CT_NODE_BACKWARD) pk->bwd += b;
            else pk->fwd += b;
            if ((unsigned)d->dtype < CT_DTYPE_COUNT) pk->by_dtype[d->dtype] += b;
        }
        /* the largest, in order (ties: the earlier request first) */
        int pos = pk->n_top;
        while (pos > 0 && pk->top[pos - 1].bytes < b) pos--;
        if (pos >= CT_PEAK_TOP) continue;
        int last = pk->n_top < CT_PEAK_TOP ? pk->n_top : CT_PEAK_TOP - 1;
        memmove(&pk->top[pos + 1], &pk->top[pos], sizeof pk->top[0] * (size_t)(last - pos));
        pk->top[pos].node = i;
        pk->top[pos].kind = (uint8_t)kind;
        pk->top[pos].bytes = b;
        if (pk->n_top < CT_PEAK_TOP) pk->n_top++;
    }
}

/* Node i may write over its in[0] (ct_op_info.inplace): in[0]'s own
 * activation buffer (request rq_of[r]), the same size, whose lifetime ends
 * at i and that no other input of i shares. Returns that request (its
 * lifetime is then extended to i's), or -1. */
static int inplace_request(const ct_plan *p, const request *rq, const int *rq_of, int i) {
    const ct_node_def *d = &p->g.nodes[i];
    if (!ct_op_table(d->op)->inplace || d->n_in < 1) return -1;
    const ct_plan_node *pn = p->pn;
    ct_node r = pn[d->in[0]].root;
    if (pn[r].arena != CT_ARENA_ACT || p->g.nodes[r].op == CT_OP_INPUT || pn[r].bytes != pn[i].bytes) return -1;
    for (int j = 1; j < d->n_in; j++)
        if (pn[d->in[j]].root == r) return -1;
    return rq_of[r] >= 0 && rq[rq_of[r]].end == i ? rq_of[r] : -1;
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

static ct_status oom(ct_plan *p) {
    return ct_set_error(p->ctx, CT_E_OOM, "compile: out of memory planning activations");
}

/* Storage roots (a reshape aliases its input's root) and last uses: the
 * last live node that reads a node or, through an alias, its root. */
static void find_last_uses(ct_plan *p) {
    const ct_graph *g = &p->g;
    ct_plan_node *pn = p->pn;
    int n = g->n;
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
}

/* memory_opt: a node's output lives to its last reader of the data
 * (data_end, n ints); readers of the saved state only
 * (ct_op_info.state_inputs: a backward naming its forward node) keep just
 * the aux or nothing, so e.g. batchnorm+relu's output is freed in forward
 * while its mask bits wait for backward, and an autocast plan's FP32
 * layernorm output dies once its BF16 cast is made, not when
 * layernorm_bwd reads the statistics. */
static void find_data_ends(const ct_plan *p, int *data_end) {
    const ct_graph *g = &p->g;
    const ct_plan_node *pn = p->pn;
    int n = g->n;
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
}

/* The loss and the outputs are read after the step: their storage lives to
 * its end (time n). data_end: NULL without memory_opt. */
static void keep_results(ct_plan *p, int *data_end) {
    ct_plan_node *pn = p->pn;
    int n = p->g.n;
    if (data_end) {
        if (p->loss != CT_NONE) data_end[pn[p->loss].root] = n;
        for (int i = 0; i < p->n_outputs; i++) data_end[pn[p->outputs[i]].root] = n;
    }
    if (p->loss != CT_NONE) pn[pn[p->loss].root].last_use = n;
    for (int i = 0; i < p->n_outputs; i++) pn[pn[p->outputs[i]].root].last_use = n;
}

/* The node that parameter gradient node gq (written into the gradient arena, not accumulated) writes over
 * in place, planned in the gradient's slot instead of the activation arena; -1: none.
 *  - embedding_bwd+add in place (ia[3], fusion.c): its addend in[2], which the kernel adds rows into and
 *    never copies, so the slot is required;
 *  - with memory_opt, in[0] of an op that may write over it (ct_op_info.inplace, as inplace_request
 *    does for activations): a backward FP32 value of the gradient's size (or the root of a reshape of
 *    it) that gq reads last and no other input of gq shares; e.g. the add of a shared weight's two
 *    gradients at fusion level 0 writes over the first: no activation buffer for it.
 * Only backward nodes outside recomputation: nothing outside the backward pass runs between it and gq
 * (ct_plan_zero_grads, an optimizer, a bucket of this parameter all come before or after). */
static ct_node grad_inplace_input(const ct_plan *p, ct_node gq) {
    const ct_node_def *G = &p->g.nodes[gq];
    if (G->op == CT_OP_EMBEDDING_BWD && G->n_in == 3 && G->ia[3]) return G->in[2];
    if (!p->memory_opt || !ct_op_table(G->op)->inplace || G->n_in < 1 || G->dtype != CT_F32 ||
        (p->fused_group && p->fused_group[gq] >= 0)) /* (a group's kernel may write it another way) */
        return -1;
    const ct_plan_node *pn = p->pn;
    ct_node r = pn[G->in[0]].root;
    const ct_node_def *R = &p->g.nodes[r];
    if (!(R->flags & CT_NODE_BACKWARD) || (R->flags & CT_NODE_RECOMPUTE) || R->dtype != CT_F32 ||
        ct_node_numel(R) != ct_node_numel(G) || pn[r].arena != CT_ARENA_NONE || pn[r].last_use != gq ||
        pn[r].grad_of_param >= 0 || ct_plan_is_param_grad(p, r))
        return -1;
    for (int j = 1; j < G->n_in; j++)
        if (pn[G->in[j]].root == r) return -1;
    return r;
}

/* Parameters and their gradients share one layout: each tensor at a
 * 64-byte aligned float offset (param_off). With accumulate_grads the
 * gradients are planned as activations instead. */
static void lay_out_params(ct_plan *p) {
    ct_plan_node *pn = p->pn;
    size_t off = 0;
    for (int i = 0; i < p->n_params; i++) {
        ct_node q = p->params[i];
        p->param_off[i] = off;
        pn[q].arena = CT_ARENA_PARAM;
        pn[q].offset = off * sizeof(float);
        off += ct_align_up((size_t)ct_node_numel(&p->g.nodes[q]), CT_ALIGN / sizeof(float));
        if (p->param_grads[i] != CT_NONE) {
            ct_node gq = p->param_grads[i];
            if (!p->accumulate_grads) { /* accumulate: planned as an activation below */
                pn[gq].arena = CT_ARENA_GRAD;
                pn[gq].offset = pn[q].offset;
                ct_node x = grad_inplace_input(p, gq); /* written into the slot, then gq writes over it */
                if (x >= 0) {
                    pn[x].arena = CT_ARENA_GRAD;
                    pn[x].offset = pn[q].offset;
                }
            }
            pn[gq].grad_of_param = i;
        }
    }
    p->n_param_floats = off;
}

/* Buffers (batchnorm running statistics): one arena, 64-byte aligned. */
static void lay_out_buffers(ct_plan *p) {
    size_t off = 0;
    for (int i = 0; i < p->g.n; i++) {
        if (p->g.nodes[i].op != CT_OP_BUFFER) continue;
        p->pn[i].arena = CT_ARENA_BUFFER;
        p->pn[i].offset = off * sizeof(float);
        off += ct_align_up((size_t)ct_node_numel(&p->g.nodes[i]), CT_ALIGN / sizeof(float));
    }
    p->n_buffer_floats = off;
}

/* Low-precision weight copies: at their parameter's element offset in an
 * arena of the parameters' layout, kept between steps (one dtype per plan). */
static void place_weight_casts(ct_plan *p) {
    const ct_graph *g = &p->g;
    ct_plan_node *pn = p->pn;
    p->wcast_bytes = 0;
    for (int i = 0; i < g->n; i++) {
        int k = pn[i].live ? weight_cast_param(p, i) : -1;
        if (k < 0 || (p->wcast_bytes && g->nodes[i].dtype != p->wcast_dtype)) continue;
        p->wcast_dtype = g->nodes[i].dtype;
        p->wcast_bytes = p->n_param_floats * ct_dtype_size(p->wcast_dtype);
        pn[i].arena = CT_ARENA_WCAST;
        pn[i].offset = p->param_off[k] * ct_dtype_size(p->wcast_dtype);
        pn[i].bytes = (size_t)ct_node_numel(&g->nodes[i]) * ct_dtype_size(p->wcast_dtype);
    }
}

/* The activation arena's requests rq[0..nr): per node its output (rq_of),
 * saved state (aux_rq) and FP32 copies (cvt_rq), -1: none; sum: the arena
 * without reuse. */
typedef struct {
    request *rq;
    int nr;
    int *rq_of, *aux_rq, *cvt_rq;
    size_t sum;
} requests;

static int add_request(requests *R, size_t size, int start, int end) {
    R->rq[R->nr] = (request){size, 0, start, end};
    R->sum += size;
    return R->nr++;
}

/* Inputs are written before the step starts, wherever they were declared:
 * they occupy their memory for the whole step (time 0 to n). */
static void add_input_requests(ct_plan *p, requests *R) {
    ct_plan_node *pn = p->pn;
    int n = p->g.n;
    for (int i = 0; i < n; i++) {
        const ct_node_def *d = &p->g.nodes[i];
        if (!pn[i].live || d->op != CT_OP_INPUT) continue;
        pn[i].bytes = ct_align_up((size_t)ct_node_numel(d) * ct_dtype_size(d->dtype), CT_ALIGN);
        pn[i].arena = CT_ARENA_ACT;
        R->rq_of[i] = add_request(R, pn[i].bytes, 0, n);
    }
}

/* Node i's requests: its output, by lifetime (to its data end, or in place
 * over in[0]'s buffer), unless another arena holds it or it is an alias;
 * its saved state to its last use; FP32 copies of low-precision I/O only
 * while it runs. keep_all (memory_opt off): everything lives to the end. */
static void add_node_requests(ct_plan *p, requests *R, const int *data_end, int keep_all, int i) {
    ct_plan_node *pn = p->pn;
    const ct_node_def *d = &p->g.nodes[i];
    int n = p->g.n;
    if (pn[i].arena != CT_ARENA_WCAST) pn[i].bytes = ct_align_up((size_t)ct_node_numel(d) * ct_dtype_size(d->dtype), CT_ALIGN);
    if (d->op == CT_OP_RESHAPE) {
        pn[i].arena = CT_ARENA_ALIAS;
        return;
    }
    int end = keep_all ? n : pn[i].last_use;
    if (pn[i].arena == CT_ARENA_NONE) {
        int dend = !keep_all && data_end ? data_end[i] : end;
        pn[i].arena = CT_ARENA_ACT;
        int ir = keep_all ? -1 : inplace_request(p, R->rq, R->rq_of, i);
        if (ir >= 0) { /* in place: in[0]'s buffer lives on as i's output */
            R->rq[ir].end = dend;
            R->rq_of[i] = ir;
            R->sum += pn[i].bytes;
        } else {
            /* a cast its input's kernel writes (layernorm_bwd+cast): live from that node's place */
            int start = d->op == CT_OP_CAST && d->ia[1] ? d->in[0] : i;
            R->rq_of[i] = add_request(R, pn[i].bytes, start, dend);
        }
    }
    if (pn[i].aux_bytes) R->aux_rq[i] = add_request(R, ct_align_up(pn[i].aux_bytes, CT_ALIGN), i, end);
    if (pn[i].cvt_bytes) R->cvt_rq[i] = add_request(R, pn[i].cvt_bytes, i, keep_all ? n : i);
}

/* Every activation request of the plan (inputs first); sets each node's
 * bytes and arena (ACT or ALIAS) on the way. */
static ct_status collect_requests(ct_plan *p, const int *data_end, requests *R) {
    int n = p->g.n;
    R->rq = malloc(sizeof(request) * (size_t)(3 * n + 2));
    R->rq_of = malloc(sizeof(int) * (size_t)(3 * (n + 1)));
    if (!R->rq || !R->rq_of) return oom(p);
    R->aux_rq = R->rq_of + n + 1;
    R->cvt_rq = R->aux_rq + n + 1;
    for (int i = 0; i < 3 * (n + 1); i++) R->rq_of[i] = -1;
    add_input_requests(p, R);
    for (int i = 0; i < n; i++)
        if (p->pn[i].live && p->g.nodes[i].op != CT_OP_INPUT) add_node_requests(p, R, data_end, !p->memory_opt, i);
    return CT_OK;
}

/* Places the requests in every order (see the file comment) and leaves the
 * smallest placement's offsets in R->rq; *high: its size. Sets the lower
 * bound (act_bytes_min) and what is live at that peak (act_peak) first. */
static ct_status place_requests(ct_plan *p, requests *R, size_t *high) {
    static int (*const orders[])(const void *, const void *) = {NULL, by_size_desc, by_area_desc, by_length_desc};
    request *rq = R->rq;
    int nr = R->nr, n = p->g.n;
    int *order = malloc(sizeof(int) * (size_t)(2 * nr + 1));
    size_t *best = malloc(sizeof(size_t) * (size_t)(nr + 1));
    int64_t *delta = malloc(sizeof(int64_t) * (size_t)(n + 2));
    if (!order || !best || !delta) {
        free(order);
        free(best);
        free(delta);
        return oom(p);
    }
    int *ord = order + nr;
    int peak_at;
    p->act_bytes_min = live_peak(rq, nr, n, delta, &peak_at);
    describe_peak(p, rq, nr, R->rq_of, R->aux_rq, R->cvt_rq, peak_at, order); /* order: scratch until the placements */
    *high = SIZE_MAX;
    /* the first order always runs and is always kept (best filled), the others while above the bound */
    for (int v = 0; v < (int)(sizeof orders / sizeof orders[0]) && (v == 0 || *high > p->act_bytes_min); v++) {
        for (int k = 0; k < nr; k++) order[k] = k;
        g_sort_rq = rq;
        if (orders[v]) qsort(order, (size_t)nr, sizeof *order, orders[v]);
        size_t h = place_all(rq, nr, order, ord);
        if (v == 0 || h < *high) {
            *high = h;
            for (int k = 0; k < nr; k++) best[k] = rq[k].off;
        }
    }
    if (!nr) *high = 0;
    for (int k = 0; k < nr; k++) rq[k].off = best[k];
    free(order);
    free(best);
    free(delta);
    return CT_OK;
}

static ct_status check_placement(ct_plan *p, const requests *R, size_t high) {
    int ba, bb;
    if (!placement_broken(R->rq, R->nr, high, &ba, &bb)) return CT_OK;
    return ct_set_error(p->ctx, CT_E_INTERNAL,
                        "compile: the memory planner placed buffer %d (nodes %d..%d) over %d; please report this "
                        "with the model (ctrain graph); the recipe key memory_opt = false avoids reuse",
                        ba, R->rq[ba].start, R->rq[ba].end, bb);
}

/* Points each node's output, aux and FP32 copies at their requests' offsets. */
static void write_offsets(ct_plan *p, const requests *R) {
    ct_plan_node *pn = p->pn;
    for (int i = 0; i < p->g.n; i++) {
        if (R->rq_of[i] >= 0 && pn[i].arena == CT_ARENA_ACT) pn[i].offset = R->rq[R->rq_of[i]].off;
        if (R->aux_rq[i] >= 0) pn[i].aux_offset = R->rq[R->aux_rq[i]].off;
        if (R->cvt_rq[i] >= 0) pn[i].cvt_offset = R->rq[R->cvt_rq[i]].off;
    }
}

ct_status ct_pass_plan_memory(ct_plan *p) {
    find_last_uses(p);
    int *data_end = NULL;
    if (p->memory_opt) {
        data_end = malloc(sizeof(int) * (size_t)p->g.n);
        if (!data_end) return oom(p);
        find_data_ends(p, data_end);
    }
    keep_results(p, data_end);
    lay_out_params(p);
    lay_out_buffers(p);
    place_weight_casts(p);
    /* activations: inputs live for the whole step, the rest by lifetime */
    requests R = {0};
    ct_status s = collect_requests(p, data_end, &R);
    free(data_end);
    size_t high = 0;
    if (s == CT_OK) s = place_requests(p, &R, &high);
    if (s == CT_OK) s = check_placement(p, &R, high);
    if (s == CT_OK) {
        write_offsets(p, &R);
        p->act_bytes = high;
        p->act_bytes_no_reuse = R.sum;
    }
    free(R.rq);
    free(R.rq_of);
    return s;
}
