/* src/kernels/fused.c - kernels of the fused ops (the fusion pass,
 * src/graph/fusion.c). Each composes the kernels of the ops it replaces, all
 * from one slot: the reference fused kernel runs reference kernels only, the
 * fast one the fast kernels (simd/fused.c for batchnorm+relu; here, for the
 * GEMM with a prologue, oneDNN's GEMM after the best SIMD prologue; without
 * oneDNN, the SIMD slots' prologue with the reference GEMM, as the unfused
 * plan runs them). So a
 * fused op is bit-identical to the unfused ops on the same slots, and its
 * reference is the ground truth as for every other op.
 *
 *   BN_RELU        batchnorm, relu in place, then one mask bit per element
 *                  (output > 0) after mean[C], invstd[C] in the node's aux: the
 *                  relu backward reads the bits, not the output, so the output
 *                  need not live until backward. BF16 I/O on the fast
 *                  slot (the SIMD batchnorm writes BF16, the relu and the
 *                  bits in integer arithmetic).
 *   RELU_MASK_BWD  dy * (bit ? 1 : 0), exactly relu's UNARY_BWD (BF16 I/O
 *                  on the fast slot).
 *   LINEAR_PRO     linear(pro(x)) with pro = an activation or a layernorm; pro(x)
 *                  lives in the scratch only (the layernorm writes its statistics
 *                  to the node's aux for the layernorm backward).
 *   MATMUL_PRO     matmul(a, pro(x)) for the weight gradient of LINEAR_PRO:
 *                  pro(x) recomputed into the scratch, the same values as forward.
 *   UNARY_BWD_KEEP an activation's backward (dx from dy and x) that also writes
 *                  the activation itself to its aux: for an activation fused
 *                  into the next linear, the weight gradient's input comes from
 *                  the backward pass it already makes over x (the SIMD kernel
 *                  computes both in one pass, sharing the erf / sigmoid).
 *   MATMUL_AUX     matmul(a, that aux): the weight gradient, no recompute.
 *   ADD_LAYERNORM  layernorm(a + b) that also writes the sum a + b (its in[2]'s
 *                  value, an ADD_LN_SUM: the residual stream, read again later):
 *                  here the float sum rounded to the sum's dtype (ia[0]; a BF16
 *                  / FP16 plan's reference runs on FP32 copies, which the
 *                  executor rounds as well), then the reference layernorm on
 *                  it; the SIMD kernel (simd/norm.c) normalizes each row of the
 *                  sum while it is in L1.
 *
 * Shapes come from the tensors in ct_kargs (never cached at plan time). */
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"

/* Relu in place and the mask bits in one pass, as the reference relu:
 * x > 0 or NaN keeps x, else +0; bit = output > 0. */
void ct_fused_relu_pack_ref(float *y, uint8_t *bits, int64_t n, int nth) {
    (void)nth;
    for (int64_t b = 0; b < (n + 7) / 8; b++) {
        unsigned v = 0;
        int64_t i0 = b * 8, e = i0 + 8 < n ? i0 + 8 : n;
        for (int64_t i = i0; i < e; i++) {
            float x = y[i];
            y[i] = x > 0 || isnan(x) ? x : 0.0f;
            v |= (unsigned)(y[i] > 0.0f) << (i - i0);
        }
        bits[b] = (uint8_t)v;
    }
}

/* The same on BF16 / FP16 values (dt), in integer arithmetic, bit-identical
 * to the SIMD relu on 16-bit I/O (max(0, x) + 0 rounded back: negatives and
 * -0 become +0, a NaN stays, quieted as ct_f32_to_bf16 / ct_f32_to_f16 do);
 * bit = output > 0. */
void ct_fused_relu_pack_lp(uint16_t *y, uint8_t *bits, int64_t n, int nth, ct_dtype dt) {
    const unsigned inf = dt == CT_F16 ? 0x7c00u : 0x7f80u, quiet = dt == CT_F16 ? 0x200u : 0x40u;
    int64_t nb = (n + 7) / 8;
    nth = n >= 65536 ? nth : 1;
#pragma omp parallel for num_threads(nth) schedule(static) if (nth > 1)
    for (int64_t b = 0; b < nb; b++) {
        unsigned v = 0;
        int64_t i0 = b * 8, e = i0 + 8 < n ? i0 + 8 : n;
        for (int64_t i = i0; i < e; i++) {
            uint16_t u = y[i];
            if ((u & 0x7fffu) > inf) u = (uint16_t)(u | quiet); /* NaN */
            else if (u & 0x8000u) u = 0;
            y[i] = u;
            v |= (unsigned)(u != 0 && u <= inf) << (i - i0);
        }
        bits[b] = (uint8_t)v;
    }
}

