/* src/graph/graph.c - graph construction: leaves and forward-op builders with
 * shape and dtype checking. Backward nodes are added by autodiff.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"

ct_status ct_graph_create(ct_context *ctx, ct_graph **out) {
    if (!ctx || !out) return CT_E_INVALID_ARG;
    *out = NULL;
    ct_graph *g = calloc(1, sizeof *g);
    if (!g) return ct_set_error(ctx, CT_E_OOM, "out of memory creating a graph");
    g->ctx = ctx;
    g->tp_size = 1;
    *out = g;
    return CT_OK;
}

void ct_graph_free(ct_graph *g) {
    if (!g) return;
    free(g->nodes);
    free(g);
}

ct_context *ct_graph_context(const ct_graph *g) { return g->ctx; }

ct_status ct_graph_push(ct_graph *g, const ct_node_def *def, ct_node *out) {
    if (g->n == g->cap) {
        int cap = g->cap ? g->cap * 2 : 64;
        ct_node_def *nn = realloc(g->nodes, (size_t)cap * sizeof *nn);
        if (!nn) return ct_set_error(g->ctx, CT_E_OOM, "out of memory growing the graph to %d nodes", cap);
        g->nodes = nn;
        g->cap = cap;
    }
    g->nodes[g->n] = *def;
    if (g->mixed && def->op != CT_OP_CAST && def->n_in > 0) g->nodes[g->n].dtype = ct_graph_infer_dtype(g, def);
    if (!def->name[0]) snprintf(g->nodes[g->n].name, CT_NAME_LEN, "%s_%d", ct_op_table(def->op)->name, g->n);
    if (g->block_pending) { /* ct_graph_mark_block: this node starts a block */
        g->nodes[g->n].flags |= CT_NODE_BLOCK;
        g->block_pending = 0;
    }
    if (out) *out = g->n;
    g->n++;
    return CT_OK;
}

/* Mixed precision: the dtype of a node's stored output, by its op's
 * out_dtype column (op_table.c). Normalization keeps
 * its input's dtype (its FP32 gamma/beta/statistics do not promote it);
 * gradients of parameters and of f32 statistics are FP32; everything else
 * promotes as PyTorch does: FP32 when any float input is FP32 (or BF16 meets
 * FP16), else the common low-precision dtype. Integer inputs (labels, ids)
 * do not count. */
ct_dtype ct_graph_infer_dtype(const ct_graph *g, const ct_node_def *d) {
    const ct_node_def *in = g->nodes;
    switch ((ct_out_dtype)ct_op_table(d->op)->out_dtype) { /* the op table's out_dtype column */
    case CT_OUT_IN0: return in[d->in[0]].dtype;
    case CT_OUT_IN1: return in[d->in[1]].dtype;
    case CT_OUT_F32: return CT_F32;
    case CT_OUT_PROMOTE: break;
    }
    ct_dtype t = CT_DTYPE_COUNT;
    for (int i = 0; i < d->n_in; i++) {
        ct_dtype u = in[d->in[i]].dtype;
        if (!ct_dtype_is_float(u)) continue;
        t = t == CT_DTYPE_COUNT || t == u ? u : CT_F32;
    }
    return t == CT_DTYPE_COUNT ? d->dtype : t;
}

ct_status ct_graph_cast(ct_graph *g, ct_node x, ct_dtype dt, ct_node *out) {
    CT_TRY(ct_graph_check_node(g, x, "cast"));
    const ct_node_def *X = &g->nodes[x];
    if (!ct_dtype_is_float(X->dtype) || !ct_dtype_is_float(dt))
        return ct_set_error(g->ctx, CT_E_DTYPE, "cast: '%s' is %s; only float tensors are cast to %s", X->name,
                            ct_dtype_name(X->dtype), ct_dtype_name(dt));
    ct_node_def d;
    memset(&d, 0, sizeof d);
    d.op = CT_OP_CAST;
    d.n_in = 1;
    d.in[0] = x;
    d.dtype = dt;
    d.ndim = X->ndim;
    memcpy(d.shape, X->shape, sizeof d.shape);
    d.flags = X->flags & CT_NODE_BACKWARD;
    snprintf(d.name, CT_NAME_LEN, "%.48s.%s", X->name, ct_dtype_name(dt));
    return ct_graph_push(g, &d, out);
}

ct_status ct_graph_check_node(ct_graph *g, ct_node n, const char *op) {
    if (n < 0 || n >= g->n)
        return ct_set_error(g->ctx, CT_E_INVALID_ARG, "%s: node id %d does not exist in this graph (%d nodes)", op,
                            (int)n, g->n);
    return CT_OK;
}

static const ct_node_def *N(const ct_graph *g, ct_node n) { return &g->nodes[n]; }

static char *shp(const ct_node_def *d, char *buf) { return ct_shape_str(d->ndim, d->shape, buf, 96); }

static ct_status check_f32(ct_graph *g, const char *op, ct_node n) {
    const ct_node_def *d = N(g, n);
    if (d->dtype != CT_F32 && !(g->mixed && ct_dtype_is_float(d->dtype)))
        return ct_set_error(g->ctx, d->dtype == CT_BF16 || d->dtype == CT_F16 ? CT_E_UNSUPPORTED : CT_E_DTYPE,
                            "%s: input '%s' has dtype %s but this op needs f32; check the FP16/BF16 "
                            "conversion boundaries (cast to f32 first)",
                            op, d->name, ct_dtype_name(d->dtype));
    return CT_OK;
}

static ct_status check_same_dtype(ct_graph *g, const char *op, ct_node a, ct_node b) {
    if (g->mixed && ct_dtype_is_float(N(g, a)->dtype) && ct_dtype_is_float(N(g, b)->dtype)) return CT_OK;
    if (N(g, a)->dtype != N(g, b)->dtype)
        return ct_set_error(g->ctx, CT_E_DTYPE,
                            "%s: dtype mismatch, '%s' is %s and '%s' is %s; check the FP16/BF16 conversion "
                            "boundaries",
                            op, N(g, a)->name, ct_dtype_name(N(g, a)->dtype), N(g, b)->name,
                            ct_dtype_name(N(g, b)->dtype));
    return CT_OK;
}

static void def_init(ct_node_def *d, ct_op op, int n_in, const ct_node *in) {
    memset(d, 0, sizeof *d);
    d->op = op;
    d->n_in = n_in;
    for (int i = 0; i < n_in; i++) d->in[i] = in[i];
    d->dtype = CT_F32;
}

