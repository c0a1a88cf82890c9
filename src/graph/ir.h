/* src/graph/ir.h - the graph IR on top of core/ir_types.h (ops, nodes,
 * ct_kargs): the graph itself, builder helpers and the op table (name,
 * kernels per slot, saved-state and scratch sizes). Internal to the library. */
#ifndef CT_GRAPH_IR_H
#define CT_GRAPH_IR_H

#include "core/ir_types.h"

struct ct_graph {
    ct_context *ctx;
    ct_node_def *nodes;
    int n, cap;
    /* Set on a plan's graph by the autocast pass: builders accept BF16/F16
     * float inputs and infer each node's dtype (ct_graph_infer_dtype). User
     * graphs are FP32 and keep this 0. */
    int mixed;
    /* tensor parallelism (ct_graph_set_tensor_group): the group, this rank's
     * place and its size (1: none). A param node's shard (ct_param_set_shard)
     * is in its ia[]: CT_SHARD_IA_* below. */
    struct ct_comm *tp;
    int tp_rank, tp_size;
    int n_rng; /* random ops (dropout, drop_path) built so far: each one's RNG stream */
    /* ct_graph_mark_block: the next node pushed gets CT_NODE_BLOCK. */
    int block_pending;
};
/* A param node's shard attributes: ia[DIM] = split dim + 1 (0: not split),
 * ia[GROUPS], ia[FULL], ia[PADDED] as ct_shard's. */
enum { CT_SHARD_IA_DIM = 4, CT_SHARD_IA_GROUPS, CT_SHARD_IA_FULL, CT_SHARD_IA_PADDED };
/* A param node's shard (rank / ranks: g's tensor group). */
void ct_node_shard(const ct_graph *g, const ct_node_def *d, ct_shard *out);

/* Appends a node (copying *def); shape/dtype must be filled. */
ct_status ct_graph_push(ct_graph *g, const ct_node_def *def, ct_node *out);
/* Checks that n names an existing node; sets an error naming `op` if not. */
ct_status ct_graph_check_node(ct_graph *g, ct_node n, const char *op);
/* Elements of a node's output (1 for a scalar). */
static inline int64_t ct_node_numel(const ct_node_def *d) {
    int64_t n = 1;
    for (int i = 0; i < d->ndim; i++) n *= d->shape[i];
    return n;
}
/* Mixed-precision graphs: the dtype a node's output is stored in, from its
 * inputs (graph.c holds the rule). */
ct_dtype ct_graph_infer_dtype(const ct_graph *g, const ct_node_def *d);
/* Cost model (cost.c): estimated FLOPs of a node by its op's cost column
 * (ct_cost_kind) and bytes of its output + inputs. */
double ct_node_flops(const ct_graph *g, const ct_node_def *d);
double ct_node_bytes(const ct_graph *g, const ct_node_def *d);
/* Appends a CAST of x to dtype dt (mixed graphs only). */
ct_status ct_graph_cast(ct_graph *g, ct_node x, ct_dtype dt, ct_node *out);

/* ---- the op table (op_table.c) ------------------------------------------------ */
/* One row per op: its name, per-op facts (recompute / autocast class, cost
 * formula, output dtype rule), kernels per slot, saved-state and scratch
 * sizes and how its kernels meet low-precision I/O. */

/* Bytes of saved state / scratch this node needs (may be NULL: none). */
typedef size_t (*ct_size_fn)(const ct_graph *g, const ct_node_def *d);
/* Frees whatever a kernel stored in *cache. */
typedef void (*ct_cache_free_fn)(void *cache);

enum { CT_KERNEL_REF = 0, CT_KERNEL_AVX2, CT_KERNEL_AVX512, CT_KERNEL_ONEDNN, CT_KERNEL_SLOTS };

/* Per-op facts the passes read: columns of the op table that every row sets
 * (0 is "not set": ct_op_table_check fails every compile then). */