ct_status ct_fused_bn_relu(ct_kargs *k, ct_kernel_fn bn, void (*relu_pack)(float *, uint8_t *, int64_t, int),
                           void (*relu_pack_lp)(uint16_t *, uint8_t *, int64_t, int, ct_dtype)) {
    /* BF16 / FP16 I/O where the slot has a 16-bit packer (its batchnorm
     * writes that dtype; the reference gets FP32 copies from the executor) */
    int lp = relu_pack_lp && ct_dtype_is_low(k->out.dtype) && k->in[0].dtype == k->out.dtype;
    if (!lp && (k->in[0].dtype != CT_F32 || k->out.dtype != CT_F32)) return CT_E_UNSUPPORTED;
    ct_node_def nd = *k->node;
    nd.op = CT_OP_BATCHNORM; /* flags (recompute, keep stats) stay */
    ct_kargs b = *k;
    b.node = &nd;
    CT_TRY(bn(&b));
    int64_t C = k->in[0].shape[1];
    uint8_t *bits = ct_bn_relu_bits(k->aux, C);
    if (lp) relu_pack_lp(k->out.data, bits, ct_tensor_numel(&k->out), k->nthreads, k->out.dtype);
    else relu_pack(k->out.data, bits, ct_tensor_numel(&k->out), k->nthreads);
    return CT_OK;
}

ct_status ct_k_bn_relu_ref(ct_kargs *k) { return ct_fused_bn_relu(k, ct_k_batchnorm_ref, ct_fused_relu_pack_ref, NULL); }

/* in: a, r: r + dropout(a), the dropout's mask and scale exactly (ia[0] its
 * RNG stream); outside training r + a. */
ct_status ct_k_dropout_add_ref(ct_kargs *k) {
    const float *a = k->in[0].data, *r = k->in[1].data;
    float *y = k->out.data, p = k->node->fa[0];
    int64_t n = ct_tensor_numel(&k->out);
    if (!k->training || p == 0.0f) {
        for (int64_t i = 0; i < n; i++) y[i] = r[i] + a[i];
        return CT_OK;
    }
    float scale = 1.0f / (1.0f - p);
    const uint64_t e0 = (uint64_t)k->sample_elem0; /* the plan's first sample (ct_kargs.sample_elem0) */
    for (int64_t i = 0; i < n; i++)
        y[i] = r[i] +
               (ct_dropout_keep(k->seed, (uint64_t)k->node->ia[0], k->step, e0 + (uint64_t)i, p) ? a[i] * scale : 0.0f);
    return CT_OK;
}

/* in: dy, fwd (BN_RELU; in[1] is that node's output shape, its aux the bits) */
ct_status ct_k_relu_mask_bwd_ref(ct_kargs *k) {
    const float *dy = k->in[0].data;
    float *dx = k->out.data;
    const uint8_t *bits = ct_bn_relu_bits(k->in_aux[1], k->in[1].shape[1]);
    int64_t n = ct_tensor_numel(&k->out);
    for (int64_t i = 0; i < n; i++) dx[i] = dy[i] * ((bits[i >> 3] >> (i & 7)) & 1u ? 1.0f : 0.0f);
    return CT_OK;
}

/* ---- GEMM with a prologue ------------------------------------------------------------------------ */

typedef struct {
    ct_kernel_fn unary, layernorm, gemm;
} pro_kernels;

size_t ct_fused_pro_ws(int64_t numel_x, int64_t rows, int stats) {
    size_t b = ct_align_up((size_t)numel_x * sizeof(float), CT_ALIGN);
    if (stats) b += ct_align_up(2 * (size_t)rows * sizeof(float), CT_ALIGN);
    return b;
}

/* pro(x) into the scratch (shape of x); the layernorm's statistics go to
 * `stats` (NULL: the scratch after pro(x)). pro: ia[pi] kind, ia[pi+1] unary
 * kind; gi/bi: gamma/beta input indexes (-1: none). */
