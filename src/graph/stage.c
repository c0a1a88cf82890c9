/* src/graph/stage.c - pipeline stages (include/ctrain/graph.h, "pipeline
 * stages"): blocks and their costs, balanced cut points, and the compile
 * pass that keeps only the held pieces of the graph (the first pass: before
 * autocast). A held piece is a "part" of the plan; its links to the
 * neighbouring pieces are inputs (incoming) and outputs (outgoing) of the
 * plan, listed in p->links with their places in p->outputs so that every
 * later pass keeps and remaps them. After the passes, ct_stage_parts gives
 * every node its part (the executor runs one part at a time). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"

static int is_leaf(const ct_node_def *d) { return d->n_in == 0; }

int ct_graph_num_blocks(const ct_graph *g) {
    int nb = 0;
    for (int i = 0; g && i < g->n; i++) nb += (g->nodes[i].flags & CT_NODE_BLOCK) != 0;
    return nb;
}

/* The node where block b starts (-1: none). */
static int block_start(const ct_graph *g, int b) {
    for (int i = 0, k = 0; i < g->n; i++)
        if ((g->nodes[i].flags & CT_NODE_BLOCK) && k++ == b) return i;
    return -1;
}

const char *ct_graph_block_name(const ct_graph *g, int b) {
    int i = g ? block_start(g, b) : -1;
    return i < 0 ? "" : g->nodes[i].name;
}

ct_status ct_graph_find_block(const ct_graph *g, const char *name, int *block) {
    if (!g || !name || !block) return CT_E_INVALID_ARG;
    const size_t len = strlen(name);
    const int nb = ct_graph_num_blocks(g);
    for (int b = 0; b < nb; b++) {
        const char *s = ct_graph_block_name(g, b);
        if (len && !strncmp(s, name, len) && (s[len] == 0 || s[len] == '.')) {
            *block = b;
            return CT_OK;
        }
    }
    char names[512] = "";
    size_t o = 0;
    for (int b = 0; b < nb && o < sizeof names - 80; b++) {
        const char *s = ct_graph_block_name(g, b);
        const char *dot = strrchr(s, '.');
        o += (size_t)snprintf(names + o, sizeof names - o, "%s%.*s", b ? ", " : "", dot ? (int)(dot - s) : 60, s);
    }
    return ct_set_error(g->ctx, CT_E_INVALID_ARG,
                        "pipeline_split: '%s' names no block of this model; its %d blocks start at: %s%s", name, nb,
                        names, nb ? "" : "(none: the model is not built of blocks)");
}

/* The cut points: ascending block indices after block 0 (what: the message's subject). */
static ct_status check_cuts(const ct_graph *g, int n_cuts, const int *cuts, const char *what) {
    const int nb = ct_graph_num_blocks(g);
    for (int k = 0; k < n_cuts; k++)
        if (cuts[k] < 1 || cuts[k] >= nb || (k && cuts[k] <= cuts[k - 1]))
            return ct_set_error(g->ctx, CT_E_CONFIG,
                                "%s: cut %d at block %d: cuts must be ascending block indices in 1 .. %d (the model "
                                "has %d blocks)",
                                what, k, cuts[k], nb - 1, nb);
    return CT_OK;
}

/* piece[i] of every non-leaf node for a cut (leaves: -1). CT_E_CONFIG on a bad cut or an empty piece. */
static ct_status assign_pieces(const ct_graph *g, int n_pieces, const int *cuts, int *piece) {
    int start[256];
    if (n_pieces < 1 || n_pieces > 256)
        return ct_set_error(g->ctx, CT_E_CONFIG, "pipeline: %d pieces (1 .. 256)", n_pieces);
    CT_TRY(check_cuts(g, n_pieces - 1, cuts, "pipeline"));
    for (int k = 0; k + 1 < n_pieces; k++) start[k] = block_start(g, cuts[k]);
    int *count = calloc((size_t)n_pieces, sizeof *count);
    if (!count) return ct_set_error(g->ctx, CT_E_OOM, "pipeline: out of memory");
    for (int i = 0, k = 0; i < g->n; i++) {
        while (k + 1 < n_pieces && i >= start[k]) k++;
        piece[i] = is_leaf(&g->nodes[i]) ? -1 : k;
        if (piece[i] >= 0) count[k]++;
    }
    for (int k = 0; k < n_pieces; k++)
        if (!count[k]) {
            free(count);
            return ct_set_error(g->ctx, CT_E_CONFIG, "pipeline: piece %d of %d holds no computation; move its cut",
                                k, n_pieces);
        }
    free(count);
    return CT_OK;
}

