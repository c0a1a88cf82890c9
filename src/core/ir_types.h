/* src/core/ir_types.h - the IR types every layer above core shares: the op
 * enum with each op's inputs and attributes, the node definition, and the
 * kernel calling convention (ct_kargs). Kernels (src/kernels/) include only
 * this; the graph (src/graph/ir.h) adds the graph, builders and op table.
 *
 * Every node has exactly one output. Ops with several gradients get one
 * backward node per gradient. A backward node may name its forward node as an
 * input to read that node's saved state (aux). Internal to the library. */
#ifndef CT_CORE_IR_TYPES_H
#define CT_CORE_IR_TYPES_H

#include <stdint.h>

#include "ctrain/graph.h"
#include "core/internal.h"

#define CT_MAX_INPUTS 8
#define CT_NAME_LEN 64

typedef enum ct_op {
    CT_OP_INPUT = 0,
    CT_OP_PARAM,
    CT_OP_BUFFER,
    /* forward ops */
    CT_OP_MATMUL,      /* ia[0]=trans_a ia[1]=trans_b                                    */
    CT_OP_LINEAR,      /* in: x, w[, b]                                                  */
    CT_OP_CONV2D,      /* in: x, w[, b]; ia: 0 stride 1 pad 2 dilation 3 groups 4 channels
                          last (x (N, H, W, C), out (N, OH, OW, OC)); the backward ops
                          and GEMM_RELU of a conv carry the same ia                      */
    CT_OP_MAXPOOL2D,   /* ia: 0 kh 1 kw 2 sh 3 sw 4 ph 5 pw 6 dh 7 dw (ceil_mode: in the
                          shape); aux: argmax (taps or int32); kernels/pool_plane.h      */
    CT_OP_AVGPOOL2D,   /* ia as MAXPOOL2D; fa[0] = 1: count_include_pad; both (and their
                          _BWD, which copy the attributes): fa[1] = 1: channels-last,
                          x (N, H, W, C) -> (N, OH, OW, C)                                */
    CT_OP_BATCHNORM,   /* in: x, gamma, beta, rmean, rvar; fa: 0 momentum 1 eps;
                          aux: mean[C], invstd[C] of the batch (training)                 */
    CT_OP_LAYERNORM,   /* in: x, gamma, beta; fa[0]=eps; aux: mean[R], invstd[R]          */
    CT_OP_UNARY,       /* ia[0]=ct_unary_kind                                            */
    CT_OP_SCALE,       /* fa[0]=s                                                         */
    CT_OP_BINARY,      /* ia[0]=ct_binary_kind; broadcasting                              */
    CT_OP_SUM,         /* ia[0]=axes mask ia[1]=keepdim; fa[0]=multiplier (1 or 1/n)      */
    CT_OP_RESHAPE,     /* aliases its input's memory                                      */
    CT_OP_TRANSPOSE,   /* ia[0..ndim-1]=perm                                              */
    CT_OP_CONCAT,      /* ia[0]=axis                                                      */
    CT_OP_SLICE,       /* ia: 0 axis 1 start 2 end                                        */
    CT_OP_SOFTMAX,
    CT_OP_LOG_SOFTMAX,
    CT_OP_CROSS_ENTROPY, /* in: logits, labels; fa[0]=smoothing ia[0]=ignore_index        */
    CT_OP_DROPOUT,     /* fa[0]=p; ia[0]=RNG stream (the forward node's id); ia[1]=0:
                          one decision per element, else per row of ia[1] elements
                          (drop path / stochastic depth: decision i / ia[1])            */
    CT_OP_EMBEDDING,   /* in: weight, ids; ia[1] = 0: ct_embedding (an id outside [0, V) is
                          an error); 1: ct_embedding_rows, the weight holds rows
                          [ia[0], ia[0] + V) of the whole table and an id outside them
                          gives a zero row (the backward skips it)                      */
    CT_OP_CAST,        /* dtype conversion (autocast pass); out dtype = node dtype;
                          ia[1] = 1: in[0]'s kernel writes it (its k->out2: fusion
                          layernorm_bwd+cast), no pass of its own; its buffer lives from
                          in[0]'s place on                                               */
    CT_OP_ATTENTION,   /* in: qkv (B,T,3D)[, key_valid I32 (B,T)]; ia: 0 n_head 1 causal;
                          fa[0]=scale; aux: log-sum-exp per (b, h, t), -inf for a
                          query row with every key masked                                 */
    /* backward ops */
    CT_OP_UNARY_BWD,   /* in: dy, x (or y for sigmoid/tanh/relu); ia[0]=kind; ia[7] =
                          CT_COLSUM_OUT (fusion unary_bwd+colsum): its output's column
                          sums in its aux (see CT_OP_COLSUM)                            */
    CT_OP_BROADCAST_TO,/* in: x, like; out has like's shape; fa[0]=multiplier             */
    CT_OP_SUM_TO,      /* in: x; out shape given; sums broadcast dims                     */
    CT_OP_CONV2D_BWD_DATA,   /* in: dy, w, fwd; attrs as CONV2D                           */
    CT_OP_CONV2D_BWD_WEIGHT, /* in: dy, x, fwd                                            */
    CT_OP_MAXPOOL2D_BWD,     /* in: dy, fwd                                               */
    CT_OP_AVGPOOL2D_BWD,     /* in: dy; out shape = x's                                   */
    CT_OP_BATCHNORM_BWD_DATA,  /* in: dy, x, gamma, fwd; fusion batchnorm_bwd+colsum (x 2-D):
                                  ia[7] the CT_COLSUM_DGAMMA (sums of dy * (x - mean)) / _DY
                                  sets in its aux (see CT_OP_COLSUM); ia[5] = 1: fwd is a
                                  batchnorm+relu and dy is read through its mask bits     */
    CT_OP_BATCHNORM_BWD_GAMMA, /* in: dy, x, fwd                                          */
    CT_OP_LAYERNORM_BWD_DATA,  /* in: dy, x, gamma, fwd[, r]: with r (fusion layernorm_bwd+add)
                                  the output is dx + r, dx rounded to the node's dtype first;
                                  ia[7] != 0 (fusion layernorm_bwd+colsum): the CT_COLSUM_*
                                  column sums it also makes, in its aux (see CT_OP_COLSUM) */
    CT_OP_LAYERNORM_BWD_GAMMA, /* in: dy, x, fwd                                          */
    CT_OP_SLICE_BWD,   /* in: dy; out shape = x's; zero padding                           */
    CT_OP_SOFTMAX_BWD, /* in: dy, y                                                       */
    CT_OP_LOG_SOFTMAX_BWD, /* in: dy, y                                                   */
    CT_OP_CROSS_ENTROPY_BWD, /* in: dloss, logits, labels; attrs as forward              */
    CT_OP_EMBEDDING_BWD, /* in: dy, ids[, a]; out shape = weight's; attrs as forward; with a
                          (fusion embedding_bwd+add, a tied table's other gradient): a +
                          the scatter, ia[2] = 1: scatter + a (the add's operand order),
                          ia[3] = 1: in place (a planned in the output's buffer) */
    CT_OP_ATTENTION_BWD, /* in: dy, qkv, fwd[, key_valid]; out: d_qkv; attrs as forward     */
    /* fused ops (the fusion pass, src/graph/fusion.c; kernels in kernels/ref/fused.c
       and kernels/simd/fused.c) */
    CT_OP_BN_RELU,     /* relu(batchnorm(x)): in and attrs as BATCHNORM; aux: mean[C],
                          invstd[C], then one bit per element: output > 0                 */
    CT_OP_RELU_MASK_BWD, /* in: dy, fwd (a BN_RELU); dy where fwd's mask bit is set, else
                          dy * 0: exactly UNARY_BWD of relu                               */
    CT_OP_LINEAR_PRO,  /* linear(pro(x)): in: x, w[, b][, gamma[, beta]]; ia: 0 prologue
                          (CT_PRO_*) 1 unary kind 2 bias index 3 gamma index 4 beta index
                          (-1: none); fa[0] = layernorm eps; aux: layernorm mean[R],
                          invstd[R]; pro(x) lives in the scratch only                     */
    CT_OP_MATMUL_PRO,  /* matmul(a, pro(x) viewed 2D (rows, last dim)): the weight
                          gradient of a LINEAR_PRO, pro(x) recomputed bit-identically.
                          in: a, x[, gamma[, beta]]; ia: 0 trans_a 1 trans_b 2 prologue
                          3 unary kind 4 gamma index 7 beta index (-1: none); fa[0] eps  */
    CT_OP_DROPOUT_ADD, /* r + dropout(a): in: a, r (same shape); fa[0] = p, ia[0] = the
                          absorbed dropout's RNG stream: its mask exactly               */
    CT_OP_GEMM_RELU,   /* relu(linear / conv2d): in and ia[0..3] as that op, ia[6] = the op
                          (CT_OP_LINEAR or CT_OP_CONV2D); relu in place on its output    */
    CT_OP_ADD_RELU,    /* relu(a + b), a and b the same shape                            */
    CT_OP_ELTWISE_CHAIN, /* up to 8 unary / scale / binary / dropout steps as one loop:
                          in[0] the chain's input, then the binary operands; ia[j] step
                          j (graph/fusion_chain.c), fa the scales and dropout rates    */
    CT_OP_WINDOW_BIAS, /* in: table ((2w-1)^2, heads); ia: 0 w 1 shift 2 windows along H 3 along W;
                          out (nW, heads, w*w, w*w): Swin's relative position bias + the
                          shifted-window mask (-100 across regions) when shift > 0      */
    CT_OP_WINDOW_BIAS_BWD, /* in: dy; out: d_table; attrs as forward                      */
    CT_OP_UNARY_BWD_KEEP, /* in: dy, x; ia[0] = kind (gelu, gelu_tanh, silu: the kinds whose
                          backward reads x); out: UNARY_BWD's dx; aux: unary(x), the
                          activation that a LINEAR_PRO did not store, for the weight
                          gradient (MATMUL_AUX): one pass instead of a recompute     */
    CT_OP_MATMUL_AUX,  /* matmul(a, aux of in[1] viewed 2D (rows, last dim of in[1])):
                          in: a, a UNARY_BWD_KEEP node (read for its aux and shape only);
                          ia[0] trans_a, ia[1] trans_b as MATMUL                         */
    /* tensor parallelism (graph/tp_kernels.c: the collective kernels live there, as
       kernels may not call the communicator; ct_kargs.group is the group) */
    CT_OP_TP_COPY,     /* identity forward (Megatron's f); backward: a TP_REDUCE of dy    */
    CT_OP_TP_REDUCE,   /* in: x; sum over the tensor group (Megatron's g); backward: dy   */
    CT_OP_CROSS_ENTROPY_VP, /* in: logits (..., Vl), labels; fa[0] smoothing; ia: 0
                          ignore_index 1 vocab 2 col0 (this rank's first global column);
                          aux: per row gmax, sum of exp, target logit, sum of the real
                          logits (doubles; after the run the sum of exp is the log-sum-exp) */
    CT_OP_CROSS_ENTROPY_VP_BWD, /* in: dloss, logits, labels, fwd; attrs as forward; no
                          collective                                                    */
    CT_OP_ADD_LAYERNORM, /* layernorm(a + b) (fusion add+layernorm): in: a, b (same shape), s,
                          gamma[, beta]; s an ADD_LN_SUM, whose buffer the kernels write
                          a + b into row by row (rounded to s's dtype, ia[0]) and normalize
                          from there (ct_op_info.writes_in); fa[0] eps; aux as LAYERNORM's */
    CT_OP_ADD_LN_SUM,  /* the sum a + b of an ADD_LAYERNORM: in: a, b (for the record); its
                          kernel writes nothing (ct_op_info.no_output): the ADD_LAYERNORM
                          that reads it writes its value                                */
    /* column sums moved into their producer's row pass (fusion layernorm_bwd+colsum,
       unary_bwd+colsum in graph/fusion.c) */
    CT_OP_COLSUM,      /* in: the producer (a LAYERNORM_BWD_DATA, UNARY_BWD, UNARY_BWD_KEEP,
                          ATTENTION_BWD or BATCHNORM_BWD_DATA with ia[7] != 0), read for its aux and shape
                          only[, a batchnorm forward]; out[j] = fa[0] (with the batchnorm:
                          its invstd[j]) * the sum over the producer's rows of column j of
                          the summed value, from the pieces' double partials the producer
                          left in its aux (ct_colsum_pieces): set ia[0] of the aux, each set
                          P x D doubles, in CT_COLSUM_* bit order of the producer's ia[7];
                          ia[1] = 1: the sets start after a UNARY_BWD_KEEP's activation
                          (ct_keep_colsum_offset) */
    CT_OP_COUNT
} ct_op;

