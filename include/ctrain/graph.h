/* ctrain/graph.h - build a static graph through the C API, compile it into a
 * plan (autodiff + passes + memory planning), and run it.
 *
 * Values in a graph are named by ct_node ids (int32). Every builder checks
 * shapes and dtypes and returns CT_E_SHAPE / CT_E_DTYPE with a message.
 *
 * Example (compiled and run, verbatim, by tests/test_header_example.c, which
 * also checks that this text equals its copy; statuses unchecked for brevity:
 * every call returns a ct_status and ctx holds the message):
 *
 *   ct_graph *g;  ct_graph_create(ctx, &g);
 *   ct_node x, y, w, b, logits, loss;
 *   ct_input(g, "x", CT_F32, 2, (int64_t[]){64, 784}, &x);
 *   ct_input(g, "y", CT_I32, 1, (int64_t[]){64}, &y);
 *   ct_param(g, "fc.weight", 2, (int64_t[]){10, 784}, CT_INIT_KAIMING_UNIFORM, 784, &w);
 *   ct_param(g, "fc.bias", 1, (int64_t[]){10}, CT_INIT_KAIMING_UNIFORM, 784, &b);
 *   ct_linear(g, x, w, b, &logits);
 *   ct_cross_entropy(g, logits, y, 0.0f, -100, &loss);
 *   ct_plan *p;  ct_compile(g, loss, 1, &logits, NULL, &p);
 *   ct_graph_free(g);                 // the plan holds its own snapshot
 *   ct_tensor tx, ty;                 // inputs: write here before forward
 *   ct_plan_tensor(p, x, &tx);  ct_plan_tensor(p, y, &ty);
 *   for (int i = 0; i < 64; i++) ((int32_t *)ty.data)[i] = i % 10;
 *   ct_plan_forward(p, 1);  ct_plan_backward(p);
 *   float l;  ct_plan_loss(p, &l);
 *   ct_plan_free(p);
 */
#ifndef CTRAIN_GRAPH_H
#define CTRAIN_GRAPH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "context.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef int32_t ct_node;
#define CT_NONE ((ct_node)-1)

typedef struct ct_graph ct_graph;
typedef struct ct_plan ct_plan;

typedef enum ct_init {
    CT_INIT_ZEROS = 0,
    CT_INIT_ONES,
    CT_INIT_KAIMING_UNIFORM, /* U(-1/sqrt(fan_in), 1/sqrt(fan_in)), PyTorch's default for Linear/Conv */
    CT_INIT_NORMAL,          /* N(0, 0.02), GPT-style (N(0, std) from ct_param_normal) */
} ct_init;

ct_status ct_graph_create(ct_context *ctx, ct_graph **out);
void ct_graph_free(ct_graph *g); /* accepts NULL */
ct_context *ct_graph_context(const ct_graph *g);

/* ---- leaves -------------------------------------------------------------- */
ct_status ct_input(ct_graph *g, const char *name, ct_dtype dt, int ndim,
                   const int64_t *shape, ct_node *out);
/* Trainable FP32 parameter; fan_in is used by CT_INIT_KAIMING_UNIFORM. */
ct_status ct_param(ct_graph *g, const char *name, int ndim, const int64_t *shape,
                   ct_init init, int64_t fan_in, ct_node *out);
/* Trainable FP32 parameter initialized from N(0, std), std > 0 (CT_INIT_NORMAL
 * with another std than 0.02, e.g. GPT-2's scaled residual projections). */
ct_status ct_param_normal(ct_graph *g, const char *name, int ndim, const int64_t *shape, float std,
                          ct_node *out);
/* Non-trainable persistent state (e.g. batchnorm running statistics). */
ct_status ct_buffer(ct_graph *g, const char *name, int ndim, const int64_t *shape,
                    ct_init init, ct_node *out);

/* ---- ops (forward); all FP32 unless stated ------------------------------- */
/* a (..., M, K) x b (..., K, N) -> (..., M, N); trans flags transpose the last
 * two dims. b may be 2-D and is then broadcast over a's batch dims. */
ct_status ct_matmul(ct_graph *g, ct_node a, ct_node b, int trans_a, int trans_b, ct_node *out);
/* x (..., in), w (out, in), b (out) or CT_NONE -> (..., out); PyTorch layout. */
ct_status ct_linear(ct_graph *g, ct_node x, ct_node w, ct_node b, ct_node *out);
/* x (N, C, H, W), w (OC, C/groups, KH, KW), b (OC) or CT_NONE. */
ct_status ct_conv2d(ct_graph *g, ct_node x, ct_node w, ct_node b, int stride, int pad,
                    int dilation, int groups, ct_node *out);
/* ct_conv2d with options. channels_last = 1: x is (N, H, W, C) and the
 * output (N, OH, OW, OC) (PyTorch's channels_last memory format as the
 * tensors' own shape); the weight stays (OC, C/groups, KH, KW). oneDNN runs
 * such convolutions without reordering the activations (on AVX-512 1.5-2x
 * faster than NCHW, which it reorders to its blocked layout on every call);
 * the models that use it (cnn, resnet: recipe key channels_last) transpose
 * their input once and run batchnorm on the (N*H*W, C) view.
 * ct_conv2d_opts_default: stride 1, no padding, dilation 1, one group, NCHW. */
typedef struct ct_conv2d_opts {
    int stride, pad, dilation, groups;
    int channels_last; /* 0: NCHW (default), 1: NHWC */
} ct_conv2d_opts;
void ct_conv2d_opts_default(ct_conv2d_opts *o);
ct_status ct_conv2d_ex(ct_graph *g, ct_node x, ct_node w, ct_node b, const ct_conv2d_opts *o, ct_node *out);
/* 2-D max / average pooling, x (N, C, H, W) -> (N, C, OH, OW), PyTorch's
 * MaxPool2d / AvgPool2d semantics per axis (H shown; W alike):
 *  - window oh reads rows oh*stride - pad + i*dilation, i < kernel; taps in
 *    the padding are skipped (max never sees them; avg adds nothing);
 *  - OH = floor((H + 2*pad - dilation*(kernel-1) - 1) / stride) + 1, or with
 *    ceil_mode the ceiling, minus one if that last window would start at or
 *    past H + pad (the last window must start inside the input or the left
 *    padding); OH must be >= 1;
 *  - pad must be <= (dilation*(kernel-1)+1) / 2 (half the effective kernel,
 *    i.e. kernel/2 without dilation), else CT_E_INVALID_ARG;
 *  - max: NaN propagates; the gradient goes to the first maximum of each
 *    window in row-major window order (ties: the first);
 *  - avg: count_include_pad (PyTorch's default, 1) divides by the taps that
 *    lie inside the padded input (kernel_h*kernel_w, fewer only for a
 *    ceil_mode window running past the padding, as PyTorch); 0 divides by
 *    the taps inside the input. Dilation is accepted for avg too (PyTorch's
 *    AvgPool2d has none): the divisor counts taps, not the span.
 *  - channels_last = 1: x is (N, H, W, C) and the output (N, OH, OW, C)
 *    (channels-last / NHWC activations), the same windows and values per
 *    (n, c) as the (N, C, H, W) layout; 0 (default): (N, C, H, W).
 * ct_pool2d_opts_default(o, k): k x k, stride = kernel, no padding, dilation
 * 1, floor mode, count_include_pad 1, channels_last 0. stride 0 means
 * "= kernel" (PyTorch's stride=None). */
