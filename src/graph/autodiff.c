/* src/graph/autodiff.c - reverse-mode autodiff: every backward rule lives in
 * this file; one switch over the op enum (rule) picks the rule of the op's
 * family (rule_matmul, rule_norm, rule_binary, ...). Rules emit ordinary
 * graph nodes, so backward is planned and executed like forward. */
#include <stdio.h>
#include <string.h>

#include "autodiff.h"

/* Appends a backward node with output shape of node `like`. */
static ct_status bnode(ct_graph *g, ct_op op, int n_in, const ct_node *in, const ct_node_def *attrs_from,
                       ct_node like, ct_node *out) {
    ct_node_def d;
    memset(&d, 0, sizeof d);
    d.op = op;
    d.n_in = n_in;
    for (int i = 0; i < n_in; i++) d.in[i] = in[i];
    d.dtype = CT_F32;
    d.ndim = g->nodes[like].ndim;
    memcpy(d.shape, g->nodes[like].shape, sizeof d.shape);
    if (attrs_from) {
        memcpy(d.ia, attrs_from->ia, sizeof d.ia);
        memcpy(d.fa, attrs_from->fa, sizeof d.fa);
    }
    d.flags = CT_NODE_BACKWARD;
    return ct_graph_push(g, &d, out);
}

/* Sums x down to the shape of node `like` (NumPy broadcasting in reverse). */
static ct_status sum_to(ct_graph *g, ct_node x, ct_node like, ct_node *out) {
    const ct_node_def *X = &g->nodes[x], *L = &g->nodes[like];
    int same = X->ndim == L->ndim;
    for (int i = 0; same && i < X->ndim; i++) same = X->shape[i] == L->shape[i];
    if (same) {
        *out = x;
        return CT_OK;
    }
    return bnode(g, CT_OP_SUM_TO, 1, &x, NULL, like, out);
}

static ct_status mark(ct_graph *g, ct_node n) {
    g->nodes[n].flags |= CT_NODE_BACKWARD;
    return CT_OK;
}

/* The dtype of node n's gradient: its value's dtype, except for the BF16
 * copy of an FP32 parameter, whose gradient is FP32: it only feeds the
 * master gradient, and a BF16 round trip would cost 16 bits of mantissa and
 * a pass. (FP16 copies keep the FP16 round trip: the loss scaler's overflow
 * check is meant to see what FP16 holds.) */
static ct_dtype grad_dtype(const ct_graph *g, ct_node n) {
    const ct_node_def *d = &g->nodes[n];
    if (d->op == CT_OP_CAST && d->dtype == CT_BF16 && g->nodes[d->in[0]].op == CT_OP_PARAM &&
        g->nodes[d->in[0]].dtype == CT_F32)
        return CT_F32;
    return d->dtype;
}

/* Ops whose kernels accumulate in FP32 and can store that as FP32 whatever
 * their inputs' dtype (matmul and the conv2d backward ops on oneDNN's BF16
 * primitives, the rest on FP32 copies). */
static int stores_f32(ct_op op) {
    return op == CT_OP_MATMUL || op == CT_OP_CONV2D_BWD_WEIGHT || op == CT_OP_CONV2D_BWD_DATA || op == CT_OP_SUM ||
           op == CT_OP_SCALE || op == CT_OP_SUM_TO;
}

/* x is a backward GEMM whose result reaches the gradient of `target` only
 * through a transpose or a batch sum: when that gradient is an FP32 master
 * gradient (grad_dtype), x is stored as FP32 from the start too. */
static void store_for_grad(ct_graph *g, ct_node target, ct_node x) {
    if (g->mixed && grad_dtype(g, target) == CT_F32 && g->nodes[target].dtype != CT_F32) g->nodes[x].dtype = CT_F32;
}

/* 1: a node from `from` on reads x. */
static int read_after(const ct_graph *g, ct_node from, ct_node x) {
    for (int i = from; i < g->n; i++)
        for (int j = 0; j < g->nodes[i].n_in; j++)
            if (g->nodes[i].in[j] == x) return 1;
    return 0;
}

