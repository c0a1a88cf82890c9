/* src/graph/op_table.c - the op table: for every op its name, its per-op
 * facts (recompute and autocast class, cost formula, output dtype rule), its
 * kernels per slot, and the sizes of its saved state and scratch. Adding an
 * op = one row here, its builder in graph.c, its rule in autodiff.c, its
 * kernels in src/kernels/. */
#include "graph/ir.h"
#include "kernels/kernels.h"
#include "kernels/pool_plane.h"

#define SIMD(op) [CT_KERNEL_REF] = ct_k_##op##_ref, [CT_KERNEL_AVX2] = ct_k_##op##_avx2, [CT_KERNEL_AVX512] = ct_k_##op##_avx512
#define DNNL(op) [CT_KERNEL_REF] = ct_k_##op##_ref, [CT_KERNEL_ONEDNN] = ct_k_##op##_onednn
#define SIMD_DNNL(op) SIMD(op), [CT_KERNEL_ONEDNN] = ct_k_##op##_onednn
/* The per-op fact columns, in order: recompute kind (CT_RECOMPUTE_*, NEVER),
 * autocast class (CT_AUTOCAST_*), cost formula (CT_COST_*), output dtype
 * rule (CT_OUT_*); ir.h describes each. */
#define FACTS(rc, ac, cost, out) CT_RECOMPUTE_##rc, CT_AUTOCAST_##ac, CT_COST_##cost, CT_OUT_##out

/* Unsized, so that a missing last row is caught by the assert below (a row
 * missing in the middle is caught by tests/test_ops.c: every op has a name;
 * a row without its facts fails every compile: ct_op_table_check). The
 * facts come right after the name, so a row written without them does not
 * compile. */