/* What a column-sum producer (ia[7], a bit mask) sums per column: dy * xhat
 * (a layernorm's dgamma), dy (its dbeta), its output (a bias gradient),
 * rounded first to the dtype in ia[6] (the output's, or a BF16 / FP16 cast's
 * that the bias gradient reads). */
enum { CT_COLSUM_DGAMMA = 1, CT_COLSUM_DY = 2, CT_COLSUM_OUT = 4 };

typedef enum ct_unary_kind {
    CT_UNARY_RELU = 0, CT_UNARY_GELU, CT_UNARY_GELU_TANH, CT_UNARY_SILU, CT_UNARY_SIGMOID,
    CT_UNARY_TANH, CT_UNARY_COUNT
} ct_unary_kind;

/* Prologue of a fused GEMM (CT_OP_LINEAR_PRO / CT_OP_MATMUL_PRO). */
enum { CT_PRO_NONE = 0, CT_PRO_UNARY, CT_PRO_LAYERNORM };

typedef enum ct_binary_kind { CT_BIN_ADD = 0, CT_BIN_SUB, CT_BIN_MUL, CT_BIN_DIV, CT_BIN_COUNT } ct_binary_kind;

enum {
    CT_NODE_BACKWARD = 2, /* node flag: part of the backward pass */
    CT_NODE_RECOMPUTE = 4, /* node flag: a copy of a forward node made by the recompute pass
                              (recompute.c); runs during backward with training-mode
                              semantics, and batchnorm does not update running stats */
    CT_NODE_KEEP_STATS = 8, /* node flag (batchnorm): a training-mode forward uses batch
                               statistics but leaves the running stats untouched
                               (ct_plan_set_update_running_stats(p, 0)) */
    CT_NODE_BLOCK = 16, /* node flag: the first node of a block (ct_graph_mark_block); the
                           recompute pass's recompute_blocks segments are groups of blocks */
    CT_NODE_GRAD_INPUT = 32, /* node flag (an input): autodiff computes its gradient (a
                                pipeline stage's incoming link, graph/stage.c) */
    CT_NODE_PART_SHIFT = 24  /* flags >> this: a pipeline plan's part + 1 (0: from the inputs) */
};

