/* src/kernels/onednn/attention.c - multi-head attention with BF16 I/O whose
 * products run on oneDNN's BF16 matmul: brgemm on AMX tiles where the CPU
 * has them, on AVX512-BF16 below (issue 12, item 2). The math is
 * simd/attention.c's, through its row helpers: the softmax, the log-sum-exp
 * and dS = P (dP - rowsum(dO * O)) stay FP32. What changes is what a matrix
 * unit gives: P and dS are rounded to BF16 before their products, which
 * accumulate in FP32.
 *
 * One (batch, head) per task, tasks over the threads. A task runs oneDNN on
 * its own thread: the primitives are created for one thread and executed
 * inside the parallel loop (oneDNN does not nest), each thread with its own
 * stream, memory objects and scratchpad. brgemm reads dense operands only,
 * so a task first copies its head's q, k, v (and dy) into dense (T, Dh)
 * BF16 rows, then walks blocks of CT_ATT_ROWS queries. Block [i0, i0 + m)
 * sees keys [0, n): n = i0 + m with a causal mask (the blocks above the
 * diagonal are skipped), else T.
 *   forward   S = scale Q_b K^T (m x n, FP32), P = softmax(S), O_b = P V
 *   backward  S and P again (from the saved lse), dP = dO_b V^T,
 *             dS = P (dP - di), dQ_b = scale dS K,
 *             dV[0:n] += P^T dO_b, dK[0:n] += scale dS^T Q_b
 * K^T, P^T and dS^T are dense buffers read through transposed strides,
 * which brgemm takes. dV and dK accumulate in FP32 over the blocks, last
 * block first: it sees every key, so it writes them and the others add (a
 * sum post-op); nothing needs zeroing. No T x T tensor exists: a block's
 * scores are CT_ATT_ROWS x T. The workspace layout is
 * ct_attention_dnnl_layout (kernels.h).
 *
 * Kernel selection (graph/kernel_select.c) picks this kernel only for a BF16 plan whose
 * attention I/O is BF16 and where ct_context_lowp_native says oneDNN runs
 * BF16 (ct_op_info.onednn_lowp_only); any other I/O declines. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/onednn/onednn.h"

/* the products; DV0 / DK0: the first (last) block's, which write instead of adding */
enum { K_QK, K_PV, K_DP, K_DQ, K_DV, K_DK, K_DV0, K_DK0, N_KINDS };
enum { A_SRC, A_WEI, A_DST, A_SP, N_ARGS };

typedef struct {
    ct_dnnl base; /* first: the engine, messages and impl name; ct_onednn_cache_free */
    int bwd, causal, nt, nb;
    int amx;  /* the products on AMX tiles (simd/amx.c), no primitives */
    int pow2; /* amx: the scale is a power of two, folded into q (and K's pairs for dQ): exact */
    int64_t B, T, D, H, Dh, rb;
    float scale;
    size_t off[(int)CT_ATT_PARTS > (int)CT_AMX_PARTS ? (int)CT_ATT_PARTS : (int)CT_AMX_PARTS], per_thread, sp_bytes;
    dnnl_primitive_t prims[N_KINDS * 64]; /* [kind][block]; NULL: not used */
    dnnl_memory_t *mems;                  /* [thread][kind][block][N_ARGS] */
    dnnl_stream_t *streams;               /* [thread] */
    void *bound_ws, *bound_sp;            /* what the memory objects point into */
} att_cache;

#define MAX_BLOCKS 64 /* T <= 64 * CT_ATT_ROWS = 4096 */

static dnnl_primitive_t *prim_at(att_cache *c, int kind, int b) { return &c->prims[kind * MAX_BLOCKS + b]; }
static dnnl_memory_t *mem_at(att_cache *c, int t, int kind, int b) {
    return &c->mems[(((size_t)t * N_KINDS + (size_t)kind) * (size_t)c->nb + (size_t)b) * N_ARGS];
}

static void att_free(ct_dnnl *base) {
    att_cache *c = (att_cache *)base;
    for (int i = 0; i < N_KINDS * MAX_BLOCKS; i++)
        if (c->prims[i]) dnnl_primitive_destroy(c->prims[i]);
    if (c->mems) {
        size_t n = (size_t)c->nt * N_KINDS * (size_t)c->nb * N_ARGS;
        for (size_t i = 0; i < n; i++)
            if (c->mems[i]) dnnl_memory_destroy(c->mems[i]);
        ct_free(base->ctx, c->mems);
    }
    if (c->streams) {
        for (int t = 0; t < c->nt; t++)
            if (c->streams[t]) dnnl_stream_destroy(c->streams[t]);
        ct_free(base->ctx, c->streams);
    }
}

static int64_t block_rows(const att_cache *c, int b) { return CT_MIN(c->rb, c->T - (int64_t)b * c->rb); }
static int64_t block_keys(const att_cache *c, int b) { return c->causal ? (int64_t)b * c->rb + block_rows(c, b) : c->T; }