typedef struct ct_pool2d_opts {
    int kernel_h, kernel_w;
    int stride_h, stride_w;     /* 0: the kernel size                 */
    int pad_h, pad_w;
    int dilation_h, dilation_w; /* >= 1                               */
    int ceil_mode;              /* 0: floor (default), 1: ceil        */
    int count_include_pad;      /* avg only; 1 (default) or 0         */
    int channels_last;          /* 1: x (N, H, W, C); 0 (default)     */
} ct_pool2d_opts;
void ct_pool2d_opts_default(ct_pool2d_opts *o, int kernel);
ct_status ct_maxpool2d_ex(ct_graph *g, ct_node x, const ct_pool2d_opts *o, ct_node *out);
ct_status ct_avgpool2d_ex(ct_graph *g, ct_node x, const ct_pool2d_opts *o, ct_node *out);
/* Square windows, floor mode, no dilation, avg counting padding:
 * ct_*pool2d_ex with kernel, stride (>= 1) and pad on both axes. */
ct_status ct_maxpool2d(ct_graph *g, ct_node x, int kernel, int stride, int pad, ct_node *out);
ct_status ct_avgpool2d(ct_graph *g, ct_node x, int kernel, int stride, int pad, ct_node *out);
/* (N, C, H, W) -> (N, C) */
ct_status ct_global_avgpool(ct_graph *g, ct_node x, ct_node *out);
/* x (N, C, ...) ; gamma, beta (C) params; running_mean/var (C) buffers. */
ct_status ct_batchnorm(ct_graph *g, ct_node x, ct_node gamma, ct_node beta, ct_node running_mean,
                       ct_node running_var, float momentum, float eps, ct_node *out);
/* normalizes the last dim; gamma, beta (D); beta may be CT_NONE (no bias) */
ct_status ct_layernorm(ct_graph *g, ct_node x, ct_node gamma, ct_node beta, float eps, ct_node *out);

ct_status ct_relu(ct_graph *g, ct_node x, ct_node *out);
ct_status ct_gelu(ct_graph *g, ct_node x, int tanh_approx, ct_node *out);
ct_status ct_silu(ct_graph *g, ct_node x, ct_node *out);
ct_status ct_sigmoid(ct_graph *g, ct_node x, ct_node *out);
ct_status ct_tanh(ct_graph *g, ct_node x, ct_node *out);
/* y = x * s (a constant) */
ct_status ct_scale(ct_graph *g, ct_node x, float s, ct_node *out);

/* NumPy-style broadcasting binary ops. */
ct_status ct_add(ct_graph *g, ct_node a, ct_node b, ct_node *out);
ct_status ct_sub(ct_graph *g, ct_node a, ct_node b, ct_node *out);
ct_status ct_mul(ct_graph *g, ct_node a, ct_node b, ct_node *out);
ct_status ct_div(ct_graph *g, ct_node a, ct_node b, ct_node *out);

/* Reductions over the dims whose bit is set in axes_mask (bit i = dim i). */
ct_status ct_sum(ct_graph *g, ct_node x, uint32_t axes_mask, int keepdim, ct_node *out);
ct_status ct_mean(ct_graph *g, ct_node x, uint32_t axes_mask, int keepdim, ct_node *out);

/* Shape ops. reshape accepts one -1. flatten keeps dim 0. */
ct_status ct_reshape(ct_graph *g, ct_node x, int ndim, const int64_t *shape, ct_node *out);
ct_status ct_flatten(ct_graph *g, ct_node x, ct_node *out);
ct_status ct_transpose(ct_graph *g, ct_node x, const int *perm, ct_node *out);
ct_status ct_concat(ct_graph *g, int n, const ct_node *xs, int axis, ct_node *out);
ct_status ct_slice(ct_graph *g, ct_node x, int axis, int64_t start, int64_t end, ct_node *out);
/* Zeros before and after x along axis (torch.nn.functional.pad with 0 on
 * one dim): out's dim is before + x's + after. Its gradient is the slice
 * of the output gradient. before = after = 0 gives x itself. */
ct_status ct_pad(ct_graph *g, ct_node x, int axis, int64_t before, int64_t after, ct_node *out);

/* Over the last dim. */
ct_status ct_softmax(ct_graph *g, ct_node x, ct_node *out);
ct_status ct_log_softmax(ct_graph *g, ct_node x, ct_node *out);
/* logits (..., C) with the classes on the last axis ((N, C), (B, T, V), ...),
 * labels I32 of the leading shape (...) -> scalar mean over every position
 * whose label is not ignore_index (PyTorch's reduction='mean'; 0 when all
 * are ignored). The same as reshaping to (N, C) / (N) first, bit for bit.
 * label_smoothing in [0, 1). A label outside [0, C) fails at run time. */
ct_status ct_cross_entropy(ct_graph *g, ct_node logits, ct_node labels, float label_smoothing,
                           int ignore_index, ct_node *out);
/* Inverted dropout, active only when the plan runs in training mode. */
ct_status ct_dropout(ct_graph *g, ct_node x, float p, ct_node *out);
/* Drop path (stochastic depth, torchvision's StochasticDepth(p, "row")):
 * x (N, ...); in training mode each sample n is zeroed with probability p
 * and otherwise scaled by 1/(1-p); identity in eval mode. Counter-based like
 * dropout (the same mask in backward and in recomputation). */
ct_status ct_drop_path(ct_graph *g, ct_node x, float p, ct_node *out);
/* Swin Transformer's attention bias for windows of window x window tokens
 * (torchvision's shifted_window_attention): table ((2w-1)^2, heads) ->
 * (windows_h * windows_w, heads, w*w, w*w) with out[n, h, i, j] =
 * table[(ri - rj + w - 1) * (2w - 1) + (ci - cj + w - 1), h] for tokens i =
 * (ri, ci), j = (rj, cj) of a window (torchvision's relative_position_index,
 * computed, not stored), plus, when shift > 0, -100 where i and j come from
 * different regions of the cyclically shifted map (the shifted-window mask:
 * along each axis the last `window` positions split at `shift`). Gradient:
 * the sums into the table. */
