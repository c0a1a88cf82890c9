/* bench/bench_bn.c - the SIMD batchnorm kernels alone (forward in training,
 * batchnorm_bwd_data, batchnorm_bwd_gamma), FP32, called directly on
 * hand-built ct_kargs: ms per call (median of --reps) for a list of shapes.
 * A shape of 2 dims (M, C) is the 2-D input the channels-last CNNs hand
 * batchnorm ((N*H*W, C) reshapes): the rows path of simd/norm.c with its
 * workspace (ct_bn_rows_ws_bytes); 4 dims (N, C, H, W) is the NCHW plane
 * path. The default list pairs each NHWC-as-2-D shape with its NCHW twin.
 * --no-ws runs 2-D shapes without the workspace: the column path (one
 * thread per 256-column block), what ran before the rows path.
 *   build/bench/bench_bn [--isa avx512|avx2] [--threads N] [--reps R] [--no-ws] [--shape M,C | N,C,H,W ...]
 * Built by `make -C bench BUILD=build bench_bn`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BENCH_NAME "bench_bn"
#include "bench_kernel.h"

ct_status ct_k_batchnorm_avx2(ct_kargs *k);
ct_status ct_k_batchnorm_bwd_data_avx2(ct_kargs *k);
ct_status ct_k_batchnorm_bwd_gamma_avx2(ct_kargs *k);
ct_status ct_k_batchnorm_avx512(ct_kargs *k);
ct_status ct_k_batchnorm_bwd_data_avx512(ct_kargs *k);
ct_status ct_k_batchnorm_bwd_gamma_avx512(ct_kargs *k);

static ct_tensor tens(void *d, int nd, const int64_t *s) { return ct_tensor_make(d, CT_F32, nd, s); }

static int g_no_ws; /* --no-ws: no workspace, so 2-D shapes run the column path (the kernels before the rows path) */

