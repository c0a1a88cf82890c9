/* src/kernels/kernels.h - every kernel of every op, by slot.
 *
 * ct_k_<op>_ref     plain C reference (src/kernels/ref/)   - the ground truth
 * ct_k_<op>_avx2    SIMD body compiled for AVX2+FMA        (src/kernels/simd/)
 * ct_k_<op>_avx512  the same body compiled for AVX-512     (src/kernels/simd/)
 * ct_k_<op>_onednn  oneDNN primitive                       (src/kernels/onednn/)
 *
 * A fast kernel may return CT_E_UNSUPPORTED for a configuration it does not
 * cover; the executor then falls back to the next kernel for that node. */
#ifndef CT_KERNELS_H
#define CT_KERNELS_H

#include <string.h>

#include "core/ir_types.h"

#define CT_KERNEL_OPS(X)                                                                  \
    X(matmul) X(linear) X(conv2d) X(conv2d_bwd_data) X(conv2d_bwd_weight)                 \
    X(maxpool2d) X(maxpool2d_bwd) X(avgpool2d) X(avgpool2d_bwd)                           \
    X(batchnorm) X(batchnorm_bwd_data) X(batchnorm_bwd_gamma)                             \
    X(layernorm) X(layernorm_bwd_data) X(layernorm_bwd_gamma)                             \
    X(unary) X(unary_bwd) X(scale) X(binary) X(dropout)                                   \
    X(sum) X(broadcast_to) X(sum_to)                                                      \
    X(transpose) X(concat) X(slice) X(slice_bwd)                                          \
    X(softmax) X(log_softmax) X(softmax_bwd) X(log_softmax_bwd)                           \
    X(cross_entropy) X(cross_entropy_bwd) X(embedding) X(embedding_bwd)                   \
    X(attention) X(attention_bwd) X(bn_relu) X(relu_mask_bwd) X(dropout_add) X(add_relu) \
    X(unary_bwd_keep) X(add_layernorm)

#define CT_DECL_REF(op) ct_status ct_k_##op##_ref(ct_kargs *k);
#define CT_DECL_SIMD(op) ct_status ct_k_##op##_avx2(ct_kargs *k); ct_status ct_k_##op##_avx512(ct_kargs *k);
/* dtype conversion (CT_OP_CAST): one kernel for every slot, ct_convert picks the ISA */
ct_status ct_k_cast(ct_kargs *k);
/* A node whose value another node's kernel writes (CT_OP_ADD_LN_SUM): every slot, does nothing. */
ct_status ct_k_nothing(ct_kargs *k);
/* the column sums' reduction (CT_OP_COLSUM, kernels/ref/reduce.c): one kernel for every slot (tiny work) */
ct_status ct_k_colsum(ct_kargs *k);
/* A reference column-sum producer's set `bit` (CT_COLSUM_*) of its aux, zeroed: piece 0's
 * partials, to be filled; ct_colsum_ref_rows fills it with the column sums of y (the
 * producer's output shape, values rounded to rdt first). */
double *ct_colsum_ref_set(const ct_kargs *k, int bit);
void ct_colsum_ref_rows(const ct_kargs *k, int bit, const float *y, ct_dtype rdt);

CT_KERNEL_OPS(CT_DECL_REF)
CT_KERNEL_OPS(CT_DECL_SIMD)

/* Swin's window bias (reference only: a gather of a small table). */
ct_status ct_k_window_bias_ref(ct_kargs *k);
ct_status ct_k_window_bias_bwd_ref(ct_kargs *k);

/* The vocabulary-parallel cross entropy (kernels/ref/cross_entropy_vp.c): the
 * local steps of the forward, whose kernel (graph/tp_kernels.c) runs them with
 * the tensor group's allreduces between (aux: 4 x rows doubles), and the
 * backward (no collective). */
