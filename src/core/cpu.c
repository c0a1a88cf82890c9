/* src/core/cpu.c - the library's one CPU-feature probe (cpuid + XGETBV),
 * run once per process, and the best ISA those features allow. Contexts copy
 * the features (and ask the kernel for AMX permission, context.c); the
 * conversion dispatch (src/kernels/convert.c) reads them without a context. */
#include <cpuid.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "internal.h"

static uint64_t xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static void detect_cpu(ct_cpu_features *f) {
    memset(f, 0, sizeof *f);
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    int osxsave = (c >> 27) & 1;
    f->fma = (c >> 12) & 1;
    f->f16c = (c >> 29) & 1;
    int avx = (c >> 28) & 1;
    uint64_t xcr0 = osxsave ? xgetbv0() : 0;
    f->os_avx = avx && (xcr0 & 0x6) == 0x6;
    f->os_avx512 = f->os_avx && (xcr0 & 0xe0) == 0xe0;
    f->os_amx = (xcr0 & 0x60000) == 0x60000;
    if (__get_cpuid_max(0, NULL) >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        f->avx2 = (b >> 5) & 1;
        f->avx512f = (b >> 16) & 1;
        f->avx512dq = (b >> 17) & 1;
        f->avx512bw = (b >> 30) & 1;
        f->avx512vl = (b >> 31) & 1;
        f->avx512_fp16 = (d >> 23) & 1;
        f->amx_bf16 = (d >> 22) & 1;
        f->amx_tile = (d >> 24) & 1;
        f->amx_int8 = (d >> 25) & 1;
        __cpuid_count(7, 1, a, b, c, d);
        f->avx512_bf16 = (a >> 5) & 1;
    }
    if (!f->os_avx) f->avx2 = f->fma = 0;
    if (!f->os_avx512) f->avx512f = f->avx512bw = f->avx512dq = f->avx512vl = f->avx512_bf16 = f->avx512_fp16 = 0;
}

/* Written once under pthread_once, read-only afterwards (cpuid traps to the
 * hypervisor in a VM: too slow to repeat per conversion call). */
static ct_cpu_features g_cpu;
static pthread_once_t g_cpu_once = PTHREAD_ONCE_INIT;

int ct_simd_bf16_cvt;

static void probe_once(void) {
    detect_cpu(&g_cpu);
    ct_simd_bf16_cvt = g_cpu.avx512_bf16 && g_cpu.avx512f; /* cleared above without the OS's AVX-512 state */
}

const ct_cpu_features *ct_cpu_probe(void) {
    pthread_once(&g_cpu_once, probe_once);
    return &g_cpu;
}

ct_isa ct_cpu_best_isa(const ct_cpu_features *f) {
    if (f->avx512f && f->avx512bw && f->avx512dq && f->avx512vl) return CT_ISA_AVX512;
    if (f->avx2 && f->fma) return CT_ISA_AVX2;
    return CT_ISA_REF;
}

/* ---- BF16 dot products against FP32 FMAs (ct_cpu_bf16_dot_ratio) ---- */

#define CT_X12(op) op(0) op(1) op(2) op(3) op(4) op(5) op(6) op(7) op(8) op(9) op(10) op(11)
#define CT_DP(i) "vdpbf16ps %%zmm12, %%zmm13, %%zmm" #i "\n\t"
#define CT_FM(i) "vfmadd231ps %%zmm12, %%zmm13, %%zmm" #i "\n\t"
#define CT_ZMM_CLOBBERS "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", \
                        "xmm11", "xmm12", "xmm13", "cc"

/* Seconds for n iterations of 12 independent zmm dot products (dp) or FMAs
 * on zeros (no operand is a NaN or subnormal: no slow path). */
/* zeroes the operands, runs the 12 chains of OP n times, leaves the upper
 * state clean (vzeroupper: dirty zmm state slowed the library's SSE code ~5x) */
#define CT_CHAINS(OP, n)                                                                     \
    __asm__ volatile("vpxord %%zmm12, %%zmm12, %%zmm12\n\tvpxord %%zmm13, %%zmm13, %%zmm13\n\t" \
                     "1:\n\t" CT_X12(OP) "dec %0\n\tjnz 1b\n\tvzeroupper"                   \
                     : "+r"(n)                                                                 \
                     :                                                                         \
                     : CT_ZMM_CLOBBERS)
static double time_chains(int dp, uint64_t n) {
    double t0 = ct_now_s();
#if defined(__x86_64__)
    if (dp) CT_CHAINS(CT_DP, n);
    else CT_CHAINS(CT_FM, n);
#else
    (void)dp, (void)n;
#endif
    return ct_now_s() - t0;
}

static double g_dot_ratio;
static pthread_once_t g_dot_once = PTHREAD_ONCE_INIT;

static void dot_ratio_once(void) {
    const ct_cpu_features *f = ct_cpu_probe();
    if (!f->avx512_bf16 || !f->avx512f) return; /* the probe clears both without OS support */
    const uint64_t n = 16384;                   /* ~0.05 ms of FMAs, ~0.05-0.2 ms of dot products */
    double best_dp = 1e30, best_fm = 1e30;
    for (int r = 0; r < 5; r++) { /* alternating: a slow stretch of a shared machine hits both */
        double t = time_chains(1, n);
        if (t > 0 && t < best_dp) best_dp = t;
        t = time_chains(0, n);
        if (t > 0 && t < best_fm) best_fm = t;
    }
    if (best_dp < 1e30 && best_fm < 1e30) g_dot_ratio = (64.0 / best_dp) / (32.0 / best_fm);
}

double ct_cpu_bf16_dot_ratio(void) {
    pthread_once(&g_dot_once, dot_ratio_once);
    return g_dot_ratio;
}