ct_status ct_window_bias(ct_graph *g, ct_node table, int window, int shift, int64_t windows_h, int64_t windows_w,
                         ct_node *out);
/* weight (V, D) param, ids I32 (...) -> (..., D) */
ct_status ct_embedding(ct_graph *g, ct_node weight, ct_node ids, ct_node *out);

/* Fused multi-head scaled dot-product attention (nanoGPT's layout).
 * qkv (B, T, 3*D) is the packed output of one linear layer: q = qkv[..., 0:D],
 * k = qkv[..., D:2D], v = qkv[..., 2D:3D]; head h uses columns h*Dh..(h+1)*Dh of
 * each, Dh = D / n_head. out (B, T, D): the heads concatenated,
 * softmax(q k^T / sqrt(Dh) + mask) v. causal: key j > query i is masked.
 * key_valid: CT_NONE or I32 (B, T), 0 masks that key for every query
 * (padding). A query whose keys are all masked gets zeros (and zero
 * gradients). Saves only the log-sum-exp per (b, h, t) for backward, which
 * recomputes the probabilities. */
ct_status ct_attention(ct_graph *g, ct_node qkv, int n_head, int causal, ct_node key_valid, ct_node *out);

/* ---- tensor parallelism (Megatron-style; docs/distributed.md) ----------------
 * A graph built for tensor parallelism is one rank's part of the model: its
 * parameters are shards of the whole model's, and collective ops join the
 * ranks of the tensor group. Every rank of the group builds the same graph
 * (same nodes in the same order, shards of equal shapes), so their
 * collectives meet in the same order. */
struct ct_comm; /* ctrain/dist.h's ct_comm (a typedef there; C99 allows it once) */
/* The tensor group the graph's collectives run over; NULL or a group of one
 * rank: none (every collective op below is then the identity / the plain op).
 * Set before building: the builders (GPT, BERT) shard by it. The group must
 * outlive every plan compiled from the graph. */
ct_status ct_graph_set_tensor_group(ct_graph *g, struct ct_comm *group);
struct ct_comm *ct_graph_tensor_group(const ct_graph *g); /* NULL when none          */
int ct_graph_tensor_rank(const ct_graph *g);       /* 0 when none             */
int ct_graph_tensor_size(const ct_graph *g);       /* 1 when none             */

/* How a parameter is cut across the tensor group (ct_param_set_shard,
 * ct_plan_param_shard). The whole tensor, of shape `full` along `dim`
 * (other dims as the shard's), is padded to `padded` (a multiple of
 * groups x ranks: Megatron's vocabulary padding; = full otherwise) and
 * viewed as `groups` equal blocks along dim (3 for a fused q|k|v weight);
 * each block is cut into `ranks` equal slices and rank r holds slice r of
 * every block, blocks in order. Indices >= full along dim are padding (no
 * element of the whole tensor: zero-initialized, never saved). */
typedef struct ct_shard {
    int dim;         /* the split dimension; -1: not split (every tensor rank holds a copy) */
    int rank, ranks; /* this shard's place; the tensor group's size                         */
    int groups;      /* blocks along dim, each split alike (1 plain, 3 for q|k|v)            */
    int64_t full;    /* size of dim in the whole tensor                                    */
    int64_t padded;  /* size of dim in the padded whole tensor                              */
} ct_shard;
/* Marks param `p` (shape: the shard's) as this rank's shard of a whole
 * tensor split along dim into groups (rank and ranks: the graph's tensor
 * group); full: the whole tensor's size along dim (may be < padded =
 * shard size x ranks). The initial values are the whole tensor's at the
 * shard's positions (the same as one process draws). */
ct_status ct_param_set_shard(ct_graph *g, ct_node p, int dim, int groups, int64_t full);
/* The shape of the whole tensor (padding stripped) from a shard's shape. */
void ct_shard_full_shape(const ct_shard *s, int ndim, const int64_t *shard_shape, int64_t *full_shape);
/* Copies between a whole tensor (full_shape, FP32) and a shard (shard_shape):
 * to_shard 1: shard <- whole at the shard's positions (padding 0); 0: whole <-
 * shard (only the whole tensor's elements this shard holds are written). */
void ct_shard_copy(const ct_shard *s, int ndim, const int64_t *shard_shape, float *whole, float *shard, int to_shard);

/* Identity forward, sum over the tensor group backward: the input of a
 * column-parallel layer (Megatron's f). */
ct_status ct_tp_copy(ct_graph *g, ct_node x, ct_node *out);
/* Sum over the tensor group forward, identity backward: the output of a
 * row-parallel layer (Megatron's g). */
ct_status ct_tp_reduce(ct_graph *g, ct_node x, ct_node *out);
/* Vocabulary-parallel embedding: weight (R, D) holds rows [row0, row0 + R)
 * of the whole table; ids I32 (...) -> (..., D): the row for ids in range,
 * zeros for the others (no collective: ct_tp_reduce sums the ranks' parts).
 * The gradient goes to the rows in range only. */
ct_status ct_embedding_rows(ct_graph *g, ct_node weight, ct_node ids, int64_t row0, ct_node *out);
/* Vocabulary-parallel cross entropy: logits (N, Vl) are columns
 * [rank x Vl, (rank + 1) x Vl) of the whole (N, Vl x ranks) logits over the
 * graph's tensor group; columns >= vocab (padding) are masked out of the
 * softmax and the loss. labels I32 (N) (the same on every rank), ignore_index
 * and label_smoothing (over the vocab real classes) as ct_cross_entropy; the
 * same scalar on every rank. The whole logits are never formed: each row's
 * max and sum of exponentials are reduced over the group (a few floats per
 * row). Without a tensor group: ct_cross_entropy over the first vocab columns. */
ct_status ct_cross_entropy_vp(ct_graph *g, ct_node logits, ct_node labels, float label_smoothing, int ignore_index,
                              int64_t vocab, ct_node *out);

/* Introspection */
int ct_graph_num_nodes(const ct_graph *g);
ct_status ct_node_shape(const ct_graph *g, ct_node n, int *ndim, int64_t shape[CT_MAX_DIMS]);
ct_dtype ct_node_dtype(const ct_graph *g, ct_node n);
const char *ct_node_name(const ct_graph *g, ct_node n);
const char *ct_node_op_name(const ct_graph *g, ct_node n);
/* Sets the name of a node (layer names are used in errors and traces). */
ct_status ct_node_set_name(ct_graph *g, ct_node n, const char *name);
/* x is the input of a new block (a transformer layer): the nodes built from
 * here until the next mark belong to that block (its first node is flagged,
 * so every copy of the graph keeps the marks). The recompute pass's
 * ct_compile_opts.recompute_blocks groups blocks into segments. Builders
 * call it at the top of each block (ct_model_gpt, ct_model_bert). */