static ct_status run_prologue(ct_kargs *k, const pro_kernels *pk, int pro, int unary_kind, int gi, int bi, float eps,
                              void *stats, ct_tensor *px, char **rest, size_t *rest_bytes) {
    const ct_tensor *x = &k->in[k->node->op == CT_OP_LINEAR_PRO ? 0 : 1];
    if (x->dtype != CT_F32 || k->out.dtype != CT_F32) return CT_E_UNSUPPORTED;
    int64_t n = ct_tensor_numel(x), D = x->shape[x->ndim - 1];
    size_t need = ct_fused_pro_ws(n, n / (D ? D : 1), pro == CT_PRO_LAYERNORM && !stats);
    if (!k->ws || k->ws_bytes < need) return ct_set_error(k->ctx, CT_E_STATE, "%s: scratch of %zu bytes < %zu",
                                                          k->op_name ? k->op_name : "fused op", k->ws_bytes, need);
    *px = ct_tensor_make(k->ws, CT_F32, x->ndim, x->shape);
    size_t used = ct_align_up((size_t)n * sizeof(float), CT_ALIGN);
    ct_node_def nd = *k->node;
    memcpy(nd.shape, x->shape, sizeof nd.shape);
    nd.ndim = x->ndim;
    ct_kargs a = *k;
    a.node = &nd;
    a.in[0] = *x;
    a.out = *px;
    a.ws = (char *)k->ws + used;
    a.ws_bytes = k->ws_bytes - used;
    if (pro == CT_PRO_UNARY) {
        nd.op = CT_OP_UNARY;
        nd.n_in = 1;
        nd.ia[0] = unary_kind;
        CT_TRY(pk->unary(&a));
    } else if (pro == CT_PRO_LAYERNORM) {
        nd.op = CT_OP_LAYERNORM;
        nd.n_in = bi >= 0 ? 3 : 2;
        nd.fa[0] = eps;
        a.in[1] = k->in[gi];
        if (bi >= 0) a.in[2] = k->in[bi];
        if (!stats) {
            stats = a.ws;
            used += ct_align_up(2 * (size_t)(n / (D ? D : 1)) * sizeof(float), CT_ALIGN);
        }
        a.aux = stats;
        CT_TRY(pk->layernorm(&a));
    } else {
        return ct_set_error(k->ctx, CT_E_INVALID_ARG, "fused op: prologue %d is unknown", pro);
    }
    *rest = (char *)k->ws + used;
    *rest_bytes = k->ws_bytes - used;
    return CT_OK;
}

static ct_status linear_pro(ct_kargs *k, const pro_kernels *pk) {
    const ct_node_def *d = k->node;
    int bias = (int)d->ia[2];
    ct_tensor px;
    char *rest;
    size_t rest_bytes;
    CT_TRY(run_prologue(k, pk, (int)d->ia[0], (int)d->ia[1], (int)d->ia[3], (int)d->ia[4], d->fa[0], k->aux, &px,
                        &rest, &rest_bytes));
    ct_node_def nd = *d;
    nd.op = CT_OP_LINEAR;
    nd.n_in = bias >= 0 ? 3 : 2;
    ct_kargs l = *k;
    l.node = &nd;
    l.in[0] = px;
    l.in[1] = k->in[1];
    l.in_wcopy = k->in_wcopy & 2u; /* the weight keeps its place; the bias may move */
    if (bias >= 0) l.in[2] = k->in[bias];
    l.aux = NULL;
    l.ws = rest;
    l.ws_bytes = rest_bytes;
    return pk->gemm(&l);
}

static ct_status matmul_pro(ct_kargs *k, const pro_kernels *pk) {
    const ct_node_def *d = k->node;
    ct_tensor px;
    char *rest;
    size_t rest_bytes;
    CT_TRY(run_prologue(k, pk, (int)d->ia[2], (int)d->ia[3], (int)d->ia[4], (int)d->ia[7], d->fa[0], NULL, &px, &rest,
                        &rest_bytes));
    int64_t D = px.shape[px.ndim - 1];
    ct_tensor v = ct_tensor_make(px.data, CT_F32, 2, (int64_t[]){ct_tensor_numel(&px) / D, D});
    ct_node_def nd = *d;
    nd.op = CT_OP_MATMUL;
    nd.n_in = 2;
    ct_kargs m = *k;
    m.node = &nd;
    m.in[1] = v;
    m.in_wcopy = k->in_wcopy & 1u; /* B is the prologue's output now */
    m.aux = NULL;
    m.ws = rest;
    m.ws_bytes = rest_bytes;
    return pk->gemm(&m);
}