ct_status ct_graph_piece_costs(const ct_graph *g, int n_pieces, const int *cuts, double *flops, double *param_floats) {
    if (!g || !flops || !param_floats || (n_pieces > 1 && !cuts)) return CT_E_INVALID_ARG;
    int *piece = malloc(sizeof(int) * (size_t)(g->n + 1)), *last = malloc(sizeof(int) * (size_t)(g->n + 1));
    if (!piece || !last) {
        free(piece);
        free(last);
        return ct_set_error(g->ctx, CT_E_OOM, "pipeline: out of memory");
    }
    ct_status s = assign_pieces(g, n_pieces, cuts, piece);
    for (int k = 0; k < n_pieces; k++) flops[k] = param_floats[k] = 0.0;
    for (int i = 0; i < g->n; i++) last[i] = -1;
    for (int i = 0; s == CT_OK && i < g->n; i++) {
        const ct_node_def *d = &g->nodes[i];
        if (piece[i] < 0) continue;
        flops[piece[i]] += ct_node_flops(g, d);
        for (int j = 0; j < d->n_in; j++) {
            const ct_node_def *q = &g->nodes[d->in[j]];
            if (q->op != CT_OP_PARAM || last[d->in[j]] == piece[i]) continue;
            last[d->in[j]] = piece[i]; /* pieces only grow along the nodes: each (param, piece) once */
            param_floats[piece[i]] += (double)ct_node_numel(q);
        }
    }
    free(piece);
    free(last);
    return s;
}

/* The cost of units [a, b) (prefix sums): the FLOPs share plus the parameter share. */
static double span(const double *pf, const double *pp, int a, int b) { return (pf[b] - pf[a]) + (pp[b] - pp[a]); }

ct_status ct_graph_balance_cuts(const ct_graph *g, int n_pieces, int *cuts) {
    if (!g || !cuts || n_pieces < 1) return CT_E_INVALID_ARG;
    const int nb = ct_graph_num_blocks(g);
    if (n_pieces == 1) return CT_OK;
    if (nb < n_pieces)
        return ct_set_error(g->ctx, CT_E_CONFIG, "pipeline: %d stages need at least %d blocks; this model has %d (%s)",
                            n_pieces, n_pieces, nb, nb ? "fewer stages, or a deeper model" : "not built of blocks");
    /* units: block b with what precedes it (block 0: the prelude) and, for the last, the tail */
    double *pf = calloc((size_t)nb + 1, sizeof *pf), *pp = calloc((size_t)nb + 1, sizeof *pp);
    double *best = malloc(sizeof(double) * (size_t)(nb + 1) * (size_t)(n_pieces + 1));
    int *from = malloc(sizeof(int) * (size_t)(nb + 1) * (size_t)(n_pieces + 1));
    int *seen = malloc(sizeof(int) * ((size_t)g->n + 1)); /* per parameter: the last unit it was counted in */
    if (!pf || !pp || !best || !from || !seen) {
        free(pf), free(pp), free(best), free(from), free(seen);
        return ct_set_error(g->ctx, CT_E_OOM, "pipeline: out of memory");
    }
    double tf = 0, tp = 0;
    for (int i = 0; i < g->n; i++) seen[i] = -1;
    for (int i = 0, u = -1; i < g->n; i++) {
        const ct_node_def *d = &g->nodes[i];
        if (d->flags & CT_NODE_BLOCK) u++;
        const int unit = u < 0 ? 0 : u;
        if (!is_leaf(d)) pf[unit + 1] += ct_node_flops(g, d), tf += ct_node_flops(g, d);
        for (int j = 0; j < d->n_in; j++)
            if (g->nodes[d->in[j]].op == CT_OP_PARAM && seen[d->in[j]] != unit) {
                seen[d->in[j]] = unit; /* a tied parameter counts in every unit that reads it: each stage holds it */
                double f = (double)ct_node_numel(&g->nodes[d->in[j]]);
                pp[unit + 1] += f, tp += f;
            }
    }
    for (int b = 1; b <= nb; b++) { /* shares, as prefix sums */
        pf[b] = pf[b - 1] + (tf > 0 ? pf[b] / tf : 0);
        pp[b] = pp[b - 1] + (tp > 0 ? pp[b] / tp : 0);
    }
    /* best[k][j]: the smallest largest piece cutting units [0, j) into k pieces */
#define BEST(k, j) best[(size_t)(k) * (size_t)(nb + 1) + (size_t)(j)]
#define FROM(k, j) from[(size_t)(k) * (size_t)(nb + 1) + (size_t)(j)]
    for (int j = 0; j <= nb; j++) BEST(1, j) = span(pf, pp, 0, j), FROM(1, j) = 0;
    for (int k = 2; k <= n_pieces; k++)
        for (int j = k; j <= nb; j++) {
            BEST(k, j) = 1e300;
            for (int i = k - 1; i < j; i++) {
                double c = BEST(k - 1, i) > span(pf, pp, i, j) ? BEST(k - 1, i) : span(pf, pp, i, j);
                if (c < BEST(k, j)) BEST(k, j) = c, FROM(k, j) = i;
            }
        }
    for (int k = n_pieces, j = nb; k > 1; k--) {
        j = FROM(k, j);
        cuts[k - 2] = j;
    }
#undef BEST
#undef FROM
    free(pf), free(pp), free(best), free(from), free(seen);
    return CT_OK;
}