/* Adds `contrib` to the gradient accumulated for node `n`. Nodes from
 * `fresh` on were created by the calling rule: one of those that no other
 * node reads yet is this contribution only, so its dtype may still change. */
static ct_status accumulate(ct_graph *g, ct_node *grads, ct_node fresh, ct_node n, ct_node contrib) {
    ct_dtype want = grad_dtype(g, n);
    if (g->mixed && g->nodes[contrib].dtype != want) { /* a gradient has its value's dtype */
        ct_node_def *c = &g->nodes[contrib];
        if (want != g->nodes[n].dtype && contrib >= fresh && stores_f32(c->op) && !read_after(g, fresh, contrib)) {
            c->dtype = want; /* a master gradient: stored as FP32 from the start */
        } else {
            CT_TRY(ct_graph_cast(g, contrib, want, &contrib));
            CT_TRY(mark(g, contrib));
        }
    }
    if (grads[n] == CT_NONE) {
        grads[n] = contrib;
        return CT_OK;
    }
    ct_node s;
    CT_TRY(ct_add(g, grads[n], contrib, &s));
    grads[n] = s;
    return mark(g, s);
}

/* Reshape that is tagged as a backward node. */
static ct_status breshape(ct_graph *g, ct_node x, int ndim, const int64_t *shape, ct_node *out) {
    CT_TRY(ct_reshape(g, x, ndim, shape, out));
    return mark(g, *out);
}

static ct_status bmatmul(ct_graph *g, ct_node a, ct_node b, int ta, int tb, ct_node *out) {
    CT_TRY(ct_matmul(g, a, b, ta, tb, out));
    return mark(g, *out);
}

/* Sums x over every dim except `keep_dim`. */
static ct_status sum_except(ct_graph *g, ct_node x, int keep_dim, ct_node *out) {
    int nd = g->nodes[x].ndim;
    uint32_t mask = 0;
    for (int i = 0; i < nd; i++)
        if (i != keep_dim) mask |= 1u << i;
    if (!mask) {
        CT_TRY(ct_scale(g, x, 1.0f, out));
        return mark(g, *out);
    }
    CT_TRY(ct_sum(g, x, mask, 0, out));
    return mark(g, *out);
}

/* What a backward rule works from: node n (D: a copy, as pushing nodes may
 * reallocate g->nodes), its output's gradient dy, the gradients accumulated
 * so far, which nodes need one (req), and the first node the rule creates. */
typedef struct {
    ct_graph *g;
    ct_node_def D;
    ct_node n, dy, fresh;
    ct_node *grads;
    const uint8_t *req;
} rule_ctx;

static int needs(const rule_ctx *c, ct_node x) { return c->req[x] != 0; }

/* Adds t to the gradient of x (accumulate). */
static ct_status add_grad(const rule_ctx *c, ct_node x, ct_node t) {
    return accumulate(c->g, c->grads, c->fresh, x, t);
}

/* A backward node `op` with output shape and attributes like in[0]'s, whose
 * result is in[0]'s gradient contribution (the one-node rules). */
static ct_status grad_node(const rule_ctx *c, ct_op op, int n_in, const ct_node *in) {
    ct_node t;
    CT_TRY(bnode(c->g, op, n_in, in, &c->D, c->D.in[0], &t));
    return add_grad(c, c->D.in[0], t);
}

static ct_status no_rule(const rule_ctx *c) {
    return ct_set_error(c->g->ctx, CT_E_UNSUPPORTED, "autodiff: no backward rule for op '%s' (node '%s')",
                        ct_op_table(c->D.op)->name, c->D.name);
}

/* matmul y = op(a) op(b): da. A batched a times a 2-D b transposed
 * (ia[0]) is dy b^T transposed back. */