ct_status ct_graph_mark_block(ct_graph *g, ct_node x);

/* ---- compile and run ----------------------------------------------------- */
/* Op kinds for ct_compile_opts.recompute_ops (a bitmask). */
enum {
    CT_RECOMPUTE_ACTIVATION = 1u << 0, /* relu, gelu, silu, sigmoid, tanh                       */
    CT_RECOMPUTE_ELTWISE    = 1u << 1, /* scale, add, sub, mul, div                             */
    CT_RECOMPUTE_DROPOUT    = 1u << 2, /* dropout (the same mask: counter-based RNG)            */
    CT_RECOMPUTE_NORM       = 1u << 3, /* batchnorm (batch statistics, running stats not
                                          updated again), layernorm                             */
    CT_RECOMPUTE_REDUCE     = 1u << 4, /* max/avg pooling, sum, mean (global avgpool)            */
    CT_RECOMPUTE_SHAPE      = 1u << 5, /* transpose, concat, slice (a reshape follows its input) */
    CT_RECOMPUTE_SOFTMAX    = 1u << 6, /* softmax, log_softmax, cross_entropy                   */
    CT_RECOMPUTE_MATMUL     = 1u << 7, /* linear, matmul, conv2d, embedding, attention          */
    CT_RECOMPUTE_CHEAP = CT_RECOMPUTE_ACTIVATION | CT_RECOMPUTE_ELTWISE | CT_RECOMPUTE_DROPOUT |
                         CT_RECOMPUTE_NORM,
    CT_RECOMPUTE_ALL = 0xff
};

/* Mixed precision (ct_compile_opts.precision; docs/mixed-precision.md).
 *  FP32       everything FP32.
 *  BF16/FP16  autocast: matmul, linear, conv2d (forward and backward) read
 *             BF16/FP16 copies of their inputs (one cast per value, not per
 *             use) and store low-precision outputs; softmax, log_softmax,
 *             cross_entropy and sum/mean read FP32 casts and store FP32;
 *             batchnorm/layernorm compute in FP32 and store their input's
 *             dtype; other ops follow their inputs (FP32 when any float input
 *             is FP32). Parameters stay FP32 (master weights): their casts
 *             are refreshed by every forward, and their gradients are FP32.
 *  *_PURE     every parameter and input is cast to the low dtype at first
 *             use and every op stores low precision (model.half() with FP32
 *             master weights); the loss stays FP32.
 * matmul, linear and conv2d (forward and backward) read and write BF16
 * themselves through oneDNN where ct_context_lowp_native says so; other
 * kernels, and these elsewhere, run their FP32 math on converted copies (the
 * executor converts in and out). Either way the numerics are those of a
 * low-precision matrix unit with FP32 accumulation. The gradient of a
 * parameter's BF16 copy is FP32: the weight-gradient GEMMs and bias sums
 * write it straight into the FP32 gradient arena (FP16 keeps the FP16 round
 * trip, so the loss scaler sees what FP16 holds). */
typedef enum ct_precision {
    CT_PRECISION_FP32 = 0,
    CT_PRECISION_BF16,
    CT_PRECISION_FP16,
    CT_PRECISION_BF16_PURE,
    CT_PRECISION_FP16_PURE,
    CT_PRECISION_COUNT
} ct_precision;
/* "fp32", "bf16", "fp16", "bf16-pure", "fp16-pure" */
const char *ct_precision_name(ct_precision p);
/* Parses a name above; unknown -> CT_E_INVALID_ARG listing the valid ones. */
ct_status ct_precision_parse(ct_context *ctx, const char *name, ct_precision *out);
/* Whether plans of this context run matmul, linear and conv2d (forward,
 * backward data, backward weights) on oneDNN primitives that read and write
 * dt (CT_BF16 or CT_F16) themselves, accumulating in FP32 (*native = 1), or
 * on FP32 copies of their low-precision I/O (0). BF16 is native by default
 * where oneDNN runs it in hardware that beats the FP32 FMAs (AMX; or
 * AVX512-BF16 whose dot products give more FLOPs per second than FP32 FMAs,
 * measured once per process: AMD Zen 4 / 5 yes, Intel Sapphire / Emerald
 * Rapids without AMX no; within ONEDNN_MAX_CPU_ISA) and the context allows
 * AVX-512 and oneDNN (CT_ISA, CT_ONEDNN, ct_context_opts). The environment variable CT_BF16_NATIVE=1
 * forces it wherever the context allows (on AVX-512 without AVX512-BF16
 * oneDNN emulates BF16: slow, for testing; below AVX-512 oneDNN has no BF16
 * primitive and each node falls back to FP32 copies at its first run);
 * CT_BF16_NATIVE=0 turns it off. FP16 is never native (oneDNN 2.6 has no
 * FP16 matmul or convolution on CPUs). `how` (may be NULL) receives one line:
 * why, oneDNN's ISA and the implementation it picks for a dt matmul.
 * CT_E_CONFIG when CT_BF16_NATIVE is set to something else than 0 or 1 (also
 * from ct_compile of a BF16 plan). */
ct_status ct_context_lowp_native(ct_context *ctx, ct_dtype dt, int *native, char *how, size_t how_len);