ct_status ct_graph_parse_cuts(const ct_graph *g, const char *text, int n_pieces, int *cuts) {
    if (!g || !cuts || n_pieces < 1) return CT_E_INVALID_ARG;
    if (!text || !text[0]) return ct_graph_balance_cuts(g, n_pieces, cuts);
    int n = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", text);
    for (char *save = NULL, *t = strtok_r(buf, ", ", &save); t; t = strtok_r(NULL, ", ", &save), n++) {
        if (n >= n_pieces - 1) continue; /* counted: too many is the error below */
        char *end;
        long b = strtol(t, &end, 10);
        if (*end) CT_TRY(ct_graph_find_block(g, t, &cuts[n]));
        else cuts[n] = b < 0 || b > 1 << 20 ? -1 : (int)b;
    }
    if (n != n_pieces - 1)
        return ct_set_error(g->ctx, CT_E_CONFIG, "pipeline_split \"%s\" names %d cut points; %d pieces need %d", text, n,
                            n_pieces, n_pieces - 1);
    char what[300];
    snprintf(what, sizeof what, "pipeline_split \"%s\"", text);
    return check_cuts(g, n, cuts, what);
}

/* ---- the compile pass ------------------------------------------------------------------ */

static ct_status check_held(ct_plan *p, const ct_stage_opts *so) {
    if (so->n_held < 1 || so->n_held > 127 || !so->held || (so->n_pieces > 1 && !so->cuts))
        return ct_set_error(p->ctx, CT_E_INVALID_ARG, "compile: stage options need 1 .. 127 held pieces and the cuts");
    for (int h = 0; h < so->n_held; h++)
        if (so->held[h] < 0 || so->held[h] >= so->n_pieces || (h && so->held[h] <= so->held[h - 1] + 1))
            return ct_set_error(p->ctx, CT_E_INVALID_ARG,
                                "compile: held piece %d: pieces must be ascending indices below %d, no two "
                                "consecutive",
                                so->held[h], so->n_pieces);
    return CT_OK;
}

/* Appends node `id` to p->outputs (grown), *idx its place. */
ct_status ct_stage_keep(ct_plan *p, ct_node id, int *idx) {
    ct_node *o = realloc(p->outputs, sizeof(ct_node) * (size_t)(p->n_outputs + 2));
    if (!o) return ct_set_error(p->ctx, CT_E_OOM, "compile: out of memory");
    p->outputs = o;
    *idx = p->n_outputs;
    o[p->n_outputs++] = id;
    return CT_OK;
}

static ct_status add_link(ct_plan *p, int part, int dir, ct_node v, ct_node node) {
    ct_stage_link *l = realloc(p->links, sizeof *l * (size_t)(p->n_links + 1));
    if (!l) return ct_set_error(p->ctx, CT_E_OOM, "compile: out of memory");
    p->links = l;
    l += p->n_links++;
    memset(l, 0, sizeof *l);
    l->part = part, l->dir = dir, l->whole = v, l->grad = -1;
    return ct_stage_keep(p, node, &l->value);
}

typedef struct {
    const ct_graph *g; /* the whole graph                               */
    ct_graph ng;       /* the held pieces                               */
    const int *piece, *lastc;
    ct_node *map, *loc; /* whole id -> ng id; this piece's view of values */
} cut_ctx;

static ct_status push(cut_ctx *c, ct_node_def *d, ct_node *out) { return ct_graph_push(&c->ng, d, out); }

