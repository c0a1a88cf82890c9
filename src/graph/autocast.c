/* src/graph/autocast.c - the autocast pass (mixed precision) and the
 * precision names.
 *
 * Runs before autodiff on the plan's snapshot of the user's FP32 graph and
 * rebuilds it in order, inserting CAST nodes where the policy of
 * include/ctrain/graph.h (ct_precision) wants another dtype than the one a
 * value has. A value is cast at most once per dtype, whatever the number of
 * its uses. Every node's dtype is then inferred from its inputs
 * (ct_graph_infer_dtype), and autodiff emits gradients in the dtype of the
 * value they belong to (FP32 for the master weights). The user's node ids
 * are mapped to the new ones (p->user_map). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"

static const char *const k_prec_names[CT_PRECISION_COUNT] = {"fp32", "bf16", "fp16", "bf16-pure", "fp16-pure"};

const char *ct_precision_name(ct_precision p) {
    return (unsigned)p < CT_PRECISION_COUNT ? k_prec_names[p] : "invalid";
}

ct_status ct_precision_parse(ct_context *ctx, const char *name, ct_precision *out) {
    for (int i = 0; i < CT_PRECISION_COUNT; i++)
        if (name && !strcmp(name, k_prec_names[i])) {
            *out = (ct_precision)i;
            return CT_OK;
        }
    return ct_set_error(ctx, CT_E_INVALID_ARG,
                        "precision '%s' is not known; use one of fp32, bf16, fp16, bf16-pure, fp16-pure",
                        name ? name : "(null)");
}

/* keep_fp32 token match: a node name, a module prefix ("fc2" for
 * "fc2.weight"), or an op kind. */
static int token_matches(const ct_node_def *d, const char *tok, size_t len) {
    const char *op = ct_op_table(d->op)->name;
    if (strlen(op) == len && !strncmp(op, tok, len)) return 1;
    return !strncmp(d->name, tok, len) && (d->name[len] == '\0' || d->name[len] == '.');
}

/* The next token of a keep_fp32 list (separated by commas and/or spaces):
 * its start, and its length in *len; NULL at the end. */
static const char *next_token(const char *t, size_t *len) {
    if (!t) return NULL;
    t += strspn(t, ", ");
    *len = strcspn(t, ", ");
    return *len ? t : NULL;
}

static int is_leaf(ct_op op) { return op == CT_OP_INPUT || op == CT_OP_PARAM || op == CT_OP_BUFFER; }

static int kept_fp32(const char *keep, const ct_node_def *d) {
    size_t len;
    for (const char *t = next_token(keep, &len); t; t = next_token(t + len, &len))
        if (token_matches(d, t, len)) return 1;
    return 0;
}

/* Every token must match some op node: a typo would silently keep nothing. */
static ct_status check_keep_tokens(ct_plan *p, const ct_graph *g) {
    size_t len;
    for (const char *t = next_token(p->keep_fp32, &len); t; t = next_token(t + len, &len)) {
        int hit = 0;
        for (int i = 0; i < g->n && !hit; i++) hit = !is_leaf(g->nodes[i].op) && token_matches(&g->nodes[i], t, len);
        if (!hit) {
            char names[256] = "";
            size_t o = 0;
            for (int i = 0; i < g->n && o < sizeof names - 40; i++) {
                ct_op op = g->nodes[i].op;
                if (op == CT_OP_LINEAR || op == CT_OP_CONV2D || op == CT_OP_MATMUL || op == CT_OP_BATCHNORM)
                    o += (size_t)snprintf(names + o, sizeof names - o, "%s%s", o ? ", " : "", g->nodes[i].name);
            }
            return ct_set_error(p->ctx, CT_E_INVALID_ARG,
                                "keep_fp32: '%.*s' matches no layer name or op kind of this model (layers: %s; op "
                                "kinds: linear, conv2d, matmul, batchnorm, maxpool2d, ...)",
                                (int)len, t, names);
        }
    }
    return CT_OK;
}