static void def_shape(ct_node_def *d, int ndim, const int64_t *shape) {
    d->ndim = ndim;
    for (int i = 0; i < ndim; i++) d->shape[i] = shape[i];
}

static ct_status check_shape_arg(ct_graph *g, const char *what, const char *name, int ndim, const int64_t *shape) {
    if (ndim < 0 || ndim > CT_MAX_DIMS || (ndim > 0 && !shape))
        return ct_set_error(g->ctx, CT_E_INVALID_ARG, "%s '%s': ndim %d is out of range 0..%d", what,
                            name ? name : "?", ndim, CT_MAX_DIMS);
    for (int i = 0; i < ndim; i++)
        if (shape[i] <= 0)
            return ct_set_error(g->ctx, CT_E_SHAPE, "%s '%s': dim %d is %lld; every dim must be positive", what,
                                name ? name : "?", i, (long long)shape[i]);
    return CT_OK;
}

static ct_status leaf(ct_graph *g, ct_op op, const char *name, ct_dtype dt, int ndim, const int64_t *shape,
                      ct_init init, int64_t fan_in, ct_node *out) {
    if (!g || !out) return CT_E_INVALID_ARG;
    const char *what = op == CT_OP_INPUT ? "input" : op == CT_OP_PARAM ? "param" : "buffer";
    CT_TRY(check_shape_arg(g, what, name, ndim, shape));
    if ((unsigned)dt >= CT_DTYPE_COUNT)
        return ct_set_error(g->ctx, CT_E_INVALID_ARG, "%s '%s': invalid dtype %d", what, name ? name : "?", (int)dt);
    ct_node_def d;
    def_init(&d, op, 0, NULL);
    d.dtype = dt;
    def_shape(&d, ndim, shape);
    d.init = init;
    d.fan_in = fan_in;
    if (name) snprintf(d.name, CT_NAME_LEN, "%s", name);
    return ct_graph_push(g, &d, out);
}

ct_status ct_input(ct_graph *g, const char *name, ct_dtype dt, int ndim, const int64_t *shape, ct_node *out) {
    return leaf(g, CT_OP_INPUT, name, dt, ndim, shape, CT_INIT_ZEROS, 0, out);
}

ct_status ct_param(ct_graph *g, const char *name, int ndim, const int64_t *shape, ct_init init, int64_t fan_in,
                   ct_node *out) {
    return leaf(g, CT_OP_PARAM, name, CT_F32, ndim, shape, init, fan_in, out);
}

ct_status ct_param_normal(ct_graph *g, const char *name, int ndim, const int64_t *shape, float std,
                          ct_node *out) {
    if (!g || !out) return CT_E_INVALID_ARG;
    if (!(std > 0.0f) || !isfinite(std))
        return ct_set_error(g->ctx, CT_E_INVALID_ARG, "param '%s': normal init std %g must be > 0", name ? name : "?",
                            (double)std);
    CT_TRY(leaf(g, CT_OP_PARAM, name, CT_F32, ndim, shape, CT_INIT_NORMAL, 0, out));
    g->nodes[*out].fa[0] = std;
    return CT_OK;
}

ct_status ct_buffer(ct_graph *g, const char *name, int ndim, const int64_t *shape, ct_init init, ct_node *out) {
    return leaf(g, CT_OP_BUFFER, name, CT_F32, ndim, shape, init, 0, out);
}

#define CHECK_NODES(op, ...)                                                          \
    do {                                                                              \
        if (!g || !out) return CT_E_INVALID_ARG;                                      \
        ct_node chk_[] = {__VA_ARGS__};                                               \
        for (size_t i_ = 0; i_ < sizeof chk_ / sizeof chk_[0]; i_++)                  \
            CT_TRY(ct_graph_check_node(g, chk_[i_], op));                             \
    } while (0)

/* ---- matmul / linear ------------------------------------------------------------ */

ct_status ct_matmul(ct_graph *g, ct_node a, ct_node b, int trans_a, int trans_b, ct_node *out) {
    CHECK_NODES("matmul", a, b);
    CT_TRY(check_same_dtype(g, "matmul", a, b));
    CT_TRY(check_f32(g, "matmul", a));
    const ct_node_def *A = N(g, a), *B = N(g, b);
    char s1[96], s2[96];
    if (A->ndim < 2 || B->ndim < 2 || (B->ndim > 2 && B->ndim != A->ndim))
        return ct_set_error(g->ctx, CT_E_SHAPE,
                            "matmul: '%s' %s and '%s' %s: need a (..., M, K) and b (K, N) or the same batch dims",
                            A->name, shp(A, s1), B->name, shp(B, s2));
    int64_t M = A->shape[A->ndim - 2 + (trans_a ? 1 : 0)], Ka = A->shape[A->ndim - 1 - (trans_a ? 1 : 0)];
    int64_t Kb = B->shape[B->ndim - 2 + (trans_b ? 1 : 0)], Nn = B->shape[B->ndim - 1 - (trans_b ? 1 : 0)];
    if (Ka != Kb)
        return ct_set_error(g->ctx, CT_E_SHAPE,
                            "matmul: inner dimensions differ: '%s' %s%s has K=%lld but '%s' %s%s has K=%lld; check "
                            "the layer sizes",
                            A->name, shp(A, s1), trans_a ? "^T" : "", (long long)Ka, B->name, shp(B, s2),
                            trans_b ? "^T" : "", (long long)Kb);
    if (B->ndim > 2)
        for (int i = 0; i < A->ndim - 2; i++)
            if (A->shape[i] != B->shape[i])
                return ct_set_error(g->ctx, CT_E_SHAPE, "matmul: batch dims differ: %s vs %s", shp(A, s1),
                                    shp(B, s2));
    ct_node_def d;
    def_init(&d, CT_OP_MATMUL, 2, (ct_node[]){a, b});
    def_shape(&d, A->ndim, A->shape);
    d.shape[d.ndim - 2] = M;
    d.shape[d.ndim - 1] = Nn;
    d.ia[0] = trans_a;
    d.ia[1] = trans_b;
    return ct_graph_push(g, &d, out);
}