typedef struct ct_compile_opts {
    ct_precision precision; /* CT_PRECISION_FP32 (default)                          */
    /* Comma-separated layer names or op kinds that stay FP32 under autocast
     * (their inputs are cast to FP32 and their output is FP32), e.g.
     * "fc2,maxpool2d". A name matches a node of that name or whose name
     * starts with it followed by '.'; an op kind matches every node of that
     * op ("conv2d", "linear", "matmul", "maxpool2d", ...). A token that
     * matches nothing is an error. NULL/"" : none. */
    const char *keep_fp32;
    int build_backward;   /* 1: autodiff from the loss (default)              */
    int init_params;      /* 1: initialize params/buffers from their ct_init  */
    /* 1: gradient accumulation over micro-batches. Each final parameter
     * gradient is computed into activation memory and, right after its node
     * runs, added into the grad arena (no allocation); ct_plan_zero_grads
     * starts an accumulation. Scale each micro-batch's loss by 1/N with
     * ct_plan_set_loss_scale (PyTorch's loss / accumulation_steps). Costs
     * activation memory for the gradient nodes. Statistics that depend on the
     * batch (batchnorm's mean/var, and its running stats updated once per
     * micro-batch) are per micro-batch, as in PyTorch; to move the running
     * stats once per step, see ct_plan_set_update_running_stats. 0 (default): backward
     * writes final gradients directly into the grad arena (no extra memory). */
    int accumulate_grads;
    /* Activation checkpointing (the "recompute" pass, after autodiff). A
     * "layer" is a linear/matmul/conv2d node and the forward nodes after it
     * (in build order) up to the next such node; nodes before the first one
     * and the last layer (the one computing the loss) are never recomputed.
     *  - recompute_every = N >= 1: layers are grouped from the first into
     *    segments of N; only values a segment's forward passes to another
     *    segment (its boundaries) are kept for backward, the rest is
     *    recomputed from the boundaries during backward (recompute_ops, if
     *    set, limits which op kinds are recomputed; the others are kept).
     *  - recompute_every = 0, recompute_ops != 0 (selective): the outputs of
     *    the listed op kinds (CT_RECOMPUTE_*, e.g. CT_RECOMPUTE_CHEAP) are
     *    recomputed from their inputs during backward, in every layer.
     *  - both 0 (default): everything backward reads is kept.
     *  - recompute_blocks = N >= 1 (instead of recompute_every): by blocks
     *    (ct_graph_mark_block: transformer layers) rather than layers, as
     *    PyTorch's checkpoint_sequential over the blocks. Blocks are grouped
     *    from the first into segments of N; only the segment boundaries
     *    (the inputs of blocks 0, N, 2N, ... and whatever else a segment
     *    passes to another) are kept, the rest of each segment is recomputed
     *    in backward, every op kind (collectives too: a recomputed
     *    segment repeats its tensor-parallel collectives in the same order
     *    on every rank) but those the pass never recomputes; recompute_ops,
     *    if set, limits the kinds. Nodes before the first block and after
     *    the last (final norm, head, loss) are never recomputed. The end of
     *    the last block is where its node sequence, repeating the previous
     *    block's op for op, ends; if it does not repeat it, the last block
     *    is kept with the tail. Setting both recompute_every and
     *    recompute_blocks, or recompute_blocks on a graph without block
     *    marks, is CT_E_INVALID_ARG.
     * Gradients, the loss and running statistics are bit for bit those of
     * the plan without recomputation (same kernels, same inputs). */
    int recompute_every;
    uint32_t recompute_ops;
    int recompute_blocks;
    /* 1: run every pass but the allocation: the plan reports its memory
     * (ct_plan_get_stats) without taking it, and cannot run (forward and
     * backward return CT_E_STATE). For sizing a configuration before paying
     * for it (memory_budget advice). Default 0. */
    int plan_only;
    /* The fusion pass (after autodiff and recompute, before liveness;
     * docs/fusion.md). 0 (default here; the recipe key fusion_level
     * defaults to 1): none. 1: conv2d / linear + bias add, conv2d / linear +
     * relu, batchnorm + relu (the relu backward reads one mask bit per
     * element instead of the stored output). 2: also an activation or a
     * layernorm in front of a linear layer computed inside it (its output is
     * never stored; the weight gradient recomputes it), dropout + add,
     * add + relu. FP32 nodes outside recompute copies only. Results equal the
     * unfused plan's (bit for bit on the same kernels). */
    int fusion_level;
    /* Rules from JSON (ct_fusion_rules_load): a rule enables a pattern under
     * constraints, at any level; a pattern some rule names applies only
     * where one of its rules holds. NULL (default): the level decides. Read
     * during ct_compile only. */
    const struct ct_fusion_rules *fusion_rules;
    /* 1 (default): activations share memory by lifetime. 0: every value gets
     * its own buffer (to measure what reuse saves). */
    int memory_opt;
    /* Pipeline parallelism: compile only some pieces of the graph (NULL,
     * default: all of it). See "pipeline stages" below. Read during
     * ct_compile only. */
    const struct ct_stage_opts *stage;
} ct_compile_opts;
void ct_compile_opts_default(ct_compile_opts *o);

/* ---- pipeline stages ------------------------------------------------------
 * A model built of blocks (ct_graph_mark_block) is cut into consecutive
 * pieces at block starts: piece k holds the computing nodes from the first
 * node of block cuts[k-1] up to the first node of block cuts[k]; the nodes
 * before the first cut belong to piece 0, those after the last cut to the
 * last piece. Leaves (inputs, parameters, buffers) go with every piece that
 * reads them: a parameter read by two pieces (a tied embedding and LM head)
 * is in both, with the same initial values; keeping the copies equal (the sum
 * of their gradients) is the caller's. A value computed in piece a and read
 * in piece b > a crosses every boundary between them: it is an output
 * ("link") of pieces a .. b-1 and an input of pieces a+1 .. b (relayed).
 * Both sides of a boundary list its links in the same order (by the value's
 * node in the whole graph), so a sender and a receiver agree on them
 * without talking.
 *
 * A plan compiled with ct_compile_opts.stage holds the pieces `held`
 * (ascending, no two consecutive: interleaved schedules give a rank pieces
 * r, r + P, ...). Each held piece is a "part" of the plan: forward and
 * backward run one part at a time (ct_plan_set_part). A part's inputs are
 * its incoming links (written before forward; their gradients read after
 * backward), its outputs its outgoing links (read after forward; their
 * gradients written before backward). The loss, when its piece is held,
 * is seeded by backward as usual (ct_plan_set_loss_scale); the outgoing
 * links' gradients are the other seeds. Node ids stay the whole graph's:
 * ct_plan_tensor of a node that no held piece has is CT_E_INVALID_ARG
 * (ct_plan_has_node tells). Every data input of the whole graph is an input of
 * every stage plan, and an output passed to ct_compile that no held piece
 * computes is a stand-in input of its shape (values meaningless): a task
 * writes and reads the same tensors on every stage. Parameters are
 * initialized as in the whole graph (the same values at any cut). */
typedef struct ct_stage_opts {
    int n_pieces;         /* >= 1                                            */
    const int *cuts;      /* n_pieces - 1 block indices, ascending, >= 1     */
    int n_held;           /* >= 1                                            */
    const int *held;      /* piece indices, ascending, none consecutive      */
    /* The pipeline group (NULL: none): the processes holding the pieces, for
     * the collectives over the whole model (ct_weights_save, checkpoints:
     * the stages' tensors gathered into the one-process file). */
    struct ct_comm *group;
} ct_stage_opts;
/* Blocks of a graph (ct_graph_mark_block calls that flagged a node). */
int ct_graph_num_blocks(const ct_graph *g);
/* Block b's name: its first node's name (for a block that starts with a
 * parameter, "layer2.0.conv1.weight"; ct_graph_find_block matches names by
 * prefix up to a dot). */
const char *ct_graph_block_name(const ct_graph *g, int b);
/* The first block whose first node's name is `name` or starts with
 * "<name>."; CT_E_INVALID_ARG naming the blocks if none. */
