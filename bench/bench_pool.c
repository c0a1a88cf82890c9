/* bench/bench_pool.c - the SIMD max pooling kernels alone, channels-last
 * (N, H, W, C) against (N, C, H, W), forward and backward, FP32, called
 * directly (as bench_attn):
 *   bench_pool [--isa avx2|avx512] [--threads N] [--reps N]
 * Shapes: the CNN's 2x2 pools on (128, 32, 28, 28) and (128, 64, 14, 14),
 * ResNet's stem pool 3x3 stride 2 pad 1 on (64, 64, 56, 56). Prints the
 * median ms per call (and the minimum, steadier on a shared machine).
 * Checks nothing: tests/test_ops.c compares the layouts bit for bit. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BENCH_NAME "bench_pool"
#include "bench_kernel.h"
#include "kernels/pool_plane.h"

ct_status ct_k_maxpool2d_avx2(ct_kargs *k);
ct_status ct_k_maxpool2d_bwd_avx2(ct_kargs *k);
ct_status ct_k_maxpool2d_avx512(ct_kargs *k);
ct_status ct_k_maxpool2d_bwd_avx512(ct_kargs *k);

static ct_tensor tensor4(void *data, const int64_t *s) {
    ct_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = CT_F32;
    t.ndim = 4;
    for (int i = 0; i < 4; i++) t.shape[i] = s[i];
    t.strides[3] = 1;
    for (int i = 2; i >= 0; i--) t.strides[i] = t.strides[i + 1] * s[i + 1];
    return t;
}

/* one shape, one layout: median / min ms of forward and backward */
static int run(int avx2, int nt, int reps, int64_t N, int64_t C, int64_t H, int64_t W, int K, int S, int P, int cl,
               double out[4]) {
    const int64_t OH = (H + 2 * P - K) / S + 1, OW = (W + 2 * P - K) / S + 1;
    const int64_t nx = N * C * H * W, ny = N * C * OH * OW;
    int64_t xs[4] = {N, C, H, W}, ys[4] = {N, C, OH, OW};
    if (cl) {
        int64_t a[4] = {N, H, W, C}, b[4] = {N, OH, OW, C};
        memcpy(xs, a, sizeof a);
        memcpy(ys, b, sizeof b);
    }
    float *x = malloc((size_t)nx * 4), *y = malloc((size_t)ny * 4), *dy = malloc((size_t)ny * 4), *dx = malloc((size_t)nx * 4);
    void *arg = malloc((size_t)ny * ct_maxpool_arg_size(K, K));
    double *t = malloc(sizeof(double) * 2 * (size_t)reps);
    if (!x || !y || !dy || !dx || !arg || !t) return 1;
    srand(1);
    for (int64_t i = 0; i < nx; i++) x[i] = (float)rand() / RAND_MAX - 0.5f;
    for (int64_t i = 0; i < ny; i++) dy[i] = (float)rand() / RAND_MAX - 0.5f;
    ct_node_def nf, nb;
    memset(&nf, 0, sizeof nf);
    nf.op = CT_OP_MAXPOOL2D;
    nf.n_in = 1;
    nf.ia[0] = nf.ia[1] = K;
    nf.ia[2] = nf.ia[3] = S;
    nf.ia[4] = nf.ia[5] = P;
    nf.ia[6] = nf.ia[7] = 1;
    nf.fa[0] = 1.0f;
    nf.fa[1] = cl ? 1.0f : 0.0f;
    nb = nf;
    nb.op = CT_OP_MAXPOOL2D_BWD;
    nb.n_in = 2;
    ct_kargs kf, kb;
    memset(&kf, 0, sizeof kf);
    kf.node = &nf;
    kf.in[0] = tensor4(x, xs);
    kf.out = tensor4(y, ys);
    kf.aux = arg;
    kf.nthreads = nt;
    kf.training = 1;
    memset(&kb, 0, sizeof kb);
    kb.node = &nb;
    kb.in[0] = tensor4(dy, ys);
    kb.in[1] = kf.out;
    kb.in_aux[1] = arg;
    kb.out = tensor4(dx, xs);
    kb.nthreads = nt;
    kb.training = 1;
    ct_status (*fwd)(ct_kargs *) = avx2 ? ct_k_maxpool2d_avx2 : ct_k_maxpool2d_avx512;
    ct_status (*bwd)(ct_kargs *) = avx2 ? ct_k_maxpool2d_bwd_avx2 : ct_k_maxpool2d_bwd_avx512;
    if (bench_kernels(2, (ct_status (*[])(ct_kargs *)){fwd, bwd}, (ct_kargs *[]){&kf, &kb}, reps, t)) return 1;
    out[0] = t[reps / 2], out[1] = t[reps + reps / 2], out[2] = t[0], out[3] = t[reps];
    free(x), free(y), free(dy), free(dx), free(arg), free(t);
    return 0;
}

int main(int argc, char **argv) {
    int nt = 1, reps = 20, avx2 = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *o = argv[i], *v = argv[i + 1];
        if (!strcmp(o, "--isa")) avx2 = !strcmp(v, "avx2");
        else if (!strcmp(o, "--threads")) nt = atoi(v);
        else if (!strcmp(o, "--reps")) reps = atoi(v);
        else {
            fprintf(stderr, "unknown option %s\n", o);
            return 2;
        }
    }
    if (reps < 1 || reps > 1000) reps = 20;
    static const struct {
        int64_t N, C, H, W;
        int K, S, P;
    } cfg[] = {{128, 32, 28, 28, 2, 2, 0}, {128, 64, 14, 14, 2, 2, 0}, {64, 64, 56, 56, 3, 2, 1}};
    printf("maxpool2d %s, %d thread(s), median (min) ms\n", avx2 ? "avx2" : "avx512", nt);
    printf("%-22s %-9s %8s %8s %8s %8s %8s\n", "shape (N,C,H,W)", "window", "layout", "fwd", "bwd", "fwd+bwd", "min");
    for (size_t i = 0; i < sizeof cfg / sizeof cfg[0]; i++)
        for (int cl = 0; cl < 2; cl++) {
            double t[4];
            if (run(avx2, nt, reps, cfg[i].N, cfg[i].C, cfg[i].H, cfg[i].W, cfg[i].K, cfg[i].S, cfg[i].P, cl, t)) {
                fprintf(stderr, "bench_pool: a kernel failed\n");
                return 1;
            }
            char sh[32], win[16];
            snprintf(sh, sizeof sh, "(%lld,%lld,%lld,%lld)", (long long)cfg[i].N, (long long)cfg[i].C,
                     (long long)cfg[i].H, (long long)cfg[i].W);
            snprintf(win, sizeof win, "%dx%d/%d p%d", cfg[i].K, cfg[i].K, cfg[i].S, cfg[i].P);
            printf("%-22s %-9s %8s %8.3f %8.3f %8.3f %8.3f\n", sh, win, cl ? "NHWC" : "NCHW", t[0], t[1], t[0] + t[1],
                   t[2] + t[3]);
        }
    return 0;
}
