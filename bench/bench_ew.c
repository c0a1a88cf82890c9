/* bench/bench_ew.c - the SIMD element-wise kernels alone against their memory floor: a scale (one read, one
 * write) and each activation's forward (one read, one write) and backward (two reads, one write), FP32 and
 * BF16, called directly on hand-built ct_kargs. Prints ms per call (median of --reps; min beside it) and the
 * GB/s its bytes make, and the ratio to the scale's time for the same bytes (1.0 = at the floor a copy-like
 * pass reaches on this machine; the backward's floor is 1.5 scales), and a bias gradient's column sum
 * (M, D) -> (D) (one read: its floor is half a scale). --resident sizes the tensors to stay
 * in L2 (64 Ki elements) so the figure is the arithmetic's alone.
 *   build/bench/bench_ew [--isa avx512|avx2] [--threads N] [--reps R] [--rows M] [--cols D] [--resident]
 *                        [--kinds "gelu gelu_tanh silu relu"]
 * The default shape (2048, 1536) is gpt-char-small's MLP activation (batch 8 x 256 tokens, 4 x 384).
 * Built by `make -C bench BUILD=build bench_ew`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BENCH_NAME "bench_ew"
#include "bench_kernel.h"
#include "graph/ir.h"

ct_status ct_k_unary_avx2(ct_kargs *k);
ct_status ct_k_unary_bwd_avx2(ct_kargs *k);
ct_status ct_k_scale_avx2(ct_kargs *k);
ct_status ct_k_unary_avx512(ct_kargs *k);
ct_status ct_k_unary_bwd_avx512(ct_kargs *k);
ct_status ct_k_scale_avx512(ct_kargs *k);
ct_status ct_k_sum_avx2(ct_kargs *k);
ct_status ct_k_sum_avx512(ct_kargs *k);

static ct_tensor tens(void *d, ct_dtype dt, int64_t m, int64_t n) { return ct_tensor_make(d, dt, 2, (int64_t[]){m, n}); }

static const struct {
    const char *name;
    int kind, from_out; /* ct_unary_kind; the backward reads y (1) or x (0) */
} g_kinds[] = {{"relu", CT_UNARY_RELU, 1}, {"gelu", CT_UNARY_GELU, 0}, {"gelu_tanh", CT_UNARY_GELU_TANH, 0},
               {"silu", CT_UNARY_SILU, 0}, {"sigmoid", CT_UNARY_SIGMOID, 1}, {"tanh", CT_UNARY_TANH, 1}};