/* in: dy, x: dx = unary_bwd(dy, x), aux = unary(x), by the reference's two kernels */
ct_status ct_k_unary_bwd_keep_ref(ct_kargs *k) {
    const ct_tensor *x = &k->in[1];
    int kind = (int)k->node->ia[0];
    if (kind != CT_UNARY_GELU && kind != CT_UNARY_GELU_TANH && kind != CT_UNARY_SILU) return CT_E_UNSUPPORTED;
    if (x->dtype != CT_F32 || k->in[0].dtype != CT_F32 || k->out.dtype != CT_F32 || !k->aux) return CT_E_UNSUPPORTED;
    ct_node_def nd = *k->node;
    nd.op = CT_OP_UNARY;
    nd.n_in = 1;
    nd.ia[1] = 0;
    ct_kargs a = *k;
    a.node = &nd;
    a.in[0] = *x;
    a.out = ct_tensor_make(k->aux, CT_F32, x->ndim, x->shape);
    a.aux = NULL;
    CT_TRY(ct_k_unary_ref(&a));
    ct_node_def bd = *k->node;
    bd.op = CT_OP_UNARY_BWD;
    bd.ia[1] = 0; /* from x */
    ct_kargs b = *k;
    b.node = &bd;
    /* unary_bwd+colsum (ia[7]): the column sums' partials after the activation */
    b.aux = bd.ia[7] ? (char *)k->aux + ct_keep_colsum_offset(ct_tensor_numel(x)) : NULL;
    return ct_k_unary_bwd_ref(&b);
}

/* in: a, v (a UNARY_BWD_KEEP): matmul(a, v's aux viewed (rows, last dim)) */
static ct_status matmul_aux(ct_kargs *k, ct_kernel_fn gemm) {
    const ct_tensor *v = &k->in[1];
    if (!k->in_aux[1] || v->dtype != CT_F32 || v->ndim < 1) return CT_E_UNSUPPORTED;
    int64_t D = v->shape[v->ndim - 1];
    ct_node_def nd = *k->node;
    nd.op = CT_OP_MATMUL;
    ct_kargs m = *k;
    m.node = &nd;
    m.in[1] = ct_tensor_make(k->in_aux[1], CT_F32, 2, (int64_t[]){ct_tensor_numel(v) / (D ? D : 1), D});
    m.in_aux[1] = NULL;
    return gemm(&m);
}

ct_status ct_k_matmul_aux_ref(ct_kargs *k) { return matmul_aux(k, ct_k_matmul_ref); }
ct_status ct_k_matmul_aux_onednn(ct_kargs *k) { return matmul_aux(k, ct_k_matmul_onednn); }

static const pro_kernels k_ref_linear = {ct_k_unary_ref, ct_k_layernorm_ref, ct_k_linear_ref};
static const pro_kernels k_ref_matmul = {ct_k_unary_ref, ct_k_layernorm_ref, ct_k_matmul_ref};

ct_status ct_k_linear_pro_ref(ct_kargs *k) { return linear_pro(k, &k_ref_linear); }
ct_status ct_k_matmul_pro_ref(ct_kargs *k) { return matmul_pro(k, &k_ref_matmul); }

/* The fast prologue: the best SIMD kernels this context allows. */
static pro_kernels fast(const ct_kargs *k, ct_kernel_fn gemm) {
    ct_isa isa = ct_context_isa(k->ctx);
    if (isa >= CT_ISA_AVX512) return (pro_kernels){ct_k_unary_avx512, ct_k_layernorm_avx512, gemm};
    if (isa >= CT_ISA_AVX2) return (pro_kernels){ct_k_unary_avx2, ct_k_layernorm_avx2, gemm};
    return (pro_kernels){ct_k_unary_ref, ct_k_layernorm_ref, gemm};
}

/* Without oneDNN (CT_ONEDNN=0) the unfused plan runs the activation / the
 * layernorm on a SIMD slot and the GEMM on the reference: the SIMD slots of
 * the fused GEMMs compose exactly that, so the levels stay bit-identical. */
#define PRO_SIMD(isa)                                                                                                  \
    ct_status ct_k_linear_pro_##isa(ct_kargs *k) {                                                                     \
        static const pro_kernels pk = {ct_k_unary_##isa, ct_k_layernorm_##isa, ct_k_linear_ref};                       \
        return linear_pro(k, &pk);                                                                                     \
    }                                                                                                                  \
    ct_status ct_k_matmul_pro_##isa(ct_kargs *k) {                                                                     \
        static const pro_kernels pk = {ct_k_unary_##isa, ct_k_layernorm_##isa, ct_k_matmul_ref};                       \
        return matmul_pro(k, &pk);                                                                                     \
    }
