/* src/kernels/onednn/matmul.c - matmul and linear on oneDNN's matmul
 * primitive. Transposes are expressed by the strides of the memory
 * descriptors (no copies). A 2-D B broadcast over A's batch dims is folded
 * into the rows of one GEMM when A is not transposed (one large GEMM instead
 * of many small ones); otherwise the batch dims are collapsed into one and a
 * 2-D B is broadcast with a batch dim of 1.
 *
 * Dtypes are the tensors' own: f32, or bf16 inputs (the plan's native BF16
 * path) with a bf16 or f32 output (weight gradients go to the FP32 gradient
 * arena as they are accumulated). B is read in its plain layout, and
 * oneDNN's BF16 GEMMs (gemm:jit emulated on AVX-512, brgemm on AVX512-BF16 /
 * AMX) pack it into their own blocks (scratchpad) on every call. With
 * CT_ONEDNN_PACK_WEIGHTS=1 (off by default: slower training, pack_weight) a
 * BF16 weight copy is packed once into the layout the primitive asks for,
 * kept by the node, and packed again only when the weights change. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/onednn/onednn.h"

static ct_status empty(ct_dnnl *c) {
    return ct_set_error(c->ctx, CT_E_UNSUPPORTED, "oneDNN %s: empty tensor, the next kernel runs instead", c->what);
}

/* Creates the matmul of (a, b[, bias]) -> dst as the node's primitive; the
 * tensors are k->in[0], k->in[1], k->in[2] and k->out. b_user is how B lies
 * in memory when the primitive should read a copy laid out as b (else NULL);
 * b_any (B in format any): B lies as b and the primitive reads it packed in
 * the layout it asks for, kept between calls (ct_dnnl_input_kept). */
static ct_status add_matmul(ct_dnnl *c, const dnnl_memory_desc_t *a, const dnnl_memory_desc_t *b,
                            const dnnl_memory_desc_t *b_user, const dnnl_memory_desc_t *bias,
                            const dnnl_memory_desc_t *dst, const dnnl_memory_desc_t *b_any) {
    dnnl_matmul_desc_t d;
    CT_DNNL_TRY(c, dnnl_matmul_desc_init(&d, a, b_any ? b_any : b, bias, dst), "describing the matmul");
    dnnl_primitive_desc_t pd;
    CT_TRY(ct_dnnl_pd(c, &pd, &d, NULL, "creating the matmul"));
    dnnl_memory_t ma, mb, mbias = NULL, mdst;
    ct_status s = ct_dnnl_user(c, a, 0, &ma);
    if (s == CT_OK && b_any)
        s = ct_dnnl_input_kept(c, b, 1, dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0), &mb);
    else if (s == CT_OK) s = b_user ? ct_dnnl_input(c, b_user, 1, b, &mb) : ct_dnnl_user(c, b, 1, &mb);
    if (s == CT_OK && bias) s = ct_dnnl_user(c, bias, 2, &mbias);
    if (s == CT_OK) s = ct_dnnl_user(c, dst, CT_DNNL_OUT, &mdst);
    if (s == CT_OK) {
        dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mdst}, {DNNL_ARG_BIAS, mbias}};
        s = ct_dnnl_add(c, pd, bias ? 4 : 3, args);
    }
    dnnl_primitive_desc_destroy(pd);
    return s;
}