/* Creates the primitive of product `kind` for block b and its memory objects. */
static ct_status make_prim(att_cache *c, int kind, int b) {
    ct_dnnl *d = &c->base;
    const int64_t m = block_rows(c, b), n = block_keys(c, b), Dh = c->Dh;
    int64_t M, N, K, sa[2], sb[2], sc[2];
    ct_dtype cdt = CT_F32;
    float scale = 1.0f;
    int sum = 0;
    switch (kind) {
    case K_QK:
    case K_DP: /* (m x Dh) x (Dh x n): K or V rows read transposed */
        M = m, N = n, K = Dh;
        sa[0] = Dh, sa[1] = 1, sb[0] = 1, sb[1] = Dh, sc[0] = n, sc[1] = 1;
        scale = kind == K_QK ? c->scale : 1.0f;
        break;
    case K_PV:
    case K_DQ: /* (m x n) x (n x Dh) -> BF16 rows */
        M = m, N = Dh, K = n;
        sa[0] = n, sa[1] = 1, sb[0] = Dh, sb[1] = 1, sc[0] = Dh, sc[1] = 1;
        cdt = CT_BF16;
        scale = kind == K_DQ ? c->scale : 1.0f;
        break;
    default: /* DV, DK: (n x m) x (m x Dh), P or dS read transposed, FP32 accumulators */
        M = n, N = Dh, K = m;
        sa[0] = 1, sa[1] = n, sb[0] = Dh, sb[1] = 1, sc[0] = Dh, sc[1] = 1;
        scale = kind == K_DK || kind == K_DK0 ? c->scale : 1.0f;
        sum = kind == K_DV || kind == K_DK;
        break;
    }
    dnnl_memory_desc_t amd, bmd, cmd;
    CT_TRY(ct_dnnl_md(d, &amd, 2, (int64_t[]){M, K}, sa, CT_BF16));
    CT_TRY(ct_dnnl_md(d, &bmd, 2, (int64_t[]){K, N}, sb, CT_BF16));
    CT_TRY(ct_dnnl_md(d, &cmd, 2, (int64_t[]){M, N}, sc, cdt));
    dnnl_matmul_desc_t md;
    CT_DNNL_TRY(d, dnnl_matmul_desc_init(&md, &amd, &bmd, NULL, &cmd), "describing a product");
    dnnl_primitive_attr_t attr;
    CT_DNNL_TRY(d, dnnl_primitive_attr_create(&attr), "creating primitive attributes");
    dnnl_post_ops_t po = NULL;
    dnnl_status_t st = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
    if (st == dnnl_success && scale != 1.0f) st = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &scale);
    if (st == dnnl_success && sum && (st = dnnl_post_ops_create(&po)) == dnnl_success &&
        (st = dnnl_post_ops_append_sum(po, 1.0f)) == dnnl_success)
        st = dnnl_primitive_attr_set_post_ops(attr, po);
    dnnl_primitive_desc_t pd = NULL;
    if (st == dnnl_success) st = dnnl_primitive_desc_create(&pd, &md, attr, d->engine, NULL);
    if (po) dnnl_post_ops_destroy(po);
    dnnl_primitive_attr_destroy(attr);
    CT_DNNL_TRY(d, st, "creating a product");
    const char *impl = NULL;
    if (kind == K_QK && !d->impl[0] && dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success &&
        impl)
        snprintf(d->impl, sizeof d->impl, "%s", impl);
    const dnnl_memory_desc_t *sp = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    size_t spb = sp && sp->ndims > 0 ? dnnl_memory_desc_get_size(sp) : 0;
    dnnl_memory_desc_t spmd;
    if (spb) spmd = *sp;
    st = dnnl_primitive_create(prim_at(c, kind, b), pd);
    dnnl_primitive_desc_destroy(pd);
    if (st != dnnl_success) {
        *prim_at(c, kind, b) = NULL;
        return ct_dnnl_fail(d, st, "creating a product");
    }
    c->sp_bytes = CT_MAX(c->sp_bytes, (spb + 63) & ~(size_t)63);
    const dnnl_memory_desc_t *mds[N_ARGS] = {&amd, &bmd, &cmd, spb ? &spmd : NULL};
    for (int t = 0; t < c->nt; t++)
        for (int a = 0; a < N_ARGS; a++)
            if (mds[a]) CT_DNNL_TRY(d, dnnl_memory_create(&mem_at(c, t, kind, b)[a], mds[a], d->engine, DNNL_MEMORY_NONE),
                                    "creating a memory object");
    return CT_OK;
}

/* The products on AMX tiles, called directly (ct_dnnl_amx_tiles: CT_ATTENTION_AMX) where the head size is a
 * multiple of 32; oneDNN's matmul primitives otherwise (AVX512-BF16, or for comparison). */
static int amx_products(const ct_context *ctx, int64_t Dh) {
    return ct_dnnl_amx_tiles(ctx, "CT_ATTENTION_AMX") && Dh % 32 == 0;
}