/* Piece k as part h: its incoming links, its nodes, its outgoing links. */
static ct_status copy_piece(ct_plan *p, cut_ctx *c, int k, int h) {
    const ct_graph *g = c->g;
    const uint32_t part = (uint32_t)(h + 1) << CT_NODE_PART_SHIFT;
    for (int i = 0; i < g->n; i++) c->loc[i] = CT_NONE;
    for (int v = 0; v < g->n; v++) { /* incoming: computed before piece k, read in k or later */
        if (c->piece[v] < 0 || c->piece[v] >= k || c->lastc[v] < k) continue;
        const ct_node_def *V = &g->nodes[v];
        ct_node_def d = {.op = CT_OP_INPUT, .dtype = V->dtype, .ndim = V->ndim};
        memcpy(d.shape, V->shape, sizeof d.shape);
        snprintf(d.name, sizeof d.name, "stage%d.in.%.*s", k, (int)sizeof d.name - 24, V->name);
        d.flags = part | (ct_dtype_is_float(V->dtype) ? CT_NODE_GRAD_INPUT : 0);
        CT_TRY(push(c, &d, &c->loc[v]));
        CT_TRY(add_link(p, h, 0, v, c->loc[v]));
    }
    for (int i = 0; i < g->n; i++) {
        if (c->piece[i] != k) continue;
        ct_node_def d = g->nodes[i];
        for (int j = 0; j < d.n_in; j++) {
            ct_node q = d.in[j];
            if (c->piece[q] < 0 && c->map[q] == CT_NONE) { /* a leaf: one copy for the plan, made at first use */
                ct_node_def L = g->nodes[q];
                CT_TRY(push(c, &L, &c->map[q]));
            }
            ct_node m = c->piece[q] < 0 ? c->map[q] : c->loc[q];
            if (m == CT_NONE)
                return ct_set_error(p->ctx, CT_E_INTERNAL, "pipeline: node '%s' reads '%s', which piece %d lacks",
                                    d.name, g->nodes[q].name, k);
            d.in[j] = m;
        }
        d.flags |= part;
        CT_TRY(push(c, &d, &c->loc[i]));
        c->map[i] = c->loc[i];
    }
    for (int v = 0; v < g->n; v++) /* outgoing: computed here or before, read after piece k */
        if (c->piece[v] >= 0 && c->piece[v] <= k && c->lastc[v] > k) CT_TRY(add_link(p, h, 1, v, c->loc[v]));
    return CT_OK;
}

/* Every data input of the whole graph, and a stand-in input for each of the caller's outputs that no held
 * piece computes (its values meaningless; ct_plan_has_node says 0): a task fills and reads the same tensors
 * on every stage. */
static ct_status placeholders(ct_plan *p, cut_ctx *c, int n_user_out) {
    const ct_graph *g = c->g;
    for (int u = 0; u < g->n; u++) {
        int out = 0;
        for (int i = 0; i < n_user_out && !out; i++) out = p->outputs[i] == u;
        if (c->map[u] != CT_NONE || (g->nodes[u].op != CT_OP_INPUT && !out)) continue;
        ct_node_def d = {.op = CT_OP_INPUT, .dtype = g->nodes[u].dtype, .ndim = g->nodes[u].ndim};
        memcpy(d.shape, g->nodes[u].shape, sizeof d.shape);
        memcpy(d.name, g->nodes[u].name, sizeof d.name);
        CT_TRY(push(c, &d, &c->map[u]));
        if (out) { /* a stand-in: not one of the plan's nodes for ct_plan_has_node */
            int *a = realloc(p->stand_ins, sizeof(int) * (size_t)(p->n_stand_ins + 1));
            if (!a) return ct_set_error(p->ctx, CT_E_OOM, "compile: out of memory");
            p->stand_ins = a;
            a[p->n_stand_ins++] = u;
        }
    }
    return CT_OK;
}

/* The last piece reading each value (its own piece when nothing later does). */
static void last_consumers(const ct_graph *g, const int *piece, int *lastc) {
    for (int i = 0; i < g->n; i++) lastc[i] = piece[i];
    for (int i = 0; i < g->n; i++)
        for (int j = 0; j < g->nodes[i].n_in; j++) {
            ct_node q = g->nodes[i].in[j];
            if (piece[q] >= 0 && piece[i] > lastc[q]) lastc[q] = piece[i];
        }
}