ct_status ct_graph_find_block(const ct_graph *g, const char *name, int *block);
/* Cut points for n_pieces pieces that balance, per piece, the cost model's
 * forward FLOPs and the parameter bytes it holds (a tied parameter in every
 * piece that reads it; each as a share of the whole, the sum of the two; the
 * largest piece as small as possible). cuts gets
 * n_pieces - 1 block indices. CT_E_CONFIG when the graph has fewer than
 * n_pieces - 1 blocks. */
ct_status ct_graph_balance_cuts(const ct_graph *g, int n_pieces, int *cuts);
/* The cut of a recipe's pipeline_split: "" balanced (ct_graph_balance_cuts),
 * else n_pieces - 1 comma-separated block indices or names
 * (ct_graph_find_block); CT_E_CONFIG naming the text when they are not. */
ct_status ct_graph_parse_cuts(const ct_graph *g, const char *text, int n_pieces, int *cuts);
/* Per piece of a cut (n_pieces entries): forward FLOPs and parameter floats
 * (a parameter counted in every piece that reads it). */
ct_status ct_graph_piece_costs(const ct_graph *g, int n_pieces, const int *cuts, double *flops, double *param_floats);

/* The plan's parts (held pieces; 1 without ct_compile_opts.stage). */
int ct_plan_num_parts(const ct_plan *p);
/* The part forward / backward run (0 .. parts-1), or -1: all (default). */
ct_status ct_plan_set_part(ct_plan *p, int part);
/* Links of part `part`: dir 0 incoming (inputs), 1 outgoing (outputs). */
int ct_plan_num_links(const ct_plan *p, int part, int dir);
/* Link i of a part: its value (incoming: the input to write before forward;
 * outgoing: the output to read after forward) and its gradient (incoming:
 * read after backward; outgoing: the seed to write before backward). A
 * gradient's data is NULL when the value has none (integer values, or no
 * parameter depends on it): send zeros / write nothing. The tensors may be
 * BF16 / FP16 in a mixed-precision plan (ct_convert to FP32 for the wire). */
ct_status ct_plan_link(ct_plan *p, int part, int dir, int i, ct_tensor *value, ct_tensor *grad);
/* The pipeline group of ct_stage_opts (NULL: none). */
struct ct_comm *ct_plan_pipeline_group(const ct_plan *p);
/* The whole graph's index of parameter / buffer i of this plan (its place
 * in the one-process plan's order; i itself without stages). */
int ct_plan_param_order(const ct_plan *p, int i);
int ct_plan_buffer_order(const ct_plan *p, int i);
/* 1 when node n of the whole graph is in this plan. */
int ct_plan_has_node(const ct_plan *p, ct_node n);
/* Micro-batches in flight (pipeline schedules). The plan keeps one
 * activation arena; a slot keeps what one micro-batch's backward reads: the
 * values and saved state of its forward still read after the forward (the
 * planner's lifetimes), and the data inputs. After a forward of the selected
 * part, ct_plan_save_activations(p, k) copies them into slot k; before its
 * backward, ct_plan_restore_activations(p, k) copies them back (the part
 * must be the one saved). ct_plan_restore_inputs(p, k) copies back only the
 * data inputs (another part's forward of the same micro-batch). A slot is
 * ct_plan_saved_bytes(p, -1) bytes (the largest part's; counted by the
 * context's allocator), far less than the arena when backward's
 * temporaries dominate it. ct_plan_set_act_slots frees earlier slots. */
ct_status ct_plan_set_act_slots(ct_plan *p, int n);
int ct_plan_num_act_slots(const ct_plan *p); /* 0 before ct_plan_set_act_slots */
ct_status ct_plan_save_activations(ct_plan *p, int slot);
ct_status ct_plan_restore_activations(ct_plan *p, int slot);
ct_status ct_plan_restore_inputs(ct_plan *p, int slot);
/* Bytes a slot holds for `part` (-1: the largest part's); plan_only plans too. */
size_t ct_plan_saved_bytes(const ct_plan *p, int part);

/* Takes a snapshot of the graph: g may be freed afterwards. `loss` is a
 * scalar node (CT_NONE for a forward-only plan). `outputs` are nodes whose
 * values must stay readable after forward (e.g. logits for accuracy). */
ct_status ct_compile(ct_graph *g, ct_node loss, int n_outputs, const ct_node *outputs,
                     const ct_compile_opts *opts, ct_plan **out);
void ct_plan_free(ct_plan *p); /* accepts NULL */

/* A view of a node's value in the plan (inputs: write here before forward). */
ct_status ct_plan_tensor(ct_plan *p, ct_node n, ct_tensor *out);
/* A view of the gradient of a parameter node. */
ct_status ct_plan_grad(ct_plan *p, ct_node param, ct_tensor *out);
/* Loss value after forward. */
ct_status ct_plan_loss(ct_plan *p, float *out);

ct_status ct_plan_forward(ct_plan *p, int training);
/* Runs backward; parameter gradients are written (not accumulated) into the
 * grad arena, or added to it when compiled with accumulate_grads. */
ct_status ct_plan_backward(ct_plan *p);
/* Zeroes the grad arena (with accumulate_grads: starts an accumulation). */
ct_status ct_plan_zero_grads(ct_plan *p);
/* Step counter used by dropout's RNG stream; the optimizer advances it. */
void ct_plan_set_step(ct_plan *p, uint64_t step);
/* Dropout keyed by global sample: the global index of the first sample
 * (row 0 of the batch dimension, dim 0 of the inputs) the next forwards and
 * backwards hold (default 0). Dropout and drop_path draw the mask of
 * element e of a node's output from (context seed, the node, the step,
 * e + first_sample x numel / B), B the batch (dim 0 of the plan's first
 * input, in the selected shapes): a plan run over rows [s, s + b) of a
 * batch with offset s draws exactly the masks one plan run over the whole
 * batch draws for those rows, at any split. A node whose size is not a
 * multiple of B is keyed as with offset 0. Data parallel and the
 * deterministic mode set it before every micro-batch (docs/distributed.md),
 * so masks do not depend on the rank or the world size. */
ct_status ct_plan_set_sample_offset(ct_plan *p, int64_t first_sample);
int64_t ct_plan_sample_offset(const ct_plan *p);
/* Batchnorm running statistics (default on). Off: a training-mode forward
 * still normalizes with the batch's statistics (outputs and gradients are
 * unchanged) but leaves running_mean / running_var bit for bit untouched,
 * in every kernel. With gradient accumulation, turn it on for one
 * micro-batch of each step only, so the running stats move once per
 * optimizer step. Eval-mode forwards never update them either way.
 * ct_plan_update_running_stats reads the switch (1 for plans without
 * batchnorm). */
