/* tools/info.c - `ctrain info`: what this CPU supports and which kernels
 * ctrain will run, including whether BF16/FP16 matmul, linear and conv2d
 * read low precision themselves (through which oneDNN ISA and
 * implementation) or compute on FP32 copies. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "ctrain/ctrain.h"

int ct_cli_info(int argc, char **argv) {
    if (argc > 1) {
        int help = !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h");
        fprintf(help ? stdout : stderr,
                "%susage: ctrain info\n\n"
                "Shows what this CPU supports (AVX2, FMA, AVX-512, AMX and whether the OS enables\n"
                "them), the number of compute threads, the kernel ISA ctrain will use (after CT_ISA)\n"
                "and whether oneDNN kernels are on (CT_ONEDNN).\n",
                help ? "" : "ctrain: info takes no arguments\n\n");
        return help ? 0 : 2;
    }
    ct_context *ctx;
    ct_status s = ct_context_create(NULL, &ctx);
    if (s != CT_OK) {
        cli_context_fail(s);
        return 1;
    }
    const ct_cpu_features *f = ct_context_cpu(ctx);
    printf("threads        %d\n", ct_context_num_threads(ctx));
    printf("avx2/fma       %d/%d\n", f->avx2, f->fma);
    printf("avx512 f/bw/dq/vl %d/%d/%d/%d  bf16 %d  fp16 %d\n", f->avx512f, f->avx512bw, f->avx512dq, f->avx512vl,
           f->avx512_bf16, f->avx512_fp16);
    printf("amx tile/bf16  %d/%d (os %d, permitted %d)\n", f->amx_tile, f->amx_bf16, f->os_amx, f->amx_permitted);
    printf("kernel ISA     %s\n", ct_isa_name(ct_context_isa(ctx)));
    printf("oneDNN         %s\n", ct_context_use_onednn(ctx) ? "on" : "off");
    /* the allocator's huge pages and what the kernel's THP mode makes of them */
    char thp[128] = "unknown";
    FILE *tf = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (tf) {
        if (!fgets(thp, sizeof thp, tf)) snprintf(thp, sizeof thp, "unknown");
        fclose(tf);
        thp[strcspn(thp, "\n")] = 0;
    }
    printf("huge pages     %s (kernel THP: %s)\n",
           ct_context_huge_pages(ctx) ? "asked for blocks of 4 MiB and more" : "off (CT_HUGE_PAGES=0)", thp);
    /* mixed precision: do matmul/linear/conv2d read BF16/FP16 themselves? */
    int rc = 0;
    for (int i = 0; i < 2; i++) {
        ct_dtype dt = i ? CT_F16 : CT_BF16;
        int native;
        char how[384];
        if (ct_context_lowp_native(ctx, dt, &native, how, sizeof how) != CT_OK) {
            printf("%-4s matmul/conv ? (%s)\n", ct_dtype_name(dt), ct_context_last_error(ctx));
            rc = 1;
            continue;
        }
        printf("%-4s matmul/conv %s\n", ct_dtype_name(dt), how);
    }
    /* the other kernels of a BF16 / FP16 plan (src/kernels/simd/simd_lowp.h) */
    const char *env = getenv("CT_BF16_NATIVE");
    ct_isa isa = ct_context_isa(ctx);
    for (int i = 0; i < 2; i++) {
        const char *dn = i ? "f16 " : "bf16";
        if (env && !strcmp(env, "0")) printf("%s other ops FP32 copies (CT_BF16_NATIVE=0)\n", dn);
        else if (isa < CT_ISA_AVX2) printf("%s other ops FP32 copies (the reference kernels; CT_ISA=%s)\n", dn, ct_isa_name(isa));
        else
            printf("%s other ops the %s kernels read and write %s themselves (eltwise, batchnorm, layernorm, pooling, "
                   "sum, softmax, cross-entropy, embedding, attention: conversion in registers, FP32 math)\n",
                   dn, ct_isa_name(isa), i ? "FP16" : "BF16");
    }
    /* what MFU is measured against (ctrain doctor, the profiler's trace) */
    ct_profiler *prof;
    if (ct_profiler_create(ctx, NULL, &prof) == CT_OK) {
        const char *src;
        double peak = ct_profiler_peak_flops(prof, &src);
        printf("fp32 peak      %.1f GFLOP/s (%s); MFU measures BF16 ops on AVX512-BF16 against "
               "64 FLOP per cycle and core times the measured dot-product / FMA ratio, on AMX against 1024 (the "
               "trace's peak_flops_by_unit)\n",
               peak * 1e-9, src);
        ct_profiler_free(prof);
    }
    ct_context_free(ctx);
    return rc;
}
