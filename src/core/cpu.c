/* src/core/cpu.c - the library's one CPU-feature probe (cpuid + XGETBV),
 * run once per process, and the best ISA those features allow. Contexts copy
 * the features (and ask the kernel for AMX permission, context.c); the
 * conversion dispatch (src/kernels/convert.c) reads them without a context. */
#include <cpuid.h>
#include <pthread.h>
#include <string.h>

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

static void probe_once(void) { detect_cpu(&g_cpu); }

const ct_cpu_features *ct_cpu_probe(void) {
    pthread_once(&g_cpu_once, probe_once);
    return &g_cpu;
}

ct_isa ct_cpu_best_isa(const ct_cpu_features *f) {
    if (f->avx512f && f->avx512bw && f->avx512dq && f->avx512vl) return CT_ISA_AVX512;
    if (f->avx2 && f->fma) return CT_ISA_AVX2;
    return CT_ISA_REF;
}
