/* bench/bench_kernel.h - what the kernel benches share (bench_attn, bench_bn, bench_pool: SIMD kernels called
 * directly with hand-made ct_kargs): bench_util.h, the kernel calling convention, and their timing loop. */
#ifndef CT_BENCH_KERNEL_H
#define CT_BENCH_KERNEL_H
#include "bench_util.h"
#include "core/ir_types.h"
#include "kernels/kernels.h"

/* 2 untimed then reps timed rounds of fn[0](k[0]), ..., fn[n-1](k[n-1]) in order; t[i * reps + r] = the ms
 * of call i in round r, each call's reps sorted (median t[i * reps + reps / 2], min t[i * reps]). Returns
 * 0, or -1 as soon as a kernel fails. */
static inline int bench_kernels(int n, ct_status (*const *fn)(ct_kargs *), ct_kargs *const *k, int reps, double *t) {
    for (int r = -2; r < reps; r++)
        for (int i = 0; i < n; i++) {
            double t0 = bench_now_ms();
            if (fn[i](k[i]) != CT_OK) return -1;
            if (r >= 0) t[i * reps + r] = bench_now_ms() - t0;
        }
    for (int i = 0; i < n; i++) qsort(t + i * reps, (size_t)reps, sizeof *t, bench_cmp_double);
    return 0;
}
#endif