/* The plan's parameters, outputs and loss after the cut (user ids in p->params / outputs / loss before). */
static ct_status rebind(ct_plan *p, cut_ctx *c, int n_user_out) {
    int np = 0, *seq_of = calloc((size_t)c->g->n + 1, sizeof(int));
    if (!seq_of) return ct_set_error(p->ctx, CT_E_OOM, "compile: out of memory");
    for (int i = 0, k = 0; i < c->g->n; i++)
        if (c->g->nodes[i].op == CT_OP_PARAM) seq_of[i] = k++;
    for (int i = 0; i < c->ng.n; i++) np += c->ng.nodes[i].op == CT_OP_PARAM;
    free(p->params), free(p->param_grads), free(p->param_off);
    p->params = malloc(sizeof(ct_node) * (size_t)(np + 1));
    p->param_grads = malloc(sizeof(ct_node) * (size_t)(np + 1));
    p->param_off = malloc(sizeof(size_t) * (size_t)(np + 1));
    p->param_seq = malloc(sizeof(int) * (size_t)(np + 1));
    if (!p->params || !p->param_grads || !p->param_off || !p->param_seq) {
        free(seq_of);
        return ct_set_error(p->ctx, CT_E_OOM, "compile: out of memory");
    }
    p->n_params = 0;
    for (int u = 0; u < c->g->n; u++) /* in the whole graph's order: the one-process arena's */
        if (c->g->nodes[u].op == CT_OP_PARAM && c->map[u] != CT_NONE) {
            p->params[p->n_params] = c->map[u];
            p->param_grads[p->n_params] = CT_NONE;
            p->param_seq[p->n_params++] = seq_of[u];
        }
    int nb = 0, kb = 0;
    for (int i = 0, k = 0; i < c->g->n; i++)
        if (c->g->nodes[i].op == CT_OP_BUFFER) seq_of[i] = k++;
    for (int i = 0; i < c->ng.n; i++) nb += c->ng.nodes[i].op == CT_OP_BUFFER;
    if (!(p->buffer_seq = malloc(sizeof(int) * (size_t)(nb + 1)))) {
        free(seq_of);
        return ct_set_error(p->ctx, CT_E_OOM, "compile: out of memory");
    }
    int *ord = malloc(sizeof(int) * ((size_t)c->ng.n + 1)); /* a stage node -> its whole buffer index */
    if (!ord) {
        free(seq_of);
        return ct_set_error(p->ctx, CT_E_OOM, "compile: out of memory");
    }
    for (int i = 0; i < c->ng.n; i++) ord[i] = -1;
    for (int u = 0; u < c->g->n; u++)
        if (c->g->nodes[u].op == CT_OP_BUFFER && c->map[u] != CT_NONE) ord[c->map[u]] = seq_of[u];
    free(seq_of);
    for (int i = 0; i < c->ng.n; i++)
        if (c->ng.nodes[i].op == CT_OP_BUFFER) {
            if (ord[i] < 0) { /* cannot be: every stage node copies a whole-graph node of its op (c->map) */
                free(ord);
                return ct_set_error(p->ctx, CT_E_INTERNAL, "pipeline: buffer '%s' of the stage has no buffer of the "
                                    "whole graph; please report this with the model (ctrain graph)",
                                    c->ng.nodes[i].name);
            }
            p->buffer_seq[kb++] = ord[i];
        }
    free(ord);
    int k = 0; /* the user's outputs that a held piece computes; the loss */
    for (int i = 0; i < n_user_out; i++)
        if (c->map[p->outputs[i]] != CT_NONE) p->outputs[k++] = c->map[p->outputs[i]];
    p->loss = p->loss != CT_NONE ? c->map[p->loss] : CT_NONE;
    if (p->loss != CT_NONE) p->outputs[k++] = p->loss;
    /* the links were appended after the user's outputs and loss: move them down */
    const int base = p->n_outputs - p->n_links;
    for (int i = 0; i < p->n_links; i++) {
        p->outputs[k + i] = p->outputs[base + i];
        p->links[i].value = k + i;
    }
    p->n_outputs = k + p->n_links;
    return CT_OK;
}

ct_status ct_pass_stage(ct_plan *p) {
    const ct_stage_opts *so = p->stage_opts;
    if (!so) return CT_OK;
    CT_TRY(check_held(p, so));
    const ct_graph *g = &p->g;
    const int n = g->n, n_user_out = p->n_outputs - (p->loss != CT_NONE);
    cut_ctx c = {.g = g, .ng = {.ctx = p->ctx, .tp = g->tp, .tp_rank = g->tp_rank, .tp_size = g->tp_size}};
    int *piece = malloc(sizeof(int) * (size_t)(n + 1)), *lastc = malloc(sizeof(int) * (size_t)(n + 1));
    c.map = malloc(sizeof(ct_node) * (size_t)(n + 1));
    c.loc = malloc(sizeof(ct_node) * (size_t)(n + 1));
    ct_status s = piece && lastc && c.map && c.loc ? CT_OK : ct_set_error(p->ctx, CT_E_OOM, "compile: out of memory");
    if (s == CT_OK) s = assign_pieces(g, so->n_pieces, so->cuts, piece);
    if (s == CT_OK) {
        last_consumers(g, piece, lastc);
        c.piece = piece, c.lastc = lastc;
        for (int i = 0; i < n; i++) c.map[i] = CT_NONE;
    }
    /* the links are appended to p->outputs after the user's (rebind moves them) */
    p->n_outputs = n_user_out + (p->loss != CT_NONE);
    for (int h = 0; s == CT_OK && h < so->n_held; h++) s = copy_piece(p, &c, so->held[h], h);
    if (s == CT_OK) s = placeholders(p, &c, n_user_out);
    if (s == CT_OK) s = rebind(p, &c, n_user_out); /* p->outputs / loss: user ids until here */
    free(piece), free(lastc), free(c.loc);
    if (s != CT_OK) {
        free(c.map);
        free(c.ng.nodes);
        return s;
    }
    free(p->g.nodes);
    p->g = c.ng;
    p->n_fwd = c.ng.n;
    p->user_map = c.map;
    p->n_parts = so->n_held;
    p->pp = so->group;
    if (!(p->stage_arrays = malloc(sizeof(int) * (size_t)(so->n_pieces + so->n_held))))
        return ct_set_error(p->ctx, CT_E_OOM, "compile: out of memory");
    p->stage_keep = *so; /* for ct_plan_add_shape's compiles of the same cut */
    if (so->n_pieces > 1) memcpy(p->stage_arrays, so->cuts, sizeof(int) * (size_t)(so->n_pieces - 1));
    memcpy(p->stage_arrays + so->n_pieces, so->held, sizeof(int) * (size_t)so->n_held);
    p->stage_keep.cuts = p->stage_arrays;
    p->stage_keep.held = p->stage_arrays + so->n_pieces;
    return CT_OK;
}