static ct_status build(ct_kargs *k, att_cache *c, const ct_tensor *qkv) {
    ct_dnnl *d = &c->base;
    c->bwd = k->node->op == CT_OP_ATTENTION_BWD;
    c->B = qkv->shape[0], c->T = qkv->shape[1], c->D = qkv->shape[2] / 3;
    c->H = k->node->ia[0], c->Dh = c->D / c->H;
    c->scale = k->node->fa[0];
    c->causal = (int)k->node->ia[1];
    c->amx = amx_products(k->ctx, c->Dh);
    c->rb = CT_MIN((int64_t)(c->amx ? CT_AMX_ROWS : CT_ATT_ROWS), c->T);
    c->nb = (int)((c->T + c->rb - 1) / c->rb);
    c->per_thread = c->amx ? ct_attention_amx_layout(c->T, c->Dh, c->off) : ct_attention_dnnl_layout(c->T, c->Dh, c->off);
    char s1[96];
    ct_dnnl_describe(d, ": qkv %s, %lld heads%s (bf16 products%s)", ct_shape_str(qkv->ndim, qkv->shape, s1, sizeof s1),
                     (long long)c->H, c->causal ? ", causal" : "", c->amx ? " on AMX tiles" : "");
    if (!c->amx && c->nb > MAX_BLOCKS)
        return ct_set_error(d->ctx, CT_E_UNSUPPORTED, "oneDNN %s: more than %d query blocks, the next kernel runs instead",
                            d->what, MAX_BLOCKS);
    int64_t tasks = c->B * c->H, nt = k->nthreads > 0 ? k->nthreads : 1;
    nt = CT_MIN(nt, tasks);
    if ((size_t)nt * c->per_thread > k->ws_bytes) nt = (int64_t)(k->ws_bytes / c->per_thread);
    if (nt < 1)
        return ct_set_error(d->ctx, CT_E_UNSUPPORTED, "oneDNN %s: the workspace has no room, the next kernel runs instead",
                            d->what);
    c->nt = (int)nt;
    if (c->amx) { /* no primitives: ctrain's tile products */
        int e;
        c->pow2 = c->scale > 0 && frexpf(c->scale, &e) == 0.5f && e > -100 && e < 100;
        snprintf(d->impl, sizeof d->impl, "ctrain:amx_tiles");
        return CT_OK;
    }
    size_t nm = (size_t)c->nt * N_KINDS * (size_t)c->nb * N_ARGS;
    CT_TRY(ct_alloc(d->ctx, nm * sizeof *c->mems, (void **)&c->mems));
    memset(c->mems, 0, nm * sizeof *c->mems);
    CT_TRY(ct_alloc(d->ctx, (size_t)c->nt * sizeof *c->streams, (void **)&c->streams));
    memset(c->streams, 0, (size_t)c->nt * sizeof *c->streams);
    for (int t = 0; t < c->nt; t++)
        CT_DNNL_TRY(d, dnnl_stream_create(&c->streams[t], d->engine, dnnl_stream_default_flags), "creating a stream");
    static const int fwd_kinds[] = {K_QK, K_PV}, bwd_kinds[] = {K_QK, K_DP, K_DQ, K_DV, K_DK};
    const int *kinds = c->bwd ? bwd_kinds : fwd_kinds, nk = c->bwd ? 5 : 2;
    for (int b = 0; b < c->nb; b++)
        for (int i = 0; i < nk; i++) {
            int kind = kinds[i];
            if (c->bwd && b == c->nb - 1 && (kind == K_DV || kind == K_DK)) kind = kind == K_DV ? K_DV0 : K_DK0;
            CT_TRY(make_prim(c, kind, b));
        }
    return CT_OK;
}

/* Points every memory object at this call's workspace and scratchpad. */
static ct_status bind(att_cache *c, void *ws, void *sp) {
    ct_dnnl *d = &c->base;
    for (int t = 0; t < c->nt; t++) {
        char *w = (char *)ws + (size_t)t * c->per_thread;
        char *q = w + c->off[CT_ATT_Q], *kk = w + c->off[CT_ATT_K], *v = w + c->off[CT_ATT_V], *g = w + c->off[CT_ATT_DO];
        for (int kind = 0; kind < N_KINDS; kind++)
            for (int b = 0; b < c->nb; b++) {
                if (!*prim_at(c, kind, b)) continue;
                size_t rows = (size_t)b * (size_t)c->rb * (size_t)c->Dh * 2; /* block b's first row of a (T, Dh) BF16 buffer */
                char *p[N_ARGS] = {0};
                switch (kind) {
                case K_QK: p[0] = q + rows, p[1] = kk, p[2] = w + c->off[CT_ATT_S]; break;
                case K_DP: p[0] = g + rows, p[1] = v, p[2] = w + c->off[CT_ATT_DP]; break;
                case K_PV: p[0] = w + c->off[CT_ATT_P16], p[1] = v, p[2] = w + c->off[CT_ATT_OB]; break;
                case K_DQ: p[0] = w + c->off[CT_ATT_DS16], p[1] = kk, p[2] = w + c->off[CT_ATT_OB]; break;
                case K_DV:
                case K_DV0: p[0] = w + c->off[CT_ATT_P16], p[1] = g + rows, p[2] = w + c->off[CT_ATT_DV]; break;
                default: p[0] = w + c->off[CT_ATT_DS16], p[1] = q + rows, p[2] = w + c->off[CT_ATT_DK]; break;
                }
                p[A_SP] = sp ? (char *)sp + (size_t)t * c->sp_bytes : NULL;
                dnnl_memory_t *m = mem_at(c, t, kind, b);
                for (int a = 0; a < N_ARGS; a++)
                    if (m[a]) CT_DNNL_TRY(d, dnnl_memory_set_data_handle(m[a], p[a]), "binding a buffer");
            }
    }
    c->bound_ws = ws;
    c->bound_sp = sp;
    return CT_OK;
}

