/* bench/bench_ln.c - the SIMD layernorm kernels alone, as gpt-char-small's step calls them: the forward,
 * add+layernorm (fusion), and the backward's data kernel plain, with the residual add (layernorm_bwd+add)
 * and with the residual add and the three column sums (dgamma, dbeta, the next bias gradient:
 * layernorm_bwd+colsum), called directly on hand-built ct_kargs, in three dtype sets: fp32; bf16 as a BF16
 * autocast plan calls them (gpt-char-small `precision bf16`: the residual stream and dx FP32, the layernorm's
 * output, the branch's output added to the stream and the backward's dy BF16, the bias gradient's sum
 * rounded to BF16); bf16-pure (every activation BF16). Prints ms per call (median of --reps; min beside it),
 * the GB/s its bytes make, and how far that is from a scale's GB/s (one read, one write of the stream's
 * dtype) on the same data; in bf16 also the residual gradient's cast as a pass and stored by the row pass
 * (layernorm_bwd+cast). The default shape (2048, 384) is gpt-char-small's (batch 8 x 256 tokens, 384).
 *   build/bench/bench_ln [--isa avx512|avx2] [--threads N] [--reps R] [--rows R] [--cols D]
 * Built by `make -C bench BUILD=build bench_ln`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BENCH_NAME "bench_ln"
#include "bench_kernel.h"
#include "graph/ir.h"

ct_status ct_k_layernorm_avx2(ct_kargs *k);
ct_status ct_k_add_layernorm_avx2(ct_kargs *k);
ct_status ct_k_layernorm_bwd_data_avx2(ct_kargs *k);
ct_status ct_k_scale_avx2(ct_kargs *k);
ct_status ct_k_layernorm_avx512(ct_kargs *k);
ct_status ct_k_add_layernorm_avx512(ct_kargs *k);
ct_status ct_k_layernorm_bwd_data_avx512(ct_kargs *k);
ct_status ct_k_scale_avx512(ct_kargs *k);

static ct_tensor tens(void *d, ct_dtype dt, int64_t m, int64_t n) {
    return ct_tensor_make(d, dt, n ? 2 : 1, n ? (int64_t[]){m, n} : (int64_t[]){m});
}

static void *act(int64_t n, ct_dtype dt, unsigned seed, float lo, float hi) {
    size_t es = dt == CT_F32 ? 4 : 2;
    void *p = aligned_alloc(64, ((size_t)n * es + 63) & ~(size_t)63);
    float *t = malloc(sizeof(float) * (size_t)n);
    if (!p || !t) exit(1);
    srand(seed);
    for (int64_t i = 0; i < n; i++) t[i] = lo + (hi - lo) * (float)rand() / RAND_MAX;
    if (dt == CT_F32) memcpy(p, t, (size_t)n * 4);
    else ct_f32_to_bf16_n(t, p, (size_t)n, CT_ISA_REF);
    free(t);
    return p;
}

enum { M_FP32, M_BF16, M_PURE };
static const char *const k_mode[] = {"fp32", "bf16", "bf16-pure"};

/* the unfused CAST's pass (ct_k_cast's conversion, without a context) */
static ct_isa g_cast_isa;
static ct_status cast_pass(ct_kargs *k) {
    ct_f32_to_bf16_n(k->in[0].data, k->out.data, (size_t)ct_tensor_numel(&k->out), g_cast_isa);
    return CT_OK;
}