static ct_status matmul_grad_a(const rule_ctx *c) {
    ct_graph *g = c->g;
    ct_node a = c->D.in[0], b = c->D.in[1], dy = c->dy, t, u;
    int ta = (int)c->D.ia[0], tb = (int)c->D.ia[1];
    int nd = c->D.ndim, b2d = g->nodes[b].ndim == 2 && nd > 2;
    if (!ta) CT_TRY(bmatmul(g, dy, b, 0, !tb, &t));
    else if (!b2d) CT_TRY(bmatmul(g, b, dy, tb, 1, &t));
    else {
        int perm[CT_MAX_DIMS];
        for (int i = 0; i < nd; i++) perm[i] = i;
        perm[nd - 2] = nd - 1; perm[nd - 1] = nd - 2;
        CT_TRY(bmatmul(g, dy, b, 0, !tb, &u));
        store_for_grad(g, a, u);
        CT_TRY(ct_transpose(g, u, perm, &t));
        CT_TRY(mark(g, t));
    }
    return add_grad(c, a, t);
}

/* matmul: db. A 2-D b shared by a batched a: one GEMM over the flattened
 * batch (a not transposed), or a batch of GEMMs summed over the batch. */
static ct_status matmul_grad_b(const rule_ctx *c) {
    ct_graph *g = c->g;
    ct_node a = c->D.in[0], b = c->D.in[1], dy = c->dy, t, u, v;
    int ta = (int)c->D.ia[0], tb = (int)c->D.ia[1];
    int nd = c->D.ndim, b2d = g->nodes[b].ndim == 2 && nd > 2;
    if (b2d && !ta) {
        const ct_node_def *A = &g->nodes[a];
        int64_t K = A->shape[A->ndim - 1], Nn = c->D.shape[nd - 1];
        CT_TRY(breshape(g, a, 2, (int64_t[]){-1, K}, &u));
        CT_TRY(breshape(g, dy, 2, (int64_t[]){-1, Nn}, &v));
        if (!tb) CT_TRY(bmatmul(g, u, v, 1, 0, &t));
        else CT_TRY(bmatmul(g, v, u, 1, 0, &t));
    } else if (b2d) {
        uint32_t mask = 0;
        for (int i = 0; i < nd - 2; i++) mask |= 1u << i;
        if (!tb) CT_TRY(bmatmul(g, a, dy, !ta, 0, &u));
        else CT_TRY(bmatmul(g, dy, a, 1, ta, &u));
        store_for_grad(g, b, u);
        CT_TRY(ct_sum(g, u, mask, 0, &t));
        CT_TRY(mark(g, t));
    } else if (!tb) {
        CT_TRY(bmatmul(g, a, dy, !ta, 0, &t));
    } else {
        CT_TRY(bmatmul(g, dy, a, 1, ta, &t));
    }
    return add_grad(c, b, t);
}

static ct_status rule_matmul(const rule_ctx *c) {
    if (needs(c, c->D.in[0])) CT_TRY(matmul_grad_a(c));
    if (needs(c, c->D.in[1])) CT_TRY(matmul_grad_b(c));
    return CT_OK;
}

/* linear y = x w^T + bias. Weight and bias gradients first: x, often saved
 * for dW only, is then freed before dx is allocated, and the parameter
 * gradients a bucket waits for are final sooner. The conv rule does the same. */
static ct_status rule_linear(const rule_ctx *c) {
    ct_graph *g = c->g;
    const ct_node *in = c->D.in;
    ct_node x = in[0], w = in[1], dy = c->dy, t, u, v;
    int64_t O = g->nodes[w].shape[0], I = g->nodes[w].shape[1];
    if (needs(c, w)) {
        CT_TRY(breshape(g, dy, 2, (int64_t[]){-1, O}, &u));
        CT_TRY(breshape(g, x, 2, (int64_t[]){-1, I}, &v));
        CT_TRY(bmatmul(g, u, v, 1, 0, &t));
        CT_TRY(add_grad(c, w, t));
    }
    if (c->D.n_in > 2 && needs(c, in[2])) {
        CT_TRY(sum_except(g, dy, c->D.ndim - 1, &t));
        CT_TRY(add_grad(c, in[2], t));
    }
    if (needs(c, x)) {
        CT_TRY(bmatmul(g, dy, w, 0, 0, &t));
        CT_TRY(add_grad(c, x, t));
    }
    return CT_OK;
}

