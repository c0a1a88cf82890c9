/* src/graph/recompute.c - activation checkpointing as a graph pass (runs
 * after autodiff, before liveness; ct_compile_opts.recompute_every /
 * recompute_blocks / recompute_ops).
 *
 * Layers: a "layer" is an anchor node (linear, matmul, conv2d) and the
 * forward nodes after it, in node order, up to the next anchor. Nodes before
 * the first anchor and the last layer (the one computing the loss: its
 * backward runs right after forward, recomputing it saves nothing) are never
 * recomputed. Checkpoint mode groups the other layers from the first into
 * segments of recompute_every layers; selective mode (recompute_every = 0)
 * uses one segment per layer.
 *
 * Blocks (recompute_blocks = N, checkpoint mode): segments are groups of N
 * blocks marked by the builder (ct_graph_mark_block flags a block's first
 * node) instead of layers; nodes before the first block and after the last
 * (block_segments says where it ends) are never recomputed. Only the segment
 * assignment differs: R, the pay-off and the rewiring are the same. A
 * recomputed segment's copies run in forward order between the same
 * backward nodes on every rank, so its collectives (tensor parallelism)
 * are repeated in the same order everywhere.
 *
 * The dropped set R: forward nodes of a segment whose op kind is in the mask
 * (recompute_ops, all kinds when 0), except the loss, the outputs, and in
 * checkpoint mode the segment boundaries (nodes read by a forward node of
 * another segment); a reshape (an alias) is in R exactly when its input is.
 *
 * Rewiring: every backward node that reads a node v of R reads copy(v)
 * instead. copy(v) is v's definition with the flags CT_NODE_BACKWARD |
 * CT_NODE_RECOMPUTE, whose inputs in R are themselves copies; the copies a
 * backward node needs (with their R ancestors, in forward order) are inserted
 * just before it, once, and shared by later readers. The node array is
 * rebuilt with the copies in place and every stored id remapped (seed,
 * param_grads; forward ids do not move, copies are only inserted among the
 * backward nodes). The forward originals of R then have forward readers
 * only, so the liveness-based memory planner frees them during forward.
 *
 * Bit-exactness: a copy runs the same op with the same attributes on equal
 * inputs with the same kernel choice; dropout keeps ia[0] (its RNG stream)
 * and the step; the executor runs backward nodes in training mode, so a
 * batchnorm copy uses the batch statistics, and its kernels skip the
 * running-statistics update for CT_NODE_RECOMPUTE. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"

static int is_anchor(ct_op op) { return op == CT_OP_LINEAR || op == CT_OP_MATMUL || op == CT_OP_CONV2D; }
static int is_leaf(ct_op op) { return op == CT_OP_INPUT || op == CT_OP_PARAM || op == CT_OP_BUFFER; }

typedef struct {
    ct_plan *p;
    const ct_node_def *old;  /* the graph before the pass                */
    int nf;                  /* forward nodes: [0, nf)                   */
    const uint8_t *drop;     /* R, over forward ids                      */
    ct_node *copy;           /* forward id -> id of its copy, or CT_NONE */
    ct_node_def *out;        /* the new node array                       */
    int m;                   /* nodes written to out                     */
    int *stack, *list;       /* scratch, nf each                         */
    uint8_t *seen;           /* scratch, nf                              */
} rc_state;

static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

static void copy_name(char *dst, const char *src) {
    static const char suffix[] = ".recompute";
    size_t keep = strnlen(src, CT_NAME_LEN - 1);
    if (keep > CT_NAME_LEN - sizeof suffix) keep = CT_NAME_LEN - sizeof suffix;
    memmove(dst, src, keep);
    memcpy(dst + keep, suffix, sizeof suffix);
}

/* Appends copies of v and of its R ancestors that have none yet, in forward
 * (index) order, so every copy's inputs exist before it. */
static void emit_copies(rc_state *st, ct_node v) {
    int sp = 0, nl = 0;
    st->stack[sp++] = v;
    st->seen[v] = 1;
    while (sp) {
        ct_node u = st->stack[--sp];
        st->list[nl++] = u;
        const ct_node_def *d = &st->old[u];
        for (int j = 0; j < d->n_in; j++) {
            ct_node w = d->in[j];
            if (w < st->nf && st->drop[w] && st->copy[w] == CT_NONE && !st->seen[w]) {
                st->seen[w] = 1;
                st->stack[sp++] = w;
            }
        }
    }
    qsort(st->list, (size_t)nl, sizeof *st->list, cmp_int);
    for (int i = 0; i < nl; i++) {
        ct_node u = st->list[i];
        ct_node_def c = st->old[u];
        for (int j = 0; j < c.n_in; j++)
            if (st->drop[c.in[j]]) c.in[j] = st->copy[c.in[j]]; /* forward ids do not move */
        c.flags = (c.flags | CT_NODE_BACKWARD | CT_NODE_RECOMPUTE) & ~(uint32_t)CT_NODE_BLOCK;
        copy_name(c.name, st->old[u].name);
        st->out[st->m] = c;
        st->copy[u] = st->m++;
        st->seen[u] = 0;
    }
}