/* oneDNN's AVX2 sgemm reads a non-transposed B in place when M is small, and
 * a row stride that is a multiple of 256 floats (1 KiB) then maps the rows it
 * walks onto few cache sets: measured 2x slower (256x1024 * 1024x1024: 13-15
 * ms vs 6-7.5 ms on one core). Such a B is copied once per call into rows
 * padded by 16 floats (a reorder, ~K*N*8 bytes of traffic), which pays off
 * from M = 64 on; at M >= 1024 sgemm packs B itself and the copy is useless.
 * Not where oneDNN runs the plain B on a brgemm kernel (AVX-512): brgemm
 * packs B's blocks itself, and the padded B sends oneDNN to its sgemm
 * (gemm:jit) besides the copy: the MLP's 256x1024 * 1024x1024 data gradient
 * took a 0.4 ms reorder and 2.7 ms of gemm:jit against 2.35 ms of brgemm on
 * the plain B (Ice Lake, 2 threads). Except for a B of 2M floats (8 MiB) or
 * more, which brgemm reads plain much slower: gpt2-124m's data gradients
 * (256x768 * 768x3072 and 256x3072 * 3072x768) took 8.1 and 4.8 ms per call on
 * brgemm against 3.9 ms each padded on gemm:jit, the whole FP32 step 871-879 vs
 * 814-824 ms, while the MLP's 1M-float B stays faster on brgemm (9.5 vs 9.8 ms
 * steps; Sapphire Rapids, 2 threads). */
static int pad_b_rows(int tb, int64_t M, int64_t K, int64_t N, ct_dtype bdt) {
    return bdt == CT_F32 && !tb && N % 256 == 0 && M >= 64 && M < 1024 && K >= 64;
}

/* 1 when oneDNN runs the matmul of these descriptors on a brgemm kernel (ct_dnnl_impl_brgemm) */
static int plain_is_brgemm(ct_dnnl *c, const dnnl_memory_desc_t *a, const dnnl_memory_desc_t *b,
                           const dnnl_memory_desc_t *dst) {
    dnnl_matmul_desc_t d;
    dnnl_primitive_desc_t pd;
    if (dnnl_matmul_desc_init(&d, a, b, NULL, dst) != dnnl_success ||
        dnnl_primitive_desc_create(&pd, &d, c->attr, c->engine, NULL) != dnnl_success)
        return 0;
    int brg = ct_dnnl_impl_brgemm(pd) == 1;
    dnnl_primitive_desc_destroy(pd);
    return brg;
}

/* Whether B, input `slot`, goes to the GEMM packed once: a BF16 weight copy (ct_kargs.in_wcopy: it stays
 * the same until the weights change) read in the blocked layout the primitive asks for (format any),
 * reordered into the node's own buffer on the first call and again only after the weights change
 * (ct_dnnl_input_kept), instead of brgemm packing the plain B block by block on every call. Off unless
 * CT_ONEDNN_PACK_WEIGHTS=1 (BF16 native path, any ISA), because in training each packed copy is read once
 * per update (the forward reads W^T, the data gradient W), and oneDNN's reorder costs more than the
 * packing brgemm does inside the GEMM: on AMX (Sapphire Rapids, 2 threads) bench_step BF16 steps went MLP
 * 3.17-3.34 -> 3.85-3.98 ms, gpt-char-small 189-192 -> 193-196, gpt2-124m 357-359 -> 461-469 (GPT-2 also
 * +470 MB). It pays where one update serves several forwards: evaluation-only forwards (bench_step
 * --eval-only, weights fixed) went 0.87 -> 0.71 ms (MLP), 59.6 -> 57.8 (gpt-char-small), 74 -> 70.5
 * (GPT-2). Costs one packed copy per weight and use, counted by the context's allocator
 * (ct_plan_packed_weights). */
static ct_status pack_weight(ct_dnnl *c, const ct_kargs *k, int slot, ct_dtype dt, int *pack) {
    *pack = 0;
    const char *e = getenv("CT_ONEDNN_PACK_WEIGHTS");
    if (e && *e && strcmp(e, "0") && strcmp(e, "1"))
        return ct_set_error(c->ctx, CT_E_CONFIG,
                            "CT_ONEDNN_PACK_WEIGHTS='%s' is not 0 or 1: 1 packs the BF16 weight copies once per "
                            "change for oneDNN's GEMMs, 0 reads them plain (the default)",
                            e);
    if (dt != CT_BF16 || !(k->in_wcopy >> slot & 1u)) return CT_OK;
    *pack = e && e[0] == '1';
    return CT_OK;
}