/* conv2d (x, w, bias): weight and bias gradients first, as linear's. */
static ct_status rule_conv2d(const rule_ctx *c) {
    ct_graph *g = c->g;
    const ct_node *in = c->D.in;
    ct_node dy = c->dy, t;
    if (needs(c, in[1])) {
        CT_TRY(bnode(g, CT_OP_CONV2D_BWD_WEIGHT, 2, (ct_node[]){dy, in[0]}, &c->D, in[1], &t));
        CT_TRY(add_grad(c, in[1], t));
    }
    if (c->D.n_in > 2 && needs(c, in[2])) {
        CT_TRY(sum_except(g, dy, c->D.ia[4] ? 3 : 1, &t)); /* the channel dim */
        CT_TRY(add_grad(c, in[2], t));
    }
    if (needs(c, in[0])) {
        CT_TRY(bnode(g, CT_OP_CONV2D_BWD_DATA, 2, (ct_node[]){dy, in[1]}, &c->D, in[0], &t));
        CT_TRY(add_grad(c, in[0], t));
    }
    return CT_OK;
}

/* max pooling reads its saved argmax (node n's aux); average pooling dy only. */
static ct_status rule_pool(const rule_ctx *c) {
    if (c->D.op == CT_OP_MAXPOOL2D) return grad_node(c, CT_OP_MAXPOOL2D_BWD, 2, (ct_node[]){c->dy, c->n});
    return grad_node(c, CT_OP_AVGPOOL2D_BWD, 1, &c->dy);
}

/* batchnorm and layernorm (x, gamma, bias): the backward nodes read the
 * statistics the forward node n saved. */
static ct_status rule_norm(const rule_ctx *c) {
    ct_graph *g = c->g;
    const ct_node *in = c->D.in;
    ct_node dy = c->dy, n = c->n, t;
    int bn = c->D.op == CT_OP_BATCHNORM;
    if (needs(c, in[0])) {
        CT_TRY(bnode(g, bn ? CT_OP_BATCHNORM_BWD_DATA : CT_OP_LAYERNORM_BWD_DATA, 4,
                     (ct_node[]){dy, in[0], in[1], n}, &c->D, in[0], &t));
        CT_TRY(add_grad(c, in[0], t));
    }
    if (needs(c, in[1])) {
        CT_TRY(bnode(g, bn ? CT_OP_BATCHNORM_BWD_GAMMA : CT_OP_LAYERNORM_BWD_GAMMA, 3,
                     (ct_node[]){dy, in[0], n}, &c->D, in[1], &t));
        CT_TRY(add_grad(c, in[1], t));
    }
    if (c->D.n_in > 2 && needs(c, in[2])) { /* layernorm's bias is optional */
        if (bn) CT_TRY(sum_except(g, dy, 1, &t));
        else CT_TRY(sum_except(g, dy, c->D.ndim - 1, &t));
        CT_TRY(add_grad(c, in[2], t));
    }
    return CT_OK;
}

/* The one-input element-wise ops: unary, scale, dropout, cast. */
static ct_status rule_eltwise(const rule_ctx *c) {
    const ct_node x = c->D.in[0];
    ct_node t;
    switch (c->D.op) {
    case CT_OP_UNARY: {
        /* relu, sigmoid, tanh differentiate from the output; gelu, silu from the input */
        int k = (int)c->D.ia[0];
        int from_out = k == CT_UNARY_RELU || k == CT_UNARY_SIGMOID || k == CT_UNARY_TANH;
        ct_node_def A = c->D;
        A.ia[1] = from_out;
        CT_TRY(bnode(c->g, CT_OP_UNARY_BWD, 2, (ct_node[]){c->dy, from_out ? c->n : x}, &A, x, &t));
        return add_grad(c, x, t);
    }
    case CT_OP_SCALE:
        CT_TRY(ct_scale(c->g, c->dy, c->D.fa[0], &t));
        CT_TRY(mark(c->g, t));
        return add_grad(c, x, t);
    case CT_OP_DROPOUT: /* the same counter-based mask, regenerated from (seed, stream, step) */
        return grad_node(c, CT_OP_DROPOUT, 1, &c->dy);
    case CT_OP_CAST: /* accumulate casts the gradient back to the input's dtype */
        return add_grad(c, x, c->dy);
    default:
        return no_rule(c);
    }
}