ct_status ct_linear(ct_graph *g, ct_node x, ct_node w, ct_node b, ct_node *out) {
    CHECK_NODES("linear", x, w);
    CT_TRY(check_same_dtype(g, "linear", x, w));
    CT_TRY(check_f32(g, "linear", x));
    const ct_node_def *X = N(g, x), *W = N(g, w);
    char s1[96], s2[96];
    if (W->ndim != 2 || X->ndim < 1 || X->shape[X->ndim - 1] != W->shape[1])
        return ct_set_error(g->ctx, CT_E_SHAPE,
                            "linear: input '%s' %s does not fit weight '%s' %s (out_features, in_features): the "
                            "input's last dim must equal in_features",
                            X->name, shp(X, s1), W->name, shp(W, s2));
    ct_node_def d;
    def_init(&d, CT_OP_LINEAR, 2, (ct_node[]){x, w});
    if (b != CT_NONE) {
        CT_TRY(ct_graph_check_node(g, b, "linear"));
        CT_TRY(check_same_dtype(g, "linear", x, b));
        const ct_node_def *Bd = N(g, b);
        if (Bd->ndim != 1 || Bd->shape[0] != W->shape[0])
            return ct_set_error(g->ctx, CT_E_SHAPE, "linear: bias '%s' %s must be (%lld)", Bd->name, shp(Bd, s1),
                                (long long)W->shape[0]);
        d.in[d.n_in++] = b;
    }
    def_shape(&d, X->ndim, X->shape);
    d.shape[d.ndim - 1] = W->shape[0];
    return ct_graph_push(g, &d, out);
}

/* ---- conv / pool ------------------------------------------------------------------ */

static int64_t conv_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t dil) {
    return (in + 2 * p - dil * (k - 1) - 1) / s + 1;
}

void ct_conv2d_opts_default(ct_conv2d_opts *o) {
    memset(o, 0, sizeof *o);
    o->stride = o->dilation = o->groups = 1;
}

ct_status ct_conv2d(ct_graph *g, ct_node x, ct_node w, ct_node b, int stride, int pad, int dilation, int groups,
                    ct_node *out) {
    ct_conv2d_opts o = {.stride = stride, .pad = pad, .dilation = dilation, .groups = groups};
    return ct_conv2d_ex(g, x, w, b, &o, out);
}

ct_status ct_conv2d_ex(ct_graph *g, ct_node x, ct_node w, ct_node b, const ct_conv2d_opts *o, ct_node *out) {
    CHECK_NODES("conv2d", x, w);
    if (!o) return ct_set_error(g->ctx, CT_E_INVALID_ARG, "conv2d: options must not be NULL");
    CT_TRY(check_same_dtype(g, "conv2d", x, w));
    CT_TRY(check_f32(g, "conv2d", x));
    const ct_node_def *X = N(g, x), *W = N(g, w);
    const int stride = o->stride, pad = o->pad, dilation = o->dilation, groups = o->groups;
    char s1[96], s2[96];
    if (stride < 1 || pad < 0 || dilation < 1 || groups < 1 || (o->channels_last != 0 && o->channels_last != 1))
        return ct_set_error(g->ctx, CT_E_INVALID_ARG,
                            "conv2d: stride %d, padding %d, dilation %d, groups %d, channels_last %d: need stride>=1, "
                            "padding>=0, dilation>=1, groups>=1, channels_last 0 or 1",
                            stride, pad, dilation, groups, o->channels_last);
    const int cl = o->channels_last;
    /* the input's channel and spatial dims: (N, C, H, W) or (N, H, W, C) */
    const int dc = cl ? 3 : 1, dh = cl ? 1 : 2, dw = cl ? 2 : 3;
    if (X->ndim != 4 || W->ndim != 4 || X->shape[dc] % groups || W->shape[0] % groups ||
        W->shape[1] * groups != X->shape[dc])
        return ct_set_error(g->ctx, CT_E_SHAPE,
                            "conv2d: input '%s' %s %s does not fit weight '%s' %s (OC, C/groups, KH, KW) with "
                            "groups=%d",
                            X->name, shp(X, s1), cl ? "(N, H, W, C)" : "(N, C, H, W)", W->name, shp(W, s2), groups);
    int64_t oh = conv_out(X->shape[dh], W->shape[2], stride, pad, dilation);
    int64_t ow = conv_out(X->shape[dw], W->shape[3], stride, pad, dilation);
    if (oh < 1 || ow < 1)
        return ct_set_error(g->ctx, CT_E_SHAPE, "conv2d: kernel %s is larger than the padded input %s", shp(W, s2),
                            shp(X, s1));
    ct_node_def d;
    def_init(&d, CT_OP_CONV2D, 2, (ct_node[]){x, w});
    if (b != CT_NONE) {
        CT_TRY(ct_graph_check_node(g, b, "conv2d"));
        const ct_node_def *Bd = N(g, b);
        if (Bd->ndim != 1 || Bd->shape[0] != W->shape[0])
            return ct_set_error(g->ctx, CT_E_SHAPE, "conv2d: bias '%s' %s must be (%lld)", Bd->name, shp(Bd, s1),
                                (long long)W->shape[0]);
        d.in[d.n_in++] = b;
    }
    if (cl) def_shape(&d, 4, (int64_t[]){X->shape[0], oh, ow, W->shape[0]});
    else def_shape(&d, 4, (int64_t[]){X->shape[0], W->shape[0], oh, ow});
    d.ia[0] = stride; d.ia[1] = pad; d.ia[2] = dilation; d.ia[3] = groups; d.ia[4] = cl;
    return ct_graph_push(g, &d, out);
}

void ct_pool2d_opts_default(ct_pool2d_opts *o, int kernel) {
    memset(o, 0, sizeof *o);
    o->kernel_h = o->kernel_w = kernel;
    o->dilation_h = o->dilation_w = 1;
    o->count_include_pad = 1;
}

/* PyTorch's pooling_output_shape: floor or ceil of the window count; in
 * ceil mode the last window must start inside the input or the left padding. */
static int64_t pool_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t dil, int ceil_mode) {
    int64_t num = in + 2 * p - dil * (k - 1) - 1 + (ceil_mode ? s - 1 : 0);
    int64_t out = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1;
    if (ceil_mode && (out - 1) * s >= in + p) out--;
    return out;
}