/* ---- BF16 GEMMs on AMX tiles, ctrain's own (simd/amx.c) ----------------------------------------------------
 *
 * Where ct_dnnl_amx_tiles allows (CT_MATMUL_AMX=auto|1|0: auto, the default, where the shape is one it is faster
 * on; 1 every shape it takes; 0 none), a BF16 linear and a BF16 2-D matmul (or one whose
 * batch folds into the rows) run ct_amx_matmul_bf16 instead of oneDNN's primitive: one operand packed as tile
 * pairs (a transposed A, the weight gradients' K = tokens, transposed) into the node's scratch on every call (no
 * copy kept between steps), then 32 x 32 blocks of C with the bias and the rounding in their epilogue. oneDNN's
 * brgemm did the same work with more around it: on gpt-char-small's shapes (AMX Xeon, 2 threads) ~1.0 ms for
 * 2048 x 1536 x 384 against 1.3 ms on the plain weights and 1.1 packed once. The sums are oneDNN's on AMX (K in
 * steps of 32 in the tiles, the bias added to the FP32 sum, one rounding). A node whose weights
 * CT_ONEDNN_PACK_WEIGHTS=1 asks oneDNN to keep packed stays on oneDNN. */
static ct_amx_mm amx_args(const ct_kargs *k, int nthreads) {
    const ct_tensor *A = &k->in[0], *B = &k->in[1], *C = &k->out;
    ct_amx_mm p = {0};
    p.nthreads = nthreads;
    p.a = A->data, p.b = B->data, p.c = C->data, p.c_dt = C->dtype;
    if (k->node->op == CT_OP_LINEAR) { /* x (R, I), W (O, I) */
        p.N = B->shape[0], p.K = B->shape[1], p.M = ct_tensor_numel(C) / p.N, p.tb = 1;
        if (k->node->n_in > 2) p.bias = k->in[2].data, p.bias_dt = k->in[2].dtype;
    } else { /* a (.., M, K) or a^T (K, M), b (K, N) or b^T (N, K), the batch folded into the rows */
        const int nd = C->ndim;
        p.ta = k->node->ia[0] != 0, p.tb = k->node->ia[1] != 0;
        p.N = C->shape[nd - 1], p.K = A->shape[nd - 1 - p.ta], p.M = ct_tensor_numel(C) / p.N;
    }
    p.lda = p.ta ? p.M : p.K, p.ldb = p.tb ? p.K : p.N, p.ldc = p.N;
    return p;
}

static ct_status amx_run(ct_dnnl *c, const ct_kargs *k, char *region) {
    const ct_amx_mm p = amx_args(k, c->nthreads);
    ct_amx_matmul_bf16(&p, region);
    return CT_OK;
}

/* Whether the node runs amx_run: BF16 A and B, a BF16 or FP32 output (and bias), one GEMM (flat). Sets it up
 * when so. */
static int amx_gemm(ct_kargs *k, ct_dnnl *c, int flat) {
    const ct_tensor *A = &k->in[0], *B = &k->in[1];
    const ct_dtype cdt = k->out.dtype, bdt = k->node->op == CT_OP_LINEAR && k->node->n_in > 2 ? k->in[2].dtype : CT_F32;
    if (!flat || A->dtype != CT_BF16 || B->dtype != CT_BF16 || (cdt != CT_BF16 && cdt != CT_F32) ||
        (bdt != CT_BF16 && bdt != CT_F32) || !ct_dnnl_amx_tiles(k->ctx, "CT_MATMUL_AMX"))
        return 0;
    const ct_amx_mm p = amx_args(k, c->nthreads);
    /* where it is faster (measured, bench/bench_gemm in the step): the operand packed on every call must be small
       against the work, so the tokens (M, or K for a weight gradient) >= 1024, and no side under 128 (gpt-char-small's
       2048 x 65 x 384 took 0.117 ms against oneDNN's 0.071; the MLP's 256 x 1024 x 784 0.76 against 0.27) */
    const int64_t tokens = p.ta ? p.K : p.M;
    const char *e = getenv("CT_MATMUL_AMX"); /* 1: every GEMM it can take (for comparisons), auto (the default): */
    if (!(e && !strcmp(e, "1")) && (tokens < 1024 || p.M < 128 || p.N < 128 || p.K < 128)) return 0;
    c->run = amx_run;
    c->scratch_total = ct_amx_matmul_scratch(&p);
    snprintf(c->impl, sizeof c->impl, "ctrain:amx_tiles");
    ct_dnnl_describe(c, " (ctrain's GEMM on AMX tiles)");
    return 1;
}