ct_status ct_ce_vp_check_labels(ct_kargs *k, int64_t *count);
void ct_ce_vp_local_max(const ct_kargs *k, double *aux);  /* aux[r] <- this rank's row max          */
void ct_ce_vp_local_sums(const ct_kargs *k, double *aux); /* after the max's allreduce: the sums    */
float ct_ce_vp_loss(const ct_kargs *k, double *aux, int64_t count); /* after the sums' allreduce */
ct_status ct_k_cross_entropy_vp_bwd_ref(ct_kargs *k);

/* oneDNN kernels (matmul family and convolutions). */
ct_status ct_k_matmul_onednn(ct_kargs *k);
ct_status ct_k_linear_onednn(ct_kargs *k);
ct_status ct_k_conv2d_onednn(ct_kargs *k);
ct_status ct_k_conv2d_bwd_data_onednn(ct_kargs *k);
ct_status ct_k_conv2d_bwd_weight_onednn(ct_kargs *k);
/* Attention with BF16 I/O whose products run on oneDNN's BF16 matmul (AMX
 * tiles or AVX512-BF16); any other I/O declines (the SIMD kernels run). */
ct_status ct_k_attention_onednn(ct_kargs *k);
ct_status ct_k_attention_bwd_onednn(ct_kargs *k);
void ct_onednn_cache_free(void *cache);
/* oneDNN's name of the implementation a node's cached primitive runs
 * ("brg:avx512_core_amx", "gemm:jit", "jit_bf16:avx512_core"), NULL before
 * its first run. Valid while the cache lives. */
const char *ct_onednn_cache_impl(const void *cache);
/* What a node's oneDNN cache keeps between calls (a weight copy packed once, CT_ONEDNN_PACK_WEIGHTS=1):
 * its bytes and how many times it was packed; 0 and 0 for none or no cache. */
void ct_onednn_cache_kept(const void *cache, size_t *bytes, uint64_t *fills);

/* Fused ops (kernels/fused.c): GEMM with a prologue, reference and oneDNN
 * (the prologue on the best SIMD kernels). Helpers shared with simd/fused.c. */
ct_status ct_k_linear_pro_ref(ct_kargs *k);
ct_status ct_k_linear_pro_onednn(ct_kargs *k);
ct_status ct_k_matmul_pro_ref(ct_kargs *k);
ct_status ct_k_matmul_pro_onednn(ct_kargs *k);
ct_status ct_k_linear_pro_avx2(ct_kargs *k);   /* SIMD prologue, reference GEMM (no oneDNN) */
ct_status ct_k_linear_pro_avx512(ct_kargs *k);
ct_status ct_k_matmul_pro_avx2(ct_kargs *k);
ct_status ct_k_matmul_pro_avx512(ct_kargs *k);
ct_status ct_k_matmul_aux_ref(ct_kargs *k);
ct_status ct_k_matmul_aux_onednn(ct_kargs *k);
ct_status ct_k_gemm_relu_ref(ct_kargs *k);
ct_status ct_k_gemm_relu_onednn(ct_kargs *k);
void ct_fused_relu_pack_ref(float *y, uint8_t *bits, int64_t n, int nth);
/* the same on 16-bit values of dtype dt (CT_BF16 or CT_F16) */
void ct_fused_relu_pack_lp(uint16_t *y, uint8_t *bits, int64_t n, int nth, ct_dtype dt);
/* the same 16 values at a time (simd/fused.c), bit for bit */
void ct_k_relu_pack_lp_avx2(uint16_t *y, uint8_t *bits, int64_t n, int nth, ct_dtype dt);
void ct_k_relu_pack_lp_avx512(uint16_t *y, uint8_t *bits, int64_t n, int nth, ct_dtype dt);
/* batchnorm with `bn`, then relu in place and the mask bits; relu_pack_lp
 * (NULL: none) handles BF16 / FP16 I/O, else only FP32 is taken */
ct_status ct_fused_bn_relu(ct_kargs *k, ct_kernel_fn bn, void (*relu_pack)(float *, uint8_t *, int64_t, int),
                           void (*relu_pack_lp)(uint16_t *, uint8_t *, int64_t, int, ct_dtype));
/* Scratch of a GEMM prologue: pro(x) (numel_x floats) and, with stats, a
 * layernorm's mean/invstd of `rows` rows. */