static ct_status pool(ct_graph *g, ct_op op, const char *name, ct_node x, const ct_pool2d_opts *o, ct_node *out) {
    CHECK_NODES(name, x);
    CT_TRY(check_f32(g, name, x));
    if (!o) return ct_set_error(g->ctx, CT_E_INVALID_ARG, "%s: options must not be NULL", name);
    const ct_node_def *X = N(g, x);
    char s1[96];
    const int cl = o->channels_last != 0, hx = cl ? 1 : 2; /* the H axis */
    if (X->ndim != 4)
        return ct_set_error(g->ctx, CT_E_SHAPE, "%s: input '%s' %s must be %s", name, X->name, shp(X, s1),
                            cl ? "(N, H, W, C) (channels_last)" : "(N, C, H, W)");
    const int kh = o->kernel_h, kw = o->kernel_w;
    const int sh = o->stride_h ? o->stride_h : kh, sw = o->stride_w ? o->stride_w : kw; /* 0: the kernel */
    const int ph = o->pad_h, pw = o->pad_w, dh = o->dilation_h, dw = o->dilation_w;
    if (kh < 1 || kw < 1 || sh < 1 || sw < 1 || dh < 1 || dw < 1 || ph < 0 || pw < 0)
        return ct_set_error(g->ctx, CT_E_INVALID_ARG,
                            "%s: kernel %dx%d stride %dx%d padding %dx%d dilation %dx%d: need kernel, stride, "
                            "dilation >= 1 and padding >= 0",
                            name, kh, kw, sh, sw, ph, pw, dh, dw);
    /* PyTorch: padding at most half the effective kernel (dilation*(k-1)+1) */
    const int eh = dh * (kh - 1) + 1, ew = dw * (kw - 1) + 1;
    if (ph > eh / 2 || pw > ew / 2)
        return ct_set_error(g->ctx, CT_E_INVALID_ARG,
                            "%s: padding %dx%d must be at most half the effective kernel %dx%d (dilation*(kernel-1)+1)",
                            name, ph, pw, eh, ew);
    int64_t oh = pool_out(X->shape[hx], kh, sh, ph, dh, o->ceil_mode != 0);
    int64_t ow = pool_out(X->shape[hx + 1], kw, sw, pw, dw, o->ceil_mode != 0);
    if (oh < 1 || ow < 1)
        return ct_set_error(g->ctx, CT_E_SHAPE, "%s: effective kernel %dx%d is larger than the padded input %s", name,
                            eh, ew, shp(X, s1));
    ct_node_def d;
    def_init(&d, op, 1, &x);
    if (cl) def_shape(&d, 4, (int64_t[]){X->shape[0], oh, ow, X->shape[3]});
    else def_shape(&d, 4, (int64_t[]){X->shape[0], X->shape[1], oh, ow});
    d.ia[0] = kh; d.ia[1] = kw; d.ia[2] = sh; d.ia[3] = sw;
    d.ia[4] = ph; d.ia[5] = pw; d.ia[6] = dh; d.ia[7] = dw;
    d.fa[0] = o->count_include_pad ? 1.0f : 0.0f;
    d.fa[1] = cl ? 1.0f : 0.0f; /* channels-last (ir_types.h) */
    return ct_graph_push(g, &d, out);
}

ct_status ct_maxpool2d_ex(ct_graph *g, ct_node x, const ct_pool2d_opts *o, ct_node *out) {
    return pool(g, CT_OP_MAXPOOL2D, "maxpool2d", x, o, out);
}
ct_status ct_avgpool2d_ex(ct_graph *g, ct_node x, const ct_pool2d_opts *o, ct_node *out) {
    return pool(g, CT_OP_AVGPOOL2D, "avgpool2d", x, o, out);
}

/* Square windows: kernel, stride, padding on both axes (stride 0 is an
 * error here, as before; use the _ex form for stride = kernel). */
static ct_status pool_square(ct_graph *g, ct_op op, const char *name, ct_node x, int k, int s, int p, ct_node *out) {
    if (s < 1)
        return ct_set_error(g->ctx, CT_E_INVALID_ARG,
                            "%s: kernel %d stride %d padding %d: need kernel>=1, stride>=1, 0<=padding<=kernel/2", name,
                            k, s, p);
    ct_pool2d_opts o;
    ct_pool2d_opts_default(&o, k);
    o.stride_h = o.stride_w = s;
    o.pad_h = o.pad_w = p;
    return pool(g, op, name, x, &o, out);
}

ct_status ct_maxpool2d(ct_graph *g, ct_node x, int kernel, int stride, int pad, ct_node *out) {
    return pool_square(g, CT_OP_MAXPOOL2D, "maxpool2d", x, kernel, stride, pad, out);
}
ct_status ct_avgpool2d(ct_graph *g, ct_node x, int kernel, int stride, int pad, ct_node *out) {
    return pool_square(g, CT_OP_AVGPOOL2D, "avgpool2d", x, kernel, stride, pad, out);
}

ct_status ct_global_avgpool(ct_graph *g, ct_node x, ct_node *out) {
    CHECK_NODES("global_avgpool", x);
    const ct_node_def *X = N(g, x);
    char s1[96];
    if (X->ndim != 4)
        return ct_set_error(g->ctx, CT_E_SHAPE, "global_avgpool: input '%s' %s must be (N, C, H, W)", X->name,
                            shp(X, s1));
    return ct_mean(g, x, (1u << 2) | (1u << 3), 0, out);
}

/* ---- normalization ------------------------------------------------------------------ */

static ct_status check_vec(ct_graph *g, const char *op, ct_node v, int64_t n, const char *role) {
    CT_TRY(ct_graph_check_node(g, v, op));
    CT_TRY(check_f32(g, op, v));
    const ct_node_def *V = N(g, v);
    char s1[96];
    if (V->ndim != 1 || V->shape[0] != n)
        return ct_set_error(g->ctx, CT_E_SHAPE, "%s: %s '%s' %s must have shape (%lld)", op, role, V->name,
                            shp(V, s1), (long long)n);
    return CT_OK;
}