/* Runs product `kind` of block b on thread t. */
static dnnl_status_t product(att_cache *c, int t, int kind, int b) {
    dnnl_memory_t *m = mem_at(c, t, kind, b);
    dnnl_exec_arg_t args[N_ARGS] = {{DNNL_ARG_SRC, m[A_SRC]}, {DNNL_ARG_WEIGHTS, m[A_WEI]}, {DNNL_ARG_DST, m[A_DST]},
                                    {DNNL_ARG_SCRATCHPAD, m[A_SP]}};
    return dnnl_primitive_execute(*prim_at(c, kind, b), c->streams[t], m[A_SP] ? 4 : 3, args);
}

/* Dense BF16 copies of rows [0, T) of head columns [c0, c0 + Dh) of a (B, T, ld) BF16 tensor, batch b. */
static void gather(const att_cache *c, const ct_tensor *x, int64_t b, int64_t c0, int64_t ld, char *dst) {
    const uint16_t *src = (const uint16_t *)x->data + b * c->T * ld + c0;
    for (int64_t j = 0; j < c->T; j++) memcpy((uint16_t *)dst + j * c->Dh, src + j * ld, (size_t)c->Dh * 2);
}
/* rows [i0, i0 + m) of dense BF16 (m, Dh) into columns [c0, c0 + Dh) of a (B, T, ld) BF16 tensor */
static void scatter(const att_cache *c, const char *src, int64_t m, const ct_tensor *y, int64_t b, int64_t i0, int64_t c0,
                    int64_t ld) {
    uint16_t *dst = (uint16_t *)y->data + (b * c->T + i0) * ld + c0;
    for (int64_t r = 0; r < m; r++) memcpy(dst + r * ld, (const uint16_t *)src + r * c->Dh, (size_t)c->Dh * 2);
}

typedef struct {
    void (*softmax)(float *, uint16_t *, int64_t, int64_t, int64_t, int, const float *, float *);
    void (*prob)(float *, uint16_t *, int64_t, int64_t, int64_t, int, const float *, const float *);
    void (*dscore)(const float *, const float *, uint16_t *, int64_t, int64_t, int64_t, int, const float *);
    void (*rowdot)(const uint16_t *, int64_t, const uint16_t *, int64_t, int64_t, int64_t, float *);
    void (*to_bf16)(const float *, uint16_t *, size_t);
    void (*colsum)(const ct_kargs *, int64_t, int, int64_t, const void *, ct_dtype, int64_t, int64_t, int64_t, float *);
    void (*colsum_cross)(const ct_kargs *);
} row_fns;

static row_fns pick_rows(const ct_context *ctx) {
    if (ct_context_isa(ctx) >= CT_ISA_AVX512)
        return (row_fns){ct_k_att_softmax_rows_avx512, ct_k_att_prob_rows_avx512, ct_k_att_dscore_rows_avx512,
                         ct_k_att_rowdot_bf16_avx512, ct_cvt_f32_to_bf16_avx512, ct_k_att_colsum_rows_avx512,
                         ct_k_att_colsum_cross_avx512};
    return (row_fns){ct_k_att_softmax_rows_avx2, ct_k_att_prob_rows_avx2, ct_k_att_dscore_rows_avx2,
                     ct_k_att_rowdot_bf16_avx2, ct_cvt_f32_to_bf16_avx2, ct_k_att_colsum_rows_avx2,
                     ct_k_att_colsum_cross_avx2};
}

static void key_bias(const att_cache *c, const int32_t *kv, int64_t b, float *kb) {
    for (int64_t j = 0; j < c->T; j++) kb[j] = kv && !kv[b * c->T + j] ? -INFINITY : 0.0f;
}

/* Task (b, h) on thread t: its workspace, with dense copies of the head's
 * q, k, v and the key bias of batch b's mask. */
static char *task_start(const att_cache *c, const ct_kargs *k, int t, const ct_tensor *qkv, const int32_t *kv,
                        int64_t bh) {
    int64_t b = bh / c->H, h = bh % c->H, D = c->D, Dh = c->Dh;
    char *w = (char *)k->ws + (size_t)t * c->per_thread;
    gather(c, qkv, b, h * Dh, 3 * D, w + c->off[CT_ATT_Q]);
    gather(c, qkv, b, D + h * Dh, 3 * D, w + c->off[CT_ATT_K]);
    gather(c, qkv, b, 2 * D + h * Dh, 3 * D, w + c->off[CT_ATT_V]);
    key_bias(c, kv, b, (float *)(w + c->off[CT_ATT_KB]));
    return w;
}

/* The node's cache (created on the first call with oneDNN planning for one
 * thread) bound to this call's workspace and a scratchpad per thread. */