PRO_SIMD(avx2)
PRO_SIMD(avx512)

ct_status ct_k_linear_pro_onednn(ct_kargs *k) {
    pro_kernels pk = fast(k, ct_k_linear_onednn);
    return linear_pro(k, &pk);
}

ct_status ct_k_matmul_pro_onednn(ct_kargs *k) {
    pro_kernels pk = fast(k, ct_k_matmul_onednn);
    return matmul_pro(k, &pk);
}

/* ---- GEMM with a relu epilogue, add + relu -------------------------------------------------------- */

static ct_status gemm_relu(ct_kargs *k, ct_kernel_fn linear, ct_kernel_fn conv, ct_kernel_fn unary) {
    if (k->out.dtype != CT_F32) return CT_E_UNSUPPORTED;
    ct_node_def nd = *k->node;
    nd.op = (ct_op)k->node->ia[6];
    ct_kargs g = *k;
    g.node = &nd;
    CT_TRY(nd.op == CT_OP_CONV2D ? conv(&g) : linear(&g));
    ct_node_def rd = *k->node;
    rd.op = CT_OP_UNARY;
    rd.n_in = 1;
    rd.ia[0] = CT_UNARY_RELU;
    ct_kargs r = *k;
    r.node = &rd;
    r.in[0] = k->out; /* in place: elementwise */
    return unary(&r);
}

ct_status ct_k_gemm_relu_ref(ct_kargs *k) { return gemm_relu(k, ct_k_linear_ref, ct_k_conv2d_ref, ct_k_unary_ref); }

ct_status ct_k_gemm_relu_onednn(ct_kargs *k) {
    ct_isa isa = ct_context_isa(k->ctx);
    return gemm_relu(k, ct_k_linear_onednn, ct_k_conv2d_onednn,
                     isa >= CT_ISA_AVX512 ? ct_k_unary_avx512 : isa >= CT_ISA_AVX2 ? ct_k_unary_avx2 : ct_k_unary_ref);
}

/* relu(a + b): the float sum, then relu as the reference */
ct_status ct_k_add_relu_ref(ct_kargs *k) {
    const float *a = k->in[0].data, *b = k->in[1].data;
    float *y = k->out.data;
    int64_t n = ct_tensor_numel(&k->out);
    for (int64_t i = 0; i < n; i++) {
        float v = a[i] + b[i];
        y[i] = v > 0 || isnan(v) ? v : 0.0f;
    }
    return CT_OK;
}

/* add+layernorm: s = a + b (in[2]'s buffer; rounded as the unfused add's 16-bit output), then
 * the reference layernorm of s with gamma, beta (in[3], in[4]) */
ct_status ct_k_add_layernorm_ref(ct_kargs *k) {
    const float *a = k->in[0].data, *b = k->in[1].data;
    float *s = k->in[2].data;
    int64_t n = ct_tensor_numel(&k->out);
    if (ct_tensor_numel(&k->in[0]) != n || ct_tensor_numel(&k->in[1]) != n || ct_tensor_numel(&k->in[2]) != n)
        return ct_set_error(k->ctx, CT_E_SHAPE, "add+layernorm: the operands, the sum and the output differ in size");
    ct_dtype dt = (ct_dtype)k->node->ia[0];
    for (int64_t i = 0; i < n; i++) {
        float v = a[i] + b[i];
        if (dt == CT_BF16) v = ct_bf16_to_f32(ct_f32_to_bf16(v));
        else if (dt == CT_F16) v = ct_f16_to_f32(ct_f32_to_f16(v));
        s[i] = v;
    }
    ct_node_def ln = *k->node; /* the layernorm's node: in x, gamma[, beta] */
    ln.op = CT_OP_LAYERNORM;
    ln.n_in = k->node->n_in - 2;
    ct_kargs lk = *k;
    lk.node = &ln;
    for (int j = 0; j < ln.n_in; j++) {
        lk.in[j] = k->in[j + 2];
        lk.in_aux[j] = k->in_aux[j + 2];
    }
    return ct_k_layernorm_ref(&lk);
}

/* ADD_LN_SUM: its value is written by the ADD_LAYERNORM that reads it */
ct_status ct_k_nothing(ct_kargs *k) {
    (void)k;
    return CT_OK;
}