void ct_plan_set_update_running_stats(ct_plan *p, int on);
int ct_plan_update_running_stats(const ct_plan *p);
/* Anomaly mode: after every op (forward and backward) the output is checked
 * for NaN/inf; the first op that produces one fails with CT_E_NONFINITE and a
 * message naming the op and node with statistics of its inputs. Costs one
 * pass over every output: for debugging. */
void ct_plan_set_anomaly(ct_plan *p, int on);
/* Dynamic shapes (docs/dynamic-shapes.md): compile once for the maximum
 * sizes, run smaller batches or sequences in the same memory without
 * recompiling. g is the graph the plan was compiled from, built again by
 * the same code for smaller sizes (inputs with a smaller batch or sequence
 * dim; parameters unchanged), with the same loss and outputs node ids.
 * ct_plan_add_shape compiles it with the plan's options and no memory and
 * checks it against the plan: the same nodes, kernels and parameters, no
 * activation, saved state or scratch larger than planned (else CT_E_SHAPE
 * naming the first node that differs). *variant: its id for
 * ct_plan_set_shape (the same id again for equal shapes; 0 for the
 * compiled ones). g may be freed afterwards.
 * ct_plan_set_shape selects the shapes the next forwards and backwards run
 * (0: the compiled maximum); ct_plan_tensor views then have that variant's
 * shapes (write inputs there, contiguous), at the same addresses. Kernels
 * see the actual shapes: means divide by the actual count, batchnorm uses
 * the actual batch. The result is that of a plan compiled for that size.
 * ct_plan_shape returns the selected id. */
ct_status ct_plan_add_shape(ct_plan *p, ct_graph *g, ct_node loss, int n_outputs, const ct_node *outputs,
                            int *variant);
ct_status ct_plan_set_shape(ct_plan *p, int variant);
int ct_plan_shape(const ct_plan *p);
int ct_plan_num_shapes(const ct_plan *p); /* the compiled shapes and the variants added: 1 + variants */
/* Value backward seeds d(loss) with (the loss scale; 1 by default). */
ct_status ct_plan_set_loss_scale(ct_plan *p, float scale);

/* Called during backward as soon as the gradient of parameter `param_index`
 * (0..n_params-1, arena order) is final; `grad` views the grad arena. With
 * accumulate_grads it fires once per micro-batch, after this micro-batch's
 * gradient has been added (grad then holds the running sum). */
typedef void (*ct_grad_ready_fn)(void *user, int param_index, const ct_tensor *grad);
void ct_plan_set_grad_ready(ct_plan *p, ct_grad_ready_fn fn, void *user);
/* The parameters (arena order) in the order backward calls the grad-ready
 * hook: writes up to cap of them into order and returns how many there are
 * (parameters without a gradient are not in it). For planning gradient
 * buckets (dist.h) at compile time. */
int ct_plan_grad_ready_order(const ct_plan *p, int *order, int cap);

/* Per-node events from the executor (for profilers and tracers; the
 * profiler of ctrain/profile.h attaches through this hook). While a hook is
 * set, every executed node of forward and backward calls fn twice: kind
 * CT_NODE_BEGIN right before its kernel runs and CT_NODE_END right after
 * (also when it failed: `status`). `ev` and its strings are valid during the
 * call only. One hook per plan; fn NULL removes it. Costs two calls per node. */
typedef enum ct_node_event_kind { CT_NODE_BEGIN = 0, CT_NODE_END } ct_node_event_kind;
typedef struct ct_node_event {
    ct_node_event_kind kind;
    int node;             /* plan node id, 0..ct_plan_stats.n_nodes-1               */
    int backward;         /* 1: a node of the backward pass                         */
    const char *op;       /* op name: "linear", "conv2d_bwd_data", ...              */
    const char *name;     /* node name                                              */
    const char *kernel;   /* "ref", "avx2", "avx512", "onednn": at END the kernel
                             that ran (after any fallback), at BEGIN the chosen one */
    const char *kernel_desc; /* the kernel with its low-precision I/O, as
                             ct_plan_kernel_desc: "onednn bf16", "convert+onednn f32" */
    ct_dtype dtype;       /* output dtype and shape                                 */
    int ndim;
    const int64_t *shape;
    double flops;         /* estimate: matmul/linear 2*M*N*K, conv 2*out*C/g*KH*KW,
                             attention 4*B*T*T*D fwd / 10*B*T*T*D bwd (halved when
                             causal), other ops 1 per output element            */
    double bytes;         /* output + input bytes as stored                         */
    ct_status status;     /* END: the node's result (CT_OK at BEGIN)                */
    const char *impl;     /* the implementation, as ct_plan_kernel_impl: oneDNN's
                             name of its primitive ("brg:avx512_core_amx", "gemm:jit";
                             "onednn" before its first run), else the slot ("avx512",
                             "avx2", "ref"). Valid during the call only.           */
} ct_node_event;
typedef void (*ct_node_hook_fn)(void *user, const ct_node_event *ev);
void ct_plan_set_node_hook(ct_plan *p, ct_node_hook_fn fn, void *user);

/* Parameters in arena order. */
int ct_plan_num_params(const ct_plan *p);
ct_status ct_plan_param_info(const ct_plan *p, int i, const char **name, ct_tensor *value,
                             ct_tensor *grad);
/* Parameter i's place in the tensor group (dim -1 for a whole tensor or a
 * copy every tensor rank holds); CT_E_INVALID_ARG for i out of range. */
ct_status ct_plan_param_shard(const ct_plan *p, int i, ct_shard *out);
/* The plan's tensor group (its graph's; NULL when none). */
struct ct_comm *ct_plan_tensor_group(const ct_plan *p);
/* Buffers (non-trainable state: batchnorm running_mean / running_var) in
 * arena order (the order ct_buffer declared them); `value` views the buffer
 * arena (FP32), writable. Any out-pointer may be NULL. i out of range ->
 * CT_E_INVALID_ARG. */
int ct_plan_num_buffers(const ct_plan *p);
ct_status ct_plan_buffer_info(const ct_plan *p, int i, const char **name, ct_tensor *value);
/* Index (for ct_plan_param_info / ct_plan_buffer_info) of the parameter or
 * buffer with this exact name, e.g. "bn1.running_mean"; no such name ->
 * CT_E_INVALID_ARG naming it (*index untouched). */
ct_status ct_plan_find_param(const ct_plan *p, const char *name, int *index);
ct_status ct_plan_find_buffer(const ct_plan *p, const char *name, int *index);
/* Whole arenas as flat FP32 vectors (params and grads share one layout). */
ct_status ct_plan_param_arena(ct_plan *p, float **params, float **grads, size_t *n);
/* Mixed precision keeps a BF16/FP16 copy of each parameter that the forward
 * casts (the weight copies, ct_plan_stats.weight_copy_bytes) between steps:
 * the optimizer refreshes them in its update pass and forward then skips the
 * casts. Handing out a writable view of the parameters (ct_plan_param_arena
 * with `params`, ct_plan_param_info with `value`, ct_plan_tensor of a
 * parameter) marks them stale, so writes through that view are seen. Call
 * this after writing parameters through a pointer obtained before the last
 * optimizer step (e.g. restoring saved weights): the next forward casts
 * again. A no-op for plans without weight copies. */