static ct_status prepare(ct_kargs *k, const ct_tensor *qkv, att_cache **out) {
    if (!k->cache) return ct_set_error(k->ctx, CT_E_INTERNAL, "oneDNN attention '%s': no cache slot", k->node->name);
    att_cache *c = *k->cache;
    if (!c) {
        ct_status s = ct_alloc(k->ctx, sizeof *c, (void **)&c);
        if (s != CT_OK) return s;
        memset(c, 0, sizeof *c);
        ct_dnnl *d = &c->base;
        d->ctx = k->ctx;
        d->ext_free = att_free;
        snprintf(d->what, sizeof d->what, "%s '%s'", k->op_name ? k->op_name : "attention", k->node->name);
        dnnl_status_t st = dnnl_engine_create(&d->engine, dnnl_cpu, 0);
        if (st != dnnl_success) {
            d->engine = NULL;
            s = ct_dnnl_fail(d, st, "creating the CPU engine");
        }
        int prev = omp_get_max_threads();
        omp_set_num_threads(1); /* the primitives run inside the task loop, one thread each */
        if (s == CT_OK) s = build(k, c, qkv);
        omp_set_num_threads(prev);
        if (s != CT_OK) {
            ct_onednn_cache_free(c);
            return s;
        }
        d->ready = 1;
        d->nthreads = c->nt;
        *k->cache = c;
    }
    void *sp = NULL;
    if (c->sp_bytes) {
        if (!k->scratch) return ct_set_error(k->ctx, CT_E_INTERNAL, "oneDNN %s: the executor passed no scratch", c->base.what);
        CT_TRY(ct_scratch_reserve(k->ctx, k->scratch, (size_t)c->nt * c->sp_bytes, &sp));
    }
    if ((size_t)c->nt * c->per_thread > k->ws_bytes)
        return ct_set_error(k->ctx, CT_E_INTERNAL, "oneDNN %s: workspace of %zu bytes, %zu needed", c->base.what,
                            k->ws_bytes, (size_t)c->nt * c->per_thread);
    if (!c->amx && (c->bound_ws != k->ws || c->bound_sp != sp)) CT_TRY(bind(c, k->ws, sp));
    *out = c;
    return CT_OK;
}

/* ---- the products on AMX tiles ----------------------------------------------------------------------------
 * The same blocks and row helpers; every operand padded to Tp = T rounded up to 32 rows (zeros) and the padded
 * keys masked by the key bias, so the tile products see multiples of 32 only (ct_attention_amx_layout). A block of
 * m queries is computed over mp = m rounded up to 32 rows; the rows past m of P and dS are zeros, and those of
 * the outputs are not stored. */

#define AMX_AT(w, c, part, type) ((type *)((w) + (c)->off[part]))

/* dense (Tp, Dh) BF16 rows [0, T) of head columns [c0, c0 + Dh) of a (B, T, ld) tensor, batch b; zero rows past T */
static void gather_padded(const att_cache *c, const ct_tensor *x, int64_t b, int64_t c0, int64_t ld, uint16_t *dst) {
    gather(c, x, b, c0, ld, (char *)dst);
    const int64_t tp = ct_attention_amx_tp(c->T);
    memset(dst + c->T * c->Dh, 0, (size_t)((tp - c->T) * c->Dh) * 2);
}

/* Task (b, h) on thread t: q, k, v gathered (padded), K^T as pairs, the key bias (padded keys masked). */
static char *amx_task_start(const att_cache *c, const ct_kargs *k, int t, const ct_tensor *qkv, const int32_t *kv,
                            int64_t bh) {
    int64_t b = bh / c->H, h = bh % c->H, D = c->D, Dh = c->Dh, tp = ct_attention_amx_tp(c->T);
    char *w = (char *)k->ws + (size_t)t * c->per_thread;
    gather_padded(c, qkv, b, h * Dh, 3 * D, AMX_AT(w, c, CT_AMX_Q, uint16_t));
    if (c->pow2) ct_amx_scale_bf16_pow2(AMX_AT(w, c, CT_AMX_Q, uint16_t), c->T * Dh, c->scale);
    gather_padded(c, qkv, b, D + h * Dh, 3 * D, AMX_AT(w, c, CT_AMX_KR, uint16_t));
    gather_padded(c, qkv, b, 2 * D + h * Dh, 3 * D, AMX_AT(w, c, CT_AMX_VR, uint16_t));
    float *kb = AMX_AT(w, c, CT_AMX_KB, float);
    key_bias(c, kv, b, kb);
    for (int64_t j = c->T; j < tp; j++) kb[j] = -INFINITY;
    ct_amx_pairs_t(AMX_AT(w, c, CT_AMX_KR, uint16_t), Dh, tp, Dh, AMX_AT(w, c, CT_AMX_KT, uint32_t), tp);
    return w;
}

static int64_t pad32(int64_t n) { return (n + 31) / 32 * 32; }

/* Block blk's rows [i0, i0 + m) (mp: m padded to 32) and its np keys (padded): the scaled scores S = scale Q K^T
 * (mp x np FP32; with a power-of-two scale q was scaled when gathered). */
typedef struct {
    int64_t i0, m, mp, np;
} amx_block;
static amx_block amx_scores(const att_cache *c, int blk, const uint16_t *q, const uint32_t *kt, float *s) {
    const int64_t tp = ct_attention_amx_tp(c->T);
    amx_block r = {(int64_t)blk * c->rb, block_rows(c, blk), 0, 0};
    r.mp = pad32(r.m);
    r.np = c->causal ? pad32(block_keys(c, blk)) : tp;
    ct_amx_gemm_bf16(r.mp, r.np, c->Dh, q + r.i0 * c->Dh, c->Dh, kt, tp, s, r.np, 0);
    if (!c->pow2) ct_amx_scale(s, r.np, r.m, r.np, c->scale);
    return r;
}

/* What a task reads besides the node's inputs: the row helpers, and for the backward dy and the forward's y. */
typedef struct {
    const row_fns *f;
    const ct_tensor *dy, *y;
} amx_args;
typedef void (*amx_task_fn)(ct_kargs *k, const att_cache *c, const amx_args *a, char *w, int64_t bh);