static ct_status build_matmul(ct_kargs *k, ct_dnnl *c) {
    const ct_tensor *A = &k->in[0], *B = &k->in[1], *C = &k->out;
    int ta = k->node->ia[0] != 0, tb = k->node->ia[1] != 0;
    const ct_dtype adt = A->dtype, bdt = B->dtype, cdt = C->dtype;
    char s1[96], s2[96], s3[96], s4[64];
    ct_dnnl_describe(c, ": a %s%s x b %s%s -> %s%s", ct_shape_str(A->ndim, A->shape, s1, sizeof s1), ta ? "^T" : "",
                     ct_shape_str(B->ndim, B->shape, s2, sizeof s2), tb ? "^T" : "",
                     ct_shape_str(C->ndim, C->shape, s3, sizeof s3),
                     ct_dnnl_dtypes_str(2, (ct_dtype[]){adt, bdt}, cdt, s4, sizeof s4));
    int nd = C->ndim;
    int64_t M = C->shape[nd - 2], N = C->shape[nd - 1], K = A->shape[nd - 1 - ta];
    int64_t batch = 1;
    for (int i = 0; i < nd - 2; i++) batch *= C->shape[i];
    if (!M || !N || !K || !batch) return empty(c);
    int b_batched = B->ndim > 2;
    dnnl_memory_desc_t amd, bmd, bpad, cmd;
    int flat = nd == 2 || (!b_batched && !ta); /* one 2-D GEMM over batch * M rows */
    int64_t R = flat ? batch * M : M;          /* rows of one GEMM */
    int pad = pad_b_rows(tb, R, K, N, bdt);
    int64_t ldp = N + 16;
    if (flat) {
        /* ta only when nd == 2, then R == M */
        CT_TRY(ct_dnnl_md(c, &amd, 2, (int64_t[]){R, K}, ta ? (int64_t[]){1, M} : (int64_t[]){K, 1}, adt));
        CT_TRY(ct_dnnl_md(c, &bmd, 2, (int64_t[]){K, N}, tb ? (int64_t[]){1, K} : (int64_t[]){N, 1}, bdt));
        if (pad) CT_TRY(ct_dnnl_md(c, &bpad, 2, (int64_t[]){K, N}, (int64_t[]){ldp, 1}, bdt));
        CT_TRY(ct_dnnl_md(c, &cmd, 2, (int64_t[]){R, N}, (int64_t[]){N, 1}, cdt));
    } else {
        int64_t bb = b_batched ? batch : 1;
        CT_TRY(ct_dnnl_md(c, &amd, 3, (int64_t[]){batch, M, K},
                          ta ? (int64_t[]){M * K, 1, M} : (int64_t[]){M * K, K, 1}, adt));
        CT_TRY(ct_dnnl_md(c, &bmd, 3, (int64_t[]){bb, K, N},
                          tb ? (int64_t[]){K * N, 1, K} : (int64_t[]){K * N, N, 1}, bdt));
        if (pad) CT_TRY(ct_dnnl_md(c, &bpad, 3, (int64_t[]){bb, K, N}, (int64_t[]){K * ldp, ldp, 1}, bdt));
        CT_TRY(ct_dnnl_md(c, &cmd, 3, (int64_t[]){batch, M, N}, (int64_t[]){M * N, N, 1}, cdt));
    }
    int packed;
    CT_TRY(pack_weight(c, k, 1, bdt, &packed));
    if (!packed && amx_gemm(k, c, flat)) return CT_OK;
    if (pad && K * N < ((int64_t)2 << 20) && plain_is_brgemm(c, &amd, &bmd, &cmd)) pad = 0;
    if (pad) ct_dnnl_describe(c, " (B copied into padded rows)");
    if (pad) return add_matmul(c, &amd, &bpad, &bmd, NULL, &cmd, NULL);
    dnnl_memory_desc_t bany;
    if (packed) {
        CT_TRY(ct_dnnl_md_tag(c, &bany, bmd.ndims, bmd.dims, dnnl_format_tag_any, bdt));
        ct_dnnl_describe(c, " (B packed once per weight update)");
    }
    return add_matmul(c, &amd, &bmd, NULL, NULL, &cmd, packed ? &bany : NULL);
}