size_t ct_fused_pro_ws(int64_t numel_x, int64_t rows, int stats);

/* Bulk dtype conversions: ref/convert.c and simd/convert.c, dispatch in
 * kernels/convert.c. Bit-identical to the scalar functions of tensor.h. */
#define CT_DECL_CVT(isa)                                                          \
    void ct_cvt_f32_to_bf16_##isa(const float *src, uint16_t *dst, size_t n);    \
    void ct_cvt_bf16_to_f32_##isa(const uint16_t *src, float *dst, size_t n);    \
    void ct_cvt_f32_to_f16_##isa(const float *src, uint16_t *dst, size_t n);     \
    void ct_cvt_f16_to_f32_##isa(const uint16_t *src, float *dst, size_t n);
CT_DECL_CVT(ref)
CT_DECL_CVT(avx2)
CT_DECL_CVT(avx512)

/* BF16 I/O of the SIMD kernels (simd/simd_lowp.h): elements of one FP32
 * tile a kernel converts a BF16 row / plane / chunk into (32 KiB); longer
 * rows and planes decline. */
#define CT_BF16_TILE 8192

/* Workspace a SIMD pooling kernel with BF16 I/O needs on nt threads for
 * planes of plane_in and plane_out elements: 0 when both fit its stack tiles,
 * else one FP32 plane pair per thread (ct_ws_pool sizes it at compile time,
 * simd/pool.c uses it or declines) */
static inline size_t ct_pool_bf16_ws_bytes(int64_t plane_in, int64_t plane_out, int nt) {
    if (plane_in <= CT_BF16_TILE && plane_out <= CT_BF16_TILE) return 0;
    return (size_t)(nt > 0 ? nt : 1) * (size_t)(plane_in + plane_out) * sizeof(float);
}

/* The direct weight gradient of a convolution (simd/conv.c) covers one
 * group, stride 1, 1 or 2 input channels and kernels up to 8 wide: a
 * network's first layer on gray images, where oneDNN's plain layout runs a
 * thin im2col GEMM and its blocked one pads the channels (measured: 9-10 ms
 * vs ~1 ms for the CNN's 1 -> 32 layer). The op table picks it before oneDNN
 * exactly for these (ct_op_info.simd_first); it declines anything else. */
static inline int ct_conv_direct_bwd_weight_ok(int64_t C, int64_t G, int64_t s, int64_t KH, int64_t KW) {
    return G == 1 && s == 1 && C >= 1 && C <= 2 && KW >= 1 && KW <= 8 && KH >= 1 && KH <= 8;
}
/* Its workspace: the double sums of every weight (acc), then one
 * zero-padded input image (C planes of (OH + (KH-1)d) x (OW + (KW-1)d),
 * image) per thread. */
static inline size_t ct_conv_direct_acc_bytes(int64_t OC, int64_t C, int64_t KH, int64_t KW) {
    return ct_align_up((size_t)(OC * C * KH * KW) * sizeof(double), CT_ALIGN);
}
static inline size_t ct_conv_direct_image_bytes(int64_t C, int64_t KH, int64_t KW, int64_t OH, int64_t OW, int64_t d) {
    return ct_align_up((size_t)(C * (OH + (KH - 1) * d) * (OW + (KW - 1) * d)) * sizeof(float), CT_ALIGN);
}

/* Shared helpers ---------------------------------------------------------------- */

/* 1 where the CPU has AVX512-BF16 (set by ct_cpu_probe, core/cpu.c): the AVX-512 kernels' BF16 stores then round
 * with vcvtneps2bf16 (simd_lowp.h vh_f32_to_bf16), the integer rounding's bits; 0: the integer rounding (tests set
 * it to 0 to run that path on such a CPU) */
extern int ct_simd_bf16_cvt;