/* Every (batch, head) task over the threads, each thread's tiles configured once for its tasks. */
static void amx_tasks(ct_kargs *k, const att_cache *c, const ct_tensor *qkv, const int32_t *kv, amx_task_fn fn,
                      const amx_args *a) {
#pragma omp parallel num_threads(c->nt) if (c->nt > 1)
    {
        ct_amx_tiles_config();
#pragma omp for schedule(dynamic, 1)
        for (int64_t bh = 0; bh < c->B * c->H; bh++) fn(k, c, a, amx_task_start(c, k, omp_get_thread_num(), qkv, kv, bh), bh);
        ct_amx_tiles_release();
    }
}

static void amx_forward_task(ct_kargs *k, const att_cache *c, const amx_args *a, char *w, int64_t bh) {
    const int64_t D = c->D, Dh = c->Dh, tp = ct_attention_amx_tp(c->T), b = bh / c->H, h = bh % c->H;
    float *lse = k->aux;
    uint16_t *q = AMX_AT(w, c, CT_AMX_Q, uint16_t), *p16 = AMX_AT(w, c, CT_AMX_P16, uint16_t);
    uint32_t *kt = AMX_AT(w, c, CT_AMX_KT, uint32_t), *vp = AMX_AT(w, c, CT_AMX_VP, uint32_t);
    float *s = AMX_AT(w, c, CT_AMX_S, float), *ob = AMX_AT(w, c, CT_AMX_OB, float);
    ct_amx_pairs(AMX_AT(w, c, CT_AMX_VR, uint16_t), Dh, tp, Dh, vp, Dh);
    for (int blk = 0; blk < c->nb; blk++) {
        const amx_block bk = amx_scores(c, blk, q, kt, s);
        const int64_t i0 = bk.i0, m = bk.m, mp = bk.mp, np = bk.np;
        a->f->softmax(s, p16, np, m, i0, c->causal, AMX_AT(w, c, CT_AMX_KB, float), lse + bh * c->T + i0);
        memset(p16 + m * np, 0, (size_t)((mp - m) * np) * 2);
        ct_amx_gemm_bf16(mp, Dh, np, p16, np, vp, Dh, ob, Dh, 0);
        uint16_t *o = (uint16_t *)k->out.data + (b * c->T + i0) * D + h * Dh;
        for (int64_t r = 0; r < m; r++) a->f->to_bf16(ob + r * Dh, o + r * D, (size_t)Dh);
    }
}