void ct_plan_params_changed(ct_plan *p);
/* Buffers (non-trainable state, e.g. batchnorm running stats) arena. */
ct_status ct_plan_buffer_arena(ct_plan *p, float **buffers, size_t *n);

typedef struct ct_plan_stats {
    size_t param_bytes, grad_bytes, buffer_bytes, activation_bytes, workspace_bytes;
    size_t cast_bytes; /* mixed precision: the largest FP32 copy of one node's low-precision
                          I/O (planned inside activation_bytes, live only while it runs) */
    int n_nodes, n_params;
    /* mixed precision: nodes whose kernel reads and writes BF16/FP16 itself
     * on oneDNN (matmul, linear, conv2d and their backward; casts not
     * counted), and nodes given FP32 copies of low-precision I/O. A native
     * node that its kernel declines counts as copied from its first run on. */
    int n_lowp_native, n_lowp_copied;
    /* the activation arena without any reuse (every value its own buffer):
     * activation_bytes with memory_opt = 0; and the fused groups */
    size_t activation_bytes_no_reuse;
    int n_fused;
    /* mixed precision: nodes whose AVX2 / AVX-512 kernel reads and writes
     * BF16 itself (elementwise, norms, softmax, pooling, embedding,
     * attention, ...: converting in registers); not in n_lowp_native */
    int n_lowp_simd;
    /* backward nodes by the kernel that runs them: ref, avx2, avx512, onednn
     * (ct_plan_kernel_name's names; after the first backward, fallbacks
     * counted; any precision) */
    int n_backward_by_kernel[4];
    /* mixed precision: the BF16/FP16 copies of the parameters that forward
     * casts, kept between steps (ct_plan_params_changed); model state, not
     * in activation_bytes (0: none) */
    size_t weight_copy_bytes;
    /* the cost model (cost.c, as in the node events) summed over the live nodes: FLOPs of the forward
     * graph and of backward (recomputed forward nodes included), and bytes read and written */
    double flops_forward, flops_backward, bytes_moved;
} ct_plan_stats;
void ct_plan_get_stats(const ct_plan *p, ct_plan_stats *out);

/* ---- fusion (docs/fusion.md) ------------------------------------------------------ */

/* The registered fusion patterns: name ("batchnorm+relu"), the level that
 * enables it (1 or 2) and its ops in order ("batchnorm", "relu"; NULL past
 * the last). i out of range: NULL / 0. */
int ct_fusion_num_patterns(void);
const char *ct_fusion_pattern_name(int i);
int ct_fusion_pattern_level(int i);
const char *ct_fusion_pattern_op(int i, int j);

/* Fusion rules from JSON, the seeds' schema and ctrain's op names:
 *   {"fusion_patterns": [{"ops": ["Conv2D", "BiasAdd"],
 *                         "constraints": {"strides": [1, 1], "padding": "SAME"}}]}
 * Constraints: strides, padding ("SAME", "VALID" or an explicit number),
 * dilation, groups (conv2d patterns), dtype ("float32"), max_elements (the
 * fused output). A malformed file is CT_E_CONFIG (E40010) with line and
 * column; a rule whose ops are not a registered pattern is CT_E_UNSUPPORTED
 * (E50001), the message listing the supported patterns. */
typedef struct ct_fusion_rules ct_fusion_rules;
ct_status ct_fusion_rules_load(ct_context *ctx, const char *path, ct_fusion_rules **out);
/* The same from a string; `source` names it in messages. */
ct_status ct_fusion_rules_parse(ct_context *ctx, const char *json, const char *source, ct_fusion_rules **out);
void ct_fusion_rules_free(ct_fusion_rules *r); /* accepts NULL */
int ct_fusion_rules_count(const ct_fusion_rules *r);
/* Rule i as text: "conv2d+bias_add (strides 1, padding SAME)"; NULL if out of range. */
const char *ct_fusion_rule_desc(const ct_fusion_rules *r, int i);

/* How many groups of pattern `name` the fusion pass made (NULL: all). */
int ct_plan_fusion_count(const ct_plan *p, const char *pattern);
/* How often rule i of the compile's fusion_rules matched (-1: no such rule). */
int ct_plan_fusion_rule_matches(const ct_plan *p, int i);
/* The plan as text (ctrain graph): nodes with op, shape, kernel and fused
 * group; the fused groups; memory by category; the peak and what is live there. */
ct_status ct_plan_write_summary(const ct_plan *p, FILE *f);
/* Graphviz DOT of the forward and backward graphs (live nodes), each fused
 * group a cluster. */
ct_status ct_plan_write_dot(const ct_plan *p, FILE *f);
/* Name of the kernel that ran a node's op ("ref", "avx2", "avx512", "onednn").
 * In an FP32 plan n may also be a backward node's id (ct_graph_num_nodes of
 * the plan's graph is not exposed: ids past the user's graph count up from
 * it); with mixed precision only the user's node ids are accepted. */
const char *ct_plan_kernel_name(const ct_plan *p, ct_node n);
/* The same kernel with how it meets low-precision I/O: "onednn bf16" (it
 * reads and writes BF16 itself), "convert+onednn f32" (the executor hands it
 * FP32 copies and converts its output back), or the plain kernel name when
 * the node has no low-precision I/O (or is a cast). Static strings. */
const char *ct_plan_kernel_desc(const ct_plan *p, ct_node n);
/* The implementation behind the kernel, for the unit that runs the work:
 * for a oneDNN node the implementation oneDNN picked for its primitive, as
 * oneDNN names it ("brg:avx512_core_amx" = AMX tiles, "gemm:jit",
 * "jit_bf16:avx512_core"; known after the node's first run, "onednn"
 * before), else the kernel slot ("avx512", "avx2", "ref"). Valid until the
 * node's kernel changes (a fallback) or the plan is freed. */
const char *ct_plan_kernel_impl(const ct_plan *p, ct_node n);
/* The dtype a node's output is stored in by this plan (after autocast);
 * CT_DTYPE_COUNT for an unknown node. */
ct_dtype ct_plan_node_dtype(const ct_plan *p, ct_node n);
/* Number of cast nodes the autocast pass inserted (0 in FP32). */
int ct_plan_num_casts(const ct_plan *p);
ct_context *ct_plan_context(const ct_plan *p);

#ifdef __cplusplus
}
#endif
#endif