static ct_status oom(ct_plan *p) { return ct_set_error(p->ctx, CT_E_OOM, "compile: out of memory in the recompute pass"); }

/* seg[i]: the segment of forward node i, -1 = never recomputed (leaves,
 * nodes before the first anchor, the last layer). */
static void mark_segments(const ct_node_def *old, int nf, int n_layers, int per, int *seg) {
    for (int i = 0, layer = -1; i < nf; i++) {
        if (is_anchor(old[i].op)) layer++;
        seg[i] = is_leaf(old[i].op) || layer < 0 || layer == n_layers - 1 ? -1 : layer / per;
    }
}

/* Block mode (recompute_blocks): the forward nodes flagged CT_NODE_BLOCK
 * (ct_graph_mark_block). */
static int count_blocks(const ct_node_def *old, int nf) {
    int n = 0;
    for (int i = 0; i < nf; i++) n += (old[i].flags & CT_NODE_BLOCK) != 0;
    return n;
}

/* Block mode: block b is the nodes from its flagged first node up to the
 * next block's; the last block ends where its op sequence, repeating the
 * previous block's (same length, same op and input count node for node),
 * ends: the nodes after it (final norm, head, loss) are the tail. When it
 * does not repeat it (or there is no previous block) the last block joins
 * the tail. seg[i] = block / per, -1 for leaves, nodes before the first
 * block and the tail. Returns the number of segments. */
static int block_segments(const ct_node_def *old, int nf, int per, int *seg) {
    int last = -1, prev = -1;
    for (int i = 0; i < nf; i++)
        if (old[i].flags & CT_NODE_BLOCK) prev = last, last = i;
    int end = last; /* the tail's first node */
    if (prev >= 0 && last + (last - prev) <= nf) {
        int same = 1;
        for (int k = 0; k < last - prev && same; k++)
            same = old[prev + k].op == old[last + k].op && old[prev + k].n_in == old[last + k].n_in;
        if (same) end = last + (last - prev);
    }
    int n_blocks = 0;
    for (int i = 0, b = -1; i < nf; i++) {
        if (old[i].flags & CT_NODE_BLOCK) b++;
        if (i < end && (old[i].flags & CT_NODE_BLOCK)) n_blocks++;
        seg[i] = is_leaf(old[i].op) || b < 0 || i >= end ? -1 : b / per;
    }
    return (n_blocks + per - 1) / per;
}

/* R before the pay-off: forward nodes of a segment whose kind (the op
 * table's recompute column) is in the mask, except keep[]: the loss, the
 * outputs and in checkpoint mode the segment boundaries; aliases follow. */
static void choose_dropped(const ct_plan *p, const int *seg, int checkpoint, uint32_t mask, uint8_t *keep, uint8_t *drop) {
    const ct_node_def *old = p->g.nodes;
    const int nf = p->n_fwd;
    if (p->loss != CT_NONE) keep[p->loss] = 1;
    for (int i = 0; i < p->n_outputs; i++) /* (a pipeline stage keeps backward nodes too: its links' gradients) */
        if (p->outputs[i] < nf) keep[p->outputs[i]] = 1;
    if (checkpoint)
        for (int i = 0; i < nf; i++) {
            if (is_leaf(old[i].op)) continue;
            for (int j = 0; j < old[i].n_in; j++)
                if (seg[old[i].in[j]] != seg[i]) keep[old[i].in[j]] = 1;
        }
    for (int i = 0; i < nf; i++) {
        if (seg[i] < 0 || keep[i]) continue;
        /* a parameter's low-precision copy stays: it lives between steps in
         * the weight-copy arena, so a recomputed copy would only add bytes */
        if (old[i].op == CT_OP_CAST && old[old[i].in[0]].op == CT_OP_PARAM) continue;
        if (old[i].op == CT_OP_RESHAPE) drop[i] = drop[old[i].in[0]];
        else drop[i] = (ct_op_table(old[i].op)->recompute & mask) != 0; /* its kind (op table) */
    }
    /* a kept alias keeps its storage root; then aliases follow their input */
    for (int i = nf - 1; i >= 0; i--)
        if (old[i].op == CT_OP_RESHAPE && !drop[i]) drop[old[i].in[0]] = 0;
    for (int i = 0; i < nf; i++)
        if (old[i].op == CT_OP_RESHAPE && drop[i] && !drop[old[i].in[0]]) drop[i] = 0;
}