/* Column sums over the rows of an (R, D) view (a layernorm's dgamma / dbeta,
 * a linear's bias gradient): the SIMD kernels split the rows into
 * ct_colsum_pieces(R, D) contiguous pieces, piece p = rows [R*p/P, R*(p+1)/P),
 * each summed into its own double partials (float runs of a few rows
 * flushed into them), then add the pieces' partials in order. The split
 * depends on the shape only (results do not depend on the thread count),
 * and every kernel that sums columns uses it: layernorm_bwd_gamma, sum's
 * column path, and the fused producers (layernorm_bwd+colsum,
 * unary_bwd+colsum) that leave the pieces' partials in their aux for a
 * COLSUM node to add. At most 64 pieces of at least 64 rows, and at most
 * 2^17 partials (1 MiB). */
#define CT_COLSUM_MAX_PARTIALS 131072
/* the widest rows a fused producer sums (its float run sums live on the stack) */
#define CT_COLSUM_MAX_D 4096
/* UNARY_BWD_KEEP with column sums (unary_bwd+colsum on the GELU backward of gelu+linear): its aux is
 * the kept activation (n floats: what MATMUL_AUX reads), then the sums' partials from this byte offset
 * (a COLSUM node with ia[1] = 1 skips it) */
/* EMBEDDING_BWD with an addend (fusion embedding_bwd+add, in[2] = a): its scratch is one byte per
 * position (CT_EMB_FIRST: the first position of its row, CT_EMB_SKIP: no row) and a bitmap of the
 * table's V rows. In place (ia[3] = 1: a is the output's own buffer, the planner put the LM head's
 * weight gradient in the parameter's gradient slot) it holds instead of the bitmap each row's
 * accumulator (int32, V; -1: none), each position's accumulator (int32, n), the accumulators' rows
 * (int64) and the accumulators (D floats each), one per distinct row: at most min(n, V). */
enum { CT_EMB_NEXT = 0, CT_EMB_FIRST = 1, CT_EMB_SKIP = 2 };
typedef struct {
    size_t seen, rowslot, slot, rows, acc, total; /* byte offsets; total: the size */
} ct_emb_ws;
static inline ct_emb_ws ct_embedding_bwd_ws(int64_t n, int64_t V, int64_t D, int inplace) {
    ct_emb_ws w;
    size_t u = (size_t)(n < V ? n : V), a8 = ((size_t)n + 7) & ~(size_t)7;
    w.seen = w.rowslot = a8;
    if (!inplace) {
        w.slot = w.rows = w.acc = w.total = a8 + ((size_t)V + 63) / 64 * sizeof(uint64_t);
        return w;
    }
    w.slot = w.rowslot + (((size_t)V * sizeof(int32_t) + 63) & ~(size_t)63);
    w.rows = w.slot + (((size_t)n * sizeof(int32_t) + 63) & ~(size_t)63);
    w.acc = w.rows + ((u * sizeof(int64_t) + 63) & ~(size_t)63);
    w.total = w.acc + u * (size_t)D * sizeof(float);
    return w;
}
/* The table's row of an id: the id, or in rows mode (ia[1], ct_embedding_rows) id - ia[0], -1 outside. */
static inline int64_t ct_embedding_row(const ct_node_def *d, int32_t id, int64_t V) {
    if (!d->ia[1]) return id;
    int64_t r = (int64_t)id - d->ia[0];
    return r >= 0 && r < V ? r : -1;
}
/* Fills an embedding_bwd+add's scratch (layout L) for ids already checked: each position's mark, and
 * in place its accumulator and each accumulator's row; returns the number of accumulators. */