static void amx_backward_task(ct_kargs *k, const att_cache *c, const amx_args *a, char *w, int64_t bh) {
    const int64_t D = c->D, D3 = 3 * D, Dh = c->Dh, T = c->T, tp = ct_attention_amx_tp(T), b = bh / c->H, h = bh % c->H;
    const row_fns *f = a->f;
    const float *lse = k->in_aux[2];
    uint16_t *q = AMX_AT(w, c, CT_AMX_Q, uint16_t), *g = AMX_AT(w, c, CT_AMX_DO, uint16_t);
    uint16_t *qt = AMX_AT(w, c, CT_AMX_QT, uint16_t), *gt = AMX_AT(w, c, CT_AMX_DOT, uint16_t);
    uint16_t *p16 = AMX_AT(w, c, CT_AMX_P16, uint16_t), *ds16 = AMX_AT(w, c, CT_AMX_DS16, uint16_t);
    uint32_t *kt = AMX_AT(w, c, CT_AMX_KT, uint32_t), *vt = AMX_AT(w, c, CT_AMX_VT, uint32_t);
    uint32_t *kp = AMX_AT(w, c, CT_AMX_KP, uint32_t), *pp = AMX_AT(w, c, CT_AMX_PP, uint32_t);
    uint32_t *dsp = AMX_AT(w, c, CT_AMX_DSP, uint32_t);
    float *s = AMX_AT(w, c, CT_AMX_S, float), *dp = AMX_AT(w, c, CT_AMX_DP, float);
    float *ob = AMX_AT(w, c, CT_AMX_OB, float), *di = AMX_AT(w, c, CT_AMX_DI, float);
    float *dvt = AMX_AT(w, c, CT_AMX_DVT, float), *dkt = AMX_AT(w, c, CT_AMX_DKT, float);
    const float *kb = AMX_AT(w, c, CT_AMX_KB, float);
    gather_padded(c, a->dy, b, h * Dh, D, g);
    ct_amx_pairs_t(AMX_AT(w, c, CT_AMX_VR, uint16_t), Dh, tp, Dh, vt, tp);
    ct_amx_pairs(AMX_AT(w, c, CT_AMX_KR, uint16_t), Dh, tp, Dh, kp, Dh);
    if (c->pow2) ct_amx_scale_bf16_pow2((uint16_t *)kp, tp * Dh, c->scale); /* dQ = (scale K) dS */
    ct_amx_transpose16(q, Dh, tp, Dh, qt, tp);
    ct_amx_transpose16(g, Dh, tp, Dh, gt, tp);
    for (int blk = c->nb - 1; blk >= 0; blk--) { /* last first: it writes dV^T, dK^T; the others add */
        const amx_block bk = amx_scores(c, blk, q, kt, s);
        const int64_t i0 = bk.i0, m = bk.m, mp = bk.mp, np = bk.np;
        int first = blk == c->nb - 1;
        const uint16_t *gy = (const uint16_t *)a->dy->data + (b * T + i0) * D + h * Dh;
        const uint16_t *o = (const uint16_t *)a->y->data + (b * T + i0) * D + h * Dh;
        f->rowdot(gy, D, o, D, m, Dh, di);
        f->prob(s, p16, np, m, i0, c->causal, kb, lse + bh * T + i0);
        ct_amx_gemm_bf16(mp, np, Dh, g + i0 * Dh, Dh, vt, tp, dp, np, 0);
        f->dscore(s, dp, ds16, np, m, i0, c->causal, di);
        memset(p16 + m * np, 0, (size_t)((mp - m) * np) * 2);
        memset(ds16 + m * np, 0, (size_t)((mp - m) * np) * 2);
        ct_amx_gemm_bf16(mp, Dh, np, ds16, np, kp, Dh, ob, Dh, 0); /* dQ (/ scale unless pow2) */
        if (!c->pow2) ct_amx_scale(ob, Dh, m, Dh, c->scale);
        uint16_t *dq = (uint16_t *)k->out.data + (b * T + i0) * D3 + h * Dh;
        for (int64_t r = 0; r < m; r++) f->to_bf16(ob + r * Dh, dq + r * D3, (size_t)Dh);
        ct_amx_pairs(p16, np, mp, np, pp, np);
        ct_amx_pairs(ds16, np, mp, np, dsp, np);
        ct_amx_gemm_bf16(Dh, np, mp, gt + i0, tp, pp, np, dvt, tp, !first);
        ct_amx_gemm_bf16(Dh, np, mp, qt + i0, tp, dsp, np, dkt, tp, !first);
    }
    /* dK = scale dK^T^T, dV = dV^T^T: FP32 (T, Dh) rows -> BF16 columns of d_qkv */
    float *dk = AMX_AT(w, c, CT_AMX_DK, float), *dv = AMX_AT(w, c, CT_AMX_DV, float);
    ct_amx_transpose32(dkt, tp, Dh, T, c->pow2 ? 1.0f : c->scale, dk, Dh); /* pow2: q was scaled */
    ct_amx_transpose32(dvt, tp, Dh, T, 1.0f, dv, Dh);
    uint16_t *out = (uint16_t *)k->out.data + b * T * D3;
    for (int64_t j = 0; j < T; j++) {
        f->to_bf16(dk + j * Dh, out + j * D3 + D + h * Dh, (size_t)Dh);
        f->to_bf16(dv + j * Dh, out + j * D3 + 2 * D + h * Dh, (size_t)Dh);
    }
    if (k->node->ia[7] & CT_COLSUM_OUT) { /* as in the oneDNN products' path below */
        float fo[CT_COLSUM_MAX_D / 3 + 1];
        f->colsum(k, b, 0, h, out + h * Dh, CT_BF16, D3, 0, T, fo);
        f->colsum(k, b, 1, h, dk, CT_F32, Dh, 0, T, fo);
        f->colsum(k, b, 2, h, dv, CT_F32, Dh, 0, T, fo);
    }
}

static ct_status exec_failed(att_cache *c, dnnl_status_t st) {
    return ct_dnnl_fail(&c->base, st, "executing a product");
}

/* in: qkv[, key_valid] -> out (B, T, D); aux: lse (B, H, T) */
ct_status ct_k_attention_onednn(ct_kargs *k) {
    const ct_tensor *qkv = &k->in[0];
    if (qkv->dtype != CT_BF16 || k->out.dtype != CT_BF16) return CT_E_UNSUPPORTED;
    att_cache *c;
    CT_TRY(prepare(k, qkv, &c));
    const row_fns f = pick_rows(k->ctx);
    const int32_t *kv = k->node->n_in > 1 ? k->in[1].data : NULL;
    if (c->amx) {
        const amx_args a = {&f, NULL, NULL};
        amx_tasks(k, c, qkv, kv, amx_forward_task, &a);
        return CT_OK;
    }
    const int64_t D = c->D, Dh = c->Dh;
    float *lse = k->aux;
    dnnl_status_t err = dnnl_success;
#pragma omp parallel for num_threads(c->nt) schedule(dynamic, 1) if (c->nt > 1)
    for (int64_t bh = 0; bh < c->B * c->H; bh++) {
        int t = omp_get_thread_num();
        int64_t b = bh / c->H, h = bh % c->H;
        char *w = task_start(c, k, t, qkv, kv, bh);
        float *s = (float *)(w + c->off[CT_ATT_S]), *kb = (float *)(w + c->off[CT_ATT_KB]);
        uint16_t *p16 = (uint16_t *)(w + c->off[CT_ATT_P16]);
        for (int blk = 0; blk < c->nb; blk++) {
            int64_t i0 = (int64_t)blk * c->rb, m = block_rows(c, blk), n = block_keys(c, blk);
            dnnl_status_t st = product(c, t, K_QK, blk);
            if (st == dnnl_success) f.softmax(s, p16, n, m, i0, c->causal, kb, lse + bh * c->T + i0);
            if (st == dnnl_success) st = product(c, t, K_PV, blk);
            if (st != dnnl_success) {
#pragma omp critical(ct_att_err)
                err = st;
                break; /* this task; the others run on (outputs are not used after an error) */
            }
            scatter(c, w + c->off[CT_ATT_OB], m, &k->out, b, i0, h * Dh, D);
        }
    }
    return err == dnnl_success ? CT_OK : exec_failed(c, err);
}