/* Pay-off per segment: recompute a segment only if the bytes it stops
 * retaining for backward (dropped values backward reads, with their saved
 * state) exceed the bytes its copies newly retain (non-dropped inputs of
 * the needed copies that backward did not read anyway). E.g. a ReLU
 * recomputed from a linear output that nothing else keeps saves nothing.
 * Clears drop[] for the segments that do not pay. */
static ct_status apply_payoff(ct_plan *p, const int *seg, int n_seg, const uint8_t *keep, uint8_t *drop) {
    const ct_graph *g = &p->g;
    const ct_node_def *old = g->nodes;
    const int n = g->n, nf = p->n_fwd;
    uint8_t *rb = calloc((size_t)nf, 1), *need = calloc((size_t)nf, 1), *cost_seen = calloc((size_t)nf, 1);
    double *saved = calloc((size_t)n_seg + 1, sizeof(double)), *cost = calloc((size_t)n_seg + 1, sizeof(double));
    ct_status s = rb && need && cost_seen && saved && cost ? CT_OK : oom(p);
    for (int i = nf; s == CT_OK && i < n; i++) {
        if (!(old[i].flags & CT_NODE_BACKWARD)) continue;
        for (int j = 0; j < old[i].n_in; j++)
            if (old[i].in[j] < nf) rb[old[i].in[j]] = need[old[i].in[j]] = 1;
    }
    for (int i = nf - 1; s == CT_OK && i >= 0; i--) {
        if (old[i].op == CT_OP_RESHAPE && rb[i]) rb[old[i].in[0]] = 1; /* an alias retains its root */
        if (!drop[i]) need[i] = 0;
        if (!need[i]) continue;
        for (int j = 0; j < old[i].n_in; j++) need[old[i].in[j]] = 1; /* cleared above unless dropped */
    }
    for (int i = 0; s == CT_OK && i < nf; i++) {
        if (!need[i]) continue;
        const ct_node_def *d = &old[i];
        if (rb[i] && d->op != CT_OP_RESHAPE) {
            const ct_op_info *info = ct_op_table(d->op);
            saved[seg[i]] += (double)ct_node_numel(d) * (double)ct_dtype_size(d->dtype) +
                             (double)(info->aux_bytes ? info->aux_bytes(g, d) : 0);
        }
        for (int j = 0; j < d->n_in; j++) {
            ct_node u = d->in[j];
            while (old[u].op == CT_OP_RESHAPE) u = old[u].in[0];
            if (drop[u] || rb[u] || keep[u] || is_leaf(old[u].op) || cost_seen[u]) continue;
            cost_seen[u] = 1;
            cost[seg[i]] += (double)ct_node_numel(&old[u]) * (double)ct_dtype_size(old[u].dtype);
        }
    }
    for (int i = 0; s == CT_OK && i < nf; i++)
        if (drop[i] && !(saved[seg[i]] > cost[seg[i]])) drop[i] = 0;
    for (int i = 0; s == CT_OK && i < nf; i++) /* aliases follow their input again */
        if (old[i].op == CT_OP_RESHAPE && drop[i] && !drop[old[i].in[0]]) drop[i] = 0;
    free(rb);
    free(need);
    free(cost_seen);
    free(saved);
    free(cost);
    return s;
}

/* Rebuilds the node array: every backward reader of a node of R reads its
 * copy, inserted (with the copies it needs) just before the first such
 * reader; every stored id is remapped. */