ct_status ct_batchnorm(ct_graph *g, ct_node x, ct_node gamma, ct_node beta, ct_node rmean, ct_node rvar,
                       float momentum, float eps, ct_node *out) {
    CHECK_NODES("batchnorm", x);
    CT_TRY(check_f32(g, "batchnorm", x));
    const ct_node_def *X = N(g, x);
    char s1[96];
    if (X->ndim < 2)
        return ct_set_error(g->ctx, CT_E_SHAPE, "batchnorm: input '%s' %s must be (N, C, ...)", X->name, shp(X, s1));
    int64_t C = X->shape[1];
    CT_TRY(check_vec(g, "batchnorm", gamma, C, "weight"));
    CT_TRY(check_vec(g, "batchnorm", beta, C, "bias"));
    CT_TRY(check_vec(g, "batchnorm", rmean, C, "running_mean"));
    CT_TRY(check_vec(g, "batchnorm", rvar, C, "running_var"));
    if (N(g, rmean)->op != CT_OP_BUFFER || N(g, rvar)->op != CT_OP_BUFFER)
        return ct_set_error(g->ctx, CT_E_INVALID_ARG, "batchnorm: running statistics must be ct_buffer nodes");
    if (!(momentum >= 0.f && momentum <= 1.f) || !(eps > 0.f))
        return ct_set_error(g->ctx, CT_E_INVALID_ARG, "batchnorm: momentum %g must be in [0,1] and eps %g > 0",
                            (double)momentum, (double)eps);
    ct_node_def d;
    def_init(&d, CT_OP_BATCHNORM, 5, (ct_node[]){x, gamma, beta, rmean, rvar});
    def_shape(&d, X->ndim, X->shape);
    d.fa[0] = momentum;
    d.fa[1] = eps;
    return ct_graph_push(g, &d, out);
}

ct_status ct_layernorm(ct_graph *g, ct_node x, ct_node gamma, ct_node beta, float eps, ct_node *out) {
    CHECK_NODES("layernorm", x);
    CT_TRY(check_f32(g, "layernorm", x));
    const ct_node_def *X = N(g, x);
    int64_t D = X->shape[X->ndim - 1];
    CT_TRY(check_vec(g, "layernorm", gamma, D, "weight"));
    if (beta != CT_NONE) CT_TRY(check_vec(g, "layernorm", beta, D, "bias"));
    if (!(eps > 0.f)) return ct_set_error(g->ctx, CT_E_INVALID_ARG, "layernorm: eps %g must be > 0", (double)eps);
    ct_node_def d;
    def_init(&d, CT_OP_LAYERNORM, beta != CT_NONE ? 3 : 2, (ct_node[]){x, gamma, beta});
    def_shape(&d, X->ndim, X->shape);
    d.fa[0] = eps;
    return ct_graph_push(g, &d, out);
}

/* ---- elementwise ---------------------------------------------------------------------- */

static ct_status unary(ct_graph *g, ct_unary_kind k, const char *name, ct_node x, ct_node *out) {
    CHECK_NODES(name, x);
    CT_TRY(check_f32(g, name, x));
    ct_node_def d;
    def_init(&d, CT_OP_UNARY, 1, &x);
    def_shape(&d, N(g, x)->ndim, N(g, x)->shape);
    d.ia[0] = k;
    return ct_graph_push(g, &d, out);
}

ct_status ct_relu(ct_graph *g, ct_node x, ct_node *out) { return unary(g, CT_UNARY_RELU, "relu", x, out); }
ct_status ct_gelu(ct_graph *g, ct_node x, int tanh_approx, ct_node *out) {
    return unary(g, tanh_approx ? CT_UNARY_GELU_TANH : CT_UNARY_GELU, "gelu", x, out);
}
ct_status ct_silu(ct_graph *g, ct_node x, ct_node *out) { return unary(g, CT_UNARY_SILU, "silu", x, out); }
ct_status ct_sigmoid(ct_graph *g, ct_node x, ct_node *out) { return unary(g, CT_UNARY_SIGMOID, "sigmoid", x, out); }
ct_status ct_tanh(ct_graph *g, ct_node x, ct_node *out) { return unary(g, CT_UNARY_TANH, "tanh", x, out); }

ct_status ct_scale(ct_graph *g, ct_node x, float s, ct_node *out) {
    CHECK_NODES("scale", x);
    CT_TRY(check_f32(g, "scale", x));
    ct_node_def d;
    def_init(&d, CT_OP_SCALE, 1, &x);
    def_shape(&d, N(g, x)->ndim, N(g, x)->shape);
    d.fa[0] = s;
    return ct_graph_push(g, &d, out);
}

/* Broadcast shape of a and b (NumPy rules) into d. */
static ct_status broadcast_shape(ct_graph *g, const char *op, ct_node a, ct_node b, ct_node_def *d) {
    const ct_node_def *A = N(g, a), *B = N(g, b);
    int nd = CT_MAX(A->ndim, B->ndim);
    char s1[96], s2[96];
    d->ndim = nd;
    for (int i = 0; i < nd; i++) {
        int ia = i - (nd - A->ndim), ib = i - (nd - B->ndim);
        int64_t da = ia >= 0 ? A->shape[ia] : 1, db = ib >= 0 ? B->shape[ib] : 1;
        if (da != db && da != 1 && db != 1)
            return ct_set_error(g->ctx, CT_E_SHAPE, "%s: shapes %s ('%s') and %s ('%s') do not broadcast", op,
                                shp(A, s1), A->name, shp(B, s2), B->name);
        d->shape[i] = da == 1 ? db : da;
    }
    return CT_OK;
}

static ct_status binary(ct_graph *g, ct_binary_kind k, const char *name, ct_node a, ct_node b, ct_node *out) {
    CHECK_NODES(name, a, b);
    CT_TRY(check_same_dtype(g, name, a, b));
    CT_TRY(check_f32(g, name, a));
    ct_node_def d;
    def_init(&d, CT_OP_BINARY, 2, (ct_node[]){a, b});
    CT_TRY(broadcast_shape(g, name, a, b, &d));
    d.ia[0] = k;
    return ct_graph_push(g, &d, out);
}

ct_status ct_add(ct_graph *g, ct_node a, ct_node b, ct_node *out) { return binary(g, CT_BIN_ADD, "add", a, b, out); }
ct_status ct_sub(ct_graph *g, ct_node a, ct_node b, ct_node *out) { return binary(g, CT_BIN_SUB, "sub", a, b, out); }
ct_status ct_mul(ct_graph *g, ct_node a, ct_node b, ct_node *out) { return binary(g, CT_BIN_MUL, "mul", a, b, out); }
ct_status ct_div(ct_graph *g, ct_node a, ct_node b, ct_node *out) { return binary(g, CT_BIN_DIV, "div", a, b, out); }

/* ---- reductions ------------------------------------------------------------------------- */