/* recompute column: the CT_RECOMPUTE_* kind (include/ctrain/graph.h) the
 * recompute pass may drop, or this (outside CT_RECOMPUTE_ALL): never. */
enum { CT_RECOMPUTE_NEVER = 1u << 15 };
/* autocast column: the dtype the autocast pass gives a node's float inputs. */
typedef enum {
    CT_AUTOCAST_FOLLOW = 1, /* as they come (the pure policies cast parameters and inputs) */
    CT_AUTOCAST_LOW,        /* the low-precision dtype (matmul, linear, conv2d, attention) */
    CT_AUTOCAST_F32         /* FP32 (softmax, log_softmax, cross_entropy, sum)           */
} ct_autocast_class;
/* cost column: which formula of the cost model (cost.c) counts its FLOPs. */
typedef enum {
    CT_COST_ELEMENTWISE = 1, /* one flop per output element                              */
    CT_COST_MATMUL,          /* 2*M*N*K per batch                                         */
    CT_COST_LINEAR,          /* 2 * rows * in * out                                       */
    CT_COST_CONV2D,          /* 2 * out numel * C/groups*KH*KW                            */
    CT_COST_CONV2D_BWD,      /* data or weight gradient: 2 * numel(dy) * C/groups*KH*KW   */
    CT_COST_ATTENTION,       /* 4*B*T*T*D forward, 10*B*T*T*D backward, halved when causal */
    CT_COST_FUSED_GEMM       /* a fused GEMM: as its GEMM (linear, matmul or conv2d)      */
} ct_cost_kind;
/* out_dtype column: the dtype of a node's output in a mixed-precision graph
 * (ct_graph_infer_dtype, graph.c). */
typedef enum {
    CT_OUT_PROMOTE = 1, /* FP32 when any float input is FP32 (or BF16 meets FP16), else theirs */
    CT_OUT_IN0,         /* in[0]'s (normalization: its FP32 gamma/beta do not promote it)  */
    CT_OUT_IN1,         /* in[1]'s                                                         */
    CT_OUT_F32          /* FP32 (parameter gradients, f32 statistics, the loss)            */
} ct_out_dtype;

typedef struct ct_op_info {
    const char *name;
    uint16_t recompute; /* CT_RECOMPUTE_* kind or CT_RECOMPUTE_NEVER */
    uint8_t autocast;   /* ct_autocast_class                         */
    uint8_t cost;       /* ct_cost_kind                              */
    uint8_t out_dtype;  /* ct_out_dtype                              */
    ct_kernel_fn kernel[CT_KERNEL_SLOTS];
    ct_size_fn aux_bytes;
    ct_size_fn ws_bytes;
    ct_cache_free_fn cache_free;
    /* Bit j set: input j is read only for its saved state (aux) and shape,
     * never its data (a backward node naming its forward node). The executor
     * does not convert such inputs in mixed precision. */
    uint8_t state_inputs;
    /* 1: the kernels read and write BF16/F16 tensors themselves. Otherwise the
     * executor hands them FP32 copies of low-precision inputs and converts
     * their FP32 output back (the math is FP32 either way). */
    uint8_t lowp_native;
    /* 1: the oneDNN kernel reads BF16 inputs and writes a BF16 or FP32 output
     * itself. Kernel selection uses that for a node on the oneDNN slot whose
     * data inputs are all BF16 when ct_context_lowp_native says so (the
     * node's pn.lowp_native); otherwise the node gets FP32 copies. */
    uint8_t onednn_bf16;
    /* 1: the AVX2 / AVX-512 kernels read BF16 / FP16 inputs and write a
     * BF16 / FP16 output themselves, converting in registers
     * (simd/simd_lowp.h); any mix of FP32 and one 16-bit dtype. Kernel
     * selection uses that for a node on a SIMD slot (pn.lowp_native), unless
     * CT_BF16_NATIVE=0. A configuration the kernel does not cover returns
     * CT_E_UNSUPPORTED and the node falls back to FP32 copies. */
    uint8_t simd_lowp;
    /* 1: the oneDNN kernel exists only for native BF16 I/O (it reads and
     * writes BF16 on oneDNN's BF16 matmul, onednn_bf16): kernel selection
     * picks it only for a node that runs natively (pn.lowp_native through
     * onednn_bf16), every other node gets the next kernel (the SIMD ones). */
    uint8_t onednn_lowp_only;
    /* 1: every kernel reads element i of in[0] before writing element i of
     * the output, so the planner may give the output in[0]'s buffer when
     * in[0] (same size) is last read by this node (memory_opt on). */
    uint8_t inplace;
    /* j + 1: the kernels also write input j's buffer, a second result (the
     * value of that input's node, whose own kernel writes nothing: no_output);
     * add+layernorm writes the sum there. The executor converts it back when
     * the kernel ran on FP32 copies. 0: none. */
    uint8_t writes_in;
    /* 1: the kernels write nothing; the node whose op names it in writes_in
     * writes its value, later (the anomaly check looks at it then). */
    uint8_t no_output;
    /* Set: for a node where it returns 1, kernel selection skips the oneDNN
     * kernel and takes the next (SIMD) one, which covers exactly those nodes
     * (a shape oneDNN runs badly: the direct weight gradient of simd/conv.c).
     * Never in favour of the reference kernel. */
    int (*simd_first)(const ct_graph *g, const ct_node_def *d);
} ct_op_info;