static ct_status rewire(ct_plan *p, const uint8_t *drop, int n_drop) {
    ct_graph *g = &p->g;
    const int n = g->n, nf = p->n_fwd;
    rc_state st = {.p = p, .old = g->nodes, .nf = nf, .drop = drop};
    st.copy = malloc(sizeof(ct_node) * (size_t)nf);
    st.out = malloc(sizeof(ct_node_def) * (size_t)(n + n_drop));
    st.stack = malloc(sizeof(int) * (size_t)nf);
    st.list = malloc(sizeof(int) * (size_t)nf);
    st.seen = calloc((size_t)nf, 1);
    ct_node *map = malloc(sizeof(ct_node) * (size_t)n);
    if (!st.copy || !st.out || !st.stack || !st.list || !st.seen || !map) {
        free(st.copy);
        free(st.out);
        free(st.stack);
        free(st.list);
        free(st.seen);
        free(map);
        return oom(p);
    }
    for (int i = 0; i < nf; i++) st.copy[i] = CT_NONE;
    for (int i = 0; i < n; i++) {
        ct_node_def d = st.old[i];
        int bwd = i >= nf && (d.flags & CT_NODE_BACKWARD);
        for (int j = 0; j < d.n_in; j++) {
            ct_node u = d.in[j];
            if (bwd && u < nf && drop[u]) {
                if (st.copy[u] == CT_NONE) emit_copies(&st, u);
                d.in[j] = st.copy[u];
            } else {
                d.in[j] = map[u];
            }
        }
        st.out[st.m] = d;
        map[i] = st.m++;
    }
    free(g->nodes);
    g->nodes = st.out;
    g->n = st.m;
    g->cap = n + n_drop;
    if (p->seed != CT_NONE) p->seed = map[p->seed];
    if (p->loss != CT_NONE) p->loss = map[p->loss];
    for (int i = 0; i < p->n_outputs; i++) p->outputs[i] = map[p->outputs[i]];
    for (int i = 0; i < p->n_params; i++) {
        p->params[i] = map[p->params[i]];
        if (p->param_grads[i] != CT_NONE) p->param_grads[i] = map[p->param_grads[i]];
    }
    free(st.copy);
    free(st.stack);
    free(st.list);
    free(st.seen);
    free(map);
    return CT_OK;
}

ct_status ct_pass_recompute(ct_plan *p) {
    const int every = p->recompute_every, blocks = p->recompute_blocks, nf = p->n_fwd;
    uint32_t mask = p->recompute_ops;
    if (every < 0)
        return ct_set_error(p->ctx, CT_E_INVALID_ARG, "compile: recompute_every %d must be >= 0", every);
    if (blocks < 0)
        return ct_set_error(p->ctx, CT_E_INVALID_ARG, "compile: recompute_blocks %d must be >= 0", blocks);
    if (every > 0 && blocks > 0)
        return ct_set_error(p->ctx, CT_E_INVALID_ARG,
                            "compile: recompute_every %d and recompute_blocks %d are both set: use one "
                            "(recompute_blocks checkpoints by transformer blocks, recompute_every by layers)",
                            every, blocks);
    if (mask & ~(uint32_t)CT_RECOMPUTE_ALL)
        return ct_set_error(p->ctx, CT_E_INVALID_ARG,
                            "compile: recompute_ops 0x%x has bits outside CT_RECOMPUTE_ALL (0x%x)", (unsigned)mask,
                            (unsigned)CT_RECOMPUTE_ALL);
    if (blocks > 0 && count_blocks(p->g.nodes, nf) == 0)
        return ct_set_error(p->ctx, CT_E_INVALID_ARG,
                            "compile: recompute_blocks %d needs a model built of blocks (ct_graph_mark_block: the "
                            "transformers mark theirs); this graph has none: use recompute_every (by layers)",
                            blocks);
    if (p->g.n == p->n_fwd || (every == 0 && blocks == 0 && mask == 0)) return CT_OK; /* off, or forward only */
    if (!mask) mask = CT_RECOMPUTE_ALL;
    const int per = blocks > 0 ? blocks : every > 0 ? every : 1;
    int n_layers = 0;
    for (int i = 0; i < nf; i++) n_layers += is_anchor(p->g.nodes[i].op);
    if (blocks == 0 && n_layers < 2) return CT_OK; /* only the last layer: nothing to recompute */

    int *seg = malloc(sizeof(int) * (size_t)nf);
    uint8_t *drop = calloc((size_t)nf, 1), *keep = calloc((size_t)nf, 1);
    ct_status s = seg && drop && keep ? CT_OK : oom(p);
    int n_seg = 0;
    if (s == CT_OK && blocks > 0) {
        n_seg = block_segments(p->g.nodes, nf, per, seg);
    } else if (s == CT_OK) {
        mark_segments(p->g.nodes, nf, n_layers, per, seg);
        n_seg = (n_layers - 1 + per - 1) / per;
    }
    if (s == CT_OK && n_seg > 0) {
        choose_dropped(p, seg, every > 0 || blocks > 0, mask, keep, drop);
        s = apply_payoff(p, seg, n_seg, keep, drop);
    }
    int n_drop = 0;
    for (int i = 0; s == CT_OK && i < nf; i++) n_drop += drop[i];
    if (n_drop) s = rewire(p, drop, n_drop);
    free(seg);
    free(keep);
    free(drop);
    return s;
}