static ct_status reduce(ct_graph *g, const char *name, ct_node x, uint32_t mask, int keepdim, int mean,
                        ct_node *out) {
    CHECK_NODES(name, x);
    CT_TRY(check_f32(g, name, x));
    const ct_node_def *X = N(g, x);
    if (mask == 0 || (X->ndim < 32 && (mask >> X->ndim) != 0))
        return ct_set_error(g->ctx, CT_E_INVALID_ARG, "%s: axes mask 0x%x is empty or names dims beyond ndim %d",
                            name, mask, X->ndim);
    ct_node_def d;
    def_init(&d, CT_OP_SUM, 1, &x);
    int64_t cnt = 1;
    for (int i = 0; i < X->ndim; i++) {
        if (mask & (1u << i)) {
            cnt *= X->shape[i];
            if (keepdim) d.shape[d.ndim++] = 1;
        } else {
            d.shape[d.ndim++] = X->shape[i];
        }
    }
    d.ia[0] = mask;
    d.ia[1] = keepdim;
    d.fa[0] = mean ? 1.0f / (float)cnt : 1.0f;
    return ct_graph_push(g, &d, out);
}

ct_status ct_sum(ct_graph *g, ct_node x, uint32_t m, int keepdim, ct_node *out) { return reduce(g, "sum", x, m, keepdim, 0, out); }
ct_status ct_mean(ct_graph *g, ct_node x, uint32_t m, int keepdim, ct_node *out) { return reduce(g, "mean", x, m, keepdim, 1, out); }

/* ---- shape ops ------------------------------------------------------------------------- */

ct_status ct_reshape(ct_graph *g, ct_node x, int ndim, const int64_t *shape, ct_node *out) {
    CHECK_NODES("reshape", x);
    const ct_node_def *X = N(g, x);
    char s1[96], s2[96];
    if (ndim < 0 || ndim > CT_MAX_DIMS || (ndim && !shape))
        return ct_set_error(g->ctx, CT_E_INVALID_ARG, "reshape: ndim %d out of range", ndim);
    ct_node_def d;
    def_init(&d, CT_OP_RESHAPE, 1, &x);
    d.dtype = X->dtype;
    int64_t known = 1;
    int neg = -1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == -1 && neg < 0) neg = i;
        else if (shape[i] <= 0)
            return ct_set_error(g->ctx, CT_E_SHAPE, "reshape: dim %d is %lld (only one -1 is allowed)", i,
                                (long long)shape[i]);
        else known *= shape[i];
    }
    def_shape(&d, ndim, shape);
    int64_t total = ct_node_numel(X);
    if (neg >= 0) {
        if (total % known)
            return ct_set_error(g->ctx, CT_E_SHAPE, "reshape: cannot infer -1 reshaping %s", shp(X, s1));
        d.shape[neg] = total / known;
    }
    if (ct_node_numel(&d) != total)
        return ct_set_error(g->ctx, CT_E_SHAPE, "reshape: '%s' %s has %lld elements, target %s has %lld", X->name,
                            shp(X, s1), (long long)total, shp(&d, s2), (long long)ct_node_numel(&d));
    return ct_graph_push(g, &d, out);
}

ct_status ct_flatten(ct_graph *g, ct_node x, ct_node *out) {
    CHECK_NODES("flatten", x);
    const ct_node_def *X = N(g, x);
    return ct_reshape(g, x, 2, (int64_t[]){X->shape[0], -1}, out);
}

ct_status ct_transpose(ct_graph *g, ct_node x, const int *perm, ct_node *out) {
    CHECK_NODES("transpose", x);
    const ct_node_def *X = N(g, x);
    ct_node_def d;
    def_init(&d, CT_OP_TRANSPOSE, 1, &x);
    d.dtype = X->dtype;
    d.ndim = X->ndim;
    int seen = 0;
    for (int i = 0; i < X->ndim; i++) {
        if (!perm || perm[i] < 0 || perm[i] >= X->ndim || (seen & (1 << perm[i])))
            return ct_set_error(g->ctx, CT_E_INVALID_ARG, "transpose: perm is not a permutation of 0..%d",
                                X->ndim - 1);
        seen |= 1 << perm[i];
        d.shape[i] = X->shape[perm[i]];
        d.ia[i] = perm[i];
    }
    return ct_graph_push(g, &d, out);
}

ct_status ct_concat(ct_graph *g, int n, const ct_node *xs, int axis, ct_node *out) {
    if (!g || !out || !xs) return CT_E_INVALID_ARG;
    if (n < 1 || n > CT_MAX_INPUTS)
        return ct_set_error(g->ctx, CT_E_INVALID_ARG, "concat: %d inputs; 1..%d are supported", n, CT_MAX_INPUTS);
    for (int i = 0; i < n; i++) CT_TRY(ct_graph_check_node(g, xs[i], "concat"));
    const ct_node_def *X0 = N(g, xs[0]);
    if (axis < 0) axis += X0->ndim;
    if (axis < 0 || axis >= X0->ndim)
        return ct_set_error(g->ctx, CT_E_INVALID_ARG, "concat: axis %d out of range for ndim %d", axis, X0->ndim);
    ct_node_def d;
    def_init(&d, CT_OP_CONCAT, n, xs);
    d.dtype = X0->dtype;
    def_shape(&d, X0->ndim, X0->shape);
    d.shape[axis] = 0;
    char s1[96], s2[96];
    for (int i = 0; i < n; i++) {
        const ct_node_def *Xi = N(g, xs[i]);
        CT_TRY(check_same_dtype(g, "concat", xs[0], xs[i]));
        int ok = Xi->ndim == X0->ndim;
        for (int j = 0; ok && j < X0->ndim; j++) ok = j == axis || Xi->shape[j] == X0->shape[j];
        if (!ok)
            return ct_set_error(g->ctx, CT_E_SHAPE, "concat: '%s' %s and '%s' %s differ outside axis %d", X0->name,
                                shp(X0, s1), Xi->name, shp(Xi, s2), axis);
        d.shape[axis] += Xi->shape[axis];
    }
    d.ia[0] = axis;
    return ct_graph_push(g, &d, out);
}