static inline int64_t ct_embedding_bwd_marks(const ct_node_def *d, const int32_t *ids, int64_t n, int64_t V,
                                             void *ws, ct_emb_ws L) {
    uint8_t *first = ws;
    uint64_t *seen = (uint64_t *)(void *)((char *)ws + L.seen);
    int32_t *rowslot = (int32_t *)(void *)((char *)ws + L.rowslot), *slot = (int32_t *)(void *)((char *)ws + L.slot);
    int64_t *rows = (int64_t *)(void *)((char *)ws + L.rows), u = 0;
    const int inplace = d->ia[3] != 0;
    if (inplace)
        for (int64_t v = 0; v < V; v++) rowslot[v] = -1;
    else
        memset(seen, 0, ((size_t)V + 63) / 64 * sizeof *seen);
    for (int64_t i = 0; i < n; i++) {
        int64_t r = ct_embedding_row(d, ids[i], V);
        if (r < 0) {
            first[i] = CT_EMB_SKIP;
        } else if (inplace) {
            first[i] = rowslot[r] < 0 ? CT_EMB_FIRST : CT_EMB_NEXT;
            if (rowslot[r] < 0) rows[u] = r, rowslot[r] = (int32_t)u++;
            slot[i] = rowslot[r];
        } else {
            first[i] = (seen[r / 64] >> (r % 64) & 1) ? CT_EMB_NEXT : CT_EMB_FIRST;
            seen[r / 64] |= (uint64_t)1 << (r % 64);
        }
    }
    return u;
}
static inline size_t ct_keep_colsum_offset(int64_t n) { return ((size_t)n * sizeof(float) + 63) & ~(size_t)63; }
static inline int64_t ct_colsum_pieces(int64_t R, int64_t D) {
    int64_t p = R / 64;
    if (p > 64) p = 64;
    if (D > 0 && p > CT_COLSUM_MAX_PARTIALS / D) p = CT_COLSUM_MAX_PARTIALS / D;
    return p < 1 ? 1 : p;
}

/* Batchnorm with a small spatial size (S < the vector width: (M, C) inputs,
 * BatchNorm1d, or channels-last activations reshaped to (N*H*W, C)): the SIMD
 * kernels view x as (N, W = C*S) rows and split the rows into
 * ct_colsum_pieces(N, W) fixed pieces (the shape decides, not the thread
 * count), each summed into its own double partials per column, then add the
 * pieces' partials in order (simd/norm.c's rows path). Its workspace: two
 * sets of P x W partials, two of W column totals (W padded to a multiple of
 * 16), four FP32 column vectors.
 * 0 (no rows path) for planes of 16 elements or more. */
static inline size_t ct_bn_rows_ws_bytes(int64_t N, int64_t C, int64_t S) {
    if (S >= 16 || N < 1 || C < 1 || S < 1) return 0;
    int64_t W = C * S, Wp = (W + 15) & ~(int64_t)15; /* the doubles' rows padded to whole vectors */
    return (size_t)(2 * ct_colsum_pieces(N, W) + 2) * (size_t)Wp * sizeof(double) + 4 * (size_t)W * sizeof(float);
}

/* batchnorm+relu's relu mask bits (one per output element, in element order) in its aux, after
 * batchnorm's statistics (mean[C], invstd[C]): what relu_mask_bwd and a batchnorm_bwd_data with ia[5]
 * read */
static inline uint8_t *ct_bn_relu_bits(void *aux, int64_t C) { return (uint8_t *)aux + 2 * (size_t)C * sizeof(float); }

/* Dropout keep decision for element i: the same in forward and backward, on
 * every ISA and thread count. */
static inline int ct_dropout_keep(uint64_t seed, uint64_t stream, uint64_t step, uint64_t i, float p) {
    return ct_rand_uniform(seed, (stream << 32) ^ step, i) >= p;
}

/* The same decisions for the 4 elements i..i+3 (i a multiple of 4) from one
 * Philox call: exactly ct_dropout_keep for each of them. */
static inline void ct_dropout_keep4(uint64_t seed, uint64_t stream, uint64_t step, uint64_t i, float p, int keep[4]) {
    uint32_t r[4];
    ct_philox(seed, (stream << 32) ^ step, i >> 2, r);
    for (int t = 0; t < 4; t++) keep[t] = (float)(r[t] >> 8) * (1.0f / 16777216.0f) >= p;
}

/* Row-major strides for an out-of-graph shape. */
static inline void ct_contig_strides(int ndim, const int64_t *shape, int64_t *strides) {
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        strides[i] = s;
        s *= shape[i];
    }
}