/* Sums u to x's shape (undoing broadcasting) and adds it to x's gradient. */
static ct_status add_grad_sum_to(const rule_ctx *c, ct_node x, ct_node u) {
    ct_node t;
    CT_TRY(sum_to(c->g, u, x, &t));
    return add_grad(c, x, t);
}

/* ct_mul/ct_div/ct_scale of dy, tagged as backward. */
static ct_status bmul(ct_graph *g, ct_node a, ct_node b, ct_node *out) {
    CT_TRY(ct_mul(g, a, b, out));
    return mark(g, *out);
}
static ct_status bdiv(ct_graph *g, ct_node a, ct_node b, ct_node *out) {
    CT_TRY(ct_div(g, a, b, out));
    return mark(g, *out);
}
static ct_status bscale(ct_graph *g, ct_node x, float s, ct_node *out) {
    CT_TRY(ct_scale(g, x, s, out));
    return mark(g, *out);
}

/* Broadcasting binary ops y = a (op) b. */
static ct_status rule_binary(const rule_ctx *c) {
    ct_graph *g = c->g;
    ct_node a = c->D.in[0], b = c->D.in[1], dy = c->dy, u, v;
    switch ((ct_binary_kind)c->D.ia[0]) {
    case CT_BIN_ADD:
    case CT_BIN_SUB:
        if (needs(c, a)) CT_TRY(add_grad_sum_to(c, a, dy));
        if (needs(c, b)) {
            u = dy;
            if (c->D.ia[0] == CT_BIN_SUB) CT_TRY(bscale(g, dy, -1.0f, &u));
            CT_TRY(add_grad_sum_to(c, b, u));
        }
        return CT_OK;
    case CT_BIN_MUL:
        if (needs(c, a)) {
            CT_TRY(bmul(g, dy, b, &u));
            CT_TRY(add_grad_sum_to(c, a, u));
        }
        if (needs(c, b)) {
            CT_TRY(bmul(g, dy, a, &u));
            CT_TRY(add_grad_sum_to(c, b, u));
        }
        return CT_OK;
    case CT_BIN_DIV:
        if (needs(c, a)) {
            CT_TRY(bdiv(g, dy, b, &u));
            CT_TRY(add_grad_sum_to(c, a, u));
        }
        if (needs(c, b)) { /* d(a/b)/db = -y/b */
            CT_TRY(bmul(g, dy, c->n, &u));
            CT_TRY(bdiv(g, u, b, &v));
            CT_TRY(bscale(g, v, -1.0f, &u));
            CT_TRY(add_grad_sum_to(c, b, u));
        }
        return CT_OK;
    default:
        return no_rule(c);
    }
}

/* sum, reshape, transpose: dy brought back to the input's shape. */
static ct_status rule_shape(const rule_ctx *c) {
    ct_graph *g = c->g;
    const ct_node_def *D = &c->D;
    const ct_node x = D->in[0];
    ct_node t, u;
    const ct_node_def *X = &g->nodes[x];
    int64_t s[CT_MAX_DIMS];
    switch (D->op) {
    case CT_OP_SUM: /* reshape dy to keepdim form, then broadcast back to x's shape */
        for (int i = 0; i < X->ndim; i++) s[i] = (D->ia[0] >> i) & 1 ? 1 : X->shape[i];
        u = c->dy;
        if (!D->ia[1]) CT_TRY(breshape(g, c->dy, X->ndim, s, &u));
        CT_TRY(bnode(g, CT_OP_BROADCAST_TO, 1, &u, D, x, &t));
        return add_grad(c, x, t);
    case CT_OP_RESHAPE:
        memcpy(s, X->shape, sizeof s);
        CT_TRY(breshape(g, c->dy, X->ndim, s, &t));
        return add_grad(c, x, t);
    case CT_OP_TRANSPOSE: {
        int inv[CT_MAX_DIMS];
        for (int i = 0; i < D->ndim; i++) inv[D->ia[i]] = i;
        CT_TRY(ct_transpose(g, c->dy, inv, &t));
        CT_TRY(mark(g, t));
        return add_grad(c, x, t);
    }
    default:
        return no_rule(c);
    }
}