/* Every node's part after the passes: a flagged node's own (the pieces' nodes, links, seeds, and the copies
 * passes made of them), else its inputs' (the largest; -1 shared: from parameters and data inputs only).
 * A parameter's gradient that no part owns would be added with every part: with several parts that is a bug. */
ct_status ct_stage_parts(ct_plan *p) {
    if (!p->n_parts) return CT_OK;
    const ct_graph *g = &p->g;
    p->part = malloc((size_t)g->n + 1);
    if (!p->part) return ct_set_error(p->ctx, CT_E_OOM, "compile: out of memory");
    for (int i = 0; i < g->n; i++) {
        const ct_node_def *d = &g->nodes[i];
        int pt = (int)(d->flags >> CT_NODE_PART_SHIFT) - 1;
        for (int j = 0; pt < 0 && j < d->n_in; j++)
            if (p->part[d->in[j]] > pt) pt = p->part[d->in[j]];
        for (int j = 0; j < d->n_in; j++) /* a flagged node's inputs are its part's or shared */
            if (pt >= 0 && p->part[d->in[j]] >= 0 && p->part[d->in[j]] != pt)
                return ct_set_error(p->ctx, CT_E_INTERNAL, "pipeline: node '%s' of part %d reads '%s' of part %d",
                                    d->name, pt, g->nodes[d->in[j]].name, p->part[d->in[j]]);
        p->part[i] = (signed char)pt;
        if (p->n_parts > 1 && pt < 0 && p->pn && p->pn[i].live && p->pn[i].grad_of_param >= 0) /* would add twice */
            return ct_set_error(p->ctx, CT_E_INTERNAL, "pipeline: the gradient '%s' belongs to no part", d->name);
    }
    return CT_OK;
}

/* ---- a stage plan's accessors ---------------------------------------------------------- */

int ct_plan_num_parts(const ct_plan *p) { return p && p->n_parts ? p->n_parts : 1; }

ct_status ct_plan_set_part(ct_plan *p, int part) {
    if (!p || part < -1 || part >= ct_plan_num_parts(p)) return CT_E_INVALID_ARG;
    p->run_part = part;
    return CT_OK;
}

int ct_plan_num_links(const ct_plan *p, int part, int dir) {
    int n = 0;
    for (int i = 0; p && i < p->n_links; i++) n += p->links[i].part == part && p->links[i].dir == dir;
    return n;
}

ct_status ct_plan_link(ct_plan *p, int part, int dir, int i, ct_tensor *value, ct_tensor *grad) {
    if (!p) return CT_E_INVALID_ARG;
    for (int k = 0, j = 0; k < p->n_links; k++) {
        const ct_stage_link *l = &p->links[k];
        if (l->part != part || l->dir != dir || j++ != i) continue;
        if (p->plan_only) return ct_set_error(p->ctx, CT_E_STATE, "plan_link: a plan_only plan has no memory");
        if (value) *value = ct_plan_node_tensor(p, p->outputs[l->value]);
        if (grad) {
            if (l->grad >= 0) *grad = ct_plan_node_tensor(p, p->outputs[l->grad]);
            else *grad = ct_tensor_make(NULL, CT_F32, 0, NULL);
        }
        return CT_OK;
    }
    return ct_set_error(p->ctx, CT_E_INVALID_ARG, "plan_link: part %d has no %s link %d", part,
                        dir ? "outgoing" : "incoming", i);
}