const ct_op_info *ct_op_table(ct_op op);
/* CT_OK when every op's row sets every per-op fact column; else
 * CT_E_INTERNAL naming the op and the column (ct_compile checks it). */
ct_status ct_op_table_check(ct_context *ctx);
const char *ct_kernel_slot_name(int slot);
/* How a node's kernel meets low-precision I/O. */
typedef enum { CT_LOWP_NONE = 0, CT_LOWP_NATIVE_BF16, CT_LOWP_NATIVE_F16, CT_LOWP_COPIED } ct_lowp_mode;
/* "onednn" (NONE), "onednn bf16" (NATIVE_BF16), "avx512 f16" (NATIVE_F16),
 * "convert+onednn f32" (COPIED), ... */
const char *ct_kernel_slot_desc(int slot, ct_lowp_mode mode);

/* Size helpers of the op table (op_table.c). */
size_t ct_aux_maxpool2d(const ct_graph *g, const ct_node_def *d);
size_t ct_aux_batchnorm(const ct_graph *g, const ct_node_def *d);
size_t ct_aux_layernorm(const ct_graph *g, const ct_node_def *d);
size_t ct_ws_sum(const ct_graph *g, const ct_node_def *d);
size_t ct_ws_embedding_bwd(const ct_graph *g, const ct_node_def *d);
size_t ct_ws_colsum(const ct_graph *g, const ct_node_def *d);
size_t ct_ws_batchnorm(const ct_graph *g, const ct_node_def *d);
size_t ct_aux_colsum(const ct_graph *g, const ct_node_def *d);
size_t ct_aux_attention(const ct_graph *g, const ct_node_def *d);
size_t ct_ws_attention(const ct_graph *g, const ct_node_def *d);
/* pooling with BF16 I/O on planes above CT_BF16_TILE: per thread, an FP32 input and output plane */
size_t ct_ws_pool(const ct_graph *g, const ct_node_def *d);
/* The direct convolution weight gradient's (simd/conv.c) sums and padded images; 0 for other nodes */
size_t ct_ws_conv_bwd_weight(const ct_graph *g, const ct_node_def *d);
int ct_conv_bwd_weight_simd_first(const ct_graph *g, const ct_node_def *d);
size_t ct_aux_bn_relu(const ct_graph *g, const ct_node_def *d);
size_t ct_aux_linear_pro(const ct_graph *g, const ct_node_def *d);
size_t ct_ws_gemm_pro(const ct_graph *g, const ct_node_def *d);
size_t ct_aux_unary_bwd_keep(const ct_graph *g, const ct_node_def *d);
/* Tensor parallelism's collective ops (tp_kernels.c): their kernels call the
 * communicator (ct_kargs.group), so they live in the graph layer. */