static int run_shape(int nd, const int64_t *s, int avx2, int nt, int reps) {
    int64_t n = 1;
    for (int i = 0; i < nd; i++) n *= s[i];
    int64_t N = s[0], C = s[1], cs[1] = {C};
    size_t wsb = g_no_ws ? 0 : ct_bn_rows_ws_bytes(N, C, n / (N * C));
    float *x = malloc(sizeof(float) * (size_t)n), *dy = malloc(sizeof(float) * (size_t)n);
    float *y = malloc(sizeof(float) * (size_t)n), *dx = malloc(sizeof(float) * (size_t)n);
    float *par = calloc(6 * (size_t)C, sizeof(float)), *aux = par + 4 * C, *dg = malloc(sizeof(float) * (size_t)C);
    void *ws = wsb ? aligned_alloc(64, (wsb + 63) & ~(size_t)63) : NULL;
    if (!x || !dy || !y || !dx || !par || !dg || (wsb && !ws)) return 1;
    srand(1);
    for (int64_t i = 0; i < n; i++) x[i] = (float)rand() / RAND_MAX - 0.3f, dy[i] = (float)rand() / RAND_MAX - 0.5f;
    for (int64_t c = 0; c < C; c++) par[c] = 1.0f, par[3 * C + c] = 1.0f; /* gamma, running var */
    ct_node_def nf, nbd, nbg;
    memset(&nf, 0, sizeof nf);
    nf.op = CT_OP_BATCHNORM;
    nf.n_in = 5;
    nf.fa[0] = 0.1f;
    nf.fa[1] = 1e-5f;
    nbd = nf;
    nbd.op = CT_OP_BATCHNORM_BWD_DATA;
    nbd.n_in = 4;
    nbg = nf;
    nbg.op = CT_OP_BATCHNORM_BWD_GAMMA;
    nbg.n_in = 3;
    ct_kargs kf, kd, kg;
    memset(&kf, 0, sizeof kf);
    kf.node = &nf;
    kf.out = tens(y, nd, s);
    kf.in[0] = tens(x, nd, s);
    for (int i = 0; i < 4; i++) kf.in[1 + i] = tens(par + i * C, 1, cs);
    kf.aux = aux;
    kf.ws = ws;
    kf.ws_bytes = wsb;
    kf.nthreads = nt;
    kf.training = 1;
    kd = kf;
    kd.node = &nbd;
    kd.out = tens(dx, nd, s);
    kd.in[0] = tens(dy, nd, s);
    kd.in[1] = kf.in[0];
    kd.in[2] = kf.in[1];
    kd.in[3] = kf.out;
    kd.in_aux[3] = aux;
    kd.aux = NULL;
    kg = kd;
    kg.node = &nbg;
    kg.out = tens(dg, 1, cs);
    kg.in[2] = kf.out;
    kg.in_aux[2] = aux;
    kg.in_aux[3] = NULL;
    ct_status (*f)(ct_kargs *) = avx2 ? ct_k_batchnorm_avx2 : ct_k_batchnorm_avx512;
    ct_status (*bd)(ct_kargs *) = avx2 ? ct_k_batchnorm_bwd_data_avx2 : ct_k_batchnorm_bwd_data_avx512;
    ct_status (*bg)(ct_kargs *) = avx2 ? ct_k_batchnorm_bwd_gamma_avx2 : ct_k_batchnorm_bwd_gamma_avx512;
    double *t = malloc(sizeof(double) * 3 * (size_t)reps);
    if (!t) return 1;
    if (bench_kernels(3, (ct_status (*[])(ct_kargs *)){f, bd, bg}, (ct_kargs *[]){&kf, &kd, &kg}, reps, t)) return 1;
    char sh[64];
    if (nd == 2) snprintf(sh, sizeof sh, "(%lld, %lld)", (long long)s[0], (long long)s[1]);
    else snprintf(sh, sizeof sh, "(%lld, %lld, %lld, %lld)", (long long)s[0], (long long)s[1], (long long)s[2], (long long)s[3]);
    const char *path = nd == 4 && n / (N * C) >= (avx2 ? 8 : 16) ? "plane" : wsb ? "rows" : "cols";
    double a = t[reps / 2], b = t[reps + reps / 2], c = t[2 * reps + reps / 2];
    printf("%-22s %-6s %-5s %d thr  fwd %7.3f  bwd_data %7.3f  bwd_gamma %7.3f  total %7.3f ms\n", sh, avx2 ? "avx2" : "avx512",
           path, nt, a, b, c, a + b + c);
    free(t); free(x); free(dy); free(y); free(dx); free(par); free(dg); free(ws);
    return 0;
}

int main(int argc, char **argv) {
    int avx2 = 0, nt = 1, reps = 15, ns = 0, nds[32];
    int64_t shapes[32][4];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--isa") && i + 1 < argc) avx2 = !strcmp(argv[++i], "avx2");
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) nt = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-ws")) g_no_ws = 1;
        else if (!strcmp(argv[i], "--shape") && i + 1 < argc && ns < 32) {
            int64_t v[4] = {0};
            int k = sscanf(argv[++i], "%ld,%ld,%ld,%ld", &v[0], &v[1], &v[2], &v[3]);
            if (k != 2 && k != 4) {
                fprintf(stderr, "bench_bn: --shape M,C or N,C,H,W\n");
                return 2;
            }
            nds[ns] = k;
            memcpy(shapes[ns++], v, sizeof v);
        } else {
            fprintf(stderr, "usage: bench_bn [--isa avx512|avx2] [--threads N] [--reps R] [--no-ws] [--shape M,C | N,C,H,W ...]\n");
            return 2;
        }
    }
    if (nt < 1) nt = 1;
    if (reps < 1 || reps > 1000) reps = 15;
    if (!ns) { /* NHWC as 2-D, then its NCHW twin */
        static const int64_t def[8][4] = {{100352, 32}, {128, 32, 28, 28}, {25088, 64}, {128, 64, 14, 14},
                                          {200704, 64}, {64, 64, 56, 56}, {50176, 128}, {64, 128, 28, 28}};
        for (int i = 0; i < 8; i++) {
            nds[ns] = def[i][2] ? 4 : 2;
            memcpy(shapes[ns++], def[i], sizeof def[i]);
        }
    }
    for (int i = 0; i < ns; i++)
        if (run_shape(nds[i], shapes[i], avx2, nt, reps)) return 1;
    return 0;
}