int ct_plan_has_node(const ct_plan *p, ct_node n) {
    if (!p || ct_plan_map(p, n) < 0) return 0;
    for (int i = 0; i < p->n_stand_ins; i++)
        if (p->stand_ins[i] == n) return 0;
    return 1;
}


/* ---- micro-batches in flight: what backward reads, saved per slot ------------------------------ */

/* The activation-arena ranges part `part` (-1: every node) leaves for its backward: the values and saved state
 * of its forward nodes (and shared ones) still read after the forward, and the data inputs; sorted by offset,
 * merged. *in[k]: range k is a data input's. Returns the count (ranges: 2 x that many). */
static int saved_ranges(const ct_plan *p, int part, size_t *rg, uint8_t *in) {
    const ct_plan_node *pn = p->pn;
    int n = 0;
    for (int i = 0; i < p->n_fwd; i++) {
        const ct_node_def *d = &p->g.nodes[i];
        if (!pn[i].live || (p->part && part >= 0 && p->part[i] >= 0 && p->part[i] != part)) continue;
        const int input = d->op == CT_OP_INPUT && !(d->flags >> CT_NODE_PART_SHIFT) && i != p->seed;
        const int late = pn[i].last_use >= p->n_fwd || input;
        ct_node r = pn[i].arena == CT_ARENA_ALIAS ? pn[i].root : i;
        if (late && pn[r].arena == CT_ARENA_ACT && pn[r].bytes) {
            rg[2 * n] = pn[r].offset, rg[2 * n + 1] = pn[r].bytes, in[n++] = (uint8_t)input;
        }
        if (late && pn[i].aux_bytes) rg[2 * n] = pn[i].aux_offset, rg[2 * n + 1] = pn[i].aux_bytes, in[n++] = 0;
    }
    for (int a = 1; a < n; a++) /* insertion sort by offset (a few hundred ranges) */
        for (int b = a; b > 0 && rg[2 * b] < rg[2 * b - 2]; b--) {
            size_t t0 = rg[2 * b], t1 = rg[2 * b + 1];
            uint8_t t2 = in[b];
            rg[2 * b] = rg[2 * b - 2], rg[2 * b + 1] = rg[2 * b - 1], in[b] = in[b - 1];
            rg[2 * b - 2] = t0, rg[2 * b - 1] = t1, in[b - 1] = t2;
        }
    int m = 0;
    for (int k = 0; k < n; k++) { /* overlapping ranges (an alias and its root): one */
        if (m && rg[2 * k] < rg[2 * (m - 1)] + rg[2 * (m - 1) + 1]) {
            size_t e = rg[2 * k] + rg[2 * k + 1], me = rg[2 * (m - 1)] + rg[2 * (m - 1) + 1];
            if (e > me) rg[2 * (m - 1) + 1] = e - rg[2 * (m - 1)];
            in[m - 1] = (uint8_t)(in[m - 1] && in[k]);
            continue;
        }
        rg[2 * m] = rg[2 * k], rg[2 * m + 1] = rg[2 * k + 1], in[m++] = in[k];
    }
    return m;
}

/* Part `part`'s saved ranges (-1: every part's) into *ss (its arrays allocated). */
static ct_status saved_set_make(const ct_plan *p, int part, ct_saved_set *ss) {
    const int cap = 2 * p->n_fwd + 2;
    memset(ss, 0, sizeof *ss);
    ss->rg = malloc(sizeof(size_t) * 2 * (size_t)cap);
    ss->in = malloc((size_t)cap);
    if (!ss->rg || !ss->in) {
        free(ss->rg), free(ss->in);
        ss->rg = NULL, ss->in = NULL;
        return ct_set_error(p->ctx, CT_E_OOM, "out of memory");
    }
    ss->n = saved_ranges(p, part, ss->rg, ss->in);
    for (int k = 0; k < ss->n; k++) ss->bytes += ss->rg[2 * k + 1];
    return CT_OK;
}

void ct_saved_sets_free(ct_plan *p) {
    for (int e = 0; p->saved && e < p->n_saved; e++) free(p->saved[e].rg), free(p->saved[e].in);
    free(p->saved);
    p->saved = NULL;
    p->n_saved = 0;
}

/* Copies a saved set's ranges between the arena and a stash (to_stash 1: arena -> stash); inputs_only: the
 * data inputs alone. */
static void copy_saved(ct_plan *p, const ct_saved_set *ss, char *stash, int to_stash, int inputs_only) {
    size_t o = 0;
    for (int k = 0; k < ss->n; k++) {
        if (!inputs_only || ss->in[k])
            memcpy(to_stash ? stash + o : p->act_arena + ss->rg[2 * k], to_stash ? p->act_arena + ss->rg[2 * k] : stash + o,
                   ss->rg[2 * k + 1]);
        o += ss->rg[2 * k + 1];
    }
}