static const ct_op_info k_ops[] = {
    [CT_OP_INPUT] = {"input", FACTS(NEVER, FOLLOW, ELEMENTWISE, PROMOTE), {0}, 0, 0, 0},
    [CT_OP_PARAM] = {"param", FACTS(NEVER, FOLLOW, ELEMENTWISE, PROMOTE), {0}, 0, 0, 0},
    [CT_OP_BUFFER] = {"buffer", FACTS(NEVER, FOLLOW, ELEMENTWISE, PROMOTE), {0}, 0, 0, 0},
    [CT_OP_MATMUL] = {"matmul", FACTS(MATMUL, LOW, MATMUL, PROMOTE), {DNNL(matmul)}, 0, 0, ct_onednn_cache_free, 0, 0, 1},
    [CT_OP_LINEAR] = {"linear", FACTS(MATMUL, LOW, LINEAR, PROMOTE), {DNNL(linear)}, 0, 0, ct_onednn_cache_free, 0, 0, 1},
    [CT_OP_CONV2D] = {"conv2d", FACTS(MATMUL, LOW, CONV2D, PROMOTE), {DNNL(conv2d)}, 0, 0, ct_onednn_cache_free, 0, 0, 1},
    [CT_OP_MAXPOOL2D] = {"maxpool2d", FACTS(REDUCE, FOLLOW, ELEMENTWISE, PROMOTE), {SIMD(maxpool2d)}, ct_aux_maxpool2d, ct_ws_pool, 0, .simd_lowp = 1},
    [CT_OP_AVGPOOL2D] = {"avgpool2d", FACTS(REDUCE, FOLLOW, ELEMENTWISE, PROMOTE), {SIMD(avgpool2d)}, 0, ct_ws_pool, 0, .simd_lowp = 1},
    [CT_OP_BATCHNORM] = {"batchnorm", FACTS(NORM, FOLLOW, ELEMENTWISE, IN0), {SIMD(batchnorm)}, ct_aux_batchnorm, ct_ws_batchnorm, 0, .simd_lowp = 1},
    [CT_OP_LAYERNORM] = {"layernorm", FACTS(NORM, FOLLOW, ELEMENTWISE, IN0), {SIMD(layernorm)}, ct_aux_layernorm, 0, 0, .simd_lowp = 1},
    [CT_OP_UNARY] = {"unary", FACTS(ACTIVATION, FOLLOW, ELEMENTWISE, PROMOTE), {SIMD(unary)}, 0, 0, 0, .simd_lowp = 1},
    [CT_OP_SCALE] = {"scale", FACTS(ELTWISE, FOLLOW, ELEMENTWISE, PROMOTE), {SIMD(scale)}, 0, 0, 0, .simd_lowp = 1, .inplace = 1},
    [CT_OP_BINARY] = {"binary", FACTS(ELTWISE, FOLLOW, ELEMENTWISE, PROMOTE), {SIMD(binary)}, 0, 0, 0, .simd_lowp = 1, .inplace = 1},
    [CT_OP_SUM] = {"sum", FACTS(REDUCE, F32, ELEMENTWISE, PROMOTE), {SIMD(sum)}, 0, ct_ws_sum, 0, .simd_lowp = 1},
    [CT_OP_RESHAPE] = {"reshape", FACTS(NEVER, FOLLOW, ELEMENTWISE, PROMOTE), {0}, 0, 0, 0},
    [CT_OP_TRANSPOSE] = {"transpose", FACTS(SHAPE, FOLLOW, ELEMENTWISE, PROMOTE), {SIMD(transpose)}, 0, 0, 0},
    [CT_OP_CONCAT] = {"concat", FACTS(SHAPE, FOLLOW, ELEMENTWISE, PROMOTE), {SIMD(concat)}, 0, 0, 0, .simd_lowp = 1},
    [CT_OP_SLICE] = {"slice", FACTS(SHAPE, FOLLOW, ELEMENTWISE, PROMOTE), {SIMD(slice)}, 0, 0, 0, .simd_lowp = 1},
    [CT_OP_SOFTMAX] = {"softmax", FACTS(SOFTMAX, F32, ELEMENTWISE, PROMOTE), {SIMD(softmax)}, 0, 0, 0, .simd_lowp = 1},
    [CT_OP_LOG_SOFTMAX] = {"log_softmax", FACTS(SOFTMAX, F32, ELEMENTWISE, PROMOTE), {SIMD(log_softmax)}, 0, 0, 0, .simd_lowp = 1},
    [CT_OP_CROSS_ENTROPY] = {"cross_entropy", FACTS(SOFTMAX, F32, ELEMENTWISE, F32), {SIMD(cross_entropy)}, 0, 0, 0, .simd_lowp = 1},
    [CT_OP_DROPOUT] = {"dropout", FACTS(DROPOUT, FOLLOW, ELEMENTWISE, PROMOTE), {SIMD(dropout)}, 0, 0, 0, .simd_lowp = 1, .inplace = 1},
    [CT_OP_EMBEDDING] = {"embedding", FACTS(MATMUL, FOLLOW, ELEMENTWISE, IN0), {SIMD(embedding)}, 0, 0, 0, .simd_lowp = 1},
    [CT_OP_CAST] = {"cast", FACTS(ELTWISE, FOLLOW, ELEMENTWISE, PROMOTE), {[CT_KERNEL_REF] = ct_k_cast}, 0, 0, 0, 0, 1},
    [CT_OP_ATTENTION] = {"attention", FACTS(MATMUL, LOW, ATTENTION, PROMOTE), {SIMD_DNNL(attention)}, ct_aux_attention, ct_ws_attention, ct_onednn_cache_free, 0, .onednn_bf16 = 1, .simd_lowp = 1, .onednn_lowp_only = 1},
    [CT_OP_UNARY_BWD] = {"unary_bwd", FACTS(NEVER, FOLLOW, ELEMENTWISE, PROMOTE), {SIMD(unary_bwd)}, ct_aux_colsum, 0, 0, .simd_lowp = 1, .inplace = 1},
    [CT_OP_BROADCAST_TO] = {"broadcast_to", FACTS(NEVER, FOLLOW, ELEMENTWISE, IN0), {SIMD(broadcast_to)}, 0, 0, 0},
    [CT_OP_SUM_TO] = {"sum_to", FACTS(NEVER, FOLLOW, ELEMENTWISE, IN0), {SIMD(sum_to)}, 0, ct_ws_sum, 0, .simd_lowp = 1},
    [CT_OP_CONV2D_BWD_DATA] = {"conv2d_bwd_data", FACTS(NEVER, FOLLOW, CONV2D_BWD, PROMOTE), {DNNL(conv2d_bwd_data)}, 0, 0, ct_onednn_cache_free, 1u << 2, 0, 1},
    [CT_OP_CONV2D_BWD_WEIGHT] = {"conv2d_bwd_weight", FACTS(NEVER, FOLLOW, CONV2D_BWD, PROMOTE), {SIMD_DNNL(conv2d_bwd_weight)}, 0, ct_ws_conv_bwd_weight, ct_onednn_cache_free, 1u << 2, 0, 1, .simd_lowp = 1, .simd_first = ct_conv_bwd_weight_simd_first},
    [CT_OP_MAXPOOL2D_BWD] = {"maxpool2d_bwd", FACTS(NEVER, FOLLOW, ELEMENTWISE, PROMOTE), {SIMD(maxpool2d_bwd)}, 0, ct_ws_pool, 0, 1u << 1, 0, .simd_lowp = 1},
    [CT_OP_AVGPOOL2D_BWD] = {"avgpool2d_bwd", FACTS(NEVER, FOLLOW, ELEMENTWISE, PROMOTE), {SIMD(avgpool2d_bwd)}, 0, ct_ws_pool, 0, .simd_lowp = 1},
    [CT_OP_BATCHNORM_BWD_DATA] = {"batchnorm_bwd_data", FACTS(NEVER, FOLLOW, ELEMENTWISE, IN1), {SIMD(batchnorm_bwd_data)}, ct_aux_colsum, ct_ws_batchnorm, 0, 1u << 3, 0, .simd_lowp = 1},
    [CT_OP_BATCHNORM_BWD_GAMMA] = {"batchnorm_bwd_gamma", FACTS(NEVER, FOLLOW, ELEMENTWISE, F32), {SIMD(batchnorm_bwd_gamma)}, 0, ct_ws_batchnorm, 0, 1u << 2, 0, .simd_lowp = 1},
    [CT_OP_LAYERNORM_BWD_DATA] = {"layernorm_bwd_data", FACTS(NEVER, FOLLOW, ELEMENTWISE, IN1), {SIMD(layernorm_bwd_data)}, ct_aux_colsum, 0, 0, 1u << 3, 0, .simd_lowp = 1},
    [CT_OP_LAYERNORM_BWD_GAMMA] = {"layernorm_bwd_gamma", FACTS(NEVER, FOLLOW, ELEMENTWISE, F32), {SIMD(layernorm_bwd_gamma)}, 0, ct_ws_colsum, 0, 1u << 2, 0, .simd_lowp = 1},
    [CT_OP_SLICE_BWD] = {"slice_bwd", FACTS(SHAPE, FOLLOW, ELEMENTWISE, PROMOTE), {SIMD(slice_bwd)}, 0, 0, 0, .simd_lowp = 1},
    [CT_OP_SOFTMAX_BWD] = {"softmax_bwd", FACTS(NEVER, FOLLOW, ELEMENTWISE, PROMOTE), {SIMD(softmax_bwd)}, 0, 0, 0, .simd_lowp = 1},
    [CT_OP_LOG_SOFTMAX_BWD] = {"log_softmax_bwd", FACTS(NEVER, FOLLOW, ELEMENTWISE, PROMOTE), {SIMD(log_softmax_bwd)}, 0, 0, 0, .simd_lowp = 1},
    [CT_OP_CROSS_ENTROPY_BWD] = {"cross_entropy_bwd", FACTS(NEVER, FOLLOW, ELEMENTWISE, IN1), {SIMD(cross_entropy_bwd)}, 0, 0, 0, .simd_lowp = 1},
    [CT_OP_EMBEDDING_BWD] = {"embedding_bwd", FACTS(NEVER, FOLLOW, ELEMENTWISE, F32), {SIMD(embedding_bwd)}, 0, ct_ws_embedding_bwd, 0, .simd_lowp = 1},
    [CT_OP_ATTENTION_BWD] = {"attention_bwd", FACTS(NEVER, FOLLOW, ATTENTION, PROMOTE), {SIMD_DNNL(attention_bwd)}, ct_aux_colsum, ct_ws_attention, ct_onednn_cache_free, 0, .onednn_bf16 = 1, .simd_lowp = 1, .onednn_lowp_only = 1},
    [CT_OP_BN_RELU] = {"batchnorm+relu", FACTS(NEVER, FOLLOW, ELEMENTWISE, PROMOTE), {SIMD(bn_relu)}, ct_aux_bn_relu, ct_ws_batchnorm, 0, .simd_lowp = 1},
    [CT_OP_RELU_MASK_BWD] = {"relu_mask_bwd", FACTS(NEVER, FOLLOW, ELEMENTWISE, PROMOTE), {SIMD(relu_mask_bwd)}, 0, 0, 0, 1u << 1, 0, .simd_lowp = 1},
    [CT_OP_LINEAR_PRO] = {"linear_prologue", FACTS(NEVER, FOLLOW, FUSED_GEMM, PROMOTE), {SIMD_DNNL(linear_pro)}, ct_aux_linear_pro, ct_ws_gemm_pro, ct_onednn_cache_free},
    [CT_OP_MATMUL_PRO] = {"matmul_prologue", FACTS(NEVER, FOLLOW, FUSED_GEMM, PROMOTE), {SIMD_DNNL(matmul_pro)}, 0, ct_ws_gemm_pro, ct_onednn_cache_free},
    [CT_OP_DROPOUT_ADD] = {"dropout+add", FACTS(NEVER, FOLLOW, ELEMENTWISE, PROMOTE), {SIMD(dropout_add)}, 0, 0, 0},
    [CT_OP_GEMM_RELU] = {"gemm+relu", FACTS(NEVER, FOLLOW, FUSED_GEMM, PROMOTE), {DNNL(gemm_relu)}, 0, 0, ct_onednn_cache_free},
    [CT_OP_ADD_RELU] = {"add+relu", FACTS(NEVER, FOLLOW, ELEMENTWISE, PROMOTE), {SIMD(add_relu)}, 0, 0, 0},
    [CT_OP_ELTWISE_CHAIN] = {"eltwise_chain", FACTS(NEVER, FOLLOW, ELEMENTWISE, PROMOTE), {SIMD(eltwise_chain)}, 0, 0, 0},
    [CT_OP_WINDOW_BIAS] = {"window_bias", FACTS(NEVER, FOLLOW, ELEMENTWISE, PROMOTE), {[CT_KERNEL_REF] = ct_k_window_bias_ref}, 0, 0, 0},
    [CT_OP_WINDOW_BIAS_BWD] = {"window_bias_bwd", FACTS(NEVER, FOLLOW, ELEMENTWISE, PROMOTE), {[CT_KERNEL_REF] = ct_k_window_bias_bwd_ref}, 0, ct_ws_sum, 0},
    [CT_OP_UNARY_BWD_KEEP] = {"unary_bwd_keep", FACTS(NEVER, FOLLOW, ELEMENTWISE, PROMOTE), {SIMD(unary_bwd_keep)}, ct_aux_unary_bwd_keep, 0, 0, .inplace = 1},
    [CT_OP_MATMUL_AUX] = {"matmul_aux", FACTS(NEVER, FOLLOW, FUSED_GEMM, PROMOTE), {DNNL(matmul_aux)}, 0, 0, ct_onednn_cache_free, 1u << 1},
    /* tensor parallelism (tp_kernels.c): tp_copy / tp_reduce are recomputable (ELTWISE): every rank
       replays them in the same order; tp_copy copies any dtype's bytes, tp_reduce sums FP32
       (low-precision I/O through the executor's FP32 copies) */
    [CT_OP_TP_COPY] = {"tp_copy", FACTS(ELTWISE, FOLLOW, ELEMENTWISE, PROMOTE), {[CT_KERNEL_REF] = ct_k_tp_copy}, 0, 0, 0, .lowp_native = 1, .inplace = 1},
    [CT_OP_TP_REDUCE] = {"tp_reduce", FACTS(ELTWISE, FOLLOW, ELEMENTWISE, PROMOTE), {[CT_KERNEL_REF] = ct_k_tp_reduce}, 0, 0, 0, .inplace = 1},
    [CT_OP_CROSS_ENTROPY_VP] = {"cross_entropy_vp", FACTS(NEVER, F32, ELEMENTWISE, F32), {[CT_KERNEL_REF] = ct_k_cross_entropy_vp}, ct_aux_cross_entropy_vp, 0, 0},
    [CT_OP_CROSS_ENTROPY_VP_BWD] = {"cross_entropy_vp_bwd", FACTS(NEVER, FOLLOW, ELEMENTWISE, IN1), {[CT_KERNEL_REF] = ct_k_cross_entropy_vp_bwd_ref}, 0, 0, 0, 1u << 3},
    /* add+layernorm (fusion.c): the fused node writes the sum into its in[2], the ADD_LN_SUM node, whose kernel
       does nothing (every slot: the sum node reads as what its value's writer runs) */
    [CT_OP_ADD_LAYERNORM] = {"add+layernorm", FACTS(NEVER, FOLLOW, ELEMENTWISE, IN0), {SIMD(add_layernorm)}, ct_aux_layernorm, 0, 0, .simd_lowp = 1, .writes_in = 3},
    [CT_OP_ADD_LN_SUM] = {"add_ln_sum", FACTS(NEVER, FOLLOW, ELEMENTWISE, PROMOTE), {[CT_KERNEL_REF] = ct_k_nothing, [CT_KERNEL_AVX2] = ct_k_nothing, [CT_KERNEL_AVX512] = ct_k_nothing}, 0, 0, 0, .lowp_native = 1, .no_output = 1},
    [CT_OP_COLSUM] = {"colsum", FACTS(NEVER, FOLLOW, ELEMENTWISE, F32), {[CT_KERNEL_REF] = ct_k_colsum}, 0, 0, 0, 1u << 0 | 1u << 1, .lowp_native = 1},
};