/* concat, slice and pad (slice_bwd): each other's backward. */
static ct_status rule_slice_concat(const rule_ctx *c) {
    ct_graph *g = c->g;
    const ct_node_def *D = &c->D;
    ct_node t;
    switch (D->op) {
    case CT_OP_CONCAT: {
        int axis = (int)D->ia[0];
        int64_t off = 0;
        for (int i = 0; i < D->n_in; i++) {
            int64_t len = g->nodes[D->in[i]].shape[axis];
            if (needs(c, D->in[i])) {
                CT_TRY(ct_slice(g, c->dy, axis, off, off + len, &t));
                CT_TRY(mark(g, t));
                CT_TRY(add_grad(c, D->in[i], t));
            }
            off += len;
        }
        return CT_OK;
    }
    case CT_OP_SLICE:
        return grad_node(c, CT_OP_SLICE_BWD, 1, &c->dy);
    case CT_OP_SLICE_BWD: /* ct_pad: the slice of dy where x sits */
        CT_TRY(ct_slice(g, c->dy, (int)D->ia[0], D->ia[1], D->ia[2], &t));
        CT_TRY(mark(g, t));
        return add_grad(c, D->in[0], t);
    default:
        return no_rule(c);
    }
}

/* softmax and log-softmax differentiate from their output; cross-entropy
 * (logits, labels) from the logits. */
static ct_status rule_softmax_loss(const rule_ctx *c) {
    const ct_node *in = c->D.in;
    if (c->D.op == CT_OP_CROSS_ENTROPY) return grad_node(c, CT_OP_CROSS_ENTROPY_BWD, 3, (ct_node[]){c->dy, in[0], in[1]});
    return grad_node(c, c->D.op == CT_OP_SOFTMAX ? CT_OP_SOFTMAX_BWD : CT_OP_LOG_SOFTMAX_BWD, 2,
                     (ct_node[]){c->dy, c->n});
}

/* attention (qkv, optional bias) and its window bias. */
static ct_status rule_attention(const rule_ctx *c) {
    const ct_node *in = c->D.in;
    if (c->D.op == CT_OP_WINDOW_BIAS) return grad_node(c, CT_OP_WINDOW_BIAS_BWD, 1, &c->dy);
    /* one node for d_qkv: recomputes the probabilities from q, k and the saved log-sum-exp */
    ct_node bin[4] = {c->dy, in[0], c->n, c->D.n_in > 1 ? in[1] : CT_NONE};
    return grad_node(c, CT_OP_ATTENTION_BWD, c->D.n_in > 1 ? 4 : 3, bin);
}

/* embedding (table, ids): the table's gradient only. */
static ct_status rule_embedding(const rule_ctx *c) {
    if (!needs(c, c->D.in[0])) return CT_OK;
    return grad_node(c, CT_OP_EMBEDDING_BWD, 2, (ct_node[]){c->dy, c->D.in[1]});
}

/* tensor parallelism: tp_copy's gradient is dy summed over the tensor group
 * (a tp_reduce node), tp_reduce's is dy itself; the vocabulary-parallel
 * cross entropy's backward reads the row statistics its forward saved. */
static ct_status rule_tp(const rule_ctx *c) {
    const ct_node *in = c->D.in;
    switch (c->D.op) {
    case CT_OP_TP_COPY: {
        ct_node t;
        CT_TRY(bnode(c->g, CT_OP_TP_REDUCE, 1, &c->dy, NULL, in[0], &t));
        return add_grad(c, in[0], t);
    }
    case CT_OP_TP_REDUCE:
        return add_grad(c, in[0], c->dy);
    case CT_OP_CROSS_ENTROPY_VP:
        return grad_node(c, CT_OP_CROSS_ENTROPY_VP_BWD, 4, (ct_node[]){c->dy, in[0], in[1], c->n});
    default:
        return no_rule(c);
    }
}