ct_status ct_slice(ct_graph *g, ct_node x, int axis, int64_t start, int64_t end, ct_node *out) {
    CHECK_NODES("slice", x);
    const ct_node_def *X = N(g, x);
    if (axis < 0) axis += X->ndim;
    if (axis < 0 || axis >= X->ndim || start < 0 || end > X->shape[axis] || start >= end)
        return ct_set_error(g->ctx, CT_E_INVALID_ARG,
                            "slice: axis %d range [%lld, %lld) is not inside dim of size %lld", axis,
                            (long long)start, (long long)end, axis >= 0 && axis < X->ndim ? (long long)X->shape[axis] : -1LL);
    ct_node_def d;
    def_init(&d, CT_OP_SLICE, 1, &x);
    d.dtype = X->dtype;
    def_shape(&d, X->ndim, X->shape);
    d.shape[axis] = end - start;
    d.ia[0] = axis; d.ia[1] = start; d.ia[2] = end;
    return ct_graph_push(g, &d, out);
}

ct_status ct_pad(ct_graph *g, ct_node x, int axis, int64_t before, int64_t after, ct_node *out) {
    CHECK_NODES("pad", x);
    const ct_node_def *X = N(g, x);
    if (axis < 0) axis += X->ndim;
    if (axis < 0 || axis >= X->ndim || before < 0 || after < 0 || before > ((int64_t)1 << 40) || after > ((int64_t)1 << 40))
        return ct_set_error(g->ctx, CT_E_INVALID_ARG, "pad: axis %d of a %d-d tensor with %lld before and %lld after: "
                            "the axis must exist and the padding be >= 0", axis, X->ndim, (long long)before,
                            (long long)after);
    if (!before && !after) {
        *out = x;
        return CT_OK;
    }
    /* slice's backward: x's values at [before, before + len), zeros elsewhere */
    ct_node_def d;
    def_init(&d, CT_OP_SLICE_BWD, 1, &x);
    d.dtype = X->dtype;
    def_shape(&d, X->ndim, X->shape);
    d.shape[axis] = before + X->shape[axis] + after;
    d.ia[0] = axis; d.ia[1] = before; d.ia[2] = before + X->shape[axis];
    return ct_graph_push(g, &d, out);
}

/* ---- softmax / losses / misc --------------------------------------------------------------- */

static ct_status softmax_like(ct_graph *g, ct_op op, const char *name, ct_node x, ct_node *out) {
    CHECK_NODES(name, x);
    CT_TRY(check_f32(g, name, x));
    ct_node_def d;
    def_init(&d, op, 1, &x);
    def_shape(&d, N(g, x)->ndim, N(g, x)->shape);
    return ct_graph_push(g, &d, out);
}
ct_status ct_softmax(ct_graph *g, ct_node x, ct_node *out) { return softmax_like(g, CT_OP_SOFTMAX, "softmax", x, out); }
ct_status ct_log_softmax(ct_graph *g, ct_node x, ct_node *out) {
    return softmax_like(g, CT_OP_LOG_SOFTMAX, "log_softmax", x, out);
}

ct_status ct_cross_entropy(ct_graph *g, ct_node logits, ct_node labels, float smoothing, int ignore_index,
                           ct_node *out) {
    CHECK_NODES("cross_entropy", logits, labels);
    CT_TRY(check_f32(g, "cross_entropy", logits));
    const ct_node_def *L = N(g, logits), *Y = N(g, labels);
    char s1[96], s2[96];
    if (Y->dtype != CT_I32)
        return ct_set_error(g->ctx, CT_E_DTYPE, "cross_entropy: labels '%s' must be i32 class indices, got %s",
                            Y->name, ct_dtype_name(Y->dtype));
    int lead_ok = L->ndim >= 2 && Y->ndim == L->ndim - 1;
    for (int i = 0; lead_ok && i < Y->ndim; i++) lead_ok = Y->shape[i] == L->shape[i];
    if (!lead_ok)
        return ct_set_error(g->ctx, CT_E_SHAPE,
                            "cross_entropy: logits '%s' %s must be (..., C) (classes last, e.g. (N, C) or (B, T, V)) "
                            "and labels '%s' %s their leading dims (...)",
                            L->name, shp(L, s1), Y->name, shp(Y, s2));
    if (!(smoothing >= 0.f && smoothing < 1.f))
        return ct_set_error(g->ctx, CT_E_INVALID_ARG, "cross_entropy: label_smoothing %g must be in [0, 1)",
                            (double)smoothing);
    ct_node_def d;
    def_init(&d, CT_OP_CROSS_ENTROPY, 2, (ct_node[]){logits, labels});
    d.ndim = 0;
    d.fa[0] = smoothing;
    d.ia[0] = ignore_index;
    return ct_graph_push(g, &d, out);
}

ct_status ct_dropout(ct_graph *g, ct_node x, float p, ct_node *out) {
    CHECK_NODES("dropout", x);
    CT_TRY(check_f32(g, "dropout", x));
    if (!(p >= 0.f && p < 1.f))
        return ct_set_error(g->ctx, CT_E_INVALID_ARG, "dropout: p %g must be in [0, 1)", (double)p);
    ct_node_def d;
    def_init(&d, CT_OP_DROPOUT, 1, &x);
    def_shape(&d, N(g, x)->ndim, N(g, x)->shape);
    d.fa[0] = p;
    d.ia[0] = g->n_rng++; /* RNG stream: the graph's n-th random op (the same when tensor parallelism adds nodes) */
    return ct_graph_push(g, &d, out);
}

ct_status ct_drop_path(ct_graph *g, ct_node x, float p, ct_node *out) {
    CHECK_NODES("drop_path", x);
    CT_TRY(check_f32(g, "drop_path", x));
    if (!(p >= 0.f && p < 1.f))
        return ct_set_error(g->ctx, CT_E_INVALID_ARG, "drop_path: p %g must be in [0, 1)", (double)p);
    const ct_node_def *X = N(g, x);
    if (X->ndim < 1 || X->shape[0] < 1)
        return ct_set_error(g->ctx, CT_E_SHAPE, "drop_path: input '%s' needs a batch dimension (N, ...)", X->name);
    ct_node_def d;
    def_init(&d, CT_OP_DROPOUT, 1, &x);
    def_shape(&d, X->ndim, X->shape);
    d.fa[0] = p;
    d.ia[0] = g->n_rng++; /* RNG stream: the graph's n-th random op (the same when tensor parallelism adds nodes) */
    int64_t row = 1;
    for (int i = 1; i < X->ndim; i++) row *= X->shape[i];
    d.ia[1] = row; /* one keep decision per sample */
    return ct_graph_push(g, &d, out);
}