/* Times scale, then fwd / bwd of each kind in ks (indices into g_kinds) on (m, d) tensors of dtype dt. */
static int run(ct_dtype dt, int64_t m, int64_t d, int avx2, int nt, int reps, const int *ks, int nk) {
    const int64_t n = m * d;
    const size_t es = dt == CT_F32 ? 4 : 2;
    void *x = aligned_alloc(64, (size_t)n * es + 64), *dy = aligned_alloc(64, (size_t)n * es + 64);
    void *y = aligned_alloc(64, (size_t)n * es + 64), *dx = aligned_alloc(64, (size_t)n * es + 64);
    float *tmp = malloc(sizeof(float) * (size_t)n);
    if (!x || !dy || !y || !dx || !tmp) return 1;
    srand(1);
    for (int64_t i = 0; i < n; i++) tmp[i] = 6.0f * ((float)rand() / RAND_MAX - 0.5f);
    if (dt == CT_F32) memcpy(x, tmp, (size_t)n * 4);
    else ct_f32_to_bf16_n(tmp, x, (size_t)n, CT_ISA_REF);
    for (int64_t i = 0; i < n; i++) tmp[i] = (float)rand() / RAND_MAX - 0.5f;
    if (dt == CT_F32) memcpy(dy, tmp, (size_t)n * 4);
    else ct_f32_to_bf16_n(tmp, dy, (size_t)n, CT_ISA_REF);
    ct_status (*fs)(ct_kargs *) = avx2 ? ct_k_scale_avx2 : ct_k_scale_avx512;
    ct_status (*ff)(ct_kargs *) = avx2 ? ct_k_unary_avx2 : ct_k_unary_avx512;
    ct_status (*fb)(ct_kargs *) = avx2 ? ct_k_unary_bwd_avx2 : ct_k_unary_bwd_avx512;
    ct_node_def ns;
    memset(&ns, 0, sizeof ns);
    ns.op = CT_OP_SCALE;
    ns.n_in = 1;
    ns.fa[0] = 0.5f;
    ct_kargs kscale;
    memset(&kscale, 0, sizeof kscale);
    kscale.node = &ns;
    kscale.in[0] = tens(x, dt, m, d);
    kscale.out = tens(y, dt, m, d);
    kscale.nthreads = nt;
    double *t = malloc(sizeof(double) * 3 * (size_t)reps);
    if (!t) return 1;
    if (bench_kernels(1, (ct_status (*[])(ct_kargs *)){fs}, (ct_kargs *[]){&kscale}, reps, t)) return 1;
    const double mb = (double)n * (double)es / 1e6, sc = t[reps / 2];
    printf("%-5s (%lld, %lld) %-6s %d thr  %-14s %8.3f ms (min %8.3f)  %6.1f GB/s  floor 1.00\n",
           dt == CT_F32 ? "fp32" : "bf16", (long long)m, (long long)d, avx2 ? "avx2" : "avx512", nt, "scale", sc, t[0],
           2 * mb / sc);
    {
        ct_node_def nsum = ns;
        nsum.op = CT_OP_SUM;
        nsum.ia[0] = 1; /* over rows: a bias gradient */
        nsum.fa[0] = 1.0f;
        nsum.ndim = 1;
        nsum.shape[0] = d;
        nsum.dtype = CT_F32;
        ct_kargs ksum = kscale;
        ksum.node = &nsum;
        ksum.in[0] = tens(dy, dt, m, d);
        ksum.out = ct_tensor_make(dx, CT_F32, 1, &d);
        ksum.ws_bytes = ct_ws_sum(NULL, &nsum); /* the workspace the planner gives it: its pieces' partials */
        ksum.ws = malloc(ksum.ws_bytes);
        ct_status (*fsum)(ct_kargs *) = avx2 ? ct_k_sum_avx2 : ct_k_sum_avx512;
        if (!ksum.ws || bench_kernels(1, (ct_status (*[])(ct_kargs *)){fsum}, (ct_kargs *[]){&ksum}, reps, t)) return 1;
        free(ksum.ws);
        printf("%-5s (%lld, %lld) %-6s %d thr  %-14s %8.3f ms (min %8.3f)  %6.1f GB/s  floor %.2f\n",
               dt == CT_F32 ? "fp32" : "bf16", (long long)m, (long long)d, avx2 ? "avx2" : "avx512", nt, "bias sum",
               t[reps / 2], t[0], mb / t[reps / 2], t[reps / 2] / (sc * 0.5));
    }
    for (int q = 0; q < nk; q++) {
        ct_node_def nf = ns, nb = ns;
        nf.op = CT_OP_UNARY;
        nf.ia[0] = g_kinds[ks[q]].kind;
        nb.op = CT_OP_UNARY_BWD;
        nb.n_in = 2;
        nb.ia[0] = g_kinds[ks[q]].kind;
        nb.ia[1] = g_kinds[ks[q]].from_out;
        ct_kargs kf = kscale, kb = kscale;
        kf.node = &nf;
        kb.node = &nb;
        kb.in[0] = tens(dy, dt, m, d);
        kb.in[1] = g_kinds[ks[q]].from_out ? kf.out : kf.in[0];
        kb.out = tens(dx, dt, m, d);
        if (bench_kernels(2, (ct_status (*[])(ct_kargs *)){ff, fb}, (ct_kargs *[]){&kf, &kb}, reps, t)) return 1;
        char nm[32];
        for (int b = 0; b < 2; b++) {
            double ms = t[b * reps + reps / 2], bytes = (b ? 3 : 2) * mb;
            snprintf(nm, sizeof nm, "%s %s", g_kinds[ks[q]].name, b ? "bwd" : "fwd");
            printf("%-5s (%lld, %lld) %-6s %d thr  %-14s %8.3f ms (min %8.3f)  %6.1f GB/s  floor %.2f\n",
                   dt == CT_F32 ? "fp32" : "bf16", (long long)m, (long long)d, avx2 ? "avx2" : "avx512", nt, nm, ms,
                   t[b * reps], bytes / ms, ms / (sc * (b ? 1.5 : 1.0)));
        }
    }
    free(t); free(x); free(dy); free(y); free(dx); free(tmp);
    return 0;
}

int main(int argc, char **argv) {
    int avx2 = 0, nt = 2, reps = 21, ks[8], nk = 0;
    int64_t m = 2048, d = 1536;
    const char *kinds = "gelu gelu_tanh silu relu";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--isa") && i + 1 < argc) avx2 = !strcmp(argv[++i], "avx2");
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) nt = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rows") && i + 1 < argc) m = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--cols") && i + 1 < argc) d = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--resident")) m = 64, d = 1024;
        else if (!strcmp(argv[i], "--kinds") && i + 1 < argc) kinds = argv[++i];
        else {
            fprintf(stderr, "usage: bench_ew [--isa avx512|avx2] [--threads N] [--reps R] [--rows M] [--cols D] "
                            "[--resident] [--kinds \"gelu gelu_tanh silu relu sigmoid tanh\"]\n");
            return 2;
        }
    }
    if (nt < 1) nt = 1;
    if (reps < 1 || reps > 100000) reps = 21;
    if (m < 1 || d < 1) {
        fprintf(stderr, "bench_ew: --rows and --cols must be positive\n");
        return 2;
    }
    char buf[256];
    snprintf(buf, sizeof buf, "%s", kinds);
    for (char *s = strtok(buf, " ,"); s; s = strtok(NULL, " ,")) {
        int f = -1;
        for (int q = 0; q < (int)(sizeof g_kinds / sizeof g_kinds[0]); q++)
            if (!strcmp(s, g_kinds[q].name)) f = q;
        if (f < 0 || nk == 8) {
            fprintf(stderr, "bench_ew: unknown kind '%s' (relu gelu gelu_tanh silu sigmoid tanh)\n", s);
            return 2;
        }
        ks[nk++] = f;
    }
    if (run(CT_F32, m, d, avx2, nt, reps, ks, nk) || run(CT_BF16, m, d, avx2, nt, reps, ks, nk)) {
        fprintf(stderr, "bench_ew: a kernel failed\n");
        return 1;
    }
    return 0;
}