/* Emits the backward nodes of node n, whose output gradient is dy. */
static ct_status rule(ct_graph *g, ct_node n, ct_node dy, ct_node *grads, const uint8_t *req) {
    const rule_ctx c = {.g = g, .D = g->nodes[n], .n = n, .dy = dy, .fresh = g->n, .grads = grads, .req = req};
    switch (c.D.op) {
    case CT_OP_INPUT: case CT_OP_PARAM: case CT_OP_BUFFER:
        return CT_OK;
    case CT_OP_MATMUL: return rule_matmul(&c);
    case CT_OP_LINEAR: return rule_linear(&c);
    case CT_OP_CONV2D: return rule_conv2d(&c);
    case CT_OP_MAXPOOL2D: case CT_OP_AVGPOOL2D: return rule_pool(&c);
    case CT_OP_BATCHNORM: case CT_OP_LAYERNORM: return rule_norm(&c);
    case CT_OP_UNARY: case CT_OP_SCALE: case CT_OP_DROPOUT: case CT_OP_CAST: return rule_eltwise(&c);
    case CT_OP_BINARY: return rule_binary(&c);
    case CT_OP_SUM: case CT_OP_RESHAPE: case CT_OP_TRANSPOSE: return rule_shape(&c);
    case CT_OP_CONCAT: case CT_OP_SLICE: case CT_OP_SLICE_BWD: return rule_slice_concat(&c);
    case CT_OP_SOFTMAX: case CT_OP_LOG_SOFTMAX: case CT_OP_CROSS_ENTROPY: return rule_softmax_loss(&c);
    case CT_OP_ATTENTION: case CT_OP_WINDOW_BIAS: return rule_attention(&c);
    case CT_OP_EMBEDDING: return rule_embedding(&c);
    case CT_OP_TP_COPY: case CT_OP_TP_REDUCE: case CT_OP_CROSS_ENTROPY_VP: return rule_tp(&c);
    default: return no_rule(&c);
    }
}

ct_status ct_autodiff_roots(ct_graph *g, int n_roots, const ct_node *roots, const ct_node *seeds, ct_node *grads,
                            uint8_t *req) {
    int n_fwd = g->n;
    /* requires-grad: a node depends on a trainable parameter or on an input whose gradient is wanted */
    for (int i = 0; i < n_fwd; i++) {
        const ct_node_def *d = &g->nodes[i];
        req[i] = d->op == CT_OP_PARAM || (d->op == CT_OP_INPUT && (d->flags & CT_NODE_GRAD_INPUT));
        if (!ct_dtype_is_float(d->dtype)) continue; /* integer ids/labels carry no gradient */
        for (int j = 0; j < d->n_in && !req[i]; j++) req[i] = req[d->in[j]];
    }
    for (int i = 0; i < n_fwd; i++) grads[i] = CT_NONE;
    int any = 0;
    for (int r = 0; r < n_roots; r++) {
        if (!req[roots[r]]) continue; /* nothing it depends on is trained */
        if (grads[roots[r]] != CT_NONE)
            return ct_set_error(g->ctx, CT_E_INTERNAL, "autodiff: '%s' is seeded twice", g->nodes[roots[r]].name);
        grads[roots[r]] = seeds[r];
        any = 1;
    }
    if (!any)
        return ct_set_error(g->ctx, CT_E_INVALID_ARG, "autodiff: the loss '%s' does not depend on any parameter",
                            n_roots ? g->nodes[roots[0]].name : "(none)");
    for (int n = n_fwd - 1; n >= 0; n--) {
        if (grads[n] == CT_NONE || !req[n] || g->nodes[n].op == CT_OP_PARAM) continue;
        CT_TRY(rule(g, n, grads[n], grads, req));
    }
    return CT_OK;
}

ct_status ct_autodiff(ct_graph *g, ct_node loss, ct_node seed, ct_node *grads, uint8_t *req) {
    return ct_autodiff_roots(g, 1, &loss, &seed, grads, req);
}