ct_status ct_window_bias(ct_graph *g, ct_node table, int window, int shift, int64_t windows_h, int64_t windows_w,
                         ct_node *out) {
    CHECK_NODES("window_bias", table);
    CT_TRY(check_f32(g, "window_bias", table));
    const ct_node_def *T = N(g, table);
    char s1[96];
    if (window < 1 || shift < 0 || shift >= window || windows_h < 1 || windows_w < 1 ||
        (shift > 0 && (windows_h < 2 || windows_w < 2)))
        return ct_set_error(g->ctx, CT_E_INVALID_ARG,
                            "window_bias: window %d, shift %d, %lld x %lld windows: need window >= 1, 0 <= shift < "
                            "window and at least one window (two per axis when shifted)",
                            window, shift, (long long)windows_h, (long long)windows_w);
    int64_t L = (int64_t)(2 * window - 1) * (2 * window - 1);
    if (T->ndim != 2 || T->shape[0] != L)
        return ct_set_error(g->ctx, CT_E_SHAPE, "window_bias: table '%s' %s must be ((2*%d-1)^2 = %lld, heads)",
                            T->name, shp(T, s1), window, (long long)L);
    ct_node_def d;
    def_init(&d, CT_OP_WINDOW_BIAS, 1, &table);
    int64_t n = (int64_t)window * window;
    def_shape(&d, 4, (int64_t[]){windows_h * windows_w, T->shape[1], n, n});
    d.ia[0] = window, d.ia[1] = shift, d.ia[2] = windows_h, d.ia[3] = windows_w;
    return ct_graph_push(g, &d, out);
}

ct_status ct_embedding(ct_graph *g, ct_node weight, ct_node ids, ct_node *out) {
    CHECK_NODES("embedding", weight, ids);
    CT_TRY(check_f32(g, "embedding", weight));
    const ct_node_def *W = N(g, weight), *I = N(g, ids);
    char s1[96];
    if (I->dtype != CT_I32)
        return ct_set_error(g->ctx, CT_E_DTYPE, "embedding: ids '%s' must be i32, got %s", I->name,
                            ct_dtype_name(I->dtype));
    if (W->ndim != 2 || I->ndim + 1 > CT_MAX_DIMS)
        return ct_set_error(g->ctx, CT_E_SHAPE, "embedding: weight '%s' %s must be (V, D)", W->name, shp(W, s1));
    ct_node_def d;
    def_init(&d, CT_OP_EMBEDDING, 2, (ct_node[]){weight, ids});
    def_shape(&d, I->ndim, I->shape);
    d.shape[d.ndim++] = W->shape[1];
    return ct_graph_push(g, &d, out);
}

ct_status ct_attention(ct_graph *g, ct_node qkv, int n_head, int causal, ct_node key_valid, ct_node *out) {
    CHECK_NODES("attention", qkv);
    CT_TRY(check_f32(g, "attention", qkv));
    const ct_node_def *X = N(g, qkv);
    char s1[96], s2[96];
    if (X->ndim != 3 || X->shape[2] % 3)
        return ct_set_error(g->ctx, CT_E_SHAPE,
                            "attention: qkv '%s' %s must be (B, T, 3*D): q, k and v packed along the last dim, so "
                            "its size must be divisible by 3",
                            X->name, shp(X, s1));
    int64_t B = X->shape[0], T = X->shape[1], D = X->shape[2] / 3;
    if (n_head < 1)
        return ct_set_error(g->ctx, CT_E_INVALID_ARG, "attention: n_head %d must be >= 1", n_head);
    if (D % n_head)
        return ct_set_error(g->ctx, CT_E_SHAPE,
                            "attention: d_model %lld (qkv '%s' %s) is not divisible by n_head %d", (long long)D,
                            X->name, shp(X, s1), n_head);
    ct_node_def d;
    def_init(&d, CT_OP_ATTENTION, 1, &qkv);
    if (key_valid != CT_NONE) {
        CT_TRY(ct_graph_check_node(g, key_valid, "attention"));
        const ct_node_def *K = N(g, key_valid);
        if (K->dtype != CT_I32 || K->ndim != 2 || K->shape[0] != B || K->shape[1] != T)
            return ct_set_error(g->ctx, K->dtype != CT_I32 ? CT_E_DTYPE : CT_E_SHAPE,
                                "attention: key_valid '%s' is %s %s but must be i32 (B, T) = (%lld, %lld) "
                                "(nonzero: attend to that key, 0: padding)",
                                K->name, ct_dtype_name(K->dtype), shp(K, s2), (long long)B, (long long)T);
        d.in[d.n_in++] = key_valid;
    }
    def_shape(&d, 3, (int64_t[]){B, T, D});
    d.ia[0] = n_head;
    d.ia[1] = causal ? 1 : 0;
    d.fa[0] = (float)(1.0 / sqrt((double)(D / n_head)));
    return ct_graph_push(g, &d, out);
}

/* ---- introspection ------------------------------------------------------------------------- */

int ct_graph_num_nodes(const ct_graph *g) { return g->n; }

ct_status ct_node_shape(const ct_graph *g, ct_node n, int *ndim, int64_t shape[CT_MAX_DIMS]) {
    if (n < 0 || n >= g->n) return CT_E_INVALID_ARG;
    *ndim = g->nodes[n].ndim;
    for (int i = 0; i < *ndim; i++) shape[i] = g->nodes[n].shape[i];
    return CT_OK;
}
ct_dtype ct_node_dtype(const ct_graph *g, ct_node n) { return n >= 0 && n < g->n ? g->nodes[n].dtype : CT_DTYPE_COUNT; }
const char *ct_node_name(const ct_graph *g, ct_node n) { return n >= 0 && n < g->n ? g->nodes[n].name : ""; }
const char *ct_node_op_name(const ct_graph *g, ct_node n) {
    return n >= 0 && n < g->n ? ct_op_table(g->nodes[n].op)->name : "";
}
ct_status ct_graph_mark_block(ct_graph *g, ct_node x) {
    if (!g) return CT_E_INVALID_ARG;
    CT_TRY(ct_graph_check_node(g, x, "mark_block"));
    g->block_pending = 1; /* ct_graph_push flags the block's first node */
    return CT_OK;
}
ct_status ct_node_set_name(ct_graph *g, ct_node n, const char *name) {
    CT_TRY(ct_graph_check_node(g, n, "set_name"));
    if (!name) return CT_E_INVALID_ARG;
    snprintf(g->nodes[n].name, CT_NAME_LEN, "%s", name);
    return CT_OK;
}