_Static_assert(sizeof k_ops / sizeof k_ops[0] == CT_OP_COUNT, "k_ops needs one row per ct_op: add the new op's row");

const ct_op_info *ct_op_table(ct_op op) {
    static const ct_op_info bad = {"invalid", FACTS(NEVER, FOLLOW, ELEMENTWISE, PROMOTE), {0}, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    return (unsigned)op < CT_OP_COUNT ? &k_ops[op] : &bad;
}

ct_status ct_op_table_check(ct_context *ctx) {
    for (int op = 0; op < CT_OP_COUNT; op++) {
        const ct_op_info *r = &k_ops[op];
        const char *col = !r->name ? "name" : !r->recompute ? "recompute" : !r->autocast ? "autocast" : !r->cost ? "cost"
                        : !r->out_dtype ? "out_dtype" : NULL;
        if (col)
            return ct_set_error(ctx, CT_E_INTERNAL, "op table: op %d ('%s') has no %s column; fill its row in src/graph/op_table.c",
                                op, r->name ? r->name : "?", col);
    }
    return CT_OK;
}

const char *ct_kernel_slot_name(int slot) {
    static const char *n[] = {"ref", "avx2", "avx512", "onednn"};
    _Static_assert(sizeof n / sizeof n[0] == CT_KERNEL_SLOTS, "one name per kernel slot");
    return slot >= 0 && slot < CT_KERNEL_SLOTS ? n[slot] : "none";
}

const char *ct_kernel_slot_desc(int slot, ct_lowp_mode mode) {
    static const char *native[] = {"ref bf16", "avx2 bf16", "avx512 bf16", "onednn bf16"};
    static const char *native16[] = {"ref f16", "avx2 f16", "avx512 f16", "onednn f16"};
    static const char *copied[] = {"convert+ref f32", "convert+avx2 f32", "convert+avx512 f32", "convert+onednn f32"};
    _Static_assert(sizeof native / sizeof native[0] == CT_KERNEL_SLOTS, "one native name per kernel slot");
    _Static_assert(sizeof native16 / sizeof native16[0] == CT_KERNEL_SLOTS, "one native FP16 name per kernel slot");
    _Static_assert(sizeof copied / sizeof copied[0] == CT_KERNEL_SLOTS, "one copied name per kernel slot");
    if (slot < 0 || slot >= CT_KERNEL_SLOTS) return "none";
    switch (mode) {
    case CT_LOWP_NATIVE_BF16: return native[slot];
    case CT_LOWP_NATIVE_F16: return native16[slot];
    case CT_LOWP_COPIED: return copied[slot];
    default: return ct_kernel_slot_name(slot);
    }
}

size_t ct_aux_maxpool2d(const ct_graph *g, const ct_node_def *d) {
    (void)g;
    return (size_t)ct_node_numel(d) * ct_maxpool_arg_size(d->ia[0], d->ia[1]); /* kernels/pool_plane.h */
}

size_t ct_aux_batchnorm(const ct_graph *g, const ct_node_def *d) {
    (void)g;
    return 2 * (size_t)d->shape[1] * sizeof(float);
}

size_t ct_aux_layernorm(const ct_graph *g, const ct_node_def *d) {
    (void)g;
    return 2 * (size_t)(ct_node_numel(d) / d->shape[d->ndim - 1]) * sizeof(float);
}

/* the reference's accumulators (numel(out) doubles); the SIMD column path's
 * pieces' partials (ct_colsum_pieces: at most 64 per output and
 * CT_COLSUM_MAX_PARTIALS in all) */
size_t ct_ws_sum(const ct_graph *g, const ct_node_def *d) {
    (void)g;
    int64_t n = ct_node_numel(d), parts = CT_MIN(64 * n, (int64_t)CT_COLSUM_MAX_PARTIALS);
    return (size_t)CT_MAX(n, parts) * sizeof(double);
}

/* embedding_bwd with an addend (fusion embedding_bwd+add): the row marks, in place the accumulators too
 * (ct_embedding_bwd_ws) */
size_t ct_ws_embedding_bwd(const ct_graph *g, const ct_node_def *d) {
    if (d->n_in < 3) return 0;
    return ct_embedding_bwd_ws(ct_node_numel(&g->nodes[d->in[1]]), d->shape[0], d->shape[1], d->ia[3] != 0).total;
}

/* layernorm_bwd_gamma: its pieces' partials (ct_colsum_pieces(R, D) x D doubles) */
size_t ct_ws_colsum(const ct_graph *g, const ct_node_def *d) {
    const ct_node_def *x = &g->nodes[d->in[1]];
    int64_t D = x->shape[x->ndim - 1], R = D ? ct_node_numel(x) / D : 0;
    return (size_t)(ct_colsum_pieces(R, D) * D) * sizeof(double);
}

/* a column-sum producer (ia[7], fusion layernorm_bwd+colsum / unary_bwd+colsum / batchnorm_bwd+colsum): the
 * pieces' partials of each sum it makes, P x D doubles each (CT_OP_COLSUM) */
size_t ct_aux_colsum(const ct_graph *g, const ct_node_def *d) {
    (void)g;
    int sets = !!(d->ia[7] & CT_COLSUM_DGAMMA) + !!(d->ia[7] & CT_COLSUM_DY) + !!(d->ia[7] & CT_COLSUM_OUT);
    if (!sets || d->ndim < 1) return 0;
    int64_t D = d->shape[d->ndim - 1], R = D ? ct_node_numel(d) / D : 0;
    return (size_t)(sets * ct_colsum_pieces(R, D) * D) * sizeof(double);
}

/* batchnorm (forward, batchnorm+relu, both backward kernels) on planes below 16 elements: the SIMD rows
 * path's partials (ct_bn_rows_ws_bytes); x is in[0] of a forward, in[1] of a backward node */
size_t ct_ws_batchnorm(const ct_graph *g, const ct_node_def *d) {
    int fwd = d->op == CT_OP_BATCHNORM || d->op == CT_OP_BN_RELU;
    const ct_node_def *x = &g->nodes[d->in[fwd ? 0 : 1]];
    if (x->ndim < 2 || x->shape[0] < 1 || x->shape[1] < 1) return 0;
    int64_t N = x->shape[0], C = x->shape[1];
    return ct_bn_rows_ws_bytes(N, C, ct_node_numel(x) / (N * C));
}

size_t ct_aux_attention(const ct_graph *g, const ct_node_def *d) {
    (void)g;
    return (size_t)(d->shape[0] * d->ia[0] * d->shape[1]) * sizeof(float);
}

/* per-thread scratch x the context's threads (d: forward or backward node) */
size_t ct_ws_attention(const ct_graph *g, const ct_node_def *d) {
    int64_t T = d->shape[1], D = d->op == CT_OP_ATTENTION ? d->shape[2] : d->shape[2] / 3;
    int nt = ct_context_num_threads(g->ctx);
    /* BF16 / FP16 I/O (the output, d_qkv for the backward, is 16-bit): room for FP32 rows too */
    size_t per = ct_dtype_is_low(d->dtype) ? ct_attention_ws_per_thread_bf16(T, D / d->ia[0])
                                     : ct_attention_ws_per_thread(T, D / d->ia[0]);
    return (size_t)(nt > 0 ? nt : 1) * per;
}

/* conv2d_bwd_weight d (in: dy, x, the forward) with 1-2 input channels,
 * stride 1, one group, NCHW: the direct SIMD kernel (kernels.h) */
int ct_conv_bwd_weight_simd_first(const ct_graph *g, const ct_node_def *d) {
    return !d->ia[4] && /* NCHW only */
           ct_conv_direct_bwd_weight_ok(g->nodes[d->in[1]].shape[1], d->ia[3], d->ia[0], d->shape[2], d->shape[3]);
}

size_t ct_ws_conv_bwd_weight(const ct_graph *g, const ct_node_def *d) {
    if (!ct_conv_bwd_weight_simd_first(g, d)) return 0;
    const ct_node_def *dy = &g->nodes[d->in[0]];
    int nt = ct_context_num_threads(g->ctx);
    return ct_conv_direct_acc_bytes(d->shape[0], d->shape[1], d->shape[2], d->shape[3]) +
           (size_t)(nt > 0 ? nt : 1) *
               ct_conv_direct_image_bytes(d->shape[1], d->shape[2], d->shape[3], dy->shape[2], dy->shape[3], d->ia[2]);
}

/* Pooling (forward or backward, d) with BF16 / FP16 I/O whose planes
 * (channels-last: whole (H, W, C) images) exceed the SIMD kernel's stack
 * tiles: the kernel converts each plane pair through these FP32 planes
 * instead of declining (which gave the node FP32 copies of the whole
 * tensors: ResNet's first max pool, 112x112 planes) */
size_t ct_ws_pool(const ct_graph *g, const ct_node_def *d) {
    const ct_node_def *x = &g->nodes[d->in[0]];
    int64_t nc = d->fa[1] != 0.0f ? d->shape[0] : d->shape[0] * d->shape[1]; /* channels-last: images */
    if ((!ct_dtype_is_low(d->dtype) && !ct_dtype_is_low(x->dtype)) || nc <= 0) return 0;
    return ct_pool_bf16_ws_bytes(ct_node_numel(x) / nc, ct_node_numel(d) / nc, ct_context_num_threads(g->ctx));
}

/* batchnorm+relu: batchnorm's statistics, then one mask bit per element */
size_t ct_aux_bn_relu(const ct_graph *g, const ct_node_def *d) {
    return ct_aux_batchnorm(g, d) + (size_t)(ct_node_numel(d) + 7) / 8;
}

/* linear with a layernorm prologue: the layernorm's mean/invstd per row of x */
size_t ct_aux_linear_pro(const ct_graph *g, const ct_node_def *d) {
    if (d->ia[0] != CT_PRO_LAYERNORM) return 0;
    const ct_node_def *x = &g->nodes[d->in[0]];
    return 2 * (size_t)(ct_node_numel(x) / x->shape[x->ndim - 1]) * sizeof(float);
}

/* unary(x) kept for the weight gradient: the shape of x, FP32; with column sums (ia[7]) their partials
 * after it (ct_keep_colsum_offset) */
size_t ct_aux_unary_bwd_keep(const ct_graph *g, const ct_node_def *d) {
    int64_t n = ct_node_numel(&g->nodes[d->in[1]]);
    size_t cs = ct_aux_colsum(g, d);
    return cs ? ct_keep_colsum_offset(n) + cs : (size_t)n * sizeof(float);
}

/* GEMM with a prologue: pro(x) and (matmul with a layernorm) its statistics */
size_t ct_ws_gemm_pro(const ct_graph *g, const ct_node_def *d) {
    int lin = d->op == CT_OP_LINEAR_PRO;
    const ct_node_def *x = &g->nodes[d->in[lin ? 0 : 1]];
    int64_t n = ct_node_numel(x);
    return ct_fused_pro_ws(n, n / x->shape[x->ndim - 1], !lin && d->ia[2] == CT_PRO_LAYERNORM);
}