/* Strides of `in` aligned to `out`'s dims for NumPy broadcasting: 0 where
 * `in` has size 1 (or lacks the dim). */
static inline void ct_bcast_strides(const ct_tensor *in, const ct_tensor *out, int64_t *st) {
    int64_t cs[CT_MAX_DIMS] = {0};
    ct_contig_strides(in->ndim, in->shape, cs);
    int off = out->ndim - in->ndim;
    for (int i = 0; i < out->ndim; i++) {
        int j = i - off;
        st[i] = (j < 0 || in->shape[j] == 1) ? 0 : cs[j];
    }
}

/* Offset into a broadcast input for flat output index i. */
static inline int64_t ct_bcast_offset(int64_t i, const ct_tensor *out, const int64_t *st) {
    int64_t off = 0;
    for (int d = out->ndim - 1; d >= 0; d--) {
        int64_t q = i % out->shape[d];
        i /= out->shape[d];
        off += q * st[d]; /* NOLINT(clang-analyzer-core.UndefinedBinaryOperatorResult): d < ndim <= CT_MAX_DIMS */
    }
    return off;
}

/* Attention scratch: one slice per thread of ct_attention_ws_per_thread(T, Dh)
 * bytes (64-byte multiple), enough for the reference and the SIMD kernels.
 * The SIMD kernels' slice (simd/attention.c, att_slice): the T x T scores
 * and dP / dS with rows ct_attention_ld(T) floats apart, K^T and V^T packed
 * in panels of keys (ct_attention_tp(T) keys x Dh each), the key bias, the
 * rows' softmax factors, and 7 T x Dh FP32 rows (the heads' q, k, v, dy as contiguous B operands; with
 * 16-bit I/O also y and the outputs). */
static inline int64_t ct_attention_ld(int64_t T) {
    /* an odd number of cache lines: the column strips of P and dS (the A of
     * dV = P^T dO, dK = dS^T Q) spread over every L1 set; with T = 256 the
     * rows were 1 KiB apart and a strip fell into 4 of the 64 sets */
    int64_t ld = (T + 15) / 16 * 16;
    return (ld / 16) % 2 ? ld : ld + 16;
}
static inline int64_t ct_attention_tp(int64_t T) { return (T + 63) / 64 * 64; }
static inline size_t ct_attention_ws_per_thread(int64_t T, int64_t Dh) {
    size_t simd = (size_t)(2 * T * ct_attention_ld(T) + 2 * Dh * ct_attention_tp(T) + 2 * T + 7 * T * Dh) * sizeof(float);
    size_t ref = (size_t)(2 * T * Dh + Dh + T) * sizeof(double);
    size_t b = simd > ref ? simd : ref;
    return (b + 63) / 64 * 64;
}

/* The oneDNN attention with BF16 I/O (onednn/attention.c) works on row
 * blocks of CT_ATT_ROWS queries: dense BF16 copies of the head's q, k, v, dy
 * (4 T x Dh), one block's scores and dP in FP32 and P, dS in BF16
 * (CT_ATT_ROWS x T each), the block's output rows (BF16), dV and dK
 * accumulated in FP32 (2 T x Dh), the key bias and the block's row sums. */
#define CT_ATT_ROWS 64
enum { CT_ATT_Q, CT_ATT_K, CT_ATT_V, CT_ATT_DO, CT_ATT_S, CT_ATT_DP, CT_ATT_P16, CT_ATT_DS16, CT_ATT_OB,
       CT_ATT_DV, CT_ATT_DK, CT_ATT_KB, CT_ATT_DI, CT_ATT_PARTS };