ct_status ct_k_tp_copy(ct_kargs *k);
ct_status ct_k_tp_reduce(ct_kargs *k);
ct_status ct_k_cross_entropy_vp(ct_kargs *k);
size_t ct_aux_cross_entropy_vp(const ct_graph *g, const ct_node_def *d);
/* Elementwise chains (fusion_chain.c): the kernels, generated from this table. */
ct_status ct_k_eltwise_chain_ref(ct_kargs *k);
ct_status ct_k_eltwise_chain_avx2(ct_kargs *k);
ct_status ct_k_eltwise_chain_avx512(ct_kargs *k);

/* Low-precision weight copies (plan_accessors.c): the arena of BF16/FP16 copies of
 * the parameters in their arena layout (NULL: the plan has none) and its
 * dtype; after writing the casts of the whole parameter arena into it, the
 * optimizer marks them current with ct_plan_weight_copies_written. */
uint16_t *ct_plan_weight_copies(ct_plan *p, ct_dtype *dtype);
void ct_plan_weight_copies_written(ct_plan *p);
int ct_plan_weight_copies_fresh(const ct_plan *p); /* they equal the casts of the current parameters */

/* A forward interposer (pipeline evaluation, train/pipeline.c): while set, ct_plan_forward(p, training)
 * calls fn(user, p, training) instead, with the interposer unset during the call (fn runs the plan's
 * forward itself, around its receives and sends). NULL: none. */
typedef ct_status (*ct_forward_fn)(void *user, ct_plan *p, int training);
void ct_plan_set_forward_fn(ct_plan *p, ct_forward_fn fn, void *user);

/* The executor's pass events (ZeRO-3, train/zero3.c, gathers parameters here): CT_EXEC_BEGIN before a
 * forward (backward 0) or backward (backward 1) pass runs its first node (a forward's BEGIN comes before
 * it looks whether the weight copies are current: the hook may write them), CT_EXEC_NODE before each node it
 * runs (node: its id), CT_EXEC_END after the last (also when a node failed: the hook then cleans up; its
 * status is ignored). A status other than CT_OK from BEGIN or NODE stops the pass with it. NULL: none. */
typedef enum { CT_EXEC_BEGIN = 0, CT_EXEC_NODE, CT_EXEC_END } ct_exec_event;
typedef ct_status (*ct_exec_hook_fn)(void *user, ct_exec_event ev, int backward, int node);
void ct_plan_set_exec_hook(ct_plan *p, ct_exec_hook_fn fn, void *user);
/* The nodes the next ct_plan_forward (backward 0) or ct_plan_backward (backward 1) will run, in order, for
 * the plan's current part and weight copies: writes up to cap of them, returns how many there are. */
int ct_plan_exec_order(const ct_plan *p, int backward, int *nodes, int cap);
/* The parameters (arena index) whose values node reads: its inputs that are parameters or views of one.
 * Writes up to cap, returns how many. */
int ct_plan_node_param_reads(const ct_plan *p, int node, int *params, int cap);
/* The weight copies oneDNN nodes keep packed (CT_ONEDNN_PACK_WEIGHTS=1, onednn/matmul.c): bytes held (allocated
 * at each node's first run, through ct_alloc) and packings done so far, over the plan's nodes that keep one. */
void ct_plan_packed_weights(const ct_plan *p, int *nodes, size_t *bytes, uint64_t *fills);
/* Whether node is a forward cast of a parameter into the weight copies (ct_plan_weight_copies). */
int ct_plan_node_is_weight_copy(const ct_plan *p, int node);
#endif