typedef struct ct_node_def {
    ct_op op;
    int n_in;
    ct_node in[CT_MAX_INPUTS];
    ct_dtype dtype;
    int ndim;
    int64_t shape[CT_MAX_DIMS];
    int64_t ia[8];
    float fa[4];
    char name[CT_NAME_LEN];
    uint32_t flags;
    /* leaves */
    ct_init init;
    int64_t fan_in;
} ct_node_def;

static inline int ct_dtype_is_float(ct_dtype t) { return t == CT_F32 || t == CT_BF16 || t == CT_F16; }
static inline int ct_dtype_is_low(ct_dtype t) { return t == CT_BF16 || t == CT_F16; }

/* ---- kernel calling convention ------------------------------------------------ */

typedef struct ct_kargs {
    ct_context *ctx;
    const ct_node_def *node;
    const char *op_name;                /* the op's name, for messages (may be NULL) */
    ct_node id;
    ct_tensor out;
    ct_tensor out2;                     /* a second output (data NULL: none): a LAYERNORM_BWD_DATA
                                           with ia[5] = c + 1 writes its output cast to node c's
                                           dtype there (fusion layernorm_bwd+cast)  */
    ct_tensor in[CT_MAX_INPUTS];
    void *aux;                          /* this node's saved state               */
    void *in_aux[CT_MAX_INPUTS];        /* inputs' saved state (backward reads)   */
    void *ws;                           /* scratch, ws_bytes, valid for this call */
    size_t ws_bytes;
    void **cache;                       /* per-node persistent slot (oneDNN)     */
    ct_scratch *scratch;                /* the plan's shared scratch (may be NULL) */
    int training;
    uint64_t step;                      /* RNG counter base for dropout          */
    int64_t elem0;                      /* flat index of out[0] in the node's whole
                                           output: dropout's RNG counter (nonzero
                                           only when a fused kernel runs an op on
                                           a block, as the eltwise chain does)   */
    int64_t sample_elem0;               /* dropout's RNG counter offset for the
                                           plan's first sample (ct_plan_set_sample_offset):
                                           first_sample x (numel / batch); dropout
                                           keys element e by sample_elem0 + elem0 + e,
                                           so a plan run over rows [s, s + b) of a
                                           batch draws exactly the masks one run
                                           over the whole batch draws there. 0 in
                                           one process.                          */
    uint64_t seed;
    int nthreads;
    unsigned in_wcopy;                  /* bit j: in[j] is a parameter's BF16/FP16 weight copy, read in
                                           place (the plan's weight-copy arena), whose contents stay
                                           the same while wgen does: a kernel may keep something made
                                           from it between calls (onednn/matmul.c packs it once) */
    uint64_t wgen;                      /* the weight copies' generation (plan.h wcast_gen) */
    struct ct_comm *group;              /* the graph's tensor group (NULL: none): only the
                                           collective ops' kernels (graph/tp_kernels.c) use it;
                                           kernels in src/kernels never call it */
} ct_kargs;

/* Batchnorm kernels: 1 when this call updates the running statistics
 * (training mode, not a recompute copy, not switched off on the plan). */
static inline int ct_bn_updates_running_stats(const ct_kargs *k) {
    return k->training && !(k->node->flags & (CT_NODE_RECOMPUTE | CT_NODE_KEEP_STATS));
}

typedef ct_status (*ct_kernel_fn)(ct_kargs *k);

#endif