ct_status ct_pass_autocast(ct_plan *p) {
    if (p->precision == CT_PRECISION_FP32) return CT_OK;
    ct_graph *old = &p->g;
    CT_TRY(check_keep_tokens(p, old));
    const int pure = p->precision == CT_PRECISION_BF16_PURE || p->precision == CT_PRECISION_FP16_PURE;
    const ct_dtype low = p->precision == CT_PRECISION_BF16 || p->precision == CT_PRECISION_BF16_PURE ? CT_BF16 : CT_F16;
    const int n = old->n;
    ct_graph ng = {.ctx = p->ctx, .mixed = 1, .tp = old->tp, .tp_rank = old->tp_rank, .tp_size = old->tp_size};
    ct_node *map = calloc((size_t)(n ? n : 1), sizeof(ct_node));
    ct_node *memo = malloc(sizeof(ct_node) * 2 * (size_t)(n ? n : 1)); /* [old id][0: low, 1: f32] */
    if (!map || !memo) {
        free(map);
        free(memo);
        return ct_set_error(p->ctx, CT_E_OOM, "compile: out of memory in autocast");
    }
    for (int i = 0; i < 2 * n; i++) memo[i] = CT_NONE;
    ct_status s = CT_OK;
    for (int i = 0; i < n && s == CT_OK; i++) {
        ct_node_def d = old->nodes[i];
        if (!is_leaf(d.op)) {
            int cls = kept_fp32(p->keep_fp32, &d) ? CT_AUTOCAST_F32 : ct_op_table(d.op)->autocast; /* ct_autocast_class */
            for (int j = 0; j < d.n_in && s == CT_OK; j++) {
                ct_node src = d.in[j];
                const ct_node_def *S = &old->nodes[src];
                ct_dtype have = ng.nodes[map[src]].dtype, want = have;
                if (!ct_dtype_is_float(have)) {
                    d.in[j] = map[src];
                    continue;
                }
                if (cls == CT_AUTOCAST_LOW) want = low;
                else if (cls == CT_AUTOCAST_F32) want = CT_F32;
                else if (pure && (S->op == CT_OP_PARAM || S->op == CT_OP_INPUT)) want = low;
                /* batchnorm updates its running statistics in place: never a copy */
                if ((d.op == CT_OP_BATCHNORM && j >= 3) || S->op == CT_OP_BUFFER) want = have;
                if (want == have) {
                    d.in[j] = map[src];
                    continue;
                }
                ct_node *m = &memo[2 * src + (want == CT_F32)];
                if (*m == CT_NONE) {
                    s = ct_graph_cast(&ng, map[src], want, m);
                    p->n_casts += s == CT_OK;
                }
                d.in[j] = *m;
            }
        }
        if (s == CT_OK) s = ct_graph_push(&ng, &d, &map[i]);
    }
    free(memo);
    if (s != CT_OK) {
        free(ng.nodes);
        free(map);
        return s;
    }
    free(old->nodes);
    p->g = ng;
    p->n_fwd = ng.n;
    for (int i = 0; i < p->n_params; i++) p->params[i] = map[p->params[i]];
    for (int i = 0; i < p->n_outputs; i++) p->outputs[i] = map[p->outputs[i]];
    const ct_node loss = p->loss != CT_NONE ? map[p->loss] : CT_NONE;
    if (p->user_map) { /* a pipeline stage's map (user -> stage graph) composed with this one */
        for (int u = 0; u < p->n_user; u++) p->user_map[u] = p->user_map[u] >= 0 ? map[p->user_map[u]] : CT_NONE;
        free(map);
    } else {
        p->user_map = map;
    }
    if (loss != CT_NONE) {
        p->loss = loss;
        /* NOLINTNEXTLINE(clang-analyzer-core.NullDereference): ng holds every node (ct_graph_push, graph.c) */
        if (ng.nodes[p->loss].dtype != CT_F32) { /* autodiff needs an FP32 scalar loss */
            ct_node c;
            CT_TRY(ct_graph_cast(&p->g, p->loss, CT_F32, &c));
            p->n_casts++;
            for (int i = 0; i < p->n_outputs; i++)
                if (p->outputs[i] == p->loss) p->outputs[i] = c;
            p->loss = c;
            p->n_fwd = p->g.n;
        }
    }
    return CT_OK;
}