/* y (R, O) = x (R, I) * W^T + b: W (O, I) is read as (I, O) with strides
 * (1, I); the bias is a (1, O) row broadcast over R. */
static ct_status build_linear(ct_kargs *k, ct_dnnl *c) {
    const ct_tensor *X = &k->in[0], *W = &k->in[1];
    int has_bias = k->node->n_in > 2;
    const ct_dtype xdt = X->dtype, wdt = W->dtype, ydt = k->out.dtype, bdt = has_bias ? k->in[2].dtype : CT_F32;
    char s1[96], s2[96], s3[96], s4[64];
    ct_dnnl_describe(c, ": x %s, weight %s%s -> %s%s", ct_shape_str(X->ndim, X->shape, s1, sizeof s1),
                     ct_shape_str(W->ndim, W->shape, s2, sizeof s2), has_bias ? " with bias" : "",
                     ct_shape_str(k->out.ndim, k->out.shape, s3, sizeof s3),
                     ct_dnnl_dtypes_str(3, (ct_dtype[]){xdt, wdt, bdt}, ydt, s4, sizeof s4));
    int64_t O = W->shape[0], I = W->shape[1];
    int64_t R = O ? ct_tensor_numel(&k->out) / O : 0;
    if (!O || !I || !R) return empty(c);
    int packed;
    CT_TRY(pack_weight(c, k, 1, wdt, &packed));
    if (!packed && amx_gemm(k, c, 1)) return CT_OK;
    dnnl_memory_desc_t xmd, wmd, bmd, ymd;
    CT_TRY(ct_dnnl_md(c, &xmd, 2, (int64_t[]){R, I}, (int64_t[]){I, 1}, xdt));
    CT_TRY(ct_dnnl_md(c, &wmd, 2, (int64_t[]){I, O}, (int64_t[]){1, I}, wdt));
    CT_TRY(ct_dnnl_md(c, &ymd, 2, (int64_t[]){R, O}, (int64_t[]){O, 1}, ydt));
    if (has_bias) CT_TRY(ct_dnnl_md(c, &bmd, 2, (int64_t[]){1, O}, (int64_t[]){O, 1}, bdt));
    dnnl_memory_desc_t wany;
    if (packed) {
        CT_TRY(ct_dnnl_md_tag(c, &wany, 2, (int64_t[]){I, O}, dnnl_format_tag_any, wdt));
        ct_dnnl_describe(c, " (weight packed once per update)");
    }
    return add_matmul(c, &xmd, &wmd, NULL, has_bias ? &bmd : NULL, &ymd, packed ? &wany : NULL);
}

ct_status ct_k_matmul_onednn(ct_kargs *k) { return ct_dnnl_run(k, build_matmul); }
ct_status ct_k_linear_onednn(ct_kargs *k) { return ct_dnnl_run(k, build_linear); }
