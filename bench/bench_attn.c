/* bench/bench_attn.c - the SIMD fused attention kernels alone (forward and
 * backward, FP32), called directly with gpt-char-small's shape by default:
 *   bench_attn [--isa avx2|avx512] [--threads N] [--reps N] [--B 8] [--T 256] [--H 6] [--Dh 64] [--causal 0|1]
 * Prints the median ms per call of each and its GFLOP/s (causal: the
 * products' flops over the lower triangle only), and the minimum (steadier
 * than the median on a shared machine). Checks nothing: the tests
 * (test_attention) compare the kernels with the reference. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BENCH_NAME "bench_attn"
#include "bench_kernel.h"

ct_status ct_k_attention_avx2(ct_kargs *k);
ct_status ct_k_attention_bwd_avx2(ct_kargs *k);
ct_status ct_k_attention_avx512(ct_kargs *k);
ct_status ct_k_attention_bwd_avx512(ct_kargs *k);

static ct_tensor tensor3(void *data, int64_t a, int64_t b, int64_t c) {
    return ct_tensor_make(data, CT_F32, 3, (int64_t[]){a, b, c});
}

int main(int argc, char **argv) {
    int64_t B = 8, T = 256, H = 6, Dh = 64;
    int causal = 1, nt = 2, reps = 20, avx2 = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *o = argv[i], *v = argv[i + 1];
        if (!strcmp(o, "--isa")) avx2 = !strcmp(v, "avx2");
        else if (!strcmp(o, "--threads")) nt = atoi(v);
        else if (!strcmp(o, "--reps")) reps = atoi(v);
        else if (!strcmp(o, "--B")) B = atoll(v);
        else if (!strcmp(o, "--T")) T = atoll(v);
        else if (!strcmp(o, "--H")) H = atoll(v);
        else if (!strcmp(o, "--Dh")) Dh = atoll(v);
        else if (!strcmp(o, "--causal")) causal = atoi(v);
        else {
            fprintf(stderr, "unknown option %s\n", o);
            return 2;
        }
    }
    if (reps < 1 || reps > 1000) reps = 20;
    int64_t D = H * Dh;
    float *qkv = malloc(sizeof(float) * (size_t)(B * T * 3 * D)), *dy = malloc(sizeof(float) * (size_t)(B * T * D));
    float *y = malloc(sizeof(float) * (size_t)(B * T * D)), *dx = malloc(sizeof(float) * (size_t)(B * T * 3 * D));
    float *lse = malloc(sizeof(float) * (size_t)(B * H * T));
    size_t ws_bytes = (size_t)nt * ct_attention_ws_per_thread(T, Dh);
    void *ws = aligned_alloc(64, ws_bytes);
    if (!qkv || !dy || !y || !dx || !lse || !ws) return 1;
    srand(1);
    for (int64_t i = 0; i < B * T * 3 * D; i++) qkv[i] = (float)rand() / RAND_MAX - 0.5f;
    for (int64_t i = 0; i < B * T * D; i++) dy[i] = (float)rand() / RAND_MAX - 0.5f;

    ct_node_def nf, nb;
    memset(&nf, 0, sizeof nf);
    nf.op = CT_OP_ATTENTION;
    nf.n_in = 1;
    nf.ia[0] = H;
    nf.ia[1] = causal;
    nf.fa[0] = 1.0f / sqrtf((float)Dh);
    nb = nf;
    nb.op = CT_OP_ATTENTION_BWD;
    nb.n_in = 3;

    ct_kargs kf, kb;
    memset(&kf, 0, sizeof kf);
    kf.node = &nf;
    kf.out = tensor3(y, B, T, D);
    kf.in[0] = tensor3(qkv, B, T, 3 * D);
    kf.aux = lse;
    kf.ws = ws;
    kf.ws_bytes = ws_bytes;
    kf.nthreads = nt;
    kf.training = 1;
    memset(&kb, 0, sizeof kb);
    kb.node = &nb;
    kb.out = tensor3(dx, B, T, 3 * D);
    kb.in[0] = tensor3(dy, B, T, D);
    kb.in[1] = kf.in[0];
    kb.in[2] = kf.out;
    kb.in_aux[2] = lse;
    kb.ws = ws;
    kb.ws_bytes = ws_bytes;
    kb.nthreads = nt;
    kb.training = 1;

    ct_status (*fwd)(ct_kargs *) = avx2 ? ct_k_attention_avx2 : ct_k_attention_avx512;
    ct_status (*bwd)(ct_kargs *) = avx2 ? ct_k_attention_bwd_avx2 : ct_k_attention_bwd_avx512;
    double *tf = malloc(sizeof(double) * 2 * (size_t)reps), *tb = tf + reps;
    if (!tf) return 1;
    if (bench_kernels(2, (ct_status (*[])(ct_kargs *)){fwd, bwd}, (ct_kargs *[]){&kf, &kb}, reps, tf)) return 1;
    double f = (double)B * H * T * T * Dh * 2 * (causal ? 0.5 : 1.0); /* one T x T x Dh product */
    double cs = 0;
    for (int64_t i = 0; i < B * T * 3 * D; i++) cs += dx[i];
    for (int64_t i = 0; i < B * T * D; i++) cs += y[i];
    printf("attention %s threads %d B %lld T %lld H %lld Dh %lld causal %d: fwd %.3f ms (%.1f GFLOP/s) bwd %.3f ms "
           "(%.1f GFLOP/s) min fwd %.3f bwd %.3f checksum %.6e\n",
           avx2 ? "avx2" : "avx512", nt, (long long)B, (long long)T, (long long)H, (long long)Dh, causal,
           tf[reps / 2], 2 * f / (tf[reps / 2] * 1e6), tb[reps / 2], 5 * f / (tb[reps / 2] * 1e6), tf[0], tb[0], cs);
    free(tf), free(qkv), free(dy), free(y), free(dx), free(lse), free(ws);
    return 0;
}