/* Byte offsets of the parts in one thread's slice (off may be NULL); returns its size. */
static inline size_t ct_attention_dnnl_layout(int64_t T, int64_t Dh, size_t *off) {
    size_t rb = (size_t)(T < CT_ATT_ROWS ? T : CT_ATT_ROWS), t = (size_t)T, dh = (size_t)Dh;
    const size_t parts[CT_ATT_PARTS] = {t * dh * 2, t * dh * 2, t * dh * 2, t * dh * 2, rb * t * 4, rb * t * 4,
                                        rb * t * 2, rb * t * 2, rb * dh * 2, t * dh * 4, t * dh * 4, t * 4, rb * 4};
    size_t b = 0;
    for (int i = 0; i < CT_ATT_PARTS; i++) {
        if (off) off[i] = b;
        b += (parts[i] + 63) / 64 * 64;
    }
    return b;
}
static inline size_t ct_attention_ws_per_thread_dnnl(int64_t T, int64_t Dh) { return ct_attention_dnnl_layout(T, Dh, NULL); }


/* Row helpers of the oneDNN BF16 attention, per ISA (simd/attention.c); att_colsum_rows: fusion
 * attention_bwd+colsum's column sums of a (batch, head) task's rows of one part of d_qkv, and
 * att_colsum_cross those of the pieces across two batches, after the tasks (both kernels). */
#define CT_DECL_ATT_ROWS(isa)                                                                                     \
    void ct_k_att_softmax_rows_##isa(float *s, uint16_t *p16, int64_t ld, int64_t m, int64_t i0, int causal,    \
                                     const float *kb, float *lse);                                              \
    void ct_k_att_prob_rows_##isa(float *s, uint16_t *p16, int64_t ld, int64_t m, int64_t i0, int causal,       \
                                  const float *kb, const float *lse);                                           \
    void ct_k_att_dscore_rows_##isa(const float *p, const float *dp, uint16_t *ds16, int64_t ld, int64_t m,     \
                                    int64_t i0, int causal, const float *di);                                   \
    void ct_k_att_rowdot_bf16_##isa(const uint16_t *x, int64_t ldx, const uint16_t *y, int64_t ldy,             \
                                    int64_t rows, int64_t len, float *out);                                     \
    void ct_k_att_colsum_rows_##isa(const ct_kargs *k, int64_t b, int part, int64_t h, const void *src,        \
                                    ct_dtype sdt, int64_t lds, int64_t lo, int64_t hi, float *fo);             \
    void ct_k_att_colsum_cross_##isa(const ct_kargs *k);
CT_DECL_ATT_ROWS(avx2)
CT_DECL_ATT_ROWS(avx512)

/* BF16 products on AMX tiles (simd/amx.c; AVX-512 build only: the caller checks the CPU's amx_bf16 and the
 * kernel's permission). B operands as pairs: word [r][j] = B[2r][j] | B[2r + 1][j] << 16. */
void ct_amx_tiles_config(void);
void ct_amx_tiles_release(void);
void ct_amx_gemm_bf16(int64_t M, int64_t N, int64_t K, const uint16_t *a, int64_t lda, const uint32_t *b, int64_t ldb,
                      float *c, int64_t ldc, int accumulate);
void ct_amx_pairs(const uint16_t *x, int64_t ldx, int64_t rows, int64_t cols, uint32_t *out, int64_t ldo);
void ct_amx_pairs_t(const uint16_t *x, int64_t ldx, int64_t rows, int64_t cols, uint32_t *out, int64_t ldo);
void ct_amx_scale(float *x, int64_t ldx, int64_t rows, int64_t cols, float s);
void ct_amx_scale_bf16_pow2(uint16_t *x, int64_t n, float s);
void ct_amx_transpose16(const uint16_t *x, int64_t ldx, int64_t rows, int64_t cols, uint16_t *out, int64_t ldo);
void ct_amx_transpose32(const float *x, int64_t ldx, int64_t rows, int64_t cols, float s, float *out, int64_t ldo);

/* C = op(A) op(B) (+ bias) on AMX tiles, on every thread of the call (the BF16 linears and matmuls,
 * onednn/matmul.c): A M x K BF16 rows or (ta) K x M (lda), B K x N BF16 rows or (tb) N x K (ldb), bias N values
 * (F32 or BF16; not with ta) or NULL, C M x N (ldc) in BF16 or F32; any sizes. scratch: ct_amx_matmul_scratch
 * bytes (B or A packed as pairs, a transposed copy of the other where needed, each thread's padded block, tail
 * and tile sums). */