/* in: dy (B, T, D), qkv, fwd (out and lse)[, key_valid] -> d_qkv (B, T, 3D) */
ct_status ct_k_attention_bwd_onednn(ct_kargs *k) {
    const ct_tensor *dy = &k->in[0], *qkv = &k->in[1], *y = &k->in[2];
    if (dy->dtype != CT_BF16 || qkv->dtype != CT_BF16 || y->dtype != CT_BF16 || k->out.dtype != CT_BF16)
        return CT_E_UNSUPPORTED;
    if ((k->node->ia[7] & CT_COLSUM_OUT) && (!k->aux || qkv->shape[2] > CT_COLSUM_MAX_D)) return CT_E_UNSUPPORTED;
    att_cache *c;
    CT_TRY(prepare(k, qkv, &c));
    const row_fns f = pick_rows(k->ctx);
    const int32_t *kv = k->node->n_in > 3 ? k->in[3].data : NULL;
    if (c->amx) {
        const amx_args a = {&f, dy, y};
        amx_tasks(k, c, qkv, kv, amx_backward_task, &a);
        if (k->node->ia[7] & CT_COLSUM_OUT) f.colsum_cross(k);
        return CT_OK;
    }
    const int64_t D = c->D, D3 = 3 * D, Dh = c->Dh, T = c->T;
    const float *lse = k->in_aux[2];
    dnnl_status_t err = dnnl_success;
#pragma omp parallel for num_threads(c->nt) schedule(dynamic, 1) if (c->nt > 1)
    for (int64_t bh = 0; bh < c->B * c->H; bh++) {
        int t = omp_get_thread_num();
        int64_t b = bh / c->H, h = bh % c->H;
        char *w = task_start(c, k, t, qkv, kv, bh);
        float *s = (float *)(w + c->off[CT_ATT_S]), *dp = (float *)(w + c->off[CT_ATT_DP]);
        float *kb = (float *)(w + c->off[CT_ATT_KB]), *di = (float *)(w + c->off[CT_ATT_DI]);
        uint16_t *p16 = (uint16_t *)(w + c->off[CT_ATT_P16]), *ds16 = (uint16_t *)(w + c->off[CT_ATT_DS16]);
        gather(c, dy, b, h * Dh, D, w + c->off[CT_ATT_DO]);
        int failed = 0;
        for (int blk = c->nb - 1; blk >= 0; blk--) { /* last first: it writes dV, dK; the others add */
            int64_t i0 = (int64_t)blk * c->rb, m = block_rows(c, blk), n = block_keys(c, blk);
            int last = blk == c->nb - 1;
            const uint16_t *g = (const uint16_t *)dy->data + (b * T + i0) * D + h * Dh;
            const uint16_t *o = (const uint16_t *)y->data + (b * T + i0) * D + h * Dh;
            f.rowdot(g, D, o, D, m, Dh, di);
            dnnl_status_t st = product(c, t, K_QK, blk);
            if (st == dnnl_success) {
                f.prob(s, p16, n, m, i0, c->causal, kb, lse + bh * T + i0);
                st = product(c, t, K_DP, blk);
            }
            if (st == dnnl_success) {
                f.dscore(s, dp, ds16, n, m, i0, c->causal, di);
                st = product(c, t, K_DQ, blk);
            }
            if (st == dnnl_success) scatter(c, w + c->off[CT_ATT_OB], m, &k->out, b, i0, h * Dh, D3);
            if (st == dnnl_success) st = product(c, t, last ? K_DV0 : K_DV, blk);
            if (st == dnnl_success) st = product(c, t, last ? K_DK0 : K_DK, blk);
            if (st != dnnl_success) {
#pragma omp critical(ct_att_err)
                err = st;
                failed = 1;
                break;
            }
        }
        if (failed) continue;
        /* dK, dV: FP32 sums -> BF16 columns of d_qkv */
        const float *dk = (const float *)(w + c->off[CT_ATT_DK]), *dv = (const float *)(w + c->off[CT_ATT_DV]);
        uint16_t *out = (uint16_t *)k->out.data + b * T * D3;
        for (int64_t j = 0; j < T; j++) {
            f.to_bf16(dk + j * Dh, out + j * D3 + D + h * Dh, (size_t)Dh);
            f.to_bf16(dv + j * Dh, out + j * D3 + 2 * D + h * Dh, (size_t)Dh);
        }
        if (k->node->ia[7] & CT_COLSUM_OUT) { /* attention_bwd+colsum (simd/attention.c) */
            float fo[CT_COLSUM_MAX_D / 3 + 1];
            /* dQ's stored BF16 rows (its blocks came last first: the sums need the rows in order); dK's and
               dV's FP32 sums, rounded to BF16 as just stored */
            f.colsum(k, b, 0, h, out + h * Dh, CT_BF16, D3, 0, T, fo);
            f.colsum(k, b, 1, h, dk, CT_F32, Dh, 0, T, fo);
            f.colsum(k, b, 2, h, dv, CT_F32, Dh, 0, T, fo);
        }
    }
    if (err == dnnl_success && (k->node->ia[7] & CT_COLSUM_OUT)) f.colsum_cross(k);
    return err == dnnl_success ? CT_OK : exec_failed(c, err);
}