size_t ct_plan_saved_bytes(const ct_plan *p, int part) {
    if (!p || !p->pn) return 0;
    size_t most = 0;
    for (int c = part < 0 ? 0 : part; c < (part < 0 ? ct_plan_num_parts(p) : part + 1); c++) {
        const int pt = p->n_parts ? c : -1;
        if (p->saved) { /* computed by ct_plan_set_act_slots */
            if (p->saved[pt + 1].bytes > most) most = p->saved[pt + 1].bytes;
            continue;
        }
        ct_saved_set ss;
        if (saved_set_make(p, pt, &ss) != CT_OK) return 0;
        if (ss.bytes > most) most = ss.bytes;
        free(ss.rg), free(ss.in);
    }
    return most;
}

ct_status ct_plan_set_act_slots(ct_plan *p, int n) {
    if (!p || n < 1 || n > 4096) return CT_E_INVALID_ARG;
    if (p->plan_only) return ct_set_error(p->ctx, CT_E_STATE, "act_slots: a plan_only plan has no memory");
    for (int k = 0; k < p->n_act_slots; k++) ct_free(p->ctx, p->act_slots[k]);
    free(p->act_slots);
    free(p->slot_part);
    ct_saved_sets_free(p);
    p->n_act_slots = 0;
    p->act_slots = calloc((size_t)n, sizeof *p->act_slots);
    p->slot_part = malloc(sizeof(int) * (size_t)n);
    /* the ranges of each part (entry part + 1; entry 0: all of them), once: the plan's layout is fixed */
    ct_saved_set *ss = calloc((size_t)ct_plan_num_parts(p) + 1, sizeof *ss);
    if (!p->act_slots || !p->slot_part || !ss) {
        free(ss);
        return ct_set_error(p->ctx, CT_E_OOM, "out of memory");
    }
    p->saved = ss;
    for (int e = 0; e <= ct_plan_num_parts(p); e++, p->n_saved++) CT_TRY(saved_set_make(p, e - 1, &ss[e]));
    p->slot_bytes = ct_plan_saved_bytes(p, -1);
    for (int k = 0; k < n; k++) {
        CT_TRY(ct_alloc(p->ctx, p->slot_bytes ? p->slot_bytes : 1, (void **)&p->act_slots[k]));
        p->slot_part[k] = -2;
        p->n_act_slots = k + 1;
    }
    return CT_OK;
}

static ct_status slot_check(ct_plan *p, int slot, const char *fn) {
    if (!p) return CT_E_INVALID_ARG;
    if (slot < 0 || slot >= p->n_act_slots)
        return ct_set_error(p->ctx, CT_E_INVALID_ARG, "%s: slot %d outside the %d of ct_plan_set_act_slots", fn, slot,
                            p->n_act_slots);
    return CT_OK;
}

ct_status ct_plan_save_activations(ct_plan *p, int slot) {
    CT_TRY(slot_check(p, slot, "save_activations"));
    const int part = p->n_parts ? p->run_part : -1;
    copy_saved(p, &p->saved[part + 1], p->act_slots[slot], 1, 0);
    p->slot_part[slot] = part;
    return CT_OK;
}

ct_status ct_plan_restore_activations(ct_plan *p, int slot) {
    CT_TRY(slot_check(p, slot, "restore_activations"));
    const int part = p->n_parts ? p->run_part : -1;
    if (p->slot_part[slot] != part)
        return ct_set_error(p->ctx, CT_E_STATE, "restore_activations: slot %d holds part %d, not part %d", slot,
                            p->slot_part[slot], part);
    copy_saved(p, &p->saved[part + 1], p->act_slots[slot], 0, 0);
    return CT_OK;
}

ct_status ct_plan_restore_inputs(ct_plan *p, int slot) {
    CT_TRY(slot_check(p, slot, "restore_inputs"));
    if (p->slot_part[slot] < -1) return ct_set_error(p->ctx, CT_E_STATE, "restore_inputs: slot %d holds nothing", slot);
    copy_saved(p, &p->saved[p->slot_part[slot] + 1], p->act_slots[slot], 0, 1);
    return CT_OK;
}

int ct_plan_num_act_slots(const ct_plan *p) { return p ? p->n_act_slots : 0; }

struct ct_comm *ct_plan_pipeline_group(const ct_plan *p) { return p ? p->pp : NULL; }
int ct_plan_param_order(const ct_plan *p, int i) { return p && p->param_seq && i >= 0 && i < p->n_params ? p->param_seq[i] : i; }
int ct_plan_buffer_order(const ct_plan *p, int i) {
    return p && p->buffer_seq && i >= 0 && i < ct_plan_num_buffers(p) ? p->buffer_seq[i] : i;
}