typedef struct {
    int64_t M, N, K;
    const uint16_t *a;
    int64_t lda;
    int ta;
    const uint16_t *b;
    int64_t ldb;
    int tb;
    const void *bias;
    ct_dtype bias_dt;
    void *c;
    int64_t ldc;
    ct_dtype c_dt;
    int nthreads;
} ct_amx_mm;
size_t ct_amx_matmul_scratch(const ct_amx_mm *p); /* from the sizes, ta, tb and nthreads */
void ct_amx_matmul_bf16(const ct_amx_mm *p, void *scratch);

/* The BF16 attention's products on AMX tiles (onednn/attention.c, where the CPU has AMX and Dh is a multiple of
 * 32): rows and keys padded to Tp = T rounded up to 32 (zero rows; the padded keys masked), blocks of up to
 * CT_AMX_ROWS queries. Dense q, dy (Tp x Dh) and their transposes (Dh x Tp), k and v as read (Tp x Dh), K^T and
 * V^T as pairs (Dh / 2 x Tp words; the B of Q K^T and dO V^T), K and V as pairs (Tp / 2 x Dh; the B of P V and
 * dS K); a block's S, dP (FP32), P, dS (BF16, plain and as pairs), its output rows (FP32); dV^T, dK^T
 * accumulated (Dh x Tp FP32) and dV, dK (Tp x Dh FP32), the key bias, the block's row sums. */
enum { CT_AMX_Q, CT_AMX_DO, CT_AMX_QT, CT_AMX_DOT, CT_AMX_KR, CT_AMX_VR, CT_AMX_KT, CT_AMX_VT, CT_AMX_KP, CT_AMX_VP,
       CT_AMX_S, CT_AMX_DP, CT_AMX_P16, CT_AMX_PP, CT_AMX_DS16, CT_AMX_DSP, CT_AMX_OB, CT_AMX_DVT, CT_AMX_DKT,
       CT_AMX_DV, CT_AMX_DK, CT_AMX_KB, CT_AMX_DI, CT_AMX_PARTS };
#define CT_AMX_ROWS 32 /* queries per block: the scores (32 x T FP32) stay in L1 for T <= 256 */
static inline int64_t ct_attention_amx_tp(int64_t T) { return (T + 31) / 32 * 32; }
static inline size_t ct_attention_amx_layout(int64_t T, int64_t Dh, size_t *off) {
    size_t tp = (size_t)ct_attention_amx_tp(T), dh = (size_t)Dh, rb = tp < CT_AMX_ROWS ? tp : CT_AMX_ROWS;
    const size_t parts[CT_AMX_PARTS] = {tp * dh * 2, tp * dh * 2, tp * dh * 2, tp * dh * 2, tp * dh * 2, tp * dh * 2,
                                        tp * dh * 2, tp * dh * 2, tp * dh * 2, tp * dh * 2, rb * tp * 4, rb * tp * 4,
                                        rb * tp * 2, rb * tp * 2, rb * tp * 2, rb * tp * 2, rb * dh * 4, dh * tp * 4,
                                        dh * tp * 4, tp * dh * 4, tp * dh * 4, tp * 4, rb * 4};
    size_t b = 0;
    for (int i = 0; i < CT_AMX_PARTS; i++) {
        if (off) off[i] = b;
        b += (parts[i] + 63) / 64 * 64;
    }
    return b;
}

/* BF16 plans size the scratch for any of the kernels: the SIMD one (its FP32 rows hold the 16-bit I/O
 * converted), the oneDNN one, or its products on AMX tiles. */
static inline size_t ct_attention_ws_per_thread_bf16(int64_t T, int64_t Dh) {
    size_t simd = ct_attention_ws_per_thread(T, Dh);
    size_t dnnl = ct_attention_ws_per_thread_dnnl(T, Dh);
    size_t amx = ct_attention_amx_layout(T, Dh, NULL);
    size_t m = simd > dnnl ? simd : dnnl;
    return m > amx ? m : amx;
}

#endif