static int run(int mode, int64_t R, int64_t D, int avx2, int nt, int reps) {
    const int64_t n = R * D;
    /* dtypes: the stream (x, the residual r, the sum s, dx), the 16-bit side (y, the added branch b, dy) */
    const ct_dtype dt = mode == M_PURE ? CT_BF16 : CT_F32, lt = mode == M_FP32 ? CT_F32 : CT_BF16;
    const double ms = (double)n * ct_dtype_size(dt) / 1e6, ml = (double)n * ct_dtype_size(lt) / 1e6;
    void *x = act(n, dt, 1, -2, 2), *r = act(n, dt, 2, -1, 1), *s = act(n, dt, 3, 0, 0), *y = act(n, lt, 4, 0, 0);
    void *b = act(n, lt, 9, -1, 1), *dy = act(n, lt, 5, -0.5f, 0.5f), *dx = act(n, dt, 6, 0, 0);
    float *gamma = act(D, CT_F32, 7, 0.5f, 1.5f), *beta = act(D, CT_F32, 8, -0.1f, 0.1f);
    float *stats = calloc(2 * (size_t)R, sizeof(float));
    const int64_t P = ct_colsum_pieces(R, D);
    double *csaux = calloc((size_t)(3 * P * D), sizeof(double));
    if (!stats || !csaux) return 1;
    ct_node_def nsc, nf, naf, nb, nbr, nbc;
    memset(&nf, 0, sizeof nf);
    nf.op = CT_OP_LAYERNORM;
    nf.dtype = lt; /* the layernorm writes the 16-bit side (autocast: cast_fold) */
    nf.n_in = 3;
    nf.fa[0] = 1e-5f;
    naf = nf;
    naf.op = CT_OP_ADD_LAYERNORM;
    naf.n_in = 5;
    naf.ia[0] = dt; /* the sum's dtype */
    nb = nf;
    nb.op = CT_OP_LAYERNORM_BWD_DATA;
    nb.dtype = dt;
    nb.n_in = 4;
    nbr = nb;
    nbr.n_in = 5;
    nbc = nbr;
    nbc.ia[7] = CT_COLSUM_DGAMMA | CT_COLSUM_DY | CT_COLSUM_OUT;
    nbc.ia[6] = lt; /* the bias gradient's sum reads the BF16 cast of dx + r (autocast) */
    memset(&nsc, 0, sizeof nsc);
    nsc.op = CT_OP_SCALE;
    nsc.dtype = dt;
    nsc.n_in = 1;
    nsc.fa[0] = 0.5f;
    ct_kargs ks, kf, kaf, kb, kbr, kbc;
    memset(&kf, 0, sizeof kf);
    kf.nthreads = nt;
    kf.training = 1;
    ks = kf;
    ks.node = &nsc;
    ks.in[0] = tens(x, dt, R, D);
    ks.out = tens(s, dt, R, D);
    kf.node = &nf;
    kf.in[0] = tens(x, dt, R, D);
    kf.in[1] = tens(gamma, CT_F32, D, 0);
    kf.in[2] = tens(beta, CT_F32, D, 0);
    kf.out = tens(y, lt, R, D);
    kf.aux = stats;
    kaf = kf;
    kaf.node = &naf;
    kaf.in[0] = tens(x, dt, R, D);
    kaf.in[1] = tens(b, lt, R, D);
    kaf.in[2] = tens(s, dt, R, D);
    kaf.in[3] = kf.in[1];
    kaf.in[4] = kf.in[2];
    memset(&kb, 0, sizeof kb);
    kb.nthreads = nt;
    kb.training = 1;
    kb.node = &nb;
    kb.in[0] = tens(dy, lt, R, D);
    kb.in[1] = tens(x, dt, R, D);
    kb.in[2] = kf.in[1];
    kb.in[3] = tens(y, lt, R, D);
    kb.in_aux[3] = stats;
    kb.out = tens(dx, dt, R, D);
    kbr = kb;
    kbr.node = &nbr;
    kbr.in[4] = tens(r, dt, R, D);
    kbc = kbr;
    kbc.node = &nbc;
    kbc.aux = csaux;
    ct_status (*fs)(ct_kargs *) = avx2 ? ct_k_scale_avx2 : ct_k_scale_avx512;
    ct_status (*ff)(ct_kargs *) = avx2 ? ct_k_layernorm_avx2 : ct_k_layernorm_avx512;
    ct_status (*fa)(ct_kargs *) = avx2 ? ct_k_add_layernorm_avx2 : ct_k_add_layernorm_avx512;
    ct_status (*fb)(ct_kargs *) = avx2 ? ct_k_layernorm_bwd_data_avx2 : ct_k_layernorm_bwd_data_avx512;
    /* bf16 (autocast): the residual gradient's cast for the linear's backward, as its own pass (the unfused
       CAST) and stored by the row pass (layernorm_bwd+cast, k->out2) */
    void *y2 = act(n, lt, 10, 0, 0);
    ct_kargs kcast = kbc, kbo = kbc;
    kcast.in[0] = kbc.out;
    kcast.out = tens(y2, lt, R, D);
    kbo.out2 = kcast.out;
    g_cast_isa = avx2 ? CT_ISA_AVX2 : CT_ISA_AVX512;
    enum { NK = 8 };
    const int nk = mode == M_BF16 ? NK : NK - 2;
    static const char *names[NK] = {"scale (floor)", "layernorm", "add+layernorm", "layernorm_bwd_data",
                                    "layernorm_bwd+add", "layernorm_bwd+add+colsum", "  its cast (a pass)",
                                    "layernorm_bwd+add+colsum+cast"};
    /* MB each call reads + writes: scale x -> s; layernorm x -> y; add+layernorm x, b -> s, y; backward
       dy, x -> dx (+ r) (+ the cast); the cast dx -> y2 */
    const double mbs[NK] = {2 * ms, ms + ml, 2 * ms + 2 * ml, ml + 2 * ms, ml + 3 * ms, ml + 3 * ms, ms + ml, 2 * ml + 3 * ms};
    double *t = malloc(sizeof(double) * NK * (size_t)reps);
    if (!t) return 1;
    if (bench_kernels(nk, (ct_status (*[])(ct_kargs *)){fs, ff, fa, fb, fb, fb, cast_pass, fb},
                      (ct_kargs *[]){&ks, &kf, &kaf, &kb, &kbr, &kbc, &kcast, &kbo}, reps, t)) {
        fprintf(stderr, "bench_ln: a kernel declined (%s, %s)\n", k_mode[mode], avx2 ? "avx2" : "avx512");
        return 1;
    }
    const double floor_gbs = mbs[0] / t[reps / 2];
    for (int i = 0; i < nk; i++) {
        double med = t[i * reps + reps / 2], mn = t[i * reps], gbs = mbs[i] / med;
        printf("%-9s %-6s (%lld, %lld) %d thr  %-26s %7.3f ms (min %7.3f)  %6.1f GB/s  %4.2fx the floor\n",
               k_mode[mode], avx2 ? "avx2" : "avx512", (long long)R, (long long)D, nt, names[i], med, mn, gbs,
               floor_gbs / gbs);
    }
    free(t); free(y2); free(x); free(r); free(s); free(y); free(b); free(dy); free(dx); free(gamma); free(beta); free(stats);
    free(csaux);
    return 0;
}

int main(int argc, char **argv) {
    int avx2 = 0, nt = 2, reps = 21;
    int64_t R = 2048, D = 384;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--isa") && i + 1 < argc) avx2 = !strcmp(argv[++i], "avx2");
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) nt = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rows") && i + 1 < argc) R = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--cols") && i + 1 < argc) D = atoll(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_ln [--isa avx512|avx2] [--threads N] [--reps R] [--rows R] [--cols D]\n");
            return 2;
        }
    }
    if (nt < 1) nt = 1;
    if (reps < 1 || reps > 1000) reps = 21;
    if (R < 1 || D < 16 || D > CT_COLSUM_MAX_D) {
        fprintf(stderr, "bench_ln: --rows >= 1, 16 <= --cols <= %d\n", CT_COLSUM_MAX_D);
        return 2;
    }
    for (int m = M_FP32; m <= M_PURE; m++)
        if (run(m, R, D, avx2, nt, reps)) return 1;
    return 0;
}
