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
};

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
/* Cost model (cost.c): estimated FLOPs of a node (matmul/linear 2*M*N*K,
 * conv 2*out*C/g*KH*KW, attention 4*B*T*T*D fwd / 10*B*T*T*D bwd, halved when
 * causal, other ops 1 per output element) and bytes of its output + inputs. */
double ct_node_flops(const ct_graph *g, const ct_node_def *d);
double ct_node_bytes(const ct_graph *g, const ct_node_def *d);
/* Appends a CAST of x to dtype dt (mixed graphs only). */
ct_status ct_graph_cast(ct_graph *g, ct_node x, ct_dtype dt, ct_node *out);

/* ---- the op table (op_table.c) ------------------------------------------------ */

/* Bytes of saved state / scratch this node needs (may be NULL: none). */
typedef size_t (*ct_size_fn)(const ct_graph *g, const ct_node_def *d);
/* Frees whatever a kernel stored in *cache. */
typedef void (*ct_cache_free_fn)(void *cache);

enum { CT_KERNEL_REF = 0, CT_KERNEL_AVX2, CT_KERNEL_AVX512, CT_KERNEL_ONEDNN, CT_KERNEL_SLOTS };

typedef struct ct_op_info {
    const char *name;
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
} ct_op_info;

const ct_op_info *ct_op_table(ct_op op);
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
size_t ct_aux_attention(const ct_graph *g, const ct_node_def *d);
size_t ct_ws_attention(const ct_graph *g, const ct_node_def *d);
/* pooling with BF16 I/O on planes above CT_BF16_TILE: per thread, an FP32 input and output plane */
size_t ct_ws_pool(const ct_graph *g, const ct_node_def *d);
size_t ct_aux_bn_relu(const ct_graph *g, const ct_node_def *d);
size_t ct_aux_linear_pro(const ct_graph *g, const ct_node_def *d);
size_t ct_ws_gemm_pro(const ct_graph *g, const ct_node_def *d);
size_t ct_aux_unary_bwd_keep(const ct_graph *g, const ct_node_def *d);
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

#endif
